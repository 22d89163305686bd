//! lariat's Kubernetes-compatible API server: one process, an embedded store, and the REST
//! API kubectl and kube-rs already speak.
//!
//! [`Server::start`] prepares everything a first start needs (PKI, admin credential,
//! kubeconfig, built-in kinds); [`Server::serve`] runs the HTTPS listener until a shutdown
//! signal, so tests start a real server on `127.0.0.1:0` and stop it.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use lariat_store::Store;
use serde_json::json;

pub mod audit;
pub mod auth;
pub mod bootstrap;
pub mod builtin;
pub mod discovery;
pub mod embedded;
pub mod encryption;
pub mod extension;
pub mod fanout;
pub mod follow;
pub mod forwarding;
pub mod gc;
pub mod http;
pub mod identity;
pub mod leader;
pub mod limits;
pub mod local;
pub mod managed;
pub mod metrics;
pub mod objects;
pub mod oidc;
pub mod openapi;
pub mod patch;
pub mod pki;
pub mod proofs;
pub mod protobuf;
pub mod rbac;
pub mod registry;
pub mod replicas;
pub mod resources;
pub mod routes;
pub mod scale;
pub mod schema;
pub mod sending;
pub mod service_accounts;
pub mod status;
pub mod strategy;
pub mod table;
pub mod tls;
pub mod watch;

use crate::auth::Authenticator;

use crate::resources::{Resources, WriteOptions};

/// Everything `lariat server` can be told.
#[derive(Clone, Debug)]
pub struct Config {
    pub data_dir: PathBuf,
    /// Extra names and addresses for the serving certificate.
    pub tls_sans: Vec<String>,
    /// How often to compact store history; history younger than one interval is kept.
    pub compaction_interval: Duration,
    /// How often an idle watch that asked for bookmarks gets one.
    pub bookmark_interval: Duration,
    /// The 32-byte key Secrets are encrypted with (default `<data-dir>/encryption.key`,
    /// created on first start). Replicas sharing an etcd must share it.
    pub encryption_key_file: Option<PathBuf>,
    /// Renders the process's metrics (Prometheus text) for `/metrics`; the controllers that
    /// run next to the server own them.
    pub metrics: Option<fn() -> String>,
    /// How long an Event is kept after it was last seen.
    pub event_ttl: Duration,
    /// Connection limits and idle deadline of the HTTPS listener.
    pub limits: tls::Limits,
    /// How large a stored object and the watch cache may grow (`--max-object-bytes`,
    /// `--watch-cache-bytes`).
    pub resource_limits: limits::ResourceLimits,
    /// The URL clusters and agents elsewhere reach this server at (`https://HOST[:PORT]`, a
    /// load balancer's, say), as Rancher's `server-url`: import manifests and discovery name
    /// it, and its host joins the serving certificate. Default: the listener's address.
    pub advertise_url: Option<String>,
    /// The `iss` (and API audience) of the ServiceAccount tokens this server issues
    /// (`--service-account-issuer`).
    pub service_account_issuer: String,
    /// The longest lifetime a requested ServiceAccount token is granted.
    pub service_account_max_token_expiration: Duration,
    /// An OpenID Connect provider whose ID tokens are accepted (`--oidc-*`).
    pub oidc: Option<oidc::OidcConfig>,
    /// Where every mutating request and refusal is recorded (`--audit-log-*`).
    pub audit: Option<audit::AuditConfig>,
    /// Whether other servers may share the store (etcd): then the controllers run only on the
    /// replica that wins the election ([`leader`]); on a store only this process can hold
    /// (SQLite) this server simply leads.
    pub shared_store: bool,
    /// The election's durations, when the store is shared.
    pub election: leader::Timing,
    /// The token replicas on one datastore join with (`--token`): the CA and keys are shared
    /// through the datastore, sealed with it ([`bootstrap`]).
    pub join_token: Option<String>,
    /// `host:port` the other replicas reach this one at, to forward cluster proxy requests
    /// to the tunnels it holds (`--peer-address`). Default: the listener's address, or on a
    /// wildcard listener the address this machine sends from.
    pub peer_address: Option<String>,
    /// The kinds served beyond the core Kubernetes ones, each as its CustomResourceDefinition,
    /// from the crates that own them; they are published as CRDs at start, so `kubectl get
    /// crds` lists them. Default: lariat's own (`management.lariat.dev`: Tokens, and the
    /// management plane's records of clusters and agents).
    pub kinds: Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>,
    /// The write rules of the kinds served beyond the built-in ones, from the crates that
    /// own them (Cluster API's, a provider's): the server names none itself.
    pub strategies: strategy::Strategies,
    /// The API groups whose kinds the default `edit` and `view` ClusterRoles reach, as they
    /// reach Deployments (Cluster API's and Fleet's, on the management plane).
    pub edit_and_view_groups: Vec<String>,
    /// The write rules of the kinds served beyond the built-in ones that read other objects
    /// or judge the writer, from the crates that own them (Rancher's access control).
    pub validators: strategy::Validators,
    /// Routes served beside the API to callers who prove themselves to the route (a git
    /// host's webhook), from the crates that own them.
    pub routes: Vec<routes::Route>,
    /// Namespaces that exist from the first start, beside `default` and `lariat-system` (Fleet's
    /// workspaces, on the management plane).
    pub namespaces: Vec<String>,
    /// What the crates beyond the server add to it (the management plane's tunnels and
    /// proxy): routes, identities and their scope, tasks.
    pub extensions: Vec<Arc<dyn extension::Extension>>,
}

