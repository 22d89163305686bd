//! The shared caches against a real lariat API (in-process for the management plane, served
//! over HTTPS for a workload cluster): what they hold, how they relate objects, what they wake.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kube::{Client, ResourceExt};
use lariat_controllers::cache::{Caches, IndexKey};
use serde_json::json;

mod common;

use common::server;

const NS: &str = "default";

fn config_maps() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&())
}

async fn create(
    client: &Client,
    resource: &ApiResource,
    object: serde_json::Value,
) -> DynamicObject {
    Api::<DynamicObject>::namespaced_with(client.clone(), NS, resource)
        .create(
            &PostParams::default(),
            &serde_json::from_value(object).unwrap(),
        )
        .await
        .unwrap()
}

fn names<K: kube::Resource>(objects: &[Arc<K>]) -> Vec<String> {
    objects.iter().map(|o| o.name_any()).collect()
}

/// Polls the cache (it follows a watch) until `check` holds, for at most 10 s.
async fn until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn indexes_relate_objects_and_follow_their_changes() {
    let (client, _, _dir) = server(false).await;
    let owner = create(
        &client,
        &config_maps(),
        json!({"metadata": {"name": "owner"}}),
    )
    .await;
    let owner_uid = owner.uid().unwrap();
    create(
        &client,
        &config_maps(),
        json!({"metadata": {"name": "a-1", "labels": {"cluster.x-k8s.io/cluster-name": "a"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner_uid}]}}),
    )
    .await;
    create(
        &client,
        &config_maps(),
        json!({"metadata": {"name": "b-1", "labels": {"cluster.x-k8s.io/cluster-name": "b"}}}),
    )
    .await;
    let caches = Caches::new(client.clone());
    let cache = caches.of(&config_maps());
    let in_a = IndexKey::Cluster {
        namespace: NS,
        name: "a",
    };
    assert_eq!(names(&cache.indexed(in_a).await.unwrap()), ["a-1"]);
    assert_eq!(
        names(&cache.indexed(IndexKey::Owner(&owner_uid)).await.unwrap()),
        ["a-1"]
    );

    // A relabelled object moves to its new cluster; a deleted one leaves every index.
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), NS, &config_maps());
    api.patch(
        "b-1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"cluster.x-k8s.io/cluster-name": "a"}}})),
    )
    .await
    .unwrap();
    until("b-1 joins cluster a", || cache.indexed_now(in_a).len() == 2).await;
    assert!(
        cache
            .indexed_now(IndexKey::Cluster {
                namespace: NS,
                name: "b"
            })
            .is_empty()
    );
    api.delete("a-1", &DeleteParams::default()).await.unwrap();
    until("a-1 is gone", || names(&cache.indexed_now(in_a)) == ["b-1"]).await;
    assert!(cache.indexed_now(IndexKey::Owner(&owner_uid)).is_empty());
    assert!(cache.get(NS, "a-1").await.unwrap().is_none());
}

