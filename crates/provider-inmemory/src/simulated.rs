//! Simulated workload clusters: each a Kubernetes-compatible API of its own, an
//! [`Embedded`] instance of the generic server, served by this process under
//! `/inmemory/NAMESPACE/NAME/`. The InMemoryCluster controller creates one per cluster; kube-rs
//! and kubectl reach it with the `<cluster>-kubeconfig` the provider writes, exactly as they
//! would reach a real cluster.
//!
//! Each simulated cluster is its own trust domain, as a real cluster is: its own CA, and its
//! credentials recorded in its own store. Its kubeconfig is refused by the management API and
//! by every other simulated cluster, and theirs by it; it dies with the cluster.

// The generic server's `ApiError` is a Kubernetes Status with its causes, as large as it must
// be; it is returned, not boxed, across the server's own interfaces too.
#![allow(clippy::result_large_err)]

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use lariat_apiserver::embedded::{Embedded, EmbeddedConfig};
use lariat_apiserver::extension::{Extension, Handle};
use lariat_apiserver::http::VersionSource;
use lariat_apiserver::identity::Peer;
use lariat_apiserver::pki::{Credential, Pki, kubeconfig};
use lariat_apiserver::registry::Registry;
use lariat_apiserver::resources::Resources;
use lariat_apiserver::status::{ApiError, ApiResult};
use serde_json::Value;

/// The owner of a simulated cluster's kubeconfig credential: issuing a new kubeconfig revokes
/// the previous one.
const KUBECONFIG_OWNER: &str = "kubeconfig";
/// How long a simulated cluster's kubeconfig certificate lives (as kubeadm's admin.conf).
const KUBECONFIG_LIFETIME: Duration = Duration::from_secs(365 * 24 * 3600);
/// The namespaces a new cluster has, as a real one's.
const NAMESPACES: [&str; 4] = ["default", "kube-system", "kube-public", "kube-node-lease"];

struct SimulatedCluster {
    api: Embedded,
    /// The cluster's own CA, which signs its client certificates.
    ca: Pki,
    /// Its controllers, scheduler and kubelets, stopped with it.
    _workloads: crate::workloads::Simulation,
}

/// Where the clusters are served: known once the server that hosts them runs.
struct Listener {
    server_address: String,
    /// The CA of the listener's certificate, which the clusters' kubeconfigs trust.
    serving_ca_pem: String,
}

/// The simulated clusters of one server, and the route that serves them (an [`Extension`] of
/// the management server). Clones share them.
#[derive(Clone)]
pub struct SimulatedClusters {
    inner: Arc<Clusters>,
}

struct Clusters {
    clusters: RwLock<HashMap<String, Arc<SimulatedCluster>>>,
    /// The kinds every simulated cluster serves (core and workload kinds), built once and
    /// forked.
    kinds: Registry,
    listener: OnceLock<Listener>,
}

impl Default for SimulatedClusters {
    fn default() -> Self {
        SimulatedClusters::new()
    }
}

impl SimulatedClusters {
    /// The kinds' schemas are built here, as the server starts, not when the first cluster is
    /// asked for: a cluster comes up in the time its InMemoryCluster's first reconcile takes,
    /// which a restored (`lariat move`) cluster's machines count on.
    pub fn new() -> SimulatedClusters {
        SimulatedClusters {
            inner: Arc::new(Clusters {
                clusters: Default::default(),
                kinds: lariat_apiserver::builtin::workload_kinds(),
                listener: OnceLock::new(),
            }),
        }
    }

    /// Records where the hosting server listens (once; later calls change nothing).
    pub fn serve_at(&self, server: &Handle) {
        let _ = self.inner.listener.set(Listener {
            server_address: server.server_address().to_string(),
            serving_ca_pem: server.ca_pem().to_string(),
        });
    }

    /// Where the clusters are served; an error until the server serves.
    fn listener(&self) -> ApiResult<&Listener> {
        self.inner
            .listener
            .get()
            .ok_or_else(|| ApiError::internal("the simulated clusters' server does not serve yet"))
    }

