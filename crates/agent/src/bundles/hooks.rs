//! Helm's hooks, run as `helm install` and `helm upgrade` run them around a release's
//! objects: `pre-install`/`pre-upgrade` before them, `post-install`/`post-upgrade` after,
//! by weight, then kind, then name. Each hook object is created (the one left by an earlier
//! run deleted first, unless its delete policy says otherwise), and a Job or Pod is waited for
//! until it succeeds or fails, watched, not polled; `hook-succeeded` and `hook-failed`
//! delete it after. A hook that fails fails the deploy, naming it.
//!
//! Hooks are not the release's objects: never recorded, pruned or monitored. Deletion hooks
//! run when the bundle is removed from the cluster, read back from the release the cluster
//! keeps ([`from_release`]); rollback hooks do not run (lariat does not roll back), and test
//! hooks run only on `helm test`.

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
        // Helm never deletes a CRD hook: its custom resources would go with it.
        if self.kind == "CustomResourceDefinition" {
            return false;
        }
        // Helm 3 deletes a hook's previous object before creating it unless told otherwise.
        (self.delete_policies.is_empty() && policy == "before-hook-creation")
            || self.delete_policies.iter().any(|p| p == policy)
    }
}

/// Helm's order of hooks: by weight, then by name (they come in the kinds' install order,
/// which a stable sort keeps between hooks of one weight and name).
pub(super) fn sort(hooks: &mut [Hook]) {
    hooks.sort_by(|a, b| lariat_helm::manifests::kind_order(&a.kind, &b.kind));
    hooks.sort_by(|a, b| a.weight.cmp(&b.weight).then_with(|| a.name.cmp(&b.name)));
}

/// What Go writes for a time never set, as Helm records a hook that has not run.
const NEVER: &str = "0001-01-01T00:00:00Z";

impl Hook {
    /// The hook as a release records one that has not run.
    pub fn never_run(&self) -> Value {
        self.release_json(NEVER, NEVER, "")
    }
}

/// A digest of `hooks` as they would run (kind, name, manifest, events, weight, policies);
/// `None` for none.
pub(super) fn digest(hooks: &[Hook]) -> Option<String> {
    use sha2::{Digest, Sha256};
    if hooks.is_empty() {
        return None;
    }
    let mut sha = Sha256::new();
    for hook in hooks {
        let fields = json!([
            hook.kind,
            hook.name,
            hook.manifest,
            hook.events,
            hook.weight,
            hook.delete_policies
        ]);
        sha.update(fields.to_string().as_bytes());
        sha.update(b"\n");
    }
    Some(format!("{:x}", sha.finalize()))
}

/// The digest of the delete hooks among `hooks`: the ones an uninstall may run.
pub(super) fn deletion_digest(hooks: &[Hook]) -> Option<String> {
    let deletion: Vec<Hook> = hooks
        .iter()
        .filter(|h| {
            h.events
                .iter()
                .any(|e| e == "pre-delete" || e == "post-delete")
        })
        .cloned()
        .collect();
    digest(&deletion)
}

/// The hooks of a release as the cluster keeps it (Helm's `hooks`), for `events`, in the order
/// they run.
pub(super) fn from_release(release: &Value, events: &[&str]) -> Result<Vec<Hook>, String> {
    let mut hooks = Vec::new();
    for recorded in release["hooks"].as_array().into_iter().flatten() {
        let strings = |field: &str| -> Vec<String> {
            recorded[field]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        };
        let hook_events = strings("events");
        if !hook_events.iter().any(|e| events.contains(&e.as_str())) {
            continue;
        }
        let text = |field: &str| recorded[field].as_str().unwrap_or_default().to_string();
        let manifest = text("manifest");
        let object: Value = serde_yaml_ng::from_str(&manifest)
            .map_err(|e| format!("the release's hook {}: {e}", text("name")))?;
        hooks.push(Hook {
            object,
            kind: text("kind"),
            name: text("name"),
            source: text("path"),
            manifest,
            events: hook_events,
            weight: recorded["weight"].as_i64().unwrap_or(0),
            delete_policies: strings("delete_policies"),
        });
    }
    sort(&mut hooks);
    Ok(hooks)
}

