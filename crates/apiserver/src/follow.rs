//! A process's own copy of the objects under a few store prefixes, kept in step by watching
//! them, as an informer keeps one of a kind: RBAC's index and the cluster accesses are built
//! from such copies, so they read nothing from the store per decision.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use lariat_store::{EventKind, ListOptions, Store};

/// What a copy is made into.
pub trait Mirror: Send {
    /// Forgets everything (a fresh list follows).
    fn clear(&mut self);
    /// One stored object under one of the prefixes (its whole key); `None` when deleted.
    /// Returns whether the change matters to what is built from the copy.
    fn apply(&mut self, key: &str, value: Option<&[u8]>) -> bool;
}

/// Puts one stored object into `map` under `name`, or takes it out (`None`, or what this build
/// cannot read: the API validated it before it was stored, so such an object grants or asks
/// nothing here). Returns whether what the map holds of it changed: a change to fields the
/// type leaves out (status, resourceVersion) is none.
pub fn put<T: serde::de::DeserializeOwned + PartialEq>(
    map: &mut HashMap<String, T>,
    name: &str,
    value: Option<&[u8]>,
) -> bool {
    match value.map(serde_json::from_slice::<T>) {
        Some(Ok(object)) => map.insert(name.to_string(), object).as_ref() != map.get(name),
        Some(Err(_)) | None => map.remove(name).is_some(),
    }
}

/// Lists every prefix into `mirror` at one revision, which it returns.
pub async fn load(
    store: &Arc<dyn Store>,
    prefixes: &[&str],
    mirror: &mut impl Mirror,
) -> Result<i64, lariat_store::Error> {
    mirror.clear();
    let mut revision = 0;
    for prefix in prefixes {
        let listed = store
            .list(
                prefix,
                ListOptions {
                    revision,
                    ..Default::default()
                },
            )
            .await?;
        revision = listed.revision;
        for kv in &listed.items {
            mirror.apply(&kv.key, Some(&kv.value));
        }
    }
    Ok(revision)
}

/// Keeps `mirror` in step with the store until `stop`, reading everything again first and
/// whenever any one watch ends or fails (a prefix whose watch is lost is never left behind);
/// `settled` runs after each read and after each batch of changes that matter (those that
/// arrived while the last one ran), so a burst of writes costs a few rebuilds, not one per
/// write. Changes under different prefixes arrive in their own order: a copy may briefly hold
/// one prefix's newer state beside another's older one.
pub async fn follow<M: Mirror>(
    store: Arc<dyn Store>,
    prefixes: &[&str],
    mirror: &mut M,
    mut settled: impl FnMut(&M),
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        let revision = match load(&store, prefixes, mirror).await {
            Ok(revision) => revision,
            Err(e) => {
                tracing::warn!(error = %e, ?prefixes, "cannot read the objects to follow; retrying");
                tokio::select! {
                    _ = stop.changed() => return,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                }
            }
        };
        settled(mirror);
        let mut watches = Vec::new();
        for prefix in prefixes {
            match store.watch(prefix, revision).await {
                Ok(changes) => watches.push(changes),
                Err(_) => break,
            }
        }
        if watches.len() < prefixes.len() {
            // Compacted past the revision just read, or the store is away: read again.
            tokio::select! {
                _ = stop.changed() => return,
                _ = tokio::time::sleep(Duration::from_millis(200)) => continue,
            }
        }
        // Each watch ends with a `None` of its own, so the end of any one is seen.
        let mut changes = futures::stream::select_all(
            watches
                .into_iter()
                .map(|watch| watch.map(Some).chain(futures::stream::iter([None]))),
        );
        let mut lost = false;
        while !lost {
            let first = tokio::select! {
                _ = stop.changed() => return,
                change = changes.next() => change,
            };
            let Some(Some(Ok(change))) = first else { break };
            let mut batch = vec![change];
            while let Some(next) = futures::FutureExt::now_or_never(changes.next()) {
                match next {
                    Some(Some(Ok(change))) => batch.push(change),
                    _ => {
                        lost = true;
                        break;
                    }
                }
            }
            let mut matters = false;
            for change in batch {
                matters |= match change.kind {
                    EventKind::Put => mirror.apply(&change.kv.key, Some(&change.kv.value)),
                    EventKind::Delete => mirror.apply(&change.kv.key, None),
                    EventKind::Progress => false,
                };
            }
            if matters {
                settled(mirror);
            }
        }
    }
}
