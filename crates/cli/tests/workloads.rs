//! Workloads in a simulated cluster, driven through the server's proxy by plain kubectl as a
//! user drives a real cluster: a Deployment rolls out and is Available, an update rolls
//! within maxSurge and maxUnavailable, a Pod that fits nowhere says why, and Pods leave a
//! Node that stops being Ready once they no longer tolerate it.

mod common;

use std::path::Path;

use common::{TestServer, eventually, eventually_within, small_inmemory_cluster};
use serde_json::Value;

/// `args` for kubectl with `kubeconfig`.
fn with_kubeconfig<'a>(kubeconfig: &'a Path, args: &[&'a str]) -> Vec<&'a str> {
    let mut full = vec!["--kubeconfig", kubeconfig.to_str().unwrap()];
    full.extend_from_slice(args);
    full
}

fn kubectl_in(server: &TestServer, kubeconfig: &Path, args: &[&str]) -> String {
    server.kubectl_ok(&with_kubeconfig(kubeconfig, args))
}

/// What kubectl says when `args`, which must fail, is refused there.
fn kubectl_err_in(server: &TestServer, kubeconfig: &Path, args: &[&str]) -> String {
    server
        .kubectl_err(&with_kubeconfig(kubeconfig, args))
        .trim()
        .to_string()
}

fn pods(server: &TestServer, kubeconfig: &Path, selector: &str) -> Vec<Value> {
    let out = kubectl_in(
        server,
        kubeconfig,
        &["get", "pods", "-l", selector, "-o", "json"],
    );
    serde_json::from_str::<Value>(&out).unwrap()["items"]
        .as_array()
        .unwrap()
        .clone()
}

/// A server with one simulated cluster `web` (a control-plane and a worker Node) whose agent
/// is connected; the kubeconfig that reaches it through the proxy.
fn cluster(server: &TestServer) -> std::path::PathBuf {
    cluster_from(server, &small_inmemory_cluster("web"))
}

fn cluster_from(server: &TestServer, manifests: &str) -> std::path::PathBuf {
    server.init_inmemory();
    server.apply_ok(&["apply", "-f", "-"], manifests);
    eventually_within(
        std::time::Duration::from_secs(60),
        "the agent connects with two Nodes",
        || {
            let output = server.kubectl(&[
                "get",
                "clusterconnection",
                "web",
                "-o",
                "jsonpath={.status.connected}/{.status.nodeCount}",
            ]);
            String::from_utf8_lossy(&output.stdout) == "true/2"
        },
    );
    server.proxied_kubeconfig("web")
}

#[test]
fn a_deployment_rolls_out_and_rolls_again_through_the_proxy() {
    let server = TestServer::start();
    let kubeconfig = cluster(&server);
    let k = |args: &[&str]| kubectl_in(&server, &kubeconfig, args);

    k(&[
        "create",
        "deployment",
        "web",
        "--image=nginx:1.26",
        "--replicas=3",
    ]);
    let out = k(&["rollout", "status", "deployment/web", "--timeout=60s"]);
    assert!(out.contains("successfully rolled out"), "{out}");
    k(&[
        "wait",
        "--for=condition=Available",
        "deployment/web",
        "--timeout=10s",
    ]);

    // Three Pods Running and Ready, all on the worker: the control plane is tainted.
    let running = pods(&server, &kubeconfig, "app=web");
    assert_eq!(running.len(), 3);
    let workers: Vec<String> = serde_json::from_str::<Value>(&k(&["get", "nodes", "-o", "json"]))
        .unwrap()["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["spec"]["taints"].as_array().is_none_or(|t| t.is_empty()))
        .map(|n| n["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(workers.len(), 1);
    for pod in &running {
        assert_eq!(pod["status"]["phase"], "Running");
        assert_eq!(pod["spec"]["nodeName"], workers[0].as_str());
        let container = &pod["status"]["containerStatuses"][0];
        assert_eq!(container["ready"], true);
        assert_eq!(container["image"], "docker.io/library/nginx:1.26");
        assert!(
            pod["status"]["podIP"]
                .as_str()
                .unwrap()
                .starts_with("10.244.")
        );
    }
    let table = k(&["get", "pods", "-l", "app=web"]);
    assert_eq!(table.matches(" 1/1 ").count(), 3, "{table}");
    assert_eq!(table.matches("Running").count(), 3, "{table}");
    let described = k(&[
        "describe",
        "pod",
        running[0]["metadata"]["name"].as_str().unwrap(),
    ]);
    for said in [
        "Scheduled",
        "Successfully assigned default/web-",
        "Started container nginx",
    ] {
        assert!(described.contains(said), "{said:?} missing:\n{described}");
    }

    // An update rolls within maxSurge 1 and maxUnavailable 0: never fewer than three Ready.
    k(&[
        "patch",
        "deployment",
        "web",
        "--type=merge",
        "-p",
        r#"{"spec":{"strategy":{"rollingUpdate":{"maxSurge":1,"maxUnavailable":0}}}}"#,
    ]);
    k(&["set", "image", "deployment/web", "nginx=nginx:1.27"]);
    let out = k(&["rollout", "status", "deployment/web", "--timeout=60s"]);
    assert!(out.contains("successfully rolled out"), "{out}");
    let updated = pods(&server, &kubeconfig, "app=web");
    assert_eq!(updated.len(), 3);
    assert!(
        updated
            .iter()
            .all(|p| p["spec"]["containers"][0]["image"] == "nginx:1.27")
    );
    let history = k(&["rollout", "history", "deployment/web"]);
    assert!(
        history.contains("1 ") && history.contains("2 "),
        "{history}"
    );
    let sets = k(&[
        "get",
        "rs",
        "-l",
        "app=web",
        "-o",
        "jsonpath={range .items[*]}{.spec.replicas} {end}",
    ]);
    let mut counts: Vec<&str> = sets.split_whitespace().collect();
    counts.sort();
    assert_eq!(counts, ["0", "3"], "{sets}");
    let events = k(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.kind=Deployment",
        "-o",
        "jsonpath={range .items[*]}{.message}\n{end}",
    ]);
    assert!(events.contains("Scaled up replica set web-"), "{events}");
    assert!(events.contains("Scaled down replica set web-"), "{events}");

    // Scaling down leaves the requested number.
    k(&["scale", "deployment/web", "--replicas=1"]);
    eventually("one Pod is left", || {
        pods(&server, &kubeconfig, "app=web").len() == 1
    });
    let out = k(&["rollout", "status", "deployment/web", "--timeout=30s"]);
    assert!(out.contains("successfully rolled out"), "{out}");

    // Undo goes back to the first template, whose ReplicaSet becomes revision 3.
    k(&["rollout", "undo", "deployment/web"]);
    let out = k(&["rollout", "status", "deployment/web", "--timeout=30s"]);
    assert!(out.contains("successfully rolled out"), "{out}");
    let revision = || {
        k(&[
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.metadata.annotations.deployment\\.kubernetes\\.io/revision} {.spec.template.spec.containers[0].image}",
        ])
    };
    eventually("the undone template is revision 3", || {
        revision() == "3 nginx:1.26"
    });
    let history = k(&["rollout", "history", "deployment/web"]);
    assert!(
        history.contains("2 ") && history.contains("3 ") && !history.contains("1 "),
        "{history}"
    );

    // Paused, it says so, and it changes nothing until resumed.
    k(&["rollout", "pause", "deployment/web"]);
    let progressing = || {
        k(&[
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Progressing\")].reason}",
        ])
    };
    eventually("Progressing says DeploymentPaused", || {
        progressing() == "DeploymentPaused"
    });
    k(&["set", "image", "deployment/web", "nginx=nginx:1.28"]);
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert_eq!(revision(), "3 nginx:1.28", "no rollout while paused");
    k(&["rollout", "resume", "deployment/web"]);
    let out = k(&["rollout", "status", "deployment/web", "--timeout=30s"]);
    assert!(out.contains("successfully rolled out"), "{out}");
    assert_eq!(revision(), "4 nginx:1.28");
}

#[test]
fn a_pod_that_fits_nowhere_says_why_and_pods_leave_a_node_that_is_not_ready() {
    let server = TestServer::start();
    let kubeconfig = cluster(&server);
    let k = |args: &[&str]| kubectl_in(&server, &kubeconfig, args);

    // Asks for more CPU than a Node has: Pending, with the scheduler's reason.
    server.kubectl_stdin(
        &[
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "apply",
            "-f",
            "-",
        ],
        r#"apiVersion: v1
kind: Pod
metadata: {name: greedy}
spec:
  containers:
  - name: app
    image: busybox
    resources: {requests: {cpu: "16"}}
"#,
    );
    eventually("the scheduler says why", || {
        k(&[
            "get",
            "pod",
            "greedy",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"PodScheduled\")].reason}",
        ]) == "Unschedulable"
    });
    let described = k(&["describe", "pod", "greedy"]);
    assert!(described.contains("FailedScheduling"), "{described}");
    assert!(
        described.contains("0/2 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }"),
        "{described}"
    );
    assert_eq!(
        k(&["get", "pod", "greedy", "-o", "jsonpath={.status.phase}"]),
        "Pending"
    );

    // A Pod that tolerates a Node not being Ready for two seconds, on a Node that turns so.
    server.kubectl_stdin(
        &[
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "apply",
            "-f",
            "-",
        ],
        r#"apiVersion: v1
kind: Pod
metadata: {name: brief}
spec:
  containers:
  - name: app
    image: busybox
  tolerations:
  - {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 2}
"#,
    );
    eventually("the Pod runs", || {
        k(&["get", "pod", "brief", "-o", "jsonpath={.status.phase}"]) == "Running"
    });
    let node = k(&["get", "pod", "brief", "-o", "jsonpath={.spec.nodeName}"]);
    let direct = server.workload_kubeconfig("web");
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let patch = serde_json::json!({"status": {"conditions": [{
        "type": "Ready", "status": "False", "reason": "Test", "message": "set by the test",
        "lastHeartbeatTime": now, "lastTransitionTime": now,
    }]}});
    kubectl_in(
        &server,
        &direct,
        &[
            "patch",
            "node",
            &node,
            "--subresource=status",
            "--type=merge",
            "-p",
            &patch.to_string(),
        ],
    );
    eventually("the Pod is not Ready", || {
        k(&[
            "get",
            "pod",
            "brief",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ]) == "False"
    });
    eventually("the Pod is evicted", || {
        k(&["get", "pods", "-o", "name"])
            .lines()
            .all(|l| l != "pod/brief")
    });
}

#[test]
fn stateful_sets_daemon_sets_jobs_and_services_converge_as_on_a_real_cluster() {
    let server = TestServer::start();
    let kubeconfig = cluster(&server);
    let k = |args: &[&str]| kubectl_in(&server, &kubeconfig, args);
    let apply = |manifest: &str| {
        let output = server.kubectl_stdin(
            &[
                "--kubeconfig",
                kubeconfig.to_str().unwrap(),
                "apply",
                "-f",
                "-",
            ],
            manifest,
        );
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    };

    // A StatefulSet whose Pods take two seconds to be Ready: one ordinal at a time.
    apply(
        r#"apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  serviceName: db
  replicas: 3
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers:
      - name: db
        image: postgres:16
        readinessProbe: {initialDelaySeconds: 2, exec: {command: ["true"]}}
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 5Gi}}
"#,
    );
    eventually("db-0 runs", || {
        k(&["get", "pod", "db-0", "-o", "jsonpath={.status.phase}"]).contains("Running")
    });
    assert_eq!(
        k(&["get", "pods", "-l", "app=db", "-o", "name"])
            .lines()
            .count(),
        1,
        "db-1 was made before db-0 was Ready"
    );
    let out = k(&["rollout", "status", "statefulset/db", "--timeout=60s"]);
    // With the default partition (0), as kubectl says it on a real cluster.
    assert!(out.contains("roll out complete: 3 new pods"), "{out}");
    let names = k(&[
        "get",
        "pods",
        "-l",
        "app=db",
        "-o",
        "jsonpath={.items[*].metadata.name}",
    ]);
    assert_eq!(names, "db-0 db-1 db-2");
    assert_eq!(
        k(&[
            "get",
            "pod",
            "db-2",
            "-o",
            "jsonpath={.spec.hostname}/{.spec.subdomain}"
        ]),
        "db-2/db"
    );
    // Each ordinal's claim, made before its Pod, bound to a volume of the size it asks from the
    // default class; the Pod mounts its own.
    let claims = k(&["get", "pvc", "--no-headers"]);
    for ordinal in 0..3 {
        let line = claims
            .lines()
            .find(|l| l.starts_with(&format!("data-db-{ordinal} ")))
            .unwrap_or_else(|| panic!("no claim data-db-{ordinal}:\n{claims}"));
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            (fields[1], fields[3], fields[4]),
            ("Bound", "5Gi", "standard"),
            "{line}"
        );
        assert!(fields[2].starts_with("pvc-"), "{line}");
    }
    assert_eq!(
        k(&[
            "get",
            "pod",
            "db-1",
            "-o",
            "jsonpath={.spec.volumes[?(@.name==\"data\")].persistentVolumeClaim.claimName}"
        ]),
        "data-db-1"
    );
    let volumes = k(&["get", "pv", "--no-headers"]);
    assert_eq!(volumes.lines().count(), 3, "{volumes}");
    assert!(
        volumes.contains("Delete") && volumes.contains("Bound"),
        "{volumes}"
    );
    // A claim of a class that does not exist stays Pending, and says why.
    apply(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: fast}\nspec:\n  storageClassName: fast\n  accessModes: [ReadWriteOnce]\n  resources: {requests: {storage: 1Gi}}\n",
    );
    eventually("the claim says its class is missing", || {
        k(&["describe", "pvc", "fast"]).contains("storageclass.storage.k8s.io \"fast\" not found")
    });

    // A DaemonSet: one Pod per worker (the control plane is tainted), and one on a new worker.
    apply(
        r#"apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      containers: [{name: agent, image: fluent/fluent-bit:3.0}]
"#,
    );
    let out = k(&["rollout", "status", "daemonset/agent", "--timeout=30s"]);
    assert!(out.contains("successfully rolled out"), "{out}");
    assert_eq!(
        k(&["get", "ds", "agent", "-o", "jsonpath={.status.numberReady}"]),
        "1"
    );
    server.kubectl_ok(&["scale", "machinedeployment", "web-md-0", "--replicas=2"]);
    eventually_within(
        std::time::Duration::from_secs(60),
        "the new worker runs the daemon too",
        || {
            k(&[
                "get",
                "ds",
                "agent",
                "-o",
                "jsonpath={.status.desiredNumberScheduled}/{.status.numberReady}",
            ]) == "2/2"
        },
    );
    let nodes = k(&[
        "get",
        "pods",
        "-l",
        "app=agent",
        "-o",
        "jsonpath={.items[*].spec.nodeName}",
    ]);
    let nodes: std::collections::HashSet<&str> = nodes.split_whitespace().collect();
    assert_eq!(nodes.len(), 2, "one daemon Pod per Node: {nodes:?}");

    // A Job of two completions, one at a time.
    apply(
        r#"apiVersion: batch/v1
kind: Job
metadata: {name: once}
spec:
  completions: 2
  template:
    spec:
      restartPolicy: Never
      containers: [{name: work, image: busybox, command: ["true"]}]
"#,
    );
    k(&[
        "wait",
        "--for=condition=complete",
        "job/once",
        "--timeout=30s",
    ]);
    assert_eq!(
        k(&["get", "job", "once", "-o", "jsonpath={.status.succeeded}"]),
        "2"
    );
    let table = k(&["get", "pods", "-l", "job-name=once"]);
    assert_eq!(table.matches("Completed").count(), 2, "{table}");

    // A Service: a ClusterIP, and an EndpointSlice naming its Ready Pods on the named port.
    apply(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: nginx
        ports: [{name: http, containerPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: http}]
"#,
    );
    eventually("the Service has a ClusterIP", || {
        k(&["get", "svc", "web", "-o", "jsonpath={.spec.clusterIP}"]).starts_with("10.96.")
    });
    eventually("the slice names both Pods on port 8080", || {
        let slice = k(&[
            "get",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=web",
            "-o",
            "jsonpath={.items[0].ports[0].port} {range .items[0].endpoints[*]}{.conditions.ready},{end}",
        ]);
        slice == "8080 true,true,"
    });
}

