//! Shared caches, as controller-runtime's informers: each kind a controller reads is watched
//! once per process and kept in memory. Reconcilers read from here, relate objects through
//! indexes instead of list calls, write through the API, and are woken by the changes.
//!
//! A kind's cache starts on its first use (a reference may name any kind a provider serves),
//! and a read waits until the cache holds the whole first list, so "not in the cache" always
//! means "does not exist", never "not listed yet". Workload clusters' Nodes get a cache per
//! cluster, through the `<cluster>-kubeconfig` Secret (itself read from the Secret cache).
//!
//! Each kind is held in one representation ([`Cached`](crate::kind::Cached)): any kind with a Rust type as its
//! struct ([`Caches::typed`]: Cluster API's and Fleet's kinds, Nodes), and the kinds Cluster
//! API's contracts reach through references (a provider's infrastructure, bootstrap and
//! control plane objects, whatever provider serves them) and Secrets as JSON ([`Caches::of`]),
//! as Cluster API reads unstructured objects; their own controller parses them. The watch
//! itself reads JSON and each object is converted once as it arrives: an object the schema
//! allows but the struct cannot hold is set aside and named, rather than stopping the watch
//! of every object of its kind.

use std::any::Any;
use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use lariat_api::capi::Cluster;
use tokio::sync::{broadcast, watch};

use crate::Error;
use crate::kind::Cached;
use crate::object::str_at;

/// How many changes a subscriber may fall behind before it is handed the whole cache again.
/// A subscriber only moves changes into its controller's queue, so it falls behind only when
/// starved; each buffer is allocated whole up front (tokio's broadcast), 32 bytes a change,
/// for every cache of the process.
const CHANGES_BUFFER: usize = 4096;

/// How many changes of all kinds together a subscriber may fall behind (it then misses
/// changes until the periodic resync).
const EVERY_CHANGE_BUFFER: usize = 16_384;

/// The first wait before a failed watch lists again, doubled up to the second.
const WATCH_RETRY_FIRST: Duration = Duration::from_millis(500);
const WATCH_RETRY_MAX: Duration = Duration::from_secs(30);

/// How many Node changes of all workload clusters together a subscriber may fall behind (it
/// then misses changes until the periodic resync): many clusters reconnecting at once list
/// all their Nodes.
const EVERY_NODE_CHANGE_BUFFER: usize = 16_384;

/// A workload cluster's Node cache feeds its changes to the process-wide Node broadcast
/// through its hooks; a subscriber of its own that falls behind is handed the cluster's few
/// Nodes again. Allocated whole for every workload cluster, 32 bytes a change: 1,024 was
/// 32 KiB a cluster.
const NODE_CHANGES_BUFFER: usize = 64;

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

/// An object's index keys, from its JSON: one reading of the same fields for every kind,
/// whatever its representation.
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

/// An object the watch delivered that its struct cannot hold.
#[derive(Clone, Debug)]
struct Unreadable {
    error: String,
    resource_version: String,
}

/// The indexes of one cache, and the objects set aside as unreadable (they stay indexed, so a
/// read that would count them fails instead of counting without them).
struct Index<K: Cached> {
    /// Index key to the objects under it.
    members: HashMap<String, HashSet<ObjectRef<K>>>,
    /// Each object's keys, to take it out again when it changes or goes.
    keys: HashMap<ObjectRef<K>, Vec<String>>,
    unreadable: HashMap<ObjectRef<K>, Unreadable>,
}

impl<K: Cached> Default for Index<K> {
    fn default() -> Self {
        Index {
            members: HashMap::new(),
            keys: HashMap::new(),
            unreadable: HashMap::new(),
        }
    }
}

impl<K: Cached> Index<K> {
    fn remove(&mut self, object: &ObjectRef<K>) {
        self.unreadable.remove(object);
        for key in self.keys.remove(object).unwrap_or_default() {
            if let Some(members) = self.members.get_mut(&key) {
                members.remove(object);
                if members.is_empty() {
                    self.members.remove(&key);
                }
            }
        }
    }

