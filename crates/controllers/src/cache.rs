//! Shared caches, as controller-runtime's informers: each kind a controller reads is watched
//! once per process and kept in memory. Reconcilers read from here, relate objects through
//! indexes instead of list calls, write through the API, and are woken by the changes.
//!
//! A kind's cache starts on its first use (a reference may name any kind a provider serves),
//! and a read waits until the cache holds the whole first list, so "not in the cache" always
//! means "does not exist", never "not listed yet". Workload clusters' Nodes get a cache per
//! cluster, through the `<cluster>-kubeconfig` Secret (itself read from the Secret cache).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use tokio::sync::{broadcast, watch};

use crate::Error;
use crate::object::str_at;

/// How many changes a subscriber may fall behind before it is handed the whole cache again.
const CHANGES_BUFFER: usize = 16_384;

/// How many changes of all kinds together a subscriber may fall behind.
const EVERY_CHANGE_BUFFER: usize = 65_536;

/// The first wait before a failed watch lists again, doubled up to the second.
const WATCH_RETRY_FIRST: Duration = Duration::from_millis(500);
const WATCH_RETRY_MAX: Duration = Duration::from_secs(30);

/// A workload cluster's Node cache feeds one forwarder: a short buffer is enough.
const NODE_CHANGES_BUFFER: usize = 1024;

/// How long a read waits for a cache's first list before it fails (the reconcile is retried).
const SYNC_TIMEOUT: Duration = Duration::from_secs(30);

/// How long making a workload cluster's Node cache waits for its first list.
const WORKLOAD_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// What an index groups objects by.
#[derive(Clone, Copy, Debug)]
pub enum IndexKey<'a> {
    /// Objects with an ownerReference to this uid.
    Owner(&'a str),
    /// Objects of a Cluster API cluster in a namespace (the `cluster.x-k8s.io/cluster-name`
    /// label, or `spec.clusterName`).
    Cluster { namespace: &'a str, name: &'a str },
    /// Objects whose `spec.providerID` is this (Machines, infrastructure machines, Nodes).
    ProviderId(&'a str),
    /// Objects whose `spec.infrastructureRef`, `spec.controlPlaneRef` or
    /// `spec.bootstrap.configRef` names this object: who to wake when it changes, even before
    /// it carries their ownerReference.
    ReferredBy {
        kind: &'a str,
        namespace: &'a str,
        name: &'a str,
    },
}

impl IndexKey<'_> {
    fn render(&self) -> String {
        match self {
            IndexKey::Owner(uid) => format!("owner\0{uid}"),
            IndexKey::Cluster { namespace, name } => format!("cluster\0{namespace}\0{name}"),
            IndexKey::ProviderId(id) => format!("providerID\0{id}"),
            IndexKey::ReferredBy {
                kind,
                namespace,
                name,
            } => format!("ref\0{kind}\0{namespace}\0{name}"),
        }
    }
}

fn index_keys(object: &DynamicObject) -> Vec<String> {
    let mut keys: Vec<String> = object
        .owner_references()
        .iter()
        .map(|o| IndexKey::Owner(&o.uid).render())
        .collect();
    let namespace = object.metadata.namespace.as_deref().unwrap_or_default();
    let cluster = object
        .labels()
        .get(lariat_api::capi::labels::CLUSTER_NAME)
        .map(String::as_str)
        .or_else(|| str_at(&object.data, &["spec", "clusterName"]));
    if let Some(name) = cluster {
        keys.push(IndexKey::Cluster { namespace, name }.render());
    }
    if let Some(id) = str_at(&object.data, &["spec", "providerID"]) {
        keys.push(IndexKey::ProviderId(id).render());
    }
    let spec = &object.data["spec"];
    for reference in [
        &spec["infrastructureRef"],
        &spec["controlPlaneRef"],
        &spec["bootstrap"]["configRef"],
    ] {
        if let (Some(kind), Some(name)) = (reference["kind"].as_str(), reference["name"].as_str()) {
            keys.push(
                IndexKey::ReferredBy {
                    kind,
                    namespace,
                    name,
                }
                .render(),
            );
        }
    }
    keys
}

