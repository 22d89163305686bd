//! `helm.atomic`: an install or upgrade that fails is undone, as Helm's `--atomic`
//! (`--rollback-on-failure` in Helm 4, which Fleet's agent runs) undoes it.
//!
//! - The release's objects must be ready within the release's timeout (Helm's `--wait`,
//!   which atomic implies), after its pre-hooks and before its post-hooks.
//! - A failed upgrade is recorded as a `failed` revision; then the last revision this agent
//!   deployed is applied again and recorded as a new one ("Rollback to N"), as `helm
//!   rollback` does (its rollback hooks are not run).
//! - A failed install is recorded as failed and uninstalled: its delete hooks run, its objects
//!   and its history go.
//!
//! A version undone is not tried again by this agent until the BundleDeployment names another
//! (a new commit or new options) or the agent restarts: each try would wait the whole timeout
//! and leave two revisions behind.

use std::time::Duration;

use serde_json::Value;

use super::deploy::{self, Desired, Fresh};
use super::helm::Rendered;
use super::release::{self, Outcome, ReleaseData};
use super::{Agent, hooks, monitor};

/// How often the objects are looked at while waiting, besides when their watches wake it:
/// what their Pods say changes nothing the watches see.
const LOOK_AGAIN: Duration = Duration::from_secs(1);

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
        let seen = monitor::observe(agent, name, desired, &newest).await;
        if seen.not_ready.is_empty() && seen.missing.is_empty() {
            return Ok(());
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
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

/// The objects as written, where the watches are still behind them (their generation older,
/// or not seen yet): an object whose watch still shows it before the write would look ready
/// in its old state.
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
            seen.metadata.generation.unwrap_or(0) < object.metadata.generation.unwrap_or(0)
        });
        if behind {
            newest.written.insert(wanted.key.clone(), object.clone());
        }
    }
    newest
}

/// Undoes a failed install or upgrade of `rendered` by BundleDeployment `name` (of namespace
/// `namespace`); returns what to report, in Helm's words.
pub(super) async fn undo(
    agent: &Agent,
    name: &str,
    namespace: &str,
    options: &lariat_api::fleet::BundleDeploymentOptions,
    rendered: &Rendered,
    error: &str,
) -> String {
    let release = &rendered.release;
    let never_run: Vec<Value> = rendered.hooks.iter().map(hooks::Hook::never_run).collect();
    let client = &agent.downstream;
    if !release.is_upgrade {
        let failure = format!("Release {:?} failed: {error}", release.name);
        let uninstalled = async {
            release::record(client, release, &never_run, 0, Outcome::Failed(failure)).await?;
            let deletion: Vec<hooks::Hook> = rendered
                .hooks
                .iter()
                .filter(|h| h.events.iter().any(|e| e.ends_with("-delete")))
                .cloned()
                .collect();
            deploy::remember_release(agent, name, hooks::digest(&deletion), None).await?;
            deploy::uninstall(agent, name)
                .await
                .map_err(|e| e.to_string())?;
            // Also when nothing was recorded yet (a pre-install hook failed).
            release::remove(client, &release.namespace, &release.name)
                .await
                .map_err(|e| e.to_string())
        };
        return match uninstalled.await {
            Ok(()) => format!(
                "release {} failed, and has been uninstalled due to atomic being set: {error}",
                release.name
            ),
            Err(e) => format!(
                "an error occurred while uninstalling the release. original install error: {error}: {e}"
            ),
        };
    }
    let failure = format!("Upgrade {:?} failed: {error}", release.name);
    let rolled_back = async {
        release::record(client, release, &never_run, 0, Outcome::Failed(failure)).await?;
        roll_back(agent, name, namespace, options, release).await
    };
    match rolled_back.await {
        Ok(()) => format!(
            "release {} failed, and has been rolled back due to atomic being set: {error}",
            release.name
        ),
        Err(e) => format!(
            "an error occurred while rolling back the release. original upgrade error: {error}: {e}"
        ),
    }
}

/// Applies the last revision of the release this agent deployed again, and records it as a
/// new revision.
async fn roll_back(
    agent: &Agent,
    name: &str,
    namespace: &str,
    options: &lariat_api::fleet::BundleDeploymentOptions,
    failed: &ReleaseData,
) -> Result<(), String> {
    let client = &agent.downstream;
    let trusted = deploy::record(agent, name)
        .await
        .map_err(|e| e.to_string())?
        .and_then(|r| r.release_manifest);
    let previous = match trusted {
        Some(digest) => {
            release::last_deployed(client, &failed.namespace, &failed.name, &digest).await?
        }
        None => None,
    };
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
