//! Types several Cluster API kinds share: references, template metadata, gates, taints.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use super::conditions::{Condition, ConditionStatus, MetaCondition};

/// A reference to another object, e.g. an infrastructure or bootstrap provider's object.
///
/// Same fields as the core `v1.ObjectReference`, which is what Cluster API `v1beta1` uses.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-map-type" = "atomic"))]
pub struct ObjectReference {
    /// The referent's `apiVersion`, e.g. `infrastructure.cluster.x-k8s.io/v1beta2`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// The referent's kind, e.g. `AWSCluster`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The referent's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The referent's namespace; CAPI requires it to be the referrer's own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The referent's UID, once known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// The referent's resourceVersion, if the reference pins one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    /// A path to a field inside the referent, when the reference is to part of it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field_path: Option<String>,
}

impl ObjectReference {
    /// A reference by apiVersion, kind and name, the form manifests usually write.
    pub fn new(
        api_version: impl Into<String>,
        kind: impl Into<String>,
        name: impl Into<String>,
    ) -> Self {
        Self {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
            name: Some(name.into()),
            ..Self::default()
        }
    }
}

impl From<k8s_openapi::api::core::v1::ObjectReference> for ObjectReference {
    fn from(r: k8s_openapi::api::core::v1::ObjectReference) -> Self {
        Self {
            api_version: r.api_version,
            kind: r.kind,
            name: r.name,
            namespace: r.namespace,
            uid: r.uid,
            resource_version: r.resource_version,
            field_path: r.field_path,
        }
    }
}

impl From<ObjectReference> for k8s_openapi::api::core::v1::ObjectReference {
    fn from(r: ObjectReference) -> Self {
        Self {
            api_version: r.api_version,
            kind: r.kind,
            name: r.name,
            namespace: r.namespace,
            uid: r.uid,
            resource_version: r.resource_version,
            field_path: r.field_path,
        }
    }
}

/// The labels and annotations a template gives the objects made from it.
///
/// Only these two parts of object metadata can be templated; CAPI's Go name for this is
/// `ObjectMeta`, which lariat avoids to keep it apart from the Kubernetes `ObjectMeta`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateMetadata {
    /// Labels to set on the created objects.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Annotations to set on the created objects.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
}

/// How Machine names are generated from their owner's name.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineNamingStrategy {
    /// A Go template, e.g. `{{ .machineSet.name }}-{{ .random }}`; must contain `.random`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub template: Option<String>,
}

/// Whether a gate condition counts when `True` (positive) or when `False` (negative).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum ConditionPolarity {
    Positive,
    Negative,
}

/// A taint CAPI keeps on the Nodes of Machines.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineTaint {
    /// The taint key.
    #[schemars(length(min = 1, max = 317), pattern(crate::schema::TAINT_KEY_PATTERN))]
    pub key: String,
    /// The taint value, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), pattern(crate::schema::TAINT_VALUE_PATTERN))]
    pub value: Option<String>,
    /// What the taint does to Pods that do not tolerate it.
    pub effect: TaintEffect,
    /// When CAPI sets the taint on the Node.
    pub propagation: TaintPropagation,
}

/// The effect of a Node taint.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

/// When a [`MachineTaint`] is put on the Node.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum TaintPropagation {
    /// Kept on the Node for its whole life.
    Always,
    /// Set once when the Node joins; users may remove it later.
    OnInitialization,
}

/// A Node condition that, held for longer than `timeout`, makes a Machine unhealthy.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnhealthyCondition {
    /// The Node condition type, e.g. `Ready`.
    #[serde(rename = "type")]
    #[schemars(length(min = 1))]
    pub type_: String,
    /// The status that counts as unhealthy.
    // Upstream v1beta1 leaves this string unrestricted; see `Condition::status`.
    #[schemars(with = "String")]
    #[schemars(length(min = 1))]
    pub status: ConditionStatus,
    /// How long the status must hold.
    pub timeout: kube::core::Duration,
}

/// A Machine condition that, held for longer than `timeout`, makes a Machine unhealthy.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnhealthyMachineCondition {
    /// The Machine condition type; not one of the conditions the health check itself drives.
    #[serde(rename = "type")]
    #[schemars(
        length(min = 1, max = 316),
        pattern(crate::schema::CONDITION_TYPE_PATTERN)
    )]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "!(self in ['Ready','Available','HealthCheckSucceeded','OwnerRemediated','ExternallyRemediated'])",
        "message": "a health check cannot watch Ready, Available, HealthCheckSucceeded, OwnerRemediated or ExternallyRemediated",
    }]))]
    pub type_: String,
    /// The status that counts as unhealthy.
    pub status: ConditionStatus,
    /// How long the status must hold.
    pub timeout: kube::core::Duration,
}

/// The Kubernetes version of some replicas, as the status of replicated kinds reports it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusVersion {
    /// The Kubernetes version.
    #[schemars(length(min = 1, max = 256))]
    pub version: String,
    /// How many replicas run it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub replicas: Option<i32>,
}
