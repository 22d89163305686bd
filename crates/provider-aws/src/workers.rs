//! What every self-managed worker of an EKS cluster shares, whether an auto-scaling group
//! makes it (AWSMachinePool) or it stands alone (AWSMachine): its tags, its AMI, its security
//! groups and subnets, and its role in the cluster's aws-auth. An AWSMachine may also run in a
//! cluster whose control plane is on EC2 (an AWSCluster's): [`Infrastructure`] says what each
//! kind of cluster gives its instances.

use std::collections::BTreeMap;

use kube::ResourceExt;
use kube::api::{Api, DynamicObject};
use lariat_api::aws::identity::AWSIdentityReference;
use lariat_api::aws::instance::AMIReference;
use lariat_api::aws::{AWSCluster, AWSManagedControlPlane};
use lariat_controllers::Error;
use lariat_controllers::object::patch;
use serde_json::json;

use crate::Context;
use crate::identity::Session;
use crate::sdk::AwsResult;
use crate::tags::Owner;

/// The cluster an instance runs in, as its instances see it.
pub(crate) enum Infrastructure {
    /// An EKS cluster: its AWSManagedControlPlane.
    Eks(Box<AWSManagedControlPlane>),
    /// A cluster whose control plane runs on EC2: its AWSCluster.
    Ec2(Box<AWSCluster>),
}

impl Infrastructure {
    pub(crate) fn region(&self) -> Option<&str> {
        match self {
            Infrastructure::Eks(plane) => plane.spec.region.as_deref(),
            Infrastructure::Ec2(cluster) => cluster.spec.region.as_deref(),
        }
    }

    pub(crate) fn identity(&self) -> Option<&AWSIdentityReference> {
        match self {
            Infrastructure::Eks(plane) => plane.spec.identity_ref.as_ref(),
            Infrastructure::Ec2(cluster) => cluster.spec.identity_ref.as_ref(),
        }
    }

    /// Whether instances may be launched: the EKS cluster is up, or the AWSCluster's network
    /// and load balancer are.
    pub(crate) fn ready(&self) -> bool {
        match self {
            Infrastructure::Eks(plane) => plane.status.as_ref().is_some_and(|s| s.ready),
            Infrastructure::Ec2(cluster) => cluster.status.as_ref().is_some_and(|s| s.ready),
        }
    }

    /// What it is waiting for, said for a person.
    pub(crate) fn waiting(&self) -> (&'static str, &'static str) {
        match self {
            Infrastructure::Eks(_) => (
                "WaitingForEKSControlPlane",
                "the EKS control plane is not ready yet",
            ),
            Infrastructure::Ec2(_) => (
                "WaitingForClusterInfrastructure",
                "the AWSCluster's network and load balancer are not ready yet",
            ),
        }
    }

    /// The private subnets, in `zones` if any are named: where instances go.
    pub(crate) fn private_subnets(&self, zones: Option<&[String]>) -> Vec<String> {
        match self {
            Infrastructure::Eks(plane) => private_subnets(plane, zones),
            Infrastructure::Ec2(cluster) => {
                subnets_in(cluster.spec.network.as_ref(), zones).collect()
            }
        }
    }

