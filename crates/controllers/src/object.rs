//! Reading and writing Kubernetes objects as JSON, the way core reads provider objects it does
//! not know the types of (Cluster API's "unstructured" access), and a few shared helpers.

use std::collections::BTreeMap;

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::Error;
use crate::kind::Cached;

/// The field manager lariat's controllers write as.
pub const MANAGER: &str = "lariat-controller-manager";

pub fn str_at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(value, |v, k| v.get(k))?.as_str()
}

pub fn bool_at(value: &Value, path: &[&str]) -> bool {
    path.iter()
        .try_fold(value, |v, k| v.get(k))
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

pub fn i64_at(value: &Value, path: &[&str]) -> Option<i64> {
    path.iter().try_fold(value, |v, k| v.get(k))?.as_i64()
}

/// How long a kind found through discovery is trusted before discovery is asked again (a CRD
/// may be replaced), as Cluster API's deferred REST mapper caches its answers.
const DISCOVERY_TTL: std::time::Duration = std::time::Duration::from_secs(30);

type DiscoveryCache = std::sync::Mutex<
    std::collections::HashMap<(String, String), (ApiResource, std::time::Instant)>,
>;

/// Kinds found, by `(apiVersion, kind)`: every reference a reconcile follows would otherwise
/// cost a discovery request.
static DISCOVERED: std::sync::LazyLock<DiscoveryCache> = std::sync::LazyLock::new(Default::default);

/// The `ApiResource` of an `apiVersion` + `kind`, as served by this API (discovery, cached for
/// [`DISCOVERY_TTL`]; a kind not served is asked about again every time).
pub async fn resource_for(
    client: &Client,
    api_version: &str,
    kind: &str,
) -> Result<ApiResource, Error> {
    let key = (api_version.to_string(), kind.to_string());
    if let Some((resource, found)) = DISCOVERED.lock().expect("lock").get(&key)
        && found.elapsed() < DISCOVERY_TTL
    {
        return Ok(resource.clone());
    }
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (resource, _) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .map_err(|e| Error::UnknownKind {
            kind: format!("{kind}.{api_version}"),
            source: e,
        })?;
    DISCOVERED
        .lock()
        .expect("lock")
        .insert(key, (resource.clone(), std::time::Instant::now()));
    Ok(resource)
}

/// A namespaced dynamic API for a referenced kind.
pub async fn api_for(
    client: &Client,
    namespace: &str,
    api_version: &str,
    kind: &str,
) -> Result<Api<DynamicObject>, Error> {
    let resource = resource_for(client, api_version, kind).await?;
    Ok(Api::namespaced_with(client.clone(), namespace, &resource))
}

/// What the API reads and writes of a kind: any cached kind that deserializes.
pub trait Object: Cached + serde::de::DeserializeOwned + serde::Serialize {}

impl<K: Cached + serde::de::DeserializeOwned + serde::Serialize> Object for K {}

/// A provider's object as its struct, parsed from the JSON its references reach it as
/// (Cluster API's contract): the one reading each provider reconciler starts with.
pub fn parse<K>(object: &DynamicObject) -> Result<K, Error>
where
    K: kube::Resource<DynamicType = ()> + serde::de::DeserializeOwned,
{
    object.clone().try_parse().map_err(|e| {
        Error::Invalid(format!(
            "{} {}/{}: {e}",
            K::kind(&()),
            object.namespace().unwrap_or_default(),
            object.name_any()
        ))
    })
}

/// A merge patch of the object's main resource.
pub async fn patch<K: Object>(api: &Api<K>, name: &str, patch: Value) -> Result<K, Error> {
    Ok(api
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await?)
}

/// The generation a status written after a pass's own spec write may say it observed: the one
/// that write made, when it is the only change since the `read` generation the pass started
/// from (another writer's change in between is not observed yet: the next pass reads it).
/// Saying so spares a second status write, and a second wake-up of every watcher, whose only
/// news would be `observedGeneration`.
pub fn observed_after_own_write(read: i64, written: &kube::api::ObjectMeta) -> i64 {
    match written.generation {
        Some(next) if next == read + 1 => next,
        _ => read,
    }
}

/// A merge patch of the status subresource.
pub async fn patch_status<K: Object>(api: &Api<K>, name: &str, status: Value) -> Result<K, Error> {
    Ok(api
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await?)
}

/// Adds `finalizer` if missing; returns whether it had to.
pub async fn ensure_finalizer<K: Object>(
    api: &Api<K>,
    object: &K,
    finalizer: &str,
) -> Result<bool, Error> {
    if object.finalizers().iter().any(|f| f == finalizer) {
        return Ok(false);
    }
    let mut finalizers = object.finalizers().to_vec();
    finalizers.push(finalizer.to_string());
    let rv = object.resource_version();
    patch(
        api,
        &object.name_any(),
        json!({"metadata": {"finalizers": finalizers, "resourceVersion": rv}}),
    )
    .await?;
    Ok(true)
}

/// Removes only `finalizer`, guarded by the resourceVersion it was read at.
pub async fn remove_finalizer<K: Object>(
    api: &Api<K>,
    object: &K,
    finalizer: &str,
) -> Result<(), Error> {
    let finalizers: Vec<&String> = object
        .finalizers()
        .iter()
        .filter(|f| *f != finalizer)
        .collect();
    let rv = object.resource_version();
    match patch(
        api,
        &object.name_any(),
        json!({"metadata": {"finalizers": finalizers, "resourceVersion": rv}}),
    )
    .await
    {
        Err(e) if is_not_found(&e) => Ok(()),
        Ok(_) => Ok(()),
        Err(e) => Err(e),
    }
}

/// An ownerReference to `owner`, optionally as its controller.
pub fn owner_reference(owner: &impl Cached, controller: bool) -> Value {
    let (api_version, kind) = owner.type_names();
    json!({
        "apiVersion": api_version,
        "kind": kind,
        "name": owner.name_any(),
        "uid": owner.uid().unwrap_or_default(),
        "controller": controller,
        "blockOwnerDeletion": true,
    })
}

/// The name of the Cluster API object of `kind` (a Cluster, a MachinePool) that owns `object`,
/// once core has claimed it.
pub fn cluster_api_owner(object: &impl kube::ResourceExt, kind: &str) -> Option<String> {
    object
        .owner_references()
        .iter()
        .find(|o| o.kind == kind && o.api_version.starts_with("cluster.x-k8s.io/"))
        .map(|o| o.name.clone())
}

/// Makes `owner` an owner of `object` if it is not yet, keeping other owners. The whole list
/// is written, guarded by the version it was read at, so an owner added meanwhile is not lost
/// (the object may come from a cache, or have been written since): on a conflict the object is
/// read again and the owner added to what it holds then.
pub async fn ensure_owner<K: Object>(
    api: &Api<K>,
    object: &K,
    reference: Value,
) -> Result<(), Error> {
    let uid = reference["uid"].as_str().unwrap_or_default();
    let mut fresh: Option<K> = None;
    loop {
        let current = fresh.as_ref().unwrap_or(object);
        if current.owner_references().iter().any(|o| o.uid == uid) {
            return Ok(());
        }
        let mut owners: Vec<Value> = current
            .owner_references()
            .iter()
            .map(|o| serde_json::to_value(o).unwrap_or_default())
            .collect();
        owners.push(reference.clone());
        let written = patch(
            api,
            &current.name_any(),
            json!({"metadata": {"ownerReferences": owners, "resourceVersion": current.resource_version()}}),
        )
        .await;
        match written {
            Err(Error::Kube(kube::Error::Api(e))) if e.code == 409 && fresh.is_none() => {
                fresh = Some(api.get(&object.name_any()).await?);
            }
            other => return other.map(drop),
        }
    }
}

/// Adds labels if any is missing or different.
pub async fn ensure_labels<K: Object>(
    api: &Api<K>,
    object: &K,
    labels: &BTreeMap<String, String>,
) -> Result<(), Error> {
    let current = object.labels();
    if labels.iter().all(|(k, v)| current.get(k) == Some(v)) {
        return Ok(());
    }
    patch(
        api,
        &object.name_any(),
        json!({"metadata": {"labels": labels}}),
    )
    .await?;
    Ok(())
}

/// Whether the error is the API's 404.
pub fn is_not_found(error: &Error) -> bool {
    matches!(error, Error::Kube(kube::Error::Api(status)) if status.code == 404)
}

/// Deletes an object if it exists; returns whether it is gone already.
pub async fn delete_if_present<K: Object>(api: &Api<K>, name: &str) -> Result<bool, Error> {
    match api.get_opt(name).await? {
        None => Ok(true),
        Some(object) => {
            if object.meta().deletion_timestamp.is_none() {
                match api.delete(name, &Default::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 404 => return Ok(true),
                    Err(e) => return Err(e.into()),
                }
            }
            Ok(api.get_opt(name).await?.is_none())
        }
    }
}

/// A Go-style duration (`"1m30s"`, `"500ms"`), as Cluster API writes them; `None` if unset or
/// malformed.
pub fn duration(value: &Value) -> Option<std::time::Duration> {
    let parsed: kube::core::Duration = value.as_str()?.parse().ok()?;
    Some(std::time::Duration::from(parsed))
}

pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Now, to the second, as Kubernetes writes times.
pub fn now_time() -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
    use k8s_openapi::jiff::Timestamp;
    let now = Timestamp::now();
    let seconds = Timestamp::from_second(now.as_second()).unwrap_or(now);
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(seconds)
}

/// A short random suffix for generated names, from the alphabet Kubernetes uses.
pub fn random_suffix() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}
