//! The agent's Fleet half: it pulls its cluster's BundleDeployments from the server and applies
//! them, as Fleet's agent does. With the credential the tunnel issued it, the agent watches the
//! BundleDeployments of its cluster's namespace on the management API (the only thing that
//! credential reaches there, besides their status and the Contents they name), applies each one
//! to its own cluster with server-side apply (field manager `lariat`), deletes what left the
//! manifests, and reports per object whether it is ready, changed downstream or missing.
//!
//! - `deploy.rs`: the manifests of a version as objects for this cluster, applying them, and
//!   the record in the cluster of what each BundleDeployment applied (so what leaves git, or a
//!   whole BundleDeployment that goes, is deleted even after a restart);
//! - `monitor.rs`: readiness in each object's own terms, and drift (the fields that differ);
//! - here: the controller, woken by its BundleDeployments' changes and by the changes of the
//!   objects they applied (watched by label, one watch per kind), and the clean-up of
//!   BundleDeployments that were deleted.

mod atomic;
mod deploy;
mod helm;
mod hooks;
mod monitor;
mod release;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, predicates, watcher};
use kube::{Resource, ResourceExt};
use lariat_api::fleet::{BundleDeployment, BundleDeploymentStatus, Content, FleetCondition};
use serde_json::Value;
use tokio::sync::{broadcast, mpsc, watch};

pub use deploy::{BUNDLE_DEPLOYMENT_LABEL, FIELD_MANAGER};

/// What the agent needs to reach the management API as itself: handed over by the tunnel once
/// it holds a credential the server accepted.
#[derive(Clone, PartialEq, Eq)]
pub struct Session {
    /// `https://host:port` of the lariat server.
    pub server: String,
    /// The server's CA, verified against the checksum (DER).
    pub ca: Vec<Vec<u8>>,
    /// The cluster credential the server issued.
    pub credential: String,
    /// `namespace/name` of this agent's Cluster.
    pub cluster: String,
    /// The HTTP proxy the server is reached through, if any.
    pub proxy: Option<http::Uri>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("server", &self.server)
            .field("cluster", &self.cluster)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Invalid(String),
    /// The status was not written: the BundleDeployment changed since it was read. The newer
    /// one is on its way through the watch, which may not reconcile it again (a status-only
    /// change), so the reconcile is tried again shortly.
    #[error("the BundleDeployment changed while its status was written")]
    Stale,
}