    /// An instance's security groups: EKS's node groups; for an EC2 control plane Cluster
    /// API AWS's `node` and `lb`, and `controlplane` for a control-plane instance; then
    /// `additional`.
    pub(crate) fn security_groups<'a>(
        &self,
        control_plane: bool,
        additional: impl IntoIterator<Item = &'a lariat_api::aws::instance::AWSResourceReference>,
    ) -> Vec<String> {
        let cluster = match self {
            Infrastructure::Eks(plane) => return security_groups(plane, additional),
            Infrastructure::Ec2(cluster) => cluster,
        };
        let roles: &[&str] = if control_plane {
            &["controlplane", "node", "lb"]
        } else {
            &["node", "lb"]
        };
        let recorded = cluster
            .status
            .as_ref()
            .and_then(|s| s.network_status.as_ref())
            .and_then(|n| n.security_groups.as_ref());
        let mut groups: Vec<String> = roles
            .iter()
            .filter_map(|role| recorded?.get(*role).map(|g| g.id.clone()))
            .collect();
        groups.extend(additional.into_iter().filter_map(|g| g.id.clone()));
        groups
    }

    /// An instance's tags: ownership, its role, and the cluster tag the cloud provider looks
    /// for (EKS's cluster name, or the Cluster's).
    pub(crate) fn instance_tags(
        &self,
        owner: &Owner,
        name: &str,
        control_plane: bool,
    ) -> BTreeMap<String, String> {
        match self {
            Infrastructure::Eks(plane) => node_tags(owner, name, &eks_cluster(plane)),
            Infrastructure::Ec2(_) => {
                let role = if control_plane {
                    "control-plane"
                } else {
                    "node"
                };
                let mut tags = owner.tags(name, role);
                tags.insert(
                    format!("kubernetes.io/cluster/{}", owner.cluster),
                    "owned".into(),
                );
                tags
            }
        }
    }

    /// The key pair an instance gets when its AWSMachine names none: its AWSCluster's.
    pub(crate) fn ssh_key_name(&self) -> Option<&str> {
        match self {
            Infrastructure::Eks(_) => None,
            Infrastructure::Ec2(cluster) => cluster.spec.ssh_key_name.as_deref(),
        }
    }

    /// The cluster's image lookup settings (an AWSManagedControlPlane has the same fields).
    pub(crate) fn image_lookup(&self) -> ImageLookup {
        match self {
            Infrastructure::Eks(plane) => ImageLookup {
                format: plane.spec.image_lookup_format.clone(),
                org: plane.spec.image_lookup_org.clone(),
                base_os: plane.spec.image_lookup_base_os.clone(),
            },
            Infrastructure::Ec2(cluster) => ImageLookup {
                format: cluster.spec.image_lookup_format.clone(),
                org: cluster.spec.image_lookup_org.clone(),
                base_os: cluster.spec.image_lookup_base_os.clone(),
            },
        }
    }

    /// The load balancer control-plane instances are registered with, if any.
    pub(crate) fn load_balancer(&self) -> Option<String> {
        let Infrastructure::Ec2(cluster) = self else {
            return None;
        };
        cluster
            .status
            .as_ref()?
            .network_status
            .as_ref()?
            .api_server_elb
            .as_ref()?
            .name
            .clone()
    }
}

/// The private subnets of `network`, in `zones` if any are named.
fn subnets_in<'a>(
    network: Option<&'a lariat_api::aws::network::NetworkSpec>,
    zones: Option<&'a [String]>,
) -> impl Iterator<Item = String> + 'a {
    network
        .into_iter()
        .flat_map(|n| n.subnets.iter().flatten())
        .filter(|s| s.is_public != Some(true))
        .filter(move |s| {
            zones.is_none_or(|zones| {
                s.availability_zone
                    .as_ref()
                    .is_some_and(|z| zones.contains(z))
            })
        })
        .map(|s| s.id.clone())
}

/// The tags of a worker instance (and of its group): ownership, and the one EKS and its cloud
/// provider look for on a cluster's self-managed nodes.
pub(crate) fn node_tags(owner: &Owner, name: &str, eks_cluster: &str) -> BTreeMap<String, String> {
    let mut tags = owner.tags(name, "node");
    tags.insert(
        format!("kubernetes.io/cluster/{eks_cluster}"),
        "owned".into(),
    );
    tags
}

/// The EKS cluster's name, for the tags and the join.
pub(crate) fn eks_cluster(control_plane: &AWSManagedControlPlane) -> String {
    control_plane
        .spec
        .eks_cluster_name
        .clone()
        .unwrap_or_default()
}

/// The Kubernetes version a worker runs: its own, else what the control plane runs (not what
/// it is being upgraded to: nodes newer than their control plane are refused), as EKS writes
/// it (`1.31`).
pub(crate) fn version(own: Option<&str>, control_plane: &AWSManagedControlPlane) -> Option<String> {
    own.or(control_plane
        .status
        .as_ref()
        .and_then(|s| s.version.as_deref()))
        .and_then(crate::control_plane::eks_version)
}

