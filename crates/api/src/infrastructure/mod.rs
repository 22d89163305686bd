//! lariat's own infrastructure provider kinds in group `infrastructure.cluster.x-k8s.io`,
//! version `v1alpha1`.
//!
//! [`in_memory`] holds the in-memory provider's kinds, which simulate machines instead of
//! creating them. They have no upstream CRD to match; they follow the Cluster API
//! infrastructure provider contract so the core controllers need nothing special for them.

pub mod conditions;
pub mod in_memory;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

pub use in_memory::{
    InMemoryCluster, InMemoryClusterSpec, InMemoryClusterStatus, InMemoryMachine,
    InMemoryMachineBehavior, InMemoryMachineSpec, InMemoryMachineStatus, InMemoryMachineTemplate,
    InMemoryMachineTemplateResource, InMemoryMachineTemplateSpec, InMemoryMachineTemplateStatus,
};

/// The API group of infrastructure provider kinds.
pub const GROUP: &str = "infrastructure.cluster.x-k8s.io";
/// The version of lariat's infrastructure kinds.
pub const VERSION: &str = "v1alpha1";
/// `GROUP/VERSION`, as objects spell it in `apiVersion`.
pub const API_VERSION: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";

/// The provider name clusterctl and `lariat init` know the in-memory provider by.
pub const PROVIDER: &str = "infrastructure-inmemory";

/// The generated CustomResourceDefinitions of the in-memory provider's kinds, with the
/// contract and provider labels.
pub fn crds() -> Vec<CustomResourceDefinition> {
    crate::contract::provider_crds(
        vec![
            InMemoryCluster::crd(),
            InMemoryMachine::crd(),
            InMemoryMachineTemplate::crd(),
        ],
        PROVIDER,
    )
}
