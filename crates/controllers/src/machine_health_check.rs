//! The MachineHealthCheck controller: finds the Machines it targets that are unhealthy (a Node
//! that never joined within `nodeStartupTimeout`, or a Node condition matching an
//! `unhealthyConditions` entry for longer than its timeout) and, while `maxUnhealthy` allows,
//! remediates them as Cluster API does: it marks each unhealthy Machine `OwnerRemediated=False`
//! so its owner (MachineSet, control plane) replaces it by its own rules, or, with a
//! `remediationTemplate`, creates a remediation object for an external remediation controller.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::controller::Action;
use serde_json::json;

use crate::cache::IndexKey;
use crate::conditions::{HEALTH_CHECK_SUCCEEDED, OWNER_REMEDIATED};
use crate::events::EventType;
use crate::external::Reference;
use crate::machine_deployment::resolve;
use crate::object::{patch_status, str_at};
use crate::{Context, Error, capi, conditions};

/// Cluster API's default time for a Node to join.
const DEFAULT_NODE_STARTUP: Duration = Duration::from_secs(600);

fn age(rfc3339: Option<&str>) -> Option<Duration> {
    let at = chrono::DateTime::parse_from_rfc3339(rfc3339?).ok()?;
    (chrono::Utc::now() - at.with_timezone(&chrono::Utc))
        .to_std()
        .ok()
        .or(Some(Duration::ZERO))
}

/// Why a machine is unhealthy, or how long until it might become so.
enum Health {
    Healthy,
    Unhealthy(String),
    /// Healthy for now; look again after this long.
    RecheckIn(Duration),
}

fn machine_health(check: &DynamicObject, machine: &DynamicObject, node: Option<&Node>) -> Health {
    let spec = &check.data["spec"];
    let Some(node) = node else {
        if machine.data["status"]["nodeRef"].is_object() {
            return Health::Unhealthy("the Machine's Node is gone".into());
        }
        let timeout =
            crate::object::duration(&spec["nodeStartupTimeout"]).unwrap_or(DEFAULT_NODE_STARTUP);
        if timeout.is_zero() {
            return Health::Healthy;
        }
        // The clock starts when the infrastructure is ready, as in Cluster API; until then,
        // from the Machine's creation.
        let started = machine.data["status"]["conditions"]
            .as_array()
            .and_then(|c| {
                c.iter()
                    .find(|c| c["type"] == "InfrastructureReady" && c["status"] == "True")
            })
            .and_then(|c| c["lastTransitionTime"].as_str().map(String::from))
            .or_else(|| {
                machine
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| t.0.to_string())
            });
        let waited = age(started.as_deref()).unwrap_or_default();
        return if waited >= timeout {
            Health::Unhealthy(format!(
                "the Node did not join within {}s",
                timeout.as_secs()
            ))
        } else {
            Health::RecheckIn(timeout - waited)
        };
    };
    let node_conditions = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let mut recheck: Option<Duration> = None;
    for rule in spec["unhealthyConditions"].as_array().into_iter().flatten() {
        let timeout = crate::object::duration(&rule["timeout"]).unwrap_or_default();
        for condition in node_conditions.iter().filter(|c| {
            c.type_ == rule["type"].as_str().unwrap_or_default()
                && c.status == rule["status"].as_str().unwrap_or_default()
        }) {
            let held = condition
                .last_transition_time
                .as_ref()
                .map(|t| t.0.to_string());
            let held = age(held.as_deref()).unwrap_or_default();
            if held >= timeout {
                return Health::Unhealthy(format!(
                    "Node condition {} is {} for {}s",
                    condition.type_,
                    condition.status,
                    held.as_secs()
                ));
            }
            let left = timeout - held;
            recheck = Some(recheck.map_or(left, |r| r.min(left)));
        }
    }
    recheck.map_or(Health::Healthy, Health::RecheckIn)
}