/// The node security groups EKS's workers need (the cluster's own and Cluster API AWS's
/// additional one, as the control plane recorded them), then `additional` (by ID).
pub(crate) fn security_groups<'a>(
    control_plane: &AWSManagedControlPlane,
    additional: impl IntoIterator<Item = &'a lariat_api::aws::instance::AWSResourceReference>,
) -> Vec<String> {
    let mut groups: Vec<String> = control_plane
        .status
        .as_ref()
        .and_then(|s| s.network_status.as_ref())
        .and_then(|n| n.security_groups.as_ref())
        .map(|groups| {
            ["node", "node-eks-additional"]
                .iter()
                .filter_map(|role| groups.get(*role).map(|g| g.id.clone()))
                .collect()
        })
        .unwrap_or_default();
    groups.extend(additional.into_iter().filter_map(|g| g.id.clone()));
    groups
}

/// The control plane's private subnets, in `zones` if any are named: where workers go.
pub(crate) fn private_subnets(
    control_plane: &AWSManagedControlPlane,
    zones: Option<&[String]>,
) -> Vec<String> {
    subnets_in(control_plane.spec.network.as_ref(), zones).collect()
}

/// The worker's AMI: the one named, else the EKS-optimized AMI AWS publishes in SSM for the
/// Kubernetes version, OS (`eksLookupType`) and architecture, as Cluster API AWS looks it up.
/// `field` is where the spec names it (`spec.ami`), for the messages.
pub(crate) async fn ami(
    session: &Session,
    reference: Option<&AMIReference>,
    version: Option<&str>,
    instance_type: Option<&str>,
    field: &str,
) -> Result<String, String> {
    if let Some(id) = reference.and_then(|r| r.id.clone()) {
        return Ok(id);
    }
    let lookup = reference
        .and_then(|r| r.eks_lookup_type.as_deref())
        .unwrap_or("AmazonLinux");
    let Some(version) = version else {
        return Err(format!(
            "no Kubernetes version to look an EKS AMI up for: set the version of the Machine or MachinePool, or {field}.id"
        ));
    };
    let arm = instance_type.is_some_and(graviton);
    let parameter = match lookup {
        "AmazonLinux" => format!(
            "/aws/service/eks/optimized-ami/{version}/amazon-linux-2{}/recommended/image_id",
            if arm { "-arm64" } else { "" }
        ),
        "AmazonLinux2023" => format!(
            "/aws/service/eks/optimized-ami/{version}/amazon-linux-2023/{}/standard/recommended/image_id",
            if arm { "arm64" } else { "x86_64" }
        ),
        "Bottlerocket" => format!(
            "/aws/service/bottlerocket/aws-k8s-{version}/{}/latest/image_id",
            if arm { "arm64" } else { "x86_64" }
        ),
        other => {
            return Err(format!(
                "{field}.eksLookupType {other:?} is not one of AmazonLinux, AmazonLinux2023, Bottlerocket"
            ));
        }
    };
    let found = session
        .aws()
        .ssm(&session.config)
        .get_parameter()
        .name(&parameter)
        .send()
        .await
        .aws()
        .map_err(|e| format!("cannot look up the EKS AMI ({parameter}): {e}"))?;
    found
        .parameter()
        .and_then(|p| p.value())
        .map(str::to_owned)
        .ok_or_else(|| format!("{parameter} has no value"))
}

/// Where Cluster API AWS looks a machine's AMI up: the AMIs image-builder publishes, named
/// `capa-ami-<base OS>-<Kubernetes version>-...` (`format`, a Go template of `.BaseOS` and
/// `.K8sVersion`), owned by `org`.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct ImageLookup {
    pub(crate) format: Option<String>,
    pub(crate) org: Option<String>,
    pub(crate) base_os: Option<String>,
}

