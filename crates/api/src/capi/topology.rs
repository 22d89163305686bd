//! The managed topology of a Cluster built from a ClusterClass (`spec.topology`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::core::Duration;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    MachineTaint, ObjectReference, TemplateMetadata, UnhealthyCondition, UnhealthyMachineCondition,
};
use super::machine::MachineReadinessGate;
use super::machine_deployment::MachineDeploymentStrategy;

/// What a Cluster built from a ClusterClass should look like.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Topology {
    /// The name of the ClusterClass.
    #[schemars(length(min = 1, max = 253))]
    pub class: String,
    /// The namespace of the ClusterClass; the Cluster's own when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), pattern(crate::schema::DNS_LABEL_PATTERN))]
    pub class_namespace: Option<String>,
    /// The Kubernetes version of the whole cluster.
    #[schemars(length(min = 1, max = 256))]
    pub version: String,
    /// Replace every Machine created before this time (deprecated upstream).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::schema::DateTime>")]
    pub rollout_after: Option<Time>,
    /// The control plane's part of the topology.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<ControlPlaneTopology>,
    /// The workers' part of the topology.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workers: Option<WorkersTopology>,
    /// Values for the variables the ClusterClass declares.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 1000),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"])
    )]
    pub variables: Option<Vec<ClusterVariable>>,
}

/// The control plane of a managed topology.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControlPlaneTopology {
    /// Labels and annotations for the control plane object and its Machines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    /// How many control-plane Machines are wanted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// When to roll out the control plane's Machines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollout: Option<TopologyRollout>,
    /// The health check of the control plane's Machines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine_health_check: Option<MachineHealthCheckTopology>,
    /// See `MachineSpec::node_drain_timeout`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_drain_timeout: Option<Duration>,
    /// See `MachineSpec::node_volume_detach_timeout`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_volume_detach_timeout: Option<Duration>,
    /// See `MachineSpec::node_deletion_timeout`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_deletion_timeout: Option<Duration>,
    /// Extra conditions for the control plane's Machines to count as ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 32),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["conditionType"])
    )]
    pub readiness_gates: Option<Vec<MachineReadinessGate>>,
    /// Taints CAPI keeps on the control plane's Nodes.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 64),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["key", "effect"])
    )]
    pub taints: Option<Vec<MachineTaint>>,
    /// Variable values that apply only to the control plane.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variables: Option<VariableOverrides>,
}

/// The workers of a managed topology.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkersTopology {
    /// The MachineDeployments to create.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 2000),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"])
    )]
    pub machine_deployments: Option<Vec<MachineDeploymentTopology>>,
    /// The MachinePools to create.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 2000),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"])
    )]
    pub machine_pools: Option<Vec<MachinePoolTopology>>,
}

/// One MachineDeployment of a managed topology.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentTopology {
    /// Labels and annotations for the MachineDeployment and its Machines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    /// The MachineDeployment class of the ClusterClass to use.
    #[schemars(length(min = 1, max = 256))]
    pub class: String,
    /// A name unique within the topology; the MachineDeployment's name derives from it.
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// The failure domain of the Machines.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub failure_domain: Option<String>,
    /// How many Machines are wanted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// When to roll out the Machines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollout: Option<TopologyRollout>,
    /// The health check of the Machines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine_health_check: Option<MachineHealthCheckTopology>,
    /// See `MachineSpec::node_drain_timeout`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_drain_timeout: Option<Duration>,
    /// See `MachineSpec::node_volume_detach_timeout`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_volume_detach_timeout: Option<Duration>,
    /// See `MachineSpec::node_deletion_timeout`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_deletion_timeout: Option<Duration>,
    /// Seconds a new Machine must be ready before it counts as available.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_ready_seconds: Option<i32>,
    /// Extra conditions for the Machines to count as ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 32),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["conditionType"])
    )]
    pub readiness_gates: Option<Vec<MachineReadinessGate>>,
    /// How old Machines are replaced by new ones.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strategy: Option<MachineDeploymentStrategy>,
    /// Taints CAPI keeps on the Nodes.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 64),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["key", "effect"])
    )]
    pub taints: Option<Vec<MachineTaint>>,
    /// Variable values that apply only to this MachineDeployment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variables: Option<VariableOverrides>,
}

/// One MachinePool of a managed topology.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachinePoolTopology {
    /// Labels and annotations for the MachinePool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    /// The MachinePool class of the ClusterClass to use.
    #[schemars(length(min = 1, max = 256))]
    pub class: String,
    /// A name unique within the topology; the MachinePool's name derives from it.
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// The failure domains the pool's Machines may be placed in.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100), inner(length(min = 1, max = 256)))]
    pub failure_domains: Option<Vec<String>>,
    /// See `MachineSpec::node_drain_timeout`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_drain_timeout: Option<Duration>,
    /// See `MachineSpec::node_volume_detach_timeout`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_volume_detach_timeout: Option<Duration>,
    /// See `MachineSpec::node_deletion_timeout`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_deletion_timeout: Option<Duration>,
    /// Seconds a new Machine must be ready before it counts as available.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_ready_seconds: Option<i32>,
    /// How many Machines are wanted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Taints CAPI keeps on the Nodes.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 64),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["key", "effect"])
    )]
    pub taints: Option<Vec<MachineTaint>>,
    /// Variable values that apply only to this MachinePool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variables: Option<VariableOverrides>,
}

/// When the Machines of part of a topology are rolled out.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct TopologyRollout {
    /// Replace every Machine created before this time.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::schema::DateTime>")]
    pub after: Option<Time>,
}

/// The MachineHealthCheck the topology controller creates for part of a topology.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineHealthCheckTopology {
    /// Create the health check (true) or not (false); the ClusterClass decides when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enable: Option<bool>,
    /// See `MachineHealthCheckSpec::unhealthy_conditions`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100))]
    pub unhealthy_conditions: Option<Vec<UnhealthyCondition>>,
    /// See `MachineHealthCheckSpec::unhealthy_machine_conditions`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 100), extend("x-kubernetes-list-type" = "atomic"))]
    pub unhealthy_machine_conditions: Option<Vec<UnhealthyMachineCondition>>,
    /// See `MachineHealthCheckSpec::max_unhealthy`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::schema::IntOrString>")]
    pub max_unhealthy: Option<IntOrString>,
    /// See `MachineHealthCheckSpec::unhealthy_range`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 32),
        pattern(crate::schema::UNHEALTHY_RANGE_PATTERN)
    )]
    pub unhealthy_range: Option<String>,
    /// See `MachineHealthCheckSpec::node_startup_timeout`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_startup_timeout: Option<Duration>,
    /// See `MachineHealthCheckSpec::remediation_template`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remediation_template: Option<ObjectReference>,
}

/// The value of one ClusterClass variable.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterVariable {
    /// The variable's name.
    #[schemars(length(min = 1, max = 256))]
    pub name: String,
    /// Which patch's definition of the variable this value is for (deprecated upstream).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub definition_from: Option<String>,
    /// The value, of whatever shape the ClusterClass's variable schema allows; kept as JSON
    /// because only that schema, not this crate, knows its shape.
    #[schemars(with = "crate::schema::PreserveUnknownFields")]
    pub value: serde_json::Value,
}

/// Variable values that override the Cluster-wide ones for part of a topology.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VariableOverrides {
    /// The overriding values.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 1000),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"])
    )]
    pub overrides: Option<Vec<ClusterVariable>>,
}
