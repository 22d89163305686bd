//! Simulated workload clusters: small Kubernetes-compatible APIs, each on its own in-memory
//! store, served by this process under `/inmemory/NAMESPACE/NAME/`. The in-memory
//! infrastructure provider creates one per cluster; kube-rs and kubectl reach it with the
//! `<cluster>-kubeconfig` the provider writes, exactly as they would reach a real cluster.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::Router;
use lariat_store::memory::MemoryStore;

use crate::auth::{AllowAuthenticated, Authenticator};
use crate::encryption::Cipher;
use crate::http::{AppState, router};
use crate::pki::{Credential, kubeconfig};
use crate::registry::Registry;
use crate::resources::Resources;
use crate::status::ApiResult;

struct VirtualCluster {
    state: Arc<AppState>,
    router: Router,
}

/// The simulated clusters of one server.
pub struct VirtualClusters {
    clusters: RwLock<HashMap<String, VirtualCluster>>,
    /// The kinds every simulated cluster serves (core kinds, Nodes), shared, never rebuilt.
    kinds: Registry,
    authenticator: Authenticator,
    server_address: String,
    ca_pem: String,
}

impl VirtualClusters {
    pub fn new(
        kinds: Registry,
        authenticator: Authenticator,
        server_address: String,
        ca_pem: String,
    ) -> VirtualClusters {
        VirtualClusters {
            clusters: RwLock::new(HashMap::new()),
            kinds,
            authenticator,
            server_address,
            ca_pem,
        }
    }

    /// An empty set, for servers that host none (the simulated clusters themselves).
    pub fn none() -> Arc<VirtualClusters> {
        Arc::new(VirtualClusters::new(
            Registry::default(),
            Authenticator::new(Arc::new(MemoryStore::new())),
            String::new(),
            String::new(),
        ))
    }

    /// Creates the simulated cluster `key` (`namespace/name`) if it does not exist.
    pub async fn ensure(&self, key: &str) -> ApiResult<()> {
        if self.clusters.read().expect("lock").contains_key(key) {
            return Ok(());
        }
        let store = Arc::new(MemoryStore::new());
        // Secrets in a simulated cluster live only in memory; the key only has to be stable
        // for the cluster's lifetime.
        let cipher = Cipher::from_key(&rand::random::<[u8; 32]>())
            .map_err(crate::status::ApiError::internal)?;
        let resources = Resources::new(store, self.kinds.fork(), cipher);
        crate::ensure_namespaces(
            &resources,
            &["default", "kube-system", "kube-public", "kube-node-lease"],
        )
        .await?;
        let state = Arc::new(AppState {
            resources,
            authenticator: self.authenticator.clone(),
            authorizer: Arc::new(AllowAuthenticated),
            server_address: self.server_address.clone(),
            bookmark_interval: Duration::from_secs(60),
            metrics: None,
            tunnels: Default::default(),
            ca_pem: String::new(),
            virtual_clusters: VirtualClusters::none(),
        });
        let router = router(state.clone());
        self.clusters
            .write()
            .expect("lock")
            .entry(key.to_string())
            .or_insert(VirtualCluster { state, router });
        Ok(())
    }

    pub fn remove(&self, key: &str) -> bool {
        self.clusters.write().expect("lock").remove(key).is_some()
    }

    pub fn contains(&self, key: &str) -> bool {
        self.clusters.read().expect("lock").contains_key(key)
    }

    pub fn len(&self) -> usize {
        self.clusters.read().expect("lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn router(&self, key: &str) -> Option<Router> {
        self.clusters
            .read()
            .expect("lock")
            .get(key)
            .map(|c| c.router.clone())
    }

    /// An in-process client for the simulated cluster (what its provider uses to manage Nodes).
    pub fn client(&self, key: &str) -> Option<kube::Client> {
        let state = self.clusters.read().expect("lock").get(key)?.state.clone();
        Some(crate::local::client(state))
    }

    /// The URL clients reach the simulated cluster at, on this server's current address.
    pub fn server_url(&self, key: &str) -> String {
        format!("https://{}/inmemory/{key}", self.server_address)
    }

    /// A kubeconfig that reaches the simulated cluster over HTTPS with a new bearer token
    /// (stored hashed, like every token).
    pub async fn kubeconfig(&self, key: &str) -> ApiResult<String> {
        let token = self
            .authenticator
            .create_token(&format!("inmemory:{key}"), &["system:masters"])
            .await?;
        let server = format!("https://{}/inmemory/{key}", self.server_address);
        Ok(kubeconfig(
            &server,
            &self.ca_pem,
            "admin",
            Credential::Token(token),
        ))
    }
}