    /// Creates the simulated cluster `key` (`namespace/name`) if it does not exist; returns
    /// whether it did not (a new cluster has a new CA, so earlier kubeconfigs are void).
    pub async fn ensure(&self, key: &str) -> ApiResult<bool> {
        if self.contains(key) {
            return Ok(false);
        }
        let ca = Pki::in_memory_ca(&format!("{key}-ca"))
            .map_err(|e| ApiError::internal(e.to_string()))?;
        let config = EmbeddedConfig {
            kinds: self.inner.kinds.fork(),
            namespaces: NAMESPACES.map(String::from).to_vec(),
            server_address: self.listener()?.server_address.clone(),
            identity: format!("simulated-{key}"),
            metrics_label: "workload",
            version: Some(Arc::new(ControlPlaneVersion)),
            extensions: vec![Arc::new(crate::workloads::KubeletApi)],
        };
        let api = Embedded::start(config, &ca).await?;
        // Its one StorageClass, the default, as kind's clusters have `standard`.
        let classes: kube::Api<kube::api::DynamicObject> = kube::Api::all_with(
            api.client(),
            &kube::api::ApiResource::erase::<k8s_openapi::api::storage::v1::StorageClass>(&()),
        );
        let class = serde_json::from_value(crate::workloads::default_storage_class())
            .map_err(|e| ApiError::internal(e.to_string()))?;
        classes
            .create(&Default::default(), &class)
            .await
            .map_err(|e| ApiError::internal(format!("the default StorageClass: {e}")))?;
        let mut clusters = self.inner.clusters.write().expect("lock");
        if clusters.contains_key(key) {
            return Ok(false);
        }
        let workloads = crate::workloads::start(api.client());
        clusters.insert(
            key.to_string(),
            Arc::new(SimulatedCluster {
                api,
                ca,
                _workloads: workloads,
            }),
        );
        Ok(true)
    }

    pub fn remove(&self, key: &str) -> bool {
        self.inner
            .clusters
            .write()
            .expect("lock")
            .remove(key)
            .is_some()
    }

    pub fn contains(&self, key: &str) -> bool {
        self.inner.clusters.read().expect("lock").contains_key(key)
    }