impl Config {
    pub fn new(data_dir: impl Into<PathBuf>) -> Config {
        Config {
            data_dir: data_dir.into(),
            tls_sans: vec![],
            compaction_interval: Duration::from_secs(300),
            bookmark_interval: Duration::from_secs(60),
            encryption_key_file: None,
            metrics: None,
            event_ttl: Duration::from_secs(3600),
            limits: tls::Limits::default(),
            resource_limits: limits::ResourceLimits::default(),
            advertise_url: None,
            service_account_issuer: service_accounts::DEFAULT_ISSUER.into(),
            service_account_max_token_expiration: Duration::from_secs(24 * 3600),
            oidc: None,
            audit: None,
            shared_store: false,
            election: leader::Timing::default(),
            join_token: None,
            peer_address: None,
            kinds: lariat_api::management::crds(),
            strategies: strategy::Strategies::default(),
            validators: strategy::Validators::default(),
            edit_and_view_groups: Vec::new(),
            routes: Vec::new(),
            namespaces: Vec::new(),
            extensions: Vec::new(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Pki(#[from] pki::PkiError),
    #[error("cannot prepare the store: {0}")]
    Store(String),
    #[error("cannot load the encryption key: {0}")]
    Encryption(String),
    #[error("cannot configure TLS: {0}")]
    Tls(String),
    #[error("cannot serve: {0}")]
    Io(#[from] std::io::Error),
    #[error("invalid --advertise-url {0}")]
    AdvertiseUrl(String),
    #[error("{0}")]
    PeerAddress(String),
    #[error("{0}")]
    ReplicaSkew(String),
    #[error("invalid --tls-san {0}")]
    TlsSan(String),
    #[error("{0}")]
    Authentication(String),
    #[error("audit log: {0}")]
    Audit(String),
    #[error(transparent)]
    Join(#[from] bootstrap::JoinError),
}

/// A prepared server, bound to its listener.
pub struct Server {
    state: Arc<http::AppState>,
    listener: tokio::net::TcpListener,
    tls: Arc<rustls::ServerConfig>,
    pki: pki::Pki,
    config: Config,
    rbac: Arc<rbac::Rbac>,
}

/// The names the server's certificate covers, the address other replicas reach it at, and
/// the advertised URL's host and address.
struct Names {
    sans: Vec<String>,
    peer_address: String,
    advertised: Option<(String, String)>,
}

/// What `--tls-san`, `--peer-address` and `--advertise-url` make of the server's names, each
/// refused with its flag when it cannot be read.
fn names(config: &Config, address: SocketAddr) -> Result<Names, StartError> {
    let mut sans = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    if !address.ip().is_unspecified() && !sans.contains(&address.ip().to_string()) {
        sans.push(address.ip().to_string());
    }
    let advertised = config
        .advertise_url
        .as_deref()
        .map(|url| pki::server_url(url).map_err(StartError::AdvertiseUrl))
        .transpose()?;
    let advertised_host = advertised.as_ref().map(|(host, _)| host.clone());
    let mut wanted = Vec::new();
    // `--tls-san a, b` and a trailing comma in LARIAT_TLS_SAN mean what they look like.
    for san in config.tls_sans.iter().filter(|s| !s.trim().is_empty()) {
        wanted.push(pki::subject_alt_name(san).map_err(StartError::TlsSan)?);
    }
    let peer_address = match &config.peer_address {
        Some(given) => {
            let bad = || {
                StartError::PeerAddress(format!(
                    "invalid --peer-address {given:?}: expected HOST:PORT, e.g. 10.0.0.5:6443, where the other replicas reach this one"
                ))
            };
            let (host, port) = given.rsplit_once(':').ok_or_else(bad)?;
            let host = host.trim_start_matches('[').trim_end_matches(']');
            if host.is_empty() || port.parse::<u16>().map_or(true, |p| p == 0) {
                return Err(bad());
            }
            wanted.push(pki::subject_alt_name(host).map_err(|_| bad())?);
            given.clone()
        }
        None => {
            let address = replicas::default_address(address);
            if let Some((host, _)) = address.rsplit_once(':') {
                wanted.push(
                    host.trim_start_matches('[')
                        .trim_end_matches(']')
                        .to_string(),
                );
            }
            address
        }
    };
    for san in wanted.into_iter().chain(advertised_host) {
        if !sans.contains(&san) {
            sans.push(san);
        }
    }
    Ok(Names {
        sans,
        peer_address,
        advertised,
    })
}

/// The store's resources as this server serves them: the core kinds and the configuration's,
/// the stored CRDs, the namespaces and default RBAC roles every server has, and what each
/// extension keeps from the first start.
async fn open_resources(
    config: &Config,
    kinds: Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>,
    store: &Arc<dyn Store>,
    key_path: &std::path::Path,
) -> Result<Resources, StartError> {
    let registry = builtin::core_kinds();
    for rt in builtin::lariat_types(&kinds) {
        registry.insert(rt);
    }
    let cipher = encryption::Cipher::load_or_create(key_path).map_err(StartError::Encryption)?;
    if config.encryption_key_file.is_none() {
        pki::keep_private(key_path)
            .map_err(|e| StartError::Encryption(format!("{}: {e}", key_path.display())))?;
    }
    let resources = Resources::new(store.clone(), registry, cipher)
        .with_limits(config.resource_limits)
        .with_strategies(config.strategies.clone())
        .with_validators(config.validators.clone());
    load_stored_crds(&resources)
        .await
        .map_err(|e| StartError::Store(e.to_string()))?;
    let builtin: Vec<serde_json::Value> = kinds
        .iter()
        .map(|crd| serde_json::to_value(crd).expect("CRDs serialize"))
        .collect();
    resources
        .publish_builtin_crds(builtin)
        .await
        .map_err(|e| StartError::Store(e.to_string()))?;
    let namespaces = ["default", "lariat-system"]
        .into_iter()
        .chain(config.namespaces.iter().map(String::as_str));
    ensure_namespaces(&resources, namespaces)
        .await
        .map_err(|e| StartError::Store(e.to_string()))?;
    rbac::defaults::bootstrap(&resources, &config.edit_and_view_groups)
        .await
        .map_err(|e| StartError::Store(format!("default RBAC roles: {e}")))?;
    for extension in &config.extensions {
        extension
            .prepare(&resources)
            .await
            .map_err(|e| StartError::Store(format!("objects kept from the first start: {e}")))?;
    }
    Ok(resources)
}

impl Server {
    /// Loads (or creates) the PKI and the admin credential, serves the built-in kinds and the
    /// stored CRDs, and writes `<data-dir>/kubeconfig.yaml`.
    pub async fn start(
        mut config: Config,
        store: Arc<dyn Store>,
        listener: tokio::net::TcpListener,
    ) -> Result<Server, StartError> {
        let address = listener.local_addr()?;
        let Names {
            sans,
            peer_address,
            advertised,
        } = names(&config, address)?;
        let key_path = config
            .encryption_key_file
            .clone()
            .unwrap_or_else(|| config.data_dir.join("encryption.key"));
        if let Some(token) = &config.join_token {
            let files = bootstrap::Files {
                tls_dir: config.data_dir.join("tls"),
                kubeconfigs: ["kubeconfig.yaml", "kubeconfig-token.yaml"]
                    .map(|name| config.data_dir.join(name))
                    .to_vec(),
                encryption_key: key_path.clone(),
                encryption_key_given: config.encryption_key_file.is_some(),
            };
            bootstrap::join(&*store, token, &files).await?;
        } else if config.shared_store {
            bootstrap::check_tokenless(&*store).await?;
        }
        let pki = pki::Pki::load_or_create(&config.data_dir.join("tls"), &sans)?;
        let tls = tls::server_config(&pki).map_err(StartError::Tls)?;

        // Taken, not borrowed: once served (as the registry's schemas) the CRDs' typed form
        // is not needed again, and the server keeps its configuration (9.5 MiB of an idle
        // server's heap, measured with heaptrack).
        let kinds = std::mem::take(&mut config.kinds);
        let resources = open_resources(&config, kinds, &store, &key_path).await?;
        let sources = config
            .extensions
            .iter()
            .filter_map(|extension| extension.grant_source())
            .collect();
        let rbac = rbac::Rbac::load(&store, sources)
            .await
            .map_err(|e| StartError::Store(e.to_string()))?;
        let resources = resources.with_rbac(rbac.clone());
        let service_accounts = service_accounts::ServiceAccounts::load_or_create(
            &config
                .data_dir
                .join("tls")
                .join(pki::SERVICE_ACCOUNT_KEY_FILE),
            &config.service_account_issuer,
            config.service_account_max_token_expiration,
            resources.clone(),
        )
        .map_err(StartError::Authentication)?;
        let mut authenticator = Authenticator::new(store.clone(), &pki.ca_cert_pem)
            .map_err(StartError::Tls)?
            .with_service_accounts(Arc::new(service_accounts));
        if let Some(oidc) = &config.oidc {
            if oidc.issuer_url == config.service_account_issuer {
                return Err(StartError::Authentication(
                    "--oidc-issuer-url and --service-account-issuer are the same: tokens of one would be taken for the other's; give them different URLs".into(),
                ));
            }
            let oidc = oidc::Oidc::new(oidc.clone()).map_err(StartError::Authentication)?;
            authenticator = authenticator.with_oidc(Arc::new(oidc));
        }

        let client_host = if address.ip().is_unspecified() {
            "127.0.0.1".to_string()
        } else {
            address.ip().to_string()
        };
        let server_address =
            SocketAddr::new(client_host.parse().expect("an IP address"), address.port());
        write_kubeconfigs(
            &config,
            &pki,
            &authenticator,
            &format!("https://{server_address}"),
        )
        .await
        .map_err(|e| StartError::Store(e.to_string()))?;

        let identity = leader_identity(address.port());
        let replicas = replicas::Replicas::new(identity.clone(), peer_address, pki.clone());
        let leadership = if config.shared_store {
            leader::Leadership::candidate(identity, config.election)
        } else {
            leader::Leadership::sole(identity)
        };
        let state = Arc::new(http::AppState {
            resources,
            authenticator,
            authorizer: Arc::new(extension::Chain {
                extensions: config.extensions.clone(),
                inner: rbac.clone(),
            }),
            rbac: Some(rbac.clone()),
            server_address: server_address.to_string(),
            advertised_address: advertised.map(|(_, address)| address),
            bookmark_interval: config.bookmark_interval,
            metrics: config.metrics,
            metrics_label: "management",
            serves_process_metrics: true,
            version: None,
            ca_pem: pki.ca_cert_pem.clone(),
            audit: config
                .audit
                .clone()
                .map(audit::AuditLog::open)
                .transpose()
                .map_err(StartError::Audit)?
                .map(Arc::new),
            replicas: Some(replicas.clone()),
            routes: config.routes.clone(),
            extensions: config.extensions.clone(),
            failed_proofs: Default::default(),
            leadership,
            stopping: tokio::sync::watch::Sender::new(false),
        });
        if config.shared_store {
            replicas
                .check_versions(&local::client(state.clone()))
                .await
                .map_err(StartError::ReplicaSkew)?;
        }
        Ok(Server {
            state,
            listener,
            tls,
            pki,
            config,
            rbac,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("bound listener")
    }

    pub fn resources(&self) -> Resources {
        self.state.resources.clone()
    }

    /// This server's whole HTTP surface as a tower service, with no socket: requests carry
    /// their caller as an [`auth::Peer`] extension (what [`Server::local_client`] wraps).
    pub fn router(&self) -> axum::Router {
        http::router(self.state.clone())
    }

    /// A kube-rs client served in-process by this server (see [`local`]).
    pub fn local_client(&self) -> kube::Client {
        local::client(self.state.clone())
    }

    /// A kube-rs client served in-process whose writes are refused while this replica does
    /// not lead: what the elected controllers use (see [`local::controller_client`]).
    pub fn controller_client(&self) -> kube::Client {
        local::controller_client(self.state.clone(), self.state.leadership.clone())
    }

    /// This replica's standing in the controllers' election.
    pub fn leadership(&self) -> Arc<leader::Leadership> {
        self.state.leadership.clone()
    }

    /// This replica among the others on its datastore (see [`replicas`]).
    pub fn replicas(&self) -> Arc<replicas::Replicas> {
        self.state
            .replicas
            .clone()
            .expect("a server's state knows its replicas")
    }

    pub fn ca_checksum(&self) -> String {
        self.pki.ca_checksum()
    }

    /// The running server as an extension sees it (its clients, replicas, addresses).
    pub fn handle(&self) -> extension::Handle {
        extension::Handle {
            state: self.state.clone(),
        }
    }

    /// Serves HTTPS and runs the background loops (garbage collection, namespace cleanup,
    /// compaction) until `shutdown` resolves.
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), StartError> {
        let stop_rx = self.state.stopping.subscribe();
        let election = tokio::spawn(leader::run(
            self.state.leadership.clone(),
            local::client(self.state.clone()),
            stop_rx.clone(),
        ));
        // What writes on the replica's own initiative runs on the elected replica only.
        let leader_loops = {
            let leadership = self.state.leadership.clone();
            let resources = self.state.resources.leader_only(leadership.clone());
            let compaction_interval = self.config.compaction_interval;
            let event_ttl = self.config.event_ttl;
            let server = self.handle();
            tokio::spawn(leader::while_leading(
                leadership,
                stop_rx.clone(),
                Duration::from_secs(3),
                move |term| {
                    let extended = server
                        .state
                        .extensions
                        .iter()
                        .flat_map(|extension| extension.lead(server.clone(), term.clone()));
                    let mut tasks: Vec<_> = extended.collect();
                    tasks.extend([
                        tokio::spawn(gc::run(resources.clone(), term.clone())),
                        tokio::spawn(gc::compact_periodically(
                            resources.store.clone(),
                            compaction_interval,
                            term.clone(),
                        )),
                        tokio::spawn(gc::expire_events(resources.clone(), event_ttl, term)),
                    ]);
                    tasks
                },
            ))
        };
        // Every replica keeps its Lease.
        let replica_lease = tokio::spawn(
            self.replicas()
                .run(local::client(self.state.clone()), stop_rx.clone()),
        );
        let extended: Vec<_> = self
            .state
            .extensions
            .iter()
            .flat_map(|extension| extension.run(self.handle(), stop_rx.clone()))
            .collect();
        let crd_follower = {
            let resources = self.state.resources.clone();
            let stop = stop_rx.clone();
            tokio::spawn(async move { resources.follow_crds(stop).await })
        };
        let rbac = tokio::spawn(
            self.rbac
                .clone()
                .follow(self.state.resources.store.clone(), stop_rx.clone()),
        );
        let app = http::router(self.state.clone());
        tracing::info!(address = %self.local_addr(), "serving the Kubernetes API over HTTPS");
        tls::serve(self.listener, self.tls, app, self.config.limits.clone(), {
            let state = self.state.clone();
            async move {
                shutdown.await;
                state.stopping.send_replace(true);
            }
        })
        .await?;
        let _ = tokio::join!(
            election,
            leader_loops,
            crd_follower,
            rbac,
            replica_lease,
            futures::future::join_all(extended)
        );
        Ok(())
    }
}

/// This process's name in the controllers' election, unique per start (a restarted replica
/// is a new candidate): `HOSTNAME_PORT_RANDOM`, so an operator sees which machine leads.
fn leader_identity(port: u16) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "lariat".into());
    let random = &uuid::Uuid::new_v4().simple().to_string()[..8];
    format!("{host}_{port}_{random}")
}

async fn load_stored_crds(resources: &Resources) -> Result<(), status::ApiError> {
    let scope = resources
        .scope("apiextensions.k8s.io", "customresourcedefinitions", None)
        .expect("CRD kind is built in");
    for crd in resources.list(&scope, &Default::default()).await?.items {
        resources.register_crd(&crd);
    }
    Ok(())
}

/// `default` (and `lariat-system` for lariat's own objects) exist from the first start.
async fn ensure_namespaces(
    resources: &Resources,
    names: impl IntoIterator<Item = &str>,
) -> Result<(), status::ApiError> {
    let scope = resources
        .scope("", "namespaces", None)
        .expect("namespaces are built in");
    let options = WriteOptions {
        field_manager: "lariat".into(),
        ..Default::default()
    };
    for name in names {
        match resources
            .create(&scope, json!({"metadata": {"name": name}}), &options)
            .await
        {
            Ok(_) | Err(status::ApiError::AlreadyExists { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Who the admin kubeconfigs belong to: rotating revokes every credential of this owner.
pub const ADMIN_OWNER: &str = "admin";
/// How long an admin credential lives (as k3s's client certificates).
const ADMIN_LIFETIME: Duration = Duration::from_secs(365 * 24 * 3600);
/// An admin credential this close to its expiry is replaced at start.
const ADMIN_RENEW_BEFORE: Duration = Duration::from_secs(30 * 24 * 3600);

/// `<data-dir>/kubeconfig.yaml` authenticates with an admin client certificate (as k3s does);
/// `<data-dir>/kubeconfig-token.yaml` with a bearer token whose hash alone is stored. Both
/// are readable by their owner only. A restart keeps credentials that are still valid (only
/// the server address in the files follows the listener); new ones are issued only when the
/// old ones were revoked (`lariat admin rotate`) or are within 30 days of expiry.
async fn write_kubeconfigs(
    config: &Config,
    pki: &pki::Pki,
    authenticator: &Authenticator,
    server: &str,
) -> Result<(), String> {
    let cert_path = config.data_dir.join("kubeconfig.yaml");
    let existing = std::fs::read_to_string(&cert_path).ok().and_then(|text| {
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.trim().strip_prefix(name).map(str::trim))
                .and_then(|b64| {
                    use base64::Engine;
                    base64::engine::general_purpose::STANDARD.decode(b64).ok()
                })
                .and_then(|pem| String::from_utf8(pem).ok())
        };
        Some((
            field("client-certificate-data:")?,
            field("client-key-data:")?,
        ))
    });
    let (cert_pem, key_pem) = match existing {
        Some((cert, key))
            if authenticator
                .certificate_remaining(&cert)
                .await
                .is_some_and(|left| left > ADMIN_RENEW_BEFORE) =>
        {
            (cert, key)
        }
        _ => {
            let issued = authenticator
                .issue_certificate(
                    pki,
                    "lariat-admin",
                    &["system:masters"],
                    ADMIN_OWNER,
                    ADMIN_LIFETIME,
                )
                .await
                .map_err(|e| e.to_string())?;
            tracing::info!(file = %cert_path.display(), "issued a new admin client certificate");
            (issued.cert_pem, issued.key_pem)
        }
    };
    let contents = pki::kubeconfig(
        server,
        &pki.ca_cert_pem,
        "lariat",
        "admin",
        pki::Credential::Certificate { cert_pem, key_pem },
    );
    pki::write_file(&cert_path, &contents, true).map_err(|e| e.to_string())?;
    let token_path = config.data_dir.join("kubeconfig-token.yaml");
    let existing = std::fs::read_to_string(&token_path).ok().and_then(|text| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix("token: ").map(String::from))
    });
    let token = match existing {
        Some(token)
            if authenticator
                .token_remaining(&token)
                .await
                .is_some_and(|left| left > ADMIN_RENEW_BEFORE) =>
        {
            token
        }
        _ => {
            tracing::info!(file = %token_path.display(), "issued a new admin token");
            authenticator
                .create_token(
                    "lariat-admin",
                    &["system:masters"],
                    ADMIN_OWNER,
                    ADMIN_LIFETIME,
                )
                .await
                .map_err(|e| e.to_string())?
        }
    };
    let contents = pki::kubeconfig(
        server,
        &pki.ca_cert_pem,
        "lariat",
        "admin-token",
        pki::Credential::Token(token),
    );
    pki::write_file(&token_path, &contents, true).map_err(|e| e.to_string())
}

/// Revokes every admin credential in `store` (certificates and tokens), so the next start of
/// a server on it issues new ones. Returns how many were revoked. The server must not be
/// running on this data directory (see [`DataDirLock`]).
pub async fn revoke_admin_credentials(store: Arc<dyn Store>) -> Result<usize, String> {
    Authenticator::new(store, "")?
        .revoke(ADMIN_OWNER)
        .await
        .map_err(|e| e.to_string())
}

/// An exclusive lock on a data directory, held by the server for as long as it runs, so a
/// second server or an offline command (`lariat admin rotate`) cannot work on it meanwhile.
pub struct DataDirLock {
    _file: std::fs::File,
}

impl DataDirLock {
    /// Takes the lock on `dir` (created with mode 0700 if missing), or says who holds it.
    pub fn acquire(dir: &std::path::Path) -> Result<DataDirLock, String> {
        create_private_dir(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let path = dir.join("server.lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        match file.try_lock() {
            Ok(()) => Ok(DataDirLock { _file: file }),
            Err(std::fs::TryLockError::WouldBlock) => Err(format!(
                "a lariat server is running on {}: stop it first",
                dir.display()
            )),
            Err(std::fs::TryLockError::Error(e)) => {
                Err(format!("cannot lock {}: {e}", path.display()))
            }
        }
    }
}

/// Creates `dir` readable by its owner only (it holds keys and the store), and narrows an
/// existing one to that.
pub fn create_private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        if let Err(e) = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)) {
            if e.kind() != std::io::ErrorKind::PermissionDenied {
                return Err(e);
            }
            // A volume's root that a kubelet made group-writable for the pod's fsGroup is
            // still owned by root: the data directory must be one of the server's own.
            let owner = std::fs::metadata(dir)?.uid();
            return Err(std::io::Error::new(
                e.kind(),
                format!(
                    "it is owned by uid {owner}, so it cannot be made private to this user: give the server a directory of its own, such as a subdirectory ({})",
                    dir.join("data").display()
                ),
            ));
        }
    }
    Ok(())
}
