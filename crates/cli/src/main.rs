//! The `lariat` binary: parses arguments and hands over to the crates that do the work.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use lariat_store::Store;

mod bench;
mod connect;
mod describe;
mod fleet;
mod generate;
mod helm;
mod import;
mod pivot;
mod providers;
mod token;

/// mimalloc rather than glibc's malloc: the server decodes and encodes JSON all day, and a
/// profile of `lariat bench lifecycle` spent a third of its CPU in glibc's malloc and free.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Turns transparent huge pages off for this process (and the processes it starts). mimalloc
/// asks for them on its arenas, and the kernel then backs every arena a thread touches with
/// 2 MiB pages, zeroed whole on first touch: measured on an idle server, 25 MiB of its 82 MiB
/// of heap, and 7% of the server's CPU in `bench api` spent zeroing them.
fn no_huge_pages() {
    // A kernel without transparent huge pages has nothing to turn off.
    let _ = rustix::thread::disable_transparent_huge_pages(true);
}

#[derive(Parser)]
#[command(
    name = "lariat",
    version,
    about = "Multi-cluster Kubernetes management from one binary"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the management server (Kubernetes-compatible API over HTTPS).
    Server(Box<ServerArgs>),
    /// Show a resource's status tree, like clusterctl describe.
    Describe {
        #[command(subcommand)]
        what: describe::DescribeCommand,
    },
    /// Print manifests, like clusterctl generate.
    Generate {
        #[command(subcommand)]
        what: generate::GenerateCommand,
    },
    /// Fleet (GitOps): which clusters have not converged, and why.
    Fleet {
        #[command(subcommand)]
        what: fleet::FleetCommand,
    },
    /// Manage clusters lariat did not create.
    Cluster {
        #[command(subcommand)]
        what: import::ClusterCommand,
    },
    /// Run the agent that connects a cluster to a lariat server (dialling out).
    Agent(import::AgentArgs),
    /// Print a kubeconfig that reaches a connected cluster through the lariat server.
    Kubeconfig(import::KubeconfigArgs),
    /// Bearer tokens for users of the management API: create (printed once), list, revoke.
    Token {
        #[command(subcommand)]
        what: token::TokenCommand,
    },
    /// Enable providers on a server, like clusterctl init (core, kubeadm and an infrastructure).
    Init(providers::InitArgs),
    /// Move a namespace's Clusters to another management server, or to and from a backup
    /// directory, like clusterctl move (with a preflight and a journal to resume from).
    Move(Box<pivot::MoveArgs>),
    /// Print the client's version and, unless --client, the server's (like kubectl version).
    Version {
        /// Print only the client's version.
        #[arg(long)]
        client: bool,
        /// Print what this lariat supports: Kubernetes versions it provisions and manages,
        /// agent versions it accepts, server versions that may run side by side.
        #[arg(long, conflicts_with = "client")]
        matrix: bool,
        /// Kubeconfig of the lariat server [default: $KUBECONFIG, ~/.kube/config, ./lariat-data/kubeconfig.yaml].
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
    },
    /// Administer a server's own credentials.
    Admin {
        #[command(subcommand)]
        what: AdminCommand,
    },
    /// Render Helm charts as Fleet bundles render them.
    Helm {
        #[command(subcommand)]
        what: helm::HelmCommand,
    },
    /// Measure the server and print figures.
    Bench {
        #[command(subcommand)]
        what: bench::BenchCommand,
    },
}

#[derive(Subcommand)]
enum AdminCommand {
    /// Revoke the admin kubeconfigs' certificate and token; the next server start issues new
    /// ones. Run it with the server stopped.
    Rotate(StoreArgs),
    /// Seal the shared CA and keys in the datastore with a new join token. Servers already
    /// running keep running; start each with the new token from then on.
    RotateToken(RotateTokenArgs),
    /// Copy a single server's state while it runs (the SQLite store, one consistent snapshot,
    /// with its CA, service-account key and Secrets' encryption key) into a new directory: a
    /// data directory, which `lariat server --data-dir` restores from. Replicas on etcd are
    /// backed up with `etcdctl snapshot save` (README, Backup and restore).
    Backup(BackupArgs),
    /// Print the admin kubeconfig the server wrote in its data directory: for a server whose
    /// files are out of reach, e.g. `kubectl exec -n lariat-system lariat-0 -- lariat admin
    /// kubeconfig`.
    Kubeconfig(AdminKubeconfigArgs),
}

#[derive(clap::Args)]
struct BackupArgs {
    /// The data directory of the server to back up.
    #[arg(long, default_value = "./lariat-data", env = "LARIAT_DATA_DIR")]
    data_dir: PathBuf,
    /// Where to write the backup: a directory that does not exist yet.
    #[arg(long)]
    output: PathBuf,
}

