//! The Job controller: Pods from the template, `parallelism` at a time, until `completions`
//! of them succeed (the Job is then `Complete`), or more than `backoffLimit` fail (each failed
//! Pod replaced after the controller's doubling back-off), or it runs
//! past `activeDeadlineSeconds` (then `Failed`); `Indexed` Jobs give each Pod its completion
//! index; a finished Job is deleted `ttlSecondsAfterFinished` later. Simulated Pods that do
//! not restart always succeed a second after they start (see the kubelet), unless failure
//! injection says otherwise.

use chrono::{DateTime, Utc};
use kube::ResourceExt;
use kube::api::DynamicObject;
use lariat_controllers::events::EventType;
use serde_json::{Value, json};

use super::deployments::same_status;
use super::replica_sets::{active, ready};
use super::world::{World, by_controller, deleting};

/// Pods by the uid of their controller.
type Owned<'a> = std::collections::HashMap<String, Vec<&'a DynamicObject>>;
use super::{
    Action, Kind, Note, Plan, condition, controller_reference, parse_time, set_condition, timestamp,
};

const COMPONENT: &str = "job-controller";
const INDEX: &str = "batch.kubernetes.io/job-completion-index";

pub fn plan(world: &World, now: DateTime<Utc>) -> Plan {
    let mut plan = Plan::default();
    let owned = by_controller(&world.pods);
    for job in world.jobs.iter().filter(|j| !deleting(*j)) {
        reconcile(&owned, job, now, &mut plan);
    }
    plan
}

fn finished(status: &Value) -> Option<DateTime<Utc>> {
    ["Complete", "Failed"].iter().find_map(|type_| {
        condition(status, type_)
            .filter(|c| c["status"] == "True")
            .map(|c| parse_time(&c["lastTransitionTime"]).unwrap_or_default())
    })
}

