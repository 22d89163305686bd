//! lariat's own management kinds (`management.lariat.dev`), outside Cluster API: how clusters
//! that lariat did not create join it.
//!
//! A ClusterRegistrationToken lets one agent register one Cluster. The token handed to the
//! agent is `<name>.<secret>`; the object, named `<name>` in `lariat-system`, keeps only the
//! SHA-256 of the secret. Deleting the object revokes the token; it also stops working at
//! `spec.expirationTimestamp`, and when its Cluster (`spec.clusterUID`) is gone.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

pub const GROUP: &str = "management.lariat.dev";
pub const VERSION: &str = "v1";
pub const API_VERSION: &str = "management.lariat.dev/v1";
/// Where registration tokens and agent credentials live.
pub const NAMESPACE: &str = "lariat-system";
/// Marks a Cluster that lariat imported rather than provisioned: its control plane is
/// whatever the agent reaches, and it is ready once the agent is connected.
pub const IMPORTED_ANNOTATION: &str = "management.lariat.dev/imported";
/// The ConfigMap a finished `lariat move` leaves on the source for the namespace it moved
/// ([`moved_record`]): one key per Cluster that left, its value `{"server": URL, "movedAt":
/// RFC 3339}`, so that the proxy tells the cluster's users where it went.
pub const MOVED_CONFIGMAP: &str = "lariat-moved";

/// Where the record of namespace `namespace`'s moved Clusters is kept: in [`NAMESPACE`], which
/// only administrators write, so that a user who may write ConfigMaps in the moved namespace
/// cannot forge where its clusters went.
pub fn moved_record(namespace: &str) -> (&'static str, String) {
    (NAMESPACE, format!("{MOVED_CONFIGMAP}-{namespace}"))
}

/// Where a moved Cluster went, as [`MOVED_CONFIGMAP`] records it, and who is told: the users
/// and groups the moved bindings named (Rancher's role template bindings and RoleBindings),
/// whose access left with the cluster.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MovedTo {
    pub server: String,
    pub moved_at: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
}

/// The `type` of the Secret holding an agent credential's hash.
pub const AGENT_CREDENTIAL_TYPE: &str = "management.lariat.dev/agent-credential";

pub fn registration_token_resource() -> kube::core::ApiResource {
    kube::core::ApiResource {
        group: GROUP.into(),
        version: VERSION.into(),
        api_version: API_VERSION.into(),
        kind: "ClusterRegistrationToken".into(),
        plural: "clusterregistrationtokens".into(),
    }
}

pub fn cluster_connection_resource() -> kube::core::ApiResource {
    kube::core::ApiResource {
        group: GROUP.into(),
        version: VERSION.into(),
        api_version: API_VERSION.into(),
        kind: "ClusterConnection".into(),
        plural: "clusterconnections".into(),
    }
}

/// A ClusterConnection (same namespace and name as its Cluster, owned by it) is what the server
/// knows of a Cluster's agent: connected or not, and what it sees downstream (its version at the
/// last check-in, its Nodes as watched).
/// The Cluster itself only gets `Connected` and `Ready` conditions, so its schema stays Cluster
/// API's.
fn cluster_connection_crd() -> CustomResourceDefinition {
    let string = json!({"type": "string"});
    let columns = json!([
        {"name": "Connected", "type": "boolean", "jsonPath": ".status.connected"},
        {"name": "Version", "type": "string", "jsonPath": ".status.kubernetesVersion"},
        {"name": "Nodes", "type": "integer", "jsonPath": ".status.nodeCount"},
        {"name": "CPU", "type": "string", "jsonPath": ".status.capacity.cpu", "priority": 1},
        {"name": "Memory", "type": "string", "jsonPath": ".status.capacity.memory", "priority": 1},
        {"name": "Heartbeat", "type": "date", "jsonPath": ".status.lastHeartbeat"},
        {"name": "Replica", "type": "string", "jsonPath": ".status.replica", "priority": 1},
    ]);
    let status = json!({
        "type": "object",
        "properties": {
            "connected": {"type": "boolean", "description": "Whether the agent's tunnel is up."},
            "connectedSince": {"type": "string", "format": "date-time"},
            "lastHeartbeat": {"type": "string", "format": "date-time", "description": "When the server last reached the cluster's API through the tunnel: at each check-in (every 15 minutes while connected, as Fleet's agents check in) and as the tunnel closes."},
            "kubernetesVersion": string,
            "nodeCount": {"type": "integer"},
            "readyNodeCount": {"type": "integer"},
            "capacity": {"type": "object", "properties": {"cpu": string, "memory": string, "pods": string}},
            "message": string,
            "agentVersion": {"type": "string", "description": "The lariat version the agent reported when it connected."},
            "replica": {"type": "string", "description": "The lariat server replica the agent's tunnel is (or was last) connected to: proxy requests reaching another replica are forwarded there."},
        },
    });
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("clusterconnections.{GROUP}")},
        "spec": {
            "group": GROUP,
            "names": {"kind": "ClusterConnection", "listKind": "ClusterConnectionList",
                      "plural": "clusterconnections", "singular": "clusterconnection"},
            "scope": "Namespaced",
            "versions": [{
                "name": VERSION, "served": true, "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": columns,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {"apiVersion": string, "kind": string, "metadata": {"type": "object"},
                                   "spec": {"type": "object"}, "status": status},
                }},
            }],
        },
    }))
    .expect("the ClusterConnection CRD is well-formed")
}