#[derive(clap::Args)]
struct RotateTokenArgs {
    /// The etcd datastore the servers share (--datastore-endpoint, as they were given it).
    #[command(flatten)]
    store: StoreArgs,
    #[command(flatten)]
    token: JoinToken,
    /// The token servers join with from now on.
    #[arg(
        long,
        env = "LARIAT_NEW_TOKEN",
        hide_env_values = true,
        required_unless_present = "new_token_file"
    )]
    new_token: Option<String>,
    /// Read the new token from this file instead (keeps it out of the process list).
    #[arg(long, conflicts_with = "new_token")]
    new_token_file: Option<PathBuf>,
}

/// The secret replicas on one datastore share (as k3s's `--token`).
#[derive(clap::Args)]
struct JoinToken {
    /// The secret servers sharing one etcd datastore join with: the first stores its CA,
    /// service-account key and encryption key there, sealed with it; every later server with
    /// the same token loads them. At least 16 characters, e.g. `openssl rand -hex 32`.
    #[arg(long, env = "LARIAT_JOIN_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Read the join token from this file instead (keeps it out of the process list).
    #[arg(long, conflicts_with = "token")]
    token_file: Option<PathBuf>,
}

impl JoinToken {
    fn read(&self) -> anyhow::Result<Option<String>> {
        match (&self.token, &self.token_file) {
            (Some(token), _) => Ok(Some(token.trim().to_string())),
            (None, Some(path)) => std::fs::read_to_string(path)
                .map(|token| Some(token.trim().to_string()))
                .with_context(|| format!("cannot read the join token from {}", path.display())),
            (None, None) => Ok(None),
        }
    }
}

#[derive(clap::Args)]
struct AdminKubeconfigArgs {
    /// Where the server keeps its state.
    #[arg(long, default_value = "./lariat-data", env = "LARIAT_DATA_DIR")]
    data_dir: PathBuf,
    /// The URL to reach the server at, replacing the listener's address the file names
    /// (e.g. https://lariat.example.com, or https://127.0.0.1:6443 through kubectl port-forward).
    #[arg(long)]
    server: Option<String>,
    /// The bearer-token kubeconfig instead of the client-certificate one.
    #[arg(long)]
    token: bool,
}

/// Where a server keeps its state.
#[derive(clap::Args)]
struct StoreArgs {
    /// Where the store, certificates and kubeconfig live.
    #[arg(long, default_value = "./lariat-data", env = "LARIAT_DATA_DIR")]
    data_dir: PathBuf,
    /// Use etcd instead of the embedded SQLite store, e.g. http://127.0.0.1:2379.
    #[arg(long, env = "LARIAT_DATASTORE_ENDPOINT")]
    datastore_endpoint: Option<String>,
    /// Key prefix in etcd, so several deployments can share one etcd.
    #[arg(long, default_value = "/lariat")]
    datastore_prefix: String,
    /// The CA (PEM) etcd's serving certificate is checked against: reach etcd over TLS
    /// (https:// endpoints).
    #[arg(long, env = "LARIAT_DATASTORE_CAFILE", requires = "datastore_endpoint")]
    datastore_cafile: Option<PathBuf>,
    /// The client certificate (PEM) lariat presents to etcd (etcd's --client-cert-auth).
    #[arg(long, env = "LARIAT_DATASTORE_CERTFILE", requires_all = ["datastore_cafile", "datastore_keyfile"])]
    datastore_certfile: Option<PathBuf>,
    /// The client certificate's key (PEM).
    #[arg(
        long,
        env = "LARIAT_DATASTORE_KEYFILE",
        requires = "datastore_certfile"
    )]
    datastore_keyfile: Option<PathBuf>,
}

impl StoreArgs {
    /// The TLS files for etcd, read.
    fn etcd_tls(&self) -> anyhow::Result<Option<lariat_store::etcd::EtcdTls>> {
        let read = |path: &PathBuf, what: &str| {
            std::fs::read(path).with_context(|| format!("cannot read {what} {}", path.display()))
        };
        let Some(ca) = &self.datastore_cafile else {
            return Ok(None);
        };
        let client = match (&self.datastore_certfile, &self.datastore_keyfile) {
            (Some(cert), Some(key)) => Some((
                read(cert, "--datastore-certfile")?,
                read(key, "--datastore-keyfile")?,
            )),
            _ => None,
        };
        Ok(Some(lariat_store::etcd::EtcdTls {
            ca: read(ca, "--datastore-cafile")?,
            client,
        }))
    }
}

