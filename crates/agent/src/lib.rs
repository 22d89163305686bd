//! lariat's agent. It runs in a downstream cluster (or, for in-memory clusters, inside the
//! server process) and dials OUT to the lariat server, so clusters behind NAT or firewalls can
//! be managed. One long-lived HTTPS connection, upgraded to the tunnel protocol, carries every
//! request the server proxies to the cluster's API: the agent serves HTTP/2 on it and forwards
//! each stream to the Kubernetes API with plain kube-rs calls and its own identity.
//!
//! It trusts the server only after checking the server's CA against the checksum it was given
//! (sha256 of the CA certificate PEM, as Rancher's `--ca-checksum`), registers once with a
//! registration token, keeps the per-cluster credential the server then issues in a Secret of
//! its own cluster, and reconnects forever with capped exponential backoff and full jitter.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use rustls_pki_types::{CertificateDer, ServerName, pem::PemObject};
use sha2::{Digest, Sha256};

mod access;
mod bundles;
pub use bundles::{BUNDLE_DEPLOYMENT_LABEL, FIELD_MANAGER, Session};

use lariat_api::tunnel::{
    AGENT_VERSION_HEADER as VERSION_HEADER, CLUSTER_HEADER, CREDENTIAL_HEADER,
};
pub use lariat_api::tunnel::{HANDOFF_PATH, PROTOCOL};
/// Where the agent keeps the credential the server issued, in its own cluster.
pub const CREDENTIAL_NAMESPACE: &str = "lariat-system";
pub const CREDENTIAL_SECRET: &str = "lariat-agent-credential";
/// The longest wait a Retry-After may impose.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);
/// How long dialling, TLS, the CA download and the upgrade may take before the agent gives up
/// on this attempt (a server or proxy that accepts and then stalls).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the agent's watches run before they are renewed: kube-apiserver's own default
/// (its `--min-request-timeout`), rather than kube-rs's 290 s, which at 1,000 clusters with
/// five watches of their own API each is 17 renewals a second for nothing. The management
/// API ends an agent's watches sooner (`lariat_management::agents::MAX_WATCH`, so a revoked
/// credential's watch does not last), and a watch that dies silently with its connection is
/// started afresh with the next tunnel (see `connect_and_serve`).
pub(crate) const WATCH_SECONDS: u32 = 1800;

/// A watch of [`WATCH_SECONDS`].
pub(crate) fn watch_config() -> kube::runtime::watcher::Config {
    kube::runtime::watcher::Config::default().timeout(WATCH_SECONDS)
}
/// The largest request body the agent forwards (the API's own object limit).
const MAX_REQUEST_BYTES: usize = 3 * 1024 * 1024;

/// What an agent needs: where to dial, how to prove itself, and its cluster's API.
#[derive(Clone)]
pub struct Config {
    /// `https://host:port` of the lariat server, or of several replicas separated by commas
    /// (tried in turn, see [`servers`]).
    pub server: String,
    /// A registration token (`<id>.<secret>`).
    pub token: String,
    /// sha256 (hex) of the server's CA certificate PEM.
    pub ca_checksum: String,
    /// The downstream cluster's API, with the agent's identity.
    pub downstream: kube::Client,
    /// Backoff bounds between attempts.
    pub backoff: Backoff,
    /// The Secret (in `lariat-system` of its cluster) where the agent keeps its credential;
    /// [`CREDENTIAL_SECRET`] unless several agents share one cluster (benchmarks).
    pub credential_secret: String,
    /// Told whether the tunnel is up, for whoever runs the agent in-process.
    pub connected: Option<tokio::sync::watch::Sender<bool>>,
    /// Which HTTP proxy, if any, the server is reached through with CONNECT (from
    /// `HTTPS_PROXY` and `NO_PROXY`, as curl and Go programs read them).
    pub proxy: Arc<hyper_util::client::proxy::matcher::Matcher>,
    /// Pull this cluster's BundleDeployments and apply them (Fleet's agent), and keep the RBAC
    /// its ClusterAccess says; off only where many agents share one cluster (benchmarks of the
    /// tunnels alone).
    pub bundles: bool,
}

