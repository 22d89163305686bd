//! `lariat move` between two real lariat servers, driven as a user drives it: in-memory
//! clusters (control plane, machine deployment, health check), the preflight naming a custom
//! kind's objects tied to them, a CLI killed halfway then resumed or aborted, and a backup
//! directory restored into a fresh server.

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};

use common::{TestServer, eventually, generate_cluster};
use serde_json::Value;

const CAPI_KINDS: &str = "clusters,machines,machinesets,machinedeployments,machinehealthchecks,kubeadmcontrolplanes,kubeadmconfigs,kubeadmconfigtemplates,inmemoryclusters,inmemorymachines,inmemorymachinetemplates";

const HEALTH_CHECK: &str = r#"apiVersion: cluster.x-k8s.io/v1beta1
kind: MachineHealthCheck
metadata: {name: dev-workers}
spec:
  clusterName: dev
  selector: {matchLabels: {cluster.x-k8s.io/deployment-name: dev-md-0}}
  unhealthyConditions: [{type: Ready, status: "False", timeout: 300s}]
"#;

fn crd(kind: &str) -> String {
    let plural = format!("{}s", kind.to_lowercase());
    format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: {plural}.example.com}}
spec:
  group: example.com
  scope: Namespaced
  names: {{kind: {kind}, plural: {plural}, singular: {singular}, listKind: {kind}List}}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {{type: object, x-kubernetes-preserve-unknown-fields: true}}
"#,
        singular = kind.to_lowercase()
    )
}

/// A cluster `dev` in `namespace` with one control-plane machine, two workers and a
/// health check, all Running.
fn provision(server: &TestServer, namespace: &str) {
    if namespace != "default" {
        server.kubectl_ok(&["create", "namespace", namespace]);
    }
    let manifests = generate_cluster(&["dev", "-n", namespace, "--worker-machine-count", "2"]);
    server.apply_ok(&["apply", "-f", "-"], &manifests);
    server.apply_ok(&["apply", "-n", namespace, "-f", "-"], HEALTH_CHECK);
    eventually("the cluster is Provisioned with 3 machines Running", || {
        let machines = machines(server, namespace);
        server.kubectl_ok(&[
            "get",
            "cluster",
            "dev",
            "-n",
            namespace,
            "-o",
            "jsonpath={.status.phase}",
        ]) == "Provisioned"
            && machines.len() == 3
            && machines.iter().all(|m| m.1 == "Running")
    });
}

/// Each Machine's name, phase and providerID.
fn machines(server: &TestServer, namespace: &str) -> BTreeSet<(String, String, String)> {
    let list: Value = serde_json::from_str(
        &server.kubectl_ok(&["get", "machines", "-n", namespace, "-o", "json"]),
    )
    .unwrap();
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
            (
                text(&m["metadata"]["name"]),
                text(&m["status"]["phase"]),
                text(&m["spec"]["providerID"]),
            )
        })
        .collect()
}

/// Waits until the controller of `resource` `name` has ended a pass that began after this
/// call. A pass ends by writing the status it worked out, so an `observedGeneration` taken
/// out is back once one has ended; a pass under way already may be the one that puts it
/// back, so it is taken out twice: the second time, one that began after the first does.
fn after_a_whole_pass(server: &TestServer, namespace: &str, resource: &str, name: &str) {
    for _ in 0..2 {
        server.kubectl_ok(&[
            "patch",
            resource,
            name,
            "-n",
            namespace,
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"observedGeneration":null}}"#,
        ]);
        eventually(&format!("a pass of {resource} {name} ends"), || {
            !server
                .kubectl_ok(&[
                    "get",
                    resource,
                    name,
                    "-n",
                    namespace,
                    "-o",
                    "jsonpath={.status.observedGeneration}",
                ])
                .is_empty()
        });
    }
}

fn names(server: &TestServer, namespace: &str, kinds: &str) -> BTreeSet<String> {
    server
        .kubectl_ok(&["get", kinds, "-n", namespace, "-o", "name"])
        .lines()
        .map(str::to_string)
        .collect()
}

