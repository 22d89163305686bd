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

/// `{"paths": {"apis/apps/v1": {"serverRelativeURL": "...?hash=..."}}}`.
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

/// The v2 document in the protobuf encoding kubectl asks for
/// (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`): gnostic's `openapi.v2`
/// messages, written field by field. kubectl reads it for client-side validation and for
/// `kubectl apply`'s patch; a server that answers 406 turns a typo in `kind:` into
/// "failed to download openapi" instead of "no matches for kind".
pub fn v2_protobuf(document: &Value) -> Vec<u8> {
    let mut out = vec![];
    proto::string(&mut out, 1, document["swagger"].as_str().unwrap_or("2.0"));
    let mut info = vec![];
    proto::string(
        &mut info,
        1,
        document["info"]["title"].as_str().unwrap_or_default(),
    );
    proto::string(
        &mut info,
        2,
        document["info"]["version"].as_str().unwrap_or_default(),
    );
    proto::message(&mut out, 2, &info);
    let mut definitions = vec![];
    for (name, schema) in document["definitions"].as_object().into_iter().flatten() {
        proto::message(&mut definitions, 1, &named(name, &proto_schema(schema)));
    }
    proto::message(&mut out, 9, &definitions);
    out
}

/// A `Named*` pair: name (1) and value (2).
fn named(name: &str, value: &[u8]) -> Vec<u8> {
    let mut pair = vec![];
    proto::string(&mut pair, 1, name);
    proto::message(&mut pair, 2, value);
    pair
}

/// gnostic's `Any`: a JSON value carried as YAML text (field 2), as kube-openapi reads it.
fn proto_any(value: &Value) -> Vec<u8> {
    let mut any = vec![];
    proto::string(
        &mut any,
        2,
        &serde_yaml_ng::to_string(value).unwrap_or_default(),
    );
    any
}

