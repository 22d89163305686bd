//! What the controller tests share: a lariat API to run against.

use std::sync::Arc;

use kube::Client;

/// A lariat API on an in-memory store: its in-process client, its kubeconfig and its data
/// dir. With `serve` it also serves HTTPS on loopback (a workload cluster to reach through a
/// kubeconfig); without, only the in-process client reaches it and no background loop runs.
pub async fn server(serve: bool) -> (Client, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(lariat_store::memory::MemoryStore::new());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut config = lariat_apiserver::Config::new(dir.path());
    config.strategies = lariat_api::capi::admission::strategies();
    config.kinds = lariat_api::builtin_crds();
    let server = lariat_apiserver::Server::start(config, store, listener)
        .await
        .unwrap();
    let client = server.local_client();
    if serve {
        tokio::spawn(server.serve(std::future::pending()));
    }
    let kubeconfig = std::fs::read_to_string(dir.path().join("kubeconfig.yaml")).unwrap();
    (client, kubeconfig, dir)
}
