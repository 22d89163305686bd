//! Core Cluster API controllers against a generic test provider that implements only the
//! written contract (docs/contracts/): the test plays the infrastructure and bootstrap
//! providers, and a second lariat server plays the workload cluster whose Nodes core finds.

mod common;

use std::time::Duration;

use common::TestServer;
use futures::future::join_all;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

const GROUP: &str = "test.lariat.dev";

fn crd(kind: &str) -> String {
    let plural = format!("{}s", kind.to_lowercase());
    format!(
        "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: {plural}.{GROUP}
  labels:
    cluster.x-k8s.io/v1beta1: v1alpha1
spec:
  group: {GROUP}
  scope: Namespaced
  names: {{plural: {plural}, kind: {kind}}}
  versions:
  - name: v1alpha1
    served: true
    storage: true
    subresources: {{status: {{}}}}
    schema:
      openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}
"
    )
}

fn resource(kind: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(GROUP, "v1alpha1", kind),
        &format!("{}s", kind.to_lowercase()),
    )
}

fn capi(kind: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta1", kind),
        &format!("{}s", kind.to_lowercase()),
    )
}

fn manifests(replicas: i64) -> String {
    format!(
        r#"apiVersion: cluster.x-k8s.io/v1beta1
kind: Cluster
metadata:
  name: work
spec:
  infrastructureRef: {{apiVersion: {GROUP}/v1alpha1, kind: TestCluster, name: work}}
---
apiVersion: {GROUP}/v1alpha1
kind: TestCluster
metadata:
  name: work
spec: {{}}
---
apiVersion: {GROUP}/v1alpha1
kind: TestMachineTemplate
metadata:
  name: work-md
spec:
  template:
    spec: {{size: small}}
---
apiVersion: {GROUP}/v1alpha1
kind: TestConfigTemplate
metadata:
  name: work-md
spec:
  template:
    spec: {{joinToken: abc}}
---
apiVersion: cluster.x-k8s.io/v1beta1
kind: MachineDeployment
metadata:
  name: work-md
spec:
  clusterName: work
  replicas: {replicas}
  selector:
    matchLabels: {{pool: md}}
  strategy:
    type: RollingUpdate
    rollingUpdate: {{maxSurge: 1, maxUnavailable: 0, deletePolicy: Oldest}}
  template:
    metadata:
      labels: {{pool: md}}
    spec:
      clusterName: work
      version: v1.30.0
      bootstrap:
        configRef: {{apiVersion: {GROUP}/v1alpha1, kind: TestConfigTemplate, name: work-md}}
      infrastructureRef: {{apiVersion: {GROUP}/v1alpha1, kind: TestMachineTemplate, name: work-md}}
"#
    )
}

