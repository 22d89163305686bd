//! The same server on etcd (`--datastore-endpoint`): kubectl works unchanged, data outlives
//! the server process, and two servers sharing one etcd see each other's writes.

mod common;

use common::{SEED_CLUSTER, TestServer, eventually};
use lariat_store::etcd_process::EtcdProcess;

#[test]
fn kubectl_against_a_server_on_etcd() {
    let etcd = EtcdProcess::start().expect("start etcd (apt-get install -y etcd-server)");
    let endpoint = etcd.endpoint();
    let mut server = TestServer::start_with(&["--datastore-endpoint", &endpoint]);
    assert!(
        server
            .apply_ok(&["apply", "-f", "-"], SEED_CLUSTER)
            .contains("created")
    );
    server.kubectl_ok(&["create", "namespace", "team-b"]);
    server.apply_ok(
        &["apply", "--server-side", "-n", "team-b", "-f", "-"],
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  a: b\n",
    );

    // A second server on the same etcd serves the same objects.
    let other = TestServer::start_with(&["--datastore-endpoint", &endpoint]);
    assert!(
        other
            .kubectl_ok(&["get", "clusters", "-o", "name"])
            .contains("prod-us-east")
    );
    other.apply_ok(&["apply", "-f", "-"], GADGET_CRD);
    eventually(
        "a CRD created through one server is served by the other",
        || {
            server
                .kubectl(&["get", "gadgets.example.com"])
                .status
                .success()
        },
    );
    other.kubectl_ok(&["delete", "namespace", "team-b"]);
    eventually(
        "the namespace deletion is visible through the first server",
        || {
            !server
                .kubectl(&["get", "namespace", "team-b"])
                .status
                .success()
        },
    );

    server.kill9();
    server.launch();
    assert!(
        server
            .kubectl_ok(&["get", "clusters"])
            .contains("prod-us-east")
    );
}

const GADGET_CRD: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
";

/// A certificate signed by `issuer` (or self-signed CA when `None`), PEM with its key.
fn certificate(
    names: &[&str],
    ca: bool,
    usage: rcgen::ExtendedKeyUsagePurpose,
    issuer: Option<(&str, &str)>,
) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params =
        rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .unwrap();
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        names.first().copied().unwrap_or("test-ca"),
    );
    if ca {
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    } else {
        params.extended_key_usages = vec![usage];
    }
    let cert = match issuer {
        None => params.self_signed(&key).unwrap(),
        Some((ca_cert, ca_key)) => {
            let issuer =
                rcgen::Issuer::from_ca_cert_pem(ca_cert, rcgen::KeyPair::from_pem(ca_key).unwrap())
                    .unwrap();
            params.signed_by(&key, &issuer).unwrap()
        }
    };
    (cert.pem(), key.serialize_pem())
}

#[test]
fn a_server_reaches_etcd_over_tls_with_a_client_certificate() {
    use rcgen::ExtendedKeyUsagePurpose::{ClientAuth, ServerAuth};
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_string_lossy().to_string()
    };
    let (ca, ca_key) = certificate(&[], true, ServerAuth, None);
    let (server, server_key) = certificate(&["127.0.0.1"], false, ServerAuth, Some((&ca, &ca_key)));
    let (client, client_key) = certificate(&["lariat"], false, ClientAuth, Some((&ca, &ca_key)));
    let (other_ca, _) = certificate(&[], true, ServerAuth, None);
    let ca_file = write("ca.crt", &ca);
    let other_ca_file = write("other-ca.crt", &other_ca);
    let client_file = write("client.crt", &client);
    let client_key_file = write("client.key", &client_key);
    let ports: Vec<u16> = (0..2)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect::<Vec<_>>()
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect();
    let endpoint = format!("https://127.0.0.1:{}", ports[0]);
    let peer = format!("http://127.0.0.1:{}", ports[1]);
    let mut etcd = std::process::Command::new("etcd")
        .args(["--name", "tls", "--data-dir"])
        .arg(dir.path().join("data"))
        .args([
            "--listen-client-urls",
            &endpoint,
            "--advertise-client-urls",
            &endpoint,
        ])
        .args([
            "--listen-peer-urls",
            &peer,
            "--initial-advertise-peer-urls",
            &peer,
        ])
        .args(["--initial-cluster", &format!("tls={peer}")])
        .args(["--cert-file", &write("server.crt", &server)])
        .args(["--key-file", &write("server.key", &server_key)])
        .args(["--trusted-ca-file", &ca_file, "--client-cert-auth"])
        .args(["--log-level", "warn", "--logger", "zap"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start etcd (apt-get install -y etcd-server)");
    eventually("etcd serves over TLS", || {
        std::process::Command::new("curl")
            .args([
                "-sf",
                "--cacert",
                &ca_file,
                "--cert",
                &client_file,
                "--key",
                &client_key_file,
            ])
            .arg(format!("{endpoint}/health"))
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("true"))
    });

    let tls = [
        "--datastore-endpoint",
        &endpoint,
        "--datastore-cafile",
        &ca_file,
        "--datastore-certfile",
        &client_file,
        "--datastore-keyfile",
        &client_key_file,
    ];
    let lariat = TestServer::start_with(&tls);
    lariat.kubectl_ok(&["create", "namespace", "over-tls"]);
    assert!(
        lariat
            .kubectl_ok(&["get", "namespaces"])
            .contains("over-tls")
    );

    // Without the client certificate, or trusting another CA, the server does not start.
    let refused = |args: &[&str]| {
        let data = tempfile::tempdir().unwrap();
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_lariat"))
            .args(["server", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data.path())
            .args(args)
            .output()
            .unwrap();
        assert!(!output.status.success());
        String::from_utf8_lossy(&output.stderr).to_string()
    };
    let stderr = refused(&[
        "--datastore-endpoint",
        &endpoint,
        "--datastore-cafile",
        &ca_file,
    ]);
    assert!(stderr.contains("cannot reach etcd"), "{stderr}");
    let stderr = refused(&[
        "--datastore-endpoint",
        &endpoint,
        "--datastore-cafile",
        &other_ca_file,
        "--datastore-certfile",
        &client_file,
        "--datastore-keyfile",
        &client_key_file,
    ]);
    assert!(stderr.contains("cannot reach etcd"), "{stderr}");
    let stderr = refused(&["--datastore-endpoint", &endpoint]);
    assert!(stderr.contains("needs --datastore-cafile"), "{stderr}");
    let _ = etcd.kill();
    let _ = etcd.wait();
}
