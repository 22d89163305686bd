//! The CronJob controller: at each time the schedule names (five fields or `@hourly`, ...,
//! read by croner), a Job from `jobTemplate` named by the scheduled minute
//! (`backup-29001234`), only the latest of runs missed while it could not run, none past
//! `startingDeadlineSeconds`; `concurrencyPolicy` Forbid skips a run while one is active and
//! Replace deletes it first; finished Jobs beyond the history limits are deleted. Schedules are
//! read in UTC: a simulated cluster has no time zone database, and says so when
//! `timeZone` names another zone.

use chrono::{DateTime, Utc};
use kube::ResourceExt;
use kube::api::DynamicObject;
use lariat_controllers::events::EventType;
use serde_json::{Value, json};

use super::deployments::same_status;
use super::world::{World, controlled_by, deleting};
use super::{Action, Kind, Note, Plan, condition, controller_reference, parse_time, timestamp};

const COMPONENT: &str = "cronjob-controller";
const SCHEDULED: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";

pub fn plan(world: &World, now: DateTime<Utc>) -> Plan {
    let mut plan = Plan::default();
    for cron_job in world.cron_jobs.iter().filter(|c| !deleting(*c)) {
        reconcile(world, cron_job, now, &mut plan);
    }
    plan
}

fn finished(job: &DynamicObject) -> Option<&'static str> {
    ["Complete", "Failed"]
        .into_iter()
        .find(|type_| condition(&job.data["status"], type_).is_some_and(|c| c["status"] == "True"))
}

fn note(
    plan: &mut Plan,
    cron_job: &DynamicObject,
    type_: EventType,
    reason: &'static str,
    message: String,
) {
    plan.actions.push(Action::Event {
        kind: Kind::CronJob,
        object: cron_job.clone(),
        note: Note {
            component: COMPONENT,
            type_,
            reason,
            message,
            // What a round concludes anew from an unchanged CronJob (a schedule that does not
            // parse) is said once.
            once: type_ == EventType::Warning,
        },
    });
}

// Long: history, the run that is due, concurrency, then status, in the controller's order.
fn reconcile(world: &World, cron_job: &DynamicObject, now: DateTime<Utc>, plan: &mut Plan) {
    let uid = cron_job.uid().unwrap_or_default();
    let namespace = cron_job.namespace().unwrap_or_default();
    let spec = &cron_job.data["spec"];
    let current = &cron_job.data["status"];
    let mut jobs: Vec<&DynamicObject> = world
        .jobs
        .iter()
        .filter(|j| j.namespace().as_deref() == Some(&namespace) && controlled_by(*j, &uid))
        .collect();
    jobs.sort_by_key(|j| j.creation_timestamp().map(|t| t.0));
    let active: Vec<&&DynamicObject> = jobs
        .iter()
        .filter(|j| finished(j).is_none() && !deleting(**j))
        .collect();
    // History: the oldest finished Jobs beyond each limit go.
    for (outcome, limit, default) in [
        ("Complete", "successfulJobsHistoryLimit", 3),
        ("Failed", "failedJobsHistoryLimit", 1),
    ] {
        let done: Vec<&&DynamicObject> = jobs
            .iter()
            .filter(|j| finished(j) == Some(outcome))
            .collect();
        let keep = spec[limit].as_i64().unwrap_or(default).max(0) as usize;
        for job in done.iter().take(done.len().saturating_sub(keep)) {
            plan.actions.push(Action::Delete {
                kind: Kind::Job,
                object: (**job).clone(),
            });
            note(
                plan,
                cron_job,
                EventType::Normal,
                "SuccessfulDelete",
                format!("Deleted job {}", job.name_any()),
            );
        }
    }
    let schedule = spec["schedule"].as_str().unwrap_or_default();
    // Five fields, as Kubernetes reads a schedule: no seconds.
    let parser = croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Disallowed)
        .build();
    let cron = match parser.parse(schedule) {
        Ok(cron) => cron,
        Err(error) => {
            note(
                plan,
                cron_job,
                EventType::Warning,
                "UnparseableSchedule",
                format!("unparseable schedule {schedule:?}: {error}"),
            );
            return;
        }
    };
    if let Some(zone) = spec["timeZone"]
        .as_str()
        .filter(|z| !matches!(*z, "UTC" | "Etc/UTC"))
    {
        note(
            plan,
            cron_job,
            EventType::Warning,
            "UnknownTimeZone",
            format!("simulated clusters schedule in UTC; timeZone {zone:?} is read as UTC"),
        );
    }
    let since = parse_time(&current["lastScheduleTime"])
        .or_else(|| {
            cron_job
                .creation_timestamp()
                .and_then(|t| DateTime::from_timestamp(t.0.as_second(), 0))
        })
        .unwrap_or(now);
    let mut last_scheduled = current["lastScheduleTime"].clone();
    let mut created = None;
    let mut replaced = false;
    // The latest scheduled time in (since, now], if any: runs missed before it are not made
    // up for.
    let due = cron
        .find_previous_occurrence(&now, true)
        .ok()
        .filter(|at| *at > since);
    if let Some(at) = due.filter(|_| spec["suspend"] != true) {
        let late = (now - at).num_seconds();
        let missed = spec["startingDeadlineSeconds"]
            .as_i64()
            .is_some_and(|d| late > d);
        let policy = spec["concurrencyPolicy"].as_str().unwrap_or("Allow");
        if missed {
            note(
                plan,
                cron_job,
                EventType::Warning,
                "MissSchedule",
                format!("Missed scheduled time to start a job: {}", timestamp(at)),
            );
            last_scheduled = timestamp(at).into();
        } else if policy == "Forbid" && !active.is_empty() {
            // Waits: the run happens once the active one has finished, if still in time.
        } else {
            if policy == "Replace" {
                replaced = true;
                for job in &active {
                    plan.actions.push(Action::Delete {
                        kind: Kind::Job,
                        object: (***job).clone(),
                    });
                    note(
                        plan,
                        cron_job,
                        EventType::Normal,
                        "SuccessfulDelete",
                        format!("Deleted job {}", job.name_any()),
                    );
                }
            }
            let job = job_for(cron_job, at);
            let job_name = job.name_any();
            if world.jobs.get(&namespace, &job_name).is_none() {
                plan.actions.push(Action::Create {
                    kind: Kind::Job,
                    object: job,
                    announce: None,
                });
                note(
                    plan,
                    cron_job,
                    EventType::Normal,
                    "SuccessfulCreate",
                    format!("Created job {job_name}"),
                );
                created = Some(job_name);
            }
            last_scheduled = timestamp(at).into();
        }
    }
    // When to look again: the next scheduled time.
    if let Ok(next) = cron.find_next_occurrence(&now, false) {
        plan.due_at(next, 0, now);
    }
    let mut refs: Vec<Value> = active
        .iter()
        .filter(|_| !replaced)
        .map(|j| json!({"apiVersion": "batch/v1", "kind": "Job", "name": j.name_any(), "namespace": namespace, "uid": j.uid()}))
        .collect();
    if let Some(job_name) = created {
        refs.push(json!({"apiVersion": "batch/v1", "kind": "Job", "name": job_name, "namespace": namespace}));
    }
    let last_success = jobs
        .iter()
        .filter(|j| finished(j) == Some("Complete"))
        .filter_map(|j| j.data["status"]["completionTime"].as_str())
        .max()
        .map(Value::from);
    let mut status = json!({"active": refs});
    if !last_scheduled.is_null() {
        status["lastScheduleTime"] = last_scheduled;
    }
    if let Some(last) = last_success {
        status["lastSuccessfulTime"] = last;
    }
    if !same_status(current, &status) {
        plan.actions.push(Action::Patch {
            kind: Kind::CronJob,
            object: cron_job.clone(),
            status: true,
            patch: json!({"status": status}),
        });
    }
}