impl ImageLookup {
    /// Cluster API AWS's defaults: the CNCF's account, Ubuntu 24.04.
    const DEFAULT_FORMAT: &str = "capa-ami-{{.BaseOS}}-?{{.K8sVersion}}-*";
    const DEFAULT_ORG: &str = "819546954734";
    const DEFAULT_BASE_OS: &str = "ubuntu-24.04";

    pub(crate) fn is_set(&self) -> bool {
        *self != ImageLookup::default()
    }

    /// The machine's own settings, else its cluster's.
    pub(crate) fn or(self, cluster: ImageLookup) -> ImageLookup {
        ImageLookup {
            format: self.format.or(cluster.format),
            org: self.org.or(cluster.org),
            base_os: self.base_os.or(cluster.base_os),
        }
    }

    /// The name filter for `version` (`v1.31.0` or `1.31.0`).
    fn name(&self, version: &str) -> String {
        let mut name = self
            .format
            .clone()
            .unwrap_or_else(|| Self::DEFAULT_FORMAT.to_owned());
        let base_os = self.base_os.as_deref().unwrap_or(Self::DEFAULT_BASE_OS);
        let version = version.trim_start_matches('v');
        for (field, value) in [("BaseOS", base_os), ("K8sVersion", version)] {
            name = name
                .replace(&format!("{{{{.{field}}}}}"), value)
                .replace(&format!("{{{{ .{field} }}}}"), value);
        }
        name
    }
}

/// The newest available AMI `lookup` finds for Kubernetes `version` on `instance_type`'s
/// architecture, as Cluster API AWS looks it up for machines of clusters it builds on EC2.
pub(crate) async fn image_builder_ami(
    session: &Session,
    lookup: &ImageLookup,
    version: Option<&str>,
    instance_type: &str,
) -> Result<String, String> {
    let Some(version) = version else {
        return Err(
            "no Kubernetes version to look an AMI up for: set the Machine's version, or spec.ami.id"
                .into(),
        );
    };
    let name = lookup.name(version);
    let org = lookup.org.as_deref().unwrap_or(ImageLookup::DEFAULT_ORG);
    let architecture = if graviton(instance_type) {
        "arm64"
    } else {
        "x86_64"
    };
    let filter = crate::tags::filter;
    let found = session
        .aws()
        .ec2(&session.config)
        .describe_images()
        .filters(filter("owner-id", org))
        .filters(filter("name", &name))
        .filters(filter("architecture", architecture))
        .filters(filter("state", "available"))
        .filters(filter("virtualization-type", "hvm"))
        .send()
        .await
        .aws()
        .map_err(|e| format!("cannot look up AMIs named {name:?} of {org}: {e}"))?;
    // ISO 8601 dates sort as they read.
    found
        .images()
        .iter()
        .max_by(|a, b| a.creation_date().cmp(&b.creation_date()))
        .and_then(|image| image.image_id())
        .map(str::to_owned)
        .ok_or_else(|| {
            format!(
                "no available {architecture} AMI named {name:?} owned by {org}: build one with image-builder, set imageLookupOrg to the account that has one, or set spec.ami.id"
            )
        })
}

/// Whether an instance type is AWS Graviton (arm64): a `g` right after the generation
/// (`m7g.large`, `t4g.small`, `c7gn.xlarge`; not `g5.xlarge`, a GPU type), or the first
/// generation's `a1`.
fn graviton(instance_type: &str) -> bool {
    let family = instance_type.split('.').next().unwrap_or_default();
    if family == "a1" {
        return true;
    }
    let Some(digit) = family.find(|c: char| c.is_ascii_digit()) else {
        return false;
    };
    family[digit..]
        .trim_start_matches(|c: char| c.is_ascii_digit())
        .starts_with('g')
}

/// Annotation: the instance profile whose role is mapped in the cluster's aws-auth, so a
/// steady reconcile does not look again.
const ROLE_MAPPED: &str = "lariat.dev/aws-auth-instance-profile";

