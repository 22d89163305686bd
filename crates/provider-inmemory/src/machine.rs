//! InMemoryMachine: "boots" once the Machine's bootstrap data exists and the provisioning delay
//! has passed, then registers a Ready Node in the simulated workload cluster. Failure
//! injection: a machine that never boots, and a Node that turns NotReady after a delay.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use lariat_api::capi::{Cluster, Machine};
use lariat_api::infrastructure::InMemoryMachine;
use lariat_api::infrastructure::in_memory::{InMemoryPodBehavior, POD_BEHAVIOR_ANNOTATION};
use lariat_controllers::events::EventType;
use lariat_controllers::object::{ensure_finalizer, patch, patch_status, remove_finalizer};
use lariat_controllers::{Error, conditions};
use serde_json::json;

use crate::{Context, cluster_key, resource};

pub const FINALIZER: &str = "inmemorymachine.infrastructure.cluster.x-k8s.io";
/// When the machine started booting (bootstrap data first seen), so a restart keeps the delay.
const BOOT_STARTED: &str = "infrastructure.lariat.dev/boot-started";
/// When the machine's Node became Ready, for `nodeNotReadyAfter`.
const BOOTED: &str = "infrastructure.lariat.dev/booted";

fn since(annotation: Option<&String>) -> Option<Duration> {
    let at = chrono::DateTime::parse_from_rfc3339(annotation?).ok()?;
    (chrono::Utc::now() - at.with_timezone(&chrono::Utc))
        .to_std()
        .ok()
        .or(Some(Duration::ZERO))
}

/// The simulated cluster this machine belongs to: its Cluster's InMemoryCluster.
async fn workload_key(
    ctx: &Context,
    namespace: &str,
    cluster: &str,
) -> Result<Option<String>, Error> {
    let Some(cluster) = ctx
        .caches
        .typed::<Cluster>()
        .get(namespace, cluster)
        .await?
    else {
        return Ok(None);
    };
    Ok(cluster
        .spec
        .infrastructure_ref
        .as_ref()
        .and_then(|r| r.name.as_deref())
        .map(|infra| cluster_key(namespace, infra)))
}

/// What an InMemoryMachine reads of its Machine (see `Cache::changes_in`): its bootstrap
/// data, its cluster, and what its Node is made from.
pub fn reads_of_machine(machine: &Machine, hash: &mut std::collections::hash_map::DefaultHasher) {
    use std::hash::Hash;
    let spec = &machine.spec;
    spec.bootstrap.data_secret_name.hash(hash);
    spec.cluster_name.hash(hash);
    spec.version.hash(hash);
    spec.failure_domain.hash(hash);
    machine
        .labels()
        .contains_key(lariat_api::capi::labels::MACHINE_CONTROL_PLANE)
        .hash(hash);
}

