//! Routes served beside the API to callers that hold no credential of this server and prove
//! themselves to the route's handler instead (a git host's webhook signs its deliveries), from
//! the crate that owns them (Fleet's git webhook): kube-apiserver's extra handlers of an
//! aggregated server, in a simpler shape. The server bounds what such a caller may cost: the
//! body is read within the request body limit before the handler runs, and an address whose
//! proofs keep failing is told to wait, as a failing agent handshake is.

use std::sync::Arc;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use futures::future::BoxFuture;
use serde_json::Value;

/// What a handler answers: a JSON body (200), or a refusal with its status and message. A
/// 401 says the caller's proof failed, and counts against its address.
pub type Answer = Result<Value, (StatusCode, String)>;

/// Handles one request: a client of this server's API (as the server itself), the request's
/// headers and its body.
pub type Handler =
    Arc<dyn Fn(kube::Client, HeaderMap, Bytes) -> BoxFuture<'static, Answer> + Send + Sync>;

/// A `POST` route and its handler.
#[derive(Clone)]
pub struct Route {
    pub path: &'static str,
    pub handler: Handler,
}

impl Route {
    pub fn post<F, Fut>(path: &'static str, handler: F) -> Route
    where
        F: Fn(kube::Client, HeaderMap, Bytes) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Answer> + Send + 'static,
    {
        Route {
            path,
            handler: Arc::new(move |client, headers, body| {
                Box::pin(handler(client, headers, body))
            }),
        }
    }
}

impl std::fmt::Debug for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Route").field("path", &self.path).finish()
    }
}