// Long: counting, then the three ways a Job ends, then the Pods to start, then status.
fn reconcile(owned: &Owned, job: &DynamicObject, now: DateTime<Utc>, plan: &mut Plan) {
    let uid = job.uid().unwrap_or_default();
    let namespace = job.namespace().unwrap_or_default();
    let spec = &job.data["spec"];
    let current = &job.data["status"];
    let pods: Vec<&DynamicObject> = owned
        .get(&uid)
        .into_iter()
        .flatten()
        .copied()
        .filter(|p| p.namespace().as_deref() == Some(&namespace))
        .collect();
    let phase = |p: &&DynamicObject| p.data["status"]["phase"].as_str().map(String::from);
    let running: Vec<&&DynamicObject> = pods.iter().filter(|p| active(p)).collect();
    let succeeded = pods
        .iter()
        .filter(|p| phase(p).as_deref() == Some("Succeeded"))
        .count() as i64;
    let failed = pods
        .iter()
        .filter(|p| phase(p).as_deref() == Some("Failed"))
        .count() as i64;
    if let Some(at) = finished(current) {
        if let Some(ttl) = spec["ttlSecondsAfterFinished"].as_i64() {
            if (now - at).num_seconds() >= ttl {
                plan.actions.push(Action::Delete {
                    kind: Kind::Job,
                    object: job.clone(),
                });
            } else {
                plan.due_at(at, ttl, now);
            }
        }
        return;
    }
    let completions = spec["completions"].as_i64();
    let parallelism = spec["parallelism"].as_i64().unwrap_or(1).max(0);
    let backoff_limit = spec["backoffLimit"].as_i64().unwrap_or(6);
    let stamp = timestamp(now);
    let start = parse_time(&current["startTime"]);
    let mut conditions = current["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut ended: Option<(&str, &str, String)> = None;
    if failed > backoff_limit {
        ended = Some((
            "Failed",
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit".into(),
        ));
    } else if let (Some(deadline), Some(start)) = (spec["activeDeadlineSeconds"].as_i64(), start) {
        if (now - start).num_seconds() >= deadline {
            ended = Some((
                "Failed",
                "DeadlineExceeded",
                "Job was active longer than specified deadline".into(),
            ));
        } else {
            plan.due_at(start, deadline, now);
        }
    }
    let done = match completions {
        Some(n) => succeeded >= n,
        // Without completions: done once one succeeded and none runs.
        None => succeeded > 0 && running.is_empty(),
    };
    if ended.is_none() && done {
        ended = Some((
            "Complete",
            "CompletionsReached",
            "Reached expected number of succeeded pods".into(),
        ));
    }
    let suspended = spec["suspend"] == true;
    match &ended {
        Some((type_, reason, message)) => {
            for pod in &running {
                plan.actions.push(Action::Delete {
                    kind: Kind::Pod,
                    object: (**pod).clone(),
                });
            }
            let criteria = if *type_ == "Complete" {
                "SuccessCriteriaMet"
            } else {
                "FailureTarget"
            };
            set_condition(
                &mut conditions,
                criteria,
                "True",
                reason,
                message,
                &stamp,
                false,
            );
            set_condition(
                &mut conditions,
                type_,
                "True",
                reason,
                message,
                &stamp,
                false,
            );
            let type_event = if *type_ == "Complete" {
                EventType::Normal
            } else {
                EventType::Warning
            };
            let reason_event = if *type_ == "Complete" {
                "Completed"
            } else {
                *reason
            };
            plan.actions.push(Action::Event {
                kind: Kind::Job,
                object: job.clone(),
                note: Note {
                    component: COMPONENT,
                    type_: type_event,
                    reason: reason_event,
                    message: if *type_ == "Complete" {
                        "Job completed".into()
                    } else {
                        message.clone()
                    },
                    once: false,
                },
            });
        }
        None if !suspended => {
            let remaining = completions.map_or(parallelism, |n| (n - succeeded).max(0));
            let wanted = parallelism.min(remaining);
            // At most a burst per round, as the controller creates them.
            let mut missing = (wanted - running.len() as i64).clamp(0, 500);
            // After failures, a new Pod only once the back-off since the last one is over; a
            // success starts the count again, as the controller counts it.
            let ended = |wanted: &str| {
                pods.iter()
                    .filter(|p| phase(p).as_deref() == Some(wanted))
                    .filter_map(|p| finished_at(p))
                    .collect::<Vec<_>>()
            };
            let last_success = ended("Succeeded").into_iter().max();
            let failures = ended("Failed");
            let recent = failures
                .iter()
                .filter(|at| Some(**at) > last_success)
                .count() as i64;
            if let Some(at) = failures
                .into_iter()
                .max()
                .filter(|at| Some(*at) > last_success)
            {
                let delay = failure_back_off(recent);
                if (now - at).num_seconds() < delay {
                    plan.due_at(at, delay, now);
                    missing = 0;
                }
            }
            let indexed = spec["completionMode"] == "Indexed";
            let mut taken: std::collections::BTreeSet<i64> = pods
                .iter()
                .filter(|p| active(p) || phase(p).as_deref() == Some("Succeeded"))
                .filter_map(|p| p.annotations().get(INDEX).and_then(|i| i.parse().ok()))
                .collect();
            for _ in 0..missing {
                let index = if indexed {
                    let free = (0..completions.unwrap_or(1)).find(|i| !taken.contains(i));
                    let Some(free) = free else { break };
                    taken.insert(free);
                    Some(free)
                } else {
                    None
                };
                plan.create_for(
                    job,
                    Kind::Job,
                    COMPONENT,
                    Kind::Pod,
                    pod_for(job, index),
                    "Created pod: {name}".into(),
                );
            }
        }
        None => {}
    }
    let mut status = json!({
        "active": if ended.is_some() { 0 } else { running.len() },
        "succeeded": succeeded,
        "failed": failed,
        "ready": running.iter().filter(|p| ready(p)).count(),
        "terminating": 0,
        "conditions": conditions,
    });
    if let Some(start) = current["startTime"].as_str() {
        status["startTime"] = start.into();
    } else if !suspended {
        status["startTime"] = stamp.clone().into();
    }
    match &ended {
        Some(("Complete", ..)) => status["completionTime"] = stamp.into(),
        _ if !current["completionTime"].is_null() => {
            status["completionTime"] = current["completionTime"].clone()
        }
        _ => {}
    }
    if !same_status(current, &status) {
        plan.actions.push(Action::Patch {
            kind: Kind::Job,
            object: job.clone(),
            status: true,
            patch: json!({"status": status}),
        });
    }
}

/// How long the Job controller waits after the `failed`th failure before a new Pod: 10 s,
/// doubled with each failure, at most 6 minutes.
fn failure_back_off(failed: i64) -> i64 {
    let doublings = (failed - 1).clamp(0, 6) as u32;
    (10 * 2i64.pow(doublings)).min(360)
}

/// When a Pod's last container (init containers included) ended.
fn finished_at(pod: &DynamicObject) -> Option<DateTime<Utc>> {
    ["initContainerStatuses", "containerStatuses"]
        .iter()
        .flat_map(|list| pod.data["status"][list].as_array().into_iter().flatten())
        .filter_map(|c| parse_time(&c["state"]["terminated"]["finishedAt"]))
        .max()
}

/// A Pod of the Job, labelled as the controller labels them.
fn pod_for(job: &DynamicObject, index: Option<i64>) -> DynamicObject {
    let template = &job.data["spec"]["template"];
    let name = job.name_any();
    let uid = job.uid().unwrap_or_default();
    let mut labels = template["metadata"]["labels"].clone();
    if !labels.is_object() {
        labels = json!({});
    }
    for (key, value) in [
        ("batch.kubernetes.io/controller-uid", &uid),
        ("batch.kubernetes.io/job-name", &name),
        ("controller-uid", &uid),
        ("job-name", &name),
    ] {
        labels[key] = value.as_str().into();
    }
    let mut annotations = template["metadata"]["annotations"].clone();
    if !annotations.is_object() {
        annotations = json!({});
    }
    let generate_name = match index {
        Some(i) => {
            annotations[INDEX] = i.to_string().into();
            labels[INDEX] = i.to_string().into();
            format!("{name}-{i}-")
        }
        None => format!("{name}-"),
    };
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "generateName": generate_name,
            "namespace": job.namespace(),
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [controller_reference(job, Kind::Job)],
        },
        "spec": template["spec"].clone(),
    }))
    .expect("a well-formed Pod")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_back_off_doubling_up_to_six_minutes() {
        let delays: Vec<i64> = (1..=8).map(failure_back_off).collect();
        assert_eq!(delays, [10, 20, 40, 80, 160, 320, 360, 360]);
        assert_eq!(failure_back_off(i64::MAX), 360);
    }
}
