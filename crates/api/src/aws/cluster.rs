//! AWSCluster (`infrastructure.cluster.x-k8s.io/v1beta2`): the AWS infrastructure of a
//! self-managed (kubeadm) cluster: network, control-plane load balancer, bastion.

use super::instance::*;
use super::network::*;
use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetGroupHealthCheckAdditionalSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 5, max = 300))]
    pub interval_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["TCP", "HTTP", "HTTPS"]))]
    pub protocol: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 2, max = 10))]
    pub threshold_count: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 2, max = 120))]
    pub timeout_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 2, max = 10))]
    pub unhealthy_threshold_count: Option<i64>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdditionalListenerSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<TargetGroupHealthCheckAdditionalSpec>,
    #[schemars(range(min = 1, max = 65535))]
    pub port: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["TCP"], "default" = "TCP"))]
    pub protocol: Option<String>,
    #[serde(
        rename = "targetGroupIPType",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(extend("enum" = ["ipv4", "ipv6"]))]
    pub target_group_ip_type: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetGroupHealthCheckAPISpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 5, max = 300))]
    pub interval_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 2, max = 10))]
    pub threshold_count: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 2, max = 120))]
    pub timeout_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 2, max = 10))]
    pub unhealthy_threshold_count: Option<i64>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AWSLoadBalancerSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["port"]))]
    pub additional_listeners: Option<Vec<AdditionalListenerSpec>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_security_groups: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cross_zone_load_balancing: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_hosts_rewrite: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["None", "Enabled"]))]
    pub dns_resolution_check: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<TargetGroupHealthCheckAPISpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["TCP", "SSL", "HTTP", "HTTPS", "TLS", "UDP"]))]
    pub health_check_protocol: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress_rules: Option<Vec<IngressRule>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["classic", "elb", "alb", "nlb", "disabled"], "default" = "classic"))]
    pub load_balancer_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 32),
        pattern(r"^[A-Za-z0-9]([A-Za-z0-9]{0,31}|[-A-Za-z0-9]{0,30}[A-Za-z0-9])$")
    )]
    pub name: Option<String>,
    #[serde(
        rename = "preserveClientIP",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub preserve_client_ip: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["internet-facing", "internal"], "default" = "internet-facing"))]
    pub scheme: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnets: Option<Vec<String>>,
    #[serde(
        rename = "targetGroupIPType",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(extend("enum" = ["ipv4", "ipv6"]))]
    pub target_group_ip_type: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct S3Bucket {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best_effort_delete_objects: Option<bool>,
    #[serde(
        rename = "controlPlaneIAMInstanceProfile",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub control_plane_iam_instance_profile: Option<String>,
    #[schemars(
        length(min = 3, max = 63),
        pattern(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
    )]
    pub name: String,
    #[serde(
        rename = "nodesIAMInstanceProfiles",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub nodes_iam_instance_profiles: Option<Vec<String>>,
    #[serde(
        rename = "presignedURLDuration",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub presigned_url_duration: Option<String>,
}

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[allow(clippy::duplicated_attributes)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta2",
    kind = "AWSCluster",
    plural = "awsclusters",
    namespaced,
    status = "AWSClusterStatus",
    derive = "PartialEq",
    derive = "Default",
    shortname = "awsc",
    category = "cluster-api",
    doc = "The AWS infrastructure of a self-managed cluster: its network, load balancer and bastion.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels.cluster\\.x-k8s\\.io/cluster-name",
        description = "The Cluster it belongs to"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.ready",
        description = "Whether the infrastructure is ready for EC2 instances"
    ),
    printcolumn(
        name = "VPC",
        type_ = "string",
        json_path = ".spec.network.vpc.id",
        description = "The VPC the cluster uses"
    ),
    printcolumn(
        name = "Endpoint",
        type_ = "string",
        json_path = ".spec.controlPlaneEndpoint",
        description = "The API server endpoint",
        priority = 1
    ),
    printcolumn(
        name = "Bastion IP",
        type_ = "string",
        json_path = ".status.bastion.publicIp",
        description = "The bastion's public IPv4 address"
    ),
    printcolumn(
        name = "Bastion IPv6",
        type_ = "string",
        json_path = ".status.bastion.ipv6Address",
        description = "The bastion's IPv6 address"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct AWSClusterSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_tags: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bastion: Option<Bastion>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<crate::capi::cluster::ApiEndpoint>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_load_balancer: Option<AWSLoadBalancerSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_ref: Option<super::identity::AWSIdentityReference>,
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
    pub network: Option<NetworkSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3_bucket: Option<S3Bucket>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secondary_control_plane_load_balancer: Option<AWSLoadBalancerSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_key_name: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AWSClusterStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bastion: Option<Instance>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<crate::capi::conditions::Condition>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_domains: Option<BTreeMap<String, crate::capi::cluster::FailureDomainSpec>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_status: Option<NetworkStatus>,
    #[schemars(extend("default" = false))]
    pub ready: bool,
}
