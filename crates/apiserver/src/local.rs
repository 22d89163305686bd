//! An in-process kube-rs client: requests go straight into the router, with no socket and no
//! TLS, under a fixed identity. lariat's own controllers use it, so they exercise exactly the
//! API (validation, admission, watch) that every other client sees.

use std::sync::Arc;

use axum::response::IntoResponse;
use tower::ServiceExt;

use crate::http::{AppState, router};
use crate::identity::{Peer, User};
use crate::leader::Leadership;

/// The user in-process controllers act as.
pub const CONTROLLER_USER: &str = "system:lariat:controller-manager";

pub fn client(state: Arc<AppState>) -> kube::Client {
    client_of(router(state))
}

/// A client served by `app`, an already built router: building one (every route, every
/// extension's) costs more than most requests, so what asks often keeps its client.
pub fn client_of(app: axum::Router) -> kube::Client {
    gated_client(app, None)
}

/// The client the elected controllers write through: while this replica does not hold the
/// controllers' lease (see [`crate::leader`]), every write it sends is refused with 503, so a
/// replica that lost the lease stops writing before another may start, whatever its
/// reconciles still have in flight. Reads pass: caches may fill before a term begins.
pub fn controller_client(state: Arc<AppState>, leadership: Arc<Leadership>) -> kube::Client {
    gated_client(router(state), Some(leadership))
}

fn gated_client(app: axum::Router, leadership: Option<Arc<Leadership>>) -> kube::Client {
    let identity = Peer::InProcess(User {
        name: CONTROLLER_USER.into(),
        groups: vec!["system:masters".into()],
    });
    let service = tower::service_fn(move |request: axum::http::Request<kube::client::Body>| {
        let mut request = request.map(axum::body::Body::new);
        request.extensions_mut().insert(identity.clone());
        let refused = !request.method().is_safe()
            && leadership
                .as_ref()
                .is_some_and(|leadership| !leadership.holds());
        let app = app.clone();
        async move {
            if refused {
                return Ok(crate::status::ApiError::Unavailable {
                    message:
                        "this replica no longer holds the controllers' lease: another one runs them"
                            .into(),
                }
                .into_response());
            }
            app.oneshot(request).await
        }
    });
    kube::Client::new(service, "default")
}