pub async fn reconcile(object: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Error> {
    // Cluster API's paused contract, deletion included (see `object_paused`).
    if lariat_controllers::cluster::object_paused(&ctx.caches, &object.metadata).await? {
        return Ok(lariat_controllers::resync());
    }
    let namespace = object.namespace().unwrap_or_default();
    let name = object.name_any();
    let machine_spec = lariat_controllers::object::parse::<InMemoryMachine>(&object)?.spec;
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &namespace, &resource("InMemoryMachine"));
    let cluster_name = object
        .labels()
        .get("cluster.x-k8s.io/cluster-name")
        .cloned();
    if object.metadata.deletion_timestamp.is_some() {
        return delete(&ctx, &api, &object, cluster_name.as_deref()).await;
    }
    // Contract: wait for the owning Machine (its ownerReference is a write that wakes this
    // object), and for its bootstrap data (the Machine's change wakes it).
    let Some(owner) = object
        .owner_references()
        .iter()
        .find(|o| o.kind == "Machine")
        .cloned()
    else {
        return Ok(Action::await_change());
    };
    let Some(machine) = ctx
        .caches
        .typed::<Machine>()
        .get(&namespace, &owner.name)
        .await?
    else {
        return Ok(Action::await_change());
    };
    let cluster = machine.spec.cluster_name.clone();
    let mut list = conditions::json::existing(&object.data["status"]);
    if machine.spec.bootstrap.data_secret_name.is_none() {
        conditions::json::set(
            &mut list,
            "Ready",
            false,
            "WaitingForBootstrapData",
            "the Machine has no bootstrap data yet",
        );
        update_status(&api, &object, json!({"ready": false, "conditions": list})).await?;
        // The Machine watch wakes this machine when the data arrives.
        return Ok(lariat_controllers::resync());
    }
    let Some(key) = workload_key(&ctx, &namespace, &cluster).await? else {
        return Ok(Action::requeue(Duration::from_secs(1)));
    };
    let Some(workload) = ctx.clusters.client(&key) else {
        conditions::json::set(
            &mut list,
            "Ready",
            false,
            "WaitingForClusterInfrastructure",
            "the simulated cluster is not up yet",
        );
        update_status(&api, &object, json!({"ready": false, "conditions": list})).await?;
        // Nothing says when it is: look again.
        return Ok(Action::requeue(Duration::from_secs(1)));
    };

    let behavior = machine_spec.behavior();
    let provider_id = lariat_api::infrastructure::in_memory::provider_id(&namespace, &name);
    // Whether this pass wrote the boot time itself, just before the Node it makes.
    let mut booted_in_first_write = false;
    let object = match since(object.annotations().get(BOOT_STARTED)) {
        Some(_) => object,
        None => match start_booting(&api, &object, &behavior, &provider_id).await? {
            Some(started) => {
                booted_in_first_write = true;
                started
            }
            // The write's own watch event brings the object back.
            None => return Ok(Action::await_change()),
        },
    };
    let annotations = object.annotations();
    let booting_for = since(annotations.get(BOOT_STARTED)).unwrap_or_default();
    if ensure_finalizer(&api, &object, FINALIZER).await? {
        // Booting, but someone took the finalizer away: put back before a Node is made.
        return Ok(Action::await_change());
    }
    if let Some(waiting) =
        not_booted_yet(&ctx, &api, &object, &behavior, booting_for, list.clone()).await?
    {
        return Ok(waiting);
    }

    let address = simulated_address(&name);
    let nodes: Api<Node> = Api::all(workload);
    // Whether the Node has joined, from core's cache of the cluster's Nodes when it has one (a
    // booted machine costs no request), else from the cluster itself.
    let joined = match ctx.caches.nodes(&namespace, &cluster).await? {
        Some(cache) if cache.is_healthy() => cache.get_now("", &name).is_some(),
        _ => nodes.get_opt(&name).await?.is_some(),
    };
    let booted_now = !joined
        && join(
            &ctx,
            &object,
            &nodes,
            &machine,
            &provider_id,
            behavior.pods.as_ref(),
        )
        .await?;
    let record_boot_time =
        (booted_now && !booted_in_first_write) || !annotations.contains_key(BOOTED);
    let generation = record_boot(&api, &object, &provider_id, record_boot_time).await?;
    conditions::json::set(&mut list, "Ready", true, "", "");
    update_status(
        &api,
        &object,
        json!({"ready": true, "addresses": [{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": name}], "conditions": list,
               "observedGeneration": generation}),
    )
    .await?;

    // Failure injection: the Node turns NotReady some time after it became Ready.
    if let (Some(after), Some(up_for)) = (
        behavior.node_not_ready_after(),
        since(annotations.get(BOOTED)),
    ) {
        if up_for < after {
            return Ok(Action::requeue(after - up_for));
        }
        return turn_not_ready(&ctx, &object, &nodes).await;
    }
    // Its own changes and its Machine's wake it.
    Ok(lariat_controllers::resync())
}

/// Writes the providerID and the boot time where they are missing (or the Node was just made),
/// in one write; the generation the status can say it observed (see
/// `lariat_controllers::object::observed_after_own_write`).
async fn record_boot(
    api: &Api<DynamicObject>,
    object: &DynamicObject,
    provider_id: &str,
    boot_time: bool,
) -> Result<i64, Error> {
    let mut booted = serde_json::Map::new();
    if object.data["spec"]["providerID"].as_str() != Some(provider_id) {
        booted.insert("spec".into(), json!({"providerID": provider_id}));
    }
    if boot_time {
        booted.insert(
            "metadata".into(),
            json!({"annotations": {BOOTED: lariat_controllers::object::now()}}),
        );
    }
    let generation = object.metadata.generation.unwrap_or(0);
    if booted.is_empty() {
        return Ok(generation);
    }
    let spec_written = booted.contains_key("spec");
    let written = patch(api, &object.name_any(), serde_json::Value::Object(booted)).await?;
    if !spec_written {
        return Ok(generation);
    }
    Ok(lariat_controllers::object::observed_after_own_write(
        generation,
        &written.metadata,
    ))
}

/// The machine's first look at its bootstrap data starts its boot. The finalizer comes with
/// the boot, in the same write: only from here on is there something (a Node) to clean up
/// when the machine goes. With nothing to wait for (no provisioning delay) it boots in the
/// same pass, its providerID and boot time in that write too (one write, and one wake-up of
/// its Machine, fewer per machine): the object as written, or `None` when it waits.
async fn start_booting(
    api: &Api<DynamicObject>,
    object: &DynamicObject,
    behavior: &lariat_api::infrastructure::in_memory::InMemoryMachineBehavior,
    provider_id: &str,
) -> Result<Option<Arc<DynamicObject>>, Error> {
    let mut finalizers = object.finalizers().to_vec();
    if !finalizers.iter().any(|f| f == FINALIZER) {
        finalizers.push(FINALIZER.to_string());
    }
    let now = lariat_controllers::object::now();
    let mut start = json!({"metadata": {"finalizers": finalizers, "resourceVersion": object.resource_version(),
        "annotations": {BOOT_STARTED: now}}});
    if !behavior.provisioning_delay().is_zero() || behavior.never_boots() {
        patch(api, &object.name_any(), start).await?;
        return Ok(None);
    }
    start["metadata"]["annotations"][BOOTED] = json!(now);
    start["spec"] = json!({"providerID": provider_id});
    Ok(Some(Arc::new(patch(api, &object.name_any(), start).await?)))
}

/// Whether the machine is still booting (`provisioningDelay`) or never will (`neverBoots`,
/// said once with an Event): its status says so, and the action to take; `None` once booted.
async fn not_booted_yet(
    ctx: &Context,
    api: &Api<DynamicObject>,
    object: &DynamicObject,
    behavior: &lariat_api::infrastructure::in_memory::InMemoryMachineBehavior,
    booting_for: Duration,
    mut list: Vec<serde_json::Value>,
) -> Result<Option<Action>, Error> {
    if behavior.never_boots() {
        // Once, not at every look: the condition remembers it was said (and the recorder,
        // while the cached object lags behind its own status).
        if !list
            .iter()
            .any(|c| c["type"] == "Ready" && c["reason"] == "NeverBoots")
        {
            ctx.events
                .publish_once(
                    object,
                    "InMemoryMachine",
                    EventType::Warning,
                    "NeverBoots",
                    "failure injection: this machine never boots (spec.behavior.neverBoots)",
                )
                .await;
        }
        conditions::json::set(
            &mut list,
            "Ready",
            false,
            "NeverBoots",
            "failure injection: this machine never boots (spec.behavior.neverBoots)",
        );
        update_status(api, object, json!({"ready": false, "conditions": list})).await?;
        return Ok(Some(lariat_controllers::resync()));
    }
    let delay = behavior.provisioning_delay();
    if booting_for < delay {
        conditions::json::set(
            &mut list,
            "Ready",
            false,
            "Provisioning",
            &format!(
                "booting ({}s of {}s)",
                booting_for.as_secs(),
                delay.as_secs()
            ),
        );
        update_status(api, object, json!({"ready": false, "conditions": list})).await?;
        return Ok(Some(Action::requeue(delay - booting_for)));
    }
    Ok(None)
}

/// Removes the machine's Node from its simulated cluster (when the cluster is up), then lets
/// the machine go.
async fn delete(
    ctx: &Context,
    api: &Api<DynamicObject>,
    object: &DynamicObject,
    cluster_name: Option<&str>,
) -> Result<Action, Error> {
    let namespace = object.namespace().unwrap_or_default();
    if let Some(cluster) = cluster_name
        && let Some(key) = workload_key(ctx, &namespace, cluster).await?
        && let Some(client) = ctx.clusters.client(&key)
    {
        let _ = Api::<Node>::all(client)
            .delete(&object.name_any(), &Default::default())
            .await;
    }
    remove_finalizer(api, object, FINALIZER).await?;
    Ok(Action::await_change())
}

/// Registers the booted machine's Node in its simulated cluster, with an Event; whether this
/// call made it (false: it was there already).
async fn join(
    ctx: &Context,
    object: &DynamicObject,
    nodes: &Api<Node>,
    machine: &Machine,
    provider_id: &str,
    pods: Option<&InMemoryPodBehavior>,
) -> Result<bool, Error> {
    let name = object.name_any();
    let node = simulated_node(&name, provider_id, machine, pods)?;
    match nodes.create(&PostParams::default(), &node).await {
        Ok(_) => {
            let message = format!(
                "Simulated machine booted; Node {name} joined with providerID {provider_id}"
            );
            ctx.events
                .publish(
                    object,
                    "InMemoryMachine",
                    EventType::Normal,
                    "Booted",
                    &message,
                )
                .await;
            Ok(true)
        }
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Failure injection (`nodeNotReadyAfter`): turns the machine's Node NotReady, once: a Node
/// already NotReady keeps the time it turned so (a MachineHealthCheck's timeout counts from
/// it), however often the machine is reconciled after.
async fn turn_not_ready(
    ctx: &Context,
    object: &DynamicObject,
    nodes: &Api<Node>,
) -> Result<Action, Error> {
    let name = object.name_any();
    let current = nodes.get_opt(&name).await?;
    let ready = current
        .as_ref()
        .and_then(|n| n.status.as_ref()?.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    if !ready {
        return Ok(lariat_controllers::resync());
    }
    let not_ready = json!({"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady",
        "message": "failure injection: spec.behavior.nodeNotReadyAfter", "lastHeartbeatTime": lariat_controllers::object::now(),
        "lastTransitionTime": lariat_controllers::object::now()}]}});
    nodes
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(not_ready))
        .await?;
    let message =
        format!("failure injection: Node {name} turned NotReady (spec.behavior.nodeNotReadyAfter)");
    ctx.events
        .publish(
            object,
            "InMemoryMachine",
            EventType::Warning,
            "NodeNotReady",
            &message,
        )
        .await;
    Ok(Action::await_change())
}

/// The hostname a machine named `name` boots with: its name, cut to the 63 characters a
/// hostname label (and a label's value) may hold, as a kubelet's hostname is.
fn hostname(name: &str) -> &str {
    let cut = &name[..name.len().min(63)];
    cut.trim_end_matches(|c: char| !c.is_ascii_alphanumeric())
}

/// The Node a booted machine registers in its simulated cluster, Ready.
/// The kubelet's failure injection (`behavior.pods`) rides on it as an annotation.
fn simulated_node(
    name: &str,
    provider_id: &str,
    machine: &Machine,
    pods: Option<&InMemoryPodBehavior>,
) -> Result<Node, Error> {
    let control_plane = machine
        .labels()
        .contains_key(lariat_api::capi::labels::MACHINE_CONTROL_PLANE);
    let mut labels = json!({"kubernetes.io/hostname": hostname(name), "kubernetes.io/os": "linux", "node.kubernetes.io/instance-type": "inmemory"});
    if control_plane {
        labels["node-role.kubernetes.io/control-plane"] = json!("");
    }
    if let Some(zone) = &machine.spec.failure_domain {
        labels["topology.kubernetes.io/zone"] = json!(zone);
    }
    let address = simulated_address(name);
    // kubeadm taints control-plane Nodes so that only what tolerates it runs there.
    let taints = if control_plane {
        json!([{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}])
    } else {
        json!([])
    };
    let mut annotations = json!({});
    if let Some(pods) = pods {
        let text = serde_json::to_string(pods).map_err(|e| Error::Invalid(e.to_string()))?;
        annotations[POD_BEHAVIOR_ANNOTATION] = json!(text);
    }
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {"providerID": provider_id, "taints": taints},
        "status": {
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status (simulated)",
                "lastHeartbeatTime": lariat_controllers::object::now(), "lastTransitionTime": lariat_controllers::object::now()}],
            "addresses": [{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": name}],
            "capacity": {"cpu": "2", "memory": "4Gi", "pods": "110"},
            "allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"},
            "nodeInfo": {"kubeletVersion": machine.spec.version.as_deref().unwrap_or("v1.30.0"), "architecture": "amd64",
                "operatingSystem": "linux", "osImage": "lariat in-memory", "containerRuntimeVersion": "inmemory://1", "kernelVersion": "",
                "kubeProxyVersion": "", "machineID": name, "systemUUID": name, "bootID": name},
        },
    }))
    .map_err(|e| Error::Invalid(e.to_string()))
}

