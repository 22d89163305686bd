//! `lariat generate cluster`: prints the manifests of a whole cluster, as `clusterctl generate
//! cluster` does, ready for `kubectl apply -f -`.

use anyhow::bail;

#[derive(clap::Subcommand)]
pub enum GenerateCommand {
    /// Manifests for a cluster: Cluster, infrastructure, control plane and one machine pool.
    Cluster(ClusterArgs),
}

#[derive(clap::Args)]
pub struct ClusterArgs {
    /// The cluster's name (an RFC 1123 label).
    pub(crate) name: String,
    /// The infrastructure provider (this build has: inmemory, aws).
    #[arg(long, default_value = "inmemory")]
    pub(crate) infrastructure: String,
    /// Which of the provider's templates (aws: eks-managedmachinepool, an EKS cluster with a
    /// managed node group; eks-machinepool, with self-managed instances on an auto-scaling
    /// group; eks, with a MachineDeployment of single EC2 instances).
    #[arg(long)]
    pub(crate) flavor: Option<String>,
    /// The AWS region of the cluster (aws).
    #[arg(long, env = "AWS_REGION")]
    pub(crate) region: Option<String>,
    /// Kubernetes version of the control plane and the workers.
    #[arg(long, default_value = "v1.30.2")]
    pub(crate) kubernetes_version: String,
    /// Control-plane machines (an odd number keeps etcd's quorum).
    #[arg(long, default_value_t = 1)]
    pub(crate) control_plane_machine_count: u32,
    /// Worker machines: the MachineDeployment's (inmemory) or the node group's (aws).
    #[arg(long, default_value_t = 0)]
    pub(crate) worker_machine_count: u32,
    /// Namespace of the generated objects.
    #[arg(short = 'n', long = "target-namespace", default_value = "default")]
    pub(crate) namespace: String,
    /// How long each simulated machine takes to boot (in-memory provider), e.g. `5s`.
    #[arg(long, default_value = "0s")]
    pub(crate) provisioning_delay: String,
}

/// Infrastructure providers `generate` knows templates for.
pub const INFRASTRUCTURE_PROVIDERS: &[&str] = &["inmemory", "aws"];

/// Cluster API AWS's flavors lariat provisions, and those it does not yet.
const AWS_FLAVORS: &[&str] = &["eks-managedmachinepool", "eks-machinepool", "eks"];

pub fn run(command: GenerateCommand) -> anyhow::Result<()> {
    match command {
        GenerateCommand::Cluster(args) => {
            print!("{}", cluster(&args)?);
            Ok(())
        }
    }
}

fn is_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

