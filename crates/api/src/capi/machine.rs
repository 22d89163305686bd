//! The Machine kind: one node of a workload cluster, backed by provider infrastructure.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use kube::core::Duration;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{ConditionPolarity, MachineTaint, ObjectReference, TemplateMetadata};
use super::conditions::{Condition, MetaCondition};

/// The finalizer the Machine controller keeps on every Machine until its Node is gone.
pub const MACHINE_FINALIZER: &str = "machine.cluster.x-k8s.io";

/// The desired state of a Machine.
// Each printcolumn(...) repeats keys such as `type_ = "string"`, which clippy mistakes for
// duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta1",
    kind = "Machine",
    plural = "machines",
    namespaced,
    status = "MachineStatus",
    derive = "PartialEq",
    shortname = "ma",
    category = "cluster-api",
    doc = "A node of a workload cluster, made from an infrastructure and a bootstrap object.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".spec.clusterName",
        description = "The Cluster the Machine belongs to"
    ),
    printcolumn(
        name = "NodeName",
        type_ = "string",
        json_path = ".status.nodeRef.name",
        description = "The Node this Machine became"
    ),
    printcolumn(
        name = "ProviderID",
        type_ = "string",
        json_path = ".spec.providerID",
        description = "The infrastructure provider's ID for the Machine"
    ),
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "Lifecycle phase, e.g. Provisioning, Running, Deleting"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "Time since the Machine was created"
    ),
    printcolumn(
        name = "Version",
        type_ = "string",
        json_path = ".spec.version",
        description = "The Kubernetes version of the Machine"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MachineSpec {
    /// The name of the Cluster this Machine belongs to.
    #[schemars(length(min = 1, max = 63))]
    pub cluster_name: String,
    /// Where the bootstrap data for the Node comes from.
    pub bootstrap: Bootstrap,
    /// The provider object holding the Machine's infrastructure, e.g. an AWSMachine.
    pub infrastructure_ref: ObjectReference,
    /// The Kubernetes version the Node runs, e.g. `v1.28.5`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub version: Option<String>,
    /// The infrastructure provider's ID, matching the Node's `spec.providerID`.
    #[serde(rename = "providerID", skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub provider_id: Option<String>,
    /// The failure domain the Machine should be placed in.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub failure_domain: Option<String>,
    /// Extra conditions that must hold before the Machine counts as ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 32),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["conditionType"])
    )]
    pub readiness_gates: Option<Vec<MachineReadinessGate>>,
    /// Longest time to spend draining the Node on deletion; unset or `0s` means no limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_drain_timeout: Option<Duration>,
    /// Longest time to wait for volumes to detach on deletion; unset or `0s` means no limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_volume_detach_timeout: Option<Duration>,
    /// Longest time to retry deleting the Node once the infrastructure is gone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_deletion_timeout: Option<Duration>,
    /// Taints CAPI keeps on the Node.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 64),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["key", "effect"])
    )]
    pub taints: Option<Vec<MachineTaint>>,
}

/// Where a Machine's bootstrap data comes from: a provider's config object or a ready Secret.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Bootstrap {
    /// The bootstrap provider's object, e.g. a KubeadmConfig.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_ref: Option<ObjectReference>,
    /// The Secret holding the bootstrap data, once it exists.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 0, max = 253))]
    pub data_secret_name: Option<String>,
}

/// A condition that must hold before a Machine counts as ready.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineReadinessGate {
    /// The condition type to look at on the Machine.
    #[schemars(
        length(min = 1, max = 316),
        pattern(crate::schema::CONDITION_TYPE_PATTERN)
    )]
    pub condition_type: String,
    /// Whether the gate passes when the condition is `True` (default) or `False`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub polarity: Option<ConditionPolarity>,
}

