//! The KubeadmControlPlane controller: keeps `spec.replicas` control-plane Machines, one change
//! at a time so etcd keeps quorum. It scales up one Machine after another, each waiting for the
//! previous to run; it rolls a version or template change by adding one new Machine before
//! removing one outdated one; and it reports `initialized` once a control-plane Node exists.

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::core::ApiResource;
use kube::runtime::controller::Action;
use lariat_api::capi::machine::MachinePhase;
use lariat_api::capi::{Cluster, Machine};
use lariat_api::controlplane::KubeadmControlPlane;
use lariat_controllers::external::{Reference, clone_target, clone_template};
use lariat_controllers::machine::{has_node, phase};
use lariat_controllers::object::Object;
use lariat_controllers::object::{
    self as obj, ensure_finalizer, owner_reference, patch_status, remove_finalizer,
};
use lariat_controllers::paused::V1Beta2Conditions;
use lariat_controllers::{Error, conditions};
use serde_json::{Value, json};

use lariat_controllers::cache::{Caches, IndexKey};

pub const FINALIZER: &str = "kubeadm.controlplane.cluster.x-k8s.io";
pub const CONTROL_PLANE_LABEL: &str = "cluster.x-k8s.io/control-plane";
pub use lariat_api::capi::labels::MACHINE_CONTROL_PLANE_NAME as CONTROL_PLANE_NAME_LABEL;
use lariat_api::capi::labels::format_value;

pub struct Context {
    pub client: kube::Client,
    pub caches: Arc<Caches>,
    /// Events for `kubectl describe kcp`.
    pub events: lariat_controllers::events::Recorder,
}

impl Context {
    /// A context with caches of its own (tests that call the reconciler directly).
    pub fn new(client: kube::Client) -> Context {
        Context::with_caches(Caches::new(client))
    }

    pub fn with_caches(caches: Arc<Caches>) -> Context {
        let client = caches.client().clone();
        Context {
            events: lariat_controllers::events::Recorder::new(client.clone()),
            client,
            caches,
        }
    }

    async fn event(&self, kcp: &KubeadmControlPlane, reason: &str, message: &str) {
        self.events
            .publish(
                kcp,
                "KubeadmControlPlane",
                lariat_controllers::events::EventType::Normal,
                reason,
                message,
            )
            .await;
    }
}

/// KubeadmControlPlanes are read as JSON, as the Cluster's `controlPlaneRef` reaches them
/// (Cluster API's contract), and parsed here.
pub fn resource() -> ApiResource {
    ApiResource::erase::<KubeadmControlPlane>(&())
}

/// A Machine is outdated when its version or infrastructure template no longer match.
fn outdated(kcp: &KubeadmControlPlane, machine: &Machine) -> bool {
    let template = kcp.spec.machine_template.infrastructure_ref.name.as_deref();
    machine.spec.version.as_deref() != Some(kcp.spec.version.as_str())
        || machine
            .annotations()
            .get("cluster.x-k8s.io/cloned-from-name")
            .map(String::as_str)
            .is_some_and(|t| Some(t) != template)
}

/// What a KubeadmControlPlane reads of its Machines (see `Cache::changes_in`): whose they
/// are, their version and template (outdated or not), domain, phase, readiness, Node, and the
/// health checks that ask for remediation. A Machine's other writes (its addresses, the
/// messages of its conditions) leave the control plane with nothing to do.
pub fn reads_of_machine(machine: &Machine, hash: &mut std::collections::hash_map::DefaultHasher) {
    use std::hash::Hash;
    for owner in machine.owner_references() {
        (&owner.uid, owner.controller).hash(hash);
    }
    let annotations = machine.annotations();
    for key in ["cluster.x-k8s.io/cloned-from-name", INIT_ANNOTATION] {
        annotations.get(key).hash(hash);
    }
    let spec = &machine.spec;
    (&spec.version, &spec.failure_domain, &spec.provider_id).hash(hash);
    let status = machine.status.as_ref();
    phase(machine).hash(hash);
    status.and_then(|s| s.infrastructure_ready).hash(hash);
    status.and_then(|s| s.bootstrap_ready).hash(hash);
    has_node(machine).hash(hash);
    let machine_conditions = conditions::of_machine(machine);
    // Whether its Node is Ready: what remediation's quorum counts.
    conditions::is_true(machine_conditions, "NodeHealthy").hash(hash);
    conditions::needs_owner_remediation(machine_conditions).hash(hash);
    conditions::is_false(machine_conditions, conditions::HEALTH_CHECK_SUCCEEDED).hash(hash);
}

