//! A real server in process, on a memory store, and requests sent through its router as the
//! cluster's admin (no socket): what the property tests drive.
#![allow(dead_code)]

use std::sync::Arc;

use axum::body::Body;
use lariat_apiserver::identity::{Peer, User};
use serde_json::json;
use tower::ServiceExt;

pub struct Fixture {
    pub runtime: tokio::runtime::Runtime,
    pub server: lariat_apiserver::Server,
    pub store: Arc<dyn lariat_store::Store>,
    _dir: tempfile::TempDir,
}

impl Fixture {
    pub fn new() -> Fixture {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn lariat_store::Store> =
            Arc::new(lariat_store::memory::MemoryStore::new());
        let server = runtime.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let mut config = lariat_apiserver::Config::new(dir.path());
            // Cluster API's write rules too, so the property tests reach them.
            config.strategies = lariat_api::capi::admission::strategies();
            config.kinds = lariat_api::builtin_crds();
            lariat_apiserver::Server::start(config, store.clone(), listener)
                .await
                .unwrap()
        });
        let fixture = Fixture {
            runtime,
            server,
            store,
            _dir: dir,
        };
        // Something to patch, update and delete.
        for (path, body) in [
            (
                "/api/v1/namespaces/default/configmaps",
                json!({"metadata": {"name": "c", "labels": {"app": "web"}}, "data": {"a": "b"}}),
            ),
            (
                "/api/v1/namespaces/default/secrets",
                json!({"metadata": {"name": "s"}, "stringData": {"a": "b"}}),
            ),
        ] {
            let (code, _) = fixture.send("POST", path, "application/json", body.to_string());
            assert_eq!(code, 201);
        }
        fixture
    }

    pub fn send(&self, method: &str, uri: &str, content_type: &str, body: String) -> (u16, String) {
        self.runtime.block_on(async {
            let mut request = axum::http::Request::builder()
                .method(method)
                .uri(uri)
                .header("content-type", content_type)
                .body(Body::from(body))
                .unwrap();
            request.extensions_mut().insert(Peer::InProcess(User {
                name: "fuzzer".into(),
                groups: vec!["system:masters".into()],
            }));
            let response = self.server.router().oneshot(request).await.unwrap();
            let code = response.status().as_u16();
            let bytes = http_body_util::BodyExt::collect(response.into_body())
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            (code, String::from_utf8_lossy(&bytes).into_owned())
        })
    }

    pub fn revision(&self) -> i64 {
        self.runtime
            .block_on(self.store.current_revision())
            .unwrap()
    }
}
