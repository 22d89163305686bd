//! Cluster API's core controllers for lariat: Cluster, MachineDeployment, MachineSet, Machine
//! and MachineHealthCheck, as level-triggered kube-runtime reconcilers.
//!
//! Each reconciler gets the object and a [`Context`], never the reason it runs, so it must be
//! idempotent. Core objects and provider objects alike are read as JSON (`DynamicObject`): a
//! value the schema allows but a Rust enum would not can never stall a controller. Conditions
//! are the truth; each kind's `phase` is derived from them.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;

pub mod cluster;
pub mod conditions;
pub mod events;
pub mod external;
pub mod machine;
pub mod machine_deployment;
pub mod machine_health_check;
pub mod machine_set;
pub mod metrics;
pub mod object;

/// What a reconcile failed with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("API request failed: {0}")]
    Kube(#[from] kube::Error),
    #[error("{kind} is not served: {source}")]
    UnknownKind {
        kind: String,
        #[source]
        source: kube::Error,
    },
    #[error("{0}")]
    Invalid(String),
}

/// Shared by every reconcile.
pub struct Context {
    pub client: Client,
    /// Events for `kubectl describe`.
    pub events: events::Recorder,
    /// Clients of workload clusters by `namespace/cluster`: connecting (TLS) on every
    /// reconcile of every Machine would cost more than the reconcile itself.
    workload: std::sync::Mutex<std::collections::HashMap<String, Client>>,
}

impl Context {
    pub fn new(client: Client) -> Context {
        Context {
            events: events::Recorder::new(client.clone()),
            client,
            workload: Default::default(),
        }
    }

    /// A client of the workload cluster, reused across reconciles.
    pub async fn workload_client(&self, namespace: &str, cluster: &str) -> Option<Client> {
        let key = format!("{namespace}/{cluster}");
        if let Some(client) = self.workload.lock().expect("lock").get(&key) {
            return Some(client.clone());
        }
        let client = machine::workload_client(&self.client, namespace, cluster).await?;
        self.workload
            .lock()
            .expect("lock")
            .insert(key, client.clone());
        Some(client)
    }

    /// The Cluster an object belongs to (`spec.clusterName` in the object's namespace).
    pub async fn cluster_of(&self, object: &DynamicObject) -> Result<Option<DynamicObject>, Error> {
        let namespace = object.metadata.namespace.as_deref().unwrap_or_default();
        let Some(name) = object::str_at(&object.data, &["spec", "clusterName"]) else {
            return Ok(None);
        };
        let clusters: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &capi("Cluster"));
        Ok(clusters.get_opt(name).await?)
    }

    pub fn forget_workload_client(&self, namespace: &str, cluster: &str) {
        self.workload
            .lock()
            .expect("lock")
            .remove(&format!("{namespace}/{cluster}"));
    }
}

/// A Cluster API core kind (`cluster.x-k8s.io/v1beta1`), for dynamic APIs.
pub fn capi(kind: &str) -> ApiResource {
    let plural = format!("{}s", kind.to_lowercase());
    ApiResource {
        group: "cluster.x-k8s.io".into(),
        version: "v1beta1".into(),
        api_version: "cluster.x-k8s.io/v1beta1".into(),
        kind: kind.into(),
        plural,
    }
}

/// The error last logged for each object (`kind/namespace/name`): each distinct reconcile
/// error is logged once, not at every retry (`/metrics` counts those), and again when it
/// changes or comes back after a success.
static LOGGED_ERRORS: std::sync::LazyLock<
    std::sync::Mutex<std::collections::HashMap<String, String>>,
> = std::sync::LazyLock::new(Default::default);

fn error_key(kind: &str, namespace: Option<&str>, name: &str) -> String {
    format!("{kind}/{}/{name}", namespace.unwrap_or_default())
}

/// Every lariat controller's error policy (providers' too): retries a failed reconcile
/// after 2 s, and logs an error with its object only when it is new for that object.
pub fn error_policy<E: std::fmt::Display, C>(
    object: Arc<DynamicObject>,
    error: &E,
    _ctx: Arc<C>,
) -> Action {
    let kind = object
        .types
        .as_ref()
        .map(|t| t.kind.clone())
        .unwrap_or_default();
    let key = error_key(
        &kind,
        object.metadata.namespace.as_deref(),
        object.metadata.name.as_deref().unwrap_or_default(),
    );
    let text = error.to_string();
    let mut logged = LOGGED_ERRORS.lock().expect("lock");
    if logged.get(&key) != Some(&text) {
        tracing::warn!(object = %key, %error, "reconcile failed; retrying (logged once until it changes)");
        if logged.len() > 10_000 {
            logged.clear();
        }
        logged.insert(key, text);
    }
    Action::requeue(Duration::from_secs(2))
}