/// What outlives one session with the server: the cluster's side (what was applied, the
/// watches of applied objects, discovery) and the Contents already read.
struct Agent {
    downstream: kube::Client,
    /// What each BundleDeployment applied, as recorded in the cluster (loaded once, then
    /// written through).
    records: tokio::sync::Mutex<HashMap<String, Option<deploy::Record>>>,
    /// The kinds seen, by `apiVersion/kind`.
    kinds: Mutex<HashMap<String, deploy::Kind>>,
    /// One watch per kind applied, of the objects carrying [`BUNDLE_DEPLOYMENT_LABEL`].
    watches: Mutex<HashMap<String, AppliedWatch>>,
    /// Names of BundleDeployments whose objects changed.
    changed: broadcast::Sender<String>,
    /// Contents by name (they never change), those of current BundleDeployments only.
    contents: Mutex<HashMap<String, Arc<Vec<Value>>>>,
    /// Helm bundles' rendered objects by deployment ID, current BundleDeployments' only: a
    /// chart is rendered once per version, as Helm renders at install and upgrade.
    rendered: Mutex<HashMap<String, Arc<helm::Rendered>>>,
    /// This cluster's `.Capabilities` for renders.
    capabilities: helm::CapabilitiesCache,
    /// Namespaces seen to exist (forgotten when an apply fails: one may have been deleted).
    namespaces: Mutex<std::collections::HashSet<String>>,
    /// The version of each BundleDeployment applied by this process (its status says the
    /// same once written; this is what the agent knows before it reads its own write back).
    applied_versions: Mutex<HashMap<String, String>>,
    /// The BundleDeployments whose install or upgrade `helm.atomic` undid.
    undone: Mutex<HashMap<String, Undone>>,
    /// One lock per BundleDeployment, so its clean-up and its reconcile never interleave.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// A version `helm.atomic` undid: reported, and not tried again for [`RETRY_UNDONE`] unless
/// the BundleDeployment names another.
#[derive(Clone)]
struct Undone {
    version: String,
    message: String,
    at: std::time::Instant,
}

struct AppliedWatch {
    applied: Applied,
    task: tokio::task::JoinHandle<()>,
}

/// The applied objects of one kind, as its watch sees them.
#[derive(Clone)]
struct Applied {
    store: Store<DynamicObject>,
    /// The resource the store is keyed with.
    resource: ApiResource,
}

impl Applied {
    fn get(&self, namespace: Option<&str>, name: &str) -> Option<DynamicObject> {
        let mut reference = ObjectRef::new_with(name, self.resource.clone());
        if let Some(namespace) = namespace {
            reference = reference.within(namespace);
        }
        self.store.get(&reference).map(|o| o.as_ref().clone())
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        for watch in self.watches.lock().expect("lock").values() {
            watch.task.abort();
        }
    }
}

impl Agent {
    /// The applied objects of a kind, starting its watch on first use.
    async fn applied(&self, kind: &deploy::Kind) -> Applied {
        let applied = {
            let mut watches = self.watches.lock().expect("lock");
            match watches.get(&kind.key()) {
                Some(watch) => watch.applied.clone(),
                None => {
                    let writer = reflector::store::Writer::new(kind.resource.clone());
                    let applied = Applied {
                        store: writer.as_reader(),
                        resource: kind.resource.clone(),
                    };
                    let api: Api<DynamicObject> =
                        Api::all_with(self.downstream.clone(), &kind.resource);
                    let changed = self.changed.clone();
                    let mut listed = std::collections::BTreeSet::new();
                    let config = crate::watch_config().labels(BUNDLE_DEPLOYMENT_LABEL);
                    let task = tokio::spawn(
                        watcher(api, config)
                            .default_backoff()
                            .reflect(writer)
                            .for_each(move |event| {
                                let owner = |object: &DynamicObject| {
                                    object.labels().get(BUNDLE_DEPLOYMENT_LABEL).cloned()
                                };
                                match event {
                                    Ok(
                                        watcher::Event::Apply(object)
                                        | watcher::Event::Delete(object),
                                    ) => {
                                        if let Some(owner) = owner(&object) {
                                            let _ = changed.send(owner);
                                        }
                                    }
                                    // A listing's objects wake their owners too, once the
                                    // store holds the listing: a change made while the
                                    // watch started (a Deployment's controller writing its
                                    // status right after the apply) arrives in it.
                                    Ok(watcher::Event::InitApply(object)) => {
                                        listed.extend(owner(&object));
                                    }
                                    Ok(watcher::Event::InitDone) => {
                                        for owner in std::mem::take(&mut listed) {
                                            let _ = changed.send(owner);
                                        }
                                    }
                                    _ => {}
                                }
                                std::future::ready(())
                            }),
                    );
                    watches.insert(
                        kind.key(),
                        AppliedWatch {
                            applied: applied.clone(),
                            task,
                        },
                    );
                    applied
                }
            }
        };
        // The first list, so a missing object is missing rather than not yet seen.
        let _ =
            tokio::time::timeout(Duration::from_secs(10), applied.store.wait_until_ready()).await;
        applied
    }

    /// Held while BundleDeployment `name`'s objects are applied or removed.
    async fn lock(&self, name: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = self
            .locks
            .lock()
            .expect("lock")
            .entry(name.to_string())
            .or_default()
            .clone();
        lock.lock_owned().await
    }

