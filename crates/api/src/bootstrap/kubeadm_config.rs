//! The KubeadmConfig and KubeadmConfigTemplate kinds: how a Machine's node is bootstrapped.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::kubeadm_types::{ClusterConfiguration, InitConfiguration, JoinConfiguration};
use crate::capi::common::TemplateMetadata;
use crate::capi::conditions::{Condition, MetaCondition};

/// The desired state of a KubeadmConfig: kubeadm's configuration plus the cloud-init or
/// Ignition steps around it.
///
/// KubeadmControlPlane embeds the same spec as `spec.kubeadmConfigSpec`, and
/// KubeadmConfigTemplate as `spec.template.spec`.
// Each printcolumn(...) repeats keys such as `type_ = "string"`, which clippy mistakes for
// duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "bootstrap.cluster.x-k8s.io",
    version = "v1beta1",
    kind = "KubeadmConfig",
    plural = "kubeadmconfigs",
    namespaced,
    status = "KubeadmConfigStatus",
    derive = "PartialEq",
    category = "cluster-api",
    doc = "The bootstrap data of one Machine's node, produced by kubeadm and cloud-init or Ignition.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",
        description = "The Cluster the KubeadmConfig belongs to"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "Time since the KubeadmConfig was created"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmConfigSpec {
    /// kubeadm's cluster-wide settings, used on the first control-plane node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_configuration: Option<ClusterConfiguration>,
    /// Settings of `kubeadm init`, used on the first control-plane node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub init_configuration: Option<InitConfiguration>,
    /// Settings of `kubeadm join`, used on every other node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub join_configuration: Option<JoinConfiguration>,
    /// Files to write on the node before kubeadm runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 200))]
    pub files: Option<Vec<File>>,
    /// Partitions and file systems to create.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_setup: Option<DiskSetup>,
    /// Mounts, each in cloud-init's `mounts` form (device, mount point, options...).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100), inner(inner(length(min = 1, max = 512))))]
    pub mounts: Option<Vec<Vec<String>>>,
    /// Commands cloud-init runs very early in boot (`bootcmd`), on every boot.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1000), inner(length(min = 1, max = 10240)))]
    pub boot_commands: Option<Vec<String>>,
    /// Commands to run before kubeadm.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1000), inner(length(min = 1, max = 10240)))]
    pub pre_kubeadm_commands: Option<Vec<String>>,
    /// Commands to run after kubeadm.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1000), inner(length(min = 1, max = 10240)))]
    pub post_kubeadm_commands: Option<Vec<String>>,
    /// Users to create on the node.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100))]
    pub users: Option<Vec<User>>,
    /// Time synchronisation settings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ntp: Option<Ntp>,
    /// The format of the bootstrap data; `cloud-config` when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<Format>,
    /// kubeadm's log verbosity (`-v`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verbosity: Option<i32>,
    /// Retry `kubeadm join` on failure, through a wrapper script (deprecated upstream).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub use_experimental_retry_join: Option<bool>,
    /// Ignition-specific settings, for `format: ignition`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ignition: Option<IgnitionSpec>,
}

/// The format of bootstrap data.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum Format {
    /// A cloud-init `#cloud-config` document.
    #[serde(rename = "cloud-config")]
    CloudConfig,
    /// An Ignition configuration.
    #[serde(rename = "ignition")]
    Ignition,
}

/// A file to write on the node.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct File {
    /// Where to write it.
    #[schemars(length(min = 1, max = 512))]
    pub path: String,
    /// Its owner, as `user:group`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub owner: Option<String>,
    /// Its permissions, e.g. `0640`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 16))]
    pub permissions: Option<String>,
    /// How `content` is encoded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encoding: Option<Encoding>,
    /// Append to an existing file instead of replacing it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub append: Option<bool>,
    /// The content, inline; exclusive with `contentFrom`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 10240))]
    pub content: Option<String>,
    /// Where the content comes from, when not inline.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_from: Option<FileSource>,
    /// Whether `content` is used as it is or rendered as a Go template first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_format: Option<FileContentFormat>,
}

/// How the content of a [`File`] is encoded.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum Encoding {
    #[serde(rename = "base64")]
    Base64,
    #[serde(rename = "gzip")]
    Gzip,
    #[serde(rename = "gzip+base64")]
    GzipBase64,
}

/// Whether the content of a [`File`] is a template.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum FileContentFormat {
    /// Written as it is.
    Raw,
    /// Rendered as a Go template first.
    Template,
}

/// Where the content of a [`File`] comes from.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileSource {
    /// A key of a Secret in the KubeadmConfig's namespace.
    pub secret: SecretFileSource,
}

/// A key of a Secret in the referrer's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretFileSource {
    /// The Secret's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The key in the Secret.
    #[schemars(length(min = 1, max = 256))]
    pub key: String,
}

/// A user to create on the node.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct User {
    /// The user's name.
    #[schemars(length(min = 1, max = 256))]
    pub name: String,
    /// The GECOS (full name) field.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub gecos: Option<String>,
    /// Extra groups, comma-separated (a single string, as cloud-init takes it).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub groups: Option<String>,
    /// The home directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub home_dir: Option<String>,
    /// Create the user disabled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inactive: Option<bool>,
    /// The login shell.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub shell: Option<String>,
    /// The hashed password, inline; exclusive with `passwdFrom`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub passwd: Option<String>,
    /// Where the hashed password comes from, when not inline.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub passwd_from: Option<PasswdSource>,
    /// The primary group.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub primary_group: Option<String>,
    /// Disable password login.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock_password: Option<bool>,
    /// A sudoers rule, e.g. `ALL=(ALL) NOPASSWD:ALL`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub sudo: Option<String>,
    /// Public SSH keys allowed to log in as the user.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100), inner(length(min = 1, max = 2048)))]
    pub ssh_authorized_keys: Option<Vec<String>>,
}

