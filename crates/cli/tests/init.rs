//! `lariat init`, like `clusterctl init`: providers run only once enabled, unknown names and
//! versions are refused with one line, a cluster waiting on a provider nobody enabled says so,
//! and the inventory is clusterctl's `Provider` objects.

mod common;

use common::{TestServer, eventually};

const CLUSTER: &str = r#"apiVersion: cluster.x-k8s.io/v1beta1
kind: Cluster
metadata:
  name: first
spec:
  infrastructureRef: {apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1, kind: InMemoryCluster, name: first}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: InMemoryCluster
metadata:
  name: first
spec: {}
"#;

fn infrastructure_condition(server: &TestServer, cluster: &str) -> String {
    server.kubectl_ok(&[
        "get",
        "cluster",
        cluster,
        "-o",
        r#"jsonpath={.status.conditions[?(@.type=="InfrastructureReady")].reason}: {.status.conditions[?(@.type=="InfrastructureReady")].message}"#,
    ])
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).trim().to_string()
}

#[test]
fn providers_run_only_once_enabled() {
    let server = TestServer::start();
    server.apply_ok(&["apply", "-f", "-"], CLUSTER);
    eventually("the cluster says its provider is not enabled", || {
        infrastructure_condition(&server, "first")
            == "ProviderNotEnabled: InMemoryCluster first waits for provider infrastructure-inmemory, which is not enabled: run `lariat init --infrastructure inmemory`"
    });
    assert_eq!(
        server.kubectl_ok(&[
            "get",
            "inmemorycluster",
            "first",
            "-o",
            "jsonpath={.status.ready}"
        ]),
        "",
        "nothing reconciles InMemoryCluster before init"
    );

    // Refusals: one line that says what is wrong and how to fix it; nothing recorded.
    let unknown = server.lariat(&["init", "--infrastructure", "nosuch"]);
    assert!(!unknown.status.success());
    assert_eq!(
        stderr(&unknown),
        "error: unknown infrastructure provider \"nosuch\": this lariat has inmemory, aws"
    );
    // A provider users know from Cluster API is not a dead end: the refusal says so.
    let azure = server.lariat(&["init", "--infrastructure", "azure"]);
    assert_eq!(
        stderr(&azure),
        "error: unknown infrastructure provider \"azure\" (it is a Cluster API provider this build does not include yet): this lariat has inmemory, aws"
    );
    let pinned = server.lariat(&["init", "--infrastructure", "inmemory:v9.9.9"]);
    assert!(!pinned.status.success());
    assert!(
        stderr(&pinned).starts_with(
            "error: infrastructure provider inmemory v9.9.9 is not in this build: lariat "
        ),
        "{}",
        stderr(&pinned)
    );
    assert_eq!(stderr(&pinned).lines().count(), 1);
    let unknown_bootstrap = server.lariat(&["init", "--bootstrap", "talos"]);
    assert_eq!(
        stderr(&unknown_bootstrap),
        "error: unknown bootstrap provider \"talos\": this lariat has kubeadm"
    );
    assert!(
        server
            .kubectl_ok(&["get", "providers", "-n", "lariat-system", "-o", "name"])
            .is_empty()
    );

    // A cluster that is not a lariat server: the simulated workload API of a cluster has no
    // Cluster API. Enable the provider first so that such a cluster exists.
    let init = server.lariat(&["init", "--infrastructure", "inmemory"]);
    assert!(init.status.success(), "{}", stderr(&init));
    let stdout = String::from_utf8_lossy(&init.stdout);
    assert!(
        stdout.contains(r#"Installing provider="infrastructure-inmemory" version="v"#),
        "{stdout}"
    );
    assert!(stdout.contains("Your management cluster has been initialized successfully!"));
    let table = server.kubectl_ok(&["get", "providers", "-n", "lariat-system"]);
    for (name, kind) in [
        ("cluster-api", "CoreProvider"),
        ("bootstrap-kubeadm", "BootstrapProvider"),
        ("control-plane-kubeadm", "ControlPlaneProvider"),
        ("infrastructure-inmemory", "InfrastructureProvider"),
    ] {
        let row = table
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} in\n{table}"));
        assert!(row.contains(kind) && row.contains("True"), "{row}");
    }
    eventually(
        "the cluster provisions once its provider is enabled",
        || {
            server.kubectl_ok(&["get", "cluster", "first", "-o", "jsonpath={.status.phase}"])
                == "Provisioned"
        },
    );

    let metrics = server.kubectl_ok(&["get", "--raw", "/metrics"]);
    assert!(
        metrics
            .contains(r#"lariat_reconciles_total{controller="inmemorycluster",result="success"}"#),
        "{metrics}"
    );

    let kubeconfig = server.data_dir().join("first.kubeconfig");
    let decoded = server.kubectl_ok(&[
        "get",
        "secret",
        "first-kubeconfig",
        "-o",
        "go-template={{.data.value | base64decode}}",
    ]);
    std::fs::write(&kubeconfig, decoded).unwrap();
    let elsewhere = std::process::Command::new(env!("CARGO_BIN_EXE_lariat"))
        .args(["init", "--infrastructure", "inmemory", "--kubeconfig"])
        .arg(&kubeconfig)
        .output()
        .unwrap();
    assert!(!elsewhere.status.success());
    assert_eq!(
        stderr(&elsewhere),
        "error: provider cluster-api cannot run here: the server does not serve cluster.x-k8s.io; point --kubeconfig at a lariat server"
    );

    // Running init again is harmless.
    let again = server.lariat(&["init", "--infrastructure", "inmemory"]);
    assert!(again.status.success(), "{}", stderr(&again));

    // Disabling a provider stops its controllers: a new InMemoryCluster stays untouched.
    server.kubectl_ok(&[
        "delete",
        "provider",
        "infrastructure-inmemory",
        "-n",
        "lariat-system",
    ]);
    eventually("the server stops the provider", || {
        server
            .log()
            .contains("provider disabled; its controllers stopped")
    });
    server.apply_ok(&["apply", "-f", "-"], &CLUSTER.replace("first", "second"));
    eventually(
        "the second cluster says its provider is not enabled",
        || infrastructure_condition(&server, "second").starts_with("ProviderNotEnabled: "),
    );
    // The server says the provider stopped only once its controllers have returned: nothing
    // is left to touch the new InMemoryCluster.
    assert_eq!(
        server.kubectl_ok(&[
            "get",
            "inmemorycluster",
            "second",
            "-o",
            "jsonpath={.status.ready}"
        ]),
        ""
    );
}