#[derive(clap::Args)]
struct ServerArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Address to serve HTTPS on.
    #[arg(long, default_value = "127.0.0.1:6443", env = "LARIAT_LISTEN")]
    listen: String,
    /// Extra DNS names or IP addresses for the serving certificate (repeatable, or
    /// comma-separated).
    #[arg(long = "tls-san", env = "LARIAT_TLS_SAN", value_delimiter = ',')]
    tls_san: Vec<String>,
    /// The URL clusters and agents elsewhere reach this server at, e.g. https://lariat.example.com
    /// (a load balancer's): import manifests name it and its host joins the certificate.
    #[arg(long, env = "LARIAT_ADVERTISE_URL")]
    advertise_url: Option<String>,
    /// HOST:PORT the other replicas on the datastore reach this one at, to forward proxy
    /// requests for the clusters whose agents are connected here [default: the --listen
    /// address, or on 0.0.0.0 this machine's outbound address]; its host joins the certificate.
    #[arg(long, env = "LARIAT_PEER_ADDRESS")]
    peer_address: Option<String>,
    /// The image import manifests run the agent from: a private registry's or an air-gapped
    /// mirror's copy of lariat's image [default: ghcr.io/lariat-dev/lariat:v<this version>].
    #[arg(long, env = "LARIAT_AGENT_IMAGE")]
    agent_image: Option<String>,
    /// A Secret in the imported cluster's lariat-system namespace that the agent's pod pulls
    /// its image with (a private registry's credentials).
    #[arg(long, env = "LARIAT_AGENT_IMAGE_PULL_SECRET")]
    agent_image_pull_secret: Option<String>,
    /// Seconds between store compactions (0 disables); one interval of history is kept.
    #[arg(long, default_value_t = 300)]
    compaction_interval: u64,
    /// The 32-byte key Secrets are encrypted with at rest [default: <data-dir>/encryption.key,
    /// created on first start]. Servers sharing one etcd need the same key.
    #[arg(long)]
    encryption_key_file: Option<PathBuf>,
    /// Agent handshakes admitted per second; agents beyond it are told when to come back.
    #[arg(long, default_value_t = lariat_management::DEFAULT_HANDSHAKES_PER_SECOND)]
    agent_handshake_rate: f64,
    /// Serve the API only: run no controllers or providers (for API benchmarks).
    #[arg(long)]
    no_controllers: bool,
    /// A directory on this machine whose git repositories GitRepos may name with `file://`
    /// (repeat for several). None by default: a `file://` GitRepo could otherwise read any
    /// repository the server can.
    #[arg(long = "fleet-file-repos", value_name = "DIR")]
    fleet_file_repos: Vec<PathBuf>,
    /// The largest file a GitRepo's commit may hold; a larger one is refused by name and the
    /// last good commit stays deployed.
    #[arg(long, default_value_t = lariat_fleet::limits::DEFAULT_MAX_FILE_BYTES)]
    fleet_max_file_bytes: u64,
    /// The most one bundle's files may hold together, uncompressed.
    #[arg(long, default_value_t = lariat_fleet::limits::DEFAULT_MAX_BUNDLE_BYTES)]
    fleet_max_bundle_bytes: u64,
    /// The most files and directories one GitRepo commit may have.
    #[arg(long, default_value_t = lariat_fleet::limits::DEFAULT_MAX_FILES)]
    fleet_max_files: usize,
    /// Internal networks GitRepos may fetch from (CIDRs or addresses, comma-separated), e.g.
    /// an internal git server's. Loopback, link-local and private addresses are refused
    /// otherwise.
    #[arg(long, value_name = "NETWORKS", default_value = "")]
    fleet_allow_networks: String,
    /// How long an Event is kept after it was last seen, e.g. 1h, 30m (expired Events are
    /// looked for every sixth of it, at most every 10 minutes).
    #[arg(long, default_value = "1h")]
    event_ttl: String,
    /// Open connections allowed in total.
    #[arg(long, default_value_t = lariat_apiserver::tls::Limits::default().max_connections)]
    max_connections: usize,
    /// Open connections allowed from one client address.
    #[arg(long, default_value_t = lariat_apiserver::tls::Limits::default().max_connections_per_address)]
    max_connections_per_client: usize,
    /// Open connections none of whose requests has authenticated yet (health probes,
    /// agents before their handshake), in total; the oldest is closed to admit a new one.
    #[arg(long, default_value_t = lariat_apiserver::tls::Limits::default().max_unauthenticated_connections)]
    max_unauthenticated_connections: usize,
    /// Such connections from one client address.
    #[arg(long, default_value_t = lariat_apiserver::tls::Limits::default().max_unauthenticated_connections_per_address)]
    max_unauthenticated_connections_per_client: usize,
    /// How long a connection lives once authenticated, e.g. 1h (less up to a tenth at random);
    /// then it is asked to close (HTTP/2 GOAWAY) and clients reconnect. Unauthenticated
    /// connections live 30s.
    #[arg(long, default_value = "1h")]
    max_connection_age: String,
    /// Seconds a connection may stay open with no request in flight.
    #[arg(long, default_value_t = lariat_apiserver::tls::Limits::default().idle_timeout.as_secs())]
    idle_timeout: u64,
    /// The largest object stored, in bytes of JSON: a create, update or patch that would make
    /// an object larger is refused with 413 (etcd's default request limit, 1.5 MiB).
    #[arg(long, default_value_t = lariat_apiserver::limits::DEFAULT_MAX_OBJECT_BYTES)]
    max_object_bytes: usize,
    /// What the watch cache (recent changes, decoded once for every watcher) may hold, in
    /// bytes; the oldest changes go first.
    #[arg(long, default_value_t = lariat_apiserver::limits::DEFAULT_WATCH_CACHE_BYTES)]
    watch_cache_bytes: usize,
    /// The issuer (`iss`) of the ServiceAccount tokens this server signs (`kubectl create
    /// token`), and the audience it accepts them for.
    #[arg(long, default_value = lariat_apiserver::service_accounts::DEFAULT_ISSUER)]
    service_account_issuer: String,
    /// The longest lifetime a requested ServiceAccount token is granted, e.g. 24h.
    #[arg(long, default_value = "24h")]
    service_account_max_token_expiration: String,
    #[command(flatten)]
    oidc: OidcArgs,
    #[command(flatten)]
    join: JoinToken,
    /// Record every mutating request and every refusal in this file, as audit.k8s.io/v1
    /// Events (JSON lines, metadata only: no request or response bodies).
    #[arg(long)]
    audit_log_path: Option<PathBuf>,
    /// Megabytes the audit log may reach before it is rotated.
    #[arg(long, default_value_t = 100)]
    audit_log_maxsize: u64,
    /// Rotated audit logs kept.
    #[arg(long, default_value_t = 10)]
    audit_log_maxbackup: usize,
}