/// Maps the instances' role in the cluster's aws-auth (once per instance profile and object),
/// so they can join; `Err` says why they cannot yet. Without an instance profile there is no
/// role.
pub(crate) async fn map_node_role(
    ctx: &Context,
    session: &Session,
    api: &Api<DynamicObject>,
    object: &DynamicObject,
    cluster: &str,
    instance_profile: Option<&str>,
) -> Result<Result<(), String>, Error> {
    let Some(profile) = instance_profile else {
        return Ok(Ok(()));
    };
    if object.annotations().get(ROLE_MAPPED).map(String::as_str) == Some(profile) {
        return Ok(Ok(()));
    }
    let role = match crate::aws_auth::profile_role(session, profile).await {
        Ok(role) => role,
        Err(message) => return Ok(Err(message)),
    };
    let secret = format!("{cluster}-kubeconfig");
    let workload = match ctx
        .caches
        .secrets()
        .get(&object.namespace().unwrap_or_default(), &secret)
        .await?
    {
        Some(secret) => lariat_controllers::cache::workload_client(&secret).await,
        None => None,
    };
    let Some(workload) = workload else {
        return Ok(Err(format!("{secret} holds no usable kubeconfig yet")));
    };
    if let Err(message) = crate::aws_auth::ensure_node_role(&workload, &role).await {
        return Ok(Err(message));
    }
    patch(
        api,
        &object.name_any(),
        json!({"metadata": {"annotations": {ROLE_MAPPED: profile}}}),
    )
    .await?;
    Ok(Ok(()))
}

/// The bootstrap data in a Secret's `value` (Cluster API's bootstrap contract), as bytes, or
/// why there is none. Only a Secret labelled as the cluster's (as bootstrap providers label
/// theirs) serves: one cluster's join token or CA keys never boot another's machines.
pub(crate) async fn bootstrap_data(
    ctx: &Context,
    namespace: &str,
    cluster: &str,
    secret: &str,
) -> Result<Result<Vec<u8>, String>, Error> {
    use base64::Engine;
    let label = lariat_api::capi::labels::CLUSTER_NAME;
    // The cache holds only Secrets labelled with a cluster's name.
    let Some(found) = ctx.caches.secrets().get(namespace, secret).await? else {
        return Ok(Err(format!(
            "bootstrap data Secret {secret} does not exist, or is not labelled {label}"
        )));
    };
    let owner = found
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(label))
        .map(String::as_str)
        .unwrap_or_default();
    if owner != cluster {
        return Ok(Err(format!(
            "bootstrap data Secret {secret} is cluster {owner}'s ({label}), not {cluster}'s"
        )));
    }
    Ok(found.data["data"]["value"]
        .as_str()
        .and_then(|v| base64::engine::general_purpose::STANDARD.decode(v).ok())
        .ok_or_else(|| format!("bootstrap data Secret {secret} has no value")))
}

#[cfg(test)]
mod tests {
    #[test]
    fn image_names_are_cluster_api_aws_s() {
        let lookup = super::ImageLookup::default();
        assert_eq!(lookup.name("v1.31.0"), "capa-ami-ubuntu-24.04-?1.31.0-*");
        let own = super::ImageLookup {
            format: Some("my-{{ .BaseOS }}-k8s-{{.K8sVersion}}".into()),
            org: None,
            base_os: Some("flatcar".into()),
        };
        assert_eq!(own.name("1.30.2"), "my-flatcar-k8s-1.30.2");
        assert!(own.is_set() && !lookup.is_set());
    }

    #[test]
    fn graviton_instance_types_are_arm64() {
        for arm in [
            "m7g.large",
            "t4g.small",
            "c7gn.xlarge",
            "m6gd.metal",
            "a1.large",
        ] {
            assert!(super::graviton(arm), "{arm}");
        }
        for x86 in [
            "t3.large",
            "g5.xlarge",
            "m6i.large",
            "p4d.24xlarge",
            "weird",
        ] {
            assert!(!super::graviton(x86), "{x86}");
        }
    }
}
