//! The server's half of the agent tunnels. An agent in a downstream cluster dials OUT to
//! `/v3/connect`, authenticates with a registration token or its cluster credential, and
//! upgrades the HTTPS connection; over the upgraded connection the server speaks HTTP/2 as the
//! client and the agent as the server. HTTP/2 gives the tunnel many concurrent streams, flow
//! control per stream, pings and a bounded stream count, so a watch through the tunnel is just
//! a long response. The server never opens a connection to a downstream cluster: it proxies
//! `/k8s/clusters/<namespace>/<name>/...` into the tunnel of that Cluster.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::watcher;
use lariat_api::management::{self, AGENT_CREDENTIAL_TYPE, NAMESPACE};
use serde_json::json;

use crate::auth::sha256_hex;
use crate::auth::{User, same_secret};
use crate::status::ApiError;

/// The `Upgrade` protocol agents ask for.
pub const PROTOCOL: &str = "lariat-tunnel/1";
/// Response header carrying a newly issued cluster credential to the agent (once).
pub const CREDENTIAL_HEADER: &str = "x-lariat-agent-credential";
/// Response header naming the Cluster the agent now serves.
pub const CLUSTER_HEADER: &str = "x-lariat-cluster";
/// The agent's version (`0.1.0`), sent with its handshake; held to the support matrix.
pub const AGENT_VERSION_HEADER: &str = "x-lariat-agent-version";
/// On agent credential Secrets: which Cluster the credential belongs to (see [`cluster_label`]).
const CLUSTER_LABEL: &str = "management.lariat.dev/cluster";

/// A label value for a Cluster (`namespace/name` may be longer than a label allows).
fn cluster_label(cluster: &str) -> String {
    sha256_hex(cluster)[..40].to_string()
}
/// Reset streams one tunnel tolerates before it is treated as abusive (the agent caps
/// concurrent streams; requests beyond its cap queue in the HTTP/2 client).
const MAX_STREAMS: u32 = 256;

/// A connected agent's tunnel.
#[derive(Clone)]
struct Tunnel {
    sender: SendRequest<Body>,
    /// Tells connections apart, so an old one ending does not remove its successor.
    id: u64,
    since: Instant,
    /// The lariat version the agent reported in its handshake.
    agent_version: String,
}

/// The Cluster condition that warns of an agent newer than the server.
pub const AGENT_VERSION_CONDITION: &str = "AgentVersionSupported";

/// Connected tunnels by Cluster (`namespace/name`), the handshake admission budget, and the
/// budget of failed attempts per client address.
pub struct Tunnels {
    connected: Mutex<HashMap<String, Tunnel>>,
    next_id: std::sync::atomic::AtomicU64,
    admission: Mutex<Admission>,
    failures: Mutex<HashMap<IpAddr, Bucket>>,
    /// Agent credentials recently accepted on the API, by the hash of the token: an agent's
    /// every request would otherwise read its credential and its Cluster again.
    api_credentials: Mutex<HashMap<String, (String, Instant)>>,
    /// Wakes the reporter when a tunnel opens or closes.
    changed: tokio::sync::Notify,
}

/// How long an agent credential accepted on the API is trusted without looking again: a
/// revoked credential (its Cluster deleted, or a new one issued) is refused after at most this.
const API_CREDENTIAL_TTL: Duration = Duration::from_secs(10);
/// Accepted credentials remembered at most (the cache is emptied past it).
const API_CREDENTIALS: usize = 65_536;

/// Failed handshakes one client address may make: a burst, then this many per second. An
/// address past it is refused before its token is even looked at, so a flood of bad tokens
/// costs the store nothing and never touches the budget valid agents are admitted from.
const FAILURE_BURST: f64 = 60.0;
const FAILURES_PER_SECOND: f64 = 5.0;
/// Addresses whose failure budget is remembered at most; idle ones are forgotten first.
const FAILURE_ADDRESSES: usize = 65_536;

#[derive(Clone, Copy)]
struct Bucket {
    tokens: f64,
    last: Instant,
}

impl Bucket {
    fn refill(&mut self, now: Instant) {
        let elapsed = now.duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * FAILURES_PER_SECOND).min(FAILURE_BURST);
        self.last = now;
    }
}

/// Handshakes admitted per second: a token bucket, so a reconnection storm after a restart is
/// spread out by telling agents when to come back instead of melting the server.
struct Admission {
    tokens: f64,
    last: Instant,
    per_second: f64,
    /// Refusals in the current and the previous second: how many agents are waiting.
    window: Instant,
    refused_now: u64,
    refused_before: u64,
}

impl Default for Tunnels {
    fn default() -> Self {
        Tunnels::with_rate(DEFAULT_HANDSHAKES_PER_SECOND)
    }
}

/// Agent handshakes admitted per second unless configured otherwise.
pub const DEFAULT_HANDSHAKES_PER_SECOND: f64 = 1000.0;

impl Tunnels {
    pub fn with_rate(per_second: f64) -> Tunnels {
        let per_second = per_second.max(1.0);
        Tunnels {
            connected: Mutex::default(),
            next_id: Default::default(),
            admission: Mutex::new(Admission {
                tokens: per_second,
                last: Instant::now(),
                per_second,
                window: Instant::now(),
                refused_now: 0,
                refused_before: 0,
            }),
            failures: Mutex::default(),
            api_credentials: Mutex::default(),
            changed: tokio::sync::Notify::new(),
        }
    }

    /// The Cluster whose live agent credential `token` is, for the API (see
    /// [`credential_cluster`]), remembered for [`API_CREDENTIAL_TTL`].
    pub async fn api_credential(&self, client: &kube::Client, token: &str) -> Option<String> {
        let hash = sha256_hex(token);
        if let Some((cluster, at)) = self.api_credentials.lock().expect("lock").get(&hash)
            && at.elapsed() < API_CREDENTIAL_TTL
        {
            return Some(cluster.clone());
        }
        // Timed from before the lookup, so a slow one does not stretch the window.
        let looked_at = Instant::now();
        let cluster = credential_cluster(client, token).await;
        let mut cache = self.api_credentials.lock().expect("lock");
        match &cluster {
            Some(cluster) => {
                if cache.len() >= API_CREDENTIALS {
                    cache.clear();
                }
                cache.insert(hash, (cluster.clone(), looked_at));
            }
            None => {
                cache.remove(&hash);
            }
        }
        cluster
    }

    /// Whether `address` still has failed attempts left; if not, in how many seconds it has.
    pub(crate) fn may_try(&self, address: IpAddr) -> Result<(), u64> {
        let mut failures = self.failures.lock().expect("lock");
        let Some(bucket) = failures.get_mut(&address) else {
            return Ok(());
        };
        bucket.refill(Instant::now());
        if bucket.tokens >= 1.0 {
            Ok(())
        } else {
            Err(((1.0 - bucket.tokens) / FAILURES_PER_SECOND)
                .ceil()
                .max(1.0) as u64)
        }
    }

    /// Counts a failed attempt against `address`.
    pub(crate) fn failed(&self, address: IpAddr) {
        let now = Instant::now();
        let mut failures = self.failures.lock().expect("lock");
        if failures.len() >= FAILURE_ADDRESSES && !failures.contains_key(&address) {
            failures.retain(|_, b| {
                b.refill(now);
                b.tokens < FAILURE_BURST
            });
            if failures.len() >= FAILURE_ADDRESSES {
                // Every remembered address is still failing: forget one rather than grow.
                if let Some(any) = failures.keys().next().copied() {
                    failures.remove(&any);
                }
            }
        }
        let bucket = failures.entry(address).or_insert(Bucket {
            tokens: FAILURE_BURST,
            last: now,
        });
        bucket.refill(now);
        bucket.tokens = (bucket.tokens - 1.0).max(0.0);
    }

