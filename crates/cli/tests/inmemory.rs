//! The in-memory provider end to end: a cluster whose machines boot into Nodes of a simulated
//! workload cluster that plain kubectl reaches through `<cluster>-kubeconfig`, with failure
//! injection.

mod common;

use common::{TestServer, eventually};
use serde_json::Value;

fn manifests(behavior: &str) -> String {
    format!(
        r#"apiVersion: cluster.x-k8s.io/v1beta1
kind: Cluster
metadata:
  name: sim
spec:
  clusterNetwork:
    pods: {{cidrBlocks: ["192.168.0.0/16"]}}
  infrastructureRef: {{apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1, kind: InMemoryCluster, name: sim}}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: InMemoryCluster
metadata:
  name: sim
spec: {{}}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: InMemoryMachineTemplate
metadata:
  name: sim-workers
spec:
  template:
    spec:
      behavior: {behavior}
---
apiVersion: cluster.x-k8s.io/v1beta1
kind: MachineDeployment
metadata:
  name: sim-workers
spec:
  clusterName: sim
  replicas: 2
  selector:
    matchLabels: {{pool: workers}}
  template:
    metadata:
      labels: {{pool: workers}}
    spec:
      clusterName: sim
      version: v1.30.2
      bootstrap: {{dataSecretName: sim-bootstrap}}
      infrastructureRef: {{apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1, kind: InMemoryMachineTemplate, name: sim-workers}}
"#
    )
}

fn machines(server: &TestServer) -> Vec<Value> {
    let out = server.kubectl_ok(&["get", "machines", "-o", "json"]);
    serde_json::from_str::<Value>(&out).unwrap()["items"]
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn machines_boot_into_nodes_of_a_simulated_cluster() {
    let server = TestServer::start();
    server.apply_ok(
        &["apply", "-f", "-"],
        &manifests(r#"{provisioningDelay: "1s"}"#),
    );
    eventually("the cluster is Provisioned", || {
        server.kubectl_ok(&["get", "cluster", "sim", "-o", "jsonpath={.status.phase}"])
            == "Provisioned"
    });
    eventually("both machines are Running", || {
        let list = machines(&server);
        list.len() == 2 && list.iter().all(|m| m["status"]["phase"] == "Running")
    });
    for machine in machines(&server) {
        assert!(
            machine["spec"]["providerID"]
                .as_str()
                .unwrap()
                .starts_with("inmemory://default/sim/")
        );
        assert_eq!(machine["status"]["nodeInfo"]["kubeletVersion"], "v1.30.2");
    }

    // The workload cluster, through the kubeconfig Secret, with plain kubectl.
    let encoded = server.kubectl_ok(&[
        "get",
        "secret",
        "sim-kubeconfig",
        "-o",
        "jsonpath={.data.value}",
    ]);
    let decoded = std::process::Command::new("base64")
        .arg("-d")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    let mut decoded = decoded;
    decoded
        .stdin
        .take()
        .unwrap()
        .write_all(encoded.as_bytes())
        .unwrap();
    let kubeconfig = decoded.wait_with_output().unwrap().stdout;
    let path = server.data_dir().join("sim.kubeconfig");
    std::fs::write(&path, kubeconfig).unwrap();
    let nodes = server.kubectl_ok(&["--kubeconfig", path.to_str().unwrap(), "get", "nodes"]);
    assert_eq!(nodes.lines().count(), 3, "{nodes}");
    assert!(
        nodes.contains("True") && nodes.contains("v1.30.2"),
        "{nodes}"
    );

    // Deleting the cluster takes its machines, its simulated API and its kubeconfig with it.
    server.kubectl_ok(&["delete", "cluster", "sim", "--wait=false"]);
    eventually("everything is gone", || {
        server
            .kubectl_ok(&[
                "get",
                "machines,inmemorymachines,inmemoryclusters,clusters",
                "-o",
                "name",
            ])
            .trim()
            .is_empty()
    });
    assert!(
        !server
            .kubectl(&["--kubeconfig", path.to_str().unwrap(), "get", "nodes"])
            .status
            .success()
    );
}

#[test]
fn failure_injection_never_boots_and_not_ready_later() {
    let server = TestServer::start();
    server.apply_ok(&["apply", "-f", "-"], &manifests(r#"{neverBoots: true}"#));
    eventually("machines are provisioning", || {
        let list = machines(&server);
        list.len() == 2 && list.iter().all(|m| m["status"]["phase"] == "Provisioning")
    });
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert!(
        machines(&server)
            .iter()
            .all(|m| m["status"]["phase"] == "Provisioning"),
        "a machine that never boots never runs"
    );
    let reason = server.kubectl_ok(&[
        "get",
        "inmemorymachines",
        "-o",
        "jsonpath={.items[0].status.conditions[?(@.type==\"Ready\")].reason}",
    ]);
    assert_eq!(reason, "NeverBoots");

    server.kubectl_ok(&["delete", "cluster", "sim"]);
    server.apply_ok(
        &["apply", "-f", "-"],
        &manifests(r#"{nodeNotReadyAfter: "2s"}"#),
    );
    eventually("machines run", || {
        let list = machines(&server);
        list.len() == 2 && list.iter().all(|m| m["status"]["phase"] == "Running")
    });
    eventually("nodes turn NotReady and machines report it", || {
        machines(&server).iter().all(|m| {
            m["status"]["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["type"] == "NodeHealthy" && c["status"] == "False")
        })
    });
}
