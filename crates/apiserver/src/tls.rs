//! The HTTPS listener: rustls with optional client certificates verified against the
//! server's CA, HTTP/1.1 and HTTP/2, and a graceful stop.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use tower::ServiceExt;

use crate::auth::user_from_certificate;
use crate::http::PeerCertificate;
use crate::pki::Pki;

pub fn server_config(pki: &Pki) -> Result<Arc<rustls::ServerConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let ca = CertificateDer::from_pem_slice(pki.ca_cert_pem.as_bytes())
        .map_err(|e| format!("CA certificate: {e}"))?;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca).map_err(|e| format!("CA certificate: {e}"))?;
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()
        .map_err(|e| format!("client verifier: {e}"))?;
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

/// Accepts TLS connections until `shutdown` resolves, then gives open requests a few seconds.
pub async fn serve(
    listener: tokio::net::TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
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
        let _ = stream.set_nodelay(true);
        let acceptor = acceptor.clone();
        let app = app.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let tls_stream = match tokio::time::timeout(
                Duration::from_secs(10),
                acceptor.accept(stream),
            )
            .await
            {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            };
            let certificate = tls_stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|chain| chain.first())
                .and_then(|leaf| user_from_certificate(leaf));
            let identity = PeerCertificate(certificate);
            let service = hyper::service::service_fn(
                move |mut request: hyper::Request<hyper::body::Incoming>| {
                    request.extensions_mut().insert(identity.clone());
                    app.clone().oneshot(request.map(axum::body::Body::new))
                },
            );
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            let connection =
                builder.serve_connection_with_upgrades(TokioIo::new(tls_stream), service);
            if let Err(e) = watcher.watch(connection.into_owned()).await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(Duration::from_secs(5), graceful.shutdown())
        .await
        .is_err()
    {
        tracing::info!("closing connections that did not finish within 5s (watches)");
    }
    Ok(())
}
