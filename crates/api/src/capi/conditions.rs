//! Cluster API conditions: the condition types, their constants, and the reasons core CAPI sets.
//!
//! Conditions are the status of a Cluster API object; the `phase` string is derived from them
//! for humans. Two shapes live side by side in `v1beta1`:
//!
//! - [`Condition`], the `v1beta1` condition under `status.conditions`, which carries a
//!   [`ConditionSeverity`] for conditions that are `False`;
//! - [`MetaCondition`], the Kubernetes-standard `metav1.Condition` that CAPI also writes under
//!   `status.v1beta2.conditions` while clients move to `v1beta2`.
//!
//! The constants below name the condition types (`*` without suffix) and reasons (`*_REASON`)
//! that the core controllers use, so that code never spells them out by hand.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

/// The state of one aspect of an object, as `status.conditions` of a `v1beta1` object holds it.
///
/// A condition is positive when `status` is `True`: `Ready=True` is good news, and
/// `severity` says how bad a `False` one is.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// The condition type, in CamelCase, e.g. `Ready` (see the constants in this module).
    #[serde(rename = "type")]
    #[schemars(length(min = 1, max = 256))]
    pub type_: String,
    /// Whether the condition holds: `True`, `False` or `Unknown`.
    // Upstream v1beta1 does not restrict this string in its schema; lariat keeps the same
    // schema so the API server accepts what Cluster API accepts, and reads a value it cannot
    // name as Unknown (as Cluster API's Go string type takes anything), so a condition some
    // other tool wrote never makes the whole object unreadable.
    #[schemars(with = "String")]
    #[serde(deserialize_with = "status_or_unknown")]
    pub status: ConditionStatus,
    /// How serious a `False` condition is; unset when the condition is `True`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "severity_or_none"
    )]
    #[schemars(with = "Option<String>")]
    #[schemars(length(max = 32))]
    pub severity: Option<ConditionSeverity>,
    /// When the condition last changed its status.
    #[schemars(with = "crate::schema::DateTime")]
    pub last_transition_time: Time,
    /// Why the condition last changed, as a CamelCase word.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub reason: Option<String>,
    /// Human-readable details of the last change.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 10240))]
    pub message: Option<String>,
}

impl Condition {
    /// Whether this condition has the given type and status `True`.
    pub fn is_true(&self, type_: &str) -> bool {
        self.type_ == type_ && self.status == ConditionStatus::True
    }
}

/// The Kubernetes-standard condition (`metav1.Condition`), kept by CAPI under
/// `status.v1beta2.conditions`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetaCondition {
    /// The condition type, in CamelCase or `domain/CamelCase` form.
    #[serde(rename = "type")]
    #[schemars(length(max = 316), pattern(crate::schema::CONDITION_TYPE_PATTERN))]
    pub type_: String,
    /// Whether the condition holds.
    pub status: ConditionStatus,
    /// The `metadata.generation` the condition was computed from.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub observed_generation: Option<i64>,
    /// When the condition last changed its status.
    #[schemars(with = "crate::schema::DateTime")]
    pub last_transition_time: Time,
    /// Why the condition last changed, as a CamelCase word.
    #[schemars(
        length(min = 1, max = 1024),
        pattern(crate::schema::CONDITION_REASON_PATTERN)
    )]
    pub reason: String,
    /// Human-readable details of the last change; may be empty.
    #[schemars(length(max = 32768))]
    pub message: String,
}

/// Whether a condition holds.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

/// How serious a `False` condition is.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum ConditionSeverity {
    Error,
    Warning,
    Info,
}

/// A condition's status; one the schema allows but lariat cannot name reads as `Unknown`.
fn status_or_unknown<'de, D>(deserializer: D) -> Result<ConditionStatus, D::Error>
where
    D: Deserializer<'de>,
{
    Ok(match String::deserialize(deserializer)?.as_str() {
        "True" => ConditionStatus::True,
        "False" => ConditionStatus::False,
        _ => ConditionStatus::Unknown,
    })
}

