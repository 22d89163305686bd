//! lariat's Fleet: GitRepos fetched with gix into Bundles, Bundles targeted at clusters as
//! BundleDeployments, and their status rolled up (see `ARCHITECTURE.md`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use lariat_api::capi::Cluster;
use lariat_api::fleet::{Bundle, BundleDeployment, ClusterGroup, FleetCluster, GitRepo};
use lariat_controllers::Shutdown;
use lariat_controllers::cache::Caches;
use lariat_controllers::{
    controller_on, controller_owner, debounced_controller_on, error_policy, finished,
};

pub mod bundle;
pub mod charts;
pub mod cluster;
pub mod cluster_group;
pub mod conditions;
pub mod content;
pub mod git;
pub mod git_repo;
pub mod limits;
pub mod rollout;
pub mod scan;
pub mod target;
pub mod templating;
pub mod webhook;

pub use limits::Limits;

/// How the server runs Fleet.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    /// Where clones live (`git/<GitRepo uid>`), under the server's data directory.
    pub dir: PathBuf,
    /// Directories whose repositories `file://` GitRepos may name; none by default.
    pub file_roots: Vec<PathBuf>,
    /// What one commit may hold, and the internal networks GitRepos may fetch from
    /// (`--fleet-max-file-bytes`, `--fleet-max-bundle-bytes`, `--fleet-max-files`,
    /// `--fleet-allow-networks`).
    pub limits: Limits,
}

/// Shared by every Fleet reconcile.
pub struct Context {
    pub client: Client,
    pub caches: Arc<Caches>,
    pub events: lariat_controllers::events::Recorder,
    pub settings: Settings,
    /// When each GitRepo (by uid) was last fetched by this process.
    fetched: Mutex<HashMap<String, Instant>>,
    /// The webhook commit each GitRepo (by uid) last fetched for.
    webhooks: Mutex<HashMap<String, String>>,
    /// Each GitRepo's (by uid) last deploy that changed nothing.
    settled: Mutex<HashMap<String, git_repo::Settled>>,
}

impl Context {
    pub fn new(caches: Arc<Caches>, settings: Settings) -> Context {
        let client = caches.client().clone();
        Context {
            events: lariat_controllers::events::Recorder::new(client.clone()),
            client,
            caches,
            settings,
            fetched: Mutex::default(),
            webhooks: Mutex::default(),
            settled: Mutex::default(),
        }
    }
}

/// What of a Fleet Cluster decides where bundles go (see `Cache::changes_in`): its labels,
/// its spec, and the namespace its BundleDeployments are written to; not its status counts,
/// which change with every BundleDeployment.
fn cluster_targeting(
    cluster: &FleetCluster,
    hasher: &mut std::collections::hash_map::DefaultHasher,
) {
    use std::hash::Hash;
    cluster.labels().hash(hasher);
    serde_json::to_string(&cluster.spec)
        .unwrap_or_default()
        .hash(hasher);
    cluster
        .status
        .as_ref()
        .and_then(|s| s.namespace.as_ref())
        .hash(hasher);
}

/// What of a ClusterGroup decides where bundles go: its labels and its selector.
fn group_targeting(group: &ClusterGroup, hasher: &mut std::collections::hash_map::DefaultHasher) {
    use std::hash::Hash;
    group.labels().hash(hasher);
    serde_json::to_string(&group.spec)
        .unwrap_or_default()
        .hash(hasher);
}

/// The namespace of each cluster whose agent connects or disconnects.
fn connections_flipping(caches: &Caches) -> impl futures::Stream<Item = String> + Send + 'static {
    let mut connected = HashMap::<(String, String), bool>::new();
    caches
        .of(&lariat_api::management::cluster_connection_resource())
        .changes()
        .filter_map(move |connection| {
            let key = (
                connection.metadata.namespace.clone().unwrap_or_default(),
                connection.name_any(),
            );
            let now = connection.data["status"]["connected"] == true;
            let flipped = connected
                .insert(key.clone(), now)
                .is_some_and(|was| was != now);
            std::future::ready(flipped.then_some(key.0))
        })
}

/// GitRepos reconciled (fetched and scanned) at once.
const GIT_FETCH_CONCURRENCY: u16 = 4;

/// Runs the Fleet controllers until `shutdown` resolves, on the process's shared caches.
pub async fn run(
    caches: Arc<Caches>,
    settings: Settings,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let context = Arc::new(Context::new(caches.clone(), settings));
    let shutdown = lariat_controllers::shared_shutdown(shutdown);
    tokio::join!(
        git_repo_controller(&caches, context.clone(), shutdown.clone()),
        mirror_controller(&caches, context.clone(), shutdown.clone()),
        fleet_cluster_controller(&caches, context.clone(), shutdown.clone()),
        cluster_group_controller(&caches, context.clone(), shutdown.clone()),
        bundle_controller(&caches, context.clone(), shutdown.clone()),
        sweep_contents(context, shutdown),
    );
}

