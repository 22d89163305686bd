//! AWSMachine and AWSMachineTemplate (`infrastructure.cluster.x-k8s.io/v1beta2`): single EC2
//! instances behind Machines, and the template MachineDeployments clone them from.

use super::instance::*;
use super::network::ElasticIPPool;
use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloudInit {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insecure_skip_secrets_manager: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_count: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["secrets-manager", "ssm-parameter-store"]))]
    pub secure_secrets_backend: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IgnitionProxy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_proxy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub https_proxy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), inner(length(max = 2048)))]
    pub no_proxy: Option<Vec<String>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IgnitionTLS {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), inner(length(max = 65536)))]
    pub certificate_authorities: Option<Vec<String>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Ignition {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<IgnitionProxy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["ClusterObjectStore", "UnencryptedUserData"], "default" = "ClusterObjectStore"))]
    pub storage_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<IgnitionTLS>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["2.3", "3.0", "3.1", "3.2", "3.3", "3.4"]))]
    pub version: Option<String>,
}

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[allow(clippy::duplicated_attributes)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta2",
    kind = "AWSMachine",
    plural = "awsmachines",
    namespaced,
    status = "AWSMachineStatus",
    derive = "PartialEq",
    derive = "Default",
    shortname = "awsm",
    category = "cluster-api",
    doc = "An EC2 instance, the infrastructure of one Machine.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels.cluster\\.x-k8s\\.io/cluster-name",
        description = "The Cluster it belongs to"
    ),
    printcolumn(
        name = "State",
        type_ = "string",
        json_path = ".status.instanceState",
        description = "The EC2 instance's state"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.ready",
        description = "Whether the instance is ready"
    ),
    printcolumn(
        name = "InstanceID",
        type_ = "string",
        json_path = ".spec.providerID",
        description = "The EC2 instance ID"
    ),
    printcolumn(
        name = "Machine",
        type_ = "string",
        json_path = ".metadata.ownerReferences[?(@.kind==\"Machine\")].name",
        description = "The Machine it belongs to"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{"rule": "!has(self.capacityReservationId) || !has(self.marketType) || self.marketType != 'Spot'", "message": "a capacity reservation cannot be used with spot instances"}, {"rule": "!has(self.capacityReservationId) || !has(self.spotMarketOptions)", "message": "capacityReservationId and spotMarketOptions exclude each other"}]))]
pub struct AWSMachineSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_security_groups: Option<Vec<AWSResourceReference>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_tags: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ami: Option<AMIReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["enabled", "disabled"]))]
    pub assign_primary_i_pv6: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_reservation_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_reservation_preference: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_init: Option<CloudInit>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("minProperties" = 1))]
    pub cpu_options: Option<CPUOptions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dynamic_host_allocation: Option<DynamicHostAllocationSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elastic_ip_pool: Option<ElasticIPPool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["default", "host"], "default" = "default"))]
    pub host_affinity: Option<String>,
    #[serde(rename = "hostID", default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 19), pattern(r"^h-[0-9a-f]{17}$"))]
    pub host_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iam_instance_profile: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignition: Option<Ignition>,
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
    #[serde(
        rename = "instanceID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub instance_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_metadata_options: Option<InstanceMetadataOptions>,
    #[schemars(length(min = 2))]
    pub instance_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["OnDemand", "Spot", "CapacityBlock"]))]
    pub market_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["interface", "efa"]))]
    pub network_interface_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2))]
    pub network_interfaces: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub non_root_volumes: Option<Vec<Volume>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement_group_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 7))]
    pub placement_group_partition: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_dns_name: Option<PrivateDNSName>,
    #[serde(
        rename = "providerID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    #[serde(rename = "publicIP", default, skip_serializing_if = "Option::is_none")]
    pub public_ip: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_volume: Option<Volume>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_group_overrides: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spot_market_options: Option<SpotMarketOptions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_key_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet: Option<AWSResourceReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["default", "dedicated", "host"]))]
    pub tenancy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncompressed_user_data: Option<bool>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DedicatedHostInfo {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AWSMachineStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addresses: Option<Vec<crate::capi::machine::MachineAddress>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<crate::capi::conditions::Condition>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedicated_host: Option<DedicatedHostInfo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interruptible: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AWSMachineTemplateResource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<crate::capi::common::TemplateMetadata>,
    pub spec: AWSMachineSpec,
}

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[allow(clippy::duplicated_attributes)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta2",
    kind = "AWSMachineTemplate",
    plural = "awsmachinetemplates",
    namespaced,
    status = "AWSMachineTemplateStatus",
    derive = "PartialEq",
    derive = "Default",
    shortname = "awsmt",
    category = "cluster-api",
    doc = "What each AWSMachine of a MachineDeployment or control plane is made from."
)]
#[serde(rename_all = "camelCase")]
pub struct AWSMachineTemplateSpec {
    pub template: AWSMachineTemplateResource,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeInfo {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["amd64", "arm64"]))]
    pub architecture: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["linux", "windows"]))]
    pub operating_system: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AWSMachineTemplateStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<BTreeMap<String, crate::schema::Quantity>>")]
    pub capacity: Option<BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<crate::capi::conditions::Condition>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_info: Option<NodeInfo>,
}
