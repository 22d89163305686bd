//! The MachineHealthCheck controller: finds the Machines it targets that are unhealthy (a Node
//! that never joined within `nodeStartupTimeout`, or a Node condition matching an
//! `unhealthyConditions` entry for longer than its timeout) and, while `maxUnhealthy` allows,
//! remediates them as Cluster API does: it marks each unhealthy Machine `OwnerRemediated=False`
//! so its owner (MachineSet, control plane) replaces it by its own rules, or, with a
//! `remediationTemplate`, creates a remediation object for an external remediation controller.

use crate::paused::V1Beta2Conditions;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use lariat_api::capi::{ConditionStatus, Machine, MachineHealthCheck};
use serde_json::json;

use crate::cache::IndexKey;
use crate::conditions::{HEALTH_CHECK_SUCCEEDED, OWNER_REMEDIATED, of_machine};
use crate::events::EventType;
use crate::external::Reference;
use crate::machine::has_node;
use crate::machine_deployment::resolve;
use crate::object::patch_status;
use crate::{Context, Error, conditions};

/// Cluster API's default time for a Node to join.
const DEFAULT_NODE_STARTUP: Duration = Duration::from_secs(600);

/// How long ago `time` was (zero if it is in the future).
fn age(time: &Time) -> Duration {
    let elapsed = k8s_openapi::jiff::Timestamp::now().duration_since(time.0);
    Duration::try_from(elapsed).unwrap_or(Duration::ZERO)
}

/// A condition status as Node conditions spell it.
fn spelled(status: ConditionStatus) -> &'static str {
    match status {
        ConditionStatus::True => "True",
        ConditionStatus::False => "False",
        ConditionStatus::Unknown => "Unknown",
    }
}

/// Why a machine is unhealthy, or how long until it might become so.
enum Health {
    Healthy,
    Unhealthy(String),
    /// Healthy for now; look again after this long.
    RecheckIn(Duration),
}

