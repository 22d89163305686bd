//! The MachinePool kind: a group of machines the infrastructure provider scales as one (an EKS
//! node group, an auto-scaling group), with no Machine object per instance. Cluster API core
//! leaves MachinePools to providers; lariat's core reconciles them.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{ObjectReference, StatusVersion};
use super::conditions::Condition;
use super::machine::MachineTemplateSpec;
use super::machine_set::ReplicasV1Beta2Status;

/// The desired state of a MachinePool.
// Each printcolumn(...) repeats keys such as `type_ = "string"`, which clippy mistakes for
// duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta1",
    kind = "MachinePool",
    plural = "machinepools",
    namespaced,
    status = "MachinePoolStatus",
    derive = "PartialEq",
    shortname = "mp",
    category = "cluster-api",
    doc = "A group of machines the infrastructure provider creates and scales as one.",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas"
    ),
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".spec.clusterName",
        description = "The Cluster the pool belongs to"
    ),
    printcolumn(
        name = "Desired",
        type_ = "integer",
        json_path = ".spec.replicas",
        description = "The machines wanted",
        priority = 10
    ),
    printcolumn(
        name = "Replicas",
        type_ = "string",
        json_path = ".status.replicas",
        description = "The machines there are"
    ),
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "Where the pool is in its life"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "Time since the pool was created"
    ),
    printcolumn(
        name = "Version",
        type_ = "string",
        json_path = ".spec.template.spec.version",
        description = "The Kubernetes version of the pool's machines"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MachinePoolSpec {
    /// The Cluster the pool belongs to.
    #[schemars(length(min = 1, max = 63))]
    pub cluster_name: String,
    /// The number of machines wanted (default 1); `kubectl scale` sets it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// What each machine is: bootstrap config, infrastructure, version.
    pub template: MachineTemplateSpec,
    /// Seconds a new Node must be ready before it counts as available.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_ready_seconds: Option<i32>,
    /// The provider IDs of the pool's instances, written by the infrastructure provider.
    #[serde(rename = "providerIDList", skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 10000), inner(length(min = 1, max = 512)))]
    pub provider_id_list: Option<Vec<String>>,
    /// The failure domains the machines may go to.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100), inner(length(min = 1, max = 256)))]
    pub failure_domains: Option<Vec<String>>,
}

/// Where a MachinePool is in its life.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum MachinePoolPhase {
    Pending,
    Provisioning,
    Provisioned,
    Running,
    ScalingUp,
    ScalingDown,
    Scaling,
    Deleting,
    Failed,
    Unknown,
}

/// The observed state of a MachinePool.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachinePoolStatus {
    /// The Nodes of the pool's instances in the workload cluster.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 10000))]
    pub node_refs: Option<Vec<ObjectReference>>,
    /// Instances the provider reports.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Instances whose Node is ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Instances ready for at least minReadySeconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
    /// Instances wanted but not available.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unavailable_replicas: Option<i32>,
    /// A failure the user must fix.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// What the failure is.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 10240))]
    pub failure_message: Option<String>,
    /// Where the pool is in its life.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<MachinePoolPhase>,
    /// Whether the bootstrap data is ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bootstrap_ready: Option<bool>,
    /// Whether the infrastructure is ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub infrastructure_ready: Option<bool>,
    /// The generation of the spec last reconciled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// What holds of the pool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// The Kubernetes versions of the pool's machines.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 100),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["version"])
    )]
    pub versions: Option<Vec<StatusVersion>>,
    /// Cluster API's v1beta2 counts and conditions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub v1beta2: Option<ReplicasV1Beta2Status>,
}
