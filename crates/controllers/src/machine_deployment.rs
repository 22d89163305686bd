//! The MachineDeployment controller: one MachineSet per distinct machine template (named by a
//! hash of it), scaled to `spec.replicas`; a template or version change rolls machines over to
//! a new set within `maxSurge` and `maxUnavailable`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::runtime::controller::Action;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::cluster::CLUSTER_NAME_LABEL;
use crate::events::EventType;
use crate::object::{self, i64_at, owner_reference, patch, patch_status, str_at};
use crate::{Context, Error, capi};

pub const DEPLOYMENT_NAME_LABEL: &str = "cluster.x-k8s.io/deployment-name";
pub const TEMPLATE_HASH_LABEL: &str = "machine-template-hash";

/// A short, stable hash of the machine template: equal templates share a MachineSet.
pub fn template_hash(template: &Value) -> String {
    let digest = Sha256::digest(template.to_string().as_bytes());
    digest
        .iter()
        .take(5)
        .map(|b| format!("{:02x}", b))
        .collect::<String>()[..10]
        .to_string()
}

/// `maxSurge`/`maxUnavailable` as absolute counts: integers, or percentages of `replicas`
/// (surge rounds up, unavailability down, as in Kubernetes).
pub fn resolve(value: &Value, replicas: i64, round_up: bool, default: i64) -> i64 {
    match value {
        Value::Number(n) => n.as_i64().unwrap_or(default),
        Value::String(s) => match s.strip_suffix('%').and_then(|p| p.parse::<f64>().ok()) {
            Some(percent) => {
                let exact = percent * replicas as f64 / 100.0;
                (if round_up {
                    exact.ceil()
                } else {
                    exact.floor()
                }) as i64
            }
            None => s.parse().unwrap_or(default),
        },
        _ => default,
    }
}

fn replicas_of(set: &DynamicObject) -> i64 {
    i64_at(&set.data, &["spec", "replicas"]).unwrap_or(0)
}

/// A set's available Machines, never more than it is asked to keep: right after a scale-down
/// its status still counts the Machines it is about to delete, and counting them would let the
/// next reconcile take the same room again (below `maxUnavailable`).
fn available_of(set: &DynamicObject) -> i64 {
    i64_at(&set.data, &["status", "availableReplicas"])
        .unwrap_or(0)
        .min(replicas_of(set))
}