fn machine_health(check: &MachineHealthCheck, machine: &Machine, node: Option<&Node>) -> Health {
    let spec = &check.spec;
    let Some(node) = node else {
        if has_node(machine) {
            return Health::Unhealthy("the Machine's Node is gone".into());
        }
        let timeout = spec
            .node_startup_timeout
            .map(Duration::from)
            .unwrap_or(DEFAULT_NODE_STARTUP);
        if timeout.is_zero() {
            return Health::Healthy;
        }
        // The clock starts when the infrastructure is ready, as in Cluster API; until then,
        // from the Machine's creation.
        let started = of_machine(machine)
            .iter()
            .find(|c| c.is_true("InfrastructureReady"))
            .map(|c| &c.last_transition_time)
            .or(machine.metadata.creation_timestamp.as_ref());
        let waited = started.map(age).unwrap_or_default();
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
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    let mut recheck: Option<Duration> = None;
    for rule in spec.unhealthy_conditions.iter().flatten() {
        let timeout = Duration::from(rule.timeout);
        for condition in node_conditions
            .iter()
            .filter(|c| c.type_ == rule.type_ && c.status == spelled(rule.status))
        {
            let held = condition
                .last_transition_time
                .as_ref()
                .map(age)
                .unwrap_or_default();
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
    api: &Api<Machine>,
    machine: &Machine,
    marks: &[(&str, bool, &str, &str)],
) -> Result<(), Error> {
    let before = of_machine(machine);
    let mut list = before.to_vec();
    // A machine that recovered before its owner acted no longer asks for remediation.
    if marks
        .iter()
        .any(|(type_, status, ..)| *type_ == HEALTH_CHECK_SUCCEEDED && *status)
    {
        list.retain(|c| c.type_ != OWNER_REMEDIATED);
    }
    for (type_, status, reason, message) in marks {
        if *type_ == OWNER_REMEDIATED && conditions::is_false(before, OWNER_REMEDIATED) {
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
    machine: &Machine,
    cluster: &str,
) -> Result<(), Error> {
    let target = crate::external::clone_target(template, &machine.name_any())?;
    if target.get(&ctx.caches, namespace).await?.is_some() {
        return Ok(());
    }
    tracing::info!(machine = %machine.name_any(), kind = %target.kind, "creating an external remediation request");
    let owner = crate::object::owner_reference(machine, false);
    crate::external::clone_template(
        &ctx.caches,
        namespace,
        template,
        &machine.name_any(),
        &json!({lariat_api::capi::labels::CLUSTER_NAME: cluster}),
        owner,
    )
    .await?;
    Ok(())
}

pub async fn reconcile(check: Arc<MachineHealthCheck>, ctx: Arc<Context>) -> Result<Action, Error> {
    if check.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let namespace = check.namespace().unwrap_or_default();
    let name = check.name_any();
    let api: Api<MachineHealthCheck> = Api::namespaced(ctx.client.clone(), &namespace);
    let cluster = check.spec.cluster_name.clone();
    let Some(cluster_object) = ctx.cluster(&namespace, &cluster).await? else {
        return Ok(Action::requeue(Duration::from_secs(5)));
    };
    let conditions = check.v1beta2_conditions();
    if crate::paused::check(&api, &check.metadata, conditions, Some(&cluster_object)).await? {
        return Ok(Action::await_change());
    }
    // Owned by its Cluster, as in Cluster API: deleted with it, not left checking nothing.
    crate::object::ensure_owner(
        &api,
        &check,
        crate::object::owner_reference(cluster_object.as_ref(), false),
    )
    .await?;
    let machines_api: Api<Machine> = Api::namespaced(ctx.client.clone(), &namespace);
    let selector = check.spec.selector.match_labels.clone().unwrap_or_default();
    let machines: Vec<Arc<Machine>> = ctx
        .caches
        .typed::<Machine>()
        .indexed(IndexKey::Cluster {
            namespace: &namespace,
            name: &cluster,
        })
        .await?
        .into_iter()
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        .filter(|m| {
            let labels = m.labels();
            selector.iter().all(|(k, v)| labels.get(k) == Some(v))
        })
        .collect();
    // Judged only on what the workload cluster says now: while its Nodes cannot be watched,
    // no Machine is called unhealthy (as Cluster API skips a cluster its cache cannot reach).
    let nodes = match ctx.caches.nodes(&namespace, &cluster).await? {
        Some(nodes) if nodes.is_healthy() => nodes,
        _ => return Ok(Action::requeue(Duration::from_secs(5))),
    };
    let node_of = |id: &str| {
        nodes
            .indexed_now(IndexKey::ProviderId(id))
            .into_iter()
            .next()
    };

    let mut unhealthy = vec![];
    let mut healthy = vec![];
    // Machine and Node changes wake the check; only its timeouts need a timer.
    let mut recheck: Option<Duration> = None;
    for machine in &machines {
        let node = machine.spec.provider_id.as_deref().and_then(node_of);
        match machine_health(&check, machine, node.as_deref()) {
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
    let max_unhealthy =
        resolve(check.spec.max_unhealthy.as_ref(), expected, false, expected).max(0);
    let allowed = unhealthy.len() as i64 <= max_unhealthy;
    let before = check.status.clone().unwrap_or_default();
    let mut status = before.clone();
    let mut list = status.conditions.take().unwrap_or_default();
    for machine in healthy {
        mark(
            &machines_api,
            machine,
            &[(HEALTH_CHECK_SUCCEEDED, true, "", "")],
        )
        .await?;
    }
    let template = check
        .spec
        .remediation_template
        .as_ref()
        .and_then(Reference::from_object_reference);
    for (machine, why) in &unhealthy {
        let template = template.as_ref();
        mark_unhealthy(&ctx, &check, &machines_api, machine, why, allowed, template).await?;
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
    status.expected_machines = Some(expected as i32);
    status.current_healthy = Some((expected - unhealthy.len() as i64) as i32);
    status.remediations_allowed = Some((max_unhealthy - unhealthy.len() as i64).max(0) as i32);
    status.targets = Some(machines.iter().map(|m| m.name_any()).collect());
    status.observed_generation = Some(check.metadata.generation.unwrap_or(0));
    status.conditions = Some(list);
    if status != before {
        let status = serde_json::to_value(&status).map_err(|e| Error::Invalid(e.to_string()))?;
        patch_status(&api, &name, status).await?;
    }
    Ok(recheck.map_or_else(crate::resync, Action::requeue))
}

/// Marks an unhealthy Machine (with an Event the first time), and when `maxUnhealthy`
/// `allowed` it asks for its remediation: from the remediation `template` when there is one,
/// otherwise by its owner.
async fn mark_unhealthy(
    ctx: &Context,
    check: &MachineHealthCheck,
    machines_api: &Api<Machine>,
    machine: &Machine,
    why: &str,
    allowed: bool,
    template: Option<&Reference>,
) -> Result<(), Error> {
    let namespace = check.namespace().unwrap_or_default();
    if !conditions::is_false(of_machine(machine), HEALTH_CHECK_SUCCEEDED) {
        let message = format!("Machine {:?} is unhealthy: {why}", machine.name_any());
        ctx.events
            .publish(
                check,
                "MachineHealthCheck",
                EventType::Warning,
                "MachineMarkedUnhealthy",
                &message,
            )
            .await;
    }
    let mut marks = vec![(HEALTH_CHECK_SUCCEEDED, false, "UnhealthyNode", why)];
    // Only machines someone will replace are remediated: those owned by a MachineSet or a
    // control plane. A lone Machine is reported, not destroyed.
    let replaceable = machine
        .owner_references()
        .iter()
        .any(|o| o.controller == Some(true));
    if allowed && replaceable {
        match template {
            // External remediation: a remediation object named after the Machine, from the
            // template, for another controller to act on (Cluster API's contract).
            Some(template) => {
                external_remediation(ctx, &namespace, template, machine, &check.spec.cluster_name)
                    .await?
            }
            // The owner (MachineSet, control plane) remediates, by its own rules.
            None => {
                if !conditions::is_false(of_machine(machine), OWNER_REMEDIATED) {
                    tracing::info!(machinehealthcheck = %format!("{namespace}/{}", check.name_any()), machine = %machine.name_any(), reason = %why, "asking the owner to remediate an unhealthy machine");
                }
                marks.push((OWNER_REMEDIATED, false, "WaitingForRemediation", ""))
            }
        }
    }
    mark(machines_api, machine, &marks).await?;
    Ok(())
}