/// Where a [`User`]'s hashed password comes from.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PasswdSource {
    /// A key of a Secret in the KubeadmConfig's namespace.
    pub secret: SecretPasswdSource,
}

/// A key of a Secret holding a hashed password.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretPasswdSource {
    /// The Secret's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The key in the Secret.
    #[schemars(length(min = 1, max = 256))]
    pub key: String,
}

/// Time synchronisation settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Ntp {
    /// NTP servers to use.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100), inner(length(min = 1, max = 512)))]
    pub servers: Option<Vec<String>>,
    /// Turn NTP on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// Partitions and file systems to create on the node's disks.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiskSetup {
    /// Partition tables to write.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100))]
    pub partitions: Option<Vec<Partition>>,
    /// File systems to create.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100))]
    pub filesystems: Option<Vec<Filesystem>>,
}

/// A partition table to write on one device.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Partition {
    /// The device, e.g. `/dev/sdb`.
    #[schemars(length(min = 1, max = 256))]
    pub device: String,
    /// Partition the device: true for one partition over the whole device, false to skip.
    pub layout: bool,
    /// Partitions by share of the device; overrides `layout` when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 100))]
    pub disk_layout: Option<Vec<PartitionLayout>>,
    /// Overwrite an existing partition table.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overwrite: Option<bool>,
    /// The partition table type; `mbr` when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub table_type: Option<PartitionTableType>,
}

/// One partition of a [`Partition`] table.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PartitionLayout {
    /// The partition's share of the device, in percent.
    #[schemars(range(min = 1, max = 100))]
    pub percentage: i32,
    /// The partition type: a name such as `LinuxSwap` or a GPT type GUID; `Linux` when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 36))]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "self.matches('^(Linux|LinuxSwap|LinuxRAID|LVM|Fat32|NTFS|LinuxExtended|[0-9A-Fa-f]{8}(-[0-9A-Fa-f]{4}){3}-[0-9A-Fa-f]{12})$')",
        "message": "partitionType must be Linux, LinuxSwap, LinuxRAID, LVM, Fat32, NTFS, LinuxExtended or a GUID",
    }]))]
    pub partition_type: Option<String>,
}

/// The kind of a partition table.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum PartitionTableType {
    #[serde(rename = "mbr")]
    Mbr,
    #[serde(rename = "gpt")]
    Gpt,
}

/// A file system to create.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Filesystem {
    /// The device, e.g. `/dev/sdb`.
    #[schemars(length(min = 1, max = 256))]
    pub device: String,
    /// The file system type, e.g. `ext4`.
    #[schemars(length(min = 1, max = 128))]
    pub filesystem: String,
    /// The file system label.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub label: Option<String>,
    /// The partition to use: a number, `auto`, `any` or `none`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128))]
    pub partition: Option<String>,
    /// Create the file system even if one exists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overwrite: Option<bool>,
    /// The file system type to replace, when overwriting only that type.
    #[serde(rename = "replaceFS", skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128))]
    pub replace_fs: Option<String>,
    /// Extra options of `mkfs`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100), inner(length(min = 1, max = 256)))]
    pub extra_opts: Option<Vec<String>>,
}

/// Ignition-specific settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IgnitionSpec {
    /// Settings of the Container Linux Config (Butane) the data is built from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_linux_config: Option<ContainerLinuxConfig>,
}

/// Settings of the Container Linux Config (Butane) Ignition data is built from.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerLinuxConfig {
    /// A Container Linux Config, as YAML, merged into the generated one.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 32768))]
    pub additional_config: Option<String>,
    /// Treat warnings in `additionalConfig` as errors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// The observed state of a KubeadmConfig.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmConfigStatus {
    /// The bootstrap data Secret exists (the bootstrap provider contract's `ready`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    /// The Secret holding the bootstrap data, once it exists.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub data_secret_name: Option<String>,
    /// A terminal problem, as a short machine-readable word (deprecated upstream).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub failure_reason: Option<String>,
    /// A terminal problem, for humans (deprecated upstream).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 10240))]
    pub failure_message: Option<String>,
    /// The `metadata.generation` this status was computed from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The KubeadmConfig's conditions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// Status fields CAPI already writes in their `v1beta2` shape.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub v1beta2: Option<KubeadmConfigV1Beta2Status>,
}

/// The `status.v1beta2` block of a KubeadmConfig.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmConfigV1Beta2Status {
    /// Conditions in the Kubernetes-standard shape.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 32),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"])
    )]
    pub conditions: Option<Vec<MetaCondition>>,
}

/// The desired state of a KubeadmConfigTemplate: the KubeadmConfig each Machine gets.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "bootstrap.cluster.x-k8s.io",
    version = "v1beta1",
    kind = "KubeadmConfigTemplate",
    plural = "kubeadmconfigtemplates",
    namespaced,
    derive = "PartialEq",
    category = "cluster-api",
    doc = "The KubeadmConfig a MachineDeployment or MachineSet gives each of its Machines.",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "Time since the KubeadmConfigTemplate was created"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmConfigTemplateSpec {
    /// The KubeadmConfig to create for each Machine.
    pub template: KubeadmConfigTemplateResource,
}

/// The KubeadmConfig a template stamps out: metadata plus a spec.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmConfigTemplateResource {
    /// Labels and annotations for each KubeadmConfig.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    /// The spec of each KubeadmConfig.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec: Option<KubeadmConfigSpec>,
}