    /// Every kind's applied objects watched so far.
    fn all_applied(&self) -> Vec<Applied> {
        self.watches
            .lock()
            .expect("lock")
            .values()
            .map(|w| w.applied.clone())
            .collect()
    }
}

/// How many object changes the reconciler may fall behind before it looks at every
/// BundleDeployment again. tokio's broadcast allocates the whole buffer up front, and every
/// agent has one: at 4,096 it was 256 KiB an agent, a thousand simulated clusters' agents a
/// quarter of a GiB.
const CHANGED_BUFFER: usize = 256;

/// Runs the agent's Fleet half until the task is dropped: each session (credential) the tunnel
/// hands over replaces the previous one; the cluster's side carries over.
pub(crate) async fn run(downstream: kube::Client, sessions: watch::Receiver<Option<Session>>) {
    let agent = Arc::new(Agent {
        downstream,
        records: Default::default(),
        kinds: Default::default(),
        watches: Default::default(),
        changed: broadcast::channel(CHANGED_BUFFER).0,
        contents: Default::default(),
        rendered: Default::default(),
        capabilities: Default::default(),
        namespaces: Default::default(),
        applied_versions: Default::default(),
        undone: Default::default(),
        locks: Default::default(),
    });
    per_session(sessions, "cannot pull bundles from the server", |session| {
        serve(agent.clone(), session)
    })
    .await
}

/// Serves each session (credential) the tunnel hands over with `serve`, until `sessions`
/// closes: a new session replaces the one being served, and one whose serving failed is
/// served again 10 s later.
pub(crate) async fn per_session<Fut>(
    mut sessions: watch::Receiver<Option<Session>>,
    failure: &str,
    mut serve: impl FnMut(Session) -> Fut,
) where
    Fut: std::future::Future<Output = Result<(), Error>>,
{
    loop {
        let session = sessions.borrow_and_update().clone();
        let Some(session) = session else {
            if sessions.changed().await.is_err() {
                return;
            }
            continue;
        };
        tokio::select! {
            outcome = serve(session) => {
                if let Err(error) = outcome {
                    tracing::warn!(%error, "{failure}; retrying in 10s");
                }
                tokio::time::sleep(Duration::from_secs(10)).await;
            }
            changed = sessions.changed() => if changed.is_err() { return },
        }
    }
}

/// The management API as this agent.
pub(crate) fn upstream_client(session: &Session, namespace: &str) -> Result<kube::Client, Error> {
    let url: http::Uri = session
        .server
        .parse()
        .map_err(|_| Error::Invalid(format!("invalid server URL {:?}", session.server)))?;
    let mut config = kube::Config::new(url);
    config.root_cert = Some(session.ca.clone());
    config.auth_info.token = Some(session.credential.clone().into());
    config.proxy_url = session.proxy.clone();
    config.default_namespace = namespace.to_string();
    Ok(kube::Client::try_from(config)?)
}

struct Context {
    agent: Arc<Agent>,
    /// The namespace of this cluster's BundleDeployments.
    namespace: String,
    api: Api<BundleDeployment>,
    contents: Api<Content>,
    deployments: Store<BundleDeployment>,
}

async fn serve(agent: Arc<Agent>, session: Session) -> Result<(), Error> {
    let session = &session;
    let (cluster_namespace, cluster_name) = session
        .cluster
        .split_once('/')
        .ok_or_else(|| Error::Invalid(format!("malformed cluster {:?}", session.cluster)))?;
    let namespace = lariat_api::fleet::cluster_namespace(cluster_namespace, cluster_name);
    let client = upstream_client(session, &namespace)?;
    let api: Api<BundleDeployment> = Api::namespaced(client.clone(), &namespace);
    let (reader, writer) = reflector::store();
    let (cleanups, cleanup_requests) = mpsc::unbounded_channel::<Cleanup>();
    let (dependents, wake) = (reader.clone(), agent.changed.clone());
    let deployments = watcher(api.clone(), crate::watch_config())
        .default_backoff()
        .reflect(writer)
        .inspect(move |event| {
            let request = match event {
                Ok(watcher::Event::Delete(bd)) => Cleanup::Deleted(bd.name_any()),
                Ok(watcher::Event::InitDone) => {
                    // Listed afresh: what changed while the watch was down is unknown.
                    wake_waiting(&dependents, None, &wake);
                    Cleanup::Sweep
                }
                // Any change here, its status included, may be what a dependent waits for.
                Ok(watcher::Event::Apply(changed)) => {
                    wake_waiting(&dependents, Some(changed), &wake);
                    return;
                }
                _ => return,
            };
            let _ = cleanups.send(request);
        })
        .applied_objects()
        .predicate_filter(predicates::generation, Default::default());
    let ctx = Arc::new(Context {
        agent: agent.clone(),
        namespace: namespace.clone(),
        api,
        contents: Api::all(client),
        deployments: reader.clone(),
    });
    let objects_changed = {
        let namespace = namespace.clone();
        let store = reader.clone();
        tokio_stream_of(agent.changed.subscribe()).flat_map(move |change| {
            let refs: Vec<ObjectRef<BundleDeployment>> = match change {
                Some(name) => vec![ObjectRef::new(&name).within(&namespace)],
                // Changes were missed: look at every BundleDeployment again.
                None => store
                    .state()
                    .iter()
                    .map(|bd| ObjectRef::from_obj(bd.as_ref()))
                    .collect(),
            };
            futures::stream::iter(refs)
        })
    };
    let cleaner = tokio::spawn(clean_up(ctx.clone(), cleanup_requests));
    tracing::info!(%namespace, "pulling bundles");
    Controller::for_stream(deployments, reader)
        // A few at a time: each holds a connection to the server (HTTP/1.1), and a cluster's
        // hundred bundles arriving at once should not open a hundred.
        .with_config(kube::runtime::controller::Config::default().concurrency(UPSTREAM_CONCURRENCY))
        .reconcile_on(objects_changed)
        .run(reconcile, error_policy, ctx)
        .for_each(|_| std::future::ready(()))
        .await;
    cleaner.abort();
    Ok(())
}

/// Wakes the BundleDeployments held back for their `dependsOn` (other than `changed`).
fn wake_waiting(
    deployments: &Store<BundleDeployment>,
    changed: Option<&BundleDeployment>,
    wake: &broadcast::Sender<String>,
) {
    for bd in deployments.state() {
        if changed.is_some_and(|c| c.name_any() == bd.name_any()) {
            continue;
        }
        let waiting = bd
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| {
                c.iter().any(|c| {
                    c.type_ == "Deployed" && c.reason.as_deref() == Some(DEPENDENCY_NOT_READY)
                })
            });
        if waiting {
            let _ = wake.send(bd.name_any());
        }
    }
}