pub async fn reconcile(object: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = object.namespace().unwrap_or_default();
    let name = object.name_any();
    let kcp: KubeadmControlPlane = match lariat_controllers::object::parse(&object) {
        Ok(kcp) => kcp,
        // Left alone while paused, even unreadable.
        Err(_)
            if lariat_controllers::cluster::object_paused(&ctx.caches, &object.metadata)
                .await? =>
        {
            return Ok(Action::await_change());
        }
        Err(e) => return Err(e),
    };
    let api: Api<KubeadmControlPlane> = Api::namespaced(ctx.client.clone(), &namespace);
    // Paused before deletion: see `object_paused`.
    let cluster_of = lariat_controllers::cluster::of_object(&ctx.caches, &kcp.metadata).await?;
    let conditions = kcp.v1beta2_conditions();
    if lariat_controllers::paused::check(&api, &kcp.metadata, conditions, cluster_of.as_deref())
        .await?
    {
        return Ok(Action::await_change());
    }
    let machines_api: Api<Machine> = Api::namespaced(ctx.client.clone(), &namespace);
    let uid = kcp.uid().unwrap_or_default();
    let machines_cache = ctx.caches.typed::<Machine>();
    let machines: Vec<Arc<Machine>> = machines_cache.indexed(IndexKey::Owner(&uid)).await?;

    if kcp.metadata.deletion_timestamp.is_some() {
        return delete(&api, &machines_api, &kcp, &machines).await;
    }
    if ensure_finalizer(&api, &kcp, FINALIZER).await? {
        // The write's own watch event brings the object back.
        return Ok(Action::await_change());
    }
    // Contract: core sets the Cluster as owner (a write that wakes this object); until then,
    // wait.
    let Some(cluster) = kcp
        .owner_references()
        .iter()
        .find(|o| o.kind == "Cluster")
        .map(|o| o.name.clone())
    else {
        return Ok(Action::await_change());
    };
    let Some(cluster_object) = ctx
        .caches
        .typed::<Cluster>()
        .get(&namespace, &cluster)
        .await?
    else {
        return Ok(Action::requeue(Duration::from_secs(1)));
    };
    if cluster_object
        .status
        .as_ref()
        .and_then(|s| s.infrastructure_ready)
        != Some(true)
    {
        // The Cluster's change wakes it.
        return Ok(lariat_controllers::resync());
    }
    lariat_controllers::external::adopt_template(
        &ctx.caches,
        &namespace,
        Reference::from_object_reference(&kcp.spec.machine_template.infrastructure_ref),
        &cluster_object,
    )
    .await?;

    let desired = kcp.spec.replicas.unwrap_or(1).max(0) as usize;
    let live: Vec<&Machine> = machines
        .iter()
        .map(|m| m.as_ref())
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        .collect();
    let deleting = machines.len() - live.len();
    let running = |m: &Machine| phase(m) == Some(MachinePhase::Running);
    let settled = deleting == 0 && live.iter().all(|m| running(m));
    let stale: Vec<&&Machine> = live.iter().filter(|m| outdated(&kcp, m)).collect();
    let stored = kcp.status.clone().unwrap_or_default();
    let initialized = stored.initialized == Some(true) || machines.iter().any(|m| has_node(m));

    for machine in live
        .iter()
        .filter(|m| m.status.as_ref().and_then(|s| s.infrastructure_ready) != Some(true))
    {
        let first = machine
            .annotations()
            .get(INIT_ANNOTATION)
            .is_some_and(|v| v == "true");
        ensure_parts(&ctx, &kcp, &cluster, &machine.name_any(), first).await?;
    }
    let domains = control_plane_domains(&cluster_object);
    // Remediation first, as a MachineHealthCheck asked, one machine at a time and never at
    // the cost of etcd quorum; the scale-up below then replaces the machine.
    if let Some(unhealthy) = live
        .iter()
        .find(|m| conditions::needs_owner_remediation(conditions::of_machine(m)))
    {
        remediate(&ctx, &kcp, &live, unhealthy, deleting).await?;
    } else if settled {
        // One change at a time: act only when every Machine runs and none is being deleted.
        if live.len() < desired || (!stale.is_empty() && live.len() == desired) {
            let domain = least_used_domain(&domains, &live);
            let first = live.is_empty() && !initialized;
            let created = create_machine(&ctx, &kcp, &cluster, first, domain).await?;
            let parts = ensure_parts(&ctx, &kcp, &cluster, &created, first).await;
            // The next reconcile must count it, even when its parts failed (Cluster API's
            // expectations): a second init machine would be a second cluster.
            machines_cache.observed(&namespace, &[created], &[]).await?;
            parts?;
        } else if live.len() > desired {
            // Outdated machines go first; otherwise the oldest in the most crowded domain.
            let victim = stale.first().map(|m| **m).or_else(|| {
                let crowded = most_used_domain(&live);
                live.iter()
                    .filter(|m| m.spec.failure_domain.as_deref() == crowded.as_deref())
                    .min_by_key(|m| m.metadata.creation_timestamp.as_ref().map(|t| t.0))
                    .copied()
            });
            if let Some(victim) = victim {
                tracing::info!(kubeadmcontrolplane = %format!("{namespace}/{name}"), machine = %victim.name_any(), "removing a control-plane machine");
                if machines_api
                    .delete(&victim.name_any(), &DeleteParams::default())
                    .await
                    .is_ok()
                {
                    let message = format!("Deleted control-plane machine {:?}", victim.name_any());
                    ctx.event(&kcp, "SuccessfulDelete", &message).await;
                    machines_cache
                        .observed(&namespace, &[], &[victim.name_any()])
                        .await?;
                }
            }
        }
    }

    report_status(&api, &kcp, &live, stale.len(), desired, initialized).await?;
    // Its Machines' and its Cluster's changes wake it.
    Ok(lariat_controllers::resync())
}

