//! The HTTP surface: routing of Kubernetes REST paths, content negotiation, authentication,
//! and rendering of objects, lists, Tables and watch streams. The only module that knows HTTP.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::StreamExt;
use serde_json::{Value, json};

use crate::auth::Authenticator;
use crate::identity::{Attributes, Authorizer, Peer, User};
use crate::objects::Selector;
use crate::patch::PatchType;
use crate::resources::{
    DeleteOptions, FieldValidation, ListAt, ListParams, Propagation, Resources, Scope, WriteOptions,
};
use crate::sending::Share;
use crate::status::{ApiError, ApiResult, Cause};
use crate::table::{self, IncludeObject};
use crate::watch::WatchParams;
use crate::{discovery, openapi};

use crate::limits::MAX_BODY_BYTES;

/// The longest a watch runs, whatever `timeoutSeconds` asks: kube-apiserver's longest
/// default (twice its `--min-request-timeout` of 30 minutes). Clients watch again, as they do
/// after any watch ends; a connection is not held for days by one request.
const MAX_WATCH_TIMEOUT: Duration = Duration::from_secs(3600);

pub struct AppState {
    pub resources: Resources,
    pub authenticator: Authenticator,
    pub authorizer: Arc<dyn Authorizer>,
    /// The RBAC index behind `authorizer`, for the rules reviews list; `None` where every
    /// authenticated caller may do everything (the simulated clusters, for now).
    pub rbac: Option<Arc<crate::rbac::Rbac>>,
    /// `host:port` clients use, for `/api`'s serverAddressByClientCIDRs.
    pub server_address: String,
    /// `host:port` clusters and agents elsewhere reach the server at (`--advertise-url`).
    pub advertised_address: Option<String>,
    pub bookmark_interval: Duration,
    /// What `/metrics` serves besides the server's own counters, when something in the
    /// process keeps metrics.
    pub metrics: Option<fn() -> String>,
    /// The label of this API's requests in the process's request counter (`api="..."`).
    pub metrics_label: &'static str,
    /// Whether `/metrics` serves the process's counters here: on the server the process is
    /// for, not on the instances embedded in it ([`crate::embedded`]).
    pub serves_process_metrics: bool,
    /// What `/version` reports, when not the server's own build.
    pub version: Option<Arc<dyn VersionSource>>,
    /// The CA certificate (PEM) agents check against their `--ca-checksum`.
    pub ca_pem: String,
    /// Where mutating requests and refusals are recorded (`--audit-log-path`).
    pub audit: Option<Arc<crate::audit::AuditLog>>,
    /// The other replicas on this datastore, which proxy requests are forwarded to and from
    /// (`None` on the simulated clusters).
    pub replicas: Option<Arc<crate::replicas::Replicas>>,
    /// Routes beside the API whose callers prove themselves to the route (`Config::routes`).
    pub routes: Vec<crate::routes::Route>,
    /// What the configuration adds beyond kinds (`Config::extensions`).
    pub extensions: Vec<Arc<dyn crate::extension::Extension>>,
    /// The budget of failed proofs per client address, which proven routes draw on.
    pub failed_proofs: crate::proofs::FailedProofs,
    /// This replica's standing in the controllers' election.
    pub leadership: Arc<crate::leader::Leadership>,
    /// Set once the server stops: watches end at once and agents' tunnels close (as
    /// kube-apiserver ends watches when it stops), so that clients go to another replica
    /// instead of holding the stop up.
    pub stopping: tokio::sync::watch::Sender<bool>,
}

impl AppState {
    /// Resolves once the server stops.
    pub fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut stopping = self.stopping.subscribe();
        async move {
            let _ = stopping.wait_for(|stopped| *stopped).await;
        }
    }
}

/// What `/version` reports, when the instance reports something other than the server's own
/// build: a simulated cluster, the version its control plane's Nodes run.
#[async_trait::async_trait]
pub trait VersionSource: Send + Sync + 'static {
    /// A Kubernetes version such as `v1.30.2`; `None` reports the server's own.
    async fn version(&self, resources: &Resources) -> Option<String>;
}

