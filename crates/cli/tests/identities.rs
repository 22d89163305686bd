//! Who a caller is, beyond lariat's own tokens and certificates: ServiceAccount tokens from
//! `kubectl create token`, ID tokens of an OpenID Connect provider (one the test runs on
//! loopback, over HTTPS, with keys it makes and rotates), and the audit log that records who
//! changed what and who was refused.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use common::{TestServer, eventually};
use serde_json::{Value, json};

/// A kubeconfig for `server` that sends `token`.
fn token_kubeconfig(server: &TestServer, name: &str, token: &str) -> PathBuf {
    let text = std::fs::read_to_string(server.data_dir().join("kubeconfig-token.yaml")).unwrap();
    let admin = server.admin_token();
    let path = server.dir.path().join(format!("{name}.yaml"));
    std::fs::write(&path, text.replace(&admin, token)).unwrap();
    path
}

/// kubectl as the holder of a kubeconfig: whether it succeeded, and stdout or stderr.
fn kubectl_as(server: &TestServer, kubeconfig: &Path, args: &[&str]) -> (bool, String) {
    let output = server.kubectl_as(kubeconfig, args);
    let text = if output.status.success() {
        &output.stdout
    } else {
        &output.stderr
    };
    (
        output.status.success(),
        String::from_utf8_lossy(text).to_string(),
    )
}

fn unauthorized(server: &TestServer, kubeconfig: &Path) -> bool {
    let (ok, text) = kubectl_as(server, kubeconfig, &["get", "configmaps"]);
    // "(Unauthorized)", or kubectl's words when discovery was refused first.
    !ok && text.contains("error: You must be logged in to the server")
}