/// Deletes the control plane's Machines, and lets it go once they are gone.
async fn delete(
    api: &Api<KubeadmControlPlane>,
    machines_api: &Api<Machine>,
    kcp: &KubeadmControlPlane,
    machines: &[Arc<Machine>],
) -> Result<Action, Error> {
    for machine in machines
        .iter()
        .filter(|m| m.metadata.deletion_timestamp.is_none())
    {
        let _ = machines_api
            .delete(&machine.name_any(), &DeleteParams::default())
            .await;
    }
    if machines.is_empty() {
        remove_finalizer(api, kcp, FINALIZER).await?;
        return Ok(Action::await_change());
    }
    Ok(Action::requeue(Duration::from_millis(500)))
}

/// Writes the control plane's counts and conditions when they changed (`Ready`'s flip
/// counts; its other conditions' messages alone do not).
async fn report_status(
    api: &Api<KubeadmControlPlane>,
    kcp: &KubeadmControlPlane,
    live: &[&Machine],
    stale: usize,
    desired: usize,
    initialized: bool,
) -> Result<(), Error> {
    let running = |m: &Machine| phase(m) == Some(MachinePhase::Running);
    let stored = kcp.status.clone().unwrap_or_default();
    let ready = live.iter().filter(|m| running(m)).count() as i64;
    let updated = live.iter().filter(|m| !outdated(kcp, m)).count() as i64;
    let stored_conditions = stored.conditions.clone().unwrap_or_default();
    let mut list = stored_conditions.clone();
    conditions::set(
        &mut list,
        "Available",
        initialized,
        "WaitingForKubeadmInit",
        "the first control-plane machine has not joined yet",
    );
    conditions::set(
        &mut list,
        "Resized",
        live.len() == desired,
        if live.len() > desired {
            "ScalingDown"
        } else {
            "ScalingUp"
        },
        &format!("{} of {desired} machines", live.len()),
    );
    conditions::set(
        &mut list,
        "MachinesSpecUpToDate",
        stale == 0,
        "RollingUpdateInProgress",
        &format!("{stale} machines need rollout"),
    );
    conditions::set(
        &mut list,
        "MachinesReady",
        ready as usize == live.len(),
        "WaitingForMachines",
        "not every control-plane machine runs",
    );
    let all_ready = initialized && ready as usize == desired && stale == 0;
    conditions::set(
        &mut list,
        "Ready",
        all_ready,
        "WaitingForMachines",
        "the control plane is not fully up",
    );
    let version = live
        .iter()
        .filter(|m| running(m))
        .filter_map(|m| m.spec.version.as_deref())
        // By number, so that v1.9 comes before v1.10.
        .min_by_key(|v| lariat_api::KubernetesVersion::parse(v))
        .map(String::from);
    let status = json!({
        "replicas": live.len(),
        "updatedReplicas": updated,
        "readyReplicas": ready,
        "unavailableReplicas": (live.len() as i64 - ready).max(0),
        "initialized": initialized,
        "ready": ready > 0,
        "version": version,
        "selector": format!("{CONTROL_PLANE_NAME_LABEL}={}", format_value(&kcp.name_any())),
        "conditions": list,
        "observedGeneration": kcp.metadata.generation.unwrap_or(0),
    });
    let stored = serde_json::to_value(&stored).unwrap_or_default();
    let changed = status
        .as_object()
        .expect("object")
        .iter()
        .any(|(k, v)| k != "conditions" && stored[k] != *v)
        || conditions::is_true(&list, "Ready") != conditions::is_true(&stored_conditions, "Ready");
    if changed {
        patch_status(api, &kcp.name_any(), status).await?;
    }
    Ok(())
}

