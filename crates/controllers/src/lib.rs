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
use kube::api::DynamicObject;
use kube::core::ApiResource;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, ResourceExt};

use crate::cache::{Cache, Caches, IndexKey};

pub mod cache;
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
    /// The management API, for writes (reads come from `caches`).
    pub client: Client,
    pub caches: Arc<Caches>,
    /// Events for `kubectl describe`.
    pub events: events::Recorder,
}

impl Context {
    /// A context with caches of its own (tests that call reconcilers directly).
    pub fn new(client: Client) -> Context {
        Context::with_caches(Caches::new(client))
    }

    pub fn with_caches(caches: Arc<Caches>) -> Context {
        let client = caches.client().clone();
        Context {
            events: events::Recorder::new(client.clone()),
            client,
            caches,
        }
    }

    /// The Cluster an object belongs to (`spec.clusterName` in the object's namespace).
    pub async fn cluster_of(
        &self,
        object: &DynamicObject,
    ) -> Result<Option<Arc<DynamicObject>>, Error> {
        let namespace = object.metadata.namespace.as_deref().unwrap_or_default();
        let Some(name) = object::str_at(&object.data, &["spec", "clusterName"]) else {
            return Ok(None);
        };
        self.caches.of(&capi("Cluster")).get(namespace, name).await
    }
}

/// What a reconcile returns when nothing is left to wait for: watches wake it for every
/// change, and it runs again after Cluster API's sync period (10 minutes, with jitter so a
/// fleet created at once does not resync at once) in case something was missed.
pub fn resync() -> Action {
    use rand::Rng;
    let seconds = rand::rng().random_range(540..660);
    Action::requeue(Duration::from_secs(seconds))
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
pub fn error_policy<E: std::error::Error + 'static, C>(
    object: Arc<DynamicObject>,
    error: &E,
    _ctx: Arc<C>,
) -> Action {
    if is_conflict(error) {
        // A write based on an object a cache held a moment too long: expected with caches
        // (Cluster API requeues these quietly too); the fresh object is a moment away.
        tracing::debug!(%error, "conflict; retrying");
        return Action::requeue(Duration::from_millis(200));
    }
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

/// Whether an error is, or was caused by, the API's 409 Conflict.
fn is_conflict(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(kube::Error::Api(status)) = error.downcast_ref::<kube::Error>()
            && status.code == 409
        {
            return true;
        }
        current = error.source();
    }
    false
}

/// What a kube-runtime controller's stream yields for each reconcile.
pub type ReconcileResult<R, Q> =
    Result<(ObjectRef<DynamicObject>, Action), controller::Error<R, Q>>;

/// A `for_each` body for a controller's output stream: counts the reconcile, and forgets the
/// object's logged error once a reconcile succeeds. The last change of a deleted object
/// schedules a reconcile that finds nothing: not counted.
pub fn finished<R, Q>(
    controller: &'static str,
) -> impl FnMut(ReconcileResult<R, Q>) -> std::future::Ready<()>
where
    R: std::error::Error + 'static,
    Q: std::error::Error + 'static,
{
    move |result| {
        if matches!(result, Err(controller::Error::ObjectNotFound(_))) {
            return std::future::ready(());
        }
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
) -> impl Fn(Arc<DynamicObject>) -> Vec<ObjectRef<DynamicObject>> + Clone + Send + Sync + 'static {
    move |object: Arc<DynamicObject>| {
        let namespace = object.metadata.namespace.clone().unwrap_or_default();
        object
            .owner_references()
            .iter()
            .filter(|o| o.kind == kind && o.api_version.starts_with("cluster.x-k8s.io/"))
            .map(|o| ObjectRef::new_with(&o.name, capi(kind)).within(&namespace))
            .collect()
    }
}

