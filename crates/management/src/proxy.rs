//! The cluster proxy: `/k8s/clusters/<namespace>/<name>/...` into the tunnel of that Cluster,
//! as Rancher's. The server never opens a connection to a downstream cluster; a request that
//! reaches a replica without the cluster's tunnel goes to the replica that holds it.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use lariat_api::tunnel::AGENT_PATH_SEGMENT;
use lariat_apiserver::extension::Handle;
use lariat_apiserver::forwarding;
use lariat_apiserver::identity::{Attributes, User};
use lariat_apiserver::replicas::{Forwarded, Replicas};
use lariat_apiserver::status::ApiError;

use crate::Plane;
use crate::hub::Tunnels;

/// `/k8s/clusters/<namespace>/<name>/...`: authorized as the `proxy` subresource of that
/// Cluster (the seam RBAC's cluster scope plugs into), then sent through its tunnel. A refusal
/// reads (a bounded amount of) the body first, so an HTTP/2 client still sending sees the
/// answer rather than a reset stream.
pub(crate) async fn route(
    State((plane, server)): State<(Plane, Handle)>,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let (user, holder) = match checked(&plane, &server, &parts).await {
        Ok(checked) => checked,
        Err(refusal) => return refuse(body, refusal).await,
    };
    let request = Request::from_parts(parts, body);
    match holder {
        Some((replicas, holder)) => replicas.forward(&holder, &user, request).await,
        None => proxy(&plane.tunnels, &user, request).await,
    }
}

/// Reads and drops what is left of a refused request's body, then answers `error`.
async fn refuse(body: Body, error: ApiError) -> Response {
    lariat_apiserver::http::discard(body).await;
    error.into_response()
}

/// Whether the request may go through: the caller may use the Cluster's `proxy` (or
/// `handoff`) subresource and the Cluster lives. Returns the caller, and the replica to
/// forward to when another live one holds the tunnel (once: a forwarded request is served
/// from this replica's tunnels or not at all).
async fn checked(
    plane: &Plane,
    server: &Handle,
    parts: &axum::http::request::Parts,
) -> Result<(User, Option<(std::sync::Arc<Replicas>, String)>), ApiError> {
    let mut segments = parts.uri.path().splitn(6, '/').skip(3);
    let (namespace, name) = (segments.next(), segments.next());
    let user = parts
        .extensions
        .get::<User>()
        .cloned()
        .ok_or(ApiError::Unauthorized)?;
    // As kube-apiserver names the verbs of a proxy subresource.
    let verb = match parts.method {
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "get",
    };
    // The agent's own endpoint (`lariat move` hands the agent to another server) is not the
    // cluster's API: it is the `handoff` subresource, POST only.
    let to_agent = segments
        .next()
        .is_some_and(|rest| rest.starts_with(AGENT_PATH_SEGMENT));
    if to_agent && parts.method != Method::POST {
        return Err(ApiError::MethodNotAllowed {
            message: "the agent's handoff takes POST only".into(),
        });
    }
    let attributes = Attributes {
        verb: verb.into(),
        group: "cluster.x-k8s.io".into(),
        resource: "clusters".into(),
        subresource: Some(if to_agent { "handoff" } else { "proxy" }.into()),
        namespace: namespace.map(String::from),
        name: name.map(String::from),
        path: None,
    };
    let (namespace, name) = (namespace.unwrap_or_default(), name.unwrap_or_default());
    if let Err(reason) = server.authorizer().authorize(&user, &attributes) {
        let refusal = attributes.forbidden(&user, &reason);
        // The bindings that let a user reach a cluster move with it: say where it went, to
        // those the moved bindings named.
        return Err(match moved(server, &user, namespace, name, false).await? {
            Some(went) => ApiError::Forbidden {
                message: format!("{refusal}; {went}"),
            },
            None => refusal,
        });
    }
    // A tunnel serves its Cluster while the Cluster lives: the moment it is deleted (or being
    // deleted) the proxy stops, without waiting for the next heartbeat to close the tunnel.
    if let Some(scope) = server
        .resources()
        .scope("cluster.x-k8s.io", "clusters", Some(namespace))
    {
        let live = match server.resources().get(&scope, name).await {
            Ok(cluster) => cluster["metadata"]["deletionTimestamp"].is_null(),
            Err(ApiError::NotFound { .. }) => false,
            Err(e) => return Err(e),
        };
        if !live {
            plane.tunnels.disconnect(&format!("{namespace}/{name}"));
            let not_found = ApiError::not_found("clusters", "cluster.x-k8s.io", name);
            return Err(match moved(server, &user, namespace, name, true).await? {
                Some(went) => ApiError::NotFound {
                    message: format!("{not_found}: {went}"),
                    target: None,
                },
                None => not_found,
            });
        }
    }
    // Another replica holds the tunnel: the request goes there.
    let cluster = format!("{namespace}/{name}");
    if !plane.tunnels.is_connected(&cluster)
        && parts.extensions.get::<Forwarded>().is_none()
        && let Some(replicas) = server.replicas()
    {
        // A holder that is gone took the tunnel with it: answered here, as not connected.
        if let Some(holder) = plane.records.holder(namespace, name).await?
            && holder != replicas.identity()
            && replicas.is_live(&holder)
        {
            return Ok((user, Some((replicas, holder))));
        }
    }
    Ok((user, None))
}

