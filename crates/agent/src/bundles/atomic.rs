//! `helm.atomic`: an install or upgrade that fails is undone, as Helm's `--atomic`
//! (`--rollback-on-failure` in Helm 4, which Fleet's agent runs) undoes it.
//!
//! - The release's objects must be ready within the wait (`timeoutSeconds`, else Helm 4's 30
//!   s), after its pre-hooks and before its post-hooks.
//! - A failed upgrade is recorded as a `failed` revision; then the last revision this agent
//!   deployed (known by the digest of its manifest in the agent's own record, since anyone
//!   who may write Secrets in the release's namespace may add revisions) is applied again and
//!   recorded as a new one ("Rollback to N"), as `helm rollback` does (without its rollback
//!   hooks, and without waiting for the objects again).
//! - A failed first install is uninstalled: its delete hooks run, the objects it created and
//!   its history go. A failed install over objects another version of the bundle applied (a
//!   bundle that became a chart, a renamed release) is not undone: nothing the agent
//!   deployed as that release is there to go back to, and removing what the bundle had would
//!   be worse.
//!
//! The version undone is tried again after [`super::RETRY_UNDONE`] (Fleet's agent tries a
//! failed upgrade again as it backs off), at once when the BundleDeployment names another
//! version, and after a restart.

use std::time::Duration;

use serde_json::Value;

use super::deploy::{self, Desired, Fresh, Record};
use super::helm::Rendered;
use super::release::{self, Outcome, ReleaseData};
use super::{Agent, hooks, monitor};

/// How often the objects are looked at while waiting, besides when their watches wake it:
/// what their Pods say changes nothing the watches see.
const LOOK_AGAIN: Duration = Duration::from_secs(2);

/// Waits until every object of `desired` is there and ready, at most `timeout`; the first
/// objects that are not ready, and why, when they were not in time.
pub(super) async fn wait_ready(
    agent: &Agent,
    name: &str,
    desired: &[Desired],
    written: &Fresh,
    timeout: Duration,
) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut changes = agent.changed.subscribe();
    loop {
        let newest = newest(agent, desired, written).await;
        if all_ready(agent, desired, &newest).await {
            return Ok(());
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            // Looked at once more, with the Pods' reasons, to say why.
            let seen = monitor::observe(agent, name, desired, &newest).await;
            let mut waiting: Vec<String> = seen
                .missing
                .iter()
                .map(|key| format!("{key} is missing"))
                .chain(seen.not_ready.iter().map(|(key, summary)| {
                    let why = summary.message.clone().unwrap_or_default().join("; ");
                    format!("{key} is not ready: {why}")
                }))
                .collect();
            let more = waiting.len().saturating_sub(1);
            waiting.truncate(1);
            if more > 0 {
                waiting.push(format!("and {more} more"));
            }
            return Err(format!(
                "timed out after {}s waiting for the release's objects to be ready: {}",
                timeout.as_secs(),
                waiting.join("; ")
            ));
        }
        let woken = async {
            loop {
                match changes.recv().await {
                    Ok(changed) if changed == name => return,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                        std::future::pending::<()>().await;
                    }
                    _ => {}
                }
            }
        };
        let _ = tokio::time::timeout(LOOK_AGAIN.min(deadline - now), woken).await;
    }
}

/// Whether every object of `desired` is there and ready in its own terms (no Pods read).
async fn all_ready(agent: &Agent, desired: &[Desired], newest: &Fresh) -> bool {
    for wanted in desired {
        let live = match newest.written.get(&wanted.key) {
            Some(written) => Some(written.clone()),
            None => agent
                .applied(&wanted.kind)
                .await
                .get(wanted.key.namespace.as_deref(), &wanted.key.name),
        };
        let Some(live) = live else {
            return false;
        };
        let live = serde_json::to_value(&live).unwrap_or_default();
        if monitor::readiness(&wanted.key.kind, &live).is_some() {
            return false;
        }
    }
    true
}

/// The objects as written, where the watches are still behind them: not seen yet, another
/// object (a replaced one has a new uid), an older generation, or an older resourceVersion
/// (compared as numbers where both are, as the embedded and etcd stores write them). An
/// object whose watch still shows it before the write would look ready in its old state.
async fn newest(agent: &Agent, desired: &[Desired], written: &Fresh) -> Fresh {
    let mut newest = Fresh {
        deleted: written.deleted.clone(),
        ..Fresh::default()
    };
    for wanted in desired {
        let Some(object) = written.written.get(&wanted.key) else {
            continue;
        };
        let watched = agent
            .applied(&wanted.kind)
            .await
            .get(wanted.key.namespace.as_deref(), &wanted.key.name);
        let behind = watched.is_none_or(|seen| {
            let version = |o: &kube::api::DynamicObject| {
                o.metadata
                    .resource_version
                    .as_deref()
                    .and_then(|v| v.parse::<u64>().ok())
            };
            seen.metadata.uid != object.metadata.uid
                || seen.metadata.generation.unwrap_or(0) < object.metadata.generation.unwrap_or(0)
                || matches!((version(&seen), version(object)), (Some(a), Some(b)) if a < b)
        });
        if behind {
            newest.written.insert(wanted.key.clone(), object.clone());
        }
    }
    newest
}