#[test]
fn service_account_tokens_are_signed_for_one_server_and_die_with_their_account() {
    let audit_dir = tempfile::tempdir().unwrap();
    let audit = audit_dir.path().join("audit.log");
    let server = TestServer::start_with(&[
        "--no-controllers",
        "--audit-log-path",
        audit.to_str().unwrap(),
    ]);
    let other = TestServer::start_with(&["--no-controllers"]);

    server.kubectl_ok(&["create", "serviceaccount", "ci"]);
    server.kubectl_ok(&[
        "create",
        "role",
        "read-config",
        "--verb=get,list",
        "--resource=configmaps",
    ]);
    server.kubectl_ok(&[
        "create",
        "rolebinding",
        "ci",
        "--role=read-config",
        "--serviceaccount=default:ci",
    ]);
    server.kubectl_ok(&["create", "configmap", "settings", "--from-literal=a=b"]);
    server.kubectl_ok(&[
        "create",
        "secret",
        "generic",
        "db",
        "--from-literal=password=s3cr3t-value",
    ]);

    // kubectl sends the TokenRequest as protobuf; the answer is a JWT.
    let token = server
        .kubectl_ok(&["create", "token", "ci"])
        .trim()
        .to_string();
    assert_eq!(token.split('.').count(), 3, "{token}");
    let claims: Value = serde_json::from_slice(
        &URL_SAFE_NO_PAD
            .decode(token.split('.').nth(1).unwrap())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(claims["sub"], "system:serviceaccount:default:ci");
    assert_eq!(claims["kubernetes.io"]["serviceaccount"]["name"], "ci");
    let lifetime = claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap();
    assert_eq!(lifetime, 3600, "kubectl's default, an hour");

    let ci = token_kubeconfig(&server, "ci", &token);
    let (ok, whoami) = kubectl_as(&server, &ci, &["auth", "whoami", "-o", "json"]);
    assert!(ok, "{whoami}");
    let whoami: Value = serde_json::from_str(&whoami).unwrap();
    assert_eq!(
        whoami["status"]["userInfo"]["username"],
        "system:serviceaccount:default:ci"
    );
    assert!(
        whoami["status"]["userInfo"]["groups"]
            .as_array()
            .unwrap()
            .contains(&json!("system:serviceaccounts:default"))
    );
    let (ok, listed) = kubectl_as(&server, &ci, &["get", "configmaps", "-o", "name"]);
    assert!(ok && listed.contains("configmap/settings"), "{listed}");
    let (ok, refused) = kubectl_as(&server, &ci, &["get", "secrets"]);
    assert!(
        !ok && refused
            .contains("User \"system:serviceaccount:default:ci\" cannot list resource \"secrets\""),
        "the account holds only what it is bound to: {refused}"
    );

    // Another server signs with its own key: the token is refused there, though the
    // issuer and the account's name are the same.
    other.kubectl_ok(&["create", "serviceaccount", "ci"]);
    let elsewhere = token_kubeconfig(&other, "ci", &token);
    assert!(unauthorized(&other, &elsewhere));

    // Bad requests get the API's own answers.
    let short = server.kubectl_err(&["create", "token", "ci", "--duration", "1m"]);
    assert!(
        short.contains("spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes"),
        "{short}"
    );
    let missing = server.kubectl_err(&["create", "token", "nobody"]);
    assert!(
        missing.contains("serviceaccounts \"nobody\" not found"),
        "{missing}"
    );
    let capped: Value = serde_json::from_str(&server.kubectl_ok(&[
        "create",
        "token",
        "ci",
        "--duration",
        "1000h",
        "-o",
        "json",
    ]))
    .unwrap();
    assert_eq!(
        capped["spec"]["expirationSeconds"], 86400,
        "capped at --service-account-max-token-expiration"
    );

    // A token asked for another audience (a vault, say) is that service's, not this API's.
    let for_vault = server
        .kubectl_ok(&["create", "token", "ci", "--audience", "vault"])
        .trim()
        .to_string();
    assert!(unauthorized(
        &server,
        &token_kubeconfig(&server, "vault", &for_vault)
    ));

    // A token bound to a Secret dies with the Secret; the account's token lives on.
    server.kubectl_ok(&["create", "secret", "generic", "session"]);
    let bound = server
        .kubectl_ok(&[
            "create",
            "token",
            "ci",
            "--bound-object-kind",
            "Secret",
            "--bound-object-name",
            "session",
        ])
        .trim()
        .to_string();
    let bound = token_kubeconfig(&server, "bound", &bound);
    assert!(kubectl_as(&server, &bound, &["get", "configmaps"]).0);
    server.kubectl_ok(&["delete", "secret", "session"]);
    assert!(unauthorized(&server, &bound));
    assert!(kubectl_as(&server, &ci, &["get", "configmaps"]).0);

    // Deleting the account revokes its tokens at once; an account made again under the same
    // name is another account.
    server.kubectl_ok(&["delete", "serviceaccount", "ci"]);
    assert!(unauthorized(&server, &ci));
    server.kubectl_ok(&["create", "serviceaccount", "ci"]);
    assert!(unauthorized(&server, &ci));

    // A token in a query string is not taken, nor written down.
    let (code, _) = server.curl(
        "GET",
        "/api/v1/namespaces/default/configmaps?access_token=query-s3cr3t",
        None,
        None,
        None,
    );
    assert_eq!(code, 401);

    // The audit log has each change and each refusal, and no secret: neither the Secret's
    // data nor any token.
    let text = std::fs::read_to_string(&audit).unwrap();
    let events: Vec<Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let find = |what: &dyn Fn(&Value) -> bool| events.iter().find(|e| what(e)).cloned();
    let created = find(&|e| {
        e["verb"] == "create"
            && e["objectRef"]["resource"] == "secrets"
            && e["responseStatus"]["code"] == 201
    })
    .expect("the Secret's creation is audited");
    assert_eq!(created["apiVersion"], "audit.k8s.io/v1");
    assert_eq!(created["kind"], "Event");
    assert_eq!(created["objectRef"]["namespace"], "default");
    assert_eq!(created["objectRef"]["name"], "db", "named from the answer");
    assert_eq!(created["sourceIPs"], json!(["127.0.0.1"]));
    assert!(
        created["user"]["groups"]
            .as_array()
            .unwrap()
            .contains(&json!("system:masters"))
    );
    let denied = find(&|e| e["responseStatus"]["code"] == 403).expect("the refusal is audited");
    assert_eq!(
        denied["user"]["username"],
        "system:serviceaccount:default:ci"
    );
    assert_eq!(
        denied["annotations"]["authorization.k8s.io/decision"],
        "forbid"
    );
    assert_eq!(denied["responseStatus"]["reason"], "Forbidden");
    let unauthenticated =
        find(&|e| e["responseStatus"]["code"] == 401).expect("the revoked token is audited");
    assert_eq!(unauthenticated["user"], json!({}));
    assert!(
        find(&|e| e["verb"] == "list" && e["responseStatus"]["code"] == 200).is_none(),
        "reads that were allowed are not audited"
    );
    assert!(
        !text.contains("s3cr3t-value") && !text.contains(&URL_SAFE_NO_PAD.encode("s3cr3t-value"))
    );
    assert!(!text.contains(&base64::engine::general_purpose::STANDARD.encode("s3cr3t-value")));
    assert!(!text.contains(&token[..40]), "no token in the audit log");
    assert!(!text.contains("query-s3cr3t") && text.contains("access_token=<withheld>"));
}

/// An OpenID Connect provider on loopback: Python's HTTPS server publishing a discovery
/// document and a key set from a directory the test writes.
struct Provider {
    child: Child,
    dir: tempfile::TempDir,
    issuer: String,
    ca: PathBuf,
}

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const PROVIDER: &str = r#"
import http.server, ssl, sys, os
os.chdir(sys.argv[1])
server = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain("tls.crt", "tls.key")
server.socket = context.wrap_socket(server.socket, server_side=True)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

impl Provider {
    fn start() -> Provider {
        let dir = tempfile::tempdir().unwrap();
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let cert = params.signed_by(&key, &issuer).unwrap();
        std::fs::write(dir.path().join("tls.crt"), cert.pem()).unwrap();
        std::fs::write(dir.path().join("tls.key"), key.serialize_pem()).unwrap();
        let ca_path = dir.path().join("ca.crt");
        std::fs::write(&ca_path, ca.pem()).unwrap();
        let site = dir.path().join("site");
        std::fs::create_dir_all(site.join(".well-known")).unwrap();
        std::fs::copy(dir.path().join("tls.crt"), site.join("tls.crt")).unwrap();
        std::fs::copy(dir.path().join("tls.key"), site.join("tls.key")).unwrap();
        let mut child = Command::new("python3")
            .args(["-c", PROVIDER])
            .arg(&site)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let issuer = format!("https://127.0.0.1:{}", line.trim());
        std::fs::write(
            site.join(".well-known/openid-configuration"),
            json!({"issuer": issuer, "jwks_uri": format!("{issuer}/keys.json")}).to_string(),
        )
        .unwrap();
        Provider {
            child,
            dir,
            issuer,
            ca: ca_path,
        }
    }

    /// Publishes these keys (and only these) as the provider's key set.
    fn publish(&self, keys: &[&SigningKey]) {
        let set = json!({"keys": keys.iter().map(|k| k.jwk()).collect::<Vec<_>>()});
        std::fs::write(self.dir.path().join("site/keys.json"), set.to_string()).unwrap();
    }
}

struct SigningKey {
    id: String,
    key: rcgen::KeyPair,
}

impl SigningKey {
    fn new(id: &str) -> SigningKey {
        SigningKey {
            id: id.into(),
            key: rcgen::KeyPair::generate().unwrap(),
        }
    }

    fn jwk(&self) -> Value {
        let point = self.key.public_key_raw();
        json!({
            "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": self.id,
            "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
            "y": URL_SAFE_NO_PAD.encode(&point[33..]),
        })
    }

    fn sign(&self, claims: &Value) -> String {
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
        header.kid = Some(self.id.clone());
        jsonwebtoken::encode(
            &header,
            claims,
            &jsonwebtoken::EncodingKey::from_ec_der(&self.key.serialize_der()),
        )
        .unwrap()
    }

    /// A token whose header names a critical extension (`crit`), which a verifier that does
    /// not understand it must refuse (RFC 7515 4.1.11).
    fn sign_critical(&self, claims: &Value) -> String {
        let header = json!({"alg": "ES256", "typ": "JWT", "kid": self.id, "crit": ["exp"]});
        let message = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let key = jsonwebtoken::EncodingKey::from_ec_der(&self.key.serialize_der());
        let signature =
            jsonwebtoken::crypto::sign(message.as_bytes(), &key, jsonwebtoken::Algorithm::ES256)
                .unwrap();
        format!("{message}.{signature}")
    }
}

/// The README's OIDC block as written, with this test's provider in place of Dex (and its CA
/// and signing algorithm, which the README's public provider needs neither of): a member of
/// the provider's `sre` group is cluster-admin through the binding the block creates.
#[test]
fn the_readmes_oidc_block_runs_as_written() {
    let provider = Provider::start();
    let key = SigningKey::new("k1");
    provider.publish(&[&key]);
    let block = common::readme_block("sign in with its ID tokens").replace("\\\n", " ");
    let mut commands = block.lines().filter(|l| !l.trim().is_empty());
    let start = commands.next().unwrap();
    let flags = start
        .strip_prefix("lariat server ")
        .unwrap_or_else(|| panic!("the block starts the server: {start}"))
        .replace("https://dex.example.com", &provider.issuer);
    let mut args: Vec<&str> = flags.split_whitespace().collect();
    let ca = provider.ca.to_str().unwrap();
    args.extend(["--oidc-ca-file", ca, "--oidc-signing-algs", "ES256"]);
    let server = TestServer::start_with(&args);
    for command in commands {
        let words: Vec<&str> = command.split_whitespace().collect();
        assert_eq!(words[0], "kubectl", "{command}");
        server.kubectl_ok(&words[1..]);
    }
    let now = chrono::Utc::now().timestamp();
    let token = key.sign(&json!({
        "iss": provider.issuer, "aud": "lariat", "sub": "1",
        "email": "sam@example.com", "email_verified": true, "groups": ["sre"],
        "iat": now, "exp": now + 600,
    }));
    let sam = token_kubeconfig(&server, "sam", &token);
    let (ok, answer) = kubectl_as(&server, &sam, &["auth", "can-i", "*", "*"]);
    assert!(ok && answer.trim() == "yes", "{answer}");
}

#[test]
fn oidc_id_tokens_are_checked_against_the_providers_rotating_keys() {
    let provider = Provider::start();
    let first = SigningKey::new("first");
    provider.publish(&[&first]);
    let server = TestServer::start_with(&[
        "--no-controllers",
        "--oidc-issuer-url",
        &provider.issuer,
        "--oidc-client-id",
        "lariat",
        "--oidc-username-claim",
        "email",
        "--oidc-groups-claim",
        "groups",
        "--oidc-groups-prefix",
        "oidc:",
        "--oidc-ca-file",
        provider.ca.to_str().unwrap(),
        "--oidc-signing-algs",
        "ES256",
    ]);
    server.kubectl_ok(&[
        "create",
        "clusterrolebinding",
        "oidc-viewers",
        "--clusterrole=view",
        "--group=oidc:devs",
    ]);
    server.kubectl_ok(&["create", "configmap", "settings"]);
    let now = chrono::Utc::now().timestamp();
    let claims = |changes: Value| {
        let mut claims = json!({
            "iss": provider.issuer, "aud": "lariat", "sub": "1234",
            "email": "alice@example.com", "email_verified": true,
            "groups": ["devs", "system:masters"],
            "iat": now, "exp": now + 600,
        });
        for (key, value) in changes.as_object().unwrap() {
            claims[key] = value.clone();
        }
        claims
    };

    let alice = token_kubeconfig(&server, "alice", &first.sign(&claims(json!({}))));
    let (ok, whoami) = kubectl_as(&server, &alice, &["auth", "whoami", "-o", "json"]);
    assert!(ok, "{whoami}");
    let user = &serde_json::from_str::<Value>(&whoami).unwrap()["status"]["userInfo"];
    assert_eq!(user["username"], "alice@example.com");
    assert_eq!(
        user["groups"],
        json!(["oidc:devs", "oidc:system:masters", "system:authenticated"]),
        "the prefix keeps the provider's groups apart from Kubernetes's own"
    );
    let (ok, listed) = kubectl_as(&server, &alice, &["get", "configmaps", "-o", "name"]);
    assert!(ok && listed.contains("configmap/settings"), "{listed}");
    assert!(
        !kubectl_as(&server, &alice, &["create", "configmap", "x"]).0,
        "view only"
    );

    // Every token that fails a check is refused.
    let stranger = SigningKey::new("first");
    let refused = [
        ("expired", first.sign(&claims(json!({"exp": now - 120})))),
        (
            "not valid yet",
            first.sign(&claims(json!({"nbf": now + 3600}))),
        ),
        (
            "another audience",
            first.sign(&claims(json!({"aud": "someone-else"}))),
        ),
        (
            "another issuer",
            first.sign(&claims(json!({"iss": "https://evil.example.com"}))),
        ),
        (
            "a key the provider never published",
            stranger.sign(&claims(json!({}))),
        ),
        (
            "an unverified email",
            first.sign(&claims(json!({"email_verified": false}))),
        ),
        ("no email", first.sign(&claims(json!({"email": null})))),
        (
            "a critical header extension (the bounded-cost probe saw it accepted)",
            first.sign_critical(&claims(json!({}))),
        ),
    ];
    for (what, token) in refused {
        let kubeconfig = token_kubeconfig(&server, "refused", &token);
        assert!(unauthorized(&server, &kubeconfig), "a token with {what}");
    }
    let mut tampered = first.sign(&claims(json!({})));
    let payload = URL_SAFE_NO_PAD.encode(claims(json!({"email": "admin@example.com"})).to_string());
    let parts: Vec<&str> = tampered.split('.').collect();
    tampered = format!("{}.{payload}.{}", parts[0], parts[2]);
    let kubeconfig = token_kubeconfig(&server, "refused", &tampered);
    assert!(unauthorized(&server, &kubeconfig), "a changed payload");

    // The provider rotates: a token signed with its new key is taken without a restart, and
    // once the old key is gone from the set, its tokens are refused.
    let second = SigningKey::new("second");
    provider.publish(&[&second]);
    let rotated = token_kubeconfig(&server, "rotated", &second.sign(&claims(json!({}))));
    // Lariat fetches the keys for an unknown one at most once a second, and the badly signed
    // tokens above just made it fetch: the new key's token is refused until the next fetch.
    eventually("a token of the new key is taken", || {
        kubectl_as(&server, &rotated, &["get", "configmaps"]).0
    });
    assert!(unauthorized(&server, &alice), "the old key was dropped");
}
