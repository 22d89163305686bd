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
        data: Some([("a".to_string(), "b".to_string())].into()),
        ..Default::default()
    };
    maps.create(&PostParams::default(), &cm).await.unwrap();
    let read = maps.get("local").await.unwrap();
    assert!(read.metadata.uid.is_some());
    // Its fields are tracked as any client's are: one manager, named after its user agent,
    // owning what it wrote.
    let managed = read.metadata.managed_fields.unwrap_or_default();
    assert_eq!(managed.len(), 1, "{managed:?}");
    let entry = &managed[0];
    assert!(
        entry.manager.as_deref().is_some_and(|m| !m.is_empty()),
        "{entry:?}"
    );
    assert_eq!(entry.operation.as_deref(), Some("Update"), "{entry:?}");
    let fields = serde_json::to_string(&entry.fields_v1).unwrap();
    assert!(fields.contains("f:a"), "{fields}");
    let err = maps.get("missing").await.unwrap_err();
    assert!(matches!(err, kube::Error::Api(s) if s.code == 404));
}

/// A watch of a quiet namespace is told how far the store has gone: its bookmarks carry the
/// revision of changes elsewhere, so the client resumes from a revision that compaction keeps
/// (an idle agent's every renewal was a 410 and a new list without it).
#[tokio::test]
async fn bookmarks_of_a_quiet_watch_carry_the_stores_progress() {
    use futures::StreamExt;
    use kube::api::{WatchEvent, WatchParams};

    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(lariat_store::sqlite::SqliteStore::open(&dir.path().join("db")).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut config = lariat_apiserver::Config::new(dir.path());
    config.bookmark_interval = std::time::Duration::from_millis(200);
    let server = lariat_apiserver::Server::start(config, store, listener)
        .await
        .unwrap();
    let quiet: Api<ConfigMap> = Api::namespaced(server.local_client(), "kube-public");
    let busy: Api<ConfigMap> = Api::namespaced(server.local_client(), "default");
    let start = quiet
        .list(&Default::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut events = quiet
        .watch(&WatchParams::default().timeout(30), &start)
        .await
        .unwrap()
        .boxed();
    let mut written = 0i64;
    for i in 0..5 {
        let cm = ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(format!("elsewhere-{i}")),
                ..Default::default()
            },
            ..Default::default()
        };
        let created = busy.create(&PostParams::default(), &cm).await.unwrap();
        written = created.metadata.resource_version.unwrap().parse().unwrap();
    }
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let event = tokio::time::timeout_at(deadline, events.next())
            .await
            .expect("a bookmark past the writes elsewhere within 20 s")
            .expect("the watch runs")
            .unwrap();
        match event {
            WatchEvent::Bookmark(bookmark) => {
                let at: i64 = bookmark.metadata.resource_version.parse().unwrap();
                if at >= written {
                    break;
                }
            }
            other => panic!("nothing changed in the watched namespace: {other:?}"),
        }
    }
}
