//! What became of the applied objects: each one's readiness in its own terms (a Deployment
//! short of replicas, a failed Job, a custom resource whose Ready condition is False), and
//! drift: an object changed downstream (the fields that differ from the manifests), deleted
//! (missing), or carrying the BundleDeployment's label without being in its manifests
//! (orphaned). Read from the watches of applied objects, never by polling.

use std::collections::HashSet;

use kube::ResourceExt;
use lariat_api::fleet::{
    BundleDeploymentDisplay, BundleDeploymentStatus, DeployedResource, FleetCondition,
    ModifiedStatus, NonReadyStatus, ObjectSummary, ResourceCounts,
};
use serde_json::{Map, Value};

use super::Agent;
use super::deploy::{BUNDLE_DEPLOYMENT_LABEL, Desired, Fresh, ObjectKey};

/// An object that differs from the manifests.
#[derive(Debug)]
pub struct Modified {
    pub key: ObjectKey,
    /// The paths that differ, e.g. `data.color`.
    pub fields: Vec<String>,
    /// The JSON merge patch that would restore them.
    pub patch: Value,
}

/// What the agent sees of a BundleDeployment's objects.
#[derive(Debug, Default)]
pub struct Seen {
    pub not_ready: Vec<(ObjectKey, ObjectSummary)>,
    pub modified: Vec<Modified>,
    pub missing: Vec<ObjectKey>,
    pub orphaned: Vec<ObjectKey>,
    /// Whether a workload not ready had its Pods looked at: their state changes wake
    /// nothing, so what they say is looked at again sooner (see `reconcile`).
    pub pods_looked_at: bool,
}

impl Seen {
    pub fn drifted(&self) -> bool {
        !(self.modified.is_empty() && self.missing.is_empty() && self.orphaned.is_empty())
    }

    /// The objects that correcting the drift applies again: the modified and the missing.
    pub fn to_restore(&self) -> HashSet<&ObjectKey> {
        self.modified
            .iter()
            .map(|m| &m.key)
            .chain(self.missing.iter())
            .collect()
    }
}

/// Looks at every object of the manifests and every object labelled as this
/// BundleDeployment's.
pub(super) async fn observe(
    agent: &Agent,
    bundle_deployment: &str,
    desired: &[Desired],
    fresh: &Fresh,
) -> Seen {
    let mut seen = Seen::default();
    for wanted in desired {
        let applied = agent.applied(&wanted.kind).await;
        let live = match fresh.written.get(&wanted.key) {
            Some(written) => Some(written.clone()),
            None => applied.get(wanted.key.namespace.as_deref(), &wanted.key.name),
        };
        let Some(live) = live else {
            seen.missing.push(wanted.key.clone());
            continue;
        };
        let live = serde_json::to_value(&live).unwrap_or_default();
        let mut fields = Vec::new();
        if let Some(patch) = differences(&comparable(&wanted.object), &live, "", &mut fields) {
            seen.modified.push(Modified {
                key: wanted.key.clone(),
                fields,
                patch,
            });
        }
        if let Some(mut summary) = readiness(&wanted.key.kind, &live) {
            let problem = match wanted.key.kind.as_str() {
                "Pod" => serde_json::from_value(live.clone())
                    .ok()
                    .and_then(|pod| problem_of(&pod)),
                // Until its controller has seen the change, its Pods are the old ones' (a
                // Job's status has no observedGeneration: its Pods are always its own); a
                // workload that failed for good says why itself.
                kind if runs_pods(kind)
                    && !summary.error
                    && (kind == "Job"
                        || int(&live["status"]["observedGeneration"])
                            >= int(&live["metadata"]["generation"])) =>
                {
                    seen.pods_looked_at = true;
                    pod_problem(agent, &live).await
                }
                _ => None,
            };
            if let Some(problem) = problem {
                summary.message.get_or_insert_with(Vec::new).push(problem);
            }
            seen.not_ready.push((wanted.key.clone(), summary));
        }
    }
    let wanted: HashSet<&ObjectKey> = desired.iter().map(|d| &d.key).collect();
    for applied in agent.all_applied() {
        for object in applied.store.state() {
            if object
                .labels()
                .get(BUNDLE_DEPLOYMENT_LABEL)
                .map(String::as_str)
                != Some(bundle_deployment)
            {
                continue;
            }
            let key = ObjectKey {
                api_version: applied.resource.api_version.clone(),
                kind: applied.resource.kind.clone(),
                namespace: object.namespace(),
                name: object.name_any(),
            };
            if !wanted.contains(&key) && !fresh.deleted.contains(&key) {
                seen.orphaned.push(key);
            }
        }
    }
    seen.orphaned.sort();
    seen
}

