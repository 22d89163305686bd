//! AWSManagedControlPlane (`controlplane.cluster.x-k8s.io/v1beta2`): an EKS cluster, its IAM
//! role, addons and access, and the network it runs in.

use kube::CustomResource;

use super::instance::*;
use super::network::*;
use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AccessConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["config_map", "api", "api_and_config_map"], "default" = "config_map"))]
    pub authentication_mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = true))]
    pub bootstrap_cluster_creator_admin_permissions: Option<bool>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AccessScope {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub namespaces: Option<Vec<String>>,
    #[schemars(extend("enum" = ["cluster", "namespace"], "default" = "cluster"))]
    pub r#type: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AccessPolicyReference {
    pub access_scope: AccessScope,
    #[serde(rename = "policyARN")]
    pub policy_arn: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AccessEntry {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 20))]
    pub access_policies: Option<Vec<AccessPolicyReference>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_groups: Option<Vec<String>>,
    #[serde(rename = "principalARN")]
    pub principal_arn: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["standard", "ec2_linux", "ec2_windows", "fargate_linux", "ec2", "hybrid_linux", "hyperpod_linux"], "default" = "standard"))]
    pub r#type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Addon {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["overwrite", "none", "preserve"], "default" = "overwrite"))]
    pub conflict_resolution: Option<String>,
    #[schemars(length(min = 2))]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preserve_on_delete: Option<bool>,
    #[serde(
        rename = "serviceAccountRoleARN",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub service_account_role_arn: Option<String>,
    pub version: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EncryptionConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Vec<String>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EndpointAccess {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public: Option<bool>,
    #[serde(
        rename = "publicCIDRs",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub public_cid_rs: Option<Vec<String>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoleMapping {
    pub groups: Vec<String>,
    #[schemars(length(min = 31))]
    pub rolearn: String,
    pub username: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UserMapping {
    pub groups: Vec<String>,
    #[schemars(length(min = 31))]
    pub userarn: String,
    pub username: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IAMAuthenticatorConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub map_roles: Option<Vec<RoleMapping>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub map_users: Option<Vec<UserMapping>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeProxy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub disable: Option<bool>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControlPlaneLoggingSpec {
    #[schemars(extend("default" = false))]
    pub api_server: bool,
    #[schemars(extend("default" = false))]
    pub audit: bool,
    #[schemars(extend("default" = false))]
    pub authenticator: bool,
    #[schemars(extend("default" = false))]
    pub controller_manager: bool,
    #[schemars(extend("default" = false))]
    pub scheduler: bool,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OIDCIdentityProviderConfig {
    pub client_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups_claim: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups_prefix: Option<String>,
    pub identity_provider_config_name: String,
    pub issuer_url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_claims: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username_claim: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username_prefix: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VpcCni {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub disable: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Vec<crate::schema::EnvVar>>")]
    pub env: Option<Vec<k8s_openapi::api::core::v1::EnvVar>>,
}

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[allow(clippy::duplicated_attributes)]
#[kube(
    group = "controlplane.cluster.x-k8s.io",
    version = "v1beta2",
    kind = "AWSManagedControlPlane",
    plural = "awsmanagedcontrolplanes",
    namespaced,
    status = "AWSManagedControlPlaneStatus",
    derive = "PartialEq",
    derive = "Default",
    shortname = "awsmcp",
    category = "cluster-api",
    doc = "An EKS control plane and the network it runs in.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels.cluster\\.x-k8s\\.io/cluster-name",
        description = "The Cluster the control plane belongs to"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.ready",
        description = "Whether the control plane is ready for worker nodes"
    ),
    printcolumn(
        name = "VPC",
        type_ = "string",
        json_path = ".spec.network.vpc.id",
        description = "The VPC the control plane uses"
    ),
    printcolumn(
        name = "Endpoint",
        type_ = "string",
        json_path = ".spec.controlPlaneEndpoint.host",
        description = "The API server endpoint",
        priority = 1
    ),
    printcolumn(
        name = "Bastion IP",
        type_ = "string",
        json_path = ".status.bastion.publicIp",
        description = "The bastion's public IP address"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct AWSManagedControlPlaneSpec {
    /// How the cluster authenticates Kubernetes users: the aws-auth ConfigMap, EKS access entries, or both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_config: Option<AccessConfig>,
    /// IAM principals given access to the cluster (EKS access entries), with their policies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_entries: Option<Vec<AccessEntry>>,
    /// Tags added to every AWS resource created for the cluster, beside the ownership tags.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_tags: Option<BTreeMap<String, String>>,
    /// EKS addons to install, at these versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addons: Option<Vec<Addon>>,
    /// Whether to create an IAM OIDC provider for the cluster (IAM roles for service accounts).
    #[serde(
        rename = "associateOIDCProvider",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(extend("default" = false))]
    pub associate_oidc_provider: Option<bool>,
    /// A bastion host for break-glass access to the nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bastion: Option<Bastion>,
    /// Whether EKS installs its default networking addons when the cluster is created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = true))]
    pub bootstrap_self_managed_addons: Option<bool>,
    /// Where the API server is reached; set from EKS once the cluster exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<crate::capi::cluster::ApiEndpoint>,
    /// The EKS cluster's name (default: derived from the namespace and name; at most 100 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eks_cluster_name: Option<String>,
    /// Envelope encryption of Kubernetes Secrets with a KMS key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption_config: Option<EncryptionConfig>,
    /// Whether the API server is reached publicly, privately, or both, and from which CIDRs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_access: Option<EndpointAccess>,
    /// Role and user mappings written to the aws-auth ConfigMap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iam_authenticator_config: Option<IAMAuthenticatorConfig>,
    /// Whose AWS credentials reconcile the cluster (the controller's own when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_ref: Option<super::identity::AWSIdentityReference>,
    /// The base OS used to look up machine images.
    #[serde(
        rename = "imageLookupBaseOS",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub image_lookup_base_os: Option<String>,
    /// The name format used to look up machine images.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_lookup_format: Option<String>,
    /// The AWS organization whose machine images are looked up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_lookup_org: Option<String>,
    /// Whether kube-proxy runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kube_proxy: Option<KubeProxy>,
    /// Which control-plane logs EKS sends to CloudWatch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logging: Option<ControlPlaneLoggingSpec>,
    /// The VPC, subnets, gateways and security groups, created or adopted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkSpec>,
    /// An OIDC identity provider for users of the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oidc_identity_provider_config: Option<OIDCIdentityProviderConfig>,
    /// The AWS partition (aws, aws-cn, aws-us-gov), for ARNs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    /// The AWS region of the cluster and its network.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Whether only private subnets are given to EKS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub restrict_private_subnets: Option<bool>,
    /// Managed policies attached to the control plane's IAM role beside EKS's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role_additional_policies: Option<Vec<String>>,
    /// The control plane's IAM role: used as it is if it exists, created otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2))]
    pub role_name: Option<String>,
    /// The path of the IAM role lariat creates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role_path: Option<String>,
    /// The permissions boundary of the IAM role lariat creates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role_permissions_boundary: Option<String>,
    /// An extra VPC CIDR block for pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secondary_cidr_block: Option<String>,
    /// The EC2 key pair of the bastion and nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_key_name: Option<String>,
    /// How the kubeconfig's token is made: iam-authenticator or aws-cli style.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["iam-authenticator", "aws-cli"], "default" = "iam-authenticator"))]
    pub token_method: Option<String>,
    /// EKS's support policy for the version: standard or extended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["extended", "standard"]))]
    pub upgrade_policy: Option<String>,
    /// The Kubernetes version; changed one minor version at a time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 2),
        pattern(r"^v?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.?(\.0|[1-9][0-9]*)?$")
    )]
    pub version: Option<String>,
    /// Settings of the Amazon VPC CNI, or that it is disabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vpc_cni: Option<VpcCni>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddonIssue {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_ids: Option<Vec<String>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddonState {
    pub arn: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub created_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issues: Option<Vec<AddonIssue>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub modified_at: Option<String>,
    pub name: String,
    #[serde(
        rename = "serviceAccountRoleARN",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub service_account_role_arn: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    pub version: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IdentityProviderStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arn: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OIDCProviderStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arn: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust_policy: Option<String>,
}

/// The observed state of an AWSManagedControlPlane.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AWSManagedControlPlaneStatus {
    /// The addons installed and their state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addons: Option<Vec<AddonState>>,
    /// The bastion host, if there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bastion: Option<Instance>,
    /// What holds of the control plane and its network.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<crate::capi::conditions::Condition>>,
    /// Always true: the control plane has no Machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = true))]
    pub external_managed_control_plane: Option<bool>,
    /// The availability zones with subnets, where workers may go.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_domains: Option<BTreeMap<String, crate::capi::cluster::FailureDomainSpec>>,
    /// A failure the user must fix before the control plane can go on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_message: Option<String>,
    /// The OIDC identity provider's state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_provider_status: Option<IdentityProviderStatus>,
    /// Whether the API server has answered once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialized: Option<bool>,
    /// The security groups and load balancers found or created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_status: Option<NetworkStatus>,
    /// The generation of the spec last reconciled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The IAM OIDC provider, if one was associated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oidc_provider: Option<OIDCProviderStatus>,
    /// Whether the control plane can take worker nodes.
    #[schemars(extend("default" = false))]
    pub ready: bool,
    /// The Kubernetes version EKS reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}
