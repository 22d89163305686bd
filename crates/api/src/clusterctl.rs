//! The provider inventory: one `Provider` object per enabled provider, field-compatible with
//! clusterctl's (`clusterctl.cluster.x-k8s.io/v1alpha3`), so people and tools that read
//! clusterctl's inventory read lariat's.
//!
//! clusterctl's Provider keeps its fields at the top level (no `spec`), which kube-derive cannot
//! express, so the CRD is written out here.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::json;

pub const GROUP: &str = "clusterctl.cluster.x-k8s.io";
pub const VERSION: &str = "v1alpha3";
pub const API_VERSION: &str = "clusterctl.cluster.x-k8s.io/v1alpha3";
pub const KIND: &str = "Provider";
pub const PLURAL: &str = "providers";
/// Where `lariat init` records enabled providers.
pub const NAMESPACE: &str = "lariat-system";

/// The `type` values clusterctl uses.
pub const CORE: &str = "CoreProvider";
pub const BOOTSTRAP: &str = "BootstrapProvider";
pub const CONTROL_PLANE: &str = "ControlPlaneProvider";
pub const INFRASTRUCTURE: &str = "InfrastructureProvider";
/// The types lariat has no provider of, which clusterctl also writes into its inventory.
const OTHER_TYPES: [&str; 3] = ["IPAMProvider", "RuntimeExtensionProvider", "AddonProvider"];

/// The inventory name of a provider, as clusterctl names it: `infrastructure-inmemory`.
pub fn inventory_name(provider_type: &str, name: &str) -> String {
    let prefix = match provider_type {
        CORE => return "cluster-api".to_string(),
        BOOTSTRAP => "bootstrap",
        CONTROL_PLANE => "control-plane",
        _ => "infrastructure",
    };
    format!("{prefix}-{name}")
}

/// The Provider kind, for dynamic APIs.
pub fn api_resource() -> kube::core::ApiResource {
    kube::core::ApiResource {
        group: GROUP.into(),
        version: VERSION.into(),
        api_version: API_VERSION.into(),
        kind: KIND.into(),
        plural: PLURAL.into(),
    }
}

/// The `lariat init` command that enables the provider with this inventory name.
pub fn init_command(inventory_name: &str) -> String {
    match inventory_name.strip_prefix("infrastructure-") {
        Some(name) => format!("lariat init --infrastructure {name}"),
        None => "lariat init".to_string(),
    }
}

pub fn crd() -> CustomResourceDefinition {
    let string = json!({"type": "string"});
    let conditions = json!({"type": "array", "items": {
        "type": "object",
        "required": ["type", "status"],
        "properties": {
            "type": string, "status": string, "reason": string,
            "message": string, "lastTransitionTime": string,
        },
    }});
    let columns = json!([
        {"name": "Type", "type": "string", "jsonPath": ".type"},
        {"name": "Provider", "type": "string", "jsonPath": ".providerName"},
        {"name": "Version", "type": "string", "jsonPath": ".version"},
        {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]);
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{PLURAL}.{GROUP}")},
        "spec": {
            "group": GROUP,
            "names": {"kind": KIND, "listKind": "ProviderList", "plural": PLURAL, "singular": "provider"},
            "scope": "Namespaced",
            "versions": [{
                "name": VERSION,
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": columns,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "description": "An enabled provider, as recorded by `lariat init` (clusterctl's inventory).",
                    "properties": {
                        "apiVersion": string,
                        "kind": string,
                        "metadata": {"type": "object"},
                        "providerName": {"type": "string", "description": "The provider's name, e.g. inmemory or kubeadm."},
                        "type": {"type": "string", "enum": [CORE, BOOTSTRAP, CONTROL_PLANE, INFRASTRUCTURE, OTHER_TYPES[0], OTHER_TYPES[1], OTHER_TYPES[2]]},
                        "version": {"type": "string", "description": "The provider version, e.g. v0.1.0."},
                        "watchedNamespace": {"type": "string", "description": "Unused by lariat: its providers watch every namespace."},
                        "status": {"type": "object", "properties": {
                            "conditions": conditions,
                        }},
                    },
                }},
            }],
        },
    }))
    .expect("the Provider CRD is well-formed")
}
