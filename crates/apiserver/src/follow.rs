//! A process's own copy of the objects under a few store prefixes, kept in step by watching
//! them, as an informer keeps one of a kind: RBAC's index and the cluster accesses are built
//! from such copies, so they read nothing from the store per decision.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use lariat_store::{EventKind, ListOptions, Store};

/// What a copy is made into.
pub trait Mirror: Send {
    /// Forgets everything (a fresh list follows).
    fn clear(&mut self);
    /// One stored object under one of the prefixes (its whole key); `None` when deleted.
    fn apply(&mut self, key: &str, value: Option<&[u8]>);
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
/// whenever a watch is lost; `settled` runs after each read and after each batch of changes
/// (those that arrived while the last one ran), so a burst of writes costs a few rebuilds, not
/// one per write.
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
        let mut changes = futures::stream::select_all(watches);
        loop {
            let first = tokio::select! {
                _ = stop.changed() => return,
                change = changes.next() => change,
            };
            let Some(Ok(change)) = first else { break };
            let mut batch = vec![change];
            while let Some(Some(Ok(change))) = futures::FutureExt::now_or_never(changes.next()) {
                batch.push(change);
            }
            for change in batch {
                match change.kind {
                    EventKind::Put => mirror.apply(&change.kv.key, Some(&change.kv.value)),
                    EventKind::Delete => mirror.apply(&change.kv.key, None),
                }
            }
            settled(mirror);
        }
    }
}