/// The test provider: marks bootstrap configs ready, gives machines a providerID and makes
/// them ready, and registers a Ready Node for each in the workload cluster.
async fn provide(management: Client, workload: Client) {
    let configs: Api<DynamicObject> =
        Api::namespaced_with(management.clone(), "default", &resource("TestConfig"));
    let machines: Api<DynamicObject> =
        Api::namespaced_with(management.clone(), "default", &resource("TestMachine"));
    let nodes: Api<Node> = Api::all(workload);
    loop {
        for config in configs
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
        {
            if config.data["status"]["ready"] != json!(true) {
                let status = json!({"status": {"ready": true, "dataSecretName": format!("{}-bootstrap", config.name_any())}});
                let _ = configs
                    .patch_status(
                        &config.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(status),
                    )
                    .await;
            }
        }
        for machine in machines
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
        {
            if machine.data["status"]["ready"] == json!(true)
                || machine.metadata.deletion_timestamp.is_some()
            {
                continue;
            }
            let id = format!("test://{}", machine.name_any());
            let _ = machines
                .patch(
                    &machine.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"providerID": id}})),
                )
                .await;
            let node: Node = serde_json::from_value(json!({
                "metadata": {"name": machine.name_any()},
                "spec": {"providerID": id},
                "status": {"conditions": [{"type": "Ready", "status": "True"}], "nodeInfo": {
                    "kubeletVersion": "v1.30.0", "architecture": "amd64", "bootID": "", "containerRuntimeVersion": "", "kernelVersion": "",
                    "kubeProxyVersion": "", "machineID": "", "operatingSystem": "linux", "osImage": "", "systemUUID": ""}},
            }))
            .unwrap();
            let _ = nodes.create(&PostParams::default(), &node).await;
            let status = json!({"status": {"ready": true, "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}});
            let _ = machines
                .patch_status(
                    &machine.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(status),
                )
                .await;
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

async fn wait_for(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !check().await {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn machine_phases(client: &Client) -> Vec<(String, String)> {
    let machines: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &capi("Machine"));
    let mut list: Vec<(String, String)> = machines
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|m| {
            (
                m.name_any(),
                m.data["status"]["phase"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect();
    list.sort();
    list
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn core_controllers_follow_the_provider_contract() {
    let server = TestServer::start();
    let workload_server = TestServer::start();
    for kind in [
        "TestCluster",
        "TestMachine",
        "TestMachineTemplate",
        "TestConfig",
        "TestConfigTemplate",
    ] {
        server.apply_ok(&["apply", "-f", "-"], &crd(kind));
    }
    let client = server.client().await;
    let workload = workload_server.client().await;
    let kubeconfig =
        std::fs::read(workload_server.data_dir().join("kubeconfig-token.yaml")).unwrap();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "work-kubeconfig", "labels": {"cluster.x-k8s.io/cluster-name": "work"}},
        "data": {"value": k8s_openapi::ByteString(kubeconfig)},
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();

    server.apply_ok(&["apply", "-f", "-"], &manifests(3));
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &capi("Cluster"));
    wait_for("the cluster waits for its infrastructure", async || {
        let cluster = clusters.get("work").await.unwrap();
        cluster.data["status"]["phase"] == "Provisioning"
            && cluster
                .finalizers()
                .contains(&"cluster.cluster.x-k8s.io".to_string())
    })
    .await;
    let infra: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &resource("TestCluster"));
    let owners = infra.get("work").await.unwrap().owner_references().to_vec();
    assert_eq!(
        owners[0].kind, "Cluster",
        "core owns the infrastructure cluster"
    );
    infra
        .patch(
            "work",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"controlPlaneEndpoint": {"host": "10.0.0.10", "port": 6443}}}),
            ),
        )
        .await
        .unwrap();
    infra
        .patch_status(
            "work",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ready": true}})),
        )
        .await
        .unwrap();
    wait_for("the cluster is Provisioned", async || {
        clusters.get("work").await.unwrap().data["status"]["phase"] == "Provisioned"
    })
    .await;
    let cluster = clusters.get("work").await.unwrap();
    assert_eq!(
        cluster.data["spec"]["controlPlaneEndpoint"]["host"],
        "10.0.0.10"
    );
    let table = server.kubectl_ok(&["get", "clusters"]);
    assert!(table.contains("Provisioned"), "{table}");

    let provider = tokio::spawn(provide(client.clone(), workload.clone()));
    wait_for("3 machines are Running", async || {
        let phases = machine_phases(&client).await;
        phases.len() == 3 && phases.iter().all(|(_, p)| p == "Running")
    })
    .await;
    let machines: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &capi("Machine"));
    let machine = machines
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .remove(0);
    for label in [
        "cluster.x-k8s.io/cluster-name",
        "cluster.x-k8s.io/deployment-name",
        "cluster.x-k8s.io/set-name",
        "pool",
    ] {
        assert!(
            machine.labels().contains_key(label),
            "machines carry {label}"
        );
    }
    assert!(
        machine.data["spec"]["providerID"]
            .as_str()
            .unwrap()
            .starts_with("test://")
    );
    assert_eq!(machine.data["status"]["nodeRef"]["kind"], "Node");
    let test_machines: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &resource("TestMachine"));
    let infra_machine = test_machines.get(&machine.name_any()).await.unwrap();
    assert_eq!(
        infra_machine
            .annotations()
            .get("cluster.x-k8s.io/cloned-from-name")
            .map(String::as_str),
        Some("work-md")
    );
    assert!(
        infra_machine
            .owner_references()
            .iter()
            .any(|o| o.kind == "Machine" && o.controller == Some(true))
    );
    let printed = server.kubectl_ok(&["get", "machines"]);
    assert!(
        printed.lines().nth(1).unwrap().contains("work")
            && printed.contains("Running")
            && printed.contains("v1.30.0"),
        "{printed}"
    );

    // Scale 3 -> 5 through the scale subresource, as users do.
    server.kubectl_ok(&["scale", "machinedeployment", "work-md", "--replicas=5"]);
    wait_for("5 machines are Running", async || {
        let phases = machine_phases(&client).await;
        phases.len() == 5 && phases.iter().all(|(_, p)| p == "Running")
    })
    .await;

    // Upgrade: a new version rolls every machine over to a new MachineSet, one at a time.
    let before: Vec<String> = machine_phases(&client)
        .await
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    server.kubectl_ok(&[
        "patch",
        "machinedeployment",
        "work-md",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"template":{"spec":{"version":"v1.31.0"}}}}"#,
    ]);
    wait_for(
        "all machines are replaced by Running machines of the new version",
        async || {
            let list = machines.list(&ListParams::default()).await.unwrap().items;
            list.len() == 5
                && list.iter().all(|m| {
                    m.data["spec"]["version"] == "v1.31.0" && m.data["status"]["phase"] == "Running"
                })
                && list.iter().all(|m| !before.contains(&m.name_any()))
        },
    )
    .await;
    let sets: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &capi("MachineSet"));
    wait_for("the old MachineSet is removed", async || {
        sets.list(&ListParams::default()).await.unwrap().items.len() == 1
    })
    .await;

    // Deleting the cluster removes everything it is made of, in order.
    clusters.delete("work", &Default::default()).await.unwrap();
    wait_for("the cluster and all its parts are gone", async || {
        let gone = |kind: &'static str, r: ApiResource| {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &r);
            async move {
                (
                    kind,
                    api.list(&ListParams::default())
                        .await
                        .unwrap()
                        .items
                        .is_empty(),
                )
            }
        };
        let checks = join_all([
            gone("Cluster", capi("Cluster")),
            gone("MachineDeployment", capi("MachineDeployment")),
            gone("MachineSet", capi("MachineSet")),
            gone("Machine", capi("Machine")),
            gone("TestMachine", resource("TestMachine")),
            gone("TestConfig", resource("TestConfig")),
            gone("TestCluster", resource("TestCluster")),
        ])
        .await;
        checks.iter().all(|(_, empty)| *empty)
    })
    .await;
    provider.abort();
    let _: Value = json!(null);
}