fn lariat_move(source: &TestServer, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lariat"))
        .arg("move")
        .arg("--kubeconfig")
        .arg(source.kubeconfig())
        .args(args)
        .output()
        .expect("run lariat move")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn json(server: &TestServer, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.extend(["-o", "json"]);
    serde_json::from_str(&server.kubectl_ok(&args)).unwrap()
}

#[test]
fn a_namespace_moves_with_what_the_preflight_names_and_the_target_takes_over() {
    let source = TestServer::start();
    let target = TestServer::start();
    source.init_inmemory();
    target.init_inmemory();
    provision(&source, "prod");
    for kind in ["Widget", "Gadget"] {
        source.apply_ok(&["apply", "-f", "-"], &crd(kind));
    }
    let before = machines(&source, "prod");
    let (machine, ..) = before.iter().next().unwrap().clone();
    let uid_of = |resource: &str, name: &str| {
        source.kubectl_ok(&[
            "get",
            resource,
            name,
            "-n",
            "prod",
            "-o",
            "jsonpath={.metadata.uid}",
        ])
    };
    let machine_uid = uid_of("machine", &machine);
    source.apply_ok(
        &["apply", "-n", "prod", "-f", "-"],
        &format!(
            "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\n  ownerReferences: [{{apiVersion: cluster.x-k8s.io/v1beta1, kind: Machine, name: {machine}, uid: {machine_uid}}}]\nspec: {{size: 3}}\n---\napiVersion: example.com/v1\nkind: Gadget\nmetadata: {{name: g1}}\nspec: {{clusterName: dev}}\n"
        ),
    );
    // A Gadget tied to the move only through g1: one dry run names it too.
    let gadget_uid = uid_of("gadget", "g1");
    source.apply_ok(
        &["apply", "-n", "prod", "-f", "-"],
        &format!(
            "apiVersion: example.com/v1\nkind: Gadget\nmetadata:\n  name: g2\n  ownerReferences: [{{apiVersion: example.com/v1, kind: Gadget, name: g1, uid: {gadget_uid}}}]\n"
        ),
    );
    // A ConfigMap g2 owns: it moves with g2, and the dry run says so.
    let g2_uid = uid_of("gadget", "g2");
    source.apply_ok(
        &["apply", "-n", "prod", "-f", "-"],
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: g2-data\n  ownerReferences: [{{apiVersion: example.com/v1, kind: Gadget, name: g2, uid: {g2_uid}}}]\n"
        ),
    );
    // The source records a provider none of prod's objects need (as a refused
    // `lariat init --infrastructure aws` leaves it): the move does not ask the target for it.
    source.apply_ok(
        &["apply", "-f", "-"],
        "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Provider\nmetadata: {name: infrastructure-aws, namespace: lariat-system}\ntype: InfrastructureProvider\nproviderName: aws\nversion: v0.0.1\n",
    );
    // Two imported clusters: one whose agent is connected, one whose agent is gone.
    let downstream = TestServer::start();
    let dark_downstream = TestServer::start();
    let source_url = format!("https://{}", source.address);
    let agent = |name: &str, downstream: &TestServer| {
        let (token, checksum) =
            common::import_cluster_with(&source, &[name, "-n", "prod", "--ttl", "1h"]);
        let agent = common::Agent::start(
            source.data_dir(),
            name,
            &source_url,
            &token,
            &checksum,
            downstream,
        );
        eventually("the imported cluster's agent connects", || {
            source
                .kubectl(&[
                    "get",
                    "clusterconnection",
                    name,
                    "-n",
                    "prod",
                    "-o",
                    "jsonpath={.status.connected}",
                ])
                .stdout
                == b"true"
        });
        agent
    };
    let edge_agent = agent("edge", &downstream);
    drop(agent("dark", &dark_downstream));
    eventually("the source sees the dark cluster's agent gone", || {
        source
            .kubectl(&[
                "get",
                "clusterconnection",
                "dark",
                "-n",
                "prod",
                "-o",
                "jsonpath={.status.connected}",
            ])
            .stdout
            != b"true"
    });
    let to = target.kubeconfig();
    let to = to.to_str().unwrap();

    // The dry run names both objects, where they point, and the command that would pass.
    let dry = lariat_move(&source, &["--to-kubeconfig", to, "-n", "prod", "--dry-run"]);
    let printed = text(&dry);
    assert!(dry.status.success(), "{printed}");
    assert!(
        printed.contains(&format!(
            "Widget/w1 is owned by Machine/{machine} at metadata.ownerReferences[0]"
        )),
        "{printed}"
    );
    assert!(
        printed.contains("Gadget/g1 references Cluster/dev at spec.clusterName"),
        "{printed}"
    );
    assert!(
        printed.contains("Gadget/g2 is owned by Gadget/g1 at metadata.ownerReferences[0]"),
        "{printed}"
    );
    assert!(
        printed.contains("--include Gadget/g1 --include Gadget/g2 --include Widget/w1"),
        "{printed}"
    );
    assert!(!printed.contains("aws"), "{printed}");
    assert!(
        printed.contains("takes these along too (what they own):\n  ConfigMap/g2-data"),
        "{printed}"
    );
    assert!(
        printed.contains("KubeadmControlPlane/dev-control-plane")
            && printed.contains("MachineHealthCheck/dev-workers"),
        "{printed}"
    );

    // Without a choice for them, nothing starts and nothing changes.
    let refused = lariat_move(&source, &["--to-kubeconfig", to, "-n", "prod"]);
    assert!(!refused.status.success());
    assert!(
        text(&refused).contains("3 objects are tied to the move: --include or --leave each"),
        "{}",
        text(&refused)
    );
    // Included, but the target lacks their kinds: refused by name.
    let includes = ["--include", "gadgets", "--include", "widgets"];
    let refused = lariat_move(
        &source,
        &[&["--to-kubeconfig", to, "-n", "prod"][..], &includes].concat(),
    );
    assert!(!refused.status.success());
    assert!(
        text(&refused).contains("the target does not serve example.com/v1 Widget"),
        "{}",
        text(&refused)
    );
    assert_ne!(
        source.kubectl_ok(&[
            "get",
            "cluster",
            "dev",
            "-n",
            "prod",
            "-o",
            "jsonpath={.spec.paused}"
        ]),
        "true"
    );
    assert!(
        !source
            .kubectl(&["get", "configmap", "lariat-move", "-n", "prod"])
            .status
            .success()
    );

    for kind in ["Widget", "Gadget"] {
        target.apply_ok(&["apply", "-f", "-"], &crd(kind));
    }
    // dana reaches edge through a ClusterRoleTemplateBinding, which moves with it.
    source.apply_ok(
        &["apply", "-f", "-"],
        "apiVersion: management.cattle.io/v3\nkind: ClusterRoleTemplateBinding\nmetadata: {name: dana-edge, namespace: prod}\nclusterName: edge\nroleTemplateName: cluster-member\nuserName: dana\n",
    );
    let includes = [&includes[..], &["--include", "clusterroletemplatebindings"]].concat();
    let moved = lariat_move(
        &source,
        &[&["--to-kubeconfig", to, "-n", "prod"][..], &includes].concat(),
    );
    assert!(moved.status.success(), "{}", text(&moved));
    let printed = text(&moved);
    assert!(printed.contains("Moved 34 objects"), "{printed}");
    // The connected agent followed; the other is named, with the command that brings it back.
    assert!(
        printed.contains("Agent of Cluster/edge connected to the target"),
        "{printed}"
    );
    assert!(
        printed.contains("Agent of Cluster/dark did not follow (")
            && printed.contains("lariat cluster import dark -n prod --kubeconfig TARGET"),
        "{printed}"
    );

    // The source keeps nothing of it.
    assert!(names(&source, "prod", &format!("{CAPI_KINDS},widgets,gadgets")).is_empty());
    assert!(
        source
            .kubectl_ok(&[
                "get",
                "secrets,configmaps",
                "-n",
                "prod",
                "-l",
                "cluster.x-k8s.io/cluster-name",
                "-o",
                "name"
            ])
            .trim()
            .is_empty()
    );
    assert!(
        !source
            .kubectl(&["get", "configmap", "lariat-move", "-n", "prod"])
            .status
            .success()
    );

    // Its users are told where it went: an admin, and a user whose bindings moved with it.
    let gone = source.kubectl(&["get", "--raw", "/k8s/clusters/prod/edge/api/v1/namespaces"]);
    let told = format!(
        "cluster prod/edge was moved to the management server https://{}",
        target.address
    );
    assert!(!gone.status.success());
    assert!(
        String::from_utf8_lossy(&gone.stderr).contains(&told),
        "{}",
        String::from_utf8_lossy(&gone.stderr)
    );
    let user = |name: &str| {
        let token = source.lariat(&["token", "create", "--user", name, "--print-kubeconfig"]);
        assert!(token.status.success());
        let path = source.dir.path().join(format!("{name}.yaml"));
        std::fs::write(&path, &token.stdout).unwrap();
        path
    };
    let (dana, eve) = (user("dana"), user("eve"));
    let refused = source.kubectl_as(
        &dana,
        &["get", "--raw", "/k8s/clusters/prod/edge/api/v1/namespaces"],
    );
    let refused = String::from_utf8_lossy(&refused.stderr);
    assert!(
        refused.contains("Forbidden") && refused.contains(&told),
        "{refused}"
    );
    // Eve, whom no moved binding named, learns nothing of it.
    let refused = source.kubectl_as(
        &eve,
        &["get", "--raw", "/k8s/clusters/prod/edge/api/v1/namespaces"],
    );
    let refused = String::from_utf8_lossy(&refused.stderr);
    assert!(
        refused.contains("Forbidden") && !refused.contains("moved"),
        "{refused}"
    );
    // The record is where only administrators write; one made in the namespace (by anyone
    // who may write ConfigMaps there) is not read. A cluster that never was here is refused
    // as before, naming nothing.
    source.kubectl_ok(&[
        "get",
        "configmap",
        "lariat-moved-prod",
        "-n",
        "lariat-system",
    ]);
    source.kubectl_ok(&[
        "create",
        "configmap",
        "lariat-moved",
        "-n",
        "prod",
        r#"--from-literal=nowhere={"server":"https://evil.example","movedAt":"2026-01-01T00:00:00Z"}"#,
    ]);
    let never = source.kubectl_as(
        &dana,
        &[
            "get",
            "--raw",
            "/k8s/clusters/prod/nowhere/api/v1/namespaces",
        ],
    );
    assert!(!String::from_utf8_lossy(&never.stderr).contains("moved"));

    // The target has the same machines, the custom objects, and owners under their new uids.
    assert_eq!(machines(&target, "prod"), before);
    let widget = json(&target, &["get", "widget", "w1", "-n", "prod"]);
    let new_uid = target.kubectl_ok(&[
        "get",
        "machine",
        &machine,
        "-n",
        "prod",
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    assert_ne!(new_uid, machine_uid);
    assert_eq!(
        widget["metadata"]["ownerReferences"][0]["uid"],
        new_uid.as_str()
    );
    assert_eq!(widget["spec"]["size"], 3);
    assert_eq!(
        json(&target, &["get", "gadget", "g1", "-n", "prod"])["spec"]["clusterName"],
        "dev"
    );
    let cluster = json(&target, &["get", "cluster", "dev", "-n", "prod"]);
    assert_ne!(cluster["spec"]["paused"], true, "unpaused at the end");

    // The imported cluster is reached through the target now, by an agent that keeps its new
    // server in its own cluster (a restart goes there too).
    assert!(
        target
            .kubectl_ok(&["get", "--raw", "/k8s/clusters/prod/edge/api/v1/namespaces"])
            .contains("lariat-system")
    );
    assert_eq!(
        common::agent_kept(&downstream, "server"),
        format!("https://{}", target.address)
    );
    assert!(
        edge_agent.log().contains("handed off to another server"),
        "{}",
        edge_agent.log()
    );
    // The handoff is the Cluster's `handoff` subresource, POST only: a proxied GET of it is
    // refused, and a user who may use the proxy may not hand the agent off.
    let refused = target.kubectl(&[
        "get",
        "--raw",
        "/k8s/clusters/prod/edge/lariat-agent/v1/handoff",
    ]);
    assert!(!refused.status.success());

    // Its controllers take over: the agent of the in-memory cluster connects to the target,
    // the Nodes are there through its kubeconfig, and no machine is made or removed.
    eventually("the cluster's agent connects to the target", || {
        let connected = target.kubectl(&[
            "get",
            "clusterconnection",
            "dev",
            "-n",
            "prod",
            "-o",
            "jsonpath={.status.connected}",
        ]);
        connected.stdout == b"true"
    });
    let kubeconfig = target.workload_kubeconfig_in("prod", "dev");
    eventually(
        "the workload cluster's three Nodes are Ready through the target",
        || {
            let nodes = target.kubectl_as(&kubeconfig, &["get", "nodes", "--no-headers"]);
            let nodes = String::from_utf8_lossy(&nodes.stdout).to_string();
            nodes.lines().count() == 3 && nodes.lines().all(|l| l.contains(" Ready "))
        },
    );
    // The machines' owners there have each ended a pass over them since, making or removing
    // none.
    let machine_set = target.kubectl_ok(&[
        "get",
        "machinesets",
        "-n",
        "prod",
        "-o",
        "jsonpath={.items[0].metadata.name}",
    ]);
    after_a_whole_pass(&target, "prod", "machineset", &machine_set);
    after_a_whole_pass(&target, "prod", "kubeadmcontrolplane", "dev-control-plane");
    assert_eq!(
        machines(&target, "prod"),
        before,
        "no machine created or deleted"
    );
    let set = json(&target, &["get", "machinesets", "-n", "prod"]);
    assert_eq!(set["items"][0]["status"]["readyReplicas"], 2);
}

/// Runs `lariat move ARGS` and kills it with SIGKILL once it prints a line starting with
/// `at`.
fn kill_move_at(source: &TestServer, args: &[&str], at: &str) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lariat"))
        .arg("move")
        .arg("--kubeconfig")
        .arg(source.kubeconfig())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut seen = String::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        seen.push_str(&line);
        seen.push('\n');
        if line.starts_with(at) {
            child.kill().unwrap();
            break;
        }
    }
    child.wait().unwrap();
    seen
}