/// Go writes "no severity" as an empty string when a struct is not pointer-typed; read it, and
/// a severity the schema allows but lariat cannot name, as `None` rather than failing the
/// whole object.
fn severity_or_none<'de, D>(deserializer: D) -> Result<Option<ConditionSeverity>, D::Error>
where
    D: Deserializer<'de>,
{
    Ok(
        match Option::<String>::deserialize(deserializer)?.as_deref() {
            Some("Error") => Some(ConditionSeverity::Error),
            Some("Warning") => Some(ConditionSeverity::Warning),
            Some("Info") => Some(ConditionSeverity::Info),
            _ => None,
        },
    )
}

// Condition types shared by several kinds.

/// The summary condition of every CAPI object.
pub const READY: &str = "Ready";
/// The infrastructure object (e.g. an AWSCluster or AWSMachine) reports it is ready.
pub const INFRASTRUCTURE_READY: &str = "InfrastructureReady";

// Cluster condition types.

/// The control plane answers API requests for the first time; set once.
pub const CONTROL_PLANE_INITIALIZED: &str = "ControlPlaneInitialized";
/// The control plane object reports it is ready.
pub const CONTROL_PLANE_READY: &str = "ControlPlaneReady";
/// The Cluster's managed topology matches its ClusterClass.
pub const TOPOLOGY_RECONCILED: &str = "TopologyReconciled";

// Machine condition types.

/// The bootstrap provider has produced the node's bootstrap data.
pub const BOOTSTRAP_READY: &str = "BootstrapReady";
/// The Machine's Node exists and none of its conditions is bad.
pub const NODE_HEALTHY: &str = "NodeHealthy";
/// The Node was drained before deletion.
pub const DRAINING_SUCCEEDED: &str = "DrainingSucceeded";
/// Volumes were detached from the Node before deletion.
pub const VOLUME_DETACH_SUCCEEDED: &str = "VolumeDetachSucceeded";
/// No pre-drain deletion hook annotation holds the Machine back.
pub const PRE_DRAIN_DELETE_HOOK_SUCCEEDED: &str = "PreDrainDeleteHookSucceeded";
/// No pre-terminate deletion hook annotation holds the Machine back.
pub const PRE_TERMINATE_DELETE_HOOK_SUCCEEDED: &str = "PreTerminateDeleteHookSucceeded";
/// A MachineHealthCheck found the Machine healthy.
pub const MACHINE_HEALTH_CHECK_SUCCEEDED: &str = "HealthCheckSucceeded";
/// The Machine's owner (e.g. its MachineSet) has remediated it; set `False` to ask for it.
pub const MACHINE_OWNER_REMEDIATED: &str = "OwnerRemediated";
/// An external remediation request object was created for the Machine.
pub const EXTERNAL_REMEDIATION_REQUEST_AVAILABLE: &str = "ExternalRemediationRequestAvailable";

// MachineSet and MachineDeployment condition types.

/// All the MachineSet's Machines were created.
pub const MACHINES_CREATED: &str = "MachinesCreated";
/// All the owned Machines are ready.
pub const MACHINES_READY: &str = "MachinesReady";
/// The MachineSet has the number of replicas it wants.
pub const RESIZED: &str = "Resized";
/// The MachineDeployment has at least its minimum of available Machines.
pub const MACHINE_DEPLOYMENT_AVAILABLE: &str = "Available";
/// The MachineDeployment's current MachineSet is ready.
pub const MACHINE_SET_READY: &str = "MachineSetReady";

// MachineHealthCheck condition types.

/// The number of unhealthy Machines allows remediation (see `maxUnhealthy`).
pub const REMEDIATION_ALLOWED: &str = "RemediationAllowed";
/// The remediation template the MachineHealthCheck refers to exists.
pub const EXTERNAL_REMEDIATION_TEMPLATE_AVAILABLE: &str = "ExternalRemediationTemplateAvailable";

