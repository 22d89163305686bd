//! The MachineDeployment controller: one MachineSet per distinct machine template (named by a
//! hash of it), scaled to `spec.replicas`; a template or version change rolls machines over to
//! a new set within `maxSurge` and `maxUnavailable`.

use crate::paused::V1Beta2Conditions;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use kube::runtime::controller::Action;
use lariat_api::capi::machine_deployment::{MachineDeploymentPhase, MachineDeploymentStrategyType};
use lariat_api::capi::machine_set::MachineSetDeletePolicy;
use lariat_api::capi::{MachineDeployment, MachineSet, MachineSetSpec, MachineTemplateSpec};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::events::EventType;
use crate::external::Reference;
use crate::object::{self, owner_reference, patch, patch_status};
use crate::{Context, Error};
use lariat_api::capi::labels::CLUSTER_NAME as CLUSTER_NAME_LABEL;

pub use lariat_api::capi::labels::MACHINE_DEPLOYMENT_NAME as DEPLOYMENT_NAME_LABEL;
use lariat_api::capi::labels::format_value;
pub const TEMPLATE_HASH_LABEL: &str = "machine-template-hash";

/// A short, stable hash of the machine template: equal templates share a MachineSet. The
/// template is hashed as its JSON, fields in the struct's order.
pub fn template_hash(template: &MachineTemplateSpec) -> String {
    let json = serde_json::to_value(template).unwrap_or_default();
    let digest = Sha256::digest(json.to_string().as_bytes());
    digest
        .iter()
        .take(5)
        .map(|b| format!("{:02x}", b))
        .collect::<String>()[..10]
        .to_string()
}

/// `maxSurge`/`maxUnavailable` (and `maxUnhealthy`) as absolute counts: integers, or
/// percentages of `replicas` (surge rounds up, unavailability down, as in Kubernetes).
pub fn resolve(value: Option<&IntOrString>, replicas: i64, round_up: bool, default: i64) -> i64 {
    match value {
        Some(IntOrString::Int(n)) => i64::from(*n),
        Some(IntOrString::String(s)) => {
            match s.strip_suffix('%').and_then(|p| p.parse::<f64>().ok()) {
                Some(percent) => {
                    let exact = percent * replicas as f64 / 100.0;
                    (if round_up {
                        exact.ceil()
                    } else {
                        exact.floor()
                    }) as i64
                }
                None => s.parse().unwrap_or(default),
            }
        }
        None => default,
    }
}

fn replicas_of(set: &MachineSet) -> i64 {
    i64::from(set.spec.replicas.unwrap_or(0))
}

/// A set's Machines as its status counts them.
fn counted(
    set: &MachineSet,
    count: impl Fn(&lariat_api::capi::MachineSetStatus) -> Option<i32>,
) -> i64 {
    i64::from(set.status.as_ref().and_then(count).unwrap_or(0))
}

/// A set's available Machines, never more than it is asked to keep: right after a scale-down
/// its status still counts the Machines it is about to delete, and counting them would let the
/// next reconcile take the same room again (below `maxUnavailable`).
fn available_of(set: &MachineSet) -> i64 {
    counted(set, |s| s.available_replicas).min(replicas_of(set))
}

pub async fn reconcile(
    deployment: Arc<MachineDeployment>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    if deployment.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let namespace = deployment.namespace().unwrap_or_default();
    let api: Api<MachineDeployment> = Api::namespaced(ctx.client.clone(), &namespace);
    let sets_api: Api<MachineSet> = Api::namespaced(ctx.client.clone(), &namespace);
    let cluster_name = deployment.spec.cluster_name.clone();
    let Some(cluster) = ctx.cluster(&namespace, &cluster_name).await? else {
        return Ok(Action::requeue(Duration::from_secs(2)));
    };
    let conditions = deployment.v1beta2_conditions();
    if crate::paused::check(&api, &deployment.metadata, conditions, Some(&cluster)).await? {
        return Ok(Action::await_change());
    }
    // Its own `spec.paused` holds its rollout, as a Deployment's does: not Cluster API's
    // paused contract, so no `Paused` condition says it.
    if deployment.spec.paused == Some(true) {
        return Ok(Action::await_change());
    }
    let mut labels = BTreeMap::new();
    labels.insert(CLUSTER_NAME_LABEL.to_string(), cluster_name.clone());
    object::ensure_labels(&api, &deployment, &labels).await?;
    if deployment.owner_references().is_empty() {
        object::ensure_owner(&api, &deployment, owner_reference(cluster.as_ref(), false)).await?;
    }

    let template = &deployment.spec.template;
    if let Some(spec) = &template.spec {
        for reference in [
            Some(&spec.infrastructure_ref),
            spec.bootstrap.config_ref.as_ref(),
        ] {
            let reference = reference.and_then(Reference::from_object_reference);
            crate::external::adopt_template(&ctx.caches, &namespace, reference, &cluster).await?;
        }
    }

    let replicas = i64::from(deployment.spec.replicas.unwrap_or(1).max(0));
    let hash = template_hash(template);
    let uid = deployment.uid().unwrap_or_default();
    let sets: Vec<Arc<MachineSet>> = ctx
        .caches
        .typed::<MachineSet>()
        .indexed(crate::cache::IndexKey::Owner(&uid))
        .await?
        .into_iter()
        .filter(|s| s.metadata.deletion_timestamp.is_none())
        .collect();
    let (current, old): (Vec<Arc<MachineSet>>, Vec<Arc<MachineSet>>) = sets
        .into_iter()
        .partition(|s| s.labels().get(TEMPLATE_HASH_LABEL) == Some(&hash));
    let current = match current.into_iter().next() {
        Some(set) => set,
        None => Arc::new(
            create_set(
                &ctx,
                &deployment,
                &hash,
                if old.is_empty() { replicas } else { 0 },
            )
            .await?,
        ),
    };

    roll(&ctx, &deployment, &sets_api, &current, &old, replicas).await?;
    report_status(&api, &deployment, &current, &old, replicas).await?;
    // Its MachineSets' changes wake it.
    Ok(crate::resync())
}

