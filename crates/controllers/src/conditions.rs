//! Conditions are the truth of a Cluster API object's status; phases are derived from them.

use serde_json::{Value, json};

/// Sets a condition in a `status.conditions` list, keeping `lastTransitionTime` unless the
/// status changes, and keeping the list sorted by type (Ready first, as Cluster API does).
pub fn set(conditions: &mut Vec<Value>, type_: &str, status: bool, reason: &str, message: &str) {
    let status_text = if status { "True" } else { "False" };
    let previous = conditions.iter().find(|c| c["type"] == type_);
    let time = match previous {
        Some(c) if c["status"] == status_text => c["lastTransitionTime"].clone(),
        _ => json!(crate::object::now()),
    };
    let mut condition = json!({"type": type_, "status": status_text, "lastTransitionTime": time});
    if !status {
        condition["severity"] = json!("Info");
        if !reason.is_empty() {
            condition["reason"] = json!(reason);
        }
        if !message.is_empty() {
            condition["message"] = json!(message);
        }
    }
    conditions.retain(|c| c["type"] != type_);
    conditions.push(condition);
    conditions.sort_by(|a, b| {
        let key = |c: &Value| {
            (
                c["type"] != "Ready",
                c["type"].as_str().unwrap_or_default().to_string(),
            )
        };
        key(a).cmp(&key(b))
    });
}

pub fn existing(status: &Value) -> Vec<Value> {
    status["conditions"].as_array().cloned().unwrap_or_default()
}

/// Whether an object's `status.conditions` holds `type_` with status `False`.
pub fn is_false(object_status: &Value, type_: &str) -> bool {
    object_status["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == type_ && c["status"] == "False")
    })
}

/// Machine condition set by a MachineHealthCheck: the Machine passed (or failed) its checks.
pub const HEALTH_CHECK_SUCCEEDED: &str = "HealthCheckSucceeded";
/// Machine condition set to False by a MachineHealthCheck to ask the Machine's owner (its
/// MachineSet or control plane) to remediate it, as in Cluster API.
pub const OWNER_REMEDIATED: &str = "OwnerRemediated";

/// Whether a MachineHealthCheck asked the owner of a Machine (given its `status`) to
/// remediate it: unhealthy, and not yet remediated by its owner (Cluster API's rule).
pub fn needs_owner_remediation(machine_status: &Value) -> bool {
    is_false(machine_status, HEALTH_CHECK_SUCCEEDED) && is_false(machine_status, OWNER_REMEDIATED)
}

pub fn is_true(conditions: &[Value], type_: &str) -> bool {
    conditions
        .iter()
        .any(|c| c["type"] == type_ && c["status"] == "True")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_only_on_change() {
        let mut conditions = vec![
            json!({"type": "InfrastructureReady", "status": "True", "lastTransitionTime": "2020-01-01T00:00:00Z"}),
        ];
        set(&mut conditions, "InfrastructureReady", true, "", "");
        assert_eq!(conditions[0]["lastTransitionTime"], "2020-01-01T00:00:00Z");
        set(
            &mut conditions,
            "Ready",
            false,
            "WaitingForInfrastructure",
            "infra not ready",
        );
        assert_eq!(conditions[0]["type"], "Ready", "Ready sorts first");
        assert_eq!(conditions[0]["reason"], "WaitingForInfrastructure");
        set(&mut conditions, "InfrastructureReady", false, "Lost", "");
        assert_ne!(conditions[1]["lastTransitionTime"], "2020-01-01T00:00:00Z");
    }
}
