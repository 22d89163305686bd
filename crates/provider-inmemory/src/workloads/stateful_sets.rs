//! The StatefulSet controller: Pods named by ordinal (`web-0`, `web-1`, ...), made one at a
//! time in order and each only once the ones before it are Running and Ready
//! (`podManagementPolicy: OrderedReady`, the default) or all at once (`Parallel`), removed
//! from the highest ordinal down, and replaced one at a time from the highest ordinal down to
//! `partition` when the template changes (`updateStrategy: RollingUpdate`). The status
//! carries the revisions `kubectl rollout status` compares. Each Pod's claims from the
//! `volumeClaimTemplates` (`data-web-0`) are made before it, kept when it goes, and deleted
//! with the StatefulSet only when `persistentVolumeClaimRetentionPolicy.whenDeleted` says
//! `Delete`.

use chrono::{DateTime, Utc};
use kube::ResourceExt;
use kube::api::DynamicObject;
use lariat_controllers::events::EventType;
use serde_json::json;

use super::deployments::{same_status, template_hash};
use super::replica_sets::{active, ready};
use super::world::{Objects, World, by_controller, deleting};

/// Pods by the uid of their controller.
type Owned<'a> = std::collections::HashMap<String, Vec<&'a DynamicObject>>;
use super::{Action, Kind, Note, Plan, controller_reference, replicas};

const COMPONENT: &str = "statefulset-controller";
/// At most this many Pods made per StatefulSet in one round.
const BURST: usize = 500;
pub const REVISION_LABEL: &str = "controller-revision-hash";

pub fn plan(world: &World, _now: DateTime<Utc>) -> Plan {
    let mut plan = Plan::default();
    let owned = by_controller(&world.pods);
    for set in world.stateful_sets.iter().filter(|s| !deleting(*s)) {
        reconcile(&owned, &world.claims, set, &mut plan);
    }
    plan
}

/// Ordinal `i`'s claims from the claim templates that are missing, made as the controller
/// makes them, just before the Pod (`data-web-0`).
fn claims_for(existing: &Objects<DynamicObject>, set: &DynamicObject, i: i64, plan: &mut Plan) {
    let spec = &set.data["spec"];
    let namespace = set.namespace().unwrap_or_default();
    let delete_with_set = spec["persistentVolumeClaimRetentionPolicy"]["whenDeleted"] == "Delete";
    let set_name = set.name_any();
    for template in spec["volumeClaimTemplates"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let name = claim_name(template, set, i);
        if existing.get(&namespace, &name).is_some() {
            continue;
        }
        // The template's labels, under the set's selector (which wins, as upstream).
        let mut labels = template["metadata"]["labels"].clone();
        if !labels.is_object() {
            labels = json!({});
        }
        let selector = spec["selector"]["matchLabels"].as_object();
        for (key, value) in selector.into_iter().flatten() {
            labels[key] = value.clone();
        }
        let mut metadata = json!({"name": name, "namespace": namespace, "labels": labels});
        if template["metadata"]["annotations"].is_object() {
            metadata["annotations"] = template["metadata"]["annotations"].clone();
        }
        if delete_with_set {
            let mut owner = controller_reference(set, Kind::StatefulSet);
            owner["controller"] = false.into();
            metadata["ownerReferences"] = json!([owner]);
        }
        let claim = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                           "metadata": metadata, "spec": template["spec"]});
        let Ok(claim) = serde_json::from_value(claim) else {
            continue;
        };
        plan.create_for(
            set,
            Kind::StatefulSet,
            COMPONENT,
            Kind::PersistentVolumeClaim,
            claim,
            format!("create Claim {{name}} Pod {set_name}-{i} in StatefulSet {set_name} success"),
        );
    }
}

/// The claim of template `template` for ordinal `i`: `TEMPLATE-SET-I`.
fn claim_name(template: &serde_json::Value, set: &DynamicObject, i: i64) -> String {
    format!(
        "{}-{}-{i}",
        template["metadata"]["name"].as_str().unwrap_or_default(),
        set.name_any()
    )
}

