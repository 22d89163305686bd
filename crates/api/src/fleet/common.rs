//! Types several Fleet kinds share.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A condition as Fleet writes it (rancher/wrangler's `genericcondition`): times are plain
/// strings, as upstream's schema has them.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FleetCondition {
    /// The condition type, e.g. `Ready`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// When the condition was last written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<String>,
    /// When the status last changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    /// Why, as a CamelCase word.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Why, for humans.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl FleetCondition {
    /// Sets condition `type_` in `conditions` as of `now` (RFC 3339): `lastTransitionTime`
    /// moves only when the status does, and an unchanged condition is left as it is. Returns
    /// whether anything changed.
    pub fn set(
        conditions: &mut Vec<FleetCondition>,
        type_: &str,
        status: bool,
        reason: &str,
        message: &str,
        now: &str,
    ) -> bool {
        let status = if status { "True" } else { "False" };
        let text = |s: &str| (!s.is_empty()).then(|| s.to_string());
        let previous = conditions.iter().find(|c| c.type_ == type_);
        let unchanged = previous.is_some_and(|c| {
            c.status == status && c.reason == text(reason) && c.message == text(message)
        });
        if unchanged {
            return false;
        }
        let last_transition_time = match previous {
            Some(c) if c.status == status => c.last_transition_time.clone(),
            _ => Some(now.to_string()),
        };
        let condition = FleetCondition {
            type_: type_.to_string(),
            status: status.to_string(),
            last_update_time: Some(now.to_string()),
            last_transition_time,
            reason: text(reason),
            message: text(message),
        };
        match conditions.iter_mut().find(|c| c.type_ == type_) {
            Some(existing) => *existing = condition,
            None => conditions.push(condition),
        }
        true
    }
}

/// Which clusters a GitRepo or Bundle goes to. A target matches a cluster when every selector
/// it sets matches; `clusterName` names one cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Target {
    /// A name for the target, for humans and customizations.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Clusters whose labels match.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::schema::LabelSelector>")]
    pub cluster_selector: Option<LabelSelector>,
    /// Clusters of the ClusterGroup of this name (in the same namespace).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_group: Option<String>,
    /// Clusters of the ClusterGroups whose labels match.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::schema::LabelSelector>")]
    pub cluster_group_selector: Option<LabelSelector>,
    /// The cluster of this name (in the same namespace).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_name: Option<String>,
}

/// Restoring objects that drifted from git.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CorrectDrift {
    /// Whether drifted objects are put back as git has them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub enabled: bool,
    /// Replace an object that cannot be patched back (delete and create).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub force: bool,
    /// Keep the history of failed corrections.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep_fail_history: bool,
}

/// Per-target changes to plain manifests.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct YamlOptions {
    /// Overlay names: `overlays/<name>` files of the bundle replace or patch its manifests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overlays: Option<Vec<String>>,
}

/// A bundle built with kustomize (Fleet's `KustomizeOptions`): the directory of its
/// `kustomization.yaml`, relative to the bundle (its root by default).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KustomizeOptions {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
}

/// How many BundleDeployments are in each state (Fleet's `BundleSummary`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BundleSummary {
    /// Deployed and not yet ready.
    #[serde(default)]
    pub not_ready: i32,
    /// Applied, waiting to be seen by the agent.
    #[serde(default)]
    pub wait_applied: i32,
    /// The agent could not apply them.
    #[serde(default)]
    pub err_applied: i32,
    /// Deployed, but an older version than wanted.
    #[serde(default)]
    pub out_of_sync: i32,
    /// Deployed, but changed downstream.
    #[serde(default)]
    pub modified: i32,
    /// Deployed and ready.
    #[serde(default)]
    pub ready: i32,
    /// Not deployed yet.
    #[serde(default)]
    pub pending: i32,
    /// How many there should be.
    #[serde(default)]
    pub desired_ready: i32,
}

impl std::ops::AddAssign<&BundleSummary> for BundleSummary {
    fn add_assign(&mut self, other: &BundleSummary) {
        self.not_ready += other.not_ready;
        self.wait_applied += other.wait_applied;
        self.err_applied += other.err_applied;
        self.out_of_sync += other.out_of_sync;
        self.modified += other.modified;
        self.ready += other.ready;
        self.pending += other.pending;
        self.desired_ready += other.desired_ready;
    }
}

/// How many downstream resources are in each state.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceCounts {
    #[serde(default)]
    pub ready: i32,
    #[serde(default)]
    pub desired_ready: i32,
    #[serde(default)]
    pub wait_applied: i32,
    #[serde(default)]
    pub modified: i32,
    #[serde(default)]
    pub orphaned: i32,
    #[serde(default)]
    pub missing: i32,
    #[serde(default)]
    pub unknown: i32,
    #[serde(default)]
    pub not_ready: i32,
}

/// Clusters that fail for the same reason (lariat's, beyond Fleet): the state, a message
/// standing for all of them (cluster names, hashes and times taken out), and who they are.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailureGroup {
    /// The state the clusters share, e.g. `ErrApplied`, `NotReady`, `Offline`.
    pub state: String,
    /// One of the clusters' messages, as it was written.
    pub message: String,
    /// How many clusters share it.
    pub count: i32,
    /// Their names, sorted (at most the first 50).
    pub clusters: Vec<String>,
}