#[tokio::test]
async fn a_subscriber_gets_every_object_then_each_change_and_sees_its_own_creations() {
    let (client, _, _dir) = server(false).await;
    create(
        &client,
        &config_maps(),
        json!({"metadata": {"name": "before"}}),
    )
    .await;
    let caches = Caches::new(client.clone());
    let cache = caches.of(&config_maps());
    cache.synced().await.unwrap();
    let mut changes = Box::pin(cache.changes());
    let first = tokio::time::timeout(Duration::from_secs(10), changes.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.name_any(), "before", "the objects present come first");

    // What a reconcile just created is in the cache once `observed` returns, so the next
    // reconcile counts it (a MachineSet would otherwise create its Machines twice).
    create(
        &client,
        &config_maps(),
        json!({"metadata": {"name": "after"}}),
    )
    .await;
    cache
        .observed(NS, &["after".to_string()], &[])
        .await
        .unwrap();
    assert!(cache.get_now(NS, "after").is_some());
    let next = tokio::time::timeout(Duration::from_secs(10), changes.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(next.name_any(), "after");
}

/// A subscriber that reads one field of an object is woken by changes of that field, by new
/// objects and by deletions, and by nothing else: the changes it skips are proven to have
/// happened by a later change it does get.
#[tokio::test]
async fn a_subscriber_of_what_it_reads_skips_the_other_changes() {
    use std::hash::Hash;
    let (client, _, _dir) = server(false).await;
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), NS, &config_maps());
    create(
        &client,
        &config_maps(),
        json!({"metadata": {"name": "watched"}, "data": {"read": "1", "other": "1"}}),
    )
    .await;
    let caches = Caches::new(client.clone());
    let cache = caches.of(&config_maps());
    cache.synced().await.unwrap();
    let mut changes = Box::pin(cache.changes_in(|object: &DynamicObject, hash| {
        object.data["data"]["read"].as_str().hash(hash);
    }));
    let mut next = async || {
        let object = tokio::time::timeout(Duration::from_secs(10), changes.next())
            .await
            .expect("a change within 10 s")
            .unwrap();
        (
            object.name_any(),
            object.data["data"]["read"].as_str().map(String::from),
            object.data["data"]["other"].as_str().map(String::from),
        )
    };
    assert_eq!(
        next().await,
        ("watched".into(), Some("1".into()), Some("1".into()))
    );
    let merge = |data: serde_json::Value| Patch::Merge(json!({ "data": data }));
    for other in ["2", "3"] {
        api.patch(
            "watched",
            &PatchParams::default(),
            &merge(json!({"other": other})),
        )
        .await
        .unwrap();
    }
    api.patch(
        "watched",
        &PatchParams::default(),
        &merge(json!({"read": "2"})),
    )
    .await
    .unwrap();
    assert_eq!(
        next().await,
        ("watched".into(), Some("2".into()), Some("3".into())),
        "the two changes of another field were skipped"
    );
    create(
        &client,
        &config_maps(),
        json!({"metadata": {"name": "new"}, "data": {"read": "1"}}),
    )
    .await;
    assert_eq!(next().await.0, "new", "a new object is a change");
    api.delete("watched", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(next().await.0, "watched", "a deletion is a change");
}

/// A subscriber of what it reads that falls behind (more changes than its buffer holds) is
/// handed every object again, the objects deleted meanwhile, and the one a same-named object
/// replaced: a controller woken by them would otherwise never learn they are gone.
#[tokio::test]
async fn a_subscriber_that_falls_behind_still_hears_of_what_was_deleted() {
    let (client, _, _dir) = server(false).await;
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), NS, &config_maps());
    for name in ["doomed", "replaced", "busy", "still"] {
        create(
            &client,
            &config_maps(),
            json!({"metadata": {"name": name}, "data": {"n": "0"}}),
        )
        .await;
    }
    let caches = Caches::new(client.clone());
    let cache = caches.of(&config_maps());
    cache.synced().await.unwrap();
    // Hashes nothing but the uid: only appearances and disappearances are changes.
    let mut changes = Box::pin(cache.changes_in(|_: &DynamicObject, _| {}));
    let mut first = Vec::new();
    for _ in 0..4 {
        first.push(changes.next().await.unwrap());
    }
    let replaced_uid = first
        .iter()
        .find(|o| o.name_any() == "replaced")
        .and_then(|o| o.uid())
        .unwrap();
    api.delete("doomed", &DeleteParams::default())
        .await
        .unwrap();
    api.delete("replaced", &DeleteParams::default())
        .await
        .unwrap();
    create(
        &client,
        &config_maps(),
        json!({"metadata": {"name": "replaced"}, "data": {"n": "0"}}),
    )
    .await;
    // More changes than a subscriber's buffer (4,096) while this one is not listening.
    for n in 1..=4200 {
        api.patch(
            "busy",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"n": n.to_string()}})),
        )
        .await
        .unwrap();
    }
    until("the cache sees the last change", || {
        cache
            .get_now(NS, "busy")
            .is_some_and(|o| o.data["data"]["n"] == "4200")
    })
    .await;
    let mut heard = Vec::new();
    while let Ok(Some(object)) = tokio::time::timeout(Duration::from_secs(2), changes.next()).await
    {
        heard.push((object.name_any(), object.uid().unwrap()));
    }
    assert!(
        heard.iter().any(|(name, _)| name == "doomed"),
        "the deleted object: {heard:?}"
    );
    assert!(
        heard.contains(&("replaced".to_string(), replaced_uid.clone())),
        "the replaced object as it was: {heard:?}"
    );
    assert!(
        heard
            .iter()
            .any(|(name, uid)| name == "replaced" && *uid != replaced_uid),
        "its replacement: {heard:?}"
    );
    assert_eq!(
        heard.iter().filter(|(name, _)| name == "busy").count(),
        1,
        "handed on again once when the subscriber caught up (it may have missed a change it \
         reads), and its buffered changes of what is not read skipped: {heard:?}"
    );
    assert!(
        !heard.iter().any(|(name, _)| name == "still"),
        "what did not change while the subscriber fell behind is not handed on again: {heard:?}"
    );
}

