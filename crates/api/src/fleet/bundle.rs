//! Bundle: the manifests of one path of a GitRepo at one commit, and where they go.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    BundleSummary, CorrectDrift, FailureGroup, FleetCondition, KustomizeOptions, Target,
    YamlOptions,
};

/// The manifests of one path at one commit, and the clusters they go to.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "fleet.cattle.io",
    version = "v1alpha1",
    kind = "Bundle",
    plural = "bundles",
    namespaced,
    status = "BundleStatus",
    derive = "PartialEq",
    category = "fleet",
    doc = "Manifests from one path of a GitRepo, and the clusters they are deployed to.",
    printcolumn(
        name = "BundleDeployments-Ready",
        type_ = "string",
        json_path = ".status.display.readyClusters",
        description = "Ready BundleDeployments of all wanted"
    ),
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].message",
        description = "Why it is not ready"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct BundleSpec {
    /// The manifests, one entry per file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<Vec<BundleResource>>,
    /// The namespace of namespaced objects that name none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_namespace: Option<String>,
    /// The namespace of every namespaced object, whatever it names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Leave deployed objects in place when they leave the bundle or it is deleted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep_resources: bool,
    /// Restore objects changed downstream.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub correct_drift: Option<CorrectDrift>,
    /// Overlays applied on every target.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub yaml: Option<YamlOptions>,
    /// The bundle deploys a Helm chart: which, and how.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub helm: Option<super::HelmOptions>,
    /// The bundle is built with kustomize, from this directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kustomize: Option<KustomizeOptions>,
    /// Deploy nothing new meanwhile.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// Bundles that must be ready on a cluster before this one is deployed there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub depends_on: Option<Vec<BundleRef>>,
    /// How fast a change rolls out across clusters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollout_strategy: Option<RolloutStrategy>,
    /// The clusters it goes to, each with what changes there; the first that matches a
    /// cluster applies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub targets: Option<Vec<BundleTarget>>,
    /// A cluster must also match one of these (a GitRepo's own targets, so that a
    /// customization in `fleet.yaml` cannot reach clusters the GitRepo does not).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_restrictions: Option<Vec<Target>>,
}

/// One file of a bundle.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BundleResource {
    /// Its path within the bundle's directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its content, encoded as `encoding` says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Empty for plain text, or `base64+gz`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encoding: Option<String>,
}

/// Another bundle, by name or by labels.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BundleRef {
    /// The bundle's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Bundles whose labels match.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::schema::LabelSelector>")]
    pub selector: Option<LabelSelector>,
}

/// One target of a bundle and what changes for the clusters it matches.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BundleTarget {
    /// Which clusters.
    #[serde(flatten)]
    pub target: Target,
    /// The namespace of namespaced objects that name none, there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_namespace: Option<String>,
    /// The namespace of every namespaced object, there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Overlays applied there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub yaml: Option<YamlOptions>,
    /// Helm options there: values merged over the bundle's, the rest replacing them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub helm: Option<super::HelmOptions>,
    /// The kustomization built there (an overlay's directory, typically).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kustomize: Option<KustomizeOptions>,
    /// Matching clusters get nothing (a way to exclude them).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub do_not_deploy: bool,
}

/// How many clusters may be unavailable while a change rolls out.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStrategy {
    /// Clusters (a number or a percentage, default 100%) that may be not ready at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::schema::IntOrString>")]
    pub max_unavailable: Option<IntOrString>,
    /// Partitions that may be not ready at once (default 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::schema::IntOrString>")]
    pub max_unavailable_partitions: Option<IntOrString>,
    /// Clusters per automatic partition (a number or a percentage, default 25%).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::schema::IntOrString>")]
    pub auto_partition_size: Option<IntOrString>,
    /// Partitions by hand, rolled out in order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partitions: Option<Vec<Partition>>,
}

/// A group of clusters a change reaches together.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Partition {
    /// A name for humans.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Clusters of this partition that may be not ready at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::schema::IntOrString>")]
    pub max_unavailable: Option<IntOrString>,
    /// Which clusters.
    #[serde(flatten)]
    pub target: Target,
}

/// How far a bundle got.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BundleStatus {
    /// The `metadata.generation` this status is for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// BundleDeployments by state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<BundleSummary>,
    /// What `kubectl get` shows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub display: Option<BundleDisplay>,
    /// Clusters that may be not ready at once, resolved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<i32>,
    /// Clusters not ready now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<i32>,
    /// Partitions that may be over their limit at once, resolved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_unavailable_partitions: Option<i32>,
    /// Partitions over their limit now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unavailable_partitions: Option<i32>,
    /// The rollout's partitions, in order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partitions: Option<Vec<PartitionStatus>>,
    /// The SHA-256 of the manifests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources_sha256_sum: Option<String>,
    /// `Ready`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<FleetCondition>>,
    /// Clusters that are not ready, grouped by what is wrong (lariat's, beyond Fleet).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_groups: Option<Vec<FailureGroup>>,
}

/// Where one partition of a rollout stands.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PartitionStatus {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Clusters in it.
    #[serde(default)]
    pub count: i32,
    /// Clusters of it that may be unavailable at once, resolved.
    #[serde(default)]
    pub max_unavailable: i32,
    /// Clusters of it unavailable now.
    #[serde(default)]
    pub unavailable: i32,
}

/// A bundle's status for `kubectl get`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BundleDisplay {
    /// `ready/desired` BundleDeployments.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready_clusters: Option<String>,
    /// The worst state of its BundleDeployments.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
}
