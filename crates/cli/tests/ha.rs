//! High availability: three lariat servers joined with one token on a three-member etcd
//! cluster (Debian's etcd), as an operator runs them. They share one CA and one encryption
//! key through the datastore; one replica runs the controllers, elected on a Lease; faults
//! (the leader killed, an etcd member killed) lose no acknowledged write.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{TestServer, eventually, eventually_within, generate_cluster};
use lariat_store::etcd_process::EtcdCluster;
use serde_json::Value;

const TOKEN: &str = "ha-test-join-token-0123456789";

fn replica(endpoints: &str) -> TestServer {
    TestServer::start_with(&["--datastore-endpoint", endpoints, "--token", TOKEN])
}

/// Starts a server on `endpoints` with `extra` flags, which must fail: its stderr.
fn refused_start(endpoints: &str, data_dir: &std::path::Path, extra: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_lariat"))
        .args([
            "server",
            "--listen",
            "127.0.0.1:0",
            "--datastore-endpoint",
            endpoints,
        ])
        .arg("--data-dir")
        .arg(data_dir)
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        !output.status.success(),
        "the server started with {extra:?}"
    );
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The holder of the controllers' Lease, as `kubectl get leases -n lariat-system` shows it.
fn holder(through: &TestServer) -> String {
    through
        .kubectl(&[
            "get",
            "lease",
            "-n",
            "lariat-system",
            "lariat-controllers",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ])
        .stdout
        .iter()
        .map(|b| *b as char)
        .collect()
}

/// The replica a holder identity (`HOST_PORT_RANDOM`) names.
fn port_of(server: &TestServer) -> String {
    server.address.rsplit(':').next().unwrap().to_string()
}

fn leads(server: &TestServer, holder: &str) -> bool {
    holder.contains(&format!("_{}_", port_of(server)))
}

/// Writes one ConfigMap through `server`; `true` when the write was acknowledged.
fn write(server: &TestServer, name: &str) -> bool {
    server
        .kubectl(&[
            "create",
            "configmap",
            name,
            "-n",
            "acked",
            "--from-literal=n=1",
            "--request-timeout=15s",
        ])
        .status
        .success()
}

