//! The GitRepo controller: fetches each repository every `pollingInterval`, turns the paths
//! of a new commit into Bundles (owned by the GitRepo), and rolls its Bundles' status up.
//!
//! A commit that cannot be deployed (a file that is not YAML, an unknown `fleet.yaml` field,
//! a path that is gone, a file or bundle over the server's [`crate::Limits`]) changes no
//! Bundle: the last good commit stays deployed, and the GitRepo's `Accepted` condition names
//! the file and the reason. A fetch that fails is retried at the next interval, never
//! sooner; one from a network the server does not fetch from is refused before any
//! connection, with one message whatever is (or is not) there.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams};
use kube::runtime::controller::Action;
use lariat_api::fleet::{Bundle, BundleSummary, GitRepo, GitRepoDisplay, GitRepoStatus};
use lariat_controllers::Error;
use lariat_controllers::cache::IndexKey;
use lariat_controllers::events::EventType;
use lariat_controllers::object::{
    ensure_finalizer, owner_reference, patch_status, remove_finalizer,
};

use crate::git::{self, BasicAuth, Credential, GitError, Reference, Source, SshKey};
use crate::scan::{self, RepoOptions};
use crate::{Context, conditions};

/// Kept on a GitRepo until its local clone is removed.
pub const FINALIZER: &str = "fleet.cattle.io/gitrepo-finalizer";
/// On every Bundle: the GitRepo it came from, and the commit.
pub const REPO_NAME_LABEL: &str = "fleet.cattle.io/repo-name";
pub const COMMIT_LABEL: &str = "fleet.cattle.io/commit";
/// Fleet's default polling interval.
const DEFAULT_POLLING_INTERVAL: Duration = Duration::from_secs(15);
/// The shortest polling interval a GitRepo gets.
const MIN_POLLING_INTERVAL: Duration = Duration::from_secs(5);
/// Fleet's default branch.
const DEFAULT_BRANCH: &str = "master";
/// The field manager Bundles are written as.
const MANAGER: &str = "lariat-fleet";

/// How often the repository is fetched.
fn polling_interval(repo: &GitRepo) -> Result<Duration, String> {
    match repo.spec.polling_interval.as_deref() {
        None | Some("") => Ok(DEFAULT_POLLING_INTERVAL),
        Some(text) => {
            let parsed: kube::core::Duration = text.parse().map_err(|_| {
                format!("spec.pollingInterval {text:?} is not a duration such as 15s or 1m")
            })?;
            if parsed.is_negative() {
                return Err(format!("spec.pollingInterval {text:?} is negative"));
            }
            let interval = Duration::from(parsed);
            // Zero means the default, as in Fleet; anything else has a floor, so no GitRepo
            // makes the server hit a host more than every few seconds.
            Ok(if interval.is_zero() {
                DEFAULT_POLLING_INTERVAL
            } else {
                interval.max(MIN_POLLING_INTERVAL)
            })
        }
    }
}

/// The credential `spec.clientSecretName` names: `username` and `password` for https (a
/// token is a password), as a `kubernetes.io/basic-auth` Secret holds them, or
/// `ssh-privatekey` and `known_hosts` for ssh, as Fleet's `kubernetes.io/ssh-auth` ones do.
async fn credential(
    ctx: &Context,
    repo: &GitRepo,
) -> Result<Option<Credential>, (&'static str, String)> {
    let Some(name) = repo.spec.client_secret_name.as_deref() else {
        return Ok(None);
    };
    let namespace = repo.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    let secret = match secrets.get_opt(name).await {
        Ok(Some(secret)) => secret,
        Ok(None) => {
            return Err((
                "CredentialNotFound",
                format!("spec.clientSecretName: Secret {namespace}/{name} does not exist"),
            ));
        }
        Err(e) => {
            return Err((
                "CredentialNotFound",
                format!("cannot read Secret {namespace}/{name}: {e}"),
            ));
        }
    };
    let mut data = secret.data.unwrap_or_default();
    let mut take = |key: &str| data.remove(key).map(|v| v.0);
    let text = |bytes: Vec<u8>| String::from_utf8_lossy(&bytes).into_owned();
    match (
        take("username"),
        take("password"),
        take("ssh-privatekey"),
        take("known_hosts"),
    ) {
        (_, _, Some(private_key), Some(known_hosts)) => Ok(Some(Credential::Ssh(SshKey {
            private_key,
            known_hosts,
        }))),
        (_, _, Some(_), None) => Err((
            "InvalidCredential",
            format!(
                "Secret {namespace}/{name} has an ssh-privatekey but no known_hosts: add the server's host keys (ssh-keyscan [-p PORT] HOST) under known_hosts, so lariat knows it talks to the right server"
            ),
        )),
        (Some(username), Some(password), None, _) => Ok(Some(Credential::Basic(BasicAuth {
            username: text(username),
            password: text(password),
        }))),
        _ => Err((
            "InvalidCredential",
            format!(
                "Secret {namespace}/{name} has neither username and password (https) nor ssh-privatekey and known_hosts (ssh)"
            ),
        )),
    }
}