pub fn router(state: Arc<AppState>) -> Router {
    let authenticated = Router::new()
        .route("/api", get(core_versions))
        .route("/apis", get(api_groups))
        .route("/openapi/v3", get(openapi_index))
        .route("/openapi/v2", get(openapi_v2))
        .route("/metrics", get(metrics))
        .route(
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            axum::routing::post(self_subject_access_review),
        )
        .route(
            "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
            axum::routing::post(self_subject_rules_review),
        )
        .route(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            axum::routing::post(subject_access_review),
        )
        .route(
            "/apis/authorization.k8s.io/v1/namespaces/{namespace}/localsubjectaccessreviews",
            axum::routing::post(local_subject_access_review),
        )
        .route(
            "/apis/authentication.k8s.io/{version}/selfsubjectreviews",
            axum::routing::post(self_subject_review),
        )
        .fallback(dispatch)
        .layer(middleware::from_fn_with_state(state.clone(), authenticate))
        .with_state(state.clone());
    let server = crate::extension::Handle {
        state: state.clone(),
    };
    // The extensions' routes authorize their requests themselves.
    let extended = state
        .extensions
        .iter()
        .fold(Router::new(), |routes, extension| {
            routes.merge(extension.authenticated_routes(server.clone()))
        })
        .layer(middleware::from_fn_with_state(
            state.clone(),
            authenticate_for_extension,
        ));
    let authenticated = authenticated.merge(extended);
    let mut router = Router::new();
    for route in &state.routes {
        let handler = route.handler.clone();
        router = router.route(
            route.path,
            axum::routing::post(
                move |State(state): State<Arc<AppState>>, request: Request| {
                    proven_route(state, handler.clone(), request)
                },
            ),
        );
    }
    let router = router
        .route("/version", get(version))
        .route("/healthz", get(|| async { "ok" }))
        .route("/livez", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        // Agents dial in before they have any lariat identity; the tunnel checks their token.
        .route(
            "/cacerts",
            get(|State(state): State<Arc<AppState>>| async move { state.ca_pem.clone() }),
        )
        .with_state(state.clone());
    state
        .extensions
        .iter()
        .fold(router, |routes, extension| {
            routes.merge(extension.routes(server.clone()))
        })
        .merge(authenticated)
        .layer(middleware::from_fn(crate::sending::pace))
        .layer(middleware::from_fn(contain_panics))
}

/// A request that panics gets a 500 `Status` and takes nothing else down: the worker thread,
/// the connection's other streams and every other request go on.
async fn contain_panics(request: Request, next: Next) -> Response {
    use futures::FutureExt;
    let path = request.uri().path().to_string();
    match std::panic::AssertUnwindSafe(next.run(request))
        .catch_unwind()
        .await
    {
        Ok(response) => response,
        Err(_) => {
            tracing::error!(%path, "a request panicked; it was answered with 500 and the server goes on");
            ApiError::internal("the server hit an internal error serving this request")
                .into_response()
        }
    }
}

async fn version(State(state): State<Arc<AppState>>) -> Response {
    let reported = match &state.version {
        Some(source) => source.version(&state.resources).await,
        None => None,
    };
    let info = match reported {
        Some(version) => discovery::version_of(&version),
        None => discovery::version(),
    };
    axum::Json(info).into_response()
}

async fn metrics(State(state): State<Arc<AppState>>, uri: axum::http::Uri) -> Response {
    if !state.serves_process_metrics {
        // The process's counters belong to the server it is for, not to an embedded one.
        return not_found_path(uri.path()).into_response();
    }
    let mut text = crate::auth::metrics();
    text.push_str(&crate::audit::metrics());
    text.push_str(&crate::limits::metrics(state.resources.watch_cache_bytes()));
    text.push_str(&crate::metrics::render());
    text.push('\n');
    text.push_str(&state.metrics.map(|render| render()).unwrap_or_default());
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

/// A route of [`AppState::routes`]: its caller proves itself to the handler, so an address
/// whose proofs keep failing is told to wait (the per-address budget of failures agent
/// handshakes draw on), and the body is read (within the request body limit) before any
/// answer.
async fn proven_route(
    state: Arc<AppState>,
    handler: crate::routes::Handler,
    request: Request,
) -> Response {
    let path = request.uri().path().to_string();
    let address = Peer::ip_of(request.extensions());
    let attempt = match state.failed_proofs.attempt(address, "refused requests") {
        Ok(attempt) => attempt,
        Err(refusal) => return refusal.into_response(),
    };
    // A client still sending its body would otherwise see its connection reset instead of
    // the refusal.
    let (parts, body) = request.into_parts();
    let body = match read_bytes(body).await {
        Ok(body) => body,
        Err(e) => return e.into_response(),
    };
    match handler(crate::local::client(state.clone()), parts.headers, body).await {
        Ok(answer) => axum::Json(answer).into_response(),
        Err((StatusCode::UNAUTHORIZED, _)) => {
            attempt.refused(&path);
            ApiError::Unauthorized.into_response()
        }
        Err((StatusCode::BAD_REQUEST, message)) => ApiError::bad_request(message).into_response(),
        Err((_, message)) => ApiError::internal(message).into_response(),
    }
}

/// The caller and body of a review (created nowhere, answered at once).
async fn review_request(request: Request) -> ApiResult<(User, Value)> {
    let user = request
        .extensions()
        .get::<User>()
        .cloned()
        .ok_or(ApiError::Unauthorized)?;
    let headers = request.headers().clone();
    Ok((user, read_body(request.into_body(), &headers, false).await?))
}

/// `kubectl auth can-i`: asks the authorizer about the caller, as kube-apiserver answers a
/// SelfSubjectAccessReview (created nowhere, answered at once).
async fn self_subject_access_review(
    State(state): State<Arc<AppState>>,
    request: Request,
) -> Response {
    let (user, mut review) = match review_request(request).await {
        Ok(read) => read,
        Err(e) => return e.into_response(),
    };
    let attributes = match review_attributes(&review, "SelfSubjectAccessReview") {
        Ok(attributes) => attributes,
        Err(e) => return e.into_response(),
    };
    let decision = state.authorizer.authorize(&user, &attributes);
    review["apiVersion"] = json!("authorization.k8s.io/v1");
    review["kind"] = json!("SelfSubjectAccessReview");
    review["status"] = access_review_status(decision);
    json_response(StatusCode::CREATED, &review)
}

/// What an access review asks about: its `spec.resourceAttributes` or
/// `spec.nonResourceAttributes`.
fn review_attributes(review: &Value, kind: &str) -> ApiResult<Attributes> {
    let resource = &review["spec"]["resourceAttributes"];
    let non_resource = &review["spec"]["nonResourceAttributes"];
    let text = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(String::from);
    let (attributes, verb_field) = if resource.is_object() {
        (
            Attributes {
                verb: text(&resource["verb"]).unwrap_or_default(),
                group: text(&resource["group"]).unwrap_or_default(),
                resource: text(&resource["resource"]).unwrap_or_default(),
                subresource: text(&resource["subresource"]),
                namespace: text(&resource["namespace"]),
                name: text(&resource["name"]),
                path: None,
            },
            "spec.resourceAttributes.verb",
        )
    } else if non_resource.is_object() {
        (
            Attributes::non_resource(
                &text(&non_resource["verb"]).unwrap_or_default(),
                &text(&non_resource["path"]).unwrap_or_default(),
            ),
            "spec.nonResourceAttributes.verb",
        )
    } else {
        return Err(ApiError::invalid(
            kind,
            "authorization.k8s.io",
            "",
            vec![Cause::required("spec.resourceAttributes")],
        ));
    };
    if attributes.verb.is_empty() {
        return Err(ApiError::invalid(
            kind,
            "authorization.k8s.io",
            "",
            vec![Cause::required(verb_field)],
        ));
    }
    Ok(attributes)
}

fn access_review_status(decision: Result<(), String>) -> Value {
    match decision {
        Ok(()) => json!({"allowed": true}),
        Err(reason) if reason.is_empty() => json!({"allowed": false}),
        Err(reason) => json!({"allowed": false, "reason": reason}),
    }
}

/// `kubectl auth can-i --list`: the rules the caller holds in `spec.namespace` (and
/// everywhere), as a SelfSubjectRulesReview.
async fn self_subject_rules_review(
    State(state): State<Arc<AppState>>,
    request: Request,
) -> Response {
    let (user, mut review) = match review_request(request).await {
        Ok(read) => read,
        Err(e) => return e.into_response(),
    };
    let namespace = review["spec"]["namespace"]
        .as_str()
        .filter(|ns| !ns.is_empty())
        .map(String::from);
    let mut rules = match &state.rbac {
        Some(rbac) => rbac.rules_for(&user, namespace.as_deref()),
        None => vec![],
    };
    if state.rbac.is_none() || user.groups.iter().any(|g| g == crate::rbac::MASTERS) {
        rules.splice(0..0, crate::rbac::full_authority());
    }
    review["apiVersion"] = json!("authorization.k8s.io/v1");
    review["kind"] = json!("SelfSubjectRulesReview");
    review["status"] = crate::rbac::rules_review_status(&rules);
    json_response(StatusCode::CREATED, &review)
}

/// A SubjectAccessReview: may `spec.user` (in `spec.groups`) do this? Asked by whoever may
/// create subjectaccessreviews (an authorizing webhook, an admin checking a user).
async fn subject_access_review(State(state): State<Arc<AppState>>, request: Request) -> Response {
    review_subject(&state, request, None).await
}

/// A LocalSubjectAccessReview: a SubjectAccessReview about one namespace, asked by whoever
/// may create them there (a namespace's admin checking a user).
async fn local_subject_access_review(
    State(state): State<Arc<AppState>>,
    axum::extract::Path(namespace): axum::extract::Path<String>,
    request: Request,
) -> Response {
    review_subject(&state, request, Some(namespace)).await
}

async fn review_subject(state: &AppState, request: Request, local: Option<String>) -> Response {
    let Some(caller) = request.extensions().get::<User>().cloned() else {
        return ApiError::Unauthorized.into_response();
    };
    let kind = match local {
        Some(_) => "LocalSubjectAccessReview",
        None => "SubjectAccessReview",
    };
    let asking = Attributes {
        verb: "create".into(),
        group: "authorization.k8s.io".into(),
        resource: format!("{}s", kind.to_lowercase()),
        subresource: None,
        namespace: local.clone(),
        name: None,
        path: None,
    };
    if let Err(reason) = state.authorizer.authorize(&caller, &asking) {
        discard(request.into_body()).await;
        return asking.forbidden(&caller, &reason).into_response();
    }
    let headers = request.headers().clone();
    let mut review = match read_body(request.into_body(), &headers, false).await {
        Ok(review) => review,
        Err(e) => return e.into_response(),
    };
    let attributes = match review_attributes(&review, kind) {
        Ok(attributes) => attributes,
        Err(e) => return e.into_response(),
    };
    // A local review is about resources of its own namespace only, as kube-apiserver checks.
    if let Some(namespace) = &local {
        let stated = review["metadata"]["namespace"]
            .as_str()
            .unwrap_or(namespace);
        let cause = if attributes.path.is_some() {
            Some(Cause::forbidden(
                "spec.nonResourceAttributes",
                "a local review is about resources in its namespace",
            ))
        } else if attributes.namespace.as_ref() != Some(namespace) {
            Some(Cause::invalid(
                "spec.resourceAttributes.namespace",
                &json!(attributes.namespace),
                format!("must be the review's own namespace, {namespace:?}"),
            ))
        } else if stated != namespace {
            Some(Cause::invalid(
                "metadata.namespace",
                &json!(stated),
                format!("must be the namespace of the URL, {namespace:?}"),
            ))
        } else {
            None
        };
        if let Some(cause) = cause {
            return ApiError::invalid(kind, "authorization.k8s.io", "", vec![cause])
                .into_response();
        }
    }
    let Some(name) = review["spec"]["user"].as_str().filter(|u| !u.is_empty()) else {
        return ApiError::invalid(
            kind,
            "authorization.k8s.io",
            "",
            vec![Cause::required("spec.user")],
        )
        .into_response();
    };
    let subject = User {
        name: name.to_string(),
        groups: review["spec"]["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|g| g.as_str().map(String::from))
            .collect(),
    };
    let decision = state.authorizer.authorize(&subject, &attributes);
    review["apiVersion"] = json!("authorization.k8s.io/v1");
    review["kind"] = json!(kind);
    review["status"] = access_review_status(decision);
    json_response(StatusCode::CREATED, &review)
}

/// `kubectl auth whoami`: who the server takes the caller for (a SelfSubjectReview). kubectl
/// 1.27 asks at v1beta1 or v1alpha1, later ones at v1; all three are answered.
async fn self_subject_review(
    axum::extract::Path(version): axum::extract::Path<String>,
    request: Request,
) -> Response {
    if !["v1", "v1beta1", "v1alpha1"].contains(&version.as_str()) {
        return not_found_path(request.uri().path()).into_response();
    }
    let Some(user) = request.extensions().get::<User>().cloned() else {
        return ApiError::Unauthorized.into_response();
    };
    // The body (JSON, or protobuf from kubectl) says nothing the answer needs, but it is read
    // within the body limit as any create's is: a client still sending gets its 413 or its
    // review, never a reset stream.
    if let Err(e) = read_bytes(request.into_body()).await {
        return e.into_response();
    }
    json_response(
        StatusCode::CREATED,
        &json!({
            "apiVersion": format!("authentication.k8s.io/{version}"),
            "kind": "SelfSubjectReview",
            "metadata": {"creationTimestamp": null},
            "status": {"userInfo": {"username": user.name, "groups": user.groups}},
        }),
    )
}

/// Ready while the store answers a linearizable read (with etcd: a quorum is up), within
/// the few seconds a load balancer's check waits.
async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    const WITHIN: Duration = Duration::from_secs(3);
    match tokio::time::timeout(WITHIN, state.resources.store.current_revision()).await {
        Ok(Ok(_)) => "ok".into_response(),
        Ok(Err(e)) => (StatusCode::SERVICE_UNAVAILABLE, format!("store: {e}")).into_response(),
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("store: no answer within {WITHIN:?}"),
        )
            .into_response(),
    }
}

/// Who a request was found to be, for the audit log.
#[derive(Default)]
struct Identity {
    user: Option<User>,
    impersonated: Option<User>,
}

/// Authenticates and admits the request (see [`admit`]) and, with an audit log, records it
/// there before the response goes out.
async fn authenticate(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    authenticate_and_audit(state, request, next, Paths::Authorize).await
}

/// [`authenticate`] for an extension's routes, which authorize their requests themselves.
async fn authenticate_for_extension(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    authenticate_and_audit(state, request, next, Paths::LeaveToRoute).await
}

/// Whether [`admit`] authorizes a non-resource path, or the route does.
#[derive(Clone, Copy, PartialEq)]
enum Paths {
    Authorize,
    LeaveToRoute,
}

async fn authenticate_and_audit(
    state: Arc<AppState>,
    request: Request,
    next: Next,
    paths: Paths,
) -> Response {
    let mut identity = Identity::default();
    let Some(audit) = state.audit.clone() else {
        return admit(&state, request, next, &mut identity, paths).await;
    };
    let received = chrono::Utc::now();
    let method = request.method().to_string();
    let uri = audited_uri(request.uri());
    let user_agent = request
        .headers()
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    let source = request
        .extensions()
        .get::<Peer>()
        .and_then(Peer::address)
        .map(|a| a.ip());
    let watching = parse_query(request.uri().query())
        .is_ok_and(|q| q.get("watch").is_some_and(|w| w == "true" || w == "1"));
    let target = parse_path(request.uri().path());
    let verb = target
        .as_ref()
        .and_then(|t| t.verb(request.method(), watching))
        .map_or_else(|| method.to_lowercase(), String::from);
    // The request and its audit event run to the end in a task of their own, so a client
    // that goes away (or a handler that panics) after a write still leaves its event.
    let state = state.clone();
    let task = tokio::spawn(async move {
        use futures::FutureExt;
        let served =
            std::panic::AssertUnwindSafe(admit(&state, request, next, &mut identity, paths))
                .catch_unwind()
                .await;
        let response = served.unwrap_or_else(|_| {
            tracing::error!(%uri, "a request panicked; it was answered with 500 and the server goes on");
            ApiError::internal("the server hit an internal error serving this request")
                .into_response()
        });
        let code = response.status().as_u16();
        if !crate::audit::AuditLog::wanted(&method, code) {
            return response;
        }
        let created = verb == "create" && (200..300).contains(&code);
        let (response, answer) = if code >= 400 || created {
            read_answer(response).await
        } else {
            (response, Value::Null)
        };
        let text = |field: &Value| field.as_str().unwrap_or_default().to_string();
        let failure = (code >= 400).then(|| (text(&answer["reason"]), text(&answer["message"])));
        // What a create made is named by its answer, as kube-apiserver's audit names it.
        let mut object = target.as_ref().map(Target::object_ref);
        if let Some(object) = object.as_mut().filter(|o| created && o["name"].is_null())
            && let Some(name) = answer["metadata"]["name"].as_str()
        {
            object["name"] = json!(name);
        }
        audit.write(&crate::audit::Record {
            id: &uuid::Uuid::new_v4().to_string(),
            received,
            verb: &verb,
            object,
            uri: &uri,
            user: identity.user.as_ref(),
            impersonated: identity.impersonated.as_ref(),
            source,
            user_agent: user_agent.as_deref(),
            code,
            failure,
        });
        response
    });
    task.await.unwrap_or_else(|_| {
        ApiError::internal("the server hit an internal error serving this request").into_response()
    })
}

/// An answer's JSON body (`Null` when it is not JSON, or is a stream or larger than a request
/// may be), and the answer as it was.
async fn read_answer(response: Response) -> (Response, Value) {
    use http_body::Body as _;
    let complete = response
        .body()
        .size_hint()
        .exact()
        .is_some_and(|size| size <= MAX_BODY_BYTES as u64);
    if !complete {
        return (response, Value::Null);
    }
    let (parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY_BYTES).await else {
        let lost = ApiError::internal("the answer could not be read back").into_response();
        return (lost, Value::Null);
    };
    let answer = serde_json::from_slice(&bytes).unwrap_or_default();
    (Response::from_parts(parts, Body::from(bytes)), answer)
}

/// The Kubernetes API's own query parameters, which say nothing secret: the audit log keeps
/// their values and withholds every other's (a token sent as `?access_token=`, say).
const PLAIN_PARAMETERS: &[&str] = &[
    "allowWatchBookmarks",
    "continue",
    "dryRun",
    "fieldManager",
    "fieldSelector",
    "fieldValidation",
    "force",
    "gracePeriodSeconds",
    "labelSelector",
    "limit",
    "orphanDependents",
    "pretty",
    "propagationPolicy",
    "resourceVersion",
    "resourceVersionMatch",
    "sendInitialEvents",
    "timeout",
    "timeoutSeconds",
    "watch",
    "container",
    "follow",
    "previous",
    "tailLines",
    "sinceSeconds",
    "timestamps",
];

/// The request's path and query as the audit log records them.
fn audited_uri(uri: &axum::http::Uri) -> String {
    let Some(query) = uri.query() else {
        return uri.path().to_string();
    };
    let parameters: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((key, _)) if !PLAIN_PARAMETERS.contains(&key) => format!("{key}=<withheld>"),
            _ => pair.to_string(),
        })
        .collect();
    format!("{}?{}", uri.path(), parameters.join("&"))
}

