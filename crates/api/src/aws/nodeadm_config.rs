//! NodeadmConfig and NodeadmConfigTemplate (`bootstrap.cluster.x-k8s.io/v1beta2`): the bootstrap
//! data of EKS workers on Amazon Linux 2023, read by nodeadm.

use super::eks_config::*;
use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerdOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::schema::PreserveUnknownObject>")]
    pub base_runtime_spec: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeletOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::schema::PreserveUnknownObject>")]
    pub config: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flags: Option<Vec<String>>,
}

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[allow(clippy::duplicated_attributes)]
#[kube(
    group = "bootstrap.cluster.x-k8s.io",
    version = "v1beta2",
    kind = "NodeadmConfig",
    plural = "nodeadmconfigs",
    namespaced,
    status = "NodeadmConfigStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "The bootstrap data of an EKS worker on Amazon Linux 2023 (nodeadm's NodeConfig)."
)]
#[serde(rename_all = "camelCase")]
pub struct NodeadmConfigSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub containerd: Option<ContainerdOptions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_setup: Option<DiskSetup>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feature_gates: Option<BTreeMap<String, bool>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<Vec<File>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<KubeletOptions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mounts: Option<Vec<Vec<String>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ntp: Option<NTP>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_nodeadm_commands: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub users: Option<Vec<User>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Initialization {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_secret_created: Option<bool>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeadmConfigStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<crate::capi::conditions::Condition>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_secret_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<Initialization>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeadmConfigTemplateResource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<NodeadmConfigSpec>,
}

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[allow(clippy::duplicated_attributes)]
#[kube(
    group = "bootstrap.cluster.x-k8s.io",
    version = "v1beta2",
    kind = "NodeadmConfigTemplate",
    plural = "nodeadmconfigtemplates",
    namespaced,
    derive = "PartialEq",
    derive = "Default",
    shortname = "nodeadmct",
    category = "cluster-api",
    doc = "What each NodeadmConfig of a MachineDeployment or MachinePool is made from."
)]
#[serde(rename_all = "camelCase")]
pub struct NodeadmConfigTemplateSpec {
    pub template: NodeadmConfigTemplateResource,
}