/// The Bundle each of `scanned` makes, refused when two paths make the same one or another
/// GitRepo already makes it.
fn bundle_names(
    ctx: &Context,
    repo: &GitRepo,
    namespace: &str,
    scanned: &[scan::ScannedBundle],
) -> Result<Vec<String>, (&'static str, String)> {
    let mut wanted: Vec<String> = Vec::new();
    let mut roots: Vec<&str> = Vec::new();
    let taken = ctx.caches.typed::<Bundle>();
    for bundle in scanned {
        let name = scan::bundle_name(&repo.name_any(), &bundle.root);
        if let Some(index) = wanted.iter().position(|w| *w == name) {
            return Err((
                "BundleNameTaken",
                format!(
                    "paths {:?} and {:?} both make Bundle {name}: rename one",
                    roots[index], bundle.root
                ),
            ));
        }
        if let Some(other) = taken.get_now(namespace, &name).and_then(|b| {
            b.owner_references()
                .iter()
                .find(|o| o.controller == Some(true) && o.uid != repo.uid().unwrap_or_default())
                .map(|o| o.name.clone())
        }) {
            return Err((
                "BundleNameTaken",
                format!(
                    "path {:?} makes Bundle {name}, which GitRepo {other} already makes: rename the path or the GitRepo",
                    bundle.root
                ),
            ));
        }
        wanted.push(name);
        roots.push(&bundle.root);
    }
    Ok(wanted)
}

/// The bundles with the charts they fetch from Helm repositories in them, and why each
/// that could not be fetched was not (off the async threads: fetching blocks).
async fn fetch_charts(
    ctx: &Context,
    repo: &GitRepo,
    mut scanned: Vec<scan::ScannedBundle>,
) -> Result<(Vec<scan::ScannedBundle>, Vec<Option<String>>), (&'static str, String)> {
    if !scanned.iter().any(|b| {
        b.spec.helm.as_ref().is_some_and(scan::is_remote) || !b.chart_dependencies.is_empty()
    }) {
        let none = vec![None; scanned.len()];
        return Ok((scanned, none));
    }
    let access = chart_access(ctx, repo).await?;
    let limits = ctx.settings.limits.clone();
    tokio::task::spawn_blocking(move || {
        let errors = crate::charts::fetch_all(&mut scanned, &access, &limits);
        (scanned, errors)
    })
    .await
    .map_err(|e| ("FetchFailed", e.to_string()))
}

