//! Reading Kubernetes objects as JSON and writing their status, the way core's controllers do
//! (Cluster API's "unstructured" access), kept local so the provider depends on the contract
//! and not on core's internals.

use std::collections::BTreeMap;

use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Map, Value, json};

use crate::PROVIDER_NAME;

/// `namespace/name`, the key every log line names an object by.
pub fn key(object: &impl kube::Resource) -> String {
    format!(
        "{}/{}",
        object.meta().namespace.as_deref().unwrap_or_default(),
        object.meta().name.as_deref().unwrap_or_default()
    )
}

/// The value at `path`, `Null` when any step is missing.
pub fn at<'a>(value: &'a Value, path: &[&str]) -> &'a Value {
    path.iter().fold(value, |v, k| &v[*k])
}

/// The strings of a JSON list at `path` (non-strings skipped), empty when absent.
pub fn strings_at(value: &Value, path: &[&str]) -> Vec<String> {
    at(value, path)
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

/// An ownerReference to `owner` as a typed value, for objects built with k8s-openapi types.
pub fn owner_reference(
    owner: &impl kube::Resource,
    api_version: &str,
    kind: &str,
    controller: bool,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
        api_version: api_version.into(),
        kind: kind.into(),
        name: owner.name_any(),
        uid: owner.uid().unwrap_or_default(),
        controller: Some(controller),
        block_owner_deletion: Some(true),
    }
}

/// The labels every object the provider writes for a cluster carries.
pub fn cluster_labels(cluster: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(
        lariat_api::capi::labels::CLUSTER_NAME.to_string(),
        cluster.to_string(),
    )])
}

/// A JSON merge patch that turns `old` into `new` at the top level: changed keys are set,
/// keys `new` lacks are removed (`null`), as status writes need when a failure clears.
pub fn merge_diff(old: &Value, new: &Value) -> Value {
    let mut patch = Map::new();
    let empty = Map::new();
    let old = old.as_object().unwrap_or(&empty);
    let new = new.as_object().unwrap_or(&empty);
    for (k, v) in new {
        if old.get(k) != Some(v) {
            patch.insert(k.clone(), v.clone());
        }
    }
    for k in old.keys() {
        if !new.contains_key(k) {
            patch.insert(k.clone(), Value::Null);
        }
    }
    Value::Object(patch)
}

/// Writes `status` through the status subresource when it differs from what the object has;
/// returns whether it wrote.
pub async fn write_status(
    api: &Api<DynamicObject>,
    object: &DynamicObject,
    status: &Value,
) -> Result<bool, kube::Error> {
    let current = &object.data["status"];
    if current == status {
        return Ok(false);
    }
    let patch = merge_diff(current, status);
    api.patch_status(
        &object.name_any(),
        &patch_params(),
        &Patch::Merge(json!({ "status": patch })),
    )
    .await?;
    Ok(true)
}

/// Field manager for the provider's patches (see [`post_params`]).
pub fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(PROVIDER_NAME.into()),
        ..Default::default()
    }
}

/// Field manager for the provider's writes, so `managedFields` names who set each field.
pub fn post_params() -> kube::api::PostParams {
    kube::api::PostParams {
        field_manager: Some(PROVIDER_NAME.into()),
        ..Default::default()
    }
}

pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Whether a kube error is the API's answer with this HTTP code.
pub fn is_status(error: &kube::Error, code: u16) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_diff_sets_changes_and_removes_missing_keys() {
        let check = |old: Value, new: Value, expect: Value| {
            assert_eq!(merge_diff(&old, &new), expect, "{old} -> {new}");
        };
        check(json!({"a": 1}), json!({"a": 1}), json!({}));
        check(json!({"a": 1}), json!({"a": 2}), json!({"a": 2}));
        check(
            json!({"ready": false, "failureReason": "X"}),
            json!({"ready": true}),
            json!({"ready": true, "failureReason": null}),
        );
        check(Value::Null, json!({"ready": true}), json!({"ready": true}));
    }
}
