//! A TEST DOUBLE for the part of EKS moto lacks, named as such: the authors' model of EKS
//! where moto (5.2.1, as `scripts/test` installs it) has nothing, each response following what
//! AWS's API reference documents for it (linked where it is made; what AWS does not document
//! is marked as the double's own choice). An HTTP proxy in front of moto, it answers:
//!
//! - UpdateClusterVersion, UpdateNodegroupVersion and DescribeUpdate, which moto does not route
//!   (404), and shows their effect where AWS does, in DescribeCluster and DescribeNodegroup:
//!   the cluster or group is UPDATING for a while, then ACTIVE, at the new version unless the
//!   update failed;
//! - the addon calls (CreateAddon, DescribeAddon, ListAddons, UpdateAddon, DeleteAddon, and
//!   TagResource on an addon's ARN): moto has no addons, and tags only clusters (`addons`
//!   below);
//! - SSM GetParameter for the parameters AWS publishes under `/aws/service/` (EKS-optimized
//!   AMIs): moto implements GetParameter but holds only Amazon Linux, ECS and
//!   global-infrastructure parameters there, and refuses to put any (reserved names).
//!
//! It can also point a cluster's endpoint and CA at a stand-in API server (moto's endpoint
//! resolves nowhere). Every other request goes to moto unchanged, so everything moto does
//! implement (clusters, node groups, their config updates, tags on clusters) is still tested
//! against moto. The double models the sequence of states EKS goes through, not how long they
//! last (`UPDATING_FOR`, `ADDON_CHANGES_FOR`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// How long a version update stays `InProgress`, its cluster or node group UPDATING. EKS takes
/// far longer: AWS says a cluster update "should finish within a few minutes" (in practice a
/// control plane version update takes ten minutes or more), and a node group's grows with the
/// nodes it replaces, each drained first, its Pods given up to 15 minutes to leave
/// (https://docs.aws.amazon.com/eks/latest/userguide/managed-node-update-behavior.html). The
/// double keeps the sequence of states, not their duration: two seconds lets a test see
/// UPDATING and then the outcome without waiting as long as EKS.
const UPDATING_FOR: std::time::Duration = std::time::Duration::from_secs(2);
/// How long an addon shows CREATING, UPDATING or DELETING. On EKS this commonly takes a minute
/// or more (it installs the addon in the cluster and waits for it to run); the second is the
/// double's choice, for the tests' time, as with `UPDATING_FOR`.
const ADDON_CHANGES_FOR: std::time::Duration = std::time::Duration::from_secs(1);

pub struct EksDouble {
    /// Where the SDK is pointed instead of moto.
    pub endpoint: String,
    state: Arc<Mutex<Doubled>>,
}

/// An update EKS took.
struct Update {
    version: String,
    done: std::time::Instant,
    /// The error code and message it ends in, if it fails.
    failure: Option<(String, String)>,
    /// Seconds since the epoch.
    created: f64,
}

#[derive(Default)]
struct Doubled {
    moto: String,
    /// By `cluster` or `cluster/nodegroup`: the version it ends at (none when the update
    /// fails) and when it is done.
    updates: HashMap<String, (Option<String>, std::time::Instant)>,
    /// By update ID: what DescribeUpdate says.
    update_ids: HashMap<String, Update>,
    /// By `cluster` or `cluster/nodegroup`: the error the next update ends in.
    update_failures: HashMap<String, (String, String)>,
    /// Every update asked for, in order: `cluster 1.32`, `cluster/nodegroup 1.32`.
    requested: Vec<String>,
    /// By cluster: the endpoint and base64 CA its reads show.
    endpoints: HashMap<String, (String, String)>,
    /// AWS's published SSM parameters, by name.
    published: HashMap<String, String>,
    /// Every CreateCluster request's body, in order.
    cluster_requests: Vec<Value>,
    /// EKS clusters made through the double and not deleted: addons live in them.
    clusters: std::collections::HashSet<String>,
    /// By cluster, then addon name.
    addons: HashMap<String, std::collections::BTreeMap<String, addons::Addon>>,
    /// Every addon call that changes something, in order: `create cluster/vpc-cni v1.19.0-eksbuild.1`.
    addon_calls: Vec<String>,
    /// By addon name: the issue its next create or update ends in (`code`, `message`).
    addon_failures: HashMap<String, (String, String)>,
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

