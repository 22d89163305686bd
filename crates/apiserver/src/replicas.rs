//! Replicas of one datastore finding and trusting each other, so that every replica serves
//! every cluster's proxy whichever replica its agent dialled.
//!
//! Each replica keeps a Lease, `lariat-system/lariat-replica-<hash of its identity>`, naming
//! itself (`holderIdentity`) and the address the others reach it at (an annotation), renewed
//! every [`RENEW`]; a replica whose Lease was not renewed for [`LEASE_DURATION`] is gone.
//! Every replica reads them all as often, into the view [`Replicas::live_address`] answers
//! from. `kubectl get leases -n lariat-system` lists them next to the controllers' Lease.
//!
//! A request for `/k8s/clusters/NS/NAME/...` that reaches a replica without that cluster's
//! tunnel is forwarded to the replica its ClusterConnection names (`status.replica`), over
//! HTTPS checked against the shared CA, with this replica's credential: a client certificate of
//! the shared CA for `system:lariat:replica:<identity>` in `system:lariat:replicas`, valid
//! [`CREDENTIAL_LIFETIME`] and renewed at half of it, its key never written anywhere. It has
//! no credential record, so the management API refuses it as it refuses any certificate it did
//! not record; the one thing it is accepted for is a forwarded proxy request, and only from a
//! replica that is live ([`Replicas::forwarded_user`]). The caller's identity, already
//! authenticated and authorized by the first replica, rides in [`FORWARDED_USER`](crate::forwarding::FORWARDED_USER) and
//! [`FORWARDED_GROUP`](crate::forwarding::FORWARDED_GROUP), trusted only with that credential (as kube-apiserver trusts
//! `X-Remote-User` only from its front proxy), and authorized again where it lands.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use kube::api::{ListParams, ObjectMeta, PostParams};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use tokio::sync::watch;

use crate::auth::Authenticator;
use crate::forwarding::{FORWARDED_GROUP, FORWARDED_USER};
use crate::identity::{User, sha256_hex};
use crate::leader::LEASE_NAMESPACE;
use crate::pki::Pki;
use crate::status::ApiError;

/// The replica credential's subject: this prefix and the replica's identity (CN)...
const REPLICA_USER_PREFIX: &str = "system:lariat:replica:";
/// ...in this group (O).
const REPLICAS_GROUP: &str = "system:lariat:replicas";
/// On a replica's Lease: `host:port` the other replicas reach it at.
pub const PEER_ADDRESS_ANNOTATION: &str = "lariat.dev/peer-address";
/// On a replica's Lease: the lariat version it runs, held to the support matrix.
pub const VERSION_ANNOTATION: &str = "lariat.dev/version";
/// Marks the replicas' Leases, for listing them apart from the controllers' election.
const REPLICA_LABEL: &str = "lariat.dev/replica";
const LEASE_PREFIX: &str = "lariat-replica-";
/// How often a replica renews its Lease and reads the others'.
const RENEW: Duration = Duration::from_secs(3);
/// How long after its last renewal a replica counts as gone.
const LEASE_DURATION: Duration = Duration::from_secs(15);
/// A Lease this long gone is deleted (by whichever replica sees it first); a replica cut off
/// longer writes it anew when it is back.
const FORGET_AFTER: Duration = Duration::from_secs(60);
/// The replica credential's lifetime; it is renewed at half of it.
const CREDENTIAL_LIFETIME: Duration = Duration::from_secs(3600);
/// The longest validity a replica credential may claim (its lifetime and the issuer's five
/// minutes of clock slack, with room): one valid for longer was not issued by a replica.
const LONGEST_CREDENTIAL: Duration = Duration::from_secs(2 * 3600);
/// How long a forwarded request may take to get its response headers (a watch then streams):
/// a replica that hangs (its Lease lapses after 15 s) holds requests no longer than this.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);

/// Marks a request a replica forwarded: it is served from this replica's tunnels only, never
/// forwarded again.
#[derive(Clone, Copy, Debug)]
pub struct Forwarded;

/// Another replica as this one last saw it.
#[derive(Clone, Debug)]
struct Peer {
    address: String,
    /// When its Lease was last renewed, on the renewing replica's clock.
    renewed: chrono::DateTime<chrono::Utc>,
    /// The lariat version it runs ("" for one that does not say).
    version: String,
}

