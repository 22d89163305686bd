//! The in-process client reaches the same API as HTTPS clients, with no socket.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};

#[tokio::test]
async fn in_process_client_creates_and_reads() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(lariat_store::sqlite::SqliteStore::open(&dir.path().join("db")).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server =
        lariat_apiserver::Server::start(lariat_apiserver::Config::new(dir.path()), store, listener)
            .await
            .unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(server.local_client(), "default");
    let cm = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some("local".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    maps.create(&PostParams::default(), &cm).await.unwrap();
    let read = maps.get("local").await.unwrap();
    let managers: Vec<_> = read
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert!(read.metadata.uid.is_some());
    assert!(managers.is_empty() || !managers[0].is_empty());
    let err = maps.get("missing").await.unwrap_err();
    assert!(matches!(err, kube::Error::Api(s) if s.code == 404));
}