/// After a restart the simulated cluster `key` is new and empty: the machines of `cluster`
/// that had booted join it again (with a new `booted` time, so `nodeNotReadyAfter` counts
/// again), before the new kubeconfig sends core to it, so no Node looks gone meanwhile and no
/// MachineHealthCheck remediates a healthy machine.
pub(crate) async fn rejoin_booted(
    ctx: &Context,
    namespace: &str,
    cluster: &str,
    workload: kube::Client,
) -> Result<(), Error> {
    let nodes: Api<Node> = Api::all(workload);
    let machines = ctx.caches.typed::<Machine>();
    let booted = ctx
        .caches
        .of(&resource("InMemoryMachine"))
        .indexed(lariat_controllers::cache::IndexKey::Cluster {
            namespace,
            name: cluster,
        })
        .await?;
    for object in booted
        .iter()
        .filter(|o| o.metadata.deletion_timestamp.is_none() && o.annotations().contains_key(BOOTED))
    {
        let Ok(booted) = lariat_controllers::object::parse::<InMemoryMachine>(object) else {
            continue;
        };
        let (Some(provider_id), Some(owner)) = (
            booted.spec.provider_id.as_deref(),
            object
                .owner_references()
                .iter()
                .find(|o| o.kind == "Machine"),
        ) else {
            continue;
        };
        // One Machine that cannot be read (or is gone) holds back no other: its own
        // InMemoryMachine makes its Node once it can.
        let machine = match machines.get(namespace, &owner.name).await {
            Ok(Some(machine)) => machine,
            Ok(None) => continue,
            Err(error) => {
                tracing::warn!(machine = %owner.name, %error, "not rejoining a machine whose Machine cannot be read");
                continue;
            }
        };
        let name = object.name_any();
        match nodes
            .create(
                &PostParams::default(),
                &simulated_node(
                    &name,
                    provider_id,
                    &machine,
                    booted.spec.behavior().pods.as_ref(),
                )?,
            )
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
        let api: Api<DynamicObject> =
            Api::namespaced_with(ctx.client.clone(), namespace, &resource("InMemoryMachine"));
        patch(
            &api,
            &name,
            json!({"metadata": {"annotations": {BOOTED: lariat_controllers::object::now()}}}),
        )
        .await?;
    }
    Ok(())
}

/// Writes status only when it changed, so a settled machine costs no writes.
async fn update_status(
    api: &Api<DynamicObject>,
    object: &DynamicObject,
    status: serde_json::Value,
) -> Result<(), Error> {
    let current = &object.data["status"];
    let changed = status
        .as_object()
        .expect("status object")
        .iter()
        .any(|(k, v)| {
            if k == "conditions" {
                // Compare conditions without their timestamps.
                let strip = |c: &serde_json::Value| {
                    c.as_array().map(|a| {
                        a.iter()
                            .map(|c| (c["type"].clone(), c["status"].clone(), c["reason"].clone()))
                            .collect::<Vec<_>>()
                    })
                };
                strip(v) != strip(&current[k])
            } else {
                current[k] != *v
            }
        });
    if changed {
        patch_status(api, &object.name_any(), status).await?;
    }
    Ok(())
}

/// A stable, fake private address derived from the machine's name.
fn simulated_address(name: &str) -> String {
    let hash = name
        .bytes()
        .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(b as u32));
    format!(
        "10.{}.{}.{}",
        (hash >> 16) & 0xff,
        (hash >> 8) & 0xff,
        (hash & 0xfe) + 1
    )
}
