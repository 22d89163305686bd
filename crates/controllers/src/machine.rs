//! The Machine controller: waits for bootstrap data and infrastructure, finds the Node in the
//! workload cluster by providerID, and derives the phase
//! (Pending → Provisioning → Provisioned → Running, or Deleting, Failed).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::{Api, DynamicObject, ListParams};
use kube::runtime::controller::Action;
use kube::{Client, ResourceExt};
use serde_json::json;

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
        return Ok(Action::requeue(Duration::ZERO));
    }
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &namespace, &capi("Cluster"));
    let Some(cluster) = clusters.get_opt(&cluster_name).await? else {
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
            Some(reference) => match reference.get(&ctx.client, &namespace).await? {
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
        Some(reference) => match reference.get(&ctx.client, &namespace).await {
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

    let node = match &provider_id {
        Some(id) if infra_ready => {
            let known = str_at(&machine.data, &["status", "nodeRef", "name"]);
            find_node(&ctx, &namespace, &cluster_name, id, known).await
        }
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
                    .publish(
                        &machine,
                        "Machine",
                        crate::events::EventType::Normal,
                        "SuccessfulSetNodeRef",
                        &message,
                    )
                    .await;
            }
            status["nodeRef"] = json!({"apiVersion": "v1", "kind": "Node", "name": node.name_any(), "uid": node.uid()});
            if let Some(info) = node.status.as_ref().and_then(|s| s.node_info.as_ref()) {
                status["nodeInfo"] = serde_json::to_value(info).unwrap_or_default();
            }
            let node_ready = node
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            conditions::set(
                &mut list,
                "NodeHealthy",
                node_ready,
                "NodeConditionsFailed",
                "the node is not Ready",
            );
        }
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
    Ok(match phase {
        // A running Machine's Node is looked at again every 30 s (core does not watch workload
        // clusters; MachineHealthChecks read Nodes themselves, every few seconds).
        "Running" => Action::requeue(Duration::from_secs(30)),
        "Failed" => Action::requeue(Duration::from_secs(30)),
        _ => Action::requeue(Duration::from_millis(500)),
    })
}

/// The workload cluster's Node with this providerID, through the `<cluster>-kubeconfig` Secret.
/// A Node already found (`known`, from `status.nodeRef`) is read by name; only a Machine whose
/// Node has not been found yet lists them all, so a running cluster costs one read per Machine.
async fn find_node(
    ctx: &Context,
    namespace: &str,
    cluster: &str,
    provider_id: &str,
    known: Option<&str>,
) -> Option<Node> {
    let client = ctx.workload_client(namespace, cluster).await?;
    let nodes: Api<Node> = Api::all(client);
    let matches =
        |n: &Node| n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(provider_id);
    if let Some(name) = known {
        match nodes.get_opt(name).await {
            Ok(Some(node)) if matches(&node) => return Some(node),
            Ok(_) => {}
            Err(_) => {
                ctx.forget_workload_client(namespace, cluster);
                return None;
            }
        }
    }
    let list = match nodes.list(&ListParams::default()).await {
        Ok(list) => list,
        Err(_) => {
            // The cluster's API or credentials may have changed: connect afresh next time.
            ctx.forget_workload_client(namespace, cluster);
            return None;
        }
    };
    list.items.into_iter().find(matches)
}

/// A new client for a workload cluster, from the kubeconfig its provider wrote (see
/// [`Context::workload_client`] for the cached one).
pub async fn workload_client(
    management: &Client,
    namespace: &str,
    cluster: &str,
) -> Option<Client> {
    let secrets: Api<Secret> = Api::namespaced(management.clone(), namespace);
    let secret = secrets
        .get_opt(&format!("{cluster}-kubeconfig"))
        .await
        .ok()??;
    let bytes = secret.data?.get("value")?.0.clone();
    let kubeconfig = kube::config::Kubeconfig::from_yaml(std::str::from_utf8(&bytes).ok()?).ok()?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .ok()?;
    Client::try_from(config).ok()
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