/// gnostic's `Schema` message from a JSON schema; keywords Swagger 2.0 does not have (such
/// as `nullable` or `oneOf`) are left out, as kube-openapi does when it writes v2.
fn proto_schema(schema: &Value) -> Vec<u8> {
    let mut out = vec![];
    let Some(fields) = schema.as_object() else {
        return out;
    };
    for (key, value) in fields {
        match (key.as_str(), value) {
            ("$ref", Value::String(s)) => proto::string(&mut out, 1, s),
            ("format", Value::String(s)) => proto::string(&mut out, 2, s),
            ("title", Value::String(s)) => proto::string(&mut out, 3, s),
            ("description", Value::String(s)) => proto::string(&mut out, 4, s),
            ("default", v) => proto::message(&mut out, 5, &proto_any(v)),
            ("multipleOf", Value::Number(n)) => {
                proto::double(&mut out, 6, n.as_f64().unwrap_or(0.0))
            }
            ("maximum", Value::Number(n)) => proto::double(&mut out, 7, n.as_f64().unwrap_or(0.0)),
            ("exclusiveMaximum", Value::Bool(b)) => proto::boolean(&mut out, 8, *b),
            ("minimum", Value::Number(n)) => proto::double(&mut out, 9, n.as_f64().unwrap_or(0.0)),
            ("exclusiveMinimum", Value::Bool(b)) => proto::boolean(&mut out, 10, *b),
            ("maxLength", Value::Number(n)) => proto::int64(&mut out, 11, n.as_i64().unwrap_or(0)),
            ("minLength", Value::Number(n)) => proto::int64(&mut out, 12, n.as_i64().unwrap_or(0)),
            ("pattern", Value::String(s)) => proto::string(&mut out, 13, s),
            ("maxItems", Value::Number(n)) => proto::int64(&mut out, 14, n.as_i64().unwrap_or(0)),
            ("minItems", Value::Number(n)) => proto::int64(&mut out, 15, n.as_i64().unwrap_or(0)),
            ("uniqueItems", Value::Bool(b)) => proto::boolean(&mut out, 16, *b),
            ("maxProperties", Value::Number(n)) => {
                proto::int64(&mut out, 17, n.as_i64().unwrap_or(0))
            }
            ("minProperties", Value::Number(n)) => {
                proto::int64(&mut out, 18, n.as_i64().unwrap_or(0))
            }
            ("required", Value::Array(names)) => {
                for name in names.iter().filter_map(Value::as_str) {
                    proto::string(&mut out, 19, name);
                }
            }
            ("enum", Value::Array(values)) => {
                for v in values {
                    proto::message(&mut out, 20, &proto_any(v));
                }
            }
            ("additionalProperties", v) => {
                let mut item = vec![];
                match v {
                    Value::Bool(b) => proto::boolean(&mut item, 2, *b),
                    other => proto::message(&mut item, 1, &proto_schema(other)),
                }
                proto::message(&mut out, 21, &item);
            }
            ("type", v) => {
                let mut item = vec![];
                let types: Vec<&str> = match v {
                    Value::String(s) => vec![s.as_str()],
                    Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
                    _ => vec![],
                };
                for t in types {
                    proto::string(&mut item, 1, t);
                }
                proto::message(&mut out, 22, &item);
            }
            ("items", v) => {
                let mut item = vec![];
                let schemas: Vec<&Value> = match v {
                    Value::Array(a) => a.iter().collect(),
                    other => vec![other],
                };
                for s in schemas {
                    proto::message(&mut item, 1, &proto_schema(s));
                }
                proto::message(&mut out, 23, &item);
            }
            ("allOf", Value::Array(parts)) => {
                for part in parts {
                    proto::message(&mut out, 24, &proto_schema(part));
                }
            }
            ("properties", Value::Object(properties)) => {
                let mut item = vec![];
                for (name, property) in properties {
                    proto::message(&mut item, 1, &named(name, &proto_schema(property)));
                }
                proto::message(&mut out, 25, &item);
            }
            ("discriminator", Value::String(s)) => proto::string(&mut out, 26, s),
            ("readOnly", Value::Bool(b)) => proto::boolean(&mut out, 27, *b),
            ("example", v) => proto::message(&mut out, 30, &proto_any(v)),
            (extension, v) if extension.starts_with("x-") => {
                proto::message(&mut out, 31, &named(extension, &proto_any(v)));
            }
            _ => {}
        }
    }
    out
}

/// The protobuf wire format, as much of it as the v2 document needs.
mod proto {
    fn varint(out: &mut Vec<u8>, mut value: u64) {
        while value >= 0x80 {
            out.push((value as u8) | 0x80);
            value >>= 7;
        }
        out.push(value as u8);
    }

    fn key(out: &mut Vec<u8>, field: u32, wire_type: u8) {
        varint(out, (u64::from(field) << 3) | u64::from(wire_type));
    }

    pub fn bytes(out: &mut Vec<u8>, field: u32, data: &[u8]) {
        key(out, field, 2);
        varint(out, data.len() as u64);
        out.extend_from_slice(data);
    }

    pub fn string(out: &mut Vec<u8>, field: u32, text: &str) {
        bytes(out, field, text.as_bytes());
    }

    pub fn message(out: &mut Vec<u8>, field: u32, encoded: &[u8]) {
        bytes(out, field, encoded);
    }

    pub fn boolean(out: &mut Vec<u8>, field: u32, value: bool) {
        key(out, field, 0);
        varint(out, u64::from(value));
    }

    pub fn int64(out: &mut Vec<u8>, field: u32, value: i64) {
        key(out, field, 0);
        varint(out, value as u64);
    }

    pub fn double(out: &mut Vec<u8>, field: u32, value: f64) {
        key(out, field, 1);
        out.extend_from_slice(&value.to_le_bytes());
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn wire_format() {
            let mut out = vec![];
            super::string(&mut out, 1, "2.0");
            super::int64(&mut out, 11, 300);
            super::boolean(&mut out, 8, true);
            assert_eq!(out, [0x0a, 3, b'2', b'.', b'0', 0x58, 0xac, 0x02, 0x40, 1]);
        }
    }
}
