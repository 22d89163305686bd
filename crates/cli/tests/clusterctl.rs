//! The Cluster API user journey with kubectl: generate a cluster, apply it, watch it come up,
//! scale workers 3 -> 5, upgrade Kubernetes, delete it, and check nothing is left.

mod common;

use std::time::{Duration, Instant};

use common::{TestServer, generate_cluster};
use serde_json::Value;

fn machines(server: &TestServer) -> Vec<Value> {
    let out = server.kubectl_ok(&["get", "machines", "-o", "json"]);
    serde_json::from_str::<Value>(&out).unwrap()["items"]
        .as_array()
        .unwrap()
        .clone()
}

fn wait(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn running(server: &TestServer, version: &str) -> (usize, usize) {
    let list = machines(server);
    let up = |cp: bool| {
        list.iter()
            .filter(|m| {
                m["metadata"]["labels"]
                    .get("cluster.x-k8s.io/control-plane")
                    .is_some()
                    == cp
            })
            .filter(|m| {
                m["status"]["phase"] == "Running"
                    && m["spec"]["version"] == version
                    && m["metadata"]["deletionTimestamp"].is_null()
            })
            .count()
    };
    (up(true), up(false))
}

#[test]
fn generate_apply_scale_upgrade_delete() {
    let server = TestServer::start();
    server.init_inmemory();
    let manifests = generate_cluster(&[
        "dev",
        "--infrastructure",
        "inmemory",
        "--kubernetes-version",
        "v1.30.2",
        "--control-plane-machine-count",
        "3",
        "--worker-machine-count",
        "3",
    ]);
    assert!(
        server.apply_ok(&["apply", "-f", "-"], &manifests).contains(
            "kubeadmcontrolplane.controlplane.cluster.x-k8s.io/dev-control-plane created"
        )
    );

    wait(
        "3 control-plane and 3 worker machines run",
        Duration::from_secs(90),
        || running(&server, "v1.30.2") == (3, 3) && machines(&server).len() == 6,
    );
    let clusters = server.kubectl_ok(&["get", "clusters"]);
    assert!(
        clusters.contains("dev") && clusters.contains("Provisioned"),
        "{clusters}"
    );
    let printed = server.kubectl_ok(&["get", "machines"]);
    assert!(
        printed.contains("Running") && printed.contains("v1.30.2"),
        "{printed}"
    );
    let kcp = server.kubectl_ok(&[
        "get",
        "kubeadmcontrolplane",
        "dev-control-plane",
        "-o",
        "jsonpath={.status.initialized}/{.status.readyReplicas}",
    ]);
    assert_eq!(kcp, "true/3");
    let ready = server.kubectl_ok(&[
        "get",
        "cluster",
        "dev",
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
    ]);
    assert_eq!(ready, "True");

    let described = std::process::Command::new(env!("CARGO_BIN_EXE_lariat"))
        .args(["describe", "cluster", "dev", "--kubeconfig"])
        .arg(server.kubeconfig())
        .output()
        .unwrap();
    let tree = String::from_utf8_lossy(&described.stdout);
    assert!(
        described.status.success(),
        "{}",
        String::from_utf8_lossy(&described.stderr)
    );
    for expected in [
        "Cluster/dev",
        "ClusterInfrastructure - InMemoryCluster/dev",
        "ControlPlane - KubeadmControlPlane/dev-control-plane",
        "MachineDeployment/dev-md-0",
    ] {
        assert!(tree.contains(expected), "{expected} missing from:\n{tree}");
    }
    // Machines in the same state are grouped, as clusterctl groups them.
    assert_eq!(tree.matches("3 Machines...").count(), 2, "{tree}");
    // The control plane's machines hang under the control plane, the workers last.
    let lines: Vec<&str> = tree.lines().collect();
    let control_plane = lines
        .iter()
        .position(|l| l.starts_with("├─ControlPlane - KubeadmControlPlane/dev-control-plane"))
        .unwrap_or_else(|| panic!("{tree}"));
    assert!(
        lines[control_plane + 1].starts_with("│ └─3 Machines..."),
        "{tree}"
    );
    assert!(lines.iter().any(|l| l.starts_with("└─Workers")), "{tree}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("  └─MachineDeployment/dev-md-0")),
        "{tree}"
    );
    assert!(tree.lines().nth(1).unwrap().contains("True"), "{tree}");
    let describe = |extra: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_lariat"))
            .args(["describe", "cluster", "dev", "--kubeconfig"])
            .arg(server.kubeconfig())
            .args(extra)
            .output()
            .unwrap();
        assert!(output.status.success());
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let each = describe(&["--grouping=false"]);
    assert_eq!(each.matches("Machine/dev-").count(), 6, "{each}");
    let conditions = describe(&["--show-conditions", "Cluster,KubeadmControlPlane"]);
    for condition in [
        "InfrastructureReady",
        "ControlPlaneInitialized",
        "MachinesReady",
    ] {
        assert!(
            conditions.contains(condition),
            "{condition} in\n{conditions}"
        );
    }
    let missing = std::process::Command::new(env!("CARGO_BIN_EXE_lariat"))
        .args(["describe", "cluster", "nope", "--kubeconfig"])
        .arg(server.kubeconfig())
        .output()
        .unwrap();
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("cluster \"nope\" not found"));

    server.kubectl_ok(&["scale", "machinedeployment", "dev-md-0", "--replicas=5"]);
    wait("5 workers run", Duration::from_secs(60), || {
        running(&server, "v1.30.2") == (3, 5)
    });

    // Upgrade: the control plane one machine at a time, then the workers.
    server.kubectl_ok(&[
        "patch",
        "kubeadmcontrolplane",
        "dev-control-plane",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"version":"v1.31.0"}}"#,
    ]);
    server.kubectl_ok(&[
        "patch",
        "machinedeployment",
        "dev-md-0",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"template":{"spec":{"version":"v1.31.0"}}}}"#,
    ]);
    wait(
        "every machine runs v1.31.0",
        Duration::from_secs(120),
        || running(&server, "v1.31.0") == (3, 5) && machines(&server).len() == 8,
    );

    server.kubectl_ok(&["delete", "cluster", "dev", "--timeout=90s"]);
    let left = server.kubectl_ok(&["get", "clusters,machines,machinesets,machinedeployments,kubeadmcontrolplanes,kubeadmconfigs,inmemorymachines,inmemoryclusters", "-o", "name"]);
    assert!(left.trim().is_empty(), "left behind: {left}");
}

