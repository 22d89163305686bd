//! The HTTPS listener: rustls, HTTP/1.1 and HTTP/2, and the limits that keep one client from
//! holding the server: connections per client address and in total, a deadline for a
//! connection with no request in flight (idle keep-alives, a client that sends nothing or
//! trickles its headers), a lifetime for every connection, and a graceful stop.
//!
//! A connection is unauthenticated until one of its requests authenticates (the router marks
//! such an answer with [`Authenticated`]). Unauthenticated connections (health probes,
//! agents before their handshake, anyone) have a pool of their own, smaller per address and
//! in total, and a short lifetime; when the pool is full the oldest is closed to make room. So
//! anonymous clients can never hold the slots that users and agents connect through.
//!
//! Client certificates are requested but not judged here: the TLS handshake proves the client
//! holds the certificate's key, and the authenticator of whichever trust domain the request
//! reaches (the management plane, or one simulated workload cluster) checks the chain against
//! its own CA.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use tower::ServiceExt;

use crate::identity::Peer;
use crate::pki::Pki;

/// How many connections the listener holds, and for how long.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Open connections in total (`--max-connections`).
    pub max_connections: usize,
    /// Open connections from one client address (`--max-connections-per-client`).
    pub max_connections_per_address: usize,
    /// Connections none of whose requests has authenticated yet, in total
    /// (`--max-unauthenticated-connections`); the oldest is closed to admit a new one.
    pub max_unauthenticated_connections: usize,
    /// Such connections from one client address (`--max-unauthenticated-connections-per-client`).
    pub max_unauthenticated_connections_per_address: usize,
    /// A connection with no request in flight for this long is closed (covers idle
    /// keep-alives, clients that send nothing, and headers trickled a byte at a time).
    pub idle_timeout: Duration,
    /// How long an authenticated connection lives (`--max-connection-age`, less up to a tenth
    /// at random so that clients do not all reconnect at once): then it is asked to close
    /// (HTTP/2 GOAWAY; the clients reconnect, through a load balancer perhaps to another
    /// replica), and closed after [`CLOSING_GRACE`] whatever still streams.
    pub max_connection_age: Duration,
    /// How long a connection lives while none of its requests has authenticated.
    pub unauthenticated_connection_age: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 16_384,
            max_connections_per_address: 1_024,
            max_unauthenticated_connections: 1_024,
            max_unauthenticated_connections_per_address: 512,
            idle_timeout: Duration::from_secs(60),
            max_connection_age: Duration::from_secs(3600),
            unauthenticated_connection_age: Duration::from_secs(30),
        }
    }
}

/// How long a connection asked to close may finish what it streams (watches) before it is cut.
pub const CLOSING_GRACE: Duration = Duration::from_secs(60);

/// Marks an answer to a request that authenticated: its connection leaves the
/// unauthenticated pool.
#[derive(Clone, Copy, Debug)]
pub struct Authenticated;

