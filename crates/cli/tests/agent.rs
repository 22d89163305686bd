//! Agents and tunnels end to end: a cluster lariat did not create (a second lariat server,
//! reached only by kube-rs in the agent) is imported, its agent dials out through a relay the
//! test controls, and plain kubectl reaches it through the server's proxy, watch included. The
//! connection survives a server restart and a cut; bad tokens, a CA mismatch, a second agent,
//! garbage after the upgrade and a stream flood are refused or absorbed without harm.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Agent, TestServer, cluster_condition, eventually, eventually_within, import_cluster};

/// A TCP relay from a fixed port to the server's current address, which the test can point
/// elsewhere (a restarted server), cut (every open connection) or pause (refuse new ones).
struct Relay {
    port: u16,
    target: Arc<Mutex<String>>,
    open: Arc<Mutex<Vec<TcpStream>>>,
    paused: Arc<AtomicBool>,
}

impl Relay {
    fn start(target: &str) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let relay = Relay {
            port: listener.local_addr().unwrap().port(),
            target: Arc::new(Mutex::new(target.to_string())),
            open: Default::default(),
            paused: Default::default(),
        };
        let (target, open, paused) = (
            relay.target.clone(),
            relay.open.clone(),
            relay.paused.clone(),
        );
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                if paused.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let address = target.lock().unwrap().clone();
                let Ok(server) = TcpStream::connect(&address) else {
                    continue;
                };
                open.lock()
                    .unwrap()
                    .extend([client.try_clone().unwrap(), server.try_clone().unwrap()]);
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(Shutdown::Both);
                    });
                }
            }
        });
        relay
    }

    fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    fn retarget(&self, target: &str) {
        *self.target.lock().unwrap() = target.to_string();
    }

    fn cut(&self) {
        for stream in self.open.lock().unwrap().drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

/// An HTTP proxy that only does CONNECT, counting the tunnels it opened.
fn connect_proxy() -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let tunnels = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = tunnels.clone();
    std::thread::spawn(move || {
        for mut client in listener.incoming().flatten() {
            let count = count.clone();
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && client.read(&mut byte).unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).to_string();
                let Some(target) = head
                    .strip_prefix("CONNECT ")
                    .and_then(|r| r.split(' ').next())
                else {
                    let _ = client.write_all(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n");
                    return;
                };
                let Ok(server) = TcpStream::connect(target) else {
                    let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n");
                    return;
                };
                count.fetch_add(1, Ordering::SeqCst);
                client
                    .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .unwrap();
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(Shutdown::Both);
                    });
                }
            });
        }
    });
    (port, tunnels)
}

fn kubectl_via(
    kubeconfig: &std::path::Path,
    home: &std::path::Path,
    args: &[&str],
) -> std::process::Output {
    Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("HOME", home)
        .output()
        .unwrap()
}