/// What charts from Helm repositories are fetched with: `spec.helmSecretName`'s credential
/// (`username`, `password`; `cacerts` added to `caBundle`), for the repositories whose URL
/// `spec.helmRepoURLRegex` matches (none without it, as in Fleet).
async fn chart_access(
    ctx: &Context,
    repo: &GitRepo,
) -> Result<crate::charts::RepoAccess, (&'static str, String)> {
    let mut ca = repo.spec.ca_bundle.as_ref().map(|b| b.0.clone());
    let pattern = repo.spec.helm_repo_url_regex.as_deref();
    let access = |auth, ca| {
        crate::charts::RepoAccess::new(auth, pattern, ca)
            .map_err(|e| ("InvalidCredential", format!("spec.helmRepoURLRegex: {e}")))
    };
    let Some(name) = repo.spec.helm_secret_name.as_deref() else {
        return access(None, ca);
    };
    let namespace = repo.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    let secret = secrets.get_opt(name).await.map_err(|e| {
        (
            "CredentialNotFound",
            format!("cannot read Secret {namespace}/{name}: {e}"),
        )
    })?;
    let Some(secret) = secret else {
        return Err((
            "CredentialNotFound",
            format!("spec.helmSecretName: Secret {namespace}/{name} does not exist"),
        ));
    };
    let mut data = secret.data.unwrap_or_default();
    let mut take = |key: &str| {
        data.remove(key)
            .map(|v| String::from_utf8_lossy(&v.0).into_owned())
    };
    let auth = match (take("username"), take("password")) {
        (Some(username), Some(password)) => Some(BasicAuth { username, password }),
        (None, None) => None,
        _ => {
            return Err((
                "InvalidCredential",
                format!(
                    "Secret {namespace}/{name} (helmSecretName) needs both username and password"
                ),
            ));
        }
    };
    if let Some(cacerts) = take("cacerts") {
        let mut bundle = ca.unwrap_or_default();
        bundle.push(b'\n');
        bundle.extend(cacerts.into_bytes());
        ca = Some(bundle);
    }
    access(auth, ca)
}

/// Whether a repository URL may be fetched: any remote one, and a `file://` one only inside
/// a directory the server allows (after resolving `..` and symlinks).
fn file_allowed(ctx: &Context, url: &str) -> bool {
    let Some(path) = url.strip_prefix("file://") else {
        // Anything else git would read from this disk (a bare or relative path) is refused.
        return !gix::url::parse(gix::bstr::BStr::new(url))
            .is_ok_and(|parsed| parsed.scheme == gix::url::Scheme::File);
    };
    let raw = std::path::Path::new(path);
    if raw
        .components()
        .any(|c| matches!(c, std::path::Component::ParentDir))
    {
        return false;
    }
    let roots = || {
        ctx.settings
            .file_roots
            .iter()
            .filter_map(|root| std::fs::canonicalize(root).ok())
    };
    match std::fs::canonicalize(raw) {
        Ok(path) => roots().any(|root| path.starts_with(root)),
        // Nothing there: the fetch says it is unreachable, without reading anything.
        Err(_) => roots().any(|root| raw.starts_with(root)),
    }
}

/// The reason word of a fetch failure, for the condition.
fn reason(error: &GitError) -> &'static str {
    match error {
        GitError::UnsupportedUrl(_) => "UnsupportedURL",
        GitError::InvalidName(_) | GitError::InvalidCaBundle(_) => "InvalidSpec",
        GitError::SshKeyMissing { .. } => "CredentialNotFound",
        GitError::HostKeyRefused { .. } => "HostKeyRefused",
        GitError::NoSuchRevision { .. } => "RevisionNotFound",
        GitError::Unreachable { .. } => "Unreachable",
        GitError::Unauthorized { .. } => "Unauthorized",
        GitError::NoSuchBranch { .. } => "BranchNotFound",
        GitError::NoSuchPath { .. } => "PathNotFound",
        GitError::Local { .. } => "LocalCloneFailed",
        GitError::NetworkNotAllowed { .. } => "NetworkNotAllowed",
        GitError::TooLarge(error) => error.reason(),
    }
}

