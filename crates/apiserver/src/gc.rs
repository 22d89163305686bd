//! Background loops of the API server: the garbage collector (ownerReferences with
//! background, foreground and orphan propagation), namespace cleanup, and store compaction.
//!
//! The collector keeps an index of owners and dependents fed by one watch over every stored
//! object, so deciding what to delete never scans the store. It is level-triggered: each
//! change marks the objects it may affect, a periodic resync marks everything that is waiting,
//! and processing one object only ever looks at the present state.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use lariat_store::{EventKind, KeyValue, ListOptions, Store};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::objects::NAMESPACE_FINALIZER;
use crate::resources::{
    DeleteOptions, FOREGROUND_FINALIZER, ORPHAN_FINALIZER, Propagation, Resources, Scope,
    WriteOptions,
};
use crate::status::{ApiError, ApiResult};

const REGISTRY_PREFIX: &str = "/registry/";
const NAMESPACES_PREFIX: &str = "/registry/core/namespaces/";
const MANAGER: &str = "lariat-garbage-collector";

#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Owner {
    #[serde(deserialize_with = "null_as_default")]
    uid: String,
    #[serde(deserialize_with = "null_as_default")]
    api_version: String,
    #[serde(deserialize_with = "null_as_default")]
    kind: String,
    #[serde(deserialize_with = "null_as_default")]
    name: String,
}

/// A field stored as `null` read as absent, as the Value-based reading of metadata did
/// (admission lets `finalizers: null` and `ownerReferences: null` through, as Kubernetes does).
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de> + Default,
{
    use serde::Deserialize;
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// What the collector remembers of one object.
#[derive(Clone, Debug)]
struct Meta {
    uid: String,
    namespace: Option<String>,
    owners: Vec<Owner>,
    finalizers: Vec<String>,
    namespace_finalizers: bool,
    deleting: bool,
}

/// The fields of a stored object the collector reads, parsed from its bytes with the rest
/// skipped unparsed: the collector sees every write of every kind, and building each whole
/// object as JSON values only to read its metadata was most of what it cost.
#[derive(serde::Deserialize)]
struct Stored {
    #[serde(default, deserialize_with = "null_as_default")]
    metadata: StoredMeta,
}

#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct StoredMeta {
    #[serde(deserialize_with = "null_as_default")]
    uid: String,
    namespace: Option<String>,
    #[serde(deserialize_with = "null_as_default")]
    owner_references: Vec<Owner>,
    #[serde(deserialize_with = "null_as_default")]
    finalizers: Vec<String>,
    deletion_timestamp: Option<serde::de::IgnoredAny>,
}