// Reasons.

/// The object is being deleted.
pub const DELETING_REASON: &str = "Deleting";
/// Deleting the object failed.
pub const DELETION_FAILED_REASON: &str = "DeletionFailed";
/// The object was deleted.
pub const DELETED_REASON: &str = "Deleted";
/// A reference to an external object is wrong.
pub const INCORRECT_EXTERNAL_REF_REASON: &str = "IncorrectExternalRef";
/// Waiting for the infrastructure object to become ready.
pub const WAITING_FOR_INFRASTRUCTURE_REASON: &str = "WaitingForInfrastructure";
/// Waiting for the control plane object to become ready.
pub const WAITING_FOR_CONTROL_PLANE_REASON: &str = "WaitingForControlPlane";
/// Waiting for the bootstrap data secret.
pub const WAITING_FOR_DATA_SECRET_REASON: &str = "WaitingForDataSecret";
/// The Machine has no `status.nodeRef` yet.
pub const MISSING_NODE_REF_REASON: &str = "MissingNodeRef";
/// The Node is still being provisioned.
pub const NODE_PROVISIONING_REASON: &str = "NodeProvisioning";
/// The Machine's Node is gone.
pub const NODE_NOT_FOUND_REASON: &str = "NodeNotFound";
/// A Node condition reports a failure.
pub const NODE_CONDITIONS_FAILED_REASON: &str = "NodeConditionsFailed";
/// The Node did not appear within `nodeStartupTimeout`.
pub const NODE_STARTUP_TIMEOUT_REASON: &str = "NodeStartupTimeout";
/// A Node condition matched an `unhealthyConditions` entry for longer than its timeout.
pub const UNHEALTHY_NODE_CONDITION_REASON: &str = "UnhealthyNode";
/// The Machine has a failure reason or message set.
pub const MACHINE_HAS_FAILURE_REASON: &str = "MachineHasFailure";
/// Waiting for the owner to remediate the Machine.
pub const WAITING_FOR_REMEDIATION_REASON: &str = "WaitingForRemediation";
/// Remediation is blocked because too many Machines are unhealthy.
pub const TOO_MANY_UNHEALTHY_REASON: &str = "TooManyUnhealthy";
/// The Node is being drained.
pub const DRAINING_REASON: &str = "Draining";
/// Draining the Node failed.
pub const DRAINING_FAILED_REASON: &str = "DrainingFailed";
/// A deletion hook annotation is still present.
pub const WAITING_EXTERNAL_HOOK_REASON: &str = "WaitingExternalHook";
/// Replicas are being added.
pub const SCALING_UP_REASON: &str = "ScalingUp";
/// Replicas are being removed.
pub const SCALING_DOWN_REASON: &str = "ScalingDown";

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, expect: Option<ConditionSeverity>) {
        let json = format!(
            r#"{{"type":"Ready","status":"False","lastTransitionTime":"2024-01-02T03:04:05Z"{input}}}"#
        );
        let condition: Condition = serde_json::from_str(&json).unwrap();
        assert_eq!(condition.severity, expect, "{input}");
    }

    #[test]
    fn severity_reads_empty_as_none() {
        check("", None);
        check(r#","severity":"""#, None);
        check(r#","severity":null"#, None);
        check(r#","severity":"Warning""#, Some(ConditionSeverity::Warning));
    }

    #[test]
    fn values_the_schema_allows_but_lariat_cannot_name_still_read() {
        // Another tool's condition must not make the whole object unreadable.
        check(r#","severity":"Critical""#, None);
        let json =
            r#"{"type":"Ready","status":"Maybe","lastTransitionTime":"2024-01-02T03:04:05Z"}"#;
        let condition: Condition = serde_json::from_str(json).unwrap();
        assert_eq!(condition.status, ConditionStatus::Unknown);
    }
}