impl Config {
    pub fn new(
        server: String,
        token: String,
        ca_checksum: String,
        downstream: kube::Client,
    ) -> Config {
        Config {
            server,
            token,
            ca_checksum,
            downstream,
            backoff: Backoff::default(),
            credential_secret: CREDENTIAL_SECRET.to_string(),
            connected: None,
            proxy: Arc::new(hyper_util::client::proxy::matcher::Matcher::from_env()),
            bundles: true,
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Backoff {
    pub base: Duration,
    pub cap: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_millis(500),
            cap: Duration::from_secs(30),
        }
    }
}

impl Backoff {
    /// Full jitter: uniformly random in [0, min(cap, base * 2^attempt)], so a crowd of agents
    /// that lost the server at the same moment does not come back at the same moment.
    pub fn delay(&self, attempt: u32) -> Duration {
        let ceiling = self
            .base
            .saturating_mul(2u32.saturating_pow(attempt.min(20)))
            .min(self.cap);
        ceiling.mul_f64(rand::random::<f64>())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot reach the server: {0}")]
    Connect(#[from] std::io::Error),
    #[error("TLS: {0}")]
    Tls(String),
    #[error(
        "the server's CA does not match --ca-checksum (got {got}); check the checksum or the server URL"
    )]
    CaMismatch { got: String },
    #[error("HTTP: {0}")]
    Http(String),
    #[error("the server refused the agent ({status}): {message}")]
    Refused { status: u16, message: String },
    #[error("the server is busy; retry in {0:?}")]
    Busy(Duration),
    #[error("the downstream API: {0}")]
    Downstream(#[from] kube::Error),
    #[error("invalid server URL {0:?}: expected https://host:port")]
    Url(String),
    #[error("the HTTP proxy refused the tunnel: {0}")]
    Proxy(String),
}

/// Runs the agent until `shutdown` resolves: connect, serve the tunnel, and on any failure
/// wait (backoff with full jitter, or the server's Retry-After) and connect again. It never
/// gives up; each failure is one log line that says why.
pub async fn run(config: Config, shutdown: impl Future<Output = ()> + Send) {
    let mut attempt = 0u32;
    let mut use_credential = true;
    // The verified CA, kept across attempts: fetched again only when TLS fails with it.
    let mut trusted: Option<Trusted> = None;
    // What the Fleet half reaches the server with, once the tunnel holds a credential.
    let (sessions, sessions_seen) = tokio::sync::watch::channel(None);
    let _access = config.bundles.then(|| {
        AbortOnDrop(tokio::spawn(access::run(
            config.downstream.clone(),
            sessions_seen.clone(),
        )))
    });
    let _bundles = config.bundles.then(|| {
        AbortOnDrop(tokio::spawn(bundles::run(
            config.downstream.clone(),
            sessions_seen,
        )))
    });
    // The credential last issued, held here too in case keeping it in the cluster failed.
    let mut issued: Option<String> = None;
    // Where to dial: the configuration's server, until a handoff kept in the cluster says
    // otherwise.
    let mut home = Home {
        server: config.server.clone(),
        ca_checksum: config.ca_checksum.clone(),
        token: config.token.clone(),
    };
    // Where in a list of servers to start: anywhere, so a crowd of agents spreads over them.
    let mut turn = rand::random::<u32>() as usize;
    tokio::pin!(shutdown);
    loop {
        let started = Instant::now();
        let outcome = tokio::select! {
            _ = &mut shutdown => return,
            outcome = connect_and_serve(&config, &mut home, &mut trusted, &mut issued, use_credential, &sessions, turn) => outcome,
        };
        // The next attempt goes to the next server of a list (replicas): one that went away
        // or turned the agent down is not asked again first.
        turn = turn.wrapping_add(1);
        if let Some(connected) = &config.connected {
            connected.send_replace(false);
        }
        if matches!(outcome, Err(Error::Tls(_)) | Err(Error::CaMismatch { .. })) {
            trusted = None;
        }
        let wait = match outcome {
            Ok(()) => {
                tracing::info!(server = %home.server, "tunnel closed; reconnecting");
                attempt = 0;
                use_credential = true;
                config.backoff.delay(0)
            }
            Err(Error::Busy(after)) => {
                // Trust the server's pacing, within reason: a middlebox's day-long Retry-After
                // must not park the agent.
                let after = after.min(MAX_RETRY_AFTER);
                tracing::info!(server = %home.server, "server busy; retrying in {after:?}");
                after + config.backoff.delay(0)
            }
            Err(error) => {
                if let Error::Refused { status: 403, .. } = &error {
                    // A refused credential (the server forgot it): register afresh next time.
                    use_credential = !use_credential;
                }
                if started.elapsed() > Duration::from_secs(60) {
                    attempt = 0;
                }
                let wait = config.backoff.delay(attempt);
                attempt = attempt.saturating_add(1);
                tracing::warn!(server = %home.server, %error, "agent cannot connect; retrying in {wait:?}");
                wait
            }
        };
        tokio::select! {
            _ = &mut shutdown => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// The servers a configured `server` names: one URL, or the URLs of several replicas
/// separated by commas, which the agent tries in turn.
pub fn servers(server: &str) -> Vec<&str> {
    server
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect()
}

/// host, port and TLS name of `https://host:port`.
fn parse_server(server: &str) -> Result<(String, u16), Error> {
    let uri: http::Uri = server.parse().map_err(|_| Error::Url(server.into()))?;
    if uri.scheme_str() != Some("https") {
        return Err(Error::Url(server.into()));
    }
    let host = uri.host().ok_or_else(|| Error::Url(server.into()))?;
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    Ok((host, uri.port_u16().unwrap_or(443)))
}

async fn tls_connect(
    server: &str,
    proxy: &hyper_util::client::proxy::matcher::Matcher,
    tls: rustls::ClientConfig,
) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, Error> {
    tokio::time::timeout(CONNECT_TIMEOUT, tls_connect_unbounded(server, proxy, tls))
        .await
        .map_err(|_| Error::Http(format!("no TLS connection within {CONNECT_TIMEOUT:?}")))?
}

async fn tls_connect_unbounded(
    server: &str,
    proxy: &hyper_util::client::proxy::matcher::Matcher,
    tls: rustls::ClientConfig,
) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, Error> {
    let (host, port) = parse_server(server)?;
    let uri: http::Uri = server.parse().map_err(|_| Error::Url(server.into()))?;
    let tcp = match proxy.intercept(&uri) {
        // Behind an egress proxy: a CONNECT tunnel, with TLS to lariat inside it.
        Some(intercept) => {
            let mut tunnel = hyper_util::client::legacy::connect::proxy::Tunnel::new(
                intercept.uri().clone(),
                hyper_util::client::legacy::connect::HttpConnector::new(),
            );
            if let Some(auth) = intercept.basic_auth() {
                tunnel = tunnel.with_auth(auth.clone());
            }
            tower::ServiceExt::oneshot(tunnel, uri)
                .await
                .map_err(|e| Error::Proxy(e.to_string()))?
                .into_inner()
        }
        None => tokio::net::TcpStream::connect((host.as_str(), port)).await?,
    };
    tcp.set_nodelay(true)?;
    let name = ServerName::try_from(host.clone()).map_err(|_| Error::Url(server.into()))?;
    tokio_rustls::TlsConnector::from(Arc::new(tls))
        .connect(name, tcp)
        .await
        .map_err(|e| Error::Tls(e.to_string()))
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Fetches the server's CA from `/cacerts` without trusting the connection, and trusts it only
/// if its sha256 matches the checksum: the checksum is the trust anchor.
pub async fn fetch_ca(
    server: &str,
    proxy: &hyper_util::client::proxy::matcher::Matcher,
    checksum: &str,
) -> Result<Trusted, Error> {
    let insecure = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Tls(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider())))
        .with_no_client_auth();
    let stream = tls_connect(server, proxy, insecure).await?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| Error::Http(e.to_string()))?;
    tokio::spawn(connection);
    let (host, _) = parse_server(server)?;
    let request = Request::get("/cacerts")
        .header(header::HOST, host)
        .body(Empty::<Bytes>::new())
        .map_err(|e| Error::Http(e.to_string()))?;
    let body = tokio::time::timeout(CONNECT_TIMEOUT, async {
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| Error::Http(e.to_string()))?;
        Ok::<_, Error>(
            Limited::new(response.into_body(), 64 * 1024)
                .collect()
                .await
                .map_err(|e| Error::Http(e.to_string()))?
                .to_bytes(),
        )
    })
    .await
    .map_err(|_| Error::Http(format!("no CA from the server within {CONNECT_TIMEOUT:?}")))??;
    let got: String = Sha256::digest(&body)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if !got.eq_ignore_ascii_case(checksum.trim()) {
        return Err(Error::CaMismatch { got });
    }
    let mut roots = rustls::RootCertStore::empty();
    let mut ca = Vec::new();
    for cert in CertificateDer::pem_slice_iter(&body) {
        let cert = cert.map_err(|e| Error::Tls(e.to_string()))?;
        ca.push(cert.to_vec());
        roots.add(cert).map_err(|e| Error::Tls(e.to_string()))?;
    }
    let tls = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Tls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Trusted { tls, ca })
}

/// The server's CA once its checksum matched: as TLS configuration, and as certificates for
/// the Fleet half's API client.
#[derive(Clone)]
pub struct Trusted {
    pub tls: rustls::ClientConfig,
    /// The CA certificates (DER).
    pub ca: Vec<Vec<u8>>,
}

/// Aborts a task when dropped, so a background task ends with whatever owns it.
pub(crate) struct AbortOnDrop(pub(crate) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Accepts any certificate: used only to download the CA whose checksum is then verified.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls_pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Where an agent dials and how it registers there.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Home {
    pub server: String,
    pub ca_checksum: String,
    pub token: String,
}

/// What the agent keeps in its cluster's Secret: the credential its server issued, and the
/// server a handoff sent it to. The handoff outlives a restart with the configuration it
/// was made under, not a new one (`lariat cluster import` again, with other flags): what
/// the user says last wins.
#[derive(Default)]
struct Stored {
    credential: Option<String>,
    home: Option<Home>,
}

async fn stored(downstream: &kube::Client, name: &str, configured: &str) -> Result<Stored, Error> {
    let secrets: Api<Secret> = Api::namespaced(downstream.clone(), CREDENTIAL_NAMESPACE);
    let Some(data) = secrets.get_opt(name).await?.and_then(|s| s.data) else {
        return Ok(Stored::default());
    };
    let text = |key: &str| {
        data.get(key)
            .map(|v| String::from_utf8_lossy(&v.0).to_string())
    };
    let home = match (text("server"), text("caChecksum"), text("token")) {
        (Some(server), Some(ca_checksum), Some(token))
            if text("configured").as_deref() == Some(configured) =>
        {
            Some(Home {
                server,
                ca_checksum,
                token,
            })
        }
        _ => None,
    };
    Ok(Stored {
        credential: text("credential"),
        home,
    })
}

/// Takes a handoff (`lariat move`): checks the new server's CA against the checksum, keeps
/// the new home in the cluster's Secret in place of the old server's credential, and asks
/// the tunnel to close, so the next connection registers with the new server.
async fn hand_off(config: &Config, body: &[u8]) -> Result<(), (StatusCode, String)> {
    let home: Home = serde_json::from_slice(body).map_err(|e| {
        (
            StatusCode::BAD_REQUEST,
            format!("a handoff is {{server, caChecksum, token}}: {e}"),
        )
    })?;
    parse_server(&home.server).map_err(|e| (StatusCode::BAD_REQUEST, e.to_string()))?;
    if home.token.is_empty() {
        return Err((
            StatusCode::BAD_REQUEST,
            "a handoff needs a registration token".into(),
        ));
    }
    // A typo must not strand the agent: the new server has to prove itself first.
    fetch_ca(&home.server, &config.proxy, &home.ca_checksum)
        .await
        .map_err(|e| {
            (
                StatusCode::BAD_GATEWAY,
                format!("the agent cannot trust {}: {e}", home.server),
            )
        })?;
    let write = async {
        ensure_namespace(&config.downstream, CREDENTIAL_NAMESPACE).await?;
        let secrets: Api<Secret> = Api::namespaced(config.downstream.clone(), CREDENTIAL_NAMESPACE);
        use base64::Engine as _;
        let encode = |v: &str| base64::engine::general_purpose::STANDARD.encode(v);
        let data = serde_json::json!({"server": encode(&home.server), "caChecksum": encode(&home.ca_checksum),
            "token": encode(&home.token), "configured": encode(&config.server)});
        if secrets.get_opt(&config.credential_secret).await?.is_some() {
            let mut data = data;
            data["credential"] = serde_json::Value::Null;
            secrets
                .patch(
                    &config.credential_secret,
                    &PatchParams::default(),
                    &Patch::Merge(serde_json::json!({"data": data})),
                )
                .await?;
        } else {
            let secret = serde_json::from_value(serde_json::json!({
                "metadata": {"name": config.credential_secret, "namespace": CREDENTIAL_NAMESPACE},
                "data": data,
            }))
            .map_err(kube::Error::SerdeError)?;
            secrets.create(&PostParams::default(), &secret).await?;
        }
        Ok::<_, kube::Error>(())
    };
    write.await.map_err(|e| {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the agent cannot keep its new server in its cluster: {e}"),
        )
    })?;
    tracing::info!(server = %home.server, "handed off to another server; reconnecting there");
    Ok(())
}

/// Creates namespace `name` in the agent's cluster if it does not exist.
pub(crate) async fn ensure_namespace(downstream: &kube::Client, name: &str) -> kube::Result<()> {
    let namespaces: Api<Namespace> = Api::all(downstream.clone());
    if namespaces.get_opt(name).await?.is_none() {
        let namespace: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))
                .expect("a namespace");
        match namespaces.create(&PostParams::default(), &namespace).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

async fn store_credential(
    downstream: &kube::Client,
    name: &str,
    credential: &str,
) -> Result<(), Error> {
    ensure_namespace(downstream, CREDENTIAL_NAMESPACE).await?;
    let secrets: Api<Secret> = Api::namespaced(downstream.clone(), CREDENTIAL_NAMESPACE);
    let secret = serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": CREDENTIAL_NAMESPACE},
        "stringData": {"credential": credential},
    });
    secrets
        .patch(
            name,
            &PatchParams::apply("lariat-agent").force(),
            &Patch::Apply(secret),
        )
        .await?;
    Ok(())
}