#[tokio::test]
async fn a_kind_is_watched_from_its_first_reference_and_its_changes_reach_every_subscriber() {
    let (client, _, _dir) = server(false).await;
    let caches = Caches::new(client.clone());
    let mut every = Box::pin(caches.every_change());
    // Referenced by apiVersion and kind, as a Cluster names its infrastructure.
    let cache = caches
        .of_kind("networking.k8s.io/v1", "NetworkPolicy")
        .await
        .unwrap();
    let policies = ApiResource::erase::<k8s_openapi::api::networking::v1::NetworkPolicy>(&());
    create(
        &client,
        &policies,
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "infra"}, "spec": {"podSelector": {}}}),
    )
    .await;
    let seen = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let object = every.next().await.unwrap();
            if object.name_any() == "infra" {
                return object;
            }
        }
    })
    .await
    .expect("the new kind's change reaches every_change");
    assert_eq!(seen.types.as_ref().unwrap().kind, "NetworkPolicy");
    assert!(cache.get(NS, "infra").await.unwrap().is_some());
    assert!(matches!(
        caches.of_kind("example.com/v1", "Nothing").await,
        Err(lariat_controllers::Error::UnknownKind { .. })
    ));
}

#[tokio::test]
async fn a_workload_clusters_nodes_are_watched_through_its_kubeconfig_secret() {
    let (management, _, _dir) = server(false).await;
    let (workload, kubeconfig, _workload_dir) = server(true).await;
    let caches = Caches::new(management.clone());
    assert!(
        caches.nodes(NS, "work").await.unwrap().is_none(),
        "no Cluster, no cache"
    );
    for name in ["work", "stray"] {
        create(
            &management,
            &lariat_controllers::capi("Cluster"),
            json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
                "metadata": {"name": name}, "spec": {}}),
        )
        .await;
    }
    assert!(
        caches.nodes(NS, "work").await.unwrap().is_none(),
        "no kubeconfig Secret, no cache"
    );
    use base64::Engine;
    create(
        &management,
        &ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&()),
        json!({"metadata": {"name": "work-kubeconfig", "labels": {"cluster.x-k8s.io/cluster-name": "work"}},
            "data": {"value": base64::engine::general_purpose::STANDARD.encode(&kubeconfig)}}),
    )
    .await;
    // Without the cluster-name label a Secret is not Cluster API's: not cached, not used.
    create(
        &management,
        &ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&()),
        json!({"metadata": {"name": "stray-kubeconfig"},
            "data": {"value": base64::engine::general_purpose::STANDARD.encode(&kubeconfig)}}),
    )
    .await;
    until("the Secret cache holds the kubeconfig", || {
        caches.secrets().get_now(NS, "work-kubeconfig").is_some()
    })
    .await;
    caches.catch_up().await.unwrap();
    assert!(caches.secrets().get_now(NS, "stray-kubeconfig").is_none());
    assert!(caches.nodes(NS, "stray").await.unwrap().is_none());
    let mut woken = Box::pin(caches.node_changes());
    let nodes = caches
        .nodes(NS, "work")
        .await
        .unwrap()
        .expect("a Node cache");
    assert!(nodes.is_healthy(), "a reachable cluster is listed at once");

    let node: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "n1"}, "spec": {"providerID": "test:///n1"},
    }))
    .unwrap();
    Api::<DynamicObject>::all_with(
        workload.clone(),
        &ApiResource::erase::<k8s_openapi::api::core::v1::Node>(&()),
    )
    .create(&PostParams::default(), &node)
    .await
    .unwrap();
    let change = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let change = woken.next().await.unwrap();
            if change.provider_id.as_deref() == Some("test:///n1") {
                return change;
            }
        }
    })
    .await
    .expect("the new Node wakes whoever has its providerID");
    assert_eq!(
        (change.namespace.as_str(), change.cluster.as_str()),
        (NS, "work")
    );
    assert_eq!(
        names(&nodes.indexed_now(IndexKey::ProviderId("test:///n1"))),
        ["n1"]
    );
    // The same Secret, the same cache; no Secret, no cache.
    assert!(Arc::ptr_eq(
        &nodes,
        &caches.nodes(NS, "work").await.unwrap().unwrap()
    ));
    caches.forget_workload(NS, "work");
    assert!(!Arc::ptr_eq(
        &nodes,
        &caches.nodes(NS, "work").await.unwrap().unwrap()
    ));
}

