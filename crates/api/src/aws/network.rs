//! The network Cluster API AWS builds for a cluster (or adopts): VPC, subnets across
//! availability zones, gateways, route tables, security groups and load balancers, as the
//! spec asks for them and as the status finds them. Shared by AWSManagedControlPlane and,
//! later, AWSCluster.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a security group Cluster API AWS creates is for.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum SecurityGroupRole {
    Bastion,
    Node,
    #[serde(rename = "controlplane")]
    ControlPlane,
    ApiserverLb,
    Lb,
    NodeEksAdditional,
}

impl SecurityGroupRole {
    /// The role as Cluster API AWS names it: in the group's name (`<cluster>-<role>`), its
    /// role tag and the keys of `status.networkStatus.securityGroups`.
    pub fn as_str(self) -> &'static str {
        match self {
            SecurityGroupRole::Bastion => "bastion",
            SecurityGroupRole::Node => "node",
            SecurityGroupRole::ControlPlane => "controlplane",
            SecurityGroupRole::ApiserverLb => "apiserver-lb",
            SecurityGroupRole::Lb => "lb",
            SecurityGroupRole::NodeEksAdditional => "node-eks-additional",
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Bastion {
    #[serde(
        rename = "allowedCIDRBlocks",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub allowed_cidr_blocks: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ami: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_ingress_rules: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IngressRule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cidr_blocks: Option<Vec<String>>,
    pub description: String,
    pub from_port: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv6_cidr_blocks: Option<Vec<String>>,
    #[serde(
        rename = "natGatewaysIPsSource",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub nat_gateways_ips_source: Option<bool>,
    #[schemars(extend("enum" = ["-1", "4", "tcp", "udp", "icmp", "58", "50"]))]
    pub protocol: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_security_group_ids: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_security_group_roles: Option<Vec<SecurityGroupRole>>,
    pub to_port: i64,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CNIIngressRule {
    pub description: String,
    pub from_port: i64,
    pub protocol: String,
    pub to_port: i64,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CNISpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cni_ingress_rules: Option<Vec<CNIIngressRule>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubnetSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub availability_zone: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cidr_block: Option<String>,
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv6_cidr_block: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_ipv6: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_public: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nat_gateway_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_zone_name: Option<String>,
    #[serde(
        rename = "resourceID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub resource_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route_table_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["availability-zone", "local-zone", "wavelength-zone"]))]
    pub zone_type: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ElasticIPPool {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 30))]
    pub public_ipv4_pool: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["amazon-pool", "none"], "x-kubernetes-validations" = [{"rule": "self in ['none','amazon-pool']", "message": "publicIpv4PoolFallbackOrder is amazon-pool or none"}]))]
    pub public_ipv4_pool_fallback_order: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IPAMPool {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netmask_length: Option<i64>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IPv6 {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cidr_block: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_only_internet_gateway_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipam_pool: Option<IPAMPool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_id: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VpcCidrBlock {
    #[schemars(length(min = 1))]
    pub ipv4_cidr_block: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VPCSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["Ordered", "Random"], "default" = "Ordered"))]
    pub availability_zone_selection: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::schema::Integer>", range(min = 1), extend("default" = 3))]
    pub availability_zone_usage_limit: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self.startsWith('cagw-')", "message": "a carrier gateway ID starts with cagw-"}]))]
    pub carrier_gateway_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cidr_block: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elastic_ip_pool: Option<ElasticIPPool>,
    #[serde(
        rename = "emptyRoutesDefaultVPCSecurityGroup",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub empty_routes_default_vpc_security_group: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internet_gateway_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipam_pool: Option<IPAMPool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv6: Option<IPv6>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["ip-name", "resource-name"]))]
    pub private_dns_hostname_type_on_launch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secondary_cidr_blocks: Option<Vec<VpcCidrBlock>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["PreferPrivate", "PreferPublic"], "default" = "PreferPrivate"))]
    pub subnet_schema: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<BTreeMap<String, String>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_control_plane_ingress_rules: Option<Vec<IngressRule>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_node_ingress_rules: Option<Vec<IngressRule>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cni: Option<CNISpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_port_ingress_rule_cidr_blocks: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_group_overrides: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["id"]))]
    pub subnets: Option<Vec<SubnetSpec>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vpc: Option<VPCSpec>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancerAttributes {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cross_zone_load_balancing: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout: Option<i64>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetGroupHealthCheck {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold_count: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unhealthy_threshold_count: Option<i64>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetGroupSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_type: Option<String>,
    #[schemars(length(max = 32))]
    pub name: String,
    pub port: i64,
    #[schemars(extend("enum" = ["tcp", "tls", "udp", "TCP", "TLS", "UDP"]))]
    pub protocol: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_group_health_check: Option<TargetGroupHealthCheck>,
    pub vpc_id: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClassicELBListener {
    pub port: i64,
    pub protocol: String,
    pub target_group: TargetGroupSpec,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClassicELBHealthCheck {
    pub healthy_threshold: i64,
    pub interval: i64,
    pub target: String,
    pub timeout: i64,
    pub unhealthy_threshold: i64,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Listener {
    pub instance_port: i64,
    pub instance_protocol: String,
    pub port: i64,
    pub protocol: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arn: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attributes: Option<LoadBalancerAttributes>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub availability_zones: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elb_attributes: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elb_listeners: Option<Vec<ClassicELBListener>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_checks: Option<ClassicELBHealthCheck>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listeners: Option<Vec<Listener>>,
    #[serde(
        rename = "loadBalancerIPAddressType",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(extend("enum" = ["ipv4", "dualstack", "dualstack-without-public-ipv4"]))]
    pub load_balancer_ip_address_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["classic", "elb", "alb", "nlb"]))]
    pub load_balancer_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_group_ids: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet_ids: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<BTreeMap<String, String>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecurityGroup {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress_rule: Option<Vec<IngressRule>>,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<BTreeMap<String, String>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_server_elb: Option<LoadBalancer>,
    #[serde(
        rename = "natGatewaysIPs",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub nat_gateways_ips: Option<Vec<String>>,
    #[serde(
        rename = "secondaryAPIServerELB",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub secondary_api_server_elb: Option<LoadBalancer>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_groups: Option<BTreeMap<String, SecurityGroup>>,
}