/// Stores the credential in the agent's cluster; a failure is logged, not fatal: the agent
/// holds the credential in memory and tries again on its next connection.
async fn keep_credential(config: &Config, credential: &str) {
    if let Err(error) =
        store_credential(&config.downstream, &config.credential_secret, credential).await
    {
        tracing::warn!(%error, "cannot keep the agent credential in the cluster; holding it in memory and retrying on the next connection");
    }
}

/// One connection: check the CA, upgrade, then serve the tunnel until it closes.
async fn connect_and_serve(
    config: &Config,
    home: &mut Home,
    trusted: &mut Option<Trusted>,
    issued: &mut Option<String>,
    use_credential: bool,
    sessions: &tokio::sync::watch::Sender<Option<Session>>,
    turn: usize,
) -> Result<(), Error> {
    // The cluster's Secret says where to dial, once a handoff wrote it there; what was held
    // for the old server is forgotten.
    let kept = stored(
        &config.downstream,
        &config.credential_secret,
        &config.server,
    )
    .await;
    if let Ok(Stored {
        home: Some(kept), ..
    }) = &kept
        && kept != home
    {
        *home = kept.clone();
        *trusted = None;
        *issued = None;
    }
    // Several servers (replicas) are tried in turn; all of them share one CA.
    let listed = servers(&home.server);
    let server = listed
        .get(turn % listed.len().max(1))
        .map_or_else(|| home.server.clone(), |s| s.to_string());
    let server = &server;
    let verified = match trusted {
        Some(verified) => verified.clone(),
        None => {
            let verified = fetch_ca(server, &config.proxy, &home.ca_checksum).await?;
            *trusted = Some(verified.clone());
            verified
        }
    };
    let tls = verified.tls.clone();
    let credential = if use_credential {
        let stored = match kept {
            Ok(stored) => stored.credential,
            // The cluster's API is unreachable: a credential in memory still opens the tunnel.
            Err(_) if issued.is_some() => None,
            Err(error) => return Err(error),
        };
        match (stored, issued.as_deref()) {
            // Keeping the issued credential failed last time: try again, use it regardless.
            (stored, Some(held)) if stored.as_deref() != Some(held) => {
                keep_credential(config, held).await;
                Some(held.to_string())
            }
            (stored, _) => stored,
        }
    } else {
        None
    };
    let bearer = credential.as_deref().unwrap_or(&home.token);
    let response = request_tunnel(config, server, tls, bearer).await?;
    let newly_issued = response
        .headers()
        .get(CREDENTIAL_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    if let Some(credential) = &newly_issued {
        *issued = Some(credential.clone());
        keep_credential(config, credential).await;
    }
    let cluster = response
        .headers()
        .get(CLUSTER_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    if let (Some(credential), Some(cluster)) = (newly_issued.or(credential), cluster) {
        let uri: http::Uri = server.parse().map_err(|_| Error::Url(server.clone()))?;
        let session = Session {
            server: server.clone(),
            ca: verified.ca.clone(),
            credential,
            cluster,
            proxy: config.proxy.intercept(&uri).map(|i| i.uri().clone()),
        };
        // Sent even when it is the same session: its watches of the management API may hang
        // on a connection that died with the old tunnel (the tunnel's pings notice in
        // seconds, a silent watch only when it times out: the server ends an agent's watches
        // within 5 minutes), so every new tunnel starts them afresh.
        sessions.send_replace(Some(session));
    }
    let upgraded = hyper::upgrade::on(response)
        .await
        .map_err(|e| Error::Http(e.to_string()))?;
    tracing::info!(server = %server, "tunnel up");
    if let Some(connected) = &config.connected {
        connected.send_replace(true);
    }
    let handed_off = Arc::new(tokio::sync::Notify::new());
    let (for_service, notify) = (Arc::new(config.clone()), handed_off.clone());
    let connection = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .max_concurrent_streams(256)
        .keep_alive_interval(Duration::from_secs(10))
        .keep_alive_timeout(Duration::from_secs(10))
        .serve_connection(
            upgraded,
            hyper::service::service_fn(move |request| {
                forward(for_service.clone(), notify.clone(), request)
            }),
        );
    tokio::pin!(connection);
    tokio::select! {
        served = connection.as_mut() => served.map_err(|e| Error::Http(e.to_string())),
        _ = handed_off.notified() => {
            // The handoff's answer goes out before the connection closes.
            connection.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(Duration::from_secs(5), connection).await;
            Ok(())
        }
    }
}

/// Asks `server` to upgrade a connection to the tunnel, as `bearer`: the server's answer
/// once it switched protocols; busy (with its Retry-After) or refused (with its message)
/// otherwise.
async fn request_tunnel(
    config: &Config,
    server: &str,
    tls: rustls::ClientConfig,
    bearer: &str,
) -> Result<hyper::Response<hyper::body::Incoming>, Error> {
    let stream = tls_connect(server, &config.proxy, tls).await?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| Error::Http(e.to_string()))?;
    tokio::spawn(connection.with_upgrades());
    let (host, port) = parse_server(server)?;
    let request = Request::get("/v3/connect")
        .header(header::HOST, format!("{host}:{port}"))
        .header(header::CONNECTION, "Upgrade")
        .header(header::UPGRADE, PROTOCOL)
        .header(header::AUTHORIZATION, format!("Bearer {bearer}"))
        .header(VERSION_HEADER, lariat_api::support::LARIAT)
        .body(Empty::<Bytes>::new())
        .map_err(|e| Error::Http(e.to_string()))?;
    let response = tokio::time::timeout(CONNECT_TIMEOUT, sender.send_request(request))
        .await
        .map_err(|_| {
            Error::Http(format!(
                "no answer to the upgrade within {CONNECT_TIMEOUT:?}"
            ))
        })?
        .map_err(|e| Error::Http(e.to_string()))?;
    match response.status() {
        StatusCode::SWITCHING_PROTOCOLS => {}
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => {
            let after = response
                .headers()
                .get(header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok())
                .unwrap_or(5);
            return Err(Error::Busy(Duration::from_secs(after)));
        }
        status => {
            let body = Limited::new(response.into_body(), 64 * 1024)
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let message = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v["message"].as_str().map(String::from))
                .unwrap_or_else(|| String::from_utf8_lossy(&body).to_string());
            return Err(Error::Refused {
                status: status.as_u16(),
                message,
            });
        }
    }
    Ok(response)
}

