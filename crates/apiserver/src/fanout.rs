//! The watch cache: the objects of recent changes, decoded once and rendered as JSON once
//! for every watcher they go to.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use serde_json::Value;

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

/// The objects of recent changes, by storage key, revision and the apiVersion they are served
/// at: every watcher of a kind decodes each change (its new and its previous state, for
/// selectors), so without this N watchers cost N decodes and N encodings of every change.
///
/// It is bounded by count and by weight: an object weighs twice its stored JSON (it is held
/// decoded, and rendered once a watcher needs it), and the oldest go first. An object heavier
/// than the whole budget is decoded for its watchers and not kept.
pub struct Fanout {
    recent: Mutex<FanoutEntries>,
    max_bytes: usize,
}

impl Default for Fanout {
    fn default() -> Self {
        Fanout::with_max_bytes(crate::limits::DEFAULT_WATCH_CACHE_BYTES)
    }
}

/// A change's object: its storage key, its revision, and the apiVersion it is served at.
pub(crate) type FanoutKey = (String, i64, String);

#[derive(Default)]
struct FanoutEntries {
    objects: HashMap<FanoutKey, (Arc<WatchedObject>, usize)>,
    order: VecDeque<FanoutKey>,
    bytes: usize,
    /// Objects pushed out of the budget, which a watcher may still hold (one that has not
    /// sent them yet): a watcher that comes to the same change later shares that copy rather
    /// than decoding and rendering its own. They weigh nothing here (whoever holds them pays,
    /// in its share); the dead are swept once they outnumber the kept.
    evicted: HashMap<FanoutKey, std::sync::Weak<WatchedObject>>,
    /// The size of `evicted` at which the dead are swept next: twice what the last sweep
    /// kept, so sweeping stays linear in what is inserted.
    sweep_at: usize,
}

impl Fanout {
    pub fn with_max_bytes(max_bytes: usize) -> Fanout {
        Fanout {
            recent: Default::default(),
            max_bytes,
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
            if let Some(held) = recent.evicted.get(&key).and_then(std::sync::Weak::upgrade) {
                return Some(held);
            }
        }
        let object = WatchedObject::new(decode()?);
        let weight = 2 * stored_bytes;
        if weight > self.max_bytes {
            return Some(object);
        }
        let mut recent = self.recent.lock().expect("lock");
        if let Some((kept, _)) = recent.objects.get(&key) {
            return Some(kept.clone());
        }
        while recent.order.len() >= FANOUT_ENTRIES || recent.bytes + weight > self.max_bytes {
            let Some(oldest) = recent.order.pop_front() else {
                break;
            };
            if let Some((gone, freed)) = recent.objects.remove(&oldest) {
                recent.bytes -= freed;
                recent.evicted.insert(oldest, Arc::downgrade(&gone));
            }
        }
        if recent.evicted.len() > recent.sweep_at.max(FANOUT_ENTRIES) {
            recent.evicted.retain(|_, held| held.strong_count() > 0);
            recent.sweep_at = 2 * recent.evicted.len();
        }
        recent.order.push_back(key.clone());
        recent.bytes += weight;
        recent.objects.insert(key, (object.clone(), weight));
        Some(object)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(revision: i64) -> FanoutKey {
        ("/registry/configmaps/a/x".into(), revision, "v1".into())
    }

    #[test]
    fn a_change_pushed_out_but_still_held_is_shared_not_decoded_again() {
        // Room for one object of 100 bytes (each weighs twice its size).
        let fanout = Fanout::with_max_bytes(200);
        let decode = || Some(serde_json::json!({"data": {"a": "b"}}));
        let held = fanout.get_or_decode(key(1), 100, decode).unwrap();
        let _second = fanout.get_or_decode(key(2), 100, decode).unwrap();
        assert_eq!(fanout.bytes(), 200, "the first was pushed out");
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
}
