//! Watch: a stream of ADDED / MODIFIED / DELETED / BOOKMARK / ERROR events, resumable from a
//! resourceVersion, with selectors applied to both the old and the new state of each object.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::stream::{self, BoxStream, StreamExt};
use lariat_store::EventKind;
use serde_json::{Value, json};

use crate::resources::{ListParams, Resources, Scope};
use crate::sending::Share;
use crate::status::{ApiError, ApiResult};

#[derive(Clone, Debug)]
pub struct WatchParams {
    /// Resume after this revision; `None` (or "0") starts with the current state as ADDED.
    pub resource_version: Option<i64>,
    pub list: ListParams,
    pub bookmarks: bool,
    /// Send the current state first and then a bookmark marking its end (streaming list).
    pub send_initial_events: bool,
    pub timeout: Duration,
    pub bookmark_interval: Duration,
}

/// One event on the wire, before it is rendered as JSON (or as a one-row Table).
#[derive(Clone, Debug)]
pub struct WatchEvent {
    pub kind: &'static str,
    pub object: Arc<WatchedObject>,
}

/// An object as watchers see it: decoded once, and rendered as JSON once, however many
/// watchers it goes to.
#[derive(Debug)]
pub struct WatchedObject {
    pub value: Value,
    json: OnceLock<Vec<u8>>,
}

impl WatchedObject {
    pub fn new(value: Value) -> Arc<WatchedObject> {
        Arc::new(WatchedObject {
            value,
            json: OnceLock::new(),
        })
    }