/// Finds who is calling (and who they act as), refuses agents outside their scope and
/// non-resource paths the caller may not reach, and passes the request on with its [`User`].
async fn admit(
    state: &Arc<AppState>,
    mut request: Request,
    next: Next,
    identity: &mut Identity,
    paths: Paths,
) -> Response {
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    let peer = request.extensions().get::<Peer>().cloned();
    // A proxy request another replica forwarded names its caller in headers, believed only
    // with a replica's credential (`replicas.rs`).
    let forwarded = request.headers().keys().any(|name| {
        name.as_str()
            .starts_with(crate::forwarding::FORWARDED_PREFIX)
    });
    let mut outcome = match (&state.replicas, forwarded) {
        (_, false) => {
            state
                .authenticator
                .authenticate(authorization.as_deref(), peer.as_ref())
                .await
        }
        (Some(replicas), true) if authorization.is_none() => {
            let chain = match &peer {
                Some(Peer::Remote {
                    certificates: Some(chain),
                    ..
                }) => Some(chain.as_slice()),
                _ => None,
            };
            let user = replicas
                .forwarded_user(
                    &state.authenticator,
                    chain,
                    request.uri().path(),
                    request.headers(),
                )
                .await;
            if user.is_ok() {
                request.extensions_mut().insert(crate::replicas::Forwarded);
            }
            user
        }
        (_, true) => Err(ApiError::Unauthorized),
    };
    // A token none of the server's authenticators knows may be an extension's identity (an
    // agent's cluster credential).
    if matches!(outcome, Err(ApiError::Unauthorized))
        && !forwarded
        && let Some(token) = authorization
            .as_deref()
            .and_then(crate::identity::bearer_token)
    {
        let server = crate::extension::Handle {
            state: state.clone(),
        };
        for extension in &state.extensions {
            if let Some(user) = extension.authenticate(&server, token).await {
                outcome = Ok(user);
                break;
            }
        }
    }
    if let Ok(user) = &outcome {
        identity.user = Some(user.clone());
    }
    let authenticated = outcome.is_ok();
    let unreachable = outcome.as_ref().ok().and_then(|user| {
        let path = request.uri().path();
        state
            .extensions
            .iter()
            .find_map(|extension| extension.may_reach(user, path).err())
    });
    let mut response = match (outcome, unreachable) {
        (Ok(_), Some(message)) => {
            discard(request.into_body()).await;
            ApiError::Forbidden { message }.into_response()
        }
        (Ok(mut user), None) => {
            if !user.groups.iter().any(|g| g == crate::rbac::AUTHENTICATED) {
                user.groups.push(crate::rbac::AUTHENTICATED.into());
            }
            identity.user = Some(user.clone());
            let share = match peer {
                Some(Peer::InProcess(_)) => Share::in_process(),
                _ => Share::of(&user),
            };
            match impersonation(state, &user, request.headers()) {
                Ok(Some(impersonated)) => {
                    identity.impersonated = Some(impersonated.clone());
                    user = impersonated;
                }
                Ok(None) => {}
                Err(e) => {
                    discard(request.into_body()).await;
                    return e.into_response();
                }
            }
            let path = request.uri().path();
            // Resource paths are authorized once the route knows the kind; every other path
            // (discovery, OpenAPI, metrics, what is not found) is a non-resource URL.
            if paths == Paths::Authorize && parse_path(path).is_none() {
                let attributes =
                    Attributes::non_resource(&request.method().as_str().to_lowercase(), path);
                if let Err(reason) = state.authorizer.authorize(&user, &attributes) {
                    discard(request.into_body()).await;
                    return attributes.forbidden(&user, &reason).into_response();
                }
            }
            request.extensions_mut().insert(user);
            request.extensions_mut().insert(share.clone());
            let mut response = next.run(request).await;
            response.extensions_mut().insert(share);
            response
        }
        (Err(e), _) => {
            // A credential that could not be checked (the store unavailable) is no refusal:
            // an outage must not look like a guessing attack in the logs and the metrics.
            if matches!(e, ApiError::Unauthorized | ApiError::Forbidden { .. }) {
                crate::auth::record_refusal(
                    request.uri().path(),
                    peer.as_ref().and_then(Peer::address),
                );
            }
            // Read (a bounded amount of) the body first: an HTTP/2 client still sending it
            // would otherwise see its stream reset instead of the 401.
            discard(request.into_body()).await;
            e.into_response()
        }
    };
    if authenticated {
        response.extensions_mut().insert(crate::tls::Authenticated);
    }
    response
}

/// The user a request acts as through `Impersonate-User` (kubectl `--as`), `-Group`
/// (`--as-group`), `-Uid` and `-Extra-*`, as kube-apiserver's impersonation filter decides:
/// the caller needs `impersonate` on that user (or ServiceAccount), on each group, uid and
/// extra. `None`: no impersonation asked.
fn impersonation(state: &AppState, caller: &User, headers: &HeaderMap) -> ApiResult<Option<User>> {
    // A value is taken as its UTF-8 text, as kube-apiserver takes it (`--as=josé`); one that is
    // not text is refused, never skipped: skipping it would serve the request as the caller.
    let text = |name: &str, value: &axum::http::HeaderValue| -> ApiResult<String> {
        std::str::from_utf8(value.as_bytes())
            .ok()
            .filter(|t| !t.chars().any(char::is_control))
            .map(String::from)
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "{name} is not valid UTF-8 text: name the identity to act as in UTF-8"
                ))
            })
    };
    let values = |name: &str| -> ApiResult<Vec<String>> {
        headers
            .get_all(name)
            .iter()
            .map(|v| text(name, v))
            .collect()
    };
    let name = values("impersonate-user")?.into_iter().next();
    let groups = values("impersonate-group")?;
    let uid = values("impersonate-uid")?.into_iter().next();
    let extras: Vec<(String, String)> = headers
        .iter()
        .filter_map(|(key, value)| {
            let key = key.as_str().strip_prefix("impersonate-extra-")?;
            Some(text(key, value).map(|v| (key.to_string(), v)))
        })
        .collect::<ApiResult<_>>()?;
    if name.as_deref() == Some("") {
        return Err(ApiError::bad_request(
            "Impersonate-User is empty: name the user to act as",
        ));
    }
    let Some(name) = name else {
        if groups.is_empty() && uid.is_none() && extras.is_empty() {
            return Ok(None);
        }
        return Err(ApiError::bad_request(
            "impersonating groups, a uid or extras needs a user: send Impersonate-User (kubectl --as) too",
        ));
    };
    let check = |group: &str,
                 resource: &str,
                 subresource: Option<&str>,
                 namespace: Option<&str>,
                 name: &str| {
        let attributes = Attributes {
            verb: "impersonate".into(),
            group: group.into(),
            resource: resource.into(),
            subresource: subresource.map(String::from),
            namespace: namespace.map(String::from),
            name: Some(name.into()),
            path: None,
        };
        state
            .authorizer
            .authorize(caller, &attributes)
            .map_err(|reason| attributes.forbidden(caller, &reason))
    };
    let mut impersonated = User {
        name: name.clone(),
        groups: vec![],
    };
    match name
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'))
    {
        Some((namespace, account)) => {
            check("", "serviceaccounts", None, Some(namespace), account)?;
            impersonated.groups.extend([
                "system:serviceaccounts".to_string(),
                format!("system:serviceaccounts:{namespace}"),
            ]);
        }
        None => check("", "users", None, None, &name)?,
    }
    for group in groups {
        check("", "groups", None, None, &group)?;
        if !impersonated.groups.contains(&group) {
            impersonated.groups.push(group);
        }
    }
    if let Some(uid) = &uid {
        check("authentication.k8s.io", "uids", None, None, uid)?;
    }
    for (key, value) in &extras {
        check(
            "authentication.k8s.io",
            "userextras",
            Some(key),
            None,
            value,
        )?;
    }
    if name != "system:anonymous"
        && !impersonated
            .groups
            .iter()
            .any(|g| g == crate::rbac::AUTHENTICATED)
    {
        impersonated.groups.push(crate::rbac::AUTHENTICATED.into());
    }
    Ok(Some(impersonated))
}