/// The kinds whose readiness is their Pods': what a Pod says (ImagePullBackOff,
/// CrashLoopBackOff, Unschedulable) is why they are not ready.
fn runs_pods(kind: &str) -> bool {
    matches!(kind, "Deployment" | "StatefulSet" | "DaemonSet" | "Job")
}

/// The most Pods of one workload looked at for a reason: one page of a list by its selector.
const PODS_LOOKED_AT: u32 = 50;

/// Why a workload that is not ready is not, in its Pods' words: the first Pod with a problem
/// among the first [`PODS_LOOKED_AT`] its selector matches, as `kubectl describe pod` would
/// show it. Asked only of workloads that are not ready; `None` when no Pod says more.
async fn pod_problem(agent: &Agent, workload: &Value) -> Option<String> {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, ListParams};
    let namespace = workload["metadata"]["namespace"].as_str()?;
    let selector: k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector =
        serde_json::from_value(workload["spec"]["selector"].clone()).ok()?;
    let selector = kube::core::Selector::try_from(selector).ok()?;
    if selector.selects_all() {
        return None;
    }
    let pods: Api<Pod> = Api::namespaced(agent.downstream.clone(), namespace);
    let params = ListParams::default()
        .labels_from(&selector)
        .limit(PODS_LOOKED_AT);
    let pods = pods.list(&params).await.ok()?;
    // Pods on their way out (an old ReplicaSet's) are not why it is not ready.
    pods.items
        .iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .find_map(problem_of)
        .map(|problem| format!("its Pods: {problem}"))
}

/// What is wrong with one Pod, if anything: its containers' waiting reasons (not the
/// ordinary ones of a start), a failed run, the scheduler's refusal, a readiness that does
/// not come. Words that differ between clusters or from one look to the next are left out
/// (the Pod's name and UID, restart counts, a registry's own words for a failed pull, which
/// a kubelet alternates with ImagePullBackOff), so that failure groups gather clusters failing
/// alike and an unchanged failure writes no new status.
fn problem_of(pod: &k8s_openapi::api::core::v1::Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    let condition = |type_: &str| {
        status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == type_ && c.status == "False")
    };
    if let Some(unscheduled) = condition("PodScheduled") {
        return Some(format!(
            "{}: {}",
            unscheduled.reason.as_deref().unwrap_or("Unschedulable"),
            unscheduled.message.as_deref().unwrap_or_default()
        ));
    }
    if status.phase.as_deref() == Some("Failed") {
        return Some(format!(
            "{}: {}",
            status.reason.as_deref().unwrap_or("Failed"),
            status.message.as_deref().unwrap_or("the Pod failed")
        ));
    }
    let containers = status
        .init_container_statuses
        .iter()
        .flatten()
        .map(|c| ("init container ", c))
        .chain(
            status
                .container_statuses
                .iter()
                .flatten()
                .map(|c| ("container ", c)),
        );
    for (what, container) in containers {
        let state = container.state.as_ref();
        let last_exit = container
            .last_state
            .as_ref()
            .and_then(|s| s.terminated.as_ref());
        let crash_loop = |last: Option<&k8s_openapi::api::core::v1::ContainerStateTerminated>| {
            let exit = last.map_or(String::new(), |t| {
                format!(
                    ", last exit code {} ({})",
                    t.exit_code,
                    t.reason.as_deref().unwrap_or("Error")
                )
            });
            format!("{what}{}: CrashLoopBackOff{exit}", container.name)
        };
        if let Some(waiting) = state.and_then(|s| s.waiting.as_ref()) {
            let reason = waiting.reason.as_deref().unwrap_or_default();
            match reason {
                "" | "ContainerCreating" | "PodInitializing" => {}
                // Its message names the Pod's UID; the last exit says more.
                "CrashLoopBackOff" => return Some(crash_loop(last_exit)),
                "ErrImagePull" | "ImagePullBackOff" => {
                    // The image as the Pod names it, as the kubelet's back-off says it.
                    let image = pod
                        .spec
                        .iter()
                        .flat_map(|spec| {
                            spec.containers
                                .iter()
                                .chain(spec.init_containers.iter().flatten())
                        })
                        .find(|c| c.name == container.name)
                        .and_then(|c| c.image.clone())
                        .unwrap_or_else(|| container.image.clone());
                    return Some(format!(
                        "{what}{}: ImagePullBackOff: Back-off pulling image {image:?}",
                        container.name
                    ));
                }
                _ => {
                    return Some(format!(
                        "{what}{}: {reason}: {}",
                        container.name,
                        waiting.message.as_deref().unwrap_or_default()
                    ));
                }
            }
        }
        // Running again between recent crashes, not ready yet: the same loop, said the same
        // way (a crash long ago, past the kubelet's longest back-off, is not a loop).
        let recent_crash = last_exit.filter(|t| {
            t.exit_code != 0
                && t.finished_at.as_ref().is_some_and(|at| {
                    k8s_openapi::jiff::Timestamp::now().as_second() - at.0.as_second() < 300
                })
        });
        if state.is_some_and(|s| s.running.is_some())
            && !container.ready
            && container.restart_count > 0
            && recent_crash.is_some()
        {
            return Some(crash_loop(recent_crash));
        }
        if let Some(terminated) = state.and_then(|s| s.terminated.as_ref())
            && terminated.exit_code != 0
        {
            return Some(format!(
                "{what}{}: exited with code {} ({})",
                container.name,
                terminated.exit_code,
                terminated.reason.as_deref().unwrap_or("Error")
            ));
        }
    }
    condition("ContainersReady").map(|c| {
        format!(
            "{}: {}",
            c.reason.as_deref().unwrap_or("ContainersNotReady"),
            c.message.as_deref().unwrap_or_default()
        )
    })
}