fn machines(server: &TestServer) -> Vec<Value> {
    let out = server.kubectl_ok(&["get", "machines", "-n", "ha", "-o", "json"]);
    serde_json::from_str::<Value>(&out).unwrap()["items"]
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn three_replicas_share_one_ca_elect_one_leader_and_survive_faults() {
    let mut etcd =
        EtcdCluster::start(3).expect("start a 3-member etcd (apt-get install -y etcd-server)");
    let endpoints = etcd.endpoints();
    let first = replica(&endpoints);
    let second = replica(&endpoints);
    let third = replica(&endpoints);
    let mut replicas = vec![first, second, third];

    // One CA, one encryption key: every replica's files are the first's.
    let ca = std::fs::read(replicas[0].data_dir().join("tls/ca.crt")).unwrap();
    let key = std::fs::read(replicas[0].data_dir().join("encryption.key")).unwrap();
    for other in &replicas[1..] {
        assert_eq!(
            std::fs::read(other.data_dir().join("tls/ca.crt")).unwrap(),
            ca
        );
        assert_eq!(
            std::fs::read(other.data_dir().join("encryption.key")).unwrap(),
            key
        );
    }
    // So one replica's kubeconfig works against every other, and a Secret written through one
    // is read through another.
    replicas[0].kubectl_ok(&["create", "namespace", "acked"]);
    replicas[0].kubectl_ok(&[
        "create",
        "secret",
        "generic",
        "s",
        "-n",
        "acked",
        "--from-literal=k=v1",
    ]);
    for other in &replicas[1..] {
        let server = format!("--server=https://{}", other.address);
        let value = replicas[0].kubectl_ok(&[
            &server,
            "get",
            "secret",
            "s",
            "-n",
            "acked",
            "-o",
            "jsonpath={.data.k}",
        ]);
        assert_eq!(value, "djE=", "read through {}", other.address);
    }

    // A wrong token is refused in one line that says so, and no token is ever logged.
    let refused_dir = tempfile::tempdir().unwrap();
    let stderr = refused_start(
        &endpoints,
        refused_dir.path(),
        &["--token", "not-the-join-token-at-all"],
    );
    assert!(
        stderr.contains("the join token is not the one this datastore's servers were started with"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(!stderr.contains("not-the-join-token-at-all"));
    assert!(!refused_dir.path().join("kubeconfig.yaml").exists());
    for server in &replicas {
        assert!(
            !server.log().contains(TOKEN),
            "a replica logged the join token"
        );
    }
    // Nor does a server without the token join with a CA and encryption key of its own.
    let stderr = refused_start(&endpoints, refused_dir.path(), &[]);
    assert!(
        stderr.contains("give this server the same token"),
        "{stderr}"
    );

    // One leader, named by the Lease every replica serves.
    let mut leader_holder = String::new();
    eventually("one replica holds the controllers' lease", || {
        leader_holder = holder(&replicas[1]);
        replicas.iter().filter(|r| leads(r, &leader_holder)).count() == 1
    });
    let table = replicas[2].kubectl_ok(&["get", "leases", "-n", "lariat-system"]);
    assert!(
        table.contains("HOLDER") && table.contains(&leader_holder),
        "{table}"
    );

    // Acknowledged writes are counted from here on, through every replica in turn.
    let mut acknowledged = Vec::new();
    let mut attempt = 0;
    let mut write_round = |replicas: &[TestServer], acknowledged: &mut Vec<String>| {
        for server in replicas {
            attempt += 1;
            let name = format!("ack-{attempt}");
            if write(server, &name) {
                acknowledged.push(name);
            }
        }
    };
    write_round(&replicas, &mut acknowledged);
    assert_eq!(acknowledged.len(), 3, "every replica takes writes");

    // Provisioning through one replica while the controllers run on the leader.
    replicas[0].init_inmemory();
    replicas[0].kubectl_ok(&["create", "namespace", "ha"]);
    let manifests = generate_cluster(&[
        "ha",
        "--infrastructure",
        "inmemory",
        "--control-plane-machine-count",
        "1",
        "--worker-machine-count",
        "3",
        "--kubernetes-version",
        "v1.30.2",
        "--provisioning-delay",
        "5s",
        "-n",
        "ha",
    ]);
    replicas[0].apply_ok(&["apply", "-f", "-"], &manifests);
    eventually_within(Duration::from_secs(60), "the machines are created", || {
        machines(&replicas[0]).len() == 4
    });
    let before: Vec<String> = machines(&replicas[0])
        .iter()
        .map(|m| m["metadata"]["name"].as_str().unwrap().to_string())
        .collect();

    // kill -9 the leader: another replica takes the lease, within the lease's duration.
    let leader = replicas
        .iter()
        .position(|r| leads(r, &leader_holder))
        .unwrap();
    replicas[leader].kill9();
    let killed = Instant::now();
    let mut dead = replicas.remove(leader);
    let mut new_holder = String::new();
    eventually_within(
        Duration::from_secs(30),
        "another replica takes the lease",
        || {
            new_holder = holder(&replicas[0]);
            replicas.iter().any(|r| leads(r, &new_holder))
        },
    );
    eprintln!(
        "takeover after kill -9 of the leader: {:?}",
        killed.elapsed()
    );
    write_round(&replicas, &mut acknowledged);

    // Provisioning goes on under the new leader, with the same machines: none twice.
    eventually_within(Duration::from_secs(120), "every machine is Running", || {
        let list = machines(&replicas[0]);
        list.len() == 4 && list.iter().all(|m| m["status"]["phase"] == "Running")
    });
    let after: Vec<String> = machines(&replicas[1])
        .iter()
        .map(|m| m["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        before, after,
        "no machine created or deleted across the takeover"
    );
    eventually("the cluster is Ready under the new leader", || {
        replicas[0].kubectl_ok(&[
            "get",
            "cluster",
            "ha",
            "-n",
            "ha",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ]) == "True"
    });

    // One etcd member killed: writes go on through both remaining replicas.
    etcd.kill(0);
    for _ in 0..3 {
        write_round(&replicas, &mut acknowledged);
    }
    // The killed replica comes back as a candidate and joins with the same token.
    dead.launch();
    replicas.push(dead);
    etcd.restart(0).unwrap();
    etcd.wait_healthy(0).unwrap();
    write_round(&replicas, &mut acknowledged);

    // Quorum lost (two of three members down): not ready, and a write is refused with 503,
    // never acknowledged; the leader, cut off, steps down.
    let leader_now = holder(&replicas[0]);
    etcd.kill(1);
    etcd.kill(2);
    eventually_within(
        Duration::from_secs(30),
        "every replica reports not ready",
        || {
            replicas
                .iter()
                .all(|r| !r.kubectl(&["get", "--raw", "/readyz"]).status.success())
        },
    );
    let refused = replicas[0].kubectl(&[
        "create",
        "configmap",
        "during-outage",
        "-n",
        "acked",
        "--request-timeout=40s",
        "-v=6",
    ]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success(),
        "a write without a quorum was acknowledged"
    );
    assert!(
        stderr.contains("503 Service Unavailable") && stderr.contains("storage unavailable"),
        "{stderr}"
    );
    assert!(
        !replicas[0].log().contains("no valid credential"),
        "a credential that could not be checked during the outage was logged as refused"
    );
    let cut_off = replicas.iter().find(|r| leads(r, &leader_now)).unwrap();
    eventually("the leader, cut off from etcd, steps down", || {
        cut_off.log().contains("stepping down")
    });
    // Service resumes by itself once the quorum is back.
    etcd.restart(1).unwrap();
    etcd.restart(2).unwrap();
    etcd.wait_healthy(1).unwrap();
    eventually_within(
        Duration::from_secs(30),
        "every replica is ready again",
        || {
            replicas
                .iter()
                .all(|r| r.kubectl(&["get", "--raw", "/readyz"]).status.success())
        },
    );
    write_round(&replicas, &mut acknowledged);
    eventually_within(Duration::from_secs(30), "a replica leads again", || {
        let now = holder(&replicas[0]);
        replicas.iter().any(|r| leads(r, &now))
    });
    assert!(
        !replicas[1]
            .kubectl(&["get", "configmap", "during-outage", "-n", "acked"])
            .status
            .success(),
        "the refused write was applied"
    );

    // Every acknowledged write is there, read through every replica.
    for server in &replicas {
        let names = server.kubectl_ok(&["get", "configmaps", "-n", "acked", "-o", "name"]);
        for name in &acknowledged {
            assert!(
                names.contains(&format!("configmap/{name}\n"))
                    || names.ends_with(&format!("configmap/{name}")),
                "acknowledged {name} is missing through {}",
                server.address
            );
        }
    }
    assert_eq!(
        acknowledged.len(),
        3 + 2 + 3 * 2 + 3 + 3,
        "{acknowledged:?}"
    );
}

/// docs/haproxy.cfg, as documented, in front of three replicas: kubectl through it keeps
/// working when a replica dies.
#[test]
fn the_documented_haproxy_configuration_fronts_three_replicas() {
    let etcd = EtcdCluster::start(1).expect("start etcd (apt-get install -y etcd-server)");
    let endpoints = etcd.endpoints();
    let mut replicas: Vec<TestServer> = (0..3).map(|_| replica(&endpoints)).collect();

    // The documented file, with this machine's addresses in place of the example's.
    let documented = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/haproxy.cfg"),
    )
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut config = documented.replace("bind :6443", &format!("bind 127.0.0.1:{port}"));
    for (i, server) in replicas.iter().enumerate() {
        let example = format!("10.0.0.{}:6443", i + 1);
        assert!(
            config.contains(&example),
            "docs/haproxy.cfg names {example}"
        );
        config = config.replace(&example, &server.address);
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("haproxy.cfg");
    std::fs::write(&path, config).unwrap();
    let check = Command::new("/usr/sbin/haproxy")
        .args(["-c", "-f"])
        .arg(&path)
        .output()
        .expect("haproxy (apt-get install -y haproxy)");
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let mut haproxy = Command::new("/usr/sbin/haproxy")
        .args(["-db", "-f"])
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();

    let through = format!("--server=https://127.0.0.1:{port}");
    let get = |replicas: &[TestServer]| {
        replicas[0]
            .kubectl(&[
                &through,
                "get",
                "namespace",
                "default",
                "-o",
                "name",
                "--request-timeout=10s",
            ])
            .status
            .success()
    };
    eventually("kubectl reaches the replicas through HAProxy", || {
        get(&replicas)
    });
    // One replica dies: after HAProxy's check marks it down, every request is served.
    let mut dead = replicas.remove(1);
    dead.kill9();
    replicas.insert(1, dead);
    std::thread::sleep(Duration::from_secs(3));
    for i in 0..20 {
        assert!(
            get(&replicas),
            "request {i} through HAProxy failed with a replica down"
        );
    }
    let _ = haproxy.kill();
    let _ = haproxy.wait();
}