/// Users of an OpenID Connect provider (Dex, Keycloak, ...), as kube-apiserver's `--oidc-*`.
#[derive(clap::Args, Clone)]
struct OidcArgs {
    /// The provider's issuer URL (https): ID tokens it signs are accepted as bearer tokens.
    #[arg(long)]
    oidc_issuer_url: Option<String>,
    /// The client ID tokens must be issued for (their `aud`).
    #[arg(long, requires = "oidc_issuer_url")]
    oidc_client_id: Option<String>,
    /// The claim that names the user.
    #[arg(long, default_value = "sub")]
    oidc_username_claim: String,
    /// Put before every username [default: the issuer URL and `#`, except for the email
    /// claim]; `-` for none.
    #[arg(long)]
    oidc_username_prefix: Option<String>,
    /// The claim that lists the user's groups.
    #[arg(long)]
    oidc_groups_claim: Option<String>,
    /// Put before every group name.
    #[arg(long, default_value = "")]
    oidc_groups_prefix: String,
    /// The authority the provider's certificate is checked against [default: the system's].
    #[arg(long)]
    oidc_ca_file: Option<PathBuf>,
    /// The signature algorithms accepted (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "RS256")]
    oidc_signing_algs: Vec<String>,
    /// A claim every token must carry with this value, as KEY=VALUE (repeatable).
    #[arg(long)]
    oidc_required_claim: Vec<String>,
}

impl OidcArgs {
    fn config(self) -> anyhow::Result<Option<lariat_apiserver::oidc::OidcConfig>> {
        let Some(issuer) = self.oidc_issuer_url else {
            return Ok(None);
        };
        let Some(client_id) = self.oidc_client_id else {
            anyhow::bail!(
                "--oidc-issuer-url needs --oidc-client-id: the audience the provider issues tokens for"
            );
        };
        let mut config = lariat_apiserver::oidc::OidcConfig::new(&issuer, &client_id);
        config.username_claim = self.oidc_username_claim;
        config.username_prefix = self.oidc_username_prefix;
        config.groups_claim = self.oidc_groups_claim;
        config.groups_prefix = self.oidc_groups_prefix;
        config.ca_file = self.oidc_ca_file;
        config.signing_algs = self.oidc_signing_algs;
        config.required_claims = self.oidc_required_claim;
        Ok(Some(config))
    }
}

/// What is logged without `LARIAT_LOG`. kube-rs's client logs each failed request at ERROR
/// without the URL ("failed with error client error (Connect)"); lariat's callers report the
/// same failure once, saying what they were reaching.
const DEFAULT_LOG: &str = "info,kube_client::client::builder=off";