/// The worker template's `behavior.pods` makes Pods fail as real ones fail, and they say so
/// where a user looks: `kubectl get pods`, `kubectl describe pod`, the Job's conditions.
#[test]
fn injected_failures_show_as_a_real_clusters_do() {
    let server = TestServer::start();
    let manifests = small_inmemory_cluster("web").replacen(
        "  name: web-md-0\n  namespace: default\nspec:\n  template:\n    spec:\n      behavior:\n",
        "  name: web-md-0\n  namespace: default\nspec:\n  template:\n    spec:\n      behavior:\n        pods:\n          imagePullFailures: [\"*:broken\"]\n          crashLoops: [\"docker.io/library/busybox:crash\"]\n          neverReady: [\"*:unready\"]\n",
        1,
    );
    assert!(manifests.contains("imagePullFailures"), "{manifests}");
    let kubeconfig = cluster_from(&server, &manifests);
    let k = |args: &[&str]| kubectl_in(&server, &kubeconfig, args);
    k(&["create", "deployment", "broken", "--image=nginx:broken"]);
    k(&["create", "deployment", "crashy", "--image=busybox:crash"]);
    k(&["create", "deployment", "unready", "--image=nginx:unready"]);
    let status_of = |app: &str| {
        let table = k(&["get", "pods", "-l", &format!("app={app}"), "--no-headers"]);
        table
            .split_whitespace()
            .nth(2)
            .unwrap_or_default()
            .to_string()
    };
    eventually("the image cannot be pulled", || {
        status_of("broken") == "ImagePullBackOff"
    });
    eventually("the container crash-loops", || {
        status_of("crashy") == "CrashLoopBackOff"
    });
    assert_eq!(status_of("unready"), "Running");

    let broken = k(&["describe", "pod", "-l", "app=broken"]);
    for said in [
        "Failed to pull image \"nginx:broken\"",
        "Error: ErrImagePull",
        "Back-off pulling image",
        "Status:       Pending",
    ] {
        assert!(broken.contains(said), "{said:?} missing:\n{broken}");
    }
    let crashy = k(&["describe", "pod", "-l", "app=crashy"]);
    for said in [
        "Reason:       CrashLoopBackOff",
        "Exit Code:    1",
        "Back-off restarting failed container busybox",
    ] {
        assert!(crashy.contains(said), "{said:?} missing:\n{crashy}");
    }
    let restarts = k(&[
        "get",
        "pods",
        "-l",
        "app=crashy",
        "-o",
        "jsonpath={.items[0].status.containerStatuses[0].restartCount}",
    ]);
    assert!(restarts.parse::<i64>().unwrap() >= 1, "{restarts}");
    let unready = k(&["describe", "pod", "-l", "app=unready"]);
    assert!(unready.contains("Readiness probe failed"), "{unready}");

    // Logs and exec answer as a real cluster's kubelet does, with a Status that says why.
    let refused = |args: &[&str]| kubectl_err_in(&server, &kubeconfig, args);
    let said = refused(&["logs", "deployment/broken"]);
    assert!(
        said.starts_with("Error from server (BadRequest): container \"nginx\" in pod \"broken-")
            && said.ends_with("is waiting to start: trying and failing to pull image"),
        "{said}"
    );
    assert_eq!(
        k(&["logs", "deployment/unready"]),
        "",
        "a container that wrote nothing"
    );
    assert_eq!(k(&["logs", "--previous", "deployment/crashy"]), "");
    let said = refused(&["exec", "deployment/unready", "--", "true"]);
    assert!(
        said.contains("BadRequest") && said.contains("no process runs"),
        "{said}"
    );
    // Someone who may only read Pods reads no logs and runs nothing in them (asked of the
    // cluster's own API: through the proxy, impersonation is the management plane's).
    let direct = server.workload_kubeconfig_in("default", "web");
    let refused_there = |args: &[&str]| kubectl_err_in(&server, &direct, args);
    let there = |args: &[&str]| kubectl_in(&server, &direct, args);
    there(&["create", "serviceaccount", "reader"]);
    there(&[
        "create",
        "role",
        "pod-reader",
        "--verb=get,list",
        "--resource=pods",
    ]);
    there(&[
        "create",
        "rolebinding",
        "pod-reader",
        "--role=pod-reader",
        "--serviceaccount=default:reader",
    ]);
    let reader = "--as=system:serviceaccount:default:reader";
    let pod = there(&["get", "pods", "-l", "app=unready", "-o", "name", reader]);
    let pod = pod.trim();
    let said = refused_there(&["logs", pod, reader]);
    assert!(
        said.contains("Forbidden") && said.contains("\"pods/log\""),
        "{said}"
    );
    let said = refused_there(&["exec", pod, reader, "--", "true"]);
    assert!(
        said.contains("Forbidden") && said.contains("\"pods/exec\""),
        "{said}"
    );
    // The management plane serves no Pods: the same paths are not found there.
    let output = server.kubectl(&[
        "get",
        "--raw",
        &format!("/api/v1/namespaces/default/{pod}/log"),
    ]);
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("NotFound"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // None of the three is Available, and the Deployment says so.
    for app in ["broken", "crashy", "unready"] {
        assert_eq!(
            k(&[
                "get",
                "deployment",
                app,
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Available\")].status}"
            ]),
            "False"
        );
    }

    // A Job whose container crashes and may not restart fails once past its backoff limit.
    server.kubectl_stdin(
        &[
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "apply",
            "-f",
            "-",
        ],
        r#"apiVersion: batch/v1
kind: Job
metadata: {name: doomed}
spec:
  backoffLimit: 1
  template:
    spec:
      restartPolicy: Never
      containers: [{name: work, image: busybox:crash}]
"#,
    );
    k(&[
        "wait",
        "--for=condition=failed",
        "job/doomed",
        "--timeout=30s",
    ]);
    assert_eq!(
        k(&[
            "get",
            "job",
            "doomed",
            "-o",
            "jsonpath={.status.failed} {.status.conditions[?(@.type==\"Failed\")].reason}"
        ]),
        "2 BackoffLimitExceeded"
    );
}
