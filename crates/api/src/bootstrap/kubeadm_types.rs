//! kubeadm's own configuration, as Cluster API `v1beta1` embeds it in a KubeadmConfigSpec.
//!
//! These mirror kubeadm's `ClusterConfiguration`, `InitConfiguration` and `JoinConfiguration`
//! in the shape the Cluster API `v1beta1` CRDs give them (which differs from kubeadm's own
//! `v1beta3`/`v1beta4` files in places, e.g. `extraArgs` is a map here). The bootstrap
//! provider turns them into kubeadm's files at bootstrap time.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{EnvVar, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::core::Duration;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Cluster-wide settings kubeadm uses when it creates the first control-plane node.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterConfiguration {
    /// kubeadm's `apiVersion` for this document; the bootstrap provider picks one when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// kubeadm's `kind` for this document.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// How etcd runs: stacked on the control-plane nodes or external.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub etcd: Option<Etcd>,
    /// The cluster's network settings; Cluster API fills them from the Cluster when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub networking: Option<Networking>,
    /// The Kubernetes version; Cluster API fills it from the Machine when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub kubernetes_version: Option<String>,
    /// A stable address (`host:port`) of the control plane; Cluster API fills it when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub control_plane_endpoint: Option<String>,
    /// Settings of the API server static Pod.
    #[serde(rename = "apiServer", skip_serializing_if = "Option::is_none")]
    pub api_server: Option<ApiServer>,
    /// Settings of the controller-manager static Pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub controller_manager: Option<ControlPlaneComponent>,
    /// Settings of the scheduler static Pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduler: Option<ControlPlaneComponent>,
    /// Settings of the cluster DNS add-on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns: Option<Dns>,
    /// Where certificates are kept on the nodes, `/etc/kubernetes/pki` when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub certificates_dir: Option<String>,
    /// The registry the control-plane images are pulled from.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub image_repository: Option<String>,
    /// kubeadm feature gates, by name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub feature_gates: Option<BTreeMap<String, bool>>,
    /// The cluster's name as kubeadm records it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub cluster_name: Option<String>,
    /// The key algorithm of the certificates kubeadm creates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encryption_algorithm: Option<EncryptionAlgorithm>,
    /// Validity of the certificate authorities kubeadm creates, in days.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 36500))]
    pub ca_certificate_validity_period_days: Option<i32>,
    /// Validity of the other certificates kubeadm creates, in days.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1095))]
    pub certificate_validity_period_days: Option<i32>,
}

/// The key algorithm of kubeadm's certificates.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum EncryptionAlgorithm {
    #[serde(rename = "ECDSA-P256")]
    EcdsaP256,
    #[serde(rename = "ECDSA-P384")]
    EcdsaP384,
    #[serde(rename = "RSA-2048")]
    Rsa2048,
    #[serde(rename = "RSA-3072")]
    Rsa3072,
    #[serde(rename = "RSA-4096")]
    Rsa4096,
}

/// Settings of one control-plane static Pod.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControlPlaneComponent {
    /// Extra command-line flags, by name without the leading dashes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extra_args: Option<BTreeMap<String, String>>,
    /// Host paths mounted into the Pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100))]
    pub extra_volumes: Option<Vec<HostPathMount>>,
    /// Extra environment variables of the Pod's container.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Vec<crate::schema::EnvVar>>", length(max = 100))]
    pub extra_envs: Option<Vec<EnvVar>>,
}

/// Settings of the API server static Pod.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiServer {
    /// Extra command-line flags, by name without the leading dashes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extra_args: Option<BTreeMap<String, String>>,
    /// Host paths mounted into the Pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100))]
    pub extra_volumes: Option<Vec<HostPathMount>>,
    /// Extra environment variables of the Pod's container.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Vec<crate::schema::EnvVar>>", length(max = 100))]
    pub extra_envs: Option<Vec<EnvVar>>,
    /// Extra subject alternative names of the API server's serving certificate.
    #[serde(rename = "certSANs", skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100), inner(length(min = 1, max = 253)))]
    pub cert_sans: Option<Vec<String>>,
    /// How long kubeadm waits for the API server to come up.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_for_control_plane: Option<Duration>,
}

/// A host path mounted into a control-plane static Pod.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostPathMount {
    /// The volume's name in the Pod.
    #[schemars(length(min = 1, max = 512))]
    pub name: String,
    /// The path on the host.
    #[schemars(length(min = 1, max = 512))]
    pub host_path: String,
    /// The path in the container.
    #[schemars(length(min = 1, max = 512))]
    pub mount_path: String,
    /// Mount read-only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// The kind of host path, e.g. `DirectoryOrCreate` (a `corev1.HostPathType`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path_type: Option<String>,
}

/// Settings of the cluster DNS add-on.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Dns {
    /// The registry the DNS image is pulled from.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub image_repository: Option<String>,
    /// The DNS image's tag.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub image_tag: Option<String>,
}

/// How etcd runs: exactly one of `local` and `external` is set.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Etcd {
    /// etcd as static Pods on the control-plane nodes (stacked).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local: Option<LocalEtcd>,
    /// An etcd cluster managed elsewhere.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external: Option<ExternalEtcd>,
}