/// Forwards one proxied request to the downstream API with the agent's own credential,
/// impersonating the caller the server names.
async fn forward(
    config: Arc<Config>,
    handed_off: Arc<tokio::sync::Notify>,
    request: Request<Incoming>,
) -> Result<Response<kube::client::Body>, Infallible> {
    let downstream = config.downstream.clone();
    let (parts, body) = request.into_parts();
    let body = match Limited::new(body, MAX_REQUEST_BYTES).collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => {
            return Ok(status(
                StatusCode::PAYLOAD_TOO_LARGE,
                "request body too large or cut",
            ));
        }
    };
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    if parts.uri.path() == HANDOFF_PATH && parts.method == http::Method::POST {
        return Ok(match hand_off(&config, &body).await {
            Ok(()) => {
                handed_off.notify_one();
                status(StatusCode::OK, "handed off")
            }
            Err((code, message)) => {
                tracing::warn!(%message, "refused a handoff");
                status(code, &message)
            }
        });
    }
    let mut builder = Request::builder().method(parts.method).uri(path);
    for (name, value) in &parts.headers {
        // The credential is the agent's own; the identity is the one the server names with
        // Impersonate-* (it drops whatever its caller sent and puts the caller's own, and only
        // the server speaks on the tunnel). No front-proxy `X-Remote-*` header, no cookie.
        let hop_or_identity = name == header::HOST
            || name == header::AUTHORIZATION
            || name == header::CONNECTION
            || name == header::PROXY_AUTHORIZATION
            || name == header::COOKIE
            || name.as_str().starts_with("x-remote-");
        if !hop_or_identity {
            builder = builder.header(name, value);
        }
    }
    let Ok(request) = builder.body(kube::client::Body::from(body.to_vec())) else {
        return Ok(status(StatusCode::BAD_REQUEST, "malformed proxied request"));
    };
    match downstream.send(request).await {
        Ok(response) => Ok(response),
        Err(error) => Ok(status(
            StatusCode::BAD_GATEWAY,
            &format!("the agent cannot reach its cluster's API: {error}"),
        )),
    }
}