/// The manifest as the API stores it: a Secret's `stringData` is kept as `data`.
fn comparable(object: &Value) -> Value {
    let mut object = object.clone();
    if object["kind"] == "Secret"
        && object["apiVersion"] == "v1"
        && let Some(Value::Object(strings)) =
            object.as_object_mut().and_then(|o| o.remove("stringData"))
    {
        use base64::Engine;
        let data = object.as_object_mut().and_then(|o| {
            o.entry("data")
                .or_insert_with(|| Value::Object(Map::new()))
                .as_object_mut()
        });
        if let Some(data) = data {
            for (key, value) in strings {
                let text = value.as_str().unwrap_or_default();
                data.insert(
                    key,
                    base64::engine::general_purpose::STANDARD
                        .encode(text)
                        .into(),
                );
            }
        }
    }
    object
}

/// Where `live` differs from `desired` in the fields `desired` sets (the API adds defaults
/// and other managers add fields; those are not drift). Returns the merge patch that restores
/// them and pushes their paths onto `fields`. Of `metadata` only labels and annotations count.
pub fn differences(
    desired: &Value,
    live: &Value,
    path: &str,
    fields: &mut Vec<String>,
) -> Option<Value> {
    // The API leaves out fields set to their zero value (`false`, `0`, `""`, `{}`, `[]`).
    if live.is_null() && is_zero(desired) {
        return None;
    }
    if quantity_field(path)
        && let (Some(wanted), Some(there)) = (quantity(desired), quantity(live))
    {
        // `cpu: 1` comes back as "1", `0.5` as "500m", `1024Mi` as "1Gi".
        let same = (wanted - there).abs() <= 1e-9 * wanted.abs().max(there.abs()).max(1.0);
        return (!same).then(|| {
            fields.push(path.to_string());
            desired.clone()
        });
    }
    match desired {
        Value::Null => None,
        Value::Object(wanted) => {
            let mut patch = Map::new();
            for (key, value) in wanted {
                let skipped = match path {
                    "" => matches!(key.as_str(), "apiVersion" | "kind" | "status"),
                    "metadata" => !matches!(key.as_str(), "labels" | "annotations"),
                    _ => false,
                };
                if skipped {
                    continue;
                }
                let child = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                let there = live.get(key).unwrap_or(&Value::Null);
                if let Some(p) = differences(value, there, &child, fields) {
                    patch.insert(key.clone(), p);
                }
            }
            (!patch.is_empty()).then_some(Value::Object(patch))
        }
        Value::Array(wanted) => {
            let same = match live {
                Value::Array(there) => {
                    there.len() == wanted.len()
                        && wanted
                            .iter()
                            .zip(there)
                            .all(|(w, t)| differences(w, t, path, &mut Vec::new()).is_none())
                }
                Value::Null => wanted.is_empty(),
                _ => false,
            };
            if same {
                None
            } else {
                fields.push(path.to_string());
                Some(desired.clone())
            }
        }
        Value::Number(wanted) => {
            let same = live
                .as_number()
                .is_some_and(|there| there.as_f64() == wanted.as_f64());
            (!same).then(|| {
                fields.push(path.to_string());
                desired.clone()
            })
        }
        scalar => (scalar != live).then(|| {
            fields.push(path.to_string());
            desired.clone()
        }),
    }
}

