//! A cluster's security groups, as Cluster API AWS makes them: one per role, named
//! `<cluster>-<role>` and tagged with it, found by those tags before one is created. Where
//! lariat owns a group's rules, they are reconciled as Cluster API AWS does: what is missing is
//! authorized and what was not asked for is revoked, in one call each, and a group whose rules
//! are as they should be costs no call beyond the one listing of the cluster's groups.

use std::collections::BTreeMap;

use aws_sdk_ec2::Client;
use aws_sdk_ec2::types::{IpPermission, IpRange, ResourceType, SecurityGroup, UserIdGroupPair};
use lariat_api::aws::network::{CNIIngressRule, IngressRule, SecurityGroupRole as Role};

use crate::sdk::{AwsError, AwsResult};
use crate::tags::{Owner, filter, pairs};

/// Where traffic a rule lets in comes from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    /// Another of the cluster's groups.
    Group(Role),
    Cidr(String),
}

/// One ingress rule of a group.
#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    pub description: String,
    /// `tcp`, `udp`, or an IP protocol number (`4` is IP in IP).
    pub protocol: String,
    pub from_port: i32,
    pub to_port: i32,
    pub source: Source,
}

impl Rule {
    fn tcp(description: &str, from_port: i32, to_port: i32, source: Source) -> Rule {
        Rule {
            description: description.to_owned(),
            protocol: "tcp".into(),
            from_port,
            to_port,
            source,
        }
    }
}

/// A group the cluster needs.
#[derive(Clone, Debug)]
pub struct Wanted {
    pub role: Role,
    /// Its rules, or `None` when they are the user's to keep (EKS's additional node group).
    pub rules: Option<Vec<Rule>>,
}

/// A group as it is, once reconciled.
#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    pub id: String,
    pub name: String,
}

/// The rules Cluster API AWS gives the groups of a cluster whose control plane runs on EC2
/// behind a load balancer, for its default CNI (Calico) unless `cni` names other rules. Rule
/// descriptions have no spaces: moto refuses the signature of an EC2 request with a space in it
/// (it re-encodes the body with `+` where the SDK signed `%20`; AWS accepts both).
pub fn kubeadm_cluster(cni: Option<&[CNIIngressRule]>, node_port_cidrs: &[String]) -> Vec<Wanted> {
    let calico = [
        CNIIngressRule {
            description: "bgp-(calico)".into(),
            protocol: "tcp".into(),
            from_port: 179,
            to_port: 179,
        },
        CNIIngressRule {
            description: "IP-in-IP-(calico)".into(),
            protocol: "4".into(),
            from_port: -1,
            to_port: 65535,
        },
    ];
    let cni_rules: Vec<Rule> = cni
        .unwrap_or(&calico)
        .iter()
        .flat_map(|rule| {
            [Role::ControlPlane, Role::Node].map(|from| Rule {
                description: rule.description.clone(),
                protocol: rule.protocol.clone(),
                from_port: rule.from_port as i32,
                to_port: rule.to_port as i32,
                source: Source::Group(from),
            })
        })
        .collect();
    let group = Source::Group;
    let mut control_plane = vec![
        Rule::tcp("Kubernetes-API", 6443, 6443, group(Role::ApiserverLb)),
        Rule::tcp("Kubernetes-API", 6443, 6443, group(Role::ControlPlane)),
        Rule::tcp("Kubernetes-API", 6443, 6443, group(Role::Node)),
        Rule::tcp("etcd", 2379, 2379, group(Role::ControlPlane)),
        Rule::tcp("etcd-peer", 2380, 2380, group(Role::ControlPlane)),
    ];
    control_plane.extend(cni_rules.iter().cloned());
    let node_port_cidrs: Vec<String> = if node_port_cidrs.is_empty() {
        vec!["0.0.0.0/0".into()]
    } else {
        node_port_cidrs.to_vec()
    };
    let mut node: Vec<Rule> = node_port_cidrs
        .into_iter()
        .map(|cidr| Rule::tcp("Node-Port-Services", 30000, 32767, Source::Cidr(cidr)))
        .collect();
    node.push(Rule::tcp(
        "Kubelet-API",
        10250,
        10250,
        group(Role::ControlPlane),
    ));
    node.push(Rule::tcp("Kubelet-API", 10250, 10250, group(Role::Node)));
    node.extend(cni_rules);
    vec![
        Wanted {
            role: Role::ApiserverLb,
            rules: Some(vec![Rule::tcp(
                "Kubernetes-API",
                6443,
                6443,
                Source::Cidr("0.0.0.0/0".into()),
            )]),
        },
        // For the load balancers of the cluster's Services: the cloud provider finds it by
        // its cluster tag and keeps its rules.
        Wanted {
            role: Role::Lb,
            rules: None,
        },
        Wanted {
            role: Role::ControlPlane,
            rules: Some(control_plane),
        },
        Wanted {
            role: Role::Node,
            rules: Some(node),
        },
    ]
}