/// A Token is a bearer credential of the management API for one user: `lariat token create`
/// makes the secret on the client and sends only its hash, so the server never sees the
/// token, which is `<name>:<secret>` (Rancher's API-key shape). Deleting the object revokes it
/// at once; it also stops working at `spec.expirationTimestamp`. Only its `description`
/// changes after creation.
pub fn token_resource() -> kube::core::ApiResource {
    kube::core::ApiResource {
        group: GROUP.into(),
        version: VERSION.into(),
        api_version: API_VERSION.into(),
        kind: "Token".into(),
        plural: "tokens".into(),
    }
}

/// The longest a Token may live.
pub const TOKEN_MAX_LIFETIME_DAYS: i64 = 366;

fn token_crd() -> CustomResourceDefinition {
    let string = json!({"type": "string"});
    let columns = json!([
        {"name": "User", "type": "string", "jsonPath": ".spec.user"},
        {"name": "Groups", "type": "string", "jsonPath": ".spec.groups"},
        {"name": "Expires", "type": "string", "format": "date-time", "jsonPath": ".spec.expirationTimestamp"},
        {"name": "Description", "type": "string", "jsonPath": ".spec.description"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]);
    let spec = json!({
        "type": "object",
        "required": ["user", "tokenHash", "expirationTimestamp"],
        "properties": {
            "user": {"type": "string", "minLength": 1, "maxLength": 253, "description": "The user the token authenticates as."},
            "groups": {"type": "array", "items": string, "description": "The groups the user is in when authenticated by this token."},
            "tokenHash": {"type": "string", "pattern": "^[0-9a-f]{64}$", "description": "SHA-256 (hex) of the token's secret part; the token itself is never stored."},
            "expirationTimestamp": {"type": "string", "format": "date-time", "description": "When the token stops working (at most a year after its creation)."},
            "description": {"type": "string", "maxLength": 1024, "description": "What the token is for."},
        },
    });
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("tokens.{GROUP}")},
        "spec": {
            "group": GROUP,
            "names": {"kind": "Token", "listKind": "TokenList", "plural": "tokens", "singular": "token"},
            "scope": "Cluster",
            "versions": [{
                "name": VERSION, "served": true, "storage": true,
                "additionalPrinterColumns": columns,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "required": ["spec"],
                    "properties": {"apiVersion": string, "kind": string, "metadata": {"type": "object"}, "spec": spec},
                }},
            }],
        },
    }))
    .expect("the Token CRD is well-formed")
}

pub fn cluster_access_resource() -> kube::core::ApiResource {
    kube::core::ApiResource {
        group: GROUP.into(),
        version: VERSION.into(),
        api_version: API_VERSION.into(),
        kind: "ClusterAccess".into(),
        plural: "clusteraccesses".into(),
    }
}

/// On every object the agent keeps in its cluster for a ClusterAccess: what it may prune.
pub const ACCESS_LABEL: &str = "management.lariat.dev/access";