/// Asks every client for a certificate, proves it holds the key, and leaves the judgement of
/// the chain to the authenticator of the trust domain the request reaches.
#[derive(Debug)]
struct RequestClientCertificate {
    algorithms: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for RequestClientCertificate {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    /// No CA hints: each trust domain has its own CA, and a client (Go's crypto/tls among
    /// them) sends no certificate at all when the hints do not name its issuer.
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

pub fn server_config(pki: &Pki) -> Result<Arc<rustls::ServerConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = Arc::new(RequestClientCertificate {
        algorithms: provider.signature_verification_algorithms,
    });
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(pki.server_cert_pem.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|e| format!("serving certificate: {e}"))?;
    let key = PrivateKeyDer::from_pem_slice(pki.server_key_pem.as_bytes())
        .map_err(|e| format!("serving key: {e}"))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(|e| format!("serving certificate: {e}"))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Open connections, by client address and in total, and those not yet authenticated.
#[derive(Default)]
struct Connections {
    counts: Mutex<Counts>,
}

#[derive(Default)]
struct Counts {
    total: usize,
    by_address: HashMap<IpAddr, usize>,
    unauthenticated: usize,
    unauthenticated_by_address: HashMap<IpAddr, usize>,
    /// Unauthenticated connections, oldest first (some may have authenticated or closed
    /// since: they are skipped).
    waiting: std::collections::VecDeque<std::sync::Weak<SlotState>>,
}

/// One admitted connection; dropping it frees its place.
struct Slot {
    connections: Arc<Connections>,
    address: IpAddr,
    state: Arc<SlotState>,
    opened: tokio::time::Instant,
    /// Up to a tenth of the maximum age, at random, so that clients do not all reconnect at
    /// once.
    jitter: Duration,
}

#[derive(Default)]
struct SlotState {
    authenticated: std::sync::atomic::AtomicBool,
    /// Closed to make room for a newer unauthenticated connection.
    evicted: tokio::sync::Notify,
}

fn decrement(map: &mut HashMap<IpAddr, usize>, address: IpAddr) {
    if let Some(count) = map.get_mut(&address) {
        *count -= 1;
        if *count == 0 {
            map.remove(&address);
        }
    }
}

impl Connections {
    fn admit(self: &Arc<Self>, address: IpAddr, limits: &Limits) -> Option<Slot> {
        let mut counts = self.counts.lock().expect("lock");
        let from_address = counts.by_address.get(&address).copied().unwrap_or(0);
        let waiting_from_address = counts
            .unauthenticated_by_address
            .get(&address)
            .copied()
            .unwrap_or(0);
        if counts.total >= limits.max_connections
            || from_address >= limits.max_connections_per_address
            || waiting_from_address >= limits.max_unauthenticated_connections_per_address
        {
            return None;
        }
        if counts.unauthenticated >= limits.max_unauthenticated_connections {
            // The oldest unauthenticated connection makes room: a newcomer may be a user
            // about to authenticate, and anonymous clients must not keep them out.
            while let Some(oldest) = counts.waiting.pop_front() {
                if let Some(oldest) = oldest.upgrade()
                    && !oldest.authenticated.load(Ordering::SeqCst)
                {
                    oldest.evicted.notify_one();
                    break;
                }
            }
        }
        let state = Arc::new(SlotState::default());
        counts.total += 1;
        *counts.by_address.entry(address).or_default() += 1;
        counts.unauthenticated += 1;
        *counts
            .unauthenticated_by_address
            .entry(address)
            .or_default() += 1;
        counts.waiting.push_back(Arc::downgrade(&state));
        // Entries of connections gone or authenticated are dropped as the queue grows.
        if counts.waiting.len() > 2 * limits.max_unauthenticated_connections + 64 {
            counts.waiting.retain(|w| {
                w.upgrade()
                    .is_some_and(|s| !s.authenticated.load(Ordering::SeqCst))
            });
        }
        Some(Slot {
            connections: self.clone(),
            address,
            state,
            opened: tokio::time::Instant::now(),
            jitter: limits
                .max_connection_age
                .mul_f64(rand::random::<f64>() / 10.0),
        })
    }

    fn total(&self) -> usize {
        self.counts.lock().expect("lock").total
    }
}

impl Slot {
    /// The connection's first authenticated answer: it leaves the unauthenticated pool.
    fn authenticated(&self) {
        if self.state.authenticated.swap(true, Ordering::SeqCst) {
            return;
        }
        let mut counts = self.connections.counts.lock().expect("lock");
        counts.unauthenticated -= 1;
        decrement(&mut counts.unauthenticated_by_address, self.address);
    }

    fn is_authenticated(&self) -> bool {
        self.state.authenticated.load(Ordering::SeqCst)
    }

    /// When the connection has lived as long as it may: `unauthenticated_age` after it
    /// opened while none of its requests has authenticated, `max_age` (less the jitter) once
    /// one has.
    fn deadline(&self, limits: &Limits) -> tokio::time::Instant {
        let age = if self.is_authenticated() {
            limits.max_connection_age - self.jitter
        } else {
            limits
                .unauthenticated_connection_age
                .min(limits.max_connection_age)
        };
        self.opened + age
    }

    /// Resolves at the connection's deadline (which authenticating moves later).
    async fn lifetime(&self, limits: &Limits) {
        loop {
            let deadline = self.deadline(limits);
            tokio::time::sleep_until(deadline).await;
            if self.deadline(limits) <= deadline {
                return;
            }
        }
    }

    /// Whether an HTTP/1 response should carry `Connection: close`: the connection is near its
    /// deadline. An HTTP/1 server cannot close a keep-alive connection without racing a request
    /// the client may be sending at that moment (which the client then sees fail); told on a
    /// response, the client closes it itself. A client that polls more often than every
    /// [`CLOSE_NOTICE`] is always told before the deadline closes it.
    fn should_close(&self, limits: &Limits) -> bool {
        tokio::time::Instant::now() + CLOSE_NOTICE >= self.deadline(limits)
    }
}

/// How long before a connection's deadline its HTTP/1 responses ask the client to close it.
const CLOSE_NOTICE: Duration = Duration::from_secs(2);

impl Drop for Slot {
    fn drop(&mut self) {
        let mut counts = self.connections.counts.lock().expect("lock");
        counts.total -= 1;
        decrement(&mut counts.by_address, self.address);
        if !self.state.authenticated.load(Ordering::SeqCst) {
            counts.unauthenticated -= 1;
            decrement(&mut counts.unauthenticated_by_address, self.address);
        }
    }
}

/// Requests in flight on one connection, and since when it has had none.
#[derive(Default)]
struct Activity {
    in_flight: AtomicUsize,
    changed: tokio::sync::Notify,
}

/// Held from a request's arrival until its response body is finished or dropped, so a long
/// watch counts as activity for as long as it streams.
struct InFlight(Arc<Activity>);

impl InFlight {
    fn new(activity: &Arc<Activity>) -> InFlight {
        activity.in_flight.fetch_add(1, Ordering::SeqCst);
        activity.changed.notify_waiters();
        InFlight(activity.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.0.changed.notify_waiters();
    }
}

/// A response body that keeps its request counted as in flight until it is done.
struct Tracked {
    body: axum::body::Body,
    _in_flight: InFlight,
}

impl http_body::Body for Tracked {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// Resolves once the connection has had no request in flight for `timeout`.
async fn idle(activity: &Activity, timeout: Duration) {
    loop {
        let changed = activity.changed.notified();
        if activity.in_flight.load(Ordering::SeqCst) == 0 {
            if tokio::time::timeout(timeout, changed).await.is_err()
                && activity.in_flight.load(Ordering::SeqCst) == 0
            {
                return;
            }
        } else {
            changed.await;
        }
    }
}

/// A connection's socket that fails a write its client has taken nothing of for `stall`: a
/// response cut for a stalled reader (`sending.rs`) frees what the server held for it, and
/// this frees the connection and what the kernel holds for its socket (some megabytes each),
/// which a connection blocked in a write would otherwise keep as long as its client.
struct WriteDeadline<IO> {
    io: IO,
    stall: Duration,
    /// Since the write that could not go on: when it must have.
    blocked: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<IO> WriteDeadline<IO> {
    fn new(io: IO, stall: Duration) -> Self {
        WriteDeadline {
            io,
            stall,
            blocked: None,
        }
    }

    /// What a write's `Pending` or progress means for the deadline.
    fn after<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<std::io::Result<T>>,
    ) -> Poll<std::io::Result<T>> {
        if polled.is_ready() {
            self.blocked = None;
            return polled;
        }
        let stall = self.stall;
        let deadline = self
            .blocked
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(stall)));
        if deadline.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the client took nothing of what was written for too long",
            )));
        }
        Poll::Pending
    }
}

