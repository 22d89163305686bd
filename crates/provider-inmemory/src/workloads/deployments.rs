//! The Deployment controller: a ReplicaSet per version of the Pod template, named by the
//! template's hash (`pod-template-hash`), scaled up and the old ones down as
//! `strategy.rollingUpdate`'s maxSurge and maxUnavailable allow (or all old ones first, for
//! `Recreate`), old ReplicaSets kept to `revisionHistoryLimit`, and the status
//! `kubectl rollout status` and `kubectl wait --for=condition=Available` read.

use chrono::{DateTime, Utc};
use kube::ResourceExt;
use kube::api::DynamicObject;
use lariat_controllers::events::EventType;
use serde_json::{Value, json};

use super::world::{World, controlled_by, deleting};
use super::{
    Action, Kind, Note, Plan, controller_reference, int_or_percent, parse_time, replicas,
    set_condition, timestamp,
};

const COMPONENT: &str = "deployment-controller";
pub const TEMPLATE_HASH: &str = "pod-template-hash";
const REVISION: &str = "deployment.kubernetes.io/revision";
const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";

pub fn plan(world: &World, now: DateTime<Utc>) -> Plan {
    let mut plan = Plan::default();
    for deployment in world.deployments.iter().filter(|d| !deleting(*d)) {
        reconcile(world, deployment, now, &mut plan);
    }
    plan
}

/// A ReplicaSet's `spec.replicas` as this round leaves it.
struct Owned<'a> {
    rs: &'a DynamicObject,
    replicas: i64,
}

impl Owned<'_> {
    fn revision(&self) -> i64 {
        revision(self.rs)
    }
    fn available(&self) -> i64 {
        self.rs.data["status"]["availableReplicas"]
            .as_i64()
            .unwrap_or(0)
    }
}

