//! AWSManagedMachinePool (`infrastructure.cluster.x-k8s.io/v1beta2`): an EKS managed node group
//! (instance types, scaling, AMI type, disk, labels, taints, capacity type) behind a MachinePool.

use kube::CustomResource;

use super::instance::*;
use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnclaveOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AWSLaunchTemplate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_security_groups: Option<Vec<AWSResourceReference>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ami: Option<AMIReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_reservation_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_reservation_preference: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enclave_options: Option<EnclaveOptions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iam_instance_profile: Option<String>,
    #[serde(
        rename = "imageLookupBaseOS",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub image_lookup_base_os: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_lookup_format: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_lookup_org: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_metadata_options: Option<InstanceMetadataOptions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["OnDemand", "Spot", "CapacityBlock"]))]
    pub market_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub non_root_volumes: Option<Vec<Volume>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_dns_name: Option<PrivateDNSName>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_volume: Option<Volume>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spot_market_options: Option<SpotMarketOptions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_key_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_number: Option<i64>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AWSLifecycleHook {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["CONTINUE", "ABANDON"]))]
    pub default_result: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "duration"))]
    pub heartbeat_timeout: Option<String>,
    #[schemars(extend("enum" = ["autoscaling:EC2_INSTANCE_LAUNCHING", "autoscaling:EC2_INSTANCE_TERMINATING"]))]
    pub lifecycle_transition: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notification_metadata: Option<String>,
    #[serde(
        rename = "notificationTargetARN",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub notification_target_arn: Option<String>,
    #[serde(rename = "roleARN", default, skip_serializing_if = "Option::is_none")]
    pub role_arn: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeRepairConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub enabled: Option<bool>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManagedRemoteAccess {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_security_groups: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_key_name: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManagedMachinePoolScaling {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_size: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_size: Option<i32>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Taint {
    #[schemars(extend("enum" = ["no-schedule", "no-execute", "prefer-no-schedule"]))]
    pub effect: String,
    pub key: String,
    pub value: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdateConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::schema::Integer>", range(min = 1, max = 100))]
    pub max_unavailable: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::schema::Integer>", range(min = 1, max = 100))]
    pub max_unavailable_percentage: Option<i64>,
}

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[allow(clippy::duplicated_attributes)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta2",
    kind = "AWSManagedMachinePool",
    plural = "awsmanagedmachinepools",
    namespaced,
    status = "AWSManagedMachinePoolStatus",
    derive = "PartialEq",
    derive = "Default",
    shortname = "awsmmp",
    category = "cluster-api",
    doc = "An EKS managed node group, the infrastructure of a MachinePool.",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.ready",
        description = "Whether the node group is ready"
    ),
    printcolumn(
        name = "Replicas",
        type_ = "integer",
        json_path = ".status.replicas",
        description = "Nodes in the group"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct AWSManagedMachinePoolSpec {
    /// Tags added to the node group and what it creates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_tags: Option<BTreeMap<String, String>>,
    /// The AMI type EKS boots the nodes with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["AL2_x86_64", "AL2_x86_64_GPU", "AL2_ARM_64", "CUSTOM", "BOTTLEROCKET_ARM_64", "BOTTLEROCKET_x86_64", "BOTTLEROCKET_ARM_64_FIPS", "BOTTLEROCKET_x86_64_FIPS", "BOTTLEROCKET_ARM_64_NVIDIA", "BOTTLEROCKET_x86_64_NVIDIA", "WINDOWS_CORE_2019_x86_64", "WINDOWS_FULL_2019_x86_64", "WINDOWS_CORE_2022_x86_64", "WINDOWS_FULL_2022_x86_64", "AL2023_x86_64_STANDARD", "AL2023_ARM_64_STANDARD", "AL2023_x86_64_NEURON", "AL2023_x86_64_NVIDIA", "AL2023_ARM_64_NVIDIA"], "default" = "AL2_x86_64"))]
    pub ami_type: Option<String>,
    /// The AMI release version (default: the latest for the Kubernetes version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2))]
    pub ami_version: Option<String>,
    /// Which of the availability zones' subnets to use: public, private or all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["public", "private", "all"]))]
    pub availability_zone_subnet_type: Option<String>,
    /// The availability zones the nodes go to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub availability_zones: Option<Vec<String>>,
    /// A launch template for the nodes, instead of EKS's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aws_launch_template: Option<AWSLaunchTemplate>,
    /// On-demand or spot capacity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["onDemand", "spot"], "default" = "onDemand"))]
    pub capacity_type: Option<String>,
    /// The root disk's size in GiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_size: Option<i32>,
    /// The node group's name in EKS (default: derived from the namespace and name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eks_nodegroup_name: Option<String>,
    /// The EC2 instance type of the nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
    /// Kubernetes labels of the nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Lifecycle hooks of the node group's auto-scaling group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle_hooks: Option<Vec<AWSLifecycleHook>>,
    /// Whether EKS repairs unhealthy nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_repair_config: Option<NodeRepairConfig>,
    /// The provider IDs of the node group's instances.
    #[serde(
        rename = "providerIDList",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id_list: Option<Vec<String>>,
    /// SSH access to the nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_access: Option<ManagedRemoteAccess>,
    /// Managed policies attached to the nodes' IAM role beside EKS's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role_additional_policies: Option<Vec<String>>,
    /// The nodes' IAM role: used as it is if it exists, created otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role_name: Option<String>,
    /// The path of the IAM role lariat creates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role_path: Option<String>,
    /// The permissions boundary of the IAM role lariat creates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role_permissions_boundary: Option<String>,
    /// The node group's minimum and maximum size; the MachinePool's replicas is the desired size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scaling: Option<ManagedMachinePoolScaling>,
    /// The subnets of the nodes, instead of those the availability zones select.
    #[serde(rename = "subnetIDs", default, skip_serializing_if = "Option::is_none")]
    pub subnet_ids: Option<Vec<String>>,
    /// Kubernetes taints of the nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taints: Option<Vec<Taint>>,
    /// How many nodes may be unavailable during an update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_config: Option<UpdateConfig>,
}

/// The observed state of an AWSManagedMachinePool.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AWSManagedMachinePoolStatus {
    /// What holds of the node group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<crate::capi::conditions::Condition>>,
    /// A failure the user must fix before the node group can go on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_message: Option<String>,
    /// The reason of that failure, for machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// The launch template lariat created, if any.
    #[serde(
        rename = "launchTemplateID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub launch_template_id: Option<String>,
    /// Its version in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_template_version: Option<String>,
    /// Whether the node group is active.
    #[schemars(extend("default" = false))]
    pub ready: bool,
    /// The number of nodes in the group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
}
