//! Fleet's Cluster: Fleet's view of one lariat Cluster (same namespace and name, its labels
//! following it), where its bundles' readiness and its agent's last check-in are reported.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{BundleSummary, FleetCondition, ResourceCounts};

/// Fleet's view of one cluster; lariat keeps one for every Cluster (cluster.x-k8s.io).
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "fleet.cattle.io",
    version = "v1alpha1",
    kind = "Cluster",
    root = "FleetCluster",
    plural = "clusters",
    namespaced,
    status = "FleetClusterStatus",
    derive = "PartialEq",
    category = "fleet",
    doc = "Fleet's view of one cluster: its bundles' readiness and its agent's last check-in.",
    printcolumn(
        name = "Bundles-Ready",
        type_ = "string",
        json_path = ".status.display.readyBundles",
        description = "Ready bundles of all wanted"
    ),
    printcolumn(
        name = "Last-Seen",
        type_ = "string",
        json_path = ".status.agent.lastSeen",
        description = "When its agent last checked in"
    ),
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].message",
        description = "Why it is not ready"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct FleetClusterSpec {
    /// Deploy nothing new to this cluster meanwhile.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// Values of this cluster for its bundles' `helm.values` templates
    /// (`${ .ClusterValues.x }`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::schema::PreserveUnknownObject>")]
    pub template_values: Option<serde_json::Map<String, serde_json::Value>>,
}

/// How the cluster's bundles are doing.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FleetClusterStatus {
    /// The namespace holding this cluster's BundleDeployments.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Its agent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentStatus>,
    /// GitRepos targeting it, and of those, ready on it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub desired_ready_git_repos: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready_git_repos: Option<i32>,
    /// What `kubectl get` shows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub display: Option<FleetClusterDisplay>,
    /// Its BundleDeployments by state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<BundleSummary>,
    /// Its downstream resources by state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_counts: Option<ResourceCounts>,
    /// `Ready`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<FleetCondition>>,
}

/// The cluster's agent.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentStatus {
    /// When it last checked in.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::schema::DateTime>")]
    pub last_seen: Option<String>,
    /// The namespace it runs in downstream.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// A Fleet cluster's status for `kubectl get`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FleetClusterDisplay {
    /// `ready/desired` bundles.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready_bundles: Option<String>,
    /// The worst state of its bundles, or `WaitCheckIn`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
}