/// Sets conditions on a Machine's status, writing only what changed. An `OwnerRemediated`
/// condition the owner has already updated (its message says why it waits) is kept.
async fn mark(
    api: &Api<DynamicObject>,
    machine: &DynamicObject,
    marks: &[(&str, bool, &str, &str)],
) -> Result<(), Error> {
    let mut list = conditions::existing(&machine.data["status"]);
    let before = list.clone();
    // A machine that recovered before its owner acted no longer asks for remediation.
    if marks
        .iter()
        .any(|(type_, status, ..)| *type_ == HEALTH_CHECK_SUCCEEDED && *status)
    {
        list.retain(|c| c["type"] != OWNER_REMEDIATED);
    }
    for (type_, status, reason, message) in marks {
        if *type_ == OWNER_REMEDIATED
            && conditions::is_false(&machine.data["status"], OWNER_REMEDIATED)
        {
            continue;
        }
        conditions::set(&mut list, type_, *status, reason, message);
    }
    if list != before {
        patch_status(api, &machine.name_any(), json!({"conditions": list})).await?;
    }
    Ok(())
}

/// Creates the remediation object for `machine` from the MachineHealthCheck's
/// `remediationTemplate` (a `FooRemediationTemplate` gives a `FooRemediation`), once.
async fn external_remediation(
    ctx: &Context,
    namespace: &str,
    template: &Reference,
    machine: &DynamicObject,
    cluster: &str,
) -> Result<(), Error> {
    let target = crate::external::clone_target(template, &machine.name_any())?;
    if target.get(&ctx.caches, namespace).await?.is_some() {
        return Ok(());
    }
    tracing::info!(machine = %machine.name_any(), kind = %target.kind, "creating an external remediation request");
    let owner =
        crate::object::owner_reference(machine, "cluster.x-k8s.io/v1beta1", "Machine", false);
    crate::external::clone_template(
        &ctx.caches,
        namespace,
        template,
        &machine.name_any(),
        &json!({crate::cluster::CLUSTER_NAME_LABEL: cluster}),
        owner,
    )
    .await?;
    Ok(())
}

