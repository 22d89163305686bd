//! Simulated workload clusters: small Kubernetes-compatible APIs, each on its own in-memory
//! store, served by this process under `/inmemory/NAMESPACE/NAME/`. The in-memory
//! infrastructure provider creates one per cluster; kube-rs and kubectl reach it with the
//! `<cluster>-kubeconfig` the provider writes, exactly as they would reach a real cluster.
//!
//! Each simulated cluster is its own trust domain, as a real cluster is: its own CA, and its
//! credentials recorded in its own store. Its kubeconfig is refused by the management API and
//! by every other simulated cluster, and theirs by it; it dies with the cluster.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::Router;
use lariat_store::memory::MemoryStore;

use crate::auth::Authenticator;
use crate::encryption::Cipher;
use crate::http::{AppState, router};
use crate::pki::{Credential, Pki, kubeconfig};
use crate::rbac::Rbac;
use crate::registry::Registry;
use crate::resources::Resources;
use crate::status::{ApiError, ApiResult};

struct VirtualCluster {
    state: Arc<AppState>,
    router: Router,
    /// The cluster's own CA, which signs its client certificates.
    pki: Arc<Pki>,
    /// Dropped with the cluster, which stops its garbage collector.
    _collector: tokio::sync::watch::Sender<bool>,
}

/// The owner of a simulated cluster's kubeconfig credential: issuing a new kubeconfig revokes
/// the previous one.
const KUBECONFIG_OWNER: &str = "kubeconfig";
/// How long a simulated cluster's kubeconfig certificate lives (as kubeadm's admin.conf).
const KUBECONFIG_LIFETIME: Duration = Duration::from_secs(365 * 24 * 3600);

/// The simulated clusters of one server.
pub struct VirtualClusters {
    clusters: RwLock<HashMap<String, VirtualCluster>>,
    /// The kinds every simulated cluster serves (core kinds, Nodes), shared, never rebuilt.
    kinds: Registry,
    server_address: String,
    /// The CA of the certificate every simulated cluster is served with (the management
    /// server's listener), which their kubeconfigs trust.
    serving_ca_pem: String,
}

impl VirtualClusters {
    pub fn new(kinds: Registry, server_address: String, serving_ca_pem: String) -> VirtualClusters {
        VirtualClusters {
            clusters: RwLock::new(HashMap::new()),
            kinds,
            server_address,
            serving_ca_pem,
        }
    }

    /// An empty set, for servers that host none (the simulated clusters themselves).
    pub fn none() -> Arc<VirtualClusters> {
        Arc::new(VirtualClusters::new(
            Registry::default(),
            String::new(),
            String::new(),
        ))
    }

    /// Creates the simulated cluster `key` (`namespace/name`) if it does not exist; returns
    /// whether it did not (a new cluster has a new CA, so earlier kubeconfigs are void).
    pub async fn ensure(&self, key: &str) -> ApiResult<bool> {
        if self.clusters.read().expect("lock").contains_key(key) {
            return Ok(false);
        }
        let pki = Pki::in_memory_ca(&format!("{key}-ca"))
            .map_err(|e| ApiError::internal(e.to_string()))?;
        let store: Arc<dyn lariat_store::Store> = Arc::new(MemoryStore::new());
        // Secrets in a simulated cluster live only in memory; the key only has to be stable
        // for the cluster's lifetime.
        let cipher = Cipher::from_key(&rand::random::<[u8; 32]>()).map_err(ApiError::internal)?;
        let resources = Resources::new(store.clone(), self.kinds.fork(), cipher);
        crate::ensure_namespaces(
            &resources,
            ["default", "kube-system", "kube-public", "kube-node-lease"],
        )
        .await?;
        // Its own RBAC, default roles included, as a real cluster enforces: what the proxy's
        // impersonated callers may do here is decided here.
        crate::rbac::defaults::bootstrap(&resources, &[]).await?;
        let rbac = Rbac::load(&store, Vec::new())
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?;
        let resources = resources.with_rbac(rbac.clone());
        // Its own service-account key: its tokens are good here only, as a real cluster's.
        let service_accounts = crate::service_accounts::ServiceAccounts::in_memory(
            crate::service_accounts::CLUSTER_ISSUER,
            resources.clone(),
        )
        .map_err(ApiError::internal)?;
        let authenticator = Authenticator::new(store.clone(), &pki.ca_cert_pem)
            .map_err(ApiError::internal)?
            .with_service_accounts(Arc::new(service_accounts));
        let state = Arc::new(AppState {
            resources,
            authenticator,
            authorizer: rbac.clone(),
            rbac: Some(rbac.clone()),
            server_address: self.server_address.clone(),
            advertised_address: None,
            bookmark_interval: Duration::from_secs(60),
            metrics: None,
            ca_pem: String::new(),
            virtual_clusters: VirtualClusters::none(),
            simulated: true,
            audit: None,
            replicas: None,
            routes: Vec::new(),
            extensions: Vec::new(),
            failed_proofs: Default::default(),
            // Nothing is elected in a simulated cluster: its one server leads.
            leadership: crate::leader::Leadership::sole(format!("simulated-{key}")),
        });
        let router = router(state.clone());
        let mut clusters = self.clusters.write().expect("lock");
        if clusters.contains_key(key) {
            return Ok(false);
        }
        // Its own garbage collector: owner references, foreground deletion and namespaces
        // being deleted (their contents, then the `kubernetes` finalizer), as a real
        // cluster's kube-controller-manager does.
        let (collector, stop) = tokio::sync::watch::channel(false);
        tokio::spawn(crate::gc::run(state.resources.clone(), stop.clone()));
        tokio::spawn(rbac.follow(store, stop));
        clusters.insert(
            key.to_string(),
            VirtualCluster {
                state,
                router,
                pki: Arc::new(pki),
                _collector: collector,
            },
        );
        Ok(true)
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

    /// A kubeconfig that reaches the simulated cluster over HTTPS as `kubernetes-admin`
    /// (`system:masters`), with a client certificate from the cluster's own CA, as Cluster
    /// API's `<cluster>-kubeconfig` has. The cluster's previous kubeconfig is revoked.
    pub async fn kubeconfig(&self, key: &str) -> ApiResult<String> {
        let (state, pki) = {
            let clusters = self.clusters.read().expect("lock");
            let cluster = clusters
                .get(key)
                .ok_or_else(|| ApiError::internal(format!("no simulated cluster {key}")))?;
            (cluster.state.clone(), cluster.pki.clone())
        };
        state.authenticator.revoke(KUBECONFIG_OWNER).await?;
        let issued = state
            .authenticator
            .issue_certificate(
                &pki,
                "kubernetes-admin",
                &["system:masters"],
                KUBECONFIG_OWNER,
                KUBECONFIG_LIFETIME,
            )
            .await?;
        let name = key.rsplit('/').next().unwrap_or(key);
        Ok(kubeconfig(
            &self.server_url(key),
            &self.serving_ca_pem,
            name,
            &format!("{name}-admin"),
            Credential::Certificate {
                cert_pem: issued.cert_pem,
                key_pem: issued.key_pem,
            },
        ))
    }
}
