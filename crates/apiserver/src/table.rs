//! `kubectl get` output: objects rendered as `meta.k8s.io/v1` Tables from printer columns.

use serde_json::{Value, json};

use crate::registry::{Printer, PrinterColumn, ResourceType};

/// The printer columns of a version, with the `Name` column kubectl expects first. A kind that
/// declares none gets `Age`, as Kubernetes does for custom resources.
pub fn columns(rt: &ResourceType, version: &str) -> Vec<PrinterColumn> {
    let mut columns = vec![PrinterColumn {
        name: "Name".into(),
        type_: "string".into(),
        format: "name".into(),
        description: "Name must be unique within a namespace.".into(),
        priority: 0,
        json_path: ".metadata.name".into(),
        printer: None,
    }];
    let declared = rt
        .version(version)
        .map(|v| v.printer_columns.clone())
        .unwrap_or_default();
    if declared.is_empty() {
        columns.push(PrinterColumn {
            name: "Age".into(),
            type_: "date".into(),
            format: String::new(),
            description: "Time since the object was created.".into(),
            priority: 0,
            json_path: ".metadata.creationTimestamp".into(),
            printer: None,
        });
    } else {
        columns.extend(declared);
    }
    columns
}

pub fn column_definitions(columns: &[PrinterColumn]) -> Value {
    columns
        .iter()
        .map(|c| {
            json!({
                "name": c.name,
                "type": c.type_,
                "format": c.format,
                "description": c.description,
                "priority": c.priority,
            })
        })
        .collect()
}

/// How much of each object a row carries (`?includeObject=`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    #[default]
    Metadata,
    Object,
}

pub fn row(columns: &[PrinterColumn], object: &Value, include: IncludeObject) -> Value {
    let cells: Vec<Value> = columns.iter().map(|c| cell(c, object)).collect();
    let mut row = json!({ "cells": cells });
    match include {
        IncludeObject::None => {}
        IncludeObject::Metadata => row["object"] = partial(object),
        IncludeObject::Object => row["object"] = object.clone(),
    }
    row
}

/// The object's metadata alone, as `PartialObjectMetadata` (what metadata-only clients and
/// Table rows carry).
pub fn partial(object: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": object["metadata"]})
}

pub fn table(
    columns: &[PrinterColumn],
    objects: &[Value],
    include: IncludeObject,
    metadata: Value,
) -> Value {
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": column_definitions(columns),
        "rows": objects.iter().map(|o| row(columns, o, include)).collect::<Vec<_>>(),
    })
}

fn cell(column: &PrinterColumn, object: &Value) -> Value {
    if let Some(printer) = column.printer {
        return json!(print(printer, object));
    }
    let found = evaluate(&column.json_path, object);
    let value = match found.len() {
        0 => return Value::Null,
        1 => found[0].clone(),
        _ => Value::Array(found),
    };
    match (column.type_.as_str(), &value) {
        ("integer", Value::Object(map)) => json!(map.len()),
        ("integer", Value::Array(list)) if found_is_collection(&column.json_path) => {
            json!(list.len())
        }
        ("date", Value::String(text)) => match chrono::DateTime::parse_from_rfc3339(text) {
            Ok(at) => json!(human_duration(chrono::Utc::now().signed_duration_since(at))),
            Err(_) => value,
        },
        ("string", Value::String(_)) | ("date", _) => value,
        ("string", Value::Array(items)) => {
            json!(items.iter().map(render).collect::<Vec<_>>().join(","))
        }
        ("string", other) => json!(render(other)),
        _ => value,
    }
}

