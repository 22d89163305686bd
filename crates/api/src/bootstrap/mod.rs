//! Cluster API `v1beta1` kubeadm bootstrap kinds in group `bootstrap.cluster.x-k8s.io`.
//!
//! [`kubeadm_config`] holds the KubeadmConfig and KubeadmConfigTemplate kinds and the
//! cloud-init parts of their spec; [`kubeadm_types`] holds kubeadm's own configuration that the
//! spec embeds. KubeadmControlPlane reuses [`KubeadmConfigSpec`] as it is. As with the core
//! kinds, the schemas follow the upstream `v1beta1` CRDs field for field.

pub mod conditions;
pub mod kubeadm_config;
pub mod kubeadm_types;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

pub use kubeadm_config::{
    KubeadmConfig, KubeadmConfigSpec, KubeadmConfigStatus, KubeadmConfigTemplate,
    KubeadmConfigTemplateResource, KubeadmConfigTemplateSpec,
};
pub use kubeadm_types::{ClusterConfiguration, InitConfiguration, JoinConfiguration};

/// The API group of the kubeadm bootstrap kinds.
pub const GROUP: &str = "bootstrap.cluster.x-k8s.io";
/// The version of the kubeadm bootstrap kinds lariat serves.
pub const VERSION: &str = "v1beta1";
/// `GROUP/VERSION`, as objects spell it in `apiVersion`.
pub const API_VERSION: &str = "bootstrap.cluster.x-k8s.io/v1beta1";

/// The provider name clusterctl and `lariat init` know the kubeadm bootstrap provider by.
pub const PROVIDER: &str = "bootstrap-kubeadm";

/// The generated CustomResourceDefinitions of the kubeadm bootstrap kinds, with the contract
/// and provider labels.
pub fn crds() -> Vec<CustomResourceDefinition> {
    crate::contract::provider_crds(
        vec![KubeadmConfig::crd(), KubeadmConfigTemplate::crd()],
        PROVIDER,
    )
}
