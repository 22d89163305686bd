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
use lariat_controllers::cache::Caches;
use lariat_controllers::{controller_on, controller_owner, error_policy, finished};

pub mod bundle;
pub mod cluster;
pub mod conditions;
pub mod content;
pub mod git;
pub mod git_repo;
pub mod scan;
pub mod target;

/// How the server runs Fleet.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    /// Where clones live (`git/<GitRepo uid>`), under the server's data directory.
    pub dir: PathBuf,
    /// Directories whose repositories `file://` GitRepos may name; none by default.
    pub file_roots: Vec<PathBuf>,
}

/// Shared by every Fleet reconcile.
pub struct Context {
    pub client: Client,
    pub caches: Arc<Caches>,
    pub events: lariat_controllers::events::Recorder,
    pub settings: Settings,
    /// When each GitRepo (by uid) was last fetched by this process.
    fetched: Mutex<HashMap<String, Instant>>,
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
        }
    }
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

/// Runs the Fleet controllers until `shutdown` resolves, on the process's shared caches.
pub async fn run(
    caches: Arc<Caches>,
    settings: Settings,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let context = Arc::new(Context::new(caches.clone(), settings));
    let shutdown = futures::future::FutureExt::shared(Box::pin(shutdown));
    let (context_for_sweeper, shutdown_for_sweeper) = (context.clone(), shutdown.clone());
    let bundles = caches.typed::<Bundle>();
    let git_repos = controller_on(&caches.typed::<GitRepo>())
        // A Bundle's status change rolls up into its GitRepo.
        .watches_shared_stream_with(
            bundles.changes(),
            controller_owner::<GitRepo, Bundle>(()),
            (),
        )
        .graceful_shutdown_on(shutdown.clone())
        .run(git_repo::reconcile, error_policy, context.clone())
        .for_each(finished("gitrepo"));
    // A lariat Cluster's Fleet side is put back when someone deletes its Fleet Cluster or its
    // namespace.
    let mirror = controller_on(&caches.typed::<Cluster>())
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
        .graceful_shutdown_on(shutdown.clone())
        .run(cluster::mirror, error_policy, context.clone())
        .for_each(finished("fleetcluster-mirror"));
    // A Fleet Cluster counts its BundleDeployments (labelled with its name and workspace).
    let fleet_clusters = controller_on(&caches.typed::<FleetCluster>())
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
        .graceful_shutdown_on(shutdown.clone())
        .run(cluster::reconcile, error_policy, context.clone())
        .for_each(finished("fleetcluster"));
    // Bundles are woken by their BundleDeployments, and by every change of a cluster or a
    // ClusterGroup of their namespace (a label change may retarget them).
    let of_namespace = {
        let bundles = bundles.clone();
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
    let (by_cluster, by_group, by_connection) =
        (of_namespace.clone(), of_namespace.clone(), of_namespace);
    let bundle_controller = controller_on(&bundles)
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
            caches.typed::<FleetCluster>().changes(),
            move |cluster: Arc<FleetCluster>| by_cluster(cluster.metadata.namespace.as_deref()),
            (),
        )
        .watches_shared_stream_with(
            caches.typed::<ClusterGroup>().changes(),
            move |group: Arc<ClusterGroup>| by_group(group.metadata.namespace.as_deref()),
            (),
        )
        // An agent going or coming back (not its every heartbeat) changes where its cluster
        // stands in every bundle of the namespace.
        .reconcile_on(
            connections_flipping(&caches)
                .flat_map(move |namespace| futures::stream::iter(by_connection(Some(&namespace)))),
        )
        .graceful_shutdown_on(shutdown)
        .run(bundle::reconcile, error_policy, context)
        .for_each(finished("bundle"));
    let sweeper = {
        let (context, mut shutdown) = (context_for_sweeper, shutdown_for_sweeper);
        async move {
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
    };
    tokio::join!(
        git_repos,
        mirror,
        fleet_clusters,
        bundle_controller,
        sweeper
    );
}
