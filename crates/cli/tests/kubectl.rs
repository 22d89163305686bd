//! The real kubectl against a real lariat server: the commands platform engineers type.

mod common;

use common::{SEED_CLUSTER, TestServer, eventually};
use serde_json::Value;

fn json(text: &str) -> Value {
    serde_json::from_str(text).expect("kubectl printed JSON")
}

#[test]
fn seed_cluster_applies_and_prints_like_cluster_api() {
    let server = TestServer::start();
    assert!(
        server
            .apply_ok(&["apply", "-f", "-"], SEED_CLUSTER)
            .contains("cluster.cluster.x-k8s.io/prod-us-east created")
    );
    assert!(
        server
            .apply_ok(&["apply", "-f", "-"], SEED_CLUSTER)
            .contains("unchanged")
    );

    let table = server.kubectl_ok(&["get", "clusters"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert!(
        header.starts_with(&["NAME"]) && header.contains(&"PHASE") && header.contains(&"AGE"),
        "{table}"
    );
    assert!(
        table.lines().nth(1).unwrap().starts_with("prod-us-east"),
        "{table}"
    );

    let object = json(&server.kubectl_ok(&["get", "cluster", "prod-us-east", "-o", "json"]));
    assert_eq!(
        object["spec"]["clusterNetwork"]["pods"]["cidrBlocks"][0],
        "192.168.0.0/16"
    );
    assert_eq!(object["spec"]["infrastructureRef"]["kind"], "AWSCluster");
    assert_eq!(object["metadata"]["generation"], 1);
    assert!(
        object["metadata"]["uid"]
            .as_str()
            .is_some_and(|u| u.len() == 36)
    );
    assert!(
        object["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .is_string()
    );

    let yaml = server.kubectl_ok(&["get", "cl", "-o", "yaml"]);
    assert!(
        yaml.contains("kind: ClusterList") || yaml.contains("kind: List"),
        "{yaml}"
    );
    let wide = server.kubectl_ok(&["get", "clusters", "-o", "wide"]);
    assert!(wide.contains("prod-us-east"));

    // The seed's machine transcript: NAME, CLUSTER, ... PHASE ... VERSION.
    server.apply_ok(
        &["apply", "-f", "-"],
        "apiVersion: cluster.x-k8s.io/v1beta1\nkind: Machine\nmetadata:\n  name: prod-us-east-cp-x7k2l\nspec:\n  clusterName: prod-us-east\n  version: v1.28.5\n  bootstrap:\n    dataSecretName: boot\n  infrastructureRef:\n    apiVersion: infrastructure.cluster.x-k8s.io/v1beta2\n    kind: AWSMachine\n    name: prod-us-east-cp-x7k2l\n",
    );
    let machines = server.kubectl_ok(&["get", "machines"]);
    let header: Vec<&str> = machines
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(&header[..2], ["NAME", "CLUSTER"], "{machines}");
    assert!(
        header.contains(&"PHASE") && header.contains(&"VERSION"),
        "{machines}"
    );
    let row = machines.lines().nth(1).unwrap();
    assert!(
        row.starts_with("prod-us-east-cp-x7k2l")
            && row.contains("prod-us-east")
            && row.contains("v1.28.5"),
        "{machines}"
    );
}

#[test]
fn api_resources_and_explain_come_from_discovery_and_openapi() {
    let server = TestServer::start();
    let resources = server.kubectl_ok(&["api-resources"]);
    for expected in [
        "clusters",
        "machinedeployments",
        "configmaps",
        "customresourcedefinitions",
        "namespaces",
    ] {
        assert!(
            resources.lines().any(|l| l.starts_with(expected)),
            "{expected} missing from:\n{resources}"
        );
    }
    let capi = server.kubectl_ok(&["api-resources", "--categories=cluster-api", "-o", "name"]);
    assert!(capi.contains("machines.cluster.x-k8s.io"), "{capi}");
    let explained = server.kubectl_ok(&["explain", "clusters.spec.clusterNetwork"]);
    assert!(
        explained.contains("KIND:       Cluster") && explained.contains("pods"),
        "{explained}"
    );
    let explained = server.kubectl_ok(&["explain", "configmaps.data"]);
    assert!(explained.contains("ConfigMap"), "{explained}");
}

#[test]
fn server_side_apply_reports_conflicts_and_force_takes_ownership() {
    let server = TestServer::start();
    let manifest = |value: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  k: {value}\n"
        )
    };
    assert!(
        server
            .apply_ok(&["apply", "--server-side", "-f", "-"], &manifest("one"))
            .contains("serverside-applied")
    );
    let output = server.kubectl_stdin(
        &[
            "apply",
            "--server-side",
            "--field-manager",
            "alice",
            "-f",
            "-",
        ],
        &manifest("two"),
    );
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("Apply failed with 1 conflict: conflict with \"kubectl\": .data.k"),
        "{stderr}"
    );
    server.apply_ok(
        &[
            "apply",
            "--server-side",
            "--field-manager",
            "alice",
            "--force-conflicts",
            "-f",
            "-",
        ],
        &manifest("two"),
    );
    let object = json(&server.kubectl_ok(&[
        "get",
        "cm",
        "settings",
        "-o",
        "json",
        "--show-managed-fields",
    ]));
    assert_eq!(object["data"]["k"], "two");
    let managers: Vec<&str> = object["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["manager"].as_str().unwrap())
        .collect();
    assert_eq!(managers, ["alice"], "{object}");
    // Dropping a field from the applied config removes it.
    server.apply_ok(
        &[
            "apply",
            "--server-side",
            "--field-manager",
            "alice",
            "-f",
            "-",
        ],
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  other: x\n",
    );
    let object = json(&server.kubectl_ok(&["get", "cm", "settings", "-o", "json"]));
    assert_eq!(object["data"], serde_json::json!({"other": "x"}));
}

#[test]
fn patch_edit_and_generation() {
    let server = TestServer::start();
    server.apply_ok(&["apply", "-f", "-"], SEED_CLUSTER);
    server.kubectl_ok(&[
        "patch",
        "cluster",
        "prod-us-east",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"paused":true}}"#,
    ]);
    server.kubectl_ok(&[
        "patch",
        "cluster",
        "prod-us-east",
        "--type",
        "json",
        "-p",
        r#"[{"op":"add","path":"/metadata/labels","value":{"env":"prod"}}]"#,
    ]);
    let object = json(&server.kubectl_ok(&["get", "cluster", "prod-us-east", "-o", "json"]));
    assert_eq!(object["spec"]["paused"], true);
    assert_eq!(object["metadata"]["labels"]["env"], "prod");
    assert_eq!(
        object["metadata"]["generation"], 2,
        "labels do not bump generation, spec does"
    );
    // Custom resources refuse strategic merge patch, as in Kubernetes.
    let err = server.kubectl_err(&[
        "patch",
        "cluster",
        "prod-us-east",
        "-p",
        r#"{"spec":{"paused":false}}"#,
    ]);
    assert!(
        err.contains("strategic merge patch is not supported"),
        "{err}"
    );

    let selected = server.kubectl_ok(&["get", "clusters", "-l", "env=prod", "-o", "name"]);
    assert_eq!(selected.trim(), "cluster.cluster.x-k8s.io/prod-us-east");
    assert_eq!(
        server
            .kubectl_ok(&["get", "clusters", "-l", "env=dev", "-o", "name"])
            .trim(),
        ""
    );
    let by_field = server.kubectl_ok(&[
        "get",
        "clusters",
        "--field-selector",
        "metadata.name=prod-us-east",
        "-o",
        "name",
    ]);
    assert_eq!(by_field.trim(), "cluster.cluster.x-k8s.io/prod-us-east");

    let output = server
        .kubectl_command(&["edit", "cluster", "prod-us-east"])
        .env("KUBE_EDITOR", "sed -i s/192.168.0.0/10.42.0.0/")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let object = json(&server.kubectl_ok(&["get", "cluster", "prod-us-east", "-o", "json"]));
    assert_eq!(
        object["spec"]["clusterNetwork"]["pods"]["cidrBlocks"][0],
        "10.42.0.0/16"
    );
    assert_eq!(object["metadata"]["generation"], 3);
    let described = server.kubectl_ok(&["describe", "cluster", "prod-us-east"]);
    assert!(
        described.contains("Name:")
            && described.contains("prod-us-east")
            && described.contains("10.42.0.0/16"),
        "{described}"
    );
}