#[derive(Default)]
struct Index {
    /// Index key to the objects under it.
    members: HashMap<String, HashSet<ObjectRef<DynamicObject>>>,
    /// Each object's keys, to take it out again when it changes or goes.
    keys: HashMap<ObjectRef<DynamicObject>, Vec<String>>,
}

impl Index {
    fn remove(&mut self, object: &ObjectRef<DynamicObject>) {
        for key in self.keys.remove(object).unwrap_or_default() {
            if let Some(members) = self.members.get_mut(&key) {
                members.remove(object);
                if members.is_empty() {
                    self.members.remove(&key);
                }
            }
        }
    }

    fn insert(&mut self, reference: ObjectRef<DynamicObject>, object: &DynamicObject) {
        self.remove(&reference);
        let keys = index_keys(object);
        for key in &keys {
            self.members
                .entry(key.clone())
                .or_default()
                .insert(reference.clone());
        }
        self.keys.insert(reference, keys);
    }
}

/// One kind's cache: the objects, their indexes, and a feed of what changed.
pub struct Cache {
    resource: ApiResource,
    store: Store<DynamicObject>,
    index: Arc<RwLock<Index>>,
    changes: broadcast::Sender<Arc<DynamicObject>>,
    /// True once the first list is in, for good: reads then answer from what is held, as an
    /// informer's do, rather than wait.
    synced: watch::Receiver<bool>,
    /// True while the watch runs: false from a failure until the next complete list.
    healthy: watch::Receiver<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Cache {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Cache {
    /// Starts watching `api` (of `resource`, objects matching `selector`) into a new cache
    /// whose change feed holds `buffer` changes. `on_error` hears each failure of the watch.
    fn start(
        api: Api<DynamicObject>,
        resource: ApiResource,
        selector: &str,
        buffer: usize,
        every_change: Option<broadcast::Sender<Arc<DynamicObject>>>,
        on_error: impl Fn(&watcher::Error) + Send + 'static,
    ) -> Cache {
        let mut writer = Writer::new(resource.clone());
        let store = writer.as_reader();
        let mut config = watcher::Config::default();
        if !selector.is_empty() {
            config = config.labels(selector);
        }
        let index: Arc<RwLock<Index>> = Default::default();
        let (changes, _) = broadcast::channel(buffer);
        let (set_synced, synced) = watch::channel(false);
        let (set_healthy, healthy) = watch::channel(false);
        let publish = {
            let changes = changes.clone();
            move |object: Arc<DynamicObject>| {
                if let Some(every_change) = &every_change {
                    let _ = every_change.send(object.clone());
                }
                let _ = changes.send(object);
            }
        };
        let task = {
            let (store, index, resource) = (store.clone(), index.clone(), resource.clone());
            tokio::spawn(async move {
                let mut last_error = String::new();
                let mut backoff = WATCH_RETRY_FIRST;
                // One watch (list, then watch) per turn. A failure ends the turn: the next one
                // lists afresh, so the cache is known complete again when its list is in
                // (kube-runtime's watcher would resume without saying when it has).
                loop {
                    let events = watcher(api.clone(), config.clone());
                    futures::pin_mut!(events);
                    while let Some(event) = events.next().await {
                        let event = match event {
                            Ok(event) => event,
                            Err(error) => {
                                set_healthy.send_replace(false);
                                // Logged once until it changes or the watch recovers.
                                if error.to_string() != last_error {
                                    last_error = error.to_string();
                                    tracing::warn!(kind = %resource.kind, %error, "watch failed; listing again");
                                }
                                on_error(&error);
                                break;
                            }
                        };
                        writer.apply_watcher_event(&event);
                        match event {
                            watcher::Event::Apply(object) => {
                                let reference = ObjectRef::from_obj_with(&object, resource.clone());
                                if let Some(stored) = store.get(&reference) {
                                    index.write().expect("lock").insert(reference, &stored);
                                    publish(stored);
                                }
                            }
                            watcher::Event::Delete(object) => {
                                let reference = ObjectRef::from_obj_with(&object, resource.clone());
                                index.write().expect("lock").remove(&reference);
                                publish(Arc::new(object));
                            }
                            watcher::Event::InitDone => {
                                let all = store.state();
                                let mut rebuilt = Index::default();
                                for object in &all {
                                    rebuilt.insert(
                                        ObjectRef::from_obj_with(object.as_ref(), resource.clone()),
                                        object,
                                    );
                                }
                                *index.write().expect("lock") = rebuilt;
                                last_error.clear();
                                backoff = WATCH_RETRY_FIRST;
                                set_synced.send_replace(true);
                                set_healthy.send_replace(true);
                                for object in all {
                                    publish(object);
                                }
                            }
                            watcher::Event::Init | watcher::Event::InitApply(_) => {}
                        }
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(WATCH_RETRY_MAX);
                }
            })
        };
        Cache {
            resource,
            store,
            index,
            changes,
            synced,
            healthy,
            task,
        }
    }

    pub fn resource(&self) -> &ApiResource {
        &self.resource
    }

    /// The store, for a kube-runtime `Controller` built on this cache.
    pub fn store(&self) -> Store<DynamicObject> {
        self.store.clone()
    }

    /// Whether the cache holds a complete, current list (false before the first list and
    /// while the watch fails).
    pub fn is_healthy(&self) -> bool {
        *self.healthy.borrow()
    }

    /// Waits until the first list is in.
    pub async fn synced(&self) -> Result<(), Error> {
        let mut synced = self.synced.clone();
        match tokio::time::timeout(SYNC_TIMEOUT, synced.wait_for(|s| *s)).await {
            Ok(Ok(_)) => Ok(()),
            _ => Err(Error::Invalid(format!(
                "the cache of {} did not fill within {} s: its watch fails",
                self.resource.plural,
                SYNC_TIMEOUT.as_secs()
            ))),
        }
    }

    /// An object by namespace and name.
    pub async fn get(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<DynamicObject>>, Error> {
        self.synced().await?;
        Ok(self.get_now(namespace, name))
    }

    /// An object, from what the cache holds now, synced or not.
    pub fn get_now(&self, namespace: &str, name: &str) -> Option<Arc<DynamicObject>> {
        let mut reference = ObjectRef::new_with(name, self.resource.clone());
        if !namespace.is_empty() {
            reference = reference.within(namespace);
        }
        self.store.get(&reference)
    }

    /// The objects under an index key, sorted by namespace and name.
    pub async fn indexed(&self, key: IndexKey<'_>) -> Result<Vec<Arc<DynamicObject>>, Error> {
        self.synced().await?;
        Ok(self.indexed_now(key))
    }

    pub fn indexed_now(&self, key: IndexKey<'_>) -> Vec<Arc<DynamicObject>> {
        let references: Vec<ObjectRef<DynamicObject>> = self
            .index
            .read()
            .expect("lock")
            .members
            .get(&key.render())
            .map(|members| members.iter().cloned().collect())
            .unwrap_or_default();
        let mut objects: Vec<Arc<DynamicObject>> = references
            .iter()
            .filter_map(|reference| self.store.get(reference))
            .collect();
        objects.sort_by(|a, b| {
            (a.metadata.namespace.as_deref(), a.metadata.name.as_deref())
                .cmp(&(b.metadata.namespace.as_deref(), b.metadata.name.as_deref()))
        });
        objects
    }

    /// References to the objects under an index key, to wake their controller with.
    pub fn indexed_refs(&self, key: IndexKey<'_>) -> Vec<ObjectRef<DynamicObject>> {
        self.indexed_now(key)
            .iter()
            .map(|o| ObjectRef::from_obj_with(o.as_ref(), self.resource.clone()))
            .collect()
    }

    /// Waits until the cache shows the writes a reconcile just made: each of `created` present,
    /// each of `deleted` gone or being deleted. Without this, the reconcile that the first
    /// creation wakes would count the Machines before the rest arrive and create them again
    /// (Cluster API's "expectations").
    pub async fn observed(
        &self,
        namespace: &str,
        created: &[String],
        deleted: &[String],
    ) -> Result<(), Error> {
        let what = format!(
            "the cache of {} to show this reconcile's writes",
            self.resource.plural
        );
        until(&what, || {
            created.iter().all(|n| self.get_now(namespace, n).is_some())
                && deleted.iter().all(|n| {
                    self.get_now(namespace, n)
                        .is_none_or(|o| o.metadata.deletion_timestamp.is_some())
                })
        })
        .await
    }

    /// Every object, then every change (an object as it is now, or as it was when deleted).
    /// A subscriber that falls behind is handed every object again, as an informer's resync.
    pub fn changes(&self) -> impl Stream<Item = Arc<DynamicObject>> + Send + use<> {
        let receiver = self.changes.subscribe();
        let store = self.store.clone();
        let synced = self.synced.clone();
        futures::stream::unfold(
            (
                receiver,
                store,
                Some(synced),
                Vec::<Arc<DynamicObject>>::new(),
            ),
            |(mut receiver, store, mut first, mut pending)| async move {
                if let Some(synced) = first.take() {
                    // Not synced yet: the first list arrives as changes anyway.
                    if *synced.borrow() {
                        pending = store.state();
                    }
                }
                loop {
                    if let Some(object) = pending.pop() {
                        return Some((object, (receiver, store, None, pending)));
                    }
                    match receiver.recv().await {
                        Ok(object) => return Some((object, (receiver, store, None, pending))),
                        Err(broadcast::error::RecvError::Lagged(_)) => pending = store.state(),
                        Err(broadcast::error::RecvError::Closed) => return None,
                    }
                }
            },
        )
    }
}

/// A workload cluster's Node cache, with the kubeconfig Secret it was made from.
struct Workload {
    cache: Arc<Cache>,
    secret_version: String,
}

type WorkloadSlot = Arc<tokio::sync::Mutex<Option<Workload>>>;

/// A change seen in a workload cluster: a Node (by providerID), or, when the cluster's watch
/// fails, every Machine of the cluster.
#[derive(Clone, Debug)]
pub struct NodeChange {
    pub namespace: String,
    pub cluster: String,
    pub provider_id: Option<String>,
}

/// Every cache of this process.
pub struct Caches {
    client: Client,
    /// By apiVersion, kind and label selector (empty: every object of the kind).
    kinds: Mutex<HashMap<(String, String, String), Arc<Cache>>>,
    /// Every change of every management cache, for controllers woken by whatever kind their
    /// objects reference (Cluster API's dynamic watches on referenced provider kinds).
    every_change: broadcast::Sender<Arc<DynamicObject>>,
    /// Each workload cluster's Node cache, behind a lock of its own: the Machines of a new
    /// cluster asking at once wait for one cache rather than each making one.
    workloads: Mutex<HashMap<(String, String), WorkloadSlot>>,
    node_changes: broadcast::Sender<NodeChange>,
}

impl Caches {
    pub fn new(client: Client) -> Arc<Caches> {
        Arc::new(Caches {
            client,
            kinds: Default::default(),
            every_change: broadcast::channel(EVERY_CHANGE_BUFFER).0,
            workloads: Default::default(),
            node_changes: broadcast::channel(CHANGES_BUFFER).0,
        })
    }

    /// The management API's client, for writes.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The cache of a kind, started on first use.
    pub fn of(&self, resource: &ApiResource) -> Arc<Cache> {
        self.of_selected(resource, "")
    }

    /// The cache of the objects of a kind that match a label selector, started on first use.
    fn of_selected(&self, resource: &ApiResource, selector: &str) -> Arc<Cache> {
        let key = (
            resource.api_version.clone(),
            resource.kind.clone(),
            selector.to_string(),
        );
        let mut kinds = self.kinds.lock().expect("lock");
        kinds
            .entry(key)
            .or_insert_with(|| {
                let api = Api::all_with(self.client.clone(), resource);
                // Only what Clusters and Machines may reference goes to every_change: not the
                // core API group's kinds (Secrets), nor Cluster API's own.
                let referable = !resource.group.is_empty() && resource.group != "cluster.x-k8s.io";
                Arc::new(Cache::start(
                    api,
                    resource.clone(),
                    selector,
                    CHANGES_BUFFER,
                    referable.then(|| self.every_change.clone()),
                    |_| {},
                ))
            })
            .clone()
    }

    /// The cache of the kind a reference names (found through discovery).
    pub async fn of_kind(&self, api_version: &str, kind: &str) -> Result<Arc<Cache>, Error> {
        if let Some(cache) = self.kinds.lock().expect("lock").get(&(
            api_version.to_string(),
            kind.to_string(),
            String::new(),
        )) {
            return Ok(cache.clone());
        }
        let resource = crate::object::resource_for(&self.client, api_version, kind).await?;
        Ok(self.of(&resource))
    }

    /// The management plane's Secrets of Cluster API clusters: those labelled
    /// `cluster.x-k8s.io/cluster-name` (kubeconfigs, certificates, bootstrap data), as Cluster
    /// API's controllers cache them. Every other Secret stays out of this process's memory.
    pub fn secrets(&self) -> Arc<Cache> {
        self.of_selected(
            &ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&()),
            lariat_api::capi::labels::CLUSTER_NAME,
        )
    }

    /// Every change of every kind cached outside the core API group and Cluster API's own
    /// group, now and from now on (a cache started later joins in). A subscriber that falls
    /// behind misses changes; the periodic resync covers them.
    pub fn every_change(&self) -> impl Stream<Item = Arc<DynamicObject>> + Send + 'static {
        tokio_stream::wrappers::BroadcastStream::new(self.every_change.subscribe())
            .filter_map(|change| std::future::ready(change.ok()))
    }

    /// Changes of workload clusters' Nodes, for the controllers they concern.
    pub fn node_changes(&self) -> impl Stream<Item = NodeChange> + Send + 'static {
        tokio_stream::wrappers::BroadcastStream::new(self.node_changes.subscribe())
            .filter_map(|change| std::future::ready(change.ok()))
    }

    /// The Node cache of a workload cluster, made from its `<cluster>-kubeconfig` Secret and
    /// made again when that Secret changes; `None` while there is no such Secret or it holds
    /// no usable kubeconfig, and for a Cluster that does not exist or is being deleted.
    pub async fn nodes(&self, namespace: &str, cluster: &str) -> Result<Option<Arc<Cache>>, Error> {
        // A Cluster that is gone or going gets no new watch (one made now would outlive it).
        let alive = self
            .of(&crate::capi("Cluster"))
            .get(namespace, cluster)
            .await?
            .is_some_and(|c| c.metadata.deletion_timestamp.is_none());
        if !alive {
            self.forget_workload(namespace, cluster);
            return Ok(None);
        }
        let Some(secret) = self
            .secrets()
            .get(namespace, &format!("{cluster}-kubeconfig"))
            .await?
        else {
            self.forget_workload(namespace, cluster);
            return Ok(None);
        };
        let version = secret.resource_version().unwrap_or_default();
        let key = (namespace.to_string(), cluster.to_string());
        let slot = self
            .workloads
            .lock()
            .expect("lock")
            .entry(key.clone())
            .or_default()
            .clone();
        let mut slot = slot.lock().await;
        if let Some(workload) = slot.as_ref()
            && workload.secret_version == version
        {
            return Ok(Some(workload.cache.clone()));
        }
        let Some(client) = workload_client(&secret).await else {
            return Ok(None);
        };
        let notify = self.node_changes.clone();
        let (ns, name) = key.clone();
        let cache = Arc::new(Cache::start(
            Api::all_with(client, &node_resource()),
            node_resource(),
            "",
            NODE_CHANGES_BUFFER,
            None,
            move |_| {
                let _ = notify.send(NodeChange {
                    namespace: ns.clone(),
                    cluster: name.clone(),
                    provider_id: None,
                });
            },
        ));
        // Every Node change wakes the Machine with the Node's providerID.
        let mut changes = Box::pin(cache.changes());
        let notify = self.node_changes.clone();
        let (ns, name) = key.clone();
        // The forwarder ends with the cache (its feed closes when the cache is dropped).
        tokio::spawn(async move {
            while let Some(node) = changes.next().await {
                let _ = notify.send(NodeChange {
                    namespace: ns.clone(),
                    cluster: name.clone(),
                    provider_id: str_at(&node.data, &["spec", "providerID"]).map(String::from),
                });
            }
        });
        *slot = Some(Workload {
            cache: cache.clone(),
            secret_version: version,
        });
        // A first answer, as Cluster API's ClusterCache connects with a timeout: a reachable
        // cluster is judged at once, an unreachable one reported as such.
        let mut healthy = cache.healthy.clone();
        let _ = tokio::time::timeout(WORKLOAD_CONNECT_TIMEOUT, healthy.wait_for(|h| *h)).await;
        Ok(Some(cache))
    }

    /// Stops watching a workload cluster (it is being deleted, or its kubeconfig is gone).
    pub fn forget_workload(&self, namespace: &str, cluster: &str) {
        self.workloads
            .lock()
            .expect("lock")
            .remove(&(namespace.to_string(), cluster.to_string()));
    }

    /// Waits until every management cache holds what the API holds now: for tests and
    /// benchmarks that call reconcilers directly and must see their own writes.
    pub async fn catch_up(&self) -> Result<(), Error> {
        let caches: Vec<(String, Arc<Cache>)> = self
            .kinds
            .lock()
            .expect("lock")
            .iter()
            .map(|((_, _, selector), cache)| (selector.clone(), cache.clone()))
            .collect();
        for (selector, cache) in caches {
            cache.synced().await?;
            let api: Api<DynamicObject> = Api::all_with(self.client.clone(), cache.resource());
            let listed = api
                .list(&kube::api::ListParams::default().labels(&selector))
                .await?;
            let want = versions(&listed.items);
            let what = format!("the cache of {} to catch up", cache.resource().plural);
            until(&what, || versions(&cache.store().state()) == want).await?;
        }
        Ok(())
    }
}

/// Each object's resourceVersion by namespace and name.
fn versions<O: std::borrow::Borrow<DynamicObject>>(
    objects: &[O],
) -> HashMap<(String, String), String> {
    objects
        .iter()
        .map(|o| {
            let o: &DynamicObject = o.borrow();
            (
                (o.namespace().unwrap_or_default(), o.name_any()),
                o.resource_version().unwrap_or_default(),
            )
        })
        .collect()
}

/// Waits until `done` holds of what a cache holds now (it follows a watch), for at most
/// [`SYNC_TIMEOUT`]; `what` names the wait in the error.
async fn until(what: &str, mut done: impl FnMut() -> bool) -> Result<(), Error> {
    let deadline = tokio::time::Instant::now() + SYNC_TIMEOUT;
    while !done() {
        if tokio::time::Instant::now() > deadline {
            return Err(Error::Invalid(format!(
                "timed out after {} s waiting for {what}",
                SYNC_TIMEOUT.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

fn node_resource() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::Node>(&())
}

/// A client of a workload cluster, from the `<cluster>-kubeconfig` Secret its provider wrote.
pub async fn workload_client(secret: &DynamicObject) -> Option<Client> {
    use base64::Engine;
    let encoded = str_at(&secret.data, &["data", "value"])?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    let kubeconfig = kube::config::Kubeconfig::from_yaml(std::str::from_utf8(&bytes).ok()?).ok()?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .ok()?;
    Client::try_from(config).ok()
}
