//! Cluster API's core controllers for lariat: Cluster, MachineDeployment, MachineSet, Machine
//! and MachineHealthCheck, as level-triggered kube-runtime reconcilers.
//!
//! Each reconciler gets the object and a [`Context`], never the reason it runs, so it must be
//! idempotent. Cluster API's own kinds are read as the typed structs of `lariat_api`; provider
//! objects behind references are read as JSON (`DynamicObject`), as Cluster API reads them
//! unstructured (see [`cache`]). Conditions are the truth; each kind's `phase` is derived from
//! them.

use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::DynamicObject;
use kube::core::ApiResource;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, Resource, ResourceExt};
use lariat_api::capi::{
    Cluster, Machine, MachineDeployment, MachineHealthCheck, MachinePool, MachineSet,
};

use crate::cache::{Cache, Caches, IndexKey};
use crate::kind::Cached;

pub mod agent_install;
pub mod cache;
pub mod cluster;
pub mod conditions;
pub mod events;
pub mod external;
pub mod kind;
pub mod machine;
pub mod machine_deployment;
pub mod machine_health_check;
pub mod machine_pool;
pub mod machine_set;
pub mod metrics;
pub mod object;
pub mod paused;

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
    /// A reference names an object that is not a provider's (one of lariat's own kinds).
    #[error("{0}")]
    InvalidReference(String),
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

    /// A Cluster, from the cache.
    pub async fn cluster(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<Cluster>>, Error> {
        self.caches.typed::<Cluster>().get(namespace, name).await
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

/// Logs `message` under `key` unless it is what was last logged there: for failures a
/// reconcile reports itself (it waits longer than `error_policy`'s retry). `forget_warning`
/// clears the key once things work again.
pub fn warn_once(key: &str, message: &str) {
    let mut logged = LOGGED_ERRORS.lock().expect("lock");
    if logged.get(key).map(String::as_str) != Some(message) {
        tracing::warn!(object = %key, "{message} (logged once until it changes)");
        logged.insert(key.to_owned(), message.to_owned());
    }
}

pub fn forget_warning(key: &str) {
    LOGGED_ERRORS.lock().expect("lock").remove(key);
}

/// Every lariat controller's error policy (providers' too): retries a failed reconcile
/// after 2 s, and logs an error with its object only when it is new for that object.
pub fn error_policy<K: Cached, E: std::error::Error + 'static, C>(
    object: Arc<K>,
    error: &E,
    _ctx: Arc<C>,
) -> Action {
    if is_conflict(error) {
        // A write based on an object a cache held a moment too long: expected with caches
        // (Cluster API requeues these quietly too); the fresh object is a moment away.
        tracing::debug!(%error, "conflict; retrying");
        return Action::requeue(Duration::from_millis(200));
    }
    let (_, kind) = object.type_names();
    let key = error_key(
        &kind,
        object.meta().namespace.as_deref(),
        object.meta().name.as_deref().unwrap_or_default(),
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
pub type ReconcileResult<K, R, Q> = Result<(ObjectRef<K>, Action), controller::Error<R, Q>>;

/// A `for_each` body for a controller's output stream: counts the reconcile, and forgets the
/// object's logged error once a reconcile succeeds. The last change of a deleted object
/// schedules a reconcile that finds nothing: not counted.
pub fn finished<K, R, Q>(
    controller: &'static str,
) -> impl FnMut(ReconcileResult<K, R, Q>) -> std::future::Ready<()>
where
    K: Cached,
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
                &K::kind(&object.dyntype),
                object.namespace.as_deref(),
                &object.name,
            );
            LOGGED_ERRORS.lock().expect("lock").remove(&key);
        }
        std::future::ready(())
    }
}

/// Maps a provider object to the core objects of kind `O` that own it, so a provider's status
/// change wakes its Cluster or Machine at once instead of at the next poll.
fn owners_of<O: Cached<DynamicType = ()>>(object: &DynamicObject) -> Vec<ObjectRef<O>> {
    let namespace = object.metadata.namespace.clone().unwrap_or_default();
    object
        .owner_references()
        .iter()
        .filter(|o| o.kind == O::kind(&()) && o.api_version == O::api_version(&()))
        .map(|o| ObjectRef::new(&o.name).within(&namespace))
        .collect()
}

/// Maps a provider object to the core objects of kind `O` that own it or refer to it (a
/// Machine names its InMemoryMachine before it owns it), from `referrers`, the cache of `O`.
pub fn owners_and_referrers<O: Cached<DynamicType = ()>>(
    referrers: Arc<Cache<O>>,
) -> impl Fn(Arc<DynamicObject>) -> Vec<ObjectRef<O>> + Send + Sync + 'static {
    move |object: Arc<DynamicObject>| {
        let namespace = object.metadata.namespace.clone().unwrap_or_default();
        let mut found = owners_of::<O>(&object);
        let (_, object_kind) = object.type_names();
        found.extend(referrers.indexed_refs(IndexKey::ReferredBy {
            kind: &object_kind,
            namespace: &namespace,
            name: object.metadata.name.as_deref().unwrap_or_default(),
        }));
        found
    }
}

