//! The Machine controller: waits for bootstrap data and infrastructure, finds the Node in the
//! workload cluster by providerID, and derives the phase
//! (Pending → Provisioning → Provisioned → Running, or Deleting, Failed).

use crate::paused::V1Beta2Conditions;
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
use crate::external::{self, Reference};
use crate::object::{
    self, ensure_finalizer, ensure_owner, owner_reference, patch, patch_status, remove_finalizer,
    str_at,
};
use crate::{Context, Error, conditions};
use lariat_api::capi::labels::CLUSTER_NAME as CLUSTER_NAME_LABEL;

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
    let api: Api<Machine> = Api::namespaced(ctx.client.clone(), &namespace);
    let cluster_name = machine.spec.cluster_name.clone();
    // As the Cluster's: finalizer, then paused before deletion (see `cluster::object_paused`).
    if machine.metadata.deletion_timestamp.is_none()
        && ensure_finalizer(&api, &machine, FINALIZER).await?
    {
        // The write's own watch event brings the Machine back.
        return Ok(Action::await_change());
    }
    let cluster = ctx.cluster(&namespace, &cluster_name).await?;
    let conditions = machine.v1beta2_conditions();
    if crate::paused::check(&api, &machine.metadata, conditions, cluster.as_deref()).await? {
        return Ok(Action::await_change());
    }
    if machine.metadata.deletion_timestamp.is_some() {
        return reconcile_delete(&machine, &ctx, &api).await;
    }
    let Some(cluster) = cluster else {
        return Ok(Action::requeue(Duration::from_secs(2)));
    };
    let mut labels = BTreeMap::new();
    labels.insert(CLUSTER_NAME_LABEL.to_string(), cluster_name.clone());
    object::ensure_labels(&api, &machine, &labels).await?;
    if machine.owner_references().is_empty() {
        ensure_owner(&api, &machine, owner_reference(cluster.as_ref(), false)).await?;
    }
    let before = machine.status.clone().unwrap_or_default();
    let mut status = before.clone();
    let conditions = status.conditions.take().unwrap_or_default();
    let mut pass = Pass {
        owner: owner_reference(machine.as_ref(), true),
        machine: &machine,
        ctx: &ctx,
        api,
        namespace,
        labels,
        status,
        conditions,
        generation: machine.metadata.generation.unwrap_or(0),
    };
    let bootstrap_ready = pass.bootstrap().await?;
    let (infra_ready, provider_id) = pass.infrastructure().await?;
    let nodes = match &provider_id {
        Some(_) if infra_ready => ctx.caches.nodes(&pass.namespace, &cluster_name).await?,
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
    pass.node(
        node.as_deref(),
        infra_ready && nodes.is_some() && !reachable,
    )
    .await;
    let kind_unknown = pass
        .finish(bootstrap_ready, infra_ready, node.is_some(), &before)
        .await?;
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

/// One reconcile of a live Machine of an existing Cluster: what it adopts (its bootstrap
/// config and infrastructure machine, as their owner, with its cluster label), and the status
/// it builds.
struct Pass<'a> {
    machine: &'a Machine,
    ctx: &'a Context,
    api: Api<Machine>,
    namespace: String,
    /// The Machine's owner reference, for what it adopts.
    owner: serde_json::Value,
    /// The labels what it adopts carries.
    labels: BTreeMap<String, String>,
    status: MachineStatus,
    conditions: Vec<lariat_api::capi::Condition>,
    /// The Machine's generation, as this pass's own spec writes (bootstrap data, providerID)
    /// left it (see `object::observed_after_own_write`).
    generation: i64,
}

