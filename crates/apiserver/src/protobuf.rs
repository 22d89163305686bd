//! Kubernetes' protobuf encoding for the core kinds clients create with typed clientsets.
//!
//! client-go's typed clients (and so `kubectl create namespace|configmap|secret`) send
//! `application/vnd.kubernetes.protobuf` bodies. lariat decodes those few messages into the
//! JSON form everything else uses; responses stay JSON, which every client accepts.

use std::collections::BTreeMap;

use base64::Engine;
use prost::Message;
use serde_json::{Map, Value, json};

use crate::status::{ApiError, ApiResult};

/// Every Kubernetes protobuf body starts with these four bytes.
const MAGIC: &[u8] = b"k8s\0";

#[derive(Clone, PartialEq, Message)]
struct Unknown {
    #[prost(message, optional, tag = "1")]
    type_meta: Option<TypeMeta>,
    #[prost(bytes = "vec", optional, tag = "2")]
    raw: Option<Vec<u8>>,
}

#[derive(Clone, PartialEq, Message)]
struct TypeMeta {
    #[prost(string, optional, tag = "1")]
    api_version: Option<String>,
    #[prost(string, optional, tag = "2")]
    kind: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct ObjectMeta {
    #[prost(string, optional, tag = "1")]
    name: Option<String>,
    #[prost(string, optional, tag = "2")]
    generate_name: Option<String>,
    #[prost(string, optional, tag = "3")]
    namespace: Option<String>,
    #[prost(string, optional, tag = "5")]
    uid: Option<String>,
    #[prost(string, optional, tag = "6")]
    resource_version: Option<String>,
    #[prost(btree_map = "string, string", tag = "11")]
    labels: BTreeMap<String, String>,
    #[prost(btree_map = "string, string", tag = "12")]
    annotations: BTreeMap<String, String>,
    #[prost(message, repeated, tag = "13")]
    owner_references: Vec<OwnerReference>,
    #[prost(string, repeated, tag = "14")]
    finalizers: Vec<String>,
}

#[derive(Clone, PartialEq, Message)]
struct OwnerReference {
    #[prost(string, optional, tag = "1")]
    kind: Option<String>,
    #[prost(string, optional, tag = "3")]
    name: Option<String>,
    #[prost(string, optional, tag = "4")]
    uid: Option<String>,
    #[prost(string, optional, tag = "5")]
    api_version: Option<String>,
    #[prost(bool, optional, tag = "6")]
    controller: Option<bool>,
    #[prost(bool, optional, tag = "7")]
    block_owner_deletion: Option<bool>,
}

#[derive(Clone, PartialEq, Message)]
struct ConfigMap {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(btree_map = "string, string", tag = "2")]
    data: BTreeMap<String, String>,
    #[prost(btree_map = "string, bytes", tag = "3")]
    binary_data: BTreeMap<String, Vec<u8>>,
    #[prost(bool, optional, tag = "4")]
    immutable: Option<bool>,
}

#[derive(Clone, PartialEq, Message)]
struct Secret {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(btree_map = "string, bytes", tag = "2")]
    data: BTreeMap<String, Vec<u8>>,
    #[prost(string, optional, tag = "3")]
    type_: Option<String>,
    #[prost(btree_map = "string, string", tag = "4")]
    string_data: BTreeMap<String, String>,
    #[prost(bool, optional, tag = "5")]
    immutable: Option<bool>,
}

#[derive(Clone, PartialEq, Message)]
struct Namespace {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    spec: Option<NamespaceSpec>,
}

#[derive(Clone, PartialEq, Message)]
struct NamespaceSpec {
    #[prost(string, repeated, tag = "1")]
    finalizers: Vec<String>,
}

/// authorization.k8s.io/v1 SelfSubjectAccessReview, which `kubectl auth can-i` sends.
#[derive(Clone, PartialEq, Message)]
struct SelfSubjectAccessReview {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    spec: Option<SelfSubjectAccessReviewSpec>,
}