#[tokio::test]
async fn a_typed_cache_sets_aside_an_object_its_struct_cannot_hold_and_names_it() {
    use lariat_api::capi::MachineHealthCheck;
    let (client, _, _dir) = server(false).await;
    // The schema leaves an unhealthy condition's status a free string (as upstream's does);
    // the struct knows True, False and Unknown, and reading "Maybe" as one of them would
    // judge Nodes by a rule nobody wrote.
    let check = |name: &str, status: &str| {
        json!({"metadata": {"name": name, "labels": {"cluster.x-k8s.io/cluster-name": "a"}},
            "spec": {"clusterName": "a", "selector": {"matchLabels": {"pool": "w"}},
                "unhealthyConditions": [{"type": "Ready", "status": status, "timeout": "5m"}]}})
    };
    let resource = ApiResource::erase::<MachineHealthCheck>(&());
    create(&client, &resource, check("good", "False")).await;
    create(&client, &resource, check("odd", "Maybe")).await;

    let caches = Caches::new(client.clone());
    let cache = caches.typed::<MachineHealthCheck>();
    let good = cache
        .get(NS, "good")
        .await
        .unwrap()
        .expect("the readable one is held");
    assert_eq!(good.spec.cluster_name, "a");
    let error = cache
        .get(NS, "odd")
        .await
        .expect_err("not read as absent")
        .to_string();
    assert!(error.contains("odd") && error.contains("Maybe"), "{error}");
    let in_a = IndexKey::Cluster {
        namespace: NS,
        name: "a",
    };
    // A count without it would be wrong: the read fails.
    let error = cache
        .indexed(in_a)
        .await
        .expect_err("no partial count")
        .to_string();
    assert!(error.contains("odd"), "{error}");
    assert_eq!(names(&cache.indexed_now(in_a)), ["good"]);

    // Fixed, it is read again.
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), NS, &resource);
    api.patch(
        "odd",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"unhealthyConditions": [{"type": "Ready", "status": "Unknown", "timeout": "5m"}]}})),
    )
    .await
    .unwrap();
    until("the fixed check is readable", || {
        cache.get_now(NS, "odd").is_some()
    })
    .await;
    assert_eq!(names(&cache.indexed(in_a).await.unwrap()), ["good", "odd"]);
    caches.catch_up().await.unwrap();
}
