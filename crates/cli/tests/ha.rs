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
    controllers_lease(through, "holderIdentity")
}

/// A field of the controllers' Lease's spec ("" while it cannot be read).
fn controllers_lease(through: &TestServer, field: &str) -> String {
    through
        .kubectl(&[
            "get",
            "lease",
            "-n",
            "lariat-system",
            "lariat-controllers",
            "-o",
            &format!("jsonpath={{.spec.{field}}}"),
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

    // kill -9 the leader: another replica takes the lease within client-go's bound, the
    // lease's duration and two retry periods (10 + 2 × 1 s).
    let leader = replicas
        .iter()
        .position(|r| leads(r, &leader_holder))
        .unwrap();
    replicas[leader].kill9();
    let killed = Instant::now();
    let killed_at = chrono::Utc::now();
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
    // Judged by when the Lease says it was taken, not by when this test's polling (kubectl
    // runs, slow on a loaded machine) noticed; 3 s more for a loaded machine's scheduling.
    let acquired = controllers_lease(&replicas[0], "acquireTime");
    let acquired = chrono::DateTime::parse_from_rfc3339(acquired.trim())
        .unwrap_or_else(|e| panic!("the Lease's acquireTime {acquired:?}: {e}"));
    let takeover = acquired.signed_duration_since(killed_at);
    eprintln!(
        "takeover after kill -9 of the leader: {takeover} by the Lease, noticed after {:?}",
        killed.elapsed()
    );
    assert!(
        takeover <= chrono::Duration::seconds(15),
        "the Lease was taken {takeover} after the kill"
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
    // In the foreground, HAProxy tells of each server its checks mark up or down on stderr.
    let haproxy_log = dir.path().join("haproxy.log");
    let mut haproxy = Command::new("/usr/sbin/haproxy")
        .args(["-db", "-f"])
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&haproxy_log).unwrap())
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
    let logged_before = std::fs::read_to_string(&haproxy_log)
        .unwrap_or_default()
        .len();
    let mut dead = replicas.remove(1);
    dead.kill9();
    replicas.insert(1, dead);
    eventually("HAProxy's checks mark the dead replica down", || {
        std::fs::read_to_string(&haproxy_log)
            .unwrap_or_default()
            .get(logged_before..)
            .is_some_and(|logged| logged.contains("lariat/lariat-2 is DOWN"))
    });
    for i in 0..20 {
        assert!(
            get(&replicas),
            "request {i} through HAProxy failed with a replica down"
        );
    }
    let _ = haproxy.kill();
    let _ = haproxy.wait();
}

/// `connected/replica` of a Cluster's ClusterConnection: whether its agent is connected, and
/// to which replica.
fn connection(through: &TestServer, cluster: &str) -> String {
    String::from_utf8_lossy(
        &through
            .kubectl(&[
                "get",
                "clusterconnection",
                cluster,
                "-o",
                "jsonpath={.status.connected}/{.status.replica}",
            ])
            .stdout,
    )
    .into_owned()
}

/// A replica's Lease as replicas write them, renewed now: `name`, for the replica `identity`
/// running lariat `version`, reached at an address where nothing listens.
fn replica_lease(name: &str, identity: &str, version: &str) -> String {
    let now = Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%S.000000Z"])
        .output()
        .unwrap();
    let now = String::from_utf8_lossy(&now.stdout).trim().to_string();
    format!(
        r#"apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: {name}
  namespace: lariat-system
  labels: {{lariat.dev/replica: "true"}}
  annotations: {{lariat.dev/peer-address: "127.0.0.1:1", lariat.dev/version: "{version}"}}
spec:
  holderIdentity: {identity}
  leaseDurationSeconds: 15
  renewTime: "{now}"
"#
    )
}

/// The replica the ClusterConnection of `cluster` says holds its tunnel, once it is connected,
/// read through the first replica that answers (the holder may be the one killed).
fn tunnel_holder(replicas: &[TestServer], cluster: &str) -> Option<usize> {
    let seen = replicas
        .iter()
        .map(|r| connection(r, cluster))
        .find(|seen| !seen.is_empty())?;
    let holder = seen.strip_prefix("true/")?;
    replicas.iter().position(|r| leads(r, holder))
}

/// `kubectl get namespaces` in the downstream cluster, through `replica`'s proxy path.
fn namespaces_through(replica: &TestServer, cluster: &str) -> std::process::Output {
    replica.kubectl(&[
        "--server",
        &format!("https://{}/k8s/clusters/default/{cluster}", replica.address),
        "get",
        "namespaces",
        "-o",
        "name",
    ])
}

/// A client certificate the replicas' CA signs (the test holds the CA's key, as a replica
/// does) for `subject` and `organization`, valid from a minute ago for `lifetime`: its PEM
/// files, written into `dir`.
fn signed_by_the_ca(
    replica: &TestServer,
    dir: &std::path::Path,
    common_name: &str,
    organization: &str,
    lifetime: Duration,
) -> (std::path::PathBuf, std::path::PathBuf) {
    let tls = replica.data_dir().join("tls");
    let ca_key =
        rcgen::KeyPair::from_pem(&std::fs::read_to_string(tls.join("ca.key")).unwrap()).unwrap();
    let issuer = rcgen::Issuer::from_ca_cert_pem(
        &std::fs::read_to_string(tls.join("ca.crt")).unwrap(),
        ca_key,
    )
    .unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, common_name);
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, organization);
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let epoch = rcgen::date_time_ymd(1970, 1, 1);
    params.not_before = epoch + (now - Duration::from_secs(60));
    params.not_after = epoch + (now + lifetime);
    let cert = params.signed_by(&key, &issuer).unwrap();
    let name = common_name.replace(':', "-");
    let (cert_path, key_path) = (
        dir.join(format!("{name}.crt")),
        dir.join(format!("{name}.key")),
    );
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    (cert_path, key_path)
}