    pub fn len(&self) -> usize {
        self.inner.clusters.read().expect("lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn cluster(&self, key: &str) -> Option<Arc<SimulatedCluster>> {
        self.inner.clusters.read().expect("lock").get(key).cloned()
    }

    /// An in-process client for the simulated cluster (what its provider manages Nodes with).
    pub fn client(&self, key: &str) -> Option<kube::Client> {
        Some(self.cluster(key)?.api.client())
    }

    /// The URL clients reach the simulated cluster at, on the server's current address.
    pub fn server_url(&self, key: &str) -> String {
        let address = self
            .inner
            .listener
            .get()
            .map_or("", |listener| listener.server_address.as_str());
        format!("https://{address}/inmemory/{key}")
    }

    /// A kubeconfig that reaches the simulated cluster over HTTPS as `kubernetes-admin`
    /// (`system:masters`), with a client certificate from the cluster's own CA, as Cluster
    /// API's `<cluster>-kubeconfig` has. The cluster's previous kubeconfig is revoked.
    pub async fn kubeconfig(&self, key: &str) -> ApiResult<String> {
        let cluster = self
            .cluster(key)
            .ok_or_else(|| ApiError::internal(format!("no simulated cluster {key}")))?;
        cluster.api.revoke(KUBECONFIG_OWNER).await?;
        let issued = cluster
            .api
            .issue_certificate(
                &cluster.ca,
                "kubernetes-admin",
                &["system:masters"],
                KUBECONFIG_OWNER,
                KUBECONFIG_LIFETIME,
            )
            .await?;
        let name = key.rsplit('/').next().unwrap_or(key);
        Ok(kubeconfig(
            &self.server_url(key),
            &self.listener()?.serving_ca_pem,
            name,
            &format!("{name}-admin"),
            Credential::Certificate {
                cert_pem: issued.cert_pem,
                key_pem: issued.key_pem,
            },
        ))
    }

    /// Forwards `/inmemory/NAMESPACE/NAME/...` to that simulated cluster's own API.
    async fn forward(&self, request: Request) -> Response {
        let path = request.uri().path().to_string();
        let mut parts = path.splitn(5, '/').skip(2);
        let (Some(namespace), Some(name)) = (parts.next(), parts.next()) else {
            return lariat_apiserver::http::not_found_path(&path).into_response();
        };
        let Some(cluster) = self.cluster(&format!("{namespace}/{name}")) else {
            // No such cluster, so no credential can be valid there; saying 401 rather than 404
            // tells an anonymous caller nothing about which clusters exist.
            let peer = request.extensions().get::<Peer>();
            lariat_apiserver::auth::record_refusal(&path, peer.and_then(Peer::address));
            return ApiError::Unauthorized.into_response();
        };
        let prefix_len = "/inmemory/".len() + namespace.len() + 1 + name.len();
        let rest = &path[prefix_len..];
        let rest = if rest.is_empty() { "/" } else { rest };
        let path_and_query = match request.uri().query() {
            Some(query) => format!("{rest}?{query}"),
            None => rest.to_string(),
        };
        let (mut parts, body) = request.into_parts();
        match path_and_query.parse() {
            Ok(uri) => parts.uri = uri,
            Err(_) => return lariat_apiserver::http::not_found_path(&path).into_response(),
        }
        // Only what the transport proved crosses into the simulated cluster: a remote peer (its
        // address and client certificates). An identity this process vouches for on the
        // management plane is no identity there, and nothing else the management router put
        // on the request (its path parameters, say) is the cluster's.
        let peer = parts.extensions.remove::<Peer>();
        parts.extensions = Default::default();
        if let Some(peer @ Peer::Remote { .. }) = peer {
            parts.extensions.insert(peer);
        }
        use tower::ServiceExt;
        match cluster
            .api
            .router()
            .oneshot(Request::from_parts(parts, body))
            .await
        {
            Ok(response) => response,
            Err(never) => match never {},
        }
    }
}

/// The route is served before the management plane's authentication: a simulated cluster is
/// its own trust domain, whose router authenticates with its own CA and credential records.
#[async_trait::async_trait]
impl Extension for SimulatedClusters {
    fn routes(&self, server: Handle) -> Router {
        self.serve_at(&server);
        let clusters = self.clone();
        Router::new().route(
            "/inmemory/{*rest}",
            axum::routing::any(move |request: Request| {
                let clusters = clusters.clone();
                async move { clusters.forward(request).await }
            }),
        )
    }
}

/// A simulated cluster's `/version`: the newest kubelet version among its control-plane
/// Nodes (any Node if it has none labelled so), as a real cluster's API server reports the
/// version it runs.
struct ControlPlaneVersion;

#[async_trait::async_trait]
impl VersionSource for ControlPlaneVersion {
    async fn version(&self, resources: &Resources) -> Option<String> {
        let scope = resources.scope("", "nodes", None)?;
        let nodes = resources
            .list(&scope, &Default::default())
            .await
            .ok()?
            .items;
        // Only what parses as a Kubernetes version: a Node's status is anyone's to write, and
        // clients refuse a `/version` they cannot parse.
        let version = |n: &Value| {
            n["status"]["nodeInfo"]["kubeletVersion"]
                .as_str()
                .filter(|v| lariat_api::KubernetesVersion::parse(v).is_some())
                .map(String::from)
        };
        let control_plane: Vec<String> = nodes
            .iter()
            .filter(|n| {
                n["metadata"]["labels"]
                    .get("node-role.kubernetes.io/control-plane")
                    .is_some()
            })
            .filter_map(version)
            .collect();
        let candidates = if control_plane.is_empty() {
            nodes.iter().filter_map(version).collect()
        } else {
            control_plane
        };
        candidates
            .into_iter()
            .max_by_key(|v| lariat_api::KubernetesVersion::parse(v))
    }
}
