//! Fleet's conditions (rancher/wrangler's `genericcondition`): times as RFC 3339 strings,
//! `lastTransitionTime` moving only when the status does.

use lariat_api::fleet::FleetCondition;

/// Sets a condition; returns whether anything but `lastUpdateTime` changed.
pub fn set(
    conditions: &mut Vec<FleetCondition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
) -> bool {
    let status = if status { "True" } else { "False" };
    let now = lariat_controllers::object::now();
    let text = |s: &str| (!s.is_empty()).then(|| s.to_string());
    let previous = conditions.iter().find(|c| c.type_ == type_);
    let unchanged = previous.is_some_and(|c| {
        c.status == status && c.reason == text(reason) && c.message == text(message)
    });
    if unchanged {
        return false;
    }
    let last_transition_time = match previous {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => Some(now.clone()),
    };
    let condition = FleetCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        last_update_time: Some(now),
        last_transition_time,
        reason: text(reason),
        message: text(message),
    };
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(existing) => *existing = condition,
        None => conditions.push(condition),
    }
    true
}

pub fn is_true(conditions: &[FleetCondition], type_: &str) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unchanged_condition_is_not_rewritten() {
        let mut list = Vec::new();
        assert!(set(&mut list, "Ready", false, "Failed", "boom"));
        let first = list[0].clone();
        assert!(!set(&mut list, "Ready", false, "Failed", "boom"));
        assert_eq!(list[0], first);
        assert!(set(&mut list, "Ready", false, "Failed", "other"));
        assert_eq!(list[0].last_transition_time, first.last_transition_time);
        assert!(set(&mut list, "Ready", true, "", ""));
        assert!(is_true(&list, "Ready"));
        assert_eq!(list[0].message, None);
    }
}