#[test]
fn every_replica_serves_every_clusters_proxy_through_the_replica_holding_its_tunnel() {
    let etcd = EtcdCluster::start(1).expect("start etcd (apt-get install -y etcd-server)");
    let endpoints = etcd.endpoints();
    let mut replicas: Vec<TestServer> = (0..3).map(|_| replica(&endpoints)).collect();
    // Each replica keeps a Lease naming itself and where the others reach it.
    eventually("every replica has its Lease", || {
        replicas[0]
            .kubectl_ok(&["get", "leases", "-n", "lariat-system", "-o", "name"])
            .matches("lease.coordination.k8s.io/lariat-replica-")
            .count()
            == 3
    });

    // The agent is given every replica, and dials one of them.
    let downstream = TestServer::start();
    let (token, checksum) = common::import_cluster(&replicas[0], "remote", "1h");
    let servers: Vec<String> = replicas
        .iter()
        .map(|r| format!("https://{}", r.address))
        .collect();
    let agent = common::Agent::start(
        replicas[0].data_dir(),
        "remote",
        &servers.join(","),
        &token,
        &checksum,
        &downstream,
    );
    eventually(
        "the connection names the replica holding the tunnel",
        || tunnel_holder(&replicas, "remote").is_some(),
    );
    let holder = tunnel_holder(&replicas, "remote").unwrap();
    assert!(
        replicas[holder].log().contains("agent connected"),
        "the holder is the replica the agent dialled"
    );

    // Every replica serves the cluster: the two without its tunnel forward to the one with it,
    // once they have seen the record that names it (until then a request gets a 503 that says
    // so, as the README tells).
    for (i, replica) in replicas.iter().enumerate() {
        eventually(
            &format!("replica {i} (holder {holder}) serves the cluster"),
            || {
                let output = namespaces_through(replica, "remote");
                output.status.success()
                    && String::from_utf8_lossy(&output.stdout).contains("namespace/lariat-system")
            },
        );
    }
    // As the caller: the downstream cluster sees lariat's admin, not a replica.
    let other = (holder + 1) % 3;
    let whoami = replicas[other].kubectl_ok(&[
        "--server",
        &format!(
            "https://{}/k8s/clusters/default/remote",
            replicas[other].address
        ),
        "auth",
        "whoami",
        "-o",
        "jsonpath={.status.userInfo.username}",
    ]);
    assert_eq!(whoami, "lariat-admin");

    // The replicas' credential is theirs alone. A caller cannot claim an identity with the
    // forwarding headers, whatever credential it holds...
    let path = "/k8s/clusters/default/remote/api/v1/namespaces";
    let url = format!("https://{}{path}", replicas[other].address);
    let admin_cert = replicas[other].data_dir().join("admin.crt");
    let admin_key = replicas[other].data_dir().join("admin.key");
    let kubeconfig = std::fs::read_to_string(replicas[other].kubeconfig()).unwrap();
    let field = |name: &str| {
        use base64::Engine;
        let b64 = kubeconfig
            .lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .unwrap()
            .trim();
        base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap()
    };
    std::fs::write(&admin_cert, field("client-certificate-data:")).unwrap();
    std::fs::write(&admin_key, field("client-key-data:")).unwrap();
    let (code, _) = replicas[other].curl_with(
        &[
            "--cert",
            admin_cert.to_str().unwrap(),
            "--key",
            admin_key.to_str().unwrap(),
            "-H",
            "x-lariat-forwarded-user: someone-else",
        ],
        &url,
        None,
    );
    assert_eq!(code, 401, "the admin's certificate with a forwarded user");
    let (code, _) = replicas[other].curl_with(
        &[
            "--cert",
            admin_cert.to_str().unwrap(),
            "--key",
            admin_key.to_str().unwrap(),
        ],
        &url,
        None,
    );
    assert_eq!(code, 200, "the admin's certificate alone");
    // ...and a replica's credential (here one the test signs with the replicas' CA key) is
    // believed only on the proxy path, only for a live replica, only as short-lived as a
    // replica issues it. (A forwarded request is served from the tunnels of the replica it
    // reaches, so these go to the holder.)
    let identities = replicas[0].kubectl_ok(&[
        "get",
        "leases",
        "-n",
        "lariat-system",
        "-l",
        "lariat.dev/replica",
        "-o",
        "jsonpath={.items[*].spec.holderIdentity}",
    ]);
    let live = identities
        .split_whitespace()
        .find(|id| !leads(&replicas[holder], id))
        .unwrap()
        .to_string();
    let dir = tempfile::tempdir().unwrap();
    let hour = Duration::from_secs(3600);
    let as_replica = |identity: &str, lifetime: Duration, url: &str| {
        let (cert, key) = signed_by_the_ca(
            &replicas[0],
            dir.path(),
            &format!("system:lariat:replica:{identity}"),
            "system:lariat:replicas",
            lifetime,
        );
        replicas[holder]
            .curl_with(
                &[
                    "--cert",
                    cert.to_str().unwrap(),
                    "--key",
                    key.to_str().unwrap(),
                    "-H",
                    "x-lariat-forwarded-user: lariat-admin",
                    "-H",
                    "x-lariat-forwarded-group: system:masters",
                ],
                url,
                None,
            )
            .0
    };
    let url = format!("https://{}{path}", replicas[holder].address);
    assert_eq!(
        as_replica(&live, hour, &url),
        200,
        "a live replica's credential"
    );
    let api = format!("https://{}/api/v1/namespaces", replicas[holder].address);
    assert_eq!(as_replica(&live, hour, &api), 401, "on the management API");
    assert_eq!(
        as_replica("gone_1_deadbeef", hour, &url),
        401,
        "a replica that is not live"
    );
    assert_eq!(
        as_replica(&live, Duration::from_secs(30 * 86_400), &url),
        401,
        "a credential living longer than a replica's"
    );
    // A replica started a moment ago, before the holder's next look at the replicas' Leases:
    // its forwarded requests are served, not refused as unauthenticated.
    let fresh = "fresh_1_cafe0123";
    replicas[holder].apply_ok(
        &["apply", "-f", "-"],
        &replica_lease(
            &format!(
                "lariat-replica-{}",
                &lariat_apiserver::identity::sha256_hex(fresh)[..20]
            ),
            fresh,
            lariat_api::support::LARIAT,
        ),
    );
    assert_eq!(
        as_replica(fresh, hour, &url),
        200,
        "a replica whose Lease is a moment old"
    );

    // The replica holding the tunnel dies: the agent dials the next one it was given, and
    // every survivor serves the cluster again.
    replicas[holder].kill9();
    eventually_within(
        Duration::from_secs(60),
        "the agent reconnects to another replica",
        || tunnel_holder(&replicas, "remote").is_some_and(|now| now != holder),
    );
    for (i, replica) in replicas.iter().enumerate().filter(|(i, _)| *i != holder) {
        eventually(&format!("replica {i} serves the cluster again"), || {
            namespaces_through(replica, "remote").status.success()
        });
    }
    drop(agent);

    // A replica of a lariat version the matrix does not allow beside the live ones (two minor
    // versions ahead) is refused, with what to do.
    let (major, minor) = lariat_api::support::lariat_minor(lariat_api::support::LARIAT).unwrap();
    let future = format!("{major}.{}.0", minor + 2);
    let survivor = &replicas[(holder + 1) % 3];
    survivor.apply_ok(
        &["apply", "-f", "-"],
        &replica_lease(
            "lariat-replica-from-the-future",
            "future_1_abcdef12",
            &future,
        ),
    );
    let refused = refused_start(&endpoints, &dir.path().join("future"), &["--token", TOKEN]);
    assert!(
        refused.contains(&format!("runs lariat v{future}"))
            && refused.contains("one minor version at a time"),
        "{refused}"
    );
}

