//! Data-driven controller scenarios, one file per kind under `tests/scenarios/`: objects as
//! given, the reconciler of one object run a few times, and what must then be true. They run
//! against lariat's API in-process (an in-memory store, no listener serving, no other
//! controller), so each reconciler is seen alone, as its own decisions leave the objects.
//!
//! A scenario:
//!
//! ```yaml
//! - name: what it shows
//!   given: [objects]            # ownerReferences may omit uid: filled in from given objects
//!   reconcile: {kind: MachineSet, name: workers}
//!   times: 2                    # reconciles in a row (default 1)
//!   expect:
//!   - {kind: Machine, count: 3}                    # how many objects of a kind exist
//!   - {kind: Machine, name: m-0, match: {...}}     # one object contains this (subset match)
//!   - {kind: Machine, each: {...}}                 # every object of the kind contains this
//!   - {kind: Machine, some: {...}}                 # at least one object contains this
//!   - {kind: Machine, name: m-1, absent: true}     # deleted (or being deleted)
//! ```
//!
//! In a subset match an object must have every field given, and a list must hold, for each
//! element given, some element matching it.
//!
//! Each given Cluster gets a workload cluster: a second lariat API, served over HTTPS, with no
//! Nodes, reached through the `<cluster>-kubeconfig` Secret as a provider would write it.

use std::sync::Arc;

use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use lariat_controllers::{Context, Error};
use serde::Deserialize;

mod common;

use common::server;
use serde_json::{Value, json};

#[derive(Deserialize)]
struct Scenario {
    name: String,
    #[serde(default)]
    given: Vec<Value>,
    reconcile: Target,
    #[serde(default = "one")]
    times: usize,
    expect: Vec<Expectation>,
}

fn one() -> usize {
    1
}

#[derive(Deserialize)]
struct Target {
    kind: String,
    name: String,
}

#[derive(Deserialize)]
struct Expectation {
    #[serde(rename = "apiVersion")]
    api_version: Option<String>,
    kind: String,
    name: Option<String>,
    count: Option<usize>,
    #[serde(rename = "match")]
    matches: Option<Value>,
    each: Option<Value>,
    some: Option<Value>,
    #[serde(default)]
    absent: bool,
}

const NS: &str = "default";

async fn resource(client: &Client, api_version: &str, kind: &str) -> ApiResource {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    kube::discovery::pinned_kind(client, &GroupVersionKind::gvk(group, version, kind))
        .await
        .unwrap_or_else(|e| panic!("{kind}.{api_version} is not served: {e}"))
        .0
}

fn api(client: &Client, resource: &ApiResource, cluster_scoped: bool) -> Api<DynamicObject> {
    if cluster_scoped {
        Api::all_with(client.clone(), resource)
    } else {
        Api::namespaced_with(client.clone(), NS, resource)
    }
}

/// Writes `<cluster>-kubeconfig` for every given Cluster, reaching `kubeconfig`.
async fn connect_workload_clusters(client: &Client, given: &[Value], kubeconfig: &str) {
    use base64::Engine;
    let secrets: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NS,
        &ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&()),
    );
    for cluster in given.iter().filter(|o| o["kind"] == "Cluster") {
        let name = cluster["metadata"]["name"].as_str().unwrap();
        let secret = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": format!("{name}-kubeconfig"), "labels": {"cluster.x-k8s.io/cluster-name": name}},
            "data": {"value": base64::engine::general_purpose::STANDARD.encode(kubeconfig)},
        });
        secrets
            .create(
                &PostParams::default(),
                &serde_json::from_value(secret).unwrap(),
            )
            .await
            .unwrap();
    }
}

/// Creates the given objects in order, then writes their `status` (which a create ignores).
async fn create_given(client: &Client, given: &[Value]) {
    let mut uids: Vec<(String, String, String)> = vec![];
    for object in given {
        let mut object = object.clone();
        let api_version = object["apiVersion"].as_str().unwrap().to_string();
        let kind = object["kind"].as_str().unwrap().to_string();
        let cluster_scoped = kind == "CustomResourceDefinition";
        for owner in object["metadata"]["ownerReferences"]
            .as_array_mut()
            .into_iter()
            .flatten()
        {
            if owner["uid"].is_null() {
                let (_, _, uid) = uids
                    .iter()
                    .find(|(k, n, _)| owner["kind"] == k.as_str() && owner["name"] == n.as_str())
                    .unwrap_or_else(|| panic!("owner {owner} is not among the given objects"));
                owner["uid"] = json!(uid);
            }
        }
        let resource = resource(client, &api_version, &kind).await;
        let api = api(client, &resource, cluster_scoped);
        let status = object.get("status").cloned();
        let created = api
            .create(
                &PostParams::default(),
                &serde_json::from_value(object).unwrap(),
            )
            .await
            .unwrap_or_else(|e| panic!("create {kind}: {e}"));
        if let Some(status) = status {
            api.patch_status(
                &created.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await
            .unwrap_or_else(|e| panic!("status of {kind} {}: {e}", created.name_any()));
        }
        uids.push((kind, created.name_any(), created.uid().unwrap()));
    }
}

/// Reconciles the object of `kind` named `name`, read from the API as its typed struct.
async fn reconcile(kind: &str, name: &str, ctx: Arc<Context>) -> Result<(), Error> {
    use lariat_controllers::*;
    async fn get<K>(ctx: &Context, name: &str) -> Arc<K>
    where
        K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let api: Api<K> = Api::namespaced(ctx.client.clone(), NS);
        Arc::new(api.get(name).await.unwrap())
    }
    match kind {
        "Cluster" => cluster::reconcile(get(&ctx, name).await, ctx)
            .await
            .map(drop),
        "MachineDeployment" => machine_deployment::reconcile(get(&ctx, name).await, ctx)
            .await
            .map(drop),
        "MachineSet" => machine_set::reconcile(get(&ctx, name).await, ctx)
            .await
            .map(drop),
        "Machine" => machine::reconcile(get(&ctx, name).await, ctx)
            .await
            .map(drop),
        "MachineHealthCheck" => machine_health_check::reconcile(get(&ctx, name).await, ctx)
            .await
            .map(drop),
        "MachinePool" => machine_pool::reconcile(get(&ctx, name).await, ctx)
            .await
            .map(drop),
        other => panic!("no reconciler for {other}"),
    }
}