async fn core_versions(State(state): State<Arc<AppState>>) -> Response {
    json_response(
        StatusCode::OK,
        &discovery::core_versions(
            state
                .advertised_address
                .as_deref()
                .unwrap_or(&state.server_address),
        ),
    )
}

async fn api_groups(State(state): State<Arc<AppState>>) -> Response {
    json_response(
        StatusCode::OK,
        &discovery::groups(&state.resources.registry),
    )
}

async fn openapi_index(State(state): State<Arc<AppState>>) -> Response {
    json_response(
        StatusCode::OK,
        &openapi::v3_index(&state.resources.registry),
    )
}

async fn openapi_v2(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let document = openapi::v2_document(&state.resources.registry);
    if accept.contains("com.github.proto-openapi.spec.v2") {
        return (
            [(
                header::CONTENT_TYPE,
                "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
            )],
            openapi::v2_protobuf(&document),
        )
            .into_response();
    }
    json_response(StatusCode::OK, &document)
}

fn json_response(code: StatusCode, value: &Value) -> Response {
    let mut response = Response::new(Body::from(serde_json::to_vec(value).unwrap_or_default()));
    *response.status_mut() = code;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// Everything under `/api/v1/...`, `/apis/GROUP[/VERSION/...]` and `/openapi/v3/...`.
async fn dispatch(State(state): State<Arc<AppState>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let (method, uri) = (parts.method.clone(), parts.uri.clone());
    let content_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or_default().trim().to_string());
    // Parsed once: `serve` routes by it, and the request is counted by it.
    let target = parse_path(uri.path());
    let mut body = Some(body);
    let response = match serve(&state, parts, target.as_ref(), &mut body).await {
        Ok(response) => response,
        Err(e) => {
            // Read what is left of the body before answering: an HTTP/2 client still sending
            // it would otherwise see its stream reset instead of the error.
            if let Some(unread) = body.take() {
                discard(unread).await;
            }
            e.into_response()
        }
    };
    crate::metrics::Served {
        api: state.metrics_label,
        method: &method,
        content_type: content_type.as_deref(),
        query: uri.query(),
        resource: target.as_ref().map(|t| {
            (
                t.group.as_str(),
                t.plural.as_str(),
                t.name.as_deref(),
                t.subresource.as_deref(),
            )
        }),
    }
    .record(response.status().as_u16());
    response
}

/// The request body, for the one step that reads it.
fn take_body(body: &mut Option<Body>) -> Body {
    body.take().unwrap_or_else(Body::empty)
}

/// A parsed resource path.
#[derive(Debug, Default)]
struct Target {
    group: String,
    version: String,
    namespace: Option<String>,
    plural: String,
    name: Option<String>,
    subresource: Option<String>,
}

impl Target {
    /// The Kubernetes verb `method` is on this target; `None` where the API takes no such
    /// method.
    fn verb(&self, method: &Method, watching: bool) -> Option<&'static str> {
        match (self.subresource.as_deref(), method, self.name.is_some()) {
            // A TokenRequest is created on the ServiceAccount's `token` subresource, and that
            // is all the subresource takes.
            (Some("token"), &Method::POST, true) => return Some("create"),
            (Some("token"), _, _) => return None,
            // No subresource is deleted: a DELETE there is not one of its object.
            (Some(_), &Method::DELETE, _) => return None,
            _ => {}
        }
        Some(match (method, self.name.is_some()) {
            (&Method::GET, true) => "get",
            (&Method::GET, false) if watching => "watch",
            (&Method::GET, false) => "list",
            (&Method::POST, false) => "create",
            (&Method::PUT, true) => "update",
            (&Method::PATCH, true) => "patch",
            (&Method::DELETE, true) => "delete",
            (&Method::DELETE, false) => "deletecollection",
            _ => return None,
        })
    }

    /// The target as an audit Event's `objectRef`.
    fn object_ref(&self) -> Value {
        let mut object =
            json!({"resource": self.plural, "apiGroup": self.group, "apiVersion": self.version});
        for (field, value) in [
            ("namespace", &self.namespace),
            ("name", &self.name),
            ("subresource", &self.subresource),
        ] {
            if let Some(value) = value {
                object[field] = json!(value);
            }
        }
        object
    }
}

fn parse_path(path: &str) -> Option<Target> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match parts.as_slice() {
        ["api", version, rest @ ..] => (String::new(), version.to_string(), rest),
        ["apis", group, version, rest @ ..] => (group.to_string(), version.to_string(), rest),
        _ => return None,
    };
    let mut target = Target {
        group,
        version,
        ..Default::default()
    };
    let rest: Vec<&str> = rest.to_vec();
    let resource_part: &[&str] = match rest.as_slice() {
        // `namespaces/NAME/status` is the namespace's own subresource, not a resource inside it.
        ["namespaces", _, "status" | "finalize"] if target.group.is_empty() => &rest[..],
        ["namespaces", ns, tail @ ..] if !tail.is_empty() => {
            target.namespace = Some(ns.to_string());
            tail
        }
        _ => &rest[..],
    };
    match resource_part {
        [plural] => target.plural = plural.to_string(),
        [plural, name] => {
            target.plural = plural.to_string();
            target.name = Some(name.to_string());
        }
        [plural, name, sub] => {
            target.plural = plural.to_string();
            target.name = Some(name.to_string());
            target.subresource = Some(sub.to_string());
        }
        _ => return None,
    }
    if target.plural.is_empty() || target.name.as_deref() == Some("") {
        return None;
    }
    Some(target)
}

/// kube-apiserver's 404 for a path it does not serve.
pub fn not_found_path(path: &str) -> ApiError {
    ApiError::NotFound {
        message: format!("the server could not find the requested resource ({path})"),
        target: None,
    }
}

/// Serves one request below `/api`, `/apis` or `/openapi/v3/`: a discovery or OpenAPI
/// document, or a verb on a resource, resolved and authorized first ([`Call`]).
async fn serve(
    state: &Arc<AppState>,
    parts: axum::http::request::Parts,
    target: Option<&Target>,
    body: &mut Option<Body>,
) -> ApiResult<Response> {
    let path = parts.uri.path().to_string();
    let query = parse_query(parts.uri.query())?;
    if let Some(document) = document(&state.resources.registry, &path)? {
        return Ok(json_response(StatusCode::OK, &document));
    }
    let target = target.ok_or_else(|| not_found_path(&path))?;
    let call = Call::authorized(state, &parts, target, query).await?;
    if let Some(extension) = call.connecter {
        let server = crate::extension::Handle {
            state: state.clone(),
        };
        return call.connect(&server, extension.as_ref()).await;
    }
    match call.verb {
        "get" => call.get().await,
        "list" => call.list().await,
        "watch" => watch(state, &call.scope, &call.query, call.format, &call.share()).await,
        "create" if target.subresource.is_some() => call.request_token(take_body(body)).await,
        "create" => call.create(take_body(body)).await,
        "update" => call.update(take_body(body)).await,
        "patch" => call.patch(take_body(body)).await,
        "delete" => call.delete(take_body(body)).await,
        "deletecollection" => call.delete_collection(take_body(body)).await,
        _ => unreachable!("verbs are matched in Target::verb"),
    }
}

/// The OpenAPI v3 document or the discovery document `path` names, if it names one.
fn document(registry: &crate::registry::Registry, path: &str) -> ApiResult<Option<Value>> {
    if let Some(rest) = path.strip_prefix("/openapi/v3/") {
        let (group, version) = match rest
            .trim_matches('/')
            .split('/')
            .collect::<Vec<_>>()
            .as_slice()
        {
            ["api", version] => (String::new(), version.to_string()),
            ["apis", group, version] => (group.to_string(), version.to_string()),
            _ => return Err(not_found_path(path)),
        };
        return openapi::v3_document(registry, &group, &version)
            .map(Some)
            .ok_or_else(|| not_found_path(path));
    }
    let document = match path
        .trim_matches('/')
        .split('/')
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["apis", group] => discovery::group(registry, group),
        ["api", version] => discovery::resources(registry, "", version),
        ["apis", group, version] => discovery::resources(registry, group, version),
        _ => return Ok(None),
    };
    document.map(Some).ok_or_else(|| not_found_path(path))
}

/// One request for a verb on a resource, resolved to its kind and authorized: what each verb
/// serves it from.
struct Call<'a> {
    state: &'a AppState,
    parts: &'a axum::http::request::Parts,
    target: &'a Target,
    scope: Scope,
    query: HashMap<String, String>,
    format: Format,
    user: User,
    verb: &'static str,
    dry_run_values: Vec<String>,
    /// The extension that answers this request's connect subresource, if it is one.
    connecter: Option<&'a Arc<dyn crate::extension::Extension>>,
}