fn is_zero(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.values().all(is_zero),
    }
}

/// Whether a field holds resource quantities (requests, limits, quotas, capacities), whose
/// values the API writes back in canonical form.
fn quantity_field(path: &str) -> bool {
    [
        "resources.",
        "hard.",
        "capacity.",
        "allocatable.",
        "limits.",
        "requests.",
    ]
    .iter()
    .any(|segment| path.contains(segment))
}

/// A Kubernetes quantity (`500m`, `1Gi`, `2`, `1e3`) as a number.
fn quantity(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => lariat_api::parse_quantity(s),
        _ => None,
    }
}

fn int(value: &Value) -> i64 {
    value.as_i64().unwrap_or(0)
}

/// The condition `type_` of an object's status: (status, reason, message).
fn condition<'a>(live: &'a Value, type_: &str) -> Option<(&'a str, &'a str, &'a str)> {
    live["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default(),
                c["reason"].as_str().unwrap_or_default(),
                c["message"].as_str().unwrap_or_default(),
            )
        })
}

fn waiting(message: String) -> Option<ObjectSummary> {
    Some(ObjectSummary {
        state: Some("in-progress".into()),
        transitioning: true,
        error: false,
        message: Some(vec![message]),
    })
}

fn failing(message: String) -> Option<ObjectSummary> {
    Some(ObjectSummary {
        state: Some("error".into()),
        transitioning: false,
        error: true,
        message: Some(vec![message]),
    })
}

