//! The Cluster controller: owns its infrastructure and control plane objects, reports their
//! readiness as conditions, derives the phase, and deletes in order (workers, control plane,
//! infrastructure) before it lets the Cluster go.

use crate::paused::V1Beta2Conditions;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, DeleteParams, ListParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use lariat_api::capi::cluster::ClusterPhase;
use lariat_api::capi::{
    Cluster, ConditionSeverity, Machine, MachineDeployment, MachinePool, MachineSet,
};
use serde_json::json;

use crate::cache::IndexKey;
use crate::events::EventType;
use crate::external::delete_referenced;
use crate::external::{self, Reference};
use crate::object::{
    self, Object, bool_at, ensure_finalizer, ensure_owner, owner_reference, patch, patch_status,
    remove_finalizer,
};
use crate::{Context, Error, conditions};

pub const FINALIZER: &str = "cluster.cluster.x-k8s.io";
use lariat_api::capi::labels::CLUSTER_NAME as CLUSTER_NAME_LABEL;

/// The Cluster an object belongs to: its cluster-name label, else its Cluster owner.
pub fn cluster_name_of(meta: &kube::api::ObjectMeta) -> Option<&str> {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(CLUSTER_NAME_LABEL))
        .or_else(|| {
            meta.owner_references
                .iter()
                .flatten()
                .find(|o| o.kind == "Cluster" && o.api_version.starts_with("cluster.x-k8s.io/"))
                .map(|o| &o.name)
        })
        .map(String::as_str)
}

/// Cluster API's paused contract for an object of a Cluster: while the object carries the
/// paused annotation, or its Cluster is paused, nothing of it is reconciled, its deletion
/// included. That is what lets `lariat move` (as `clusterctl move`) take a cluster's objects
/// out of a server without any controller there deleting what they stand for.
pub async fn object_paused(
    caches: &crate::cache::Caches,
    meta: &kube::api::ObjectMeta,
) -> Result<bool, Error> {
    if meta
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(lariat_api::capi::annotations::PAUSED))
    {
        return Ok(true);
    }
    Ok(of_object(caches, meta).await?.is_some_and(|c| c.paused()))
}

/// The Cluster an object belongs to ([`cluster_name_of`]), from the cache.
pub async fn of_object(
    caches: &crate::cache::Caches,
    meta: &kube::api::ObjectMeta,
) -> Result<Option<Arc<Cluster>>, Error> {
    let (Some(namespace), Some(cluster)) = (meta.namespace.as_deref(), cluster_name_of(meta))
    else {
        return Ok(None);
    };
    caches.typed::<Cluster>().get(namespace, cluster).await
}

