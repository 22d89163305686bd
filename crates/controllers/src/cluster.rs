//! The Cluster controller: owns its infrastructure and control plane objects, reports their
//! readiness as conditions, derives the phase, and deletes in order (workers, control plane,
//! infrastructure) before it lets the Cluster go.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use kube::runtime::controller::Action;
use serde_json::{Value, json};

use crate::cache::IndexKey;
use crate::events::EventType;
use crate::external::{self, Reference};
use crate::object::{
    self, bool_at, ensure_finalizer, ensure_owner, owner_reference, patch, patch_status,
    remove_finalizer,
};
use crate::{Context, Error, capi, conditions};

pub const FINALIZER: &str = "cluster.cluster.x-k8s.io";
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";

/// Whether a Cluster is paused (`spec.paused`, or the paused annotation): nothing of it is
/// reconciled meanwhile.
pub fn paused(cluster: &DynamicObject) -> bool {
    bool_at(&cluster.data, &["spec", "paused"])
        || cluster
            .annotations()
            .contains_key("cluster.x-k8s.io/paused")
}

pub async fn reconcile(cluster: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &namespace, &capi("Cluster"));
    if cluster.metadata.deletion_timestamp.is_some() {
        return reconcile_delete(&cluster, &ctx, &api).await;
    }
    if ensure_finalizer(&api, &cluster, FINALIZER).await? {
        // The write's own watch event brings the Cluster back.
        return Ok(Action::await_change());
    }
    if paused(&cluster) {
        return Ok(Action::await_change());
    }
    let owner = owner_reference(&cluster, "cluster.x-k8s.io/v1beta1", "Cluster", false);
    let mut status = cluster.data["status"].clone();
    let mut list = conditions::existing(&status);
    let mut labels = BTreeMap::new();
    labels.insert(CLUSTER_NAME_LABEL.to_string(), name.clone());

    // Infrastructure: ready, and the endpoint it publishes.
    let infra_ready = match Reference::from_json(&cluster.data["spec"]["infrastructureRef"]) {
        None => true,
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
                    &format!("{} {} does not exist yet", reference.kind, reference.name),
                );
                false
            }
            Ok(Some(infra)) => {
                let infra_api = reference.api(&ctx.client, &namespace).await?;
                ensure_owner(&infra_api, &infra, owner.clone()).await?;
                object::ensure_labels(&infra_api, &infra, &labels).await?;
                let endpoint = &infra.data["spec"]["controlPlaneEndpoint"];
                if endpoint["host"].as_str().is_some_and(|h| !h.is_empty())
                    && cluster.data["spec"]["controlPlaneEndpoint"]["host"]
                        .as_str()
                        .is_none_or(str::is_empty)
                {
                    patch(
                        &api,
                        &name,
                        json!({"spec": {"controlPlaneEndpoint": endpoint}}),
                    )
                    .await?;
                }
                if let Some(domains) = infra.data["status"]["failureDomains"].as_object() {
                    status["failureDomains"] = Value::Object(domains.clone());
                }
                let ready =
                    external::read_infrastructure(&infra, &reference, &mut status, &mut list);
                if !ready
                    && let Some(message) =
                        external::provider_not_enabled(&ctx.caches, &reference).await
                {
                    conditions::set(
                        &mut list,
                        "InfrastructureReady",
                        false,
                        "ProviderNotEnabled",
                        &message,
                    );
                }
                ready
            }
        },
    };

    // Control plane: initialized (the API answers) and ready.
    let imported = cluster
        .annotations()
        .contains_key(lariat_api::management::IMPORTED_ANNOTATION);
    let (cp_initialized, cp_ready) =
        match Reference::from_json(&cluster.data["spec"]["controlPlaneRef"]) {
            // An imported cluster's control plane is whatever its agent reaches: up while the
            // agent is connected.
            None if imported => {
                // Initialized once its agent first connected, for good (as Cluster API's
                // condition is), so a reconnecting agent does not send the cluster back to
                // Pending; Ready follows the connection.
                let connected = conditions::is_true(&list, "Connected");
                let initialized =
                    connected || conditions::is_true(&list, "ControlPlaneInitialized");
                (initialized, connected)
            }
            None => {
                let running = control_plane_machines_running(&ctx, &namespace, &name).await?;
                (running, running)
            }
            Some(reference) => match reference.get(&ctx.caches, &namespace).await {
                Err(Error::UnknownKind { kind, .. }) => {
                    conditions::set(
                        &mut list,
                        "ControlPlaneReady",
                        false,
                        "ControlPlaneKindUnknown",
                        &format!("{kind} is not served"),
                    );
                    (false, false)
                }
                Err(e) => return Err(e),
                Ok(None) => (false, false),
                Ok(Some(cp)) => {
                    let cp_api = reference.api(&ctx.client, &namespace).await?;
                    ensure_owner(&cp_api, &cp, owner.clone()).await?;
                    object::ensure_labels(&cp_api, &cp, &labels).await?;
                    (
                        bool_at(&cp.data, &["status", "initialized"]),
                        external::ready(&cp),
                    )
                }
            },
        };
    conditions::set(
        &mut list,
        "ControlPlaneInitialized",
        cp_initialized,
        "WaitingForControlPlane",
        "the control plane is not initialized yet",
    );
    conditions::set(
        &mut list,
        "ControlPlaneReady",
        cp_ready,
        "WaitingForControlPlane",
        "the control plane is not ready yet",
    );
    let ready = infra_ready && cp_ready;
    // Ready summarizes, as Cluster API's does: when not ready it repeats the reason and
    // message of the first condition that is not, so the most useful words (a provider to
    // enable, say) show on the Cluster itself.
    let blocking = if !infra_ready {
        "InfrastructureReady"
    } else {
        "ControlPlaneReady"
    };
    let (reason, message) = list
        .iter()
        .find(|c| c["type"] == blocking)
        .map(|c| {
            (
                c["reason"].as_str().unwrap_or_default().to_string(),
                c["message"].as_str().unwrap_or_default().to_string(),
            )
        })
        .unwrap_or_default();
    conditions::set(&mut list, "Ready", ready, &reason, &message);

    let has_endpoint = cluster.data["spec"]["controlPlaneEndpoint"]["host"]
        .as_str()
        .is_some_and(|h| !h.is_empty());
    let phase = if status["failureReason"].is_string() {
        "Failed"
    } else if infra_ready && (has_endpoint || cp_initialized) {
        "Provisioned"
    } else if cluster.data["spec"]["infrastructureRef"].is_object()
        || cluster.data["spec"]["controlPlaneRef"].is_object()
    {
        "Provisioning"
    } else {
        "Pending"
    };
    status["phase"] = json!(phase);
    status["infrastructureReady"] = json!(infra_ready);
    status["controlPlaneReady"] = json!(cp_ready);
    status["conditions"] = json!(list);
    status["observedGeneration"] = json!(cluster.metadata.generation.unwrap_or(0));
    if status != cluster.data["status"] {
        patch_status(&api, &name, status.clone()).await?;
        let before = cluster.data["status"]["phase"].as_str().unwrap_or_default();
        if phase != before && matches!(phase, "Provisioned" | "Failed") {
            let (type_, message) = if phase == "Failed" {
                let text = |key: &str| status[key].as_str().unwrap_or_default().to_string();
                (
                    EventType::Warning,
                    format!(
                        "Cluster {name} failed: {}: {}",
                        text("failureReason"),
                        text("failureMessage")
                    ),
                )
            } else {
                (EventType::Normal, format!("Cluster {name} is Provisioned"))
            };
            ctx.events
                .publish(&cluster, "Cluster", type_, phase, &message)
                .await;
        }
        // Why it waits, when the reason is something a user must do.
        if !ready && reason == "ProviderNotEnabled" {
            ctx.events
                .publish(&cluster, "Cluster", EventType::Warning, &reason, &message)
                .await;
        }
    }
    let waits_for_a_kind = list.iter().any(|c| {
        matches!(
            c["reason"].as_str(),
            Some("ProviderNotEnabled" | "InfrastructureKindUnknown" | "ControlPlaneKindUnknown")
        )
    });
    Ok(if waits_for_a_kind {
        // Enabling a provider or creating a CRD is not among what wakes a Cluster (a kind not
        // served has no cache to watch): look again shortly.
        Action::requeue(Duration::from_secs(5))
    } else {
        // Its infrastructure, control plane and Machines wake it.
        crate::resync()
    })
}