/// Runs the hooks for `event`, in order; returns each as the release records it. As Helm,
/// `hook-succeeded` deletes the hooks once all of the event's have succeeded (a
/// ServiceAccount hook is there for the Job hook after it), in reverse; when one fails, it
/// goes by `hook-failed` and those that succeeded before it by `hook-succeeded`.
pub(super) async fn run(
    client: &kube::Client,
    hooks: &[Hook],
    event: &str,
    namespace: &str,
    timeout: Duration,
) -> Result<Vec<Value>, String> {
    let mut ran = Vec::new();
    let mut succeeded: Vec<(&Hook, Api<DynamicObject>)> = Vec::new();
    for hook in hooks.iter().filter(|h| h.events.iter().any(|e| e == event)) {
        let started = now();
        let outcome = match tokio::time::timeout(timeout, run_one(client, hook, namespace)).await {
            Ok(outcome) => outcome,
            Err(_) => Err((
                format!("did not finish within {}s", timeout.as_secs()),
                None,
            )),
        };
        let phase = if outcome.is_ok() {
            "Succeeded"
        } else {
            "Failed"
        };
        ran.push(hook.release_json(&started, &now(), phase));
        match outcome {
            Ok(api) => succeeded.push((hook, api)),
            Err((reason, api)) => {
                if let Some(api) = api
                    && hook.deletes_when("hook-failed")
                {
                    delete_and_wait(&api, hook).await?;
                }
                delete_succeeded(&succeeded).await?;
                return Err(format!(
                    "{event} hook {} {} ({}) failed: {reason}",
                    hook.kind, hook.name, hook.source
                ));
            }
        }
    }
    delete_succeeded(&succeeded).await?;
    Ok(ran)
}

/// The succeeded hooks `hook-succeeded` deletes, last first.
async fn delete_succeeded(succeeded: &[(&Hook, Api<DynamicObject>)]) -> Result<(), String> {
    for (hook, api) in succeeded.iter().rev() {
        if hook.deletes_when("hook-succeeded") {
            delete_and_wait(api, hook).await?;
        }
    }
    Ok(())
}

/// A hook's failure, and its API when it was created (to delete it by `hook-failed`).
type HookFailure = (String, Option<Api<DynamicObject>>);

/// Creates one hook and waits for it; its API, to delete it by, however it ended.
async fn run_one(
    client: &kube::Client,
    hook: &Hook,
    release_namespace: &str,
) -> Result<Api<DynamicObject>, HookFailure> {
    let api_version = hook.object["apiVersion"].as_str().unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, &hook.kind);
    let (resource, capabilities) =
        kube::discovery::pinned_kind(client, &gvk)
            .await
            .map_err(|e| {
                (
                    format!(
                        "this cluster does not serve {} in {api_version}: {}",
                        hook.kind,
                        said(e)
                    ),
                    None,
                )
            })?;
    let mut object: DynamicObject =
        serde_json::from_value(hook.object.clone()).map_err(|e| (e.to_string(), None))?;
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
        delete_and_wait(&api, hook).await.map_err(|e| (e, None))?;
    }
    let created = api
        .create(&PostParams::default(), &object)
        .await
        .map_err(|e| match e {
            kube::Error::Api(e) if e.code == 409 => (
                format!(
                    "{} {} exists already (its delete policy keeps it)",
                    hook.kind, hook.name
                ),
                None,
            ),
            other => (said(other), None),
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
    match outcome {
        Ok(()) => Ok(api),
        Err(reason) => Err((reason, Some(api))),
    }
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
    // Gone (a Job's `ttlSecondsAfterFinished`) counts as done, as Helm's watch counts it.
    let Some(object) = object else {
        return Ok(());
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

async fn delete_and_wait(api: &Api<DynamicObject>, hook: &Hook) -> Result<(), String> {
    let name = hook.name.as_str();
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
