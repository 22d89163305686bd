//! A cluster's network, as Cluster API AWS builds it for EKS: a VPC, a public and a private
//! subnet in each of the first availability zones, an internet gateway, a NAT gateway per
//! zone, a route table per subnet, and the cluster's security groups. Each piece is
//! looked for by its tags before it is created, so a reconcile that died halfway resumes and
//! never makes two. A VPC the user names and lariat did not tag is used as it is and never
//! deleted.

use std::collections::BTreeMap;

use aws_sdk_ec2::Client;
use aws_sdk_ec2::types::{AttributeBooleanValue, DomainType, ResourceType};
use lariat_api::aws::network::{NetworkSpec, SecurityGroupRole, SubnetSpec};

use crate::sdk::{AwsError, AwsResult};
use crate::security_groups::{self, Group, Wanted};
use crate::tags::{Owner, filter, pairs};

/// The CIDR of a VPC lariat creates when the spec names none, as Cluster API AWS's.
pub const DEFAULT_VPC_CIDR: &str = "10.0.0.0/16";
/// How many availability zones get subnets when the spec does not say, as Cluster API AWS's.
pub const DEFAULT_ZONES: usize = 3;

/// What the network is, once reconciled.
#[derive(Debug, Clone, PartialEq)]
pub struct Network {
    pub vpc_id: String,
    pub cidr_block: String,
    /// Whether lariat created the VPC (and so deletes it with the cluster).
    pub managed: bool,
    pub internet_gateway_id: Option<String>,
    pub subnets: Vec<SubnetSpec>,
    pub security_groups: BTreeMap<SecurityGroupRole, Group>,
    pub nat_gateway_ips: Vec<String>,
}

impl Network {
    /// The ID of the cluster's group with `role` (empty if it has none).
    pub fn group_id(&self, role: SecurityGroupRole) -> &str {
        self.security_groups
            .get(&role)
            .map(|g| g.id.as_str())
            .unwrap_or_default()
    }

    /// What the spec records of the network found or made (`spec.network`), as Cluster API
    /// AWS's does.
    pub fn spec_record(&self) -> serde_json::Value {
        serde_json::json!({
            "vpc": {
                "id": self.vpc_id,
                "cidrBlock": self.cidr_block,
                "internetGatewayId": self.internet_gateway_id,
            },
            "subnets": self.subnets,
        })
    }

    pub fn subnet_ids(&self) -> Vec<String> {
        self.subnets.iter().map(|s| s.id.clone()).collect()
    }

    pub fn private_subnet_ids(&self) -> Vec<String> {
        self.subnets
            .iter()
            .filter(|s| s.is_public != Some(true))
            .map(|s| s.id.clone())
            .collect()
    }
}

/// `count` equal subnets of `cidr` (IPv4), or why not.
pub fn split_cidr(cidr: &str, count: usize) -> Result<Vec<String>, String> {
    let (address, prefix) = cidr
        .split_once('/')
        .ok_or_else(|| format!("{cidr:?} is not a CIDR block"))?;
    let address: std::net::Ipv4Addr = address
        .parse()
        .map_err(|_| format!("{cidr:?} is not an IPv4 CIDR block"))?;
    let prefix: u32 = prefix
        .parse()
        .ok()
        .filter(|p| *p <= 32)
        .ok_or_else(|| format!("{cidr:?} has no valid prefix length"))?;
    let bits = count.next_power_of_two().trailing_zeros();
    let new_prefix = prefix + bits;
    if new_prefix > 28 {
        return Err(format!(
            "{cidr} is too small for {count} subnets of at least 16 addresses"
        ));
    }
    let base = u32::from(address) & (u32::MAX.checked_shl(32 - prefix).unwrap_or(0));
    Ok((0..count as u32)
        .map(|i| {
            let start = base + (i << (32 - new_prefix));
            format!("{}/{new_prefix}", std::net::Ipv4Addr::from(start))
        })
        .collect())
}

