//! lariat's in-memory infrastructure provider: clusters and machines that exist only in this
//! process, for demos, tests and scale runs, behind the same contract as a cloud provider.

use std::sync::Arc;

use futures::StreamExt;
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kube::runtime::controller::Controller;
use kube::runtime::watcher;
use lariat_apiserver::virtual_clusters::VirtualClusters;

pub mod agents;
pub mod cluster;
pub mod machine;

pub const GROUP: &str = "infrastructure.cluster.x-k8s.io";
pub const VERSION: &str = "v1alpha1";

pub struct Context {
    pub client: Client,
    pub clusters: Arc<VirtualClusters>,
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

/// Runs the InMemoryCluster and InMemoryMachine controllers until `shutdown` resolves.
pub async fn run(
    client: Client,
    clusters: Arc<VirtualClusters>,
    home: Option<agents::Home>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let context = Arc::new(Context {
        client: client.clone(),
        clusters,
        home,
        agents: Default::default(),
        events: lariat_controllers::events::Recorder::new(client.clone()),
    });
    let shutdown = futures::future::FutureExt::shared(Box::pin(shutdown));
    let all = |kind: &str| Api::<DynamicObject>::all_with(client.clone(), &resource(kind));
    let clusters = Controller::new_with(
        all("InMemoryCluster"),
        watcher::Config::default(),
        resource("InMemoryCluster"),
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
    let machines = Controller::new_with(
        all("InMemoryMachine"),
        watcher::Config::default(),
        resource("InMemoryMachine"),
    )
    .watches_with(
        Api::<DynamicObject>::all_with(client.clone(), &lariat_controllers::capi("Machine")),
        lariat_controllers::capi("Machine"),
        watcher::Config::default(),
        |machine: DynamicObject| {
            let reference = &machine.data["spec"]["infrastructureRef"];
            let name = reference["name"]
                .as_str()
                .filter(|_| reference["kind"] == "InMemoryMachine")?;
            Some(
                kube::runtime::reflector::ObjectRef::new_with(name, resource("InMemoryMachine"))
                    .within(machine.metadata.namespace.as_deref()?),
            )
        },
    )
    .graceful_shutdown_on(shutdown.clone())
    .run(
        machine::reconcile,
        lariat_controllers::error_policy,
        context.clone(),
    )
    .for_each(lariat_controllers::finished("inmemorymachine"));
    let agents = Controller::new_with(
        Api::<DynamicObject>::all_with(client.clone(), &lariat_controllers::capi("Cluster")),
        watcher::Config::default(),
        lariat_controllers::capi("Cluster"),
    )
    .graceful_shutdown_on(shutdown.clone())
    .run(
        agents::reconcile,
        lariat_controllers::error_policy,
        context.clone(),
    )
    .for_each(lariat_controllers::finished("inmemoryagent"));
    tokio::join!(clusters, machines, agents);
}
