//! Conditions are the truth of a Cluster API object's status; phases are derived from them.
//! Cluster API's own kinds hold them typed ([`Condition`]); provider objects, read as JSON,
//! through [`json`].

use lariat_api::capi::{Condition, ConditionSeverity, ConditionStatus};

/// Sets a condition, keeping `lastTransitionTime` unless the status changes, and keeping the
/// list sorted by type (Ready first, as Cluster API does).
pub fn set(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
) {
    let status = if status {
        ConditionStatus::True
    } else {
        ConditionStatus::False
    };
    let previous = conditions.iter().find(|c| c.type_ == type_);
    let last_transition_time = match previous {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => crate::object::now_time(),
    };
    let text = |s: &str| (!s.is_empty()).then(|| s.to_string());
    let failing = status == ConditionStatus::False;
    let condition = Condition {
        type_: type_.to_string(),
        status,
        severity: failing.then_some(ConditionSeverity::Info),
        last_transition_time,
        reason: text(reason).filter(|_| failing),
        message: text(message).filter(|_| failing),
    };
    conditions.retain(|c| c.type_ != type_);
    conditions.push(condition);
    conditions.sort_by(|a, b| (a.type_ != "Ready", &a.type_).cmp(&(b.type_ != "Ready", &b.type_)));
}

fn has(conditions: &[Condition], type_: &str, status: ConditionStatus) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == status)
}

pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    has(conditions, type_, ConditionStatus::True)
}

pub fn is_false(conditions: &[Condition], type_: &str) -> bool {
    has(conditions, type_, ConditionStatus::False)
}

/// Machine condition set by a MachineHealthCheck: the Machine passed (or failed) its checks.
pub const HEALTH_CHECK_SUCCEEDED: &str = "HealthCheckSucceeded";
/// Machine condition set to False by a MachineHealthCheck to ask the Machine's owner (its
/// MachineSet or control plane) to remediate it, as in Cluster API.
pub const OWNER_REMEDIATED: &str = "OwnerRemediated";

/// Whether a MachineHealthCheck asked the owner of a Machine (given its conditions) to
/// remediate it: unhealthy, and not yet remediated by its owner (Cluster API's rule).
pub fn needs_owner_remediation(machine: &[Condition]) -> bool {
    is_false(machine, HEALTH_CHECK_SUCCEEDED) && is_false(machine, OWNER_REMEDIATED)
}

/// A Machine's conditions, empty if it has none yet.
pub fn of_machine(machine: &lariat_api::capi::Machine) -> &[Condition] {
    machine
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
}

/// The same rules for provider objects' `status.conditions`, read as JSON.
pub mod json {
    use serde_json::{Value, json};

    /// Sets a condition in a `status.conditions` list, as [`super::set`] does.
    pub fn set(
        conditions: &mut Vec<Value>,
        type_: &str,
        status: bool,
        reason: &str,
        message: &str,
    ) {
        let status_text = if status { "True" } else { "False" };
        let previous = conditions.iter().find(|c| c["type"] == type_);
        let time = match previous {
            Some(c) if c["status"] == status_text => c["lastTransitionTime"].clone(),
            _ => json!(crate::object::now()),
        };
        let mut condition =
            json!({"type": type_, "status": status_text, "lastTransitionTime": time});
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

    /// Keeps the stored transition time of every condition whose status is the stored one: a
    /// pass that set a condition one way and then back (Ready True from one step, False from
    /// a later one) did not make it change.
    pub fn keep_transition_times(conditions: &mut [Value], stored: &[Value]) {
        for condition in conditions.iter_mut() {
            if let Some(before) = stored
                .iter()
                .find(|s| s["type"] == condition["type"] && s["status"] == condition["status"])
            {
                condition["lastTransitionTime"] = before["lastTransitionTime"].clone();
            }
        }
    }

    pub fn is_true(conditions: &[Value], type_: &str) -> bool {
        conditions
            .iter()
            .any(|c| c["type"] == type_ && c["status"] == "True")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(time: &str) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(time.parse().unwrap())
    }

    #[test]
    fn transition_time_moves_only_on_change() {
        let mut conditions = vec![Condition {
            type_: "InfrastructureReady".into(),
            status: ConditionStatus::True,
            severity: None,
            last_transition_time: at("2020-01-01T00:00:00Z"),
            reason: None,
            message: None,
        }];
        set(&mut conditions, "InfrastructureReady", true, "", "");
        assert_eq!(
            conditions[0].last_transition_time,
            at("2020-01-01T00:00:00Z")
        );
        set(
            &mut conditions,
            "Ready",
            false,
            "WaitingForInfrastructure",
            "infra not ready",
        );
        assert_eq!(conditions[0].type_, "Ready", "Ready sorts first");
        assert_eq!(
            conditions[0].reason.as_deref(),
            Some("WaitingForInfrastructure")
        );
        assert_eq!(conditions[0].severity, Some(ConditionSeverity::Info));
        set(&mut conditions, "InfrastructureReady", false, "Lost", "");
        assert_ne!(
            conditions[1].last_transition_time,
            at("2020-01-01T00:00:00Z")
        );
        assert!(is_false(&conditions, "InfrastructureReady"));
    }

    #[test]
    fn json_transition_time_moves_only_on_change() {
        use serde_json::json;
        let mut conditions = vec![
            json!({"type": "Ready", "status": "True", "lastTransitionTime": "2020-01-01T00:00:00Z"}),
        ];
        json::set(&mut conditions, "Ready", true, "", "");
        assert_eq!(conditions[0]["lastTransitionTime"], "2020-01-01T00:00:00Z");
        json::set(&mut conditions, "Ready", false, "Lost", "");
        assert_ne!(conditions[0]["lastTransitionTime"], "2020-01-01T00:00:00Z");
        assert_eq!(conditions[0]["reason"], "Lost");
    }
}
