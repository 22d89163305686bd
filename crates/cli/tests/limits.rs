//! The hostile tenant: every way the bounded-cost probe found to exhaust a server, run by
//! `lariat bench limits` against a server process of its own, which fails when a request is
//! not refused or bounded, when `/healthz` is not answered meanwhile, or when memory stays
//! above its level before the attack. And the smaller refusals kube-apiserver makes.

mod common;

use common::TestServer;
use serde_json::{Value, json};

#[test]
fn a_hostile_tenant_is_refused_or_bounded_and_others_are_served() {
    // CI runs this on an unoptimized build beside other tests on two cores: /healthz is
    // allowed 5 s here; `lariat bench limits` on the release build holds it to 1 s.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_lariat"))
        .args([
            "bench",
            "limits",
            "--large-writes",
            "60",
            "--max-healthz-ms",
            "5000",
        ])
        .output()
        .expect("run lariat bench limits");
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for vector in [
        "JSON patch of 18 copies",
        "YAML nested",
        "YAML of 600 aliases",
        "YAML of `? ` nested",
        "JSON nested",
        "a 2 MB Bundle",
        "1 MB ConfigMap updated",
        "lists and watches of --unread-objects",
        "200 lists on one HTTP/2 connection by one user",
        "300 watches on three HTTP/2 connections by one user",
        "anonymous connections",
        "3 MB SelfSubjectReview over HTTP/2",
    ] {
        let line = stdout
            .lines()
            .find(|l| l.contains(vector))
            .unwrap_or_else(|| panic!("no line for {vector}: {stdout}"));
        assert!(line.contains("held ("), "{line}");
    }
}

/// Regressions from the probe: a TokenRequest whose `audiences` is not a list, or whose body
/// names another namespace than its URL, was accepted; kube-apiserver refuses both.
#[test]
fn token_requests_are_checked_as_kube_apiserver_checks_them() {
    let server = TestServer::start_with(&["--no-controllers"]);
    server.kubectl_ok(&["create", "serviceaccount", "robot"]);
    let token = server.admin_token();
    let path = "/api/v1/namespaces/default/serviceaccounts/robot/token";
    let request = |spec: Value, namespace: &str| {
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "metadata": {"name": "robot", "namespace": namespace}, "spec": spec})
        .to_string()
    };
    let send = |body: String| {
        server.curl(
            "POST",
            path,
            Some(&token),
            Some("application/json"),
            Some(body.as_bytes()),
        )
    };
    let (code, body) = send(request(json!({"audiences": "x"}), "default"));
    assert_eq!(code, 422, "{body}");
    assert!(body.contains("spec.audiences"), "{body}");
    let (code, body) = send(request(json!({"audiences": ["x"]}), "kube-system"));
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("does not match the namespace"), "{body}");
    let (code, body) = send(request(json!({"audiences": ["x"]}), "default"));
    assert_eq!(code, 201, "{body}");
}