impl Pass<'_> {
    fn uid(&self) -> String {
        self.machine.uid().unwrap_or_default()
    }

    /// Takes the generation of the Machine as this pass's own spec write returned it.
    fn observe(&mut self, written: &Machine) {
        self.generation = object::observed_after_own_write(self.generation, &written.metadata);
    }

    /// Whether the bootstrap data exists: given in the spec, or written by the bootstrap
    /// provider into the config the Machine adopts (then copied into the spec).
    async fn bootstrap(&mut self) -> Result<bool, Error> {
        let bootstrap = &self.machine.spec.bootstrap;
        let ready = match (&bootstrap.data_secret_name, &bootstrap.config_ref) {
            (Some(_), _) => true,
            (None, reference) => match reference
                .as_ref()
                .and_then(Reference::from_object_reference)
            {
                None => false,
                Some(reference) => match self.bootstrap_config(&reference).await? {
                    Some(ready) => ready,
                    // Refused: the condition says why.
                    None => return Ok(false),
                },
            },
        };
        conditions::set(
            &mut self.conditions,
            "BootstrapReady",
            ready,
            "WaitingForDataSecret",
            "waiting for the bootstrap provider to write the bootstrap data",
        );
        Ok(ready)
    }

    /// Adopts the bootstrap config `reference` names; whether it has written the data, or
    /// `None` when the reference is refused (the condition says why).
    async fn bootstrap_config(&mut self, reference: &Reference) -> Result<Option<bool>, Error> {
        let refused = |conditions: &mut Vec<_>, reason: &str, message: &str| {
            conditions::set(conditions, "BootstrapReady", false, reason, message);
            None
        };
        let config = match reference.get(&self.ctx.caches, &self.namespace).await {
            Err(Error::InvalidReference(message)) => {
                let message = format!("spec.bootstrap.configRef: {message}");
                return Ok(refused(&mut self.conditions, "InvalidReference", &message));
            }
            Err(e) => return Err(e),
            Ok(None) => return Ok(Some(false)),
            Ok(Some(config)) => config,
        };
        if let Some(message) =
            reference.claimed_elsewhere(&config, "spec.bootstrap.configRef", "Machine", &self.uid())
        {
            return Ok(refused(
                &mut self.conditions,
                "BootstrapConfigClaimed",
                &message,
            ));
        }
        let config_api = reference.api(&self.ctx.client, &self.namespace).await?;
        ensure_owner(&config_api, &config, self.owner.clone()).await?;
        object::ensure_labels(&config_api, &config, &self.labels).await?;
        match (
            external::ready(&config),
            str_at(&config.data, &["status", "dataSecretName"]),
        ) {
            (true, Some(secret)) => {
                let patched = patch(
                    &self.api,
                    &self.machine.name_any(),
                    json!({"spec": {"bootstrap": {"dataSecretName": secret}}}),
                )
                .await?;
                self.observe(&patched);
                Ok(Some(true))
            }
            _ => Ok(Some(false)),
        }
    }

    /// Adopts the infrastructure machine and reads it (the contract's ready, providerID,
    /// addresses and failure); whether it is ready, and the providerID the Machine has.
    async fn infrastructure(&mut self) -> Result<(bool, Option<String>), Error> {
        let provider_id = self.machine.spec.provider_id.clone();
        let Some(reference) =
            Reference::from_object_reference(&self.machine.spec.infrastructure_ref)
        else {
            return Ok((false, provider_id));
        };
        let refused = |conditions: &mut Vec<_>, reason: &str, message: &str| {
            conditions::set(conditions, "InfrastructureReady", false, reason, message);
        };
        let infra = match reference.get(&self.ctx.caches, &self.namespace).await {
            Err(Error::UnknownKind { kind, .. }) => {
                external::kind_unknown(&mut self.conditions, &kind);
                return Ok((false, provider_id));
            }
            Err(Error::InvalidReference(message)) => {
                let message = format!("spec.infrastructureRef: {message}");
                refused(&mut self.conditions, "InvalidReference", &message);
                return Ok((false, provider_id));
            }
            Err(e) => return Err(e),
            Ok(None) => {
                let message = format!("{} {} does not exist", reference.kind, reference.name);
                refused(&mut self.conditions, "WaitingForInfrastructure", &message);
                return Ok((false, provider_id));
            }
            Ok(Some(infra)) => infra,
        };
        if let Some(message) =
            reference.claimed_elsewhere(&infra, "spec.infrastructureRef", "Machine", &self.uid())
        {
            refused(&mut self.conditions, "InfrastructureClaimed", &message);
            return Ok((false, provider_id));
        }
        let infra_api = reference.api(&self.ctx.client, &self.namespace).await?;
        ensure_owner(&infra_api, &infra, self.owner.clone()).await?;
        object::ensure_labels(&infra_api, &infra, &self.labels).await?;
        let mut provider_id = provider_id;
        if let Some(id) = str_at(&infra.data, &["spec", "providerID"])
            && provider_id.as_deref() != Some(id)
        {
            let name = self.machine.name_any();
            let patched = patch(&self.api, &name, json!({"spec": {"providerID": id}})).await?;
            self.observe(&patched);
            provider_id = Some(id.to_string());
        }
        if let Some(addresses) = infra.data["status"].get("addresses") {
            self.status.addresses = serde_json::from_value(addresses.clone()).ok();
        }
        let (ready, failure) =
            external::read_infrastructure(&infra, &reference, &mut self.conditions);
        if let Some((reason, message)) = failure {
            self.status.failure_reason = Some(reason);
            self.status.failure_message = Some(message);
        }
        Ok((ready, provider_id))
    }

    /// Records the Machine's Node (found by providerID) and its health; `unwatchable` when
    /// the workload cluster's API cannot be watched.
    async fn node(&mut self, node: Option<&Node>, unwatchable: bool) {
        let Some(node) = node else {
            let (reason, message) = if unwatchable {
                (
                    "NodeInspectionFailed",
                    "the workload cluster's API cannot be watched",
                )
            } else {
                ("WaitingForNodeRef", "the node has not joined yet")
            };
            conditions::set(&mut self.conditions, "NodeHealthy", false, reason, message);
            return;
        };
        if !has_node(self.machine) {
            let message = format!(
                "Machine {} has Node {}",
                self.machine.name_any(),
                node.name_any()
            );
            self.ctx
                .events
                .publish_once(
                    self.machine,
                    "Machine",
                    crate::events::EventType::Normal,
                    "SuccessfulSetNodeRef",
                    &message,
                )
                .await;
        }
        self.status.node_ref = Some(ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.name_any()),
            uid: node.uid(),
            ..Default::default()
        });
        if let Some(info) = node.status.as_ref().and_then(|s| s.node_info.as_ref()) {
            self.status.node_info = serde_json::to_value(info)
                .and_then(serde_json::from_value)
                .ok();
        }
        conditions::set(
            &mut self.conditions,
            "NodeHealthy",
            node_ready(node),
            "NodeConditionsFailed",
            "the node is not Ready",
        );
    }

    /// Derives Ready and the phase, and writes the status if it changed from `before`;
    /// whether the infrastructure's kind is not served.
    async fn finish(
        mut self,
        bootstrap_ready: bool,
        infra_ready: bool,
        has_node: bool,
        before: &MachineStatus,
    ) -> Result<bool, Error> {
        let ready = bootstrap_ready && infra_ready && has_node;
        conditions::set(
            &mut self.conditions,
            "Ready",
            ready,
            "WaitingForNode",
            "the machine is not running yet",
        );
        let status = &mut self.status;
        status.phase = Some(if status.failure_reason.is_some() {
            MachinePhase::Failed
        } else if has_node {
            MachinePhase::Running
        } else if infra_ready {
            MachinePhase::Provisioned
        } else if bootstrap_ready || self.machine.spec.infrastructure_ref.name.is_some() {
            MachinePhase::Provisioning
        } else {
            MachinePhase::Pending
        });
        status.bootstrap_ready = Some(bootstrap_ready);
        status.infrastructure_ready = Some(infra_ready);
        status.observed_generation = Some(self.generation);
        let kind_unknown = self
            .conditions
            .iter()
            .any(|c| c.reason.as_deref() == Some("InfrastructureKindUnknown"));
        status.conditions = Some(self.conditions);
        if *status != *before {
            status.last_updated = Some(object::now_time());
            write_status(&self.api, &self.machine.name_any(), status).await?;
        }
        Ok(kind_unknown)
    }
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
        if !crate::external::delete_referenced(ctx, machine, reference).await? {
            return Ok(Action::requeue(Duration::from_millis(500)));
        }
    }
    remove_finalizer(api, machine, FINALIZER).await?;
    Ok(Action::await_change())
}
