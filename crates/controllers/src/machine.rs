//! The Machine controller: waits for bootstrap data and infrastructure, finds the Node in the
//! workload cluster by providerID, and derives the phase
//! (Pending → Provisioning → Provisioned → Running, or Deleting, Failed).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject};
use kube::runtime::controller::Action;
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::cache::IndexKey;
use crate::cluster::CLUSTER_NAME_LABEL;
use crate::external::{self, Reference};
use crate::object::{
    self, ensure_finalizer, ensure_owner, owner_reference, patch, patch_status, remove_finalizer,
    str_at,
};
use crate::{Context, Error, capi, conditions};

pub const FINALIZER: &str = "machine.cluster.x-k8s.io";

pub async fn reconcile(machine: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = machine.namespace().unwrap_or_default();
    let name = machine.name_any();
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &namespace, &capi("Machine"));
    let cluster_name = str_at(&machine.data, &["spec", "clusterName"])
        .unwrap_or_default()
        .to_string();
    if machine.metadata.deletion_timestamp.is_some() {
        return reconcile_delete(&machine, &ctx, &api).await;
    }
    if ensure_finalizer(&api, &machine, FINALIZER).await? {
        // The write's own watch event brings the Machine back.
        return Ok(Action::await_change());
    }
    let Some(cluster) = ctx.cluster_of(&machine).await? else {
        return Ok(Action::requeue(Duration::from_secs(2)));
    };
    let mut labels = BTreeMap::new();
    labels.insert(CLUSTER_NAME_LABEL.to_string(), cluster_name.clone());
    object::ensure_labels(&api, &machine, &labels).await?;
    if machine.owner_references().is_empty() {
        ensure_owner(
            &api,
            &machine,
            owner_reference(&cluster, "cluster.x-k8s.io/v1beta1", "Cluster", false),
        )
        .await?;
    }
    if object::bool_at(&cluster.data, &["spec", "paused"])
        || machine
            .annotations()
            .contains_key("cluster.x-k8s.io/paused")
    {
        return Ok(Action::await_change());
    }
    let owner = owner_reference(&machine, "cluster.x-k8s.io/v1beta1", "Machine", true);
    let mut status = machine.data["status"].clone();
    if !status.is_object() {
        status = json!({});
    }
    let mut list = conditions::existing(&status);

    let bootstrap_ready = match str_at(&machine.data, &["spec", "bootstrap", "dataSecretName"]) {
        Some(_) => true,
        None => match Reference::from_json(&machine.data["spec"]["bootstrap"]["configRef"]) {
            None => false,
            Some(reference) => match reference.get(&ctx.caches, &namespace).await? {
                None => false,
                Some(config) => {
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

    let mut provider_id = str_at(&machine.data, &["spec", "providerID"]).map(String::from);
    let infra_ready = match Reference::from_json(&machine.data["spec"]["infrastructureRef"]) {
        None => false,
        Some(reference) => match reference.get(&ctx.caches, &namespace).await {
            Err(Error::UnknownKind { kind, .. }) => {
                external::kind_unknown(&mut list, &kind);
                false
            }
            Err(e) => return Err(e),
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
                if let Some(addresses) = infra.data["status"]["addresses"].as_array() {
                    status["addresses"] = json!(addresses);
                }
                external::read_infrastructure(&infra, &reference, &mut status, &mut list)
            }
        },
    };

    let nodes = match &provider_id {
        Some(_) if infra_ready => ctx.caches.nodes(&namespace, &cluster_name).await?,
        _ => None,
    };
    let reachable = nodes.as_ref().is_some_and(|n| n.is_healthy());
    if nodes.is_some() && !reachable && machine.data["status"]["nodeRef"].is_object() {
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
            if str_at(&machine.data, &["status", "nodeRef", "name"]).is_none() {
                let message = format!(
                    "Machine {} has Node {}",
                    machine.name_any(),
                    node.name_any()
                );
                ctx.events
                    .publish_once(
                        &machine,
                        "Machine",
                        crate::events::EventType::Normal,
                        "SuccessfulSetNodeRef",
                        &message,
                    )
                    .await;
            }
            status["nodeRef"] = json!({"apiVersion": "v1", "kind": "Node", "name": node.name_any(), "uid": node.uid()});
            if node.data["status"]["nodeInfo"].is_object() {
                status["nodeInfo"] = node.data["status"]["nodeInfo"].clone();
            }
            let node_ready = node.data["status"]["conditions"]
                .as_array()
                .is_some_and(|c| {
                    c.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                });
            conditions::set(
                &mut list,
                "NodeHealthy",
                node_ready,
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
    let phase = if status["failureReason"].is_string() {
        "Failed"
    } else if node.is_some() {
        "Running"
    } else if infra_ready {
        "Provisioned"
    } else if bootstrap_ready || machine.data["spec"]["infrastructureRef"].is_object() {
        "Provisioning"
    } else {
        "Pending"
    };
    status["phase"] = json!(phase);
    status["bootstrapReady"] = json!(bootstrap_ready);
    status["infrastructureReady"] = json!(infra_ready);
    status["conditions"] = json!(list);
    status["observedGeneration"] = json!(machine.metadata.generation.unwrap_or(0));
    if status != machine.data["status"] {
        status["lastUpdated"] = json!(object::now());
        patch_status(&api, &name, status).await?;
    }
    Ok(if infra_ready && node.is_none() && !reachable {
        // The workload cluster's API is not up, or not reachable, yet: nothing will say when
        // it is, so look again.
        Action::requeue(Duration::from_secs(2))
    } else if list
        .iter()
        .any(|c| c["reason"] == "InfrastructureKindUnknown")
    {
        // A kind not served has no cache whose changes could wake it: look again shortly.
        Action::requeue(Duration::from_secs(5))
    } else {
        // Its bootstrap config, infrastructure machine and Node wake it.
        crate::resync()
    })
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
    machine: &DynamicObject,
    ctx: &Context,
    api: &Api<DynamicObject>,
) -> Result<Action, Error> {
    let namespace = machine.namespace().unwrap_or_default();
    if machine.data["status"]["phase"] != "Deleting" {
        patch_status(api, &machine.name_any(), json!({"phase": "Deleting"})).await?;
    }
    for reference in [
        &machine.data["spec"]["infrastructureRef"],
        &machine.data["spec"]["bootstrap"]["configRef"],
    ] {
        let Some(reference) = Reference::from_json(reference) else {
            continue;
        };
        match reference.api(&ctx.client, &namespace).await {
            Ok(ref_api) => {
                if !object::delete_if_present(&ref_api, &reference.name).await? {
                    return Ok(Action::requeue(Duration::from_millis(500)));
                }
            }
            Err(Error::UnknownKind { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    remove_finalizer(api, machine, FINALIZER).await?;
    Ok(Action::await_change())
}
