//! lariat's resource types and the CustomResourceDefinitions generated from them; no I/O.
//!
//! The API server serves every kind in [`builtin_crds`] through the same generic machinery as a
//! user-installed CRD, so the schema, printer columns, names and subresources it needs all come
//! from the Rust types in [`capi`], [`controlplane`], [`bootstrap`] and [`infrastructure`].

pub mod admission;
pub mod aws;
pub mod bootstrap;
pub mod capi;
pub mod clusterctl;
mod contract;
pub mod controlplane;
pub mod fleet;
pub mod infrastructure;
pub mod management;
pub mod names;
pub mod rancher;
pub mod support;
pub mod tunnel;
mod version;
pub use version::KubernetesVersion;

/// A Kubernetes quantity (`2`, `500m`, `4Gi`, `1e3`, `100n`) as a number of base units;
/// `None` when it is not one.
pub fn parse_quantity(text: &str) -> Option<f64> {
    const SUFFIXES: [(&str, f64); 15] = [
        ("Ki", 1024.0),
        ("Mi", 1024.0 * 1024.0),
        ("Gi", 1024.0 * 1024.0 * 1024.0),
        ("Ti", 1024.0 * 1024.0 * 1024.0 * 1024.0),
        ("Pi", 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0),
        ("Ei", 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
        ("E", 1e18),
    ];
    let text = text.trim();
    let (number, scale) = SUFFIXES
        .iter()
        .find_map(|(suffix, scale)| text.strip_suffix(suffix).map(|n| (n, *scale)))
        .unwrap_or((text, 1.0));
    number.parse::<f64>().ok().map(|n| n * scale)
}

/// A JSON merge patch (RFC 7386) that turns `old` into `new`: `new` itself, with `null` for
/// every field `old` has and `new` does not, at any depth. Writing a status as a plain merge
/// patch would otherwise leave behind what it no longer says (a failure group that is gone).
pub fn merge_patch_from(old: &serde_json::Value, new: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match (old, new) {
        (Value::Object(old), Value::Object(mut new)) => {
            for (key, was) in old {
                match new.remove(key) {
                    None => {
                        new.insert(key.clone(), Value::Null);
                    }
                    Some(now) => {
                        new.insert(key.clone(), merge_patch_from(was, now));
                    }
                }
            }
            Value::Object(new)
        }
        (_, new) => new,
    }
}

#[cfg(test)]
mod merge_patch_tests {
    use super::merge_patch_from;
    use serde_json::json;

    #[test]
    fn fields_that_are_gone_become_null_at_any_depth() {
        let old = json!({"display": {"state": "WaitApplied", "readyClusters": "0/1"},
                         "failureGroups": [{"state": "WaitApplied"}], "summary": {"ready": 0}});
        let new = json!({"display": {"readyClusters": "1/1"}, "summary": {"ready": 1}});
        assert_eq!(
            merge_patch_from(&old, new),
            json!({"display": {"state": null, "readyClusters": "1/1"}, "failureGroups": null,
                   "summary": {"ready": 1}})
        );
    }
}
mod schema;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// The CustomResourceDefinitions lariat serves without anyone installing them.
///
/// First the Cluster API core kinds of `cluster.x-k8s.io/v1beta1`, in the order a cluster is
/// built from the top down (Cluster, MachineDeployment, MachineSet, Machine,
/// MachineHealthCheck); then KubeadmControlPlane and its template
/// (`controlplane.cluster.x-k8s.io/v1beta1`), KubeadmConfig and its template
/// (`bootstrap.cluster.x-k8s.io/v1beta1`), and the in-memory provider's InMemoryCluster,
/// InMemoryMachine and InMemoryMachineTemplate (`infrastructure.cluster.x-k8s.io/v1alpha1`);
/// then the provider inventory (`clusterctl.cluster.x-k8s.io/v1alpha3` Provider); then
/// lariat's own ClusterRegistrationToken (`management.lariat.dev/v1`); last Fleet's kinds
/// (`fleet.cattle.io/v1alpha1`), and Rancher's access kinds (`management.cattle.io/v3`).
pub fn builtin_crds() -> Vec<CustomResourceDefinition> {
    let mut crds = capi::crds();
    crds.extend(controlplane::crds());
    crds.extend(bootstrap::crds());
    crds.extend(infrastructure::crds());
    crds.extend(aws::crds());
    crds.push(clusterctl::crd());
    crds.extend(management::crds());
    crds.extend(fleet::crds());
    crds.extend(rancher::crds());
    crds.iter_mut().for_each(as_upstream_writes_them);
    crds
}

/// Brings what kube-derive generates to the shape upstream's CRDs have, so they validate as
/// upstream's do and install unchanged on a real kube-apiserver:
/// - an optional enum is `nullable: true` with its values only (schemars lists `null` among
///   them, which kubectl's validation refuses);
/// - `spec` is not required of a kind whose spec requires nothing (an `InMemoryCluster`
///   without `spec` is valid upstream); it defaults to `{}`, so stored objects have one.
fn as_upstream_writes_them(crd: &mut CustomResourceDefinition) {
    for version in &mut crd.spec.versions {
        let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        else {
            continue;
        };
        let mut value = serde_json::to_value(&*schema).expect("a schema is JSON");
        drop_null_from_enums(&mut value);
        let spec_requires_nothing = value["properties"]["spec"]
            .get("required")
            .and_then(serde_json::Value::as_array)
            .is_none_or(|required| required.is_empty());
        if spec_requires_nothing
            && let Some(required) = value
                .get_mut("required")
                .and_then(serde_json::Value::as_array_mut)
            && let Some(at) = required.iter().position(|name| name == "spec")
        {
            required.remove(at);
            if required.is_empty() {
                value.as_object_mut().expect("object").remove("required");
            }
            value["properties"]["spec"]["default"] = serde_json::json!({});
        }
        *schema = serde_json::from_value(value).expect("the schema it was");
    }
}

fn drop_null_from_enums(node: &mut serde_json::Value) {
    match node {
        serde_json::Value::Object(fields) => {
            if let Some(serde_json::Value::Array(values)) = fields.get_mut("enum") {
                values.retain(|value| !value.is_null());
            }
            fields.values_mut().for_each(drop_null_from_enums);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(drop_null_from_enums),
        _ => {}
    }
}