/// Reconciles the network `spec` asks for, with the security `groups` the cluster needs,
/// creating what is missing.
pub async fn ensure(
    ec2: &Client,
    owner: &Owner,
    spec: &NetworkSpec,
    groups: &[Wanted],
) -> Result<Network, AwsError> {
    let vpc_spec = spec.vpc.clone().unwrap_or_default();
    let (vpc_id, cidr_block, managed) = ensure_vpc(ec2, owner, &vpc_spec).await?;
    let security_groups = security_groups::ensure(ec2, owner, &vpc_id, groups).await?;
    if !managed {
        // The user's VPC: its subnets are the spec's, found by ID.
        let subnets = spec.subnets.clone().unwrap_or_default();
        return Ok(Network {
            vpc_id,
            cidr_block,
            managed,
            internet_gateway_id: vpc_spec.internet_gateway_id,
            subnets,
            security_groups,
            nat_gateway_ips: vec![],
        });
    }
    let limit = vpc_spec
        .availability_zone_usage_limit
        .map(|l| l.max(1) as usize)
        .unwrap_or(DEFAULT_ZONES);
    let zones = zones(ec2, limit).await?;
    let internet_gateway_id = ensure_internet_gateway(ec2, owner, &vpc_id).await?;
    let cidrs = split_cidr(&cidr_block, zones.len() * 2).map_err(|message| AwsError {
        code: "InvalidCidrBlock".into(),
        message,
    })?;
    let mut subnets = Vec::new();
    let mut nat_gateway_ips = Vec::new();
    // Public subnets first: each zone's private subnet routes through its NAT gateway.
    for (index, zone) in zones.iter().enumerate() {
        let mut public = ensure_subnet(ec2, owner, &vpc_id, zone, &cidrs[index], true).await?;
        public.route_table_id = Some(
            ensure_route_table(
                ec2,
                owner,
                &vpc_id,
                &public.id,
                Route::InternetGateway(&internet_gateway_id),
            )
            .await?,
        );
        let (nat, ip) = ensure_nat_gateway(ec2, owner, &public.id, zone).await?;
        nat_gateway_ips.extend(ip);
        let mut private = ensure_subnet(
            ec2,
            owner,
            &vpc_id,
            zone,
            &cidrs[zones.len() + index],
            false,
        )
        .await?;
        private.route_table_id = Some(
            ensure_route_table(ec2, owner, &vpc_id, &private.id, Route::NatGateway(&nat)).await?,
        );
        private.nat_gateway_id = Some(nat);
        subnets.push(public);
        subnets.push(private);
    }
    Ok(Network {
        vpc_id,
        cidr_block,
        managed,
        internet_gateway_id: Some(internet_gateway_id),
        subnets,
        security_groups,
        nat_gateway_ips,
    })
}

async fn ensure_vpc(
    ec2: &Client,
    owner: &Owner,
    spec: &lariat_api::aws::network::VPCSpec,
) -> Result<(String, String, bool), AwsError> {
    let found = match &spec.id {
        Some(id) => ec2.describe_vpcs().vpc_ids(id).send().await.aws()?,
        None => ec2
            .describe_vpcs()
            .set_filters(Some(owner.ec2_filters_with_role("common")))
            .send()
            .await
            .aws()?,
    };
    if let Some(vpc) = found.vpcs().first() {
        let managed = owner.owns(pairs(vpc.tags()));
        return Ok((
            vpc.vpc_id().unwrap_or_default().to_owned(),
            vpc.cidr_block().unwrap_or_default().to_owned(),
            managed,
        ));
    }
    if let Some(id) = &spec.id {
        return Err(AwsError {
            code: "InvalidVpcID.NotFound".into(),
            message: format!("the VPC {id} named by spec.network.vpc.id does not exist"),
        });
    }
    let cidr = spec.cidr_block.as_deref().unwrap_or(DEFAULT_VPC_CIDR);
    let vpc = ec2
        .create_vpc()
        .cidr_block(cidr)
        .tag_specifications(owner.ec2_tags(
            ResourceType::Vpc,
            &format!("{}-vpc", owner.cluster),
            "common",
        ))
        .send()
        .await
        .aws()?
        .vpc
        .ok_or_else(|| AwsError::missing("VPC"))?;
    let id = vpc.vpc_id().unwrap_or_default().to_owned();
    // EKS needs DNS names for its private endpoint and nodes.
    for hostnames in [false, true] {
        let enabled = AttributeBooleanValue::builder().value(true).build();
        let request = ec2.modify_vpc_attribute().vpc_id(&id);
        let request = if hostnames {
            request.enable_dns_hostnames(enabled)
        } else {
            request.enable_dns_support(enabled)
        };
        request.send().await.aws()?;
    }
    Ok((id, cidr.to_owned(), true))
}