    /// Whether a handshake may proceed now; if not, after how many seconds the agent should
    /// come back. The wait is random over as many seconds as the waiting crowd needs at the
    /// admitted rate, so the crowd returns spread out rather than all at once.
    fn admit(&self) -> Result<(), u64> {
        let mut bucket = self.admission.lock().expect("lock");
        let now = Instant::now();
        let refill = now.duration_since(bucket.last).as_secs_f64() * bucket.per_second;
        bucket.tokens = (bucket.tokens + refill).min(bucket.per_second);
        bucket.last = now;
        let since_window = now.duration_since(bucket.window);
        if since_window >= Duration::from_secs(1) {
            bucket.refused_before = if since_window < Duration::from_secs(2) {
                bucket.refused_now
            } else {
                0
            };
            bucket.refused_now = 0;
            bucket.window = now;
        }
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Ok(());
        }
        bucket.refused_now += 1;
        let waiting = bucket.refused_now.max(bucket.refused_before) as f64;
        let spread = (waiting / bucket.per_second).ceil().max(1.0) as u64;
        use rand::Rng;
        Err(rand::rng().random_range(1..=spread))
    }

    /// Whether `cluster` has a live tunnel.
    pub fn is_connected(&self, cluster: &str) -> bool {
        self.get(cluster).is_some()
    }

    fn get(&self, cluster: &str) -> Option<Tunnel> {
        let mut connected = self.connected.lock().expect("lock");
        match connected.get(cluster) {
            Some(tunnel) if !tunnel.sender.is_closed() => Some(tunnel.clone()),
            Some(_) => {
                connected.remove(cluster);
                None
            }
            None => None,
        }
    }

    /// Drops `cluster`'s tunnel `id` if it is still the one held: the agent has one
    /// connection at a time, and a newer one is up elsewhere.
    fn disconnect_stale(&self, cluster: &str, id: u64) {
        let mut connected = self.connected.lock().expect("lock");
        if connected.get(cluster).is_some_and(|t| t.id == id) {
            connected.remove(cluster);
        }
    }

    /// Drops `cluster`'s tunnel (its Cluster is gone): dropping the last sender closes it.
    pub(crate) fn disconnect(&self, cluster: &str) {
        if self
            .connected
            .lock()
            .expect("lock")
            .remove(cluster)
            .is_some()
        {
            tracing::info!(cluster = %cluster, "closing the tunnel of a deleted cluster");
        }
    }

    fn keys(&self) -> Vec<String> {
        self.connected
            .lock()
            .expect("lock")
            .keys()
            .cloned()
            .collect()
    }

    /// Connected clusters and since when.
    pub fn connected(&self) -> Vec<(String, Duration)> {
        let connected = self.connected.lock().expect("lock");
        connected
            .iter()
            .filter(|(_, t)| !t.sender.is_closed())
            .map(|(k, t)| (k.clone(), t.since.elapsed()))
            .collect()
    }
}

/// A random lowercase alphanumeric string.
fn random(len: usize) -> String {
    use rand::Rng;
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..len)
        .map(|_| CHARS[rng.random_range(0..CHARS.len())] as char)
        .collect()
}

/// A new token `<id>.<secret>` and the hash of its secret.
pub fn new_token() -> (String, String, String) {
    let (id, secret, hash) = new_token_parts();
    (format!("{id}.{secret}"), id, hash)
}

/// A new token's id, secret and the secret's SHA-256 (hex), for tokens of other shapes.
pub fn new_token_parts() -> (String, String, String) {
    let (id, secret) = (random(6), random(32));
    let hash = sha256_hex(&secret);
    (id, secret, hash)
}

/// Creates a ClusterRegistrationToken for the Cluster `namespace/name` valid for `ttl`,
/// through any client, and returns the token (`<id>.<secret>`); only the secret's hash is
/// stored. The token registers that Cluster only, by uid: not one created again under its
/// name.
pub async fn create_registration_token(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    ttl: Duration,
) -> kube::Result<String> {
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &cluster_resource());
    let uid = clusters.get(name).await?.metadata.uid.unwrap_or_default();
    let (token, id, hash) = new_token();
    let expires =
        chrono::Utc::now() + chrono::Duration::from_std(ttl).unwrap_or(chrono::Duration::days(1));
    let tokens: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NAMESPACE,
        &management::registration_token_resource(),
    );
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": management::API_VERSION,
        "kind": "ClusterRegistrationToken",
        "metadata": {"name": id, "namespace": NAMESPACE},
        "spec": {"clusterNamespace": namespace, "clusterName": name, "clusterUID": uid, "tokenHash": hash,
                 "expirationTimestamp": expires.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)},
    }))
    .expect("a well-formed ClusterRegistrationToken");
    tokens.create(&PostParams::default(), &object).await?;
    Ok(token)
}

/// Whom an agent's bearer token identifies.
struct Identity {
    /// `namespace/name` of the Cluster.
    cluster: String,
    /// Whether it was a registration token (so the agent needs a credential of its own).
    registering: bool,
}

/// What any token that is not a live one gets, whichever way it is wrong: telling a wrong
/// secret from an unknown id would let anyone find out which clusters exist (a credential's
/// id is derived from its cluster's name).
const UNKNOWN_TOKEN: &str =
    "unknown, revoked or wrong agent token: create a new one with lariat cluster import";

/// A refused agent credential, answered with what was wrong (whoever asked counts and logs
/// the refusal, with the path and address it came to).
fn unauthorized(message: &str) -> ApiError {
    tracing::debug!("agent refused: {message}");
    ApiError::Forbidden {
        message: message.to_string(),
    }
}

/// The Cluster a still-valid registration token registers.
pub async fn registration_cluster(client: &kube::Client, token: &str) -> Result<String, ApiError> {
    match authenticate(client, token).await? {
        Identity {
            cluster,
            registering: true,
        } => Ok(cluster),
        _ => Err(unauthorized("not a registration token")),
    }
}

/// Checks a bearer token: first as an agent credential, then as a registration token. Every
/// refusal says what was wrong, without echoing the secret.
async fn authenticate(client: &kube::Client, token: &str) -> Result<Identity, ApiError> {
    let Some((id, secret)) = token.split_once('.') else {
        return Err(unauthorized(
            "malformed agent token: expected <id>.<secret>",
        ));
    };
    if id.is_empty()
        || id.len() > 63
        || !id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
    {
        return Err(unauthorized("malformed agent token id"));
    }
    let hash = sha256_hex(secret);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    if let Some(credential) = secrets
        .get_opt(&format!("agent-{id}"))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .filter(|s| s.type_.as_deref() == Some(AGENT_CREDENTIAL_TYPE))
    {
        let data = credential.data.unwrap_or_default();
        let field = |k: &str| {
            data.get(k)
                .map(|v| String::from_utf8_lossy(&v.0).to_string())
                .unwrap_or_default()
        };
        if !same_secret(field("hash").as_bytes(), hash.as_bytes()) {
            return Err(unauthorized(UNKNOWN_TOKEN));
        }
        // A credential dies with its Cluster: one deleted (or deleted and created again under
        // the same name) no longer has an agent, whatever the garbage collector has not yet
        // removed.
        let cluster = field("cluster");
        match cluster_uid(client, &cluster).await? {
            Some(uid) if same_secret(uid.as_bytes(), field("uid").as_bytes()) => {}
            _ => {
                return Err(unauthorized(
                    "the cluster this agent credential was issued for no longer exists: import the cluster again",
                ));
            }
        }
        return Ok(Identity {
            cluster,
            registering: false,
        });
    }
    let tokens: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NAMESPACE,
        &management::registration_token_resource(),
    );
    let Some(registration) = tokens
        .get_opt(id)
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
    else {
        return Err(unauthorized(UNKNOWN_TOKEN));
    };
    let spec = &registration.data["spec"];
    if !same_secret(
        spec["tokenHash"].as_str().unwrap_or_default().as_bytes(),
        hash.as_bytes(),
    ) {
        return Err(unauthorized(UNKNOWN_TOKEN));
    }
    let expired = spec["expirationTimestamp"]
        .as_str()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .is_none_or(|t| t < chrono::Utc::now());
    if expired {
        return Err(unauthorized(
            "expired registration token: create a new one with lariat cluster import",
        ));
    }
    let cluster = format!(
        "{}/{}",
        spec["clusterNamespace"].as_str().unwrap_or_default(),
        spec["clusterName"].as_str().unwrap_or_default()
    );
    let issued_for = spec["clusterUID"].as_str().unwrap_or_default();
    match cluster_uid(client, &cluster).await? {
        Some(uid) if same_secret(uid.as_bytes(), issued_for.as_bytes()) => {}
        _ => {
            return Err(unauthorized(
                "the cluster this registration token is for no longer exists: import the cluster again",
            ));
        }
    }
    Ok(Identity {
        cluster,
        registering: true,
    })
}