/// GitRepos, fetched and scanned into Bundles.
fn git_repo_controller(
    caches: &Caches,
    context: Arc<Context>,
    shutdown: Shutdown,
) -> impl std::future::Future<Output = ()> + use<> {
    controller_on(&caches.typed::<GitRepo>())
        // A Bundle's status change rolls up into its GitRepo.
        .watches_shared_stream_with(
            caches.typed::<Bundle>().changes(),
            controller_owner::<GitRepo, Bundle>(()),
            (),
        )
        // A fetch may hold up to `Limits::object_ceiling` in memory: a few at a time bound
        // what all GitRepos together can take, however many there are.
        .with_config(
            kube::runtime::controller::Config::default().concurrency(GIT_FETCH_CONCURRENCY),
        )
        .graceful_shutdown_on(shutdown)
        .run(git_repo::reconcile, error_policy, context)
        .for_each(finished("gitrepo"))
}

/// A lariat Cluster's Fleet side is put back when someone deletes its Fleet Cluster or its
/// namespace.
fn mirror_controller(
    caches: &Caches,
    context: Arc<Context>,
    shutdown: Shutdown,
) -> impl std::future::Future<Output = ()> + use<> {
    controller_on(&caches.typed::<Cluster>())
        .watches_shared_stream_with(
            caches.typed::<FleetCluster>().changes(),
            |fleet: Arc<FleetCluster>| {
                Some(ObjectRef::new(&fleet.name_any()).within(fleet.metadata.namespace.as_deref()?))
            },
            (),
        )
        .watches_shared_stream_with(
            caches.typed::<Namespace>().changes(),
            |namespace: Arc<Namespace>| {
                let labels = namespace.labels();
                Some(
                    ObjectRef::new(labels.get(cluster::CLUSTER_NAME_LABEL)?)
                        .within(labels.get(cluster::CLUSTER_NAMESPACE_LABEL)?),
                )
            },
            (),
        )
        .graceful_shutdown_on(shutdown)
        .run(cluster::mirror, error_policy, context)
        .for_each(finished("fleetcluster-mirror"))
}

/// A Fleet Cluster counts its BundleDeployments (labelled with its name and workspace).
/// Its ten bundles turn Ready within moments of each other: one count, not ten.
fn fleet_cluster_controller(
    caches: &Caches,
    context: Arc<Context>,
    shutdown: Shutdown,
) -> impl std::future::Future<Output = ()> + use<> {
    debounced_controller_on(
        &caches.typed::<FleetCluster>(),
        std::time::Duration::from_secs(1),
    )
    .watches_shared_stream_with(
        caches.typed::<BundleDeployment>().changes(),
        |bd: Arc<BundleDeployment>| {
            let labels = bd.labels();
            Some(
                ObjectRef::new(labels.get(bundle::CLUSTER_LABEL)?)
                    .within(labels.get(bundle::BUNDLE_NAMESPACE_LABEL)?),
            )
        },
        (),
    )
    // Its agent connecting, going, or due a check-in (not its every heartbeat).
    .watches_shared_stream_with(
        caches
            .of(&lariat_api::management::cluster_connection_resource())
            .changes(),
        {
            let clusters = caches.typed::<FleetCluster>();
            move |connection: Arc<kube::api::DynamicObject>| {
                let namespace = connection.metadata.namespace.as_deref()?;
                let fleet = clusters.get_now(namespace, &connection.name_any())?;
                let status = fleet.status.clone().unwrap_or_default();
                let recorded = status.agent.as_ref().and_then(|a| a.last_seen.as_deref());
                let shown_away = status
                    .display
                    .as_ref()
                    .and_then(|d| d.state.as_deref())
                    .is_some_and(|s| s == "Offline" || s == "WaitCheckIn");
                let agent = cluster::Agent::from_connection(Some(&connection.data["status"]));
                let stale = agent.last_seen(recorded).as_deref() != recorded
                    || shown_away == agent.connected;
                stale.then(|| ObjectRef::from_obj(fleet.as_ref()))
            }
        },
        lariat_api::management::cluster_connection_resource(),
    )
    .graceful_shutdown_on(shutdown)
    .run(cluster::reconcile, error_policy, context)
    .for_each(finished("fleetcluster"))
}

/// A ClusterGroup counts the clusters of its namespace its selector chooses.
fn cluster_group_controller(
    caches: &Caches,
    context: Arc<Context>,
    shutdown: Shutdown,
) -> impl std::future::Future<Output = ()> + use<> {
    debounced_controller_on(
        &caches.typed::<ClusterGroup>(),
        std::time::Duration::from_secs(1),
    )
    .watches_shared_stream_with(
        caches.typed::<FleetCluster>().changes(),
        {
            let groups = caches.typed::<ClusterGroup>();
            move |cluster: Arc<FleetCluster>| {
                let namespace = cluster.metadata.namespace.clone();
                groups
                    .store()
                    .state()
                    .into_iter()
                    .filter(move |g| g.metadata.namespace == namespace)
                    .map(|g| ObjectRef::from_obj(g.as_ref()))
            }
        },
        (),
    )
    .graceful_shutdown_on(shutdown)
    .run(cluster_group::reconcile, error_policy, context)
    .for_each(finished("clustergroup"))
}