/// rbac.authorization.k8s.io/v1 Role and ClusterRole (`kubectl create role|clusterrole`).
#[derive(Clone, PartialEq, Message)]
struct RbacRole {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(message, repeated, tag = "2")]
    rules: Vec<PolicyRule>,
    #[prost(message, optional, tag = "3")]
    aggregation_rule: Option<AggregationRule>,
}

#[derive(Clone, PartialEq, Message)]
struct PolicyRule {
    #[prost(string, repeated, tag = "1")]
    verbs: Vec<String>,
    #[prost(string, repeated, tag = "2")]
    api_groups: Vec<String>,
    #[prost(string, repeated, tag = "3")]
    resources: Vec<String>,
    #[prost(string, repeated, tag = "4")]
    resource_names: Vec<String>,
    #[prost(string, repeated, tag = "5")]
    non_resource_urls: Vec<String>,
}

#[derive(Clone, PartialEq, Message)]
struct AggregationRule {
    #[prost(message, repeated, tag = "1")]
    cluster_role_selectors: Vec<LabelSelector>,
}

#[derive(Clone, PartialEq, Message)]
struct LabelSelector {
    #[prost(btree_map = "string, string", tag = "1")]
    match_labels: BTreeMap<String, String>,
    #[prost(message, repeated, tag = "2")]
    match_expressions: Vec<LabelSelectorRequirement>,
}

#[derive(Clone, PartialEq, Message)]
struct LabelSelectorRequirement {
    #[prost(string, optional, tag = "1")]
    key: Option<String>,
    #[prost(string, optional, tag = "2")]
    operator: Option<String>,
    #[prost(string, repeated, tag = "3")]
    values: Vec<String>,
}

/// rbac.authorization.k8s.io/v1 RoleBinding and ClusterRoleBinding (`kubectl create
/// rolebinding|clusterrolebinding`).
#[derive(Clone, PartialEq, Message)]
struct RbacBinding {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(message, repeated, tag = "2")]
    subjects: Vec<Subject>,
    #[prost(message, optional, tag = "3")]
    role_ref: Option<RoleRef>,
}

#[derive(Clone, PartialEq, Message)]
struct Subject {
    #[prost(string, optional, tag = "1")]
    kind: Option<String>,
    #[prost(string, optional, tag = "2")]
    api_group: Option<String>,
    #[prost(string, optional, tag = "3")]
    name: Option<String>,
    #[prost(string, optional, tag = "4")]
    namespace: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct RoleRef {
    #[prost(string, optional, tag = "1")]
    api_group: Option<String>,
    #[prost(string, optional, tag = "2")]
    kind: Option<String>,
    #[prost(string, optional, tag = "3")]
    name: Option<String>,
}

/// v1 ServiceAccount, which `kubectl create serviceaccount` sends.
#[derive(Clone, PartialEq, Message)]
struct ServiceAccount {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(message, repeated, tag = "2")]
    secrets: Vec<ObjectReference>,
    #[prost(message, repeated, tag = "3")]
    image_pull_secrets: Vec<LocalObjectReference>,
    #[prost(bool, optional, tag = "4")]
    automount_service_account_token: Option<bool>,
}

