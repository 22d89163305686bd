//! The HTTPS listener: rustls, HTTP/1.1 and HTTP/2, and the limits that keep one client from
//! holding the server: connections per client address and in total, a deadline for a
//! connection with no request in flight (idle keep-alives, a client that sends nothing or
//! trickles its headers), and a graceful stop.
//!
//! Client certificates are requested but not judged here: the TLS handshake proves the client
//! holds the certificate's key, and the authenticator of whichever trust domain the request
//! reaches (the management plane, or one simulated workload cluster) checks the chain against
//! its own CA.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
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

use crate::auth::Peer;
use crate::pki::Pki;

/// How many connections the listener holds, and for how long a connection may sit without a
/// request in flight.
#[derive(Clone, Debug)]
pub struct Limits {
    pub max_connections: usize,
    pub max_connections_per_address: usize,
    /// A connection with no request in flight for this long is closed (covers idle
    /// keep-alives, clients that send nothing, and headers trickled a byte at a time).
    pub idle_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 16_384,
            max_connections_per_address: 1_024,
            idle_timeout: Duration::from_secs(60),
        }
    }
}

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

/// Open connections, by client address and in total.
#[derive(Default)]
struct Connections {
    by_address: Mutex<HashMap<IpAddr, usize>>,
    total: AtomicUsize,
}

/// One admitted connection; dropping it frees its place.
struct Slot {
    connections: Arc<Connections>,
    address: IpAddr,
}

impl Connections {
    fn admit(self: &Arc<Self>, address: IpAddr, limits: &Limits) -> Option<Slot> {
        let mut by_address = self.by_address.lock().expect("lock");
        let count = by_address.entry(address).or_default();
        if *count >= limits.max_connections_per_address
            || self.total.load(Ordering::Relaxed) >= limits.max_connections
        {
            if *count == 0 {
                by_address.remove(&address);
            }
            return None;
        }
        *count += 1;
        self.total.fetch_add(1, Ordering::Relaxed);
        Some(Slot {
            connections: self.clone(),
            address,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut by_address = self.connections.by_address.lock().expect("lock");
        if let Some(count) = by_address.get_mut(&self.address) {
            *count -= 1;
            if *count == 0 {
                by_address.remove(&self.address);
            }
        }
        self.connections.total.fetch_sub(1, Ordering::Relaxed);
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
        let acceptor = acceptor.clone();
        let app = app.clone();
        let mut stop = stop_rx.clone();
        let idle_timeout = limits.idle_timeout;
        tokio::spawn(async move {
            let _slot = slot;
            let tls_stream = match tokio::time::timeout(
                Duration::from_secs(10),
                acceptor.accept(stream),
            )
            .await
            {
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
            let service = hyper::service::service_fn(
                move |mut request: hyper::Request<hyper::body::Incoming>| {
                    let in_flight = InFlight::new(&counted);
                    request.extensions_mut().insert(peer.clone());
                    let response = app.clone().oneshot(request.map(axum::body::Body::new));
                    async move {
                        let response = response.await?;
                        Ok::<_, std::convert::Infallible>(response.map(|body| {
                            axum::body::Body::new(Tracked {
                                body,
                                _in_flight: in_flight,
                            })
                        }))
                    }
                },
            );
            let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(30));
            builder
                .http2()
                .timer(TokioTimer::new())
                .keep_alive_interval(Duration::from_secs(30))
                .keep_alive_timeout(Duration::from_secs(20));
            let connection =
                builder.serve_connection_with_upgrades(TokioIo::new(tls_stream), service);
            tokio::pin!(connection);
            let stopping = async move {
                let _ = stop.wait_for(|s| *s).await;
            };
            let result = tokio::select! {
                result = connection.as_mut() => result,
                _ = idle(&activity, idle_timeout) => {
                    tracing::debug!(%address, "closing a connection with no request in flight");
                    connection.as_mut().graceful_shutdown();
                    tokio::time::timeout(Duration::from_secs(5), connection.as_mut()).await.unwrap_or(Ok(()))
                }
                _ = stopping => {
                    connection.as_mut().graceful_shutdown();
                    tokio::time::timeout(Duration::from_secs(5), connection.as_mut()).await.unwrap_or(Ok(()))
                }
            };
            if let Err(e) = result {
                tracing::debug!(%address, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(6);
    while connections.total.load(Ordering::Relaxed) > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if connections.total.load(Ordering::Relaxed) > 0 {
        tracing::info!("closing connections that did not finish within 5s (watches)");
    }
    Ok(())
}