/// Bundles are woken by their BundleDeployments, and by every change of a cluster or a
/// ClusterGroup of their namespace (a label change may retarget them).
fn bundle_controller(
    caches: &Caches,
    context: Arc<Context>,
    shutdown: Shutdown,
) -> impl std::future::Future<Output = ()> + use<> {
    let of_namespace = {
        let bundles = caches.typed::<Bundle>();
        move |namespace: Option<&str>| -> Vec<ObjectRef<Bundle>> {
            bundles
                .store()
                .state()
                .iter()
                .filter(|b| b.metadata.namespace.as_deref() == namespace)
                .map(|b| ObjectRef::from_obj(b.as_ref()))
                .collect()
        }
    };
    let (by_group, by_connection) = (of_namespace.clone(), of_namespace);
    // A cluster's change retargets only the bundles that target it now or have a
    // BundleDeployment on it, never every bundle of its namespace.
    let by_cluster = {
        let (bundles, groups, deployments) = (
            caches.typed::<Bundle>(),
            caches.typed::<ClusterGroup>(),
            caches.typed::<BundleDeployment>(),
        );
        move |cluster: &FleetCluster| -> Vec<ObjectRef<Bundle>> {
            let namespace = cluster.metadata.namespace.as_deref();
            let name = cluster.name_any();
            let groups: Vec<Arc<ClusterGroup>> = groups
                .store()
                .state()
                .into_iter()
                .filter(|g| g.metadata.namespace.as_deref() == namespace)
                .collect();
            let groups: Vec<&ClusterGroup> = groups.iter().map(|g| g.as_ref()).collect();
            let candidate = target::Candidate::of(cluster);
            let deployed: std::collections::HashSet<String> = deployments
                .store()
                .state()
                .iter()
                .filter(|bd| {
                    let labels = bd.labels();
                    labels.get(bundle::CLUSTER_LABEL) == Some(&name)
                        && labels
                            .get(bundle::BUNDLE_NAMESPACE_LABEL)
                            .map(String::as_str)
                            == namespace
                })
                .filter_map(|bd| bd.labels().get(bundle::BUNDLE_NAME_LABEL).cloned())
                .collect();
            bundles
                .store()
                .state()
                .iter()
                .filter(|b| b.metadata.namespace.as_deref() == namespace)
                .filter(|b| {
                    deployed.contains(&b.name_any())
                        || target::target_for(&b.spec, &candidate, &groups).is_some()
                })
                .map(|b| ObjectRef::from_obj(b.as_ref()))
                .collect()
        }
    };
    // A thousand clusters' BundleDeployments change within moments: summed up once.
    debounced_controller_on(
        &caches.typed::<Bundle>(),
        std::time::Duration::from_millis(200),
    )
    .watches_shared_stream_with(
        caches.typed::<BundleDeployment>().changes(),
        |bd: Arc<BundleDeployment>| {
            let labels = bd.labels();
            Some(
                ObjectRef::new(labels.get(bundle::BUNDLE_NAME_LABEL)?)
                    .within(labels.get(bundle::BUNDLE_NAMESPACE_LABEL)?),
            )
        },
        (),
    )
    .watches_shared_stream_with(
        caches.typed::<FleetCluster>().changes_in(cluster_targeting),
        move |cluster: Arc<FleetCluster>| by_cluster(&cluster),
        (),
    )
    .watches_shared_stream_with(
        caches.typed::<ClusterGroup>().changes_in(group_targeting),
        move |group: Arc<ClusterGroup>| by_group(group.metadata.namespace.as_deref()),
        (),
    )
    // An agent going or coming back (not its every heartbeat) changes where its cluster
    // stands in every bundle of the namespace.
    .reconcile_on(
        connections_flipping(caches)
            .flat_map(move |namespace| futures::stream::iter(by_connection(Some(&namespace)))),
    )
    .graceful_shutdown_on(shutdown)
    .run(bundle::reconcile, error_policy, context)
    .for_each(finished("bundle"))
}

/// Deletes, every `content::SWEEP_INTERVAL`, the Contents no BundleDeployment names.
async fn sweep_contents(context: Arc<Context>, mut shutdown: Shutdown) {
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = tokio::time::sleep(content::SWEEP_INTERVAL) => {}
        }
        match content::sweep(&context).await {
            Ok(0) => {}
            Ok(deleted) => {
                tracing::info!(deleted, "deleted Contents no BundleDeployment names")
            }
            Err(error) => tracing::warn!(%error, "cannot sweep unused Contents"),
        }
    }
}