#[test]
fn status_subresource_and_wait_for_condition() {
    let server = TestServer::start();
    // Paused, so the Cluster controller leaves the status to this test.
    server.apply_ok(
        &["apply", "-f", "-"],
        &SEED_CLUSTER.replace("spec:\n", "spec:\n  paused: true\n"),
    );
    // A status written through the main resource is ignored, as for any CRD with a status subresource.
    server.kubectl_ok(&[
        "patch",
        "cluster",
        "prod-us-east",
        "--type",
        "merge",
        "-p",
        r#"{"status":{"phase":"Bogus"}}"#,
    ]);
    let object = json(&server.kubectl_ok(&["get", "cluster", "prod-us-east", "-o", "json"]));
    assert!(object["status"]["phase"].is_null(), "{object}");
    let mut waiter = server
        .kubectl_command(&[
            "wait",
            "--for=condition=Ready",
            "cluster/prod-us-east",
            "--timeout=20s",
            "-v=6",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The condition is made true only once kubectl watches: what it then sees came from the
    // watch, not from its first GET.
    let log = until_watching(&mut waiter);
    server.kubectl_ok(&[
        "patch", "cluster", "prod-us-east", "--subresource=status", "--type", "merge", "-p",
        r#"{"status":{"phase":"Provisioned","conditions":[{"type":"Ready","status":"True","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}"#,
    ]);
    let output = waiter.wait_with_output().unwrap();
    let log = log.join().unwrap();
    assert!(output.status.success(), "{log}");
    assert!(String::from_utf8_lossy(&output.stdout).contains("condition met"));
    let table = server.kubectl_ok(&["get", "clusters"]);
    assert!(table.contains("Provisioned"), "{table}");
}

#[test]
fn watch_prints_changes_as_they_happen() {
    let server = TestServer::start();
    let mut watcher = server
        .kubectl_command(&["get", "configmaps", "-w", "--request-timeout=4s", "-v=6"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Made once kubectl watches, so that printing it is the watch's doing, not the list's.
    let log = until_watching(&mut watcher);
    server.apply_ok(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: watched\ndata:\n  a: b\n",
    );
    let output = watcher.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("watched"),
        "watch printed: {stdout}\n{}",
        log.join().unwrap()
    );
}

/// Waits (at most 20 s) until a kubectl run with `-v=6` has its watch open: it logs the watch
/// request once the server answers it. Its log is read on; the returned thread ends with it.
fn until_watching(kubectl: &mut std::process::Child) -> std::thread::JoinHandle<String> {
    use std::io::BufRead;
    let stderr = kubectl.stderr.take().unwrap();
    let (opened, open) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut log = String::new();
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if line.contains("watch=true") {
                let _ = opened.send(());
            }
            log.push_str(&line);
            log.push('\n');
        }
        log
    });
    if open
        .recv_timeout(std::time::Duration::from_secs(20))
        .is_err()
    {
        panic!("kubectl opened no watch: {}", reader.join().unwrap());
    }
    reader
}