/// The replica a Lease is of: its identity, and what it says of itself.
fn peer_of(lease: Lease) -> Option<(String, Peer)> {
    let spec = lease.spec?;
    let (identity, MicroTime(renewed)) = (spec.holder_identity?, spec.renew_time?);
    let renewed = chrono::DateTime::from_timestamp_micros(renewed.as_microsecond())?;
    let mut annotations = lease.metadata.annotations.unwrap_or_default();
    let mut take = |key: &str| annotations.remove(key).unwrap_or_default();
    let address = take(PEER_ADDRESS_ANNOTATION);
    let version = take(VERSION_ANNOTATION);
    Some((
        identity,
        Peer {
            address,
            renewed,
            version,
        },
    ))
}

impl Peer {
    /// How long ago its Lease was last renewed.
    fn age(&self) -> Duration {
        (chrono::Utc::now() - self.renewed)
            .to_std()
            .unwrap_or_default()
    }

    fn live(&self) -> bool {
        self.age() < LEASE_DURATION
    }
}

/// Every replica's Lease: its name, and the replica it is of.
async fn list_peers(api: &Api<Lease>) -> kube::Result<Vec<(String, String, Peer)>> {
    let leases = api
        .list(&ListParams::default().labels(REPLICA_LABEL))
        .await?;
    Ok(leases
        .items
        .into_iter()
        .filter_map(|lease| {
            let name = lease.metadata.name.clone().unwrap_or_default();
            peer_of(lease).map(|(identity, peer)| (name, identity, peer))
        })
        .collect())
}

type HttpsClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Body>;

/// This replica's place among the others: its identity and address, the view of the others,
/// and the client it forwards with.
pub struct Replicas {
    identity: String,
    address: String,
    pki: Pki,
    peers: Mutex<HashMap<String, Peer>>,
    /// This replica's Lease as last written, renewed by a conditional replace alone.
    lease: Mutex<Option<Lease>>,
    /// Where the replicas' Leases are read, once [`Replicas::run`] has started.
    leases: std::sync::OnceLock<Api<Lease>>,
    /// The client forwarding with the current credential, and when to issue the next.
    forwarder: Mutex<Option<(HttpsClient, Instant)>>,
}

impl Replicas {
    /// `identity` is this process's (the election's); `address` is `host:port` the other
    /// replicas reach it at, which its serving certificate must name.
    pub fn new(identity: String, address: String, pki: Pki) -> Arc<Replicas> {
        Arc::new(Replicas {
            identity,
            address,
            pki,
            peers: Mutex::default(),
            lease: Mutex::default(),
            leases: Default::default(),
            forwarder: Mutex::default(),
        })
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// `host:port` the other replicas reach this one at.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Where the live replica `identity` is reached, if it is live (this one included).
    pub fn live_address(&self, identity: &str) -> Option<String> {
        if identity == self.identity {
            return Some(self.address.clone());
        }
        let peers = self.peers.lock().expect("peers lock");
        peers
            .get(identity)
            .filter(|p| p.live())
            .map(|p| p.address.clone())
    }

    /// Whether `identity` is a live replica (this one included).
    pub fn is_live(&self, identity: &str) -> bool {
        self.live_address(identity).is_some()
    }

    /// Keeps this replica's Lease and the view of the others until `stop`, then deletes the
    /// Lease so the others stop forwarding here at once.
    pub async fn run(self: Arc<Self>, client: kube::Client, mut stop: watch::Receiver<bool>) {
        let api: Api<Lease> = Api::namespaced(client, LEASE_NAMESPACE);
        let _ = self.leases.set(api.clone());
        let mut ticker = tokio::time::interval(RENEW);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_error: Option<String> = None;
        loop {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => break,
                _ = ticker.tick() => {}
            }
            let outcome = match self.renew(&api).await {
                Ok(()) => self.look(&api).await,
                Err(e) => Err(e),
            };
            // Each distinct failure is logged once, and the recovery once.
            match outcome {
                Ok(()) if last_error.take().is_some() => {
                    tracing::info!("this replica's Lease is renewed again")
                }
                Ok(()) => {}
                Err(error) => {
                    if last_error.as_ref() != Some(&error) {
                        tracing::warn!(%error, "cannot keep this replica's Lease");
                    }
                    last_error = Some(error);
                }
            }
        }
        let _ = api
            .delete(&lease_name(&self.identity), &Default::default())
            .await;
    }