/// Where a Cluster that is not here went, as `lariat move` recorded it (`moved_record`, kept
/// where only administrators write). Told to a caller who may use that cluster's proxy here
/// (`authorized`), or whom the moved bindings named: not to every signed-in user, who could
/// otherwise probe names for clusters that left. Only an `https` URL in plain text is told.
async fn moved(
    server: &Handle,
    user: &User,
    namespace: &str,
    name: &str,
    authorized: bool,
) -> Result<Option<String>, ApiError> {
    use lariat_api::management::{MovedTo, moved_record};
    if user.name == "system:anonymous" {
        return Ok(None);
    }
    let resources = server.resources();
    let (record_namespace, record_name) = moved_record(namespace);
    let Some(scope) = resources.scope("", "configmaps", Some(record_namespace)) else {
        return Ok(None);
    };
    let record = match resources.get(&scope, &record_name).await {
        Ok(record) => record,
        Err(ApiError::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let Some(to) = record["data"][name]
        .as_str()
        .and_then(|text| serde_json::from_str::<MovedTo>(text).ok())
    else {
        return Ok(None);
    };
    let named = to.users.contains(&user.name) || to.groups.iter().any(|g| user.groups.contains(g));
    let plain = |text: &str| !text.chars().any(|c| c.is_control() || c.is_whitespace());
    if !(authorized || named)
        || !to.server.starts_with("https://")
        || !plain(&to.server)
        || !plain(&to.moved_at)
    {
        return Ok(None);
    }
    // A cluster of that name made here since is not the one that left.
    if let Some(clusters) = resources.scope("cluster.x-k8s.io", "clusters", Some(namespace))
        && resources.get(&clusters, name).await.is_ok()
    {
        return Ok(None);
    }
    Ok(Some(format!(
        "cluster {namespace}/{name} was moved to the management server {} at {}: ask that server for access and a kubeconfig (lariat kubeconfig {name} -n {namespace} --kubeconfig ITS-KUBECONFIG)",
        to.server, to.moved_at
    )))
}

/// Proxies a request for `/k8s/clusters/<namespace>/<name>/<rest>` into that Cluster's tunnel,
/// as `caller`: the agent sends it to its cluster's API with its own credential and
/// `Impersonate-User`/`Impersonate-Group` naming the caller, so the cluster's own RBAC decides
/// (the bindings lariat keeps there for Rancher's scopes, see `rancher/`). Whatever identity
/// headers the caller sent are dropped first.
async fn proxy(tunnels: &Tunnels, caller: &User, request: Request) -> Response {
    let (mut parts, body) = request.into_parts();
    let path = parts.uri.path().to_string();
    let mut segments = path.splitn(6, '/').skip(3);
    let (Some(namespace), Some(name)) = (segments.next(), segments.next()) else {
        let error = ApiError::NotFound {
            message: "proxy paths are /k8s/clusters/<namespace>/<name>/...".into(),
            target: None,
        };
        return refuse(body, error).await;
    };
    let cluster = format!("{namespace}/{name}");
    let Some(tunnel) = tunnels.get(&cluster) else {
        let error = ApiError::Unavailable {
            message: format!(
                "cluster {cluster} is not connected: its agent has not dialled in, or is dialling again (see the Cluster's Connected condition)"
            ),
        };
        return refuse(body, error).await;
    };
    let prefix = format!("/k8s/clusters/{namespace}/{name}");
    let rest = &path[prefix.len()..];
    let rest = if rest.is_empty() { "/" } else { rest };
    let target = match parts.uri.query() {
        Some(query) => format!("http://agent{rest}?{query}"),
        None => format!("http://agent{rest}"),
    };
    let Ok(uri) = target.parse() else {
        return refuse(body, ApiError::bad_request("invalid proxy path")).await;
    };
    parts.uri = uri;
    parts.version = axum::http::Version::HTTP_2;
    forwarding::strip_caller_headers(&mut parts.headers);
    // `system:` identities are each cluster's own (its nodes, controllers, service accounts):
    // a lariat caller never becomes one downstream. lariat's own (`system:lariat:...`, its
    // controllers) keep their names, and of the groups only `system:masters` passes, so
    // lariat's administrators administer every cluster, as Rancher's do.
    if caller.name.starts_with("system:") && !caller.name.starts_with("system:lariat:") {
        let error = ApiError::Forbidden {
            message: format!(
                "User {:?} cannot act in a downstream cluster: names starting with system: are the cluster's own identities",
                caller.name
            ),
        };
        return refuse(body, error).await;
    }
    let groups = caller
        .groups
        .iter()
        .filter(|group| !group.starts_with("system:") || *group == lariat_apiserver::rbac::MASTERS)
        .map(|group| ("impersonate-group", group));
    for (name, text) in std::iter::once(("impersonate-user", &caller.name)).chain(groups) {
        match forwarding::identity_header(text, "downstream") {
            Ok(value) => parts.headers.append(name, value),
            Err(error) => return refuse(body, error).await,
        };
    }
    let mut sender = tunnel.sender.clone();
    if sender.ready().await.is_err() {
        let error = ApiError::Unavailable {
            message: format!("cluster {cluster}'s tunnel closed"),
        };
        return refuse(body, error).await;
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
