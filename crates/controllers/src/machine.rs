//! The Machine controller: waits for bootstrap data and infrastructure, finds the Node in the
//! workload cluster by providerID, and derives the phase
//! (Pending → Provisioning → Provisioned → Running, or Deleting, Failed).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::{Api, DynamicObject};
use kube::runtime::controller::Action;
use kube::{Client, ResourceExt};
use lariat_api::capi::machine::{MachinePhase, MachineStatus};
use lariat_api::capi::{Machine, ObjectReference};
use serde_json::json;

use crate::cache::IndexKey;
use crate::cluster::CLUSTER_NAME_LABEL;
use crate::external::{self, Reference};
use crate::object::{
    self, ensure_finalizer, ensure_owner, owner_reference, patch, patch_status, remove_finalizer,
    str_at,
};
use crate::{Context, Error, conditions};

pub use lariat_api::capi::machine::MACHINE_FINALIZER as FINALIZER;

/// A Machine's phase, if it has one yet.
pub fn phase(machine: &Machine) -> Option<MachinePhase> {
    machine.status.as_ref()?.phase
}

/// Whether a Machine knows its Node.
pub fn has_node(machine: &Machine) -> bool {
    machine
        .status
        .as_ref()
        .is_some_and(|s| s.node_ref.is_some())
}

