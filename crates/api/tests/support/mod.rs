//! Helpers the integration tests share: finding the upstream reference files, reading CRDs,
//! round-tripping manifests through the typed kinds and checking them against the schemas.

#![allow(dead_code)] // Each test binary uses a different part of this module.

use std::path::PathBuf;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The folder holding the upstream Cluster API CRDs.
///
/// `LARIAT_CAPI_REFERENCE` wins; otherwise `shared/` is looked for beside the repository (where
/// both the developers' machines and CI put it), then at its usual absolute place. A missing
/// folder fails the test rather than skipping it, so a green run always compared something.
pub fn reference_dir() -> PathBuf {
    let mut candidates = Vec::new();
    if let Some(dir) = std::env::var_os("LARIAT_CAPI_REFERENCE") {
        candidates.push(PathBuf::from(dir));
    }
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    candidates.push(manifest.join("../../../shared/reference/cluster-api"));
    candidates.push(PathBuf::from("/work/shared/reference/cluster-api"));
    candidates
        .iter()
        .find(|dir| dir.join("cluster.x-k8s.io_clusters.yaml").is_file())
        .cloned()
        .unwrap_or_else(|| panic!("upstream Cluster API CRDs not found in {candidates:?}"))
}

/// The folder holding the seed documents (`shared/seeds`), found the same way.
pub fn seeds_dir() -> PathBuf {
    reference_dir().join("../../seeds")
}

/// Reads a YAML file into a JSON value.
pub fn read_yaml(path: &std::path::Path) -> Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

/// The entry of `spec.versions` named `version` in a CRD given as JSON.
pub fn version<'a>(crd: &'a Value, version: &str) -> &'a Value {
    crd["spec"]["versions"]
        .as_array()
        .expect("spec.versions is a list")
        .iter()
        .find(|v| v["name"] == version)
        .unwrap_or_else(|| panic!("no version {version} in {}", crd["metadata"]["name"]))
}

/// A generated CRD as JSON, so it can be walked like the upstream YAML.
pub fn to_json(crd: &CustomResourceDefinition) -> Value {
    serde_json::to_value(crd).expect("a CRD serializes")
}

/// The schema of the one version a generated CRD has.
pub fn only_schema(crd: &Value) -> &Value {
    let versions = crd["spec"]["versions"]
        .as_array()
        .expect("spec.versions is a list");
    assert_eq!(versions.len(), 1, "lariat serves one version of each kind");
    &versions[0]["schema"]["openAPIV3Schema"]
}

/// Reads `manifest` as `K`, writes it back, and returns the typed object; the written form must
/// equal the input, so nothing was lost or invented on the way.
pub fn round_trip<K: Serialize + DeserializeOwned>(manifest: &Value) -> K {
    let typed: K = serde_json::from_value(manifest.clone())
        .unwrap_or_else(|e| panic!("reading {}: {e}", manifest["kind"]));
    let written = serde_json::to_value(&typed).expect("a typed object serializes");
    assert_eq!(&written, manifest, "round trip of {}", manifest["kind"]);
    typed
}

/// The problems lariat's API server would find with `manifest`, given the kind's CRD.
pub fn schema_problems<K: CustomResourceExt>(manifest: &Value) -> Vec<String> {
    let crd = to_json(&K::crd());
    // apiVersion, kind and metadata are the API server's own business; see OMITTED in the
    // compatibility test.
    let mut body = manifest.clone();
    for key in ["apiVersion", "kind", "metadata"] {
        body.as_object_mut().unwrap().remove(key);
    }
    validate(&body, only_schema(&crd))
}

/// Collects the places where a schema breaks Kubernetes' structural-schema rules.
pub fn structural_problems(path: &str, node: &Value, problems: &mut Vec<String>) {
    let Some(map) = node.as_object() else {
        problems.push(format!("{path}: schema is not an object"));
        return;
    };
    let typed = map.contains_key("type")
        || map.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true))
        || map.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    if !typed {
        problems.push(format!("{path}: no type"));
    }
    for key in [
        "$ref",
        "$defs",
        "definitions",
        "oneOf",
        "anyOf",
        "allOf",
        "not",
        "uniqueItems",
    ] {
        if map.contains_key(key) {
            problems.push(format!("{path}: uses {key}"));
        }
    }
    if map.contains_key("properties") && map.contains_key("additionalProperties") {
        problems.push(format!("{path}: both properties and additionalProperties"));
    }
    match map.get("type").and_then(Value::as_str) {
        Some("array") if !map.get("items").is_some_and(Value::is_object) => {
            problems.push(format!("{path}: array without an items schema"));
        }
        Some(t) if t != "object" && t != "array" => {
            for key in ["properties", "additionalProperties", "items"] {
                if map.contains_key(key) {
                    problems.push(format!("{path}: {t} with {key}"));
                }
            }
        }
        _ => {}
    }
    if let Some(properties) = map.get("properties").and_then(Value::as_object) {
        for (name, child) in properties {
            structural_problems(&format!("{path}.{name}"), child, problems);
        }
    }
    if let Some(items) = map.get("items") {
        structural_problems(&format!("{path}[]"), items, problems);
    }
    if let Some(additional) = map.get("additionalProperties").filter(|v| v.is_object()) {
        structural_problems(&format!("{path}{{}}"), additional, problems);
    }
}

/// Checks `value` against a structural schema the way the API server would, and returns
/// the problems: wrong types, missing required fields, values outside an enum, and fields the
/// schema does not know (which the API server would prune).
pub fn validate(value: &Value, schema: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    validate_at("", value, schema, &mut problems);
    problems
}

fn validate_at(path: &str, value: &Value, schema: &Value, problems: &mut Vec<String>) {
    if value.is_null() {
        if schema["nullable"] != true {
            problems.push(format!("{path}: null where the schema does not allow it"));
        }
        return;
    }
    if schema["x-kubernetes-preserve-unknown-fields"] == true && schema.get("type").is_none() {
        return;
    }
    if schema["x-kubernetes-int-or-string"] == true {
        if !(value.is_i64() || value.is_string()) {
            problems.push(format!(
                "{path}: {value} is neither an integer nor a string"
            ));
        }
        return;
    }
    let type_ok = match schema["type"].as_str() {
        Some("object") => value.is_object(),
        Some("array") => value.is_array(),
        Some("string") => value.is_string(),
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("number") => value.is_number(),
        Some("boolean") => value.is_boolean(),
        other => {
            problems.push(format!("{path}: schema has no usable type ({other:?})"));
            return;
        }
    };
    if !type_ok {
        problems.push(format!("{path}: {value} is not of type {}", schema["type"]));
        return;
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(value)
    {
        problems.push(format!("{path}: {value} is not one of {}", schema["enum"]));
    }
    match value {
        Value::Object(fields) => {
            for name in schema["required"].as_array().into_iter().flatten() {
                let name = name.as_str().unwrap_or_default();
                if !fields.contains_key(name) {
                    problems.push(format!("{path}.{name}: required but missing"));
                }
            }
            for (name, field) in fields {
                let child = format!("{path}.{name}");
                if let Some(property) = schema["properties"].get(name) {
                    validate_at(&child, field, property, problems);
                } else if schema["additionalProperties"].is_object() {
                    validate_at(&child, field, &schema["additionalProperties"], problems);
                } else if schema["x-kubernetes-preserve-unknown-fields"] != true {
                    problems.push(format!("{child}: unknown field, would be pruned"));
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                validate_at(&format!("{path}[{i}]"), item, &schema["items"], problems);
            }
        }
        _ => {}
    }
}
