//! Cluster API `v1beta1` core kinds in group `cluster.x-k8s.io`.
//!
//! Each kind lives in its own module; [`common`] holds what several kinds share and
//! [`conditions`] the condition type and its constants. The schema of every kind follows the
//! upstream `v1beta1` CRD field for field (the crate's compatibility test checks this against
//! the upstream YAML), so manifests written for Cluster API work against lariat unchanged.

pub mod admission;
pub mod annotations;
pub mod cluster;
pub mod common;
pub mod conditions;
pub mod labels;
pub mod machine;
pub mod machine_deployment;
pub mod machine_health_check;
pub mod machine_pool;
pub mod machine_set;
pub mod topology;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

pub use cluster::{Cluster, ClusterSpec, ClusterStatus};
pub use common::{ObjectReference, TemplateMetadata};
pub use conditions::{Condition, ConditionSeverity, ConditionStatus, MetaCondition};
pub use machine::{Machine, MachineSpec, MachineStatus, MachineTemplateSpec};
pub use machine_deployment::{MachineDeployment, MachineDeploymentSpec, MachineDeploymentStatus};
pub use machine_health_check::{
    MachineHealthCheck, MachineHealthCheckSpec, MachineHealthCheckStatus,
};
pub use machine_pool::{MachinePool, MachinePoolSpec, MachinePoolStatus};
pub use machine_set::{MachineSet, MachineSetSpec, MachineSetStatus};

/// The API group of the core Cluster API kinds.
pub const GROUP: &str = "cluster.x-k8s.io";
/// The version of the core Cluster API kinds lariat serves.
pub const VERSION: &str = "v1beta1";
/// `GROUP/VERSION`, as objects spell it in `apiVersion`.
pub const API_VERSION: &str = "cluster.x-k8s.io/v1beta1";

/// The generated CustomResourceDefinitions of the core Cluster API kinds.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        Cluster::crd(),
        MachineDeployment::crd(),
        MachineSet::crd(),
        Machine::crd(),
        MachineHealthCheck::crd(),
        MachinePool::crd(),
    ]
}