fn main() -> std::process::ExitCode {
    no_huge_pages();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("LARIAT_LOG")
                .unwrap_or_else(|_| DEFAULT_LOG.into()),
        )
        .with_writer(std::io::stderr)
        // Colour only for a person at a terminal: log files stay plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let result = runtime.block_on(async {
        match cli.command {
            Command::Server(args) => server(*args).await,
            Command::Bench { what } => bench::run(what).await,
            Command::Generate { what } => generate::run(what),
            Command::Helm { what } => helm::run(what),
            Command::Init(args) => providers::init(args).await,
            Command::Move(args) => pivot::run(*args).await,
            Command::Cluster {
                what: import::ClusterCommand::Import(args),
            } => import::import(args).await,
            Command::Agent(args) => import::agent(args).await,
            Command::Kubeconfig(args) => import::kubeconfig(args).await,
            Command::Token { what } => token::run(what).await,
            Command::Describe { what } => describe::run(what).await,
            Command::Fleet { what } => fleet::run(what).await,
            Command::Admin {
                what: AdminCommand::Rotate(args),
            } => rotate_admin(args).await,
            Command::Admin {
                what: AdminCommand::RotateToken(args),
            } => rotate_join_token(args).await,
            Command::Admin {
                what: AdminCommand::Kubeconfig(args),
            } => print_admin_kubeconfig(args),
            Command::Admin {
                what: AdminCommand::Backup(args),
            } => backup(args),
            Command::Version { matrix: true, .. } => {
                print!("{}", lariat_api::support::matrix());
                Ok(())
            }
            Command::Version {
                client, kubeconfig, ..
            } => version(client, kubeconfig).await,
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn open_store(args: &StoreArgs) -> anyhow::Result<Arc<dyn Store>> {
    let data_dir = &args.data_dir;
    Ok(match &args.datastore_endpoint {
        Some(endpoint) => {
            let endpoints: Vec<String> =
                endpoint.split(',').map(|e| e.trim().to_string()).collect();
            let tls = args.etcd_tls()?;
            Arc::new(
                lariat_store::etcd::EtcdStore::connect_with(
                    &endpoints,
                    &args.datastore_prefix,
                    tls.as_ref(),
                )
                .await
                .with_context(|| {
                    format!("cannot reach etcd at {endpoint}: check --datastore-endpoint")
                })?,
            )
        }
        None => {
            lariat_apiserver::create_private_dir(data_dir).with_context(|| {
                format!("cannot create the data directory {}", data_dir.display())
            })?;
            let path = data_dir.join("state.db");
            Arc::new(
                lariat_store::sqlite::SqliteStore::open(&path)
                    .with_context(|| format!("cannot open the store at {}", path.display()))?,
            )
        }
    })
}

/// `lariat version`: this binary's version and commit, then the server's, as kubectl prints
/// client and server versions.
async fn version(client_only: bool, kubeconfig: Option<PathBuf>) -> anyhow::Result<()> {
    println!(
        "Client Version: lariat {} (commit {})",
        env!("CARGO_PKG_VERSION"),
        option_env!("LARIAT_COMMIT").unwrap_or("unknown: not a release build")
    );
    if client_only {
        return Ok(());
    }
    let client = connect::client(kubeconfig.as_ref()).await?;
    let info = client.apiserver_version().await.context(
        "cannot reach the server: is `lariat server` running, and is --kubeconfig right?",
    )?;
    match info.git_version.split_once("-lariat.") {
        Some((kubernetes, lariat)) => {
            println!("Server Version: lariat {lariat} (Kubernetes API {kubernetes})")
        }
        None => println!("Server Version: {} (not a lariat server)", info.git_version),
    }
    Ok(())
}

/// `lariat admin kubeconfig`: the admin kubeconfig the server wrote, optionally pointed at
/// another address.
fn print_admin_kubeconfig(args: AdminKubeconfigArgs) -> anyhow::Result<()> {
    let file = if args.token {
        "kubeconfig-token.yaml"
    } else {
        "kubeconfig.yaml"
    };
    let path = args.data_dir.join(file);
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "cannot read {}: pass the --data-dir the server runs with, after its first start",
            path.display()
        )
    })?;
    let mut kubeconfig: kube::config::Kubeconfig = serde_yaml_ng::from_str(&text)
        .ok()
        .filter(|k: &kube::config::Kubeconfig| {
            k.clusters.iter().any(|c| c.cluster.is_some()) && !k.auth_infos.is_empty()
        })
        .with_context(|| {
            format!(
                "{} is not a whole kubeconfig: restart the server to write it again",
                path.display()
            )
        })?;
    if let Some(server) = args.server {
        lariat_apiserver::pki::server_url(&server)
            .map_err(|e| anyhow::anyhow!("invalid --server {e}"))?;
        for cluster in kubeconfig
            .clusters
            .iter_mut()
            .filter_map(|c| c.cluster.as_mut())
        {
            cluster.server = Some(server.trim_end_matches('/').to_string());
        }
    }
    print!("{}", serde_yaml_ng::to_string(&kubeconfig)?);
    Ok(())
}

/// `lariat admin rotate-token`: the datastore's shared secrets sealed with a new join token.
async fn rotate_join_token(args: RotateTokenArgs) -> anyhow::Result<()> {
    let Some(old) = args.token.read()? else {
        anyhow::bail!("give the token the servers run with (--token or --token-file)");
    };
    if args.store.datastore_endpoint.is_none() {
        anyhow::bail!("give the etcd the servers share (--datastore-endpoint)");
    }
    let store = open_store(&args.store).await?;
    let new = JoinToken {
        token: args.new_token,
        token_file: args.new_token_file,
    }
    .read()?
    .unwrap_or_default();
    lariat_apiserver::bootstrap::rotate(&*store, &old, &new)
        .await
        .map_err(|e| {
            anyhow::anyhow!("{}", e.to_string().replace("a join token", "the new token"))
        })?;
    println!(
        "the datastore's CA and keys are sealed with the new token; start servers with it from now on"
    );
    Ok(())
}