// Long: creation, scaling down and the rolling update in the controller's order, then status.
fn reconcile(owned: &Owned, claims: &Objects<DynamicObject>, set: &DynamicObject, plan: &mut Plan) {
    let uid = set.uid().unwrap_or_default();
    let namespace = set.namespace().unwrap_or_default();
    let name = set.name_any();
    let spec = &set.data["spec"];
    let wanted = replicas(spec);
    let start = spec["ordinals"]["start"].as_i64().unwrap_or(0);
    let revision = format!(
        "{name}-{}",
        template_hash(&spec["template"], &set.data["status"]["collisionCount"])
    );
    let ordinal = |pod: &DynamicObject| -> Option<i64> {
        pod.name_any()
            .strip_prefix(&format!("{name}-"))
            .and_then(|n| n.parse().ok())
    };
    let mut pods: Vec<(i64, &DynamicObject)> = owned
        .get(&uid)
        .into_iter()
        .flatten()
        .copied()
        .filter(|p| p.namespace().as_deref() == Some(&namespace))
        .filter_map(|p| Some((ordinal(p)?, p)))
        .collect();
    pods.sort_by_key(|(i, _)| *i);
    let by_ordinal: std::collections::HashMap<i64, &DynamicObject> =
        pods.iter().map(|(i, p)| (*i, *p)).collect();
    let parallel = spec["podManagementPolicy"] == "Parallel";
    let healthy = |p: &DynamicObject| active(p) && ready(p) && !deleting(p);
    let mut waiting = false;
    let mut made = 0;
    // Make the missing ordinals, in order (at most a burst per round).
    for i in start..start.saturating_add(wanted) {
        if made >= BURST {
            break;
        }
        match by_ordinal.get(&i).map(|p| (i, *p)).as_ref() {
            Some((_, pod)) => {
                // A finished or failed Pod is replaced, as the controller replaces it.
                if !active(pod) && !deleting(*pod) {
                    plan.actions.push(Action::Delete {
                        kind: Kind::Pod,
                        object: (*pod).clone(),
                    });
                    waiting = true;
                } else if !healthy(pod) {
                    waiting = true;
                }
            }
            None if !waiting || parallel => {
                claims_for(claims, set, i, plan);
                plan.create_for(
                    set,
                    Kind::StatefulSet,
                    COMPONENT,
                    Kind::Pod,
                    pod_for(set, i, &revision),
                    format!("create Pod {{name}} in StatefulSet {name} successful"),
                );
                made += 1;
                waiting = true;
            }
            None => {}
        }
        if waiting && !parallel {
            break;
        }
    }
    // Ordinals beyond the wanted ones go, the highest first (one at a time unless Parallel).
    let extra: Vec<&(i64, &DynamicObject)> = pods
        .iter()
        .filter(|(i, p)| (*i < start || *i >= start + wanted) && !deleting(*p))
        .rev()
        .collect();
    for (i, pod) in extra.iter().take(if parallel { usize::MAX } else { 1 }) {
        if !parallel
            && (waiting
                || pods
                    .iter()
                    .any(|(o, p)| o != i && !healthy(p) && *o < start + wanted))
        {
            break;
        }
        plan.actions.push(Action::Delete {
            kind: Kind::Pod,
            object: (*pod).clone(),
        });
        event(
            plan,
            set,
            "SuccessfulDelete",
            format!(
                "delete Pod {} in StatefulSet {name} successful",
                pod.name_any()
            ),
        );
        waiting = true;
    }
    // Roll: the highest ordinal still at an older revision, down to the partition, one at a
    // time once everything is Ready.
    let strategy = &spec["updateStrategy"];
    if strategy["type"] != "OnDelete" && !waiting {
        let partition = strategy["rollingUpdate"]["partition"].as_i64().unwrap_or(0);
        let stale = pods.iter().rev().find(|(i, p)| {
            *i >= start + partition
                && *i < start + wanted
                && p.labels().get(REVISION_LABEL) != Some(&revision)
        });
        if let Some((_, pod)) = stale
            && pods.iter().all(|(_, p)| healthy(p))
        {
            {
                plan.actions.push(Action::Delete {
                    kind: Kind::Pod,
                    object: (*pod).clone(),
                });
                event(
                    plan,
                    set,
                    "SuccessfulDelete",
                    format!(
                        "delete Pod {} in StatefulSet {name} successful",
                        pod.name_any()
                    ),
                );
            }
        }
    }
    status(set, &pods, &revision, plan);
}