pub async fn reconcile(deployment: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Error> {
    if deployment.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let namespace = deployment.namespace().unwrap_or_default();
    let name = deployment.name_any();
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &namespace, &capi("MachineDeployment"));
    let sets_api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &namespace, &capi("MachineSet"));
    let cluster_name = str_at(&deployment.data, &["spec", "clusterName"])
        .unwrap_or_default()
        .to_string();
    let Some(cluster) = ctx.cluster_of(&deployment).await? else {
        return Ok(Action::requeue(Duration::from_secs(2)));
    };
    if object::bool_at(&deployment.data, &["spec", "paused"])
        || object::bool_at(&cluster.data, &["spec", "paused"])
    {
        return Ok(Action::await_change());
    }
    let mut labels = BTreeMap::new();
    labels.insert(CLUSTER_NAME_LABEL.to_string(), cluster_name.clone());
    object::ensure_labels(&api, &deployment, &labels).await?;
    if deployment.owner_references().is_empty() {
        object::ensure_owner(
            &api,
            &deployment,
            owner_reference(&cluster, "cluster.x-k8s.io/v1beta1", "Cluster", false),
        )
        .await?;
    }

    for reference in [
        &deployment.data["spec"]["template"]["spec"]["infrastructureRef"],
        &deployment.data["spec"]["template"]["spec"]["bootstrap"]["configRef"],
    ] {
        crate::external::adopt_template(&ctx.caches, &namespace, reference, &cluster).await?;
    }

    let replicas = i64_at(&deployment.data, &["spec", "replicas"])
        .unwrap_or(1)
        .max(0);
    let template = &deployment.data["spec"]["template"];
    let hash = template_hash(template);
    let uid = deployment.uid().unwrap_or_default();
    let sets: Vec<Arc<DynamicObject>> = ctx
        .caches
        .of(&capi("MachineSet"))
        .indexed(crate::cache::IndexKey::Owner(&uid))
        .await?
        .into_iter()
        .filter(|s| s.metadata.deletion_timestamp.is_none())
        .collect();
    let (current, old): (Vec<Arc<DynamicObject>>, Vec<Arc<DynamicObject>>) = sets
        .into_iter()
        .partition(|s| s.labels().get(TEMPLATE_HASH_LABEL) == Some(&hash));
    let current = match current.into_iter().next() {
        Some(set) => set,
        None => Arc::new(
            create_set(
                &ctx,
                &deployment,
                &cluster_name,
                &hash,
                if old.is_empty() { replicas } else { 0 },
            )
            .await?,
        ),
    };

    // Rolling update (the only strategy lariat implements; OnDelete leaves old sets alone).
    let strategy = &deployment.data["spec"]["strategy"];
    let on_delete = strategy["type"] == "OnDelete";
    let max_surge = resolve(&strategy["rollingUpdate"]["maxSurge"], replicas, true, 1).max(0);
    let max_unavailable = resolve(
        &strategy["rollingUpdate"]["maxUnavailable"],
        replicas,
        false,
        0,
    )
    .max(0);
    let max_surge = if max_surge == 0 && max_unavailable == 0 {
        1
    } else {
        max_surge
    };
    let old_replicas: i64 = old.iter().map(|s| replicas_of(s)).sum();
    let total = replicas_of(&current) + old_replicas;

    if old.is_empty() || on_delete {
        if replicas_of(&current) != replicas {
            scale(&ctx, &deployment, &sets_api, &current, replicas).await?;
        }
    } else {
        // Scale the new set up as far as the surge allows.
        let room = replicas + max_surge - total;
        let target_new = (replicas_of(&current) + room.max(0)).min(replicas);
        if target_new > replicas_of(&current) {
            scale(&ctx, &deployment, &sets_api, &current, target_new).await?;
        }
        // Scale old sets down as far as availability allows.
        let available: i64 =
            available_of(&current) + old.iter().map(|s| available_of(s)).sum::<i64>();
        let min_available = replicas - max_unavailable;
        let mut can_remove = (available - min_available).max(0);
        // Machines of old sets that are not available can always go.
        for set in &old {
            let unavailable = (replicas_of(set) - available_of(set)).max(0);
            can_remove += unavailable;
        }
        let excess = (total - replicas).max(0).max(if target_new >= replicas {
            old_replicas
        } else {
            0
        });
        let mut to_remove = can_remove.min(excess.max(can_remove.min(old_replicas)));
        for set in &old {
            if to_remove == 0 {
                break;
            }
            let down = to_remove.min(replicas_of(set));
            if down > 0 {
                scale(&ctx, &deployment, &sets_api, set, replicas_of(set) - down).await?;
                to_remove -= down;
            }
        }
        for set in old.iter().filter(|s| {
            replicas_of(s) == 0 && i64_at(&s.data, &["status", "replicas"]).unwrap_or(0) == 0
        }) {
            let _ = sets_api
                .delete(&set.name_any(), &DeleteParams::default())
                .await;
        }
    }

    let all: Vec<&DynamicObject> = std::iter::once(&current)
        .chain(old.iter())
        .map(|s| s.as_ref())
        .collect();
    let sum = |path: &str| {
        all.iter()
            .map(|s| i64_at(&s.data, &["status", path]).unwrap_or(0))
            .sum::<i64>()
    };
    let (actual, ready, available) = (
        sum("replicas"),
        sum("readyReplicas"),
        sum("availableReplicas"),
    );
    let updated = i64_at(&current.data, &["status", "replicas"]).unwrap_or(0);
    let phase = if actual < replicas {
        "ScalingUp"
    } else if actual > replicas {
        "ScalingDown"
    } else if available == replicas && updated == replicas {
        "Running"
    } else {
        "ScalingUp"
    };
    let status = json!({
        "replicas": actual,
        "updatedReplicas": updated,
        "readyReplicas": ready,
        "availableReplicas": available,
        "unavailableReplicas": (replicas - available).max(0),
        "selector": format!("{DEPLOYMENT_NAME_LABEL}={name}"),
        "phase": phase,
        "observedGeneration": deployment.metadata.generation.unwrap_or(0),
    });
    let changed = status
        .as_object()
        .expect("object")
        .iter()
        .any(|(k, v)| deployment.data["status"][k] != *v);
    if changed {
        patch_status(&api, &name, status).await?;
    }
    // Its MachineSets' changes wake it.
    Ok(crate::resync())
}

