//! lariat's kubeadm bootstrap provider: turns each KubeadmConfig owned by a Machine into
//! `#cloud-config` bootstrap data that runs `kubeadm init` or `kubeadm join`
//! (docs/contracts/bootstrap.md).
//!
//! The reconciler follows Cluster API's kubeadm bootstrap provider: it waits for the Machine and
//! its Cluster's infrastructure, makes sure the cluster certificates exist, elects exactly one
//! control-plane Machine to run `kubeadm init` (guarded by the `<cluster>-lock` ConfigMap), lets
//! every other Machine join once the control plane is initialized, and writes the data Secret
//! before it sets `status.ready`. Objects are read as JSON (`DynamicObject`), as core's
//! controllers read them, so a value the schema accepts can never stall the provider.
//!
//! Rendering ([`kubeadm`], [`cloudinit`], [`yaml`]) is pure and unit-tested; [`reconcile`] holds
//! the I/O.

use std::sync::Arc;

use futures::StreamExt;
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

pub mod certs;
pub mod cloudinit;
pub mod conditions;
pub mod control_plane;
pub mod kubeadm;
pub mod lock;
pub mod object;
pub mod reconcile;
pub mod secrets;
pub mod token;
pub mod yaml;

/// The provider's name, as `lariat init` and `managedFields` know it.
pub const PROVIDER_NAME: &str = "bootstrap-kubeadm";

/// What a reconcile failed with. Failures the user can fix (a missing Secret, a corrupt
/// certificate) become conditions instead; these are the ones worth a retry.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("API request failed: {0}")]
    Kube(#[from] kube::Error),
    #[error("cannot ensure the cluster certificates: {0}")]
    Certificates(#[from] certs::CertError),
    #[error("{kind} is not served: {source}")]
    UnknownKind {
        kind: String,
        #[source]
        source: kube::Error,
    },
}

/// Shared by every reconcile.
pub struct Context {
    pub client: Client,
    /// Events for `kubectl describe kubeadmconfig`.
    pub events: lariat_controllers::events::Recorder,
}

impl Context {
    pub fn new(client: Client) -> Context {
        Context {
            events: lariat_controllers::events::Recorder::new(client.clone()),
            client,
        }
    }
}

/// The KubeadmConfig kind, as served from `lariat_api::builtin_crds()`.
pub fn kubeadm_config_resource() -> ApiResource {
    ApiResource {
        group: lariat_api::bootstrap::GROUP.into(),
        version: lariat_api::bootstrap::VERSION.into(),
        api_version: lariat_api::bootstrap::API_VERSION.into(),
        kind: "KubeadmConfig".into(),
        plural: "kubeadmconfigs".into(),
    }
}

pub(crate) use lariat_controllers::capi;

/// Retries failed reconciles with a short delay; the error is logged with the object's key.
/// Runs the KubeadmConfig controller (provider `bootstrap-kubeadm`) until `shutdown` resolves.
///
/// Besides its own kind it watches Clusters (infrastructure readiness and initialization gate
/// every config of the cluster) and Machines (a Machine adopting its config), so waiting configs
/// move as soon as what they wait for changes; the periodic requeues are only a fallback.
pub async fn run_bootstrap(
    client: Client,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let context = Arc::new(Context::new(client.clone()));
    let config = kubeadm_config_resource();
    let all = |resource: &ApiResource| Api::<DynamicObject>::all_with(client.clone(), resource);
    let shutdown = futures::future::FutureExt::shared(Box::pin(shutdown));

    let controller = Controller::new_with(all(&config), watcher::Config::default(), config.clone());
    let store = controller.store();
    let cluster_config = config.clone();
    let machine_config = config.clone();
    controller
        .watches_with(
            all(&capi("Cluster")),
            capi("Cluster"),
            watcher::Config::default(),
            move |cluster: DynamicObject| {
                let namespace = cluster.metadata.namespace.clone();
                let name = cluster.metadata.name.clone();
                let resource = cluster_config.clone();
                store
                    .state()
                    .into_iter()
                    .filter(|c| {
                        c.metadata.namespace == namespace
                            && c.metadata
                                .labels
                                .as_ref()
                                .and_then(|l| l.get(lariat_api::capi::labels::CLUSTER_NAME))
                                == name.as_ref()
                    })
                    .map(|c| ObjectRef::from_obj_with(c.as_ref(), resource.clone()))
                    .collect::<Vec<_>>()
            },
        )
        .watches_with(
            all(&capi("Machine")),
            capi("Machine"),
            watcher::Config::default(),
            move |machine: DynamicObject| {
                let reference = &machine.data["spec"]["bootstrap"]["configRef"];
                let ours = reference["kind"] == "KubeadmConfig"
                    && reference["apiVersion"]
                        .as_str()
                        .is_some_and(|v| v.starts_with(lariat_api::bootstrap::GROUP));
                let name = reference["name"].as_str().filter(|_| ours);
                name.zip(machine.metadata.namespace.as_deref())
                    .map(|(name, namespace)| {
                        ObjectRef::new_with(name, machine_config.clone()).within(namespace)
                    })
            },
        )
        .graceful_shutdown_on(shutdown.clone())
        .run(
            reconcile::reconcile,
            lariat_controllers::error_policy,
            context,
        )
        .for_each(lariat_controllers::finished("kubeadmconfig"))
        .await;
}

/// Runs the KubeadmControlPlane controller (provider `control-plane-kubeadm`) until `shutdown`
/// resolves.
pub async fn run_control_plane(
    client: Client,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let all = |resource: &ApiResource| Api::<DynamicObject>::all_with(client.clone(), resource);
    let shutdown = futures::future::FutureExt::shared(Box::pin(shutdown));
    kube::runtime::Controller::new_with(
        all(&control_plane::resource()),
        watcher::Config::default(),
        control_plane::resource(),
    )
    .owns_with(
        all(&capi("Machine")),
        capi("Machine"),
        watcher::Config::default(),
    )
    .graceful_shutdown_on(shutdown)
    .run(
        control_plane::reconcile,
        lariat_controllers::error_policy,
        Arc::new(control_plane::Context::new(client.clone())),
    )
    .for_each(lariat_controllers::finished("kubeadmcontrolplane"))
    .await;
}