#[test]
fn a_restart_in_the_middle_of_provisioning_resumes_without_duplicates() {
    let mut server = TestServer::start();
    server.init_inmemory();
    let manifests = generate_cluster(&[
        "slow",
        "--control-plane-machine-count",
        "1",
        "--worker-machine-count",
        "4",
        "--provisioning-delay",
        "3s",
    ]);
    server.apply_ok(&["apply", "-f", "-"], &manifests);
    wait("provisioning is under way", Duration::from_secs(60), || {
        machines(&server).len() >= 2
    });
    server.kill9();
    server.launch();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let list = machines(&server);
        if list.len() == 5 && list.iter().all(|m| m["status"]["phase"] == "Running") {
            break;
        }
        if Instant::now() > deadline {
            let state = server.kubectl_ok(&[
                "get",
                "clusters,kcp,machines,inmemorymachines,kubeadmconfigs,configmaps",
                "-o",
                "wide",
            ]);
            panic!(
                "not all five machines run after the restart:\n{state}\n{}",
                server.log()
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    // Each owner's count of its machines is written by a pass that saw them all run, after
    // the restart (none ran before it): that pass found its replicas and made none more.
    let counted = |resource: &str| {
        server.kubectl_ok(&[
            "get",
            resource,
            "-o",
            "jsonpath={.items[0].status.replicas}/{.items[0].status.readyReplicas}",
        ])
    };
    wait(
        "each owner counts its machines, all running",
        Duration::from_secs(30),
        || counted("machinesets") == "4/4" && counted("kubeadmcontrolplanes") == "1/1",
    );
    assert_eq!(
        machines(&server).len(),
        5,
        "no duplicate machines after the restart"
    );
    let infra = server.kubectl_ok(&["get", "inmemorymachines", "-o", "name"]);
    assert_eq!(infra.lines().count(), 5, "{infra}");
}