/// Maps a provider object to the core objects of `kind` that own it or refer to it (a Machine
/// names its InMemoryMachine before it owns it), from `referrers`, the cache of `kind`.
pub fn owners_and_referrers(
    kind: &'static str,
    referrers: Arc<Cache>,
) -> impl Fn(Arc<DynamicObject>) -> Vec<ObjectRef<DynamicObject>> + Send + Sync + 'static {
    let owners = owners_of(kind);
    move |object: Arc<DynamicObject>| {
        let namespace = object.metadata.namespace.clone().unwrap_or_default();
        let mut found = owners(object.clone());
        let object_kind = object
            .types
            .as_ref()
            .map(|t| t.kind.as_str())
            .unwrap_or_default();
        found.extend(referrers.indexed_refs(IndexKey::ReferredBy {
            kind: object_kind,
            namespace: &namespace,
            name: object.metadata.name.as_deref().unwrap_or_default(),
        }));
        found
    }
}

/// A controller on the shared cache of `kind`, woken by its changes.
pub fn controller_on(cache: &Cache) -> Controller<DynamicObject> {
    Controller::for_shared_stream_with(cache.changes(), cache.store(), cache.resource().clone())
        .with_config(controller::Config::default().concurrency(CONCURRENCY))
}

/// Reconciles of one kind running at once: enough to keep both cores busy on in-process
/// requests, few enough that one busy kind cannot queue thousands of requests ahead of the
/// others (kube-runtime's queue already runs each object at most once at a time).
pub const CONCURRENCY: u16 = 16;

/// The object of `owner`'s kind that is the controller of the object that changed.
pub fn controller_owner(
    owner: ApiResource,
) -> impl Fn(Arc<DynamicObject>) -> Option<ObjectRef<DynamicObject>> + Send + Sync + 'static {
    move |object: Arc<DynamicObject>| {
        let reference = object
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true) && o.kind == owner.kind)?;
        Some(
            ObjectRef::new_with(&reference.name, owner.clone())
                .within(object.metadata.namespace.as_deref()?),
        )
    }
}

/// Runs every core controller until `shutdown` resolves, on `caches`. Clusters and Machines
/// are woken by the objects they reference, of whatever kind (provider kinds are known only
/// once referenced, as Cluster API's controllers add watches for them).
pub async fn run(
    caches: Arc<Caches>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let context = Arc::new(Context::with_caches(caches.clone()));
    let cache = |kind: &str| caches.of(&capi(kind));
    let shutdown = futures::future::FutureExt::shared(Box::pin(shutdown));
    let machines_cache = cache("Machine");

    let clusters = controller_on(&cache("Cluster"))
        .reconcile_on(referenced_changes(
            &caches,
            owners_and_referrers("Cluster", cache("Cluster")),
        ))
        .watches_shared_stream_with(
            machines_cache.changes(),
            |machine: Arc<DynamicObject>| {
                let cluster = object::str_at(&machine.data, &["spec", "clusterName"])?;
                Some(
                    ObjectRef::new_with(cluster, capi("Cluster"))
                        .within(machine.metadata.namespace.as_deref()?),
                )
            },
            capi("Machine"),
        )
        .graceful_shutdown_on(shutdown.clone())
        .run(cluster::reconcile, error_policy, context.clone())
        .for_each(finished("cluster"));
    let deployments = controller_on(&cache("MachineDeployment"))
        .watches_shared_stream_with(
            cache("MachineSet").changes(),
            controller_owner(capi("MachineDeployment")),
            capi("MachineSet"),
        )
        .reconcile_on(woken_by_unpause(&caches, "MachineDeployment"))
        .graceful_shutdown_on(shutdown.clone())
        .run(machine_deployment::reconcile, error_policy, context.clone())
        .for_each(finished("machinedeployment"));
    let sets = controller_on(&cache("MachineSet"))
        .watches_shared_stream_with(
            machines_cache.changes(),
            controller_owner(capi("MachineSet")),
            capi("Machine"),
        )
        .reconcile_on(woken_by_unpause(&caches, "MachineSet"))
        .graceful_shutdown_on(shutdown.clone())
        .run(machine_set::reconcile, error_policy, context.clone())
        .for_each(finished("machineset"));
    let machines = controller_on(&machines_cache)
        .reconcile_on(referenced_changes(
            &caches,
            owners_and_referrers("Machine", machines_cache.clone()),
        ))
        .reconcile_on(machines_woken_by_nodes(&caches, machines_cache.clone()))
        .reconcile_on(woken_by_unpause(&caches, "Machine"))
        .graceful_shutdown_on(shutdown.clone())
        .run(machine::reconcile, error_policy, context.clone())
        .for_each(finished("machine"));
    let checks_cache = cache("MachineHealthCheck");
    let checks_of_cluster = {
        let checks = checks_cache.clone();
        move |namespace: &str, cluster: &str| {
            checks.indexed_refs(IndexKey::Cluster {
                namespace,
                name: cluster,
            })
        }
    };
    let node_checks = {
        let checks_of_cluster = checks_of_cluster.clone();
        caches.node_changes().flat_map(move |change| {
            futures::stream::iter(checks_of_cluster(&change.namespace, &change.cluster))
        })
    };
    let health_checks = controller_on(&checks_cache)
        .watches_shared_stream_with(
            machines_cache.changes(),
            move |machine: Arc<DynamicObject>| {
                let namespace = machine.metadata.namespace.as_deref().unwrap_or_default();
                match object::str_at(&machine.data, &["spec", "clusterName"]) {
                    Some(cluster) => checks_of_cluster(namespace, cluster),
                    None => vec![],
                }
            },
            capi("Machine"),
        )
        .reconcile_on(node_checks)
        .reconcile_on(woken_by_unpause(&caches, "MachineHealthCheck"))
        .graceful_shutdown_on(shutdown.clone())
        .run(
            machine_health_check::reconcile,
            error_policy,
            context.clone(),
        )
        .for_each(finished("machinehealthcheck"));
    tokio::join!(clusters, deployments, sets, machines, health_checks);
}