/// `lariat admin rotate`: revokes the admin credentials offline, so no server is serving with
/// them while they change; the next start writes new kubeconfigs.
/// `lariat admin backup`: the store's snapshot and the files its contents need (the CA its
/// credential records were issued by, the key its Secrets are encrypted with, the key its
/// ServiceAccount tokens are signed with), private to their owner. Serving certificates and
/// kubeconfigs are left out: a server started on the copy writes them anew.
fn backup(args: BackupArgs) -> anyhow::Result<()> {
    let database = args.data_dir.join("state.db");
    match std::fs::File::open(&database) {
        Ok(_) if database.is_file() => {}
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => anyhow::bail!(
            "cannot read {}: permission denied; run the backup as the user the server runs as",
            database.display()
        ),
        _ => anyhow::bail!(
            "{} holds no SQLite store (state.db): pass the --data-dir of a single server; replicas on etcd are backed up with etcdctl snapshot save",
            args.data_dir.display()
        ),
    }
    if args.output.exists() {
        anyhow::bail!(
            "{} already exists: name a new directory for the backup",
            args.output.display()
        );
    }
    // A backup kept inside what it backs up is lost with it.
    let data_dir = args.data_dir.canonicalize()?;
    let parent = args
        .output
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    if parent
        .canonicalize()
        .is_ok_and(|parent| parent.starts_with(&data_dir))
    {
        anyhow::bail!(
            "{} is inside the data directory it backs up: put the backup elsewhere",
            args.output.display()
        );
    }
    let tls = args.output.join("tls");
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&tls)
            .with_context(|| format!("cannot create {}", tls.display()))?;
    }
    lariat_store::sqlite::backup(&database, &args.output.join("state.db"))
        .map_err(|e| anyhow::anyhow!("cannot copy the store: {e}"))?;
    use lariat_apiserver::pki::{CA_CERT_FILE, CA_KEY_FILE, SERVICE_ACCOUNT_KEY_FILE};
    let mut files = vec![
        format!("tls/{CA_CERT_FILE}"),
        format!("tls/{CA_KEY_FILE}"),
        format!("tls/{SERVICE_ACCOUNT_KEY_FILE}"),
    ];
    let key_in_data_dir = args.data_dir.join("encryption.key").is_file();
    if key_in_data_dir {
        files.push("encryption.key".into());
    }
    for file in &files {
        let from = args.data_dir.join(file);
        let bytes =
            std::fs::read(&from).with_context(|| format!("cannot read {}", from.display()))?;
        lariat_apiserver::pki::write_file(&args.output.join(file), bytes, true)
            .with_context(|| format!("cannot write {file} into the backup"))?;
    }
    println!(
        "backed up {} into {}; restore with: lariat server --data-dir {}",
        args.data_dir.display(),
        args.output.display(),
        args.output.display()
    );
    if !key_in_data_dir {
        println!(
            "the server's Secrets are encrypted with the --encryption-key-file it runs with: keep that file with the backup"
        );
    }
    Ok(())
}

async fn rotate_admin(args: StoreArgs) -> anyhow::Result<()> {
    if !args.data_dir.join("tls").is_dir() {
        anyhow::bail!(
            "{} is not a lariat data directory: pass the --data-dir the server runs with",
            args.data_dir.display()
        );
    }
    let _lock = lariat_apiserver::DataDirLock::acquire(&args.data_dir)
        .map_err(|e| anyhow::anyhow!("{e}: the rotation takes effect at its next start"))?;
    let store = open_store(&args).await?;
    let revoked = lariat_apiserver::revoke_admin_credentials(store)
        .await
        .map_err(|e| anyhow::anyhow!("cannot revoke the admin credentials: {e}"))?;
    for file in ["kubeconfig.yaml", "kubeconfig-token.yaml"] {
        match std::fs::remove_file(args.data_dir.join(file)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("cannot remove {file}")),
        }
    }
    println!(
        "revoked {revoked} admin credential(s); start the server to write new kubeconfigs in {}",
        args.data_dir.display()
    );
    Ok(())
}

/// The management plane's server configuration before flags: the generic server, with the
/// write rules of the kinds the management plane serves from the crates that own them, and
/// `plane` (the agents' tunnels, their scope, the cluster proxy) and the `simulated`
/// workload clusters' route.
pub fn management_config(
    data_dir: &std::path::Path,
    plane: &lariat_management::Plane,
    simulated: &lariat_provider_inmemory::simulated::SimulatedClusters,
) -> lariat_apiserver::Config {
    let mut config = lariat_apiserver::Config::new(data_dir);
    // Cluster API's kinds and its providers', Fleet's, Rancher's and lariat's own.
    config.kinds = lariat_api::builtin_crds();
    config.extensions = vec![
        std::sync::Arc::new(plane.clone()),
        std::sync::Arc::new(lariat_management::rancher::Rancher),
        std::sync::Arc::new(simulated.clone()),
    ];
    // Rancher's Fleet workspaces exist from the first start: `fleet-default` for the clusters
    // lariat provisions or imports, `fleet-local` for the management cluster.
    config.namespaces = [
        lariat_api::fleet::DEFAULT_WORKSPACE,
        lariat_api::fleet::LOCAL_WORKSPACE,
    ]
    .map(String::from)
    .to_vec();
    config.strategies = lariat_api::capi::admission::strategies()
        .and(lariat_provider_aws::admission::strategies())
        .and(lariat_management::rancher::strategies());
    config.validators = lariat_management::rancher::validators();
    // The default `edit` and `view` roles reach Cluster API's and Fleet's kinds as they reach
    // Deployments.
    config.edit_and_view_groups = [
        "cluster.x-k8s.io",
        "infrastructure.cluster.x-k8s.io",
        "bootstrap.cluster.x-k8s.io",
        "controlplane.cluster.x-k8s.io",
        "clusterctl.cluster.x-k8s.io",
        lariat_api::fleet::GROUP,
    ]
    .map(String::from)
    .to_vec();
    // Git pushes from GitHub and GitLab, proven by the GitRepos' webhook secrets.
    config.routes = vec![lariat_apiserver::routes::Route::post(
        lariat_fleet::webhook::PATH,
        |client, headers, body| async move {
            lariat_fleet::webhook::handle(client, &headers, &body)
                .await
                .map_err(|refused| (refused.code(), refused.to_string()))
        },
    )];
    config
}

