//! The MachineSet kind: keeps a number of identical Machines running, like a ReplicaSet.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{MachineNamingStrategy, StatusVersion};
use super::conditions::{Condition, MetaCondition};
use super::machine::MachineTemplateSpec;

/// The desired state of a MachineSet.
// Each printcolumn(...) repeats keys such as `type_ = "string"`, which clippy mistakes for
// duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta1",
    kind = "MachineSet",
    plural = "machinesets",
    namespaced,
    status = "MachineSetStatus",
    derive = "PartialEq",
    shortname = "ms",
    category = "cluster-api",
    doc = "A set of identical Machines kept at a desired count.",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".spec.clusterName",
        description = "The Cluster the MachineSet belongs to"
    ),
    printcolumn(
        name = "Desired",
        type_ = "integer",
        json_path = ".spec.replicas",
        description = "How many Machines are wanted",
        priority = 10
    ),
    printcolumn(
        name = "Replicas",
        type_ = "integer",
        json_path = ".status.replicas",
        description = "How many Machines exist and are not being deleted"
    ),
    printcolumn(
        name = "Ready",
        type_ = "integer",
        json_path = ".status.readyReplicas",
        description = "How many Machines are ready"
    ),
    printcolumn(
        name = "Available",
        type_ = "integer",
        json_path = ".status.availableReplicas",
        description = "How many Machines have been ready for minReadySeconds"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "Time since the MachineSet was created"
    ),
    printcolumn(
        name = "Version",
        type_ = "string",
        json_path = ".spec.template.spec.version",
        description = "The Kubernetes version of the Machine template"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MachineSetSpec {
    /// The name of the Cluster this MachineSet belongs to.
    #[schemars(length(min = 1, max = 63))]
    pub cluster_name: String,
    /// How many Machines are wanted; defaulted by Cluster API's webhook when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Seconds a new Machine must be ready before it counts as available.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_ready_seconds: Option<i32>,
    /// Which Machines go first when scaling down.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delete_policy: Option<MachineSetDeletePolicy>,
    /// The labels of the Machines this MachineSet owns; must match the template's labels.
    #[schemars(with = "crate::schema::LabelSelector")]
    pub selector: LabelSelector,
    /// The Machine to create when there are too few.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub template: Option<MachineTemplateSpec>,
    /// How the names of new Machines are generated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine_naming_strategy: Option<MachineNamingStrategy>,
}

/// Which Machines a MachineSet deletes first when it scales down.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum MachineSetDeletePolicy {
    /// Any Machine, preferring unhealthy ones and those marked for deletion.
    Random,
    /// The youngest Machines first.
    Newest,
    /// The oldest Machines first.
    Oldest,
}

/// The observed state of a MachineSet.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineSetStatus {
    /// The selector in string form, for the scale subresource.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    pub selector: Option<String>,
    /// How many Machines exist and are not being deleted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// How many Machines carry all the template's labels.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fully_labeled_replicas: Option<i32>,
    /// How many Machines are ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// How many Machines have been ready for at least `minReadySeconds`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
    /// The `metadata.generation` this status was computed from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// A terminal problem, as a short machine-readable word (deprecated upstream).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// A terminal problem, for humans (deprecated upstream).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 10240))]
    pub failure_message: Option<String>,
    /// The MachineSet's conditions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// The Kubernetes versions the Machines run, with their counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 100),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["version"])
    )]
    pub versions: Option<Vec<StatusVersion>>,
    /// Status fields CAPI already writes in their `v1beta2` shape.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub v1beta2: Option<ReplicasV1Beta2Status>,
}

/// The `status.v1beta2` block of a MachineSet or MachineDeployment.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicasV1Beta2Status {
    /// Conditions in the Kubernetes-standard shape.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 32),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"])
    )]
    pub conditions: Option<Vec<MetaCondition>>,
    /// How many Machines are ready (`Ready` condition `True`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// How many Machines are available (`Available` condition `True`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
    /// How many Machines match the current template (`UpToDate` condition `True`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub up_to_date_replicas: Option<i32>,
}
