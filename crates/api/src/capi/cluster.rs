//! The Cluster kind: one workload cluster, its network, control plane and infrastructure.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{ConditionPolarity, ObjectReference};
use super::conditions::{Condition, MetaCondition};
use super::topology::Topology;

/// The finalizer the Cluster controller keeps on every Cluster until its children are gone.
pub const CLUSTER_FINALIZER: &str = "cluster.cluster.x-k8s.io";

/// The desired state of a Cluster.
// Each printcolumn(...) repeats keys such as `type_ = "string"`, which clippy mistakes for
// duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta1",
    kind = "Cluster",
    plural = "clusters",
    namespaced,
    status = "ClusterStatus",
    derive = "PartialEq",
    shortname = "cl",
    category = "cluster-api",
    doc = "A workload cluster: the declaration that it should exist, and how it is built.",
    printcolumn(
        name = "ClusterClass",
        type_ = "string",
        json_path = ".spec.topology.class",
        description = "The ClusterClass the Cluster is built from, if any"
    ),
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "Lifecycle phase, e.g. Provisioning, Provisioned, Deleting"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "Time since the Cluster was created"
    ),
    printcolumn(
        name = "Version",
        type_ = "string",
        json_path = ".spec.topology.version",
        description = "The Kubernetes version of a Cluster built from a ClusterClass"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    /// Stop reconciling the Cluster and everything it owns while true.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    /// The cluster's network settings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_network: Option<ClusterNetwork>,
    /// Where the control plane's API server is reached; usually set by a provider.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<ApiEndpoint>,
    /// The control plane provider's object, e.g. a KubeadmControlPlane.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control_plane_ref: Option<ObjectReference>,
    /// The infrastructure provider's object, e.g. an AWSCluster.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub infrastructure_ref: Option<ObjectReference>,
    /// The managed topology of a Cluster built from a ClusterClass.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topology: Option<Topology>,
    /// Extra conditions that must hold before the Cluster counts as available.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 32),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["conditionType"])
    )]
    pub availability_gates: Option<Vec<ClusterAvailabilityGate>>,
}

impl Cluster {
    /// Whether the Cluster is paused (`spec.paused`, or the paused annotation): nothing of it
    /// is reconciled meanwhile.
    pub fn paused(&self) -> bool {
        self.spec.paused == Some(true)
            || self
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(super::annotations::PAUSED))
    }
}

/// A cluster's network settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterNetwork {
    /// The port the API server listens on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_server_port: Option<i32>,
    /// The address ranges of Services.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub services: Option<NetworkRanges>,
    /// The address ranges of Pods.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pods: Option<NetworkRanges>,
    /// The DNS domain of Services, `cluster.local` when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub service_domain: Option<String>,
}

/// A list of CIDR blocks.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkRanges {
    /// The blocks, e.g. `192.168.0.0/16`.
    #[schemars(length(max = 100), inner(length(min = 1, max = 43)))]
    pub cidr_blocks: Vec<String>,
}

/// A host and port where an API server is reached.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiEndpoint {
    /// The host name or IP address.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub host: Option<String>,
    /// The port.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
}

/// A condition that must hold before a Cluster counts as available.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterAvailabilityGate {
    /// The condition type to look at on the Cluster.
    #[schemars(
        length(min = 1, max = 316),
        pattern(crate::schema::CONDITION_TYPE_PATTERN)
    )]
    pub condition_type: String,
    /// Whether the gate passes when the condition is `True` (default) or `False`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub polarity: Option<ConditionPolarity>,
}

/// The observed state of a Cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// The failure domains the infrastructure provider offers, by name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_domains: Option<BTreeMap<String, FailureDomainSpec>>,
    /// A terminal problem, as a short machine-readable word (deprecated upstream).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// A terminal problem, for humans (deprecated upstream).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 10240))]
    pub failure_message: Option<String>,
    /// The lifecycle phase, derived for humans.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<ClusterPhase>,
    /// The infrastructure provider reports the infrastructure ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub infrastructure_ready: Option<bool>,
    /// The control plane provider reports the control plane ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control_plane_ready: Option<bool>,
    /// The Cluster's conditions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// The `metadata.generation` this status was computed from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Status fields CAPI already writes in their `v1beta2` shape.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub v1beta2: Option<ClusterV1Beta2Status>,
}

/// The lifecycle phase of a Cluster.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum ClusterPhase {
    Pending,
    Provisioning,
    Provisioned,
    Deleting,
    Failed,
    Unknown,
}

/// What the infrastructure provider says about one failure domain.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailureDomainSpec {
    /// Whether control-plane Machines may be placed here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<bool>,
    /// Provider-specific facts about the domain.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attributes: Option<BTreeMap<String, String>>,
}

/// The `status.v1beta2` block of a Cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterV1Beta2Status {
    /// Conditions in the Kubernetes-standard shape.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 32),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"])
    )]
    pub conditions: Option<Vec<MetaCondition>>,
    /// Replica counts of the control plane.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<ClusterReplicasStatus>,
    /// Replica counts of the workers (MachineDeployments, MachinePools, lone Machines).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workers: Option<ClusterReplicasStatus>,
}

/// Replica counts of the control plane or the workers of a Cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterReplicasStatus {
    /// How many replicas are wanted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub desired_replicas: Option<i32>,
    /// How many replicas exist.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// How many replicas match their current spec.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub up_to_date_replicas: Option<i32>,
    /// How many replicas are ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// How many replicas are available.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
    /// The Kubernetes versions the replicas run, with their counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 32), extend("x-kubernetes-list-type" = "atomic"))]
    pub versions: Option<Vec<super::common::StatusVersion>>,
    /// The Kubernetes versions an upgrade will step through.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 32), extend("x-kubernetes-list-type" = "atomic"))]
    pub upgrade_plan: Option<Vec<UpgradeStep>>,
}

/// One step of a planned upgrade.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeStep {
    /// The Kubernetes version of this step.
    #[schemars(length(min = 1, max = 256))]
    pub version: String,
}