/// Why an object is not ready, in its own terms; `None` when it is ready (or is a kind that
/// has no readiness, as a ConfigMap).
pub fn readiness(kind: &str, live: &Value) -> Option<ObjectSummary> {
    let status = &live["status"];
    let generation = int(&live["metadata"]["generation"]);
    let observed = int(&status["observedGeneration"]);
    let stale = || generation > 0 && observed < generation;
    let wanted = |field: &str| live["spec"][field].as_i64().unwrap_or(1);
    match kind {
        "Deployment" => deployment(live),
        "StatefulSet" => {
            if stale() {
                return waiting("waiting for the StatefulSet controller to see the change".into());
            }
            let replicas = wanted("replicas");
            let ready = int(&status["readyReplicas"]);
            if ready < replicas {
                return waiting(format!("{ready}/{replicas} replicas ready"));
            }
            // As kstatus reads it: with `OnDelete` Pods change only when deleted, and with a
            // partition only those at or above it are updated; neither waits for the rest.
            let strategy = &live["spec"]["updateStrategy"];
            if strategy["type"] == "OnDelete" {
                return None;
            }
            let partition = strategy["rollingUpdate"]["partition"].as_i64().unwrap_or(0);
            let updated = int(&status["updatedReplicas"]);
            if partition > 0 {
                let expected = (replicas - partition).max(0);
                if updated < expected {
                    return waiting(format!(
                        "{updated}/{expected} replicas above the partition updated"
                    ));
                }
                return None;
            }
            if status["updateRevision"] != status["currentRevision"]
                && !status["updateRevision"].is_null()
            {
                return waiting(format!("{updated}/{replicas} replicas updated"));
            }
            None
        }
        "DaemonSet" => {
            if stale() {
                return waiting("waiting for the DaemonSet controller to see the change".into());
            }
            let desired = int(&status["desiredNumberScheduled"]);
            let ready = int(&status["numberReady"]);
            // With `OnDelete` a Pod changes only when deleted: updated ones are not awaited.
            let updated = if live["spec"]["updateStrategy"]["type"] == "OnDelete" {
                desired
            } else {
                int(&status["updatedNumberScheduled"])
            };
            if ready < desired || updated < desired {
                return waiting(format!(
                    "{ready}/{desired} pods ready, {updated}/{desired} updated"
                ));
            }
            None
        }
        "Job" => {
            if let Some(("True", reason, message)) = condition(live, "Failed") {
                return failing(format!("{reason}: {message}"));
            }
            if let Some(("True", ..)) = condition(live, "Complete") {
                return None;
            }
            waiting("the Job has not completed".into())
        }
        "Pod" => match status["phase"].as_str() {
            Some("Succeeded") => None,
            Some("Failed") => failing(format!(
                "the Pod failed: {}",
                status["message"].as_str().unwrap_or("no message")
            )),
            _ if matches!(condition(live, "Ready"), Some(("True", ..))) => None,
            phase => waiting(format!("the Pod is {}", phase.unwrap_or("Pending"))),
        },
        "PersistentVolumeClaim" => match status["phase"].as_str() {
            Some("Bound") => None,
            phase => waiting(format!("the claim is {}", phase.unwrap_or("Pending"))),
        },
        "Service"
            if live["spec"]["type"] == "LoadBalancer"
                && status["loadBalancer"]["ingress"]
                    .as_array()
                    .is_none_or(|i| i.is_empty()) =>
        {
            waiting("waiting for a load balancer address".into())
        }
        "CustomResourceDefinition" => match condition(live, "Established") {
            Some(("True", ..)) => None,
            _ => waiting("the definition is not established yet".into()),
        },
        _ => {
            // Any other kind that speaks in conditions: Ready False, or a failure condition.
            for failure in ["Failed", "Stalled"] {
                if let Some(("True", reason, message)) = condition(live, failure) {
                    return failing(format!("{failure}: {reason}: {message}"));
                }
            }
            match condition(live, "Ready") {
                Some(("False", reason, message)) => {
                    let why = [reason, message]
                        .into_iter()
                        .filter(|s| !s.is_empty())
                        .collect::<Vec<_>>()
                        .join(": ");
                    if why.is_empty() {
                        waiting("Ready is False".into())
                    } else {
                        waiting(why)
                    }
                }
                _ => None,
            }
        }
    }
}

/// How many objects a status lists by name, as Fleet caps them; the counts cover all.
const LISTED: usize = 10;

/// A Deployment's readiness: as `kubectl rollout status` decides.
fn deployment(live: &Value) -> Option<ObjectSummary> {
    let status = &live["status"];
    let stale = int(&live["metadata"]["generation"]) > 0
        && int(&status["observedGeneration"]) < int(&live["metadata"]["generation"]);
    let wanted = |field: &str| live["spec"][field].as_i64().unwrap_or(1);
    if let Some(("False", "ProgressDeadlineExceeded", message)) = condition(live, "Progressing") {
        return failing(format!("ProgressDeadlineExceeded: {message}"));
    }
    if stale {
        return waiting("waiting for the Deployment controller to see the change".into());
    }
    // As `kubectl rollout status` decides: every replica updated, no old one left,
    // and the updated ones available (an old Pod still serving is not the new version).
    let replicas = wanted("replicas");
    let (updated, available, total) = (
        int(&status["updatedReplicas"]),
        int(&status["availableReplicas"]),
        int(&status["replicas"]),
    );
    if updated < replicas {
        return waiting(format!("{updated}/{replicas} replicas updated"));
    }
    if total > updated {
        return waiting(format!(
            "{} old replicas are pending termination",
            total - updated
        ));
    }
    if available < replicas.max(updated) {
        let why = match condition(live, "Available") {
            Some(("False", _, message)) if !message.is_empty() => format!(": {message}"),
            _ => String::new(),
        };
        return waiting(format!("{available}/{replicas} replicas available{why}"));
    }
    None
}

/// A list of what is wrong for a condition message: the first few, and how many more.
fn summary(items: Vec<String>) -> String {
    let more = items.len().saturating_sub(3);
    let mut text = items.into_iter().take(3).collect::<Vec<_>>().join("; ");
    if more > 0 {
        text.push_str(&format!("; and {more} more"));
    }
    text
}