pub async fn reconcile(check: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Error> {
    if check.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let namespace = check.namespace().unwrap_or_default();
    let name = check.name_any();
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &namespace, &capi("MachineHealthCheck"));
    let cluster = str_at(&check.data, &["spec", "clusterName"])
        .unwrap_or_default()
        .to_string();
    let Some(cluster_object) = ctx.cluster_of(&check).await? else {
        return Ok(Action::requeue(Duration::from_secs(5)));
    };
    if crate::object::bool_at(&cluster_object.data, &["spec", "paused"]) {
        return Ok(Action::await_change());
    }
    // Owned by its Cluster, as in Cluster API: deleted with it, not left checking nothing.
    crate::object::ensure_owner(
        &api,
        &check,
        crate::object::owner_reference(
            &cluster_object,
            "cluster.x-k8s.io/v1beta1",
            "Cluster",
            false,
        ),
    )
    .await?;
    let machines_api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &namespace, &capi("Machine"));
    let selector = check.data["spec"]["selector"]["matchLabels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let machines: Vec<Arc<DynamicObject>> = ctx
        .caches
        .of(&capi("Machine"))
        .indexed(IndexKey::Cluster {
            namespace: &namespace,
            name: &cluster,
        })
        .await?
        .into_iter()
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        .filter(|m| {
            let labels = m.labels();
            selector
                .iter()
                .all(|(k, v)| labels.get(k).map(String::as_str) == v.as_str())
        })
        .collect();
    // Judged only on what the workload cluster says now: while its Nodes cannot be watched,
    // no Machine is called unhealthy (as Cluster API skips a cluster its cache cannot reach).
    let nodes = match ctx.caches.nodes(&namespace, &cluster).await? {
        Some(nodes) if nodes.is_healthy() => nodes,
        _ => return Ok(Action::requeue(Duration::from_secs(5))),
    };
    let node_of = |id: &str| -> Option<Node> {
        let node = nodes
            .indexed_now(IndexKey::ProviderId(id))
            .into_iter()
            .next()?;
        serde_json::to_value(node.as_ref())
            .ok()
            .and_then(|v| serde_json::from_value(v).ok())
    };

    let mut unhealthy = vec![];
    let mut healthy = vec![];
    // Machine and Node changes wake the check; only its timeouts need a timer.
    let mut recheck: Option<Duration> = None;
    for machine in &machines {
        let node = str_at(&machine.data, &["spec", "providerID"]).and_then(node_of);
        match machine_health(&check, machine, node.as_ref()) {
            Health::Healthy => healthy.push(machine),
            Health::Unhealthy(why) => unhealthy.push((machine, why)),
            Health::RecheckIn(after) => {
                healthy.push(machine);
                let at = after + Duration::from_millis(100);
                recheck = Some(recheck.map_or(at, |r| r.min(at)));
            }
        }
    }
    let expected = machines.len() as i64;
    let max_unhealthy = resolve(
        &check.data["spec"]["maxUnhealthy"],
        expected,
        false,
        expected,
    )
    .max(0);
    let allowed = unhealthy.len() as i64 <= max_unhealthy;
    let mut list = conditions::existing(&check.data["status"]);
    for machine in healthy {
        mark(
            &machines_api,
            machine,
            &[(HEALTH_CHECK_SUCCEEDED, true, "", "")],
        )
        .await?;
    }
    let template = Reference::from_json(&check.data["spec"]["remediationTemplate"]);
    for (machine, why) in &unhealthy {
        if !conditions::is_false(&machine.data["status"], HEALTH_CHECK_SUCCEEDED) {
            let message = format!("Machine {:?} is unhealthy: {why}", machine.name_any());
            ctx.events
                .publish(
                    &check,
                    "MachineHealthCheck",
                    EventType::Warning,
                    "MachineMarkedUnhealthy",
                    &message,
                )
                .await;
        }
        let mut marks = vec![(HEALTH_CHECK_SUCCEEDED, false, "UnhealthyNode", why.as_str())];
        // Only machines someone will replace are remediated: those owned by a MachineSet or a
        // control plane. A lone Machine is reported, not destroyed.
        let replaceable = machine
            .owner_references()
            .iter()
            .any(|o| o.controller == Some(true));
        if allowed && replaceable {
            match &template {
                // External remediation: a remediation object named after the Machine, from the
                // template, for another controller to act on (Cluster API's contract).
                Some(template) => {
                    external_remediation(&ctx, &namespace, template, machine, &cluster).await?
                }
                // The owner (MachineSet, control plane) remediates, by its own rules.
                None => {
                    if !conditions::is_false(&machine.data["status"], OWNER_REMEDIATED) {
                        tracing::info!(machinehealthcheck = %format!("{namespace}/{name}"), machine = %machine.name_any(), reason = %why, "asking the owner to remediate an unhealthy machine");
                    }
                    marks.push((OWNER_REMEDIATED, false, "WaitingForRemediation", ""))
                }
            }
        }
        mark(&machines_api, machine, &marks).await?;
    }
    if allowed {
        conditions::set(&mut list, "RemediationAllowed", true, "", "");
    } else {
        let message = format!(
            "{} of {} machines are unhealthy, more than maxUnhealthy ({max_unhealthy}); not remediating",
            unhealthy.len(),
            expected
        );
        tracing::warn!(machinehealthcheck = %format!("{namespace}/{name}"), "{message}");
        conditions::set(
            &mut list,
            "RemediationAllowed",
            false,
            "TooManyUnhealthy",
            &message,
        );
    }
    let status = json!({
        "expectedMachines": expected,
        "currentHealthy": expected - unhealthy.len() as i64,
        "remediationsAllowed": (max_unhealthy - unhealthy.len() as i64).max(0),
        "targets": machines.iter().map(|m| m.name_any()).collect::<Vec<_>>(),
        "conditions": list,
        "observedGeneration": check.metadata.generation.unwrap_or(0),
    });
    let changed = [
        "expectedMachines",
        "currentHealthy",
        "remediationsAllowed",
        "targets",
        "observedGeneration",
    ]
    .iter()
    .any(|k| status[k] != check.data["status"][k])
        || conditions::is_true(&list, "RemediationAllowed")
            != conditions::is_true(
                &conditions::existing(&check.data["status"]),
                "RemediationAllowed",
            );
    if changed {
        patch_status(&api, &name, status).await?;
    }
    Ok(recheck.map_or_else(crate::resync, Action::requeue))
}