pub async fn reconcile(cluster: Arc<Cluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    let api: Api<Cluster> = Api::namespaced(ctx.client.clone(), &namespace);
    // As Cluster API: the finalizer first (never on an object being deleted), then paused
    // before deletion, so a paused Cluster being deleted (by `lariat move`, in the server it
    // leaves) does not delete its infrastructure.
    if cluster.metadata.deletion_timestamp.is_none()
        && ensure_finalizer(&api, &cluster, FINALIZER).await?
    {
        // The write's own watch event brings the Cluster back.
        return Ok(Action::await_change());
    }
    let conditions = cluster.v1beta2_conditions();
    if crate::paused::check(&api, &cluster.metadata, conditions, Some(&cluster)).await? {
        return Ok(Action::await_change());
    }
    if cluster.metadata.deletion_timestamp.is_some() {
        return reconcile_delete(&cluster, &ctx, &api).await;
    }
    let owner = owner_reference(cluster.as_ref(), false);
    let uid = cluster.uid().unwrap_or_default();
    let before = cluster.status.clone().unwrap_or_default();
    let mut status = before.clone();
    let mut list = status.conditions.take().unwrap_or_default();
    let mut labels = BTreeMap::new();
    labels.insert(CLUSTER_NAME_LABEL.to_string(), name.clone());

    let pass = Pass {
        cluster: &cluster,
        ctx: &ctx,
        api: &api,
        namespace: &namespace,
        name: &name,
        uid: &uid,
        owner,
        labels,
    };
    let infra_ready = pass.infrastructure(&mut status, &mut list).await?;
    let ControlPlane {
        initialized: cp_initialized,
        ready: cp_ready,
        why_not,
    } = pass.control_plane(&list).await?;
    conditions::set(
        &mut list,
        "ControlPlaneInitialized",
        cp_initialized,
        "WaitingForControlPlane",
        "the control plane is not initialized yet",
    );
    match why_not {
        Some((reason, message, severity)) => {
            conditions::set(&mut list, "ControlPlaneReady", false, &reason, &message);
            if let Some(condition) = list.iter_mut().find(|c| c.type_ == "ControlPlaneReady") {
                condition.severity = Some(severity);
            }
        }
        None => conditions::set(
            &mut list,
            "ControlPlaneReady",
            cp_ready,
            "WaitingForControlPlane",
            "the control plane is not ready yet",
        ),
    }
    // A control plane that serves but reports a failure (an upgrade EKS refused) leaves the
    // Cluster not Ready, saying why; `status.controlPlaneReady` still says it serves.
    let ready = infra_ready && conditions::is_true(&list, "ControlPlaneReady");
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
        .find(|c| c.type_ == blocking)
        .map(|c| {
            (
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
        .unwrap_or_default();
    conditions::set(&mut list, "Ready", ready, &reason, &message);

    let phase = if status.failure_reason.is_some() {
        ClusterPhase::Failed
    } else if infra_ready && (has_endpoint(&cluster) || cp_initialized) {
        ClusterPhase::Provisioned
    } else if cluster.spec.infrastructure_ref.is_some() || cluster.spec.control_plane_ref.is_some()
    {
        ClusterPhase::Provisioning
    } else {
        ClusterPhase::Pending
    };
    status.phase = Some(phase);
    status.infrastructure_ready = Some(infra_ready);
    status.control_plane_ready = Some(cp_ready);
    status.observed_generation = Some(cluster.metadata.generation.unwrap_or(0));
    let waits_for_a_kind = list.iter().any(|c| {
        matches!(
            c.reason.as_deref(),
            Some("ProviderNotEnabled" | "InfrastructureKindUnknown" | "ControlPlaneKindUnknown")
        )
    });
    status.conditions = Some(list);
    if status != before {
        pass.report(&before, &status, phase, ready, &reason, &message)
            .await?;
    }
    Ok(if waits_for_a_kind {
        // Enabling a provider or creating a CRD is not among what wakes a Cluster (a kind not
        // served has no cache to watch): look again shortly.
        Action::requeue(Duration::from_secs(5))
    } else {
        // Its infrastructure, control plane and Machines wake it.
        crate::resync()
    })
}

/// What one reconcile of a live Cluster works with.
struct Pass<'a> {
    cluster: &'a Cluster,
    ctx: &'a Context,
    api: &'a Api<Cluster>,
    namespace: &'a str,
    name: &'a str,
    uid: &'a str,
    /// The owner reference the Cluster puts on what it references.
    owner: serde_json::Value,
    /// The labels it puts on them.
    labels: BTreeMap<String, String>,
}

impl Pass<'_> {
    /// The infrastructure: whether it is ready; it is owned and labelled, the endpoint it
    /// publishes is copied to the Cluster, its failure domains and failure to `status`, and
    /// why it is not ready to the conditions.
    async fn infrastructure(
        &self,
        status: &mut lariat_api::capi::cluster::ClusterStatus,
        list: &mut Vec<lariat_api::capi::Condition>,
    ) -> Result<bool, Error> {
        let Pass {
            cluster,
            ctx,
            api,
            namespace,
            name,
            uid,
            owner,
            labels,
        } = self;
        let infra_reference = cluster
            .spec
            .infrastructure_ref
            .as_ref()
            .and_then(Reference::from_object_reference);
        Ok(match infra_reference {
            None => true,
            Some(reference) => match reference.get(&ctx.caches, namespace).await {
                Err(Error::UnknownKind { kind, .. }) => {
                    external::kind_unknown(list, &kind);
                    false
                }
                Err(Error::InvalidReference(message)) => {
                    let message = format!("spec.infrastructureRef: {message}");
                    conditions::set(
                        list,
                        "InfrastructureReady",
                        false,
                        "InvalidReference",
                        &message,
                    );
                    false
                }
                Err(e) => return Err(e),
                Ok(None) => {
                    // Which of the two a user must act on: the object, or the provider that
                    // would reconcile it once it exists.
                    let missing =
                        format!("{} {} does not exist yet", reference.kind, reference.name);
                    let message =
                        match external::provider_not_enabled(&ctx.caches, &reference).await {
                            Some(provider) => format!("{missing}; {provider}"),
                            None => missing,
                        };
                    conditions::set(
                        list,
                        "InfrastructureReady",
                        false,
                        "WaitingForInfrastructure",
                        &message,
                    );
                    false
                }
                Ok(Some(infra))
                    if let Some(message) = reference.claimed_elsewhere(
                        &infra,
                        "spec.infrastructureRef",
                        "Cluster",
                        uid,
                    ) =>
                {
                    conditions::set(
                        list,
                        "InfrastructureReady",
                        false,
                        "InfrastructureClaimed",
                        &message,
                    );
                    false
                }
                Ok(Some(infra)) => {
                    let infra_api = reference.api(&ctx.client, namespace).await?;
                    ensure_owner(&infra_api, &infra, owner.clone()).await?;
                    object::ensure_labels(&infra_api, &infra, labels).await?;
                    let endpoint = &infra.data["spec"]["controlPlaneEndpoint"];
                    if endpoint["host"].as_str().is_some_and(|h| !h.is_empty())
                        && !has_endpoint(cluster)
                    {
                        patch(
                            api,
                            name,
                            json!({"spec": {"controlPlaneEndpoint": endpoint}}),
                        )
                        .await?;
                    }
                    if let Some(domains) = infra.data["status"].get("failureDomains") {
                        status.failure_domains = serde_json::from_value(domains.clone()).ok();
                    }
                    let (ready, failure) = external::read_infrastructure(&infra, &reference, list);
                    if let Some((reason, message)) = failure {
                        status.failure_reason = Some(reason);
                        status.failure_message = Some(message);
                    }
                    if !ready
                        && let Some(message) =
                            external::provider_not_enabled(&ctx.caches, &reference).await
                    {
                        conditions::set(
                            list,
                            "InfrastructureReady",
                            false,
                            "ProviderNotEnabled",
                            &message,
                        );
                    }
                    ready
                }
            },
        })
    }

    /// The control plane: whether it is initialized (its API answers) and ready.
    async fn control_plane(
        &self,
        list: &[lariat_api::capi::Condition],
    ) -> Result<ControlPlane, Error> {
        let Pass {
            cluster,
            ctx,
            namespace,
            name,
            uid,
            owner,
            labels,
            ..
        } = self;
        let imported = cluster
            .annotations()
            .contains_key(lariat_api::management::IMPORTED_ANNOTATION);
        let control_plane_reference = cluster
            .spec
            .control_plane_ref
            .as_ref()
            .and_then(Reference::from_object_reference);
        Ok(match control_plane_reference {
            // An imported cluster's control plane is whatever its agent reaches: up while the
            // agent is connected.
            None if imported => {
                // Initialized once its agent first connected, for good (as Cluster API's
                // condition is), so a reconnecting agent does not send the cluster back to
                // Pending; Ready follows the connection.
                let connected = conditions::is_true(list, "Connected");
                let initialized = connected || conditions::is_true(list, "ControlPlaneInitialized");
                ControlPlane::plain(initialized, connected)
            }
            None => {
                let running = control_plane_machines_running(ctx, namespace, name).await?;
                ControlPlane::plain(running, running)
            }
            Some(reference) => match reference.get(&ctx.caches, namespace).await {
                Err(Error::UnknownKind { kind, .. }) => ControlPlane::not_ready(
                    "ControlPlaneKindUnknown",
                    format!("{kind} is not served"),
                ),
                Err(Error::InvalidReference(message)) => ControlPlane::not_ready(
                    "InvalidReference",
                    format!("spec.controlPlaneRef: {message}"),
                ),
                Err(e) => return Err(e),
                Ok(None) => ControlPlane::plain(false, false),
                Ok(Some(cp))
                    if let Some(message) = reference.claimed_elsewhere(
                        &cp,
                        "spec.controlPlaneRef",
                        "Cluster",
                        uid,
                    ) =>
                {
                    ControlPlane::not_ready("ControlPlaneClaimed", message)
                }
                Ok(Some(cp)) => {
                    let cp_api = reference.api(&ctx.client, namespace).await?;
                    ensure_owner(&cp_api, &cp, owner.clone()).await?;
                    object::ensure_labels(&cp_api, &cp, labels).await?;
                    let ready = external::ready(&cp);
                    ControlPlane {
                        initialized: bool_at(&cp.data, &["status", "initialized"]),
                        ready,
                        why_not: ready.then(|| external::failing(&cp)).flatten(),
                    }
                }
            },
        })
    }

    /// Writes the new `status`, with an Event when the Cluster is Provisioned or Failed, and
    /// when it waits for something a user must do.
    async fn report(
        &self,
        before: &lariat_api::capi::cluster::ClusterStatus,
        status: &lariat_api::capi::cluster::ClusterStatus,
        phase: ClusterPhase,
        ready: bool,
        reason: &str,
        message: &str,
    ) -> Result<(), Error> {
        let Pass {
            cluster,
            ctx,
            api,
            name,
            ..
        } = self;
        patch_status(api, name, serde_json::to_value(status).unwrap_or_default()).await?;
        if before.phase != Some(phase)
            && matches!(phase, ClusterPhase::Provisioned | ClusterPhase::Failed)
        {
            let (type_, reason, message) = if phase == ClusterPhase::Failed {
                (
                    EventType::Warning,
                    "Failed",
                    format!(
                        "Cluster {name} failed: {}: {}",
                        status.failure_reason.as_deref().unwrap_or_default(),
                        status.failure_message.as_deref().unwrap_or_default()
                    ),
                )
            } else {
                (
                    EventType::Normal,
                    "Provisioned",
                    format!("Cluster {name} is Provisioned"),
                )
            };
            ctx.events
                .publish(*cluster, "Cluster", type_, reason, &message)
                .await;
        }
        // Why it waits, when the reason is something a user must do.
        if !ready && reason == "ProviderNotEnabled" {
            ctx.events
                .publish(*cluster, "Cluster", EventType::Warning, reason, message)
                .await;
        }
        Ok(())
    }
}

/// What the Cluster's control plane says: initialized, ready (`status.controlPlaneReady`),
/// and, when the Cluster's `ControlPlaneReady` condition must say more than "not ready yet",
/// its reason, message and severity.
struct ControlPlane {
    initialized: bool,
    ready: bool,
    why_not: Option<(String, String, ConditionSeverity)>,
}

impl ControlPlane {
    fn plain(initialized: bool, ready: bool) -> ControlPlane {
        ControlPlane {
            initialized,
            ready,
            why_not: None,
        }
    }

    fn not_ready(reason: &str, message: String) -> ControlPlane {
        ControlPlane {
            initialized: false,
            ready: false,
            why_not: Some((reason.to_string(), message, ConditionSeverity::Info)),
        }
    }
}

/// Whether the Cluster has a control plane endpoint host.
fn has_endpoint(cluster: &Cluster) -> bool {
    cluster
        .spec
        .control_plane_endpoint
        .as_ref()
        .and_then(|e| e.host.as_deref())
        .is_some_and(|h| !h.is_empty())
}

async fn control_plane_machines_running(
    ctx: &Context,
    namespace: &str,
    cluster: &str,
) -> Result<bool, Error> {
    let machines = ctx
        .caches
        .typed::<Machine>()
        .indexed(IndexKey::Cluster {
            namespace,
            name: cluster,
        })
        .await?;
    Ok(machines.iter().any(|m| {
        m.labels()
            .contains_key(lariat_api::capi::labels::MACHINE_CONTROL_PLANE)
            && crate::machine::phase(m) == Some(lariat_api::capi::machine::MachinePhase::Running)
    }))
}

/// The objects of kind `K` labelled as the cluster's, listed from the API: deletion must see
/// what exists now, not what a cache held a moment ago.
async fn listed<
    K: Object + Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>,
>(
    ctx: &Context,
    namespace: &str,
    cluster: &str,
) -> Result<(Api<K>, Vec<K>), Error> {
    let api: Api<K> = Api::namespaced(ctx.client.clone(), namespace);
    let selector = format!("{CLUSTER_NAME_LABEL}={cluster}");
    let items = api
        .list(&ListParams::default().labels(&selector))
        .await?
        .items;
    Ok((api, items))
}

/// Deletes each of `objects` not being deleted yet; returns whether there were any.
async fn delete_all<K: Object>(api: &Api<K>, objects: &[K]) -> bool {
    for object in objects {
        if object.meta().deletion_timestamp.is_none() {
            let _ = api
                .delete(&object.name_any(), &DeleteParams::default())
                .await;
        }
    }
    !objects.is_empty()
}

/// Deletes what the cluster is made of, in order, and removes the finalizer once all is gone.
async fn reconcile_delete(
    cluster: &Cluster,
    ctx: &Context,
    api: &Api<Cluster>,
) -> Result<Action, Error> {
    let namespace = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    if cluster.status.as_ref().and_then(|s| s.phase) != Some(ClusterPhase::Deleting) {
        patch_status(api, &name, json!({"phase": "Deleting"})).await?;
        let message =
            "Deleting the cluster: workers first, then the control plane, then its infrastructure";
        ctx.events
            .publish(cluster, "Cluster", EventType::Normal, "Deleting", message)
            .await;
    }
    // Workers first: deployments, their sets, pools, and machines that are not control plane.
    let (deployments_api, deployments) =
        listed::<MachineDeployment>(ctx, &namespace, &name).await?;
    let (sets_api, sets) = listed::<MachineSet>(ctx, &namespace, &name).await?;
    let (pools_api, pools) = listed::<MachinePool>(ctx, &namespace, &name).await?;
    let (machines, all_machines) = listed::<Machine>(ctx, &namespace, &name).await?;
    let workers: Vec<Machine> = all_machines
        .into_iter()
        .filter(|m| {
            !m.labels()
                .contains_key(lariat_api::capi::labels::MACHINE_CONTROL_PLANE)
        })
        .collect();
    let waiting = delete_all(&deployments_api, &deployments).await
        | delete_all(&sets_api, &sets).await
        | delete_all(&pools_api, &pools).await
        | delete_all(&machines, &workers).await;
    if waiting {
        return Ok(Action::requeue(Duration::from_millis(500)));
    }
    // Then the control plane, which deletes its own machines.
    if !delete_referenced(ctx, cluster, cluster.spec.control_plane_ref.as_ref()).await? {
        return Ok(Action::requeue(Duration::from_millis(500)));
    }
    let (_, remaining) = listed::<Machine>(ctx, &namespace, &name).await?;
    if delete_all(&machines, &remaining).await {
        return Ok(Action::requeue(Duration::from_millis(500)));
    }
    // Last the infrastructure.
    if !delete_referenced(ctx, cluster, cluster.spec.infrastructure_ref.as_ref()).await? {
        return Ok(Action::requeue(Duration::from_millis(500)));
    }
    remove_finalizer(api, cluster, FINALIZER).await?;
    ctx.caches.forget_workload(&namespace, &name);
    Ok(Action::await_change())
}