/// A broadcast receiver as a stream; `None` when it lagged behind and lost changes.
fn tokio_stream_of(
    receiver: broadcast::Receiver<String>,
) -> impl futures::Stream<Item = Option<String>> + Send {
    futures::stream::unfold(receiver, |mut receiver| async move {
        match receiver.recv().await {
            Ok(name) => Some((Some(name), receiver)),
            Err(broadcast::error::RecvError::Lagged(_)) => Some((None, receiver)),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    })
}

enum Cleanup {
    /// This BundleDeployment was deleted.
    Deleted(String),
    /// The BundleDeployments were listed afresh: any recorded one not among them was deleted.
    Sweep,
}

/// Deletes what BundleDeployments that are gone applied (unless they kept their resources),
/// as Fleet's agent removes releases whose BundleDeployment is gone.
async fn clean_up(ctx: Arc<Context>, mut requests: mpsc::UnboundedReceiver<Cleanup>) {
    while let Some(request) = requests.recv().await {
        let names = match request {
            Cleanup::Deleted(name) => vec![name],
            Cleanup::Sweep => match deploy::recorded(&ctx.agent, &ctx.namespace).await {
                Ok(names) => names,
                Err(error) => {
                    tracing::warn!(%error, "cannot list what bundles applied");
                    continue;
                }
            },
        };
        for name in names {
            let _held = ctx.agent.lock(&name).await;
            // Looked at again under the lock: it may have come back meanwhile.
            let live = ctx
                .deployments
                .get(&ObjectRef::new(&name).within(&ctx.namespace));
            if live.is_some() {
                continue;
            }
            ctx.agent
                .applied_versions
                .lock()
                .expect("lock")
                .remove(&name);
            ctx.agent.undone.lock().expect("lock").remove(&name);
            if let Err(error) = deploy::uninstall(&ctx.agent, &name).await {
                tracing::warn!(bundle = %name, %error, "cannot delete what a removed bundle applied");
            }
        }
    }
}

/// BundleDeployments an agent works on at once.
const UPSTREAM_CONCURRENCY: u16 = 4;

/// How long after `helm.atomic` undid a version the agent tries it again (each try waits for
/// readiness and leaves two revisions): about where Fleet's agent's backoff settles.
const RETRY_UNDONE: Duration = Duration::from_secs(600);
/// How long after an apply that failed the agent tries again: the API's refusal will not
/// change by itself, so this paces retries rather than racing them.
const RETRY_FAILED_APPLY: Duration = Duration::from_secs(30);
/// How soon a BundleDeployment whose workloads are not ready is looked at again: their Pods'
/// reasons change without their workload's status changing (ErrImagePull becomes
/// ImagePullBackOff, a crash becomes CrashLoopBackOff), and no watch of Pods wakes it.
const PODS_LOOKED_AT_AGAIN: Duration = Duration::from_secs(15);
/// How soon, once the Pods said the same as the last time.
const PODS_UNCHANGED_LOOKED_AT_AGAIN: Duration = Duration::from_secs(60);
/// How soon a reconcile whose status write found a newer BundleDeployment runs again (by
/// then the watch has brought the newer one).
const STALE_RETRY: Duration = Duration::from_millis(500);
/// A BundleDeployment is looked at again this often even if nothing changed.
const RESYNC: Duration = Duration::from_secs(600);

async fn reconcile(bd: Arc<BundleDeployment>, ctx: Arc<Context>) -> Result<Action, Error> {
    let name = bd.name_any();
    let Some(deployment_id) = bd.spec.deployment_id.clone() else {
        return Ok(Action::await_change());
    };
    if bd.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let _held = ctx.agent.lock(&name).await;
    let options = bd.spec.options.clone().unwrap_or_default();
    let record = deploy::record(&ctx.agent, &name).await?;
    let applied_here = ctx
        .agent
        .applied_versions
        .lock()
        .expect("lock")
        .get(&name)
        .cloned();
    let applied = record.is_some()
        && match applied_here {
            Some(version) => version == deployment_id,
            // Since this process started: what the agent last reported.
            None => {
                bd.status
                    .as_ref()
                    .and_then(|s| s.applied_deployment_id.as_deref())
                    == Some(deployment_id.as_str())
            }
        };
    if bd.spec.paused && !applied {
        return Ok(Action::await_change());
    }
    let mut status = bd.status.clone().unwrap_or_default();
    let now = now();
    if !applied && let Some(waiting) = unmet_dependencies(&ctx, &bd) {
        // Woken when what it waits for changes (see `serve`); looked at again now and then
        // in case that was missed.
        let message = format!("waiting for {waiting} to be Ready on this cluster");
        waits_for_dependencies(&mut status, &message, &now);
        write_status(&ctx, &bd, status).await?;
        return Ok(Action::requeue(RETRY_FAILED_APPLY));
    }
    let undone = ctx.agent.undone.lock().expect("lock").get(&name).cloned();
    if !applied && let Some(undone) = undone {
        let waited = undone.at.elapsed();
        if undone.version == deployment_id && waited < RETRY_UNDONE {
            failed(&mut status, &undone.message, &now);
            write_status(&ctx, &bd, status).await?;
            return Ok(Action::requeue(RETRY_UNDONE - waited));
        }
        ctx.agent.undone.lock().expect("lock").remove(&name);
    }
    let content_name = deployment_id
        .split(':')
        .next()
        .unwrap_or_default()
        .to_string();
    let content = content(&ctx, &content_name).await?;
    let (manifests, options, release) =
        match for_this_cluster(&ctx, &name, &deployment_id, content, options).await {
            Ok(resolved) => resolved,
            Err(message) => {
                failed(&mut status, &message, &now);
                write_status(&ctx, &bd, status).await?;
                return Ok(Action::requeue(RETRY_FAILED_APPLY));
            }
        };
    let crds = release
        .as_ref()
        .map(|r| r.crds.as_slice())
        .unwrap_or_default();
    let desired = match deploy::desired(&ctx.agent, &name, &manifests, crds, &options).await {
        Ok(desired) => desired,
        Err(message) => {
            failed(&mut status, &message, &now);
            write_status(&ctx, &bd, status).await?;
            return Ok(Action::requeue(RETRY_FAILED_APPLY));
        }
    };
    let mut fresh = deploy::Fresh::default();
    if !applied {
        let applied = apply_version(
            &ctx,
            &name,
            &deployment_id,
            &options,
            &desired,
            release.as_deref(),
        )
        .await;
        match applied {
            Ok(written) => {
                fresh = written;
                ctx.agent
                    .applied_versions
                    .lock()
                    .expect("lock")
                    .insert(name.clone(), deployment_id.clone());
            }
            Err(message) => {
                failed(&mut status, &message, &now);
                write_status(&ctx, &bd, status).await?;
                return Ok(Action::requeue(RETRY_FAILED_APPLY));
            }
        }
    }
    let mut seen = monitor::observe(&ctx.agent, &name, &desired, &fresh).await;
    let correct = bd
        .spec
        .correct_drift
        .as_ref()
        .or(options.correct_drift.as_ref())
        .filter(|c| c.enabled);
    if let Some(correct) = correct
        && seen.drifted()
    {
        let restored = deploy::correct(
            &ctx.agent,
            &name,
            &desired,
            &seen.to_restore(),
            &seen.orphaned,
            correct.force,
        )
        .await;
        if let Err(message) = &restored {
            tracing::info!(bundle = %name, %message, "cannot correct drift");
        }
        let restored = restored.unwrap_or_default();
        seen = monitor::observe(&ctx.agent, &name, &desired, &restored).await;
    }
    monitor::report(&mut status, &deployment_id, &desired, &seen, &now);
    let changed = write_status(&ctx, &bd, status).await?;
    if seen.pods_looked_at {
        // Sooner while what the Pods say changes, then less often.
        let again = if changed {
            PODS_LOOKED_AT_AGAIN
        } else {
            PODS_UNCHANGED_LOOKED_AT_AGAIN
        };
        return Ok(Action::requeue(again));
    }
    Ok(Action::requeue(RESYNC))
}

/// Applies a version. A Helm bundle's is installed or upgraded as Helm does: its CRDs
/// first, then its pre-hooks, its objects, its post-hooks, and the release's record last.
async fn apply_version(
    ctx: &Context,
    name: &str,
    deployment_id: &str,
    options: &lariat_api::fleet::BundleDeploymentOptions,
    desired: &[deploy::Desired],
    release: Option<&helm::Rendered>,
) -> Result<deploy::Fresh, String> {
    let fresh = apply_release(ctx, name, deployment_id, options, desired, release).await;
    // New kinds for `.Capabilities`: the next render reads discovery again.
    if desired.iter().any(|d| {
        matches!(
            d.key.kind.as_str(),
            "CustomResourceDefinition" | "APIService"
        )
    }) {
        ctx.agent.capabilities.forget().await;
    }
    fresh
}

/// A Helm bundle's version installed, with `helm.atomic` undone if it fails ([`atomic`]).
async fn apply_release(
    ctx: &Context,
    name: &str,
    deployment_id: &str,
    options: &lariat_api::fleet::BundleDeploymentOptions,
    desired: &[deploy::Desired],
    release: Option<&helm::Rendered>,
) -> Result<deploy::Fresh, String> {
    let Some(rendered) = release else {
        return deploy::apply(&ctx.agent, name, &ctx.namespace, options, desired).await;
    };
    let atomic = options.helm.as_ref().is_some_and(|h| h.atomic);
    // What was applied before, for an undo to know what it may go back to.
    let before = match atomic {
        true => deploy::record(&ctx.agent, name)
            .await
            .map_err(|e| format!("cannot read what was applied before: {e}"))?,
        false => None,
    };
    match install(ctx, name, options, desired, rendered, atomic).await {
        Err(error) if atomic => {
            let message = atomic::undo(
                &ctx.agent,
                name,
                &ctx.namespace,
                options,
                rendered,
                before.as_ref(),
                &error,
            )
            .await;
            ctx.agent.undone.lock().expect("lock").insert(
                name.to_string(),
                Undone {
                    version: deployment_id.to_string(),
                    message: message.clone(),
                    at: std::time::Instant::now(),
                },
            );
            Err(message)
        }
        outcome => outcome,
    }
}

/// Installs or upgrades a release: its CRDs, pre-hooks, objects (and, when `wait`, their
/// readiness), post-hooks, then its record.
async fn install(
    ctx: &Context,
    name: &str,
    options: &lariat_api::fleet::BundleDeploymentOptions,
    desired: &[deploy::Desired],
    rendered: &helm::Rendered,
    wait: bool,
) -> Result<deploy::Fresh, String> {
    let client = &ctx.agent.downstream;
    helm::install_crds(client, &rendered.crds).await?;
    if !rendered.crds.is_empty() {
        ctx.agent.capabilities.forget().await;
    }
    let (pre, post) = if rendered.release.is_upgrade {
        ("pre-upgrade", "post-upgrade")
    } else {
        ("pre-install", "post-install")
    };
    let namespace = &rendered.release.namespace;
    // As Fleet installs with `--create-namespace`: the release's namespace is there before
    // its hooks run.
    deploy::ensure_namespace(&ctx.agent, namespace).await?;
    let timeout = rendered.timeout;
    let mut ran = hooks::run(client, &rendered.hooks, pre, namespace, timeout).await?;
    let written = deploy::apply(&ctx.agent, name, &ctx.namespace, options, desired).await?;
    if wait {
        atomic::wait_ready(&ctx.agent, name, desired, &written, rendered.wait).await?;
    }
    ran.extend(hooks::run(client, &rendered.hooks, post, namespace, timeout).await?);
    // The hooks that did not run now (an uninstall's) are the release's too: the cluster's
    // release is where the uninstall finds them.
    ran.extend(
        rendered
            .hooks
            .iter()
            .filter(|h| !h.events.iter().any(|e| e == pre || e == post))
            .map(hooks::Hook::never_run),
    );
    let max_history = max_history(options.helm.as_ref().map_or(0, |h| h.max_history));
    release::record(
        client,
        &rendered.release,
        &ran,
        max_history,
        release::Outcome::Deployed,
    )
    .await?;
    let manifest = release::manifest_digest(&rendered.release.manifest);
    let deletion = hooks::deletion_digest(&rendered.hooks);
    deploy::remember_release(&ctx.agent, name, deletion, Some(manifest)).await?;
    Ok(written)
}

/// The revisions a release keeps: `helm.maxHistory`, or Fleet's two when it is 0.
fn max_history(asked: i32) -> i32 {
    if asked == 0 { 2 } else { asked }
}

/// Why a BundleDeployment waits for others (Fleet's `dependsOn`).
pub const DEPENDENCY_NOT_READY: &str = "DependencyNotReady";

/// The bundles `bd` depends on that are not Ready on this cluster yet (by name, or every
/// bundle whose labels a selector matches), as `bundle a, the bundles labelled x=y`; `None`
/// when all are. A
/// dependency not deployed to this cluster at all is not ready.
fn unmet_dependencies(ctx: &Context, bd: &BundleDeployment) -> Option<String> {
    let here = ctx.deployments.state();
    let ready = |other: &BundleDeployment| {
        other.status.as_ref().is_some_and(|s| {
            s.ready && s.non_modified && s.applied_deployment_id == other.spec.deployment_id
        })
    };
    let mut unmet = Vec::new();
    for dependency in bd.spec.depends_on.iter().flatten() {
        let matching: Vec<&Arc<BundleDeployment>> = here
            .iter()
            .filter(|other| other.name_any() != bd.name_any())
            .filter(|other| match (&dependency.name, &dependency.selector) {
                (Some(name), _) => &other.name_any() == name,
                (None, Some(selector)) => lariat_api::fleet::selects(selector, other.labels()),
                (None, None) => false,
            })
            .collect();
        let what = match (&dependency.name, &dependency.selector) {
            (Some(name), _) => format!("bundle {name}"),
            (None, Some(selector)) => format!("the bundles labelled {}", describe(selector)),
            (None, None) => continue,
        };
        if matching.is_empty() {
            unmet.push(format!("{what} (not deployed to this cluster)"));
        } else if !matching.iter().all(|other| ready(other)) {
            unmet.push(what);
        }
    }
    (!unmet.is_empty()).then(|| unmet.join(", "))
}

/// A label selector as `kubectl get -l` writes one: `tier=data,zone in (a,b)`.
fn describe(selector: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector) -> String {
    let labels = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"));
    let expressions = selector.match_expressions.iter().flatten().map(|e| {
        let values = e.values.clone().unwrap_or_default().join(",");
        match e.operator.as_str() {
            "In" => format!("{} in ({values})", e.key),
            "NotIn" => format!("{} notin ({values})", e.key),
            "Exists" => e.key.clone(),
            "DoesNotExist" => format!("!{}", e.key),
            other => format!("{} {other} ({values})", e.key),
        }
    });
    labels.chain(expressions).collect::<Vec<_>>().join(",")
}

fn error_policy(bd: Arc<BundleDeployment>, error: &Error, _ctx: Arc<Context>) -> Action {
    if let Error::Stale = error {
        return Action::requeue(STALE_RETRY);
    }
    tracing::warn!(bundle = %bd.name_any(), %error, "cannot deploy a bundle; retrying");
    Action::requeue(Duration::from_secs(10))
}

/// What a version applies here: a Content's manifests as they are, or a Helm bundle's chart
/// rendered for this cluster (its objects, in its release's namespace, and the release).
async fn for_this_cluster(
    ctx: &Context,
    name: &str,
    deployment_id: &str,
    content: Arc<Vec<Value>>,
    mut options: lariat_api::fleet::BundleDeploymentOptions,
) -> Result<
    (
        Arc<Vec<Value>>,
        lariat_api::fleet::BundleDeploymentOptions,
        Option<Arc<helm::Rendered>>,
    ),
    String,
> {
    let Some(helm) = options.helm.clone() else {
        return Ok((content, options, None));
    };
    options.default_namespace = Some(helm::release_namespace(&options));
    let release = rendered(ctx, name, deployment_id, &content, &options, &helm).await?;
    Ok((release.objects.clone(), options, Some(release)))
}

/// A Helm bundle's objects for version `deployment_id`, rendered once.
async fn rendered(
    ctx: &Context,
    name: &str,
    deployment_id: &str,
    files: &[Value],
    options: &lariat_api::fleet::BundleDeploymentOptions,
    helm: &lariat_api::fleet::HelmOptions,
) -> Result<Arc<helm::Rendered>, String> {
    if let Some(found) = ctx.agent.rendered.lock().expect("lock").get(deployment_id) {
        return Ok(found.clone());
    }
    let fresh = Arc::new(
        helm::render(
            &ctx.agent.downstream,
            &ctx.agent.capabilities,
            name,
            files,
            options,
            helm,
        )
        .await?,
    );
    let wanted = current_versions(ctx);
    let mut rendered = ctx.agent.rendered.lock().expect("lock");
    rendered.retain(|id, _| wanted.contains(id));
    rendered.insert(deployment_id.to_string(), fresh.clone());
    Ok(fresh)
}

/// The deployment IDs the BundleDeployments name now, deployed or staged.
fn current_versions(ctx: &Context) -> std::collections::HashSet<String> {
    ctx.deployments
        .state()
        .iter()
        .flat_map(|bd| {
            [
                bd.spec.deployment_id.clone(),
                bd.spec.staged_deployment_id.clone(),
            ]
        })
        .flatten()
        .collect()
}

/// The manifests of a Content (read once: a Content never changes, its name is its hash).
async fn content(ctx: &Context, name: &str) -> Result<Arc<Vec<Value>>, Error> {
    if let Some(found) = ctx.agent.contents.lock().expect("lock").get(name) {
        return Ok(found.clone());
    }
    let content = ctx.contents.get(name).await?;
    let bytes = content.spec.content.map(|b| b.0).unwrap_or_default();
    let manifests: Vec<Value> = serde_json::from_slice(&bytes)
        .map_err(|e| Error::Invalid(format!("Content {name} is not a JSON list: {e}")))?;
    let manifests = Arc::new(manifests);
    let mut contents = ctx.agent.contents.lock().expect("lock");
    // Keep only what the BundleDeployments name now.
    let wanted: std::collections::HashSet<String> = current_versions(ctx)
        .iter()
        .filter_map(|id| id.split(':').next().map(String::from))
        .collect();
    contents.retain(|name, _| wanted.contains(name));
    contents.insert(name.to_string(), manifests.clone());
    Ok(manifests)
}

/// The version waits for the bundles it depends on: `Deployed` is False, saying which.
fn waits_for_dependencies(status: &mut BundleDeploymentStatus, message: &str, now: &str) {
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    FleetCondition::set(
        conditions,
        "Deployed",
        false,
        DEPENDENCY_NOT_READY,
        message,
        now,
    );
    FleetCondition::set(
        conditions,
        "Ready",
        false,
        DEPENDENCY_NOT_READY,
        message,
        now,
    );
    let display = status.display.get_or_insert_with(Default::default);
    display.deployed = Some("False".into());
    display.state = Some("WaitApplied".into());
}

/// The version could not be applied: `Deployed` is False with the API's words.
fn failed(status: &mut BundleDeploymentStatus, message: &str, now: &str) {
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    FleetCondition::set(conditions, "Deployed", false, "ErrApplied", message, now);
    FleetCondition::set(conditions, "Ready", false, "ErrApplied", message, now);
    let display = status.display.get_or_insert_with(Default::default);
    // The DEPLOYED column says whether; the STATUS column (the Ready message) says why.
    display.deployed = Some("False".into());
    display.state = Some("ErrApplied".into());
    status.ready = false;
}

/// Writes the status if it changed, and says whether it did: a JSON merge patch that also
/// removes what is gone. The patch is made against `bd` as this agent's cache holds it, so it carries `bd`'s
/// resourceVersion as a precondition: against a newer object (the cache a step behind) the
/// difference would be wrong (a `ready` dropped as false would leave the server's `true`),
/// and the server refuses it. The newer object is on its way through the watch; its arrival
/// need not reconcile this BundleDeployment again (a change of status alone does not), so
/// the refusal is [`Error::Stale`], and the reconcile runs again shortly.
async fn write_status(
    ctx: &Context,
    bd: &BundleDeployment,
    status: BundleDeploymentStatus,
) -> Result<bool, Error> {
    let before = bd.status.clone().unwrap_or_default();
    if before == status {
        return Ok(false);
    }
    let new = serde_json::to_value(&status).map_err(|e| Error::Invalid(e.to_string()))?;
    let old = serde_json::to_value(&before).map_err(|e| Error::Invalid(e.to_string()))?;
    let new = lariat_api::merge_patch_from(&old, new);
    let patch = serde_json::json!({
        "metadata": {"resourceVersion": bd.resource_version()},
        "status": new,
    });
    match ctx
        .api
        .patch_status(
            &bd.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 409 => {
            tracing::debug!(bundle = %bd.name_any(), "status not written: a newer BundleDeployment is on its way");
            Err(Error::Stale)
        }
        Err(e) => Err(e.into()),
    }
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}