fn revision(rs: &DynamicObject) -> i64 {
    rs.annotations()
        .get(REVISION)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

// Long: the rollout's steps in upstream's order (new ReplicaSet, scale up, scale down,
// history, status), each short and reading down.
fn reconcile(world: &World, deployment: &DynamicObject, now: DateTime<Utc>, plan: &mut Plan) {
    let uid = deployment.uid().unwrap_or_default();
    let namespace = deployment.namespace().unwrap_or_default();
    let spec = &deployment.data["spec"];
    let wanted = replicas(spec);
    let hash = template_hash(
        &spec["template"],
        &deployment.data["status"]["collisionCount"],
    );
    let mut owned: Vec<Owned> = world
        .replica_sets
        .iter()
        .filter(|rs| rs.namespace().as_deref() == Some(&namespace) && controlled_by(*rs, &uid))
        .filter(|rs| !deleting(*rs))
        .map(|rs| Owned {
            rs,
            replicas: replicas(&rs.data["spec"]),
        })
        .collect();
    // Oldest first, as the controller scales down.
    owned.sort_by_key(|o| (o.revision(), o.rs.creation_timestamp().map(|t| t.0)));
    let new_index = owned
        .iter()
        .position(|o| o.rs.labels().get(TEMPLATE_HASH) == Some(&hash));
    let paused = spec["paused"] == true;
    let strategy = &spec["strategy"];
    let recreate = strategy["type"] == "Recreate";
    let surge = if recreate {
        0
    } else {
        int_or_percent(&strategy["rollingUpdate"]["maxSurge"], wanted, "25%", true)
    };
    let mut unavailable = if recreate {
        wanted
    } else {
        int_or_percent(
            &strategy["rollingUpdate"]["maxUnavailable"],
            wanted,
            "25%",
            false,
        )
    };
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    let Some(new_index) = new_index else {
        if !paused {
            let revision = owned
                .iter()
                .map(Owned::revision)
                .max()
                .unwrap_or(0)
                .saturating_add(1);
            let old_total: i64 = owned.iter().map(|o| o.replicas).sum();
            let initial = if recreate && old_total > 0 {
                0
            } else {
                (wanted + surge - old_total).clamp(0, wanted)
            };
            let rs = new_replica_set(deployment, &hash, revision, initial);
            let name = rs.name_any();
            plan.actions.push(Action::Create {
                kind: Kind::ReplicaSet,
                object: rs,
                announce: None,
            });
            if initial > 0 {
                scaled(plan, deployment, &name, 0, initial);
            }
            progressing(
                plan,
                deployment,
                "True",
                "NewReplicaSetCreated",
                &format!("Created new replica set {name:?}"),
                now,
            );
        }
        return;
    };
    if !paused {
        let mut changed = owned.iter().map(|o| o.replicas).collect::<Vec<_>>();
        if recreate {
            roll_recreate(world, &owned, new_index, wanted, &mut changed);
        } else {
            roll(&owned, new_index, wanted, surge, unavailable, &mut changed);
        }
        for (o, replicas) in owned.iter_mut().zip(changed) {
            if replicas != o.replicas {
                plan.actions.push(Action::Patch {
                    kind: Kind::ReplicaSet,
                    object: o.rs.clone(),
                    status: false,
                    patch: json!({"spec": {"replicas": replicas}}),
                });
                scaled(plan, deployment, &o.rs.name_any(), o.replicas, replicas);
                o.replicas = replicas;
            }
        }
        clean_up_history(plan, spec, &owned, new_index);
    }
    let mut new_revision = owned[new_index].revision();
    let newest = owned.iter().map(Owned::revision).max().unwrap_or(0);
    if !paused && new_revision < newest {
        // Back to an older template (`kubectl rollout undo`): its ReplicaSet becomes the newest
        // revision, and remembers the one it was, as the controller records it.
        let was = new_revision.to_string();
        new_revision = newest.saturating_add(1);
        let history = match owned[new_index].rs.annotations().get(REVISION_HISTORY) {
            Some(history) if !history.is_empty() => format!("{history},{was}"),
            _ => was,
        };
        plan.actions.push(Action::Patch {
            kind: Kind::ReplicaSet,
            object: owned[new_index].rs.clone(),
            status: false,
            patch: json!({"metadata": {"annotations": {
                REVISION: new_revision.to_string(), REVISION_HISTORY: history}}}),
        });
    }
    let new_revision = new_revision.to_string();
    if deployment.annotations().get(REVISION) != Some(&new_revision) {
        plan.actions.push(Action::Patch {
            kind: Kind::Deployment,
            object: deployment.clone(),
            status: false,
            patch: json!({"metadata": {"annotations": {REVISION: new_revision}}}),
        });
    }
    // Recreate allows no unavailable replica for the Available condition (kube's
    // MaxUnavailable is 0 for it), though its rollout takes all of them down.
    let allowed = if recreate { 0 } else { unavailable };
    status(plan, deployment, &owned, new_index, wanted, allowed, now);
}

/// Rolling update: the new ReplicaSet up to what maxSurge allows, the old ones down to what
/// maxUnavailable allows, unhealthy old Pods first.
fn roll(
    owned: &[Owned],
    new_index: usize,
    wanted: i64,
    surge: i64,
    unavailable: i64,
    replicas: &mut [i64],
) {
    // Scale the new ReplicaSet.
    let total: i64 = replicas.iter().sum();
    let new = replicas[new_index];
    if new > wanted {
        replicas[new_index] = wanted;
    } else if new < wanted && total < wanted + surge {
        replicas[new_index] = (new + wanted + surge - total).min(wanted);
    }
    // Scale the old ones down.
    let total: i64 = replicas.iter().sum();
    let min_available = wanted - unavailable;
    let new_unavailable = (replicas[new_index] - owned[new_index].available()).max(0);
    let mut budget = total - min_available - new_unavailable;
    // Unhealthy old replicas go first: removing them costs no availability.
    for (i, o) in owned.iter().enumerate() {
        if i == new_index || budget <= 0 {
            continue;
        }
        let unhealthy = (replicas[i] - o.available()).max(0).min(budget);
        replicas[i] -= unhealthy;
        budget -= unhealthy;
    }
    let available: i64 = owned
        .iter()
        .zip(replicas.iter())
        .map(|(o, r)| o.available().min(*r))
        .sum();
    let mut budget = available - min_available;
    for (i, _) in owned.iter().enumerate() {
        if i == new_index || budget <= 0 {
            continue;
        }
        let down = replicas[i].min(budget);
        replicas[i] -= down;
        budget -= down;
    }
}

/// Recreate: every old ReplicaSet to zero, and the new one up once no old Pod is left.
fn roll_recreate(
    world: &World,
    owned: &[Owned],
    new_index: usize,
    wanted: i64,
    replicas: &mut [i64],
) {
    for (i, r) in replicas.iter_mut().enumerate() {
        if i != new_index {
            *r = 0;
        }
    }
    let old_pods_left = owned.iter().enumerate().any(|(i, o)| {
        i != new_index
            && (o.replicas > 0
                || world
                    .pods
                    .iter()
                    .any(|p| controlled_by(p, &o.rs.uid().unwrap_or_default()) && !deleting(p)))
    });
    if !old_pods_left {
        replicas[new_index] = wanted;
    }
}

/// Old ReplicaSets scaled to zero beyond `revisionHistoryLimit` (10) are deleted, oldest
/// first.
fn clean_up_history(plan: &mut Plan, spec: &Value, owned: &[Owned], new_index: usize) {
    let limit = spec["revisionHistoryLimit"].as_i64().unwrap_or(10).max(0) as usize;
    let idle: Vec<&Owned> = owned
        .iter()
        .enumerate()
        .filter(|(i, o)| {
            *i != new_index
                && o.replicas == 0
                && o.rs.data["status"]["replicas"].as_i64().unwrap_or(0) == 0
        })
        .map(|(_, o)| o)
        .collect();
    for o in idle.iter().take(idle.len().saturating_sub(limit)) {
        plan.actions.push(Action::Delete {
            kind: Kind::ReplicaSet,
            object: o.rs.clone(),
        });
    }
}

fn scaled(plan: &mut Plan, deployment: &DynamicObject, name: &str, from: i64, to: i64) {
    let direction = if to > from { "up" } else { "down" };
    plan.actions.push(Action::Event {
        kind: Kind::Deployment,
        object: deployment.clone(),
        note: Note {
            component: COMPONENT,
            type_: EventType::Normal,
            reason: "ScalingReplicaSet",
            message: format!("Scaled {direction} replica set {name} from {from} to {to}"),
            once: false,
        },
    });
}

fn progressing(
    plan: &mut Plan,
    deployment: &DynamicObject,
    status: &str,
    reason: &str,
    message: &str,
    now: DateTime<Utc>,
) {
    let mut conditions = deployment.data["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    set_condition(
        &mut conditions,
        "Progressing",
        status,
        reason,
        message,
        &timestamp(now),
        true,
    );
    plan.actions.push(Action::Patch {
        kind: Kind::Deployment,
        object: deployment.clone(),
        status: true,
        patch: json!({"status": {"conditions": conditions}}),
    });
}

// Long: the status fields and both conditions as kube-controller-manager computes them.
fn status(
    plan: &mut Plan,
    deployment: &DynamicObject,
    owned: &[Owned],
    new_index: usize,
    wanted: i64,
    unavailable: i64,
    now: DateTime<Utc>,
) {
    let current = &deployment.data["status"];
    let sum = |field: &str| -> i64 {
        owned
            .iter()
            .map(|o| o.rs.data["status"][field].as_i64().unwrap_or(0))
            .sum()
    };
    let new_rs = owned[new_index].rs;
    let new_name = new_rs.name_any();
    let total_spec: i64 = owned.iter().map(|o| o.replicas).sum();
    let actual = sum("replicas");
    let updated = new_rs.data["status"]["replicas"].as_i64().unwrap_or(0);
    let ready = sum("readyReplicas");
    let available = sum("availableReplicas");
    let generation = deployment.metadata.generation.unwrap_or(0);
    let mut conditions = current["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let stamp = timestamp(now);
    if available >= wanted - unavailable {
        let message = "Deployment has minimum availability.";
        set_condition(
            &mut conditions,
            "Available",
            "True",
            "MinimumReplicasAvailable",
            message,
            &stamp,
            true,
        );
    } else {
        let message = "Deployment does not have minimum availability.";
        set_condition(
            &mut conditions,
            "Available",
            "False",
            "MinimumReplicasUnavailable",
            message,
            &stamp,
            true,
        );
    }
    let complete = updated == wanted && actual == wanted && available == wanted;
    let made_progress = updated > current["updatedReplicas"].as_i64().unwrap_or(0)
        || ready > current["readyReplicas"].as_i64().unwrap_or(0)
        || available > current["availableReplicas"].as_i64().unwrap_or(0)
        || actual - updated
            < current["replicas"].as_i64().unwrap_or(0)
                - current["updatedReplicas"].as_i64().unwrap_or(0);
    let deadline = deployment.data["spec"]["progressDeadlineSeconds"]
        .as_i64()
        .unwrap_or(600);
    let last_progress = super::condition(current, "Progressing")
        .and_then(|c| parse_time(&c["lastUpdateTime"]))
        .unwrap_or(now);
    let progress_reason = super::condition(current, "Progressing")
        .and_then(|c| c["reason"].as_str())
        .unwrap_or_default();
    // A paused Deployment makes no progress and misses no deadline; resumed, its deadline
    // counts from then.
    let paused = deployment.data["spec"]["paused"] == true;
    if paused || progress_reason == "DeploymentPaused" {
        let (reason, message) = if paused {
            ("DeploymentPaused", "Deployment is paused")
        } else {
            plan.due_at(now, deadline, now);
            ("DeploymentResumed", "Deployment is resumed")
        };
        set_condition(
            &mut conditions,
            "Progressing",
            "Unknown",
            reason,
            message,
            &stamp,
            true,
        );
    } else if complete {
        set_condition(
            &mut conditions,
            "Progressing",
            "True",
            "NewReplicaSetAvailable",
            &format!("ReplicaSet {new_name:?} has successfully progressed."),
            &stamp,
            true,
        );
    } else if made_progress || super::condition(current, "Progressing").is_none() {
        set_condition(
            &mut conditions,
            "Progressing",
            "True",
            "ReplicaSetUpdated",
            &format!("ReplicaSet {new_name:?} is progressing."),
            &stamp,
            true,
        );
        // Progress moves lastUpdateTime even when the words stay the same: the deadline
        // counts from the last progress.
        if let Some(c) = conditions.iter_mut().find(|c| c["type"] == "Progressing") {
            c["lastUpdateTime"] = stamp.clone().into();
        }
        plan.due_at(now, deadline, now);
    } else if (now - last_progress).num_seconds() >= deadline {
        set_condition(
            &mut conditions,
            "Progressing",
            "False",
            "ProgressDeadlineExceeded",
            &format!("ReplicaSet {new_name:?} has timed out progressing."),
            &stamp,
            true,
        );
    } else {
        plan.due_at(last_progress, deadline, now);
    }
    let mut status = json!({
        "observedGeneration": generation,
        "replicas": actual,
        "updatedReplicas": updated,
        "readyReplicas": ready,
        "availableReplicas": available,
        "unavailableReplicas": (total_spec - available).max(0),
        "conditions": conditions,
    });
    if !current["collisionCount"].is_null() {
        status["collisionCount"] = current["collisionCount"].clone();
    }
    if !same_status(current, &status) {
        plan.actions.push(Action::Patch {
            kind: Kind::Deployment,
            object: deployment.clone(),
            status: true,
            patch: json!({"status": status}),
        });
    }
}

/// Whether the status already says what `wanted` says (fields the API leaves out when zero
/// count as zero).
pub fn same_status(current: &Value, wanted: &Value) -> bool {
    wanted.as_object().into_iter().flatten().all(|(k, v)| {
        let have = &current[k];
        have == v || (have.is_null() && v.as_i64() == Some(0))
    })
}

/// The new ReplicaSet for the Deployment's current template.
fn new_replica_set(
    deployment: &DynamicObject,
    hash: &str,
    revision: i64,
    replicas: i64,
) -> DynamicObject {
    let spec = &deployment.data["spec"];
    let mut template = spec["template"].clone();
    template["metadata"]["labels"][TEMPLATE_HASH] = hash.into();
    let mut selector = spec["selector"].clone();
    selector["matchLabels"][TEMPLATE_HASH] = hash.into();
    let mut labels = spec["template"]["metadata"]["labels"].clone();
    labels[TEMPLATE_HASH] = hash.into();
    let mut rs_spec = json!({"replicas": replicas, "selector": selector, "template": template});
    if let Some(seconds) = spec["minReadySeconds"].as_i64() {
        rs_spec["minReadySeconds"] = seconds.into();
    }
    let max = replicas
        + int_or_percent(
            &spec["strategy"]["rollingUpdate"]["maxSurge"],
            super::replicas(spec),
            "25%",
            true,
        );
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {
            "name": format!("{}-{hash}", deployment.name_any()),
            "namespace": deployment.namespace(),
            "labels": labels,
            "annotations": {
                REVISION: revision.to_string(),
                "deployment.kubernetes.io/desired-replicas": super::replicas(spec).to_string(),
                "deployment.kubernetes.io/max-replicas": max.to_string(),
            },
            "ownerReferences": [controller_reference(deployment, Kind::Deployment)],
        },
        "spec": rs_spec,
    }))
    .expect("a well-formed ReplicaSet")
}

