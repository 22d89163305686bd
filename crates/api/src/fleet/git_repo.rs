//! GitRepo: a git repository whose manifests go to the clusters its targets choose.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    BundleSummary, CorrectDrift, FailureGroup, FleetCondition, ResourceCounts, Target,
};

/// A git repository watched by lariat, the paths in it that hold manifests, and where they go.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "fleet.cattle.io",
    version = "v1alpha1",
    kind = "GitRepo",
    plural = "gitrepos",
    namespaced,
    status = "GitRepoStatus",
    derive = "PartialEq",
    category = "fleet",
    doc = "A git repository whose manifests are deployed to the clusters its targets choose.",
    printcolumn(
        name = "Repo",
        type_ = "string",
        json_path = ".spec.repo",
        description = "The repository's URL"
    ),
    printcolumn(
        name = "Commit",
        type_ = "string",
        json_path = ".status.commit",
        description = "The commit deployed"
    ),
    printcolumn(
        name = "BundlesReady",
        type_ = "string",
        json_path = ".status.display.readyBundleDeployments",
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
pub struct GitRepoSpec {
    /// The repository's URL: `https://`, `ssh://` or `git@host:path`, or `file://`.
    pub repo: String,
    /// The branch to follow (default `master`, as Fleet's); ignored when `revision` is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// A tag, a branch or a full commit id to deploy instead of following `branch`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// Directories of the repository that hold manifests (default: the root).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paths: Option<Vec<String>>,
    /// How often the repository is fetched, e.g. `15s` (the default) or `1m`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub polling_interval: Option<String>,
    /// Fetch only when a webhook says so.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disable_polling: bool,
    /// The Secret (same namespace) with the credential: `username`/`password` for https
    /// (a token is a password), or `ssh-privatekey` and `known_hosts` for ssh.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_secret_name: Option<String>,
    /// PEM certificates of the authorities a `https://` repository's certificate may be
    /// signed by, besides the public ones.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::schema::Bytes>")]
    pub ca_bundle: Option<k8s_openapi::ByteString>,
    /// The Secret (same namespace) with the credential for charts from Helm repositories
    /// (`helm.repo`): `username` and `password`, and `cacerts` (PEM) for a private authority.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub helm_secret_name: Option<String>,
    /// Only Helm repositories whose URL matches this regular expression get
    /// `helmSecretName`'s credential (every https one when unset).
    #[serde(rename = "helmRepoURLRegex", skip_serializing_if = "Option::is_none")]
    pub helm_repo_url_regex: Option<String>,
    /// The Secret (same namespace) holding the webhook secrets deliveries must prove: its
    /// `github` and `gitlab` keys (else `gitjob-webhook` in `lariat-system` is used).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhook_secret: Option<String>,
    /// Put every namespaced object in this namespace downstream.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_namespace: Option<String>,
    /// Stop deploying new commits (they are still fetched and shown).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// Restore objects changed downstream to what git holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub correct_drift: Option<CorrectDrift>,
    /// Leave deployed objects in place when they leave git or the GitRepo is deleted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep_resources: bool,
    /// Which clusters the manifests go to; none means none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub targets: Option<Vec<Target>>,
}

/// What was deployed from the repository and how far it got.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitRepoStatus {
    /// The `metadata.generation` this status is for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The commit deployed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// The commit the last fetch found (deployed unless paused or broken).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub polling_commit: Option<String>,
    /// The commit the last webhook announced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhook_commit: Option<String>,
    /// When the repository was last fetched.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_polling_triggered: Option<String>,
    /// When the last webhook arrived.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_webhook_time: Option<String>,
    /// Clusters targeted, and of those, ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub desired_ready_clusters: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready_clusters: Option<i32>,
    /// What `kubectl get` shows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub display: Option<GitRepoDisplay>,
    /// BundleDeployments by state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<BundleSummary>,
    /// Downstream resources by state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_counts: Option<ResourceCounts>,
    /// `Ready`, `Accepted` (the repository could be read), `Stalled`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<FleetCondition>>,
    /// Its Bundles' clusters that are not ready, grouped by what is wrong (lariat's, beyond
    /// Fleet); `count` counts BundleDeployments, as the summary does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_groups: Option<Vec<FailureGroup>>,
}

/// A GitRepo's status for `kubectl get`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitRepoDisplay {
    /// `ready/desired` BundleDeployments, e.g. `12/14`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready_bundle_deployments: Option<String>,
    /// The worst state of its BundleDeployments.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// A one-line summary of what is wrong.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Whether something is in error.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub error: bool,
}
