//! `/v3/connect`: an agent dials out to the server, authenticates with a registration token or
//! its cluster credential, and upgrades the HTTPS connection; over the upgraded connection
//! the server speaks HTTP/2 as the client and the agent as the server. HTTP/2 gives the tunnel
//! many concurrent streams, flow control per stream, pings and a bounded stream count, so a
//! watch through the tunnel is just a long response.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use lariat_api::tunnel::{AGENT_VERSION_HEADER, CLUSTER_HEADER, CREDENTIAL_HEADER, PROTOCOL};
use lariat_apiserver::auth::record_refusal;
use lariat_apiserver::extension::Handle;
use lariat_apiserver::identity::Peer;
use lariat_apiserver::status::ApiError;

use crate::Plane;
use crate::credentials::{Identity, authenticate, consume_registration_token, issue_credential};
use crate::hub::Tunnel;
use crate::reporter::record_new_tunnel;

/// Reset streams one tunnel tolerates before it is treated as abusive (the agent caps
/// concurrent streams; requests beyond its cap queue in the HTTP/2 client).
const MAX_STREAMS: u32 = 256;

/// `GET /v3/connect` with `Upgrade: lariat-tunnel/1`: authenticates the agent, admits the
/// handshake within the rate budget, and turns the connection into the Cluster's tunnel.
pub(crate) async fn connect(
    State((plane, server)): State<(Plane, Handle)>,
    mut request: Request,
) -> Response {
    let client = server.client();
    let address = Peer::ip_of(request.extensions());
    let proven = prove(&server, &client, request.headers(), address).await;
    let (identity, token, agent_version) = match proven {
        Ok(proven) => proven,
        Err(refusal) => return refusal,
    };
    // Only an authenticated agent draws on the handshake budget.
    if let Err(retry_after) = plane.tunnels.admit() {
        return too_many(
            format!("too many agents connecting; retry in {retry_after}s"),
            retry_after,
        );
    }
    let cluster = identity.cluster.clone();
    if let Some(existing) = plane.tunnels.get(&cluster) {
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
    tokio::spawn(hold(
        plane,
        server,
        client,
        upgrade,
        cluster.clone(),
        agent_version.unwrap_or_default(),
    ));
    switching_protocols(&cluster, issued)
}

/// 429 with its Retry-After.
fn too_many(message: String, retry_after: u64) -> Response {
    ApiError::TooManyRequests {
        message,
        retry_after_seconds: retry_after,
    }
    .into_response()
}

/// What an agent dialling in proves: an upgrade to the tunnel, a registration token or
/// cluster credential (failed proofs are limited per client address before anything else,
/// so they cost nothing and never draw on the budget valid agents are admitted from), and a
/// version the support matrix takes. Returns who it is, its token and its version, or the
/// refusal.
async fn prove(
    server: &Handle,
    client: &kube::Client,
    headers: &HeaderMap,
    address: Option<IpAddr>,
) -> Result<(Identity, String, Option<String>), Response> {
    let wants_upgrade = headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case(PROTOCOL));
    if !wants_upgrade {
        return Err(ApiError::bad_request(format!(
            "an agent connects with Connection: Upgrade and Upgrade: {PROTOCOL}"
        ))
        .into_response());
    }
    let attempt = server
        .failed_proofs()
        .attempt(address, "failed agent handshakes")
        .map_err(IntoResponse::into_response)?;
    let Some(token) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(lariat_apiserver::identity::bearer_token)
        .map(str::to_string)
    else {
        record_refusal("/v3/connect", None);
        attempt.failed();
        return Err(ApiError::Unauthorized.into_response());
    };
    let identity = match authenticate(client, &token).await {
        Ok(identity) => identity,
        Err(e @ ApiError::Forbidden { .. }) => {
            attempt.refused("/v3/connect");
            return Err(e.into_response());
        }
        Err(e) => return Err(e.into_response()),
    };
    drop(attempt);
    // Held to the support matrix (`lariat version --matrix`). A refusal is a 400, which the
    // agent logs with its message and retries, keeping its credential for after an upgrade.
    let agent_version = headers
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
            return Err(ApiError::bad_request(why).into_response());
        }
    }
    Ok((identity, token, agent_version))
}

/// Holds the Cluster `key`'s tunnel over the upgraded connection for as long as it lasts: the
/// server speaks HTTP/2 as the client, pings every 10 s, and tells the reporter when the
/// tunnel opens and closes.
async fn hold(
    plane: Plane,
    server: Handle,
    client: kube::Client,
    upgrade: hyper::upgrade::OnUpgrade,
    key: String,
    agent_version: String,
) {
    let registry = plane.tunnels.clone();
    let id = registry
        .next_id
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
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
    if let Some(replicas) = server.replicas() {
        tokio::spawn(record_new_tunnel(
            client,
            replicas,
            plane.records.clone(),
            key.clone(),
            tunnel,
        ));
    }
    // Reported at once: the other replicas forward to this one from then on.
    registry.changed.notify_one();
    // A stopping server closes the tunnel at once: its agent reconnects to another replica
    // (or to this one once it is back) instead of holding the stop up.
    let result = tokio::select! {
        result = connection => result,
        _ = server.stopped() => Ok(()),
    };
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
}

/// The 101 that makes the connection the tunnel, naming the Cluster and carrying the
/// credential issued to a registering agent.
fn switching_protocols(cluster: &str, issued: Option<String>) -> Response {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = response.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static(PROTOCOL));
    if let Ok(value) = HeaderValue::from_str(cluster) {
        headers.insert(CLUSTER_HEADER, value);
    }
    if let Some(credential) = issued
        && let Ok(value) = HeaderValue::from_str(&credential)
    {
        headers.insert(CREDENTIAL_HEADER, value);
    }
    response
}
