//! The MachineSet controller: keeps `spec.replicas` Machines from its template, creating each
//! with its own bootstrap config and infrastructure machine cloned from templates, and deleting
//! surplus machines by the delete policy (Random, Newest, Oldest).

use crate::paused::V1Beta2Conditions;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use kube::runtime::controller::Action;
use lariat_api::capi::machine::MachinePhase;
use lariat_api::capi::machine_set::MachineSetDeletePolicy;
use lariat_api::capi::{Machine, MachineSet, MachineSpec};
use serde_json::json;

use crate::cache::IndexKey;
use crate::events::EventType;
use crate::external::{Reference, clone_target, clone_template};
use crate::machine::phase;
use crate::object::{self, owner_reference, patch_status};
use crate::{Context, Error, conditions};
use lariat_api::capi::labels::CLUSTER_NAME as CLUSTER_NAME_LABEL;

pub use lariat_api::capi::annotations::DELETE_MACHINE as DELETE_MACHINE_ANNOTATION;
pub use lariat_api::capi::labels::MACHINE_SET_NAME as SET_NAME_LABEL;

/// Records a Normal Event on the MachineSet.
async fn event(ctx: &Context, set: &MachineSet, reason: &str, message: &str) {
    ctx.events
        .publish(set, "MachineSet", EventType::Normal, reason, message)
        .await;
}

/// What a MachineSet reads of a Machine (see `Cache::changes_in`): whose it is, its phase
/// and infrastructure (its count of ready replicas, its clones), and what orders or asks for
/// its deletion.
pub fn reads_of_machine(machine: &Machine, hash: &mut std::collections::hash_map::DefaultHasher) {
    use std::hash::Hash;
    for owner in machine.owner_references() {
        (&owner.uid, owner.controller).hash(hash);
    }
    let status = machine.status.as_ref();
    phase(machine).hash(hash);
    status.and_then(|s| s.infrastructure_ready).hash(hash);
    status.and_then(|s| s.failure_reason.as_deref()).hash(hash);
    conditions::needs_owner_remediation(conditions::of_machine(machine)).hash(hash);
    machine
        .annotations()
        .contains_key(DELETE_MACHINE_ANNOTATION)
        .hash(hash);
}

/// The machines this set controls (it is their controller owner).
pub async fn owned_machines(ctx: &Context, set: &MachineSet) -> Result<Vec<Arc<Machine>>, Error> {
    let uid = set.uid().unwrap_or_default();
    Ok(ctx
        .caches
        .typed::<Machine>()
        .indexed(IndexKey::Owner(&uid))
        .await?
        .into_iter()
        .filter(|m| {
            m.owner_references()
                .iter()
                .any(|o| o.uid == uid && o.controller == Some(true))
        })
        .collect())
}

