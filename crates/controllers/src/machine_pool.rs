//! MachinePool, which Cluster API core leaves to its experimental controller: the pool joins its
//! Cluster (label and owner), claims its infrastructure object and bootstrap config (the
//! infrastructure provider reads the pool's replicas from there and scales the group), and its
//! status follows what the provider reports. There is no Machine per instance.

use crate::paused::V1Beta2Conditions;
use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use lariat_api::capi::{Cluster, Condition, ConditionStatus, MachinePool};
use serde_json::json;

use crate::external::delete_referenced;
use crate::external::{self, Reference};
use crate::object::{
    ensure_finalizer, ensure_labels, ensure_owner, owner_reference, patch_status, remove_finalizer,
};
use crate::{Context, Error, conditions};
use lariat_api::capi::labels::CLUSTER_NAME as CLUSTER_NAME_LABEL;

pub const FINALIZER: &str = "machinepool.cluster.x-k8s.io";

pub async fn reconcile(pool: Arc<MachinePool>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = pool.namespace().unwrap_or_default();
    let name = pool.name_any();
    let api: Api<MachinePool> = Api::namespaced(ctx.client.clone(), &namespace);
    // Paused before deletion: see `cluster::object_paused`.
    let cluster = ctx.cluster(&namespace, &pool.spec.cluster_name).await?;
    let conditions = pool.v1beta2_conditions();
    if crate::paused::check(&api, &pool.metadata, conditions, cluster.as_deref()).await? {
        return Ok(Action::await_change());
    }
    if pool.metadata.deletion_timestamp.is_some() {
        return delete(&ctx, &api, &pool).await;
    }
    if ensure_finalizer(&api, pool.as_ref(), FINALIZER).await? {
        return Ok(Action::await_change());
    }
    let cluster_name = pool.spec.cluster_name.clone();
    let cluster_label =
        std::collections::BTreeMap::from([(CLUSTER_NAME_LABEL.to_string(), cluster_name.clone())]);
    ensure_labels(&api, pool.as_ref(), &cluster_label).await?;
    let Some(cluster) = ctx
        .caches
        .typed::<Cluster>()
        .get(&namespace, &cluster_name)
        .await?
    else {
        return Ok(Action::requeue(Duration::from_secs(10)));
    };
    ensure_owner(
        &api,
        pool.as_ref(),
        owner_reference(cluster.as_ref(), false),
    )
    .await?;

    let Some(spec) = &pool.spec.template.spec else {
        return Err(Error::Invalid(format!(
            "MachinePool {namespace}/{name} has no spec.template.spec"
        )));
    };
    let infrastructure = Reference::from_object_reference(&spec.infrastructure_ref);
    let bootstrap = spec
        .bootstrap
        .config_ref
        .as_ref()
        .and_then(Reference::from_object_reference);
    let infrastructure_object = claim(&ctx, &pool, infrastructure.clone(), &cluster_label).await?;
    claim(&ctx, &pool, bootstrap.clone(), &cluster_label).await?;

    let desired = pool.spec.replicas.unwrap_or(1);
    let infrastructure_ready = infrastructure_object
        .as_deref()
        .is_some_and(external::ready);
    let replicas = infrastructure_object
        .as_ref()
        .and_then(|o| o.data["status"]["replicas"].as_i64())
        .unwrap_or(0) as i32;
    let bootstrap_config = match &bootstrap {
        Some(reference) => reference.get(&ctx.caches, &namespace).await?,
        None => None,
    };
    // A pool whose provider boots instances itself (an EKS managed node group with no config)
    // has nothing to wait for.
    let bootstrap_ready = bootstrap.is_none()
        || bootstrap_config.as_deref().is_some_and(external::ready)
        || spec.bootstrap.data_secret_name.is_some();
    // As Cluster API's: the config's data Secret is named in the pool, where the
    // infrastructure provider reads it.
    if let Some(data_secret) = bootstrap_config
        .as_deref()
        .filter(|config| external::ready(config))
        .and_then(|config| config.data["status"]["dataSecretName"].as_str())
        && spec.bootstrap.data_secret_name.as_deref() != Some(data_secret)
    {
        crate::object::patch(
            &api,
            &name,
            json!({"spec": {"template": {"spec": {"bootstrap": {"dataSecretName": data_secret}}}}}),
        )
        .await?;
        return Ok(Action::await_change());
    }
    let failure = infrastructure_object.as_deref().and_then(external::failure);
    let phase = if failure.is_some() {
        "Failed"
    } else if !infrastructure_ready {
        "Provisioning"
    } else if replicas < desired {
        "ScalingUp"
    } else if replicas > desired {
        "ScalingDown"
    } else {
        "Running"
    };
    let ready_replicas = if infrastructure_ready { replicas } else { 0 };
    let conditions = pool_conditions(
        &pool,
        infrastructure.as_ref(),
        infrastructure_object.as_deref(),
        bootstrap_ready,
        (ready_replicas, desired),
    );
    let provider_ids = infrastructure_object
        .as_ref()
        .and_then(|o| o.data["spec"]["providerIDList"].as_array().cloned());
    let status = json!({
        "replicas": replicas,
        // Instances are counted ready once the provider reports them in the group (the Nodes
        // of a cluster lariat cannot reach are not looked at).
        "readyReplicas": ready_replicas,
        "availableReplicas": ready_replicas,
        "unavailableReplicas": (desired - ready_replicas).max(0),
        "conditions": conditions,
        "infrastructureReady": infrastructure_ready,
        "bootstrapReady": bootstrap_ready,
        "phase": phase,
        "failureReason": failure.as_ref().map(|f| f.0.clone()),
        "failureMessage": failure.as_ref().map(|f| f.1.clone()).filter(|m| !m.is_empty()),
        "observedGeneration": pool.metadata.generation,
    });
    let current = serde_json::to_value(&pool.status).unwrap_or_default();
    let changed = status
        .as_object()
        .into_iter()
        .flatten()
        .any(|(k, v)| current.get(k).unwrap_or(&serde_json::Value::Null) != v);
    if changed {
        patch_status(&api, &name, status).await?;
    }
    if provider_ids.is_some()
        && pool.spec.provider_id_list.as_ref().map(|l| json!(l))
            != provider_ids.clone().map(serde_json::Value::Array)
    {
        crate::object::patch(
            &api,
            &name,
            json!({"spec": {"providerIDList": provider_ids}}),
        )
        .await?;
    }
    // Woken by its objects' changes; the resync covers a change missed by a lagging watch.
    Ok(crate::resync())
}

