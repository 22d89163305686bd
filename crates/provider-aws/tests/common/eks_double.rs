//! A TEST DOUBLE for the part of EKS moto lacks, named as such: an HTTP proxy in front of
//! moto that answers UpdateClusterVersion and UpdateNodegroupVersion (moto answers both with
//! 404) and shows their effect where AWS does, in DescribeCluster and DescribeNodegroup: the
//! cluster or group is UPDATING for a while, then ACTIVE at the new version. It can
//! also point a cluster's endpoint and CA at a stand-in API server (moto's endpoint resolves
//! nowhere), and answer SSM GetParameter for the parameters AWS publishes under
//! `/aws/service/` (EKS-optimized AMIs), which moto reserves and does not hold. Every other
//! request goes to moto unchanged, so everything moto does implement is still tested against
//! moto.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// How long an update shows UPDATING (EKS takes tens of minutes).
const UPDATING_FOR: std::time::Duration = std::time::Duration::from_secs(2);

pub struct EksDouble {
    /// Where the SDK is pointed instead of moto.
    pub endpoint: String,
    state: Arc<Mutex<Doubled>>,
}

#[derive(Default)]
struct Doubled {
    moto: String,
    /// By `cluster` or `cluster/nodegroup`: the version asked for and when it is done.
    updates: HashMap<String, (String, std::time::Instant)>,
    /// Every update asked for, in order: `cluster 1.32`, `cluster/nodegroup 1.32`.
    requested: Vec<String>,
    /// By cluster: the endpoint and base64 CA its reads show.
    endpoints: HashMap<String, (String, String)>,
    /// AWS's published SSM parameters, by name.
    published: HashMap<String, String>,
}