/// The failure domains the Cluster offers for control-plane machines, sorted by name.
fn control_plane_domains(cluster: &Cluster) -> Vec<String> {
    // A BTreeMap: sorted by name already.
    cluster
        .status
        .as_ref()
        .and_then(|s| s.failure_domains.as_ref())
        .map(|d| {
            d.iter()
                .filter(|(_, spec)| spec.control_plane == Some(true))
                .map(|(name, _)| name.clone())
                .collect()
        })
        .unwrap_or_default()
}

fn domain_counts<'a>(live: &[&'a Machine]) -> std::collections::BTreeMap<&'a str, usize> {
    let mut counts = std::collections::BTreeMap::new();
    for machine in live {
        if let Some(domain) = machine.spec.failure_domain.as_deref() {
            *counts.entry(domain).or_default() += 1;
        }
    }
    counts
}

/// Where the next control-plane machine goes: the domain with the fewest, first by name on a
/// tie, so three machines land in three zones.
fn least_used_domain(domains: &[String], live: &[&Machine]) -> Option<String> {
    let counts = domain_counts(live);
    domains
        .iter()
        .min_by_key(|d| counts.get(d.as_str()).copied().unwrap_or(0))
        .cloned()
}

fn most_used_domain(live: &[&Machine]) -> Option<String> {
    let counts = domain_counts(live);
    let mut ordered: Vec<(&str, usize)> = counts.into_iter().collect();
    ordered.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    ordered.first().map(|(d, _)| d.to_string())
}

