//! Cluster API `v1beta1` kubeadm control plane kinds in group `controlplane.cluster.x-k8s.io`.
//!
//! [`kubeadm`] holds KubeadmControlPlane and KubeadmControlPlaneTemplate, whose
//! `kubeadmConfigSpec` is the bootstrap provider's [`KubeadmConfigSpec`](crate::bootstrap::KubeadmConfigSpec).
//! KubeadmControlPlane follows the upstream `v1beta1` CRD field for field, like the core kinds.

pub mod conditions;
pub mod kubeadm;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

pub use kubeadm::{
    KubeadmControlPlane, KubeadmControlPlaneMachineTemplate, KubeadmControlPlaneSpec,
    KubeadmControlPlaneStatus, KubeadmControlPlaneTemplate, KubeadmControlPlaneTemplateSpec,
};

/// The API group of the control plane kinds.
pub const GROUP: &str = "controlplane.cluster.x-k8s.io";
/// The version of the control plane kinds lariat serves.
pub const VERSION: &str = "v1beta1";
/// `GROUP/VERSION`, as objects spell it in `apiVersion`.
pub const API_VERSION: &str = "controlplane.cluster.x-k8s.io/v1beta1";

/// The provider name clusterctl and `lariat init` know the kubeadm control plane provider by.
pub const PROVIDER: &str = "control-plane-kubeadm";

/// The generated CustomResourceDefinitions of the control plane kinds, with the contract and
/// provider labels.
pub fn crds() -> Vec<CustomResourceDefinition> {
    crate::contract::provider_crds(
        vec![
            KubeadmControlPlane::crd(),
            KubeadmControlPlaneTemplate::crd(),
        ],
        PROVIDER,
    )
}
