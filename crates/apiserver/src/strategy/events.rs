//! Events, in both shapes: core v1 (as lenient as Kubernetes keeps it for old recorders) and
//! events.k8s.io/v1 (Kubernetes' stricter rules for the new API). Both store times in the
//! canonical form Go clients parse (`kubectl events` fails on a whole namespace otherwise).

use serde_json::{Value, json};

use crate::objects::is_qualified_name;
use crate::status::Cause;
use lariat_api::admission::{Strategy, immutable};

/// Rewrites each time at `paths` in UTC with the precision its Go type prints (`micro`:
/// MicroTime's six fraction digits; else Time's whole seconds), refusing what is no time.
fn canonical_times(object: &mut Value, paths: &[&[&str]], micro: bool, causes: &mut Vec<Cause>) {
    for path in paths {
        let Some(node) = path
            .iter()
            .try_fold(&mut *object, |node, key| node.get_mut(*key))
        else {
            continue;
        };
        let Value::String(text) = node else {
            continue;
        };
        match chrono::DateTime::parse_from_rfc3339(text) {
            Ok(at) => {
                let format = if micro {
                    "%Y-%m-%dT%H:%M:%S%.6fZ"
                } else {
                    "%Y-%m-%dT%H:%M:%SZ"
                };
                *node = json!(at.with_timezone(&chrono::Utc).format(format).to_string());
            }
            Err(_) => causes.push(Cause::invalid(
                path.join("."),
                node,
                "must be an RFC 3339 time, such as 2026-01-02T15:04:05.000000Z",
            )),
        }
    }
}

/// Counts are int32 in Kubernetes' types.
fn int32_counts(object: &Value, paths: &[&[&str]], causes: &mut Vec<Cause>) {
    for path in paths {
        let node = path.iter().fold(object, |node, key| &node[*key]);
        // Beyond i64 (a u64 or a float) is out of range too.
        if node.is_number() && node.as_i64().and_then(|n| i32::try_from(n).ok()).is_none() {
            causes.push(Cause::invalid(path.join("."), node, "must fit in 32 bits"));
        }
    }
}

/// Canonical times and int32 counts, given the shape's names for its two timestamps and
/// its count (the MicroTimes and the series are named alike in both shapes).
fn times_and_counts(object: &mut Value, timestamps: [&str; 2], count: &str) -> Vec<Cause> {
    let mut causes = vec![];
    canonical_times(
        object,
        &[&["eventTime"], &["series", "lastObservedTime"]],
        true,
        &mut causes,
    );
    canonical_times(
        object,
        &[&[timestamps[0]], &[timestamps[1]]],
        false,
        &mut causes,
    );
    int32_counts(object, &[&[count], &["series", "count"]], &mut causes);
    causes
}

pub struct Events;

impl Strategy for Events {
    fn admit(&self, object: &mut Value, _old: Option<&Value>) -> Vec<Cause> {
        times_and_counts(object, ["firstTimestamp", "lastTimestamp"], "count")
    }
}

/// What an events.k8s.io/v1 update may not change: all but `series` and metadata.
const IMMUTABLE: [&str; 13] = [
    "regarding",
    "related",
    "reason",
    "note",
    "action",
    "type",
    "eventTime",
    "reportingController",
    "reportingInstance",
    "deprecatedSource",
    "deprecatedFirstTimestamp",
    "deprecatedLastTimestamp",
    "deprecatedCount",
];

pub struct EventsV1;

