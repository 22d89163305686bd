//! Fleet's conditions (rancher/wrangler's `genericcondition`): times as RFC 3339 strings,
//! `lastTransitionTime` moving only when the status does; and the patch that writes a status.

use lariat_api::fleet::FleetCondition;
use lariat_controllers::Error;

/// Sets a condition as of now; returns whether anything but `lastUpdateTime` changed.
pub fn set(
    conditions: &mut Vec<FleetCondition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
) -> bool {
    let now = lariat_controllers::object::now();
    FleetCondition::set(conditions, type_, status, reason, message, &now)
}

/// The first three of `count` names for a message: `a, b, c and 7 more`.
pub fn first_names<'a>(names: impl IntoIterator<Item = &'a str>, count: usize) -> String {
    let shown: Vec<&str> = names.into_iter().take(3).collect();
    match count.saturating_sub(shown.len()) {
        0 => shown.join(", "),
        more => format!("{} and {more} more", shown.join(", ")),
    }
}

pub fn is_true(conditions: &[FleetCondition], type_: &str) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

/// The merge patch from one status to another, removing what the new one no longer says.
pub fn status_patch<S: serde::Serialize>(
    before: &S,
    after: &S,
) -> Result<serde_json::Value, Error> {
    let json = |s: &S| serde_json::to_value(s).map_err(|e| Error::Invalid(e.to_string()));
    Ok(lariat_api::merge_patch_from(&json(before)?, json(after)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_three_and_count_the_rest() {
        assert_eq!(first_names(["a", "b"], 2), "a, b");
        assert_eq!(first_names(["a", "b", "c"], 3), "a, b, c");
        assert_eq!(first_names(["a", "b", "c", "d"], 10), "a, b, c and 7 more");
    }

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
