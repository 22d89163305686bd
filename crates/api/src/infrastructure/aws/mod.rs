//! Cluster API AWS's kinds, field-compatible with its `v1beta2` API, so its users' manifests
//! apply unchanged. The reconcilers are in `lariat-provider-aws`.

pub mod identity;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

pub use identity::{
    AWSClusterControllerIdentity, AWSClusterControllerIdentitySpec, AWSClusterRoleIdentity,
    AWSClusterRoleIdentitySpec, AWSClusterStaticIdentity, AWSClusterStaticIdentitySpec,
    AWSIdentityKind, AWSIdentityReference, AllowedNamespaces, CONTROLLER_IDENTITY_NAME,
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
        ],
        PROVIDER,
    )
}