fn is_version(version: &str) -> bool {
    let Some(rest) = version.strip_prefix('v') else {
        return false;
    };
    let core = rest.split(['-', '+']).next().unwrap_or_default();
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// What every provider's template needs of the arguments: a known provider, names that are
/// labels, a Kubernetes version lariat supports.
fn check(args: &ClusterArgs) -> anyhow::Result<()> {
    if !INFRASTRUCTURE_PROVIDERS.contains(&args.infrastructure.as_str()) {
        bail!(
            "unknown infrastructure provider {:?}: lariat can generate clusters for {}",
            args.infrastructure,
            INFRASTRUCTURE_PROVIDERS.join(", ")
        );
    }
    if !is_label(&args.name) {
        bail!(
            "cluster name {:?} is not valid: use lowercase letters, digits and '-' (at most 63)",
            args.name
        );
    }
    if !is_label(&args.namespace) {
        bail!(
            "namespace {:?} is not valid: use lowercase letters, digits and '-'",
            args.namespace
        );
    }
    if !is_version(&args.kubernetes_version) {
        bail!(
            "kubernetes version {:?} is not valid: use the form v1.30.2",
            args.kubernetes_version
        );
    }
    // Refused here rather than halfway through an apply, where some objects would be made.
    if let Some(refusal) = lariat_api::KubernetesVersion::parse(&args.kubernetes_version)
        .and_then(|version| lariat_api::support::kubernetes_refusal(&version))
    {
        bail!("--kubernetes-version: {refusal}");
    }
    Ok(())
}

pub fn cluster(args: &ClusterArgs) -> anyhow::Result<String> {
    check(args)?;
    if args.infrastructure == "aws" {
        return aws_cluster(args);
    }
    if let Some(flavor) = &args.flavor {
        bail!("the inmemory provider has one template: drop --flavor {flavor}");
    }
    if args.control_plane_machine_count == 0 {
        bail!("--control-plane-machine-count must be at least 1");
    }
    let ClusterArgs {
        name,
        kubernetes_version: version,
        namespace,
        provisioning_delay: delay,
        ..
    } = args;
    let (cp, workers) = (args.control_plane_machine_count, args.worker_machine_count);
    Ok(format!(
        r#"apiVersion: cluster.x-k8s.io/v1beta1
kind: Cluster
metadata:
  name: {name}
  namespace: {namespace}
spec:
  clusterNetwork:
    pods:
      cidrBlocks: ["192.168.0.0/16"]
    services:
      cidrBlocks: ["10.128.0.0/12"]
    serviceDomain: cluster.local
  controlPlaneRef:
    apiVersion: controlplane.cluster.x-k8s.io/v1beta1
    kind: KubeadmControlPlane
    name: {name}-control-plane
  infrastructureRef:
    apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
    kind: InMemoryCluster
    name: {name}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: InMemoryCluster
metadata:
  name: {name}
  namespace: {namespace}
spec: {{}}
---
apiVersion: controlplane.cluster.x-k8s.io/v1beta1
kind: KubeadmControlPlane
metadata:
  name: {name}-control-plane
  namespace: {namespace}
spec:
  replicas: {cp}
  version: {version}
  machineTemplate:
    infrastructureRef:
      apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
      kind: InMemoryMachineTemplate
      name: {name}-control-plane
  kubeadmConfigSpec:
    clusterConfiguration:
      apiServer:
        certSANs: [localhost, 127.0.0.1]
    initConfiguration:
      nodeRegistration:
        kubeletExtraArgs:
          eviction-hard: nodefs.available<0%,nodefs.inodesFree<0%,imagefs.available<0%
    joinConfiguration:
      nodeRegistration:
        kubeletExtraArgs:
          eviction-hard: nodefs.available<0%,nodefs.inodesFree<0%,imagefs.available<0%
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: InMemoryMachineTemplate
metadata:
  name: {name}-control-plane
  namespace: {namespace}
spec:
  template:
    spec:
      behavior:
        provisioningDelay: {delay}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: InMemoryMachineTemplate
metadata:
  name: {name}-md-0
  namespace: {namespace}
spec:
  template:
    spec:
      behavior:
        provisioningDelay: {delay}
---
apiVersion: bootstrap.cluster.x-k8s.io/v1beta1
kind: KubeadmConfigTemplate
metadata:
  name: {name}-md-0
  namespace: {namespace}
spec:
  template:
    spec:
      joinConfiguration:
        nodeRegistration:
          kubeletExtraArgs:
            eviction-hard: nodefs.available<0%,nodefs.inodesFree<0%,imagefs.available<0%
---
apiVersion: cluster.x-k8s.io/v1beta1
kind: MachineDeployment
metadata:
  name: {name}-md-0
  namespace: {namespace}
spec:
  clusterName: {name}
  replicas: {workers}
  selector:
    matchLabels: {{}}
  template:
    spec:
      clusterName: {name}
      version: {version}
      bootstrap:
        configRef:
          apiVersion: bootstrap.cluster.x-k8s.io/v1beta1
          kind: KubeadmConfigTemplate
          name: {name}-md-0
      infrastructureRef:
        apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
        kind: InMemoryMachineTemplate
        name: {name}-md-0
"#
    ))
}

/// Cluster API AWS's `cluster-template-<flavor>.yaml`, with its variables filled in.
fn aws_cluster(args: &ClusterArgs) -> anyhow::Result<String> {
    let flavor = args.flavor.as_deref().unwrap_or(AWS_FLAVORS[0]);
    if !AWS_FLAVORS.contains(&flavor) {
        bail!(
            "unknown aws flavor {flavor:?}: lariat has {}",
            AWS_FLAVORS.join(", ")
        );
    }
    let Some(region) = args.region.as_deref().filter(|r| !r.is_empty()) else {
        bail!("no AWS region: pass --region REGION or set AWS_REGION, e.g. us-east-1");
    };
    if !region
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        bail!("region {region:?} is not an AWS region name, e.g. us-east-1");
    }
    let workers = args.worker_machine_count;
    if workers == 0 {
        bail!("--worker-machine-count N: the node group's size (EKS needs at least 1)");
    }
    let ClusterArgs {
        name,
        kubernetes_version: version,
        namespace,
        ..
    } = args;
    let max = workers.max(10);
    let workers = aws_workers(flavor, args, max);
    Ok(format!(
        r#"apiVersion: cluster.x-k8s.io/v1beta1
kind: Cluster
metadata:
  name: {name}
  namespace: {namespace}
spec:
  clusterNetwork:
    pods:
      cidrBlocks: ["192.168.0.0/16"]
  infrastructureRef:
    kind: AWSManagedCluster
    apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
    name: {name}
  controlPlaneRef:
    kind: AWSManagedControlPlane
    apiVersion: controlplane.cluster.x-k8s.io/v1beta2
    name: {name}-control-plane
---
kind: AWSManagedCluster
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
metadata:
  name: {name}
  namespace: {namespace}
spec: {{}}
---
kind: AWSManagedControlPlane
apiVersion: controlplane.cluster.x-k8s.io/v1beta2
metadata:
  name: {name}-control-plane
  namespace: {namespace}
spec:
  region: {region}
  version: {version}
---
{workers}"#
    ))
}

