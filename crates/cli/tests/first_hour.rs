//! What a newcomer meets in the first hour, each fault they tripped over pinned: versions,
//! kubeconfigs for clusters that never connected, the address remote clusters dial, the
//! CLUSTER column, simulated clusters that look like real ones to kubectl, plain log files.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{TestServer, eventually_within, small_inmemory_cluster};

fn stdout(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).trim().to_string()
}

#[test]
fn versions_kubeconfigs_and_the_address_remote_clusters_dial() {
    let server = TestServer::start();

    let version = server.lariat(&["version"]);
    assert!(version.status.success(), "{}", stderr(&version));
    let text = stdout(&version);
    assert!(text.contains("Client Version: lariat 0.1.0"), "{text}");
    assert!(
        text.contains("Server Version: lariat 0.1.0 (Kubernetes API v1."),
        "{text}"
    );

    // Import on a loopback address warns, and says how to fix it.
    let import = server.lariat(&["cluster", "import", "edge"]);
    assert!(import.status.success());
    assert!(
        stderr(&import).contains("loopback address") && stderr(&import).contains("--advertise-url"),
        "{}",
        stderr(&import)
    );
    // A kubeconfig for a cluster whose agent never connected: one line that says why.
    let kubeconfig = server.lariat(&["kubeconfig", "edge"]);
    assert!(!kubeconfig.status.success());
    assert!(
        stderr(&kubeconfig).starts_with("error: cluster default/edge has never connected")
            && stderr(&kubeconfig).lines().count() == 1,
        "{}",
        stderr(&kubeconfig)
    );
    // A typo in `kind:` says so, as against any Kubernetes API server (kubectl reads the
    // OpenAPI v2 document in protobuf for its client-side validation).
    let typo = server.kubectl_stdin(
        &["apply", "-f", "-"],
        &common::SEED_CLUSTER.replace("kind: Cluster\n", "kind: Clustr\n"),
    );
    let said = stderr(&typo);
    assert!(
        !typo.status.success() && said.contains(r#"no matches for kind "Clustr""#),
        "{said}"
    );
    // A second client-side apply (kubectl fetches the v2 document to build its patch).
    server.apply_ok(&["apply", "-f", "-"], common::SEED_CLUSTER);
    let changed = common::SEED_CLUSTER.replace("192.168.0.0/16", "10.0.0.0/16");
    server.apply_ok(&["apply", "-f", "-"], &changed);
    let bearer = format!("Authorization: Bearer {}", server.admin_token());
    let (code, body) = server.curl_with(
        &[
            "-H",
            "Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
            "-H",
            &bearer,
        ],
        &format!("https://{}/openapi/v2", server.address),
        None,
    );
    assert_eq!(code, 200);
    assert!(body.contains("io.x-k8s.cluster.v1beta1.Cluster"));

    // The kinds lariat serves are listed as CRDs, as on a Cluster API management cluster,
    // and cannot be deleted or redefined.
    let crds = server.kubectl_ok(&["get", "crds", "-o", "name"]);
    for crd in [
        "clusters.cluster.x-k8s.io",
        "kubeadmcontrolplanes.controlplane.cluster.x-k8s.io",
        "inmemoryclusters.infrastructure.cluster.x-k8s.io",
        "clusterregistrationtokens.management.lariat.dev",
    ] {
        assert!(crds.contains(crd), "{crd} in\n{crds}");
    }
    let established = server.kubectl_ok(&[
        "get",
        "crd",
        "clusters.cluster.x-k8s.io",
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"Established\")].status}",
    ]);
    assert_eq!(established, "True");
    let refused = server.kubectl_err(&["delete", "crd", "clusters.cluster.x-k8s.io"]);
    assert!(
        refused.contains("lariat serves this kind itself"),
        "{refused}"
    );
    assert!(server.kubectl(&["get", "clusters"]).status.success());

    // kubectl's own questions about the caller.
    assert_eq!(
        server
            .kubectl_ok(&["auth", "can-i", "create", "clusters"])
            .trim(),
        "yes"
    );
    let whoami = server.kubectl_ok(&["auth", "whoami"]);
    assert!(
        whoami.contains("lariat-admin") && whoami.contains("system:masters"),
        "{whoami}"
    );
    let log = server.log();
    assert!(
        !log.contains('\u{1b}'),
        "no colour escape codes in a log file"
    );
}

/// Events expire after `--event-ttl`, as kube-apiserver's do, counted from when each was
/// last seen.
#[test]
fn events_expire() {
    let server = TestServer::start_with(&["--event-ttl", "2s"]);
    let at = |time: chrono::DateTime<chrono::Utc>| {
        time.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    };
    let now = chrono::Utc::now();
    // Last seen 10 s from now: present while this test looks (creating it may take seconds on
    // a loaded machine), gone 2 s after that.
    for (name, message, seen) in [
        (
            "old.1",
            "seen once",
            at(now + chrono::Duration::seconds(10)),
        ),
        // Last seen an hour from now (a clock ahead): not expired by the time the first is.
        (
            "later.1",
            "seen later",
            at(now + chrono::Duration::hours(1)),
        ),
    ] {
        server.apply_ok(
            &["create", "-f", "-"],
            &format!(
                "apiVersion: v1\nkind: Event\nmetadata: {{name: {name}}}\ninvolvedObject: {{kind: ConfigMap, name: x, namespace: default}}\nreason: Test\nmessage: {message}\ntype: Normal\nlastTimestamp: \"{seen}\"\n"
            ),
        );
    }
    assert!(server.kubectl_ok(&["get", "events"]).contains("seen once"));
    eventually_within(Duration::from_secs(40), "the event expires", || {
        !server.kubectl_ok(&["get", "events"]).contains("seen once")
    });
    assert!(
        server.kubectl_ok(&["get", "events"]).contains("seen later"),
        "an Event last seen after the cutoff stays"
    );
}

#[test]
fn an_advertised_url_is_what_remote_clusters_are_told() {
    let bad = Command::new(env!("CARGO_BIN_EXE_lariat"))
        .args([
            "server",
            "--listen",
            "127.0.0.1:0",
            "--advertise-url",
            "http://x/path",
        ])
        .arg("--data-dir")
        .arg(tempfile::tempdir().unwrap().path())
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(
        stderr(&bad).contains("invalid --advertise-url"),
        "{}",
        stderr(&bad)
    );

    let server = TestServer::start_with(&["--advertise-url", "https://lariat.example.com:7443"]);
    let import = server.lariat(&["cluster", "import", "edge"]);
    assert!(import.status.success());
    let printed = stdout(&import);
    assert!(
        printed.contains("https://lariat.example.com:7443/v3/import/")
            && printed.contains("--server https://lariat.example.com:7443 "),
        "{printed}"
    );
    assert!(!stderr(&import).contains("loopback"), "{}", stderr(&import));
    let token = printed
        .split("/v3/import/")
        .nth(1)
        .and_then(|rest| rest.split(".yaml").next())
        .unwrap();
    let (code, manifest) =
        server.curl("GET", &format!("/v3/import/{token}.yaml"), None, None, None);
    assert_eq!(code, 200);
    assert!(
        manifest.contains(r#"server: "https://lariat.example.com:7443""#),
        "{manifest}"
    );
    // The advertised host is in the serving certificate.
    let port = server.address.rsplit(':').next().unwrap();
    let (code, body) = server.curl_with(
        &["--resolve", &format!("lariat.example.com:{port}:127.0.0.1")],
        &format!("https://lariat.example.com:{port}/version"),
        None,
    );
    assert_eq!(code, 200, "{body}");
}

/// A private registry or an air-gapped mirror: `--agent-image` and its pull Secret are what
/// import manifests run the agent from; a reference no runtime could pull stops the server
/// at start with one line.
#[test]
fn the_agent_image_is_configurable() {
    let bad = Command::new(env!("CARGO_BIN_EXE_lariat"))
        .args([
            "server",
            "--listen",
            "127.0.0.1:0",
            "--agent-image",
            "Mirror/Lariat:v1",
        ])
        .arg("--data-dir")
        .arg(tempfile::tempdir().unwrap().path())
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(
        stderr(&bad).contains("invalid --agent-image \"Mirror/Lariat:v1\"")
            && stderr(&bad).trim().lines().count() == 1,
        "{}",
        stderr(&bad)
    );

    let mirror = "registry.internal:5000/mirror/lariat:v0.1.0";
    let server = TestServer::start_with(&[
        "--agent-image",
        mirror,
        "--agent-image-pull-secret",
        "regcred",
    ]);
    let import = server.lariat(&["cluster", "import", "edge"]);
    let printed = stdout(&import);
    let token = printed
        .split("/v3/import/")
        .nth(1)
        .and_then(|rest| rest.split(".yaml").next())
        .unwrap();
    let (code, manifest) =
        server.curl("GET", &format!("/v3/import/{token}.yaml"), None, None, None);
    assert_eq!(code, 200);
    // What a cluster would run, as kubectl reads it.
    let downstream = TestServer::start();
    downstream.apply_ok(&["apply", "-f", "-"], &manifest);
    let pod = downstream.kubectl_ok(&[
        "get",
        "deployment",
        "lariat-agent",
        "-n",
        "lariat-system",
        "-o",
        "jsonpath={.spec.template.spec.containers[0].image} {.spec.template.spec.imagePullSecrets[0].name}",
    ]);
    assert_eq!(pod, format!("{mirror} regcred"));
}

/// A simulated cluster looks like a real one to kubectl, and every kind shows its CLUSTER.
#[test]
fn simulated_clusters_look_real_and_columns_are_filled() {
    let server = TestServer::start();
    server.init_inmemory();
    server.apply_ok(&["apply", "-f", "-"], &small_inmemory_cluster("dev"));
    eventually_within(Duration::from_secs(60), "both machines are Running", || {
        server.kubectl_ok(&["get", "machines", "-o", "jsonpath={.items[*].status.phase}"])
            == "Running Running"
    });
    // Every object explains itself: what the controllers did is in its Events.
    let events = server.kubectl_ok(&["get", "events"]);
    for (reason, about) in [
        ("Provisioned", "cluster/dev"),
        ("SuccessfulCreate", "machinedeployment/dev-md-0"),
        ("SuccessfulCreate", "machineset/"),
        ("SuccessfulSetNodeRef", "machine/"),
        ("SuccessfulCreate", "kubeadmcontrolplane/dev-control-plane"),
        ("BootstrapDataWritten", "kubeadmconfig/"),
        ("Provisioned", "inmemorycluster/dev"),
        ("Booted", "inmemorymachine/"),
    ] {
        assert!(
            events
                .lines()
                .any(|l| l.contains(reason) && l.contains(about)),
            "an event {reason} about {about}:\n{events}"
        );
    }
    let describe = server.kubectl_ok(&["describe", "machinedeployment", "dev-md-0"]);
    assert!(
        describe.contains("Events:") && describe.contains("Created MachineSet"),
        "{describe}"
    );
    for kind in [
        "kubeadmcontrolplanes",
        "kubeadmconfigs",
        "inmemoryclusters",
        "inmemorymachines",
    ] {
        let table = server.kubectl_ok(&["get", kind]);
        let mut lines = table.lines();
        let header = lines.next().unwrap();
        let at = header
            .find("CLUSTER")
            .unwrap_or_else(|| panic!("{kind}: {table}"));
        for row in lines {
            assert!(
                row[at..].starts_with("dev"),
                "{kind}: CLUSTER is filled in\n{table}"
            );
        }
    }

    let kubeconfig = server.workload_kubeconfig("dev");
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    assert!(
        text.contains("current-context: dev-admin@dev") && text.contains("- name: dev\n"),
        "names that merge with other kubeconfigs: {text}"
    );
    let kubectl = |args: &[&str]| {
        let output = server.kubectl_as(&kubeconfig, args);
        assert!(output.status.success(), "{}", stderr(&output));
        stdout(&output)
    };
    let nodes = kubectl(&["get", "nodes"]);
    let header: Vec<&str> = nodes.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "STATUS", "ROLES", "AGE", "VERSION"],
        "{nodes}"
    );
    let rows: Vec<Vec<&str>> = nodes
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 2, "{nodes}");
    assert!(
        rows.iter().all(|r| r[1] == "Ready" && r[4] == "v1.30.2"),
        "{nodes}"
    );
    let mut roles: Vec<&str> = rows.iter().map(|r| r[2]).collect();
    roles.sort();
    assert_eq!(roles, ["<none>", "control-plane"], "{nodes}");
    let version = kubectl(&["version", "-o", "json"]);
    let version: serde_json::Value = serde_json::from_str(&version).unwrap();
    assert_eq!(version["serverVersion"]["gitVersion"], "v1.30.2");
    assert_eq!(version["serverVersion"]["minor"], "30");

    // Cluster API's admission: an even stacked-etcd control plane and a skipped minor
    // version are refused, each naming its field.
    let even = server.kubectl_err(&["scale", "kcp", "dev-control-plane", "--replicas=2"]);
    assert!(
        even.contains("spec.replicas") && even.contains("cannot be an even number"),
        "{even}"
    );
    let skip = server.kubectl_err(&[
        "patch",
        "kcp",
        "dev-control-plane",
        "--type=merge",
        "-p",
        r#"{"spec":{"version":"v1.32.0"}}"#,
    ]);
    assert!(
        skip.contains("spec.version") && skip.contains("one minor version at a time"),
        "{skip}"
    );
    let bad_version = server.kubectl_err(&[
        "patch",
        "machinedeployment",
        "dev-md-0",
        "--type=merge",
        "-p",
        r#"{"spec":{"template":{"spec":{"version":"1.30"}}}}"#,
    ]);
    assert!(
        bad_version.contains("must be a valid semantic version"),
        "{bad_version}"
    );

    // Deleting the cluster deletes the templates it was made from, as in Cluster API.
    let templates = "inmemorymachinetemplates,kubeadmconfigtemplates";
    assert!(
        !server
            .kubectl_ok(&["get", templates, "-o", "name"])
            .is_empty()
    );
    server.kubectl_ok(&["delete", "cluster", "dev", "--timeout=90s"]);
    eventually_within(
        Duration::from_secs(30),
        "the cluster's templates are gone",
        || {
            server
                .kubectl_ok(&["get", templates, "-o", "name"])
                .is_empty()
        },
    );
}