/// The Cluster (`namespace/name`) whose agent credential `token` is, if it is a live one; a
/// registration token, or anything else, is `None`.
async fn credential_cluster(client: &kube::Client, token: &str) -> Option<String> {
    match authenticate(client, token).await {
        Ok(Identity {
            cluster,
            registering: false,
        }) => Some(cluster),
        _ => None,
    }
}

/// The uid of the Cluster `namespace/name`, if it exists and is not being deleted.
async fn cluster_uid(client: &kube::Client, cluster: &str) -> Result<Option<String>, ApiError> {
    let Some((namespace, name)) = cluster.split_once('/') else {
        return Ok(None);
    };
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &cluster_resource());
    let found = clusters
        .get_opt(name)
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(found
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .and_then(|c| c.metadata.uid))
}

/// Issues the credential a registered agent uses from now on (so its registration token can
/// expire). A Cluster has one credential Secret, named after it, so issuing a new one retires
/// the previous one in the same write.
async fn issue_credential(client: &kube::Client, cluster: &str) -> Result<String, ApiError> {
    let uid = cluster_uid(client, cluster)
        .await?
        .ok_or_else(|| unauthorized("the cluster to register no longer exists"))?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    let id = cluster_label(cluster)[..20].to_string();
    let secret = random(32);
    let name = format!("agent-{id}");
    let object: Secret = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {CLUSTER_LABEL: cluster_label(cluster)}},
        "type": AGENT_CREDENTIAL_TYPE,
        "data": {
            "hash": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, sha256_hex(&secret)),
            "cluster": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, cluster),
            "uid": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, uid),
        },
    }))
    .expect("a well-formed Secret");
    secrets
        .patch(
            &name,
            &kube::api::PatchParams::apply("lariat-tunnel").force(),
            &kube::api::Patch::Apply(&object),
        )
        .await
        .map_err(|e| ApiError::internal(format!("cannot store the agent credential: {e}")))?;
    Ok(format!("{id}.{secret}"))
}

async fn consume_registration_token(client: &kube::Client, token: &str) {
    let id = token.split('.').next().unwrap_or_default();
    let tokens: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NAMESPACE,
        &management::registration_token_resource(),
    );
    if let Err(error) = tokens.delete(id, &Default::default()).await {
        tracing::warn!(%error, "cannot delete a used registration token");
    }
}

/// `GET /v3/connect` with `Upgrade: lariat-tunnel/1`: authenticates the agent, admits the
/// handshake within the rate budget, and turns the connection into the Cluster's tunnel.
pub async fn connect(
    tunnels: Arc<Tunnels>,
    replicas: Option<Arc<crate::replicas::Replicas>>,
    client: kube::Client,
    mut request: axum::extract::Request,
) -> Response {
    let wants_upgrade = request
        .headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case(PROTOCOL));
    if !wants_upgrade {
        return ApiError::bad_request(format!(
            "an agent connects with Connection: Upgrade and Upgrade: {PROTOCOL}"
        ))
        .into_response();
    }
    // Its response carries Retry-After.
    let too_many = |message: String, retry_after: u64| {
        ApiError::TooManyRequests {
            message,
            retry_after_seconds: retry_after,
        }
        .into_response()
    };
    // Failed attempts are limited per client address before anything else, so they cost
    // nothing and never draw on the budget valid agents are admitted from.
    let address = request
        .extensions()
        .get::<crate::auth::Peer>()
        .and_then(crate::auth::Peer::address)
        .map(|a| a.ip());
    if let Some(address) = address
        && let Err(retry_after) = tunnels.may_try(address)
    {
        return too_many(
            format!("too many failed agent handshakes from {address}; retry in {retry_after}s"),
            retry_after,
        );
    }
    let failed = |error: ApiError| {
        if let Some(address) = address {
            tunnels.failed(address);
        }
        error.into_response()
    };
    let Some(token) = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(crate::auth::bearer_token)
        .map(str::to_string)
    else {
        crate::auth::record_refusal("/v3/connect", None);
        return failed(ApiError::Unauthorized);
    };
    let identity = match authenticate(&client, &token).await {
        Ok(identity) => identity,
        Err(e @ ApiError::Forbidden { .. }) => {
            crate::auth::record_refusal("/v3/connect", address.map(|ip| (ip, 0).into()));
            return failed(e);
        }
        Err(e) => return e.into_response(),
    };
    // Held to the support matrix (`lariat version --matrix`). A refusal is a 400, which the
    // agent logs with its message and retries, keeping its credential for after an upgrade.
    let agent_version = request
        .headers()
        .get(AGENT_VERSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    match lariat_api::support::agent_skew(lariat_api::support::LARIAT, agent_version.as_deref()) {
        lariat_api::support::AgentSkew::Supported => {}
        lariat_api::support::AgentSkew::Newer => tracing::warn!(
            cluster = %identity.cluster,
            agent = agent_version.as_deref().unwrap_or_default(),
            "an agent newer than this server connected: upgrade the server replicas"
        ),
        lariat_api::support::AgentSkew::Refused(why) => {
            tracing::warn!(cluster = %identity.cluster, "agent refused: {why}");
            return ApiError::bad_request(why).into_response();
        }
    }
    // Only an authenticated agent draws on the handshake budget.
    if let Err(retry_after) = tunnels.admit() {
        return too_many(
            format!("too many agents connecting; retry in {retry_after}s"),
            retry_after,
        );
    }
    let cluster = identity.cluster.clone();
    if let Some(existing) = tunnels.get(&cluster) {
        // A second agent for a connected cluster is refused while the first's connection is
        // open; a reconnecting agent whose old connection is half-open waits for HTTP/2's
        // keep-alive (about 20 s) to close it.
        let alive = existing.sender.clone().ready().await.is_ok();
        if alive {
            tracing::warn!(cluster = %cluster, "agent refused: the cluster already has a connected agent");
            return ApiError::Conflict {
                message: format!("cluster {cluster} already has a connected agent"),
                target: None,
                causes: vec![],
            }
            .into_response();
        }
    }
    let issued = if identity.registering {
        match issue_credential(&client, &cluster).await {
            Ok(credential) => {
                // A registration token registers once: whoever saw it later (shell history,
                // the import URL) cannot take the cluster's place.
                consume_registration_token(&client, &token).await;
                Some(credential)
            }
            Err(e) => return e.into_response(),
        }
    } else {
        None
    };
    let upgrade = hyper::upgrade::on(&mut request);
    let id = tunnels
        .next_id
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let registry = tunnels.clone();
    let key = cluster.clone();
    let agent_version = agent_version.unwrap_or_default();
    tokio::spawn(async move {
        let upgraded = match upgrade.await {
            Ok(upgraded) => upgraded,
            Err(error) => {
                tracing::warn!(cluster = %key, %error, "agent upgrade failed");
                return;
            }
        };
        let handshake = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .keep_alive_interval(Duration::from_secs(10))
            .keep_alive_timeout(Duration::from_secs(10))
            .keep_alive_while_idle(true)
            .max_concurrent_reset_streams(MAX_STREAMS as usize)
            .handshake::<_, Body>(upgraded)
            .await;
        let (sender, connection) = match handshake {
            Ok(parts) => parts,
            Err(error) => {
                tracing::warn!(cluster = %key, %error, "agent tunnel handshake failed");
                return;
            }
        };
        let tunnel = Tunnel {
            sender,
            id,
            since: Instant::now(),
            agent_version,
        };
        {
            let mut connected = registry.connected.lock().expect("lock");
            if connected.get(&key).is_some_and(|t| !t.sender.is_closed()) {
                // Another agent of this cluster finished its handshake first.
                tracing::warn!(cluster = %key, "agent refused: the cluster already has a connected agent");
                return;
            }
            connected.insert(key.clone(), tunnel.clone());
        }
        tracing::info!(cluster = %key, "agent connected");
        if let Some(replicas) = replicas {
            tokio::spawn(record_new_tunnel(client, replicas, key.clone(), tunnel));
        }
        // Reported at once: the other replicas forward to this one from then on.
        registry.changed.notify_one();
        let result = connection.await;
        let mut connected = registry.connected.lock().expect("lock");
        if connected.get(&key).is_some_and(|t| t.id == id) {
            connected.remove(&key);
        }
        drop(connected);
        registry.changed.notify_one();
        match result {
            Ok(()) => tracing::info!(cluster = %key, "agent disconnected"),
            Err(error) => tracing::info!(cluster = %key, %error, "agent disconnected"),
        }
    });
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = response.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static(PROTOCOL));
    if let Ok(value) = HeaderValue::from_str(&cluster) {
        headers.insert(CLUSTER_HEADER, value);
    }
    if let Some(credential) = issued
        && let Ok(value) = HeaderValue::from_str(&credential)
    {
        headers.insert(CREDENTIAL_HEADER, value);
    }
    response
}

