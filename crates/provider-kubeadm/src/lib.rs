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
use kube::api::DynamicObject;
use kube::core::ApiResource;
use kube::runtime::reflector::ObjectRef;
use lariat_api::capi::{Cluster, Machine};
use lariat_controllers::cache::{Caches, IndexKey};

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
    /// A shared cache could not answer (its watch fails).
    #[error(transparent)]
    Cache(lariat_controllers::Error),
    /// An object the schema allows but its struct cannot hold.
    #[error("{0}")]
    Invalid(String),
}

impl From<lariat_controllers::Error> for Error {
    fn from(error: lariat_controllers::Error) -> Error {
        match error {
            lariat_controllers::Error::Kube(e) => Error::Kube(e),
            lariat_controllers::Error::UnknownKind { kind, source } => {
                Error::UnknownKind { kind, source }
            }
            other => Error::Cache(other),
        }
    }
}

/// Shared by every reconcile.
pub struct Context {
    pub client: Client,
    pub caches: Arc<Caches>,
    /// Events for `kubectl describe kubeadmconfig`.
    pub events: lariat_controllers::events::Recorder,
}

impl Context {
    /// A context with caches of its own (tests that call the reconciler directly).
    pub fn new(client: Client) -> Context {
        Context::with_caches(Caches::new(client))
    }

    pub fn with_caches(caches: Arc<Caches>) -> Context {
        let client = caches.client().clone();
        Context {
            events: lariat_controllers::events::Recorder::new(client.clone()),
            client,
            caches,
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

/// Retries failed reconciles with a short delay; the error is logged with the object's key.
/// Runs the KubeadmConfig controller (provider `bootstrap-kubeadm`) until `shutdown` resolves,
/// on the process's shared caches.
///
/// Besides its own kind it watches Clusters (infrastructure readiness and initialization gate
/// every config of the cluster) and Machines (a Machine adopting its config), so waiting configs
/// move as soon as what they wait for changes; the periodic requeues are only a fallback.
pub async fn run_bootstrap(
    caches: Arc<Caches>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let context = Arc::new(Context::with_caches(caches.clone()));
    let config = kubeadm_config_resource();
    let configs = caches.of(&config);
    let shutdown = futures::future::FutureExt::shared(Box::pin(shutdown));
    let cluster_configs = configs.clone();
    let machine_config = config.clone();
    lariat_controllers::controller_on(&configs)
        .watches_shared_stream_with(
            caches.typed::<Cluster>().changes_in(what_configs_read),
            move |cluster: Arc<Cluster>| {
                cluster_configs.indexed_refs(IndexKey::Cluster {
                    namespace: cluster.metadata.namespace.as_deref().unwrap_or_default(),
                    name: cluster.metadata.name.as_deref().unwrap_or_default(),
                })
            },
            (),
        )
        .watches_shared_stream_with(
            caches
                .typed::<Machine>()
                .changes_in(reconcile::reads_of_machine),
            move |machine: Arc<Machine>| {
                let reference = machine.spec.bootstrap.config_ref.as_ref()?;
                let ours = reference.kind.as_deref() == Some("KubeadmConfig")
                    && reference
                        .api_version
                        .as_deref()
                        .is_some_and(|v| v.starts_with(lariat_api::bootstrap::GROUP));
                let name = reference.name.as_deref().filter(|_| ours)?;
                Some(
                    ObjectRef::new_with(name, machine_config.clone())
                        .within(machine.metadata.namespace.as_deref()?),
                )
            },
            (),
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

/// The Cluster changes a KubeadmConfig can act on (see `Cache::changes_in`): its spec,
/// annotations (paused), infrastructure readiness and control plane initialization. The rest
/// (the agent's heartbeat, other conditions) would wake every config of the cluster for nothing.
fn what_configs_read(cluster: &Cluster, hash: &mut std::collections::hash_map::DefaultHasher) {
    use std::hash::Hash;
    let status = cluster.status.as_ref();
    let initialized = status.and_then(|s| s.conditions.as_ref()).is_some_and(|c| {
        c.iter()
            .any(|c| c.is_true(lariat_api::capi::conditions::CONTROL_PLANE_INITIALIZED))
    });
    serde_json::to_string(&cluster.spec)
        .unwrap_or_default()
        .hash(hash);
    cluster.metadata.annotations.hash(hash);
    status.and_then(|s| s.infrastructure_ready).hash(hash);
    initialized.hash(hash);
}

/// Runs the KubeadmControlPlane controller (provider `control-plane-kubeadm`) until `shutdown`
/// resolves, on the process's shared caches.
pub async fn run_control_plane(
    caches: Arc<Caches>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let shutdown = futures::future::FutureExt::shared(Box::pin(shutdown));
    let referred = control_plane::resource();
    lariat_controllers::controller_on(&caches.of(&control_plane::resource()))
        .reconcile_on(lariat_controllers::woken_by_pause_changes_of(
            &caches,
            caches.of(&control_plane::resource()),
        ))
        // Its Cluster's infrastructure becoming ready is what a new control plane waits for.
        .watches_shared_stream_with(
            caches.typed::<Cluster>().changes(),
            move |cluster: Arc<Cluster>| {
                let reference = cluster.spec.control_plane_ref.as_ref()?;
                let name = reference
                    .name
                    .as_deref()
                    .filter(|_| reference.kind.as_deref() == Some(referred.kind.as_str()))?;
                Some(
                    ObjectRef::new_with(name, referred.clone())
                        .within(cluster.metadata.namespace.as_deref()?),
                )
            },
            (),
        )
        .watches_shared_stream_with(
            caches
                .typed::<Machine>()
                .changes_in(control_plane::reads_of_machine),
            lariat_controllers::controller_owner::<DynamicObject, Machine>(
                control_plane::resource(),
            ),
            (),
        )
        .graceful_shutdown_on(shutdown)
        .run(
            control_plane::reconcile,
            lariat_controllers::error_policy,
            Arc::new(control_plane::Context::with_caches(caches)),
        )
        .for_each(lariat_controllers::finished("kubeadmcontrolplane"))
        .await;
}