/// Scales the current set and the old ones towards `replicas`: the current one up as far as
/// `maxSurge` allows, the old ones down as far as `maxUnavailable` allows, and deletes the
/// old sets that are empty. Rolling update is the only strategy lariat implements; OnDelete
/// leaves old sets alone.
async fn roll(
    ctx: &Context,
    deployment: &MachineDeployment,
    sets_api: &Api<MachineSet>,
    current: &Arc<MachineSet>,
    old: &[Arc<MachineSet>],
    replicas: i64,
) -> Result<(), Error> {
    let strategy = deployment.spec.strategy.as_ref();
    let on_delete = strategy.and_then(|s| s.type_) == Some(MachineDeploymentStrategyType::OnDelete);
    let rolling = strategy.and_then(|s| s.rolling_update.as_ref());
    let max_surge = resolve(
        rolling.and_then(|r| r.max_surge.as_ref()),
        replicas,
        true,
        1,
    )
    .max(0);
    let max_unavailable = resolve(
        rolling.and_then(|r| r.max_unavailable.as_ref()),
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
    let total = replicas_of(current) + old_replicas;

    if old.is_empty() || on_delete {
        if replicas_of(current) != replicas {
            scale(ctx, deployment, sets_api, current, replicas).await?;
        }
    } else {
        // Scale the new set up as far as the surge allows.
        let room = replicas + max_surge - total;
        let target_new = (replicas_of(current) + room.max(0)).min(replicas);
        if target_new > replicas_of(current) {
            scale(ctx, deployment, sets_api, current, target_new).await?;
        }
        // Scale old sets down as far as availability allows.
        let available: i64 =
            available_of(current) + old.iter().map(|s| available_of(s)).sum::<i64>();
        let min_available = replicas - max_unavailable;
        let mut can_remove = (available - min_available).max(0);
        // Machines of old sets that are not available can always go.
        for set in old {
            let unavailable = (replicas_of(set) - available_of(set)).max(0);
            can_remove += unavailable;
        }
        let excess = (total - replicas).max(0).max(if target_new >= replicas {
            old_replicas
        } else {
            0
        });
        let mut to_remove = can_remove.min(excess.max(can_remove.min(old_replicas)));
        for set in old {
            if to_remove == 0 {
                break;
            }
            let down = to_remove.min(replicas_of(set));
            if down > 0 {
                scale(ctx, deployment, sets_api, set, replicas_of(set) - down).await?;
                to_remove -= down;
            }
        }
        for set in old
            .iter()
            .filter(|s| replicas_of(s) == 0 && counted(s, |s| s.replicas) == 0)
        {
            let _ = sets_api
                .delete(&set.name_any(), &DeleteParams::default())
                .await;
        }
    }

    Ok(())
}

/// Writes the deployment's status from its sets' counts, when it changed.
async fn report_status(
    api: &Api<MachineDeployment>,
    deployment: &MachineDeployment,
    current: &Arc<MachineSet>,
    old: &[Arc<MachineSet>],
    replicas: i64,
) -> Result<(), Error> {
    let all: Vec<&MachineSet> = std::iter::once(current)
        .chain(old.iter())
        .map(|s| s.as_ref())
        .collect();
    let sum = |count: fn(&lariat_api::capi::MachineSetStatus) -> Option<i32>| {
        all.iter().map(|s| counted(s, count)).sum::<i64>()
    };
    let (actual, ready, available) = (
        sum(|s| s.replicas),
        sum(|s| s.ready_replicas),
        sum(|s| s.available_replicas),
    );
    let updated = counted(current, |s| s.replicas);
    let phase = if actual < replicas {
        MachineDeploymentPhase::ScalingUp
    } else if actual > replicas {
        MachineDeploymentPhase::ScalingDown
    } else if available == replicas && updated == replicas {
        MachineDeploymentPhase::Running
    } else {
        MachineDeploymentPhase::ScalingUp
    };
    let before = deployment.status.clone().unwrap_or_default();
    let mut status = before.clone();
    status.replicas = Some(actual as i32);
    status.updated_replicas = Some(updated as i32);
    status.ready_replicas = Some(ready as i32);
    status.available_replicas = Some(available as i32);
    status.unavailable_replicas = Some((replicas - available).max(0) as i32);
    status.selector = Some(format!(
        "{DEPLOYMENT_NAME_LABEL}={}",
        format_value(&deployment.name_any())
    ));
    status.phase = Some(phase);
    status.observed_generation = Some(deployment.metadata.generation.unwrap_or(0));
    if status != before {
        let status = serde_json::to_value(&status).map_err(|e| Error::Invalid(e.to_string()))?;
        patch_status(api, &deployment.name_any(), status).await?;
    }
    Ok(())
}

/// Records a Normal Event on the MachineDeployment.
async fn event(ctx: &Context, deployment: &MachineDeployment, reason: &str, message: &str) {
    ctx.events
        .publish(
            deployment,
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
    deployment: &MachineDeployment,
    sets_api: &Api<MachineSet>,
    set: &MachineSet,
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
    deployment: &MachineDeployment,
    hash: &str,
    replicas: i64,
) -> Result<MachineSet, Error> {
    let namespace = deployment.namespace().unwrap_or_default();
    let name = deployment.name_any();
    let mut template = deployment.spec.template.clone();
    let mut metadata = template.metadata.take().unwrap_or_default();
    let mut labels = metadata.labels.take().unwrap_or_default();
    labels.insert(DEPLOYMENT_NAME_LABEL.into(), format_value(&name));
    labels.insert(TEMPLATE_HASH_LABEL.into(), hash.to_string());
    labels.insert(
        CLUSTER_NAME_LABEL.into(),
        deployment.spec.cluster_name.clone(),
    );
    metadata.labels = Some(labels.clone());
    template.metadata = Some(metadata);
    let mut match_labels = deployment
        .spec
        .selector
        .match_labels
        .clone()
        .unwrap_or_default();
    match_labels.insert(TEMPLATE_HASH_LABEL.into(), hash.to_string());
    match_labels.insert(DEPLOYMENT_NAME_LABEL.into(), format_value(&name));
    let owner = serde_json::from_value(owner_reference(deployment, true))
        .map_err(|e| Error::Invalid(e.to_string()))?;
    let delete_policy = deployment
        .spec
        .strategy
        .as_ref()
        .and_then(|s| s.rolling_update.as_ref())
        .and_then(|r| r.delete_policy)
        .unwrap_or(MachineSetDeletePolicy::Random);
    let set = MachineSet {
        metadata: ObjectMeta {
            name: Some(format!("{name}-{}", &hash[..5])),
            namespace: Some(namespace.clone()),
            labels: Some(labels),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: MachineSetSpec {
            cluster_name: deployment.spec.cluster_name.clone(),
            replicas: Some(replicas as i32),
            delete_policy: Some(delete_policy),
            selector: LabelSelector {
                match_labels: Some(match_labels),
                ..Default::default()
            },
            template: Some(template),
            ..Default::default()
        },
        status: None,
    };
    let sets_api: Api<MachineSet> = Api::namespaced(ctx.client.clone(), &namespace);
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
        let percent = |p: &str| IntOrString::String(p.to_string());
        for (value, replicas, round_up, expect) in [
            (Some(IntOrString::Int(2)), 10, true, 2),
            (Some(percent("25%")), 10, true, 3),
            (Some(percent("25%")), 10, false, 2),
            (Some(percent("0%")), 3, true, 0),
            (None, 3, true, 1),
        ] {
            assert_eq!(
                resolve(value.as_ref(), replicas, round_up, 1),
                expect,
                "{value:?} of {replicas}"
            );
        }
    }

    #[test]
    fn a_set_just_scaled_down_counts_no_more_available_machines_than_it_keeps() {
        // Scaled from 3 to 2 a moment ago: its status still counts the Machine it is about to
        // delete. Counting it would let the next reconcile scale down again, below
        // maxUnavailable.
        let set: MachineSet = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "MachineSet",
            "metadata": {"name": "old"},
            "spec": {"clusterName": "c", "replicas": 2, "selector": {}},
            "status": {"availableReplicas": 3},
        }))
        .unwrap();
        assert_eq!(available_of(&set), 2);
    }

    #[test]
    fn equal_templates_hash_equal() {
        let template = |version: &str| -> MachineTemplateSpec {
            serde_json::from_value(json!({"spec": {
                "clusterName": "c", "version": version, "bootstrap": {},
                "infrastructureRef": {"kind": "InMemoryMachineTemplate", "name": "t"},
            }}))
            .unwrap()
        };
        assert_eq!(
            template_hash(&template("v1.30.0")),
            template_hash(&template("v1.30.0"))
        );
        assert_ne!(
            template_hash(&template("v1.30.0")),
            template_hash(&template("v1.31.0"))
        );
    }
}