/// A refused list or watch of a resource the caller may read some objects of by name (a
/// Project member's own Project): the refusal names them, and how to read one, where
/// kube-apiserver says only "forbidden".
fn refused_list_hint(
    state: &AppState,
    user: &User,
    attributes: &Attributes,
    refusal: ApiError,
) -> ApiError {
    let listing = matches!(attributes.verb.as_str(), "list" | "watch");
    if !listing || attributes.name.is_some() || attributes.subresource.is_some() {
        return refusal;
    }
    let names = state.authorizer.readable_by_name(user, attributes);
    let Some(first) = names.first() else {
        return refusal;
    };
    let resource = attributes.qualified_resource();
    let namespace = attributes
        .namespace
        .as_deref()
        .map(|n| format!(" -n {n}"))
        .unwrap_or_default();
    const SHOWN: usize = 20;
    let more = names.len().saturating_sub(SHOWN);
    ApiError::Forbidden {
        message: format!(
            "{refusal}; you may get {} by name: {}{} (kubectl get {resource} {first}{namespace})",
            if names.len() == 1 {
                "this one"
            } else {
                "these"
            },
            names[..names.len().min(SHOWN)].join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            },
        ),
    }
}

impl<'a> Call<'a> {
    /// Resolves `target` to a served kind and subresource, finds the verb, and authorizes the
    /// caller (the authorizer chain, then the extensions' checks); a watch of a caller whose
    /// credential must be looked at again sooner is capped.
    async fn authorized(
        state: &'a Arc<AppState>,
        parts: &'a axum::http::request::Parts,
        target: &'a Target,
        query: HashMap<String, String>,
    ) -> ApiResult<Call<'a>> {
        let path = parts.uri.path();
        let (scope, connect) = resolve(state, target, path)?;
        let rt = &scope.rt;
        let user = parts
            .extensions
            .get::<User>()
            .cloned()
            .ok_or(ApiError::Unauthorized)?;
        let watching = query.get("watch").is_some_and(|w| w == "true" || w == "1");
        let verb = match connect {
            Some((_, connect)) => connect.verb(&parts.method),
            None => target.verb(&parts.method, watching),
        };
        let Some(verb) = verb else {
            return Err(ApiError::MethodNotAllowed {
                message: format!(
                    "the server does not allow this method on the requested resource ({} {path})",
                    parts.method
                ),
            });
        };
        // A namespace's own requests are in that namespace, as kube-apiserver scopes them: a
        // RoleBinding in `team-a` may let its subjects read Namespace `team-a`.
        let namespace = match (rt.group.as_str(), rt.plural.as_str()) {
            ("", "namespaces") => target.name.clone(),
            _ => target.namespace.clone(),
        };
        // A list or watch of one name (`--field-selector metadata.name=X`, as `kubectl get X
        // -w` sends) is a request for that name, so `resourceNames` rules reach it.
        let selected_name = query.get("fieldSelector").and_then(|selector| {
            let name = selector
                .strip_prefix("metadata.name==")
                .or_else(|| selector.strip_prefix("metadata.name="))?;
            (!name.is_empty() && !name.contains(',')).then(|| name.to_string())
        });
        let attributes = Attributes {
            verb: verb.into(),
            group: rt.group.clone(),
            resource: rt.plural.clone(),
            subresource: target.subresource.clone(),
            namespace,
            name: target.name.clone().or(selected_name),
            path: None,
        };
        if let Err(reason) = state.authorizer.authorize(&user, &attributes) {
            return Err(refused_list_hint(
                state,
                &user,
                &attributes,
                attributes.forbidden(&user, &reason),
            ));
        }
        let server = crate::extension::Handle {
            state: state.clone(),
        };
        for extension in &state.extensions {
            extension.check(&server, &user, &attributes).await?;
        }
        // A watch whose credential must be looked at again sooner (an agent's) ends within its
        // limit, so a revoked credential's watch does not outlive it: the watch is made again,
        // and authenticated again.
        let mut query = query;
        let limit = state
            .extensions
            .iter()
            .filter_map(|extension| extension.watch_limit(&user))
            .min();
        if watching && let Some(limit) = limit {
            let asked = query
                .get("timeoutSeconds")
                .and_then(|t| t.parse::<u64>().ok())
                .unwrap_or(u64::MAX);
            let capped = asked.min(limit.as_secs());
            query.insert("timeoutSeconds".into(), capped.to_string());
        }
        Ok(Call {
            state,
            parts,
            target,
            // A connect subresource answers in its own type (a log is text), and reads its
            // object as JSON.
            format: match connect {
                Some(_) => Format::Json,
                None => negotiate(&parts.headers, &query)?,
            },
            dry_run_values: query_values(parts.uri.query(), "dryRun"),
            connecter: connect.map(|(extension, _)| extension),
            scope,
            query,
            user,
            verb,
        })
    }

    fn name(&self) -> &str {
        self.target.name.as_deref().expect("named")
    }

    /// Whose share of the response budget this call's response takes: the authenticated
    /// caller's (authentication sets it), not an impersonated user's.
    fn share(&self) -> Share {
        self.parts
            .extensions
            .get::<Share>()
            .cloned()
            .unwrap_or_else(|| Share::of(&self.user))
    }

    fn subresource(&self) -> Option<&str> {
        self.target.subresource.as_deref()
    }

    /// How a write is made: field validation, field manager (the user agent's name by
    /// default), dry run, force, and who asks.
    fn write_options(&self) -> ApiResult<WriteOptions> {
        let query = &self.query;
        let validation = match query.get("fieldValidation").map(String::as_str) {
            None | Some("Warn") => FieldValidation::Warn,
            Some("Strict") => FieldValidation::Strict,
            Some("Ignore") => FieldValidation::Ignore,
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "fieldValidation must be one of Ignore, Warn or Strict, not {other:?}"
                )));
            }
        };
        let field_manager = match query.get("fieldManager") {
            Some(m) if m.chars().count() > 128 => {
                return Err(ApiError::bad_request(
                    "fieldManager may not be longer than 128 characters",
                ));
            }
            Some(m)
                if !m
                    .chars()
                    .all(|c| c == ' ' || !(c.is_control() || c.is_whitespace())) =>
            {
                return Err(ApiError::bad_request(format!(
                    "invalid fieldManager {m:?}: it must consist of printable characters"
                )));
            }
            Some(m) => m.clone(),
            None => self
                .parts
                .headers
                .get(header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("unknown")
                .split('/')
                .next()
                .unwrap_or("unknown")
                .to_string(),
        };
        Ok(WriteOptions {
            field_manager,
            validation,
            dry_run: dry_run(self.verb, &self.dry_run_values)?,
            force: query.get("force").is_some_and(|f| f == "true"),
            requester: Some(self.user.clone()),
            in_process: matches!(
                self.parts.extensions.get::<Peer>(),
                Some(Peer::InProcess(_))
            ),
            create_refused: None,
        })
    }

    /// Why this PUT or apply may not create what it names, should it be absent: the
    /// authorizer's answer for `create` on the same object. Asked only of the writes that can
    /// create (a PUT of a kind created on update, an apply), not of every update and patch.
    fn create_refused(&self) -> Option<ApiError> {
        if self.subresource().is_some() {
            return None;
        }
        let attributes = Attributes {
            verb: "create".into(),
            group: self.scope.rt.group.clone(),
            resource: self.scope.rt.plural.clone(),
            subresource: None,
            namespace: self.scope.namespace.clone(),
            name: self.target.name.clone(),
            path: None,
        };
        self.state
            .authorizer
            .authorize(&self.user, &attributes)
            .err()
            .map(|reason| attributes.forbidden(&self.user, &reason))
    }

    /// A written object, answered 201 when the write created it.
    fn written(&self, written: crate::resources::Written) -> Response {
        let code = if written.created {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        };
        render_object(
            code,
            &self.scope,
            written.object,
            self.format,
            &written.warnings,
        )
    }

    /// A connect subresource: its object, handed to the extension that answers it.
    async fn connect(
        &self,
        server: &crate::extension::Handle,
        extension: &dyn crate::extension::Extension,
    ) -> ApiResult<Response> {
        let object = self.state.resources.get(&self.scope, self.name()).await?;
        let connection = crate::extension::Connection {
            subresource: self.subresource().unwrap_or_default(),
            object,
            query: &self.query,
        };
        extension.connect(server, connection).await
    }

    async fn get(&self) -> ApiResult<Response> {
        let resources = &self.state.resources;
        let object = resources.get(&self.scope, self.name()).await?;
        let object = if self.subresource() == Some("scale") {
            resources.scale_of(&self.scope, &object)?
        } else {
            object
        };
        Ok(render_object(
            StatusCode::OK,
            &self.scope,
            object,
            self.format,
            &[],
        ))
    }

    /// A whole list is streamed as it is read; a page is answered whole, with its `continue`.
    async fn list(&self) -> ApiResult<Response> {
        let (resources, scope, rt) = (&self.state.resources, &self.scope, &self.scope.rt);
        let params = list_params(scope, &self.query, false)?;
        if params.limit == 0 && params.continue_token.is_none() {
            return stream_list(resources, scope, &params, self.format, &self.share()).await;
        }
        let listed = resources.list(scope, &params).await?;
        let mut metadata = json!({"resourceVersion": listed.resource_version.to_string()});
        if let Some(token) = listed.continue_token {
            metadata["continue"] = json!(token);
        }
        let body = match self.format {
            Format::Table(include) => table::table(
                &table::columns(rt, &scope.version),
                &listed.items,
                include,
                metadata,
            ),
            Format::Json => json!({
                "kind": rt.list_kind,
                "apiVersion": rt.api_version(&scope.version),
                "metadata": metadata,
                "items": listed.items,
            }),
            Format::Metadata => json!({
                "kind": "PartialObjectMetadataList",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": metadata,
                "items": listed.items.iter().map(table::partial).collect::<Vec<_>>(),
            }),
        };
        Ok(json_response(StatusCode::OK, &body))
    }

    /// A TokenRequest on a ServiceAccount's `token` subresource.
    async fn request_token(&self, body: Body) -> ApiResult<Response> {
        let accounts = self
            .state
            .authenticator
            .service_accounts()
            .expect("checked when resolved");
        let body = read_body(body, &self.parts.headers, true).await?;
        let namespace = self.target.namespace.as_deref().unwrap_or_default();
        let answer = accounts.request_token(namespace, self.name(), body).await?;
        Ok(json_response(StatusCode::CREATED, &answer))
    }

    async fn create(&self, body: Body) -> ApiResult<Response> {
        let body = read_body(body, &self.parts.headers, false).await?;
        let written = self
            .state
            .resources
            .create(&self.scope, body, &self.write_options()?)
            .await?;
        Ok(render_object(
            StatusCode::CREATED,
            &self.scope,
            written.object,
            self.format,
            &written.warnings,
        ))
    }

    async fn update(&self, body: Body) -> ApiResult<Response> {
        let (resources, scope, name) = (&self.state.resources, &self.scope, self.name());
        let body = read_body(body, &self.parts.headers, false).await?;
        let mut options = self.write_options()?;
        if crate::resources::creates_on_update(scope) {
            options.create_refused = self.create_refused();
        }
        let written = if self.subresource() == Some("scale") {
            resources
                .update_scale(scope, name, &options, |_| Ok(body.clone()))
                .await?
        } else {
            resources
                .update(scope, name, body, self.subresource(), &options)
                .await?
        };
        Ok(self.written(written))
    }

    async fn patch(&self, body: Body) -> ApiResult<Response> {
        let (resources, scope, name) = (&self.state.resources, &self.scope, self.name());
        let content_type = self
            .parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let patch_type = PatchType::from_content_type(content_type)?;
        if patch_type == PatchType::Apply && !self.query.contains_key("fieldManager") {
            return Err(ApiError::invalid(
                "PatchOptions",
                "meta.k8s.io",
                "",
                vec![Cause {
                    reason: "FieldValueRequired",
                    message: "Required value: is required for apply patch".into(),
                    field: "fieldManager".into(),
                }],
            ));
        }
        let bytes = read_bytes(body).await?;
        let mut options = self.write_options()?;
        if patch_type == PatchType::Apply {
            options.create_refused = self.create_refused();
        }
        let written = if self.subresource() == Some("scale") {
            if patch_type == PatchType::Apply {
                return Err(ApiError::UnsupportedMediaType {
                    message: "apply is not supported on the scale subresource".into(),
                });
            }
            let patch = crate::patch::Patch::parse(patch_type, &bytes)?;
            let max_bytes = resources.limits.max_object_bytes;
            resources
                .update_scale(scope, name, &options, |scale| patch.apply(scale, max_bytes))
                .await?
        } else {
            resources
                .patch(
                    scope,
                    name,
                    patch_type,
                    &bytes,
                    self.subresource(),
                    &options,
                )
                .await?
        };
        Ok(self.written(written))
    }

    /// 200 with the object when it is gone, 202 while finalizers hold it.
    async fn delete(&self, body: Body) -> ApiResult<Response> {
        let options = delete_options(body, &self.dry_run_values, &self.query).await?;
        let (object, gone) = self
            .state
            .resources
            .delete(&self.scope, self.name(), &options)
            .await?;
        let code = if gone {
            StatusCode::OK
        } else {
            StatusCode::ACCEPTED
        };
        Ok(render_object(code, &self.scope, object, Format::Json, &[]))
    }

    /// Deletes what a list with the same selectors finds, one object at a time, and answers
    /// the list of what it deleted.
    async fn delete_collection(&self, body: Body) -> ApiResult<Response> {
        let (resources, scope, rt) = (&self.state.resources, &self.scope, &self.scope.rt);
        let options = delete_options(body, &self.dry_run_values, &self.query).await?;
        let params = list_params(scope, &self.query, false)?;
        let listed = resources
            .list(
                scope,
                &ListParams {
                    limit: 0,
                    continue_token: None,
                    ..params
                },
            )
            .await?;
        let mut deleted = vec![];
        for item in listed.items {
            let name = crate::objects::name_of(&item).to_string();
            let item_scope = Scope {
                namespace: item["metadata"]["namespace"]
                    .as_str()
                    .map(String::from)
                    .or(scope.namespace.clone()),
                ..scope.clone()
            };
            match resources.delete(&item_scope, &name, &options).await {
                Ok((object, _)) => deleted.push(object),
                Err(ApiError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        let body = json!({
            "kind": rt.list_kind,
            "apiVersion": rt.api_version(&scope.version),
            "metadata": {},
            "items": deleted,
        });
        Ok(json_response(StatusCode::OK, &body))
    }
}

/// The extension that answers a connect subresource, and how the subresource is authorized.
type Connecter<'s> = (
    &'s Arc<dyn crate::extension::Extension>,
    crate::extension::Connect,
);

/// The extension that answers subresource `sub` of `rt`'s objects, and how it is authorized.
fn connecter<'s>(
    state: &'s AppState,
    rt: &crate::registry::ResourceType,
    sub: &str,
) -> Option<Connecter<'s>> {
    state.extensions.iter().find_map(|extension| {
        extension
            .connects(&rt.group, &rt.plural, sub)
            .map(|connect| (extension, connect))
    })
}

