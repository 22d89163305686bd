//! AWSMachinePool (`infrastructure.cluster.x-k8s.io/v1beta2`): self-managed workers on a launch
//! template and an auto-scaling group, booted with the MachinePool's bootstrap data.

use super::instance::*;
use super::machine::Ignition;
use super::managed_machine_pool::{AWSLaunchTemplate, AWSLifecycleHook};
use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstancesDistribution {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["prioritized", "lowest-price"], "default" = "prioritized"))]
    pub on_demand_allocation_strategy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 0))]
    pub on_demand_base_capacity: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 100))]
    pub on_demand_percentage_above_base_capacity: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["lowest-price", "capacity-optimized", "capacity-optimized-prioritized", "price-capacity-optimized"], "default" = "lowest-price"))]
    pub spot_allocation_strategy: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Overrides {
    pub instance_type: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MixedInstancesPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instances_distribution: Option<InstancesDistribution>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overrides: Option<Vec<Overrides>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RefreshPreferences {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_warmup: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 100, max = 200))]
    pub max_healthy_percentage: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_healthy_percentage: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Processes {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub add_to_load_balancer: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alarm_notification: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub az_rebalance: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_refresh: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace_unhealthy: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_actions: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminate: Option<bool>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SuspendProcesses {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes: Option<Processes>,
}

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[allow(clippy::duplicated_attributes)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta2",
    kind = "AWSMachinePool",
    plural = "awsmachinepools",
    namespaced,
    status = "AWSMachinePoolStatus",
    derive = "PartialEq",
    derive = "Default",
    shortname = "awsmp",
    category = "cluster-api",
    doc = "Self-managed workers: a launch template and an auto-scaling group behind a MachinePool.",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.ready",
        description = "Whether the auto-scaling group is ready"
    ),
    printcolumn(
        name = "Replicas",
        type_ = "integer",
        json_path = ".status.replicas",
        description = "Instances in the group"
    ),
    printcolumn(
        name = "MinSize",
        type_ = "integer",
        json_path = ".spec.minSize",
        description = "The least instances in the group"
    ),
    printcolumn(
        name = "MaxSize",
        type_ = "integer",
        json_path = ".spec.maxSize",
        description = "The most instances in the group"
    ),
    printcolumn(
        name = "LaunchTemplate ID",
        type_ = "string",
        json_path = ".status.launchTemplateID",
        description = "The launch template the instances boot from"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct AWSMachinePoolSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_tags: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["public", "private", "all"]))]
    pub availability_zone_subnet_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub availability_zones: Option<Vec<String>>,
    pub aws_launch_template: AWSLaunchTemplate,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_rebalance: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_cool_down: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_instance_warmup: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignition: Option<Ignition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle_hooks: Option<Vec<AWSLifecycleHook>>,
    #[schemars(range(min = 1), extend("default" = 1))]
    pub max_size: i32,
    #[schemars(range(min = 0), extend("default" = 1))]
    pub min_size: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mixed_instances_policy: Option<MixedInstancesPolicy>,
    #[serde(
        rename = "providerID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    #[serde(
        rename = "providerIDList",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id_list: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_preferences: Option<RefreshPreferences>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnets: Option<Vec<AWSResourceReference>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend_processes: Option<SuspendProcesses>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AWSMachinePoolInstanceStatus {
    #[serde(
        rename = "instanceID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub instance_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AWSMachinePoolStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asg_status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<crate::capi::conditions::Condition>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure_machine_kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instances: Option<Vec<AWSMachinePoolInstanceStatus>>,
    #[serde(
        rename = "launchTemplateID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub launch_template_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_template_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
}