/// Settings of stacked etcd.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalEtcd {
    /// The registry the etcd image is pulled from.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub image_repository: Option<String>,
    /// The etcd image's tag.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub image_tag: Option<String>,
    /// Where etcd keeps its data on the node.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub data_dir: Option<String>,
    /// Extra command-line flags of etcd, by name without the leading dashes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extra_args: Option<BTreeMap<String, String>>,
    /// Extra environment variables of the etcd container.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Vec<crate::schema::EnvVar>>", length(max = 100))]
    pub extra_envs: Option<Vec<EnvVar>>,
    /// Extra subject alternative names of etcd's serving certificate.
    #[serde(rename = "serverCertSANs", skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100), inner(length(min = 1, max = 253)))]
    pub server_cert_sans: Option<Vec<String>>,
    /// Extra subject alternative names of etcd's peer certificate.
    #[serde(rename = "peerCertSANs", skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100), inner(length(min = 1, max = 253)))]
    pub peer_cert_sans: Option<Vec<String>>,
}

/// How to reach an etcd cluster managed elsewhere.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExternalEtcd {
    /// The etcd members' client URLs.
    #[schemars(length(max = 50), inner(length(min = 1, max = 512)))]
    pub endpoints: Vec<String>,
    /// The CA file that signs etcd's serving certificates, on the node.
    #[schemars(length(min = 1, max = 512))]
    pub ca_file: String,
    /// The client certificate file, on the node.
    #[schemars(length(min = 1, max = 512))]
    pub cert_file: String,
    /// The client key file, on the node.
    #[schemars(length(min = 1, max = 512))]
    pub key_file: String,
}

/// The cluster's network settings as kubeadm sees them.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Networking {
    /// The Service address range(s), comma-separated.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub service_subnet: Option<String>,
    /// The Pod address range(s), comma-separated.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub pod_subnet: Option<String>,
    /// The DNS domain of Services.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub dns_domain: Option<String>,
}

/// Settings of `kubeadm init` on the first control-plane node.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InitConfiguration {
    /// kubeadm's `apiVersion` for this document; the bootstrap provider picks one when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// kubeadm's `kind` for this document.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Bootstrap tokens to create; Cluster API manages its own when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100))]
    pub bootstrap_tokens: Option<Vec<BootstrapToken>>,
    /// How the node registers itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_registration: Option<NodeRegistrationOptions>,
    /// Where this node's API server listens.
    #[serde(rename = "localAPIEndpoint", skip_serializing_if = "Option::is_none")]
    pub local_api_endpoint: Option<ApiEndpoint>,
    /// `kubeadm init` phases to skip.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 50), inner(length(min = 1, max = 256)))]
    pub skip_phases: Option<Vec<String>>,
    /// Patches kubeadm applies to the manifests it writes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patches: Option<Patches>,
}

/// A bootstrap token for joining nodes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BootstrapToken {
    /// The token, `[a-z0-9]{6}.[a-z0-9]{16}`.
    pub token: String,
    /// What the token is for, for humans.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub description: Option<String>,
    /// How long the token lives; exclusive with `expires`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl: Option<Duration>,
    /// When the token expires; exclusive with `ttl`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::schema::DateTime>")]
    pub expires: Option<Time>,
    /// What the token may be used for, e.g. `authentication`, `signing`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100), inner(length(min = 1, max = 256)))]
    pub usages: Option<Vec<String>>,
    /// Extra groups the token authenticates as.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100), inner(length(min = 1, max = 256)))]
    pub groups: Option<Vec<String>>,
}

/// How a node registers itself with the cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeRegistrationOptions {
    /// The Node's name; the host name when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub name: Option<String>,
    /// The container runtime's socket, e.g. `unix:///var/run/containerd/containerd.sock`.
    #[serde(rename = "criSocket", skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub cri_socket: Option<String>,
    /// The Node's taints. Unset means kubeadm's default (control-plane nodes get the
    /// control-plane taint); an empty list means no taints, which is why this stays an
    /// `Option` rather than an empty default.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Vec<crate::schema::Taint>>", length(max = 100))]
    pub taints: Option<Vec<Taint>>,
    /// Extra kubelet flags, by name without the leading dashes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubelet_extra_args: Option<BTreeMap<String, String>>,
    /// Preflight errors to tolerate, e.g. `Swap`, or `all`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 50), inner(length(min = 1, max = 512)))]
    pub ignore_preflight_errors: Option<Vec<String>>,
    /// When kubeadm pulls images.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<ImagePullPolicy>,
    /// Pull images one at a time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_pull_serial: Option<bool>,
}

/// When kubeadm pulls images.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum ImagePullPolicy {
    Always,
    IfNotPresent,
    Never,
}

/// Where an API server instance listens.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiEndpoint {
    /// The IP address it advertises.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 39))]
    pub advertise_address: Option<String>,
    /// The port it binds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bind_port: Option<i32>,
}

/// Where kubeadm finds patches for the manifests it writes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Patches {
    /// A directory on the node holding the patch files.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub directory: Option<String>,
}