    /// Makes the next update of `key` (`cluster` or `cluster/nodegroup`) fail after EKS took
    /// it, as EKS reports it: UPDATING for a while, then ACTIVE at the old version, and
    /// DescribeUpdate says Failed with this error.
    pub fn fail_update(&self, key: &str, code: &str, message: &str) {
        self.state
            .lock()
            .unwrap()
            .update_failures
            .insert(key.to_owned(), (code.to_owned(), message.to_owned()));
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

    /// The CreateCluster requests EKS answered, as sent.
    pub fn cluster_requests(&self) -> Vec<Value> {
        self.state.lock().unwrap().cluster_requests.clone()
    }

    /// The addon calls that changed something so far, in order.
    pub fn addon_calls(&self) -> Vec<String> {
        self.state.lock().unwrap().addon_calls.clone()
    }

    /// Makes the next create or update of addon `name` fail as EKS reports it: the addon ends
    /// in CREATE_FAILED or UPDATE_FAILED with this health issue.
    pub fn fail_addon(&self, name: &str, code: &str, message: &str) {
        self.state
            .lock()
            .unwrap()
            .addon_failures
            .insert(name.to_owned(), (code.to_owned(), message.to_owned()));
    }

    /// Installs addon `name` in `cluster` as someone else would (the console, eksctl): ACTIVE,
    /// without lariat's tags.
    pub fn install_addon(&self, cluster: &str, name: &str, version: &str) {
        let mut state = self.state.lock().unwrap();
        let addon = addons::Addon::new(cluster, name, version, &Value::Null);
        state
            .addons
            .entry(cluster.to_owned())
            .or_default()
            .insert(name.to_owned(), addon.settled());
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

fn now_epoch() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn segments(uri: &Uri) -> Vec<String> {
    uri.path()
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| s.replace("%2F", "/"))
        .collect()
}

/// Answers what moto lacks (see the module's doc), else forwards to moto. Errors are EKS's:
/// the code in `x-amzn-errortype`, `{"message": ...}` in the body, and the HTTP status AWS's
/// API reference gives each code (ResourceNotFoundException 404, InvalidParameterException
/// 400, ResourceInUseException 409, NotFoundException 404); the messages are the double's
/// unless said otherwise.
async fn handle(
    State(state): State<Arc<Mutex<Doubled>>>,
    method: Method,
    uri: Uri,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Response {
    let path = segments(&uri);
    let path: Vec<&str> = path.iter().map(String::as_str).collect();
    // UpdateClusterVersion, POST /clusters/{name}/updates
    // (https://docs.aws.amazon.com/eks/latest/APIReference/API_UpdateClusterVersion.html), and
    // UpdateNodegroupVersion, POST /clusters/{name}/node-groups/{nodegroupName}/update-version
    // (https://docs.aws.amazon.com/eks/latest/APIReference/API_UpdateNodegroupVersion.html):
    // 200 with the documented `update` (`id`, `status` InProgress, `type` VersionUpdate,
    // `params` [{Version}], `errors`), whose ID DescribeUpdate follows. EKS runs it
    // asynchronously: the cluster moves to UPDATING, then, Failed or Successful, to ACTIVE
    // (documented for clusters; the double does the same for node groups). The double's own
    // choices: it refuses nothing (EKS documents InvalidParameterException,
    // InvalidRequestException, ResourceInUseException and ResourceNotFoundException for these
    // calls), its IDs are `update-N`, not UUIDs, it leaves out `createdAt` and the
    // PlatformVersion or ReleaseVersion params here, and `fail_update` decides the outcome.
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
        let failure = state.update_failures.remove(&key);
        let ends_at = failure.is_none().then(|| version.clone());
        state.updates.insert(key, (ends_at, done));
        let id = format!("update-{}", state.requested.len());
        state.update_ids.insert(
            id.clone(),
            Update {
                version: version.clone(),
                done,
                failure,
                created: now_epoch(),
            },
        );
        let update = json!({"update": {
            "id": id,
            "status": "InProgress",
            "type": "VersionUpdate",
            "params": [{"type": "Version", "value": version}],
            "errors": [],
        }});
        return (StatusCode::OK, axum::Json(update)).into_response();
    }

    // Addons and tags on them: moto routes no `/clusters/{name}/addons` path, and its
    // TagResource finds clusters only (ResourceNotFoundException for any other ARN).
    if path.len() >= 3 && path[0] == "clusters" && path[2] == "addons" {
        let mut state = state.lock().unwrap();
        return addons::handle(&mut state, &method, &uri, &path, &body);
    }
    if let (&Method::POST, ["tags", arn]) = (&method, path.as_slice()) {
        let arn = arn.replace("%3A", ":");
        if arn.contains(":addon/") {
            let mut state = state.lock().unwrap();
            return addons::tag(&mut state, &arn, &body);
        }
    }
    // DescribeUpdate, GET /clusters/{name}/updates/{updateId}, `nodegroupName` in the query for
    // a node group's (https://docs.aws.amazon.com/eks/latest/APIReference/API_DescribeUpdate.html):
    // 200 with the `update`, its `status` one of the documented InProgress | Failed | Cancelled
    // | Successful (never Cancelled here): InProgress for `UPDATING_FOR`, then Successful, or
    // Failed with `errors` as EKS's ErrorDetail (`errorCode` such as InsufficientFreeAddresses or
    // PodEvictionFailure, `errorMessage`, `resourceIds`). An unknown ID is
    // ResourceNotFoundException, 404. The double knows only version updates' IDs, not the
    // ones UpdateAddon gives.
    let update_id = match (&method, path.as_slice()) {
        (&Method::GET, ["clusters", _, "updates", id])
        | (&Method::GET, ["clusters", _, "node-groups", _, "updates", id]) => Some(id.to_string()),
        _ => None,
    };
    if let Some(id) = update_id {
        let state = state.lock().unwrap();
        let Some(Update {
            version,
            done,
            failure,
            created,
        }) = state.update_ids.get(&id)
        else {
            let message = format!("No update found for ID: {id}");
            return (
                StatusCode::NOT_FOUND,
                [("x-amzn-errortype", "ResourceNotFoundException")],
                axum::Json(json!({"message": message})),
            )
                .into_response();
        };
        let (status, errors) = match failure {
            _ if std::time::Instant::now() < *done => ("InProgress", json!([])),
            Some((code, message)) => (
                "Failed",
                json!([{"errorCode": code, "errorMessage": message, "resourceIds": []}]),
            ),
            None => ("Successful", json!([])),
        };
        let update = json!({"update": {
            "id": id, "status": status, "type": "VersionUpdate",
            "params": [{"type": "Version", "value": version}], "errors": errors,
            "createdAt": created,
        }});
        return (StatusCode::OK, axum::Json(update)).into_response();
    }
    // SSM GetParameter
    // (https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_GetParameter.html)
    // of a parameter AWS publishes, such as an EKS-optimized AMI's ID
    // (https://docs.aws.amazon.com/eks/latest/userguide/retrieve-ami-id.html): 200 with the
    // documented `Parameter` (`Name`, `Type`, `Value`, `Version`; the double leaves out
    // `ARN`, `DataType` and `LastModifiedDate`). A name not published goes to moto, which says
    // ParameterNotFound (400) as SSM does.
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
    if status.is_success() {
        let mut state = state.lock().unwrap();
        match (&method, path.as_slice()) {
            (&Method::POST, ["clusters"]) => {
                state.cluster_requests.push(created.clone());
                if let Some(name) = created["name"].as_str() {
                    state.clusters.insert(name.to_owned());
                }
            }
            // EKS deletes a cluster's addons with it: DeleteCluster requires node groups and
            // Fargate profiles deleted first, not addons
            // (https://docs.aws.amazon.com/eks/latest/APIReference/API_DeleteCluster.html).
            (&Method::DELETE, ["clusters", cluster]) => {
                state.clusters.remove(*cluster);
                state.addons.remove(*cluster);
            }
            _ => {}
        }
    }
    // DescribeCluster
    // (https://docs.aws.amazon.com/eks/latest/APIReference/API_DescribeCluster.html),
    // CreateCluster's answer and DescribeNodegroup
    // (https://docs.aws.amazon.com/eks/latest/APIReference/API_DescribeNodegroup.html) are
    // moto's, with what the double changed: `status` UPDATING while an update runs, then
    // `version` the new one if it succeeded, and the `endpoint` and `certificateAuthority.data`
    // (base64 CA) `point` set. EKS's move to UPDATING is eventually consistent; the double's is
    // immediate.
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
                } else if let Some(version) = version {
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

/// EKS addons as the EKS API serves them (CreateAddon, DescribeAddon, ListAddons, UpdateAddon,
/// DeleteAddon, TagResource): each change shows CREATING, UPDATING or DELETING for
/// `ADDON_CHANGES_FOR`, then ACTIVE, CREATE_FAILED or UPDATE_FAILED (or gone), of the statuses
/// EKS documents (CREATING | ACTIVE | CREATE_FAILED | UPDATING | DELETING | DELETE_FAILED |
/// DEGRADED | UPDATE_FAILED; never DELETE_FAILED or DEGRADED here). An addon is EKS's `Addon`
/// (https://docs.aws.amazon.com/eks/latest/APIReference/API_Addon.html) with the fields lariat
/// reads; `health.issues` holds AddonIssue's `code` and `message`.
mod addons {
    use std::time::Instant;

    use axum::body::Bytes;
    use axum::http::{Method, StatusCode, Uri};
    use axum::response::{IntoResponse, Response};
    use serde_json::{Value, json};

    use super::{ADDON_CHANGES_FOR, Doubled};

    /// The addons EKS publishes (a few of them), as DescribeAddonVersions
    /// (https://docs.aws.amazon.com/eks/latest/APIReference/API_DescribeAddonVersions.html)
    /// would list them; the double does not answer that call (lariat does not make it).
    const PUBLISHED: [&str; 5] = [
        "vpc-cni",
        "coredns",
        "kube-proxy",
        "aws-ebs-csi-driver",
        "eks-pod-identity-agent",
    ];

    #[derive(Clone)]
    pub struct Addon {
        body: Value,
        /// What `status` becomes, and when (None: the addon goes away).
        next: Option<(Option<String>, Instant)>,
    }

    impl Addon {
        pub fn new(cluster: &str, name: &str, version: &str, asked: &Value) -> Addon {
            let now = super::now_epoch();
            let mut body = json!({
                "addonName": name,
                "clusterName": cluster,
                "status": "CREATING",
                "addonVersion": version,
                "health": {"issues": []},
                "addonArn": format!("arn:aws:eks:us-east-1:123456789012:addon/{cluster}/{name}/{}", now as u64),
                "createdAt": now,
                "modifiedAt": now,
                "tags": asked.get("tags").cloned().unwrap_or(json!({})),
            });
            for (from, to) in [
                ("serviceAccountRoleArn", "serviceAccountRoleArn"),
                ("configurationValues", "configurationValues"),
            ] {
                if let Some(value) = asked.get(from).filter(|v| !v.is_null()) {
                    body[to] = value.clone();
                }
            }
            Addon {
                body,
                next: Some((Some("ACTIVE".into()), Instant::now() + ADDON_CHANGES_FOR)),
            }
        }

        pub fn settled(mut self) -> Addon {
            self.body["status"] = json!("ACTIVE");
            self.next = None;
            self
        }

        /// The addon as it is now; `None` once a deletion is done.
        fn now(&mut self) -> Option<&Value> {
            if let Some((status, when)) = self.next.clone()
                && Instant::now() >= when
            {
                self.next = None;
                match status {
                    Some(status) => self.body["status"] = json!(status),
                    None => return None,
                }
            }
            Some(&self.body)
        }
    }

    fn error(status: StatusCode, code: &str, message: &str) -> Response {
        (
            status,
            [("x-amzn-errortype", code)],
            axum::Json(json!({"message": message})),
        )
            .into_response()
    }

    /// What CreateAddon and UpdateAddon refuse: EKS documents that the name and version must be
    /// among those DescribeAddonVersions returns and that configuration values are validated
    /// against the addon's schema. The refusal, InvalidParameterException (400), is one both
    /// calls document; that EKS gives it in each case, and the messages, are the double's
    /// reading. Versions have EKS's form, `v1.19.0-eksbuild.1`; the double's schema is any JSON.
    fn invalid(asked: &Value, name: &str) -> Option<Response> {
        if !PUBLISHED.contains(&name) {
            let message = format!("Addon {name} specified is not supported");
            return Some(error(
                StatusCode::BAD_REQUEST,
                "InvalidParameterException",
                &message,
            ));
        }
        let version = asked["addonVersion"].as_str().unwrap_or_default();
        let published = version
            .strip_prefix('v')
            .and_then(|v| v.split_once("-eksbuild."))
            .is_some_and(|(semver, build)| {
                semver.split('.').count() == 3
                    && semver.split('.').all(|p| p.parse::<u32>().is_ok())
                    && build.parse::<u32>().is_ok()
            });
        if !version.is_empty() && !published {
            let message = format!("Addon version specified is not supported: {version}");
            return Some(error(
                StatusCode::BAD_REQUEST,
                "InvalidParameterException",
                &message,
            ));
        }
        // Empty values clear what the addon had.
        if let Some(values) = asked["configurationValues"]
            .as_str()
            .filter(|v| !v.is_empty())
            && serde_json::from_str::<Value>(values).is_err()
        {
            let message = "ConfigurationValue provided in request is not supported: Json schema validation failed";
            return Some(error(
                StatusCode::BAD_REQUEST,
                "InvalidParameterException",
                message,
            ));
        }
        None
    }

    /// TagResource, POST /tags/{resourceArn}, on an addon's ARN
    /// (https://docs.aws.amazon.com/eks/latest/APIReference/API_TagResource.html): 200 with an
    /// empty body; the tags asked are added or replaced and others left, as documented. An
    /// unknown ARN is NotFoundException (404), as TagResource documents.
    pub fn tag(state: &mut Doubled, arn: &str, body: &Bytes) -> Response {
        let asked: Value = serde_json::from_slice(body).unwrap_or_default();
        let found = state
            .addons
            .values_mut()
            .flat_map(|addons| addons.values_mut())
            .find(|addon| addon.body["addonArn"] == arn);
        let Some(addon) = found else {
            let message = format!("Resource {arn} not found");
            return error(StatusCode::NOT_FOUND, "NotFoundException", &message);
        };
        if let Some(tags) = asked["tags"].as_object() {
            for (key, value) in tags {
                addon.body["tags"][key] = value.clone();
            }
        }
        axum::Json(json!({})).into_response()
    }

    /// The calls under `/clusters/{name}/addons`. A cluster not made through the double is
    /// ResourceNotFoundException (404), with the message moto took from EKS.
    pub fn handle(
        state: &mut Doubled,
        method: &Method,
        uri: &Uri,
        path: &[&str],
        body: &Bytes,
    ) -> Response {
        let cluster = path[1].to_owned();
        if !state.clusters.contains(&cluster) {
            let message = format!("No cluster found for name: {cluster}.");
            return error(StatusCode::NOT_FOUND, "ResourceNotFoundException", &message);
        }
        let asked: Value = serde_json::from_slice(body).unwrap_or_default();
        let Doubled {
            addons,
            addon_calls,
            addon_failures,
            ..
        } = state;
        let addons = addons.entry(cluster.clone()).or_default();
        addons.retain(|_, addon| addon.now().is_some());
        match (method, &path[3..]) {
            // ListAddons (https://docs.aws.amazon.com/eks/latest/APIReference/API_ListAddons.html):
            // 200 with the documented `addons`, their names; one page, no `nextToken` (the
            // double's choice).
            (&Method::GET, []) => {
                let names: Vec<&String> = addons.keys().collect();
                axum::Json(json!({"addons": names})).into_response()
            }
            // CreateAddon
            // (https://docs.aws.amazon.com/eks/latest/APIReference/API_CreateAddon.html):
            // 200 with the `addon`, CREATING, then ACTIVE, or CREATE_FAILED with the health issue
            // `fail_addon` set. An addon of that name already there is ResourceInUseException
            // (409), one of CreateAddon's documented errors (the condition is the double's
            // reading). Without `addonVersion` EKS picks a default; the double's is
            // `v1.0.0-eksbuild.1`.
            (&Method::POST, []) => {
                let name = asked["addonName"].as_str().unwrap_or_default().to_owned();
                if let Some(refused) = invalid(&asked, &name) {
                    return refused;
                }
                if addons.contains_key(&name) {
                    let message = format!("Addon already exists.: {name}");
                    return error(StatusCode::CONFLICT, "ResourceInUseException", &message);
                }
                let version = asked["addonVersion"]
                    .as_str()
                    .unwrap_or("v1.0.0-eksbuild.1");
                let mut addon = Addon::new(&cluster, &name, version, &asked);
                if let Some((code, message)) = addon_failures.remove(&name) {
                    addon.body["health"]["issues"] = json!([{"code": code, "message": message}]);
                    addon.next = Some((
                        Some("CREATE_FAILED".into()),
                        Instant::now() + ADDON_CHANGES_FOR,
                    ));
                }
                addon_calls.push(format!("create {cluster}/{name} {version}"));
                let answer = json!({"addon": addon.body});
                addons.insert(name, addon);
                axum::Json(answer).into_response()
            }
            (method, [name, rest @ ..]) => {
                let name = name.to_string();
                // DescribeAddon, UpdateAddon and DeleteAddon all document ResourceNotFoundException
                // (404) for an addon the cluster lacks.
                let Some(addon) = addons.get_mut(&name) else {
                    let message = format!("No addon: {name} found in cluster: {cluster}");
                    return error(StatusCode::NOT_FOUND, "ResourceNotFoundException", &message);
                };
                let busy = matches!(
                    addon.body["status"].as_str(),
                    Some("CREATING" | "UPDATING" | "DELETING")
                );
                match (method, rest) {
                    // DescribeAddon
                    // (https://docs.aws.amazon.com/eks/latest/APIReference/API_DescribeAddon.html):
                    // 200 with the `addon` as it is now.
                    (&Method::GET, []) => axum::Json(json!({"addon": addon.body})).into_response(),
                    // UpdateAddon, POST .../addons/{addonName}/update
                    // (https://docs.aws.amazon.com/eks/latest/APIReference/API_UpdateAddon.html):
                    // 200 with the documented `update`, InProgress, type AddonUpdate; the addon
                    // is UPDATING, then ACTIVE, or UPDATE_FAILED with `fail_addon`'s issue. The
                    // double's own choices: an addon still CREATING, UPDATING or DELETING is
                    // ResourceInUseException (409, an error UpdateAddon documents), the update
                    // carries no `params` or `createdAt`, and DescribeUpdate does not know it.
                    (&Method::POST, ["update"]) => {
                        if busy {
                            let message = format!("Addon {name} is busy");
                            return error(StatusCode::CONFLICT, "ResourceInUseException", &message);
                        }
                        if let Some(refused) = invalid(&asked, &name) {
                            return refused;
                        }
                        let failure = addon_failures.remove(&name);
                        let mut changes = vec![];
                        for field in [
                            "addonVersion",
                            "serviceAccountRoleArn",
                            "configurationValues",
                        ] {
                            if let Some(value) = asked.get(field).filter(|v| !v.is_null()) {
                                changes.push(format!(
                                    "{field}={}",
                                    value.as_str().unwrap_or_default()
                                ));
                                // EKS shows the old spec after a failed update.
                                if failure.is_some() {
                                    continue;
                                }
                                // An empty value clears the field.
                                match value.as_str() {
                                    Some("") => addon.body.as_object_mut().unwrap().remove(field),
                                    _ => addon
                                        .body
                                        .as_object_mut()
                                        .unwrap()
                                        .insert(field.into(), value.clone()),
                                };
                            }
                        }
                        addon.body["status"] = json!("UPDATING");
                        addon.body["modifiedAt"] = json!(super::now_epoch());
                        let next = match failure {
                            Some((code, message)) => {
                                addon.body["health"]["issues"] =
                                    json!([{"code": code, "message": message}]);
                                "UPDATE_FAILED"
                            }
                            None => {
                                addon.body["health"]["issues"] = json!([]);
                                "ACTIVE"
                            }
                        };
                        addon.next = Some((Some(next.into()), Instant::now() + ADDON_CHANGES_FOR));
                        addon_calls.push(format!("update {cluster}/{name} {}", changes.join(" ")));
                        let update = json!({"update": {
                            "id": format!("addon-update-{}", addon_calls.len()),
                            "status": "InProgress",
                            "type": "AddonUpdate",
                            "errors": [],
                        }});
                        axum::Json(update).into_response()
                    }
                    // DeleteAddon, DELETE .../addons/{addonName}?preserve=
                    // (https://docs.aws.amazon.com/eks/latest/APIReference/API_DeleteAddon.html):
                    // 200 with the `addon`, DELETING, gone after `ADDON_CHANGES_FOR`. `preserve`
                    // (EKS then leaves the addon's software on the cluster) is only recorded.
                    // Deleting an addon already DELETING answers the same again (the double's
                    // choice).
                    (&Method::DELETE, []) => {
                        let preserve = uri.query().is_some_and(|q| q.contains("preserve=true"));
                        if addon.body["status"] != "DELETING" {
                            addon.body["status"] = json!("DELETING");
                            addon.next = Some((None, Instant::now() + ADDON_CHANGES_FOR));
                            addon_calls
                                .push(format!("delete {cluster}/{name} preserve={preserve}"));
                        }
                        axum::Json(json!({"addon": addon.body})).into_response()
                    }
                    _ => StatusCode::NOT_FOUND.into_response(),
                }
            }
            _ => StatusCode::NOT_FOUND.into_response(),
        }
    }
}
