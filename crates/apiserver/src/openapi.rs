//! OpenAPI documents for the served kinds: the v3 index with one document per group-version
//! (what `kubectl explain` and `kubectl apply` read) and a v2 document.

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::registry::Registry;

/// `io.x-k8s.cluster.v1beta1.Cluster`: Kubernetes names definitions by reversed group.
fn definition_name(group: &str, version: &str, kind: &str) -> String {
    let reversed: Vec<&str> = if group.is_empty() {
        vec!["io", "k8s", "api", "core"]
    } else {
        group.split('.').rev().collect()
    };
    format!("{}.{version}.{kind}", reversed.join("."))
}

fn schemas(registry: &Registry, group: &str, version: &str) -> Map<String, Value> {
    let mut schemas = Map::new();
    for rt in registry.all().iter().filter(|rt| rt.group == group) {
        let Some(served) = rt.version(version) else {
            continue;
        };
        let mut schema = served.schema.clone().unwrap_or_else(
            || json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
        );
        schema["properties"]["metadata"] = object_meta();
        schema["x-kubernetes-group-version-kind"] =
            json!([{"group": group, "version": version, "kind": rt.kind}]);
        schemas.insert(definition_name(group, version, &rt.kind), schema);
    }
    schemas
}

/// The part of ObjectMeta users write, so `kubectl explain KIND.metadata` has something to say.
fn object_meta() -> Value {
    let string = json!({"type": "string"});
    let map = json!({"type": "object", "additionalProperties": {"type": "string"}});
    json!({
        "type": "object",
        "description": "Standard object's metadata.",
        "properties": {
            "name": string, "generateName": string, "namespace": string, "uid": string,
            "resourceVersion": string, "generation": {"type": "integer", "format": "int64"},
            "creationTimestamp": {"type": "string", "format": "date-time"},
            "deletionTimestamp": {"type": "string", "format": "date-time"},
            "labels": map, "annotations": map,
            "finalizers": {"type": "array", "items": {"type": "string"}},
            "ownerReferences": {"type": "array", "items": {"type": "object", "properties": {
                "apiVersion": string, "kind": string, "name": string, "uid": string,
                "controller": {"type": "boolean"}, "blockOwnerDeletion": {"type": "boolean"}}}},
        }
    })
}

/// Operations on each resource path, tagged with the kind they serve, as kube-apiserver
/// publishes them. kubectl reads them: `explain` to map a resource to its schema, and apply to
/// learn that the server validates fields itself (the `fieldValidation` parameter on PATCH).
fn paths(registry: &Registry, group: &str, version: &str) -> Map<String, Value> {
    let mut paths = Map::new();
    let root = if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    };
    for rt in registry
        .all()
        .iter()
        .filter(|rt| rt.group == group && rt.version(version).is_some())
    {
        let gvk = json!({"group": group, "version": version, "kind": rt.kind});
        let reference = json!({"$ref": format!("#/components/schemas/{}", definition_name(group, version, &rt.kind))});
        let body = json!({"content": {"application/json": {"schema": reference}}});
        let query = |name: &str| json!({"name": name, "in": "query", "schema": {"type": "string"}, "uniqueItems": true});
        let write_params = json!([
            query("dryRun"),
            query("fieldManager"),
            query("fieldValidation")
        ]);
        let mut patch_params = write_params.clone();
        patch_params
            .as_array_mut()
            .expect("array")
            .push(query("force"));
        let operation = |action: &str, params: &Value| {
            json!({
                "x-kubernetes-action": action,
                "x-kubernetes-group-version-kind": gvk,
                "parameters": params,
                "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": reference}}}},
            })
        };
        let collection = if rt.namespaced {
            format!("{root}/namespaces/{{namespace}}/{}", rt.plural)
        } else {
            format!("{root}/{}", rt.plural)
        };
        let mut create = operation("post", &write_params);
        create["requestBody"] = body.clone();
        paths.insert(
            collection.clone(),
            json!({"get": operation("list", &json!([])), "post": create}),
        );
        let mut replace = operation("put", &write_params);
        replace["requestBody"] = body.clone();
        paths.insert(
            format!("{collection}/{{name}}"),
            json!({
                "get": operation("get", &json!([])),
                "put": replace,
                "patch": operation("patch", &patch_params),
                "delete": operation("delete", &json!([query("dryRun")])),
            }),
        );
    }
    paths
}

pub fn v3_document(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let schemas = schemas(registry, group, version);
    if schemas.is_empty() {
        return None;
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "lariat", "version": env!("CARGO_PKG_VERSION")},
        "paths": paths(registry, group, version),
        "components": {"schemas": schemas},
    }))
}

fn hash(document: &Value) -> String {
    let digest = Sha256::digest(document.to_string().as_bytes());
    digest.iter().map(|b| format!("{b:02X}")).collect()
}

/// `{"paths": {"apis/cluster.x-k8s.io/v1beta1": {"serverRelativeURL": "...?hash=..."}}}`.
pub fn v3_index(registry: &Registry) -> Value {
    let mut paths = Map::new();
    let mut seen = vec![];
    for rt in registry.all() {
        for v in &rt.versions {
            let key = (rt.group.clone(), v.name.clone());
            if seen.contains(&key) {
                continue;
            }
            seen.push(key);
            let path = if rt.group.is_empty() {
                format!("api/{}", v.name)
            } else {
                format!("apis/{}/{}", rt.group, v.name)
            };
            if let Some(document) = v3_document(registry, &rt.group, &v.name) {
                paths.insert(path.clone(), json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={}", hash(&document))}));
            }
        }
    }
    json!({"paths": paths})
}

/// One Swagger 2.0 document with every served kind.
pub fn v2_document(registry: &Registry) -> Value {
    let mut definitions = Map::new();
    for rt in registry.all() {
        for v in &rt.versions {
            definitions.extend(schemas(registry, &rt.group, &v.name));
        }
    }
    json!({
        "swagger": "2.0",
        "info": {"title": "lariat", "version": env!("CARGO_PKG_VERSION")},
        "paths": {},
        "definitions": definitions,
    })
}