/// Settings of `kubeadm join` on every other node.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JoinConfiguration {
    /// kubeadm's `apiVersion` for this document; the bootstrap provider picks one when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// kubeadm's `kind` for this document.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// How the node registers itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_registration: Option<NodeRegistrationOptions>,
    /// Where the cluster CA certificate is written on the node.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub ca_cert_path: Option<String>,
    /// How the node finds and trusts the cluster; Cluster API fills it when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub discovery: Option<Discovery>,
    /// Set on control-plane nodes only: the extra control-plane instance to start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<JoinControlPlane>,
    /// `kubeadm join` phases to skip.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 50), inner(length(min = 1, max = 256)))]
    pub skip_phases: Option<Vec<String>>,
    /// Patches kubeadm applies to the manifests it writes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patches: Option<Patches>,
}

/// The control-plane instance a joining control-plane node starts.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JoinControlPlane {
    /// Where this node's API server listens.
    #[serde(rename = "localAPIEndpoint", skip_serializing_if = "Option::is_none")]
    pub local_api_endpoint: Option<ApiEndpoint>,
}

/// How a joining node finds and trusts the cluster: a bootstrap token or a kubeconfig file.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Discovery {
    /// Discovery through a bootstrap token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bootstrap_token: Option<BootstrapTokenDiscovery>,
    /// Discovery through a kubeconfig file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<FileDiscovery>,
    /// The token for the TLS bootstrap of the kubelet.
    #[serde(rename = "tlsBootstrapToken", skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub tls_bootstrap_token: Option<String>,
    /// How long discovery may take.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Duration>,
}

/// Discovery through a bootstrap token.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BootstrapTokenDiscovery {
    /// The token used to fetch the cluster information.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub token: Option<String>,
    /// The API server to fetch the cluster information from.
    #[serde(rename = "apiServerEndpoint", skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub api_server_endpoint: Option<String>,
    /// Hashes of the CA public keys to trust, e.g. `sha256:...`.
    #[serde(rename = "caCertHashes", skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100), inner(length(min = 1, max = 512)))]
    pub ca_cert_hashes: Option<Vec<String>>,
    /// Trust the cluster without checking `caCertHashes`.
    #[serde(
        rename = "unsafeSkipCAVerification",
        skip_serializing_if = "Option::is_none"
    )]
    pub unsafe_skip_ca_verification: Option<bool>,
}

/// Discovery through a kubeconfig file.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileDiscovery {
    /// The kubeconfig file's path on the node.
    #[schemars(length(min = 1, max = 512))]
    pub kube_config_path: String,
    /// A kubeconfig the bootstrap provider writes to `kubeConfigPath`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kube_config: Option<FileDiscoveryKubeConfig>,
}

/// The parts of a discovery kubeconfig the bootstrap provider writes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileDiscoveryKubeConfig {
    /// The cluster entry; filled from the Cluster when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<KubeConfigCluster>,
    /// The user entry.
    pub user: KubeConfigUser,
}

/// The cluster entry of a discovery kubeconfig.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeConfigCluster {
    /// The API server's URL.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub server: Option<String>,
    /// The server name to check the serving certificate against.
    #[serde(rename = "tlsServerName", skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub tls_server_name: Option<String>,
    /// Skip checking the serving certificate.
    #[serde(
        rename = "insecureSkipTLSVerify",
        skip_serializing_if = "Option::is_none"
    )]
    pub insecure_skip_tls_verify: Option<bool>,
    /// PEM certificate authorities to trust; filled from the cluster CA when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::schema::Bytes>", length(min = 1, max = 51200))]
    pub certificate_authority_data: Option<ByteString>,
    /// A proxy URL for requests to the server.
    #[serde(rename = "proxyURL", skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub proxy_url: Option<String>,
}

/// The user entry of a discovery kubeconfig: an auth provider or an exec plugin.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeConfigUser {
    /// An auth provider plugin.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth_provider: Option<KubeConfigAuthProvider>,
    /// An exec credential plugin.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exec: Option<KubeConfigAuthExec>,
}

/// An auth provider plugin of a kubeconfig user.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeConfigAuthProvider {
    /// The plugin's name.
    #[schemars(length(min = 1, max = 256))]
    pub name: String,
    /// The plugin's settings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<BTreeMap<String, String>>,
}

/// An exec credential plugin of a kubeconfig user.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeConfigAuthExec {
    /// The command to run.
    #[schemars(length(min = 1, max = 1024))]
    pub command: String,
    /// The command's arguments.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100), inner(length(min = 1, max = 512)))]
    pub args: Option<Vec<String>>,
    /// Extra environment variables of the command.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100))]
    pub env: Option<Vec<KubeConfigAuthExecEnv>>,
    /// The `client.authentication.k8s.io` version the plugin speaks.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub api_version: Option<String>,
    /// Pass the cluster's information to the plugin.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provide_cluster_info: Option<bool>,
}

/// An environment variable of an exec credential plugin.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeConfigAuthExecEnv {
    /// The variable's name.
    #[schemars(length(min = 1, max = 512))]
    pub name: String,
    /// The variable's value.
    #[schemars(length(min = 1, max = 512))]
    pub value: String,
}
