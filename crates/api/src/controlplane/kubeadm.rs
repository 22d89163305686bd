//! The KubeadmControlPlane and KubeadmControlPlaneTemplate kinds: a kubeadm control plane.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use kube::core::Duration;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::bootstrap::KubeadmConfigSpec;
use crate::capi::common::{
    MachineNamingStrategy, MachineTaint, ObjectReference, StatusVersion, TemplateMetadata,
};
use crate::capi::conditions::Condition;
use crate::capi::machine::MachineReadinessGate;
use crate::capi::machine_set::ReplicasV1Beta2Status;

/// The finalizer the KubeadmControlPlane controller keeps until its Machines are gone.
pub const KUBEADM_CONTROL_PLANE_FINALIZER: &str = "kubeadm.controlplane.cluster.x-k8s.io";

/// The desired state of a KubeadmControlPlane.
// Each printcolumn(...) repeats keys such as `type_ = "string"`, which clippy mistakes for
// duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "controlplane.cluster.x-k8s.io",
    version = "v1beta1",
    kind = "KubeadmControlPlane",
    plural = "kubeadmcontrolplanes",
    namespaced,
    status = "KubeadmControlPlaneStatus",
    derive = "PartialEq",
    shortname = "kcp",
    category = "cluster-api",
    doc = "A workload cluster's control plane: control-plane Machines bootstrapped with kubeadm.",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",
        description = "The Cluster the control plane belongs to"
    ),
    printcolumn(
        name = "Initialized",
        type_ = "boolean",
        json_path = ".status.initialized",
        description = "Whether kubeadm init has completed on the first Machine"
    ),
    printcolumn(
        name = "API Server Available",
        type_ = "boolean",
        json_path = ".status.ready",
        description = "Whether the API server answers requests"
    ),
    printcolumn(
        name = "Desired",
        type_ = "integer",
        json_path = ".spec.replicas",
        description = "How many control-plane Machines are wanted",
        priority = 10
    ),
    printcolumn(
        name = "Replicas",
        type_ = "integer",
        json_path = ".status.replicas",
        description = "How many control-plane Machines exist and are not being deleted"
    ),
    printcolumn(
        name = "Ready",
        type_ = "integer",
        json_path = ".status.readyReplicas",
        description = "How many control-plane Machines are ready"
    ),
    printcolumn(
        name = "Updated",
        type_ = "integer",
        json_path = ".status.updatedReplicas",
        description = "How many control-plane Machines match the current spec"
    ),
    printcolumn(
        name = "Unavailable",
        type_ = "integer",
        json_path = ".status.unavailableReplicas",
        description = "How many control-plane Machines are still missing or not available"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "Time since the KubeadmControlPlane was created"
    ),
    printcolumn(
        name = "Version",
        type_ = "string",
        json_path = ".spec.version",
        description = "The Kubernetes version of the control plane"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmControlPlaneSpec {
    /// How many control-plane Machines are wanted; an odd number keeps etcd's quorum.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// The Kubernetes version of the control plane, e.g. `v1.30.0`.
    #[schemars(length(min = 1, max = 256))]
    pub version: String,
    /// The shape of each control-plane Machine.
    pub machine_template: KubeadmControlPlaneMachineTemplate,
    /// How each control-plane node is bootstrapped.
    pub kubeadm_config_spec: KubeadmConfigSpec,
    /// Replace Machines early when a criterion holds, e.g. certificates expiring soon.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollout_before: Option<RolloutBefore>,
    /// Replace every Machine created before this time, even without a spec change.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::schema::DateTime>")]
    pub rollout_after: Option<Time>,
    /// How old Machines are replaced; a rolling update with one surge Machine when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}))]
    pub rollout_strategy: Option<RolloutStrategy>,
    /// How unhealthy control-plane Machines are remediated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remediation_strategy: Option<RemediationStrategy>,
    /// How the names of new Machines are generated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine_naming_strategy: Option<MachineNamingStrategy>,
}

/// The shape of each control-plane Machine.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmControlPlaneMachineTemplate {
    /// Labels and annotations for each Machine.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    /// The infrastructure template each Machine's infrastructure is cloned from.
    pub infrastructure_ref: ObjectReference,
    /// Extra conditions that must hold before a Machine counts as ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 32),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["conditionType"])
    )]
    pub readiness_gates: Option<Vec<MachineReadinessGate>>,
    /// Longest time to spend draining a Node on deletion; unset or `0s` means no limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_drain_timeout: Option<Duration>,
    /// Longest time to wait for volumes to detach on deletion; unset or `0s` means no limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_volume_detach_timeout: Option<Duration>,
    /// Longest time to retry deleting a Node once the infrastructure is gone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_deletion_timeout: Option<Duration>,
    /// Taints CAPI keeps on the Nodes.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 64),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["key", "effect"])
    )]
    pub taints: Option<Vec<MachineTaint>>,
}

/// Criteria that trigger a rollout before anything in the spec changes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutBefore {
    /// Replace a Machine once its certificates expire within this many days.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub certificates_expiry_days: Option<i32>,
}