/// A Namespace's finalizers (`spec.finalizers`), which hold its deletion until it is empty.
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct StoredNamespace {
    #[serde(deserialize_with = "null_as_default")]
    spec: NamespaceSpec,
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct NamespaceSpec {
    #[serde(deserialize_with = "null_as_default")]
    finalizers: Vec<serde::de::IgnoredAny>,
}

impl Meta {
    /// What the collector remembers of a stored object; `None` if it cannot be read.
    fn read(resources: &Resources, kv: &KeyValue) -> Option<Meta> {
        let bytes = resources.plaintext_bytes(kv).ok()?;
        let stored: Stored = match serde_json::from_slice(&bytes) {
            Ok(stored) => stored,
            Err(e) => {
                tracing::debug!(key = kv.key, error = %e, "cannot read a stored object's metadata");
                return None;
            }
        };
        let namespace_finalizers = kv.key.starts_with(NAMESPACES_PREFIX)
            && serde_json::from_slice::<StoredNamespace>(&bytes)
                .is_ok_and(|namespace| !namespace.spec.finalizers.is_empty());
        let meta = stored.metadata;
        Some(Meta {
            uid: meta.uid,
            namespace: meta.namespace,
            owners: meta.owner_references,
            finalizers: meta.finalizers,
            namespace_finalizers,
            deleting: meta.deletion_timestamp.is_some(),
        })
    }

    /// Whether the collector has something to do for this object itself.
    fn needs_attention(&self) -> bool {
        !self.owners.is_empty()
            || (self.deleting
                && (self.namespace_finalizers
                    || self
                        .finalizers
                        .iter()
                        .any(|f| f == FOREGROUND_FINALIZER || f == ORPHAN_FINALIZER)))
    }
}

#[derive(Default)]
struct Index {
    objects: HashMap<String, Meta>,
    by_uid: HashMap<String, String>,
    dependents: HashMap<String, BTreeSet<String>>,
}

impl Index {
    fn remove(&mut self, key: &str) -> Option<Meta> {
        let meta = self.objects.remove(key)?;
        self.by_uid.remove(&meta.uid);
        for owner in &meta.owners {
            if let Some(set) = self.dependents.get_mut(&owner.uid) {
                set.remove(key);
                if set.is_empty() {
                    self.dependents.remove(&owner.uid);
                }
            }
        }
        Some(meta)
    }

    fn put(&mut self, key: &str, meta: Meta) {
        self.remove(key);
        self.by_uid.insert(meta.uid.clone(), key.to_string());
        for owner in &meta.owners {
            self.dependents
                .entry(owner.uid.clone())
                .or_default()
                .insert(key.to_string());
        }
        self.objects.insert(key.to_string(), meta);
    }

    /// Whether the object waits on the collector, which is what a resync looks at again:
    /// being deleted with a finalizer the collector removes, or owned by none of the owners
    /// the index holds (its owners are then confirmed gone in the store, and it is deleted).
    /// An object with an owner at hand needs nothing until a change says otherwise; at every
    /// resync, looking at each one again cost an idle fleet's server a few percent of a core.
    fn waiting(&self, meta: &Meta) -> bool {
        meta.needs_attention()
            && (meta.deleting || !meta.owners.iter().any(|o| self.by_uid.contains_key(&o.uid)))
    }

    /// The keys a change to `key` may affect: itself, its owners, its dependents and its
    /// namespace.
    fn affected(&self, key: &str, meta: &Meta) -> Vec<String> {
        let mut keys = vec![key.to_string()];
        keys.extend(
            meta.owners
                .iter()
                .filter_map(|o| self.by_uid.get(&o.uid).cloned()),
        );
        keys.extend(
            self.dependents
                .get(&meta.uid)
                .into_iter()
                .flatten()
                .cloned(),
        );
        if let Some(ns) = &meta.namespace {
            keys.push(format!("{NAMESPACES_PREFIX}{ns}"));
        }
        keys
    }
}

/// Runs the collector until `stop` turns true, restarting it after store errors.
pub async fn run(resources: Resources, mut stop: watch::Receiver<bool>) {
    loop {
        match collect(&resources, &mut stop).await {
            Ok(()) => return,
            Err(e) => {
                tracing::warn!(error = %e, "garbage collector restarting");
                tokio::select! {
                    _ = stop.changed() => return,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
        }
    }
}

fn decode(resources: &Resources, kv: &KeyValue) -> Option<Value> {
    resources.plaintext(kv).ok()
}

async fn collect(resources: &Resources, stop: &mut watch::Receiver<bool>) -> ApiResult<()> {
    let store = &resources.store;
    // Read everything page by page at one revision, then watch from that revision on.
    let mut index = Index::default();
    let mut options = ListOptions {
        start_after: None,
        limit: 1000,
        revision: 0,
        max_bytes: crate::resources::LIST_PAGE_BYTES,
    };
    let revision = loop {
        let page = store.list(REGISTRY_PREFIX, options.clone()).await?;
        for kv in &page.items {
            if let Some(meta) = Meta::read(resources, kv) {
                index.put(&kv.key, meta);
            }
        }
        if !page.more {
            break page.revision;
        }
        options = ListOptions {
            start_after: page.items.last().map(|kv| kv.key.clone()),
            limit: 1000,
            revision: page.revision,
            max_bytes: crate::resources::LIST_PAGE_BYTES,
        };
    };
    let mut pending: BTreeSet<String> = index
        .objects
        .iter()
        .filter(|(_, m)| m.needs_attention())
        .map(|(k, _)| k.clone())
        .collect();
    let mut changes = store.watch(REGISTRY_PREFIX, revision).await?;
    let mut resync = tokio::time::interval(Duration::from_secs(30));
    loop {
        while let Some(key) = pending.pop_first() {
            if let Err(e) = process(resources, &index, &key).await {
                tracing::debug!(key, error = %e, "garbage collection step failed; will retry");
            }
        }
        tokio::select! {
            _ = stop.changed() => return Ok(()),
            _ = resync.tick() => {
                pending.extend(index.objects.iter().filter(|(_, m)| index.waiting(m)).map(|(k, _)| k.clone()));
            }
            change = changes.next() => {
                let Some(change) = change else { return Err(ApiError::internal("store watch ended")) };
                let change = change?;
                let key = change.kv.key.clone();
                let meta = match change.kind {
                    EventKind::Put => Meta::read(resources, &change.kv),
                    EventKind::Delete => None,
                    // Only asked for by watch_with_progress.
                    EventKind::Progress => continue,
                };
                let previous = index.remove(&key);
                if let Some(previous) = &previous {
                    pending.extend(index.affected(&key, previous));
                }
                if let Some(meta) = meta {
                    index.put(&key, meta.clone());
                    pending.extend(index.affected(&key, &meta));
                }
                pending.retain(|k| index.objects.get(k).is_some_and(Meta::needs_attention));
            }
        }
    }
}

/// Where a store key points: its resource type and namespace.
fn scope_of(resources: &Resources, key: &str) -> Option<(Scope, String)> {
    let rest = key.strip_prefix(REGISTRY_PREFIX)?;
    let parts: Vec<&str> = rest.split('/').collect();
    let (group, plural) = (
        if parts[0] == "core" { "" } else { parts[0] },
        *parts.get(1)?,
    );
    let namespaced = resources.registry.get(group, plural)?.namespaced;
    let (namespace, name) = match (namespaced, &parts[2..]) {
        (true, [ns, name]) => (Some(*ns), name.to_string()),
        (false, [name]) => (None, name.to_string()),
        _ => return None,
    };
    Some((resources.scope(group, plural, namespace)?, name))
}

fn options() -> WriteOptions {
    WriteOptions {
        field_manager: MANAGER.into(),
        ..Default::default()
    }
}

async fn process(resources: &Resources, index: &Index, key: &str) -> ApiResult<()> {
    let Some(meta) = index.objects.get(key) else {
        return Ok(());
    };
    if !index.waiting(meta) {
        // Every change marks the objects it may affect; most have their owner at hand.
        return Ok(());
    }
    let Some((scope, name)) = scope_of(resources, key) else {
        return Ok(());
    };
    if meta.deleting {
        let dependents: Vec<String> = index
            .dependents
            .get(&meta.uid)
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        if meta.finalizers.iter().any(|f| f == ORPHAN_FINALIZER) {
            for dependent in &dependents {
                if let Some((dep_scope, dep_name)) = scope_of(resources, dependent) {
                    let uid = meta.uid.clone();
                    resources
                        .write_loop(&dep_scope, &dep_name, None, &options(), None, |current| {
                            let mut object = current
                                .cloned()
                                .ok_or_else(|| ApiError::internal("dependent vanished"))?;
                            if let Some(refs) = object["metadata"]["ownerReferences"].as_array_mut()
                            {
                                refs.retain(|r| r["uid"] != json!(uid));
                            }
                            Ok(object)
                        })
                        .await?;
                }
            }
            return remove_finalizer(resources, &scope, &name, ORPHAN_FINALIZER).await;
        }
        if meta.finalizers.iter().any(|f| f == FOREGROUND_FINALIZER) {
            if dependents.is_empty() {
                return remove_finalizer(resources, &scope, &name, FOREGROUND_FINALIZER).await;
            }
            for dependent in &dependents {
                let waiting = index.objects.get(dependent).is_some_and(|m| m.deleting);
                if !waiting && let Some((dep_scope, dep_name)) = scope_of(resources, dependent) {
                    let options = DeleteOptions {
                        propagation: Some(Propagation::Foreground),
                        ..Default::default()
                    };
                    ignore_not_found(
                        resources
                            .delete(&dep_scope, &dep_name, &options)
                            .await
                            .map(|_| ()),
                    )?;
                }
            }
            return Ok(());
        }
        if meta.namespace_finalizers {
            return empty_namespace(resources, &scope, &name).await;
        }
        return Ok(());
    }
    // None of its owners is in the index: each is confirmed gone in the store first.
    for owner in &meta.owners {
        if owner_exists(resources, owner, meta.namespace.as_deref()).await? {
            return Ok(());
        }
    }
    tracing::info!(key, "deleting an object whose owners are all gone");
    ignore_not_found(
        resources
            .delete(&scope, &name, &DeleteOptions::default())
            .await
            .map(|_| ()),
    )
}

/// Confirms an owner's absence in the store itself, so an index that lags never deletes a
/// dependent whose owner was just created.
async fn owner_exists(
    resources: &Resources,
    owner: &Owner,
    namespace: Option<&str>,
) -> ApiResult<bool> {
    let Some(rt) = resources.registry.by_kind(&owner.api_version, &owner.kind) else {
        return Ok(false);
    };
    let key = rt.key(if rt.namespaced { namespace } else { None }, &owner.name);
    Ok(match resources.store.get(&key).await? {
        Some(kv) => {
            decode(resources, &kv).is_some_and(|o| o["metadata"]["uid"] == json!(owner.uid))
        }
        None => false,
    })
}

async fn remove_finalizer(
    resources: &Resources,
    scope: &Scope,
    name: &str,
    finalizer: &str,
) -> ApiResult<()> {
    let result = resources
        .write_loop(scope, name, None, &options(), None, |current| {
            let mut object = current
                .cloned()
                .ok_or_else(|| ApiError::not_found(&scope.rt.plural, &scope.rt.group, name))?;
            if let Some(list) = object["metadata"]["finalizers"].as_array_mut() {
                list.retain(|f| f != finalizer);
            }
            Ok(object)
        })
        .await;
    ignore_not_found(result.map(|_| ()))
}

/// Deletes everything in a terminating namespace; once nothing is left, drops the namespace
/// finalizer, which deletes the namespace.
async fn empty_namespace(resources: &Resources, scope: &Scope, namespace: &str) -> ApiResult<()> {
    let mut remaining = 0;
    for rt in resources
        .registry
        .all()
        .into_iter()
        .filter(|rt| rt.namespaced && rt.stored_as.is_none())
    {
        let version = rt.storage_version().name.clone();
        let inner = Scope {
            rt: rt.clone(),
            version,
            namespace: Some(namespace.to_string()),
        };
        let listed = resources
            .store
            .list(&rt.list_prefix(Some(namespace)), ListOptions::default())
            .await?;
        for kv in listed.items {
            remaining += 1;
            let Some(object) = decode(resources, &kv) else {
                continue;
            };
            if object["metadata"]["deletionTimestamp"].is_null() {
                let name = object["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                ignore_not_found(
                    resources
                        .delete(&inner, &name, &DeleteOptions::default())
                        .await
                        .map(|_| ()),
                )?;
            }
        }
    }
    if remaining > 0 {
        return Ok(());
    }
    let result = resources
        .write_loop(scope, namespace, None, &options(), None, |current| {
            let mut object = current
                .cloned()
                .ok_or_else(|| ApiError::not_found("namespaces", "", namespace))?;
            if let Some(list) = object["spec"]["finalizers"].as_array_mut() {
                list.retain(|f| f != NAMESPACE_FINALIZER);
            }
            Ok(object)
        })
        .await;
    ignore_not_found(result.map(|_| ()))
}

fn ignore_not_found(result: ApiResult<()>) -> ApiResult<()> {
    match result {
        Err(ApiError::NotFound { .. }) => Ok(()),
        other => other,
    }
}

/// Compacts store history every `interval`, keeping one interval's worth (as kube-apiserver
/// does with etcd), so watches can resume across short disconnects and history stays bounded.
pub async fn compact_periodically(
    store: Arc<dyn Store>,
    interval: Duration,
    mut stop: watch::Receiver<bool>,
) {
    if interval.is_zero() {
        return;
    }
    let mut previous = None;
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = tokio::time::sleep(interval) => {}
        }
        match store.current_revision().await {
            Ok(now) => {
                if let Some(revision) = previous {
                    match store.compact(revision).await {
                        Ok(()) => tracing::debug!(revision, "compacted store history"),
                        Err(e) => tracing::warn!(error = %e, "compaction failed"),
                    }
                }
                previous = Some(now);
            }
            Err(e) => tracing::warn!(error = %e, "compaction skipped: store unavailable"),
        }
    }
}

/// What expiring an Event reads of it: when it was last seen, and its name. Read straight
/// from the stored bytes, the rest of each Event skipped: the whole list is read at every look.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct EventSeen<'a> {
    #[serde(borrow, default)]
    last_timestamp: Option<&'a str>,
    #[serde(borrow, default)]
    event_time: Option<&'a str>,
    #[serde(borrow, default)]
    first_timestamp: Option<&'a str>,
    #[serde(borrow)]
    metadata: EventMeta<'a>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct EventMeta<'a> {
    #[serde(borrow)]
    name: std::borrow::Cow<'a, str>,
    #[serde(borrow, default)]
    namespace: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    creation_timestamp: Option<&'a str>,
}

/// Deletes Events last seen more than `ttl` ago (kube-apiserver's `--event-ttl`, one hour by
/// default): they say what happened lately, not forever. It looks every sixth of `ttl` (ten
/// minutes for an hour), so an Event outlives its time by at most that: each look reads every
/// Event, and once a minute, in each of a thousand simulated clusters, was most of an idle
/// fleet's CPU.
pub async fn expire_events(resources: Resources, ttl: Duration, mut stop: watch::Receiver<bool>) {
    let Some(scope) = resources.scope("", "events", None) else {
        return;
    };
    let period = (ttl / 6).clamp(Duration::from_secs(1), Duration::from_secs(600));
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = tokio::time::sleep(period) => {}
        }
        let cutoff = chrono::Utc::now()
            - chrono::Duration::from_std(ttl).unwrap_or(chrono::Duration::hours(1));
        let expired = match expired_events(&resources, &scope, cutoff).await {
            Ok(expired) => expired,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list events to expire them");
                continue;
            }
        };
        for (namespace, name) in expired {
            let event_scope = Scope {
                namespace,
                ..scope.clone()
            };
            match resources
                .delete(&event_scope, &name, &Default::default())
                .await
            {
                Ok(_) | Err(crate::status::ApiError::NotFound { .. }) => {}
                Err(e) => tracing::warn!(error = %e, event = name, "cannot expire an event"),
            }
        }
    }
}

