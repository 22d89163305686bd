//! The ReplicaSet controller: as many active Pods from the template as `spec.replicas` says,
//! the least useful deleted first when there are too many, and the status the Deployment
//! controller and `kubectl get rs` read (`availableReplicas` counts Pods Ready for
//! `minReadySeconds`).

use chrono::{DateTime, Utc};
use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::json;

use super::deployments::same_status;
use super::world::{World, by_controller, deleting};

/// Pods by the uid of their controller.
type Owned<'a> = std::collections::HashMap<String, Vec<&'a DynamicObject>>;
use super::{Action, Kind, Plan, condition, controller_reference, parse_time, replicas};

const COMPONENT: &str = "replicaset-controller";
/// At most this many Pods created or deleted per ReplicaSet in one round, as the
/// controller's burst (500) bounds it.
const BURST: usize = 500;

pub fn plan(world: &World, now: DateTime<Utc>) -> Plan {
    let mut plan = Plan::default();
    let owned = by_controller(&world.pods);
    for rs in world.replica_sets.iter().filter(|rs| !deleting(*rs)) {
        reconcile(&owned, rs, now, &mut plan);
    }
    plan
}

/// A Pod that counts towards its ReplicaSet: not being deleted and not finished.
pub fn active(pod: &DynamicObject) -> bool {
    !deleting(pod)
        && !matches!(
            pod.data["status"]["phase"].as_str(),
            Some("Succeeded" | "Failed")
        )
}

/// Whether the Pod's Ready condition is True.
pub fn ready(pod: &DynamicObject) -> bool {
    condition(&pod.data["status"], "Ready").is_some_and(|c| c["status"] == "True")
}

fn reconcile(owned: &Owned, rs: &DynamicObject, now: DateTime<Utc>, plan: &mut Plan) {
    let uid = rs.uid().unwrap_or_default();
    let namespace = rs.namespace().unwrap_or_default();
    let spec = &rs.data["spec"];
    let mut pods: Vec<&DynamicObject> = owned
        .get(&uid)
        .into_iter()
        .flatten()
        .copied()
        .filter(|p| p.namespace().as_deref() == Some(&namespace))
        .filter(|p| active(p))
        .collect();
    let wanted = replicas(spec) as usize;
    if pods.len() < wanted {
        for _ in 0..(wanted - pods.len()).min(BURST) {
            plan.create_for(
                rs,
                Kind::ReplicaSet,
                COMPONENT,
                Kind::Pod,
                pod_for(rs),
                "Created pod: {name}".into(),
            );
        }
    } else if pods.len() > wanted {
        // The least useful first: unscheduled, then pending, then not ready, then the
        // youngest.
        pods.sort_by_key(|p| {
            (
                p.data["spec"]["nodeName"].is_string(),
                p.data["status"]["phase"] == "Running",
                ready(p),
                std::cmp::Reverse(p.creation_timestamp().map(|t| t.0)),
            )
        });
        let extra = (pods.len() - wanted).min(BURST);
        for pod in pods.drain(..extra) {
            plan.delete_pod(rs, Kind::ReplicaSet, COMPONENT, pod);
        }
    }
    status(rs, &pods, now, plan);
}

fn status(rs: &DynamicObject, pods: &[&DynamicObject], now: DateTime<Utc>, plan: &mut Plan) {
    let spec = &rs.data["spec"];
    let min_ready = spec["minReadySeconds"].as_i64().unwrap_or(0);
    let template_labels = &spec["template"]["metadata"]["labels"];
    let labelled = pods
        .iter()
        .filter(|p| {
            template_labels
                .as_object()
                .into_iter()
                .flatten()
                .all(|(k, v)| p.labels().get(k).map(|l| l.as_str()) == v.as_str())
        })
        .count();
    let ready: Vec<&&DynamicObject> = pods.iter().filter(|p| ready(p)).collect();
    let mut available = 0;
    for pod in &ready {
        let since = condition(&pod.data["status"], "Ready")
            .and_then(|c| parse_time(&c["lastTransitionTime"]))
            .unwrap_or(now);
        if min_ready == 0 || (now - since).num_seconds() >= min_ready {
            available += 1;
        } else {
            plan.due_at(since, min_ready, now);
        }
    }
    let status = json!({
        "replicas": pods.len(),
        "fullyLabeledReplicas": labelled,
        "readyReplicas": ready.len(),
        "availableReplicas": available,
        "observedGeneration": rs.metadata.generation.unwrap_or(0),
    });
    if !same_status(&rs.data["status"], &status) {
        plan.actions.push(Action::Patch {
            kind: Kind::ReplicaSet,
            object: rs.clone(),
            status: true,
            patch: json!({"status": status}),
        });
    }
}

/// A new Pod from the ReplicaSet's template, named after it (`web-66b6c48dd5-x2k4q`).
fn pod_for(rs: &DynamicObject) -> DynamicObject {
    let template = &rs.data["spec"]["template"];
    let mut metadata = json!({
        "generateName": format!("{}-", rs.name_any()),
        "namespace": rs.namespace(),
        "ownerReferences": [controller_reference(rs, Kind::ReplicaSet)],
    });
    for field in ["labels", "annotations"] {
        if !template["metadata"][field].is_null() {
            metadata[field] = template["metadata"][field].clone();
        }
    }
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": metadata,
        "spec": template["spec"].clone(),
    }))
    .expect("a well-formed Pod")
}