/// The served kind and subresource `target` names, as a [`Scope`], with the extension that
/// answers it when it is a connect subresource; 404 for what is not served.
fn resolve<'s>(
    state: &'s AppState,
    target: &Target,
    path: &str,
) -> ApiResult<(Scope, Option<Connecter<'s>>)> {
    let rt = state
        .resources
        .registry
        .resolve(&target.group, &target.version, &target.plural)?;
    if target.namespace.is_some() && !rt.namespaced {
        return Err(not_found_path(path));
    }
    let served = rt.version(&target.version).expect("resolved version");
    let connect = target
        .subresource
        .as_deref()
        .and_then(|sub| connecter(state, &rt, sub));
    match target.subresource.as_deref() {
        None => {}
        _ if connect.is_some() => {}
        Some("status") if served.status_subresource => {}
        Some("scale") if served.scale.is_some() => {}
        Some("token")
            if rt.group.is_empty()
                && rt.plural == "serviceaccounts"
                && state.authenticator.service_accounts().is_some() => {}
        Some(other) => {
            return Err(ApiError::NotFound {
                message: format!(
                    "the server could not find the requested resource ({} {}/{other})",
                    rt.qualified_plural(),
                    target.name.as_deref().unwrap_or_default()
                ),
                target: None,
            });
        }
    }
    let scope = Scope {
        rt: rt.clone(),
        version: target.version.clone(),
        namespace: target.namespace.clone(),
    };
    Ok((scope, connect))
}

/// Writes a whole list as it is read: the envelope first, then each item, so the server never
/// holds more than a store page of a large list.
async fn stream_list(
    resources: &Resources,
    scope: &Scope,
    params: &ListParams,
    format: Format,
    share: &Share,
) -> ApiResult<Response> {
    let (revision, items) = resources.list_stream(scope, params, share).await?;
    let metadata = json!({"resourceVersion": revision.to_string()});
    let (head, columns, include) = match format {
        Format::Table(include) => {
            let columns = table::columns(&scope.rt, &scope.version);
            let head = format!(
                r#"{{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{metadata},"columnDefinitions":{},"rows":["#,
                table::column_definitions(&columns)
            );
            (head, Some(columns), include)
        }
        Format::Json => {
            let head = format!(
                r#"{{"kind":"{}","apiVersion":"{}","metadata":{metadata},"items":["#,
                scope.rt.list_kind,
                scope.rt.api_version(&scope.version)
            );
            (head, None, IncludeObject::Object)
        }
        Format::Metadata => {
            let head = format!(
                r#"{{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{metadata},"items":["#
            );
            (head, None, IncludeObject::Metadata)
        }
    };
    let body = items.enumerate().map(move |(i, item)| {
        let object = item.map_err(|e| {
            tracing::warn!(error = %e, "list stream failed midway; the client sees a cut response");
            std::io::Error::other(e.to_string())
        })?;
        let rendered = match (&columns, include) {
            (Some(columns), _) => table::row(columns, &object, include),
            (None, IncludeObject::Metadata) => table::partial(&object),
            (None, _) => object,
        };
        let mut bytes = if i == 0 { Vec::new() } else { vec![b','] };
        serde_json::to_writer(&mut bytes, &rendered).map_err(std::io::Error::other)?;
        Ok::<_, std::io::Error>(Bytes::from(bytes))
    });
    let stream = futures::stream::once(async move { Ok(Bytes::from(head)) })
        .chain(body)
        .chain(futures::stream::once(async {
            Ok(Bytes::from_static(b"]}"))
        }));
    let mut response = Response::new(Body::from_stream(stream));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(response)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Json,
    Table(IncludeObject),
    /// `PartialObjectMetadata(List)`: metadata only, as kube-runtime's metadata watchers ask.
    Metadata,
}

/// Picks the response format from `Accept`: a Table when asked for (`as=Table`), else JSON.
/// A client that accepts neither gets 406.
fn negotiate(headers: &HeaderMap, query: &HashMap<String, String>) -> ApiResult<Format> {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    let include = match query.get("includeObject").map(String::as_str) {
        Some("None") => IncludeObject::None,
        Some("Object") => IncludeObject::Object,
        _ => IncludeObject::Metadata,
    };
    for item in accept.split(',') {
        let mut params = item.split(';').map(str::trim);
        let media = params.next().unwrap_or_default();
        let params: Vec<&str> = params.collect();
        let wants_table = params.contains(&"as=Table");
        let wants_metadata = params
            .iter()
            .any(|p| *p == "as=PartialObjectMetadata" || *p == "as=PartialObjectMetadataList");
        match media {
            "application/json" if wants_table => return Ok(Format::Table(include)),
            "application/json" if wants_metadata => return Ok(Format::Metadata),
            "application/json" | "*/*" | "application/*" | ""
                if !params.iter().any(|p| p.starts_with("as=")) =>
            {
                return Ok(Format::Json);
            }
            _ => {}
        }
    }
    Err(ApiError::NotAcceptable {
        message: format!(
            "only the following media types are accepted: application/json, application/json;as=Table;v=v1;g=meta.k8s.io, application/json;as=PartialObjectMetadata(List);v=v1;g=meta.k8s.io (got {accept:?})"
        ),
    })
}

