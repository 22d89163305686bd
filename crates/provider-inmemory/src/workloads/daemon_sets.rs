//! The DaemonSet controller: one Pod on every Node the template's `nodeSelector` and node
//! affinity match and whose taints it tolerates, pinned there by node affinity on the Node's
//! name as the controller pins it (the scheduler then binds it), Pods of Nodes no longer
//! matched removed, and a changed template rolled `maxUnavailable` Nodes at a time
//! (`updateStrategy: RollingUpdate`, the default). The status carries what
//! `kubectl rollout status` and Fleet's readiness read.

use chrono::{DateTime, Utc};
use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::{Value, json};

use super::deployments::{same_status, template_hash};
use super::replica_sets::{active, ready};
use super::scheduler::{matches_node, tolerates};
use super::stateful_sets::REVISION_LABEL;
use super::world::{World, by_controller, deleting};

/// Pods by the uid of their controller.
type Owned<'a> = std::collections::HashMap<String, Vec<&'a DynamicObject>>;
use super::{Action, Kind, Plan, controller_reference, int_or_percent};

const COMPONENT: &str = "daemonset-controller";

pub fn plan(world: &World, _now: DateTime<Utc>) -> Plan {
    let mut plan = Plan::default();
    let owned = by_controller(&world.pods);
    for set in world.daemon_sets.iter().filter(|s| !deleting(*s)) {
        reconcile(world, &owned, set, &mut plan);
    }
    plan
}

