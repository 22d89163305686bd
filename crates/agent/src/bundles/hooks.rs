//! Helm's hooks, run as `helm install` and `helm upgrade` run them around a release's
//! objects: `pre-install`/`pre-upgrade` before them, `post-install`/`post-upgrade` after,
//! by weight, then kind, then name. Each hook object is created (the one left by an earlier
//! run deleted first, unless its delete policy says otherwise), and a Job or Pod is waited for
//! until it succeeds or fails, watched, not polled; `hook-succeeded` and `hook-failed`
//! delete it after. A hook that fails fails the deploy, naming it.
//!
//! Hooks are not the release's objects: never recorded, pruned or monitored. Deletion and
//! rollback hooks do not run (lariat neither rolls back nor runs a chart at uninstall), and
//! test hooks run only on `helm test`.

use std::time::Duration;

use kube::api::{
    Api, DeleteParams, DynamicObject, GroupVersionKind, PostParams, PropagationPolicy,
};
use kube::runtime::wait::{Condition, await_condition};
use serde_json::{Value, json};

/// One hook of a rendered chart.
#[derive(Clone, Debug)]
pub(super) struct Hook {
    pub object: Value,
    pub kind: String,
    pub name: String,
    /// The template it came from.
    pub source: String,
    pub manifest: String,
    pub events: Vec<String>,
    pub weight: i64,
    pub delete_policies: Vec<String>,
}

impl Hook {
    /// Helm's record of the hook in a release, with its last run.
    pub fn release_json(&self, started: &str, completed: &str, phase: &str) -> Value {
        json!({
            "name": self.name, "kind": self.kind, "path": self.source, "manifest": self.manifest,
            "events": self.events, "weight": self.weight, "delete_policies": self.delete_policies,
            "last_run": {"started_at": started, "completed_at": completed, "phase": phase},
        })
    }

    fn deletes_when(&self, policy: &str) -> bool {
        // Helm 3 deletes a hook's previous object before creating it unless told otherwise.
        (self.delete_policies.is_empty() && policy == "before-hook-creation")
            || self.delete_policies.iter().any(|p| p == policy)
    }
}

/// Helm's order of hooks: by weight, then by the kinds' install order, then by name.
pub(super) fn sort(hooks: &mut [Hook]) {
    hooks.sort_by(|a, b| {
        a.weight
            .cmp(&b.weight)
            .then_with(|| lariat_helm::manifests::kind_order(&a.kind, &b.kind))
            .then_with(|| a.name.cmp(&b.name))
    });
}

/// Runs the hooks for `event`, in order; returns each as the release records it.
pub(super) async fn run(
    client: &kube::Client,
    hooks: &[Hook],
    event: &str,
    namespace: &str,
    timeout: Duration,
) -> Result<Vec<Value>, String> {
    let mut ran = Vec::new();
    for hook in hooks.iter().filter(|h| h.events.iter().any(|e| e == event)) {
        let started = now();
        let outcome = tokio::time::timeout(timeout, run_one(client, hook, namespace))
            .await
            .unwrap_or_else(|_| Err(format!("did not finish within {}s", timeout.as_secs())));
        let phase = if outcome.is_ok() {
            "Succeeded"
        } else {
            "Failed"
        };
        ran.push(hook.release_json(&started, &now(), phase));
        if let Err(reason) = outcome {
            return Err(format!(
                "{event} hook {} {} ({}) failed: {reason}",
                hook.kind, hook.name, hook.source
            ));
        }
    }
    Ok(ran)
}

