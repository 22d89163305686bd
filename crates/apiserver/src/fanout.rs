//! The watch cache: the objects of recent changes, decoded once and rendered as JSON once
//! for every watcher they go to.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::Notify;
use tokio::time::Instant;

/// An object as watchers see it: decoded once, and rendered as JSON once, however many
/// watchers it goes to.
#[derive(Debug)]
pub struct WatchedObject {
    pub value: Value,
    json: OnceLock<Bytes>,
}

impl WatchedObject {
    pub fn new(value: Value) -> Arc<WatchedObject> {
        Arc::new(WatchedObject {
            value,
            json: OnceLock::new(),
        })
    }

    /// The object's JSON, rendered by the first watcher that needs it; the others share it.
    pub fn json(&self) -> &Bytes {
        self.json
            .get_or_init(|| serde_json::to_vec(&self.value).unwrap_or_default().into())
    }
}

/// How many recent object versions [`Fanout`] keeps at most.
const FANOUT_ENTRIES: usize = 2048;

/// How long [`Fanout`] keeps an object: every watcher following a kind takes a change within
/// moments of the others, and one that comes later (a watch resumed from an old revision)
/// still shares the copy while anyone holds it. Kept longer, objects only cost memory: an idle
/// server's cache, or a thousand simulated clusters' caches, held their last 2,048 changes
/// decoded for good.
pub const FANOUT_AGE: Duration = Duration::from_secs(10);

/// The objects of recent changes, by storage key, revision and the apiVersion they are served
/// at: every watcher of a kind decodes each change (its new and its previous state, for
/// selectors), so without this N watchers cost N decodes and N encodings of every change.
///
/// It is bounded by count, by weight and by age: an object weighs `WEIGHT_PER_JSON_BYTE`
/// times its JSON, the oldest go first, and none stays past its age (a task started with the
/// first object takes them out; it ends at its next wake-up once the cache is gone). An object
/// heavier than the whole budget is decoded for its watchers and not kept.
pub struct Fanout {
    recent: Arc<Mutex<FanoutEntries>>,
    max_bytes: usize,
    max_age: Duration,
    /// Wakes the task that expires objects when one arrives in an empty cache, and when the
    /// cache is dropped.
    arrived: Arc<Notify>,
    expiring: OnceLock<()>,
}

impl Default for Fanout {
    fn default() -> Self {
        Fanout::new(crate::limits::DEFAULT_WATCH_CACHE_BYTES, FANOUT_AGE)
    }
}

impl Drop for Fanout {
    fn drop(&mut self) {
        // Its expiring task finds the cache gone and ends.
        self.arrived.notify_one();
    }
}

/// A change's object: its storage key, its revision, and the apiVersion it is served at.
pub(crate) type FanoutKey = (String, i64, String);

#[derive(Default)]
struct FanoutEntries {
    objects: HashMap<FanoutKey, (Arc<WatchedObject>, usize)>,
    /// Oldest first, with when each was kept.
    order: VecDeque<(Instant, FanoutKey)>,
    bytes: usize,
    /// Objects pushed out of the budget, which a watcher may still hold (one that has not
    /// sent them yet): a watcher that comes to the same change later shares that copy rather
    /// than decoding and rendering its own. They weigh nothing here (whoever holds them pays,
    /// in its share); the dead are swept once they outnumber the kept.
    evicted: HashMap<FanoutKey, Weak<WatchedObject>>,
    /// The size of `evicted` at which the dead are swept next: twice what the last sweep
    /// kept, so sweeping stays linear in what is inserted.
    sweep_at: usize,
}

impl FanoutEntries {
    /// Pushes out the oldest object; false when there is none.
    fn push_out_oldest(&mut self) -> bool {
        let Some((_, oldest)) = self.order.pop_front() else {
            return false;
        };
        if let Some((gone, freed)) = self.objects.remove(&oldest) {
            self.bytes -= freed;
            self.evicted.insert(oldest, Arc::downgrade(&gone));
        }
        if self.evicted.len() > self.sweep_at.max(FANOUT_ENTRIES) {
            self.evicted.retain(|_, held| held.strong_count() > 0);
            self.sweep_at = 2 * self.evicted.len();
        }
        true
    }