async fn control_plane_machines_running(
    ctx: &Context,
    namespace: &str,
    cluster: &str,
) -> Result<bool, Error> {
    let machines = ctx
        .caches
        .of(&capi("Machine"))
        .indexed(IndexKey::Cluster {
            namespace,
            name: cluster,
        })
        .await?;
    Ok(machines.iter().any(|m| {
        m.labels().contains_key("cluster.x-k8s.io/control-plane")
            && object::str_at(&m.data, &["status", "phase"]) == Some("Running")
    }))
}

/// Deletes what the cluster is made of, in order, and removes the finalizer once all is gone.
async fn reconcile_delete(
    cluster: &DynamicObject,
    ctx: &Context,
    api: &Api<DynamicObject>,
) -> Result<Action, Error> {
    let namespace = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    if cluster.data["status"]["phase"] != "Deleting" {
        patch_status(api, &name, json!({"phase": "Deleting"})).await?;
        let message =
            "Deleting the cluster: workers first, then the control plane, then its infrastructure";
        ctx.events
            .publish(cluster, "Cluster", EventType::Normal, "Deleting", message)
            .await;
    }
    let selector = format!("{CLUSTER_NAME_LABEL}={name}");
    let owned = |kind: &str| {
        Api::<DynamicObject>::namespaced_with(ctx.client.clone(), &namespace, &capi(kind))
    };
    // Workers first: deployments, their sets, and machines that are not control plane.
    let mut waiting = false;
    for kind in ["MachineDeployment", "MachineSet"] {
        let kind_api = owned(kind);
        for item in kind_api
            .list(&ListParams::default().labels(&selector))
            .await?
            .items
        {
            waiting = true;
            if item.metadata.deletion_timestamp.is_none() {
                let _ = kind_api
                    .delete(&item.name_any(), &DeleteParams::default())
                    .await;
            }
        }
    }
    let machines = owned("Machine");
    let all_machines = machines
        .list(&ListParams::default().labels(&selector))
        .await?
        .items;
    for machine in all_machines
        .iter()
        .filter(|m| !m.labels().contains_key("cluster.x-k8s.io/control-plane"))
    {
        waiting = true;
        if machine.metadata.deletion_timestamp.is_none() {
            let _ = machines
                .delete(&machine.name_any(), &DeleteParams::default())
                .await;
        }
    }
    if waiting {
        return Ok(Action::requeue(Duration::from_millis(500)));
    }
    // Then the control plane, which deletes its own machines.
    if let Some(reference) = Reference::from_json(&cluster.data["spec"]["controlPlaneRef"]) {
        match reference.api(&ctx.client, &namespace).await {
            Ok(cp_api) => {
                if !object::delete_if_present(&cp_api, &reference.name).await? {
                    return Ok(Action::requeue(Duration::from_millis(500)));
                }
            }
            Err(Error::UnknownKind { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    let remaining = machines
        .list(&ListParams::default().labels(&selector))
        .await?
        .items;
    for machine in &remaining {
        if machine.metadata.deletion_timestamp.is_none() {
            let _ = machines
                .delete(&machine.name_any(), &DeleteParams::default())
                .await;
        }
    }
    if !remaining.is_empty() {
        return Ok(Action::requeue(Duration::from_millis(500)));
    }
    // Last the infrastructure.
    if let Some(reference) = Reference::from_json(&cluster.data["spec"]["infrastructureRef"]) {
        match reference.api(&ctx.client, &namespace).await {
            Ok(infra_api) => {
                if !object::delete_if_present(&infra_api, &reference.name).await? {
                    return Ok(Action::requeue(Duration::from_millis(500)));
                }
            }
            Err(Error::UnknownKind { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    remove_finalizer(api, cluster, FINALIZER).await?;
    ctx.caches.forget_workload(&namespace, &name);
    Ok(Action::await_change())
}