impl EksDouble {
    pub async fn start(moto: &str) -> EksDouble {
        let state = Arc::new(Mutex::new(Doubled {
            moto: moto.trim_end_matches('/').to_owned(),
            ..Doubled::default()
        }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(state.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        EksDouble { endpoint, state }
    }

    /// The version updates asked for so far, in order.
    pub fn requested(&self) -> Vec<String> {
        self.state.lock().unwrap().requested.clone()
    }

    /// Publishes an SSM parameter as AWS does under `/aws/service/`.
    pub fn publish(&self, name: &str, value: &str) {
        self.state
            .lock()
            .unwrap()
            .published
            .insert(name.to_owned(), value.to_owned());
    }

    /// Makes `cluster`'s reads show `endpoint` (`https://host:port`) and `ca` (base64 PEM).
    pub fn point(&self, cluster: &str, endpoint: &str, ca: &str) {
        self.state
            .lock()
            .unwrap()
            .endpoints
            .insert(cluster.to_owned(), (endpoint.to_owned(), ca.to_owned()));
    }
}

fn segments(uri: &Uri) -> Vec<String> {
    uri.path()
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| s.replace("%2F", "/"))
        .collect()
}

async fn handle(
    State(state): State<Arc<Mutex<Doubled>>>,
    method: Method,
    uri: Uri,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Response {
    let path = segments(&uri);
    let path: Vec<&str> = path.iter().map(String::as_str).collect();
    let update_of = match (&method, path.as_slice()) {
        (&Method::POST, ["clusters", cluster, "updates"]) => Some(cluster.to_string()),
        (&Method::POST, ["clusters", cluster, "node-groups", group, "update-version"]) => {
            Some(format!("{cluster}/{group}"))
        }
        _ => None,
    };
    if let Some(key) = update_of {
        let asked: Value = serde_json::from_slice(&body).unwrap_or_default();
        let version = asked["version"].as_str().unwrap_or_default().to_owned();
        let mut state = state.lock().unwrap();
        state.requested.push(format!("{key} {version}"));
        let done = std::time::Instant::now() + UPDATING_FOR;
        state.updates.insert(key, (version.clone(), done));
        let update = json!({"update": {
            "id": format!("update-{}", state.requested.len()),
            "status": "InProgress",
            "type": "VersionUpdate",
            "params": [{"type": "Version", "value": version}],
            "errors": [],
        }});
        return (StatusCode::OK, axum::Json(update)).into_response();
    }

    if headers
        .get("x-amz-target")
        .is_some_and(|t| t == "AmazonSSM.GetParameter")
    {
        let asked: Value = serde_json::from_slice(&body).unwrap_or_default();
        let name = asked["Name"].as_str().unwrap_or_default();
        if let Some(value) = state.lock().unwrap().published.get(name) {
            let parameter = json!({"Parameter": {"Name": name, "Type": "String", "Value": value, "Version": 1}});
            return (
                StatusCode::OK,
                [("content-type", "application/x-amz-json-1.1")],
                serde_json::to_vec(&parameter).unwrap(),
            )
                .into_response();
        }
    }
    let moto = state.lock().unwrap().moto.clone();
    let mut forwarded = axum::http::Request::builder()
        .method(method.clone())
        .uri(format!("{moto}{uri}"));
    for (name, value) in &headers {
        if name != "host" {
            forwarded = forwarded.header(name, value);
        }
    }
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<Bytes>>();
    let forwarded_body = body.clone();
    let Ok(answer) = client
        .request(forwarded.body(http_body_util::Full::new(body)).unwrap())
        .await
    else {
        return StatusCode::BAD_GATEWAY.into_response();
    };
    let status = answer.status();
    // AWS's error code travels in a header (`x-amzn-errortype`) as well as the body.
    let answer_headers = answer.headers().clone();
    let body = http_body_util::BodyExt::collect(answer.into_body())
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let created: Value = serde_json::from_slice(&forwarded_body).unwrap_or_default();
    let read_of = match (&method, path.as_slice()) {
        (&Method::GET, ["clusters", cluster]) => Some((cluster.to_string(), "cluster")),
        (&Method::POST, ["clusters"]) => created["name"]
            .as_str()
            .map(|name| (name.to_owned(), "cluster")),
        (&Method::GET, ["clusters", cluster, "node-groups", group]) => {
            Some((format!("{cluster}/{group}"), "nodegroup"))
        }
        _ => None,
    };
    let body = match read_of {
        Some((key, field)) if status.is_success() => {
            let mut read: Value = serde_json::from_slice(&body).unwrap_or_default();
            let state = state.lock().unwrap();
            if let Some((version, done)) = state.updates.get(&key) {
                if std::time::Instant::now() < *done {
                    read[field]["status"] = json!("UPDATING");
                } else {
                    read[field]["version"] = json!(version);
                }
            }
            if let Some((endpoint, ca)) = state.endpoints.get(&key) {
                read[field]["endpoint"] = json!(endpoint);
                read[field]["certificateAuthority"] = json!({"data": ca});
            }
            Bytes::from(serde_json::to_vec(&read).unwrap())
        }
        _ => body,
    };
    let mut response = (status, body).into_response();
    for (name, value) in &answer_headers {
        if name != "content-length" && name != "transfer-encoding" {
            response.headers_mut().insert(name, value.clone());
        }
    }
    response
}

/// A TEST DOUBLE for an EKS cluster's API endpoint, named as such: no EKS cluster runs here,
/// so this HTTPS server stands at the endpoint the EKS double reports and authenticates as
/// EKS does (the bearer token is `aws eks get-token`'s presigned STS GetCallerIdentity
/// request, which it sends to STS, here moto, with the cluster's name), then hands the
/// request to a simulated workload cluster, whose own credentials it holds.
pub struct EksEndpoint {
    /// `https://127.0.0.1:PORT`.
    pub url: String,
    /// The CA clients must trust, base64 PEM, as EKS's `certificateAuthority.data`.
    pub ca: String,
    /// Requests refused for their token.
    pub refused: Arc<std::sync::atomic::AtomicUsize>,
}

#[derive(Clone)]
struct Endpoint {
    sts: String,
    cluster: String,
    workload: kube::Client,
    refused: Arc<std::sync::atomic::AtomicUsize>,
}

impl EksEndpoint {
    pub async fn start(sts: &str, cluster: &str, workload: kube::Client) -> EksEndpoint {
        use base64::Engine;
        let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
        let ca = base64::engine::general_purpose::STANDARD.encode(certified.cert.pem());
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![certified.cert.der().clone()],
            rustls_pki_types::PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into()),
        )
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}", listener.local_addr().unwrap());
        let refused = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let endpoint = Endpoint {
            sts: sts.trim_end_matches('/').to_owned(),
            cluster: cluster.to_owned(),
            workload,
            refused: refused.clone(),
        };
        let app = axum::Router::new()
            .fallback(serve_endpoint)
            .with_state(endpoint);
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let (acceptor, app) = (acceptor.clone(), app.clone());
                tokio::spawn(async move {
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
        EksEndpoint { url, ca, refused }
    }
}

/// Whether `token` is a presigned GetCallerIdentity for `cluster` that STS accepts.
async fn eks_authenticates(endpoint: &Endpoint, token: &str) -> bool {
    use base64::Engine;
    let Some(encoded) = token.strip_prefix("k8s-aws-v1.") else {
        return false;
    };
    let Ok(url) = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(encoded) else {
        return false;
    };
    let url = String::from_utf8_lossy(&url).into_owned();
    // AWS's authenticator also insists on an STS host; here the token names the endpoint the
    // SDK was pointed at (this double), so the request is replayed against moto whatever
    // host it names.
    let Some(query) = url
        .split_once("://")
        .and_then(|(_, rest)| rest.split_once('/'))
        .map(|(_, query)| query.to_owned())
    else {
        return false;
    };
    if !query.contains("Action=GetCallerIdentity") || !query.contains("x-k8s-aws-id") {
        return false;
    }
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Empty<Bytes>>();
    let request = axum::http::Request::get(format!("{}/{query}", endpoint.sts))
        .header("x-k8s-aws-id", &endpoint.cluster)
        .body(http_body_util::Empty::new())
        .unwrap();
    client
        .request(request)
        .await
        .is_ok_and(|answer| answer.status().is_success())
}

async fn serve_endpoint(
    State(endpoint): State<Endpoint>,
    request: axum::extract::Request,
) -> Response {
    let token = request
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default()
        .to_owned();
    if !eks_authenticates(&endpoint, &token).await {
        endpoint
            .refused
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "reason": "Unauthorized", "message": "Unauthorized", "code": 401});
        return (StatusCode::UNAUTHORIZED, axum::Json(status)).into_response();
    }
    let (parts, body) = request.into_parts();
    let body = http_body_util::BodyExt::collect(body)
        .await
        .map(|b| b.to_bytes().to_vec())
        .unwrap_or_default();
    let mut forwarded = axum::http::Request::builder().method(parts.method).uri(
        parts
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/"),
    );
    for name in ["content-type", "accept"] {
        if let Some(value) = parts.headers.get(name) {
            forwarded = forwarded.header(name, value);
        }
    }
    let Ok(answer) = endpoint
        .workload
        .send(forwarded.body(kube::client::Body::from(body)).unwrap())
        .await
    else {
        return StatusCode::BAD_GATEWAY.into_response();
    };
    // Streamed, as a watch's answer must be.
    let (parts, body) = answer.into_parts();
    axum::http::Response::from_parts(parts, axum::body::Body::new(body))
}