pub async fn reconcile(machine: Arc<Machine>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = machine.namespace().unwrap_or_default();
    let name = machine.name_any();
    let api: Api<Machine> = Api::namespaced(ctx.client.clone(), &namespace);
    let cluster_name = machine.spec.cluster_name.clone();
    // As the Cluster's: finalizer, then paused before deletion (see `cluster::object_paused`).
    if machine.metadata.deletion_timestamp.is_none()
        && ensure_finalizer(&api, &machine, FINALIZER).await?
    {
        // The write's own watch event brings the Machine back.
        return Ok(Action::await_change());
    }
    if machine
        .annotations()
        .contains_key(lariat_api::capi::annotations::PAUSED)
        || ctx
            .cluster(&namespace, &cluster_name)
            .await?
            .is_some_and(|c| crate::cluster::paused(&c))
    {
        return Ok(Action::await_change());
    }
    if machine.metadata.deletion_timestamp.is_some() {
        return reconcile_delete(&machine, &ctx, &api).await;
    }
    let Some(cluster) = ctx.cluster(&namespace, &cluster_name).await? else {
        return Ok(Action::requeue(Duration::from_secs(2)));
    };
    let mut labels = BTreeMap::new();
    labels.insert(CLUSTER_NAME_LABEL.to_string(), cluster_name.clone());
    object::ensure_labels(&api, &machine, &labels).await?;
    if machine.owner_references().is_empty() {
        ensure_owner(&api, &machine, owner_reference(cluster.as_ref(), false)).await?;
    }
    let owner = owner_reference(machine.as_ref(), true);
    let uid = machine.uid().unwrap_or_default();
    let before = machine.status.clone().unwrap_or_default();
    let mut status = before.clone();
    let mut list = status.conditions.take().unwrap_or_default();

    let bootstrap = &machine.spec.bootstrap;
    let bootstrap_ready = match (&bootstrap.data_secret_name, &bootstrap.config_ref) {
        (Some(_), _) => true,
        (None, reference) => match reference
            .as_ref()
            .and_then(Reference::from_object_reference)
        {
            None => false,
            Some(reference) => match reference.get(&ctx.caches, &namespace).await {
                Err(Error::InvalidReference(message)) => {
                    let message = format!("spec.bootstrap.configRef: {message}");
                    conditions::set(
                        &mut list,
                        "BootstrapReady",
                        false,
                        "InvalidReference",
                        &message,
                    );
                    false
                }
                Err(e) => return Err(e),
                Ok(None) => false,
                Ok(Some(config))
                    if let Some(other) = external::claimed_by_another(&config, "Machine", &uid) =>
                {
                    let message = format!(
                        "spec.bootstrap.configRef: {} {} belongs to Machine {other}",
                        reference.kind, reference.name
                    );
                    conditions::set(
                        &mut list,
                        "BootstrapReady",
                        false,
                        "BootstrapConfigClaimed",
                        &message,
                    );
                    false
                }
                Ok(Some(config)) => {
                    let config_api = reference.api(&ctx.client, &namespace).await?;
                    ensure_owner(&config_api, &config, owner.clone()).await?;
                    object::ensure_labels(&config_api, &config, &labels).await?;
                    match (
                        external::ready(&config),
                        str_at(&config.data, &["status", "dataSecretName"]),
                    ) {
                        (true, Some(secret)) => {
                            patch(
                                &api,
                                &name,
                                json!({"spec": {"bootstrap": {"dataSecretName": secret}}}),
                            )
                            .await?;
                            true
                        }
                        _ => false,
                    }
                }
            },
        },
    };
    conditions::set(
        &mut list,
        "BootstrapReady",
        bootstrap_ready,
        "WaitingForDataSecret",
        "waiting for the bootstrap provider to write the bootstrap data",
    );

    let mut provider_id = machine.spec.provider_id.clone();
    let infra_ready = match Reference::from_object_reference(&machine.spec.infrastructure_ref) {
        None => false,
        Some(reference) => match reference.get(&ctx.caches, &namespace).await {
            Err(Error::UnknownKind { kind, .. }) => {
                external::kind_unknown(&mut list, &kind);
                false
            }
            Err(Error::InvalidReference(message)) => {
                let message = format!("spec.infrastructureRef: {message}");
                conditions::set(
                    &mut list,
                    "InfrastructureReady",
                    false,
                    "InvalidReference",
                    &message,
                );
                false
            }
            Err(e) => return Err(e),
            Ok(Some(infra))
                if let Some(other) = external::claimed_by_another(&infra, "Machine", &uid) =>
            {
                let message = format!(
                    "spec.infrastructureRef: {} {} belongs to Machine {other}",
                    reference.kind, reference.name
                );
                conditions::set(
                    &mut list,
                    "InfrastructureReady",
                    false,
                    "InfrastructureClaimed",
                    &message,
                );
                false
            }
            Ok(None) => {
                conditions::set(
                    &mut list,
                    "InfrastructureReady",
                    false,
                    "WaitingForInfrastructure",
                    &format!("{} {} does not exist", reference.kind, reference.name),
                );
                false
            }
            Ok(Some(infra)) => {
                let infra_api = reference.api(&ctx.client, &namespace).await?;
                ensure_owner(&infra_api, &infra, owner.clone()).await?;
                object::ensure_labels(&infra_api, &infra, &labels).await?;
                if let Some(id) = str_at(&infra.data, &["spec", "providerID"])
                    && provider_id.as_deref() != Some(id)
                {
                    patch(&api, &name, json!({"spec": {"providerID": id}})).await?;
                    provider_id = Some(id.to_string());
                }
                if let Some(addresses) = infra.data["status"].get("addresses") {
                    status.addresses = serde_json::from_value(addresses.clone()).ok();
                }
                let (ready, failure) = external::read_infrastructure(&infra, &reference, &mut list);
                if let Some((reason, message)) = failure {
                    status.failure_reason = Some(reason);
                    status.failure_message = Some(message);
                }
                ready
            }
        },
    };

    let nodes = match &provider_id {
        Some(_) if infra_ready => ctx.caches.nodes(&namespace, &cluster_name).await?,
        _ => None,
    };
    let reachable = nodes.as_ref().is_some_and(|n| n.is_healthy());
    if nodes.is_some() && !reachable && has_node(&machine) {
        // A running Machine's cluster cannot be watched right now: what is known of its Node
        // stands (a blip must not send it back to Provisioned); look again shortly. A
        // MachineHealthCheck judges nothing meanwhile either.
        return Ok(Action::requeue(Duration::from_secs(2)));
    }
    let node = match (&provider_id, &nodes) {
        (Some(id), Some(nodes)) if reachable => nodes
            .indexed_now(IndexKey::ProviderId(id))
            .into_iter()
            .next(),
        _ => None,
    };
    match &node {
        Some(node) => {
            if !has_node(&machine) {
                let message = format!(
                    "Machine {} has Node {}",
                    machine.name_any(),
                    node.name_any()
                );
                ctx.events
                    .publish_once(
                        machine.as_ref(),
                        "Machine",
                        crate::events::EventType::Normal,
                        "SuccessfulSetNodeRef",
                        &message,
                    )
                    .await;
            }
            status.node_ref = Some(ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(node.name_any()),
                uid: node.uid(),
                ..Default::default()
            });
            if let Some(info) = node.status.as_ref().and_then(|s| s.node_info.as_ref()) {
                status.node_info = serde_json::to_value(info)
                    .and_then(serde_json::from_value)
                    .ok();
            }
            conditions::set(
                &mut list,
                "NodeHealthy",
                node_ready(node),
                "NodeConditionsFailed",
                "the node is not Ready",
            );
        }
        None if infra_ready && nodes.is_some() && !reachable => conditions::set(
            &mut list,
            "NodeHealthy",
            false,
            "NodeInspectionFailed",
            "the workload cluster's API cannot be watched",
        ),
        None => conditions::set(
            &mut list,
            "NodeHealthy",
            false,
            "WaitingForNodeRef",
            "the node has not joined yet",
        ),
    }
    let ready = bootstrap_ready && infra_ready && node.is_some();
    conditions::set(
        &mut list,
        "Ready",
        ready,
        "WaitingForNode",
        "the machine is not running yet",
    );
    status.phase = Some(if status.failure_reason.is_some() {
        MachinePhase::Failed
    } else if node.is_some() {
        MachinePhase::Running
    } else if infra_ready {
        MachinePhase::Provisioned
    } else if bootstrap_ready || machine.spec.infrastructure_ref.name.is_some() {
        MachinePhase::Provisioning
    } else {
        MachinePhase::Pending
    });
    status.bootstrap_ready = Some(bootstrap_ready);
    status.infrastructure_ready = Some(infra_ready);
    status.observed_generation = Some(machine.metadata.generation.unwrap_or(0));
    let kind_unknown = list
        .iter()
        .any(|c| c.reason.as_deref() == Some("InfrastructureKindUnknown"));
    status.conditions = Some(list);
    if status != before {
        status.last_updated = Some(object::now_time());
        write_status(&api, &name, &status).await?;
    }
    Ok(if infra_ready && node.is_none() && !reachable {
        // The workload cluster's API is not up, or not reachable, yet: nothing will say when
        // it is, so look again.
        Action::requeue(Duration::from_secs(2))
    } else if kind_unknown {
        // A kind not served has no cache whose changes could wake it: look again shortly.
        Action::requeue(Duration::from_secs(5))
    } else {
        // Its bootstrap config, infrastructure machine and Node wake it.
        crate::resync()
    })
}