    fn insert(&mut self, reference: ObjectRef<K>, keys: Vec<String>) {
        self.remove(&reference);
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
pub struct Cache<K: Cached = DynamicObject> {
    resource: ApiResource,
    selector: String,
    dynamic_type: K::DynamicType,
    store: Store<K>,
    index: Arc<RwLock<Index<K>>>,
    changes: broadcast::Sender<Arc<K>>,
    /// True once the first list is in, for good: reads then answer from what is held, as an
    /// informer's do, rather than wait.
    synced: watch::Receiver<bool>,
    /// True while the watch runs: false from a failure until the next complete list.
    healthy: watch::Receiver<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl<K: Cached> Drop for Cache<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What a subscriber of a cache is handed: an object, or word that every object was just
/// handed again because it fell behind.
enum Change<K> {
    /// An object; `resync` when it is handed again because the subscriber fell behind (it
    /// may have missed any number of changes of it).
    Object {
        object: Arc<K>,
        resync: bool,
    },
    Resynced,
}

/// Told of each change a cache sees.
type OnChange<K> = Box<dyn Fn(&Arc<K>) + Send + Sync>;

/// What a cache hears of its watch besides the objects.
struct Hooks<K> {
    /// Each change, besides the cache's own feed.
    on_change: Option<OnChange<K>>,
    /// Each failure of the watch.
    on_error: Box<dyn Fn(&watcher::Error) + Send + Sync>,
}

impl<K> Default for Hooks<K> {
    fn default() -> Self {
        Hooks {
            on_change: None,
            on_error: Box::new(|_| {}),
        }
    }
}

/// What a cache's watch feeds: its store and index, and those who follow its changes.
struct Feed<K: Cached> {
    writer: Writer<K>,
    store: Store<K>,
    index: Arc<RwLock<Index<K>>>,
    kind: String,
    dynamic_type: K::DynamicType,
    changes: broadcast::Sender<Arc<K>>,
    on_change: Option<OnChange<K>>,
    set_synced: watch::Sender<bool>,
    set_healthy: watch::Sender<bool>,
    /// The list being received, until it is complete.
    listing: Option<Index<K>>,
}

impl<K: Cached> Feed<K> {
    /// Takes one event of the watch in; whether it completed a list.
    fn apply(&mut self, event: watcher::Event<DynamicObject>) -> bool {
        match event {
            watcher::Event::Init => {
                self.listing = Some(Index::default());
                self.writer.apply_watcher_event(&watcher::Event::Init);
            }
            watcher::Event::InitApply(object) => {
                let reference = self.reference_of(&object);
                let listed = self.listing.get_or_insert_default();
                listed.insert(reference.clone(), index_keys(&object));
                let version = object.resource_version().unwrap_or_default();
                match K::from_json(object) {
                    Ok(object) => self
                        .writer
                        .apply_watcher_event(&watcher::Event::InitApply(object)),
                    Err(error) => {
                        self.set_aside(&reference, &error);
                        let listed = self.listing.get_or_insert_default();
                        listed.unreadable.insert(
                            reference,
                            Unreadable {
                                error: error.to_string(),
                                resource_version: version,
                            },
                        );
                    }
                }
            }
            watcher::Event::InitDone => {
                let before = self.store.state();
                self.writer.apply_watcher_event(&watcher::Event::InitDone);
                *self.index.write().expect("lock") = self.listing.take().unwrap_or_default();
                self.set_synced.send_replace(true);
                self.set_healthy.send_replace(true);
                // Deleted (or deleted and made again) while the watch was down: published as
                // they were last seen, as their deletion would have been, before what replaced
                // them, so that whoever they wake finds them gone.
                for object in before {
                    if !holds(&self.store, &object, &self.dynamic_type) {
                        self.publish(object);
                    }
                }
                for object in self.store.state() {
                    self.publish(object);
                }
                return true;
            }
            watcher::Event::Apply(object) => self.apply_change(object),
            watcher::Event::Delete(object) => {
                let reference = self.reference_of(&object);
                self.index.write().expect("lock").remove(&reference);
                let gone = K::from_json(object)
                    .ok()
                    .map(Arc::new)
                    .or_else(|| self.store.get(&reference));
                if let Some(gone) = gone {
                    self.writer
                        .apply_watcher_event(&watcher::Event::Delete((*gone).clone()));
                    self.publish(gone);
                }
            }
        }
        false
    }

    /// A change of one object: stored and published, or set aside while it cannot be read
    /// (and its last readable version taken out of the store).
    fn apply_change(&mut self, object: DynamicObject) {
        let reference = self.reference_of(&object);
        let keys = index_keys(&object);
        let version = object.resource_version().unwrap_or_default();
        let readable = K::from_json(object);
        let mut index = self.index.write().expect("lock");
        index.insert(reference.clone(), keys);
        match readable {
            Ok(object) => {
                self.writer
                    .apply_watcher_event(&watcher::Event::Apply(object));
                drop(index);
                if let Some(stored) = self.store.get(&reference) {
                    self.publish(stored);
                }
            }
            Err(error) => {
                self.set_aside(&reference, &error);
                index.unreadable.insert(
                    reference.clone(),
                    Unreadable {
                        error: error.to_string(),
                        resource_version: version,
                    },
                );
                if let Some(stored) = self.store.get(&reference) {
                    self.writer
                        .apply_watcher_event(&watcher::Event::Delete((*stored).clone()));
                }
            }
        }
    }

    fn reference_of(&self, object: &DynamicObject) -> ObjectRef<K> {
        let reference = ObjectRef::<K>::new_with(
            object.metadata.name.as_deref().unwrap_or_default(),
            self.dynamic_type.clone(),
        );
        match object.metadata.namespace.as_deref() {
            Some(namespace) => reference.within(namespace),
            None => reference,
        }
    }

    /// An object that cannot be read is set aside, logged once each.
    fn set_aside(&self, reference: &ObjectRef<K>, error: &serde_json::Error) {
        tracing::warn!(kind = %self.kind, object = %reference, %error, "cannot read the object; reconcilers that need it fail until it is fixed");
    }

    fn publish(&self, object: Arc<K>) {
        if let Some(on_change) = &self.on_change {
            on_change(&object);
        }
        let _ = self.changes.send(object);
    }
}

impl<K: Cached> Cache<K> {
    /// Starts watching the objects of `resource` that match `selector`, through `client`, into
    /// a new cache whose change feed holds `buffer` changes.
    fn start(
        client: Client,
        resource: ApiResource,
        selector: &str,
        buffer: usize,
        hooks: Hooks<K>,
    ) -> Cache<K> {
        let dynamic_type = K::dynamic_type(&resource);
        let api: Api<DynamicObject> = Api::all_with(client, &resource);
        let writer = Writer::new(dynamic_type.clone());
        let store = writer.as_reader();
        let mut config = watcher::Config::default();
        if !selector.is_empty() {
            config = config.labels(selector);
        }
        let index: Arc<RwLock<Index<K>>> = Default::default();
        let (changes, _) = broadcast::channel(buffer);
        let (set_synced, synced) = watch::channel(false);
        let (set_healthy, healthy) = watch::channel(false);
        let mut feed = Feed {
            writer,
            store: store.clone(),
            index: index.clone(),
            kind: resource.kind.clone(),
            dynamic_type: dynamic_type.clone(),
            changes: changes.clone(),
            on_change: hooks.on_change,
            set_synced,
            set_healthy,
            listing: None,
        };
        let on_error = hooks.on_error;
        let kind = resource.kind.clone();
        let task = tokio::spawn(async move {
            let mut last_error = String::new();
            let mut backoff = WATCH_RETRY_FIRST;
            // One watch (list, then watch) per turn. A failure ends the turn: the next one
            // lists afresh, so the cache is known complete again when its list is in
            // (kube-runtime's watcher would resume without saying when it has).
            loop {
                let events = watcher(api.clone(), config.clone());
                futures::pin_mut!(events);
                while let Some(event) = events.next().await {
                    match event {
                        Ok(event) => {
                            if feed.apply(event) {
                                last_error.clear();
                                backoff = WATCH_RETRY_FIRST;
                            }
                        }
                        Err(error) => {
                            feed.set_healthy.send_replace(false);
                            // Logged once until it changes or the watch recovers.
                            if error.to_string() != last_error {
                                last_error = error.to_string();
                                tracing::warn!(%kind, %error, "watch failed; listing again");
                            }
                            on_error(&error);
                            break;
                        }
                    }
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(WATCH_RETRY_MAX);
            }
        });
        Cache {
            resource,
            selector: selector.to_string(),
            dynamic_type,
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

    /// What kube-runtime needs to know of the kind, for references to its objects.
    pub fn dynamic_type(&self) -> K::DynamicType {
        self.dynamic_type.clone()
    }

    /// The store, for a kube-runtime `Controller` built on this cache.
    pub fn store(&self) -> Store<K> {
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

    fn reference(&self, namespace: &str, name: &str) -> ObjectRef<K> {
        let reference = ObjectRef::new_with(name, self.dynamic_type.clone());
        if namespace.is_empty() {
            reference
        } else {
            reference.within(namespace)
        }
    }

    /// The error a read of an object set aside as unreadable fails with.
    fn unreadable(&self, reference: &ObjectRef<K>) -> Option<Error> {
        let index = self.index.read().expect("lock");
        let unreadable = index.unreadable.get(reference)?;
        Some(Error::Invalid(format!(
            "{} {reference} cannot be read: {}",
            self.resource.kind, unreadable.error
        )))
    }

    /// An object by namespace and name; an error if it exists but cannot be read.
    pub async fn get(&self, namespace: &str, name: &str) -> Result<Option<Arc<K>>, Error> {
        self.synced().await?;
        let reference = self.reference(namespace, name);
        match self.unreadable(&reference) {
            Some(error) => Err(error),
            None => Ok(self.store.get(&reference)),
        }
    }

    /// An object, from what the cache holds now, synced or not.
    pub fn get_now(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        self.store.get(&self.reference(namespace, name))
    }

    /// The objects under an index key, sorted by namespace and name; an error if one of them
    /// cannot be read (a count without it would be wrong).
    pub async fn indexed(&self, key: IndexKey<'_>) -> Result<Vec<Arc<K>>, Error> {
        self.synced().await?;
        let references = self.members(key);
        if let Some(error) = references.iter().find_map(|r| self.unreadable(r)) {
            return Err(error);
        }
        Ok(self.objects(references))
    }

    /// The readable objects under an index key now.
    pub fn indexed_now(&self, key: IndexKey<'_>) -> Vec<Arc<K>> {
        self.objects(self.members(key))
    }

    fn members(&self, key: IndexKey<'_>) -> Vec<ObjectRef<K>> {
        self.index
            .read()
            .expect("lock")
            .members
            .get(&key.render())
            .map(|members| members.iter().cloned().collect())
            .unwrap_or_default()
    }

    fn objects(&self, references: Vec<ObjectRef<K>>) -> Vec<Arc<K>> {
        let mut objects: Vec<Arc<K>> = references
            .iter()
            .filter_map(|reference| self.store.get(reference))
            .collect();
        objects.sort_by(|a, b| {
            (a.meta().namespace.as_deref(), a.meta().name.as_deref())
                .cmp(&(b.meta().namespace.as_deref(), b.meta().name.as_deref()))
        });
        objects
    }

    /// References to the objects under an index key, to wake their controller with.
    pub fn indexed_refs(&self, key: IndexKey<'_>) -> Vec<ObjectRef<K>> {
        self.members(key)
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
                        .is_none_or(|o| o.meta().deletion_timestamp.is_some())
                })
        })
        .await
    }

    /// Every object, then every change (an object as it is now, or as it was when deleted).
    /// A subscriber that falls behind is handed every object again, as an informer's resync.
    pub fn changes(&self) -> impl Stream<Item = Arc<K>> + Send + use<K> {
        self.changes_and_resyncs().filter_map(|change| {
            std::future::ready(match change {
                Change::Object { object, .. } => Some(object),
                Change::Resynced => None,
            })
        })
    }

    /// [`changes`](Self::changes), each resync followed by [`Change::Resynced`].
    fn changes_and_resyncs(&self) -> impl Stream<Item = Change<K>> + Send + use<K> {
        let receiver = self.changes.subscribe();
        let store = self.store.clone();
        let synced = self.synced.clone();
        futures::stream::unfold(
            (receiver, store, Some(synced), Vec::<Arc<K>>::new(), false),
            |(mut receiver, store, mut first, mut pending, mut resyncing)| async move {
                if let Some(synced) = first.take() {
                    // Not synced yet: the first list arrives as changes anyway.
                    if *synced.borrow() {
                        pending = store.state();
                    }
                }
                loop {
                    let change = if let Some(object) = pending.pop() {
                        Change::Object {
                            object,
                            resync: resyncing,
                        }
                    } else if std::mem::take(&mut resyncing) {
                        Change::Resynced
                    } else {
                        match receiver.recv().await {
                            Ok(object) => Change::Object {
                                object,
                                resync: false,
                            },
                            Err(broadcast::error::RecvError::Lagged(_)) => {
                                pending = store.state();
                                resyncing = true;
                                continue;
                            }
                            Err(broadcast::error::RecvError::Closed) => return None,
                        }
                    };
                    return Some((change, (receiver, store, None, pending, resyncing)));
                }
            },
        )
    }

    /// [`changes`](Self::changes), but only those that change what `read` hashes of an object
    /// (what a controller woken by this kind acts on), plus every object being deleted or
    /// gone. A Machine is written about eight times on its way to Running; a controller that
    /// reads only its version and bootstrap data need not run eight times.
    ///
    /// Each subscriber keeps one hash per live object, with the object as last seen (the
    /// cache's own copy, shared), so that after falling behind it still hands on the objects
    /// deleted meanwhile; both are forgotten when the object is deleted. After falling
    /// behind, every object that changed since this subscriber last saw it is handed on
    /// again, whatever it changed.
    pub fn changes_in<F>(self: &Arc<Self>, read: F) -> impl Stream<Item = Arc<K>> + Send + use<K, F>
    where
        F: Fn(&K, &mut DefaultHasher) + Send + 'static,
    {
        let cache = self.clone();
        let mut seen = HashMap::<(String, String), (u64, Arc<K>)>::new();
        self.changes_and_resyncs().flat_map(move |change| {
            let (object, resync) = match change {
                Change::Object { object, resync } => (object, resync),
                Change::Resynced => {
                    // What was deleted while this subscriber fell behind.
                    let gone = seen
                        .extract_if(|_, (_, object)| {
                            !holds(&cache.store, object, &cache.dynamic_type)
                        })
                        .map(|(_, (_, object))| object);
                    return futures::stream::iter(gone.collect::<Vec<_>>());
                }
            };
            let meta = object.meta();
            let namespace = meta.namespace.clone().unwrap_or_default();
            let name = meta.name.clone().unwrap_or_default();
            let gone = meta.deletion_timestamp.is_some()
                || !holds(&cache.store, &object, &cache.dynamic_type);
            let key = (namespace, name);
            if gone {
                if seen
                    .get(&key)
                    .is_some_and(|(_, seen)| seen.meta().uid == meta.uid)
                {
                    seen.remove(&key);
                }
                return futures::stream::iter(vec![object]);
            }
            let mut hasher = DefaultHasher::new();
            meta.uid.hash(&mut hasher);
            read(&object, &mut hasher);
            let fingerprint = hasher.finish();
            match seen.insert(key, (fingerprint, object.clone())) {
                // Unchanged since the last one handed on. After falling behind, what this
                // subscriber's controller last read may have been a change it missed, unless
                // the object is the very one this subscriber saw last (the cache makes a new
                // one for every change): at a thousand clusters a subscriber that fell behind
                // woke all 13,000 Machines' controllers for the few that had changed.
                Some((before, last))
                    if before == fingerprint && (!resync || Arc::ptr_eq(&last, &object)) =>
                {
                    futures::stream::iter(vec![])
                }
                // Deleted and made again while this subscriber fell behind: the one before
                // is gone.
                Some((_, replaced)) if replaced.meta().uid != object.meta().uid => {
                    futures::stream::iter(vec![replaced, object])
                }
                _ => futures::stream::iter(vec![object]),
            }
        })
    }

    /// Each object's resourceVersion by namespace and name, unreadable ones included.
    fn versions(&self) -> HashMap<(String, String), String> {
        let mut versions = versions::<K, _>(&self.store.state());
        for (reference, unreadable) in &self.index.read().expect("lock").unreadable {
            versions.insert(
                (
                    reference.namespace.clone().unwrap_or_default(),
                    reference.name.clone(),
                ),
                unreadable.resource_version.clone(),
            );
        }
        versions
    }
}

/// What [`Caches::catch_up`] needs of a cache, whatever its kind.
trait Watched: Any + Send + Sync {
    fn resource(&self) -> &ApiResource;
    fn selector(&self) -> &str;
    fn synced(&self) -> watch::Receiver<bool>;
    fn versions(&self) -> HashMap<(String, String), String>;
}

impl<K: Cached> Watched for Cache<K> {
    fn resource(&self) -> &ApiResource {
        &self.resource
    }

    fn selector(&self) -> &str {
        &self.selector
    }

    fn synced(&self) -> watch::Receiver<bool> {
        self.synced.clone()
    }

    fn versions(&self) -> HashMap<(String, String), String> {
        Cache::versions(self)
    }
}

/// A workload cluster's Node cache, with the kubeconfig Secret it was made from.
struct Workload {
    cache: Arc<Cache<Node>>,
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

/// A cache's place among [`Caches`]: its representation, kind and label selector.
type CacheKey = (std::any::TypeId, String, String, String);

/// Every cache of this process.
pub struct Caches {
    client: Client,
    kinds: Mutex<HashMap<CacheKey, Arc<dyn Watched>>>,
    /// The kinds held as their struct (`apiVersion`, `kind`): never held as JSON too.
    held_as_struct: Mutex<HashSet<(String, String)>>,
    /// Every change of every management cache, for controllers woken by whatever kind their
    /// objects reference (Cluster API's dynamic watches on referenced provider kinds).
    every_change: broadcast::Sender<Arc<DynamicObject>>,
    /// Each workload cluster's Node cache, behind a lock of its own: the Machines of a new
    /// cluster asking at once wait for one cache rather than each making one.
    workloads: Mutex<HashMap<(String, String), WorkloadSlot>>,
    /// Shared: a slot of the buffer holds a pointer rather than the change.
    node_changes: broadcast::Sender<Arc<NodeChange>>,
}

impl Caches {
    pub fn new(client: Client) -> Arc<Caches> {
        Arc::new(Caches {
            client,
            kinds: Default::default(),
            held_as_struct: Default::default(),
            every_change: broadcast::channel(EVERY_CHANGE_BUFFER).0,
            workloads: Default::default(),
            node_changes: broadcast::channel(EVERY_NODE_CHANGE_BUFFER).0,
        })
    }

    /// The management API's client, for writes.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The cache of a kind held as its struct, started on first use. The kinds a controller
    /// reconciles through references of Cluster API's contracts (a provider's infrastructure
    /// and bootstrap objects) are read by those references as JSON, with [`Caches::of`], and
    /// parsed by their own controller; every other kind is held here.
    pub fn typed<K: Cached<DynamicType = ()>>(&self) -> Arc<Cache<K>> {
        let resource = ApiResource::erase::<K>(&());
        self.held_as_struct
            .lock()
            .expect("lock")
            .insert((resource.api_version.clone(), resource.kind.clone()));
        self.cache_of::<K>(&resource, "", Hooks::default())
    }

    fn is_held_as_struct(&self, api_version: &str, kind: &str) -> bool {
        self.held_as_struct
            .lock()
            .expect("lock")
            .contains(&(api_version.to_string(), kind.to_string()))
    }

    /// The cache of a kind held as JSON (what references name), started on first use.
    pub fn of(&self, resource: &ApiResource) -> Arc<Cache> {
        debug_assert!(
            !self.is_held_as_struct(&resource.api_version, &resource.kind),
            "{} is held as its struct: use Caches::typed",
            resource.kind
        );
        // Only what Clusters and Machines may reference goes to every_change: not the core API
        // group's kinds (Secrets), nor Cluster API's own.
        let referable = !resource.group.is_empty() && resource.group != lariat_api::capi::GROUP;
        let every_change = self.every_change.clone();
        let hooks = Hooks {
            on_change: referable.then(|| -> OnChange<DynamicObject> {
                Box::new(move |object| {
                    let _ = every_change.send(object.clone());
                })
            }),
            ..Hooks::default()
        };
        self.cache_of::<DynamicObject>(resource, "", hooks)
    }

    fn cache_of<K: Cached>(
        &self,
        resource: &ApiResource,
        selector: &str,
        hooks: Hooks<K>,
    ) -> Arc<Cache<K>> {
        let key = (
            std::any::TypeId::of::<K>(),
            resource.api_version.clone(),
            resource.kind.clone(),
            selector.to_string(),
        );
        let mut kinds = self.kinds.lock().expect("lock");
        let cache = kinds.entry(key).or_insert_with(|| {
            Arc::new(Cache::<K>::start(
                self.client.clone(),
                resource.clone(),
                selector,
                CHANGES_BUFFER,
                hooks,
            ))
        });
        let any: Arc<dyn Any + Send + Sync> = cache.clone();
        any.downcast::<Cache<K>>()
            .expect("a cache is keyed by its representation")
    }

    /// The cache of the kind a reference names (found through discovery).
    pub async fn of_kind(&self, api_version: &str, kind: &str) -> Result<Arc<Cache>, Error> {
        let group = api_version.split_once('/').map_or("", |(group, _)| group);
        if group == lariat_api::capi::GROUP || self.is_held_as_struct(api_version, kind) {
            return Err(Error::InvalidReference(format!(
                "the reference names a {kind} ({api_version}), one of lariat's own kinds, where a provider's object belongs"
            )));
        }
        let resource = crate::object::resource_for(&self.client, api_version, kind).await?;
        Ok(self.of(&resource))
    }

    /// The management plane's Secrets of Cluster API clusters: those labelled
    /// `cluster.x-k8s.io/cluster-name` (kubeconfigs, certificates, bootstrap data), as Cluster
    /// API's controllers cache them. Every other Secret stays out of this process's memory.
    pub fn secrets(&self) -> Arc<Cache> {
        self.secrets_labelled(lariat_api::capi::labels::CLUSTER_NAME)
    }

    /// The Secrets `selector` (a label selector) selects, in every namespace: only those are
    /// held in memory.
    pub fn secrets_labelled(&self, selector: &str) -> Arc<Cache> {
        self.cache_of::<DynamicObject>(
            &ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&()),
            selector,
            Hooks::default(),
        )
    }

    /// Every change of every kind cached as JSON outside the core API group and Cluster
    /// API's own group, now and from now on (a cache started later joins in). A subscriber
    /// that falls behind misses changes; the periodic resync covers them.
    pub fn every_change(&self) -> impl Stream<Item = Arc<DynamicObject>> + Send + 'static {
        tokio_stream::wrappers::BroadcastStream::new(self.every_change.subscribe())
            .filter_map(|change| std::future::ready(change.ok()))
    }

    /// Changes of workload clusters' Nodes, for the controllers they concern.
    pub fn node_changes(&self) -> impl Stream<Item = Arc<NodeChange>> + Send + 'static {
        tokio_stream::wrappers::BroadcastStream::new(self.node_changes.subscribe())
            .filter_map(|change| std::future::ready(change.ok()))
    }

    /// The Node cache of a workload cluster, made from its `<cluster>-kubeconfig` Secret and
    /// made again when that Secret changes; `None` while there is no such Secret or it holds
    /// no usable kubeconfig, and for a Cluster that does not exist or is being deleted.
    pub async fn nodes(
        &self,
        namespace: &str,
        cluster: &str,
    ) -> Result<Option<Arc<Cache<Node>>>, Error> {
        // A Cluster that is gone or going gets no new watch (one made now would outlive it).
        let alive = self
            .typed::<Cluster>()
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
        let (ns, name) = key.clone();
        // Every Node change wakes the Machine with the Node's providerID; a failing watch
        // wakes every Machine of the cluster.
        let change_of = move |provider_id: Option<String>| {
            Arc::new(NodeChange {
                namespace: ns.clone(),
                cluster: name.clone(),
                provider_id,
            })
        };
        let (notify_change, notify_error) = (self.node_changes.clone(), self.node_changes.clone());
        let change_of_error = change_of.clone();
        let hooks = Hooks {
            on_change: Some(Box::new(move |node: &Arc<Node>| {
                let provider_id = node.spec.as_ref().and_then(|s| s.provider_id.clone());
                let _ = notify_change.send(change_of(provider_id));
            })),
            on_error: Box::new(move |_| {
                let _ = notify_error.send(change_of_error(None));
            }),
        };
        let cache = Arc::new(Cache::start(
            client,
            ApiResource::erase::<Node>(&()),
            "",
            NODE_CHANGES_BUFFER,
            hooks,
        ));
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
        let caches: Vec<Arc<dyn Watched>> =
            self.kinds.lock().expect("lock").values().cloned().collect();
        for cache in caches {
            let what = format!("the cache of {} to catch up", cache.resource().plural);
            until(&what, || *cache.synced().borrow()).await?;
            let api: Api<DynamicObject> = Api::all_with(self.client.clone(), cache.resource());
            let listed = api
                .list(&kube::api::ListParams::default().labels(cache.selector()))
                .await?;
            let want = versions::<DynamicObject, _>(&listed.items);
            until(&what, || cache.versions() == want).await?;
        }
        Ok(())
    }
}

/// Whether `store` holds `object` itself (its name with its uid), not a successor or nothing.
fn holds<K: Cached>(store: &Store<K>, object: &K, dynamic_type: &K::DynamicType) -> bool {
    store
        .get(&ObjectRef::from_obj_with(object, dynamic_type.clone()))
        .is_some_and(|now| now.meta().uid == object.meta().uid)
}

/// Each object's resourceVersion by namespace and name.
fn versions<K: Resource, O: std::borrow::Borrow<K>>(
    objects: &[O],
) -> HashMap<(String, String), String> {
    objects
        .iter()
        .map(|o| {
            let meta = o.borrow().meta();
            (
                (
                    meta.namespace.clone().unwrap_or_default(),
                    meta.name.clone().unwrap_or_default(),
                ),
                meta.resource_version.clone().unwrap_or_default(),
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

/// A client of a workload cluster, from the `<cluster>-kubeconfig` Secret its provider wrote.
/// Only a self-contained kubeconfig is used: anything that would make lariat run a program,
/// read a file of its own host, go through a proxy or skip TLS verification is refused, so
/// whoever can write the Secret cannot turn it against the management plane.
pub async fn workload_client(secret: &DynamicObject) -> Option<Client> {
    use base64::Engine;
    let encoded = str_at(&secret.data, &["data", "value"])?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    let kubeconfig = kube::config::Kubeconfig::from_yaml(std::str::from_utf8(&bytes).ok()?).ok()?;
    if let Err(field) = self_contained(&kubeconfig) {
        tracing::debug!(
            secret = %format!("{}/{}", secret.metadata.namespace.as_deref().unwrap_or_default(), secret.metadata.name.as_deref().unwrap_or_default()),
            field,
            "workload kubeconfig refused"
        );
        return None;
    }
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .ok()?;
    Client::try_from(config).ok()
}

/// The first field of `kubeconfig` that reaches outside it, if any.
fn self_contained(kubeconfig: &kube::config::Kubeconfig) -> Result<(), &'static str> {
    for cluster in kubeconfig
        .clusters
        .iter()
        .filter_map(|c| c.cluster.as_ref())
    {
        if cluster.insecure_skip_tls_verify == Some(true) {
            return Err("insecure-skip-tls-verify");
        }
        if cluster.certificate_authority.is_some() {
            return Err("certificate-authority (a file)");
        }
        if cluster.proxy_url.is_some() {
            return Err("proxy-url");
        }
    }
    for user in kubeconfig
        .auth_infos
        .iter()
        .filter_map(|a| a.auth_info.as_ref())
    {
        if user.exec.is_some() {
            return Err("exec");
        }
        if user.auth_provider.is_some() {
            return Err("auth-provider");
        }
        if user.token_file.is_some() {
            return Err("tokenFile");
        }
        if user.client_certificate.is_some() || user.client_key.is_some() {
            return Err("client-certificate or client-key (files)");
        }
        if user.impersonate.is_some() {
            return Err("as (impersonation)");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A watch that fails and lists again may find objects gone that were deleted while it
    /// was down: no Delete event ever comes for them, so the list itself says so.
    #[test]
    fn a_relist_publishes_the_objects_it_no_longer_holds() {
        let resource = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        let dynamic_type = <DynamicObject as Cached>::dynamic_type(&resource);
        let writer = Writer::new(dynamic_type.clone());
        let store = writer.as_reader();
        let (changes, mut receiver) = broadcast::channel(16);
        let mut feed = Feed::<DynamicObject> {
            writer,
            store,
            index: Default::default(),
            kind: resource.kind.clone(),
            dynamic_type,
            changes,
            on_change: None,
            set_synced: watch::channel(false).0,
            set_healthy: watch::channel(false).0,
            listing: None,
        };
        // "name" or "name@incarnation": a name made again gets another uid.
        let object = |spec: &str| {
            let name = spec.split('@').next().unwrap_or_default();
            let mut object = DynamicObject::new(name, &resource).within("default");
            object.metadata.uid = Some(format!("uid-{spec}"));
            object
        };
        let list = |feed: &mut Feed<DynamicObject>, specs: &[&str]| {
            feed.apply(watcher::Event::Init);
            for spec in specs {
                feed.apply(watcher::Event::InitApply(object(spec)));
            }
            assert!(feed.apply(watcher::Event::InitDone));
        };
        let mut published = || {
            let mut uids: Vec<String> = std::iter::from_fn(|| receiver.try_recv().ok())
                .filter_map(|o| o.uid())
                .collect();
            uids.sort();
            uids
        };
        list(&mut feed, &["kept", "doomed", "swapped"]);
        assert_eq!(published(), ["uid-doomed", "uid-kept", "uid-swapped"]);
        list(&mut feed, &["kept", "new", "swapped@2"]);
        assert_eq!(
            published(),
            [
                "uid-doomed",
                "uid-kept",
                "uid-new",
                "uid-swapped",
                "uid-swapped@2"
            ],
            "the gone and the replaced, as they were, and the new list"
        );
    }

    #[test]
    fn only_self_contained_workload_kubeconfigs_are_used() {
        let kubeconfig = |cluster: &str, user: &str| {
            kube::config::Kubeconfig::from_yaml(&format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://10.0.0.1\n{cluster}\nusers:\n- name: u\n  user:\n{user}\n"
            ))
            .unwrap()
        };
        let inline = "    certificate-authority-data: Y2E=";
        assert_eq!(
            self_contained(&kubeconfig(inline, "    token: abc")),
            Ok(())
        );
        for (cluster, user, refused) in [
            (
                inline,
                "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh",
                "exec",
            ),
            (inline, "    tokenFile: /var/run/secrets/token", "tokenFile"),
            (
                inline,
                "    client-certificate: /etc/lariat/tls.crt",
                "client-certificate or client-key (files)",
            ),
            (
                "    insecure-skip-tls-verify: true",
                "    token: abc",
                "insecure-skip-tls-verify",
            ),
            (
                "    certificate-authority: /etc/ssl/ca.pem",
                "    token: abc",
                "certificate-authority (a file)",
            ),
            (
                "    proxy-url: http://evil:3128",
                "    token: abc",
                "proxy-url",
            ),
        ] {
            assert_eq!(self_contained(&kubeconfig(cluster, user)), Err(refused));
        }
    }
}