/// The objects of `kind` in each Cluster that stops being paused: they returned without
/// waiting for anything while it was (Cluster API's paused contract), so nothing else would
/// wake them. A Cluster's other changes (heartbeats, conditions) wake none of them.
fn woken_by_unpause(
    caches: &Caches,
    kind: &'static str,
) -> impl futures::Stream<Item = ObjectRef<DynamicObject>> + Send + 'static {
    let objects = caches.of(&capi(kind));
    let mut paused = std::collections::HashMap::<(String, String), bool>::new();
    caches
        .of(&capi("Cluster"))
        .changes()
        .flat_map(move |cluster| {
            let key = (
                cluster.metadata.namespace.clone().unwrap_or_default(),
                cluster.name_any(),
            );
            let now = cluster::paused(&cluster) && cluster.metadata.deletion_timestamp.is_none();
            let was = paused.insert(key.clone(), now).unwrap_or(false);
            let woken = if was && !now {
                objects.indexed_refs(IndexKey::Cluster {
                    namespace: &key.0,
                    name: &key.1,
                })
            } else {
                vec![]
            };
            futures::stream::iter(woken)
        })
}

/// The objects `mapper` relates to changes of provider objects: every_change carries only
/// the kinds outside the core API group and Cluster API's own.
fn referenced_changes(
    caches: &Caches,
    mapper: impl Fn(Arc<DynamicObject>) -> Vec<ObjectRef<DynamicObject>> + Send + Sync + 'static,
) -> impl futures::Stream<Item = ObjectRef<DynamicObject>> + Send + 'static {
    caches
        .every_change()
        .flat_map(move |object| futures::stream::iter(mapper(object)))
}

/// The Machines a change in a workload cluster concerns: the one with the Node's providerID,
/// and those of the cluster still waiting for their Node (a Node can join before its
/// Machine has learnt its providerID from the infrastructure). A failing watch wakes them all.
fn machines_woken_by_nodes(
    caches: &Caches,
    machines: Arc<Cache>,
) -> impl futures::Stream<Item = ObjectRef<DynamicObject>> + Send + 'static {
    caches.node_changes().flat_map(move |change| {
        let in_cluster = machines.indexed_now(IndexKey::Cluster {
            namespace: &change.namespace,
            name: &change.cluster,
        });
        let woken: Vec<ObjectRef<DynamicObject>> = in_cluster
            .iter()
            .filter(|m| match &change.provider_id {
                None => true,
                Some(id) => {
                    object::str_at(&m.data, &["spec", "providerID"]) == Some(id)
                        || m.data["status"]["nodeRef"].is_null()
                }
            })
            .map(|m| ObjectRef::from_obj_with(m.as_ref(), capi("Machine")))
            .collect();
        futures::stream::iter(woken)
    })
}