/// Deletes a control-plane machine a MachineHealthCheck marked unhealthy, if that is safe:
/// no other machine is being deleted, and the etcd members left after removing it (one per
/// machine) keep a healthy quorum. Otherwise the machine's `OwnerRemediated` condition says
/// why it waits.
async fn remediate(
    ctx: &Context,
    kcp: &KubeadmControlPlane,
    live: &[&Machine],
    unhealthy: &Machine,
    deleting: usize,
) -> Result<(), Error> {
    let namespace = kcp.namespace().unwrap_or_default();
    let machines: Api<Machine> = Api::namespaced(ctx.client.clone(), &namespace);
    // Judge the members by the workload cluster itself, as upstream asks etcd: a Machine's
    // conditions can lag behind its Node by a reconcile, and a wrong guess here loses quorum.
    let cluster = &unhealthy.spec.cluster_name;
    let ready_nodes: std::collections::HashSet<String> =
        match lariat_controllers::machine::workload_client(&ctx.client, &namespace, cluster).await {
            Some(workload) => Api::<k8s_openapi::api::core::v1::Node>::all(workload)
                .list(&ListParams::default())
                .await
                .map(|list| {
                    list.items
                        .into_iter()
                        .filter(|n| {
                            n.status
                                .as_ref()
                                .and_then(|s| s.conditions.as_ref())
                                .is_some_and(|c| {
                                    c.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                                })
                        })
                        .filter_map(|n| n.spec.and_then(|s| s.provider_id))
                        .collect()
                })
                .unwrap_or_default(),
            None => Default::default(),
        };
    let healthy_others = live
        .iter()
        .filter(|m| m.name_any() != unhealthy.name_any())
        .filter(|m| phase(m) == Some(MachinePhase::Running))
        .filter(|m| {
            !conditions::is_false(
                conditions::of_machine(m),
                conditions::HEALTH_CHECK_SUCCEEDED,
            )
        })
        .filter(|m| {
            m.spec
                .provider_id
                .as_ref()
                .is_some_and(|id| ready_nodes.contains(id))
        })
        .count();
    let members_after = live.len().saturating_sub(1);
    let quorum_after = members_after / 2 + 1;
    let refusal = if deleting > 0 {
        Some("waiting for another control-plane machine to be deleted first".to_string())
    } else if members_after == 0 || healthy_others < quorum_after {
        Some(format!(
            "cannot remediate: removing this machine would leave {healthy_others} healthy of {members_after} etcd members, below quorum ({quorum_after})"
        ))
    } else {
        None
    };
    match refusal {
        Some(message) => {
            let mut list = conditions::of_machine(unhealthy).to_vec();
            let current = list
                .iter()
                .find(|c| c.type_ == conditions::OWNER_REMEDIATED)
                .and_then(|c| c.message.clone());
            if current.as_deref() != Some(message.as_str()) {
                tracing::warn!(kubeadmcontrolplane = %format!("{namespace}/{}", kcp.name_any()), machine = %unhealthy.name_any(), "{message}");
                conditions::set(
                    &mut list,
                    conditions::OWNER_REMEDIATED,
                    false,
                    "WaitingForRemediation",
                    &message,
                );
                patch_status(
                    &machines,
                    &unhealthy.name_any(),
                    json!({"conditions": list}),
                )
                .await?;
            }
        }
        None => {
            tracing::info!(kubeadmcontrolplane = %format!("{namespace}/{}", kcp.name_any()), machine = %unhealthy.name_any(), "remediating an unhealthy control-plane machine: deleting it");
            if obj::delete_if_present(&machines, &unhealthy.name_any()).await? {
                let message = format!(
                    "Deleted unhealthy control-plane machine {:?} to replace it",
                    unhealthy.name_any()
                );
                ctx.event(kcp, "SuccessfulDelete", &message).await;
            }
        }
    }
    Ok(())
}

/// Adds one control-plane Machine, in `failure_domain` if the Cluster offers domains, naming
/// its own KubeadmConfig (init for the first, join for the rest) and infrastructure machine
/// cloned from the template, which [`ensure_parts`] makes. Returns its name.
async fn create_machine(
    ctx: &Context,
    kcp: &KubeadmControlPlane,
    cluster: &str,
    first: bool,
    failure_domain: Option<String>,
) -> Result<String, Error> {
    let namespace = kcp.namespace().unwrap_or_default();
    let kcp_name = kcp.name_any();
    let name = format!("{kcp_name}-{}", obj::random_suffix());
    let labels = json!({
        "cluster.x-k8s.io/cluster-name": cluster,
        CONTROL_PLANE_LABEL: "",
        CONTROL_PLANE_NAME_LABEL: format_value(&kcp_name),
    });
    let owner = owner_reference(kcp, true);
    let template = infrastructure_template(kcp)?;
    let mut machine_labels = json!(
        kcp.spec
            .machine_template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone())
            .unwrap_or_default()
    );
    if let (Some(labels), Some(extra)) = (machine_labels.as_object_mut(), labels.as_object()) {
        labels.extend(extra.clone());
    }
    // The first machine inits; the Machine records that in an annotation so its config can be
    // made (again, after a crash) with the right role.
    let machine = json!({
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "Machine",
        // With the Machine controller's finalizer, as Cluster API's control plane creates it:
        // a write (and every watcher's wake-up) fewer.
        "metadata": {"name": name, "namespace": namespace, "labels": machine_labels, "ownerReferences": [owner],
            "finalizers": [lariat_api::capi::machine::MACHINE_FINALIZER],
            // The template it was made from, so a template change marks it outdated.
            "annotations": {INIT_ANNOTATION: first.to_string(), "cluster.x-k8s.io/cloned-from-name": template.name}},
        "spec": {
            "clusterName": cluster,
            "version": kcp.spec.version,
            "bootstrap": {"configRef": {"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1", "kind": "KubeadmConfig", "name": name}},
            "infrastructureRef": clone_target(&template, &name)?.to_json(),
        },
    });
    let mut machine = machine;
    if let Some(domain) = failure_domain {
        machine["spec"]["failureDomain"] = json!(domain);
    }
    let machines: Api<Machine> = Api::namespaced(ctx.client.clone(), &namespace);
    tracing::info!(kubeadmcontrolplane = %format!("{namespace}/{kcp_name}"), machine = %name, first, "adding a control-plane machine");
    // The Machine first, then what it references: a crash in between leaves a Machine whose
    // parts the next reconcile makes, never parts that nobody owns.
    create(&machines, machine).await?;
    let message = if first {
        format!("Created control-plane machine {name:?}, which runs kubeadm init")
    } else {
        format!("Created control-plane machine {name:?}")
    };
    ctx.event(kcp, "SuccessfulCreate", &message).await;
    Ok(name)
}