pub async fn reconcile(repo: Arc<GitRepo>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = repo.namespace().unwrap_or_default();
    let uid = repo.uid().unwrap_or_default();
    let api: Api<GitRepo> = Api::namespaced(ctx.client.clone(), &namespace);
    let clone = ctx.settings.dir.join("git").join(&uid);
    if repo.metadata.deletion_timestamp.is_some() {
        forget(&ctx, &api, &repo, clone).await?;
        return Ok(Action::await_change());
    }
    if ensure_finalizer(&api, &repo, FINALIZER).await? {
        return Ok(Action::await_change());
    }
    let before = repo.status.clone().unwrap_or_default();
    let mut status = before.clone();
    let mut list = status.conditions.take().unwrap_or_default();
    let generation = repo.metadata.generation.unwrap_or(0);
    // Its name labels its Bundles (`fleet.cattle.io/repo-name`): a label value's 63 at most.
    let checked = if repo.name_any().len() > 63 {
        Err(format!(
            "the name {:?} is {} characters; a GitRepo's name labels its Bundles, so 63 at most",
            repo.name_any(),
            repo.name_any().len()
        ))
    } else {
        polling_interval(&repo)
    };
    let interval = match checked {
        Ok(interval) => interval,
        Err(message) => {
            conditions::set(&mut list, "Accepted", false, "InvalidSpec", &message);
            conditions::set(&mut list, "Ready", false, "InvalidSpec", &message);
            status.conditions = Some(list);
            status.observed_generation = Some(generation);
            write(&repo, &api, &before, status).await?;
            return Ok(Action::await_change());
        }
    };
    // Due when the spec changed, when the interval passed, or on the first look since start.
    let last = ctx.fetched.lock().expect("lock").get(&uid).copied();
    let spec_changed = before.observed_generation != Some(generation);
    // A webhook announced a push this process has not fetched for (`webhook.rs` in the API).
    let announced = before.webhook_commit.clone();
    let webhook =
        announced.is_some() && ctx.webhooks.lock().expect("lock").get(&uid) != announced.as_ref();
    let due = spec_changed
        || webhook
        || match last {
            None => true,
            Some(_) if repo.spec.disable_polling => false,
            Some(at) => at.elapsed() >= interval,
        };
    if !due {
        // Woken by a Bundle's change: its status rolls up now, not at the next fetch.
        roll_up(&ctx, &repo, &mut status, &mut list).await?;
        status.conditions = Some(list);
        write(&repo, &api, &before, status).await?;
        let left = last.map(|at| interval.saturating_sub(at.elapsed()));
        return Ok(match left {
            Some(left) if !repo.spec.disable_polling => Action::requeue(left),
            _ => Action::await_change(),
        });
    }
    ctx.fetched
        .lock()
        .expect("lock")
        .insert(uid.clone(), Instant::now());
    if let Some(announced) = announced {
        ctx.webhooks
            .lock()
            .expect("lock")
            .insert(uid.clone(), announced);
    }
    status.last_polling_triggered = Some(lariat_controllers::object::now());
    let fetched = fetch(&ctx, &repo, &clone).await;
    // What stays when a commit cannot be deployed.
    let kept = match &status.commit {
        Some(commit) => format!("commit {} stays deployed", &commit[..commit.len().min(12)]),
        None => "nothing is deployed yet".to_string(),
    };
    let refused = match fetched {
        Err((reason, message)) => Some((reason, format!("{message}; {kept}"))),
        Ok(commit) => {
            status.polling_commit = Some(commit.clone());
            if repo.spec.paused {
                None
            } else {
                match deploy_unless_settled(&ctx, &repo, &clone, &commit).await? {
                    Ok(()) => {
                        status.commit = Some(commit);
                        None
                    }
                    Err((reason, message)) => Some((
                        reason,
                        format!(
                            "commit {}: {message}; {kept}",
                            &commit[..commit.len().min(12)]
                        ),
                    )),
                }
            }
        }
    };
    let waiting = status
        .polling_commit
        .as_ref()
        .filter(|fetched| repo.spec.paused && status.commit.as_ref() != Some(*fetched));
    match refused {
        // Paused: said on the GitRepo, so a commit that does not go out is not a mystery.
        None if waiting.is_some() => {
            let fetched = waiting.map(String::as_str).unwrap_or_default();
            let message = format!(
                "spec.paused: commit {} is fetched and waits; {kept}",
                &fetched[..fetched.len().min(12)]
            );
            conditions::set(&mut list, "Accepted", true, "Paused", &message);
        }
        None => {
            conditions::set(&mut list, "Accepted", true, "", "");
        }
        Some((reason, message)) => {
            if conditions::set(&mut list, "Accepted", false, reason, &message) {
                // Debug-formatted: a URL or name with a newline cannot forge log lines.
                tracing::warn!(gitrepo = %format!("{namespace}/{}", repo.name_any()), reason, message = ?message, "GitRepo not accepted");
                ctx.events
                    .publish(
                        repo.as_ref(),
                        "GitRepo",
                        EventType::Warning,
                        reason,
                        &message,
                    )
                    .await;
            }
        }
    }
    roll_up(&ctx, &repo, &mut status, &mut list).await?;
    status.conditions = Some(list);
    status.observed_generation = Some(generation);
    write(&repo, &api, &before, status).await?;
    Ok(if repo.spec.disable_polling {
        Action::await_change()
    } else {
        Action::requeue(interval)
    })
}