/// The first segment of the agent's own endpoints (`lariat_agent::HANDOFF_PATH`): a proxied
/// request there is the Cluster's `handoff` subresource, not its API.
pub const AGENT_PATH_SEGMENT: &str = "lariat-agent/";

/// Proxies a request for `/k8s/clusters/<namespace>/<name>/<rest>` into that Cluster's tunnel,
/// as `caller`: the agent sends it to its cluster's API with its own credential and
/// `Impersonate-User`/`Impersonate-Group` naming the caller, so the cluster's own RBAC decides
/// (the bindings lariat keeps there for Rancher's scopes, see `rancher.rs`). Whatever
/// identity headers the caller sent are dropped first.
pub async fn proxy(tunnels: &Tunnels, caller: &User, request: axum::extract::Request) -> Response {
    let path = request.uri().path().to_string();
    let mut parts = path.splitn(6, '/').skip(3);
    let (Some(namespace), Some(name)) = (parts.next(), parts.next()) else {
        return ApiError::NotFound {
            message: "proxy paths are /k8s/clusters/<namespace>/<name>/...".into(),
            target: None,
        }
        .into_response();
    };
    let cluster = format!("{namespace}/{name}");
    let Some(tunnel) = tunnels.get(&cluster) else {
        return ApiError::Unavailable {
            message: format!(
                "cluster {cluster} is not connected: its agent has not dialled in, or is dialling again (see the Cluster's Connected condition)"
            ),
        }
        .into_response();
    };
    let prefix = format!("/k8s/clusters/{namespace}/{name}");
    let rest = &path[prefix.len()..];
    let rest = if rest.is_empty() { "/" } else { rest };
    let target = match request.uri().query() {
        Some(query) => format!("http://agent{rest}?{query}"),
        None => format!("http://agent{rest}"),
    };
    let (mut parts, body) = request.into_parts();
    let Ok(uri) = target.parse() else {
        return ApiError::bad_request("invalid proxy path").into_response();
    };
    parts.uri = uri;
    parts.version = axum::http::Version::HTTP_2;
    strip_caller_headers(&mut parts.headers);
    let as_caller = || -> Result<Vec<(&str, header::HeaderValue)>, ApiError> {
        let value = |text: &str| identity_header(text, "downstream");
        // `system:` identities are each cluster's own (its nodes, controllers, service
        // accounts): a lariat caller never becomes one downstream. lariat's own
        // (`system:lariat:...`, its controllers) keep their names, and of the groups only
        // `system:masters` passes, so lariat's administrators administer every cluster, as
        // Rancher's do.
        if caller.name.starts_with("system:") && !caller.name.starts_with("system:lariat:") {
            return Err(ApiError::Forbidden {
                message: format!(
                    "User {:?} cannot act in a downstream cluster: names starting with system: are the cluster's own identities",
                    caller.name
                ),
            });
        }
        let mut headers = vec![("impersonate-user", value(&caller.name)?)];
        for group in &caller.groups {
            if !group.starts_with("system:") || group == crate::rbac::MASTERS {
                headers.push(("impersonate-group", value(group)?));
            }
        }
        Ok(headers)
    };
    match as_caller() {
        Ok(headers) => {
            for (name, value) in headers {
                parts.headers.append(name, value);
            }
        }
        Err(error) => return error.into_response(),
    }
    let mut sender = tunnel.sender.clone();
    if sender.ready().await.is_err() {
        return ApiError::Unavailable {
            message: format!("cluster {cluster}'s tunnel closed"),
        }
        .into_response();
    }
    match sender
        .send_request(axum::http::Request::from_parts(parts, body))
        .await
    {
        Ok(response) => response.map(Body::new),
        Err(error) => ApiError::Unavailable {
            message: format!("cluster {cluster}'s agent did not answer: {error}"),
        }
        .into_response(),
    }
}

/// A user or group name as a header value sent `whither`, refused unless the receiver reads
/// back exactly this name: HTTP drops whitespace around a value (so `" system:masters"` would
/// arrive as `system:masters`, past every check of the `system:` prefix) and cannot carry
/// control characters.
pub(crate) fn identity_header(text: &str, whither: &str) -> Result<HeaderValue, ApiError> {
    let faithful = !text.is_empty() && text.trim() == text && !text.chars().any(char::is_control);
    faithful
        .then(|| HeaderValue::from_bytes(text.as_bytes()).ok())
        .flatten()
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "the identity {text:?} cannot be sent {whither} as an HTTP header: names with surrounding whitespace or control characters are refused"
            ))
        })
}

/// Removes from a proxied request what is the caller's business with lariat and no one
/// else's: its credentials, hop-by-hop headers, and any identity it claims. Impersonation is
/// lariat's to grant (with RBAC), not the caller's to ask of the agent; nor may a caller claim
/// an identity with front-proxy headers (`X-Remote-User`) or the replicas' own
/// (`x-lariat-forwarded-*`).
pub(crate) fn strip_caller_headers(headers: &mut axum::http::HeaderMap) {
    for hop in [
        header::AUTHORIZATION,
        header::HOST,
        header::CONNECTION,
        header::UPGRADE,
        header::TE,
        header::TRANSFER_ENCODING,
        header::PROXY_AUTHORIZATION,
        header::COOKIE,
    ] {
        headers.remove(hop);
    }
    headers.remove("keep-alive");
    headers.remove("proxy-connection");
    let identities: Vec<_> = headers
        .keys()
        .filter(|name| {
            let name = name.as_str();
            name.starts_with("impersonate-")
                || name.starts_with("x-remote-")
                || name.starts_with(crate::replicas::FORWARDED_PREFIX)
        })
        .cloned()
        .collect();
    for name in identities {
        headers.remove(name);
    }
}

