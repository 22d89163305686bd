//! Watch: a stream of ADDED / MODIFIED / DELETED / BOOKMARK / ERROR events, resumable from a
//! resourceVersion, with selectors applied to both the old and the new state of each object.

use std::sync::Arc;
use std::time::Duration;

use futures::stream::{self, BoxStream, StreamExt};
use lariat_store::EventKind;
use serde_json::json;

pub use crate::fanout::WatchedObject;
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
        // Bookmarks carry the store's progress past this watch's last event, so a client that
        // saw nothing for a while resumes from a revision that history still holds (without
        // it, an idle agent's every renewal after a compaction was a 410 and a new list).
        let changes = match self
            .store
            .watch_with_progress(&prefix, start, params.bookmark_interval / 2)
            .await
        {
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
        let everything = selectors.label_selector.is_empty() && selectors.field_selector.is_empty();
        let progress = Arc::new(std::sync::atomic::AtomicI64::new(start));
        let progressed = progress.clone();
        let events = changes
            .map(move |change| -> Option<WatchEvent> {
                let change = match change {
                    Ok(change) if change.kind == EventKind::Progress => {
                        // Every earlier change has gone out already: the stream is in order.
                        progressed
                            .fetch_max(change.revision(), std::sync::atomic::Ordering::Relaxed);
                        return None;
                    }
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
                // Without selectors every earlier state matched: it is not decoded to find that
                // out (the controllers' caches select nothing; an old state is rarely cached).
                let was = if everything {
                    change.prev.is_some()
                } else {
                    let old = change.prev.as_ref().and_then(decode);
                    old.as_deref().is_some_and(matches)
                };
                let kind = event_type(change.kind, was, matches(&new))?;
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
                let progress = progress.clone();
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
                            let at = last.max(progress.load(std::sync::atomic::Ordering::Relaxed));
                            Some((bookmark(&scope, at, false), (events, timeout, last, false)))
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

/// What a change is to a watcher, from whether the object matched its selectors before and
/// after; `None` when it concerns the watcher neither way.
fn event_type(kind: EventKind, was: bool, is: bool) -> Option<&'static str> {
    match (kind, was, is) {
        (EventKind::Delete, true, _) | (EventKind::Delete, false, true) => Some("DELETED"),
        (EventKind::Put, true, true) => Some("MODIFIED"),
        (EventKind::Put, false, true) => Some("ADDED"),
        (EventKind::Put, true, false) => Some("DELETED"),
        _ => None,
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
