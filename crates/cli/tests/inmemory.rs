//! The in-memory provider end to end: a cluster whose machines boot into Nodes of a simulated
//! workload cluster that plain kubectl reaches through `<cluster>-kubeconfig`, with failure
//! injection.

mod common;

use common::{TestServer, eventually, generate_cluster, small_inmemory_cluster};
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
    server.init_inmemory();
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
                .starts_with("in-memory:///default/sim-workers-")
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
        nodes.contains(" Ready ") && nodes.contains("v1.30.2"),
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
    server.init_inmemory();
    server.apply_ok(&["apply", "-f", "-"], &manifests(r#"{neverBoots: true}"#));
    eventually("machines are provisioning", || {
        let list = machines(&server);
        list.len() == 2 && list.iter().all(|m| m["status"]["phase"] == "Provisioning")
    });
    // The provider's decision on each machine: it never boots (the boot is where a Node
    // would come from), so its Machine never runs.
    eventually("every InMemoryMachine says it never boots", || {
        server.kubectl_ok(&[
            "get",
            "inmemorymachines",
            "-o",
            "jsonpath={.items[*].status.conditions[?(@.type==\"Ready\")].reason}",
        ]) == "NeverBoots NeverBoots"
    });
    assert!(
        machines(&server)
            .iter()
            .all(|m| m["status"]["phase"] == "Provisioning"),
        "a machine that never boots never runs"
    );
    // Said once per machine as a Warning Event, not at every look.
    let warnings = server.kubectl_ok(&[
        "get",
        "events",
        "--field-selector",
        "reason=NeverBoots,type=Warning",
        "-o",
        "jsonpath={.items[*].count}",
    ]);
    assert!(
        !warnings.is_empty() && warnings.split(' ').all(|count| count == "1"),
        "{warnings:?}"
    );

    server.kubectl_ok(&["delete", "cluster", "sim"]);
    server.apply_ok(
        &["apply", "-f", "-"],
        &manifests(r#"{nodeNotReadyAfter: "2s"}"#),
    );
    eventually("machines run", || {
        let list = machines(&server);
        list.len() == 2 && list.iter().all(|m| m["status"]["phase"] == "Running")
    });
    // The simulated kubelets say NotReady 2 s after they booted ...
    eventually("both nodes turn NotReady", || {
        server
            .kubectl_ok(&[
                "get",
                "events",
                "--field-selector",
                "reason=NodeNotReady",
                "-o",
                "name",
            ])
            .lines()
            .count()
            == 2
    });
    // ... and the watch of the cluster's Nodes brings that to the Machines at once (it took up
    // to 30 s when core looked at Nodes on a timer).
    common::eventually_within(
        std::time::Duration::from_secs(5),
        "machines report their NotReady nodes",
        || {
            machines(&server).iter().all(|m| {
                m["status"]["conditions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|c| c["type"] == "NodeHealthy" && c["status"] == "False")
            })
        },
    );
}

fn health_check(max_unhealthy: &str) -> String {
    format!(
        r#"apiVersion: cluster.x-k8s.io/v1beta1
kind: MachineHealthCheck
metadata:
  name: sim-workers
spec:
  clusterName: sim
  maxUnhealthy: {max_unhealthy}
  nodeStartupTimeout: 3s
  selector:
    matchLabels: {{pool: workers}}
  unhealthyConditions:
  - {{type: Ready, status: "False", timeout: 1s}}
"#
    )
}

fn machine_names(server: &TestServer) -> Vec<String> {
    machines(server)
        .iter()
        .map(|m| m["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn machine_health_checks_remediate_within_max_unhealthy() {
    let server = TestServer::start();
    server.init_inmemory();
    // Nodes that go NotReady are replaced by the MachineSet after the health check deletes them.
    server.apply_ok(
        &["apply", "-f", "-"],
        &manifests(r#"{nodeNotReadyAfter: "2s"}"#),
    );
    server.apply_ok(&["apply", "-f", "-"], &health_check("100%"));
    eventually("machines run", || {
        machines(&server)
            .iter()
            .filter(|m| m["status"]["phase"] == "Running")
            .count()
            == 2
    });
    let first = machine_names(&server);
    eventually("unhealthy machines are replaced", || {
        machine_names(&server).iter().all(|n| !first.contains(n))
    });

    // With maxUnhealthy 0, nothing is remediated and the check says why.
    server.kubectl_ok(&["delete", "cluster", "sim"]);
    // Owned by its Cluster, the health check goes with it.
    eventually("the health check is deleted with its cluster", || {
        server
            .kubectl_ok(&["get", "mhc", "-o", "name"])
            .trim()
            .is_empty()
    });
    server.apply_ok(&["apply", "-f", "-"], &manifests(r#"{neverBoots: true}"#));
    server.apply_ok(&["apply", "-f", "-"], &health_check("0"));
    eventually("two machines wait to boot", || machines(&server).len() == 2);
    let waiting = machine_names(&server);
    eventually("the health check refuses to remediate", || {
        server.kubectl_ok(&[
            "get",
            "mhc",
            "sim-workers",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"RemediationAllowed\")].reason}",
        ]) == "TooManyUnhealthy"
    });
    // The two machines pass their startup timeout a moment apart: one may still count as
    // healthy when the first refusal is written.
    eventually("both machines count as unhealthy", || {
        server.kubectl_ok(&[
            "get",
            "mhc",
            "sim-workers",
            "-o",
            "jsonpath={.status.expectedMachines}/{.status.currentHealthy}",
        ]) == "2/0"
    });
    assert_eq!(machine_names(&server), waiting, "no machine was deleted");

    // Raising maxUnhealthy lets the startup timeout remediate machines that never boot.
    server.kubectl_ok(&[
        "patch",
        "mhc",
        "sim-workers",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"maxUnhealthy":"100%"}}"#,
    ]);
    eventually("machines that never booted are replaced", || {
        machine_names(&server).iter().all(|n| !waiting.contains(n))
    });
}

#[test]
fn kubeadm_bootstrap_inits_one_control_plane_then_joins_workers() {
    let server = TestServer::start();
    server.init_inmemory();
    let pool = |name: &str, replicas: u32, control_plane: bool| {
        let labels = if control_plane {
            format!("{{pool: {name}, cluster.x-k8s.io/control-plane: \"\"}}")
        } else {
            format!("{{pool: {name}}}")
        };
        format!(
            r#"---
apiVersion: bootstrap.cluster.x-k8s.io/v1beta1
kind: KubeadmConfigTemplate
metadata:
  name: {name}
spec:
  template:
    spec:
      preKubeadmCommands: ["echo hello from {name}"]
---
apiVersion: cluster.x-k8s.io/v1beta1
kind: MachineDeployment
metadata:
  name: {name}
spec:
  clusterName: sim
  replicas: {replicas}
  selector:
    matchLabels: {{pool: {name}}}
  template:
    metadata:
      labels: {labels}
    spec:
      clusterName: sim
      version: v1.30.2
      bootstrap:
        configRef: {{apiVersion: bootstrap.cluster.x-k8s.io/v1beta1, kind: KubeadmConfigTemplate, name: {name}}}
      infrastructureRef: {{apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1, kind: InMemoryMachineTemplate, name: sim-workers}}
"#
        )
    };
    let base = manifests("{}");
    let cluster_only: String = base
        .split("---\napiVersion: cluster.x-k8s.io/v1beta1\nkind: MachineDeployment")
        .next()
        .unwrap()
        .to_string();
    server.apply_ok(
        &["apply", "-f", "-"],
        &format!(
            "{cluster_only}{}{}",
            pool("cp", 1, true),
            pool("workers", 2, false)
        ),
    );
    eventually("all three machines are Running", || {
        let list = machines(&server);
        list.len() == 3 && list.iter().all(|m| m["status"]["phase"] == "Running")
    });
    let secrets: Value =
        serde_json::from_str(&server.kubectl_ok(&["get", "secrets", "-o", "json"])).unwrap();
    let mut roles = vec![];
    for secret in secrets["items"].as_array().unwrap() {
        if secret["data"]["format"].is_string() {
            let encoded = secret["data"]["value"].as_str().unwrap();
            let output = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("echo {encoded} | base64 -d"))
                .output()
                .unwrap();
            let cloud_init = String::from_utf8(output.stdout).unwrap();
            assert!(cloud_init.starts_with("#cloud-config"), "{cloud_init}");
            roles.push(if cloud_init.contains("kubeadm init") {
                "init"
            } else if cloud_init.contains("kubeadm join") {
                "join"
            } else {
                "other"
            });
        }
    }
    roles.sort();
    assert_eq!(roles, ["init", "join", "join"], "one init, then joins");
    for name in ["sim-ca", "sim-etcd", "sim-sa", "sim-proxy"] {
        assert!(
            server.kubectl(&["get", "secret", name]).status.success(),
            "cluster certificate {name}"
        );
    }
}

fn set_node_ready(server: &TestServer, kubeconfig: &std::path::Path, node: &str, ready: bool) {
    let patch = serde_json::json!({"status": {"conditions": [{
        "type": "Ready", "status": if ready { "True" } else { "False" },
        "reason": "Test", "message": "set by the test",
        "lastHeartbeatTime": "2020-01-01T00:00:00Z", "lastTransitionTime": "2020-01-01T00:00:00Z",
    }]}});
    server.kubectl_ok(&[
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "patch",
        "node",
        node,
        "--subresource=status",
        "--type=merge",
        "-p",
        &patch.to_string(),
    ]);
}

/// The control plane spreads over the simulated zones, and remediates an unhealthy member only
/// while etcd keeps quorum, as KubeadmControlPlane does.
#[test]
fn control_plane_spreads_over_zones_and_remediates_without_losing_quorum() {
    let server = TestServer::start();
    server.init_inmemory();
    server.apply_ok(
        &["apply", "-f", "-"],
        &generate_cluster(&[
            "ha",
            "--control-plane-machine-count",
            "3",
            "--worker-machine-count",
            "0",
        ]),
    );
    let control_plane = |server: &TestServer| -> Vec<Value> {
        machines(server)
            .into_iter()
            .filter(|m| m["metadata"]["labels"]["cluster.x-k8s.io/control-plane"].is_string())
            .collect()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    while control_plane(&server)
        .iter()
        .filter(|m| m["status"]["phase"] == "Running")
        .count()
        < 3
    {
        assert!(
            std::time::Instant::now() < deadline,
            "3 control-plane machines run"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let mut zones: Vec<String> = control_plane(&server)
        .iter()
        .map(|m| {
            m["spec"]["failureDomain"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    zones.sort();
    assert_eq!(zones, ["zone-a", "zone-b", "zone-c"]);
    let kubeconfig = server.workload_kubeconfig("ha");
    let zone_labels = server.kubectl_ok(&[
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "get",
        "nodes",
        "-o",
        r#"jsonpath={range .items[*]}{.metadata.labels.topology\.kubernetes\.io/zone} {end}"#,
    ]);
    assert_eq!(zone_labels.split_whitespace().count(), 3, "{zone_labels}");

    // Its agent runs in the server, dials home, and the cluster is reached through the proxy.
    eventually("the cluster's agent connects", || {
        let output = server.kubectl(&[
            "get",
            "clusterconnection",
            "ha",
            "-o",
            "jsonpath={.status.connected}/{.status.nodeCount}",
        ]);
        String::from_utf8_lossy(&output.stdout) == "true/3"
    });
    let proxied = server.lariat(&["kubeconfig", "ha"]);
    assert!(proxied.status.success());
    let proxied_path = server.data_dir().join("ha-proxied.kubeconfig");
    std::fs::write(&proxied_path, proxied.stdout).unwrap();
    let through_proxy = server.kubectl_ok(&[
        "--kubeconfig",
        proxied_path.to_str().unwrap(),
        "get",
        "nodes",
        "-o",
        "name",
    ]);
    assert_eq!(through_proxy.lines().count(), 3, "{through_proxy}");

    // Two of three members unhealthy: removing one would leave one healthy of two members.
    let names: Vec<String> = control_plane(&server)
        .iter()
        .map(|m| m["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    set_node_ready(&server, &kubeconfig, &names[0], false);
    set_node_ready(&server, &kubeconfig, &names[1], false);
    server.apply_ok(
        &["apply", "-f", "-"],
        r#"apiVersion: cluster.x-k8s.io/v1beta1
kind: MachineHealthCheck
metadata:
  name: ha-control-plane
spec:
  clusterName: ha
  maxUnhealthy: 100%
  selector:
    matchLabels: {cluster.x-k8s.io/control-plane: ""}
  unhealthyConditions:
  - {type: Ready, status: "False", timeout: 1s}
"#,
    );
    let owner_remediated = |server: &TestServer, name: &str| {
        server.kubectl_ok(&[
            "get",
            "machine",
            name,
            "-o",
            r#"jsonpath={.status.conditions[?(@.type=="OwnerRemediated")].message}"#,
        ])
    };
    eventually("the control plane refuses to lose quorum", || {
        owner_remediated(&server, &names[0]).contains("below quorum")
            || owner_remediated(&server, &names[1]).contains("below quorum")
    });
    let healthy = server.kubectl_ok(&[
        "get",
        "machine",
        &names[2],
        "-o",
        r#"jsonpath={.status.conditions[?(@.type=="HealthCheckSucceeded")].status}"#,
    ]);
    assert_eq!(healthy, "True");
    // The refusal is the control plane's decision on the member it would remediate (one at a
    // time): it holds while quorum is short. What it does once a member recovers, below, shows
    // it deleted nothing meanwhile.
    assert_eq!(control_plane(&server).len(), 3, "nothing was deleted");

    // One member recovers: the other unhealthy one is replaced, in its zone. Its zone is read
    // first: once quorum allows it, remediation may delete it before the next read.
    let lost_zone = control_plane(&server)
        .iter()
        .find(|m| m["metadata"]["name"] == names[1].as_str())
        .map(|m| m["spec"]["failureDomain"].clone())
        .unwrap();
    set_node_ready(&server, &kubeconfig, &names[0], true);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let now = control_plane(&server);
        let replaced = !now
            .iter()
            .any(|m| m["metadata"]["name"] == names[1].as_str())
            && now.len() == 3
            && now.iter().all(|m| m["status"]["phase"] == "Running");
        if replaced {
            let newcomer = now
                .iter()
                .find(|m| !names.contains(&m["metadata"]["name"].as_str().unwrap().to_string()))
                .expect("a new machine");
            assert_eq!(newcomer["spec"]["failureDomain"], lost_zone);
            // Woken by the recovery, it remediated the member left unhealthy (there until
            // then: its zone was read); the other two are still there.
            for kept in [&names[0], &names[2]] {
                assert!(
                    now.iter().any(|m| m["metadata"]["name"] == kept.as_str()),
                    "{kept} was deleted"
                );
            }
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the unhealthy member is replaced"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// With a remediationTemplate, the health check leaves the Machine alone and asks an external
/// remediation controller, through an object made from the template, as Cluster API does.
#[test]
fn external_remediation_creates_a_request_from_the_template() {
    let server = TestServer::start();
    server.init_inmemory();
    let crd = |kind: &str| {
        format!(
            r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: {plural}.remediation.test.lariat.dev
spec:
  group: remediation.test.lariat.dev
  scope: Namespaced
  names: {{kind: {kind}, plural: {plural}, singular: {singular}}}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}
"#,
            plural = format!("{}s", kind.to_lowercase()),
            singular = kind.to_lowercase()
        )
    };
    server.apply_ok(&["apply", "-f", "-"], &crd("RebootRemediationTemplate"));
    server.apply_ok(&["apply", "-f", "-"], &crd("RebootRemediation"));
    server.apply_ok(&["apply", "-f", "-"], &manifests(r#"{neverBoots: true}"#));
    server.apply_ok(
        &["apply", "-f", "-"],
        r#"apiVersion: remediation.test.lariat.dev/v1
kind: RebootRemediationTemplate
metadata:
  name: reboot
spec:
  template:
    spec: {strategy: Reboot, retryLimit: 2}
---
apiVersion: cluster.x-k8s.io/v1beta1
kind: MachineHealthCheck
metadata:
  name: sim-workers
spec:
  clusterName: sim
  nodeStartupTimeout: 2s
  selector:
    matchLabels: {pool: workers}
  remediationTemplate: {apiVersion: remediation.test.lariat.dev/v1, kind: RebootRemediationTemplate, name: reboot}
"#,
    );
    eventually("two machines wait to boot", || machines(&server).len() == 2);
    let waiting = machine_names(&server);
    eventually("a remediation request per unhealthy machine", || {
        let out = server.kubectl_ok(&["get", "rebootremediations", "-o", "json"]);
        serde_json::from_str::<Value>(&out).unwrap()["items"]
            .as_array()
            .unwrap()
            .len()
            == 2
    });
    for name in &waiting {
        let request: Value = serde_json::from_str(&server.kubectl_ok(&[
            "get",
            "rebootremediation",
            name,
            "-o",
            "json",
        ]))
        .unwrap();
        assert_eq!(request["spec"]["strategy"], "Reboot");
        assert_eq!(request["metadata"]["ownerReferences"][0]["kind"], "Machine");
        assert_eq!(
            request["metadata"]["ownerReferences"][0]["name"],
            name.as_str()
        );
    }
    // The health check's decision on each machine: marked unhealthy, and left to the
    // remediator. Its owner is not asked (`OwnerRemediated`), and only that makes a
    // MachineSet delete a machine it keeps.
    let condition = |machine: &str, type_: &str| {
        server.kubectl_ok(&[
            "get",
            "machine",
            machine,
            "-o",
            &format!("jsonpath={{.status.conditions[?(@.type==\"{type_}\")].status}}"),
        ])
    };
    eventually("both machines are marked unhealthy", || {
        waiting
            .iter()
            .all(|name| condition(name, "HealthCheckSucceeded") == "False")
    });
    for name in &waiting {
        assert_eq!(condition(name, "OwnerRemediated"), "", "{name}");
    }
    assert_eq!(
        machine_names(&server),
        waiting,
        "the machines are left to the remediator"
    );
}

#[test]
fn a_restart_remediates_no_healthy_machine() {
    let mut server = TestServer::start();
    server.init_inmemory();
    server.apply_ok(&["apply", "-f", "-"], &manifests("{}"));
    server.apply_ok(&["apply", "-f", "-"], &health_check("100%"));
    let running = |server: &TestServer| {
        let list = machines(server);
        list.len() == 2
            && list
                .iter()
                .all(|m| m["status"]["phase"] == "Running" && m["status"]["nodeRef"].is_object())
    };
    eventually("machines run", || running(&server));
    let before = machine_names(&server);
    // The simulated clusters start empty after a restart: the machines that had booted join
    // them again before core is sent there, so no Node looks gone to the health check.
    server.kill9();
    server.launch();
    eventually("machines run after the restart", || running(&server));
    // A change of the health check is answered (observedGeneration) only by a pass that
    // judged the machines by the Nodes of the restarted simulated cluster: it found both
    // healthy, and none was ever found unhealthy (said with an Event the first time).
    server.kubectl_ok(&[
        "patch",
        "mhc",
        "sim-workers",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"nodeStartupTimeout":"4s"}}"#,
    ]);
    eventually("the health check judges the machines again", || {
        let judged = server.kubectl_ok(&[
            "get",
            "mhc",
            "sim-workers",
            "-o",
            "jsonpath={.metadata.generation} {.status.observedGeneration}",
        ]);
        judged
            .split_once(' ')
            .is_some_and(|(generation, observed)| generation == observed)
    });
    assert_eq!(
        server.kubectl_ok(&[
            "get",
            "mhc",
            "sim-workers",
            "-o",
            "jsonpath={.status.expectedMachines}/{.status.currentHealthy}",
        ]),
        "2/2"
    );
    let marked = server.kubectl_ok(&[
        "get",
        "events",
        "--field-selector",
        "reason=MachineMarkedUnhealthy",
        "-o",
        "name",
    ]);
    assert!(marked.trim().is_empty(), "{marked}");
    assert_eq!(
        machine_names(&server),
        before,
        "no healthy machine was replaced"
    );
    assert!(running(&server));
    assert!(
        !server.log().contains("asking the owner to remediate"),
        "{}",
        server.log()
    );
}

#[test]
fn a_paused_cluster_changes_nothing_until_it_is_unpaused() {
    let server = TestServer::start();
    server.init_inmemory();
    server.apply_ok(&["apply", "-f", "-"], &manifests("{}"));
    eventually("machines run", || {
        let list = machines(&server);
        list.len() == 2 && list.iter().all(|m| m["status"]["phase"] == "Running")
    });
    let set_paused = |paused: bool| {
        server.kubectl_ok(&[
            "patch",
            "cluster",
            "sim",
            "--type",
            "merge",
            "-p",
            &format!(r#"{{"spec":{{"paused":{paused}}}}}"#),
        ])
    };
    // Cluster API's `Paused` condition of an object, and the generation it was written at.
    let paused = |kind: &str, name: &str| {
        let out = server.kubectl_ok(&["get", kind, name, "-o", "json"]);
        let object: Value = serde_json::from_str(&out).unwrap();
        let conditions = object["status"]["v1beta2"]["conditions"]
            .as_array()
            .cloned();
        let condition = conditions
            .unwrap_or_default()
            .into_iter()
            .find(|c| c["type"] == "Paused");
        (condition, object["metadata"]["generation"].clone())
    };
    set_paused(true);
    eventually("the Cluster says it is paused", || {
        let (condition, _) = paused("cluster", "sim");
        condition.is_some_and(|c| {
            c["status"] == "True"
                && c["reason"] == "Paused"
                && c["message"] == "Cluster spec.paused is set to true"
        })
    });
    server.kubectl_ok(&["scale", "machinedeployment", "sim-workers", "--replicas=3"]);
    // The MachineDeployment's controller saw the scale (the condition is at the generation the
    // scale made) and left it: the MachineSet still asks for two Machines, and two exist.
    eventually("the MachineDeployment's controller sees the scale", || {
        let (condition, generation) = paused("machinedeployment", "sim-workers");
        condition.is_some_and(|c| c["status"] == "True" && c["observedGeneration"] == generation)
    });
    let sets = server.kubectl_ok(&[
        "get",
        "machinesets",
        "-o",
        "jsonpath={.items[*].spec.replicas}",
    ]);
    assert_eq!(sets, "2", "a paused cluster's MachineSet is left alone");
    assert_eq!(machines(&server).len(), 2, "a paused cluster is left alone");
    // Unpausing wakes what returned without waiting while it was paused (as `clusterctl move`
    // relies on), not at the next periodic resync minutes later.
    set_paused(false);
    eventually("the scale-up goes ahead once unpaused", || {
        let list = machines(&server);
        list.len() == 3 && list.iter().all(|m| m["status"]["phase"] == "Running")
    });
    let (condition, _) = paused("machinedeployment", "sim-workers");
    let condition = condition.expect("the Paused condition stays, False");
    assert_eq!(
        (&condition["status"], &condition["reason"]),
        (&Value::from("False"), &Value::from("NotPaused"))
    );
}

#[test]
fn a_cluster_neither_adopts_nor_deletes_what_another_cluster_owns() {
    let server = TestServer::start();
    server.init_inmemory();
    server.apply_ok(&["apply", "-f", "-"], &manifests("{}"));
    eventually("machines run", || {
        let list = machines(&server);
        list.len() == 2 && list.iter().all(|m| m["status"]["phase"] == "Running")
    });
    let machine = machines(&server)[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    // One Cluster names sim's infrastructure, another one of sim's Machines.
    server.apply_ok(
        &["apply", "-f", "-"],
        &format!(
            r#"apiVersion: cluster.x-k8s.io/v1beta1
kind: Cluster
metadata: {{name: thief}}
spec:
  infrastructureRef: {{apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1, kind: InMemoryCluster, name: sim}}
---
apiVersion: cluster.x-k8s.io/v1beta1
kind: Cluster
metadata: {{name: confused}}
spec:
  infrastructureRef: {{apiVersion: cluster.x-k8s.io/v1beta1, kind: Machine, name: {machine}}}
"#
        ),
    );
    let condition = |cluster: &str| -> Value {
        let object: Value =
            serde_json::from_str(&server.kubectl_ok(&["get", "cluster", cluster, "-o", "json"]))
                .unwrap();
        object["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "InfrastructureReady")
            .cloned()
            .unwrap_or(Value::Null)
    };
    eventually("the thief is told whose infrastructure it names", || {
        let c = condition("thief");
        c["reason"] == "InfrastructureClaimed"
            && c["message"]
                .as_str()
                .is_some_and(|m| m.contains("Cluster sim"))
    });
    eventually(
        "the confused one is told its reference is not a provider's",
        || condition("confused")["reason"] == "InvalidReference",
    );
    // A Machine naming another Machine's bootstrap config is told so, and keeps saying it
    // (the generic "waiting for the data" must not cover it).
    let uid = server.kubectl_ok(&["get", "machine", &machine, "-o", "jsonpath={.metadata.uid}"]);
    server.apply_ok(
        &["apply", "-f", "-"],
        &format!(
            r#"apiVersion: bootstrap.cluster.x-k8s.io/v1beta1
kind: KubeadmConfig
metadata:
  name: claimed
  ownerReferences:
  - {{apiVersion: cluster.x-k8s.io/v1beta1, kind: Machine, name: {machine}, uid: {uid}, controller: true}}
spec: {{joinConfiguration: {{}}}}
---
apiVersion: cluster.x-k8s.io/v1beta1
kind: Machine
metadata: {{name: borrower}}
spec:
  clusterName: sim
  version: v1.30.0
  bootstrap:
    configRef: {{apiVersion: bootstrap.cluster.x-k8s.io/v1beta1, kind: KubeadmConfig, name: claimed}}
  infrastructureRef: {{apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1, kind: InMemoryMachine, name: borrowed-nothing}}
"#,
            uid = uid.trim()
        ),
    );
    eventually(
        "the borrower is told whose bootstrap config it names",
        || {
            let object: Value = serde_json::from_str(
                &server.kubectl_ok(&["get", "machine", "borrower", "-o", "json"]),
            )
            .unwrap();
            object["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| {
                    c["type"] == "BootstrapReady"
                        && c["reason"] == "BootstrapConfigClaimed"
                        && c["message"].as_str().is_some_and(|m| m.contains(&machine))
                })
        },
    );
    server.kubectl_ok(&["delete", "machine", "borrower", "--timeout=60s"]);
    let owners = server.kubectl_ok(&[
        "get",
        "inmemorycluster",
        "sim",
        "-o",
        "jsonpath={.metadata.ownerReferences[*].name}",
    ]);
    assert_eq!(owners.trim(), "sim", "not adopted by a second Cluster");

    // Deleting them deletes nothing of sim's.
    server.kubectl_ok(&["delete", "cluster", "thief", "confused", "--timeout=60s"]);
    server.kubectl_ok(&["get", "inmemorycluster", "sim"]);
    server.kubectl_ok(&["get", "machine", &machine]);
    let phase = server.kubectl_ok(&["get", "cluster", "sim", "-o", "jsonpath={.status.phase}"]);
    assert_eq!(phase, "Provisioned");
}

#[test]
fn a_machine_another_tool_marked_oddly_holds_back_nothing_after_a_restart() {
    let mut server = TestServer::start();
    server.init_inmemory();
    server.apply_ok(&["apply", "-f", "-"], &manifests("{}"));
    let running = |server: &TestServer| {
        let list = machines(server);
        list.len() == 2 && list.iter().all(|m| m["status"]["phase"] == "Running")
    };
    eventually("machines run", || running(&server));
    let machine = machines(&server)[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    // A status and a severity the schema allows and lariat has no name for (Cluster API's Go
    // types take any string).
    server.kubectl_ok(&[
        "patch",
        "machine",
        &machine,
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"conditions":[{"type":"Ready","status":"Maybe","severity":"Critical","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}"#,
    ]);
    server.kill9();
    server.launch();
    eventually("every machine runs again after the restart", || {
        running(&server)
    });
    assert!(!server.log().contains("cannot be read"), "{}", server.log());
}

#[test]
fn a_cluster_whose_name_is_too_long_for_a_label_still_runs_its_machines() {
    let server = TestServer::start();
    server.init_inmemory();
    // 50 characters: "<name>-control-plane" is 64, one more than a label value may be.
    let name = format!("c{}", "x".repeat(49));
    let generated = small_inmemory_cluster(&name);
    server.apply_ok(&["apply", "-f", "-"], &generated);
    eventually("both machines are Running", || {
        let list = machines(&server);
        list.len() == 2 && list.iter().all(|m| m["status"]["phase"] == "Running")
    });
    // As Cluster API labels them: the control plane's name hashed into the label's value, and
    // the control plane's selector saying the same.
    let control_plane: Value = serde_json::from_str(&server.kubectl_ok(&[
        "get",
        "kubeadmcontrolplane",
        &format!("{name}-control-plane"),
        "-o",
        "json",
    ]))
    .unwrap();
    let selector = control_plane["status"]["selector"].as_str().unwrap();
    assert_eq!(
        selector, "cluster.x-k8s.io/control-plane-name=hash_jKgBfQ_z",
        "{control_plane}"
    );
    let selected = server.kubectl_ok(&["get", "machines", "-l", selector, "-o", "name"]);
    assert_eq!(selected.lines().count(), 1, "{selected}");
}