#[test]
fn finalizers_hold_deletion_until_removed() {
    let server = TestServer::start();
    server.apply_ok(&["apply", "-f", "-"], "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: held\n  finalizers: [example.com/hold]\n");
    server.kubectl_ok(&["delete", "cm", "held", "--wait=false"]);
    let object = json(&server.kubectl_ok(&["get", "cm", "held", "-o", "json"]));
    assert!(object["metadata"]["deletionTimestamp"].is_string());
    server.kubectl_ok(&[
        "patch",
        "cm",
        "held",
        "--type",
        "json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ]);
    let err = server.kubectl_err(&["get", "cm", "held"]);
    assert!(
        err.contains("NotFound") || err.contains("not found"),
        "{err}"
    );
}

fn owner_and_dependent(server: &TestServer, name: &str) {
    server.apply_ok(
        &["apply", "-f", "-"],
        &format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}-owner\n"),
    );
    let uid = server.kubectl_ok(&[
        "get",
        "cm",
        &format!("{name}-owner"),
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    server.apply_ok(
        &["apply", "-f", "-"],
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}-dependent\n  ownerReferences:\n  - apiVersion: v1\n    kind: ConfigMap\n    name: {name}-owner\n    uid: {uid}\n"
        ),
    );
}

fn exists(server: &TestServer, name: &str) -> bool {
    server.kubectl(&["get", "cm", name]).status.success()
}

#[test]
fn garbage_collection_follows_cascade() {
    let server = TestServer::start();
    owner_and_dependent(&server, "bg");
    server.kubectl_ok(&["delete", "cm", "bg-owner"]);
    eventually("the background dependent is collected", || {
        !exists(&server, "bg-dependent")
    });

    owner_and_dependent(&server, "fg");
    server.kubectl_ok(&["delete", "cm", "fg-owner", "--cascade=foreground"]);
    assert!(!exists(&server, "fg-dependent") && !exists(&server, "fg-owner"));

    owner_and_dependent(&server, "or");
    server.kubectl_ok(&["delete", "cm", "or-owner", "--cascade=orphan"]);
    eventually("the orphan owner is gone", || !exists(&server, "or-owner"));
    let orphan = json(&server.kubectl_ok(&["get", "cm", "or-dependent", "-o", "json"]));
    assert!(
        orphan["metadata"]["ownerReferences"]
            .as_array()
            .is_none_or(|r| r.is_empty()),
        "{orphan}"
    );
}

#[test]
fn deleting_a_namespace_deletes_its_contents() {
    let server = TestServer::start();
    server.kubectl_ok(&["create", "namespace", "team-a"]);
    server.apply_ok(&["apply", "-n", "team-a", "-f", "-"], SEED_CLUSTER);
    server.apply_ok(
        &["apply", "-n", "team-a", "-f", "-"],
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n",
    );
    server.kubectl_ok(&["delete", "namespace", "team-a"]);
    assert!(
        !server
            .kubectl(&["get", "namespace", "team-a"])
            .status
            .success()
    );
    assert!(
        !server
            .kubectl(&["get", "cluster", "prod-us-east", "-n", "team-a"])
            .status
            .success()
    );
    let err = server.kubectl_err(&["create", "configmap", "x", "-n", "missing"]);
    assert!(err.contains("not found"), "{err}");
}

#[test]
fn custom_resource_definitions_serve_validated_kinds() {
    let server = TestServer::start();
    let crd = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: Size, type: integer, jsonPath: .spec.size}
    - {name: Color, type: string, jsonPath: .spec.color}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size: {type: integer, minimum: 1, maximum: 10}
              color: {type: string, enum: [red, blue], default: red}
              name: {type: string, pattern: '^[a-z]+$'}
              extra: {type: object, x-kubernetes-preserve-unknown-fields: true}
          status:
            type: object
            properties:
              ready: {type: boolean}
"#;
    server.apply_ok(&["apply", "-f", "-"], crd);
    server.kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "crd/widgets.example.com",
        "--timeout=10s",
    ]);
    server.apply_ok(&["apply", "-f", "-"], "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  size: 3\n  extra: {any: {thing: 1}}\n");
    let table = server.kubectl_ok(&["get", "wd"]);
    assert!(
        table
            .lines()
            .next()
            .unwrap()
            .split_whitespace()
            .eq(["NAME", "SIZE", "COLOR"]),
        "{table}"
    );
    assert!(
        table.contains("w1") && table.contains("red"),
        "defaulted color shows: {table}"
    );

    let output = server.kubectl_stdin(&["apply", "-f", "-"], "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w2\nspec:\n  size: 11\n  color: green\n  name: BAD\n");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    for expected in ["spec.size", "spec.color", "spec.name", "is invalid"] {
        assert!(
            stderr.contains(expected),
            "{expected} missing from: {stderr}"
        );
    }
    let output = server.kubectl_stdin(&["apply", "-f", "-"], "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w3\nspec:\n  size: 1\n  bogus: 1\n");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && stderr.contains("unknown field \"spec.bogus\""),
        "{stderr}"
    );
    let output = server.kubectl_stdin(
        &["apply", "-f", "-"],
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w4\nspec: {}\n",
    );
    assert!(String::from_utf8_lossy(&output.stderr).contains("spec.size: Required value"));

    server.kubectl_ok(&["delete", "crd", "widgets.example.com"]);
    let err = server.kubectl_err(&["get", "widgets.example.com"]);
    assert!(
        err.contains("the server doesn't have a resource type") || err.contains("not find"),
        "{err}"
    );
}

