//! KubeadmConfig's `v1beta1` conditions (`type`, `status`, `severity`, `reason`, `message`,
//! `lastTransitionTime`): the truth of its status, kept sorted with `Ready` first.
//!
//! Condition types and most reasons are `lariat_api::bootstrap::conditions`; the few reasons
//! only this provider uses are defined here.

use serde_json::{Value, json};

pub use lariat_api::bootstrap::conditions::*;

/// The config asks for a format other than `cloud-config` (Ignition is not produced).
pub const UNSUPPORTED_FORMAT_REASON: &str = "UnsupportedFormat";
/// The spec cannot be rendered (for example a file content template, or a missing Secret key).
pub const INVALID_CONFIGURATION_REASON: &str = "InvalidConfiguration";
/// Another control-plane Machine holds the init lock or already has init data.
pub const WAITING_FOR_INIT_LOCK_REASON: &str = "WaitingForInitLock";

/// How bad a `False` condition is, as Cluster API's `v1beta1` conditions grade it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// Progressing normally, just not there yet.
    Info,
    /// Something the user should look at.
    Warning,
    /// Will not progress without a change.
    Error,
}

impl Severity {
    fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "Info",
            Severity::Warning => "Warning",
            Severity::Error => "Error",
        }
    }
}

/// The conditions list of a status object (empty when absent).
pub fn existing(status: &Value) -> Vec<Value> {
    status["conditions"].as_array().cloned().unwrap_or_default()
}

pub fn is_true(conditions: &[Value], type_: &str) -> bool {
    conditions
        .iter()
        .any(|c| c["type"] == type_ && c["status"] == "True")
}

/// Marks `type_` True.
pub fn mark_true(conditions: &mut Vec<Value>, type_: &str) {
    put(conditions, json!({"type": type_, "status": "True"}));
}

/// Marks `type_` False with a reason, severity and message.
pub fn mark_false(
    conditions: &mut Vec<Value>,
    type_: &str,
    reason: &str,
    severity: Severity,
    message: &str,
) {
    put(
        conditions,
        json!({
            "type": type_,
            "status": "False",
            "severity": severity.as_str(),
            "reason": reason,
            "message": message,
        }),
    );
}

/// Replaces the condition of the same type, keeping its `lastTransitionTime` unless the status
/// changed, so a reconcile that observes nothing new writes nothing new.
fn put(conditions: &mut Vec<Value>, mut condition: Value) {
    let previous = conditions.iter().find(|c| c["type"] == condition["type"]);
    condition["lastTransitionTime"] = match previous {
        Some(p) if p["status"] == condition["status"] && p["lastTransitionTime"].is_string() => {
            p["lastTransitionTime"].clone()
        }
        _ => json!(crate::object::now()),
    };
    conditions.retain(|c| c["type"] != condition["type"]);
    conditions.push(condition);
    conditions.sort_by_key(|c| {
        (
            c["type"] != READY,
            c["type"].as_str().unwrap_or_default().to_string(),
        )
    });
}

/// Sets `Ready` as the summary of the other conditions: the first non-True one (in order)
/// explains why the config is not ready.
pub fn summarize(conditions: &mut Vec<Value>) {
    let blocker = conditions
        .iter()
        .filter(|c| c["type"] != READY && c["status"] != "True")
        .min_by_key(|c| match c["severity"].as_str() {
            Some("Error") => 0,
            Some("Warning") => 1,
            _ => 2,
        })
        .cloned();
    match blocker {
        None => mark_true(conditions, READY),
        Some(c) => {
            let severity = match c["severity"].as_str() {
                Some("Error") => Severity::Error,
                Some("Warning") => Severity::Warning,
                _ => Severity::Info,
            };
            mark_false(
                conditions,
                READY,
                c["reason"].as_str().unwrap_or_default(),
                severity,
                c["message"].as_str().unwrap_or_default(),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_only_when_status_changes() {
        let mut list = vec![json!({
            "type": DATA_SECRET_AVAILABLE,
            "status": "False",
            "lastTransitionTime": "2020-01-01T00:00:00Z",
        })];
        mark_false(
            &mut list,
            DATA_SECRET_AVAILABLE,
            WAITING_FOR_CLUSTER_INFRASTRUCTURE_REASON,
            Severity::Info,
            "waiting",
        );
        assert_eq!(list[0]["lastTransitionTime"], "2020-01-01T00:00:00Z");
        mark_true(&mut list, DATA_SECRET_AVAILABLE);
        assert_ne!(list[0]["lastTransitionTime"], "2020-01-01T00:00:00Z");
        assert!(is_true(&list, DATA_SECRET_AVAILABLE));
    }

    #[test]
    fn ready_summarizes_the_worst_condition_first() {
        let mut list = vec![];
        mark_true(&mut list, CERTIFICATES_AVAILABLE);
        mark_false(
            &mut list,
            DATA_SECRET_AVAILABLE,
            WAITING_FOR_CONTROL_PLANE_AVAILABLE_REASON,
            Severity::Info,
            "waiting for the control plane",
        );
        summarize(&mut list);
        assert_eq!(list[0]["type"], READY, "Ready sorts first");
        assert_eq!(
            list[0]["reason"],
            WAITING_FOR_CONTROL_PLANE_AVAILABLE_REASON
        );
        mark_true(&mut list, DATA_SECRET_AVAILABLE);
        summarize(&mut list);
        assert!(is_true(&list, READY));
    }
}