    async fn renew(&self, api: &Api<Lease>) -> Result<(), String> {
        let name = lease_name(&self.identity);
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let kept = self.lease.lock().expect("lease lock").take();
        let renewed = match kept {
            Some(mut lease) => {
                if let Some(spec) = &mut lease.spec {
                    spec.renew_time = Some(now.clone());
                }
                match api.replace(&name, &PostParams::default(), &lease).await {
                    Ok(lease) => Some(lease),
                    // Deleted or written by someone else (a replica that saw it long gone):
                    // read it again.
                    Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => None,
                    Err(e) => return Err(e.to_string()),
                }
            }
            None => None,
        };
        let lease = match renewed {
            Some(lease) => lease,
            None => self.write_lease(api, &name, now).await?,
        };
        *self.lease.lock().expect("lease lock") = Some(lease);
        Ok(())
    }

    /// Writes this replica's Lease over whatever is stored under its name.
    async fn write_lease(
        &self,
        api: &Api<Lease>,
        name: &str,
        now: MicroTime,
    ) -> Result<Lease, String> {
        let name = name.to_string();
        let mut lease = Lease {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(LEASE_NAMESPACE.into()),
                labels: Some([(REPLICA_LABEL.to_string(), "true".to_string())].into()),
                annotations: Some(
                    [
                        (PEER_ADDRESS_ANNOTATION.to_string(), self.address.clone()),
                        (
                            VERSION_ANNOTATION.to_string(),
                            lariat_api::support::LARIAT.to_string(),
                        ),
                    ]
                    .into(),
                ),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.identity.clone()),
                lease_duration_seconds: Some(LEASE_DURATION.as_secs() as i32),
                renew_time: Some(now.clone()),
                ..Default::default()
            }),
        };
        match api.get_opt(&name).await.map_err(|e| e.to_string())? {
            Some(existing) => {
                lease.metadata.resource_version = existing.metadata.resource_version;
                if let Some(spec) = &mut lease.spec {
                    spec.acquire_time = existing.spec.and_then(|s| s.acquire_time);
                }
                api.replace(&name, &PostParams::default(), &lease)
                    .await
                    .map_err(|e| e.to_string())
            }
            None => {
                if let Some(spec) = &mut lease.spec {
                    spec.acquire_time = Some(now);
                }
                api.create(&PostParams::default(), &lease)
                    .await
                    .map_err(|e| e.to_string())
            }
        }
    }

    /// Reads every replica's Lease into the view, and deletes those long gone.
    async fn look(&self, api: &Api<Lease>) -> Result<(), String> {
        let mut seen = HashMap::new();
        for (name, identity, peer) in list_peers(api).await.map_err(|e| e.to_string())? {
            if peer.age() > FORGET_AFTER {
                let _ = api.delete(&name, &Default::default()).await;
                continue;
            }
            if identity != self.identity && !peer.address.is_empty() {
                seen.insert(identity, peer);
            }
        }
        *self.peers.lock().expect("peers lock") = seen;
        Ok(())
    }

    /// Whether `identity`'s own Lease, read now, shows it live (and if so, it joins the view):
    /// a replica that has just started forwards before this one's next look would see it, and
    /// its callers must not be told meanwhile that their credentials are wrong.
    async fn live_in_store(&self, identity: &str) -> bool {
        let Some(api) = self.leases.get() else {
            return false;
        };
        let Ok(Some(lease)) = api.get_opt(&lease_name(identity)).await else {
            return false;
        };
        match peer_of(lease) {
            Some((holder, peer))
                if holder == identity && peer.live() && !peer.address.is_empty() =>
            {
                self.peers.lock().expect("peers lock").insert(holder, peer);
                true
            }
            _ => false,
        }
    }

    /// Refuses to run beside live replicas of a lariat version the support matrix does not
    /// allow next to this one's (`lariat version --matrix`): replicas are upgraded one minor
    /// version at a time.
    pub async fn check_versions(&self, client: &kube::Client) -> Result<(), String> {
        let api: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
        let peers = list_peers(&api)
            .await
            .map_err(|e| format!("cannot read the other replicas' Leases: {e}"))?;
        let ours = lariat_api::support::LARIAT;
        for (_, identity, peer) in peers {
            if peer.live()
                && !peer.version.is_empty()
                && !lariat_api::support::replicas_compatible(ours, &peer.version)
            {
                return Err(format!(
                    "replica {identity} runs lariat v{}, which may not run beside v{ours}: replicas may be one minor version apart at most, so upgrade one minor version at a time (lariat version --matrix)",
                    peer.version
                ));
            }
        }
        Ok(())
    }

    /// The caller of a request another replica forwarded (it carries [`FORWARDED_USER`]):
    /// accepted only on a cluster proxy path, from a certificate the shared CA signed for a
    /// replica, for no longer than a replica's credential lives, naming a live replica other
    /// than this one. Anything else is refused as unauthenticated.
    pub async fn forwarded_user(
        &self,
        authenticator: &Authenticator,
        chain: Option<&[CertificateDer<'static>]>,
        path: &str,
        headers: &HeaderMap,
    ) -> Result<User, ApiError> {
        let refuse = |why: &str| {
            tracing::debug!(path, "forwarded request refused: {why}");
            Err(ApiError::Unauthorized)
        };
        if !path.starts_with("/k8s/clusters/") {
            return refuse("a replica's credential is accepted for cluster proxy requests only");
        }
        let Some(chain) = chain.filter(|c| authenticator.verifies(c)) else {
            return refuse("no client certificate of this datastore's CA");
        };
        let Some(identity) = replica_of(&chain[0]) else {
            return refuse("the client certificate is not a replica's credential");
        };
        if identity == self.identity {
            return refuse("a replica never forwards to itself");
        }
        if !self.is_live(&identity) && !self.live_in_store(&identity).await {
            return refuse("the forwarding replica is not live");
        }
        // Names travel as their UTF-8 bytes (`identity_header`); one that is not is refused
        // with the request, never dropped from it.
        let text = |value: &HeaderValue| {
            std::str::from_utf8(value.as_bytes())
                .ok()
                .filter(|t| !t.is_empty())
                .map(str::to_string)
        };
        let Some(name) = headers.get(FORWARDED_USER).and_then(text) else {
            return refuse("no forwarded user");
        };
        let Some(groups) = headers
            .get_all(FORWARDED_GROUP)
            .iter()
            .map(text)
            .collect::<Option<Vec<_>>>()
        else {
            return refuse("a forwarded group is not UTF-8 text");
        };
        Ok(User { name, groups })
    }

    /// Sends `request` (a cluster proxy request `caller` may make) to the replica `holder`,
    /// which holds the cluster's tunnel, and streams its answer back.
    pub async fn forward(
        &self,
        holder: &str,
        caller: &User,
        request: axum::extract::Request,
    ) -> Response {
        let Some(address) = self.live_address(holder) else {
            return ApiError::Unavailable {
                message: format!(
                    "the replica that held this cluster's tunnel ({holder}) is gone: its agent reconnects to another replica, retry in a few seconds"
                ),
            }
            .into_response();
        };
        let client = match self.client() {
            Ok(client) => client,
            Err(error) => return ApiError::internal(error).into_response(),
        };
        let (mut parts, body) = request.into_parts();
        let path = parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        let Ok(uri) = format!("https://{address}{path}").parse() else {
            return ApiError::bad_request("invalid proxy path").into_response();
        };
        parts.uri = uri;
        parts.version = axum::http::Version::HTTP_11;
        crate::forwarding::strip_caller_headers(&mut parts.headers);
        let value = |text: &str| crate::forwarding::identity_header(text, "to another replica");
        match value(&caller.name) {
            Ok(name) => parts.headers.insert(FORWARDED_USER, name),
            Err(error) => return error.into_response(),
        };
        for group in &caller.groups {
            match value(group) {
                Ok(group) => parts.headers.append(FORWARDED_GROUP, group),
                Err(error) => return error.into_response(),
            };
        }
        let sent = tokio::time::timeout(
            FORWARD_TIMEOUT,
            client.request(axum::http::Request::from_parts(parts, body)),
        )
        .await;
        match sent {
            Ok(Ok(response)) => response.map(Body::new),
            Ok(Err(error)) => ApiError::Unavailable {
                message: format!(
                    "cannot reach the replica that holds this cluster's tunnel ({holder} at {address}): {error}"
                ),
            }
            .into_response(),
            Err(_) => ApiError::Unavailable {
                message: format!(
                    "the replica that holds this cluster's tunnel ({holder} at {address}) did not answer within {FORWARD_TIMEOUT:?}"
                ),
            }
            .into_response(),
        }
    }

    /// The forwarding client, with a credential issued afresh once half its life is over.
    fn client(&self) -> Result<HttpsClient, String> {
        let mut forwarder = self.forwarder.lock().expect("forwarder lock");
        if let Some((client, renew_at)) = forwarder.as_ref()
            && Instant::now() < *renew_at
        {
            return Ok(client.clone());
        }
        let client = self.new_client()?;
        *forwarder = Some((client.clone(), Instant::now() + CREDENTIAL_LIFETIME / 2));
        Ok(client)
    }

    fn new_client(&self) -> Result<HttpsClient, String> {
        let issued = self
            .pki
            .issue_client(
                &format!("{REPLICA_USER_PREFIX}{}", self.identity),
                &[REPLICAS_GROUP],
                CREDENTIAL_LIFETIME,
            )
            .map_err(|e| format!("cannot issue this replica's credential: {e}"))?;
        let chain = CertificateDer::pem_slice_iter(issued.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(issued.key_pem.as_bytes())
            .map_err(|e| e.to_string())?;
        let mut roots = rustls::RootCertStore::empty();
        for ca in CertificateDer::pem_slice_iter(self.pki.ca_cert_pem.as_bytes()) {
            roots
                .add(ca.map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
        }
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(|e| e.to_string())?;
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_only()
            .enable_all_versions()
            .build();
        Ok(Client::builder(TokioExecutor::new()).build(connector))
    }
}

/// The name of the Lease of the replica `identity` (any string: the Lease's name is a hash).
fn lease_name(identity: &str) -> String {
    format!("{LEASE_PREFIX}{}", &sha256_hex(identity)[..20])
}

/// The replica a certificate is the credential of: its subject is a replica's and its
/// validity no longer than a replica's credential. `None` for any other certificate.
fn replica_of(leaf: &CertificateDer<'_>) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(leaf.as_ref()).ok()?;
    let subject = cert.subject();
    let name = subject.iter_common_name().next()?.as_str().ok()?;
    let identity = name.strip_prefix(REPLICA_USER_PREFIX)?;
    let in_group = subject
        .iter_organization()
        .any(|o| o.as_str().ok() == Some(REPLICAS_GROUP));
    let validity = cert.validity();
    let span = validity.not_after.timestamp() - validity.not_before.timestamp();
    (in_group && !identity.is_empty() && span <= LONGEST_CREDENTIAL.as_secs() as i64)
        .then(|| identity.to_string())
}

/// The address other replicas reach this one at when none is given: the listener's, unless
/// it listens on every interface; then the address this machine sends from (to any
/// destination: no packet leaves), or loopback on a machine without a route.
pub fn default_address(listening: std::net::SocketAddr) -> String {
    if !listening.ip().is_unspecified() {
        return listening.to_string();
    }
    let outbound = std::net::UdpSocket::bind(("0.0.0.0", 0))
        .and_then(|socket| {
            socket.connect(("192.0.2.1", 9))?;
            socket.local_addr()
        })
        .map(|a| a.ip());
    match outbound {
        Ok(ip) if !ip.is_unspecified() => {
            std::net::SocketAddr::new(ip, listening.port()).to_string()
        }
        _ => {
            tracing::warn!(
                "no route to pick this replica's address from: other replicas are told 127.0.0.1; set --peer-address"
            );
            std::net::SocketAddr::from(([127, 0, 0, 1], listening.port())).to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ca(dir: &std::path::Path) -> Pki {
        Pki::load_or_create(dir, &["127.0.0.1".to_string()]).unwrap()
    }

    fn der(pem: &str) -> CertificateDer<'static> {
        CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
    }

    #[test]
    fn only_a_replicas_credential_names_a_replica() {
        let dir = tempfile::tempdir().unwrap();
        let pki = ca(dir.path());
        let hour = Duration::from_secs(3600);
        let replica = pki
            .issue_client("system:lariat:replica:host_1_ab", &[REPLICAS_GROUP], hour)
            .unwrap();
        assert_eq!(
            replica_of(&der(&replica.cert_pem)).as_deref(),
            Some("host_1_ab")
        );
        // The admin's certificate, one without the group, one living too long: not replicas.
        let admin = pki
            .issue_client("lariat-admin", &["system:masters"], hour)
            .unwrap();
        assert_eq!(replica_of(&der(&admin.cert_pem)), None);
        let no_group = pki
            .issue_client("system:lariat:replica:host_1_ab", &["system:masters"], hour)
            .unwrap();
        assert_eq!(replica_of(&der(&no_group.cert_pem)), None);
        let long = pki
            .issue_client(
                "system:lariat:replica:host_1_ab",
                &[REPLICAS_GROUP],
                Duration::from_secs(86_400),
            )
            .unwrap();
        assert_eq!(replica_of(&der(&long.cert_pem)), None);
    }

    #[tokio::test]
    async fn a_forwarded_caller_is_believed_only_from_a_live_replica_of_the_same_ca() {
        let dir = tempfile::tempdir().unwrap();
        let pki = ca(&dir.path().join("a"));
        let other = ca(&dir.path().join("b"));
        let store: Arc<dyn lariat_store::Store> =
            Arc::new(lariat_store::memory::MemoryStore::new());
        let authenticator = Authenticator::new(store, &pki.ca_cert_pem).unwrap();
        let here = Replicas::new(
            "here".into(),
            "127.0.0.1:1".into(),
            ca(&dir.path().join("a")),
        );
        here.peers.lock().unwrap().insert(
            "there".into(),
            Peer {
                address: "127.0.0.1:2".into(),
                renewed: chrono::Utc::now(),
                version: lariat_api::support::LARIAT.into(),
            },
        );
        let hour = Duration::from_secs(3600);
        let credential = |pki: &Pki, identity: &str| {
            vec![der(&pki
                .issue_client(
                    &format!("{REPLICA_USER_PREFIX}{identity}"),
                    &[REPLICAS_GROUP],
                    hour,
                )
                .unwrap()
                .cert_pem)]
        };
        let mut headers = HeaderMap::new();
        headers.insert(FORWARDED_USER, HeaderValue::from_static("alice"));
        headers.append(FORWARDED_GROUP, HeaderValue::from_static("devs"));
        headers.append(FORWARDED_GROUP, HeaderValue::from_static("ops"));
        let path = "/k8s/clusters/default/remote/api/v1/nodes";
        let from_there = credential(&pki, "there");
        let user = here
            .forwarded_user(&authenticator, Some(&from_there), path, &headers)
            .await
            .unwrap();
        assert_eq!((user.name.as_str(), user.groups.len()), ("alice", 2));

        let refused =
            async |chain: Option<&[CertificateDer<'static>]>, path: &str, headers: &HeaderMap| {
                matches!(
                    here.forwarded_user(&authenticator, chain, path, headers)
                        .await,
                    Err(ApiError::Unauthorized)
                )
            };
        // Not a proxy path; no certificate; another CA's; the admin's; this replica's own; a
        // replica not live; no forwarded user.
        assert!(refused(Some(&from_there), "/api/v1/secrets", &headers).await);
        assert!(refused(None, path, &headers).await);
        assert!(refused(Some(&credential(&other, "there")), path, &headers).await);
        let admin = vec![der(&pki
            .issue_client("lariat-admin", &["system:masters"], hour)
            .unwrap()
            .cert_pem)];
        assert!(refused(Some(&admin), path, &headers).await);
        assert!(refused(Some(&credential(&pki, "here")), path, &headers).await);
        assert!(refused(Some(&credential(&pki, "elsewhere")), path, &headers).await);
        here.peers.lock().unwrap().get_mut("there").unwrap().renewed =
            chrono::Utc::now() - chrono::Duration::seconds(60);
        assert!(refused(Some(&from_there), path, &headers).await);
        here.peers.lock().unwrap().get_mut("there").unwrap().renewed = chrono::Utc::now();
        assert!(refused(Some(&from_there), path, &HeaderMap::new()).await);
    }
}
