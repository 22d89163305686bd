//! What a crate adds to the generic server beyond kinds and their write rules: routes, an
//! identity the server's own authenticators do not know, the scope of that identity, grants
//! of kinds beyond RBAC's, objects kept from the first start, and tasks that run while the
//! server serves. The management plane (`lariat_management`: the agents' tunnels, their scope,
//! the cluster proxy, Rancher's access control) is two; the server names none of it.

//!
//! This is kube-apiserver's configuration of a generic server in one trait: extra handlers
//! (`NonGoRestfulMux`), a token authenticator in the union of authenticators, an authorizer
//! ahead of RBAC in the chain (as the Node authorizer decides for kubelets and has no opinion
//! on anyone else), and post-start hooks.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::Method;
use axum::response::Response;
use serde_json::Value;

use crate::http::AppState;
use crate::identity::{Attributes, Authorizer, User};
use crate::leader::Leadership;
use crate::proofs::FailedProofs;
use crate::rbac::GrantSource;
use crate::replicas::Replicas;
use crate::resources::Resources;
use crate::status::ApiResult;

/// The running server, as an extension sees it.
#[derive(Clone)]
pub struct Handle {
    pub(crate) state: Arc<AppState>,
}

impl Handle {
    /// A kube-rs client served in-process, as lariat's controllers (see [`crate::local`]).
    pub fn client(&self) -> kube::Client {
        crate::local::client(self.state.clone())
    }

    /// A client whose writes are refused while this replica does not lead.
    pub fn controller_client(&self) -> kube::Client {
        crate::local::controller_client(self.state.clone(), self.leadership())
    }

    /// Resolves once the server stops: what holds a connection open (a tunnel) closes then.
    pub fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        self.state.stopped()
    }

    /// This replica's standing in the controllers' election.
    pub fn leadership(&self) -> Arc<Leadership> {
        self.state.leadership.clone()
    }

    /// The other replicas on this datastore (`None` where there are none to forward to).
    pub fn replicas(&self) -> Option<Arc<Replicas>> {
        self.state.replicas.clone()
    }

    /// The storage verbs, for a route that serves from the API's objects (read-only use: a
    /// write goes through [`Handle::client`], with admission).
    pub fn resources(&self) -> &Resources {
        &self.state.resources
    }

    /// The whole authorizer chain (extensions', then RBAC).
    pub fn authorizer(&self) -> &dyn Authorizer {
        &*self.state.authorizer
    }

    /// The per-address budget of failed proofs every proven route draws on.
    pub fn failed_proofs(&self) -> &FailedProofs {
        &self.state.failed_proofs
    }

    /// The CA certificate (PEM) clients check the server's certificate against.
    pub fn ca_pem(&self) -> &str {
        &self.state.ca_pem
    }

    /// `host:port` clients on this machine use.
    pub fn server_address(&self) -> &str {
        &self.state.server_address
    }

    /// `host:port` clusters and agents elsewhere reach the server at (`--advertise-url`).
    pub fn advertised_address(&self) -> Option<&str> {
        self.state.advertised_address.as_deref()
    }
}

