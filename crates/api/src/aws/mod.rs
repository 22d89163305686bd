//! Cluster API AWS's kinds, field-compatible with its `v1beta2` API, so its users' manifests
//! apply unchanged: identities, the EKS control plane and its infrastructure cluster, managed
//! node groups, with the network and instance types they share. Like Cluster API AWS, one
//! provider (`infrastructure-aws`) brings them all, whatever their API group. The reconcilers
//! are in `lariat-provider-aws`.

pub mod cluster;
pub mod eks_config;
pub mod identity;
pub mod instance;
pub mod machine;
pub mod machine_pool;
pub mod managed_cluster;
pub mod managed_control_plane;
pub mod managed_machine_pool;
pub mod network;
pub mod nodeadm_config;

/// Tag keys only lariat, Cluster API AWS, Kubernetes' cloud provider or AWS may set: one of
/// them in `additionalTags` could make a resource look another cluster's, which that
/// cluster's deletion would then delete. Admission refuses them, and the provider drops any
/// stored before.
pub const RESERVED_TAG_PREFIXES: [&str; 4] = [
    "sigs.k8s.io/cluster-api-provider-aws/",
    "lariat.dev/",
    "kubernetes.io/cluster/",
    "aws:",
];

/// The reserved prefix `key` is under, if any.
pub fn reserved_tag_prefix(key: &str) -> Option<&'static str> {
    RESERVED_TAG_PREFIXES
        .into_iter()
        .find(|prefix| key.starts_with(prefix))
}

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

pub use cluster::{AWSCluster, AWSClusterSpec, AWSClusterStatus};
pub use eks_config::{EKSConfig, EKSConfigSpec, EKSConfigStatus, EKSConfigTemplate};
pub use identity::{
    AWSClusterControllerIdentity, AWSClusterControllerIdentitySpec, AWSClusterRoleIdentity,
    AWSClusterRoleIdentitySpec, AWSClusterStaticIdentity, AWSClusterStaticIdentitySpec,
    AWSIdentityKind, AWSIdentityReference, AllowedNamespaces, CONTROLLER_IDENTITY_NAME,
};
pub use machine::{AWSMachine, AWSMachineSpec, AWSMachineStatus, AWSMachineTemplate};
pub use machine_pool::{AWSMachinePool, AWSMachinePoolSpec, AWSMachinePoolStatus};
pub use managed_cluster::{AWSManagedCluster, AWSManagedClusterSpec, AWSManagedClusterStatus};
pub use managed_control_plane::{
    AWSManagedControlPlane, AWSManagedControlPlaneSpec, AWSManagedControlPlaneStatus,
};
pub use managed_machine_pool::{
    AWSManagedMachinePool, AWSManagedMachinePoolSpec, AWSManagedMachinePoolStatus,
};
pub use nodeadm_config::{
    NodeadmConfig, NodeadmConfigSpec, NodeadmConfigStatus, NodeadmConfigTemplate,
};

/// The version of Cluster API AWS's kinds.
pub const VERSION: &str = "v1beta2";
/// `GROUP/VERSION`, as objects spell it in `apiVersion`.
pub const API_VERSION: &str = "infrastructure.cluster.x-k8s.io/v1beta2";
/// The provider name clusterctl and `lariat init` know the AWS provider by.
pub const PROVIDER: &str = "infrastructure-aws";

/// The generated CustomResourceDefinitions of the AWS provider's kinds, with the contract and
/// provider labels.
pub fn crds() -> Vec<CustomResourceDefinition> {
    crate::contract::provider_crds(
        vec![
            AWSClusterControllerIdentity::crd(),
            AWSClusterStaticIdentity::crd(),
            AWSClusterRoleIdentity::crd(),
            AWSManagedControlPlane::crd(),
            AWSManagedCluster::crd(),
            AWSManagedMachinePool::crd(),
            AWSCluster::crd(),
            AWSMachine::crd(),
            AWSMachineTemplate::crd(),
            AWSMachinePool::crd(),
            EKSConfig::crd(),
            EKSConfigTemplate::crd(),
            NodeadmConfig::crd(),
            NodeadmConfigTemplate::crd(),
        ],
        PROVIDER,
    )
}