/// v1 ObjectReference, the fields a ServiceAccount's `secrets` use.
#[derive(Clone, PartialEq, Message)]
struct ObjectReference {
    #[prost(string, optional, tag = "1")]
    kind: Option<String>,
    #[prost(string, optional, tag = "2")]
    namespace: Option<String>,
    #[prost(string, optional, tag = "3")]
    name: Option<String>,
    #[prost(string, optional, tag = "4")]
    uid: Option<String>,
    #[prost(string, optional, tag = "5")]
    api_version: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct LocalObjectReference {
    #[prost(string, optional, tag = "1")]
    name: Option<String>,
}

/// authentication.k8s.io/v1 TokenRequest, which `kubectl create token` sends.
#[derive(Clone, PartialEq, Message)]
struct TokenRequest {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    spec: Option<TokenRequestSpec>,
}

#[derive(Clone, PartialEq, Message)]
struct TokenRequestSpec {
    #[prost(string, repeated, tag = "1")]
    audiences: Vec<String>,
    #[prost(message, optional, tag = "3")]
    bound_object_ref: Option<BoundObjectReference>,
    #[prost(int64, optional, tag = "4")]
    expiration_seconds: Option<i64>,
}

#[derive(Clone, PartialEq, Message)]
struct BoundObjectReference {
    #[prost(string, optional, tag = "1")]
    kind: Option<String>,
    #[prost(string, optional, tag = "2")]
    api_version: Option<String>,
    #[prost(string, optional, tag = "3")]
    name: Option<String>,
    #[prost(string, optional, tag = "4")]
    uid: Option<String>,
}

/// authorization.k8s.io/v1 SelfSubjectRulesReview, which `kubectl auth can-i --list` sends.
#[derive(Clone, PartialEq, Message)]
struct SelfSubjectRulesReview {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    spec: Option<SelfSubjectRulesReviewSpec>,
}

#[derive(Clone, PartialEq, Message)]
struct SelfSubjectRulesReviewSpec {
    #[prost(string, optional, tag = "1")]
    namespace: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct SelfSubjectAccessReviewSpec {
    #[prost(message, optional, tag = "1")]
    resource_attributes: Option<ResourceAttributes>,
    #[prost(message, optional, tag = "2")]
    non_resource_attributes: Option<NonResourceAttributes>,
}

#[derive(Clone, PartialEq, Message)]
struct ResourceAttributes {
    #[prost(string, optional, tag = "1")]
    namespace: Option<String>,
    #[prost(string, optional, tag = "2")]
    verb: Option<String>,
    #[prost(string, optional, tag = "3")]
    group: Option<String>,
    #[prost(string, optional, tag = "4")]
    version: Option<String>,
    #[prost(string, optional, tag = "5")]
    resource: Option<String>,
    #[prost(string, optional, tag = "6")]
    subresource: Option<String>,
    #[prost(string, optional, tag = "7")]
    name: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct NonResourceAttributes {
    #[prost(string, optional, tag = "1")]
    path: Option<String>,
    #[prost(string, optional, tag = "2")]
    verb: Option<String>,
}

fn b64(bytes: &[u8]) -> Value {
    json!(base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// Sets `key` unless `value` is absent or the empty string (proto2's optional strings
/// arrive empty where JSON would leave the field out).
fn insert_some(map: &mut Map<String, Value>, key: &str, value: Option<Value>) {
    if let Some(value) = value.filter(|v| v.as_str() != Some("")) {
        map.insert(key.into(), value);
    }
}

/// An object of the string fields that are set.
fn strings<const N: usize>(fields: [(&str, Option<String>); N]) -> Value {
    let mut object = Map::new();
    for (key, value) in fields {
        insert_some(&mut object, key, value.map(Value::from));
    }
    Value::Object(object)
}

fn metadata(meta: Option<ObjectMeta>) -> Value {
    let meta = meta.unwrap_or_default();
    let mut out = Map::new();
    insert_some(&mut out, "name", meta.name.map(Value::from));
    insert_some(
        &mut out,
        "generateName",
        meta.generate_name.map(Value::from),
    );
    insert_some(&mut out, "namespace", meta.namespace.map(Value::from));
    insert_some(&mut out, "uid", meta.uid.map(Value::from));
    insert_some(
        &mut out,
        "resourceVersion",
        meta.resource_version.map(Value::from),
    );
    if !meta.labels.is_empty() {
        out.insert("labels".into(), json!(meta.labels));
    }
    if !meta.annotations.is_empty() {
        out.insert("annotations".into(), json!(meta.annotations));
    }
    if !meta.finalizers.is_empty() {
        out.insert("finalizers".into(), json!(meta.finalizers));
    }
    if !meta.owner_references.is_empty() {
        let refs: Vec<Value> = meta
            .owner_references
            .into_iter()
            .map(|r| {
                let mut o = Map::new();
                insert_some(&mut o, "apiVersion", r.api_version.map(Value::from));
                insert_some(&mut o, "kind", r.kind.map(Value::from));
                insert_some(&mut o, "name", r.name.map(Value::from));
                insert_some(&mut o, "uid", r.uid.map(Value::from));
                insert_some(&mut o, "controller", r.controller.map(Value::from));
                insert_some(
                    &mut o,
                    "blockOwnerDeletion",
                    r.block_owner_deletion.map(Value::from),
                );
                Value::Object(o)
            })
            .collect();
        out.insert("ownerReferences".into(), Value::Array(refs));
    }
    Value::Object(out)
}

/// A Role or ClusterRole as JSON: its rules and aggregation.
fn role_json(role: RbacRole) -> Value {
    let rules: Vec<Value> = role
        .rules
        .into_iter()
        .map(|r| {
            let mut o = json!({"verbs": r.verbs});
            for (key, list) in [
                ("apiGroups", r.api_groups),
                ("resources", r.resources),
                ("resourceNames", r.resource_names),
                ("nonResourceURLs", r.non_resource_urls),
            ] {
                // An empty apiGroups is the core group's `[""]` only when sent so.
                if !list.is_empty() {
                    o[key] = json!(list);
                }
            }
            o
        })
        .collect();
    let mut o = json!({"metadata": metadata(role.metadata), "rules": rules});
    if let Some(aggregation) = role.aggregation_rule {
        let selectors: Vec<Value> = aggregation
            .cluster_role_selectors
            .into_iter()
            .map(|s| {
                let mut selector = json!({"matchLabels": s.match_labels});
                if !s.match_expressions.is_empty() {
                    selector["matchExpressions"] = s
                        .match_expressions
                        .into_iter()
                        .map(|e| {
                            json!({
                                "key": e.key, "operator": e.operator, "values": e.values,
                            })
                        })
                        .collect();
                }
                selector
            })
            .collect();
        o["aggregationRule"] = json!({"clusterRoleSelectors": selectors});
    }
    o
}

/// A RoleBinding or ClusterRoleBinding as JSON.
fn binding_json(binding: RbacBinding) -> Value {
    let subjects: Vec<Value> = binding
        .subjects
        .into_iter()
        .map(|s| {
            let mut o = json!({"kind": s.kind, "name": s.name});
            insert_some(
                o.as_object_mut().expect("object"),
                "apiGroup",
                s.api_group.map(Value::from),
            );
            insert_some(
                o.as_object_mut().expect("object"),
                "namespace",
                s.namespace.map(Value::from),
            );
            o
        })
        .collect();
    let role_ref = binding.role_ref.unwrap_or_default();
    json!({
        "metadata": metadata(binding.metadata),
        "subjects": subjects,
        "roleRef": {"apiGroup": role_ref.api_group, "kind": role_ref.kind, "name": role_ref.name},
    })
}

/// A ServiceAccount as JSON.
fn service_account_json(account: ServiceAccount) -> Value {
    let mut o = json!({"metadata": metadata(account.metadata)});
    let map = o.as_object_mut().expect("object");
    if !account.secrets.is_empty() {
        let secrets: Vec<Value> = account
            .secrets
            .into_iter()
            .map(|r| {
                strings([
                    ("kind", r.kind),
                    ("namespace", r.namespace),
                    ("name", r.name),
                    ("uid", r.uid),
                    ("apiVersion", r.api_version),
                ])
            })
            .collect();
        map.insert("secrets".into(), Value::Array(secrets));
    }
    if !account.image_pull_secrets.is_empty() {
        let names: Vec<Value> = account
            .image_pull_secrets
            .into_iter()
            .map(|r| json!({"name": r.name.unwrap_or_default()}))
            .collect();
        map.insert("imagePullSecrets".into(), Value::Array(names));
    }
    insert_some(
        map,
        "automountServiceAccountToken",
        account.automount_service_account_token.map(Value::from),
    );
    o
}

/// A TokenRequest as JSON: its spec.
fn token_request_json(request: TokenRequest) -> Value {
    let spec = request.spec.unwrap_or_default();
    let mut out = Map::new();
    if !spec.audiences.is_empty() {
        out.insert("audiences".into(), json!(spec.audiences));
    }
    insert_some(
        &mut out,
        "expirationSeconds",
        spec.expiration_seconds.map(Value::from),
    );
    if let Some(bound) = spec.bound_object_ref {
        let bound = strings([
            ("kind", bound.kind),
            ("apiVersion", bound.api_version),
            ("name", bound.name),
            ("uid", bound.uid),
        ]);
        out.insert("boundObjectRef".into(), bound);
    }
    json!({"metadata": metadata(request.metadata), "spec": out})
}

/// Decodes a protobuf request body of a core kind into its JSON form.
pub fn decode(body: &[u8]) -> ApiResult<Value> {
    let bad = |what: String| {
        ApiError::bad_request(format!("the protobuf body could not be decoded: {what}"))
    };
    let payload = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| bad("missing the k8s protobuf prefix".into()))?;
    let unknown = Unknown::decode(payload).map_err(|e| bad(e.to_string()))?;
    let type_meta = unknown.type_meta.unwrap_or_default();
    let kind = type_meta.kind.unwrap_or_default();
    let api_version = type_meta.api_version.unwrap_or_default();
    let raw = unknown.raw.unwrap_or_default();
    let mut object = match (api_version.as_str(), kind.as_str()) {
        ("v1", "ConfigMap") => {
            let cm = ConfigMap::decode(raw.as_slice()).map_err(|e| bad(e.to_string()))?;
            let mut o = json!({"metadata": metadata(cm.metadata)});
            if !cm.data.is_empty() {
                o["data"] = json!(cm.data);
            }
            if !cm.binary_data.is_empty() {
                o["binaryData"] = cm
                    .binary_data
                    .iter()
                    .map(|(k, v)| (k.clone(), b64(v)))
                    .collect::<Map<_, _>>()
                    .into();
            }
            if let Some(immutable) = cm.immutable {
                o["immutable"] = json!(immutable);
            }
            o
        }
        ("v1", "Secret") => {
            let secret = Secret::decode(raw.as_slice()).map_err(|e| bad(e.to_string()))?;
            let mut o = json!({"metadata": metadata(secret.metadata)});
            if !secret.data.is_empty() {
                o["data"] = secret
                    .data
                    .iter()
                    .map(|(k, v)| (k.clone(), b64(v)))
                    .collect::<Map<_, _>>()
                    .into();
            }
            if !secret.string_data.is_empty() {
                o["stringData"] = json!(secret.string_data);
            }
            if let Some(t) = secret.type_ {
                o["type"] = json!(t);
            }
            if let Some(immutable) = secret.immutable {
                o["immutable"] = json!(immutable);
            }
            o
        }
        ("v1", "Namespace") => {
            let ns = Namespace::decode(raw.as_slice()).map_err(|e| bad(e.to_string()))?;
            let mut o = json!({"metadata": metadata(ns.metadata)});
            if let Some(spec) = ns.spec.filter(|s| !s.finalizers.is_empty()) {
                o["spec"] = json!({"finalizers": spec.finalizers});
            }
            o
        }
        ("authorization.k8s.io/v1", "SelfSubjectAccessReview") => {
            let review =
                SelfSubjectAccessReview::decode(raw.as_slice()).map_err(|e| bad(e.to_string()))?;
            let spec = review.spec.unwrap_or_default();
            let mut spec_json = json!({});
            if let Some(r) = spec.resource_attributes {
                spec_json["resourceAttributes"] = json!({
                    "namespace": r.namespace, "verb": r.verb, "group": r.group,
                    "version": r.version, "resource": r.resource,
                    "subresource": r.subresource, "name": r.name,
                });
            }
            if let Some(n) = spec.non_resource_attributes {
                spec_json["nonResourceAttributes"] = json!({"path": n.path, "verb": n.verb});
            }
            json!({"metadata": metadata(review.metadata), "spec": spec_json})
        }
        ("rbac.authorization.k8s.io/v1", "Role" | "ClusterRole") => {
            role_json(RbacRole::decode(raw.as_slice()).map_err(|e| bad(e.to_string()))?)
        }
        ("rbac.authorization.k8s.io/v1", "RoleBinding" | "ClusterRoleBinding") => {
            binding_json(RbacBinding::decode(raw.as_slice()).map_err(|e| bad(e.to_string()))?)
        }
        ("v1", "ServiceAccount") => service_account_json(
            ServiceAccount::decode(raw.as_slice()).map_err(|e| bad(e.to_string()))?,
        ),
        ("authentication.k8s.io/v1", "TokenRequest") => token_request_json(
            TokenRequest::decode(raw.as_slice()).map_err(|e| bad(e.to_string()))?,
        ),
        ("authorization.k8s.io/v1", "SelfSubjectRulesReview") => {
            let review =
                SelfSubjectRulesReview::decode(raw.as_slice()).map_err(|e| bad(e.to_string()))?;
            let namespace = review.spec.unwrap_or_default().namespace;
            json!({"metadata": metadata(review.metadata), "spec": {"namespace": namespace}})
        }
        _ => {
            return Err(ApiError::UnsupportedMediaType {
                message: format!(
                    "protobuf bodies are accepted for v1 ConfigMap, Secret, Namespace and ServiceAccount, RBAC's four kinds, authentication.k8s.io/v1 TokenRequest and authorization.k8s.io/v1 SelfSubjectAccessReview and SelfSubjectRulesReview only, not {api_version} {kind}; send application/json"
                ),
            });
        }
    };
    object["apiVersion"] = json!(api_version);
    object["kind"] = json!(kind);
    Ok(object)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(kind: &str, raw: Vec<u8>) -> Vec<u8> {
        let unknown = Unknown {
            type_meta: Some(TypeMeta {
                api_version: Some("v1".into()),
                kind: Some(kind.into()),
            }),
            raw: Some(raw),
        };
        [MAGIC.to_vec(), unknown.encode_to_vec()].concat()
    }

    #[test]
    fn decodes_a_secret_as_kubectl_sends_it() {
        let secret = Secret {
            metadata: Some(ObjectMeta {
                name: Some("aws".into()),
                labels: [("a".into(), "b".into())].into(),
                ..Default::default()
            }),
            data: [("key".into(), b"s3cr3t".to_vec())].into(),
            type_: Some("Opaque".into()),
            ..Default::default()
        };
        let object = decode(&envelope("Secret", secret.encode_to_vec())).unwrap();
        assert_eq!(
            object,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "aws", "labels": {"a": "b"}}, "data": {"key": "czNjcjN0"}, "type": "Opaque"})
        );
    }

    #[test]
    fn refuses_garbage_and_other_kinds() {
        assert_eq!(decode(b"not protobuf").unwrap_err().code().as_u16(), 400);
        assert_eq!(
            decode(&envelope("Pod", vec![]))
                .unwrap_err()
                .code()
                .as_u16(),
            415
        );
        assert_eq!(
            decode(&[MAGIC, &[0xff, 0xff, 0xff]].concat())
                .unwrap_err()
                .code()
                .as_u16(),
            400
        );
    }
}