/// How control-plane Machines are replaced.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStrategy {
    /// The kind of rollout; only `RollingUpdate` exists.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<RolloutStrategyType>,
    /// Parameters of a `RollingUpdate` rollout.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rolling_update: Option<RollingUpdate>,
}

/// The kinds of control-plane rollout.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum RolloutStrategyType {
    /// Add a new Machine, then remove an old one, until all are new.
    RollingUpdate,
}

/// Bounds of a control-plane rolling update.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollingUpdate {
    /// How many Machines may exist above the desired count: 0 or 1 (or a percentage).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::schema::IntOrString>")]
    pub max_surge: Option<IntOrString>,
}

/// How unhealthy control-plane Machines are remediated.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RemediationStrategy {
    /// How many times in a row a failed Machine is replaced before giving up; no limit when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_retry: Option<i32>,
    /// How long to wait after a remediation before the next one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_period: Option<Duration>,
    /// After this long without a failure, remediation counts start again from zero.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_healthy_period: Option<Duration>,
}

/// The observed state of a KubeadmControlPlane.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmControlPlaneStatus {
    /// The selector of the control-plane Machines in string form, for the scale subresource.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    pub selector: Option<String>,
    /// How many control-plane Machines exist and are not being deleted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// The lowest Kubernetes version among the control-plane Machines.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub version: Option<String>,
    /// How many control-plane Machines match the current spec.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_replicas: Option<i32>,
    /// How many control-plane Machines are ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// How many control-plane Machines are still missing or not available.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unavailable_replicas: Option<i32>,
    /// `kubeadm init` has completed on the first Machine; set once (the control plane
    /// provider contract's `initialized`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initialized: Option<bool>,
    /// The API server answers requests (the control plane provider contract's `ready`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    /// A terminal problem, as a short machine-readable word (deprecated upstream).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// A terminal problem, for humans (deprecated upstream).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 10240))]
    pub failure_message: Option<String>,
    /// The `metadata.generation` this status was computed from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The KubeadmControlPlane's conditions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// The last remediation KubeadmControlPlane carried out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_remediation: Option<LastRemediationStatus>,
    /// The Kubernetes versions the control-plane Machines run, with their counts.
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

/// The last remediation of a control-plane Machine.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastRemediationStatus {
    /// The Machine that was remediated (it may be gone by now).
    #[schemars(length(min = 1, max = 253))]
    pub machine: String,
    /// When the remediation happened.
    #[schemars(with = "crate::schema::DateTime")]
    pub timestamp: Time,
    /// How many remediations in a row this one was, counting from zero.
    pub retry_count: i32,
}

/// The desired state of a KubeadmControlPlaneTemplate: the KubeadmControlPlane a ClusterClass
/// gives each Cluster.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "controlplane.cluster.x-k8s.io",
    version = "v1beta1",
    kind = "KubeadmControlPlaneTemplate",
    plural = "kubeadmcontrolplanetemplates",
    namespaced,
    derive = "PartialEq",
    category = "cluster-api",
    doc = "The KubeadmControlPlane a ClusterClass creates for each of its Clusters.",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "Time since the KubeadmControlPlaneTemplate was created"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmControlPlaneTemplateSpec {
    /// The KubeadmControlPlane to create.
    pub template: KubeadmControlPlaneTemplateResource,
}

/// The KubeadmControlPlane a template stamps out: metadata plus a spec.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmControlPlaneTemplateResource {
    /// Labels and annotations for the KubeadmControlPlane.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    /// The spec of the KubeadmControlPlane.
    pub spec: KubeadmControlPlaneTemplateResourceSpec,
}

/// A KubeadmControlPlane spec without the fields the topology controller fills in per
/// Cluster (`replicas`, `version`, the infrastructure reference).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmControlPlaneTemplateResourceSpec {
    /// The shape of each control-plane Machine.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine_template: Option<KubeadmControlPlaneTemplateMachineTemplate>,
    /// How each control-plane node is bootstrapped.
    pub kubeadm_config_spec: KubeadmConfigSpec,
    /// Replace Machines early when a criterion holds, e.g. certificates expiring soon.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollout_before: Option<RolloutBefore>,
    /// Replace every Machine created before this time, even without a spec change.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::schema::DateTime>")]
    pub rollout_after: Option<Time>,
    /// How old Machines are replaced; a rolling update with one surge Machine when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}))]
    pub rollout_strategy: Option<RolloutStrategy>,
    /// How unhealthy control-plane Machines are remediated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remediation_strategy: Option<RemediationStrategy>,
    /// How the names of new Machines are generated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine_naming_strategy: Option<MachineNamingStrategy>,
}

/// The shape of each control-plane Machine, as a template gives it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmControlPlaneTemplateMachineTemplate {
    /// Labels and annotations for each Machine.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    /// Longest time to spend draining a Node on deletion; unset or `0s` means no limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_drain_timeout: Option<Duration>,
    /// Longest time to wait for volumes to detach on deletion; unset or `0s` means no limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_volume_detach_timeout: Option<Duration>,
    /// Longest time to retry deleting a Node once the infrastructure is gone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_deletion_timeout: Option<Duration>,
    /// Taints CAPI keeps on the Nodes.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 64),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["key", "effect"])
    )]
    pub taints: Option<Vec<MachineTaint>>,
}