/// A Kubernetes `Status` response.
fn status(code: StatusCode, message: &str) -> Response<kube::client::Body> {
    let (outcome, reason) = match code {
        StatusCode::OK => ("Success", ""),
        StatusCode::PAYLOAD_TOO_LARGE => ("Failure", "RequestEntityTooLarge"),
        StatusCode::BAD_REQUEST => ("Failure", "BadRequest"),
        _ => ("Failure", "ServiceUnavailable"),
    };
    let body = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": outcome,
        "message": message, "reason": reason, "code": code.as_u16()});
    let mut response = Response::new(kube::client::Body::from(body.to_string().into_bytes()));
    *response.status_mut() = code;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_jittered_and_capped() {
        let backoff = Backoff {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(30),
        };
        for attempt in 0..40 {
            let ceiling = Duration::from_secs(1 << attempt.min(5)).min(Duration::from_secs(30));
            assert!(backoff.delay(attempt) <= ceiling);
        }
        let samples: std::collections::HashSet<u128> =
            (0..50).map(|_| backoff.delay(10).as_millis()).collect();
        assert!(samples.len() > 10, "delays are spread, not one value");
    }

    #[test]
    fn server_urls_must_be_https_with_a_host() {
        assert_eq!(
            parse_server("https://10.0.0.1:6443").unwrap(),
            ("10.0.0.1".into(), 6443)
        );
        assert_eq!(parse_server("https://lariat.example").unwrap().1, 443);
        assert!(parse_server("http://lariat.example").is_err());
        assert!(parse_server("lariat").is_err());
    }
}