/// Writes what was seen into the status: the version is applied; which objects are not
/// ready and why, which drifted and how; the counts; and the conditions the Bundle rolls up.
pub(super) fn report(
    status: &mut BundleDeploymentStatus,
    deployment_id: &str,
    desired: &[Desired],
    seen: &Seen,
    now: &str,
) {
    let not_ready: Vec<String> = seen
        .not_ready
        .iter()
        .map(|(key, summary)| {
            format!(
                "{key}: {}",
                summary.message.clone().unwrap_or_default().join("; ")
            )
        })
        .collect();
    let drifted: Vec<String> = seen
        .modified
        .iter()
        .map(|m| format!("{} changed: {}", m.key, m.fields.join(", ")))
        .chain(seen.missing.iter().map(|key| format!("{key} is missing")))
        .chain(
            seen.orphaned
                .iter()
                .map(|key| format!("{key} is orphaned (not in the manifests)")),
        )
        .collect();
    let ready = not_ready.is_empty();
    let unmodified = drifted.is_empty();
    status.applied_deployment_id = Some(deployment_id.to_string());
    status.ready = ready;
    status.non_modified = unmodified;
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    FleetCondition::set(conditions, "Deployed", true, "", "", now);
    // Ready, as Fleet's, only when nothing is changed either: `kubectl get
    // bundledeployments` shows this condition's message as the reason it is not.
    let (reason, message) = match (ready, unmodified) {
        (true, true) => ("", String::new()),
        (false, _) => ("NotReady", summary(not_ready)),
        (true, false) => ("Modified", summary(drifted.clone())),
    };
    FleetCondition::set(
        conditions,
        "Ready",
        ready && unmodified,
        reason,
        &message,
        now,
    );
    FleetCondition::set(
        conditions,
        "Monitored",
        unmodified,
        if unmodified { "" } else { "Modified" },
        &summary(drifted),
        now,
    );
    let state = match (ready, unmodified) {
        (true, true) => "Ready",
        (false, _) => "NotReady",
        (true, false) => "Modified",
    };
    status.display = Some(BundleDeploymentDisplay {
        deployed: Some("True".into()),
        monitored: Some(if unmodified { "True" } else { "False" }.into()),
        state: Some(state.into()),
    });
    let reference = |key: &ObjectKey| {
        (
            Some(key.api_version.clone()),
            Some(key.kind.clone()),
            Some(key.name.clone()),
            key.namespace.clone(),
        )
    };
    let non_ready: Vec<NonReadyStatus> = seen
        .not_ready
        .iter()
        .take(LISTED)
        .map(|(key, summary)| {
            let (api_version, kind, name, namespace) = reference(key);
            NonReadyStatus {
                api_version,
                kind,
                name,
                namespace,
                uid: None,
                summary: Some(summary.clone()),
            }
        })
        .collect();
    status.non_ready_status = (!non_ready.is_empty()).then_some(non_ready);
    let modified: Vec<ModifiedStatus> = seen
        .modified
        .iter()
        .map(|m| (&m.key, false, false, Some(m.patch.to_string())))
        .chain(seen.missing.iter().map(|key| (key, true, false, None)))
        .chain(seen.orphaned.iter().map(|key| (key, false, true, None)))
        .take(LISTED)
        .map(|(key, missing, delete, patch)| {
            let (api_version, kind, name, namespace) = reference(key);
            ModifiedStatus {
                api_version,
                kind,
                name,
                namespace,
                missing,
                delete,
                patch,
            }
        })
        .collect();
    status.modified_status = (!modified.is_empty()).then_some(modified);
    status.resources = Some(
        desired
            .iter()
            .map(|d| {
                let (api_version, kind, name, namespace) = reference(&d.key);
                DeployedResource {
                    api_version,
                    kind,
                    name,
                    namespace,
                }
            })
            .collect(),
    );
    let changed: HashSet<&ObjectKey> = seen.modified.iter().map(|m| &m.key).collect();
    let missing: HashSet<&ObjectKey> = seen.missing.iter().collect();
    let unready: HashSet<&ObjectKey> = seen.not_ready.iter().map(|(k, _)| k).collect();
    let mut counts = ResourceCounts {
        desired_ready: desired.len() as i32,
        orphaned: seen.orphaned.len() as i32,
        ..Default::default()
    };
    for d in desired {
        if missing.contains(&d.key) {
            counts.missing += 1;
        } else if changed.contains(&d.key) {
            counts.modified += 1;
        } else if unready.contains(&d.key) {
            counts.not_ready += 1;
        } else {
            counts.ready += 1;
        }
    }
    status.resource_counts = Some(counts);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn drift_is_what_the_manifest_sets_and_the_object_no_longer_has() {
        let desired = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "x", "labels": {"app": "web"}},
            "data": {"color": "blue", "size": "2"}});
        // Defaults, other managers' fields and server metadata are not drift.
        let live = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "x", "uid": "u", "resourceVersion": "9",
                         "labels": {"app": "web", "other": "x"}},
            "data": {"color": "blue", "size": "2", "added": "by someone"}});
        let mut fields = Vec::new();
        assert_eq!(differences(&desired, &live, "", &mut fields), None);
        let mut changed = live.clone();
        changed["data"]["color"] = json!("red");
        changed["metadata"]["labels"]["app"] = json!("api");
        let patch = differences(&desired, &changed, "", &mut fields).expect("drift");
        assert_eq!(fields, ["metadata.labels.app", "data.color"]);
        assert_eq!(
            patch,
            json!({"metadata": {"labels": {"app": "web"}}, "data": {"color": "blue"}})
        );
    }

    #[test]
    fn lists_compare_item_by_item_with_defaults_allowed() {
        let desired = json!({"spec": {"containers": [{"name": "web", "image": "nginx:1"}]}});
        let live = json!({"spec": {"containers": [{"name": "web", "image": "nginx:1",
            "imagePullPolicy": "IfNotPresent"}], "replicas": 1}});
        assert_eq!(differences(&desired, &live, "", &mut Vec::new()), None);
        let mut changed = live.clone();
        changed["spec"]["containers"][0]["image"] = json!("nginx:2");
        let mut fields = Vec::new();
        assert!(differences(&desired, &changed, "", &mut fields).is_some());
        assert_eq!(fields, ["spec.containers"]);
        // Numbers compare by value.
        assert_eq!(
            differences(&json!({"a": 1}), &json!({"a": 1.0}), "", &mut Vec::new()),
            None
        );
    }

    #[test]
    fn zero_values_the_api_leaves_out_and_canonical_quantities_are_not_drift() {
        let desired = json!({"spec": {"template": {"spec": {"containers": [{"name": "web",
            "readinessProbe": {"initialDelaySeconds": 0}, "stdin": false, "env": [],
            "resources": {"requests": {"cpu": 0.5, "memory": "1024Mi"}, "limits": {"cpu": 1}}}]}}}});
        let live = json!({"spec": {"template": {"spec": {"containers": [{"name": "web",
            "readinessProbe": {"periodSeconds": 10},
            "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1"}}}]}}}});
        assert_eq!(differences(&desired, &live, "", &mut Vec::new()), None);
        let mut more = live.clone();
        more["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] =
            json!("2");
        assert!(differences(&desired, &more, "", &mut Vec::new()).is_some());
        // Outside quantities, a string is not a number: ConfigMap data "1e3" is not "1000".
        assert!(
            differences(
                &json!({"data": {"n": "1e3"}}),
                &json!({"data": {"n": "1000"}}),
                "",
                &mut Vec::new()
            )
            .is_some()
        );
    }

    #[test]
    fn a_secret_written_as_string_data_is_compared_as_data() {
        let desired = comparable(&json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s"}, "stringData": {"password": "hunter2"}}));
        let live = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
            "data": {"password": "aHVudGVyMg=="}});
        assert_eq!(differences(&desired, &live, "", &mut Vec::new()), None);
    }

    #[test]
    fn a_pods_problem_is_said_without_what_differs_between_clusters() {
        let pod = |status: Value| -> k8s_openapi::api::core::v1::Pod {
            serde_json::from_value(json!({
                "metadata": {"name": "web-7d9f8c6b5-x2k4p", "uid": "4f3a-9b"},
                "spec": {"containers": [{"name": "web", "image": "nginx:broken"}]},
                "status": status,
            }))
            .unwrap()
        };
        let pulling = |reason: &str| {
            problem_of(&pod(json!({"phase": "Pending", "containerStatuses": [{
                "name": "web", "image": "docker.io/library/nginx:broken", "imageID": "",
                "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": reason, "message": "rpc error: registry says no"}}}]})))
        };
        let said = "container web: ImagePullBackOff: Back-off pulling image \"nginx:broken\"";
        assert_eq!(pulling("ErrImagePull").as_deref(), Some(said));
        assert_eq!(pulling("ImagePullBackOff").as_deref(), Some(said));
        assert_eq!(pulling("ContainerCreating"), None);
        let crashing = problem_of(&pod(json!({"phase": "Running", "containerStatuses": [{
            "name": "web", "image": "nginx", "imageID": "", "ready": false, "restartCount": 7,
            "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
            "state": {"waiting": {"reason": "CrashLoopBackOff",
                                  "message": "back-off 5m0s restarting failed container=web pod=web_default(4f3a-9b)"}}}]})));
        assert_eq!(
            crashing.as_deref(),
            Some("container web: CrashLoopBackOff, last exit code 1 (Error)")
        );
        let unscheduled = problem_of(&pod(json!({"phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/1 nodes are available: 1 node(s) had untolerated taint."}]})));
        assert_eq!(
            unscheduled.as_deref(),
            Some("Unschedulable: 0/1 nodes are available: 1 node(s) had untolerated taint.")
        );
    }

    #[test]
    fn readiness_in_each_kinds_own_terms() {
        let deployment = |status: Value| json!({"metadata": {"generation": 2}, "spec": {"replicas": 3}, "status": status});
        let short = deployment(json!({"observedGeneration": 2, "updatedReplicas": 3,
            "availableReplicas": 1, "conditions": [{"type": "Available", "status": "False",
            "message": "Deployment does not have minimum availability."}]}));
        let summary = readiness("Deployment", &short).expect("not ready");
        assert!(summary.transitioning && !summary.error);
        assert_eq!(
            summary.message.unwrap()[0],
            "1/3 replicas available: Deployment does not have minimum availability."
        );
        let unseen = deployment(json!({"observedGeneration": 1}));
        assert!(readiness("Deployment", &unseen).is_some());
        let ready = deployment(json!({"observedGeneration": 2, "updatedReplicas": 3,
            "availableReplicas": 3}));
        assert!(readiness("Deployment", &ready).is_none());
        // Mid-rollout: the new Pod is there, an old one still serves; not this version yet.
        let rolling = deployment(json!({"observedGeneration": 2, "replicas": 4,
            "updatedReplicas": 3, "availableReplicas": 3}));
        assert_eq!(
            readiness("Deployment", &rolling).unwrap().message.unwrap()[0],
            "1 old replicas are pending termination"
        );
        let stateful = |spec: Value| {
            json!({"metadata": {"generation": 1}, "spec": spec,
            "status": {"observedGeneration": 1, "readyReplicas": 3, "updatedReplicas": 1,
                "currentRevision": "a", "updateRevision": "b"}})
        };
        let rolling = stateful(json!({"replicas": 3}));
        assert!(readiness("StatefulSet", &rolling).is_some());
        let on_delete = stateful(json!({"replicas": 3, "updateStrategy": {"type": "OnDelete"}}));
        assert!(readiness("StatefulSet", &on_delete).is_none());
        let partitioned = |partition: i64| {
            stateful(json!({"replicas": 3,
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": partition}}}))
        };
        assert!(readiness("StatefulSet", &partitioned(2)).is_none());
        assert_eq!(
            readiness("StatefulSet", &partitioned(1))
                .unwrap()
                .message
                .unwrap()[0],
            "1/2 replicas above the partition updated"
        );
        let stuck = deployment(json!({"conditions": [{"type": "Progressing",
            "status": "False", "reason": "ProgressDeadlineExceeded", "message": "timed out"}]}));
        assert!(readiness("Deployment", &stuck).unwrap().error);

        let failed = json!({"status": {"conditions": [{"type": "Failed", "status": "True",
            "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]}});
        let summary = readiness("Job", &failed).expect("failed");
        assert!(summary.error);
        assert!(summary.message.unwrap()[0].starts_with("BackoffLimitExceeded"));
        let complete = json!({"status": {"conditions": [{"type": "Complete", "status": "True"}]}});
        assert!(readiness("Job", &complete).is_none());

        let custom = json!({"status": {"conditions": [{"type": "Ready", "status": "False",
            "reason": "DatabaseUnreachable", "message": "cannot reach db:5432"}]}});
        assert_eq!(
            readiness("Database", &custom).unwrap().message.unwrap()[0],
            "DatabaseUnreachable: cannot reach db:5432"
        );
        assert!(readiness("ConfigMap", &json!({"data": {}})).is_none());
    }
}
