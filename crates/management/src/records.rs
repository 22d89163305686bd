//! What this replica's watches last saw of the Clusters and their ClusterConnections: the
//! reporter reads them on every pass, and the proxy asks them which replica holds a tunnel.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::watcher;
use lariat_api::management;
use lariat_apiserver::status::ApiError;

/// The Clusters and ClusterConnections as this replica's watches last saw them. The reporter
/// reads them on every pass and the proxy asks them which replica holds a tunnel, so neither
/// lists nor reads the store: with 10,000 clusters, a pass a second on every replica listing
/// both kinds would cost more than the tunnels themselves.
pub struct Records {
    pub(crate) clusters: Store<DynamicObject>,
    pub(crate) connections: Store<DynamicObject>,
}

/// What fills [`Records`]: [`RecordFeeds::run`] watches both kinds into them.
pub struct RecordFeeds {
    clusters: Writer<DynamicObject>,
    connections: Writer<DynamicObject>,
}

/// How long a reader waits for the first complete lists before it gives up.
const RECORDS_WAIT: Duration = Duration::from_secs(10);

impl Records {
    pub fn new() -> (Arc<Records>, RecordFeeds) {
        let clusters = Writer::new(cluster_resource());
        let connections = Writer::new(management::cluster_connection_resource());
        let records = Records {
            clusters: clusters.as_reader(),
            connections: connections.as_reader(),
        };
        (
            Arc::new(records),
            RecordFeeds {
                clusters,
                connections,
            },
        )
    }

    /// Whether both kinds have been listed, waiting up to [`RECORDS_WAIT`] for it.
    pub(crate) async fn ready(&self) -> bool {
        let both = async {
            self.clusters.wait_until_ready().await.is_ok()
                && self.connections.wait_until_ready().await.is_ok()
        };
        tokio::time::timeout(RECORDS_WAIT, both)
            .await
            .unwrap_or(false)
    }

    /// The replica whose tunnel the Cluster `namespace/name`'s agent is connected to, as its
    /// ClusterConnection records it. A replica records a new tunnel at once and says whether
    /// the cluster's API answers after asking it, so `connected` is not awaited: a request sent
    /// to a replica that has since lost the tunnel is answered there as not connected.
    pub async fn holder(&self, namespace: &str, name: &str) -> Result<Option<String>, ApiError> {
        if !self.ready().await {
            return Err(ApiError::Unavailable {
                message: "this replica has not yet read which replica holds each cluster's tunnel; retry in a few seconds".into(),
            });
        }
        let Some(connection) = self.connection(namespace, name) else {
            return Ok(None);
        };
        Ok(connection.data["status"]["replica"]
            .as_str()
            .map(String::from))
    }
}

impl Records {
    /// The ClusterConnection of the Cluster `namespace/name`, as last seen.
    pub(crate) fn connection(&self, namespace: &str, name: &str) -> Option<Arc<DynamicObject>> {
        let reference =
            ObjectRef::new_with(name, management::cluster_connection_resource()).within(namespace);
        self.connections.get(&reference)
    }
}

impl RecordFeeds {
    /// Watches Clusters and ClusterConnections through `client` into the [`Records`] until
    /// `stop`; a failed watch lists again after a backoff, and each distinct failure is
    /// logged once.
    pub async fn run(self, client: kube::Client, mut stop: tokio::sync::watch::Receiver<bool>) {
        use futures::StreamExt;
        let feed = |writer: Writer<DynamicObject>, resource: kube::core::ApiResource| {
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
            let mut last_error = String::new();
            kube::runtime::reflector(writer, watcher(api, watcher::Config::default()))
                .default_backoff()
                .for_each(move |event| {
                    match event {
                        Err(error) if error.to_string() != last_error => {
                            last_error = error.to_string();
                            tracing::warn!(kind = %resource.kind, %error, "cannot watch the agents' connections; retrying");
                        }
                        Err(_) => {}
                        Ok(_) => last_error.clear(),
                    }
                    std::future::ready(())
                })
        };
        tokio::select! {
            _ = stop.wait_for(|s| *s) => {}
            _ = futures::future::join(
                feed(self.clusters, cluster_resource()),
                feed(self.connections, management::cluster_connection_resource()),
            ) => {}
        }
    }
}

/// Cluster API's Clusters, as the records watch them.
pub(crate) fn cluster_resource() -> kube::core::ApiResource {
    kube::core::ApiResource {
        group: "cluster.x-k8s.io".into(),
        version: "v1beta1".into(),
        api_version: "cluster.x-k8s.io/v1beta1".into(),
        kind: "Cluster".into(),
        plural: "clusters".into(),
    }
}