/// A ClusterAccess (same namespace and name as its Cluster, owned by it) is the RBAC the
/// cluster's agent keeps in the cluster for Rancher's bindings (`management.cattle.io`): the
/// server computes it from RoleTemplates, GlobalRoles and the bindings that concern the
/// cluster; the agent applies it (a ClusterRole per RoleTemplate in use, ClusterRoleBindings for
/// cluster-scope bindings, RoleBindings in each namespace of a project for project-scope ones),
/// deletes what it no longer says, and reports in its status.
fn cluster_access_crd() -> CustomResourceDefinition {
    let string = json!({"type": "string"});
    let rules = json!({"type": "array", "items": crate::rancher::policy_rule_schema()});
    let subjects = json!({"type": "array", "items": {
        "type": "object", "required": ["kind", "name"],
        "properties": {"kind": {"type": "string", "enum": ["User", "Group"]}, "name": string},
    }});
    let binding = |extra: &[(&str, Value)]| {
        let mut binding = json!({
            "type": "object", "required": ["name", "roleName", "subjects"],
            "properties": {"name": string, "roleName": string, "subjects": subjects},
        });
        for (field, schema) in extra {
            binding["properties"][*field] = schema.clone();
            binding["required"]
                .as_array_mut()
                .expect("required")
                .push(json!(field));
        }
        binding
    };
    let spec = json!({
        "type": "object",
        "properties": {
            "clusterRoles": {"type": "array", "description": "One ClusterRole per RoleTemplate in use (but external ones), named lariat-<template>, its inherited templates' rules included.",
                "items": {"type": "object", "required": ["name", "rules"], "properties": {"name": string, "rules": rules}}},
            "clusterRoleBindings": {"type": "array", "description": "Cluster-scope bindings: ClusterRoleTemplateBindings, and the inheritedClusterRoles of GlobalRoles.",
                "items": binding(&[])},
            "projectRoleBindings": {"type": "array", "description": "Project-scope bindings: a RoleBinding of each in every namespace annotated with the project's ID.",
                "items": binding(&[("projectId", string.clone())])},
        },
    });
    let condition = json!({"type": "object", "properties": {
        "type": string, "status": string, "reason": string, "message": string,
        "lastTransitionTime": string,
    }});
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("clusteraccesses.{GROUP}")},
        "spec": {
            "group": GROUP,
            "names": {"kind": "ClusterAccess", "listKind": "ClusterAccessList",
                      "plural": "clusteraccesses", "singular": "clusteraccess"},
            "scope": "Namespaced",
            "versions": [{
                "name": VERSION, "served": true, "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Applied", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Applied\")].status"},
                    {"name": "Generation", "type": "integer", "jsonPath": ".metadata.generation"},
                    {"name": "Observed", "type": "integer", "jsonPath": ".status.observedGeneration", "description": "The generation the agent last applied: behind Generation while it is away or busy."},
                    {"name": "Message", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Applied\")].message"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {"apiVersion": string, "kind": string, "metadata": {"type": "object"}, "spec": spec,
                        "status": {"type": "object", "properties": {
                            "observedGeneration": {"type": "integer"},
                            "conditions": {"type": "array", "items": condition},
                        }}},
                }},
            }],
        },
    }))
    .expect("the ClusterAccess CRD is well-formed")
}

pub fn crds() -> Vec<CustomResourceDefinition> {
    let string = json!({"type": "string"});
    let columns = json!([
        {"name": "Cluster Namespace", "type": "string", "jsonPath": ".spec.clusterNamespace"},
        {"name": "Cluster", "type": "string", "jsonPath": ".spec.clusterName"},
        {"name": "Expires", "type": "string", "format": "date-time", "jsonPath": ".spec.expirationTimestamp"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]);
    let spec = json!({
        "type": "object",
        "required": ["clusterNamespace", "clusterName", "tokenHash", "expirationTimestamp"],
        "properties": {
            "clusterNamespace": {"type": "string", "description": "Namespace of the Cluster the token registers."},
            "clusterName": {"type": "string", "description": "Name of the Cluster the token registers."},
            "clusterUID": {"type": "string", "description": "UID of the Cluster the token registers: one deleted and created again under its name is another Cluster, which the token does not register."},
            "tokenHash": {"type": "string", "pattern": "^[0-9a-f]{64}$", "description": "SHA-256 (hex) of the token's secret part; the token itself is never stored."},
            "expirationTimestamp": {"type": "string", "format": "date-time", "description": "When the token stops working."},
        },
    });
    vec![serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("clusterregistrationtokens.{GROUP}")},
        "spec": {
            "group": GROUP,
            "names": {"kind": "ClusterRegistrationToken", "listKind": "ClusterRegistrationTokenList",
                      "plural": "clusterregistrationtokens", "singular": "clusterregistrationtoken"},
            "scope": "Namespaced",
            "versions": [{
                "name": VERSION, "served": true, "storage": true,
                "additionalPrinterColumns": columns,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {"apiVersion": string, "kind": string, "metadata": {"type": "object"}, "spec": spec},
                }},
            }],
        },
    }))
    .expect("the ClusterRegistrationToken CRD is well-formed"), cluster_connection_crd(), token_crd(), cluster_access_crd()]
}