/// Finds or makes each wanted group in `vpc_id` and brings the rules lariat owns to what they
/// should be.
pub async fn ensure(
    ec2: &Client,
    owner: &Owner,
    vpc_id: &str,
    wanted: &[Wanted],
) -> Result<BTreeMap<Role, Group>, AwsError> {
    let listed = list(ec2, owner, Some(vpc_id)).await?;
    let mut groups = BTreeMap::new();
    let mut existing: BTreeMap<Role, &SecurityGroup> = BTreeMap::new();
    for want in wanted {
        let role_tag = (crate::tags::ROLE_TAG, want.role.as_str());
        let found = listed
            .iter()
            .find(|g| pairs(g.tags()).any(|tag| tag == role_tag));
        let name = format!("{}-{}", owner.cluster, want.role.as_str());
        let id = match found {
            Some(group) => {
                existing.insert(want.role, group);
                group.group_id().unwrap_or_default().to_owned()
            }
            None => ec2
                .create_security_group()
                .group_name(&name)
                // No spaces, for moto (see `kubeadm_cluster`).
                .description(format!("cluster-api-provider-aws:{}", want.role.as_str()))
                .vpc_id(vpc_id)
                .tag_specifications(tags(owner, &name, want.role))
                .send()
                .await
                .aws()?
                .group_id
                .unwrap_or_default(),
        };
        groups.insert(want.role, Group { id, name });
    }
    for want in wanted {
        let Some(rules) = &want.rules else { continue };
        let group_id = &groups[&want.role].id;
        let wanted_keys: BTreeMap<Key, &Rule> = rules
            .iter()
            .filter_map(|rule| Some((Key::of(rule, &groups)?, rule)))
            .collect();
        let present: BTreeMap<Key, Listed> = existing
            .get(&want.role)
            .map(|group| {
                group
                    .ip_permissions()
                    .iter()
                    .flat_map(Key::listed)
                    .collect()
            })
            .unwrap_or_default();
        let missing: Vec<IpPermission> = wanted_keys
            .iter()
            .filter(|(key, _)| !present.contains_key(key))
            .map(|(key, rule)| {
                key.permission(
                    (Some(rule.from_port), Some(rule.to_port)),
                    Some(&rule.description),
                )
            })
            .collect();
        let extra: Vec<IpPermission> = present
            .iter()
            .filter(|(key, _)| !wanted_keys.contains_key(key))
            .map(|(key, (ports, description))| key.permission(*ports, description.as_deref()))
            .collect();
        if !extra.is_empty() {
            let revoked = ec2
                .revoke_security_group_ingress()
                .group_id(group_id)
                .set_ip_permissions(Some(extra))
                .send()
                .await
                .aws();
            match revoked {
                // Revoked by another pass since the listing.
                Err(error) if error.code == "InvalidPermission.NotFound" => {}
                other => {
                    other?;
                }
            }
        }
        if !missing.is_empty() {
            authorize(ec2, group_id, missing).await?;
        }
    }
    Ok(groups)
}

/// A group's tags: ownership and role and, on the `lb` group, the cluster tag by which the
/// cloud provider finds the one group of an instance it may change (as Cluster API AWS tags
/// it; an instance with several untagged groups would leave it unable to choose).
fn tags(owner: &Owner, name: &str, role: Role) -> aws_sdk_ec2::types::TagSpecification {
    let mut tags = owner.ec2_tags(ResourceType::SecurityGroup, name, role.as_str());
    if role == Role::Lb {
        tags.tags.get_or_insert_default().push(
            aws_sdk_ec2::types::Tag::builder()
                .key(format!("kubernetes.io/cluster/{}", owner.cluster))
                .value("owned")
                .build(),
        );
    }
    tags
}

/// Authorizes `permissions` in one call; if EC2 refuses the call because one of them is there
/// already (another pass since the listing), one at a time, so the others are not lost.
async fn authorize(
    ec2: &Client,
    group_id: &str,
    permissions: Vec<IpPermission>,
) -> Result<(), AwsError> {
    let send = |permissions: Vec<IpPermission>| {
        ec2.authorize_security_group_ingress()
            .group_id(group_id)
            .set_ip_permissions(Some(permissions))
            .send()
    };
    match send(permissions.clone()).await.aws() {
        Err(error) if error.code == "InvalidPermission.Duplicate" => {}
        other => return other.map(|_| ()),
    }
    for permission in permissions {
        match send(vec![permission]).await.aws() {
            Err(error) if error.code == "InvalidPermission.Duplicate" => {}
            other => {
                other?;
            }
        }
    }
    Ok(())
}