/// Where agents' pods pull lariat from: the project's published image by default, or a
/// private registry's or an air-gapped mirror's copy, with the pull Secret that registry needs
/// (which must exist in the agent's namespace, `lariat-system`, of the imported cluster).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentImage {
    pub reference: String,
    pub pull_secret: Option<String>,
}

impl Default for AgentImage {
    fn default() -> AgentImage {
        AgentImage {
            reference: format!("ghcr.io/lariat-dev/lariat:v{}", env!("CARGO_PKG_VERSION")),
            pull_secret: None,
        }
    }
}

impl AgentImage {
    /// Refuses what no container runtime would pull, in one line that says how to write it.
    pub fn check(&self) -> Result<(), String> {
        let reference = &self.reference;
        // The grammar container runtimes parse references with (distribution/reference).
        if let Err(error) = oci_spec::distribution::Reference::try_from(reference.as_str()) {
            return Err(format!(
                "invalid --agent-image {reference:?}: {error}; expected an image reference such as registry.example.com/lariat:v1.2.3 (lowercase repository, optional :tag or @sha256:digest)"
            ));
        }
        if let Some(secret) = &self.pull_secret
            && !crate::objects::is_dns1123_subdomain(secret)
        {
            return Err(format!(
                "invalid --agent-image-pull-secret {secret:?}: expected a Secret name (lowercase letters, digits, '-' and '.')"
            ));
        }
        Ok(())
    }
}

/// The manifests `kubectl apply -f` installs an agent with, into any cluster: its namespace,
/// a service account bound to cluster-admin, a Secret with what it needs to dial home, and
/// the agent Deployment, whose pod reads its in-cluster configuration.
pub fn import_manifest(server: &str, token: &str, ca_checksum: &str, image: &AgentImage) -> String {
    let reference = &image.reference;
    let pull_secrets = match &image.pull_secret {
        Some(secret) => format!("\n      imagePullSecrets: [{{name: {secret}}}]"),
        None => String::new(),
    };
    format!(
        r#"apiVersion: v1
kind: Namespace
metadata:
  name: {NAMESPACE}
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: lariat-agent
  namespace: {NAMESPACE}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: lariat-agent
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: cluster-admin
subjects:
- kind: ServiceAccount
  name: lariat-agent
  namespace: {NAMESPACE}
---
apiVersion: v1
kind: Secret
metadata:
  name: lariat-agent
  namespace: {NAMESPACE}
type: Opaque
stringData:
  server: "{server}"
  token: "{token}"
  ca-checksum: "{ca_checksum}"
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: lariat-agent
  namespace: {NAMESPACE}
  labels: {{app: lariat-agent}}
spec:
  replicas: 1
  strategy: {{type: Recreate}}
  selector:
    matchLabels: {{app: lariat-agent}}
  template:
    metadata:
      labels: {{app: lariat-agent}}
    spec:
      serviceAccountName: lariat-agent{pull_secrets}
      securityContext:
        runAsNonRoot: true
        seccompProfile: {{type: RuntimeDefault}}
      containers:
      - name: agent
        image: "{reference}"
        args: ["agent"]
        resources:
          requests: {{cpu: 10m, memory: 32Mi}}
          limits: {{memory: 256Mi}}
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          capabilities: {{drop: [ALL]}}
        env:
        - {{name: LARIAT_SERVER, valueFrom: {{secretKeyRef: {{name: lariat-agent, key: server}}}}}}
        - {{name: LARIAT_TOKEN, valueFrom: {{secretKeyRef: {{name: lariat-agent, key: token}}}}}}
        - {{name: LARIAT_CA_CHECKSUM, valueFrom: {{secretKeyRef: {{name: lariat-agent, key: ca-checksum}}}}}}
"#
    )
}

/// How often the server looks at every Cluster's tunnel. A lost connection shows within this
/// plus HTTP/2's keep-alive timeout (10 s pings, 10 s to answer): under 30 s.
pub const HEARTBEAT: Duration = Duration::from_secs(10);
/// A heartbeat that changed nothing is written at most this often, so idle clusters cost few
/// writes.
const HEARTBEAT_WRITE: Duration = Duration::from_secs(60);

