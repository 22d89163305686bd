//! The kube-rs client against a lariat server: typed CRUD, list and watch with resume, merge
//! patch and server-side apply, for core kinds and for lariat's Cluster API kinds.

mod common;

use std::collections::BTreeMap;

use common::TestServer;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use lariat_api::capi::Cluster;
use serde_json::json;

fn config_map(name: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("k".to_string(), value.to_string())])),
        ..Default::default()
    }
}

#[tokio::test]
async fn typed_crud_patch_and_apply() {
    let server = TestServer::start();
    let client = server.client().await;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");

    let created = maps
        .create(&PostParams::default(), &config_map("one", "a"))
        .await
        .unwrap();
    let rv = created.metadata.resource_version.clone().unwrap();
    let err = maps
        .create(&PostParams::default(), &config_map("one", "a"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists"),
        "{err:?}"
    );

    let mut changed = created.clone();
    changed.data = Some(BTreeMap::from([("k".to_string(), "b".to_string())]));
    let replaced = maps
        .replace("one", &PostParams::default(), &changed)
        .await
        .unwrap();
    assert_ne!(
        replaced.metadata.resource_version.as_deref(),
        Some(rv.as_str())
    );
    let stale = maps
        .replace("one", &PostParams::default(), &changed)
        .await
        .unwrap_err();
    assert!(
        matches!(&stale, kube::Error::Api(s) if s.code == 409 && s.reason == "Conflict"),
        "{stale:?}"
    );

    let patched = maps
        .patch(
            "one",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"m": "n"}})),
        )
        .await
        .unwrap();
    assert_eq!(
        patched.data.unwrap().get("m").map(String::as_str),
        Some("n")
    );

    let applied = maps
        .patch("two", &PatchParams::apply("lariat-test"), &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "two"}, "data": {"x": "1"}})))
        .await
        .unwrap();
    assert_eq!(
        applied.metadata.managed_fields.unwrap()[0]
            .manager
            .as_deref(),
        Some("lariat-test")
    );
    let conflict = maps
        .patch("two", &PatchParams::apply("other"), &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "two"}, "data": {"x": "2"}})))
        .await
        .unwrap_err();
    assert!(
        matches!(&conflict, kube::Error::Api(s) if s.code == 409),
        "{conflict:?}"
    );

    let listed = maps.list(&ListParams::default()).await.unwrap();
    let names: Vec<String> = listed
        .items
        .iter()
        .filter_map(|m| m.metadata.name.clone())
        .collect();
    assert_eq!(names, ["one", "two"]);
    let page = maps.list(&ListParams::default().limit(1)).await.unwrap();
    assert_eq!(page.items.len(), 1);
    let next = maps
        .list(
            &ListParams::default()
                .limit(1)
                .continue_token(page.metadata.continue_.as_deref().unwrap()),
        )
        .await
        .unwrap();
    assert_eq!(next.items[0].metadata.name.as_deref(), Some("two"));
    assert!(next.metadata.continue_.is_none());

    maps.delete("one", &DeleteParams::default()).await.unwrap();
    assert!(maps.get_opt("one").await.unwrap().is_none());

    // lariat's own kinds through their Rust types.
    let clusters: Api<Cluster> = Api::namespaced(client, "default");
    let seed: Cluster = serde_yaml_ng::from_str(common::SEED_CLUSTER).unwrap();
    let cluster = clusters
        .create(&PostParams::default(), &seed)
        .await
        .unwrap();
    assert_eq!(
        cluster
            .spec
            .cluster_network
            .unwrap()
            .pods
            .unwrap()
            .cidr_blocks,
        vec!["192.168.0.0/16".to_string()]
    );
}

#[tokio::test]
async fn watch_resumes_from_a_resource_version_without_gaps() {
    let server = TestServer::start();
    let client = server.client().await;
    let maps: Api<ConfigMap> = Api::namespaced(client, "default");
    let first = maps
        .create(&PostParams::default(), &config_map("w0", "0"))
        .await
        .unwrap();
    let start = first.metadata.resource_version.unwrap();
    for i in 1..=5 {
        maps.create(&PostParams::default(), &config_map(&format!("w{i}"), "x"))
            .await
            .unwrap();
    }
    maps.delete("w1", &DeleteParams::default()).await.unwrap();

    // Resuming after the first create replays every later change, in order, exactly once.
    let mut stream = maps
        .watch(&WatchParams::default().timeout(3), &start)
        .await
        .unwrap()
        .boxed();
    let mut seen = vec![];
    while let Some(event) = stream.try_next().await.unwrap() {
        match event {
            WatchEvent::Added(cm) => seen.push(format!("ADDED {}", cm.metadata.name.unwrap())),
            WatchEvent::Deleted(cm) => seen.push(format!("DELETED {}", cm.metadata.name.unwrap())),
            WatchEvent::Modified(cm) => {
                seen.push(format!("MODIFIED {}", cm.metadata.name.unwrap()))
            }
            WatchEvent::Bookmark(_) => {}
            WatchEvent::Error(e) => panic!("watch error: {e:?}"),
        }
        if seen.len() == 6 {
            break;
        }
    }
    assert_eq!(
        seen,
        [
            "ADDED w1",
            "ADDED w2",
            "ADDED w3",
            "ADDED w4",
            "ADDED w5",
            "DELETED w1"
        ]
    );

    // kube-runtime's watcher (list, then watch) sees a change made after its list: from the
    // watch, since it is made only once the list is complete.
    use kube::runtime::watcher::Event;
    let mut events = Box::pin(kube::runtime::watcher(
        maps.clone(),
        kube::runtime::watcher::Config::default(),
    ));
    let mut next = async || {
        tokio::time::timeout(std::time::Duration::from_secs(10), events.try_next())
            .await
            .expect("a watcher event within 10 s")
            .unwrap()
            .unwrap()
    };
    let mut listed = vec![];
    loop {
        match next().await {
            Event::InitApply(cm) => listed.push(cm.metadata.name.unwrap()),
            Event::InitDone => break,
            _ => {}
        }
    }
    assert!(listed.contains(&"w5".to_string()), "{listed:?}");
    maps.create(&PostParams::default(), &config_map("late", "x"))
        .await
        .unwrap();
    match next().await {
        Event::Apply(cm) => assert_eq!(cm.metadata.name.as_deref(), Some("late")),
        other => panic!("the watch's next event is the later creation: {other:?}"),
    }
}

#[tokio::test]
async fn metadata_only_lists_and_watches() {
    let server = TestServer::start();
    let client = server.client().await;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    maps.create(&PostParams::default(), &config_map("meta", "x"))
        .await
        .unwrap();
    let listed = maps.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1);
    assert_eq!(listed.items[0].metadata.name.as_deref(), Some("meta"));
    let mut events = maps
        .watch_metadata(&WatchParams::default().timeout(2), "0")
        .await
        .unwrap()
        .boxed();
    match events.try_next().await.unwrap() {
        Some(WatchEvent::Added(object)) => {
            assert_eq!(object.metadata.name.as_deref(), Some("meta"))
        }
        other => panic!("expected the object as metadata, got {other:?}"),
    }
}