fn event(plan: &mut Plan, set: &DynamicObject, reason: &'static str, message: String) {
    plan.actions.push(Action::Event {
        kind: Kind::StatefulSet,
        object: set.clone(),
        note: Note {
            component: COMPONENT,
            type_: EventType::Normal,
            reason,
            message,
            once: false,
        },
    });
}

fn status(set: &DynamicObject, pods: &[(i64, &DynamicObject)], revision: &str, plan: &mut Plan) {
    let current = &set.data["status"];
    let live: Vec<&DynamicObject> = pods.iter().map(|(_, p)| *p).filter(|p| active(p)).collect();
    let at = |r: &str| {
        live.iter()
            .filter(|p| p.labels().get(REVISION_LABEL).map(String::as_str) == Some(r))
            .count()
    };
    let updated = at(revision);
    let wanted = replicas(&set.data["spec"]) as usize;
    // The current revision becomes the update revision once every Pod runs it.
    let current_revision = match current["currentRevision"].as_str() {
        Some(r) if !(updated == wanted && live.len() == wanted) => r.to_string(),
        _ => revision.to_string(),
    };
    let ready_count = live.iter().filter(|p| ready(p)).count();
    let status = json!({
        "observedGeneration": set.metadata.generation.unwrap_or(0),
        "replicas": live.len(),
        "readyReplicas": ready_count,
        "availableReplicas": ready_count,
        "currentReplicas": at(&current_revision),
        "updatedReplicas": updated,
        "currentRevision": current_revision,
        "updateRevision": revision,
        "collisionCount": current["collisionCount"].as_i64().unwrap_or(0),
    });
    if !same_status(current, &status) {
        plan.actions.push(Action::Patch {
            kind: Kind::StatefulSet,
            object: set.clone(),
            status: true,
            patch: json!({"status": status}),
        });
    }
}

/// The Pod of ordinal `i`: named and labelled by it, with the set's revision.
fn pod_for(set: &DynamicObject, i: i64, revision: &str) -> DynamicObject {
    let name = format!("{}-{i}", set.name_any());
    let template = &set.data["spec"]["template"];
    let mut labels = template["metadata"]["labels"].clone();
    if !labels.is_object() {
        labels = json!({});
    }
    labels[REVISION_LABEL] = revision.into();
    labels["statefulset.kubernetes.io/pod-name"] = name.clone().into();
    labels["apps.kubernetes.io/pod-index"] = i.to_string().into();
    let mut metadata = json!({
        "name": name,
        "namespace": set.namespace(),
        "labels": labels,
        "ownerReferences": [controller_reference(set, Kind::StatefulSet)],
    });
    if !template["metadata"]["annotations"].is_null() {
        metadata["annotations"] = template["metadata"]["annotations"].clone();
    }
    let mut spec = template["spec"].clone();
    spec["hostname"] = name.clone().into();
    // Each claim template's volume is the ordinal's own claim.
    for claim in set.data["spec"]["volumeClaimTemplates"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let volume_name = claim["metadata"]["name"].clone();
        let volume = json!({"name": volume_name,
                            "persistentVolumeClaim": {"claimName": claim_name(claim, set, i)}});
        let mut volumes = spec["volumes"].as_array().cloned().unwrap_or_default();
        volumes.retain(|v| v["name"] != volume_name);
        volumes.push(volume);
        spec["volumes"] = serde_json::Value::Array(volumes);
    }
    if let Some(service) = set.data["spec"]["serviceName"]
        .as_str()
        .filter(|s| !s.is_empty())
    {
        spec["subdomain"] = service.into();
    }
    serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}),
    )
    .expect("a well-formed Pod")
}
