//! An in-process kube-rs client: requests go straight into the router, with no socket and no
//! TLS, under a fixed identity. lariat's own controllers use it, so they exercise exactly the
//! API (validation, admission, watch) that every other client sees.

use std::sync::Arc;

use tower::ServiceExt;

use crate::auth::{Peer, User};
use crate::http::{AppState, router};

/// The user in-process controllers act as.
pub const CONTROLLER_USER: &str = "system:lariat:controller-manager";

pub fn client(state: Arc<AppState>) -> kube::Client {
    let app = router(state);
    let identity = Peer::InProcess(User {
        name: CONTROLLER_USER.into(),
        groups: vec!["system:masters".into()],
    });
    let service = tower::service_fn(move |request: axum::http::Request<kube::client::Body>| {
        let mut request = request.map(axum::body::Body::new);
        request.extensions_mut().insert(identity.clone());
        app.clone().oneshot(request)
    });
    kube::Client::new(service, "default")
}
