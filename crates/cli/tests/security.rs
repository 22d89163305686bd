//! The security review's findings, each pinned by a test through the real binary, kubectl and
//! raw HTTPS (curl, openssl): credentials stay in their trust domain and die with their
//! owner, abusive connections are shed, bodies and parameters Kubernetes refuses are refused
//! without a panic or a write, and failed agent handshakes never starve a valid agent.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{TestServer, eventually, eventually_within, generate_cluster};
use lariat_apiserver::proofs::{FAILURE_BURST, FAILURES_PER_SECOND};
use serde_json::{Value, json};

/// A copy of `kubeconfig` pointing at `server` instead, with the same credential.
fn pointed_at(kubeconfig: &Path, server: &str, name: &str) -> PathBuf {
    let text = std::fs::read_to_string(kubeconfig).unwrap();
    let rewritten: String = text
        .lines()
        .map(|line| match line.trim_start().strip_prefix("server: ") {
            Some(_) => format!("    server: {server}\n"),
            None => format!("{line}\n"),
        })
        .collect();
    let path = kubeconfig.with_file_name(name);
    std::fs::write(&path, rewritten).unwrap();
    path
}

fn assert_refused(server: &TestServer, kubeconfig: &Path, what: &str) {
    let output = server.kubectl_as(kubeconfig, &["get", "secrets", "-A"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success()
            && (stderr.contains("Unauthorized") || stderr.contains("must be logged in")),
        "{what} must be refused as unauthorized, got: {stderr}{}",
        String::from_utf8_lossy(&output.stdout)
    );
}

/// The client certificate and key of a kubeconfig, as files curl can use.
fn certificate_files(kubeconfig: &Path) -> (PathBuf, PathBuf) {
    let text = std::fs::read_to_string(kubeconfig).unwrap();
    let field = |name: &str| {
        let b64 = text
            .lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .unwrap_or_else(|| panic!("{name} in {}", kubeconfig.display()))
            .trim();
        use base64::Engine;
        base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap()
    };
    let cert = kubeconfig.with_extension("crt");
    let key = kubeconfig.with_extension("key");
    std::fs::write(&cert, field("client-certificate-data:")).unwrap();
    std::fs::write(&key, field("client-key-data:")).unwrap();
    (cert, key)
}

/// A Cluster with only its InMemoryCluster: a simulated API and a kubeconfig, no machines.
const BARE_CLUSTER: &str = r#"apiVersion: cluster.x-k8s.io/v1beta1
kind: Cluster
metadata:
  name: other
spec:
  infrastructureRef: {apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1, kind: InMemoryCluster, name: other}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: InMemoryCluster
metadata:
  name: other
spec: {}
"#;

/// Regression (critical): an in-memory cluster's kubeconfig was valid on the management API
/// as system:masters. Each simulated cluster is now its own trust domain, checked in every
/// direction; a body that is not an object is refused on every API without a panic.
#[test]
fn each_simulated_cluster_is_its_own_trust_domain() {
    let mut server = TestServer::start();
    server.init_inmemory();
    server.apply_ok(
        &["apply", "-f", "-"],
        &generate_cluster(&[
            "dev",
            "--infrastructure",
            "inmemory",
            "--control-plane-machine-count",
            "1",
            "--worker-machine-count",
            "0",
        ]),
    );
    server.apply_ok(&["apply", "-f", "-"], BARE_CLUSTER);
    eventually_within(Duration::from_secs(60), "dev's agent is connected", || {
        server.kubectl_ok(&[
            "get",
            "cluster",
            "dev",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Connected\")].status}",
        ]) == "True"
    });
    eventually("other's kubeconfig exists", || {
        server
            .kubectl(&["get", "secret", "other-kubeconfig"])
            .status
            .success()
    });
    let base = format!("https://{}", server.address);
    let dev = server.workload_kubeconfig("dev");
    let other = server.workload_kubeconfig("other");
    let admin = server.kubeconfig();
    let admin_token = server.data_dir().join("kubeconfig-token.yaml");
    let dev_url = format!("{base}/inmemory/default/dev");
    let other_url = format!("{base}/inmemory/default/other");

    // Each credential works where it belongs.
    assert!(server.kubectl_as(&dev, &["get", "nodes"]).status.success());
    // Regression: reviews whose route has a path parameter answered 500 inside a simulated
    // cluster (the management router's own parameters went along).
    let whoami = server.kubectl_as(
        &dev,
        &[
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ],
    );
    assert_eq!(
        String::from_utf8_lossy(&whoami.stdout),
        "kubernetes-admin",
        "{}",
        String::from_utf8_lossy(&whoami.stderr)
    );
    assert!(
        server
            .kubectl_as(&dev, &["auth", "can-i", "create", "pods", "-n", "default"])
            .status
            .success()
    );
    assert!(server.kubectl_as(&other, &["get", "ns"]).status.success());
    let proxied = server.proxied_kubeconfig("dev");
    assert!(
        server
            .kubectl_as(&proxied, &["get", "nodes"])
            .status
            .success()
    );

    // ...and nowhere else.
    assert_refused(
        &server,
        &pointed_at(&dev, &base, "dev-at-management"),
        "a workload kubeconfig on the management API",
    );
    assert_refused(
        &server,
        &pointed_at(
            &dev,
            &format!("{base}/k8s/clusters/default/dev"),
            "dev-at-proxy",
        ),
        "a workload kubeconfig on the proxy",
    );
    assert_refused(
        &server,
        &pointed_at(&dev, &other_url, "dev-at-other"),
        "a workload kubeconfig on another simulated cluster",
    );
    assert_refused(
        &server,
        &pointed_at(&other, &dev_url, "other-at-dev"),
        "the other cluster's kubeconfig on dev",
    );
    assert_refused(
        &server,
        &pointed_at(&admin, &dev_url, "admin-at-dev"),
        "the management admin certificate on a simulated cluster",
    );
    assert_refused(
        &server,
        &pointed_at(&admin_token, &dev_url, "admin-token-at-dev"),
        "the management admin token on a simulated cluster",
    );
    // The original attack, by raw HTTPS: a ClusterRegistrationToken for another cluster.
    let (cert, key) = certificate_files(&dev);
    let token = json!({"apiVersion": "management.lariat.dev/v1alpha1", "kind": "ClusterRegistrationToken",
        "metadata": {"name": "evil01"},
        "spec": {"clusterNamespace": "default", "clusterName": "other", "tokenHash": "00",
                 "expirationTimestamp": "2099-01-01T00:00:00Z"}});
    let (code, body) = server.curl_with(
        &[
            "--cert",
            cert.to_str().unwrap(),
            "--key",
            key.to_str().unwrap(),
            "-H",
            "Content-Type: application/json",
        ],
        &format!("{base}/apis/management.lariat.dev/v1alpha1/namespaces/lariat-system/clusterregistrationtokens"),
        Some(token.to_string().as_bytes()),
    );
    assert_eq!(code, 401, "{body}");
    // A simulated cluster sees nothing of the management plane's counters.
    let (code, _) = server.curl_with(
        &[
            "--cert",
            cert.to_str().unwrap(),
            "--key",
            key.to_str().unwrap(),
        ],
        &format!("{dev_url}/metrics"),
        None,
    );
    assert_eq!(code, 404);
    // An unknown simulated cluster answers as an unauthenticated request does.
    let (code, _) = server.curl_with(&[], &format!("{base}/inmemory/default/nope/api"), None);
    assert_eq!(code, 401);

    // Bodies that are JSON but not objects: 400, never a panic, directly, under /inmemory/
    // and through the tunnel.
    // (`kubectl --raw` paths are absolute: they do not follow the kubeconfig's server path.)
    for (kubeconfig, prefix, name) in [
        (&admin, "", "shape"),
        (&dev, "/inmemory/default/dev", "shape"),
        (&proxied, "/k8s/clusters/default/dev", "tunnelled"),
    ] {
        let created = server.kubectl_as(
            kubeconfig,
            &["create", "configmap", name, "--from-literal=a=b"],
        );
        assert!(
            created.status.success(),
            "{}: {}",
            kubeconfig.display(),
            String::from_utf8_lossy(&created.stderr)
        );
        for value in [r#""x""#, "1", "true", "[]"] {
            let patch = format!(r#"[{{"op":"replace","path":"","value":{value}}}]"#);
            for target in [
                vec!["patch", "configmap", name, "--type=json", "-p", &patch],
                vec![
                    "patch",
                    "namespace",
                    "default",
                    "--subresource=status",
                    "--type=json",
                    "-p",
                    &patch,
                ],
            ] {
                let output = server.kubectl_as(kubeconfig, &target);
                let stderr = String::from_utf8_lossy(&output.stderr);
                assert!(
                    !output.status.success() && stderr.contains("must be a JSON object"),
                    "{target:?} through {}: {stderr}",
                    kubeconfig.display()
                );
            }
        }
        let body = server.data_dir().join("string.json");
        std::fs::write(&body, r#""x""#).unwrap();
        let output = server.kubectl_as(
            kubeconfig,
            &[
                "replace",
                "--raw",
                &format!("{prefix}/api/v1/namespaces/default/configmaps/{name}"),
                "-f",
                body.to_str().unwrap(),
            ],
        );
        assert!(
            String::from_utf8_lossy(&output.stderr).contains("must be a JSON object"),
            "{}: {}",
            kubeconfig.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    assert!(!server.log().contains("panicked"), "{}", server.log());

    // Credentials die with their owner: the agent's credential and the workload kubeconfig
    // are refused as soon as the Cluster is gone, garbage collection or not.
    let credential = String::from_utf8(
        server
            .kubectl_as(
                &dev,
                &[
                    "get",
                    "secret",
                    "lariat-agent-credential",
                    "-n",
                    "lariat-system",
                    "-o",
                    "go-template={{.data.credential | base64decode}}",
                ],
            )
            .stdout,
    )
    .unwrap();
    assert!(credential.contains('.'), "credential {credential:?}");
    server.kubectl_ok(&["delete", "cluster", "dev", "--timeout=60s"]);
    assert_refused(&server, &dev, "a deleted cluster's kubeconfig");
    // The proxy stops with the Cluster, not at the next heartbeat.
    let through = server.kubectl_as(&proxied, &["get", "nodes"]);
    assert!(
        !through.status.success() && String::from_utf8_lossy(&through.stderr).contains("not found"),
        "{}",
        String::from_utf8_lossy(&through.stderr)
    );
    let (code, body) = server.curl_with(
        &[
            "-H",
            "Connection: Upgrade",
            "-H",
            "Upgrade: lariat-tunnel/1",
            "-H",
            &format!("Authorization: Bearer {credential}"),
            "--http1.1",
        ],
        &format!("{base}/v3/connect"),
        None,
    );
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("no longer exists"), "{body}");

    // A kubeconfig issued again (the simulated cluster is new after a restart) voids the
    // previous one.
    server.terminate();
    server.launch();
    let reissued = server.data_dir().join("other-before-restart.kubeconfig");
    std::fs::rename(&other, &reissued).unwrap();
    eventually_within(
        Duration::from_secs(30),
        "other's kubeconfig is issued again",
        || {
            let current = server.workload_kubeconfig("other");
            std::fs::read(&current).unwrap() != std::fs::read(&reissued).unwrap()
                && server.kubectl_as(&current, &["get", "ns"]).status.success()
        },
    );
    let stale = pointed_at(
        &reissued,
        &format!("https://{}/inmemory/default/other", server.address),
        "other-stale.kubeconfig",
    );
    assert_refused(&server, &stale, "a kubeconfig issued before the last one");
}

fn admin_certificate(server: &TestServer) -> String {
    let text = std::fs::read_to_string(server.kubeconfig()).unwrap();
    text.lines()
        .find(|l| l.contains("client-certificate-data"))
        .unwrap()
        .to_string()
}

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// Regression: every restart issued a new admin certificate valid until 2035 and the old
/// one kept working. A restart now keeps what is valid; `lariat admin rotate` revokes.
#[test]
fn admin_credentials_survive_restarts_and_rotate_on_purpose() {
    let mut server = TestServer::start();
    let certificate = admin_certificate(&server);
    let token = server.admin_token();
    let saved = server.data_dir().join("old-admin.yaml");
    std::fs::copy(server.kubeconfig(), &saved).unwrap();
    server.terminate();
    server.launch();
    assert_eq!(
        admin_certificate(&server),
        certificate,
        "a restart issues nothing new"
    );
    assert_eq!(server.admin_token(), token);
    server.kubectl_ok(&["get", "ns"]);

    let rotate = |server: &TestServer| {
        Command::new(env!("CARGO_BIN_EXE_lariat"))
            .args(["admin", "rotate", "--data-dir"])
            .arg(server.data_dir())
            .output()
            .unwrap()
    };
    let running = rotate(&server);
    assert!(!running.status.success());
    let stderr = String::from_utf8_lossy(&running.stderr);
    assert!(
        stderr.contains("a lariat server is running") && stderr.lines().count() == 1,
        "{stderr}"
    );
    server.terminate();
    let rotated = rotate(&server);
    assert!(
        rotated.status.success(),
        "{}",
        String::from_utf8_lossy(&rotated.stderr)
    );
    assert!(String::from_utf8_lossy(&rotated.stdout).contains("revoked 2"));
    server.launch();
    assert_ne!(admin_certificate(&server), certificate);
    server.kubectl_ok(&["get", "ns"]);
    let stale = pointed_at(&saved, &format!("https://{}", server.address), "stale.yaml");
    assert_refused(&server, &stale, "a rotated admin certificate");
    let (code, _) = server.curl("GET", "/api/v1/namespaces", Some(&token), None, None);
    assert_eq!(code, 401, "a rotated admin token");

    #[cfg(unix)]
    {
        assert_eq!(mode(server.data_dir()), 0o700);
        assert_eq!(mode(&server.data_dir().join("state.db")), 0o600);
        assert_eq!(mode(&server.data_dir().join("tls/ca.key")), 0o600);
        assert_eq!(mode(&server.kubeconfig()), 0o600);
    }
}

/// An idle TLS connection held by `openssl s_client`, which exits when the server closes it.
struct Held {
    child: Child,
    /// What openssl reports (`-brief`: `CONNECTION ESTABLISHED` once the handshake is done).
    report: tempfile::NamedTempFile,
}

impl Held {
    fn open(address: &str) -> Held {
        let report = tempfile::NamedTempFile::new().unwrap();
        let child = Command::new("openssl")
            .args(["s_client", "-quiet", "-brief", "-connect", address])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(report.reopen().unwrap())
            .spawn()
            .unwrap();
        Held { child, report }
    }

    fn closed(&mut self) -> bool {
        self.child.try_wait().unwrap().is_some()
    }

    /// Whether the TLS handshake was done: the server admitted the connection (it refuses one
    /// beyond its limits before any TLS).
    fn established(&self) -> bool {
        std::fs::read_to_string(self.report.path())
            .is_ok_and(|report| report.contains("CONNECTION ESTABLISHED"))
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Regression: TLS connections that sent nothing, or a header byte every few seconds, stayed
/// open forever. Connections are capped per address, and closed when idle, while other
/// clients are served.
#[test]
fn abusive_connections_are_shed_and_other_clients_served() {
    let idle_timeout = Duration::from_secs(4);
    let server =
        TestServer::start_with(&["--idle-timeout", "4", "--max-connections-per-client", "10"]);
    let opened = Instant::now();
    let mut held: Vec<Held> = (0..10).map(|_| Held::open(&server.address)).collect();
    eventually("the held connections are established", || {
        held.iter().all(Held::established)
    });
    let mut extra = Held::open(&server.address);
    eventually("a connection beyond the per-address cap is closed", || {
        extra.closed()
    });
    assert!(
        !extra.established(),
        "refused before its TLS handshake, not closed when idle"
    );
    // Another address is served meanwhile.
    let (code, body) = server.curl_with(
        &["--interface", "127.0.0.2"],
        &format!("https://{}/version", server.address),
        None,
    );
    assert_eq!(code, 200, "{body}");
    // Their idle time started with their handshakes, after `opened`: however long this
    // machine took to get here, none may be closed before that much time has passed.
    let closed = held.iter_mut().map(|h| h.closed()).filter(|c| *c).count();
    assert!(
        closed == 0 || opened.elapsed() >= idle_timeout,
        "{closed} held connections were closed within their idle time"
    );
    eventually_within(
        Duration::from_secs(10),
        "idle connections are closed",
        || held.iter_mut().all(Held::closed),
    );

    // Headers trickled a byte at a time do not keep a connection. The trickle is the
    // behaviour under test; what is judged is how far it got, not how long it took.
    let mut slow = Held::open(&server.address);
    let mut stdin = slow.child.stdin.take().unwrap();
    let request = b"GET /version HTTP/1.1\r\nHost: lariat\r\nX-Slow: aaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    let mut sent = 0;
    for byte in request {
        if slow.closed() {
            break;
        }
        let _ = stdin.write_all(&[*byte]).and_then(|_| stdin.flush());
        sent += 1;
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(slow.closed(), "a trickling client is cut off");
    assert!(
        sent < request.len(),
        "before it finished its headers ({sent} of {} bytes sent)",
        request.len()
    );
    // An unauthenticated request trickling its body is answered, and let go, at once.
    let started = Instant::now();
    let body = server.data_dir().join("slow-body");
    std::fs::write(&body, vec![b' '; 100_000]).unwrap();
    let (code, _) = server.curl_with(
        &[
            "--http1.1",
            "-X",
            "POST",
            "--limit-rate",
            "1000",
            "--max-time",
            "20",
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            &format!("@{}", body.display()),
        ],
        &format!(
            "https://{}/api/v1/namespaces/default/configmaps",
            server.address
        ),
        None,
    );
    assert_eq!(code, 401);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "answered in {:?}, not after the 100 s the body would take",
        started.elapsed()
    );
    // And the server still serves.
    server.kubectl_ok(&["get", "ns"]);
}

/// Regression: a connection that reached its age was closed while idle, and an HTTP/1 client
/// sending its next request at that moment saw it fail (`bench limits` saw `/healthz` fail
/// so). Near its deadline, each HTTP/1 response says `Connection: close`, so a client that
/// keeps asking closes the connection itself and loses no request.
#[test]
fn a_connection_reaching_its_age_is_closed_by_the_client_it_tells() {
    let server = TestServer::start_with(&["--max-connection-age", "3s"]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client = server.client().await;
        let (mut told, mut asked) = (0, 0);
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(8) {
            for path in ["/healthz", "/api/v1/namespaces/default/configmaps?limit=1"] {
                let request = http::Request::get(path).body(Vec::new()).unwrap();
                let response = client
                    .send(request.map(Into::into))
                    .await
                    .unwrap_or_else(|e| panic!("request {asked} ({path}) failed: {e}"));
                assert_eq!(response.status(), 200, "{path}");
                assert_eq!(response.version(), http::Version::HTTP_11);
                asked += 1;
                if response
                    .headers()
                    .get("connection")
                    .is_some_and(|v| v == "close")
                {
                    told += 1;
                }
            }
            // A client that keeps asking, well within `CLOSE_NOTICE` (2 s): the pace is the
            // behaviour under test, and the loop's length is measured, not counted in pauses.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            told >= 2,
            "{told} of {asked} responses asked the client to close a connection aged 3 s"
        );
        assert!(told < asked, "fresh connections are kept alive");
    });
}

/// Many requests from one curl (a URL glob such as `?n=[1-300]`), 20 at a time; returns each
/// status code.
fn curl_many(server: &TestServer, args: &[&str], urls: &str) -> Vec<u16> {
    let output = Command::new("curl")
        .args(["-s", "-w", "\nstatus-code:%{http_code}\n", "--cacert"])
        .arg(server.data_dir().join("tls/ca.crt"))
        .args(["--parallel", "--parallel-max", "20"])
        .args(args)
        .arg(urls)
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("status-code:"))
        .map(|c| c.parse().unwrap())
        .collect()
}

fn status(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|_| panic!("a Status: {body}"))
}

/// Regressions: dryRun values other than All wrote for real; selectors Kubernetes rejects
/// matched everything (a deletecollection emptied a namespace); limits Kubernetes enforces
/// were not; refusals flooded the log.
#[test]
fn requests_kubernetes_refuses_are_refused_without_writing() {
    let server = TestServer::start();
    let token = server.admin_token();
    let auth = Some(token.as_str());
    let json = Some("application/json");
    let path = "/api/v1/namespaces/default/configmaps";
    let configmap =
        |name: &str| json!({"metadata": {"name": name}, "data": {"a": "b"}}).to_string();
    let exists = |name: &str| {
        server
            .curl("GET", &format!("{path}/{name}"), auth, None, None)
            .0
            == 200
    };

    for value in ["true", "all", "1", "server", "All&dryRun=x"] {
        let (code, body) = server.curl(
            "POST",
            &format!("{path}?dryRun={value}"),
            auth,
            json,
            Some(configmap("dry").as_bytes()),
        );
        assert_eq!(code, 422, "dryRun={value}: {body}");
        let status = status(&body);
        assert_eq!(status["reason"], "Invalid");
        assert_eq!(status["details"]["causes"][0]["field"], "dryRun", "{body}");
        assert!(!exists("dry"), "dryRun={value} wrote nothing");
    }
    let (code, _) = server.curl(
        "POST",
        &format!("{path}?dryRun=All"),
        auth,
        json,
        Some(configmap("dry").as_bytes()),
    );
    assert_eq!(code, 201);
    assert!(!exists("dry"), "a dry run writes nothing");

    let (code, _) = server.curl(
        "POST",
        path,
        auth,
        json,
        Some(
            json!({"metadata": {"name": "keep", "labels": {"app": "web"}}})
                .to_string()
                .as_bytes(),
        ),
    );
    assert_eq!(code, 201);
    let (code, body) = server.curl(
        "DELETE",
        &format!("{path}/keep?dryRun=true"),
        auth,
        None,
        None,
    );
    assert_eq!(code, 422, "{body}");
    let (code, body) = server.curl(
        "DELETE",
        &format!("{path}/keep"),
        auth,
        json,
        Some(br#"{"dryRun":["everything"]}"#),
    );
    assert_eq!(code, 422, "{body}");
    assert!(exists("keep"));

    for selector in [
        "!!!app",
        "!ap%20p",
        "=====",
        &"a".repeat(64),
        "app%20in%20()",
    ] {
        let (code, body) = server.curl(
            "GET",
            &format!("{path}?labelSelector={selector}"),
            auth,
            None,
            None,
        );
        assert_eq!(code, 400, "labelSelector={selector}: {body}");
        let (code, _) = server.curl(
            "DELETE",
            &format!("{path}?labelSelector={selector}"),
            auth,
            None,
            None,
        );
        assert_eq!(code, 400);
        assert!(exists("keep"), "a refused selector deletes nothing");
    }
    let (code, body) = server.curl(
        "GET",
        &format!("{path}?fieldSelector=metadata.name"),
        auth,
        None,
        None,
    );
    assert_eq!(code, 400, "{body}");
    for (query, code_wanted) in [
        ("resourceVersionMatch=Bogus&resourceVersion=1", 422),
        ("resourceVersionMatch=Exact", 422),
        ("resourceVersionMatch=Exact&resourceVersion=0", 422),
        ("resourceVersion=abc", 400),
        ("resourceVersion=99999999", 504),
    ] {
        let (code, body) = server.curl("GET", &format!("{path}?{query}"), auth, None, None);
        assert_eq!(code, code_wanted, "{query}: {body}");
    }
    let (code, body) = server.curl(
        "GET",
        &format!("{path}?watch=true&resourceVersion=99999999"),
        auth,
        None,
        None,
    );
    assert_eq!(code, 504, "{body}");
    assert_eq!(
        status(&body)["details"]["causes"][0]["reason"],
        "ResourceVersionTooLarge"
    );
    use base64::Engine;
    let future =
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(r#"{"rv":99999999,"start":""}"#);
    let (code, body) = server.curl(
        "GET",
        &format!("{path}?limit=1&continue={future}"),
        auth,
        None,
        None,
    );
    assert_eq!(code, 400, "{body}");

    // Objects over Kubernetes's limits.
    for (what, object) in [
        (
            "a 300,000-character key",
            json!({"metadata": {"name": "big"}, "data": {"k".repeat(300_000): "v"}}),
        ),
        (
            "2.9 MiB of data",
            json!({"metadata": {"name": "big"}, "data": {"k": "v".repeat(2_900_000)}}),
        ),
        (
            "a key with a slash",
            json!({"metadata": {"name": "big"}, "data": {"bad key/..": "v"}}),
        ),
        (
            "a numeric owner uid",
            json!({"metadata": {"name": "big", "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "keep", "uid": 5}]}}),
        ),
    ] {
        let (code, body) = server.curl(
            "POST",
            path,
            auth,
            json,
            Some(object.to_string().as_bytes()),
        );
        assert_eq!(code, 422, "{what}: {}", &body[..body.len().min(300)]);
        assert!(!exists("big"));
    }
    for manager in ["a%00b", "a%0Ab"] {
        let (code, body) = server.curl(
            "POST",
            &format!("{path}?fieldManager={manager}"),
            auth,
            json,
            Some(configmap("big").as_bytes()),
        );
        assert_eq!(code, 400, "fieldManager={manager}: {body}");
    }
    let (code, body) = server.curl(
        "PATCH",
        &format!("{path}/big?fieldManager=me"),
        auth,
        Some("application/apply-patch+yaml"),
        Some(b"kind: ConfigMap\nmetadata: {name: big}\n"),
    );
    assert_eq!(code, 400, "apply without apiVersion: {body}");
    assert!(!exists("big"));

    // Apply names its field manager; a patch may not turn an object into something else;
    // a patch that changes nothing writes nothing.
    let (code, body) = server.curl(
        "PATCH",
        &format!("{path}/keep"),
        auth,
        Some("application/apply-patch+yaml"),
        Some(b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: keep}\n"),
    );
    assert_eq!(code, 422, "apply without fieldManager: {body}");
    let (code, body) = server.curl(
        "PATCH",
        &format!("{path}/keep"),
        auth,
        Some("application/json-patch+json"),
        Some(br#"[{"op":"replace","path":"","value":{"x":1}}]"#),
    );
    assert_eq!(code, 400, "{body}");
    let version = |body: &str| {
        serde_json::from_str::<Value>(body).unwrap()["metadata"]["resourceVersion"].clone()
    };
    let (_, before) = server.curl("GET", &format!("{path}/keep"), auth, None, None);
    let (code, after) = server.curl(
        "PATCH",
        &format!("{path}/keep"),
        auth,
        Some("application/strategic-merge-patch+json"),
        Some(br#"{"metadata":{"labels":{"app":"web"}}}"#),
    );
    assert_eq!(code, 200, "{after}");
    assert_eq!(
        version(&before),
        version(&after),
        "a no-op patch keeps the resourceVersion"
    );

    // A JSON patch's resourceVersion is a precondition, as a PUT's and a merge patch's are.
    let stale = r#"[{"op":"replace","path":"/metadata/resourceVersion","value":"1"},{"op":"add","path":"/data","value":{"x":"y"}}]"#;
    let (code, body) = server.curl(
        "PATCH",
        &format!("{path}/keep"),
        auth,
        Some("application/json-patch+json"),
        Some(stale.as_bytes()),
    );
    assert_eq!(code, 409, "{body}");
    // A patch may not rename.
    let (code, body) = server.curl(
        "PATCH",
        &format!("{path}/keep"),
        auth,
        Some("application/merge-patch+json"),
        Some(br#"{"metadata":{"name":"renamed"}}"#),
    );
    assert_eq!(code, 400, "{body}");
    assert!(
        status(&body)["message"]
            .as_str()
            .unwrap()
            .contains("does not match the name on the URL")
    );
    assert!(exists("keep") && !exists("renamed"));

    // Refusals are counted, and logged at most once per interval.
    let codes = curl_many(
        &server,
        &["-H", "Authorization: Bearer wrong"],
        &format!("https://{}/api/v1/namespaces?n=[1-300]", server.address),
    );
    assert_eq!(codes.iter().filter(|c| **c == 401).count(), 300);
    let logged = server.log().matches("request refused").count();
    assert!(logged <= 2, "{logged} log lines for 300 refusals");
    let (_, metrics) = server.curl("GET", "/metrics", auth, None, None);
    let refused: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("lariat_authentication_failures_total "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(refused >= 300, "{metrics}");

    // An early 401 on HTTP/2 still answers a client that is sending a body.
    let (code, body) = server.curl_with(
        &[
            "--http2",
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
        ],
        &format!("https://{}{path}", server.address),
        Some(&vec![b' '; 1024 * 1024]),
    );
    assert_eq!(code, 401, "{body}");
    // The cluster proxy's early refusals (a cluster that does not exist, the agent's handoff
    // by the wrong method) answer a client sending a body over HTTP/2 with their status. (A
    // probe saw curl get a reset stream for a quarter of them from a release build before
    // the proxy read the body first; this harness has not reproduced that reset.)
    let bearer = format!("Authorization: Bearer {token}");
    for (method, proxied, expected) in [
        (
            "POST",
            "/k8s/clusters/default/nosuch/api/v1/namespaces",
            404,
        ),
        (
            "PUT",
            "/k8s/clusters/default/nosuch/lariat-agent/v1/handoff",
            405,
        ),
    ] {
        for _ in 0..20 {
            let (code, body) = server.curl_with(
                &[
                    "--http2",
                    "-X",
                    method,
                    "-H",
                    &bearer,
                    "-H",
                    "Content-Type: application/json",
                ],
                &format!("https://{}{proxied}", server.address),
                Some(b"{}"),
            );
            assert_eq!(code, expected, "{method} {proxied}: {body}");
        }
    }
    assert!(!server.log().contains("panicked"));
}

/// Regression: agent handshake admission ran before authentication, so 2,000 bad-token
/// attempts made a valid agent's reconnect get 429 half the time.
#[test]
fn failed_agent_handshakes_never_starve_a_valid_agent() {
    let server = TestServer::start_with(&["--agent-handshake-rate", "2"]);
    let output = server.lariat(&["cluster", "import", "edge"]);
    assert!(output.status.success());
    let stdout = String::from_utf8(output.stdout).unwrap();
    let token = stdout
        .split("--token ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap()
        .to_string();
    let (id, _) = token.split_once('.').unwrap();
    let version = format!("X-Lariat-Agent-Version: {}", env!("CARGO_PKG_VERSION"));
    let upgrade = [
        "--http1.1",
        "-H",
        "Connection: Upgrade",
        "-H",
        "Upgrade: lariat-tunnel/1",
        "-H",
        &version,
    ];

    // 2,000 attempts with a wrong secret from another address.
    let bad = format!("Authorization: Bearer {id}.{}", "x".repeat(32));
    let mut args = vec!["--interface", "127.0.0.2", "-H", &bad];
    args.extend(upgrade);
    let started = Instant::now();
    let codes = curl_many(
        &server,
        &args,
        &format!("https://{}/v3/connect?n=[1-2000]", server.address),
    );
    let count = |code: u16| codes.iter().filter(|c| **c == code).count();
    assert_eq!(count(403) + count(429), 2000, "{codes:?}");
    // The budget refills while the attempts run (slowly on a loaded machine), and the 20
    // attempts curl has in flight may each pass the check before the others are counted.
    let budget = FAILURE_BURST + FAILURES_PER_SECOND * started.elapsed().as_secs_f64() + 20.0;
    assert!(
        (count(403) as f64) <= budget,
        "failed attempts beyond the per-address budget ({budget:.0} in {:?}) are turned away before authentication: {} were looked at",
        started.elapsed(),
        count(403)
    );

    // The valid agent, from its own address, is admitted at once: once it says which
    // version it is (the support matrix's skew policy).
    let bearer = format!("Authorization: Bearer {token}");
    let (code, body) = server.curl_with(
        &[
            "--http1.1",
            "-H",
            "Connection: Upgrade",
            "-H",
            "Upgrade: lariat-tunnel/1",
            "-H",
            &bearer,
        ],
        &format!("https://{}/v3/connect", server.address),
        None,
    );
    assert_eq!(code, 400, "{body}");
    assert!(
        body.contains("the agent did not report its version"),
        "{body}"
    );
    let mut args = upgrade.to_vec();
    args.extend(["-H", &bearer, "--max-time", "3", "-D", "-"]);
    let (_, headers) = server.curl_with(
        &args,
        &format!("https://{}/v3/connect", server.address),
        None,
    );
    assert!(
        headers.starts_with("HTTP/1.1 101"),
        "the valid agent is admitted: {headers}"
    );

    // Whether a cluster exists cannot be learnt from the refusal: a wrong secret for the
    // credential of a real cluster (its id derives from the cluster's name) and an id that
    // exists nowhere get the same answer.
    let real = &lariat_apiserver::identity::sha256_hex("default/edge")[..20];
    let answers: Vec<String> = [format!("{real}.guess"), "zzzzzzzz.guess".to_string()]
        .iter()
        .map(|token| {
            let bearer = format!("Authorization: Bearer {token}");
            let mut args = upgrade.to_vec();
            args.extend(["-H", &bearer]);
            let (code, body) = server.curl_with(
                &args,
                &format!("https://{}/v3/connect", server.address),
                None,
            );
            assert_eq!(code, 403, "{body}");
            status(&body)["message"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(answers[0], answers[1]);
}