#[test]
fn scale_subresource_moves_replicas() {
    let server = TestServer::start();
    server.apply_ok(
        &["apply", "-f", "-"],
        "apiVersion: cluster.x-k8s.io/v1beta1\nkind: MachineDeployment\nmetadata:\n  name: workers\nspec:\n  clusterName: prod\n  replicas: 3\n  selector:\n    matchLabels: {pool: a}\n  template:\n    metadata:\n      labels: {pool: a}\n    spec:\n      clusterName: prod\n      bootstrap: {dataSecretName: boot}\n      infrastructureRef: {apiVersion: infrastructure.cluster.x-k8s.io/v1beta1, kind: InMemoryMachineTemplate, name: t}\n",
    );
    server.kubectl_ok(&["scale", "machinedeployment", "workers", "--replicas=5"]);
    assert_eq!(
        server.kubectl_ok(&["get", "md", "workers", "-o", "jsonpath={.spec.replicas}"]),
        "5"
    );
}

#[test]
fn secrets_are_encrypted_at_rest() {
    let server = TestServer::start();
    server.kubectl_ok(&[
        "create",
        "secret",
        "generic",
        "aws-creds",
        "--from-literal=secret-access-key=wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY",
    ]);
    let value = server.kubectl_ok(&[
        "get",
        "secret",
        "aws-creds",
        "-o",
        "jsonpath={.data.secret-access-key}",
    ]);
    assert_eq!(
        value,
        "d0phbHJYVXRuRkVNSUs3TURFTkdiUHhSZmlDWUVYQU1QTEVLRVk="
    );
    server.apply_ok(&["apply", "-f", "-"], "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: visible\ndata:\n  note: PLAINTEXT-MARKER\n");
    let mut stored = Vec::new();
    for entry in std::fs::read_dir(server.data_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("state.db")
        {
            stored.extend(std::fs::read(&path).unwrap());
        }
    }
    let contains = |needle: &str| stored.windows(needle.len()).any(|w| w == needle.as_bytes());
    assert!(
        contains("PLAINTEXT-MARKER"),
        "the check reads the files the store writes"
    );
    assert!(
        !contains("d0phbHJYVXRuRkVNSUs3TURFTkdiUHhSZmlDWUVYQU1QTEVLRVk="),
        "a Secret's data is stored in the clear"
    );
    assert!(
        !contains("aws-creds\""),
        "a Secret's JSON is stored in the clear"
    );
}