/// Forgets a deleted GitRepo: its fetch times, its clone on disk, and its finalizer. Its
/// Bundles are owned by it: the garbage collector deletes them.
async fn forget(
    ctx: &Context,
    api: &Api<GitRepo>,
    repo: &GitRepo,
    clone: std::path::PathBuf,
) -> Result<(), Error> {
    let uid = repo.uid().unwrap_or_default();
    ctx.fetched.lock().expect("lock").remove(&uid);
    ctx.webhooks.lock().expect("lock").remove(&uid);
    ctx.settled.lock().expect("lock").remove(&uid);
    let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(clone)).await;
    remove_finalizer(api, repo, FINALIZER).await?;
    Ok(())
}

/// Fetches the repository's branch or revision into `clone`, with the GitRepo's credential;
/// the commit, or the reason and message it could not be fetched.
async fn fetch(
    ctx: &Context,
    repo: &GitRepo,
    clone: &std::path::Path,
) -> Result<String, (&'static str, String)> {
    match credential(ctx, repo).await {
        _ if !file_allowed(ctx, &repo.spec.repo) => Err((
            "FileRepositoryNotAllowed",
            format!(
                "{} is on the server's own disk: only a file:// URL inside a directory the server allows (lariat server --fleet-file-repos DIR) is read",
                repo.spec.repo
            ),
        )),
        Err(refused) => Err(refused),
        Ok(auth) => {
            let source = Source {
                url: repo.spec.repo.clone(),
                reference: match (&repo.spec.revision, &repo.spec.branch) {
                    (Some(revision), _) if !revision.is_empty() => {
                        Reference::Revision(revision.clone())
                    }
                    (_, Some(branch)) if !branch.is_empty() => Reference::Branch(branch.clone()),
                    _ => Reference::Branch(DEFAULT_BRANCH.into()),
                },
                auth,
                ca_bundle: repo.spec.ca_bundle.clone().map(|b| b.0),
            };
            let (dir, limits) = (clone.to_path_buf(), ctx.settings.limits.clone());
            match tokio::task::spawn_blocking(move || git::fetch(&dir, &source, &limits)).await {
                Ok(Ok(fetched)) => Ok(fetched.commit),
                Ok(Err(error)) => Err((reason(&error), error.to_string())),
                Err(panicked) => Err(("FetchFailed", panicked.to_string())),
            }
        }
    }
}

/// Writes the status if it changed beyond the time of the last fetch (which alone would be a
/// write every interval for nothing).
async fn write(
    repo: &GitRepo,
    api: &Api<GitRepo>,
    before: &GitRepoStatus,
    status: GitRepoStatus,
) -> Result<(), Error> {
    let mut compared = status.clone();
    compared.last_polling_triggered = before.last_polling_triggered.clone();
    if compared == *before {
        return Ok(());
    }
    // The webhook's fields are the webhook's to write: leaving them out of the merge patch
    // keeps one that arrived meanwhile.
    let (mut before, mut status) = (before.clone(), status);
    for status in [&mut before, &mut status] {
        status.webhook_commit = None;
        status.last_webhook_time = None;
    }
    let status = crate::conditions::status_patch(&before, &status)?;
    patch_status(api, &repo.name_any(), status).await?;
    Ok(())
}

/// A GitRepo's commit whose deploy found every Bundle as the commit makes it, the GitRepo's
/// generation then, and its Bundles' [`fingerprint`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Settled {
    commit: String,
    generation: i64,
    bundles: u64,
}