fn print(printer: Printer, object: &Value) -> String {
    match printer {
        Printer::NodeStatus => {
            let ready = object["status"]["conditions"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
                .map(|c| c["status"].as_str().unwrap_or_default());
            let mut status = match ready {
                Some("True") => "Ready",
                Some("False") => "NotReady",
                _ => "Unknown",
            }
            .to_string();
            if object["spec"]["unschedulable"] == true {
                status.push_str(",SchedulingDisabled");
            }
            status
        }
        Printer::EventLastSeen => {
            // The field in whichever shape this Event is in.
            let either = |core: &str, events: &str| {
                [&object[core], &object[events]]
                    .into_iter()
                    .find_map(|t| t.as_str())
                    .map(String::from)
            };
            let last_seen = object["series"]["lastObservedTime"]
                .as_str()
                .map(String::from)
                .or_else(|| either("lastTimestamp", "deprecatedLastTimestamp"))
                .or_else(|| either("firstTimestamp", "deprecatedFirstTimestamp"))
                .or_else(|| object["eventTime"].as_str().map(String::from));
            match last_seen.and_then(|t| chrono::DateTime::parse_from_rfc3339(&t).ok()) {
                Some(at) => human_duration(chrono::Utc::now().signed_duration_since(at)),
                None => "<unknown>".into(),
            }
        }
        Printer::EventObject => {
            let involved = match &object["involvedObject"] {
                Value::Null => &object["regarding"],
                core => core,
            };
            format!(
                "{}/{}",
                involved["kind"].as_str().unwrap_or_default().to_lowercase(),
                involved["name"].as_str().unwrap_or_default()
            )
        }
        Printer::PodReady => {
            let statuses = object["status"]["containerStatuses"].as_array();
            let ready = statuses
                .into_iter()
                .flatten()
                .filter(|c| c["ready"] == true)
                .count();
            let total = object["spec"]["containers"]
                .as_array()
                .map_or(0, |c| c.len());
            format!("{ready}/{total}")
        }
        Printer::PodStatus => pod_status(object),
        Printer::ReadyReplicas => format!(
            "{}/{}",
            object["status"]["readyReplicas"].as_i64().unwrap_or(0),
            object["spec"]["replicas"].as_i64().unwrap_or(1)
        ),
        Printer::PodRestarts => {
            let statuses = object["status"]["containerStatuses"].as_array();
            let mut restarts = 0;
            let mut last: Option<chrono::DateTime<chrono::FixedOffset>> = None;
            for status in statuses.into_iter().flatten() {
                restarts += status["restartCount"].as_i64().unwrap_or(0);
                let finished = status["lastState"]["terminated"]["finishedAt"]
                    .as_str()
                    .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok());
                last = last.max(finished);
            }
            match last {
                Some(at) if restarts > 0 => format!(
                    "{restarts} ({} ago)",
                    human_duration(chrono::Utc::now().signed_duration_since(at))
                ),
                _ => restarts.to_string(),
            }
        }
        Printer::NodeRoles => {
            let labels = object["metadata"]["labels"].as_object();
            let mut roles: Vec<&str> = labels
                .into_iter()
                .flatten()
                .filter_map(|(key, value)| {
                    key.strip_prefix("node-role.kubernetes.io/")
                        .filter(|role| !role.is_empty())
                        .or_else(|| {
                            (key == "kubernetes.io/role")
                                .then(|| value.as_str())
                                .flatten()
                        })
                })
                .collect();
            roles.sort();
            roles.dedup();
            if roles.is_empty() {
                "<none>".into()
            } else {
                roles.join(",")
            }
        }
    }
}