/// The first `limit` availability zones of the region, in name order, as Cluster API AWS's
/// `Ordered` selection.
async fn zones(ec2: &Client, limit: usize) -> Result<Vec<String>, AwsError> {
    let out = ec2
        .describe_availability_zones()
        .filters(filter("state", "available"))
        .send()
        .await
        .aws()?;
    let mut zones: Vec<String> = out
        .availability_zones()
        .iter()
        .filter(|z| z.zone_type().is_none_or(|t| t == "availability-zone"))
        .filter_map(|z| z.zone_name().map(str::to_owned))
        .collect();
    zones.sort();
    zones.truncate(limit);
    Ok(zones)
}

async fn ensure_internet_gateway(
    ec2: &Client,
    owner: &Owner,
    vpc_id: &str,
) -> Result<String, AwsError> {
    let found = ec2
        .describe_internet_gateways()
        .set_filters(Some(owner.ec2_filters()))
        .send()
        .await
        .aws()?;
    let gateway = match found.internet_gateways().first() {
        Some(gateway) => gateway.clone(),
        None => ec2
            .create_internet_gateway()
            .tag_specifications(owner.ec2_tags(
                ResourceType::InternetGateway,
                &format!("{}-igw", owner.cluster),
                "common",
            ))
            .send()
            .await
            .aws()?
            .internet_gateway
            .ok_or_else(|| AwsError::missing("internet gateway"))?,
    };
    let id = gateway.internet_gateway_id().unwrap_or_default().to_owned();
    if !gateway
        .attachments()
        .iter()
        .any(|a| a.vpc_id() == Some(vpc_id))
    {
        ec2.attach_internet_gateway()
            .internet_gateway_id(&id)
            .vpc_id(vpc_id)
            .send()
            .await
            .aws()?;
    }
    Ok(id)
}

async fn ensure_subnet(
    ec2: &Client,
    owner: &Owner,
    vpc_id: &str,
    zone: &str,
    cidr: &str,
    public: bool,
) -> Result<SubnetSpec, AwsError> {
    let role = if public { "public" } else { "private" };
    let mut filters = owner.ec2_filters_with_role(role);
    filters.push(filter("vpc-id", vpc_id));
    filters.push(filter("availability-zone", zone));
    let found = ec2
        .describe_subnets()
        .set_filters(Some(filters))
        .send()
        .await
        .aws()?;
    let subnet = match found.subnets().first() {
        Some(subnet) => subnet.clone(),
        None => {
            let name = format!("{}-subnet-{role}-{zone}", owner.cluster);
            let mut tags = owner.ec2_tags(ResourceType::Subnet, &name, role);
            // What Kubernetes' load balancer controllers look for.
            let elb_role = if public {
                "kubernetes.io/role/elb"
            } else {
                "kubernetes.io/role/internal-elb"
            };
            tags.tags.get_or_insert_with(Vec::new).push(
                aws_sdk_ec2::types::Tag::builder()
                    .key(elb_role)
                    .value("1")
                    .build(),
            );
            let subnet = ec2
                .create_subnet()
                .vpc_id(vpc_id)
                .availability_zone(zone)
                .cidr_block(cidr)
                .tag_specifications(tags)
                .send()
                .await
                .aws()?
                .subnet
                .ok_or_else(|| AwsError::missing("subnet"))?;
            if public {
                ec2.modify_subnet_attribute()
                    .subnet_id(subnet.subnet_id().unwrap_or_default())
                    .map_public_ip_on_launch(AttributeBooleanValue::builder().value(true).build())
                    .send()
                    .await
                    .aws()?;
            }
            subnet
        }
    };
    Ok(SubnetSpec {
        id: subnet.subnet_id().unwrap_or_default().to_owned(),
        resource_id: subnet.subnet_id().map(str::to_owned),
        availability_zone: subnet.availability_zone().map(str::to_owned),
        cidr_block: subnet.cidr_block().map(str::to_owned),
        is_public: Some(public),
        tags: Some(
            pairs(subnet.tags())
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        ),
        ..SubnetSpec::default()
    })
}