/// A controller on the shared cache of `kind`, woken by its changes.
pub fn controller_on<K: Cached + serde::de::DeserializeOwned>(cache: &Cache<K>) -> Controller<K> {
    Controller::for_shared_stream_with(cache.changes(), cache.store(), cache.dynamic_type())
        .with_config(controller::Config::default().concurrency(CONCURRENCY))
}

/// A controller on the shared cache of `kind` whose reconciles wait `debounce` after a
/// change, so that a burst of changes (a thousand clusters' reports) is one reconcile.
pub fn debounced_controller_on<K: Cached + serde::de::DeserializeOwned>(
    cache: &Cache<K>,
    debounce: std::time::Duration,
) -> Controller<K> {
    controller_on(cache).with_config(
        controller::Config::default()
            .concurrency(CONCURRENCY)
            .debounce(debounce),
    )
}

/// Reconciles of one kind running at once: enough to keep both cores busy on in-process
/// requests, few enough that one busy kind cannot queue thousands of requests ahead of the
/// others (kube-runtime's queue already runs each object at most once at a time).
pub const CONCURRENCY: u16 = 16;

/// The object of kind `O` (described by `owner`) that is the controller of the object that
/// changed.
pub fn controller_owner<O: Cached, S: Resource>(
    owner: O::DynamicType,
) -> impl Fn(Arc<S>) -> Option<ObjectRef<O>> + Send + Sync + 'static {
    move |object: Arc<S>| {
        let kind = O::kind(&owner);
        let reference = object
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true) && o.kind == kind)?;
        Some(
            ObjectRef::new_with(&reference.name, owner.clone())
                .within(object.meta().namespace.as_deref()?),
        )
    }
}

/// The Cluster API object of kind `O` named `name` in the namespace of `object`.
fn in_namespace_of<O: Cached<DynamicType = ()>>(
    object: &impl Resource,
    name: &str,
) -> Option<ObjectRef<O>> {
    Some(ObjectRef::new(name).within(object.meta().namespace.as_deref()?))
}

/// When a set of controllers stops, shared by all of them (each takes a clone).
pub type Shutdown =
    futures::future::Shared<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>>;

/// `signal` as a [`Shutdown`] the controllers of a crate share.
pub fn shared_shutdown(signal: impl std::future::Future<Output = ()> + Send + 'static) -> Shutdown {
    futures::future::FutureExt::shared(Box::pin(signal))
}

/// Runs every core controller until `shutdown` resolves, on `caches`. Clusters and Machines
/// are woken by the objects they reference, of whatever kind (provider kinds are known only
/// once referenced, as Cluster API's controllers add watches for them).
pub async fn run(
    caches: Arc<Caches>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let context = Arc::new(Context::with_caches(caches.clone()));
    let shutdown = futures::future::FutureExt::shared(Box::pin(shutdown));
    let clusters_cache = caches.typed::<Cluster>();
    let machines_cache = caches.typed::<Machine>();
    let sets_cache = caches.typed::<MachineSet>();

    let clusters = controller_on(&clusters_cache)
        .reconcile_on(referenced_changes(
            &caches,
            owners_and_referrers(clusters_cache.clone()),
        ))
        .watches_shared_stream_with(
            // What a Cluster reads of its Machines: whether a control-plane one is Running.
            machines_cache.changes_in(|machine, hash| {
                machine.spec.cluster_name.hash(hash);
                (machine
                    .labels()
                    .contains_key(lariat_api::capi::labels::MACHINE_CONTROL_PLANE)
                    && machine::phase(machine)
                        == Some(lariat_api::capi::machine::MachinePhase::Running))
                .hash(hash);
            }),
            |machine: Arc<Machine>| {
                in_namespace_of::<Cluster>(machine.as_ref(), &machine.spec.cluster_name)
            },
            (),
        )
        .graceful_shutdown_on(shutdown.clone())
        .run(cluster::reconcile, error_policy, context.clone())
        .for_each(finished("cluster"));
    let deployments = controller_on(&caches.typed::<MachineDeployment>())
        .watches_shared_stream_with(
            sets_cache.changes(),
            controller_owner::<MachineDeployment, MachineSet>(()),
            (),
        )
        .reconcile_on(woken_by_pause_changes::<MachineDeployment>(&caches))
        .graceful_shutdown_on(shutdown.clone())
        .run(machine_deployment::reconcile, error_policy, context.clone())
        .for_each(finished("machinedeployment"));
    let sets = controller_on(&sets_cache)
        .watches_shared_stream_with(
            machines_cache.changes_in(machine_set::reads_of_machine),
            controller_owner::<MachineSet, Machine>(()),
            (),
        )
        .reconcile_on(woken_by_pause_changes::<MachineSet>(&caches))
        .graceful_shutdown_on(shutdown.clone())
        .run(machine_set::reconcile, error_policy, context.clone())
        .for_each(finished("machineset"));
    let machines = controller_on(&machines_cache)
        .reconcile_on(referenced_changes(
            &caches,
            owners_and_referrers(machines_cache.clone()),
        ))
        .reconcile_on(machines_woken_by_nodes(&caches, machines_cache.clone()))
        .reconcile_on(woken_by_pause_changes::<Machine>(&caches))
        .graceful_shutdown_on(shutdown.clone())
        .run(machine::reconcile, error_policy, context.clone())
        .for_each(finished("machine"));
    let checks_cache = caches.typed::<MachineHealthCheck>();
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
            move |machine: Arc<Machine>| {
                let namespace = machine.metadata.namespace.as_deref().unwrap_or_default();
                checks_of_cluster(namespace, &machine.spec.cluster_name)
            },
            (),
        )
        .reconcile_on(node_checks)
        .reconcile_on(woken_by_pause_changes::<MachineHealthCheck>(&caches))
        .graceful_shutdown_on(shutdown.clone())
        .run(
            machine_health_check::reconcile,
            error_policy,
            context.clone(),
        )
        .for_each(finished("machinehealthcheck"));
    let pools = controller_on(&caches.typed::<MachinePool>())
        .reconcile_on(referenced_changes(&caches, |object| {
            owners_of::<MachinePool>(&object)
        }))
        .reconcile_on(woken_by_pause_changes::<MachinePool>(&caches))
        .graceful_shutdown_on(shutdown.clone())
        .run(machine_pool::reconcile, error_policy, context.clone())
        .for_each(finished("machinepool"));
    tokio::join!(clusters, deployments, sets, machines, health_checks, pools);
}