#[test]
fn an_imported_cluster_is_reached_through_its_agent() {
    let mut management = TestServer::start();
    let downstream = TestServer::start();
    let (token, checksum) = import_cluster(&management, "remote", "1h");
    assert_eq!(checksum.len(), 64);
    assert_eq!(
        management.kubectl_ok(&[
            "get",
            "cluster",
            "remote",
            "-o",
            "jsonpath={.metadata.annotations}"
        ]),
        r#"{"management.lariat.dev/imported":"true"}"#
    );

    // The import manifest installs the agent into any cluster with kubectl apply.
    let manifest = Command::new("curl")
        .args(["--insecure", "-sf"])
        .arg(format!(
            "https://{}/v3/import/{token}.yaml",
            management.address
        ))
        .output()
        .unwrap();
    assert!(manifest.status.success());
    let manifest = String::from_utf8(manifest.stdout).unwrap();
    downstream.apply_ok(&["apply", "-f", "-"], &manifest);
    assert_eq!(
        downstream.kubectl_ok(&[
            "get",
            "deployment",
            "lariat-agent",
            "-n",
            "lariat-system",
            "-o",
            "jsonpath={.spec.template.spec.serviceAccountName}"
        ]),
        "lariat-agent"
    );
    assert_eq!(
        downstream.kubectl_ok(&[
            "get",
            "secret",
            "lariat-agent",
            "-n",
            "lariat-system",
            "-o",
            "go-template={{.data.token | base64decode}}"
        ]),
        token
    );
    assert_eq!(
        downstream.kubectl_ok(&[
            "get",
            "clusterrolebinding",
            "lariat-agent",
            "-o",
            "jsonpath={.roleRef.name}"
        ]),
        "cluster-admin"
    );
    let (code, body) =
        management.curl("GET", "/v3/import/abcdef.0123456789.yaml", None, None, None);
    assert_eq!(code, 403, "{body}");

    // No kubelet runs here, so the test runs what the Deployment would: lariat agent.
    let relay = Relay::start(&management.address);
    let _agent = Agent::start(
        management.data_dir(),
        "remote",
        &relay.url(),
        &token,
        &checksum,
        &downstream,
    );
    eventually("the imported cluster is connected", || {
        cluster_condition(&management, "remote", "Connected") == "True"
    });
    eventually("the imported cluster is Provisioned and Ready", || {
        management.kubectl_ok(&["get", "cluster", "remote", "-o", "jsonpath={.status.phase}"])
            == "Provisioned"
            && cluster_condition(&management, "remote", "Ready") == "True"
    });
    let (id, _) = token.split_once('.').unwrap();
    assert!(
        !management
            .kubectl(&["get", "clusterregistrationtoken", id, "-n", "lariat-system"])
            .status
            .success(),
        "a registration token registers once"
    );
    let connection = management.kubectl_ok(&[
        "get",
        "clusterconnection",
        "remote",
        "-o",
        "jsonpath={.status.connected} {.status.kubernetesVersion} {.status.nodeCount}",
    ]);
    assert!(connection.starts_with("true v"), "{connection}");
    // The connection's Node figures follow the cluster's Nodes: a new one is counted, from a
    // watch through the tunnel rather than a list of every cluster's Nodes each minute.
    let count = |what: &str| {
        management
            .kubectl_ok(&[
                "get",
                "clusterconnection",
                "remote",
                "-o",
                &format!("jsonpath={{.status.{what}}}"),
            ])
            .parse::<i64>()
            .unwrap_or(-1)
    };
    eventually("the Nodes are counted", || count("nodeCount") >= 0);
    let nodes_before = count("nodeCount");
    let ready_before = count("readyNodeCount");
    let node = serde_json::json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "added-later"},
        "status": {"capacity": {"cpu": "2", "memory": "4Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}]},
    });
    let created = downstream.kubectl_stdin(&["create", "-f", "-"], &node.to_string());
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    // A Node's status is its own subresource: written as the kubelet writes it.
    downstream.kubectl_ok(&[
        "patch",
        "node",
        "added-later",
        "--subresource=status",
        "--type=merge",
        "-p",
        &serde_json::json!({"status": node["status"]}).to_string(),
    ]);
    eventually("the new Node is counted, and counted Ready", || {
        count("nodeCount") == nodes_before + 1 && count("readyNodeCount") == ready_before + 1
    });
    let metrics = downstream.kubectl_ok(&["get", "--raw", "/metrics"]);
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("apiserver_request_total{")
                && l.contains(r#"verb="WATCH""#)
                && l.contains(r#"resource="nodes""#)),
        "the cluster's Nodes are watched through the tunnel"
    );
    // `lariat describe cluster` shows an imported cluster's connection on its own row.
    let described = management.lariat(&["describe", "cluster", "remote"]);
    let described = String::from_utf8_lossy(&described.stdout).to_string();
    let row = described
        .lines()
        .find(|l| l.contains("Connection - ClusterConnection/remote"))
        .unwrap_or_else(|| panic!("a connection row:\n{described}"));
    assert!(
        row.contains("True") && row.contains("Kubernetes v") && row.contains("nodes"),
        "{described}"
    );
    let credential = common::agent_credential(&downstream);
    assert!(
        credential.contains('.'),
        "the agent keeps its credential in its own cluster"
    );
    // A cluster's credential opens its tunnel and, on lariat's API, only its own cluster's
    // BundleDeployments (tests/fleet.rs): not Secrets, not another cluster's objects.
    let (code, _) = management.curl(
        "GET",
        "/api/v1/namespaces/default/secrets",
        Some(&credential),
        None,
        None,
    );
    assert_eq!(code, 403);
    let (code, _) = management.curl(
        "GET",
        "/k8s/clusters/default/remote/api/v1/namespaces",
        Some(&credential),
        None,
        None,
    );
    assert_eq!(code, 403);

    // Plain kubectl through the proxy: read, write, watch.
    let kubeconfig = management.proxied_kubeconfig("remote");
    let home = management.home.path().to_path_buf();
    let namespaces = kubectl_via(&kubeconfig, &home, &["get", "namespaces", "-o", "name"]);
    assert!(
        namespaces.status.success(),
        "{}",
        String::from_utf8_lossy(&namespaces.stderr)
    );
    assert!(String::from_utf8_lossy(&namespaces.stdout).contains("namespace/lariat-system"));
    let mut apply = Command::new("kubectl")
        .args(["apply", "-f", "-"])
        .env("KUBECONFIG", &kubeconfig)
        .env("HOME", &home)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    apply
        .stdin
        .take()
        .unwrap()
        .write_all(b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: via-proxy, namespace: default}\ndata: {hello: world}\n")
        .unwrap();
    let applied = apply.wait_with_output().unwrap();
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    assert_eq!(
        downstream.kubectl_ok(&[
            "get",
            "configmap",
            "via-proxy",
            "-o",
            "jsonpath={.data.hello}"
        ]),
        "world"
    );
    let mut watch = Command::new("kubectl")
        .args(["get", "configmaps", "--watch", "-o", "name"])
        .env("KUBECONFIG", &kubeconfig)
        .env("HOME", &home)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (lines, seen) = std::sync::mpsc::channel();
    let stdout = watch.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let until_line = |wanted: &str| loop {
        let line = seen
            .recv_timeout(Duration::from_secs(15))
            .unwrap_or_else(|_| panic!("no {wanted} from the watch through the tunnel"));
        if line == wanted {
            break;
        }
    };
    // kubectl lists, prints the list, then watches from the list's resourceVersion: a
    // ConfigMap created once the list is printed reaches it by the watch alone.
    until_line("configmap/via-proxy");
    downstream.kubectl_ok(&["create", "configmap", "watched", "--from-literal=a=b"]);
    until_line("configmap/watched");
    let _ = watch.kill();
    let _ = watch.wait();

    // A cut connection: the agent reconnects by itself.
    relay.cut();
    eventually("the agent reconnects after a cut", || {
        management.log().matches("agent connected").count() >= 2
    });

    // The relay refuses connections: the server notices within 30 s.
    relay.paused.store(true, Ordering::SeqCst);
    relay.cut();
    eventually_within(Duration::from_secs(35), "the lost connection shows", || {
        cluster_condition(&management, "remote", "Connected") == "False"
    });
    let message = management.kubectl_ok(&[
        "get",
        "cluster",
        "remote",
        "-o",
        r#"jsonpath={.status.conditions[?(@.type=="Connected")].reason}"#,
    ]);
    assert_eq!(message, "AgentDisconnected");
    let refused = kubectl_via(&kubeconfig, &home, &["get", "namespaces"]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr)
            .contains("cluster default/remote is not connected"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    relay.paused.store(false, Ordering::SeqCst);

    // A server restart (new address behind the same relay): the agent comes back with its
    // credential, though the registration token is gone.
    management.kubectl_ok(&[
        "delete",
        "clusterregistrationtokens",
        "--all",
        "-n",
        "lariat-system",
    ]);
    management.kill9();
    management.launch();
    relay.retarget(&management.address);
    eventually_within(
        Duration::from_secs(40),
        "the agent reconnects after a restart",
        || management.log().contains("agent connected"),
    );
    let kubeconfig = management.proxied_kubeconfig("remote"); // the server's new address
    eventually("the proxy works again", || {
        kubectl_via(
            &kubeconfig,
            &home,
            &["get", "configmap", "via-proxy", "-o", "name"],
        )
        .status
        .success()
    });
    eventually("the cluster is connected again", || {
        cluster_condition(&management, "remote", "Connected") == "True"
    });
    // HEARTBEAT is the new connection's check-in, not the last one before the restart.
    eventually("the reconnection checked in", || {
        let times = management.kubectl_ok(&[
            "get",
            "clusterconnection",
            "remote",
            "-o",
            "jsonpath={.status.connectedSince} {.status.lastHeartbeat}",
        ]);
        let mut times = times.split(' ');
        let (since, heartbeat) = (times.next().unwrap_or(""), times.next().unwrap_or(""));
        !since.is_empty() && heartbeat >= since
    });

    // The credential dies with its Cluster on the API at once (as soon as the watch brings
    // the deletion), not after a time to live: 403 (an agent, refused this path) becomes 401.
    let as_agent = || {
        management
            .curl(
                "GET",
                "/api/v1/namespaces/default/secrets",
                Some(&credential),
                None,
                None,
            )
            .0
    };
    assert_eq!(as_agent(), 403);
    management.kubectl_ok(&["delete", "cluster", "remote", "--wait=false"]);
    eventually_within(
        Duration::from_secs(3),
        "the deleted cluster's credential is refused",
        || as_agent() == 401,
    );
}

#[test]
fn bad_agents_are_refused_with_a_reason_and_the_server_stays_up() {
    let management = TestServer::start();
    let downstream = TestServer::start();
    let dir = management.data_dir();
    let server = format!("https://{}", management.address);
    let (token, checksum) = import_cluster(&management, "guarded", "1h");
    let (id, _) = token.split_once('.').unwrap();

    let wrong = Agent::start(
        dir,
        "wrong",
        &server,
        &format!("{id}.{}", "x".repeat(32)),
        &checksum,
        &downstream,
    );
    let unknown = Agent::start(
        dir,
        "unknown",
        &server,
        "zzzzzz.secret",
        &checksum,
        &downstream,
    );
    let mismatch = Agent::start(
        dir,
        "mismatch",
        &server,
        &token,
        &"0".repeat(64),
        &downstream,
    );
    let (short, _) = import_cluster(&management, "guarded", "1s");
    // Started once the token's recorded expiry has passed, as soon as it has.
    let (short_id, _) = short.split_once('.').unwrap();
    let expires = management.kubectl_ok(&[
        "get",
        "clusterregistrationtoken",
        short_id,
        "-n",
        "lariat-system",
        "-o",
        "jsonpath={.spec.expirationTimestamp}",
    ]);
    let expires = chrono::DateTime::parse_from_rfc3339(expires.trim()).unwrap();
    eventually("the short-lived token expires", || {
        expires < chrono::Utc::now()
    });
    let expired = Agent::start(dir, "expired", &server, &short, &checksum, &downstream);
    eventually("each bad agent logs why it is refused", || {
        wrong
            .log()
            .contains("unknown, revoked or wrong agent token")
            && unknown
                .log()
                .contains("unknown, revoked or wrong agent token")
            && mismatch.log().contains("does not match --ca-checksum")
            && expired.log().contains("expired registration token")
    });
    drop((wrong, unknown, mismatch, expired));
    assert!(
        !management.log().contains(&token),
        "no token in the server's log"
    );

    // The real agent connects; a second one for the same cluster is refused.
    let first = Agent::start(dir, "first", &server, &token, &checksum, &downstream);
    eventually("the first agent connects", || {
        cluster_condition(&management, "guarded", "Connected") == "True"
    });
    let other_downstream = TestServer::start();
    let (second_token, _) = import_cluster(&management, "guarded", "1h");
    let second = Agent::start(
        dir,
        "second",
        &server,
        &second_token,
        &checksum,
        &other_downstream,
    );
    eventually("the second agent is refused", || {
        second.log().contains("already has a connected agent")
    });
    assert!(first.log().contains("tunnel up"));

    // Revoking a token: deleting it.
    let (revoked, _) = import_cluster(&management, "guarded", "1h");
    let (revoked_id, _) = revoked.split_once('.').unwrap();
    management.kubectl_ok(&[
        "delete",
        "clusterregistrationtoken",
        revoked_id,
        "-n",
        "lariat-system",
    ]);
    let late = Agent::start(dir, "late", &server, &revoked, &checksum, &other_downstream);
    eventually("a revoked token is refused", || {
        late.log().contains("unknown, revoked or wrong agent token")
    });

    // Garbage after the upgrade: the tunnel fails, the server does not.
    let (garbage_token, _) = import_cluster(&management, "garbage", "1h");
    let mut openssl = Command::new("openssl")
        .args(["s_client", "-quiet", "-connect", &management.address])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = openssl.stdin.take().unwrap();
    write!(
        stdin,
        "GET /v3/connect HTTP/1.1\r\nHost: lariat\r\nConnection: Upgrade\r\nUpgrade: lariat-tunnel/1\r\nX-Lariat-Agent-Version: {}\r\nAuthorization: Bearer {garbage_token}\r\n\r\n",
        env!("CARGO_PKG_VERSION")
    )
    .unwrap();
    let mut first_line = [0u8; 12];
    openssl
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut first_line)
        .unwrap();
    assert_eq!(&first_line, b"HTTP/1.1 101");
    stdin.write_all(&[0xff; 4096]).unwrap();
    drop(stdin);
    let _ = openssl.wait();
    eventually("the broken tunnel is logged", || {
        let log = management.log();
        log.contains("agent tunnel handshake failed")
            || log.matches("agent disconnected").count() >= 1
    });

    // A stream flood through the proxy: every request is answered, in turn.
    let token = management.admin_token();
    let flood = Command::new("curl")
        .args([
            "--parallel",
            "--parallel-max",
            "300",
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}\n",
            "--cacert",
        ])
        .arg(management.data_dir().join("tls/ca.crt"))
        .args(["-H", &format!("Authorization: Bearer {token}")])
        .arg(format!(
            "https://{}/k8s/clusters/default/guarded/api/v1/namespaces?flood=[1-600]",
            management.address
        ))
        .output()
        .unwrap();
    let codes = String::from_utf8_lossy(&flood.stdout);
    assert_eq!(
        codes.lines().filter(|c| *c == "200").count(),
        600,
        "{codes}"
    );
    let (code, _) = management.curl("GET", "/healthz", None, None, None);
    assert_eq!(code, 200);

    // Deleting the Cluster closes its tunnel: a re-import under the name starts afresh.
    let (stale, _) = import_cluster(&management, "guarded", "1h");
    management.kubectl_ok(&["delete", "cluster", "guarded"]);
    eventually_within(
        Duration::from_secs(30),
        "the deleted cluster's tunnel closes",
        || {
            management
                .log()
                .contains("closing the tunnel of a deleted cluster")
        },
    );
    // A token issued for the deleted Cluster does not register the one imported again under
    // its name.
    drop(first);
    let (_fresh, _) = import_cluster(&management, "guarded", "1h");
    let stale = Agent::start(dir, "stale", &server, &stale, &checksum, &other_downstream);
    eventually("a token of the deleted cluster is refused", || {
        stale
            .log()
            .contains("the cluster this registration token is for no longer exists")
    });
    drop((second, late, stale));
}