    /// Pushes out what was kept `max_age` or longer ago; when the oldest left was kept.
    fn expire(&mut self, now: Instant, max_age: Duration) -> Option<Instant> {
        while let Some((kept, _)) = self.order.front() {
            if now.saturating_duration_since(*kept) < max_age {
                return Some(*kept);
            }
            self.push_out_oldest();
        }
        // Nothing kept: nobody shares what was pushed out any more either, once its holders
        // let go, and the map's memory goes back.
        self.evicted.retain(|_, held| held.strong_count() > 0);
        self.sweep_at = 2 * self.evicted.len();
        self.evicted.shrink_to_fit();
        self.objects.shrink_to_fit();
        self.order.shrink_to_fit();
        None
    }
}

impl Fanout {
    pub fn new(max_bytes: usize, max_age: Duration) -> Fanout {
        Fanout {
            recent: Default::default(),
            max_bytes,
            max_age,
            arrived: Default::default(),
            expiring: OnceLock::new(),
        }
    }

    /// What the kept objects weigh now (the `lariat_watch_cache_bytes` metric).
    pub fn bytes(&self) -> usize {
        self.recent.lock().expect("lock").bytes
    }

    pub(crate) fn get_or_decode(
        &self,
        key: FanoutKey,
        stored_bytes: usize,
        decode: impl FnOnce() -> Option<Value>,
    ) -> Option<Arc<WatchedObject>> {
        {
            let recent = self.recent.lock().expect("lock");
            if let Some((object, _)) = recent.objects.get(&key) {
                return Some(object.clone());
            }
            if let Some(held) = recent.evicted.get(&key).and_then(Weak::upgrade) {
                return Some(held);
            }
        }
        let object = WatchedObject::new(decode()?);
        let weight = WEIGHT_PER_JSON_BYTE * stored_bytes;
        if weight > self.max_bytes {
            return Some(object);
        }
        let mut recent = self.recent.lock().expect("lock");
        // Another watcher decoded it meanwhile: its copy is the one shared.
        if let Some((kept, _)) = recent.objects.get(&key) {
            return Some(kept.clone());
        }
        if let Some(held) = recent.evicted.get(&key).and_then(Weak::upgrade) {
            return Some(held);
        }
        while recent.order.len() >= FANOUT_ENTRIES || recent.bytes + weight > self.max_bytes {
            if !recent.push_out_oldest() {
                break;
            }
        }
        if recent.order.is_empty() {
            self.start_expiring();
            self.arrived.notify_one();
        }
        recent.order.push_back((Instant::now(), key.clone()));
        recent.bytes += weight;
        recent.objects.insert(key, (object.clone(), weight));
        Some(object)
    }

    /// Starts, once, the task that takes objects out at their age (none outside a runtime:
    /// then the budget alone bounds the cache).
    fn start_expiring(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        self.expiring.get_or_init(|| {
            let recent = Arc::downgrade(&self.recent);
            let arrived = self.arrived.clone();
            let max_age = self.max_age;
            runtime.spawn(async move {
                loop {
                    let oldest = {
                        let Some(recent) = recent.upgrade() else {
                            return;
                        };
                        let mut recent = recent.lock().expect("lock");
                        recent.expire(Instant::now(), max_age)
                    };
                    match oldest.and_then(|kept| kept.checked_add(max_age)) {
                        Some(due) => tokio::time::sleep_until(due).await,
                        None => arrived.notified().await,
                    }
                }
            });
        });
    }
}

/// What an object weighs in the cache for each byte of its JSON: about what it holds decoded
/// (a map entry's slot in an `IndexMap`, with its hash, key and value, and its index; an
/// array's elements; strings) for typical objects, field names and short values, which the
/// tests measure, plus the JSON once rendered. Weighed at twice its JSON, as this cache once
/// did, a thousand simulated clusters' caches held several times what they were thought to.
const WEIGHT_PER_JSON_BYTE: usize = 7;

#[cfg(test)]
mod tests {
    use super::*;

    fn key(revision: i64) -> FanoutKey {
        ("/registry/configmaps/a/x".into(), revision, "v1".into())
    }