/// The objects of kind `K` in each Cluster that is paused or stops being paused: they say so
/// in their `Paused` condition (see [`paused`]), and they returned without waiting for anything
/// while it was (Cluster API's paused contract), so nothing else would wake them. A Cluster's
/// other changes (heartbeats, conditions) wake none of them.
pub fn woken_by_pause_changes<K: Cached<DynamicType = ()>>(
    caches: &Caches,
) -> impl futures::Stream<Item = ObjectRef<K>> + Send + 'static {
    woken_by_pause_changes_of(caches, caches.typed::<K>())
}

/// [`woken_by_pause_changes`] for the objects of one cache (providers' kinds, read as JSON).
pub fn woken_by_pause_changes_of<K: Cached>(
    caches: &Caches,
    objects: Arc<cache::Cache<K>>,
) -> impl futures::Stream<Item = ObjectRef<K>> + Send + 'static {
    // Why each Cluster is paused (None: it is not), so that a new reason wakes them too.
    let mut paused = std::collections::HashMap::<(String, String), Option<String>>::new();
    caches
        .typed::<Cluster>()
        .changes()
        .flat_map(move |cluster| {
            let key = (
                cluster.metadata.namespace.clone().unwrap_or_default(),
                cluster.name_any(),
            );
            let now = paused::why(Some(&cluster), "Cluster", &cluster.metadata)
                .filter(|_| cluster.metadata.deletion_timestamp.is_none());
            let was = paused.insert(key.clone(), now.clone()).flatten();
            let woken = if was != now {
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
fn referenced_changes<K: Cached>(
    caches: &Caches,
    mapper: impl Fn(Arc<DynamicObject>) -> Vec<ObjectRef<K>> + Send + Sync + 'static,
) -> impl futures::Stream<Item = ObjectRef<K>> + Send + 'static {
    caches
        .every_change()
        .flat_map(move |object| futures::stream::iter(mapper(object)))
}

/// The Machines a change in a workload cluster concerns: the one with the Node's providerID,
/// and those of the cluster still waiting for their Node (a Node can join before its
/// Machine has learnt its providerID from the infrastructure). A failing watch wakes them all.
fn machines_woken_by_nodes(
    caches: &Caches,
    machines: Arc<Cache<Machine>>,
) -> impl futures::Stream<Item = ObjectRef<Machine>> + Send + 'static {
    caches.node_changes().flat_map(move |change| {
        let in_cluster = machines.indexed_now(IndexKey::Cluster {
            namespace: &change.namespace,
            name: &change.cluster,
        });
        let woken: Vec<ObjectRef<Machine>> = in_cluster
            .iter()
            .filter(|m| match &change.provider_id {
                None => true,
                Some(id) => {
                    m.spec.provider_id.as_ref() == Some(id)
                        || m.status.as_ref().is_none_or(|s| s.node_ref.is_none())
                }
            })
            .map(|m| ObjectRef::from_obj(m.as_ref()))
            .collect();
        futures::stream::iter(woken)
    })
}