pub async fn reconcile(set: Arc<MachineSet>, ctx: Arc<Context>) -> Result<Action, Error> {
    if set.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let namespace = set.namespace().unwrap_or_default();
    let name = set.name_any();
    let api: Api<MachineSet> = Api::namespaced(ctx.client.clone(), &namespace);
    let cluster_name = set.spec.cluster_name.clone();
    let Some(cluster) = ctx.cluster(&namespace, &cluster_name).await? else {
        return Ok(Action::requeue(Duration::from_secs(2)));
    };
    if crate::paused::check(
        &api,
        &set.metadata,
        set.v1beta2_conditions(),
        Some(&cluster),
    )
    .await?
    {
        return Ok(Action::await_change());
    }
    let mut labels = BTreeMap::new();
    labels.insert(CLUSTER_NAME_LABEL.to_string(), cluster_name.clone());
    object::ensure_labels(&api, &set, &labels).await?;
    if set.owner_references().is_empty() {
        object::ensure_owner(&api, &set, owner_reference(cluster.as_ref(), false)).await?;
    }

    let wanted = set.spec.replicas.unwrap_or(1).max(0) as usize;
    let machines: Vec<Arc<Machine>> = owned_machines(&ctx, &set)
        .await?
        .into_iter()
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        .collect();
    let machines_api: Api<Machine> = Api::namespaced(ctx.client.clone(), &namespace);
    for machine in machines
        .iter()
        .filter(|m| m.status.as_ref().and_then(|s| s.infrastructure_ready) != Some(true))
    {
        ensure_clones(&ctx, &set, machine).await?;
    }
    // Machines a MachineHealthCheck asked this set to remediate are deleted and replaced.
    let (remediate, healthy): (Vec<Arc<Machine>>, Vec<Arc<Machine>>) = machines
        .into_iter()
        .partition(|m| conditions::needs_owner_remediation(conditions::of_machine(m)));
    for machine in &remediate {
        tracing::info!(machineset = %format!("{namespace}/{name}"), machine = %machine.name_any(), "remediating an unhealthy machine: deleting it");
        if object::delete_if_present(&machines_api, &machine.name_any()).await? {
            let message = format!(
                "Deleted unhealthy machine {:?} to replace it",
                machine.name_any()
            );
            event(&ctx, &set, "SuccessfulDelete", &message).await;
        }
    }
    let machines = healthy;
    // Names created or deleted here: the next reconcile must find them so in the cache, or it
    // would count the same Machines again (Cluster API's expectations).
    let mut created = Vec::new();
    let mut deleted: Vec<String> = remediate.iter().map(|m| m.name_any()).collect();
    // A Machine whose templates do not exist could never boot: none is made, and the set says
    // why (Cluster API's MachinesCreated condition).
    let before = set.status.clone().unwrap_or_default();
    let mut status = before.clone();
    let mut list = status.conditions.take().unwrap_or_default();
    let missing = if machines.len() < wanted {
        missing_template(&ctx, &set).await?
    } else {
        None
    };
    let was_missing = conditions::is_false(&list, "MachinesCreated");
    conditions::set(
        &mut list,
        "MachinesCreated",
        missing.is_none(),
        "TemplateNotFound",
        missing.as_deref().unwrap_or_default(),
    );
    if let Some(missing) = &missing {
        if !was_missing {
            ctx.events
                .publish(
                    set.as_ref(),
                    "MachineSet",
                    EventType::Warning,
                    "TemplateNotFound",
                    missing,
                )
                .await;
        }
        if Some(&list) != before.conditions.as_ref() {
            patch_status(&api, &name, json!({"conditions": list})).await?;
        }
        // Creating a template is not among what wakes a MachineSet: look again shortly.
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    let changed = scale(
        &ctx,
        &set,
        &machines_api,
        machines,
        wanted,
        (&mut created, &mut deleted),
    )
    .await;
    // Even when a step failed: what was created or deleted must be seen before the retry.
    ctx.caches
        .typed::<Machine>()
        .observed(&namespace, &created, &deleted)
        .await?;
    changed?;
    let current = owned_machines(&ctx, &set).await?;
    let ready = current
        .iter()
        .filter(|m| phase(m) == Some(MachinePhase::Running))
        .count() as i32;
    let selector = set
        .spec
        .selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    status.replicas = Some(current.len() as i32);
    status.fully_labeled_replicas = Some(current.len() as i32);
    status.ready_replicas = Some(ready);
    status.available_replicas = Some(ready);
    status.selector = Some(selector);
    status.observed_generation = Some(set.metadata.generation.unwrap_or(0));
    status.conditions = Some(list);
    if status != before {
        let status = serde_json::to_value(&status).map_err(|e| Error::Invalid(e.to_string()))?;
        patch_status(&api, &name, status).await?;
    }
    // Its Machines' changes wake it.
    Ok(crate::resync())
}

/// Creates Machines up to `wanted`, or deletes those beyond it in the order the set's
/// `deletePolicy` says, noting their names in `created` and `deleted` as it goes (also when a
/// step fails, so the caller can tell the cache what it did).
async fn scale(
    ctx: &Context,
    set: &Arc<MachineSet>,
    machines_api: &Api<Machine>,
    mut machines: Vec<Arc<Machine>>,
    wanted: usize,
    (created, deleted): (&mut Vec<String>, &mut Vec<String>),
) -> Result<(), Error> {
    if machines.len() < wanted {
        for _ in machines.len()..wanted {
            let machine = create_machine(ctx, set).await?;
            created.push(machine.name_any());
            ensure_clones(ctx, set, &machine).await?;
        }
    } else if machines.len() > wanted {
        let policy = set
            .spec
            .delete_policy
            .unwrap_or(MachineSetDeletePolicy::Random);
        order_for_deletion(&mut machines, policy);
        for machine in machines.iter().take(machines.len() - wanted) {
            tracing::info!(machineset = %format!("{}/{}", set.namespace().unwrap_or_default(), set.name_any()), machine = %machine.name_any(), ?policy, "scaling down");
            match machines_api
                .delete(&machine.name_any(), &DeleteParams::default())
                .await
            {
                Ok(_) => {
                    deleted.push(machine.name_any());
                    let message = format!("Deleted machine {:?}", machine.name_any());
                    event(ctx, set, "SuccessfulDelete", &message).await;
                }
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}

/// The machine template's spec; a MachineSet without one cannot make Machines.
fn template_spec(set: &MachineSet) -> Result<&MachineSpec, Error> {
    set.spec
        .template
        .as_ref()
        .and_then(|t| t.spec.as_ref())
        .ok_or_else(|| {
            Error::Invalid(format!(
                "MachineSet {} has no spec.template.spec to make Machines from",
                set.name_any()
            ))
        })
}

/// The first of the set's machine templates that does not exist, said as a user should read it.
async fn missing_template(ctx: &Context, set: &MachineSet) -> Result<Option<String>, Error> {
    let namespace = set.namespace().unwrap_or_default();
    let spec = template_spec(set)?;
    for (field, reference) in [
        ("bootstrap.configRef", spec.bootstrap.config_ref.as_ref()),
        ("infrastructureRef", Some(&spec.infrastructure_ref)),
    ] {
        let Some(reference) = reference.and_then(Reference::from_object_reference) else {
            continue;
        };
        let found = match reference.get(&ctx.caches, &namespace).await {
            Ok(found) => found.is_some(),
            Err(Error::UnknownKind { .. }) => false,
            Err(e) => return Err(e),
        };
        if !found {
            return Ok(Some(format!(
                "spec.template.spec.{field}: {} {} does not exist; no Machine is created until it does",
                reference.kind, reference.name
            )));
        }
    }
    Ok(None)
}

/// Orders machines so the first ones are deleted first: machines marked for deletion or failed
/// always go first, then the policy decides.
pub fn order_for_deletion(machines: &mut [Arc<Machine>], policy: MachineSetDeletePolicy) {
    let priority = |m: &Machine| -> u8 {
        if m.annotations().contains_key(DELETE_MACHINE_ANNOTATION) {
            0
        } else if m
            .status
            .as_ref()
            .is_some_and(|s| s.failure_reason.is_some())
            || phase(m) == Some(MachinePhase::Failed)
        {
            1
        } else if phase(m) != Some(MachinePhase::Running) {
            2
        } else {
            3
        }
    };
    let created = |m: &Machine| {
        m.metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0)
            .unwrap_or_default()
    };
    match policy {
        MachineSetDeletePolicy::Newest => machines.sort_by(|a, b| {
            priority(a)
                .cmp(&priority(b))
                .then(created(b).cmp(&created(a)))
        }),
        MachineSetDeletePolicy::Oldest => machines.sort_by(|a, b| {
            priority(a)
                .cmp(&priority(b))
                .then(created(a).cmp(&created(b)))
        }),
        MachineSetDeletePolicy::Random => {
            use rand::seq::SliceRandom;
            machines.shuffle(&mut rand::rng());
            machines.sort_by_key(|m| priority(m));
        }
    }
}

/// Creates a Machine naming the clones it will get (made by [`ensure_clones`]).
async fn create_machine(ctx: &Context, set: &MachineSet) -> Result<Machine, Error> {
    let namespace = set.namespace().unwrap_or_default();
    let name = format!("{}-{}", set.name_any(), object::random_suffix());
    let template_metadata = set
        .spec
        .template
        .as_ref()
        .and_then(|t| t.metadata.clone())
        .unwrap_or_default();
    let mut labels = template_metadata.labels.unwrap_or_default();
    labels.insert(CLUSTER_NAME_LABEL.into(), set.spec.cluster_name.clone());
    labels.insert(
        SET_NAME_LABEL.into(),
        lariat_api::capi::labels::format_value(&set.name_any()),
    );
    if let Some(deployment) = set
        .labels()
        .get(lariat_api::capi::labels::MACHINE_DEPLOYMENT_NAME)
    {
        labels.insert(
            lariat_api::capi::labels::MACHINE_DEPLOYMENT_NAME.into(),
            deployment.clone(),
        );
    }
    let mut spec = template_spec(set)?.clone();
    spec.cluster_name = set.spec.cluster_name.clone();
    // The Machine is created first, naming the clones it will get; the clones follow. A crash in
    // between leaves a Machine whose clones the next reconcile makes, never a clone nobody owns.
    if let Some(config_template) = spec
        .bootstrap
        .config_ref
        .as_ref()
        .and_then(Reference::from_object_reference)
    {
        spec.bootstrap.config_ref =
            Some(clone_target(&config_template, &name)?.to_object_reference());
    }
    if let Some(infra_template) = Reference::from_object_reference(&spec.infrastructure_ref) {
        spec.infrastructure_ref = clone_target(&infra_template, &name)?.to_object_reference();
    }
    let owner = serde_json::from_value(owner_reference(set, true))
        .map_err(|e| Error::Invalid(e.to_string()))?;
    let machine = Machine {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(namespace.clone()),
            labels: Some(labels),
            annotations: template_metadata.annotations,
            owner_references: Some(vec![owner]),
            // As Cluster API's MachineSet: created with the Machine controller's finalizer,
            // which saves the Machine a write (and every watcher a wake-up) to add it.
            finalizers: Some(vec![crate::machine::FINALIZER.to_string()]),
            ..Default::default()
        },
        spec,
        status: None,
    };
    let machines: Api<Machine> = Api::namespaced(ctx.client.clone(), &namespace);
    let created = machines.create(&PostParams::default(), &machine).await?;
    let message = format!("Created machine {:?}", created.name_any());
    event(ctx, set, "SuccessfulCreate", &message).await;
    Ok(created)
}

/// Makes the bootstrap config and infrastructure machine of `machine` from the set's templates
/// if they do not exist yet, owned by the Machine.
async fn ensure_clones(ctx: &Context, set: &MachineSet, machine: &Machine) -> Result<(), Error> {
    let namespace = machine.namespace().unwrap_or_default();
    let template = template_spec(set)?;
    let owner = owner_reference(machine, true);
    let labels = json!(machine.labels());
    for (template_ref, clone_ref) in [
        (
            template.bootstrap.config_ref.as_ref(),
            machine.spec.bootstrap.config_ref.as_ref(),
        ),
        (
            Some(&template.infrastructure_ref),
            Some(&machine.spec.infrastructure_ref),
        ),
    ] {
        let (Some(template_ref), Some(clone_ref)) = (
            template_ref.and_then(Reference::from_object_reference),
            clone_ref.and_then(Reference::from_object_reference),
        ) else {
            continue;
        };
        if clone_ref.get(&ctx.caches, &namespace).await?.is_none() {
            clone_template(
                &ctx.caches,
                &namespace,
                &template_ref,
                &clone_ref.name,
                &labels,
                owner.clone(),
            )
            .await?;
        }
    }
    Ok(())
}