/// The README's backup of replicas on etcd: `etcdctl snapshot save`, then `etcdctl snapshot
/// restore` into a new etcd, and servers started on it with the same token have everything
/// back (the CA and keys are in the snapshot, sealed with the token).
#[test]
fn an_etcd_snapshot_restores_the_replicas_with_their_token() {
    let mut etcd = EtcdCluster::start(1).expect("start etcd (apt-get install -y etcd-server)");
    let endpoints = etcd.endpoints();
    let mut first = replica(&endpoints);
    first.kubectl_ok(&[
        "create",
        "secret",
        "generic",
        "kept",
        "--from-literal=k=before",
    ]);
    let dir = tempfile::tempdir().unwrap();
    let snapshot = dir.path().join("lariat.snapshot");
    let saved = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args(["--endpoints", &endpoints, "snapshot", "save"])
        .arg(&snapshot)
        .output()
        .expect("etcdctl (apt-get install -y etcd-client)");
    assert!(
        saved.status.success(),
        "{}",
        String::from_utf8_lossy(&saved.stderr)
    );
    first.kubectl_ok(&[
        "create",
        "secret",
        "generic",
        "later",
        "--from-literal=k=after",
    ]);
    first.kill9();

    etcd.restore(0, &snapshot).expect("restore the snapshot");
    let restored = replica(&endpoints);
    assert_eq!(
        restored.kubectl_ok(&[
            "get",
            "secret",
            "kept",
            "-o",
            "go-template={{.data.k | base64decode}}"
        ]),
        "before",
        "a Secret, decrypted with the key unsealed from the snapshot"
    );
    assert!(
        !restored
            .kubectl(&["get", "secret", "later"])
            .status
            .success(),
        "a write after the snapshot is not in it"
    );
    // The same CA: the lost server's admin kubeconfig works against the restored one.
    restored.kubectl_with_kubeconfig_of(&first.kubeconfig(), &["get", "secret", "kept"]);
    // Without the token the snapshot's keys stay sealed.
    let refused = refused_start(
        &endpoints,
        &dir.path().join("wrong"),
        &["--token", "not-the-token-it-was-sealed-with"],
    );
    assert!(refused.contains("join token"), "{refused}");
}