impl Strategy for EventsV1 {
    fn admit(&self, object: &mut Value, old: Option<&Value>) -> Vec<Cause> {
        let mut causes = times_and_counts(
            object,
            ["deprecatedFirstTimestamp", "deprecatedLastTimestamp"],
            "deprecatedCount",
        );
        // Kubernetes runs the create rules on every update too.
        for field in [
            "eventTime",
            "reportingController",
            "reportingInstance",
            "action",
            "reason",
        ] {
            match object[field].as_str() {
                None | Some("") => causes.push(Cause::required(field)),
                Some(text) if text.len() > 128 && field != "eventTime" => causes.push(
                    Cause::invalid(field, &object[field], "must have at most 128 characters"),
                ),
                _ => {}
            }
        }
        if let Some(controller) = object["reportingController"].as_str()
            && !controller.is_empty()
            && !is_qualified_name(controller)
        {
            causes.push(Cause::invalid(
                "reportingController",
                &object["reportingController"],
                "must be a qualified name, such as example.com/my-controller",
            ));
        }
        let type_ = &object["type"];
        if !type_.is_null() && type_ != "Normal" && type_ != "Warning" {
            causes.push(Cause::not_supported(
                "type",
                type_,
                &[json!("Normal"), json!("Warning")],
            ));
        }
        if object["note"]
            .as_str()
            .is_some_and(|note| note.len() > 1024)
        {
            causes.push(Cause::invalid(
                "note",
                &json!("<note>"),
                "must have at most 1024 bytes",
            ));
        }
        let series = &object["series"];
        if !series.is_null() {
            if series["count"].as_i64().is_none_or(|count| count < 2) {
                causes.push(Cause::invalid(
                    "series.count",
                    &series["count"],
                    "must be at least 2: a series is an event seen again",
                ));
            }
            if series["lastObservedTime"].is_null() {
                causes.push(Cause::required("series.lastObservedTime"));
            }
        }
        match old {
            // The deprecated fields belong to core v1 recorders; the new API does not set them.
            None => {
                for field in [
                    "deprecatedSource",
                    "deprecatedFirstTimestamp",
                    "deprecatedLastTimestamp",
                    "deprecatedCount",
                ] {
                    if !object[field].is_null() {
                        causes.push(Cause::invalid(field, &object[field], "needs to be unset"));
                    }
                }
            }
            Some(_) => {
                for field in IMMUTABLE {
                    causes.extend(immutable(object, old, &[field], field));
                }
            }
        }
        causes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event() -> Value {
        json!({"eventTime": "2026-12-01T04:00:00.5+02:00", "reportingController": "example.com/c",
            "reportingInstance": "c-1", "action": "Check", "reason": "Checked", "type": "Normal",
            "note": "n", "regarding": {"kind": "Pod", "name": "p"}})
    }

    fn fields(causes: &[Cause]) -> Vec<String> {
        causes.iter().map(|c| c.field.clone()).collect()
    }

    #[test]
    fn times_are_stored_as_go_clients_read_them() {
        let mut new = event();
        assert!(EventsV1.admit(&mut new, None).is_empty());
        assert_eq!(new["eventTime"], "2026-12-01T02:00:00.500000Z");
        let mut core = json!({"eventTime": "2026-12-01T02:00:00Z", "lastTimestamp": "2026-12-01T03:00:00.25+01:00",
            "series": {"count": 2, "lastObservedTime": "2026-12-01T02:00:00Z"}});
        assert!(Events.admit(&mut core, None).is_empty());
        assert_eq!(core["eventTime"], "2026-12-01T02:00:00.000000Z");
        assert_eq!(core["lastTimestamp"], "2026-12-01T02:00:00Z");
        assert_eq!(
            core["series"]["lastObservedTime"],
            "2026-12-01T02:00:00.000000Z"
        );
        let mut huge = json!({"count": u64::MAX});
        assert_eq!(fields(&Events.admit(&mut huge, None)), ["count"]);
        let mut bad = json!({"eventTime": "yesterday", "count": 99_999_999_999i64});
        assert_eq!(
            fields(&Events.admit(&mut bad, None)),
            ["eventTime", "count"]
        );
    }

    #[test]
    fn the_new_api_refuses_what_kubernetes_refuses() {
        let with = |field: &str, value: Value| {
            let mut e = event();
            e[field] = value;
            e
        };
        for (mut object, expect) in [
            (
                with("reportingController", json!("not valid!!")),
                vec!["reportingController"],
            ),
            (with("reason", json!("x".repeat(129))), vec!["reason"]),
            (with("deprecatedCount", json!(3)), vec!["deprecatedCount"]),
            (
                with(
                    "series",
                    json!({"count": 1, "lastObservedTime": "2026-12-01T02:00:00Z"}),
                ),
                vec!["series.count"],
            ),
        ] {
            assert_eq!(fields(&EventsV1.admit(&mut object, None)), expect);
        }
        let old = {
            let mut e = event();
            EventsV1.admit(&mut e, None);
            e
        };
        let mut series = old.clone();
        series["series"] = json!({"count": 2, "lastObservedTime": "2026-12-01T02:05:00Z"});
        assert!(EventsV1.admit(&mut series, Some(&old)).is_empty());
        let mut changed = with("note", json!("changed"));
        assert_eq!(fields(&EventsV1.admit(&mut changed, Some(&old))), ["note"]);
        let mut removed = old.clone();
        removed["eventTime"] = Value::Null;
        assert_eq!(
            fields(&EventsV1.admit(&mut removed, Some(&old))),
            ["eventTime", "eventTime"]
        );
    }
}