/// Marks the control-plane Machine that runs `kubeadm init`.
const INIT_ANNOTATION: &str = "controlplane.cluster.x-k8s.io/kubeadm-init";

fn infrastructure_template(kcp: &KubeadmControlPlane) -> Result<Reference, Error> {
    Reference::from_object_reference(&kcp.spec.machine_template.infrastructure_ref)
        .ok_or_else(|| Error::Invalid("spec.machineTemplate.infrastructureRef is required".into()))
}

/// Creates a control-plane Machine's KubeadmConfig and infrastructure machine if missing.
async fn ensure_parts(
    ctx: &Context,
    kcp: &KubeadmControlPlane,
    cluster: &str,
    name: &str,
    first: bool,
) -> Result<(), Error> {
    let namespace = kcp.namespace().unwrap_or_default();
    let labels = json!({
        "cluster.x-k8s.io/cluster-name": cluster,
        CONTROL_PLANE_LABEL: "",
        CONTROL_PLANE_NAME_LABEL: format_value(&kcp.name_any()),
    });
    // The Machine becomes their controller when it adopts them; the control plane is only an
    // owner, so that no object ever has two controllers.
    let owner = owner_reference(kcp, false);
    let configs: Api<DynamicObject> = Api::namespaced_with(
        ctx.client.clone(),
        &namespace,
        &crate::kubeadm_config_resource(),
    );
    if ctx
        .caches
        .of(&crate::kubeadm_config_resource())
        .get(&namespace, name)
        .await?
        .is_none()
    {
        let mut config_spec = kcp.spec.kubeadm_config_spec.clone();
        if !first {
            // Later machines join: their config carries only the join configuration.
            config_spec.init_configuration = None;
            config_spec.cluster_configuration = None;
            config_spec.join_configuration.get_or_insert_default();
        }
        let config = json!({
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1",
            "kind": "KubeadmConfig",
            "metadata": {"name": name, "namespace": namespace, "labels": labels, "ownerReferences": [owner]},
            "spec": config_spec,
        });
        create(&configs, config).await?;
    }
    let template = infrastructure_template(kcp)?;
    if clone_target(&template, name)?
        .get(&ctx.caches, &namespace)
        .await?
        .is_none()
    {
        clone_template(&ctx.caches, &namespace, &template, name, &labels, owner).await?;
    }
    Ok(())
}

async fn create<K: Object>(api: &Api<K>, object: Value) -> Result<(), Error> {
    let object: K = serde_json::from_value(object).map_err(|e| Error::Invalid(e.to_string()))?;
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn versions_sort_by_number() {
        let mut versions = vec!["v1.10.0", "v1.9.3", "v1.30.2", "v1.9.10"];
        versions.sort_by_key(|v| lariat_api::KubernetesVersion::parse(v));
        assert_eq!(versions, ["v1.9.3", "v1.9.10", "v1.10.0", "v1.30.2"]);
    }
}