/// The README's first HA block as written, on one machine: its `ETCD` this test's three etcd
/// members, and each of "the three machines" a directory and a port of its own in place of
/// `0.0.0.0:6443`. The three servers share one CA, and what one writes the others read.
#[test]
fn the_readmes_three_servers_share_one_ca_and_their_data() {
    let etcd = EtcdCluster::start(3).expect("start etcd (apt-get install -y etcd-server)");
    let block = common::readme_block("Run three servers on one etcd cluster").replace("\\\n", " ");
    let lines: Vec<&str> = block.lines().filter(|l| !l.trim().is_empty()).collect();
    let [token_line, etcd_line, comment, server_line] = lines[..] else {
        panic!("the block's four commands: {block}")
    };
    assert!(
        etcd_line.starts_with("ETCD=") && comment.starts_with('#'),
        "{block}"
    );
    let token = Command::new("bash")
        .args(["-c", &format!("{token_line}\necho $TOKEN")])
        .output()
        .unwrap();
    let token = String::from_utf8_lossy(&token.stdout).trim().to_string();
    assert_eq!(token.len(), 64, "{token}");
    let work = tempfile::tempdir().unwrap();
    let mut servers = vec![];
    let mut addresses = vec![];
    for i in 1..=3 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let address = format!("127.0.0.1:{port}");
        let dir = work.path().join(format!("machine-{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        let line = server_line.replace("0.0.0.0:6443", &address);
        let log = std::fs::File::create(dir.join("server.log")).unwrap();
        servers.push(
            Command::new("bash")
                .args(["-c", &format!("exec {line}")])
                .current_dir(&dir)
                .env("PATH", common::path_with_lariat())
                .env("TOKEN", &token)
                .env("ETCD", etcd.endpoints())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap(),
        );
        addresses.push((dir, address));
    }
    let kubectl = |(dir, address): &(std::path::PathBuf, String), args: &[&str]| {
        Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(dir.join("lariat-data/kubeconfig.yaml"))
            .args(["--server", &format!("https://{address}")])
            .args(["--tls-server-name", "lariat.example.com"])
            .args(args)
            .output()
            .unwrap()
    };
    for machine in &addresses {
        eventually_within(Duration::from_secs(60), "each server serves", || {
            kubectl(machine, &["get", "namespaces"]).status.success()
        });
    }
    let first = &addresses[0];
    assert!(
        kubectl(
            first,
            &["create", "configmap", "shared", "--from-literal=k=v"]
        )
        .status
        .success()
    );
    let cas: Vec<Vec<u8>> = addresses
        .iter()
        .map(|machine| kubectl(machine, &["get", "--raw", "/cacerts"]).stdout)
        .collect();
    assert!(
        !cas[0].is_empty() && cas.iter().all(|ca| *ca == cas[0]),
        "one CA"
    );
    for machine in &addresses[1..] {
        let read = kubectl(
            machine,
            &["get", "configmap", "shared", "-o", "jsonpath={.data.k}"],
        );
        assert_eq!(String::from_utf8_lossy(&read.stdout), "v");
    }
    // The block that lists their Leases: the controllers' and one per replica.
    let leases = common::readme_block("Each replica also keeps a Lease of its own");
    let command = leases.lines().next().unwrap().trim();
    let words: Vec<&str> = command.split_whitespace().collect();
    assert_eq!(words[..2], ["kubectl", "get"], "{command}");
    eventually_within(
        Duration::from_secs(30),
        "the Leases the README shows",
        || {
            let listed = kubectl(first, &words[1..]);
            let listed = String::from_utf8_lossy(&listed.stdout);
            listed.contains("lariat-controllers") && listed.matches("lariat-replica-").count() == 3
        },
    );
    for mut server in servers {
        let _ = server.kill();
        let _ = server.wait();
    }
}
