//! The MachineSet controller: keeps `spec.replicas` Machines from its template, creating each
//! with its own bootstrap config and infrastructure machine cloned from templates, and deleting
//! surplus machines by the delete policy (Random, Newest, Oldest).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::runtime::controller::Action;
use serde_json::{Value, json};

use crate::cache::IndexKey;
use crate::cluster::CLUSTER_NAME_LABEL;
use crate::events::EventType;
use crate::external::{Reference, clone_target, clone_template};
use crate::object::{self, i64_at, owner_reference, patch_status, str_at};
use crate::{Context, Error, capi, conditions};

pub const SET_NAME_LABEL: &str = "cluster.x-k8s.io/set-name";
/// Records a Normal Event on the MachineSet.
async fn event(ctx: &Context, object: &DynamicObject, reason: &str, message: &str) {
    ctx.events
        .publish(object, "MachineSet", EventType::Normal, reason, message)
        .await;
}

pub const DELETE_MACHINE_ANNOTATION: &str = "cluster.x-k8s.io/delete-machine";

/// The machines this set controls (it is their controller owner).
pub async fn owned_machines(
    ctx: &Context,
    set: &DynamicObject,
) -> Result<Vec<Arc<DynamicObject>>, Error> {
    let uid = set.uid().unwrap_or_default();
    Ok(ctx
        .caches
        .of(&capi("Machine"))
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

pub async fn reconcile(set: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Error> {
    if set.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let namespace = set.namespace().unwrap_or_default();
    let name = set.name_any();
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &namespace, &capi("MachineSet"));
    let cluster_name = str_at(&set.data, &["spec", "clusterName"])
        .unwrap_or_default()
        .to_string();
    let Some(cluster) = ctx.cluster_of(&set).await? else {
        return Ok(Action::requeue(Duration::from_secs(2)));
    };
    if object::bool_at(&cluster.data, &["spec", "paused"]) {
        return Ok(Action::await_change());
    }
    let mut labels = BTreeMap::new();
    labels.insert(CLUSTER_NAME_LABEL.to_string(), cluster_name.clone());
    object::ensure_labels(&api, &set, &labels).await?;
    if set.owner_references().is_empty() {
        object::ensure_owner(
            &api,
            &set,
            owner_reference(&cluster, "cluster.x-k8s.io/v1beta1", "Cluster", false),
        )
        .await?;
    }

    let wanted = i64_at(&set.data, &["spec", "replicas"]).unwrap_or(1).max(0) as usize;
    let machines: Vec<Arc<DynamicObject>> = owned_machines(&ctx, &set)
        .await?
        .into_iter()
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        .collect();
    let machines_api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &namespace, &capi("Machine"));
    for machine in machines
        .iter()
        .filter(|m| m.data["status"]["infrastructureReady"] != json!(true))
    {
        ensure_clones(&ctx, &set, machine).await?;
    }
    // Machines a MachineHealthCheck asked this set to remediate are deleted and replaced.
    let (remediate, healthy): (Vec<Arc<DynamicObject>>, Vec<Arc<DynamicObject>>) = machines
        .into_iter()
        .partition(|m| conditions::needs_owner_remediation(&m.data["status"]));
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
    let mut machines = healthy;
    // Names created or deleted here: the next reconcile must find them so in the cache, or it
    // would count the same Machines again (Cluster API's expectations).
    let mut created = Vec::new();
    let mut deleted: Vec<String> = remediate.iter().map(|m| m.name_any()).collect();
    // A Machine whose templates do not exist could never boot: none is made, and the set says
    // why (Cluster API's MachinesCreated condition).
    let mut list = conditions::existing(&set.data["status"]);
    let missing = if machines.len() < wanted {
        missing_template(&ctx, &set).await?
    } else {
        None
    };
    conditions::set(
        &mut list,
        "MachinesCreated",
        missing.is_none(),
        "TemplateNotFound",
        missing.as_deref().unwrap_or_default(),
    );
    if let Some(missing) = &missing {
        if !conditions::is_false(&set.data["status"], "MachinesCreated") {
            ctx.events
                .publish(
                    &set,
                    "MachineSet",
                    EventType::Warning,
                    "TemplateNotFound",
                    missing,
                )
                .await;
        }
        if json!(list) != set.data["status"]["conditions"] {
            patch_status(&api, &name, json!({"conditions": list})).await?;
        }
        // Creating a template is not among what wakes a MachineSet: look again shortly.
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    let changed: Result<(), Error> = async {
        if machines.len() < wanted {
            for _ in machines.len()..wanted {
                let machine = create_machine(&ctx, &set, &cluster_name).await?;
                created.push(machine.name_any());
                ensure_clones(&ctx, &set, &machine).await?;
            }
        } else if machines.len() > wanted {
            let policy = str_at(&set.data, &["spec", "deletePolicy"]).unwrap_or("Random");
            order_for_deletion(&mut machines, policy);
            for machine in machines.iter().take(machines.len() - wanted) {
                tracing::info!(machineset = %format!("{namespace}/{name}"), machine = %machine.name_any(), policy, "scaling down");
                match machines_api
                    .delete(&machine.name_any(), &DeleteParams::default())
                    .await
                {
                    Ok(_) => {
                        deleted.push(machine.name_any());
                        let message = format!("Deleted machine {:?}", machine.name_any());
                        event(&ctx, &set, "SuccessfulDelete", &message).await;
                    }
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(())
    }
    .await;
    // Even when a step failed: what was created or deleted must be seen before the retry.
    ctx.caches
        .of(&capi("Machine"))
        .observed(&namespace, &created, &deleted)
        .await?;
    changed?;
    let current = owned_machines(&ctx, &set).await?;
    let ready = current
        .iter()
        .filter(|m| object::str_at(&m.data, &["status", "phase"]) == Some("Running"))
        .count();
    let selector = set.data["spec"]["selector"]["matchLabels"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    let status = json!({
        "replicas": current.len(),
        "fullyLabeledReplicas": current.len(),
        "readyReplicas": ready,
        "availableReplicas": ready,
        "selector": selector,
        "observedGeneration": set.metadata.generation.unwrap_or(0),
        "conditions": list,
    });
    let changed = [
        "replicas",
        "readyReplicas",
        "availableReplicas",
        "selector",
        "observedGeneration",
    ]
    .iter()
    .any(|k| status[k] != set.data["status"][k])
        || conditions::is_true(&list, "MachinesCreated")
            != conditions::is_true(
                &conditions::existing(&set.data["status"]),
                "MachinesCreated",
            );
    if changed {
        patch_status(&api, &name, status).await?;
    }
    // Its Machines' changes wake it.
    Ok(crate::resync())
}

/// The first of the set's machine templates that does not exist, said as a user should read it.
async fn missing_template(ctx: &Context, set: &DynamicObject) -> Result<Option<String>, Error> {
    let namespace = set.namespace().unwrap_or_default();
    let spec = &set.data["spec"]["template"]["spec"];
    for (field, reference) in [
        ("bootstrap.configRef", &spec["bootstrap"]["configRef"]),
        ("infrastructureRef", &spec["infrastructureRef"]),
    ] {
        let Some(reference) = Reference::from_json(reference) else {
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
pub fn order_for_deletion(machines: &mut [Arc<DynamicObject>], policy: &str) {
    let priority = |m: &DynamicObject| -> u8 {
        if m.annotations().contains_key(DELETE_MACHINE_ANNOTATION) {
            0
        } else if m.data["status"]["failureReason"].is_string()
            || m.data["status"]["phase"] == "Failed"
        {
            1
        } else if m.data["status"]["phase"] != "Running" {
            2
        } else {
            3
        }
    };
    let created = |m: &DynamicObject| {
        m.metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0)
            .unwrap_or_default()
    };
    match policy {
        "Newest" => machines.sort_by(|a, b| {
            priority(a)
                .cmp(&priority(b))
                .then(created(b).cmp(&created(a)))
        }),
        "Oldest" => machines.sort_by(|a, b| {
            priority(a)
                .cmp(&priority(b))
                .then(created(a).cmp(&created(b)))
        }),
        _ => {
            use rand::seq::SliceRandom;
            machines.shuffle(&mut rand::rng());
            machines.sort_by_key(|m| priority(m));
        }
    }
}

/// Creates a Machine naming the clones it will get (made by [`ensure_clones`]).
async fn create_machine(
    ctx: &Context,
    set: &DynamicObject,
    cluster_name: &str,
) -> Result<DynamicObject, Error> {
    let namespace = set.namespace().unwrap_or_default();
    let name = format!("{}-{}", set.name_any(), object::random_suffix());
    let template = &set.data["spec"]["template"];
    let mut labels = template["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    labels.insert(CLUSTER_NAME_LABEL.into(), json!(cluster_name));
    labels.insert(SET_NAME_LABEL.into(), json!(set.name_any()));
    if let Some(deployment) = set.labels().get("cluster.x-k8s.io/deployment-name") {
        labels.insert("cluster.x-k8s.io/deployment-name".into(), json!(deployment));
    }
    let labels = Value::Object(labels);
    let mut spec = template["spec"].clone();
    spec["clusterName"] = json!(cluster_name);
    // The Machine is created first, naming the clones it will get; the clones follow. A crash in
    // between leaves a Machine whose clones the next reconcile makes, never a clone nobody owns.
    if let Some(config_template) = Reference::from_json(&template["spec"]["bootstrap"]["configRef"])
    {
        spec["bootstrap"]["configRef"] = clone_target(&config_template, &name)?.to_json();
    }
    if let Some(infra_template) = Reference::from_json(&template["spec"]["infrastructureRef"]) {
        spec["infrastructureRef"] = clone_target(&infra_template, &name)?.to_json();
    }
    let machine = json!({
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "Machine",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": template["metadata"]["annotations"].clone(),
            "ownerReferences": [owner_reference(set, "cluster.x-k8s.io/v1beta1", "MachineSet", true)],
        },
        "spec": spec,
    });
    let machine: DynamicObject =
        serde_json::from_value(machine).map_err(|e| Error::Invalid(e.to_string()))?;
    let machines: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &namespace, &capi("Machine"));
    let created = machines.create(&PostParams::default(), &machine).await?;
    let message = format!("Created machine {:?}", created.name_any());
    event(ctx, set, "SuccessfulCreate", &message).await;
    Ok(created)
}

/// Makes the bootstrap config and infrastructure machine of `machine` from the set's templates
/// if they do not exist yet, owned by the Machine.
async fn ensure_clones(
    ctx: &Context,
    set: &DynamicObject,
    machine: &DynamicObject,
) -> Result<(), Error> {
    let namespace = machine.namespace().unwrap_or_default();
    let template = &set.data["spec"]["template"]["spec"];
    let owner = owner_reference(machine, "cluster.x-k8s.io/v1beta1", "Machine", true);
    let labels = json!(machine.labels());
    for (template_ref, clone_ref) in [
        (
            &template["bootstrap"]["configRef"],
            &machine.data["spec"]["bootstrap"]["configRef"],
        ),
        (
            &template["infrastructureRef"],
            &machine.data["spec"]["infrastructureRef"],
        ),
    ] {
        let (Some(template_ref), Some(clone_ref)) = (
            Reference::from_json(template_ref),
            Reference::from_json(clone_ref),
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