/// A zone's NAT gateway in its public subnet, with its Elastic IP.
async fn ensure_nat_gateway(
    ec2: &Client,
    owner: &Owner,
    subnet_id: &str,
    zone: &str,
) -> Result<(String, Option<String>), AwsError> {
    let mut filters = owner.ec2_filters();
    filters.push(filter("subnet-id", subnet_id));
    filters.push(
        aws_sdk_ec2::types::Filter::builder()
            .name("state")
            .values("pending")
            .values("available")
            .build(),
    );
    let found = ec2
        .describe_nat_gateways()
        .set_filter(Some(filters))
        .send()
        .await
        .aws()?;
    // The tags are checked again: moto ignores tag filters on NAT gateways.
    if let Some(nat) = found
        .nat_gateways()
        .iter()
        .find(|n| owner.owns(pairs(n.tags())) && n.subnet_id() == Some(subnet_id))
    {
        let ip = nat
            .nat_gateway_addresses()
            .first()
            .and_then(|a| a.public_ip())
            .map(str::to_owned);
        return Ok((nat.nat_gateway_id().unwrap_or_default().to_owned(), ip));
    }
    let name = format!("{}-nat-{zone}", owner.cluster);
    // The address: one left by an earlier attempt, or a new one.
    let mut address_filters = owner.ec2_filters_with_role("common");
    address_filters.push(filter("tag:Name", &name));
    let addresses = ec2
        .describe_addresses()
        .set_filters(Some(address_filters))
        .send()
        .await
        .aws()?;
    let (allocation, ip) = match addresses
        .addresses()
        .iter()
        .find(|a| a.association_id().is_none())
    {
        Some(address) => (
            address.allocation_id().unwrap_or_default().to_owned(),
            address.public_ip().map(str::to_owned),
        ),
        None => {
            let address = ec2
                .allocate_address()
                .domain(DomainType::Vpc)
                .tag_specifications(owner.ec2_tags(ResourceType::ElasticIp, &name, "common"))
                .send()
                .await
                .aws()?;
            (
                address.allocation_id().unwrap_or_default().to_owned(),
                address.public_ip().map(str::to_owned),
            )
        }
    };
    let nat = ec2
        .create_nat_gateway()
        .subnet_id(subnet_id)
        .allocation_id(&allocation)
        // The same request twice makes one gateway (an idempotency token per subnet).
        .client_token(format!("lariat-{subnet_id}"))
        .tag_specifications(owner.ec2_tags(ResourceType::Natgateway, &name, "common"))
        .send()
        .await
        .aws()?
        .nat_gateway
        .ok_or_else(|| AwsError::missing("NAT gateway"))?;
    Ok((nat.nat_gateway_id().unwrap_or_default().to_owned(), ip))
}

