//! lariat's in-memory infrastructure provider: clusters and machines that exist only in this
//! process, for demos, tests and scale runs, behind the same contract as a cloud provider.

use std::sync::Arc;

use crate::simulated::SimulatedClusters;
use futures::StreamExt;
use kube::Client;
use kube::core::ApiResource;
use lariat_api::capi::{Cluster, Machine};
use lariat_controllers::cache::Caches;
use lariat_controllers::controller_on;
use lariat_controllers::external::refers_to;

pub mod agents;
pub mod cluster;
pub mod machine;
pub mod simulated;
mod workloads;

pub const GROUP: &str = "infrastructure.cluster.x-k8s.io";
pub const VERSION: &str = "v1alpha1";

pub struct Context {
    pub client: Client,
    pub caches: Arc<Caches>,
    pub clusters: SimulatedClusters,
    /// Where in-process agents dial (none: clusters get no agent).
    pub home: Option<agents::Home>,
    pub agents: agents::Agents,
    /// Events for `kubectl describe inmemorymachine|inmemorycluster`.
    pub events: lariat_controllers::events::Recorder,
}

pub(crate) fn resource(kind: &str) -> ApiResource {
    ApiResource {
        group: GROUP.into(),
        version: VERSION.into(),
        api_version: format!("{GROUP}/{VERSION}"),
        kind: kind.into(),
        plural: format!("{}s", kind.to_lowercase()),
    }
}

/// The simulated cluster key of an InMemoryCluster: `namespace/name`.
pub fn cluster_key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// Runs the InMemoryCluster and InMemoryMachine controllers until `shutdown` resolves, on
/// the process's shared caches.
pub async fn run(
    caches: Arc<Caches>,
    clusters: SimulatedClusters,
    home: Option<agents::Home>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let client = caches.client().clone();
    let context = Arc::new(Context {
        client: client.clone(),
        caches: caches.clone(),
        clusters,
        home,
        agents: Default::default(),
        events: lariat_controllers::events::Recorder::new(client),
    });
    let shutdown = futures::future::FutureExt::shared(Box::pin(shutdown));
    let clusters = controller_on(&caches.of(&resource("InMemoryCluster")))
        .watches_shared_stream_with(
            caches.typed::<Cluster>().changes(),
            |cluster: Arc<Cluster>| {
                let reference = cluster.spec.infrastructure_ref.as_ref()?;
                let namespace = cluster.metadata.namespace.as_deref()?;
                refers_to(
                    reference,
                    "InMemoryCluster",
                    resource("InMemoryCluster"),
                    namespace,
                )
            },
            (),
        )
        .graceful_shutdown_on(shutdown.clone())
        .run(
            cluster::reconcile,
            lariat_controllers::error_policy,
            context.clone(),
        )
        .for_each(lariat_controllers::finished("inmemorycluster"));
    // A Machine getting its bootstrap data is what an InMemoryMachine waits for: watch
    // Machines so that boot starts at once rather than at the next poll.
    let machines = controller_on(&caches.of(&resource("InMemoryMachine")))
        .watches_shared_stream_with(
            caches
                .typed::<Machine>()
                .changes_in(machine::reads_of_machine),
            |machine: Arc<Machine>| {
                let reference = &machine.spec.infrastructure_ref;
                let namespace = machine.metadata.namespace.as_deref()?;
                refers_to(
                    reference,
                    "InMemoryMachine",
                    resource("InMemoryMachine"),
                    namespace,
                )
            },
            (),
        )
        .reconcile_on(lariat_controllers::woken_by_pause_changes_of(
            &caches,
            caches.of(&resource("InMemoryMachine")),
        ))
        .graceful_shutdown_on(shutdown.clone())
        .run(
            machine::reconcile,
            lariat_controllers::error_policy,
            context.clone(),
        )
        .for_each(lariat_controllers::finished("inmemorymachine"));
    let agents = controller_on(&caches.typed::<Cluster>())
        .graceful_shutdown_on(shutdown.clone())
        .run(
            agents::reconcile,
            lariat_controllers::error_policy,
            context.clone(),
        )
        .for_each(lariat_controllers::finished("inmemoryagent"));
    tokio::join!(clusters, machines, agents);
}