/// The Clusters and ClusterConnections as this replica's watches last saw them. The reporter
/// reads them on every pass and the proxy asks them which replica holds a tunnel, so neither
/// lists nor reads the store: with 10,000 clusters, a pass a second on every replica listing
/// both kinds would cost more than the tunnels themselves.
pub struct Records {
    clusters: Store<DynamicObject>,
    connections: Store<DynamicObject>,
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
    async fn ready(&self) -> bool {
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
    fn connection(&self, namespace: &str, name: &str) -> Option<Arc<DynamicObject>> {
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

/// Reports the connections of the agents whose tunnels this replica holds: a
/// ClusterConnection per Cluster with an agent (or imported) naming this replica in
/// `status.replica`, and the Cluster's `Connected` condition, until `stop`. Every replica runs
/// it for its own tunnels, at once when one connects or closes and every [`HEARTBEAT`]
/// besides; the replica that leads (`leader`, whose writes are fenced) also reports the
/// clusters no live replica holds as disconnected, and collects expired tokens and orphaned
/// credentials.
pub async fn report(
    tunnels: Arc<Tunnels>,
    replicas: Arc<crate::replicas::Replicas>,
    client: kube::Client,
    leader: (Arc<crate::leader::Leadership>, kube::Client),
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut ticker = tokio::time::interval(HEARTBEAT);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut probed: HashMap<String, Instant> = HashMap::new();
    let mut collected: Option<Instant> = None;
    let mut last_error: Option<String> = None;
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = ticker.tick() => {}
            _ = tunnels.changed.notified() => {}
        }
        let (leadership, leader_client) = &leader;
        let leading = leadership.holds().then_some(leader_client);
        let collect =
            leading.is_some() && collected.is_none_or(|at| at.elapsed() >= GARBAGE_INTERVAL);
        if collect {
            collected = Some(Instant::now());
        }
        let pass = Pass {
            tunnels: &tunnels,
            replicas: &replicas,
            records: replicas.records(),
            client: &client,
            leader: leading,
        };
        match pass.run(&mut probed, collect).await {
            Ok(()) => last_error = None,
            Err(error) => {
                if last_error.as_ref() != Some(&error) {
                    tracing::warn!(%error, "cannot report agent connections");
                }
                last_error = Some(error);
            }
        }
        // Connections arriving in a crowd are reported together, at most a pass a second.
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// How often the leader deletes expired registration tokens and orphaned credentials.
const GARBAGE_INTERVAL: Duration = Duration::from_secs(60);

fn cluster_resource() -> kube::core::ApiResource {
    kube::core::ApiResource {
        group: "cluster.x-k8s.io".into(),
        version: "v1beta1".into(),
        api_version: "cluster.x-k8s.io/v1beta1".into(),
        kind: "Cluster".into(),
        plural: "clusters".into(),
    }
}

/// One reporting pass of one replica.
struct Pass<'a> {
    tunnels: &'a Tunnels,
    replicas: &'a crate::replicas::Replicas,
    records: &'a Records,
    /// This replica's writes (its own tunnels).
    client: &'a kube::Client,
    /// The leader's fenced writes, when this replica leads.
    leader: Option<&'a kube::Client>,
}

/// Who reports a Cluster's connection in a pass, and with which client.
enum Reporter {
    /// This replica holds the tunnel.
    Holder(Tunnel),
    /// This replica held it, and lost it.
    FormerHolder,
    /// No live replica holds it: the leader says so.
    Leader,
}

impl Pass<'_> {
    /// One pass over every Cluster: the connection state of those this replica reports, a
    /// heartbeat through the tunnel for those due one (every [`HEARTBEAT_WRITE`], or on
    /// connecting), and, when `collect`, the garbage of expired tokens and orphaned
    /// credentials.
    async fn run(
        &self,
        probed: &mut HashMap<String, Instant>,
        collect: bool,
    ) -> Result<(), String> {
        if !self.records.ready().await {
            return Err("the Clusters and ClusterConnections are not listed yet".into());
        }
        let mut known: HashMap<String, Arc<DynamicObject>> = self
            .records
            .connections
            .state()
            .into_iter()
            .map(|c| (object_key(&c), c))
            .collect();
        let clusters = self.records.clusters.state();
        // A tunnel outlives neither its Cluster nor a re-import under the same name. A Cluster
        // the watch has not brought yet is looked for in the store before its tunnel closes.
        let existing: std::collections::HashSet<String> =
            clusters.iter().map(|c| object_key(c)).collect();
        for connected in self.tunnels.keys() {
            if !existing.contains(&connected) && !cluster_stored(self.client, &connected).await? {
                self.tunnels.disconnect(&connected);
            }
        }
        if collect
            && let Some(leader) = self.leader
            && let Err(error) = collect_garbage(leader, &existing).await
        {
            tracing::warn!(%error, "cannot collect expired tokens and orphaned credentials");
        }
        let me = self.replicas.identity();
        let mut work = vec![];
        for cluster in clusters {
            if cluster.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let key = object_key(&cluster);
            let imported = cluster
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(management::IMPORTED_ANNOTATION));
            let existing = known.remove(&key);
            let status = existing.as_ref().map(|c| &c.data["status"]);
            let connected = status.is_some_and(|s| s["connected"] == true);
            let holder = status
                .and_then(|s| s["replica"].as_str())
                .unwrap_or_default();
            let elsewhere = connected && holder != me && self.replicas.is_live(holder);
            let reporter = match self.tunnels.get(&key) {
                // An agent keeps one tunnel: when the record shows a newer one on another
                // replica, this one is what is left of the agent's last connection.
                Some(tunnel) if elsewhere && !newer_than_record(&tunnel, status) => {
                    tracing::info!(cluster = %key, holder, "the agent reconnected to another replica; closing its old tunnel here");
                    self.tunnels.disconnect_stale(&key, tunnel.id);
                    continue;
                }
                Some(tunnel) => Reporter::Holder(tunnel),
                None if elsewhere => continue,
                None if connected && holder == me => Reporter::FormerHolder,
                None if self.leader.is_some() && (existing.is_some() || imported) => {
                    Reporter::Leader
                }
                None => continue,
            };
            let due = match &reporter {
                // Probed on connecting, on every heartbeat in the connection's first minute (a
                // new cluster's Nodes are still coming), then every HEARTBEAT_WRITE. Not on
                // every pass: in a reconnection storm passes come each second, for thousands.
                Reporter::Holder(tunnel) => {
                    let every = if tunnel.since.elapsed() < HEARTBEAT_WRITE {
                        HEARTBEAT / 2
                    } else {
                        HEARTBEAT_WRITE
                    };
                    !connected
                        || holder != me
                        || probed.get(&key).is_none_or(|at| at.elapsed() >= every)
                }
                _ => false,
            };
            if due {
                probed.insert(key.clone(), Instant::now());
            }
            work.push((key, cluster, existing, reporter, due));
        }
        use futures::StreamExt;
        futures::stream::iter(work)
            .for_each_concurrent(64, |(key, cluster, existing, reporter, due)| async move {
                let (client, tunnel) = match reporter {
                    Reporter::Holder(tunnel) => (self.client, Some(tunnel)),
                    Reporter::FormerHolder => (self.client, None),
                    Reporter::Leader => (self.leader.unwrap_or(self.client), None),
                };
                if let Err(error) =
                    report_cluster(client, &cluster, existing.as_deref(), tunnel, due, me).await
                {
                    tracing::warn!(cluster = %key, %error, "cannot report the agent connection");
                }
            })
            .await;
        probed.retain(|k, _| self.tunnels.is_connected(k));
        Ok(())
    }
}

/// Whether the Cluster `key` (`namespace/name`) is in the store, read past the cache: what
/// the cache misses may be only a moment old.
async fn cluster_stored(client: &kube::Client, key: &str) -> Result<bool, String> {
    let (namespace, name) = key.split_once('/').unwrap_or_default();
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &cluster_resource());
    clusters
        .get_opt(name)
        .await
        .map(|c| c.is_some())
        .map_err(|e| format!("cannot read Cluster {key}: {e}"))
}