async fn server(args: ServerArgs) -> anyhow::Result<()> {
    // Checked before anything is written to the data directory.
    let join_token = args.join.read()?;
    if join_token.is_some() && args.store.datastore_endpoint.is_none() {
        anyhow::bail!(
            "--token joins servers that share an etcd datastore: give --datastore-endpoint too (a server on its embedded store has no one to join)"
        );
    }
    let _lock = lariat_apiserver::DataDirLock::acquire(&args.store.data_dir)
        .map_err(|e| anyhow::anyhow!("{e} (or pass another --data-dir)"))?;
    let store = open_store(&args.store).await?;
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .with_context(|| {
            format!(
                "cannot listen on {}: is another server running? (--listen)",
                args.listen
            )
        })?;
    let mut image = lariat_management::AgentImage::default();
    if let Some(reference) = args.agent_image.clone() {
        image.reference = reference;
    }
    image.pull_secret = args.agent_image_pull_secret.clone();
    let plane = lariat_management::Plane::new(args.agent_handshake_rate, image)
        .map_err(|e| anyhow::anyhow!(e))?;
    let simulated = lariat_provider_inmemory::simulated::SimulatedClusters::new();
    let mut config = management_config(&args.store.data_dir, &plane, &simulated);
    configure(&mut config, &args)?;
    config.join_token = join_token;
    let fleet_limits = fleet_limits(&args)?;
    let server = lariat_apiserver::Server::start(config, store, listener).await?;
    eprintln!(
        "lariat server listening on https://{}; kubeconfig: {}",
        server.local_addr(),
        args.store.data_dir.join("kubeconfig.yaml").display()
    );
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let until_stopped = |mut stopped: tokio::sync::watch::Receiver<bool>| async move {
        let _ = stopped.wait_for(|s| *s).await;
    };
    let mut loops = Vec::new();
    if !args.no_controllers {
        // In-process agents dial the server's own address, as any agent would.
        let address = server.local_addr();
        let host = match address.ip() {
            ip if ip.is_unspecified() => "127.0.0.1".to_string(),
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            ip => ip.to_string(),
        };
        let home = lariat_provider_inmemory::agents::Home {
            server: format!("https://{host}:{}", address.port()),
            ca_checksum: server.ca_checksum(),
        };
        let client = server.controller_client();
        simulated.serve_at(&server.handle());
        // Clusters lariat provisions get their agent as imported ones do, with a token that
        // lasts as long as `lariat cluster import`'s (an image pull can take a while).
        let manifests =
            plane.import_manifests(server.handle(), std::time::Duration::from_secs(24 * 3600));
        let fleet_settings = lariat_fleet::Settings {
            dir: args.store.data_dir.join("fleet"),
            file_roots: args.fleet_file_repos.clone(),
            limits: fleet_limits,
        };
        // The controllers run on the replica that leads, for as long as it leads: each term
        // starts them on fresh caches and ends them when the lease is lost.
        let term = move |term: tokio::sync::watch::Receiver<bool>| {
            // One set of caches for core and providers alike: each kind is watched once.
            let caches = lariat_controllers::cache::Caches::new(client.clone());
            vec![
                tokio::spawn(lariat_controllers::run(
                    caches.clone(),
                    until_stopped(term.clone()),
                )),
                tokio::spawn(lariat_fleet::run(
                    caches.clone(),
                    fleet_settings.clone(),
                    until_stopped(term.clone()),
                )),
                tokio::spawn(lariat_controllers::agent_install::run(
                    caches.clone(),
                    manifests.clone(),
                    until_stopped(term.clone()),
                )),
                tokio::spawn(providers::run_enabled(
                    caches,
                    simulated.clone(),
                    home.clone(),
                    term,
                )),
            ]
        };
        loops = vec![tokio::spawn(lariat_apiserver::leader::while_leading(
            server.leadership(),
            stopped.clone(),
            CONTROLLER_GRACE,
            term,
        ))];
    }
    // Whatever has not stopped within the grace period is cut short, as controller-runtime's
    // gracefulShutdownTimeout does (a connection that never drains, say). Acknowledged writes
    // are durable, so nothing is lost.
    let mut stopping = stopped.clone();
    tokio::spawn(async move {
        if stopping.wait_for(|s| *s).await.is_ok() {
            tokio::time::sleep(SHUTDOWN_GRACE).await;
            eprintln!(
                "lariat server stopped: what was still running after {} s was cut short",
                SHUTDOWN_GRACE.as_secs()
            );
            std::process::exit(0);
        }
    });
    // Controllers finish the reconciles in flight, within a bound, and while the server still
    // serves them: kube-runtime's wait forever for a cache that was still filling when they
    // were stopped, keeping that first list's store reads (and their permits) for good.
    let mut stopped = stopped;
    let controllers_stopped = async move {
        let _ = stopped.wait_for(|s| *s).await;
        // The election's supervisor gives the term's tasks CONTROLLER_GRACE, then aborts them.
        let finished = tokio::time::timeout(
            CONTROLLER_GRACE + Duration::from_secs(1),
            futures::future::join_all(loops.iter_mut()),
        )
        .await
        .is_ok();
        if !finished {
            tracing::info!(
                "controllers still busy {} s after the stop were cancelled",
                CONTROLLER_GRACE.as_secs()
            );
            loops.iter().for_each(tokio::task::JoinHandle::abort);
        }
    };
    let (served, ()) = tokio::join!(
        server.serve(async move {
            shutdown_signal().await;
            let _ = stop.send(true);
        }),
        controllers_stopped
    );
    served?;
    eprintln!("lariat server stopped");
    Ok(())
}

