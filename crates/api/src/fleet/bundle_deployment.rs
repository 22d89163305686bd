//! BundleDeployment: one Bundle, resolved for one cluster, which that cluster's agent applies
//! and reports on.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{CorrectDrift, FleetCondition, ResourceCounts};

/// A Bundle's manifests for one cluster, and what that cluster's agent made of them.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "fleet.cattle.io",
    version = "v1alpha1",
    kind = "BundleDeployment",
    plural = "bundledeployments",
    namespaced,
    status = "BundleDeploymentStatus",
    derive = "PartialEq",
    category = "fleet",
    doc = "A Bundle resolved for one cluster, applied by that cluster's agent.",
    printcolumn(
        name = "Deployed",
        type_ = "string",
        json_path = ".status.display.deployed",
        description = "Whether the wanted version is applied"
    ),
    printcolumn(
        name = "Monitored",
        type_ = "string",
        json_path = ".status.display.monitored",
        description = "Whether the applied objects are ready and unchanged"
    ),
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].message",
        description = "Why it is not ready"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct BundleDeploymentSpec {
    /// The manifests to apply: the Content holding them and a hash of the options
    /// (`<content>:<options>`); a new one is a new version to deploy.
    #[serde(rename = "deploymentID", skip_serializing_if = "Option::is_none")]
    pub deployment_id: Option<String>,
    /// The version waiting for the rollout to reach this cluster.
    #[serde(rename = "stagedDeploymentID", skip_serializing_if = "Option::is_none")]
    pub staged_deployment_id: Option<String>,
    /// How the manifests are applied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub options: Option<BundleDeploymentOptions>,
    /// The options of the staged version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub staged_options: Option<BundleDeploymentOptions>,
    /// Restore objects changed downstream.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub correct_drift: Option<CorrectDrift>,
    /// Apply nothing new meanwhile.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// Bundles whose BundleDeployments on this cluster must be ready first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub depends_on: Option<Vec<super::BundleRef>>,
}

/// How a BundleDeployment's manifests are applied downstream.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BundleDeploymentOptions {
    /// The namespace of namespaced objects that name none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_namespace: Option<String>,
    /// The namespace of every namespaced object.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Leave objects in place when they leave the manifests.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep_resources: bool,
    /// Restore objects changed downstream.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub correct_drift: Option<CorrectDrift>,
    /// The Content is a Helm chart's files, rendered and released by the agent so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub helm: Option<super::HelmOptions>,
    /// With `helm`: the chart's rendered objects are built with the kustomization in this
    /// directory of the Content's files, as Fleet's agent post-renders a chart.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kustomize: Option<super::KustomizeOptions>,
}

/// What the agent applied and what it sees downstream.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BundleDeploymentStatus {
    /// The `deploymentID` applied.
    #[serde(
        rename = "appliedDeploymentID",
        skip_serializing_if = "Option::is_none"
    )]
    pub applied_deployment_id: Option<String>,
    /// Applied, and every object ready.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ready: bool,
    /// Applied, and no object changed downstream.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub non_modified: bool,
    /// `Ready`, `Deployed`, `Monitored`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<FleetCondition>>,
    /// What `kubectl get` shows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub display: Option<BundleDeploymentDisplay>,
    /// The objects that are not ready, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub non_ready_status: Option<Vec<NonReadyStatus>>,
    /// The objects that differ from the manifests: changed, missing, or left over.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modified_status: Option<Vec<ModifiedStatus>>,
    /// Every object applied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<Vec<DeployedResource>>,
    /// The objects by state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_counts: Option<ResourceCounts>,
}

/// A BundleDeployment's status for `kubectl get`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BundleDeploymentDisplay {
    /// `True` once the wanted version is applied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deployed: Option<String>,
    /// `True` while every object is ready and unchanged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub monitored: Option<String>,
    /// `Ready`, `NotReady`, `Modified`, `ErrApplied`, `WaitApplied`, ...
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
}

/// An object downstream that is not ready.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NonReadyStatus {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// Its state, and the object's own words for why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<ObjectSummary>,
}

/// An object's state as the agent reads it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectSummary {
    /// E.g. `in-progress`, `error`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Whether it failed (rather than is still on its way).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub error: bool,
    /// Whether it is still on its way.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub transitioning: bool,
    /// Why, in the object's own words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<Vec<String>>,
}

/// An object downstream that differs from the manifests.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModifiedStatus {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// In the manifests, not downstream.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub missing: bool,
    /// Downstream, no longer in the manifests (orphaned).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub delete: bool,
    /// The JSON merge patch that would bring it back to the manifests: the fields that differ.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
}

/// An object the agent applied.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeployedResource {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}