/// The workers of an AWS flavor, `--worker-machine-count` of them: a MachineDeployment of EC2
/// instances (`eks`), a self-managed auto-scaling group (`eks-machinepool`) or an EKS
/// managed node group (`eks-managedmachinepool`).
fn aws_workers(flavor: &str, args: &ClusterArgs, max: u32) -> String {
    let ClusterArgs {
        name,
        kubernetes_version: version,
        namespace,
        worker_machine_count: workers,
        ..
    } = args;
    if flavor == "eks" {
        // A MachineDeployment of single EC2 instances, each booted by nodeadm (Cluster API
        // AWS's `cluster-template-eks.yaml`).
        format!(
            r#"apiVersion: cluster.x-k8s.io/v1beta1
kind: MachineDeployment
metadata:
  name: {name}-md-0
  namespace: {namespace}
spec:
  clusterName: {name}
  replicas: {workers}
  selector:
    matchLabels: {{}}
  template:
    spec:
      clusterName: {name}
      version: {version}
      bootstrap:
        configRef:
          name: {name}-md-0
          apiVersion: bootstrap.cluster.x-k8s.io/v1beta2
          kind: NodeadmConfigTemplate
      infrastructureRef:
        name: {name}-md-0
        apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
        kind: AWSMachineTemplate
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: AWSMachineTemplate
metadata:
  name: {name}-md-0
  namespace: {namespace}
spec:
  template:
    spec:
      ami:
        eksLookupType: AmazonLinux2023
      cloudInit:
        insecureSkipSecretsManager: true
      instanceType: t3.large
      iamInstanceProfile: nodes.cluster-api-provider-aws.sigs.k8s.io
---
apiVersion: bootstrap.cluster.x-k8s.io/v1beta2
kind: NodeadmConfigTemplate
metadata:
  name: {name}-md-0
  namespace: {namespace}
spec:
  template: {{}}
"#
        )
    } else if flavor == "eks-machinepool" {
        // Self-managed instances on an auto-scaling group, Amazon Linux 2023 with nodeadm,
        // the AMI EKS publishes for the version (Cluster API AWS's instance profile, made
        // by `clusterawsadm bootstrap iam`, must exist in the account).
        format!(
            r#"apiVersion: cluster.x-k8s.io/v1beta1
kind: MachinePool
metadata:
  name: {name}-mp-0
  namespace: {namespace}
spec:
  clusterName: {name}
  replicas: {workers}
  template:
    spec:
      clusterName: {name}
      bootstrap:
        configRef:
          name: {name}-mp-0
          apiVersion: bootstrap.cluster.x-k8s.io/v1beta2
          kind: NodeadmConfig
      infrastructureRef:
        name: {name}-mp-0
        apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
        kind: AWSMachinePool
      version: {version}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: AWSMachinePool
metadata:
  name: {name}-mp-0
  namespace: {namespace}
spec:
  minSize: 1
  maxSize: {max}
  awsLaunchTemplate:
    ami:
      eksLookupType: AmazonLinux2023
    iamInstanceProfile: nodes.cluster-api-provider-aws.sigs.k8s.io
    instanceType: t3.large
---
apiVersion: bootstrap.cluster.x-k8s.io/v1beta2
kind: NodeadmConfig
metadata:
  name: {name}-mp-0
  namespace: {namespace}
spec: {{}}
"#
        )
    } else {
        format!(
            r#"apiVersion: cluster.x-k8s.io/v1beta1
kind: MachinePool
metadata:
  name: {name}-pool-0
  namespace: {namespace}
spec:
  clusterName: {name}
  replicas: {workers}
  template:
    spec:
      clusterName: {name}
      bootstrap:
        dataSecretName: ""
      infrastructureRef:
        name: {name}-pool-0
        apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
        kind: AWSManagedMachinePool
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: AWSManagedMachinePool
metadata:
  name: {name}-pool-0
  namespace: {namespace}
spec:
  amiType: AL2023_x86_64_STANDARD
  scaling:
    minSize: 1
    maxSize: {max}
"#
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(name: &str, infrastructure: &str, version: &str) -> ClusterArgs {
        ClusterArgs {
            name: name.into(),
            infrastructure: infrastructure.into(),
            flavor: None,
            region: Some("us-east-1".into()),
            kubernetes_version: version.into(),
            control_plane_machine_count: 3,
            worker_machine_count: 2,
            namespace: "default".into(),
            provisioning_delay: "0s".into(),
        }
    }

    #[test]
    fn refuses_bad_input_with_one_clear_line() {
        for (a, expect) in [
            (
                args("dev", "gcp", "v1.30.2"),
                "unknown infrastructure provider \"gcp\"",
            ),
            (
                ClusterArgs {
                    flavor: Some("gke".into()),
                    ..args("dev", "aws", "v1.30.2")
                },
                "unknown aws flavor \"gke\": lariat has eks-managedmachinepool, eks-machinepool, eks",
            ),
            (
                ClusterArgs {
                    region: None,
                    ..args("dev", "aws", "v1.30.2")
                },
                "no AWS region: pass --region REGION or set AWS_REGION",
            ),
            (
                ClusterArgs {
                    worker_machine_count: 0,
                    ..args("dev", "aws", "v1.30.2")
                },
                "--worker-machine-count N: the node group's size",
            ),
            (
                args("Dev_1", "inmemory", "v1.30.2"),
                "cluster name \"Dev_1\" is not valid",
            ),
            (
                args("dev", "inmemory", "1.30"),
                "kubernetes version \"1.30\" is not valid",
            ),
        ] {
            let error = cluster(&a).unwrap_err().to_string();
            assert!(
                error.starts_with(expect) && !error.contains('\n'),
                "{error}"
            );
        }
    }

    #[test]
    fn aws_makes_cluster_api_aws_s_eks_managed_machine_pool_template() {
        let text = cluster(&args("prod", "aws", "v1.31.0")).unwrap();
        for kind in [
            "Cluster",
            "AWSManagedCluster",
            "AWSManagedControlPlane",
            "MachinePool",
            "AWSManagedMachinePool",
        ] {
            assert!(text.contains(&format!("kind: {kind}\n")), "{kind}");
        }
        assert!(text.contains("region: us-east-1") && text.contains("replicas: 2"));
        let text = cluster(&ClusterArgs {
            flavor: Some("eks-machinepool".into()),
            ..args("prod", "aws", "v1.31.0")
        })
        .unwrap();
        for kind in ["MachinePool", "AWSMachinePool", "NodeadmConfig"] {
            assert!(text.contains(&format!("kind: {kind}\n")), "{kind}");
        }
        assert!(
            text.contains("eksLookupType: AmazonLinux2023") && text.contains("version: v1.31.0")
        );
        let text = cluster(&ClusterArgs {
            flavor: Some("eks".into()),
            ..args("prod", "aws", "v1.31.0")
        })
        .unwrap();
        for kind in [
            "MachineDeployment",
            "AWSMachineTemplate",
            "NodeadmConfigTemplate",
        ] {
            assert!(text.contains(&format!("kind: {kind}\n")), "{kind}");
        }
        assert!(text.contains("insecureSkipSecretsManager: true"));
    }

    #[test]
    fn generates_seven_objects() {
        let text = cluster(&args("dev", "inmemory", "v1.30.2")).unwrap();
        assert_eq!(text.matches("\nkind: ").count(), 7);
        assert!(
            text.contains("replicas: 3")
                && text.contains("replicas: 2")
                && text.contains("version: v1.30.2")
        );
    }
}