/// What of a GitRepo's Bundles a change by hand would alter: which exist (by uid), their
/// specs (by generation) and their labels.
fn fingerprint(bundles: &[Arc<Bundle>]) -> u64 {
    let mut seen: Vec<_> = bundles
        .iter()
        .map(|b| (b.uid(), b.metadata.generation, b.labels()))
        .collect();
    seen.sort();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    seen.hash(&mut hasher);
    hasher.finish()
}

/// Deploys `commit` unless the last deploy found it, the GitRepo's spec and its Bundles as they
/// are now. A Bundle deleted or changed by hand is put back at the next fetch (only what
/// differs is written); while nothing changed, the commit is not read and scanned again.
async fn deploy_unless_settled(
    ctx: &Context,
    repo: &GitRepo,
    clone: &std::path::Path,
    commit: &str,
) -> Result<Result<(), Refusal>, Error> {
    let uid = repo.uid().unwrap_or_default();
    let now = Settled {
        commit: commit.to_string(),
        generation: repo.metadata.generation.unwrap_or(0),
        bundles: fingerprint(&owned_bundles(ctx, repo).await?),
    };
    if ctx.settled.lock().expect("lock").get(&uid) == Some(&now) {
        return Ok(Ok(()));
    }
    let deployed = deploy(ctx, repo, clone, commit).await;
    let mut known = ctx.settled.lock().expect("lock");
    match &deployed {
        Ok(Some(bundles)) => {
            known.insert(
                uid,
                Settled {
                    bundles: *bundles,
                    ..now
                },
            );
        }
        Ok(None) => {
            known.remove(&uid);
        }
        Err(_) => {}
    }
    Ok(deployed.map(drop))
}

