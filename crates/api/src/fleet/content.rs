//! Content: the resolved manifests of one BundleDeployment version, stored once however many
//! clusters get the same ones (named by their SHA-256).

use k8s_openapi::ByteString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Manifests as one cluster's agent applies them, named `s-<sha256>`; cluster-scoped.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "fleet.cattle.io",
    version = "v1alpha1",
    kind = "Content",
    plural = "contents",
    no_spec,
    status = "ContentStatus",
    derive = "PartialEq",
    doc = "The manifests of one BundleDeployment version, stored once for every cluster that gets them."
)]
#[serde(rename_all = "camelCase")]
pub struct ContentFields {
    /// The manifests: a JSON list of objects.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::schema::Bytes>")]
    pub content: Option<ByteString>,
    /// The SHA-256 of `content`, as its name carries it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256sum: Option<String>,
}

/// Who uses the content.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContentStatus {
    /// How many BundleDeployments reference it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reference_count: Option<i32>,
}