fn render_object(
    code: StatusCode,
    scope: &Scope,
    object: Value,
    format: Format,
    warnings: &[String],
) -> Response {
    let body = match format {
        Format::Table(include) if object["kind"] != "Scale" => {
            let metadata = json!({"resourceVersion": object["metadata"]["resourceVersion"]});
            table::table(
                &table::columns(&scope.rt, &scope.version),
                &[object],
                include,
                metadata,
            )
        }
        Format::Metadata if object["kind"] != "Scale" => table::partial(&object),
        _ => object,
    };
    let mut response = json_response(code, &body);
    for warning in warnings {
        let text = format!("299 - \"{}\"", warning.replace('"', "\\\""));
        if let Ok(value) = HeaderValue::from_str(&text) {
            response.headers_mut().append("warning", value);
        }
    }
    response
}

/// Every value of a query parameter that may repeat (`dryRun=All&dryRun=All`).
fn query_values(query: Option<&str>, name: &str) -> Vec<String> {
    serde_urlencoded::from_str::<Vec<(String, String)>>(query.unwrap_or_default())
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| k == name)
        .map(|(_, v)| v)
        .collect()
}

/// Kubernetes's rule for `dryRun`: absent is a real write, `All` a dry run, and anything else
/// is refused (422, naming the field) before anything is written.
fn dry_run(verb: &str, values: &[String]) -> ApiResult<bool> {
    if values.is_empty() {
        return Ok(false);
    }
    if values.iter().all(|v| v == "All") {
        return Ok(true);
    }
    let kind = match verb {
        "create" => "CreateOptions",
        "update" => "UpdateOptions",
        "patch" => "PatchOptions",
        _ => "DeleteOptions",
    };
    Err(ApiError::invalid(
        kind,
        "meta.k8s.io",
        "",
        vec![Cause::not_supported(
            "dryRun",
            &json!(values),
            &[json!("All")],
        )],
    ))
}

fn parse_query(query: Option<&str>) -> ApiResult<HashMap<String, String>> {
    let Some(query) = query else {
        return Ok(HashMap::new());
    };
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query)
        .map_err(|e| ApiError::bad_request(format!("malformed query string: {e}")))?;
    Ok(pairs.into_iter().collect())
}

fn list_params(
    scope: &Scope,
    query: &HashMap<String, String>,
    watching: bool,
) -> ApiResult<ListParams> {
    let label_selector =
        Selector::parse_labels(query.get("labelSelector").map(String::as_str).unwrap_or(""))?;
    let rt = scope.rt.clone();
    let resolve = move |field: &str| {
        (matches!(field, "metadata.name" | "metadata.namespace")
            || rt.selectable_fields.iter().any(|f| f == field))
        .then(|| {
            rt.field_label_paths
                .iter()
                .find(|(label, _)| label == field)
                .map_or(field.to_string(), |(_, path)| path.clone())
        })
    };
    let field_selector = Selector::parse_fields(
        query.get("fieldSelector").map(String::as_str).unwrap_or(""),
        &resolve,
    )?;
    let limit = match query.get("limit") {
        Some(l) => l
            .parse::<i64>()
            .map_err(|_| ApiError::bad_request(format!("limit must be an integer, not {l:?}")))?
            .max(0) as usize,
        None => 0,
    };
    let continue_token = query.get("continue").filter(|c| !c.is_empty()).cloned();
    Ok(ListParams {
        label_selector,
        field_selector,
        limit,
        at: list_at(query, watching, continue_token.is_some())?,
        continue_token,
    })
}

/// `resourceVersion` and `resourceVersionMatch` on a list, validated as kube-apiserver
/// validates ListOptions (422 naming the field).
fn list_at(query: &HashMap<String, String>, watching: bool, continuing: bool) -> ApiResult<ListAt> {
    let version = query
        .get("resourceVersion")
        .map(String::as_str)
        .unwrap_or("");
    let revision = match version {
        "" | "0" => None,
        rv => Some(rv.parse::<i64>().ok().filter(|r| *r > 0).ok_or_else(|| {
            ApiError::bad_request(format!(
                "invalid resourceVersion {rv:?}: a resourceVersion is a positive integer"
            ))
        })?),
    };
    let forbidden = |why: &str| {
        ApiError::invalid(
            "ListOptions",
            "meta.k8s.io",
            "",
            vec![Cause::forbidden("resourceVersionMatch", why)],
        )
    };
    let matching = query.get("resourceVersionMatch").filter(|m| !m.is_empty());
    let initial_events = query.contains_key("sendInitialEvents");
    if watching {
        // A watch takes resourceVersionMatch only as part of a streaming list
        // (sendInitialEvents), and then only NotOlderThan.
        return match (matching.map(String::as_str), initial_events) {
            (None, false) => Ok(ListAt::Latest),
            (Some(_), _) if continuing => Err(forbidden(
                "resourceVersionMatch is forbidden when continue is provided",
            )),
            (Some("NotOlderThan"), true) => Ok(ListAt::Latest),
            (_, true) => Err(forbidden(
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            )),
            (Some(_), false) => Err(forbidden(
                "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            )),
        };
    }
    if initial_events {
        return Err(ApiError::invalid(
            "ListOptions",
            "meta.k8s.io",
            "",
            vec![Cause::forbidden(
                "sendInitialEvents",
                "sendInitialEvents is forbidden for list",
            )],
        ));
    }
    let Some(matching) = matching else {
        return Ok(revision.map_or(ListAt::Latest, ListAt::NotOlderThan));
    };
    if version.is_empty() {
        return Err(forbidden(
            "resourceVersionMatch is forbidden unless resourceVersion is provided",
        ));
    }
    if continuing {
        return Err(forbidden(
            "resourceVersionMatch is forbidden when continue is provided",
        ));
    }
    match (matching.as_str(), revision) {
        ("NotOlderThan", revision) => Ok(revision.map_or(ListAt::Latest, ListAt::NotOlderThan)),
        ("Exact", Some(revision)) => Ok(ListAt::Exact(revision)),
        ("Exact", None) => Err(forbidden(
            "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
        )),
        (other, _) => Err(ApiError::invalid(
            "ListOptions",
            "meta.k8s.io",
            "",
            vec![Cause::not_supported(
                "resourceVersionMatch",
                &json!(other),
                &[json!("Exact"), json!("NotOlderThan")],
            )],
        )),
    }
}

async fn watch(
    state: &AppState,
    scope: &Scope,
    query: &HashMap<String, String>,
    format: Format,
    share: &Share,
) -> ApiResult<Response> {
    let resource_version = match query.get("resourceVersion").map(String::as_str) {
        None | Some("") | Some("0") => None,
        Some(rv) => Some(
            rv.parse::<i64>()
                .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {rv:?}")))?,
        ),
    };
    if let Some(requested) = resource_version {
        state.resources.reached(requested).await?;
    }
    // 0, as no value, means the default (as in kube-apiserver).
    let timeout = match query.get("timeoutSeconds").filter(|t| t.as_str() != "0") {
        Some(t) => Duration::from_secs(
            t.parse()
                .map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds {t:?}")))?,
        )
        .min(MAX_WATCH_TIMEOUT),
        None => Duration::from_secs(1800),
    };
    let params = WatchParams {
        resource_version,
        list: list_params(scope, query, true)?,
        bookmarks: query
            .get("allowWatchBookmarks")
            .is_some_and(|b| b == "true"),
        send_initial_events: query.get("sendInitialEvents").is_some_and(|b| b == "true"),
        timeout,
        bookmark_interval: state.bookmark_interval,
    };
    let events = state
        .resources
        .watch(scope, params, share)
        .await?
        .take_until(state.stopped());
    let columns = table::columns(&scope.rt, &scope.version);
    let lines = events.map(move |event| {
        let rendered = match format {
            Format::Table(include) if matches!(event.kind, "ADDED" | "MODIFIED" | "DELETED") => {
                let metadata =
                    json!({"resourceVersion": event.object.value["metadata"]["resourceVersion"]});
                let row = table::table(
                    &columns,
                    std::slice::from_ref(&event.object.value),
                    include,
                    metadata,
                );
                Some(Bytes::from(serde_json::to_vec(&row).unwrap_or_default()))
            }
            Format::Metadata if event.kind != "ERROR" => Some(Bytes::from(
                serde_json::to_vec(&table::partial(&event.object.value)).unwrap_or_default(),
            )),
            _ => None,
        };
        // The object's JSON is shared by every watcher the change goes to (fanout::Fanout).
        let object = rendered.unwrap_or_else(|| event.object.json().clone());
        let prefix = format!("{{\"type\":\"{}\",\"object\":", event.kind);
        (prefix, object)
    });
    // What a watcher has not taken yet counts in its caller's share, as a list's pages do: a
    // watch whose next change does not fit ends with a 429 Status, and its client watches
    // again from the last resourceVersion it saw (kube-apiserver ends watchers that fall
    // behind). A change up to one chunk goes out uncounted, in one piece: the connection caps
    // bound those. A larger one goes out as the object every watcher shares between its
    // line's two ends, so 300 watchers of a 1 MB change hold one copy of it, not 300.
    let share = share.clone();
    let lines = lines
        .scan(false, move |ended, (prefix, object)| {
            const SUFFIX: &[u8] = b"}\n";
            let pieces = match (*ended, prefix.len() + object.len() <= crate::sending::CHUNK) {
                (true, _) => None,
                (false, true) => {
                    let mut line = Vec::with_capacity(prefix.len() + object.len() + 2);
                    line.extend_from_slice(prefix.as_bytes());
                    line.extend_from_slice(&object);
                    line.extend_from_slice(SUFFIX);
                    Some(vec![Bytes::from(line)])
                }
                (false, false) => Some(match crate::sending::counted(&share, object) {
                    Ok(object) => vec![Bytes::from(prefix), object, Bytes::from_static(SUFFIX)],
                    Err(refusal) => {
                        *ended = true;
                        let status = serde_json::to_vec(&refusal.to_status()).unwrap_or_default();
                        let mut line = b"{\"type\":\"ERROR\",\"object\":".to_vec();
                        line.extend_from_slice(&status);
                        line.extend_from_slice(SUFFIX);
                        vec![Bytes::from(line)]
                    }
                }),
            };
            futures::future::ready(pieces)
        })
        .flat_map(|pieces| {
            futures::stream::iter(pieces.into_iter().map(Ok::<_, std::convert::Infallible>))
        });
    let mut response = Response::new(Body::from_stream(lines));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    Ok(response)
}

/// A request body must have arrived this long after the request did (kube-apiserver's
/// request timeout): a client trickling its body holds a connection no longer.
const BODY_DEADLINE: Duration = Duration::from_secs(60);
/// What is read of a body nobody will use (after a refusal) before the answer goes out, so
/// an HTTP/2 client still sending sees the answer rather than a reset stream; a client
/// slower than this gets the reset.
const DISCARD_DEADLINE: Duration = Duration::from_secs(2);
const DRAIN_LIMIT: usize = 4 * MAX_BODY_BYTES;

/// Reads and drops what is left of a refused request's body, within bounds of time and size.
pub async fn discard(body: Body) {
    use http_body_util::BodyExt;
    let mut body = body;
    let _ = tokio::time::timeout(DISCARD_DEADLINE, async {
        let mut seen = 0usize;
        while let Some(Ok(frame)) = body.frame().await {
            seen += frame.data_ref().map_or(0, |d| d.len());
            if seen > DRAIN_LIMIT {
                break;
            }
        }
    })
    .await;
}

/// Reads a request body of at most [`MAX_BODY_BYTES`] within [`BODY_DEADLINE`]. A larger
/// body is read on (and dropped) up to a bound before the 413 goes out, so HTTP/2 clients
/// still see the answer instead of a reset stream.
async fn read_bytes(body: Body) -> ApiResult<Bytes> {
    tokio::time::timeout(BODY_DEADLINE, read_bytes_unbounded(body))
        .await
        .map_err(|_| {
            ApiError::bad_request(format!(
                "the request body did not arrive within {}s",
                BODY_DEADLINE.as_secs()
            ))
        })?
}

async fn read_bytes_unbounded(body: Body) -> ApiResult<Bytes> {
    use http_body_util::BodyExt;
    let too_large = || ApiError::TooLarge {
        message: format!("the request body is larger than the {MAX_BODY_BYTES} byte limit"),
    };
    let mut body = body;
    let mut collected = bytes::BytesMut::new();
    let mut seen = 0usize;
    // What this body holds of the bytes all bodies being received may hold together.
    let mut held = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame
            .map_err(|e| ApiError::bad_request(format!("cannot read the request body: {e}")))?;
        if let Ok(data) = frame.into_data() {
            seen += data.len();
            if seen <= MAX_BODY_BYTES {
                held.push(crate::limits::receive_body_bytes(data.len())?);
                collected.extend_from_slice(&data);
            } else if seen > DRAIN_LIMIT {
                return Err(too_large());
            }
        }
    }
    if seen > MAX_BODY_BYTES {
        return Err(too_large());
    }
    Ok(collected.freeze())
}

/// Reads a JSON (or YAML) object body.
async fn read_body(body: Body, headers: &HeaderMap, allow_empty: bool) -> ApiResult<Value> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    let essence = content_type.split(';').next().unwrap_or_default().trim();
    let bytes = read_bytes(body).await?;
    if bytes.is_empty() && allow_empty {
        return Ok(Value::Null);
    }
    let value: Value = match essence {
        "application/json" | "" => crate::limits::json(&bytes, "the request body")?,
        "application/vnd.kubernetes.protobuf" => {
            crate::limits::offload(bytes.len(), || crate::protobuf::decode(&bytes))?
        }
        "application/yaml" => crate::limits::yaml(&bytes, "the request body")?,
        other => {
            return Err(ApiError::UnsupportedMediaType {
                message: format!(
                    "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml (got {other:?})"
                ),
            });
        }
    };
    let empty_allowed = allow_empty && value.is_null();
    if !(value.is_object() || empty_allowed) {
        return Err(ApiError::bad_request(format!(
            "the request body must be a JSON object (a Kubernetes object), not {}",
            crate::status::json_type(&value)
        )));
    }
    Ok(value)
}