/// The Job of the run scheduled at `at`.
fn job_for(cron_job: &DynamicObject, at: DateTime<Utc>) -> DynamicObject {
    let template = &cron_job.data["spec"]["jobTemplate"];
    let mut metadata = json!({
        "name": format!("{}-{}", cron_job.name_any(), at.timestamp() / 60),
        "namespace": cron_job.namespace(),
        "ownerReferences": [controller_reference(cron_job, Kind::CronJob)],
        "annotations": {SCHEDULED: timestamp(at)},
    });
    if let Some(labels) = template["metadata"]["labels"].as_object() {
        metadata["labels"] = json!(labels);
    }
    if let Some(annotations) = template["metadata"]["annotations"].as_object() {
        for (k, v) in annotations {
            metadata["annotations"][k] = v.clone();
        }
    }
    serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": metadata,
        "spec": template["spec"].clone(),
    }))
    .expect("a well-formed Job")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cron_job(policy: &str, created: DateTime<Utc>) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": "nightly", "namespace": "default", "uid": "u1",
                         "creationTimestamp": timestamp(created), "resourceVersion": "1"},
            "spec": {"schedule": "*/5 * * * *", "concurrencyPolicy": policy,
                     "jobTemplate": {"metadata": {"labels": {"team": "a"}},
                                     "spec": {"template": {"spec": {"containers": []}}}}},
        }))
        .unwrap()
    }

    fn created(plan: &Plan) -> Vec<String> {
        plan.actions
            .iter()
            .filter_map(|a| match a {
                Action::Create { object, .. } => Some(object.name_any()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn only_the_latest_missed_run_is_made_and_forbid_waits_for_the_active_one() {
        let now = Utc::now();
        let mut world = World::default();
        world
            .cron_jobs
            .record(cron_job("Allow", now - chrono::TimeDelta::minutes(30)));
        let first = plan(&world, now);
        let latest = "*/5 * * * *"
            .parse::<croner::Cron>()
            .unwrap()
            .find_previous_occurrence(&now, true)
            .unwrap();
        assert_eq!(
            created(&first),
            [format!("nightly-{}", latest.timestamp() / 60)]
        );
        let due = first.due.expect("due at the next run");
        assert!(due <= std::time::Duration::from_secs(301), "{due:?}");

        // Forbid, with a Job of an earlier run still active: no new one.
        let mut world = World::default();
        world
            .cron_jobs
            .record(cron_job("Forbid", now - chrono::TimeDelta::minutes(30)));
        let mut active = job_for(
            &cron_job("Forbid", now),
            now - chrono::TimeDelta::minutes(40),
        );
        active.metadata.uid = Some("j1".into());
        active.metadata.resource_version = Some("2".into());
        world.jobs.record(active);
        assert!(created(&plan(&world, now)).is_empty());
    }
}