/// Manifests written against upstream Cluster API apply unchanged (issue 41): what upstream's
/// schema does not require is not required, and what its defaulting webhooks fill in (a
/// MachineDeployment's or MachineSet's selector, a version's `v`, the cluster-name label) is
/// filled in before the schema runs. The CRDs served carry no `null` in an enum, as upstream's
/// do not, so they install on a real kube-apiserver.
#[test]
fn upstream_cluster_api_manifests_apply_unchanged() {
    let server = TestServer::start();
    server.apply_ok(
        &["apply", "-f", "-"],
        r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: InMemoryCluster
metadata: {name: bare}
---
apiVersion: cluster.x-k8s.io/v1beta1
kind: MachineDeployment
metadata: {name: md}
spec:
  clusterName: bare
  template:
    spec:
      clusterName: bare
      version: 1.30.2
      bootstrap: {dataSecretName: none}
      infrastructureRef: {apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1, kind: InMemoryMachineTemplate, name: t}
---
apiVersion: cluster.x-k8s.io/v1beta1
kind: MachineSet
metadata: {name: ms}
spec:
  clusterName: bare
  template:
    spec:
      clusterName: bare
      bootstrap: {dataSecretName: none}
      infrastructureRef: {apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1, kind: InMemoryMachineTemplate, name: t}
---
apiVersion: cluster.x-k8s.io/v1beta1
kind: MachineHealthCheck
metadata: {name: mhc}
spec:
  clusterName: bare
  selector: {matchLabels: {pool: a}}
---
apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3
kind: Provider
metadata: {name: ipam-in-cluster, namespace: default}
type: IPAMProvider
providerName: in-cluster
version: v1.0.0
"#,
    );
    let get = |what: &[&str]| json(&server.kubectl_ok(&[&["get"], what, &["-o", "json"]].concat()));
    assert_eq!(
        get(&["inmemorycluster", "bare"])["spec"],
        serde_json::json!({})
    );
    let md = get(&["machinedeployment", "md"]);
    let wanted = serde_json::json!({
        "cluster.x-k8s.io/cluster-name": "bare",
        "cluster.x-k8s.io/deployment-name": "md",
    });
    assert_eq!(md["spec"]["selector"]["matchLabels"], wanted, "{md}");
    assert_eq!(md["spec"]["template"]["metadata"]["labels"], wanted, "{md}");
    assert_eq!(md["spec"]["template"]["spec"]["version"], "v1.30.2");
    assert_eq!(
        md["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"],
        "bare"
    );
    let ms = get(&["machineset", "ms"]);
    assert_eq!(
        ms["spec"]["selector"]["matchLabels"],
        serde_json::json!({"cluster.x-k8s.io/set-name": "ms"}),
        "{ms}"
    );
    // A MachineHealthCheck's selector may change; one that selects another cluster may not.
    server.kubectl_ok(&[
        "patch",
        "mhc",
        "mhc",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"selector":{"matchLabels":{"pool":"b"}}}}"#,
    ]);
    let refused = server.kubectl_err(&[
        "patch",
        "mhc",
        "mhc",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"selector":{"matchLabels":{"cluster.x-k8s.io/cluster-name":"other"}}}}"#,
    ]);
    assert!(refused.contains("must match spec.clusterName"), "{refused}");

    let crds = server.kubectl_ok(&["get", "crds", "-o", "json"]);
    fn null_enums(node: &Value, path: &str, found: &mut Vec<String>) {
        match node {
            Value::Object(fields) => {
                if let Some(Value::Array(values)) = fields.get("enum")
                    && values.iter().any(Value::is_null)
                {
                    found.push(path.to_string());
                }
                for (key, value) in fields {
                    null_enums(value, &format!("{path}.{key}"), found);
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    null_enums(item, &format!("{path}[{i}]"), found);
                }
            }
            _ => {}
        }
    }
    let mut found = vec![];
    null_enums(&json(&crds), "", &mut found);
    assert!(found.is_empty(), "enums with null: {found:?}");
    assert!(crds.contains("\"ImagePullPolicy\"") || crds.contains("IfNotPresent"));
}