/// Events are one set of objects in two shapes, as in Kubernetes: kube-rs's recorder writes
/// events.k8s.io/v1, `kubectl get events` and `kubectl describe` read core v1, and the
/// controllers' own core v1 Events read back as events.k8s.io/v1.
#[test]
fn events_are_served_as_core_v1_and_events_k8s_io_v1() {
    let server = TestServer::start();
    server.apply_ok(
        &["create", "-f", "-"],
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: noted}\n",
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        use kube::runtime::events::{Event, EventType, Recorder, Reporter};
        let client = server.client().await;
        let configmaps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
            kube::Api::default_namespaced(client.clone());
        let configmap = configmaps.get("noted").await.unwrap();
        let recorder = Recorder::new(client, Reporter::from("example.com/operator"));
        let event = Event {
            type_: EventType::Warning,
            reason: "Checked".into(),
            note: Some("recorded by kube-rs".into()),
            action: "Check".into(),
            secondary: None,
        };
        recorder
            .publish(&event, &kube::Resource::object_ref(&configmap, &()))
            .await
            .expect("kube-rs publishes an events.k8s.io/v1 Event");
        recorder
            .publish(&event, &kube::Resource::object_ref(&configmap, &()))
            .await
            .expect("and a second time, as a series");
    });
    let core = server.kubectl_ok(&["get", "events", "--field-selector", "reason=Checked"]);
    assert!(core.contains("configmap/noted"), "{core}");
    assert!(core.contains("recorded by kube-rs"), "{core}");
    let described = server.kubectl_ok(&["describe", "configmap", "noted"]);
    assert!(described.contains("Warning  Checked"), "{described}");
    let new = server.kubectl_ok(&[
        "get",
        "events.v1.events.k8s.io",
        "--field-selector",
        "regarding.name=noted",
        "-o",
        "jsonpath={.items[*].note} {.items[*].reportingController} {.items[*].series.count}",
    ]);
    assert_eq!(new, "recorded by kube-rs example.com/operator 2");
    // The core field label `source` is the source's component, as in Kubernetes.
    server.apply_ok(
        &["create", "-f", "-"],
        "apiVersion: v1\nkind: Event\nmetadata: {name: legacy.1}\ninvolvedObject: {kind: ConfigMap, name: other, namespace: default}\nreason: Legacy\nmessage: an old recorder\ntype: Normal\nsource: {component: legacy-recorder}\n",
    );
    let by_source = server.kubectl_ok(&[
        "get",
        "events",
        "--field-selector",
        "source=legacy-recorder",
        "-o",
        "jsonpath={.items[*].reason}",
    ]);
    assert_eq!(by_source, "Legacy");
    // The core v1 shape of the same object names its fields the core way.
    let as_core = server.kubectl_ok(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=noted",
        "-o",
        "jsonpath={.items[*].message} {.items[*].reportingComponent}",
    ]);
    assert_eq!(as_core, "recorded by kube-rs example.com/operator");
    // A time written without microseconds is stored as Go clients parse it: `kubectl events`
    // reads the namespace, instead of failing on it.
    server.apply_ok(
        &["create", "-f", "-"],
        "apiVersion: events.k8s.io/v1\nkind: Event\nmetadata: {name: plain.1}\neventTime: \"2026-12-01T04:00:00+02:00\"\nreportingController: example.com/c\nreportingInstance: c-1\naction: Check\nreason: PlainTime\ntype: Normal\nregarding: {kind: ConfigMap, name: noted, namespace: default}\n",
    );
    let listed = server.kubectl_ok(&["events"]);
    assert!(listed.contains("PlainTime"), "{listed}");
    assert_eq!(
        server.kubectl_ok(&["get", "events", "plain.1", "-o", "jsonpath={.eventTime}"]),
        "2026-12-01T02:00:00.000000Z"
    );
    // An events.k8s.io Event without its required eventTime is refused, as Kubernetes does.
    let refused = server.kubectl_stdin(
        &["create", "-f", "-"],
        "apiVersion: events.k8s.io/v1\nkind: Event\nmetadata: {name: bad.1}\nreason: X\n",
    );
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("eventTime"),
        "{}",
        stderr(&refused)
    );
}

