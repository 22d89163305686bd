//! A second instance of the generic server, served by this process inside another's listener:
//! its own in-memory store, its own kinds (a fork of the core ones), its own trust domain (its
//! CA, credential records, ServiceAccount key and RBAC, default roles included) and its own
//! garbage collector, history compaction and Event expiry, as a real cluster's kube-apiserver
//! and kube-controller-manager have. The in-memory infrastructure provider builds each
//! simulated workload cluster with one [`Embedded::start`]; the management plane is the other
//! builder call ([`crate::Server`]).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use lariat_store::memory::MemoryStore;

use crate::auth::Authenticator;
use crate::encryption::Cipher;
use crate::http::{AppState, VersionSource, router};
use crate::limits::ResourceLimits;
use crate::pki::{IssuedCertificate, Pki};
use crate::rbac::Rbac;
use crate::registry::Registry;
use crate::resources::Resources;
use crate::status::{ApiError, ApiResult};

/// How often an embedded instance compacts its store's history (kube-apiserver's default).
const COMPACTION_INTERVAL: Duration = Duration::from_secs(300);
/// How long an embedded instance keeps an Event (kube-apiserver's `--event-ttl` default).
const EVENT_TTL: Duration = Duration::from_secs(3600);
/// How often an embedded instance's watches carry a bookmark (and its store's watches their
/// progress, at half of it): a bookmark's revision may be half an interval old when it is
/// sent and the next comes an interval later, so a watch renewed after a quiet spell resumes
/// from at most one and a half intervals back, inside the history its compaction keeps (at
/// least one compaction interval). Three minutes, not every minute as the server's: over a
/// thousand simulated clusters' 16,000 watches that was hundreds of wake-ups a second of an
/// idle fleet.
const BOOKMARK_INTERVAL: Duration = Duration::from_secs(COMPACTION_INTERVAL.as_secs() * 3 / 5);
/// What an embedded instance's watch cache may hold: its watchers are few (a simulated
/// cluster's workload controllers, its agent, the management plane's Node watch), so the
/// cache only bridges a change from the first of them to the last; a thousand instances at
/// the server's 64 MiB would be a budget of 64 GiB.
const WATCH_CACHE_BYTES: usize = 1024 * 1024;

/// How an embedded instance is built.
pub struct EmbeddedConfig {
    /// The kinds it serves: a registry of its own (`Registry::fork` shares the schemas).
    pub kinds: Registry,
    /// Namespaces that exist from the start.
    pub namespaces: Vec<String>,
    /// `host:port` of the listener it is served on (for discovery's server addresses).
    pub server_address: String,
    /// The name it leads its own controllers under.
    pub identity: String,
    /// The label of its requests in the process's request counter (`api="..."`).
    pub metrics_label: &'static str,
    /// What `/version` reports.
    pub version: Option<Arc<dyn VersionSource>>,
    /// What answers beside its kinds (a simulated kubelet's Pod logs and exec); their tasks,
    /// objects and grants are not taken: whoever builds the instance runs its own.
    pub extensions: Vec<Arc<dyn crate::extension::Extension>>,
}

/// A running embedded instance; dropping it stops its garbage collector and RBAC follower.
pub struct Embedded {
    state: Arc<AppState>,
    router: Router,
    /// Built once: a provider asks for it at every reconcile of a machine, and a new client
    /// is a new router and a new task.
    client: kube::Client,
    _stop: tokio::sync::watch::Sender<bool>,
}

impl Embedded {
    /// Builds the instance and starts its background tasks; `ca` is the CA of its trust
    /// domain, which its client certificates must chain to.
    pub async fn start(config: EmbeddedConfig, ca: &Pki) -> ApiResult<Embedded> {
        let store: Arc<dyn lariat_store::Store> = Arc::new(MemoryStore::new());
        // Its Secrets live only in memory: the key only has to be stable for its lifetime.
        let cipher = Cipher::from_key(&rand::random::<[u8; 32]>()).map_err(ApiError::internal)?;
        let resources =
            Resources::new(store.clone(), config.kinds, cipher).with_limits(ResourceLimits {
                watch_cache_bytes: WATCH_CACHE_BYTES,
                ..ResourceLimits::default()
            });
        crate::ensure_namespaces(&resources, config.namespaces.iter().map(String::as_str)).await?;
        // Its own RBAC, default roles included, as a real cluster enforces.
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
        let authenticator = Authenticator::new(store.clone(), &ca.ca_cert_pem)
            .map_err(ApiError::internal)?
            .with_service_accounts(Arc::new(service_accounts));
        let state = Arc::new(AppState {
            resources,
            authenticator,
            authorizer: rbac.clone(),
            rbac: Some(rbac.clone()),
            server_address: config.server_address,
            advertised_address: None,
            bookmark_interval: BOOKMARK_INTERVAL,
            metrics: None,
            metrics_label: config.metrics_label,
            serves_process_metrics: false,
            version: config.version,
            ca_pem: String::new(),
            audit: None,
            replicas: None,
            routes: Vec::new(),
            extensions: config.extensions,
            failed_proofs: Default::default(),
            // Nothing is elected here: its one server leads.
            leadership: crate::leader::Leadership::sole(config.identity),
            // Its clients and routes may outlive it (what it serves stays readable while they
            // are kept); only its background tasks stop with it.
            stopping: tokio::sync::watch::Sender::new(false),
        });
        let (stop_tx, stop) = tokio::sync::watch::channel(false);
        // Owner references, foreground deletion and namespaces being deleted, as a real
        // cluster's kube-controller-manager collects them.
        tokio::spawn(crate::gc::run(state.resources.clone(), stop.clone()));
        // Its history and its Events kept as long as the server's own (five minutes, an
        // hour), as a real cluster's kube-apiserver compacts etcd and expires Events: without
        // them each instance would hold its store's whole history budget and every Event
        // ever recorded, which a thousand simulated clusters multiply.
        tokio::spawn(crate::gc::compact_periodically(
            store.clone(),
            COMPACTION_INTERVAL,
            stop.clone(),
        ));
        tokio::spawn(crate::gc::expire_events(
            state.resources.clone(),
            EVENT_TTL,
            stop.clone(),
        ));
        tokio::spawn(rbac.follow(store, stop));
        let router = router(state.clone());
        Ok(Embedded {
            client: crate::local::client_of(router.clone()),
            router,
            state,
            _stop: stop_tx,
        })
    }

    /// Its whole HTTP surface, for the route that serves it.
    pub fn router(&self) -> Router {
        self.router.clone()
    }

    /// A kube-rs client served in-process (what its provider manages Nodes with).
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// A client certificate from `ca` for `user` in `groups`, recorded here under `owner`
    /// for `lifetime`.
    pub async fn issue_certificate(
        &self,
        ca: &Pki,
        user: &str,
        groups: &[&str],
        owner: &str,
        lifetime: Duration,
    ) -> ApiResult<IssuedCertificate> {
        self.state
            .authenticator
            .issue_certificate(ca, user, groups, owner, lifetime)
            .await
    }

    /// Revokes every credential of `owner`; how many there were.
    pub async fn revoke(&self, owner: &str) -> ApiResult<usize> {
        self.state.authenticator.revoke(owner).await
    }
}
