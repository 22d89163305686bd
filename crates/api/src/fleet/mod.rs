//! Fleet's kinds (`fleet.cattle.io/v1alpha1`), field-compatible with Fleet for the fields lariat
//! implements: a user's GitRepo applies unchanged, and a field lariat does not implement is
//! refused by the API server (strict field validation) rather than silently ignored.
//!
//! - [`GitRepo`]: a git repository, the paths in it that hold manifests, and which clusters
//!   they go to.
//! - [`Bundle`]: the manifests of one path at one commit, and their targets.
//! - [`BundleDeployment`]: one Bundle for one cluster, what that cluster's agent applies.
//! - [`FleetCluster`] (kind `Cluster`): Fleet's view of one lariat Cluster, same namespace and
//!   name, its labels following it.
//! - [`ClusterGroup`]: clusters chosen by label, to target together.
//! - [`Content`]: the resolved manifests of a BundleDeployment, stored once per distinct set.
//!
//! Beyond Fleet, GitRepo and Bundle status carry [`FailureGroup`]s: which clusters fail for
//! the same reason.

mod bundle;
mod bundle_deployment;
mod cluster;
mod cluster_group;
mod common;
mod content;
mod git_repo;
mod helm;

pub use bundle::{
    Bundle, BundleDisplay, BundleRef, BundleResource, BundleSpec, BundleStatus, BundleTarget,
    Partition, PartitionStatus, RolloutStrategy,
};
pub use bundle_deployment::{
    BundleDeployment, BundleDeploymentDisplay, BundleDeploymentOptions, BundleDeploymentSpec,
    BundleDeploymentStatus, DeployedResource, ModifiedStatus, NonReadyStatus, ObjectSummary,
};
pub use cluster::{
    AgentStatus, FleetCluster, FleetClusterDisplay, FleetClusterSpec, FleetClusterStatus,
};
pub use cluster_group::{ClusterGroup, ClusterGroupDisplay, ClusterGroupSpec, ClusterGroupStatus};
pub use common::{
    BundleSummary, CorrectDrift, FailureGroup, FleetCondition, KustomizeOptions, ResourceCounts,
    Target, YamlOptions,
};
pub use content::{Content, ContentFields, ContentStatus};
pub use git_repo::{GitRepo, GitRepoDisplay, GitRepoSpec, GitRepoStatus};
pub use helm::{HelmOptions, KeyRef, ValuesFrom};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

pub const GROUP: &str = "fleet.cattle.io";
pub const VERSION: &str = "v1alpha1";
pub const API_VERSION: &str = "fleet.cattle.io/v1alpha1";

/// The workspace (namespace) of clusters lariat provisions or imports, as Rancher's.
pub const DEFAULT_WORKSPACE: &str = "fleet-default";
/// The workspace of the management cluster itself, as Rancher's.
pub const LOCAL_WORKSPACE: &str = "fleet-local";

pub use crate::names::selects;

/// The namespace of a cluster's BundleDeployments, where its agent reads them: readable,
/// unique (a hash of the whole keeps long names apart), within Kubernetes' 63 characters.
pub fn cluster_namespace(namespace: &str, name: &str) -> String {
    use sha2::{Digest, Sha256};
    let hash = Sha256::digest(format!("{namespace}/{name}").as_bytes());
    let hash: String = hash.iter().take(4).map(|b| format!("{b:02x}")).collect();
    let mut readable = format!("cluster-{namespace}-{name}");
    readable.truncate(63 - 9);
    format!("{}-{hash}", readable.trim_end_matches('-'))
}

/// Fleet's CRDs, GitRepo first (what users write), then what lariat derives from it.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        GitRepo::crd(),
        Bundle::crd(),
        BundleDeployment::crd(),
        FleetCluster::crd(),
        ClusterGroup::crd(),
        Content::crd(),
    ]
}