/// Turns the paths of `commit` into the GitRepo's Bundles: each written if it differs, and
/// those of paths no longer there deleted. When nothing differed, the [`fingerprint`] of the
/// Bundles as they were found.
async fn deploy(
    ctx: &Context,
    repo: &GitRepo,
    clone: &std::path::Path,
    commit: &str,
) -> Result<Option<u64>, (&'static str, String)> {
    let (dir, at) = (clone.to_path_buf(), commit.to_string());
    let (paths, limits) = (
        repo.spec.paths.clone().unwrap_or_default(),
        ctx.settings.limits.clone(),
    );
    let files = tokio::task::spawn_blocking(move || read_commit(&dir, &at, &paths, &limits))
        .await
        .map_err(|e| ("FetchFailed", e.to_string()))??;
    let options = RepoOptions {
        target_namespace: repo.spec.target_namespace.clone(),
        keep_resources: repo.spec.keep_resources,
        correct_drift: repo.spec.correct_drift.clone(),
    };
    let scanned = scan::bundles(
        &files,
        repo.spec.paths.as_deref().unwrap_or_default(),
        repo.spec.targets.as_deref().unwrap_or_default(),
        &options,
    )
    .map_err(|e| ("InvalidBundle", e.to_string()))?;
    let (scanned, chart_errors) = fetch_charts(ctx, repo, scanned).await?;
    let fetch_failed = chart_errors.iter().any(Option::is_some);
    let namespace = repo.namespace().unwrap_or_default();
    let bundles_api: Api<Bundle> = Api::namespaced(ctx.client.clone(), &namespace);
    let existing = owned_bundles(ctx, repo)
        .await
        .map_err(|e| ("BundleWriteFailed", e.to_string()))?;
    let owner: k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference =
        serde_json::from_value(owner_reference(repo, true))
            .map_err(|e| ("BundleWriteFailed", e.to_string()))?;
    let wanted = bundle_names(ctx, repo, &namespace, &scanned)?;
    let graph: Vec<_> = scanned
        .iter()
        .zip(&wanted)
        .map(|(bundle, name)| {
            let mut labels = bundle.labels.clone();
            labels.insert(REPO_NAME_LABEL.into(), repo.name_any());
            let depends_on = bundle.spec.depends_on.clone().unwrap_or_default();
            (name.clone(), labels, depends_on)
        })
        .collect();
    if let Some(cycle) = scan::dependency_cycle(&graph) {
        return Err((
            "DependsOnCycle",
            format!(
                "dependsOn makes a cycle, {}: none of them could ever be deployed",
                cycle.join(" -> ")
            ),
        ));
    }
    let mut wrote = false;
    for (bundle, chart_error) in scanned.into_iter().zip(chart_errors) {
        let name = scan::bundle_name(&repo.name_any(), &bundle.root);
        let mut labels = bundle.labels;
        labels.insert(REPO_NAME_LABEL.into(), repo.name_any());
        labels.insert(COMMIT_LABEL.into(), commit.to_string());
        let annotations: BTreeMap<String, String> = chart_error
            .map(|e| (crate::charts::CHART_ERROR_ANNOTATION.to_string(), e))
            .into_iter()
            .collect();
        let unchanged = existing.iter().any(|b| {
            b.name_any() == name
                && b.spec == bundle.spec
                && labels.iter().all(|(k, v)| b.labels().get(k) == Some(v))
                && b.annotations().get(crate::charts::CHART_ERROR_ANNOTATION)
                    == annotations.get(crate::charts::CHART_ERROR_ANNOTATION)
        });

        if unchanged {
            continue;
        }
        wrote = true;
        tracing::debug!(bundle = %format!("{namespace}/{name}"), commit, "bundle written");
        let object = Bundle {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                labels: Some(labels),
                annotations: (!annotations.is_empty()).then_some(annotations),
                owner_references: Some(vec![owner.clone()]),
                ..Default::default()
            },
            spec: bundle.spec,
            status: None,
        };
        let mut body =
            serde_json::to_value(&object).map_err(|e| ("BundleWriteFailed", e.to_string()))?;
        body["apiVersion"] = lariat_api::fleet::API_VERSION.into();
        body["kind"] = "Bundle".into();
        bundles_api
            .patch(
                &name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(body),
            )
            .await
            .map_err(|e| match e {
                kube::Error::Api(status) if status.code == 413 => (
                    "BundleTooLarge",
                    format!(
                        "Bundle {name} is larger than the API takes in one object ({}): split its path",
                        status.message
                    ),
                ),
                e => ("BundleWriteFailed", format!("Bundle {name}: {e}")),
            })?;
    }
    for stale in existing.iter().filter(|b| !wanted.contains(&b.name_any())) {
        wrote = true;
        match bundles_api
            .delete(&stale.name_any(), &DeleteParams::default())
            .await
        {
            Ok(_) | Err(kube::Error::Api(_)) => {}
            Err(e) => return Err(("BundleWriteFailed", e.to_string())),
        }
    }
    // A chart that could not be fetched is tried again at the next poll, not settled.
    Ok((!wrote && !fetch_failed).then(|| fingerprint(&existing)))
}