/// Whether a Node's Ready condition is True.
fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Writes a Machine's whole status (a merge patch: fields it no longer has stay).
pub async fn write_status(
    api: &Api<Machine>,
    name: &str,
    status: &MachineStatus,
) -> Result<(), Error> {
    let status = serde_json::to_value(status).map_err(|e| Error::Invalid(e.to_string()))?;
    patch_status(api, name, status).await?;
    Ok(())
}

/// A new client for a workload cluster, from the kubeconfig its provider wrote, for what must
/// ask the cluster itself rather than a cache (KubeadmControlPlane before it removes a member).
pub async fn workload_client(
    management: &Client,
    namespace: &str,
    cluster: &str,
) -> Option<Client> {
    let secrets: Api<DynamicObject> = Api::namespaced_with(
        management.clone(),
        namespace,
        &kube::core::ApiResource::erase::<Secret>(&()),
    );
    let secret = secrets
        .get_opt(&format!("{cluster}-kubeconfig"))
        .await
        .ok()??;
    crate::cache::workload_client(&secret).await
}

async fn reconcile_delete(
    machine: &Machine,
    ctx: &Context,
    api: &Api<Machine>,
) -> Result<Action, Error> {
    if phase(machine) != Some(MachinePhase::Deleting) {
        patch_status(api, &machine.name_any(), json!({"phase": "Deleting"})).await?;
    }
    for reference in [
        Some(&machine.spec.infrastructure_ref),
        machine.spec.bootstrap.config_ref.as_ref(),
    ] {
        if !crate::cluster::delete_referenced(ctx, machine, reference).await? {
            return Ok(Action::requeue(Duration::from_millis(500)));
        }
    }
    remove_finalizer(api, machine, FINALIZER).await?;
    Ok(Action::await_change())
}
