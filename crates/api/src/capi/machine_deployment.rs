//! The MachineDeployment kind: rolls out Machine template changes through MachineSets.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{MachineNamingStrategy, StatusVersion};
use super::conditions::Condition;
use super::machine::MachineTemplateSpec;
use super::machine_set::{MachineSetDeletePolicy, ReplicasV1Beta2Status};

/// The desired state of a MachineDeployment.
// Each printcolumn(...) repeats keys such as `type_ = "string"`, which clippy mistakes for
// duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta1",
    kind = "MachineDeployment",
    plural = "machinedeployments",
    namespaced,
    status = "MachineDeploymentStatus",
    derive = "PartialEq",
    shortname = "md",
    category = "cluster-api",
    doc = "Declarative updates for a group of Machines, carried out through MachineSets.",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".spec.clusterName",
        description = "The Cluster the MachineDeployment belongs to"
    ),
    printcolumn(
        name = "Desired",
        type_ = "integer",
        json_path = ".spec.replicas",
        description = "How many Machines are wanted",
        priority = 10
    ),
    printcolumn(
        name = "Replicas",
        type_ = "integer",
        json_path = ".status.replicas",
        description = "How many Machines exist and are not being deleted"
    ),
    printcolumn(
        name = "Ready",
        type_ = "integer",
        json_path = ".status.readyReplicas",
        description = "How many Machines are ready"
    ),
    printcolumn(
        name = "Updated",
        type_ = "integer",
        json_path = ".status.updatedReplicas",
        description = "How many Machines match the current template"
    ),
    printcolumn(
        name = "Unavailable",
        type_ = "integer",
        json_path = ".status.unavailableReplicas",
        description = "How many Machines are still missing or not available"
    ),
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "Rollout phase, e.g. ScalingUp, Running"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "Time since the MachineDeployment was created"
    ),
    printcolumn(
        name = "Version",
        type_ = "string",
        json_path = ".spec.template.spec.version",
        description = "The Kubernetes version of the Machine template"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentSpec {
    /// The name of the Cluster this MachineDeployment belongs to.
    #[schemars(length(min = 1, max = 63))]
    pub cluster_name: String,
    /// How many Machines are wanted; defaulted by Cluster API's webhook when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Replace every Machine created before this time, even without a template change.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::schema::DateTime>")]
    pub rollout_after: Option<Time>,
    /// The labels of the Machines this MachineDeployment owns; must match the template's labels.
    #[schemars(with = "crate::schema::LabelSelector")]
    pub selector: LabelSelector,
    /// The Machine every MachineSet of this deployment creates.
    pub template: MachineTemplateSpec,
    /// How old Machines are replaced by new ones.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strategy: Option<MachineDeploymentStrategy>,
    /// How the names of new Machines are generated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine_naming_strategy: Option<MachineNamingStrategy>,
    /// Seconds a new Machine must be ready before it counts as available.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_ready_seconds: Option<i32>,
    /// How many old MachineSets to keep for rollback.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision_history_limit: Option<i32>,
    /// Stop reconciling the deployment while true.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    /// Seconds a rollout may take before it is reported as failed (not enforced upstream yet).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress_deadline_seconds: Option<i32>,
}

/// How a MachineDeployment replaces old Machines with new ones.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentStrategy {
    /// The kind of rollout; `RollingUpdate` when unset.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<MachineDeploymentStrategyType>,
    /// Parameters of a `RollingUpdate` rollout.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rolling_update: Option<MachineRollingUpdateDeployment>,
    /// How unhealthy Machines are remediated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remediation: Option<RemediationStrategy>,
}

/// The kinds of MachineDeployment rollout.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum MachineDeploymentStrategyType {
    /// Replace Machines step by step, within `maxSurge` and `maxUnavailable`.
    RollingUpdate,
    /// Replace a Machine only after someone deletes it.
    OnDelete,
}

/// Bounds of a rolling update.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineRollingUpdateDeployment {
    /// How many Machines may be unavailable during the update: a count or a percentage.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::schema::IntOrString>")]
    pub max_unavailable: Option<IntOrString>,
    /// How many Machines may exist above the desired count: a count or a percentage.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::schema::IntOrString>")]
    pub max_surge: Option<IntOrString>,
    /// Which old Machines go first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delete_policy: Option<MachineSetDeletePolicy>,
}

/// How a MachineDeployment remediates unhealthy Machines.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RemediationStrategy {
    /// How many Machines may be remediated at once: a count or a percentage.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::schema::IntOrString>")]
    pub max_in_flight: Option<IntOrString>,
}

/// The observed state of a MachineDeployment.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentStatus {
    /// The `metadata.generation` this status was computed from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The selector in string form, for the scale subresource.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    pub selector: Option<String>,
    /// How many Machines exist and are not being deleted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// How many Machines match the current template.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_replicas: Option<i32>,
    /// How many Machines are ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// How many Machines have been ready for at least `minReadySeconds`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
    /// How many Machines are still missing or not available.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unavailable_replicas: Option<i32>,
    /// The rollout phase, derived for humans.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<MachineDeploymentPhase>,
    /// The MachineDeployment's conditions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// The Kubernetes versions the Machines run, with their counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 100),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["version"])
    )]
    pub versions: Option<Vec<StatusVersion>>,
    /// Status fields CAPI already writes in their `v1beta2` shape.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub v1beta2: Option<ReplicasV1Beta2Status>,
}

/// The rollout phase of a MachineDeployment.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum MachineDeploymentPhase {
    ScalingUp,
    ScalingDown,
    Running,
    Failed,
    Unknown,
}
