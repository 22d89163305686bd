//! What the fleet tests share: repositories made with the `git` program (as a user makes
//! them), the limits and sources they fetch with, and git's smart-http backend
//! (`git http-backend`, CGI) answering through axum.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use axum::body::Body;
use axum::http::{Request, Response};
use lariat_fleet::Limits;
use lariat_fleet::git::{Reference, Source};

/// Runs `git` in `dir`, failing the test if it fails.
pub fn run_git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "test")
        .env("GIT_AUTHOR_EMAIL", "test@example.com")
        .env("GIT_COMMITTER_NAME", "test")
        .env("GIT_COMMITTER_EMAIL", "test@example.com")
        .output()
        .expect("run git (is it installed?)");
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap().trim().to_string()
}

/// A repository `upstream` under `root` on branch `main`, holding `files`; returns its path
/// and the commit.
pub fn repository<C: AsRef<[u8]>>(root: &Path, files: &[(&str, C)]) -> (PathBuf, String) {
    let dir = root.join("upstream");
    std::fs::create_dir_all(&dir).unwrap();
    run_git(&dir, &["init", "-q", "-b", "main"]);
    let commit = commit(&dir, files, "first");
    (dir, commit)
}

/// Writes `files` into the repository at `dir` and commits everything; returns the commit.
pub fn commit<C: AsRef<[u8]>>(dir: &Path, files: &[(&str, C)], message: &str) -> String {
    for (path, content) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    run_git(dir, &["add", "-A"]);
    run_git(dir, &["commit", "-q", "-m", message]);
    run_git(dir, &["rev-parse", "HEAD"])
}

/// The limits the server runs with by default, but fetching from loopback, where the
/// tests' servers listen.
pub fn loopback() -> Limits {
    Limits {
        allowed_networks: lariat_fleet::limits::parse_networks("127.0.0.0/8, ::1").unwrap(),
        ..Limits::default()
    }
}

/// Branch `main` of `url`, with no credential.
pub fn source(url: String) -> Source {
    Source {
        url,
        reference: Reference::Branch("main".into()),
        auth: None,
        ca_bundle: None,
    }
}

/// Answers `request` for the repository path `path` under `root` with `git http-backend`,
/// as `remote_user` when given.
pub async fn http_backend(
    root: &Path,
    path: &str,
    request: Request<Body>,
    remote_user: Option<&str>,
) -> Response<Body> {
    use tokio::io::AsyncWriteExt;
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let mut command = tokio::process::Command::new("git");
    command
        .arg("http-backend")
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("REQUEST_METHOD", parts.method.as_str())
        .env("PATH_INFO", path)
        .env("QUERY_STRING", parts.uri.query().unwrap_or_default())
        .env("CONTENT_TYPE", header("content-type"))
        .env("GIT_PROTOCOL", header("git-protocol"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    if let Some(user) = remote_user {
        command.env("REMOTE_USER", user);
    }
    let mut child = command.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(&body).await.unwrap();
    drop(stdin);
    let output = child.wait_with_output().await.unwrap();
    // A CGI response: headers, a blank line, the body.
    let (end, gap) = output
        .stdout
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4))
        .or_else(|| {
            output
                .stdout
                .windows(2)
                .position(|w| w == b"\n\n")
                .map(|i| (i, 2))
        })
        .expect("CGI headers");
    let mut response = Response::builder();
    for line in String::from_utf8_lossy(&output.stdout[..end]).lines() {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("status") {
            let code: u16 = value.split_whitespace().next().unwrap().parse().unwrap();
            response = response.status(code);
        } else {
            response = response.header(name, value);
        }
    }
    response
        .body(Body::from(output.stdout[end + gap..].to_vec()))
        .unwrap()
}

/// A certificate authority, and a certificate it signed for 127.0.0.1.
pub fn authority() -> (String, tokio_rustls::TlsAcceptor) {
    let (ca_pem, leaf, key) = signed_for_loopback();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
        )
        .unwrap();
    (
        ca_pem,
        tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config)),
    )
}

/// A certificate authority's PEM, and the PEM of a certificate it signed for 127.0.0.1 and
/// of its key, for a server that reads files.
pub fn authority_pem() -> (String, String, String) {
    let (ca_pem, leaf, key) = signed_for_loopback();
    (ca_pem, leaf.pem(), key.serialize_pem())
}

fn signed_for_loopback() -> (String, rcgen::Certificate, rcgen::KeyPair) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
    let issuer = rcgen::Issuer::from_ca_cert_pem(&ca_pem, ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    (ca_pem, leaf, key)
}

/// Serves `app` over https with `acceptor`'s certificate on loopback; returns the base URL.
pub async fn serve_tls(app: axum::Router, acceptor: tokio_rustls::TlsAcceptor) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (acceptor, app) = (acceptor.clone(), app.clone());
            tokio::spawn(async move {
                // A client that does not trust the certificate hangs up here.
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper_util::service::TowerToHyperService::new(app);
                let _ = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                )
                .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                .await;
            });
        }
    });
    format!("https://{address}")
}
