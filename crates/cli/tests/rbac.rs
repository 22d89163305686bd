//! Who may do what on the management API: users from `lariat token create`, Kubernetes RBAC
//! enforced on every request, escalation refused, the access reviews `kubectl auth can-i`
//! sends, and revocation at once. All through the real kubectl, as each user.

mod common;

use std::path::{Path, PathBuf};

use common::{TestServer, eventually};

/// A kubeconfig for `user` in `groups`, from `lariat token create --print-kubeconfig`.
fn user_kubeconfig(server: &TestServer, user: &str, groups: &[&str], ttl: &str) -> PathBuf {
    let mut args = vec!["token", "create", "--user", user, "--ttl", ttl];
    for group in groups {
        args.extend(["--group", group]);
    }
    args.push("--print-kubeconfig");
    let output = server.lariat(&args);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let path = server.dir.path().join(format!("{user}.yaml"));
    std::fs::write(&path, &output.stdout).unwrap();
    path
}

/// The lariat CLI with `kubeconfig` (another user's) rather than the admin's.
fn lariat_as(kubeconfig: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_lariat"))
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .output()
        .expect("run lariat")
}

fn run(server: &TestServer, kubeconfig: &Path, args: &[&str]) -> (bool, String) {
    let output = server.kubectl_as(kubeconfig, args);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

fn can_i(server: &TestServer, kubeconfig: &Path, args: &[&str]) -> bool {
    let mut all = vec!["auth", "can-i"];
    all.extend(args);
    // Only stdout: kubectl warns on stderr about kinds discovery does not list.
    let output = server.kubectl_as(kubeconfig, &all);
    String::from_utf8_lossy(&output.stdout).trim() == "yes"
}

#[test]
fn users_reach_what_their_bindings_grant_and_cannot_grant_more() {
    let server = TestServer::start();
    for ns in ["team-a", "team-b"] {
        server.kubectl_ok(&["create", "namespace", ns]);
    }
    let alice = user_kubeconfig(&server, "alice", &["devs"], "1h");

    let (ok, whoami) = run(&server, &alice, &["auth", "whoami"]);
    assert!(ok, "{whoami}");
    assert!(
        whoami.contains("alice") && whoami.contains("[devs system:authenticated]"),
        "{whoami}"
    );

    // No binding: refused in Kubernetes's own words, discovery still works.
    let (ok, refused) = run(&server, &alice, &["get", "clusters", "-n", "team-b"]);
    assert!(!ok);
    assert!(
        refused.contains(r#"clusters.cluster.x-k8s.io is forbidden: User "alice" cannot list resource "clusters" in API group "cluster.x-k8s.io" in the namespace "team-b""#),
        "{refused}"
    );
    let (ok, metrics) = run(&server, &alice, &["get", "--raw", "/metrics"]);
    assert!(
        !ok && metrics.contains(r#"User "alice" cannot get path "/metrics""#),
        "{metrics}"
    );
    assert!(run(&server, &alice, &["api-resources"]).0);

    // `edit` for her group in team-a: Clusters there, nowhere else; Secrets read and written,
    // RBAC not.
    server.kubectl_ok(&[
        "create",
        "rolebinding",
        "devs-edit",
        "--clusterrole",
        "edit",
        "--group",
        "devs",
        "-n",
        "team-a",
    ]);
    eventually("the binding takes effect", || {
        can_i(&server, &alice, &["list", "clusters", "-n", "team-a"])
    });
    assert!(run(&server, &alice, &["get", "clusters", "-n", "team-a"]).0);
    assert!(can_i(
        &server,
        &alice,
        &["create", "secrets", "-n", "team-a"]
    ));
    assert!(!can_i(
        &server,
        &alice,
        &["list", "clusters", "-n", "team-b"]
    ));
    assert!(!can_i(
        &server,
        &alice,
        &["create", "rolebindings", "-n", "team-a"]
    ));
    assert!(!can_i(
        &server,
        &alice,
        &["get", "clusters", "--subresource", "proxy", "-n", "team-a"]
    ));
    let (ok, _) = run(
        &server,
        &alice,
        &[
            "create",
            "configmap",
            "settings",
            "-n",
            "team-a",
            "--from-literal=a=b",
        ],
    );
    assert!(ok);
    let (ok, refused) = run(
        &server,
        &alice,
        &[
            "create",
            "configmap",
            "settings",
            "-n",
            "team-b",
            "--from-literal=a=b",
        ],
    );
    assert!(
        !ok && refused.contains("in the namespace \"team-b\""),
        "{refused}"
    );

    // `kubectl auth can-i --list` shows the effective rules, aggregated from edit and view.
    let (_, list) = run(
        &server,
        &alice,
        &["auth", "can-i", "--list", "-n", "team-a"],
    );
    let clusters = list
        .lines()
        .find(|l| l.starts_with("clusters.cluster.x-k8s.io "))
        .unwrap_or_else(|| panic!("{list}"));
    for verb in ["create", "delete", "get", "list", "watch"] {
        assert!(clusters.contains(verb), "{clusters}");
    }

    // `admin` in team-a: she may bind what she holds there, and nothing more.
    server.kubectl_ok(&[
        "create",
        "rolebinding",
        "alice-admin",
        "--clusterrole",
        "admin",
        "--user",
        "alice",
        "-n",
        "team-a",
    ]);
    eventually("admin takes effect", || {
        can_i(&server, &alice, &["create", "rolebindings", "-n", "team-a"])
    });
    let (ok, out) = run(
        &server,
        &alice,
        &[
            "create",
            "rolebinding",
            "bob-view",
            "--clusterrole",
            "view",
            "--user",
            "bob",
            "-n",
            "team-a",
        ],
    );
    assert!(ok, "{out}");
    let (ok, out) = run(
        &server,
        &alice,
        &[
            "create",
            "role",
            "readers",
            "--verb",
            "get",
            "--resource",
            "secrets",
            "-n",
            "team-a",
        ],
    );
    assert!(ok, "{out}");
    let (ok, refused) = run(
        &server,
        &alice,
        &[
            "create",
            "rolebinding",
            "me-root",
            "--clusterrole",
            "cluster-admin",
            "--user",
            "alice",
            "-n",
            "team-a",
        ],
    );
    assert!(!ok);
    assert!(
        refused.contains("is attempting to grant RBAC permissions not currently held")
            && refused.contains(r#"{APIGroups:["*"], Resources:["*"], Verbs:["*"]}"#),
        "{refused}"
    );
    let (ok, refused) = run(
        &server,
        &alice,
        &[
            "create",
            "role",
            "nodes",
            "--verb",
            "get",
            "--resource",
            "nodes",
            "-n",
            "team-a",
        ],
    );
    assert!(
        !ok && refused.contains(r#"{APIGroups:[""], Resources:["nodes"], Verbs:["get"]}"#),
        "{refused}"
    );
    // Nor edit her own binding into something else, nor bind in a namespace she lacks.
    let (ok, _) = run(
        &server,
        &alice,
        &[
            "create",
            "rolebinding",
            "bob-view",
            "--clusterrole",
            "view",
            "--user",
            "bob",
            "-n",
            "team-b",
        ],
    );
    assert!(!ok);
    let (ok, refused) = run(
        &server,
        &alice,
        &[
            "patch",
            "rolebinding",
            "alice-admin",
            "-n",
            "team-a",
            "--type=merge",
            "-p",
            r#"{"roleRef":{"name":"cluster-admin"}}"#,
        ],
    );
    assert!(
        !ok && refused.contains("cannot change roleRef"),
        "{refused}"
    );

    // Impersonation (`kubectl --as`): the admin sees what she sees; she may not impersonate.
    let as_alice = server.kubectl(&[
        "auth",
        "can-i",
        "list",
        "clusters",
        "-n",
        "team-b",
        "--as",
        "alice",
        "--as-group",
        "devs",
    ]);
    assert_eq!(String::from_utf8_lossy(&as_alice.stdout).trim(), "no");
    let whoami = server.kubectl_ok(&["auth", "whoami", "--as", "alice", "--as-group", "devs"]);
    assert!(
        whoami.contains("alice") && !whoami.contains("system:masters"),
        "{whoami}"
    );
    let (ok, refused) = run(
        &server,
        &alice,
        &[
            "get",
            "namespaces",
            "--as",
            "lariat-admin",
            "--as-group",
            "system:masters",
        ],
    );
    assert!(
        !ok && refused.contains(
            r#"users "lariat-admin" is forbidden: User "alice" cannot impersonate resource "users""#
        ),
        "{refused}"
    );

    // A Role naming one Secret reaches it by get, and by list and watch of that name alone.
    server.kubectl_ok(&[
        "create",
        "secret",
        "generic",
        "one",
        "-n",
        "team-b",
        "--from-literal=a=b",
    ]);
    server.apply_ok(
        &["apply", "-f", "-"],
        r#"apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: one-secret, namespace: team-b}
rules:
- apiGroups: [""]
  resources: [secrets]
  resourceNames: [one]
  verbs: [get, list, watch]
"#,
    );
    server.kubectl_ok(&[
        "create",
        "rolebinding",
        "alice-one",
        "--role",
        "one-secret",
        "--user",
        "alice",
        "-n",
        "team-b",
    ]);
    eventually("the named grant takes effect", || {
        run(&server, &alice, &["get", "secret", "one", "-n", "team-b"]).0
    });
    assert!(
        run(
            &server,
            &alice,
            &[
                "get",
                "secrets",
                "-n",
                "team-b",
                "--field-selector",
                "metadata.name=one"
            ]
        )
        .0
    );
    assert!(!run(&server, &alice, &["get", "secrets", "-n", "team-b"]).0);

    // An administrator asks about her with a SubjectAccessReview; she may not ask about others.
    let review = r#"{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"user":"alice","groups":["devs"],"resourceAttributes":{"verb":"delete","group":"cluster.x-k8s.io","resource":"clusters","namespace":"team-a"}}}"#;
    let answer = server.apply_ok(&["create", "-o", "json", "-f", "-"], review);
    assert!(answer.contains(r#""allowed": true"#), "{answer}");
    let (ok, _) = run(
        &server,
        &alice,
        &["auth", "can-i", "create", "subjectaccessreviews"],
    );
    assert!(!ok);
}

#[test]
fn aggregation_reaches_new_kinds_and_tokens_stay_with_their_owner() {
    let server = TestServer::start();
    server.kubectl_ok(&["create", "namespace", "team-a"]);
    let carol = user_kubeconfig(&server, "carol", &[], "1h");
    server.kubectl_ok(&[
        "create",
        "clusterrolebinding",
        "carol-view",
        "--clusterrole",
        "view",
        "--user",
        "carol",
    ]);
    eventually("view takes effect", || {
        can_i(
            &server,
            &carol,
            &["list", "machines.cluster.x-k8s.io", "-n", "team-a"],
        )
    });
    assert!(!can_i(&server, &carol, &["get", "secrets", "-n", "team-a"]));
    assert!(!can_i(
        &server,
        &carol,
        &["list", "widgets.example.com", "-n", "team-a"]
    ));
    // A kind of the user's own, and a ClusterRole labelled to aggregate into view: everyone
    // who views reaches it.
    server.apply_ok(
        &["apply", "-f", "-"],
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
"#,
    );
    assert!(!can_i(
        &server,
        &carol,
        &["list", "widgets", "-n", "team-a"]
    ));
    server.apply_ok(
        &["apply", "-f", "-"],
        r#"apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: widgets-view
  labels: {rbac.authorization.k8s.io/aggregate-to-view: "true"}
rules:
- apiGroups: [example.com]
  resources: [widgets]
  verbs: [get, list, watch]
"#,
    );
    eventually("aggregated into view", || {
        can_i(
            &server,
            &carol,
            &["list", "widgets.example.com", "-n", "team-a"],
        )
    });

    // Carol may create tokens (for herself only) once granted; revocation is immediate.
    server.apply_ok(
        &["apply", "-f", "-"],
        r#"apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: token-maker}
rules:
- apiGroups: [management.lariat.dev]
  resources: [tokens]
  verbs: [create, list, delete]
"#,
    );
    server.kubectl_ok(&[
        "create",
        "clusterrolebinding",
        "carol-tokens",
        "--clusterrole",
        "token-maker",
        "--user",
        "carol",
    ]);
    eventually("token-maker takes effect", || {
        can_i(&server, &carol, &["create", "tokens.management.lariat.dev"])
    });
    let output = lariat_as(
        &carol,
        &[
            "token",
            "create",
            "--user",
            "mallory",
            "--group",
            "system:masters",
        ],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("cannot create the token")
            && stderr.contains(r#"impersonate on users "mallory" and groups "system:masters""#)
            && stderr.lines().count() == 1,
        "{stderr}"
    );
    let output = lariat_as(&carol, &["token", "create", "--user", "carol"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let token = String::from_utf8(output.stdout).unwrap().trim().to_string();
    let name = token.split(':').next().unwrap().to_string();
    let (status, body) = server.curl(
        "GET",
        "/apis/authentication.k8s.io/v1",
        Some(&token),
        None,
        None,
    );
    assert_eq!(status, 200, "{body}");

    let listed = server.lariat(&["token", "list"]);
    let listed = String::from_utf8_lossy(&listed.stdout).to_string();
    assert!(
        listed.contains(&name) && listed.contains("carol"),
        "{listed}"
    );
    assert!(
        !listed.contains(token.split(':').nth(1).unwrap()),
        "the secret is never listed"
    );

    let revoked = lariat_as(&carol, &["token", "revoke", &name]);
    assert!(
        revoked.status.success(),
        "{}",
        String::from_utf8_lossy(&revoked.stderr)
    );
    let (status, _) = server.curl(
        "GET",
        "/apis/authentication.k8s.io/v1",
        Some(&token),
        None,
        None,
    );
    assert_eq!(status, 401, "revoked at once");
    // A wrong secret for a live token, and a token that expired, are refused alike.
    let (_, secret) = token.split_once(':').unwrap();
    let carol_token = std::fs::read_to_string(&carol).unwrap();
    let live = carol_token
        .lines()
        .find_map(|l| l.trim().strip_prefix("token: "))
        .unwrap();
    let forged = format!("{}:{secret}", live.split(':').next().unwrap());
    assert_eq!(server.curl("GET", "/api", Some(&forged), None, None).0, 401);
    let short = user_kubeconfig(&server, "dave", &[], "1s");
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let (ok, expired) = run(&server, &short, &["auth", "whoami"]);
    assert!(!ok && expired.contains("Unauthorized"), "{expired}");
}