/// A `for_each` body for a controller's output stream: counts the reconcile, and forgets the
/// object's logged error once a reconcile succeeds.
pub fn finished<E>(
    controller: &'static str,
) -> impl FnMut(
    Result<(kube::runtime::reflector::ObjectRef<DynamicObject>, Action), E>,
) -> std::future::Ready<()> {
    move |result| {
        metrics::record(controller, &result);
        if let Ok((object, _)) = &result {
            let key = error_key(
                &object.dyntype.kind,
                object.namespace.as_deref(),
                &object.name,
            );
            LOGGED_ERRORS.lock().expect("lock").remove(&key);
        }
        std::future::ready(())
    }
}

/// Maps a provider object to the core objects that own it (`kind`), so a provider's status
/// change wakes its Cluster or Machine at once instead of at the next poll.
fn owners_of(
    kind: &'static str,
) -> impl Fn(DynamicObject) -> Vec<kube::runtime::reflector::ObjectRef<DynamicObject>> + Clone {
    move |object: DynamicObject| {
        let namespace = object.metadata.namespace.clone().unwrap_or_default();
        object
            .metadata
            .owner_references
            .unwrap_or_default()
            .into_iter()
            .filter(|o| o.kind == kind && o.api_version.starts_with("cluster.x-k8s.io/"))
            .map(|o| {
                kube::runtime::reflector::ObjectRef::new_with(&o.name, capi(kind))
                    .within(&namespace)
            })
            .collect()
    }
}

/// Runs every core controller until `shutdown` resolves. `provider_kinds` are the provider
/// kinds this server serves; core watches them to react to their status without polling.
pub async fn run(
    client: Client,
    provider_kinds: Vec<ApiResource>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let context = Arc::new(Context::new(client.clone()));
    let all = |kind: &str| Api::<DynamicObject>::all_with(client.clone(), &capi(kind));
    let config = watcher::Config::default;
    let shutdown = futures::future::FutureExt::shared(Box::pin(shutdown));

    let clusters = provider_kinds
        .iter()
        .fold(
            Controller::new_with(all("Cluster"), config(), capi("Cluster")),
            |controller, kind| {
                controller.watches_with(
                    Api::<DynamicObject>::all_with(client.clone(), kind),
                    kind.clone(),
                    config(),
                    owners_of("Cluster"),
                )
            },
        )
        .watches_with(
            all("Machine"),
            capi("Machine"),
            config(),
            |machine: DynamicObject| {
                let cluster = object::str_at(&machine.data, &["spec", "clusterName"])?.to_string();
                Some(
                    kube::runtime::reflector::ObjectRef::new_with(&cluster, capi("Cluster"))
                        .within(machine.metadata.namespace.as_deref()?),
                )
            },
        )
        .graceful_shutdown_on(shutdown.clone())
        .run(cluster::reconcile, error_policy, context.clone())
        .for_each(finished("cluster"));
    let deployments = Controller::new_with(
        all("MachineDeployment"),
        config(),
        capi("MachineDeployment"),
    )
    .owns_with(all("MachineSet"), capi("MachineSet"), config())
    .graceful_shutdown_on(shutdown.clone())
    .run(machine_deployment::reconcile, error_policy, context.clone())
    .for_each(finished("machinedeployment"));
    let sets = Controller::new_with(all("MachineSet"), config(), capi("MachineSet"))
        .owns_with(all("Machine"), capi("Machine"), config())
        .graceful_shutdown_on(shutdown.clone())
        .run(machine_set::reconcile, error_policy, context.clone())
        .for_each(finished("machineset"));
    let dynamic = |resource: &ApiResource| Api::<DynamicObject>::all_with(client.clone(), resource);
    let machines = provider_kinds
        .iter()
        .fold(
            Controller::new_with(all("Machine"), config(), capi("Machine")),
            |controller, kind| {
                controller.watches_with(dynamic(kind), kind.clone(), config(), owners_of("Machine"))
            },
        )
        .graceful_shutdown_on(shutdown.clone())
        .run(machine::reconcile, error_policy, context.clone())
        .for_each(finished("machine"));
    let health_checks = Controller::new_with(
        all("MachineHealthCheck"),
        config(),
        capi("MachineHealthCheck"),
    )
    .graceful_shutdown_on(shutdown.clone())
    .run(
        machine_health_check::reconcile,
        error_policy,
        context.clone(),
    )
    .for_each(finished("machinehealthcheck"));
    tokio::join!(clusters, deployments, sets, machines, health_checks);
}