/// Whether `actual` contains `expected` (see the module comment).
fn contains(actual: &Value, expected: &Value) -> bool {
    match (actual, expected) {
        (Value::Object(a), Value::Object(e)) => e.iter().all(|(k, v)| {
            a.get(k).is_some_and(|av| contains(av, v)) || (v.is_null() && !a.contains_key(k))
        }),
        (Value::Array(a), Value::Array(e)) => {
            e.iter().all(|ev| a.iter().any(|av| contains(av, ev)))
        }
        (a, e) => a == e,
    }
}

async fn check(client: &Client, scenario: &str, expectation: &Expectation) {
    let api_version = expectation
        .api_version
        .clone()
        .unwrap_or_else(|| "cluster.x-k8s.io/v1beta1".into());
    let resource = resource(client, &api_version, &expectation.kind).await;
    let api = api(client, &resource, false);
    let live: Vec<DynamicObject> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|o| o.metadata.deletion_timestamp.is_none())
        .collect();
    let kind = &expectation.kind;
    if let Some(count) = expectation.count {
        assert_eq!(live.len(), count, "{scenario}: number of {kind}s");
    }
    if let Some(each) = &expectation.each {
        assert!(!live.is_empty(), "{scenario}: no {kind} to check");
        for object in &live {
            let value = serde_json::to_value(object).unwrap();
            assert!(
                contains(&value, each),
                "{scenario}: {kind} {} lacks {each}:\n{value:#}",
                object.name_any()
            );
        }
    }
    if let Some(some) = &expectation.some {
        let values: Vec<Value> = live
            .iter()
            .map(|o| serde_json::to_value(o).unwrap())
            .collect();
        assert!(
            values.iter().any(|v| contains(v, some)),
            "{scenario}: no {kind} contains {some}:\n{values:#?}"
        );
    }
    if let Some(name) = &expectation.name {
        let found = live.iter().find(|o| o.name_any() == *name);
        if expectation.absent {
            assert!(found.is_none(), "{scenario}: {kind} {name} still exists");
            return;
        }
        let object = found.unwrap_or_else(|| panic!("{scenario}: no {kind} {name}"));
        let value = serde_json::to_value(object).unwrap();
        if let Some(expected) = &expectation.matches {
            assert!(
                contains(&value, expected),
                "{scenario}: {kind} {name} lacks {expected}:\n{value:#}"
            );
        }
    }
}

async fn run(file: &str) {
    let path = format!("{}/tests/scenarios/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    let scenarios: Vec<Scenario> =
        serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert!(!scenarios.is_empty(), "{path} holds no scenario");
    for scenario in scenarios {
        let (client, _, _dir) = server(false).await;
        let (_, kubeconfig, _workload_dir) = server(true).await;
        create_given(&client, &scenario.given).await;
        connect_workload_clusters(&client, &scenario.given, &kubeconfig).await;
        let ctx = Arc::new(Context::new(client.clone()));
        let kind = &scenario.reconcile.kind;
        for _ in 0..scenario.times {
            // A reconcile reads from the caches: let them hold the last one's writes first.
            ctx.caches.catch_up().await.unwrap();
            reconcile(kind, &scenario.reconcile.name, ctx.clone())
                .await
                .unwrap_or_else(|e| panic!("{}: reconcile failed: {e}", scenario.name));
        }
        for expectation in &scenario.expect {
            check(&client, &scenario.name, expectation).await;
        }
    }
}

#[tokio::test]
async fn cluster() {
    run("cluster.yaml").await;
}

#[tokio::test]
async fn machine_deployment() {
    run("machine_deployment.yaml").await;
}

#[tokio::test]
async fn machine_set() {
    run("machine_set.yaml").await;
}

#[tokio::test]
async fn machine() {
    run("machine.yaml").await;
}

#[tokio::test]
async fn machine_pool() {
    run("machine_pool.yaml").await;
}

#[tokio::test]
async fn machine_health_check() {
    run("machine_health_check.yaml").await;
}

#[test]
fn subset_matching() {
    let actual =
        json!({"a": 1, "list": [{"type": "Ready", "status": "True", "t": 1}, {"type": "X"}]});
    assert!(contains(
        &actual,
        &json!({"list": [{"type": "Ready", "status": "True"}]})
    ));
    assert!(!contains(
        &actual,
        &json!({"list": [{"type": "Ready", "status": "False"}]})
    ));
    assert!(contains(&actual, &json!({"missing": null})));
    assert!(!contains(&actual, &json!({"a": 2})));
}