/// The template's hash as the controller names ReplicaSets by it: FNV-1a of the template
/// (without the hash label) and the collision count, written in the alphabet Kubernetes uses
/// for generated names (`web-66b6c48dd5`).
pub fn template_hash(template: &Value, collision_count: &Value) -> String {
    let mut template = template.clone();
    if let Some(labels) = template["metadata"]["labels"].as_object_mut() {
        labels.remove(TEMPLATE_HASH);
    }
    let mut hash: u32 = 0x811c_9dc5;
    let text = serde_json::to_string(&template).unwrap_or_default();
    let bytes = text.bytes().chain(
        collision_count
            .as_i64()
            .map(|c| c.to_string())
            .unwrap_or_default()
            .into_bytes(),
    );
    for byte in bytes {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    hash.to_string()
        .bytes()
        .map(|b| ALPHABET[usize::from(b) % ALPHABET.len()] as char)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(replicas: i64, available: i64) -> DynamicObject {
        serde_json::from_value(json!({
            "metadata": {"name": "rs"},
            "spec": {"replicas": replicas},
            "status": {"availableReplicas": available, "replicas": replicas},
        }))
        .unwrap()
    }

    /// 10 replicas at 25%: 3 surge, 2 unavailable, as upstream rounds them.
    #[test]
    fn a_rolling_update_moves_within_max_surge_and_max_unavailable() {
        let old = owned(10, 10);
        let new = owned(0, 0);
        let sets = [
            Owned {
                rs: &old,
                replicas: 10,
            },
            Owned {
                rs: &new,
                replicas: 0,
            },
        ];
        let mut replicas = [10, 0];
        roll(&sets, 1, 10, 3, 2, &mut replicas);
        // Up by the surge, down by what availability allows (10 + 3 - 8 = 5, of which the 3
        // new are unavailable: 2).
        assert_eq!(replicas, [8, 3]);
        // Once the new ones are available, the old go further.
        let old = owned(8, 8);
        let new = owned(3, 3);
        let sets = [
            Owned {
                rs: &old,
                replicas: 8,
            },
            Owned {
                rs: &new,
                replicas: 3,
            },
        ];
        let mut replicas = [8, 3];
        roll(&sets, 1, 10, 3, 2, &mut replicas);
        assert_eq!(replicas, [5, 5]);
    }

    #[test]
    fn the_template_hash_is_stable_and_ignores_its_own_label() {
        let template = json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "nginx"}]}});
        let hash = template_hash(&template, &Value::Null);
        let mut labelled = template.clone();
        labelled["metadata"]["labels"][TEMPLATE_HASH] = hash.clone().into();
        assert_eq!(template_hash(&labelled, &Value::Null), hash);
        assert_ne!(template_hash(&template, &json!(1)), hash);
        assert!(
            hash.chars()
                .all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c))
        );
    }

    #[test]
    fn percentages_round_as_kubernetes_rounds_them() {
        assert_eq!(int_or_percent(&json!("25%"), 10, "25%", true), 3);
        assert_eq!(int_or_percent(&json!("25%"), 10, "25%", false), 2);
        assert_eq!(int_or_percent(&Value::Null, 1, "25%", true), 1);
        assert_eq!(int_or_percent(&Value::Null, 1, "25%", false), 0);
        assert_eq!(int_or_percent(&json!(2), 10, "25%", false), 2);
    }
}