    /// The object's JSON, rendered by the first watcher that needs it.
    pub fn json(&self) -> &[u8] {
        self.json
            .get_or_init(|| serde_json::to_vec(&self.value).unwrap_or_default())
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

type FanoutKey = (String, i64, String);

#[derive(Default)]
struct FanoutEntries {
    objects: HashMap<FanoutKey, (Arc<WatchedObject>, usize)>,
    order: VecDeque<FanoutKey>,
    bytes: usize,
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

    fn get_or_decode(
        &self,
        key: FanoutKey,
        stored_bytes: usize,
        decode: impl FnOnce() -> Option<Value>,
    ) -> Option<Arc<WatchedObject>> {
        if let Some((object, _)) = self.recent.lock().expect("lock").objects.get(&key) {
            return Some(object.clone());
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
            if let Some((_, freed)) = recent.objects.remove(&oldest) {
                recent.bytes -= freed;
            }
        }
        recent.order.push_back(key.clone());
        recent.bytes += weight;
        recent.objects.insert(key, (object.clone(), weight));
        Some(object)
    }
}

impl Resources {
    /// The events of `scope` from `params`' revision; the current state, when asked for, is
    /// read within `share` of the response budget.
    pub async fn watch(
        &self,
        scope: &Scope,
        params: WatchParams,
        share: &Share,
    ) -> ApiResult<BoxStream<'static, WatchEvent>> {
        let prefix = scope.rt.list_prefix(scope.namespace.as_deref());
        // The current state, when the watch starts from it, is read page by page as the
        // client takes it (`list_stream`), never held whole.
        let (start, initial) = match params.resource_version {
            Some(rv) if rv > 0 && !params.send_initial_events => (rv, stream::empty().boxed()),
            _ => {
                let (revision, items) = self.list_stream(scope, &params.list, share).await?;
                let added = items.map(|item| match item {
                    Ok(object) => WatchEvent {
                        kind: "ADDED",
                        object: WatchedObject::new(object),
                    },
                    Err(error) => WatchEvent {
                        kind: "ERROR",
                        object: WatchedObject::new(error.to_status()),
                    },
                });
                let end = params
                    .send_initial_events
                    .then(|| bookmark(scope, revision, true));
                (revision, added.chain(stream::iter(end)).boxed())
            }
        };
        let changes = match self.store.watch(&prefix, start).await {
            Ok(changes) => changes,
            Err(lariat_store::Error::Compacted {
                requested,
                compacted,
            }) => {
                let error = ApiError::Gone {
                    message: format!("too old resource version: {requested} ({compacted})"),
                };
                return Ok(stream::iter(vec![WatchEvent {
                    kind: "ERROR",
                    object: WatchedObject::new(error.to_status()),
                }])
                .boxed());
            }
            Err(e) => return Err(e.into()),
        };
        let resources = self.clone();
        let scope_for_events = scope.clone();
        let selectors = params.list.clone();
        let events = changes
            .map(move |change| -> Option<WatchEvent> {
                let change = match change {
                    Ok(change) => change,
                    Err(e) => {
                        let error: ApiError = e.into();
                        return Some(WatchEvent {
                            kind: "ERROR",
                            object: WatchedObject::new(error.to_status()),
                        });
                    }
                };
                let api_version = scope_for_events.api_version();
                let decode = |kv: &lariat_store::KeyValue| {
                    let decode = || resources.decode(&scope_for_events, kv).ok();
                    if scope_for_events.rt.is_secret() {
                        // Decrypted Secrets are not kept beyond the watcher that asked.
                        return decode().map(WatchedObject::new);
                    }
                    resources.fanout.get_or_decode(
                        (kv.key.clone(), kv.mod_revision, api_version.clone()),
                        kv.value.len(),
                        decode,
                    )
                };
                let matches = |o: &WatchedObject| {
                    selectors.label_selector.matches_labels(&o.value)
                        && selectors.field_selector.matches_fields(&o.value)
                };
                let new = decode(&change.kv)?;
                let old = change.prev.as_ref().and_then(decode);
                let was = old.as_deref().is_some_and(matches);
                let is = matches(&new);
                let kind = match (change.kind, was, is) {
                    (EventKind::Delete, true, _) | (EventKind::Delete, false, true) => "DELETED",
                    (EventKind::Put, true, true) => "MODIFIED",
                    (EventKind::Put, false, true) => "ADDED",
                    (EventKind::Put, true, false) => "DELETED",
                    _ => return None,
                };
                Some(WatchEvent { kind, object: new })
            })
            .filter_map(futures::future::ready);

        let timeout = tokio::time::sleep(params.timeout);
        let bookmark_scope = scope.clone();
        let bookmarks = params.bookmarks;
        let interval = params.bookmark_interval;
        let live = stream::unfold(
            (Box::pin(events), Box::pin(timeout), start, false),
            move |(mut events, mut timeout, mut last, done)| {
                let scope = bookmark_scope.clone();
                async move {
                    if done {
                        return None;
                    }
                    tokio::select! {
                        _ = &mut timeout => None,
                        event = events.next() => {
                            let event = event?;
                            // A stream ends after its first error, as kube-apiserver's do.
                            let is_error = event.kind == "ERROR";
                            if let Some(rv) = event.object.value["metadata"]["resourceVersion"].as_str().and_then(|r| r.parse().ok()) {
                                last = rv;
                            }
                            Some((event, (events, timeout, last, is_error)))
                        }
                        _ = tokio::time::sleep(interval), if bookmarks => {
                            Some((bookmark(&scope, last, false), (events, timeout, last, false)))
                        }
                    }
                }
            },
        );
        // A stream ends after its first error, as kube-apiserver's do.
        let events = initial.chain(live).scan(false, |ended, event| {
            let event = (!*ended).then_some(event);
            *ended = event.as_ref().is_some_and(|e| e.kind == "ERROR");
            futures::future::ready(event)
        });
        Ok(events.boxed())
    }
}

fn bookmark(scope: &Scope, revision: i64, initial_events_end: bool) -> WatchEvent {
    let mut metadata = json!({"resourceVersion": revision.to_string()});
    if initial_events_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    WatchEvent {
        kind: "BOOKMARK",
        object: WatchedObject::new(
            json!({"kind": scope.rt.kind, "apiVersion": scope.rt.api_version(&scope.version), "metadata": metadata}),
        ),
    }
}
