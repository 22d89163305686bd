//! The MachineHealthCheck kind: marks Machines unhealthy from their Node's state.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use kube::core::Duration;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{ObjectReference, UnhealthyCondition, UnhealthyMachineCondition};
use super::conditions::{Condition, MetaCondition};

/// The desired state of a MachineHealthCheck.
// Each printcolumn(...) repeats keys such as `type_ = "string"`, which clippy mistakes for
// duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta1",
    kind = "MachineHealthCheck",
    plural = "machinehealthchecks",
    namespaced,
    status = "MachineHealthCheckStatus",
    derive = "PartialEq",
    shortname = "mhc",
    shortname = "mhcs",
    category = "cluster-api",
    doc = "Health checks for the Machines a selector picks, and when to remediate them.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".spec.clusterName",
        description = "The Cluster the MachineHealthCheck belongs to"
    ),
    printcolumn(
        name = "ExpectedMachines",
        type_ = "integer",
        json_path = ".status.expectedMachines",
        description = "How many Machines the check watches"
    ),
    printcolumn(
        name = "MaxUnhealthy",
        type_ = "string",
        json_path = ".spec.maxUnhealthy",
        description = "Above this many unhealthy Machines, remediation stops"
    ),
    printcolumn(
        name = "CurrentHealthy",
        type_ = "integer",
        json_path = ".status.currentHealthy",
        description = "How many watched Machines are healthy"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "Time since the MachineHealthCheck was created"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MachineHealthCheckSpec {
    /// The name of the Cluster whose Machines are checked.
    #[schemars(length(min = 1, max = 63))]
    pub cluster_name: String,
    /// Which Machines are checked.
    #[schemars(with = "crate::schema::LabelSelector")]
    pub selector: LabelSelector,
    /// Node conditions that make a Machine unhealthy when held too long.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100))]
    pub unhealthy_conditions: Option<Vec<UnhealthyCondition>>,
    /// Machine conditions that make a Machine unhealthy when held too long.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 100), extend("x-kubernetes-list-type" = "atomic"))]
    pub unhealthy_machine_conditions: Option<Vec<UnhealthyMachineCondition>>,
    /// Above this many unhealthy Machines (a count or a percentage), nothing is remediated.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::schema::IntOrString>")]
    pub max_unhealthy: Option<IntOrString>,
    /// Remediate only while the number of unhealthy Machines is in this range, e.g. `[3-5]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 32),
        pattern(crate::schema::UNHEALTHY_RANGE_PATTERN)
    )]
    pub unhealthy_range: Option<String>,
    /// How long a Machine may take to get a Node before it counts as unhealthy; `0s` disables.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_startup_timeout: Option<Duration>,
    /// A template for external remediation requests; unset means the owner remediates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remediation_template: Option<ObjectReference>,
}

/// The observed state of a MachineHealthCheck.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineHealthCheckStatus {
    /// How many Machines the check watches.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub expected_machines: Option<i32>,
    /// How many watched Machines are healthy.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub current_healthy: Option<i32>,
    /// How many more Machines may be remediated now.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub remediations_allowed: Option<i32>,
    /// The `metadata.generation` this status was computed from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The names of the watched Machines.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 10000), inner(length(min = 1, max = 253)))]
    pub targets: Option<Vec<String>>,
    /// The MachineHealthCheck's conditions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// Status fields CAPI already writes in their `v1beta2` shape.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub v1beta2: Option<MachineHealthCheckV1Beta2Status>,
}

/// The `status.v1beta2` block of a MachineHealthCheck.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineHealthCheckV1Beta2Status {
    /// Conditions in the Kubernetes-standard shape.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 32),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"])
    )]
    pub conditions: Option<Vec<MetaCondition>>,
}