impl<IO: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for WriteDeadline<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for WriteDeadline<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        self.after(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.after(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let polled = Pin::new(&mut self.io).poll_flush(cx);
        self.after(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Requests one HTTP/2 connection may carry at once: 200, hyper's default (Go's is 250).
/// Fixed.
pub const MAX_STREAMS_PER_CONNECTION: u32 = 200;

/// Accepts TLS connections until `shutdown` resolves, then gives open requests a few seconds.
pub async fn serve(
    listener: tokio::net::TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let connections = Arc::new(Connections::default());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let (stream, address) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Some(slot) = connections.admit(address.ip(), &limits) else {
            // Closing at once, before any TLS work, is the cheapest answer to a client that
            // already holds its share.
            tracing::debug!(%address, "connection refused: too many connections");
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(serve_connection(
            stream,
            address,
            slot,
            acceptor.clone(),
            app.clone(),
            limits.clone(),
            stop_rx.clone(),
        ));
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(6);
    while connections.total() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if connections.total() > 0 {
        tracing::info!("closing connections that did not finish within 5s (watches)");
    }
    Ok(())
}

/// Serves one accepted connection, which holds `slot`: the TLS handshake, then HTTP/1 or
/// HTTP/2 until the connection ends, is idle, reaches its age, is evicted or the server stops.
async fn serve_connection(
    stream: tokio::net::TcpStream,
    address: SocketAddr,
    slot: Slot,
    acceptor: tokio_rustls::TlsAcceptor,
    app: Router,
    limits: Limits,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let slot = Arc::new(slot);
    let stream = WriteDeadline::new(stream, crate::sending::WRITE_STALL);
    let tls_stream =
        match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                tracing::debug!(%address, error = %e, "TLS handshake failed");
                return;
            }
            Err(_) => {
                tracing::debug!(%address, "TLS handshake timed out");
                return;
            }
        };
    let certificates = tls_stream
        .get_ref()
        .1
        .peer_certificates()
        .filter(|chain| !chain.is_empty())
        .map(|chain| Arc::new(chain.iter().map(|c| c.clone().into_owned()).collect()));
    let peer = Peer::Remote {
        certificates,
        address,
    };
    let activity = Arc::new(Activity::default());
    let counted = activity.clone();
    let connection_slot = slot.clone();
    let connection_limits = limits.clone();
    let service =
        hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
            let in_flight = InFlight::new(&counted);
            let http1 = request.version() < hyper::Version::HTTP_2;
            request.extensions_mut().insert(peer.clone());
            let response = app.clone().oneshot(request.map(axum::body::Body::new));
            let slot = connection_slot.clone();
            let limits = connection_limits.clone();
            async move {
                let mut response = response.await?;
                if response.extensions().get::<Authenticated>().is_some() {
                    slot.authenticated();
                }
                if http1 && slot.should_close(&limits) {
                    response.headers_mut().insert(
                        hyper::header::CONNECTION,
                        hyper::header::HeaderValue::from_static("close"),
                    );
                }
                Ok::<_, std::convert::Infallible>(response.map(|body| {
                    axum::body::Body::new(Tracked {
                        body,
                        _in_flight: in_flight,
                    })
                }))
            }
        });
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(30));
    // A stream's send buffer is one chunk of a paced body (h2's default, 400 KiB,
    // let each of a connection's streams hold six more that nobody counts), and a
    // connection carries at most `MAX_STREAMS_PER_CONNECTION` requests at once.
    builder
        .http2()
        .max_send_buf_size(crate::sending::CHUNK)
        .max_concurrent_streams(MAX_STREAMS_PER_CONNECTION)
        .timer(TokioTimer::new())
        .keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(20));
    let connection = builder.serve_connection_with_upgrades(TokioIo::new(tls_stream), service);
    tokio::pin!(connection);
    let stopping = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    let result = tokio::select! {
        result = connection.as_mut() => result,
        _ = idle(&activity, limits.idle_timeout) => {
            tracing::debug!(%address, "closing a connection with no request in flight");
            connection.as_mut().graceful_shutdown();
            tokio::time::timeout(Duration::from_secs(5), connection.as_mut()).await.unwrap_or(Ok(()))
        }
        _ = slot.lifetime(&limits) => {
            tracing::debug!(%address, authenticated = slot.is_authenticated(), "closing a connection that reached its maximum age");
            connection.as_mut().graceful_shutdown();
            tokio::time::timeout(CLOSING_GRACE, connection.as_mut()).await.unwrap_or(Ok(()))
        }
        _ = slot.state.evicted.notified() => {
            tracing::debug!(%address, "closing an unauthenticated connection to make room for a newer one");
            connection.as_mut().graceful_shutdown();
            tokio::time::timeout(Duration::from_secs(1), connection.as_mut()).await.unwrap_or(Ok(()))
        }
        _ = stopping => {
            connection.as_mut().graceful_shutdown();
            tokio::time::timeout(Duration::from_secs(5), connection.as_mut()).await.unwrap_or(Ok(()))
        }
    };
    if let Err(e) = result {
        tracing::debug!(%address, error = %e, "connection ended with an error");
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test]
    async fn a_write_the_client_takes_nothing_of_fails_at_the_deadline_and_progress_resets_it() {
        let stall = Duration::from_millis(300);
        let (server, mut client) = tokio::io::duplex(1024);
        let mut server = WriteDeadline::new(server, stall);
        // A client that reads, slowly but within the deadline, keeps the connection.
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 1024];
            for _ in 0..4 {
                tokio::time::sleep(stall / 2).await;
                client.read_exact(&mut buf).await.unwrap();
            }
            client
        });
        for _ in 0..5 {
            server
                .write_all(&[b'x'; 1024])
                .await
                .expect("the client reads");
        }
        let client = reader.await.unwrap();
        // A client that stops reading fails the write once the deadline passes.
        let started = std::time::Instant::now();
        let error = server.write_all(&[b'x'; 2048]).await.unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= stall, "failed before the deadline");
        drop(client);
    }
}