/// The tolerations the controller adds to every daemon Pod: it stays on a Node that is not
/// Ready, unreachable, under pressure or cordoned.
fn daemon_tolerations(template_spec: &Value) -> Value {
    let mut tolerations = template_spec["tolerations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for (key, effect) in [
        ("node.kubernetes.io/not-ready", "NoExecute"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
        ("node.kubernetes.io/disk-pressure", "NoSchedule"),
        ("node.kubernetes.io/memory-pressure", "NoSchedule"),
        ("node.kubernetes.io/pid-pressure", "NoSchedule"),
        ("node.kubernetes.io/unschedulable", "NoSchedule"),
    ] {
        if !tolerations
            .iter()
            .any(|t| t["key"] == key && t["effect"] == effect)
        {
            tolerations.push(json!({"key": key, "operator": "Exists", "effect": effect}));
        }
    }
    Value::Array(tolerations)
}

// Long: which Nodes should run a Pod, what to create, delete and roll, then status.
fn reconcile(world: &World, owned: &Owned, set: &DynamicObject, plan: &mut Plan) {
    let uid = set.uid().unwrap_or_default();
    let namespace = set.namespace().unwrap_or_default();
    let spec = &set.data["spec"];
    let revision = template_hash(&spec["template"], &set.data["status"]["collisionCount"]);
    let mut template_spec = spec["template"]["spec"].clone();
    template_spec["tolerations"] = daemon_tolerations(&template_spec);
    let as_pod = json!({"spec": template_spec});
    let pods: Vec<&DynamicObject> = owned
        .get(&uid)
        .into_iter()
        .flatten()
        .copied()
        .filter(|p| p.namespace().as_deref() == Some(&namespace))
        .filter(|p| !deleting(*p))
        .collect();
    let node_of = |pod: &DynamicObject| -> Option<String> {
        pod.data["spec"]["nodeName"]
            .as_str()
            .map(String::from)
            .or_else(|| {
                pod.data["spec"]["affinity"]["nodeAffinity"]
                ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
                ["matchFields"][0]["values"][0]
                .as_str()
                .map(String::from)
            })
    };
    let eligible: std::collections::BTreeSet<String> = world
        .nodes
        .iter()
        // A template that names its Node runs there only.
        .filter(|node| {
            spec["template"]["spec"]["nodeName"]
                .as_str()
                .is_none_or(|n| n.is_empty() || n == node.name_any())
        })
        .filter(|node| {
            matches_node(&as_pod, node)
                && node.data["spec"]["taints"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|t| matches!(t["effect"].as_str(), Some("NoSchedule" | "NoExecute")))
                    .all(|t| tolerates(&as_pod, t))
        })
        .map(|n| n.name_any())
        .collect();
    let wanted_total = eligible.len() as i64;
    let unavailable_budget = int_or_percent(
        &spec["updateStrategy"]["rollingUpdate"]["maxUnavailable"],
        wanted_total,
        "1",
        true,
    )
    .max(1);
    let mut unavailable = 0;
    let mut stale = vec![];
    let mut by_node: std::collections::HashMap<String, Vec<&&DynamicObject>> = Default::default();
    for pod in &pods {
        if let Some(node) = node_of(pod) {
            by_node.entry(node).or_default().push(pod);
        }
    }
    for node in &eligible {
        let on_node = by_node.get(node).cloned().unwrap_or_default();
        match on_node.first() {
            None => {
                plan.create_for(
                    set,
                    Kind::DaemonSet,
                    COMPONENT,
                    Kind::Pod,
                    pod_for(set, node, &revision, &template_spec),
                    "Created pod: {name}".into(),
                );
                unavailable += 1;
            }
            Some(pod) => {
                if !active(pod) {
                    // A failed daemon Pod is replaced.
                    delete(plan, set, pod);
                    unavailable += 1;
                } else if pod.labels().get(REVISION_LABEL) != Some(&revision) {
                    if ready(pod) {
                        stale.push(**pod);
                    } else {
                        // An old Pod that is not available costs nothing to replace: it goes
                        // outside the budget, or a broken version could never be fixed.
                        delete(plan, set, pod);
                        unavailable += 1;
                    }
                } else if !ready(pod) {
                    unavailable += 1;
                }
                // More than one on a Node: the extra ones go.
                for extra in on_node.iter().skip(1) {
                    delete(plan, set, extra);
                }
            }
        }
    }
    // Pods on Nodes that should not run one (or that are gone).
    for pod in pods
        .iter()
        .filter(|p| node_of(p).is_none_or(|n| !eligible.contains(&n)))
    {
        delete(plan, set, pod);
    }
    let rolling = spec["updateStrategy"]["type"] != "OnDelete";
    if rolling {
        for pod in stale
            .iter()
            .take((unavailable_budget - unavailable).max(0) as usize)
        {
            delete(plan, set, pod);
        }
    }
    status(set, &pods, &eligible, &revision, plan, node_of);
}

fn delete(plan: &mut Plan, set: &DynamicObject, pod: &DynamicObject) {
    plan.delete_pod(set, Kind::DaemonSet, COMPONENT, pod);
}

fn status(
    set: &DynamicObject,
    pods: &[&DynamicObject],
    eligible: &std::collections::BTreeSet<String>,
    revision: &str,
    plan: &mut Plan,
    node_of: impl Fn(&DynamicObject) -> Option<String>,
) {
    let scheduled: Vec<&DynamicObject> = pods
        .iter()
        .copied()
        .filter(|p| active(p) && p.data["spec"]["nodeName"].is_string())
        .collect();
    let placed: Vec<&DynamicObject> = scheduled
        .iter()
        .copied()
        .filter(|p| node_of(p).is_some_and(|n| eligible.contains(&n)))
        .collect();
    let current = placed.len();
    let misscheduled = scheduled.len() - current;
    let ready_count = placed.iter().filter(|p| ready(p)).count();
    let updated = placed
        .iter()
        .filter(|p| p.labels().get(REVISION_LABEL).map(String::as_str) == Some(revision))
        .count();
    let status = json!({
        "observedGeneration": set.metadata.generation.unwrap_or(0),
        "desiredNumberScheduled": eligible.len(),
        "currentNumberScheduled": current,
        "numberMisscheduled": misscheduled,
        "numberReady": ready_count,
        "numberAvailable": ready_count,
        "numberUnavailable": eligible.len().saturating_sub(ready_count),
        "updatedNumberScheduled": updated,
    });
    if !same_status(&set.data["status"], &status) {
        plan.actions.push(Action::Patch {
            kind: Kind::DaemonSet,
            object: set.clone(),
            status: true,
            patch: json!({"status": status}),
        });
    }
}

/// The daemon Pod for `node`: pinned there by required node affinity on the Node's name.
fn pod_for(
    set: &DynamicObject,
    node: &str,
    revision: &str,
    template_spec: &Value,
) -> DynamicObject {
    let template = &set.data["spec"]["template"];
    let mut labels = template["metadata"]["labels"].clone();
    if !labels.is_object() {
        labels = json!({});
    }
    labels[REVISION_LABEL] = revision.into();
    labels["pod-template-generation"] = set.metadata.generation.unwrap_or(1).to_string().into();
    let mut spec = template_spec.clone();
    spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = json!({
        "nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}
        ]}],
    });
    let mut metadata = json!({
        "generateName": format!("{}-", set.name_any()),
        "namespace": set.namespace(),
        "labels": labels,
        "ownerReferences": [controller_reference(set, Kind::DaemonSet)],
    });
    if !template["metadata"]["annotations"].is_null() {
        metadata["annotations"] = template["metadata"]["annotations"].clone();
    }
    serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}),
    )
    .expect("a well-formed Pod")
}