/// A Pod's STATUS column, by kubectl's rules (its `printPod`): an init container still at
/// work, else the last container's waiting or terminated reason, else the phase; `Terminating`
/// once it is being deleted.
fn pod_status(pod: &Value) -> String {
    let status = &pod["status"];
    let text = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(String::from);
    let mut reason = text(&status["reason"])
        .or_else(|| text(&status["phase"]))
        .unwrap_or_else(|| "Pending".into());
    let empty = vec![];
    let inits = status["initContainerStatuses"].as_array().unwrap_or(&empty);
    let init_total = pod["spec"]["initContainers"]
        .as_array()
        .map_or(0, |c| c.len());
    let mut initializing = false;
    for (done, init) in inits.iter().enumerate() {
        let terminated = &init["state"]["terminated"];
        if terminated["exitCode"] == 0 && terminated.is_object() {
            continue;
        }
        initializing = true;
        reason = if terminated.is_object() {
            match text(&terminated["reason"]) {
                Some(why) => format!("Init:{why}"),
                None => format!("Init:ExitCode:{}", terminated["exitCode"]),
            }
        } else {
            match text(&init["state"]["waiting"]["reason"]) {
                Some(why) if why != "PodInitializing" => format!("Init:{why}"),
                _ => format!("Init:{done}/{init_total}"),
            }
        };
        break;
    }
    if !initializing {
        let mut running_and_ready = false;
        let containers = status["containerStatuses"].as_array().unwrap_or(&empty);
        for container in containers.iter().rev() {
            let state = &container["state"];
            if let Some(why) = text(&state["waiting"]["reason"]) {
                reason = why;
            } else if let Some(why) = text(&state["terminated"]["reason"]) {
                reason = why;
            } else if state["terminated"].is_object() {
                reason = format!("ExitCode:{}", state["terminated"]["exitCode"]);
            } else if container["ready"] == true && state["running"].is_object() {
                running_and_ready = true;
            }
        }
        if reason == "Completed" && running_and_ready {
            let ready = status["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            reason = if ready { "Running" } else { "NotReady" }.into();
        }
    }
    if !pod["metadata"]["deletionTimestamp"].is_null() {
        reason = "Terminating".into();
    }
    reason
}

/// Ages as kubectl shows them (`45s`, `3m12s`, `5h`, `2d3h`), computed by the server as
/// kube-apiserver does for `date` columns.
pub fn human_duration(d: chrono::TimeDelta) -> String {
    if d < chrono::TimeDelta::seconds(-1) {
        return "<invalid>".into();
    }
    let seconds = d.num_seconds().max(0);
    let minutes = seconds / 60;
    let hours = seconds / 3600;
    match () {
        _ if seconds < 120 => format!("{seconds}s"),
        _ if minutes < 10 && seconds % 60 == 0 => format!("{minutes}m"),
        _ if minutes < 10 => format!("{minutes}m{}s", seconds % 60),
        _ if minutes < 180 => format!("{minutes}m"),
        _ if hours < 8 && minutes % 60 == 0 => format!("{hours}h"),
        _ if hours < 8 => format!("{hours}h{}m", minutes % 60),
        _ if hours < 48 => format!("{hours}h"),
        _ if hours < 24 * 8 && hours % 24 == 0 => format!("{}d", hours / 24),
        _ if hours < 24 * 8 => format!("{}d{}h", hours / 24, hours % 24),
        _ if hours < 24 * 365 * 2 => format!("{}d", hours / 24),
        _ if hours < 24 * 365 * 8 && (hours / 24) % 365 == 0 => format!("{}y", hours / 24 / 365),
        _ if hours < 24 * 365 * 8 => format!("{}y{}d", hours / 24 / 365, (hours / 24) % 365),
        _ => format!("{}y", hours / 24 / 365),
    }
}

fn found_is_collection(path: &str) -> bool {
    !path.contains('[')
}

fn render(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Evaluates the JSONPath subset printer columns use: `.a.b`, escaped dots (`a\.b`),
/// `[0]`, `[*]` and filters such as `[?(@.type=="Ready")]`.
pub fn evaluate(path: &str, object: &Value) -> Vec<Value> {
    let mut nodes = vec![object.clone()];
    for step in steps(path) {
        let mut next = vec![];
        for node in &nodes {
            match &step {
                Step::Key(key) => {
                    if let Some(v) = node.get(key) {
                        next.push(v.clone());
                    }
                }
                Step::Index(i) => {
                    if let Some(v) = node.as_array().and_then(|a| a.get(*i)) {
                        next.push(v.clone());
                    }
                }
                Step::All => {
                    if let Some(items) = node.as_array() {
                        next.extend(items.iter().cloned());
                    }
                }
                Step::Filter(key, want) => {
                    if let Some(items) = node.as_array() {
                        next.extend(
                            items
                                .iter()
                                .filter(|i| {
                                    i.get(key).map(render).as_deref() == Some(want.as_str())
                                })
                                .cloned(),
                        );
                    }
                }
            }
        }
        nodes = next;
    }
    nodes
}

#[derive(Debug, PartialEq)]
enum Step {
    Key(String),
    Index(usize),
    All,
    Filter(String, String),
}

fn steps(path: &str) -> Vec<Step> {
    let path = path.trim().trim_start_matches('{').trim_end_matches('}');
    let mut steps = vec![];
    let mut key = String::new();
    let mut chars = path.chars().peekable();
    let flush = |key: &mut String, steps: &mut Vec<Step>| {
        if !key.is_empty() {
            steps.push(Step::Key(std::mem::take(key)));
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(escaped) = chars.next() {
                    key.push(escaped);
                }
            }
            '.' => flush(&mut key, &mut steps),
            '[' => {
                flush(&mut key, &mut steps);
                let mut inner = String::new();
                for c in chars.by_ref() {
                    if c == ']' {
                        break;
                    }
                    inner.push(c);
                }
                let inner = inner.trim();
                if inner == "*" {
                    steps.push(Step::All);
                } else if let Ok(i) = inner.parse() {
                    steps.push(Step::Index(i));
                } else if let Some(filter) =
                    inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')'))
                {
                    if let Some((k, v)) = filter.split_once("==") {
                        steps.push(Step::Filter(
                            k.trim().into(),
                            v.trim().trim_matches(['"', '\'']).into(),
                        ));
                    }
                } else {
                    // `['example\.com/cluster-name']`: a quoted key may escape its dots.
                    let quoted = inner.trim_matches(['"', '\'']);
                    steps.push(Step::Key(quoted.replace("\\.", ".")));
                }
            }
            _ => key.push(c),
        }
    }
    flush(&mut key, &mut steps);
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonpath_subset() {
        let object = json!({
            "metadata": {"labels": {"example.com/cluster-name": "prod"}},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}, {"type": "X", "status": "False"}]},
            "spec": {"list": [1, 2]}
        });
        for (path, expect) in [
            (".status.phase", vec![json!("Running")]),
            (
                ".metadata.labels.example\\.com/cluster-name",
                vec![json!("prod")],
            ),
            (
                ".metadata.labels['example\\.com/cluster-name']",
                vec![json!("prod")],
            ),
            (
                ".status.conditions[?(@.type==\"Ready\")].status",
                vec![json!("True")],
            ),
            (".spec.list[1]", vec![json!(2)]),
            (".spec.list[*]", vec![json!(1), json!(2)]),
            (".spec.missing", vec![]),
        ] {
            assert_eq!(evaluate(path, &object), expect, "{path}");
        }
    }

    #[test]
    fn ages_read_like_kubectl() {
        for (seconds, expect) in [
            (5, "5s"),
            (119, "119s"),
            (192, "3m12s"),
            (600, "10m"),
            (3 * 3600 + 60, "3h1m"),
            (50 * 3600, "2d2h"),
            (400 * 86400, "400d"),
        ] {
            assert_eq!(human_duration(chrono::TimeDelta::seconds(seconds)), expect);
        }
    }

    #[test]
    fn nodes_print_as_kubectl_shows_them() {
        let status = |printer, object| print(printer, &object);
        for (node, expect_status, expect_roles) in [
            (
                json!({"metadata": {"labels": {"node-role.kubernetes.io/control-plane": ""}},
                       "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
                "Ready",
                "control-plane",
            ),
            (
                json!({"spec": {"unschedulable": true},
                       "status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
                "NotReady,SchedulingDisabled",
                "<none>",
            ),
            (
                json!({"metadata": {"labels": {"kubernetes.io/role": "worker"}}}),
                "Unknown",
                "worker",
            ),
        ] {
            assert_eq!(status(Printer::NodeStatus, node.clone()), expect_status);
            assert_eq!(status(Printer::NodeRoles, node), expect_roles);
        }
    }

    #[test]
    fn pods_print_as_kubectl_shows_them() {
        let pod = |status: Value| json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}, "status": status});
        let running = pod(json!({"phase": "Running", "containerStatuses": [
            {"name": "a", "ready": true, "restartCount": 0, "state": {"running": {}}},
            {"name": "b", "ready": false, "restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
             "lastState": {"terminated": {"finishedAt": "2020-01-01T00:00:00Z"}}},
        ]}));
        assert_eq!(print(Printer::PodReady, &running), "1/2");
        assert_eq!(print(Printer::PodStatus, &running), "CrashLoopBackOff");
        assert!(print(Printer::PodRestarts, &running).starts_with("3 ("));
        let pending = pod(json!({"phase": "Pending", "containerStatuses": [
            {"name": "a", "state": {"waiting": {"reason": "ImagePullBackOff"}}},
        ]}));
        assert_eq!(print(Printer::PodStatus, &pending), "ImagePullBackOff");
        assert_eq!(print(Printer::PodRestarts, &pending), "0");
        let done = pod(json!({"phase": "Succeeded", "containerStatuses": [
            {"name": "a", "state": {"terminated": {"reason": "Completed", "exitCode": 0}}},
        ]}));
        assert_eq!(print(Printer::PodStatus, &done), "Completed");
        let mut leaving = done.clone();
        leaving["metadata"]["deletionTimestamp"] = json!("2020-01-01T00:00:00Z");
        assert_eq!(print(Printer::PodStatus, &leaving), "Terminating");
        let initializing = json!({"spec": {"initContainers": [{"name": "i"}], "containers": [{"name": "a"}]},
            "status": {"phase": "Pending", "initContainerStatuses": [{"name": "i", "state": {"running": {}}}]}});
        assert_eq!(print(Printer::PodStatus, &initializing), "Init:0/1");
        let deployment = json!({"spec": {"replicas": 3}, "status": {"readyReplicas": 2}});
        assert_eq!(print(Printer::ReadyReplicas, &deployment), "2/3");
    }

    #[test]
    fn integer_columns_count_maps() {
        let column = PrinterColumn {
            name: "Data".into(),
            type_: "integer".into(),
            format: String::new(),
            description: String::new(),
            priority: 0,
            json_path: ".data".into(),
            printer: None,
        };
        assert_eq!(
            cell(&column, &json!({"data": {"a": "1", "b": "2"}})),
            json!(2)
        );
        assert_eq!(cell(&column, &json!({})), Value::Null);
    }
}