/// Undoes a failed install or upgrade of `rendered` by BundleDeployment `name` (of namespace
/// `namespace`), `before` being what it had applied before the attempt; returns what to
/// report, in Helm's words. What only records the failure (a revision, a digest) is not let
/// stop the undo: it is logged.
pub(super) async fn undo(
    agent: &Agent,
    name: &str,
    namespace: &str,
    options: &lariat_api::fleet::BundleDeploymentOptions,
    rendered: &Rendered,
    before: Option<&Record>,
    error: &str,
) -> String {
    let release = &rendered.release;
    let never_run: Vec<Value> = rendered.hooks.iter().map(hooks::Hook::never_run).collect();
    let client = &agent.downstream;
    let note = |what: &str, outcome: Result<(), String>| {
        if let Err(e) = outcome {
            tracing::warn!(bundle = %name, error = %e, "cannot record {what}");
        }
    };
    let fresh_install = before.is_none_or(|b| b.resources.is_empty());
    match before.and_then(|b| b.release_manifest.clone()) {
        Some(digest) => {
            let failure = format!("Upgrade {:?} failed: {error}", release.name);
            let recorded =
                release::record(client, release, &never_run, 0, Outcome::Failed(failure));
            note("the failed revision", recorded.await);
            match roll_back(agent, name, namespace, options, release, &digest).await {
                Ok(()) => format!(
                    "release {} failed, and has been rolled back due to rollback-on-failure being set: {error}",
                    release.name
                ),
                Err(e) => format!(
                    "an error occurred while rolling back the release. original upgrade error: {error}: {e}"
                ),
            }
        }
        None if fresh_install => {
            let failure = format!("Release {:?} failed: {error}", release.name);
            let recorded =
                release::record(client, release, &never_run, 0, Outcome::Failed(failure));
            note("the failed revision", recorded.await);
            let digest = hooks::deletion_digest(&rendered.hooks);
            note(
                "the delete hooks",
                deploy::remember_release(agent, name, digest, None).await,
            );
            let uninstalled = async {
                deploy::uninstall(agent, name)
                    .await
                    .map_err(|e| e.to_string())?;
                // Also when nothing was recorded (a pre-install hook failed first).
                release::remove(client, &release.namespace, &release.name)
                    .await
                    .map_err(|e| e.to_string())
            };
            match uninstalled.await {
                Ok(()) => format!(
                    "release {} failed, and has been uninstalled due to rollback-on-failure being set: {error}",
                    release.name
                ),
                Err(e) => format!(
                    "an error occurred while uninstalling the release. original install error: {error}: {e}"
                ),
            }
        }
        None => {
            let failure = format!("Release {:?} failed: {error}", release.name);
            let recorded =
                release::record(client, release, &never_run, 0, Outcome::Failed(failure));
            note("the failed revision", recorded.await);
            format!(
                "release {} failed, and was not undone: this agent has deployed no revision of it to roll back to, and the bundle's earlier objects stay: {error}",
                release.name
            )
        }
    }
}

/// Applies the last revision of the release this agent deployed (its manifest's digest
/// `trusted`) again, and records it as a new revision.
async fn roll_back(
    agent: &Agent,
    name: &str,
    namespace: &str,
    options: &lariat_api::fleet::BundleDeploymentOptions,
    failed: &ReleaseData,
    trusted: &str,
) -> Result<(), String> {
    let client = &agent.downstream;
    let previous = release::last_deployed(client, &failed.namespace, &failed.name, trusted).await?;
    let Some((revision, previous)) = previous else {
        return Err("unable to find a previously successful release to roll back to".into());
    };
    let manifest = previous["manifest"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut objects = Vec::new();
    for document in lariat_helm::manifests::split_documents(&manifest) {
        let mut object: Value = serde_yaml_ng::from_str(&document)
            .map_err(|e| format!("revision {revision}'s manifest: {e}"))?;
        if !object.is_null() {
            super::helm::mark(&mut object, &failed.name, &failed.namespace);
            objects.push(object);
        }
    }
    let desired = deploy::desired(agent, name, &objects, &[], options).await?;
    deploy::apply(agent, name, namespace, options, &desired).await?;
    let again = ReleaseData {
        chart: previous["chart"].clone(),
        config: previous["config"].clone(),
        manifest,
        notes: previous["info"]["notes"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        ..failed.clone()
    };
    let hooks = previous["hooks"].as_array().cloned().unwrap_or_default();
    let max_history = options.helm.as_ref().map_or(0, |h| h.max_history);
    release::record(
        client,
        &again,
        &hooks,
        super::max_history(max_history),
        Outcome::RolledBackTo(revision),
    )
    .await
}