/// Why a commit is not deployed: the reason word and the message of the GitRepo's
/// `Accepted` condition.
pub type Refusal = (&'static str, String);

/// Every file of `commit` in the clone at `dir`, as [`scan::bundles`] takes them: their
/// sizes checked against `limits` first (from the objects' headers), then the content of
/// only the files the bundles of `paths` are made of (the others' left empty).
pub fn read_commit(
    dir: &std::path::Path,
    commit: &str,
    paths: &[String],
    limits: &crate::Limits,
) -> Result<Vec<(String, Vec<u8>)>, Refusal> {
    let failed = |error: GitError| (reason(&error), error.to_string());
    let listing = git::list(dir, commit, "", limits).map_err(failed)?;
    let wanted = scan::plan(&listing, paths, limits).map_err(|error| match error {
        scan::PlanError::Scan(error) => ("InvalidBundle", error.to_string()),
        scan::PlanError::Limit(error) => (error.reason(), error.to_string()),
    })?;
    let mut read: std::collections::HashMap<String, Vec<u8>> = git::read(dir, wanted, limits)
        .map_err(failed)?
        .into_iter()
        .collect();
    Ok(listing
        .into_iter()
        .map(|entry| {
            let content = read.remove(&entry.path).unwrap_or_default();
            (entry.path, content)
        })
        .collect())
}

/// The Bundles this GitRepo controls.
async fn owned_bundles(ctx: &Context, repo: &GitRepo) -> Result<Vec<Arc<Bundle>>, Error> {
    let uid = repo.uid().unwrap_or_default();
    Ok(ctx
        .caches
        .typed::<Bundle>()
        .indexed(IndexKey::Owner(&uid))
        .await?
        .into_iter()
        .filter(|b| b.metadata.deletion_timestamp.is_none())
        .collect())
}

/// The GitRepo's summary, display and `Ready` from its Bundles'.
async fn roll_up(
    ctx: &Context,
    repo: &GitRepo,
    status: &mut GitRepoStatus,
    list: &mut Vec<lariat_api::fleet::FleetCondition>,
) -> Result<(), Error> {
    let bundles = owned_bundles(ctx, repo).await?;
    let mut summary = BundleSummary::default();
    let mut not_ready: BTreeMap<String, String> = BTreeMap::new();
    for bundle in &bundles {
        let Some(part) = bundle.status.as_ref().and_then(|s| s.summary.as_ref()) else {
            continue;
        };
        summary += part;
        if part.ready < part.desired_ready {
            let message = bundle
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
                .and_then(|c| c.message.clone())
                .unwrap_or_default();
            not_ready.insert(bundle.name_any(), message);
        }
    }
    let accepted = conditions::is_true(list, "Accepted");
    let ready = accepted && not_ready.is_empty();
    let message = if !accepted {
        list.iter()
            .find(|c| c.type_ == "Accepted")
            .and_then(|c| c.message.clone())
            .unwrap_or_default()
    } else {
        not_ready
            .iter()
            .take(3)
            .map(|(bundle, message)| format!("Bundle {bundle}: {message}"))
            .collect::<Vec<_>>()
            .join("; ")
    };
    let reason = if !accepted {
        "NotAccepted"
    } else {
        "BundlesNotReady"
    };
    conditions::set(
        list,
        "Ready",
        ready,
        if ready { "" } else { reason },
        &message,
    );
    status.display = Some(GitRepoDisplay {
        ready_bundle_deployments: Some(format!("{}/{}", summary.ready, summary.desired_ready)),
        state: (!ready).then(|| if accepted { "NotReady" } else { "Error" }.to_string()),
        message: (!message.is_empty()).then_some(message),
        error: !accepted,
    });
    status.desired_ready_clusters = Some(summary.desired_ready);
    status.ready_clusters = Some(summary.ready);
    status.summary = Some(summary);
    status.failure_groups = failure_groups(&bundles);
    Ok(())
}

/// The Bundles' failure groups merged by state and cause (as `lariat fleet diagnose` merges
/// them), so the GitRepo says which clusters have not converged and why. Like the GitRepo's
/// summary, `count` counts BundleDeployments: a cluster failing in two Bundles counts twice.
fn failure_groups(bundles: &[Arc<Bundle>]) -> Option<Vec<lariat_api::fleet::FailureGroup>> {
    let mut merged: BTreeMap<(String, String), lariat_api::fleet::FailureGroup> = BTreeMap::new();
    for group in bundles
        .iter()
        .filter_map(|b| b.status.as_ref()?.failure_groups.as_ref())
        .flatten()
    {
        let entry = merged
            .entry(crate::bundle::cause(group))
            .or_insert_with(|| lariat_api::fleet::FailureGroup {
                state: group.state.clone(),
                message: group.message.clone(),
                ..Default::default()
            });
        entry.count += group.count;
        entry.clusters.extend(group.clusters.iter().cloned());
    }
    let mut groups: Vec<_> = merged
        .into_values()
        .map(|mut group| {
            group.clusters.sort();
            group.clusters.dedup();
            group
                .clusters
                .truncate(crate::bundle::FAILURE_GROUP_CLUSTERS);
            group
        })
        .collect();
    groups.sort_by(|a, b| b.count.cmp(&a.count).then(a.state.cmp(&b.state)));
    (!groups.is_empty()).then_some(groups)
}
