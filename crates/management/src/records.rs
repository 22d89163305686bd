//! What this replica's watches last saw of the Clusters, their ClusterConnections and their
//! agents' credentials: the reporter reads them on every pass, the proxy asks them which
//! replica holds a tunnel, and an agent's requests are authenticated against them.
//! They are the process's one cache implementation (`lariat_controllers::cache`), an instance
//! of their own: these watches run on every replica, the controllers' only on the leader.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::api::DynamicObject;
use lariat_api::management::{self, NAMESPACE};
use lariat_apiserver::status::ApiError;
use lariat_controllers::cache::{Cache, Caches};

use crate::credentials::{self, CLUSTER_LABEL};

/// The Clusters, ClusterConnections and agent credentials as this replica's watches last saw
/// them. The reporter reads them on every pass, the proxy asks them which replica holds a
/// tunnel, and agents are authenticated against them, so none lists nor reads the store: with
/// 10,000 clusters, a pass a second on every replica listing both kinds would cost more than
/// the tunnels themselves, and every agent's watch renewal read a Secret and a Cluster.
#[derive(Default)]
pub struct Records {
    /// Filled while the plane runs ([`Records::run`]).
    watched: Mutex<Option<Watched>>,
}

#[derive(Clone)]
struct Watched {
    clusters: Arc<Cache>,
    connections: Arc<Cache>,
    /// The agent credential Secrets (hashed tokens), by [`CLUSTER_LABEL`].
    credentials: Arc<Cache>,
}

/// How long a reader waits for the first complete lists before it gives up.
const RECORDS_WAIT: Duration = Duration::from_secs(10);

impl Records {
    pub fn new() -> Arc<Records> {
        Arc::new(Records::default())
    }

    fn watched(&self) -> Option<Watched> {
        self.watched.lock().expect("lock").clone()
    }

    /// Watches Clusters, ClusterConnections and agent credentials through `client` until `stop` (a failed watch
    /// lists again after a backoff, each distinct failure logged once, as every cache does).
    pub async fn run(
        self: Arc<Self>,
        client: kube::Client,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        let caches = Caches::new(client);
        *self.watched.lock().expect("lock") = Some(Watched {
            clusters: caches.of(&cluster_resource()),
            connections: caches.of(&management::cluster_connection_resource()),
            credentials: caches.secrets_labelled(CLUSTER_LABEL),
        });
        let _ = stop.wait_for(|s| *s).await;
        // Dropping the caches ends their watches.
        self.watched.lock().expect("lock").take();
    }

    /// Whether both kinds have been listed, waiting up to [`RECORDS_WAIT`] for it.
    pub(crate) async fn ready(&self) -> bool {
        let both = async {
            let started = tokio::time::Instant::now();
            loop {
                if let Some(watched) = self.watched() {
                    return watched.clusters.synced().await.is_ok()
                        && watched.connections.synced().await.is_ok();
                }
                if started.elapsed() >= RECORDS_WAIT {
                    return false;
                }
                // The plane has not started its watches yet.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        tokio::time::timeout(RECORDS_WAIT, both)
            .await
            .unwrap_or(false)
    }

    /// Every Cluster, as last seen.
    pub(crate) fn clusters(&self) -> Vec<Arc<DynamicObject>> {
        self.watched()
            .map(|w| w.clusters.store().state())
            .unwrap_or_default()
    }

    /// Every ClusterConnection, as last seen.
    pub(crate) fn connections(&self) -> Vec<Arc<DynamicObject>> {
        self.watched()
            .map(|w| w.connections.store().state())
            .unwrap_or_default()
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

    /// The Cluster (`namespace/name`) whose agent credential `token` is, as the watches last
    /// saw the credential and its Cluster; `None` when they do not vouch for it (not listed
    /// yet, a credential issued a moment ago, a wrong token), and the store is asked instead.
    /// A revoked credential (its Cluster deleted, or a new one issued) is refused as soon as
    /// the watch brings the change, not after a time to live.
    pub(crate) fn agent_credential(&self, token: &str) -> Option<String> {
        let watched = self.watched()?;
        // A failing watch keeps what it last saw, which may be a credential revoked since.
        if !watched.credentials.is_healthy() || !watched.clusters.is_healthy() {
            return None;
        }
        let (id, hash) = credentials::token_parts(token).ok()?;
        let secret = watched
            .credentials
            .get_now(NAMESPACE, &credentials::credential_secret_name(id))?;
        let (cluster, uid) = credentials::credential_owner(&secret.data, &hash)?;
        let (namespace, name) = cluster.split_once('/')?;
        let live = watched.clusters.get_now(namespace, name);
        credentials::is_live_cluster(live.as_deref(), &uid).then_some(cluster)
    }

    /// The ClusterConnection of the Cluster `namespace/name`, as last seen.
    pub(crate) fn connection(&self, namespace: &str, name: &str) -> Option<Arc<DynamicObject>> {
        self.watched()?.connections.get_now(namespace, name)
    }
}

/// Cluster API's Clusters, as the records watch them.
pub(crate) fn cluster_resource() -> kube::core::ApiResource {
    kube::core::ApiResource::erase::<lariat_api::capi::Cluster>(&())
}