/// The observed state of a Machine.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineStatus {
    /// The Node this Machine became, once it joined.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_ref: Option<ObjectReference>,
    /// System information reported by the Node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_info: Option<NodeSystemInfo>,
    /// When the phase last changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::schema::DateTime>")]
    pub last_updated: Option<Time>,
    /// A terminal problem, as a short machine-readable word (deprecated upstream).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// A terminal problem, for humans (deprecated upstream).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 10240))]
    pub failure_message: Option<String>,
    /// The addresses the infrastructure provider reports.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub addresses: Option<Vec<MachineAddress>>,
    /// The lifecycle phase, derived for humans.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<MachinePhase>,
    /// When the Node's certificates expire, for control-plane Machines.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::schema::DateTime>")]
    pub certificates_expiry_date: Option<Time>,
    /// The bootstrap provider reports the bootstrap data ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bootstrap_ready: Option<bool>,
    /// The infrastructure provider reports the infrastructure ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub infrastructure_ready: Option<bool>,
    /// The `metadata.generation` this status was computed from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The Machine's conditions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// Progress of the deletion steps, once deletion started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deletion: Option<MachineDeletionStatus>,
    /// Status fields CAPI already writes in their `v1beta2` shape.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub v1beta2: Option<MachineV1Beta2Status>,
}

/// The lifecycle phase of a Machine.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum MachinePhase {
    Pending,
    Provisioning,
    Provisioned,
    Running,
    Deleting,
    Deleted,
    Failed,
    Unknown,
}

/// One address of a Machine.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineAddress {
    /// What kind of address this is.
    #[serde(rename = "type")]
    pub type_: MachineAddressType,
    /// The address itself.
    #[schemars(length(min = 1, max = 256))]
    pub address: String,
}

/// The kind of a [`MachineAddress`].
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum MachineAddressType {
    Hostname,
    #[serde(rename = "ExternalIP")]
    ExternalIp,
    #[serde(rename = "InternalIP")]
    InternalIp,
    #[serde(rename = "ExternalDNS")]
    ExternalDns,
    #[serde(rename = "InternalDNS")]
    InternalDns,
}

/// System information about a Node, as the kubelet reports it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeSystemInfo {
    /// The machine ID.
    #[serde(rename = "machineID")]
    pub machine_id: String,
    /// The system UUID.
    #[serde(rename = "systemUUID")]
    pub system_uuid: String,
    /// The boot ID.
    #[serde(rename = "bootID")]
    pub boot_id: String,
    /// The kernel version.
    pub kernel_version: String,
    /// The OS image name.
    pub os_image: String,
    /// The container runtime and its version.
    pub container_runtime_version: String,
    /// The kubelet version.
    pub kubelet_version: String,
    /// The kube-proxy version.
    pub kube_proxy_version: String,
    /// The operating system, e.g. `linux`.
    pub operating_system: String,
    /// The CPU architecture, e.g. `amd64`.
    pub architecture: String,
    /// Swap memory information.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swap: Option<NodeSwapStatus>,
}

/// Swap memory on a Node.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeSwapStatus {
    /// Total swap, in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity: Option<i64>,
}

/// When each step of a Machine's deletion started.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeletionStatus {
    /// When draining the Node started.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::schema::DateTime>")]
    pub node_drain_start_time: Option<Time>,
    /// When waiting for volumes to detach started.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::schema::DateTime>")]
    pub wait_for_node_volume_detach_start_time: Option<Time>,
    /// When waiting for pre-drain hooks started.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::schema::DateTime>")]
    pub wait_for_pre_drain_hook_start_time: Option<Time>,
    /// When waiting for pre-terminate hooks started.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::schema::DateTime>")]
    pub wait_for_pre_terminate_hook_start_time: Option<Time>,
}

/// The `status.v1beta2` block of a Machine.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineV1Beta2Status {
    /// Conditions in the Kubernetes-standard shape.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 32),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"])
    )]
    pub conditions: Option<Vec<MetaCondition>>,
}

/// The Machine a MachineSet or MachineDeployment stamps out: metadata plus a Machine spec.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineTemplateSpec {
    /// Labels and annotations for each Machine.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    /// The spec of each Machine.
    // Optional in the upstream schema although Go always writes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec: Option<MachineSpec>,
}