/// `namespace/name`, the key tunnels are held under.
fn object_key(object: &DynamicObject) -> String {
    format!(
        "{}/{}",
        object.metadata.namespace.as_deref().unwrap_or_default(),
        object.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Records in the Cluster `key`'s ClusterConnection that this replica holds its agent's new
/// `tunnel`, as the agent connects, so the other replicas forward its requests here from then
/// on rather than after the next report pass, which first asks each new tunnel's cluster for
/// its figures: seconds, in a reconnection storm. A record another replica wrote meanwhile is
/// read again, twice at most; what is left is the reporter's.
async fn record_new_tunnel(
    client: kube::Client,
    replicas: Arc<crate::replicas::Replicas>,
    key: String,
    tunnel: Tunnel,
) {
    let (namespace, name) = key.split_once('/').unwrap_or_default();
    let connections: Api<DynamicObject> = Api::namespaced_with(
        client,
        namespace,
        &management::cluster_connection_resource(),
    );
    let me = replicas.identity();
    let mut record = replicas.records().connection(namespace, name);
    for _ in 0..3 {
        // No record yet: the reporter creates it, naming this replica.
        let Some(current) = record else { return };
        if current.data["status"]["replica"] == me {
            return;
        }
        let mut claimed = (*current).clone();
        if !claimed.data["status"].is_object() {
            claimed.data["status"] = json!({});
        }
        let status = &mut claimed.data["status"];
        status["replica"] = json!(me);
        status["agentVersion"] = json!(tunnel.agent_version);
        status["connectedSince"] = json!(tunnel_since(&tunnel));
        match connections
            .replace_status(name, &PostParams::default(), &claimed)
            .await
        {
            Ok(_) => return,
            Err(kube::Error::Api(e)) if e.code == 409 => {
                record = connections.get_opt(name).await.ok().flatten().map(Arc::new);
            }
            Err(error) => {
                tracing::warn!(cluster = %key, %error, "cannot record which replica holds the agent's tunnel; the reporter will");
                return;
            }
        }
    }
}

/// When `tunnel` came up, as a ClusterConnection records it (to the second).
fn tunnel_since(tunnel: &Tunnel) -> String {
    let since =
        chrono::Utc::now() - chrono::Duration::from_std(tunnel.since.elapsed()).unwrap_or_default();
    since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Whether `tunnel` came after the connection a ClusterConnection's status records (to the
/// second it is recorded in).
fn newer_than_record(tunnel: &Tunnel, status: Option<&serde_json::Value>) -> bool {
    let recorded = status
        .and_then(|s| s["connectedSince"].as_str())
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok());
    let since =
        chrono::Utc::now() - chrono::Duration::from_std(tunnel.since.elapsed()).unwrap_or_default();
    recorded.is_none_or(|at| since.timestamp() > at.timestamp())
}

/// Deletes registration tokens past their expiry and credentials of Clusters that are gone,
/// so neither outlives its use.
async fn collect_garbage(
    client: &kube::Client,
    existing: &std::collections::HashSet<String>,
) -> kube::Result<()> {
    let tokens: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NAMESPACE,
        &management::registration_token_resource(),
    );
    for token in tokens.list(&Default::default()).await?.items {
        let expired = token.data["spec"]["expirationTimestamp"]
            .as_str()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .is_none_or(|t| t < chrono::Utc::now());
        if expired {
            let _ = tokens
                .delete(
                    token.metadata.name.as_deref().unwrap_or_default(),
                    &Default::default(),
                )
                .await;
        }
    }
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    for secret in secrets
        .list(&ListParams::default().labels(CLUSTER_LABEL))
        .await?
        .items
    {
        let owner = secret
            .data
            .as_ref()
            .and_then(|d| d.get("cluster"))
            .map(|v| String::from_utf8_lossy(&v.0).to_string())
            .unwrap_or_default();
        if !existing.contains(&owner) && !cluster_stored(client, &owner).await.unwrap_or(true) {
            tracing::info!(cluster = %owner, "deleting the agent credential of a deleted cluster");
            let _ = secrets
                .delete(
                    secret.metadata.name.as_deref().unwrap_or_default(),
                    &Default::default(),
                )
                .await;
        }
    }
    Ok(())
}

/// What one heartbeat through the tunnel saw.
struct Heartbeat {
    version: String,
    nodes: i64,
    ready: i64,
    cpu: String,
    memory: String,
    pods: String,
}

async fn get_json(tunnel: &Tunnel, path: &str) -> Result<serde_json::Value, String> {
    // The whole exchange, body included, is bounded in time and size: one stalled or
    // flooding agent must not hold up the reporter for every other cluster.
    tokio::time::timeout(Duration::from_secs(5), async {
        let mut sender = tunnel.sender.clone();
        sender.ready().await.map_err(|e| e.to_string())?;
        let request = axum::http::Request::get(format!("http://agent{path}"))
            .header(header::ACCEPT, "application/json")
            .body(Body::empty())
            .map_err(|e| e.to_string())?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let body = http_body_util::BodyExt::collect(http_body_util::Limited::new(
            response.into_body(),
            16 * 1024 * 1024,
        ))
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
        if !status.is_success() {
            return Err(format!("{path}: {status}"));
        }
        serde_json::from_slice(&body).map_err(|e| e.to_string())
    })
    .await
    .map_err(|_| format!("{path}: no answer within 5s"))?
}

async fn heartbeat(tunnel: &Tunnel) -> Result<Heartbeat, String> {
    let version = get_json(tunnel, "/version").await?;
    let nodes = get_json(tunnel, "/api/v1/nodes").await?;
    let items = nodes["items"].as_array().cloned().unwrap_or_default();
    let quantity = |node: &serde_json::Value, key: &str| {
        node["status"]["capacity"][key]
            .as_str()
            .map(|q| k8s_openapi::apimachinery::pkg::api::resource::Quantity(q.to_string()))
    };
    let (mut cpu_millis, mut memory_bytes, mut pods) = (0f64, 0f64, 0f64);
    for node in &items {
        cpu_millis += quantity(node, "cpu").map_or(0.0, |q| parse_quantity(&q.0) * 1000.0);
        memory_bytes += quantity(node, "memory").map_or(0.0, |q| parse_quantity(&q.0));
        pods += quantity(node, "pods").map_or(0.0, |q| parse_quantity(&q.0));
    }
    let ready = items
        .iter()
        .filter(|n| {
            n["status"]["conditions"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
        })
        .count() as i64;
    Ok(Heartbeat {
        version: version["gitVersion"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        nodes: items.len() as i64,
        ready,
        cpu: format!("{}m", cpu_millis.round() as i64),
        memory: format!("{}Mi", (memory_bytes / (1024.0 * 1024.0)).round() as i64),
        pods: format!("{}", pods.round() as i64),
    })
}

/// A Kubernetes quantity as a number of base units (0 when it is not one).
fn parse_quantity(text: &str) -> f64 {
    lariat_api::parse_quantity(text).unwrap_or(0.0)
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The warning condition for a Cluster whose agent runs `agent_version`, if it is newer than
/// this server (the matrix serves it, and asks for the replicas' upgrade); `since` is when an
/// earlier warning began.
fn agent_version_warning(agent_version: &str, since: Option<String>) -> Option<serde_json::Value> {
    let server = lariat_api::support::LARIAT;
    match lariat_api::support::agent_skew(server, Some(agent_version)) {
        lariat_api::support::AgentSkew::Newer => Some(json!({
            "type": AGENT_VERSION_CONDITION, "status": "False", "severity": "Warning",
            "reason": "AgentNewerThanServer", "lastTransitionTime": since.unwrap_or_else(now),
            "message": format!("the agent runs lariat v{agent_version}, newer than this server's v{server}: upgrade the server replicas (lariat version --matrix)"),
        })),
        _ => None,
    }
}

/// Writes one Cluster's ClusterConnection and `Connected` condition; `probe` asks the cluster
/// (version, Nodes) through the tunnel, otherwise the last heartbeat's figures stay.
async fn report_cluster(
    client: &kube::Client,
    cluster: &DynamicObject,
    existing: Option<&DynamicObject>,
    tunnel: Option<Tunnel>,
    probe: bool,
    me: &str,
) -> kube::Result<()> {
    let namespace = cluster.metadata.namespace.clone().unwrap_or_default();
    let name = cluster.metadata.name.clone().unwrap_or_default();
    let connections: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &namespace,
        &management::cluster_connection_resource(),
    );
    let old = existing
        .as_ref()
        .map(|c| c.data["status"].clone())
        .unwrap_or(serde_json::Value::Null);
    let beat = match &tunnel {
        Some(tunnel) if probe => Some(heartbeat(tunnel).await),
        _ => None,
    };
    let mut status = old.clone();
    if !status.is_object() {
        status = json!({});
    }
    if let Some(tunnel) = &tunnel {
        status["replica"] = json!(me);
        status["agentVersion"] = json!(tunnel.agent_version);
    }
    if let Some(tunnel) = &tunnel
        && (old["connected"] != true || old["replica"] != me)
    {
        status["connectedSince"] = json!(tunnel_since(tunnel));
    }
    match (&tunnel, beat) {
        // Connected, no heartbeat due: the last figures stand.
        (Some(_), None) => {}
        (Some(_), Some(Ok(beat))) => {
            status["connected"] = json!(true);
            status["kubernetesVersion"] = json!(beat.version);
            status["nodeCount"] = json!(beat.nodes);
            status["readyNodeCount"] = json!(beat.ready);
            status["capacity"] = json!({"cpu": beat.cpu, "memory": beat.memory, "pods": beat.pods});
            status["message"] = json!("");
            status["lastHeartbeat"] = old["lastHeartbeat"].clone();
            let stale = old["lastHeartbeat"]
                .as_str()
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .is_none_or(|t| {
                    (chrono::Utc::now() - t.with_timezone(&chrono::Utc))
                        .to_std()
                        .unwrap_or_default()
                        >= HEARTBEAT_WRITE
                });
            if stale || status != old {
                status["lastHeartbeat"] = json!(now());
            }
        }
        (Some(_), Some(Err(error))) => {
            status["connected"] = json!(true);
            status["message"] = json!(format!(
                "the tunnel is up but the cluster's API did not answer: {error}"
            ));
        }
        _ => {
            status["connected"] = json!(false);
            status["message"] = json!("no agent is connected");
        }
    }
    let mut record = match existing {
        Some(record) => record.clone(),
        None => {
            let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": management::API_VERSION,
            "kind": "ClusterConnection",
            "metadata": {"name": name, "namespace": namespace,
                "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
                    "name": name, "uid": cluster.metadata.uid.clone().unwrap_or_default()}]},
            "spec": {},
        }))
        .expect("a well-formed ClusterConnection");
            match connections.create(&PostParams::default(), &object).await {
                Ok(created) => created,
                // Another replica created it first: the next pass reads it.
                Err(kube::Error::Api(e)) if e.code == 409 => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    };
    if status != old {
        // Conditional on what this pass read: when another replica has written since (an
        // agent that moved), its word stands and the next pass looks again.
        record.data["status"] = status.clone();
        match connections
            .replace_status(&name, &PostParams::default(), &record)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    // The Cluster's own view: a Connected condition, which its controller turns into Ready
    // for an imported cluster.
    let connected = status["connected"] == true && status["message"] == "";
    let mut conditions = cluster.data["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let before = conditions.clone();
    // An agent newer than the server is served, with a warning on its Cluster until the
    // replicas are upgraded (`lariat version --matrix`); the warning goes with the agent.
    if let Some(tunnel) = &tunnel {
        let since = before
            .iter()
            .find(|c| c["type"] == AGENT_VERSION_CONDITION)
            .and_then(|c| c["lastTransitionTime"].as_str().map(String::from));
        conditions.retain(|c| c["type"] != AGENT_VERSION_CONDITION);
        conditions.extend(agent_version_warning(&tunnel.agent_version, since));
    }
    let current = conditions
        .iter()
        .find(|c| c["type"] == "Connected")
        .cloned();
    let wanted_status = if connected { "True" } else { "False" };
    let flipped = current.as_ref().map(|c| c["status"].clone()) != Some(json!(wanted_status));
    if flipped {
        conditions.retain(|c| c["type"] != "Connected");
        let mut condition =
            json!({"type": "Connected", "status": wanted_status, "lastTransitionTime": now()});
        if !connected {
            condition["severity"] = json!("Warning");
            condition["reason"] = json!("AgentDisconnected");
            condition["message"] = json!(
                status["message"]
                    .as_str()
                    .unwrap_or("no agent is connected")
            );
        }
        conditions.push(condition);
    }
    if conditions != before {
        let clusters: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &namespace, &cluster_resource());
        clusters
            .patch_status(
                &name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({"status": {"conditions": conditions}})),
            )
            .await?;
    }
    if flipped {
        tracing::info!(cluster = %format!("{namespace}/{name}"), connected, "cluster connection changed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_images_are_references_a_runtime_pulls() {
        let image = |reference: &str, secret: Option<&str>| AgentImage {
            reference: reference.into(),
            pull_secret: secret.map(String::from),
        };
        for ok in [
            "ghcr.io/lariat-dev/lariat:v0.1.0",
            "registry.internal:5000/mirror/lariat:v0.1.0",
            "lariat",
            "registry.internal/lariat@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "Registry.Example.com/lariat:V1",
        ] {
            assert_eq!(image(ok, Some("regcred")).check(), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "Registry/Lariat:v1",
            "lariat:v1 --privileged",
            "https://registry/lariat",
            "lariat:",
            "lariat@sha256:abc",
            "lariat:v1:evil",
            "lariat:v1\"",
            "lariat:-v1",
        ] {
            assert!(image(bad, None).check().is_err(), "{bad}");
        }
        assert!(image("lariat", Some("Reg_Cred")).check().is_err());
        let manifest = import_manifest(
            "https://lariat.example.com",
            "abcdef.0123456789abcdef",
            "00",
            &image("registry.internal:5000/lariat:v0.1.0", Some("regcred")),
        );
        let documents: Vec<serde_json::Value> = manifest
            .split("\n---\n")
            .map(|d| serde_yaml_ng::from_str(d).expect("each document is YAML"))
            .collect();
        let pod = &documents.last().unwrap()["spec"]["template"]["spec"];
        assert_eq!(
            pod["containers"][0]["image"],
            "registry.internal:5000/lariat:v0.1.0"
        );
        assert_eq!(pod["imagePullSecrets"][0]["name"], "regcred");
        let default = import_manifest("https://x", "t", "c", &AgentImage::default());
        assert!(default.contains(&format!(
            "image: \"ghcr.io/lariat-dev/lariat:v{}\"",
            env!("CARGO_PKG_VERSION")
        )));
        assert!(!default.contains("imagePullSecrets"));
    }

    #[test]
    fn an_agent_newer_than_the_server_is_warned_of_on_its_cluster() {
        let (major, minor) =
            lariat_api::support::lariat_minor(lariat_api::support::LARIAT).unwrap();
        let newer = format!("{major}.{}.0", minor + 1);
        let warning = agent_version_warning(&newer, None).expect("a warning");
        assert_eq!(
            (&warning["type"], &warning["status"], &warning["reason"]),
            (
                &json!(AGENT_VERSION_CONDITION),
                &json!("False"),
                &json!("AgentNewerThanServer")
            )
        );
        assert!(warning["message"].as_str().unwrap().contains(&newer));
        // It keeps the time it began.
        let kept = agent_version_warning(&newer, Some("2026-01-01T00:00:00Z".into())).unwrap();
        assert_eq!(kept["lastTransitionTime"], "2026-01-01T00:00:00Z");
        // The same version, and one older, are no warning.
        assert!(agent_version_warning(lariat_api::support::LARIAT, None).is_none());
        if minor > 0 {
            assert!(agent_version_warning(&format!("{major}.{}.0", minor - 1), None).is_none());
        }
    }

    #[test]
    fn identities_go_out_only_as_headers_read_back_the_same() {
        for sent in ["system:masters", "alice", "josé@example.com", "a b"] {
            let value = identity_header(sent, "downstream").unwrap();
            assert_eq!(std::str::from_utf8(value.as_bytes()).unwrap(), sent);
        }
        // HTTP would drop the whitespace (" system:masters" arriving as system:masters) or
        // cannot carry the character.
        for refused in [
            " system:masters",
            "system:masters ",
            "\tsystem:masters",
            "a\nb",
            "a\u{7f}",
            "",
        ] {
            assert!(
                identity_header(refused, "downstream").is_err(),
                "{refused:?}"
            );
        }
    }

    #[test]
    fn quantities() {
        assert_eq!(parse_quantity("2"), 2.0);
        assert_eq!(parse_quantity("500m"), 0.5);
        assert_eq!(parse_quantity("4Gi"), 4.0 * 1024.0 * 1024.0 * 1024.0);
        assert_eq!(parse_quantity("1k"), 1000.0);
    }

    #[test]
    fn admission_is_a_token_bucket_that_spreads_the_rest() {
        let tunnels = Tunnels::with_rate(5.0);
        let outcomes: Vec<Result<(), u64>> = (0..100).map(|_| tunnels.admit()).collect();
        assert_eq!(
            outcomes.iter().filter(|o| o.is_ok()).count(),
            5,
            "a burst is cut at the rate"
        );
        let waits: Vec<u64> = outcomes.iter().filter_map(|o| o.err()).collect();
        assert!(waits.iter().all(|w| (1..=19).contains(w)), "{waits:?}");
        assert!(
            *waits.iter().max().unwrap() > 5,
            "95 waiting agents at 5/s are spread over many seconds: {waits:?}"
        );
    }

    #[test]
    fn tokens_are_id_dot_secret_and_hashes_match() {
        let (token, id, hash) = new_token();
        let (token_id, secret) = token.split_once('.').unwrap();
        assert_eq!(token_id, id);
        assert_eq!(secret.len(), 32);
        assert_eq!(sha256_hex(secret), hash);
    }
}