async fn delete_options(
    body: Body,
    query_dry_run: &[String],
    query: &HashMap<String, String>,
) -> ApiResult<DeleteOptions> {
    let headers = HeaderMap::new();
    let body = read_body(body, &headers, true).await?;
    if !body.is_null() && !body.is_object() {
        return Err(ApiError::bad_request(
            "the body of a delete must be a DeleteOptions object",
        ));
    }
    let propagation_text = body["propagationPolicy"]
        .as_str()
        .map(String::from)
        .or_else(|| query.get("propagationPolicy").cloned());
    let propagation = match propagation_text.as_deref() {
        None => match body["orphanDependents"].as_bool() {
            Some(true) => Some(Propagation::Orphan),
            _ => None,
        },
        Some("Orphan") => Some(Propagation::Orphan),
        Some("Background") => Some(Propagation::Background),
        Some("Foreground") => Some(Propagation::Foreground),
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "propagationPolicy must be Orphan, Background or Foreground, not {other:?}"
            )));
        }
    };
    let mut values = query_dry_run.to_vec();
    match &body["dryRun"] {
        Value::Null => {}
        Value::Array(items) => {
            for item in items {
                values.push(item.as_str().map_or_else(|| item.to_string(), String::from));
            }
        }
        other => values.push(other.to_string()),
    }
    let dry_run = dry_run("delete", &values)?;
    Ok(DeleteOptions {
        propagation,
        precondition_uid: body["preconditions"]["uid"].as_str().map(String::from),
        precondition_resource_version: body["preconditions"]["resourceVersion"]
            .as_str()
            .map(String::from),
        dry_run,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_audit_log_withholds_what_may_be_secret_in_a_query() {
        let uri: axum::http::Uri =
            "/api/v1/secrets?access_token=abc&limit=5&labelSelector=a%3Db&token"
                .parse()
                .unwrap();
        assert_eq!(
            audited_uri(&uri),
            "/api/v1/secrets?access_token=<withheld>&limit=5&labelSelector=a%3Db&token"
        );
    }

    #[test]
    fn requests_are_named_as_kube_apiserver_names_them() {
        let t = parse_path("/apis/apps/v1/namespaces/a/deployments/web/scale").unwrap();
        assert_eq!(t.verb(&Method::PATCH, false), Some("patch"));
        assert_eq!(
            t.object_ref(),
            json!({"resource": "deployments", "apiGroup": "apps", "apiVersion": "v1", "namespace": "a", "name": "web", "subresource": "scale"})
        );
        let t = parse_path("/api/v1/namespaces/a/secrets").unwrap();
        assert_eq!(t.verb(&Method::GET, true), Some("watch"));
        assert_eq!(t.verb(&Method::DELETE, false), Some("deletecollection"));
        assert_eq!(t.verb(&Method::PUT, false), None);
        let t = parse_path("/api/v1/namespaces/a/serviceaccounts/ci/token").unwrap();
        assert_eq!(t.verb(&Method::POST, false), Some("create"));
        for method in [Method::GET, Method::PUT, Method::PATCH, Method::DELETE] {
            assert_eq!(
                t.verb(&method, false),
                None,
                "{method} on serviceaccounts/token"
            );
        }
        let t = parse_path("/apis/apps/v1/namespaces/a/deployments/web/status").unwrap();
        assert_eq!(
            t.verb(&Method::DELETE, false),
            None,
            "a subresource is not deleted"
        );
    }

    #[test]
    fn paths() {
        let t = parse_path("/apis/example.com/v1beta1/namespaces/default/clusters/prod/status")
            .unwrap();
        assert_eq!(
            (t.group.as_str(), t.namespace.as_deref(), t.plural.as_str()),
            ("example.com", Some("default"), "clusters")
        );
        assert_eq!(
            (t.name.as_deref(), t.subresource.as_deref()),
            (Some("prod"), Some("status"))
        );
        let t = parse_path("/api/v1/namespaces/kube-system").unwrap();
        assert_eq!(
            (t.plural.as_str(), t.name.as_deref(), t.namespace),
            ("namespaces", Some("kube-system"), None)
        );
        let t = parse_path("/api/v1/namespaces/x/status").unwrap();
        assert_eq!(
            (t.plural.as_str(), t.subresource.as_deref()),
            ("namespaces", Some("status"))
        );
        let t = parse_path("/api/v1/namespaces/x/configmaps").unwrap();
        assert_eq!(
            (t.plural.as_str(), t.namespace.as_deref()),
            ("configmaps", Some("x"))
        );
        assert!(parse_path("/api/v1/a/b/c/d").is_none());
        assert!(parse_path("/foo").is_none());
    }

    #[test]
    fn negotiation() {
        let mut headers = HeaderMap::new();
        let query = HashMap::new();
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static(
                "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
            ),
        );
        assert_eq!(
            negotiate(&headers, &query).unwrap(),
            Format::Table(IncludeObject::Metadata)
        );
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/vnd.kubernetes.protobuf, application/json"),
        );
        assert_eq!(negotiate(&headers, &query).unwrap(), Format::Json);
        // kube-runtime's metadata watchers.
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static(
                "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
            ),
        );
        assert_eq!(negotiate(&headers, &query).unwrap(), Format::Metadata);
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/vnd.kubernetes.protobuf"),
        );
        assert_eq!(
            negotiate(&headers, &query).unwrap_err().code(),
            StatusCode::NOT_ACCEPTABLE
        );
    }
}