/// The rules of a group as `status.networkStatus.securityGroups` shows them.
pub fn status_rules(rules: &[Rule], groups: &BTreeMap<Role, Group>) -> Vec<IngressRule> {
    rules
        .iter()
        .map(|rule| {
            let (cidr_blocks, source_security_group_ids) = match &rule.source {
                Source::Cidr(cidr) => (Some(vec![cidr.clone()]), None),
                Source::Group(role) => (None, groups.get(role).map(|g| vec![g.id.clone()])),
            };
            IngressRule {
                description: rule.description.clone(),
                protocol: rule.protocol.clone(),
                from_port: rule.from_port.into(),
                to_port: rule.to_port.into(),
                cidr_blocks,
                source_security_group_ids,
                ..Default::default()
            }
        })
        .collect()
}

/// Revokes every rule of the cluster's groups (they name each other, and AWS deletes no group
/// another's rule names), then deletes the groups.
pub async fn delete(ec2: &Client, owner: &Owner) -> Result<(), AwsError> {
    let groups = list(ec2, owner, None).await?;
    for group in &groups {
        if !group.ip_permissions().is_empty() {
            ec2.revoke_security_group_ingress()
                .group_id(group.group_id().unwrap_or_default())
                .set_ip_permissions(Some(group.ip_permissions().to_vec()))
                .send()
                .await
                .aws()?;
        }
    }
    for group in &groups {
        ec2.delete_security_group()
            .group_id(group.group_id().unwrap_or_default())
            .send()
            .await
            .aws()?;
    }
    Ok(())
}

/// The groups this cluster made, in `vpc_id` if given.
async fn list(
    ec2: &Client,
    owner: &Owner,
    vpc_id: Option<&str>,
) -> Result<Vec<SecurityGroup>, AwsError> {
    let mut filters = owner.ec2_filters();
    if let Some(vpc_id) = vpc_id {
        filters.push(filter("vpc-id", vpc_id));
    }
    Ok(ec2
        .describe_security_groups()
        .set_filters(Some(filters))
        .send()
        .await
        .aws()?
        .security_groups
        .unwrap_or_default())
}

/// A rule's ports as sent or listed.
type Ports = (Option<i32>, Option<i32>);
/// A rule as EC2 lists it: its ports and description.
type Listed = (Ports, Option<String>);

/// What makes two rules the same to EC2: protocol, ports and source (not the description).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    protocol: String,
    /// Only TCP, UDP and ICMP have ports; EC2 ignores those sent for other protocols.
    ports: Option<(i32, i32)>,
    /// A group's ID or a CIDR block.
    source: KeySource,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum KeySource {
    Group(String),
    Cidr(String),
}

impl Key {
    fn ports(protocol: &str, from: Option<i32>, to: Option<i32>) -> Option<(i32, i32)> {
        matches!(protocol, "tcp" | "udp" | "icmp" | "6" | "17" | "1")
            .then(|| (from.unwrap_or(-1), to.unwrap_or(-1)))
    }

    /// A protocol as EC2 lists it: `tcp`, `udp`, `icmp` by name, others by number.
    fn protocol(protocol: &str) -> String {
        match protocol.to_ascii_lowercase().as_str() {
            "6" => "tcp".into(),
            "17" => "udp".into(),
            "1" => "icmp".into(),
            other => other.to_owned(),
        }
    }

    fn of(rule: &Rule, groups: &BTreeMap<Role, Group>) -> Option<Key> {
        let source = match &rule.source {
            Source::Group(role) => KeySource::Group(groups.get(role)?.id.clone()),
            Source::Cidr(cidr) => KeySource::Cidr(cidr.clone()),
        };
        let protocol = Key::protocol(&rule.protocol);
        Some(Key {
            ports: Key::ports(&protocol, Some(rule.from_port), Some(rule.to_port)),
            protocol,
            source,
        })
    }

    /// The keys of one permission as EC2 lists it (one per source), with its ports and
    /// description (moto revokes a rule only if they match).
    fn listed(permission: &IpPermission) -> Vec<(Key, Listed)> {
        let protocol = Key::protocol(permission.ip_protocol().unwrap_or_default());
        let ports = Key::ports(&protocol, permission.from_port(), permission.to_port());
        let groups = permission
            .user_id_group_pairs()
            .iter()
            .filter_map(|pair| Some((pair.group_id()?, pair.description())))
            .map(|(id, description)| (KeySource::Group(id.to_owned()), description));
        let cidrs = permission
            .ip_ranges()
            .iter()
            .filter_map(|range| Some((range.cidr_ip()?, range.description())))
            .map(|(cidr, description)| (KeySource::Cidr(cidr.to_owned()), description));
        groups
            .chain(cidrs)
            .map(|(source, description)| {
                let key = Key {
                    protocol: protocol.clone(),
                    ports,
                    source,
                };
                let ports = (permission.from_port(), permission.to_port());
                (key, (ports, description.map(str::to_owned)))
            })
            .collect()
    }