/// The server's configuration from its flags (beyond the management plane's own).
fn configure(config: &mut lariat_apiserver::Config, args: &ServerArgs) -> anyhow::Result<()> {
    config.tls_sans = args.tls_san.clone();
    config.advertise_url = args.advertise_url.clone();
    config.peer_address = args.peer_address.clone();
    config.compaction_interval = Duration::from_secs(args.compaction_interval);
    config.encryption_key_file = args.encryption_key_file.clone();
    config.metrics = Some(lariat_controllers::metrics::render);
    config.event_ttl = import::parse_ttl(&args.event_ttl)
        .map_err(|e| anyhow::anyhow!("{}", e.to_string().replace("--ttl", "--event-ttl")))?;
    config.service_account_issuer = args.service_account_issuer.clone();
    config.service_account_max_token_expiration =
        import::parse_ttl(&args.service_account_max_token_expiration).map_err(|e| {
            anyhow::anyhow!(
                "{}",
                e.to_string()
                    .replace("--ttl", "--service-account-max-token-expiration")
            )
        })?;
    config.oidc = args.oidc.clone().config()?;
    config.shared_store = args.store.datastore_endpoint.is_some();
    config.audit = args
        .audit_log_path
        .clone()
        .map(|path| lariat_apiserver::audit::AuditConfig {
            path,
            max_size_megabytes: args.audit_log_maxsize,
            max_backups: args.audit_log_maxbackup,
        });
    config.limits = lariat_apiserver::tls::Limits {
        max_connections: args.max_connections,
        max_connections_per_address: args.max_connections_per_client,
        max_unauthenticated_connections: args.max_unauthenticated_connections.max(1),
        max_unauthenticated_connections_per_address: args
            .max_unauthenticated_connections_per_client
            .max(1),
        idle_timeout: Duration::from_secs(args.idle_timeout.max(1)),
        max_connection_age: import::parse_ttl(&args.max_connection_age).map_err(|e| {
            anyhow::anyhow!("{}", e.to_string().replace("--ttl", "--max-connection-age"))
        })?,
        ..Default::default()
    };
    // Below 1 MiB the server could not hold a ConfigMap or Secret Kubernetes allows, nor its
    // own CustomResourceDefinitions.
    const SMALLEST_OBJECT_LIMIT: usize = 1024 * 1024;
    if args.max_object_bytes < SMALLEST_OBJECT_LIMIT {
        anyhow::bail!(
            "--max-object-bytes {} is too small: it must be at least {SMALLEST_OBJECT_LIMIT} (1 MiB, the largest ConfigMap or Secret Kubernetes allows)",
            args.max_object_bytes
        );
    }
    config.resource_limits = lariat_apiserver::limits::ResourceLimits {
        max_object_bytes: args.max_object_bytes,
        watch_cache_bytes: args.watch_cache_bytes,
    };
    Ok(())
}

/// Fleet's limits on what it reads from git, from their flags.
fn fleet_limits(args: &ServerArgs) -> anyhow::Result<lariat_fleet::Limits> {
    Ok(lariat_fleet::Limits {
        max_file_bytes: args.fleet_max_file_bytes,
        max_bundle_bytes: args.fleet_max_bundle_bytes,
        max_files: args.fleet_max_files,
        allowed_networks: lariat_fleet::limits::parse_networks(&args.fleet_allow_networks)
            .map_err(|e| anyhow::anyhow!("--fleet-allow-networks: {e}"))?,
    })
}

/// How long a stopping server waits for its controllers' reconciles in flight.
const CONTROLLER_GRACE: Duration = Duration::from_secs(3);
/// How long a stopping server waits for everything (connections draining included).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

pub async fn shutdown_signal() {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    tracing::info!("shutting down");
}
