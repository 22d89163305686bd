//! ClusterGroup: clusters chosen by label, to target together.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{BundleSummary, FleetCondition, ResourceCounts};

/// Clusters chosen by label (in the same namespace), which targets can name together.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "fleet.cattle.io",
    version = "v1alpha1",
    kind = "ClusterGroup",
    plural = "clustergroups",
    namespaced,
    status = "ClusterGroupStatus",
    derive = "PartialEq",
    category = "fleet",
    doc = "Clusters chosen by label, to target together.",
    printcolumn(
        name = "Clusters-Ready",
        type_ = "string",
        json_path = ".status.display.readyClusters",
        description = "Ready clusters of all in the group"
    ),
    printcolumn(
        name = "Bundles-Ready",
        type_ = "string",
        json_path = ".status.display.readyBundles",
        description = "Ready bundles of all wanted"
    ),
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].message",
        description = "Why it is not ready"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterGroupSpec {
    /// The clusters whose labels match; none matches nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::schema::LabelSelector>")]
    pub selector: Option<LabelSelector>,
}

/// How the group's clusters are doing.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterGroupStatus {
    /// Clusters in the group, and of those, not ready.
    #[serde(default)]
    pub cluster_count: i32,
    #[serde(default)]
    pub non_ready_cluster_count: i32,
    /// The names of the clusters not ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub non_ready_clusters: Option<Vec<String>>,
    /// What `kubectl get` shows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub display: Option<ClusterGroupDisplay>,
    /// Their BundleDeployments by state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<BundleSummary>,
    /// Their downstream resources by state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_counts: Option<ResourceCounts>,
    /// `Ready`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<FleetCondition>>,
}

/// A ClusterGroup's status for `kubectl get`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterGroupDisplay {
    /// `ready/total` clusters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready_clusters: Option<String>,
    /// `ready/desired` bundles.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready_bundles: Option<String>,
    /// The worst state of its clusters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
}
