//! The etcd backend against the conformance suite, on an etcd started for the test.

use futures::StreamExt;
use lariat_store::etcd::EtcdStore;
use lariat_store::etcd_process::EtcdProcess;
use lariat_store::{Error, ListOptions, Store, conformance};

fn etcd() -> EtcdProcess {
    EtcdProcess::start().unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passes_the_conformance_suite() {
    let etcd = etcd();
    let store = EtcdStore::connect(&etcd.endpoints(), "/lariat-test/")
        .await
        .unwrap();
    conformance::run_all(&store).await;
}

#[tokio::test]
async fn prefixes_keep_stores_apart() {
    let etcd = etcd();
    let one = EtcdStore::connect(&etcd.endpoints(), "/one/")
        .await
        .unwrap();
    let two = EtcdStore::connect(&etcd.endpoints(), "/one-two/")
        .await
        .unwrap();
    let created = one.create("x", b"1".to_vec()).await.unwrap();
    assert_eq!(two.get("x").await.unwrap(), None);
    assert!(
        two.list("", ListOptions::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    assert_eq!(two.count("").await.unwrap(), 0);
    two.create("x", b"2".to_vec()).await.unwrap();
    let listed = one.list("", ListOptions::default()).await.unwrap();
    assert_eq!(listed.items, vec![created]);
    // Revisions are etcd's, shared by both.
    assert_eq!(
        one.current_revision().await.unwrap(),
        two.current_revision().await.unwrap()
    );
}

/// An empty prefix (the whole etcd) and an empty list prefix make an empty range start, which
/// etcd refuses unless the store stands in a zero byte.
#[tokio::test]
async fn an_empty_prefix_covers_the_whole_etcd() {
    let etcd = etcd();
    let whole = EtcdStore::connect(&etcd.endpoints(), "").await.unwrap();
    let scoped = EtcdStore::connect(&etcd.endpoints(), "/scoped/")
        .await
        .unwrap();
    let start = whole.current_revision().await.unwrap();
    let mut watch = whole.watch("", start).await.unwrap();
    let created = scoped.create("x", Vec::new()).await.unwrap();
    let listed = whole.list("", ListOptions::default()).await.unwrap();
    assert_eq!(keys(&listed.items), vec!["/scoped/x"]);
    assert_eq!(whole.count("").await.unwrap(), 1);
    let event = watch.next().await.unwrap().unwrap();
    assert_eq!(
        (event.kv.key.as_str(), event.revision()),
        ("/scoped/x", created.mod_revision)
    );
}

fn keys(items: &[lariat_store::KeyValue]) -> Vec<&str> {
    items.iter().map(|kv| kv.key.as_str()).collect()
}

#[tokio::test]
async fn an_unreachable_etcd_is_unavailable() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    match EtcdStore::connect(&[format!("127.0.0.1:{port}")], "/").await {
        Err(Error::Unavailable(_)) => {}
        Err(e) => panic!("expected Unavailable, got {e}"),
        Ok(_) => panic!("nothing listens on port {port}"),
    }
}

#[tokio::test]
async fn a_stopped_etcd_is_unavailable() {
    let etcd = etcd();
    let store = EtcdStore::connect(&etcd.endpoints(), "/").await.unwrap();
    let mut watch = store.watch("", 0).await.unwrap();
    drop(etcd);
    match store.get("x").await {
        Err(Error::Unavailable(_)) => {}
        other => panic!("expected Unavailable, got {other:?}"),
    }
    match tokio::time::timeout(std::time::Duration::from_secs(30), watch.next()).await {
        Ok(Some(Err(Error::Unavailable(_)))) => {}
        other => panic!("expected the watch to fail with Unavailable, got {other:?}"),
    }
}