/// The Events (namespace, name) last seen before `cutoff`, read from the store page by page.
async fn expired_events(
    resources: &Resources,
    scope: &Scope,
    cutoff: chrono::DateTime<chrono::Utc>,
) -> ApiResult<Vec<(Option<String>, String)>> {
    let prefix = scope.rt.list_prefix(None);
    let mut options = ListOptions {
        limit: 1000,
        max_bytes: crate::resources::LIST_PAGE_BYTES,
        ..Default::default()
    };
    let mut expired = Vec::new();
    loop {
        let page = resources.store.list(&prefix, options.clone()).await?;
        for kv in &page.items {
            let Ok(bytes) = resources.plaintext_bytes(kv) else {
                continue;
            };
            let event = match serde_json::from_slice::<EventSeen>(&bytes) {
                Ok(event) => event,
                Err(e) => {
                    // Stored Events passed admission; one that does not parse is kept rather
                    // than guessed about.
                    tracing::debug!(error = %e, key = ?kv.key, "cannot read an event's times");
                    continue;
                }
            };
            let seen = [
                event.last_timestamp,
                event.event_time,
                event.first_timestamp,
            ]
            .into_iter()
            .flatten()
            .next()
            .or(event.metadata.creation_timestamp)
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok());
            if seen.is_some_and(|t| t < cutoff) {
                expired.push((
                    event.metadata.namespace.map(|n| n.into_owned()),
                    event.metadata.name.into_owned(),
                ));
            }
        }
        if !page.more {
            return Ok(expired);
        }
        options.start_after = page.items.last().map(|kv| kv.key.clone());
        options.revision = page.revision;
    }
}