enum Route<'a> {
    InternetGateway(&'a str),
    NatGateway(&'a str),
}

/// The route table of one subnet, its default route and its association.
async fn ensure_route_table(
    ec2: &Client,
    owner: &Owner,
    vpc_id: &str,
    subnet_id: &str,
    route: Route<'_>,
) -> Result<String, AwsError> {
    let mut filters = owner.ec2_filters();
    filters.push(filter("vpc-id", vpc_id));
    filters.push(filter(
        "tag:Name",
        &format!("{}-rt-{subnet_id}", owner.cluster),
    ));
    let found = ec2
        .describe_route_tables()
        .set_filters(Some(filters))
        .send()
        .await
        .aws()?;
    let table = match found.route_tables().first() {
        Some(table) => table.clone(),
        None => ec2
            .create_route_table()
            .vpc_id(vpc_id)
            .tag_specifications(owner.ec2_tags(
                ResourceType::RouteTable,
                &format!("{}-rt-{subnet_id}", owner.cluster),
                "common",
            ))
            .send()
            .await
            .aws()?
            .route_table
            .ok_or_else(|| AwsError::missing("route table"))?,
    };
    let id = table.route_table_id().unwrap_or_default().to_owned();
    if !table
        .routes()
        .iter()
        .any(|r| r.destination_cidr_block() == Some("0.0.0.0/0"))
    {
        let request = ec2
            .create_route()
            .route_table_id(&id)
            .destination_cidr_block("0.0.0.0/0");
        let request = match route {
            Route::InternetGateway(gateway) => request.gateway_id(gateway),
            Route::NatGateway(nat) => request.nat_gateway_id(nat),
        };
        request.send().await.aws()?;
    }
    if !table
        .associations()
        .iter()
        .any(|a| a.subnet_id() == Some(subnet_id))
    {
        ec2.associate_route_table()
            .route_table_id(&id)
            .subnet_id(subnet_id)
            .send()
            .await
            .aws()?;
    }
    Ok(id)
}

/// Deletes every network resource of the cluster, found by its tags, dependencies first.
/// Returns whether anything is still on its way out (NAT gateways take a while to go).
pub async fn delete(ec2: &Client, owner: &Owner) -> Result<bool, AwsError> {
    let filters = owner.ec2_filters();
    let nats = ec2
        .describe_nat_gateways()
        .set_filter(Some(filters.clone()))
        .send()
        .await
        .aws()?;
    // The tags are checked again: moto ignores tag filters on NAT gateways, and a deletion
    // must never reach another cluster's.
    let owned = |nat: &&aws_sdk_ec2::types::NatGateway| owner.owns(pairs(nat.tags()));
    for nat in nats.nat_gateways().iter().filter(owned) {
        if !matches!(
            nat.state().map(|s| s.as_str()),
            Some("deleted" | "deleting")
        ) {
            ec2.delete_nat_gateway()
                .nat_gateway_id(nat.nat_gateway_id().unwrap_or_default())
                .send()
                .await
                .aws()?;
        }
    }
    let nats = ec2
        .describe_nat_gateways()
        .set_filter(Some(filters.clone()))
        .send()
        .await
        .aws()?;
    if nats
        .nat_gateways()
        .iter()
        .filter(owned)
        .any(|n| n.state().map(|s| s.as_str()) != Some("deleted"))
    {
        // Their addresses and subnets stay until they are gone.
        return Ok(true);
    }
    let addresses = ec2
        .describe_addresses()
        .set_filters(Some(filters.clone()))
        .send()
        .await
        .aws()?;
    for address in addresses.addresses() {
        ec2.release_address()
            .allocation_id(address.allocation_id().unwrap_or_default())
            .send()
            .await
            .aws()?;
    }
    let tables = ec2
        .describe_route_tables()
        .set_filters(Some(filters.clone()))
        .send()
        .await
        .aws()?;
    for table in tables.route_tables() {
        for association in table.associations() {
            if association.main() != Some(true) {
                ec2.disassociate_route_table()
                    .association_id(association.route_table_association_id().unwrap_or_default())
                    .send()
                    .await
                    .aws()?;
            }
        }
        ec2.delete_route_table()
            .route_table_id(table.route_table_id().unwrap_or_default())
            .send()
            .await
            .aws()?;
    }
    let subnets = ec2
        .describe_subnets()
        .set_filters(Some(filters.clone()))
        .send()
        .await
        .aws()?;
    for subnet in subnets.subnets() {
        ec2.delete_subnet()
            .subnet_id(subnet.subnet_id().unwrap_or_default())
            .send()
            .await
            .aws()?;
    }
    let gateways = ec2
        .describe_internet_gateways()
        .set_filters(Some(filters.clone()))
        .send()
        .await
        .aws()?;
    for gateway in gateways.internet_gateways() {
        let id = gateway.internet_gateway_id().unwrap_or_default();
        for attachment in gateway.attachments() {
            ec2.detach_internet_gateway()
                .internet_gateway_id(id)
                .vpc_id(attachment.vpc_id().unwrap_or_default())
                .send()
                .await
                .aws()?;
        }
        ec2.delete_internet_gateway()
            .internet_gateway_id(id)
            .send()
            .await
            .aws()?;
    }
    security_groups::delete(ec2, owner).await?;
    let vpcs = ec2
        .describe_vpcs()
        .set_filters(Some(filters))
        .send()
        .await
        .aws()?;
    for vpc in vpcs.vpcs() {
        ec2.delete_vpc()
            .vpc_id(vpc.vpc_id().unwrap_or_default())
            .send()
            .await
            .aws()?;
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs_split_as_cluster_api_aws_s() {
        assert_eq!(
            split_cidr("10.0.0.0/16", 6).unwrap(),
            [
                "10.0.0.0/19",
                "10.0.32.0/19",
                "10.0.64.0/19",
                "10.0.96.0/19",
                "10.0.128.0/19",
                "10.0.160.0/19"
            ]
        );
        assert_eq!(
            split_cidr("10.1.2.3/24", 2).unwrap(),
            ["10.1.2.0/25", "10.1.2.128/25"]
        );
        assert!(
            split_cidr("10.0.0.0/27", 4)
                .unwrap_err()
                .contains("too small")
        );
        assert!(split_cidr("nonsense", 2).is_err());
        assert!(split_cidr("10.0.0.0/40", 2).is_err());
    }
}