    /// The permission of this key, sent with `ports` whatever the protocol: AWS ignores them
    /// where they mean nothing, and moto fails without them.
    fn permission(&self, ports: Ports, description: Option<&str>) -> IpPermission {
        let permission = IpPermission::builder()
            .ip_protocol(&self.protocol)
            .set_from_port(ports.0)
            .set_to_port(ports.1);
        match &self.source {
            KeySource::Group(id) => permission.user_id_group_pairs(
                UserIdGroupPair::builder()
                    .group_id(id)
                    .set_description(description.map(str::to_owned))
                    .build(),
            ),
            KeySource::Cidr(cidr) => permission.ip_ranges(
                IpRange::builder()
                    .cidr_ip(cidr)
                    .set_description(description.map(str::to_owned))
                    .build(),
            ),
        }
        .build()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn rules_are_the_same_whatever_their_description_and_ports_only_count_where_they_exist() {
        let groups = BTreeMap::from([(
            Role::Node,
            Group {
                id: "sg-1".into(),
                name: "c-node".into(),
            },
        )]);
        let ip_in_ip = Rule {
            description: "IP-in-IP".into(),
            protocol: "4".into(),
            from_port: -1,
            to_port: 65535,
            source: Source::Group(Role::Node),
        };
        let key = Key::of(&ip_in_ip, &groups).unwrap();
        // EC2 lists a protocol-4 rule without the ports it was sent with.
        let listed = IpPermission::builder()
            .ip_protocol("4")
            .user_id_group_pairs(UserIdGroupPair::builder().group_id("sg-1").build())
            .build();
        assert_eq!(
            Key::listed(&listed),
            vec![(key.clone(), ((None, None), None))]
        );
        let tcp = Rule::tcp("a", 10250, 10250, Source::Cidr("10.0.0.0/8".into()));
        let listed = IpPermission::builder()
            .ip_protocol("tcp")
            .from_port(10250)
            .to_port(10250)
            .ip_ranges(
                IpRange::builder()
                    .cidr_ip("10.0.0.0/8")
                    .description("b")
                    .build(),
            )
            .build();
        assert_eq!(
            Key::listed(&listed),
            vec![(
                Key::of(&tcp, &groups).unwrap(),
                ((Some(10250), Some(10250)), Some("b".to_owned()))
            )]
        );
        // A rule naming a group not made yet has no key (it waits for the group).
        let pending = Rule::tcp("x", 1, 1, Source::Group(Role::ControlPlane));
        assert!(Key::of(&pending, &groups).is_none());
    }

    #[test]
    fn a_kubeadm_cluster_gets_cluster_api_aws_s_rules() {
        let wanted = kubeadm_cluster(None, &[]);
        let roles: Vec<Role> = wanted.iter().map(|w| w.role).collect();
        assert_eq!(
            roles,
            [Role::ApiserverLb, Role::Lb, Role::ControlPlane, Role::Node]
        );
        let control_plane = wanted[2].rules.as_ref().unwrap();
        let ports: BTreeSet<(String, i32)> = control_plane
            .iter()
            .map(|r| (r.protocol.clone(), r.from_port))
            .collect();
        assert_eq!(
            ports,
            BTreeSet::from([
                ("tcp".into(), 6443),
                ("tcp".into(), 2379),
                ("tcp".into(), 2380),
                ("tcp".into(), 179),
                ("4".into(), -1)
            ])
        );
        let node = wanted[3].rules.as_ref().unwrap();
        assert!(node.iter().any(|r| r.from_port == 30000
            && r.to_port == 32767
            && r.source == Source::Cidr("0.0.0.0/0".into())));
        let custom = kubeadm_cluster(
            Some(&[CNIIngressRule {
                description: "vxlan".into(),
                protocol: "udp".into(),
                from_port: 4789,
                to_port: 4789,
            }]),
            &["10.0.0.0/8".into()],
        );
        let node = custom[3].rules.as_ref().unwrap();
        assert!(!node.iter().any(|r| r.from_port == 179));
        assert!(
            node.iter()
                .any(|r| r.protocol == "udp" && r.from_port == 4789)
        );
        assert!(
            node.iter()
                .any(|r| r.from_port == 30000 && r.source == Source::Cidr("10.0.0.0/8".into()))
        );
    }
}