/// Records a Normal Event on the MachineDeployment.
async fn event(ctx: &Context, object: &DynamicObject, reason: &str, message: &str) {
    ctx.events
        .publish(
            object,
            "MachineDeployment",
            EventType::Normal,
            reason,
            message,
        )
        .await;
}

/// Sets one MachineSet's replicas, and says so in an Event on the deployment.
async fn scale(
    ctx: &Context,
    deployment: &DynamicObject,
    sets_api: &Api<DynamicObject>,
    set: &DynamicObject,
    replicas: i64,
) -> Result<(), Error> {
    let from = replicas_of(set);
    patch(
        sets_api,
        &set.name_any(),
        json!({"spec": {"replicas": replicas}}),
    )
    .await?;
    let direction = if replicas > from { "up" } else { "down" };
    let message = format!(
        "Scaled {direction} MachineSet {:?} from {from} to {replicas} replicas",
        set.name_any()
    );
    event(ctx, deployment, "SuccessfulScale", &message).await;
    Ok(())
}

async fn create_set(
    ctx: &Context,
    deployment: &DynamicObject,
    cluster: &str,
    hash: &str,
    replicas: i64,
) -> Result<DynamicObject, Error> {
    let namespace = deployment.namespace().unwrap_or_default();
    let name = deployment.name_any();
    let mut template = deployment.data["spec"]["template"].clone();
    let mut labels = template["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    labels.insert(DEPLOYMENT_NAME_LABEL.into(), json!(name));
    labels.insert(TEMPLATE_HASH_LABEL.into(), json!(hash));
    labels.insert(CLUSTER_NAME_LABEL.into(), json!(cluster));
    template["metadata"]["labels"] = Value::Object(labels.clone());
    let mut match_labels = deployment.data["spec"]["selector"]["matchLabels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    match_labels.insert(TEMPLATE_HASH_LABEL.into(), json!(hash));
    match_labels.insert(DEPLOYMENT_NAME_LABEL.into(), json!(name));
    let set = json!({
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "MachineSet",
        "metadata": {
            "name": format!("{name}-{}", &hash[..5]),
            "namespace": namespace,
            "labels": labels,
            "ownerReferences": [owner_reference(deployment, "cluster.x-k8s.io/v1beta1", "MachineDeployment", true)],
        },
        "spec": {
            "clusterName": cluster,
            "replicas": replicas,
            "deletePolicy": deployment.data["spec"]["strategy"]["rollingUpdate"]["deletePolicy"].as_str().unwrap_or("Random"),
            "selector": {"matchLabels": match_labels},
            "template": template,
        }
    });
    let set: DynamicObject =
        serde_json::from_value(set).map_err(|e| Error::Invalid(e.to_string()))?;
    let sets_api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &namespace, &capi("MachineSet"));
    match sets_api.create(&PostParams::default(), &set).await {
        Ok(created) => {
            let message = format!(
                "Created MachineSet {:?} with {replicas} replicas",
                created.name_any()
            );
            event(ctx, deployment, "SuccessfulCreate", &message).await;
            Ok(created)
        }
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(sets_api.get(&set.name_any()).await?),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn surge_and_unavailability_resolve_like_kubernetes() {
        for (value, replicas, round_up, expect) in [
            (json!(2), 10, true, 2),
            (json!("25%"), 10, true, 3),
            (json!("25%"), 10, false, 2),
            (json!("0%"), 3, true, 0),
            (Value::Null, 3, true, 1),
        ] {
            assert_eq!(
                resolve(&value, replicas, round_up, 1),
                expect,
                "{value} of {replicas}"
            );
        }
    }

    #[test]
    fn a_set_just_scaled_down_counts_no_more_available_machines_than_it_keeps() {
        // Scaled from 3 to 2 a moment ago: its status still counts the Machine it is about to
        // delete. Counting it would let the next reconcile scale down again, below
        // maxUnavailable.
        let set: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "MachineSet",
            "metadata": {"name": "old"},
            "spec": {"replicas": 2},
            "status": {"availableReplicas": 3},
        }))
        .unwrap();
        assert_eq!(available_of(&set), 2);
    }

    #[test]
    fn equal_templates_hash_equal() {
        let a = json!({"spec": {"version": "v1.30.0"}});
        assert_eq!(template_hash(&a), template_hash(&a.clone()));
        assert_ne!(
            template_hash(&a),
            template_hash(&json!({"spec": {"version": "v1.31.0"}}))
        );
    }
}