/// Behind an egress proxy the agent tunnels through it with CONNECT (HTTPS_PROXY), and TLS to
/// lariat still runs end to end.
#[test]
fn the_agent_dials_through_an_http_proxy() {
    let management = TestServer::start();
    let downstream = TestServer::start();
    let (token, checksum) = import_cluster(&management, "behind-proxy", "1h");
    let (port, tunnels) = connect_proxy();
    let proxy = format!("http://127.0.0.1:{port}");
    let agent = Agent::start_with_env(
        management.data_dir(),
        "proxied",
        &format!("https://{}", management.address),
        &token,
        &checksum,
        &downstream,
        &[("HTTPS_PROXY", &proxy), ("NO_PROXY", "")],
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while cluster_condition(&management, "behind-proxy", "Connected") != "True" {
        assert!(
            std::time::Instant::now() < deadline,
            "the agent did not connect through the proxy:\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        tunnels.load(Ordering::SeqCst) >= 2,
        "the CA download and the tunnel went through the proxy"
    );
    assert!(agent.log().contains("tunnel up"));
}

/// SIGTERM stops a server at once although an agent's tunnel and a client's watch are open:
/// the watch ends and the tunnel closes when the stop begins (kube-apiserver ends watches
/// when it stops), instead of holding the stop up to the grace given to requests (issue 41:
/// 7 s with one agent connected, and a restart in that window was refused).
#[test]
fn a_stop_does_not_wait_for_tunnels_and_watches() {
    let mut management = TestServer::start();
    let downstream = TestServer::start();
    let (token, checksum) = import_cluster(&management, "held", "1h");
    let agent = Agent::start(
        management.data_dir(),
        "held",
        &format!("https://{}", management.address),
        &token,
        &checksum,
        &downstream,
    );
    eventually("the imported cluster is connected", || {
        cluster_condition(&management, "held", "Connected") == "True"
    });
    management.kubectl_ok(&["create", "configmap", "watched"]);
    let mut watch = management
        .kubectl_command(&["get", "configmaps", "-w"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(watch.stdout.as_mut().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("NAME"), "the watch is open: {first}");

    let started = std::time::Instant::now();
    let status = management.terminate();
    let took = started.elapsed();
    assert!(status.success(), "{status}: {}", management.log());
    // The grace for requests in flight is 5 s; nothing in flight should need it.
    assert!(
        took < Duration::from_secs(4),
        "the stop took {took:?}: {}",
        management.log()
    );
    eventually("the agent notices and retries", || {
        agent.log().contains("agent cannot connect")
    });
    let _ = watch.kill();
    let _ = watch.wait();
}
