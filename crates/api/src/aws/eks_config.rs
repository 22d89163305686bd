//! EKSConfig and EKSConfigTemplate (`bootstrap.cluster.x-k8s.io/v1beta2`): the bootstrap data
//! of EKS workers on Amazon Linux 2, and the files, disks and users they share with NodeadmConfig.
use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Filesystem {
    pub device: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_opts: Option<Vec<String>>,
    pub filesystem: String,
    pub label: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overwrite: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Partition {
    pub device: String,
    pub layout: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overwrite: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table_type: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiskSetup {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filesystems: Option<Vec<Filesystem>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions: Option<Vec<Partition>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretFileSource {
    pub key: String,
    pub name: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileSource {
    pub secret: SecretFileSource,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct File {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub append: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_from: Option<FileSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["base64", "gzip", "gzip+base64"]))]
    pub encoding: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permissions: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NTP {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub servers: Option<Vec<String>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PauseContainer {
    pub account_number: String,
    pub version: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct User {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gecos: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home_dir: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inactive: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_password: Option<bool>,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passwd: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passwd_from: Option<FileSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_authorized_keys: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sudo: Option<String>,
}

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[allow(clippy::duplicated_attributes)]
#[kube(
    group = "bootstrap.cluster.x-k8s.io",
    version = "v1beta2",
    kind = "EKSConfig",
    plural = "eksconfigs",
    namespaced,
    status = "EKSConfigStatus",
    derive = "PartialEq",
    derive = "Default",
    shortname = "eksc",
    category = "cluster-api",
    doc = "The bootstrap data of an EKS worker (Amazon Linux 2's bootstrap.sh).",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.ready",
        description = "Whether the bootstrap data is ready"
    ),
    printcolumn(
        name = "DataSecretName",
        type_ = "string",
        json_path = ".status.dataSecretName",
        description = "The Secret holding the bootstrap data"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct EKSConfigSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::schema::Integer>")]
    pub api_retry_attempts: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boostrap_command_override: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_runtime: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_setup: Option<DiskSetup>,
    #[serde(
        rename = "dnsClusterIP",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub dns_cluster_ip: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docker_config_json: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<Vec<File>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet_extra_args: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mounts: Option<Vec<Vec<String>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ntp: Option<NTP>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_container: Option<PauseContainer>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_bootstrap_commands: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_bootstrap_commands: Option<Vec<String>>,
    #[serde(
        rename = "serviceIPV6Cidr",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub service_ipv6_cidr: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_max_pods: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub users: Option<Vec<User>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EKSConfigStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<crate::capi::conditions::Condition>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_secret_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EKSConfigTemplateResource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<EKSConfigSpec>,
}

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[allow(clippy::duplicated_attributes)]
#[kube(
    group = "bootstrap.cluster.x-k8s.io",
    version = "v1beta2",
    kind = "EKSConfigTemplate",
    plural = "eksconfigtemplates",
    namespaced,
    derive = "PartialEq",
    derive = "Default",
    shortname = "eksct",
    category = "cluster-api",
    doc = "What each EKSConfig of a MachineDeployment or MachinePool is made from."
)]
#[serde(rename_all = "camelCase")]
pub struct EKSConfigTemplateSpec {
    pub template: EKSConfigTemplateResource,
}