/// A part of the server given in its configuration. Every method has a default that adds
/// nothing.
#[async_trait::async_trait]
pub trait Extension: Send + Sync + 'static {
    /// Routes beside the API whose callers prove themselves to the route (before
    /// authentication); a failed proof should count against its address
    /// ([`Handle::failed_proofs`]).
    fn routes(&self, _server: Handle) -> Router {
        Router::new()
    }

    /// Routes behind authentication: a handler finds its caller as a [`User`] request
    /// extension and authorizes the request itself.
    fn authenticated_routes(&self, _server: Handle) -> Router {
        Router::new()
    }

    /// The identity a bearer token none of the server's authenticators knows stands for.
    async fn authenticate(&self, _server: &Handle, _token: &str) -> Option<User> {
        None
    }

    /// The decision on a request of an identity this extension confines, ahead of RBAC;
    /// `None`, no opinion, for everyone else.
    fn authorize(&self, _user: &User, _attributes: &Attributes) -> Option<Result<(), String>> {
        None
    }

    /// Refuses, before routing, a path an identity this extension confines may not reach at
    /// all (`Err(message)`).
    fn may_reach(&self, _user: &User, _path: &str) -> Result<(), String> {
        Ok(())
    }

    /// What an authorized resource request must also pass, when deciding needs reading other
    /// objects (as the Node authorizer's graph of which Pods a kubelet runs).
    async fn check(
        &self,
        _server: &Handle,
        _user: &User,
        _attributes: &Attributes,
    ) -> ApiResult<()> {
        Ok(())
    }

    /// The longest a watch of `user` runs, when its credential must be looked at again sooner
    /// than the server's own limit.
    fn watch_limit(&self, _user: &User) -> Option<Duration> {
        None
    }

    /// Tasks that run on every replica while the server serves, until `stop` turns true.
    fn run(
        &self,
        _server: Handle,
        _stop: tokio::sync::watch::Receiver<bool>,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        Vec::new()
    }

    /// Tasks that run on the replica that leads, for as long as it leads (`term` turns true
    /// when the term ends); they write through [`Handle::controller_client`].
    fn lead(
        &self,
        _server: Handle,
        _term: tokio::sync::watch::Receiver<bool>,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        Vec::new()
    }

    /// Objects the extension keeps from the first start (built-in roles, say), written before
    /// the server serves, as the server itself: no requester, so no write rule judges a
    /// writer.
    async fn prepare(&self, _resources: &Resources) -> ApiResult<()> {
        Ok(())
    }

    /// Grants of kinds beyond RBAC's own, which RBAC's index follows beside its four.
    fn grant_source(&self) -> Option<Box<dyn GrantSource>> {
        None
    }

    /// Whether this extension answers `subresource` of `group`/`plural` objects, and how it
    /// is authorized; `None` for every subresource it does not answer.
    fn connects(&self, _group: &str, _plural: &str, _subresource: &str) -> Option<Connect> {
        None
    }

    /// The answer to a request on a subresource [`Extension::connects`] claims, once the
    /// server has authorized it and found its object.
    async fn connect(&self, _server: &Handle, connection: Connection<'_>) -> ApiResult<Response> {
        Err(crate::status::ApiError::internal(format!(
            "no answer for the {} subresource",
            connection.subresource
        )))
    }
}

/// A subresource answered by what runs an object, not by the store: kube-apiserver's connect
/// subresources (a Pod's `log`, `exec`, `attach` and `portforward`), which it hands to the
/// kubelet of the Pod's Node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Connect {
    /// Read with GET, authorized as `get` (a Pod's `log`).
    Read,
    /// Runs something in the object, authorized as `create` whichever way the stream is
    /// opened: kube-apiserver authorizes a WebSocket exec's GET as a create since 1.31, so
    /// that reading Pods is not running commands in them.
    Run,
}

impl Connect {
    /// The verb a request of `method` is authorized as; `None` where the subresource takes
    /// no such method.
    pub(crate) fn verb(self, method: &Method) -> Option<&'static str> {
        match (self, method) {
            (Connect::Read, &Method::GET) => Some("get"),
            (Connect::Run, &Method::GET | &Method::POST) => Some("create"),
            _ => None,
        }
    }
}

/// An authorized request on a connect subresource.
pub struct Connection<'a> {
    /// `log`, `exec`, ...
    pub subresource: &'a str,
    /// The object, as stored.
    pub object: Value,
    /// The request's query parameters (`container`, `previous`, `command`, ...).
    pub query: &'a HashMap<String, String>,
}

impl std::fmt::Debug for dyn Extension {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Extension")
    }
}

/// The extensions' decisions ahead of the server's own authorizer.
pub(crate) struct Chain {
    pub extensions: Vec<Arc<dyn Extension>>,
    pub inner: Arc<dyn Authorizer>,
}

impl Authorizer for Chain {
    fn authorize(&self, user: &User, attributes: &Attributes) -> Result<(), String> {
        self.extensions
            .iter()
            .find_map(|extension| extension.authorize(user, attributes))
            .unwrap_or_else(|| self.inner.authorize(user, attributes))
    }

    fn readable_by_name(&self, user: &User, attributes: &Attributes) -> Vec<String> {
        self.inner.readable_by_name(user, attributes)
    }
}