#[test]
fn a_move_killed_halfway_is_undone_by_abort_or_finished_by_running_it_again() {
    let source = TestServer::start();
    let target = TestServer::start();
    source.init_inmemory();
    target.init_inmemory();
    provision(&source, "default");
    let before = machines(&source, "default");
    let objects = names(&source, "default", CAPI_KINDS);
    let to = target.kubeconfig();
    let args = ["--to-kubeconfig", to.to_str().unwrap()];

    // A target user who may only read there is refused before anything is written.
    let token = target.lariat(&[
        "token",
        "create",
        "--user",
        "reader",
        "--group",
        "readers",
        "--ttl",
        "1h",
        "--print-kubeconfig",
    ]);
    assert!(token.status.success(), "{}", text(&token));
    let reader = target.data_dir().join("reader.yaml");
    std::fs::write(&reader, &token.stdout).unwrap();
    target.kubectl_ok(&[
        "create",
        "clusterrolebinding",
        "readers-view",
        "--clusterrole",
        "view",
        "--group",
        "readers",
    ]);
    let refused = lariat_move(&source, &["--to-kubeconfig", reader.to_str().unwrap()]);
    assert!(!refused.status.success());
    assert!(
        text(&refused).contains("the target's user may not create clusters in namespace default"),
        "{}",
        text(&refused)
    );
    assert!(
        !source
            .kubectl(&["get", "configmap", "lariat-move"])
            .status
            .success()
    );

    // Killed while copying: the journal and the paused cluster are in the source.
    let seen = kill_move_at(&source, &args, "Creating");
    assert!(seen.contains("Journal written"), "{seen}");
    assert_eq!(
        source.kubectl_ok(&["get", "cluster", "dev", "-o", "jsonpath={.spec.paused}"]),
        "true"
    );
    assert!(
        source
            .kubectl(&["get", "configmap", "lariat-move"])
            .status
            .success()
    );
    // Another target is refused while it is under way.
    let other = TestServer::start();
    let refused = lariat_move(
        &source,
        &["--to-kubeconfig", other.kubeconfig().to_str().unwrap()],
    );
    assert!(
        text(&refused).contains("is under way: rerun it with that server's kubeconfig"),
        "{}",
        text(&refused)
    );

    // --abort: the target loses what the move made, the source is as it was.
    let aborted = lariat_move(&source, &[&args[..], &["--abort"]].concat());
    assert!(aborted.status.success(), "{}", text(&aborted));
    assert!(names(&target, "default", CAPI_KINDS).is_empty());
    assert!(
        target
            .kubectl_ok(&[
                "get",
                "secrets",
                "-l",
                "cluster.x-k8s.io/cluster-name",
                "-o",
                "name"
            ])
            .trim()
            .is_empty()
    );
    assert_ne!(
        source.kubectl_ok(&["get", "cluster", "dev", "-o", "jsonpath={.spec.paused}"]),
        "true"
    );
    assert!(
        !source
            .kubectl(&["get", "configmap", "lariat-move"])
            .status
            .success()
    );
    assert_eq!(names(&source, "default", CAPI_KINDS), objects);
    let again = lariat_move(&source, &[&args[..], &["--abort"]].concat());
    assert!(
        text(&again).contains("no move of namespace default is under way"),
        "{}",
        text(&again)
    );

    // Killed again, later; the same command again finishes it, with nothing twice.
    kill_move_at(&source, &args, "Verifying");
    let resumed = lariat_move(&source, &args);
    assert!(resumed.status.success(), "{}", text(&resumed));
    assert!(
        text(&resumed).contains("Resuming the move of namespace default"),
        "{}",
        text(&resumed)
    );
    assert_eq!(names(&target, "default", CAPI_KINDS), objects);
    assert_eq!(machines(&target, "default"), before);
    assert!(names(&source, "default", CAPI_KINDS).is_empty());
    assert!(
        !source
            .kubectl(&["get", "configmap", "lariat-move"])
            .status
            .success()
    );
    eventually("the target's cluster is Ready", || {
        common::cluster_condition(&target, "dev", "Ready") == "True"
    });
    assert_eq!(
        machines(&target, "default"),
        before,
        "no machine created or deleted"
    );
}