/// Every kubectl a platform engineer may have, 1.27 to 1.33, gets the same answers.
#[test]
fn every_kubectl_from_1_27_to_1_33_works_unchanged() {
    let dir = std::path::Path::new("/usr/lib/google-cloud-sdk/bin");
    let server = TestServer::start();
    let typo = "apiVersion: cluster.x-k8s.io/v1beta1\nkind: Clustr\nmetadata: {name: x}\n";
    let cluster = "apiVersion: cluster.x-k8s.io/v1beta1\nkind: Cluster\nmetadata: {name: c}\nspec: {bogus: 1}\n";
    for minor in 27..=33 {
        let binary = dir.join(format!("kubectl.1.{minor}"));
        assert!(
            binary.exists(),
            "{} is missing: these tests need the kubectl versions Google's Cloud SDK installs",
            binary.display()
        );
        let run = |args: &[&str], input: Option<&str>| {
            let mut command = Command::new(&binary);
            command
                .args(args)
                .env("KUBECONFIG", server.kubeconfig())
                .env("HOME", server.home.path())
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            let mut child = command.spawn().expect("run kubectl");
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input.unwrap_or_default().as_bytes())
                .unwrap();
            child.wait_with_output().unwrap()
        };
        let version = format!("kubectl 1.{minor}");
        let output = run(&["create", "-f", "-"], Some(typo));
        assert!(
            stderr(&output).contains(r#"no matches for kind "Clustr""#),
            "{version}: {}",
            stderr(&output)
        );
        let output = run(&["apply", "-f", "-"], Some(cluster));
        assert!(
            stderr(&output).contains(r#"unknown field "spec.bogus""#),
            "{version}: {}",
            stderr(&output)
        );
        let output = run(&["auth", "whoami"], None);
        assert!(
            stdout(&output).contains("lariat-admin"),
            "{version}: {}",
            stderr(&output)
        );
        let output = run(&["auth", "can-i", "create", "clusters"], None);
        assert_eq!(stdout(&output).trim(), "yes", "{version}");
        let output = run(&["get", "crds"], None);
        assert!(
            stdout(&output).contains("clusters.cluster.x-k8s.io"),
            "{version}: {}",
            stderr(&output)
        );
        let output = run(&["explain", "clusters.spec.clusterNetwork"], None);
        assert!(
            stdout(&output).contains("KIND:") && stdout(&output).contains("Cluster"),
            "{version}: {}",
            stderr(&output)
        );
        let output = run(&["get", "events.events.k8s.io", "-A"], None);
        assert!(output.status.success(), "{version}: {}", stderr(&output));
    }
}

/// Mistakes in names and paths stop a command with one line that names the mistake:
/// certificate names that are not names, a kubeconfig that is not there.
#[test]
fn bad_names_and_missing_kubeconfigs_are_one_line_each() {
    for (flag, value, says) in [
        (
            "--tls-san",
            "lariat example",
            "invalid --tls-san \"lariat example\"",
        ),
        ("--tls-san", "*", "invalid --tls-san \"*\""),
        (
            "--advertise-url",
            "https://lariat.example.com:99999",
            "the port must be from 1 to 65535",
        ),
    ] {
        let bad = Command::new(env!("CARGO_BIN_EXE_lariat"))
            .args(["server", "--listen", "127.0.0.1:0", flag, value])
            .arg("--data-dir")
            .arg(tempfile::tempdir().unwrap().path())
            .output()
            .unwrap();
        assert!(!bad.status.success(), "{flag} {value}");
        assert!(
            stderr(&bad).contains(says) && stderr(&bad).trim().lines().count() == 1,
            "{flag} {value}: {}",
            stderr(&bad)
        );
    }
    // A trimmed, comma-separated list is fine, as a ConfigMap would carry it.
    let listed = TestServer::start_with(&["--tls-san", "Lariat.Example.com, 10.1.2.3,"]);
    let sans = std::fs::read_to_string(listed.data_dir().join("tls/server.sans")).unwrap();
    assert!(
        sans.lines().any(|l| l == "lariat.example.com") && sans.lines().any(|l| l == "10.1.2.3"),
        "{sans}"
    );

    let missing = Command::new(env!("CARGO_BIN_EXE_lariat"))
        .args(["version", "--kubeconfig", "/nonexistent/kubeconfig"])
        .output()
        .unwrap();
    assert!(!missing.status.success());
    let said = stderr(&missing);
    assert_eq!(
        said.trim(),
        "error: cannot read the kubeconfig /nonexistent/kubeconfig: No such file or directory (os error 2): pass --kubeconfig or start `lariat server` here"
    );
}