async fn run_one(
    client: &kube::Client,
    hook: &Hook,
    release_namespace: &str,
) -> Result<(), String> {
    let api_version = hook.object["apiVersion"].as_str().unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, &hook.kind);
    let (resource, capabilities) =
        kube::discovery::pinned_kind(client, &gvk)
            .await
            .map_err(|e| {
                format!(
                    "this cluster does not serve {} in {api_version}: {e}",
                    hook.kind
                )
            })?;
    let mut object: DynamicObject =
        serde_json::from_value(hook.object.clone()).map_err(|e| e.to_string())?;
    let api: Api<DynamicObject> = if capabilities.scope == kube::discovery::Scope::Namespaced {
        let namespace = object
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| release_namespace.to_string());
        object.metadata.namespace = Some(namespace.clone());
        Api::namespaced_with(client.clone(), &namespace, &resource)
    } else {
        object.metadata.namespace = None;
        Api::all_with(client.clone(), &resource)
    };
    if hook.deletes_when("before-hook-creation") {
        delete_and_wait(&api, &hook.name).await?;
    }
    let created = api
        .create(&PostParams::default(), &object)
        .await
        .map_err(|e| match e {
            kube::Error::Api(e) if e.code == 409 => {
                format!(
                    "{} {} exists already (its delete policy keeps it)",
                    hook.kind, hook.name
                )
            }
            other => other.to_string(),
        })?;
    let outcome = match hook.kind.as_str() {
        "Job" | "Pod" => await_condition(
            api.clone(),
            &hook.name,
            finished(hook.kind.clone(), created.metadata.uid.clone()),
        )
        .await
        .map_err(|e| e.to_string())
        .and_then(|last| verdict(&hook.kind, last.as_ref())),
        _ => Ok(()),
    };
    let policy = if outcome.is_ok() {
        "hook-succeeded"
    } else {
        "hook-failed"
    };
    if hook.deletes_when(policy) {
        delete_and_wait(&api, &hook.name).await?;
    }
    outcome
}

/// Whether the hook object is done: a Job complete or failed, a Pod succeeded or failed; or
/// gone, or replaced by another of its name.
fn finished(kind: String, uid: Option<String>) -> impl Condition<DynamicObject> {
    move |object: Option<&DynamicObject>| match object {
        None => true,
        Some(object) if object.metadata.uid != uid => true,
        Some(object) => match kind.as_str() {
            "Job" => job_conditions(object).iter().any(|(type_, status)| {
                (type_ == "Complete" || type_ == "Failed") && status == "True"
            }),
            _ => matches!(
                object.data["status"]["phase"].as_str(),
                Some("Succeeded" | "Failed")
            ),
        },
    }
}

fn job_conditions(object: &DynamicObject) -> Vec<(String, String)> {
    object.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c["type"].as_str().unwrap_or_default().to_string(),
                c["status"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// Why a finished hook failed, in its own status's words.
fn verdict(kind: &str, object: Option<&DynamicObject>) -> Result<(), String> {
    let Some(object) = object else {
        return Err("it was deleted before it finished".into());
    };
    let status = &object.data["status"];
    let succeeded = match kind {
        "Job" => job_conditions(object)
            .iter()
            .any(|(t, s)| t == "Complete" && s == "True"),
        _ => status["phase"] == "Succeeded",
    };
    if succeeded {
        return Ok(());
    }
    let reason = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Failed")
        .and_then(|c| c["message"].as_str().or(c["reason"].as_str()))
        .or(status["message"].as_str())
        .unwrap_or("it failed");
    Err(reason.to_string())
}

async fn delete_and_wait(api: &Api<DynamicObject>, name: &str) -> Result<(), String> {
    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..Default::default()
    };
    match api.delete(name, &params).await {
        Ok(either) => {
            if let Some(uid) = either.left().and_then(|o| o.metadata.uid) {
                await_condition(
                    api.clone(),
                    name,
                    kube::runtime::wait::conditions::is_deleted(&uid),
                )
                .await
                .map_err(|e| e.to_string())?;
            }
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(format!("cannot delete the previous {name}: {}", said(e))),
    }
}

/// What the API said, without the client's wrapping.
fn said(error: kube::Error) -> String {
    match error {
        kube::Error::Api(status) => status.message,
        other => other.to_string(),
    }
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
}