/// The pool's conditions, as Cluster API's: its infrastructure (with the provider's own
/// reason and words), its bootstrap data, its replicas, and Ready summing them up with the
/// first that is not, so a pool still provisioning says what it waits for.
fn pool_conditions(
    pool: &MachinePool,
    infrastructure: Option<&Reference>,
    infrastructure_object: Option<&kube::api::DynamicObject>,
    bootstrap_ready: bool,
    (ready, desired): (i32, i32),
) -> Vec<Condition> {
    let mut list = pool
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    match (infrastructure, infrastructure_object) {
        (Some(reference), Some(object)) => {
            external::read_infrastructure(object, reference, &mut list);
        }
        (Some(reference), None) => conditions::set(
            &mut list,
            "InfrastructureReady",
            false,
            "WaitingForInfrastructure",
            &format!("{} {} does not exist yet", reference.kind, reference.name),
        ),
        (None, _) => {}
    }
    conditions::set(
        &mut list,
        "BootstrapReady",
        bootstrap_ready,
        "WaitingForDataSecret",
        "the bootstrap config has no data Secret yet",
    );
    conditions::set(
        &mut list,
        "ReplicasReady",
        ready >= desired,
        "WaitingForReplicasReady",
        &format!("{ready} of {desired} replicas are ready"),
    );
    let blocking = ["InfrastructureReady", "BootstrapReady", "ReplicasReady"]
        .into_iter()
        .find_map(|type_| {
            list.iter()
                .find(|c| c.type_ == type_ && c.status != ConditionStatus::True)
                .map(|c| {
                    (
                        c.reason.clone().unwrap_or_default(),
                        c.message.clone().unwrap_or_default(),
                    )
                })
        });
    let (reason, message) = blocking.clone().unwrap_or_default();
    conditions::set(&mut list, "Ready", blocking.is_none(), &reason, &message);
    list
}

/// Deletes what the pool references, and lets the pool go once they are gone.
async fn delete(
    ctx: &Context,
    api: &Api<MachinePool>,
    pool: &Arc<MachinePool>,
) -> Result<Action, Error> {
    // The pool stays until its infrastructure (whose provider's finalizer holds it until
    // the cloud's instances are gone) and bootstrap config are, so a Cluster deleting its
    // workers first really waits for them.
    let spec = pool.spec.template.spec.as_ref();
    let infrastructure = spec.map(|s| &s.infrastructure_ref);
    let bootstrap = spec.and_then(|s| s.bootstrap.config_ref.as_ref());
    if !delete_referenced(ctx, pool.as_ref(), infrastructure).await?
        | !delete_referenced(ctx, pool.as_ref(), bootstrap).await?
    {
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    remove_finalizer(api, pool.as_ref(), FINALIZER).await?;
    Ok(Action::await_change())
}

/// The object `reference` names, owned by the pool and labelled with its cluster (made so
/// if it is not yet); `None` when there is no reference or no object yet.
async fn claim(
    ctx: &Context,
    pool: &Arc<MachinePool>,
    reference: Option<Reference>,
    cluster_label: &std::collections::BTreeMap<String, String>,
) -> Result<Option<Arc<kube::api::DynamicObject>>, Error> {
    let namespace = pool.namespace().unwrap_or_default();
    let Some(reference) = reference else {
        return Ok(None);
    };
    let Some(object) = reference.get(&ctx.caches, &namespace).await? else {
        return Ok(None);
    };
    let owned_here = object
        .owner_references()
        .iter()
        .any(|o| o.kind == "MachinePool" && o.uid == pool.uid().unwrap_or_default());
    if !owned_here {
        let object_api = reference.api(&ctx.client, &namespace).await?;
        ensure_owner(
            &object_api,
            object.as_ref(),
            owner_reference(pool.as_ref(), true),
        )
        .await?;
        ensure_labels(&object_api, object.as_ref(), cluster_label).await?;
    }
    Ok(Some(object))
}
