//! What the simulation knows of its cluster: its Nodes, Pods and workload objects (as JSON
//! under typed metadata), fed by one watch per kind and by the answers to its own
//! writes, so that a pass that creates a ReplicaSet sees it in the next pass of the same
//! round rather than creating it again.

use std::collections::{BTreeMap, HashMap};

use kube::api::{ApiResource, DynamicObject};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

/// An object's namespace (empty for a cluster-scoped one) and name.
pub type Key = (String, String);

pub fn key_of<K: Resource>(object: &K) -> Key {
    (object.namespace().unwrap_or_default(), object.name_any())
}

/// The objects of one kind, as last seen.
pub struct Objects<K> {
    items: BTreeMap<Key, K>,
    /// A relist under way (after a watch restarts): what it has delivered so far.
    relisting: Option<BTreeMap<Key, K>>,
    /// Whether a first list has been delivered.
    synced: bool,
    /// Objects this simulation deleted, by uid, until the watch says they are gone: a
    /// change the watch delivers late does not bring them back.
    deleted: HashMap<Key, String>,
}

impl<K> Default for Objects<K> {
    fn default() -> Self {
        Objects {
            items: BTreeMap::new(),
            relisting: None,
            synced: false,
            deleted: HashMap::new(),
        }
    }
}

/// The store's revision an object was read at; revisions only grow.
fn revision<K: Resource>(object: &K) -> u64 {
    object
        .resource_version()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

impl<K: Resource + Clone> Objects<K> {
    pub fn apply(&mut self, event: watcher::Event<K>) {
        match event {
            watcher::Event::Init => self.relisting = Some(BTreeMap::new()),
            watcher::Event::InitApply(object) => {
                if let Some(relisting) = &mut self.relisting {
                    relisting.insert(key_of(&object), object);
                }
            }
            watcher::Event::InitDone => {
                if let Some(listed) = self.relisting.take() {
                    self.items = listed;
                }
                self.deleted.clear();
                self.synced = true;
            }
            watcher::Event::Apply(object) => self.record(object),
            watcher::Event::Delete(object) => {
                let key = key_of(&object);
                self.deleted.remove(&key);
                if self
                    .items
                    .get(&key)
                    .is_some_and(|known| known.uid() == object.uid())
                {
                    self.items.remove(&key);
                }
            }
        }
    }

    /// A state of an object, from the watch or from a write's answer; one older than what is
    /// known is ignored.
    pub fn record(&mut self, object: K) {
        let key = key_of(&object);
        if let Some(uid) = self.deleted.get(&key) {
            if object.uid().as_ref() == Some(uid) {
                return;
            }
            self.deleted.remove(&key);
        }
        match self.items.get(&key) {
            Some(known) if known.uid() == object.uid() && revision(known) > revision(&object) => {}
            _ => {
                self.items.insert(key, object);
            }
        }
    }

    /// An object this simulation deleted.
    pub fn forget(&mut self, object: &K) {
        let key = key_of(object);
        self.items.remove(&key);
        if let Some(uid) = object.uid() {
            self.deleted.insert(key, uid);
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &K> {
        self.items.values()
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<&K> {
        self.items.get(&(namespace.to_string(), name.to_string()))
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.items.len()
    }
}

/// The kinds the simulation acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Node,
    Pod,
    ReplicaSet,
    Deployment,
    StatefulSet,
    DaemonSet,
    Job,
    CronJob,
    Service,
    EndpointSlice,
    PersistentVolumeClaim,
    PersistentVolume,
    StorageClass,
}

impl Kind {
    pub const ALL: [Kind; 13] = [
        Kind::Node,
        Kind::Pod,
        Kind::ReplicaSet,
        Kind::Deployment,
        Kind::StatefulSet,
        Kind::DaemonSet,
        Kind::Job,
        Kind::CronJob,
        Kind::Service,
        Kind::EndpointSlice,
        Kind::PersistentVolumeClaim,
        Kind::PersistentVolume,
        Kind::StorageClass,
    ];

    pub fn resource(self) -> ApiResource {
        use k8s_openapi::api::{apps::v1 as apps, batch::v1 as batch, core::v1 as core};
        match self {
            Kind::Node => ApiResource::erase::<core::Node>(&()),
            Kind::Pod => ApiResource::erase::<core::Pod>(&()),
            Kind::ReplicaSet => ApiResource::erase::<apps::ReplicaSet>(&()),
            Kind::Deployment => ApiResource::erase::<apps::Deployment>(&()),
            Kind::StatefulSet => ApiResource::erase::<apps::StatefulSet>(&()),
            Kind::DaemonSet => ApiResource::erase::<apps::DaemonSet>(&()),
            Kind::Job => ApiResource::erase::<batch::Job>(&()),
            Kind::CronJob => ApiResource::erase::<batch::CronJob>(&()),
            Kind::Service => ApiResource::erase::<core::Service>(&()),
            Kind::EndpointSlice => {
                ApiResource::erase::<k8s_openapi::api::discovery::v1::EndpointSlice>(&())
            }
            Kind::PersistentVolumeClaim => ApiResource::erase::<core::PersistentVolumeClaim>(&()),
            Kind::PersistentVolume => ApiResource::erase::<core::PersistentVolume>(&()),
            Kind::StorageClass => {
                ApiResource::erase::<k8s_openapi::api::storage::v1::StorageClass>(&())
            }
        }
    }
}

/// One change a watch delivered.
pub struct Change {
    pub kind: Kind,
    pub event: watcher::Event<DynamicObject>,
}

/// Everything the simulation acts on in one cluster.
#[derive(Default)]
pub struct World {
    pub nodes: Objects<DynamicObject>,
    pub pods: Objects<DynamicObject>,
    pub replica_sets: Objects<DynamicObject>,
    pub deployments: Objects<DynamicObject>,
    pub stateful_sets: Objects<DynamicObject>,
    pub daemon_sets: Objects<DynamicObject>,
    pub jobs: Objects<DynamicObject>,
    pub cron_jobs: Objects<DynamicObject>,
    pub services: Objects<DynamicObject>,
    pub endpoint_slices: Objects<DynamicObject>,
    pub claims: Objects<DynamicObject>,
    pub volumes: Objects<DynamicObject>,
    pub storage_classes: Objects<DynamicObject>,
}

impl World {
    pub fn objects(&mut self, kind: Kind) -> &mut Objects<DynamicObject> {
        match kind {
            Kind::Node => &mut self.nodes,
            Kind::Pod => &mut self.pods,
            Kind::ReplicaSet => &mut self.replica_sets,
            Kind::Deployment => &mut self.deployments,
            Kind::StatefulSet => &mut self.stateful_sets,
            Kind::DaemonSet => &mut self.daemon_sets,
            Kind::Job => &mut self.jobs,
            Kind::CronJob => &mut self.cron_jobs,
            Kind::Service => &mut self.services,
            Kind::EndpointSlice => &mut self.endpoint_slices,
            Kind::PersistentVolumeClaim => &mut self.claims,
            Kind::PersistentVolume => &mut self.volumes,
            Kind::StorageClass => &mut self.storage_classes,
        }
    }

    pub fn apply(&mut self, change: Change) {
        self.objects(change.kind).apply(change.event);
    }

    /// Whether every kind has been listed once: before that, a missing object may only be
    /// one not delivered yet.
    pub fn synced(&mut self) -> bool {
        Kind::ALL.iter().all(|kind| self.objects(*kind).synced)
    }
}

/// The objects of one kind by the uid of their controller (built once per pass, so an
/// owner finds its own without scanning every object).
pub fn by_controller(objects: &Objects<DynamicObject>) -> HashMap<String, Vec<&DynamicObject>> {
    let mut index: HashMap<String, Vec<&DynamicObject>> = HashMap::new();
    for object in objects.iter() {
        if let Some(owner) = object
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true))
        {
            index.entry(owner.uid.clone()).or_default().push(object);
        }
    }
    index
}

/// Whether `object` is controlled by the object with `uid` (its controller owner reference).
pub fn controlled_by<K: Resource>(object: &K, uid: &str) -> bool {
    object
        .owner_references()
        .iter()
        .any(|owner| owner.controller == Some(true) && owner.uid == uid)
}

/// Whether `object` is being deleted.
pub fn deleting<K: Resource>(object: &K) -> bool {
    object.meta().deletion_timestamp.is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, uid: &str, revision: u64, node: Option<&str>) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": uid,
                         "resourceVersion": revision.to_string()},
            "spec": {"nodeName": node},
        }))
        .unwrap()
    }

    #[test]
    fn a_late_change_neither_overwrites_a_newer_one_nor_revives_a_deleted_object() {
        let mut pods = Objects::<DynamicObject>::default();
        pods.apply(watcher::Event::Init);
        pods.apply(watcher::Event::InitApply(pod("a", "1", 5, None)));
        pods.apply(watcher::Event::InitDone);
        // The answer to a write, then the watch's older change.
        pods.record(pod("a", "1", 9, Some("n1")));
        pods.apply(watcher::Event::Apply(pod("a", "1", 7, None)));
        assert_eq!(
            pods.get("default", "a").unwrap().data["spec"]["nodeName"],
            "n1"
        );
        // Deleted here: a late change of it is ignored, a new object of the name is not.
        pods.forget(&pod("a", "1", 9, None));
        pods.apply(watcher::Event::Apply(pod("a", "1", 10, None)));
        assert!(pods.get("default", "a").is_none());
        pods.apply(watcher::Event::Apply(pod("a", "2", 11, None)));
        assert_eq!(
            pods.get("default", "a").unwrap().uid().as_deref(),
            Some("2")
        );
        // A relist replaces what was known.
        pods.apply(watcher::Event::Init);
        pods.apply(watcher::Event::InitApply(pod("b", "3", 12, None)));
        pods.apply(watcher::Event::InitDone);
        assert!(pods.get("default", "a").is_none());
        assert_eq!(pods.len(), 1);
    }
}
