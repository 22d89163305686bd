//! The management plane, on the generic API server: the agents that dial out from downstream
//! clusters, the tunnels they hold, what their credential may do on the API, the cluster
//! proxy through those tunnels, and Rancher's access control. It is an [`Extension`] of the server (its routes, the agents'
//! identity and scope, its reporting tasks), given to it in its configuration; the server
//! names none of it.
//!
//! - `handshake`: `/v3/connect`, where an agent authenticates and its connection becomes the
//!   Cluster's tunnel;
//! - `hub`: the tunnels this replica holds and the handshake budget;
//! - `credentials`: registration tokens and the agents' cluster credentials;
//! - `proxy`: `/k8s/clusters/<namespace>/<name>/...` into a tunnel (or to the replica that
//!   holds it);
//! - `records` and `reporter`: which replica holds which tunnel, and each Cluster's
//!   `Connected` condition and ClusterConnection;
//! - `manifests`: the import manifests and the agent's image;
//! - `agents`: the agents' fixed scope on the API;
//! - `rancher`: Rancher's access control, a second extension ([`rancher::Rancher`]) with its
//!   kinds' write rules.

// The generic server's `ApiError` is a whole Kubernetes `Status` (message, causes), as large
// as the server makes it; the handlers here return it as the server's own do.
#![allow(clippy::result_large_err)]

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{any, get};
use lariat_apiserver::extension::{Extension, Handle};
use lariat_apiserver::identity::{Attributes, User};
use lariat_apiserver::status::ApiResult;

pub mod agents;
mod bounded;
pub mod credentials;
mod handshake;
pub mod hub;
pub mod manifests;
mod nodes;
mod proxy;
pub mod rancher;
mod records;
pub mod reporter;

pub use hub::DEFAULT_HANDSHAKES_PER_SECOND;
pub use manifests::{AgentImage, ImportManifests};

/// The management plane of one server replica.
#[derive(Clone)]
pub struct Plane {
    tunnels: Arc<hub::Tunnels>,
    records: Arc<records::Records>,
    image: AgentImage,
}

impl Plane {
    /// A plane that admits `handshakes_per_second` agent handshakes (`--agent-handshakes-per-second`)
    /// and installs agents from `image` (`--agent-image`); an image no runtime would pull is
    /// refused here, in one line that says how to write it.
    pub fn new(handshakes_per_second: f64, image: AgentImage) -> Result<Plane, String> {
        image.check()?;
        Ok(Plane {
            tunnels: Arc::new(hub::Tunnels::with_rate(handshakes_per_second)),
            records: records::Records::new(),
            image,
        })
    }

    /// The tunnels this replica holds.
    pub fn tunnels(&self) -> Arc<hub::Tunnels> {
        self.tunnels.clone()
    }

    /// What installs the agent into the clusters lariat provisions: their import manifests,
    /// each with a registration token valid for `ttl`.
    pub fn import_manifests(&self, server: Handle, ttl: Duration) -> Arc<ImportManifests> {
        manifests::for_provisioned(self, server, ttl)
    }
}

#[async_trait::async_trait]
impl Extension for Plane {
    fn routes(&self, server: Handle) -> Router {
        // Agents dial in before they have any lariat identity; each route checks their token.
        Router::new()
            .route("/v3/connect", get(handshake::connect))
            .route("/v3/import/{file}", get(manifests::serve))
            .with_state((self.clone(), server))
    }

    fn authenticated_routes(&self, server: Handle) -> Router {
        Router::new()
            .route("/k8s/clusters/{*rest}", any(proxy::route))
            .with_state((self.clone(), server))
    }

    /// An agent's cluster credential is an identity of the management plane too, with the
    /// fixed scope of `agents.rs`.
    async fn authenticate(&self, server: &Handle, token: &str) -> Option<User> {
        let cluster = match self.records.agent_credential(token) {
            Some(cluster) => cluster,
            None => credentials::credential_cluster(&server.client(), token).await?,
        };
        Some(agents::user(&cluster))
    }

    fn authorize(&self, user: &User, attributes: &Attributes) -> Option<Result<(), String>> {
        agents::authorize(user, attributes)
    }

    fn may_reach(&self, user: &User, path: &str) -> Result<(), String> {
        agents::may_reach(user, path)
    }

    async fn check(&self, server: &Handle, user: &User, attributes: &Attributes) -> ApiResult<()> {
        agents::may_read_content(server, user, attributes).await
    }

    fn watch_limit(&self, user: &User) -> Option<Duration> {
        agents::is_agent(user).then_some(agents::MAX_WATCH)
    }

    /// Every replica fills its records and reports the tunnels it holds; the leader also
    /// reports those no live replica holds.
    fn run(
        &self,
        server: Handle,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        let mut tasks = vec![tokio::spawn(
            self.records.clone().run(server.client(), stop.clone()),
        )];
        if let Some(replicas) = server.replicas() {
            tasks.push(tokio::spawn(reporter::report(
                self.tunnels.clone(),
                self.records.clone(),
                server,
                replicas,
                stop,
            )));
        }
        tasks
    }
}