#[test]
fn a_backup_directory_restores_the_same_graph_into_a_fresh_server() {
    let source = TestServer::start();
    source.init_inmemory();
    provision(&source, "default");
    let before = machines(&source, "default");
    let objects = names(&source, "default", CAPI_KINDS);
    let directory = tempfile::tempdir().unwrap();
    let dir = directory.path().to_str().unwrap();

    let backup = lariat_move(&source, &["--to-directory", dir]);
    assert!(backup.status.success(), "{}", text(&backup));
    let files = std::fs::read_dir(dir).unwrap().count();
    assert!(
        text(&backup).contains(&format!("Wrote {files} objects")),
        "{}",
        text(&backup)
    );
    assert!(
        std::path::Path::new(dir)
            .join("Cluster_default_dev.yaml")
            .exists()
    );
    // A backup leaves the source running, unpaused.
    assert_eq!(names(&source, "default", CAPI_KINDS), objects);
    assert_ne!(
        source.kubectl_ok(&["get", "cluster", "dev", "-o", "jsonpath={.spec.paused}"]),
        "true"
    );

    let fresh = TestServer::start();
    fresh.init_inmemory();
    let restored = lariat_move(&fresh, &["--from-directory", dir]);
    assert!(restored.status.success(), "{}", text(&restored));
    assert_eq!(names(&fresh, "default", CAPI_KINDS), objects);
    assert_eq!(machines(&fresh, "default"), before);
    // Every owner reference names an object of the fresh server, by its new uid.
    let all = json(&fresh, &["get", &format!("{CAPI_KINDS},secrets")]);
    let uids: BTreeSet<&str> = all["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|o| o["metadata"]["uid"].as_str())
        .collect();
    for object in all["items"].as_array().unwrap() {
        for owner in object["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
        {
            assert!(
                uids.contains(owner["uid"].as_str().unwrap()),
                "{} owned by a uid not in the fresh server",
                object["metadata"]["name"]
            );
        }
    }
    eventually("the restored cluster is Ready", || {
        common::cluster_condition(&fresh, "dev", "Ready") == "True"
    });
    assert_eq!(
        machines(&fresh, "default"),
        before,
        "no machine created or deleted"
    );

    // A directory that is not a backup is refused with what to pass.
    let empty = tempfile::tempdir().unwrap();
    let refused = lariat_move(
        &fresh,
        &["--from-directory", empty.path().to_str().unwrap()],
    );
    assert!(!refused.status.success());
    assert!(
        text(&refused).contains("holds no objects"),
        "{}",
        text(&refused)
    );
}