    #[test]
    fn a_change_pushed_out_but_still_held_is_shared_not_decoded_again() {
        let decode = || Some(serde_json::json!({"data": {"a": "b"}}));
        // Room for one object of 100 bytes of JSON.
        let weight = WEIGHT_PER_JSON_BYTE * 100;
        let fanout = Fanout::new(weight, FANOUT_AGE);
        let held = fanout.get_or_decode(key(1), 100, decode).unwrap();
        let _second = fanout.get_or_decode(key(2), 100, decode).unwrap();
        assert_eq!(fanout.bytes(), weight, "the first was pushed out");
        let again = fanout
            .get_or_decode(key(1), 100, || panic!("decoded again"))
            .unwrap();
        assert!(Arc::ptr_eq(&held, &again));
        drop((held, again));
        let mut decoded = false;
        fanout.get_or_decode(key(1), 100, || {
            decoded = true;
            decode()
        });
        assert!(decoded, "once nobody holds it, it is decoded again");
    }

    #[tokio::test]
    async fn objects_leave_at_their_age_and_an_empty_cache_keeps_nothing() {
        let fanout = Fanout::new(1 << 20, Duration::from_millis(100));
        let decode = || Some(serde_json::json!({"data": {"a": "b"}}));
        let held = fanout.get_or_decode(key(1), 100, decode).unwrap();
        fanout.get_or_decode(key(2), 100, decode).unwrap();
        assert!(fanout.bytes() > 0);
        let deadline = Instant::now() + Duration::from_secs(5);
        while fanout.bytes() > 0 {
            assert!(Instant::now() < deadline, "nothing expired");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // One still held is shared; the other is decoded again.
        let again = fanout
            .get_or_decode(key(1), 100, || panic!("decoded again"))
            .unwrap();
        assert!(Arc::ptr_eq(&held, &again));
        let mut decoded = false;
        fanout.get_or_decode(key(2), 100, || {
            decoded = true;
            decode()
        });
        assert!(decoded);
        // Objects arriving after the cache emptied expire too.
        while fanout.bytes() > 0 {
            assert!(
                Instant::now() < deadline + Duration::from_secs(5),
                "not expired"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// About what `value` holds on the heap once decoded, beyond the `Value` itself.
    fn decoded_weight(value: &Value) -> usize {
        const VALUE: usize = std::mem::size_of::<Value>();
        // Hash, key and value in the entries, and the entry's index in the table.
        const MAP_ENTRY: usize = 8 + std::mem::size_of::<String>() + VALUE + 8 + 1;
        match value {
            Value::String(s) => s.capacity(),
            Value::Array(items) => {
                items.capacity() * VALUE + items.iter().map(decoded_weight).sum::<usize>()
            }
            Value::Object(map) => map
                .iter()
                .map(|(key, value)| MAP_ENTRY + key.capacity() + decoded_weight(value))
                .sum(),
            Value::Null | Value::Bool(_) | Value::Number(_) => 0,
        }
    }

    #[test]
    fn an_object_weighs_about_what_it_holds_decoded_and_rendered() {
        let pod = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-5d9c7b-x2x7k", "namespace": "default", "uid": "0b0c5c1e-8a43-4a4f-9d1e-3c3b9f1d8a21",
                "resourceVersion": "4812", "creationTimestamp": "2026-12-07T05:00:00Z",
                "labels": {"app": "web", "pod-template-hash": "5d9c7b"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d9c7b", "uid": "9f0e2a3b-1c4d-4e5f-8a9b-0c1d2e3f4a5b", "controller": true, "blockOwnerDeletion": true}]},
            "spec": {"containers": [{"name": "web", "image": "nginx:1.27", "ports": [{"containerPort": 80, "protocol": "TCP"}],
                "resources": {}, "terminationMessagePath": "/dev/termination-log", "imagePullPolicy": "IfNotPresent"}],
                "restartPolicy": "Always", "dnsPolicy": "ClusterFirst", "nodeName": "worker-1", "schedulerName": "default-scheduler"},
            "status": {"phase": "Running", "podIP": "10.244.1.7", "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-07T05:00:03Z"},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-12-07T05:00:00Z"}]},
        });
        let config_map = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "settings", "namespace": "default", "resourceVersion": "17", "uid": "2c1b4a5d-6e7f-4a8b-9c0d-1e2f3a4b5c6d"},
            "data": {"mode": "fast", "replicas": "3", "region": "eu-west-1"},
        });
        for object in [pod, config_map] {
            let json = serde_json::to_vec(&object).unwrap().len();
            let held = decoded_weight(&object) + json;
            let weighed = WEIGHT_PER_JSON_BYTE * json;
            assert!(
                held * 2 > weighed && weighed * 2 > held,
                "weighed {weighed} bytes, holds {held} for {json} bytes of JSON"
            );
        }
    }
}
