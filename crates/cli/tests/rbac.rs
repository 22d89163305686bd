//! Who may do what on the management API: users from `lariat token create`, Kubernetes RBAC
//! enforced on every request, escalation refused, the access reviews `kubectl auth can-i`
//! sends, and revocation at once. All through the real kubectl, as each user.

mod common;

use std::path::{Path, PathBuf};

use std::time::Duration;

use common::{TestServer, eventually, eventually_within};

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
    // A name beyond ASCII is impersonated as given, never skipped (which would leave the
    // request to the admin).
    let whoami = server.kubectl_ok(&[
        "auth",
        "whoami",
        "--as",
        "josé@example.com",
        "--as-group",
        "équipe",
    ]);
    assert!(
        whoami.contains("josé@example.com")
            && whoami.contains("équipe")
            && !whoami.contains("system:masters"),
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
    // The same question about one namespace, asked there (a LocalSubjectAccessReview).
    let local = review
        .replace("\"SubjectAccessReview\"", "\"LocalSubjectAccessReview\"")
        .replace(
            "\"spec\"",
            "\"metadata\":{\"namespace\":\"team-a\"},\"spec\"",
        );
    let answer = server.apply_ok(&["create", "-o", "json", "-f", "-"], &local);
    assert!(
        answer.contains(r#""allowed": true"#) && answer.contains("LocalSubjectAccessReview"),
        "{answer}"
    );
    let elsewhere = local.replace(
        "\"clusters\",\"namespace\":\"team-a\"",
        "\"clusters\",\"namespace\":\"team-b\"",
    );
    let output = server.kubectl_stdin(&["create", "-f", "-"], &elsewhere);
    let error = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success()
            && error.contains("spec.resourceAttributes.namespace")
            && error.contains("must be the review's own namespace"),
        "{error}"
    );
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

/// Rancher's scopes on two imported clusters (each a real lariat API server with its own RBAC,
/// reached through its agent): a project member, a cluster owner and a global role's
/// `inheritedClusterRoles`, enforced by the downstream API servers on impersonated requests.
#[test]
fn rancher_scopes_are_enforced_downstream_through_impersonation() {
    let management = TestServer::start();
    let (c1, c2) = (TestServer::start(), TestServer::start());
    let url = format!("https://{}", management.address);
    let mut agents = vec![];
    for (name, downstream) in [("c1", &c1), ("c2", &c2)] {
        let (token, checksum) = common::import_cluster(&management, name, "1h");
        agents.push(common::Agent::start(
            management.data_dir(),
            name,
            &url,
            &token,
            &checksum,
            downstream,
        ));
    }
    for name in ["c1", "c2"] {
        eventually_within(Duration::from_secs(30), "the agents connect", || {
            common::cluster_condition(&management, name, "Connected") == "True"
        });
    }
    for ns in ["web", "db", "other"] {
        c1.kubectl_ok(&["create", "namespace", ns]);
        c1.kubectl_ok(&["create", "configmap", "settings", "-n", ns]);
    }
    c2.kubectl_ok(&["create", "namespace", "web"]);
    for (cluster, ns) in [(&c1, "web"), (&c1, "db"), (&c2, "web")] {
        // c2's namespace claims c1's project: a project never spans clusters.
        cluster.kubectl_ok(&[
            "annotate",
            "namespace",
            ns,
            "field.cattle.io/projectId=c1:p1",
        ]);
    }
    management.apply_ok(
        &["apply", "-f", "-"],
        r#"apiVersion: management.cattle.io/v3
kind: Project
metadata: {name: p1, namespace: default}
spec: {displayName: Web shop, clusterName: c1}
---
apiVersion: management.cattle.io/v3
kind: ProjectRoleTemplateBinding
metadata: {name: alice-member, namespace: default}
projectName: c1:p1
roleTemplateName: project-member
userName: alice
---
apiVersion: management.cattle.io/v3
kind: ClusterRoleTemplateBinding
metadata: {name: bob-owner, namespace: default}
clusterName: c1
roleTemplateName: cluster-owner
userName: bob
---
apiVersion: management.cattle.io/v3
kind: RoleTemplate
metadata: {name: cluster-reader}
context: cluster
rules:
- {apiGroups: ["*"], resources: ["*"], verbs: [get, list, watch]}
---
apiVersion: management.cattle.io/v3
kind: GlobalRole
metadata: {name: auditor}
inheritedClusterRoles: [cluster-reader]
---
apiVersion: management.cattle.io/v3
kind: GlobalRoleBinding
metadata: {name: auditors}
globalRoleName: auditor
groupPrincipalName: auditors
"#,
    );
    let proxied = |user: &Path, cluster: &str| {
        let output = lariat_as(user, &["kubeconfig", cluster]);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let name = format!(
            "{}-{cluster}.yaml",
            user.file_stem().unwrap().to_string_lossy()
        );
        let path = management.dir.path().join(name);
        std::fs::write(&path, &output.stdout).unwrap();
        path
    };
    let alice = user_kubeconfig(&management, "alice", &[], "1h");
    let bob = user_kubeconfig(&management, "bob", &[], "1h");
    let carol = user_kubeconfig(&management, "carol", &["auditors"], "1h");
    let (alice_c1, bob_c1, carol_c1, carol_c2) = (
        proxied(&alice, "c1"),
        proxied(&bob, "c1"),
        proxied(&carol, "c1"),
        proxied(&carol, "c2"),
    );

    // On lariat, alice reads her Project by name; a list is refused, naming it.
    let output = management.kubectl_as(&alice, &["get", "project", "p1", "-n", "default"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let output = management.kubectl_as(&alice, &["get", "projects", "-n", "default"]);
    let refused = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success()
            && refused.contains("you may get this one by name: p1 (kubectl get projects.management.cattle.io p1 -n default)"),
        "{refused}"
    );
    // Bob, whose binding names no Project, is refused with nothing named.
    let output = management.kubectl_as(&bob, &["get", "projects", "-n", "default"]);
    assert!(!String::from_utf8_lossy(&output.stderr).contains("by name"));

    // Alice works in her project's namespaces of c1, and nowhere else.
    eventually_within(Duration::from_secs(30), "alice reaches her project", || {
        run(&c1, &alice_c1, &["get", "configmaps", "-n", "web"]).0
            && run(&c1, &alice_c1, &["get", "configmaps", "-n", "db"]).0
    });
    let (ok, text) = run(
        &c1,
        &alice_c1,
        &["create", "configmap", "mine", "-n", "web"],
    );
    assert!(ok, "{text}");
    // She sees her project's namespaces themselves, and no other.
    assert!(run(&c1, &alice_c1, &["get", "namespace", "web"]).0);
    let (ok, text) = run(&c1, &alice_c1, &["get", "namespace", "other"]);
    assert!(
        !ok && text.contains("cannot get resource \"namespaces\""),
        "{text}"
    );
    let (ok, text) = run(&c1, &alice_c1, &["get", "configmaps", "-n", "other"]);
    assert!(!ok);
    assert!(
        text.contains(r#"User "alice" cannot list resource "configmaps" in API group "" in the namespace "other""#),
        "the downstream API server decides, as alice: {text}"
    );
    let (ok, text) = run(&c1, &alice_c1, &["get", "nodes"]);
    assert!(!ok, "{text}");
    // Nothing of c2: refused at lariat's proxy, before anything is sent.
    let output = lariat_as(&alice, &["kubeconfig", "c2"]);
    assert!(!output.status.success());
    let error = String::from_utf8_lossy(&output.stderr);
    assert!(
        error.contains("cannot read cluster default/c2")
            && error.contains("ask an administrator for a binding in that cluster")
            && error.trim().lines().count() == 1,
        "{error}"
    );
    let kubeconfig = std::fs::read_to_string(&alice).unwrap();
    let token = kubeconfig
        .split("token: ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("a token in alice's kubeconfig");
    let (code, text) = management.curl(
        "GET",
        "/k8s/clusters/default/c2/api/v1/namespaces/web/configmaps",
        Some(token),
        None,
        None,
    );
    assert_eq!(code, 403, "{text}");
    assert!(
        text.contains(r#"User \"alice\" cannot get resource \"clusters/proxy\" in API group \"cluster.x-k8s.io\" in the namespace \"default\""#),
        "{text}"
    );
    // Nor may she become someone else downstream: her own impersonation is lariat's to judge.
    let (ok, text) = run(
        &c1,
        &alice_c1,
        &["get", "configmaps", "-n", "other", "--as", "bob"],
    );
    assert!(!ok);
    assert!(
        text.contains(r#"cannot impersonate resource "users""#),
        "{text}"
    );

    // Bob owns all of c1 and nothing of c2.
    eventually_within(Duration::from_secs(30), "bob owns c1", || {
        run(
            &c1,
            &bob_c1,
            &["create", "configmap", "bobs", "-n", "other"],
        )
        .0
    });
    let (ok, text) = run(&c1, &bob_c1, &["get", "nodes"]);
    assert!(ok, "{text}");
    assert!(!lariat_as(&bob, &["kubeconfig", "c2"]).status.success());

    // The auditors' global role reads every cluster and changes none.
    for (downstream, kubeconfig) in [(&c1, &carol_c1), (&c2, &carol_c2)] {
        eventually_within(Duration::from_secs(30), "carol reads the cluster", || {
            run(downstream, kubeconfig, &["get", "configmaps", "-A"]).0
        });
        let (ok, text) = run(
            downstream,
            kubeconfig,
            &["create", "configmap", "x", "-n", "web"],
        );
        assert!(!ok, "{text}");
        assert!(
            text.contains(r#"User "carol" cannot create resource "configmaps""#),
            "{text}"
        );
    }

    // What lariat keeps downstream is labelled as its own and reported on the ClusterAccess.
    let bindings = c1.kubectl_ok(&[
        "get",
        "rolebindings",
        "-A",
        "-l",
        "management.lariat.dev/access",
        "-o",
        "jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name}={.roleRef.name} {end}",
    ]);
    assert_eq!(
        bindings.split_whitespace().collect::<Vec<_>>(),
        [
            "db/lariat-prtb-alice-member=lariat-project-member",
            "web/lariat-prtb-alice-member=lariat-project-member"
        ]
    );
    assert!(
        c2.kubectl_ok(&[
            "get",
            "rolebindings",
            "-A",
            "-l",
            "management.lariat.dev/access",
            "-o",
            "name"
        ])
        .trim()
        .is_empty(),
        "c1's project reaches nothing in c2"
    );
    eventually("the agent reports the access applied", || {
        management.kubectl_ok(&[
            "get",
            "clusteraccess",
            "c1",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Applied\")].status}",
        ]) == "True"
    });
    // Each binding says, as Rancher's do, whether it is in force downstream.
    let summary = |kind: &str, name: &str| {
        management.kubectl_ok(&["get", kind, name, "-o", "jsonpath={.status.summary}"])
    };
    eventually("the bindings' summaries say they are in force", || {
        summary("clusterroletemplatebindings", "bob-owner") == "Complete"
            && summary("projectroletemplatebindings", "alice-member") == "Complete"
            && summary("globalrolebindings", "auditors") == "Complete"
    });
    let listed = management.kubectl_ok(&["get", "crtb"]);
    assert!(
        listed.contains("STATUS") && listed.contains("Complete"),
        "{listed}"
    );

    // A template whose downstream ClusterRole someone else already made there is neither
    // applied nor bound: the role is not lariat's word.
    c1.kubectl_ok(&[
        "create",
        "clusterrole",
        "lariat-sneaky",
        "--verb=*",
        "--resource=*",
    ]);
    management.apply_ok(
        &["apply", "-f", "-"],
        "apiVersion: management.cattle.io/v3\nkind: RoleTemplate\nmetadata: {name: sneaky}\ncontext: cluster\nrules:\n- {apiGroups: [\"\"], resources: [configmaps], verbs: [get]}\n---\napiVersion: management.cattle.io/v3\nkind: ClusterRoleTemplateBinding\nmetadata: {name: alice-sneaky, namespace: default}\nclusterName: c1\nroleTemplateName: sneaky\nuserName: alice\n",
    );
    eventually("the agent reports the foreign role", || {
        management
            .kubectl_ok(&[
                "get",
                "clusteraccess",
                "c1",
                "-o",
                "jsonpath={.status.conditions[0].message}",
            ])
            .contains(r#"ClusterRole "lariat-sneaky" exists and is not lariat's"#)
    });
    eventually("the binding reports the error", || {
        summary("clusterroletemplatebindings", "alice-sneaky") == "Error"
            && management
                .kubectl_ok(&[
                    "get",
                    "clusterroletemplatebindings",
                    "alice-sneaky",
                    "-o",
                    "jsonpath={.status.remoteConditions[0].message}",
                ])
                .contains("lariat-sneaky")
    });
    assert!(
        !c1.kubectl(&["get", "clusterrolebinding", "lariat-crtb-alice-sneaky"])
            .status
            .success()
    );
    assert!(!run(&c1, &alice_c1, &["get", "secrets", "-n", "other"]).0);

    // A namespace moved to another project changes who reaches it, within seconds.
    c1.kubectl_ok(&[
        "annotate",
        "--overwrite",
        "namespace",
        "db",
        "field.cattle.io/projectId=c1:p2",
    ]);
    eventually_within(
        Duration::from_secs(10),
        "alice loses the moved namespace",
        || !run(&c1, &alice_c1, &["get", "configmaps", "-n", "db"]).0,
    );
    assert!(run(&c1, &alice_c1, &["get", "configmaps", "-n", "web"]).0);
    // A Project deleted takes its bindings with it: a new Project of its name starts empty.
    management.kubectl_ok(&["delete", "project", "p1"]);
    eventually("the project's bindings go with it", || {
        !management
            .kubectl(&["get", "prtb", "alice-member"])
            .status
            .success()
    });
    eventually_within(
        Duration::from_secs(10),
        "alice's RoleBindings are gone",
        || {
            c1.kubectl_ok(&[
                "get",
                "rolebindings",
                "-A",
                "-l",
                "management.lariat.dev/access",
                "-o",
                "name",
            ])
            .trim()
            .is_empty()
        },
    );
    assert!(!run(&c1, &alice_c1, &["get", "configmaps", "-n", "web"]).0);

    // ClusterAccesses are lariat's to write, even for an administrator.
    let refused = management.kubectl_err(&[
        "patch",
        "clusteraccess",
        "c1",
        "--type=merge",
        "-p",
        r#"{"spec":{"clusterRoles":[]}}"#,
    ]);
    assert!(
        refused.contains("lariat writes ClusterAccesses from Rancher's bindings"),
        "{refused}"
    );
    // Nor by going by the name of lariat's own controllers: what a write is judged by is
    // how it arrived (in-process), not who it says it is.
    let impersonating = management.kubectl_err(&[
        "patch",
        "clusteraccess",
        "c1",
        "--type=merge",
        "-p",
        r#"{"spec":{"clusterRoles":[]}}"#,
        "--as",
        "system:lariat:controller-manager",
        "--as-group",
        "system:masters",
    ]);
    assert!(
        impersonating.contains("lariat writes ClusterAccesses from Rancher's bindings"),
        "{impersonating}"
    );
    drop(agents);
}

/// Rancher's kinds are validated as Rancher's webhook does, and binding a role template takes
/// the `bind` verb on it.
#[test]
fn rancher_bindings_are_validated_and_need_bind() {
    let server = TestServer::start();
    let refused = server.kubectl_stdin(
        &["create", "-f", "-"],
        "apiVersion: management.cattle.io/v3\nkind: ClusterRoleTemplateBinding\nmetadata: {name: x, namespace: default}\nclusterName: c1\nroleTemplateName: project-member\nuserName: alice\ngroupName: devs\n",
    );
    let text = String::from_utf8_lossy(&refused.stderr).to_string();
    assert!(!refused.status.success());
    assert!(
        text.contains("a binding is for one user or one group, not both"),
        "{text}"
    );
    assert!(
        text.contains(r#"RoleTemplate "project-member" has context "project"; this binding needs one of context "cluster""#),
        "{text}"
    );
    let text = {
        let output = server.kubectl_stdin(
            &["create", "-f", "-"],
            "apiVersion: management.cattle.io/v3\nkind: ProjectRoleTemplateBinding\nmetadata: {name: x, namespace: default}\nprojectName: c1:nope\nroleTemplateName: project-member\nuserName: alice\n",
        );
        assert!(!output.status.success());
        String::from_utf8_lossy(&output.stderr).to_string()
    };
    assert!(
        text.contains(r#"no Project "nope" in namespace "default""#),
        "{text}"
    );

    // A cluster binding needs its Cluster, and a system: identity is no subject.
    let output = server.kubectl_stdin(
        &["create", "-f", "-"],
        "apiVersion: management.cattle.io/v3\nkind: ClusterRoleTemplateBinding\nmetadata: {name: everyone, namespace: default}\nclusterName: c1\nroleTemplateName: cluster-owner\ngroupName: system:authenticated\n",
    );
    let text = String::from_utf8_lossy(&output.stderr).to_string();
    assert!(
        text.contains(r#"no Cluster "c1" in namespace "default""#),
        "{text}"
    );
    assert!(
        text.contains("names starting with system: are Kubernetes's own identities"),
        "{text}"
    );
    server.apply_ok(
        &["apply", "-f", "-"],
        "apiVersion: cluster.x-k8s.io/v1beta1\nkind: Cluster\nmetadata: {name: c1}\nspec: {}\n",
    );

    // Dave may create bindings in `default` but holds no `bind` on role templates.
    server.kubectl_ok(&[
        "create", "clusterrole", "binding-writer", "--verb=create,get,list",
        "--resource=clusterroletemplatebindings.management.cattle.io,globalrolebindings.management.cattle.io",
    ]);
    server.kubectl_ok(&[
        "create",
        "clusterrolebinding",
        "dave",
        "--clusterrole=binding-writer",
        "--user=dave",
    ]);
    let dave = user_kubeconfig(&server, "dave", &[], "1h");
    let crtb = "apiVersion: management.cattle.io/v3\nkind: ClusterRoleTemplateBinding\nmetadata: {name: dave-owner, namespace: default}\nclusterName: c1\nroleTemplateName: cluster-owner\nuserName: dave\n";
    let output = kubectl_stdin_as(&server, &dave, &["create", "-f", "-"], crtb);
    let text = String::from_utf8_lossy(&output.stderr).to_string();
    assert!(!output.status.success());
    assert!(text.contains(r#"binding RoleTemplate "cluster-owner" needs the bind verb on roletemplates "cluster-owner""#), "{text}");
    let grb = "apiVersion: management.cattle.io/v3\nkind: GlobalRoleBinding\nmetadata: {name: dave-admin}\nglobalRoleName: admin\nuserName: dave\n";
    let output = kubectl_stdin_as(&server, &dave, &["create", "-f", "-"], grb);
    let text = String::from_utf8_lossy(&output.stderr).to_string();
    assert!(!output.status.success());
    assert!(text.contains("inheritedClusterRoles"), "{text}");
    // With `bind` on that one template, the binding is his to make.
    server.apply_ok(
        &["apply", "-f", "-"],
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: owner-binder}\nrules:\n- {apiGroups: [management.cattle.io], resources: [roletemplates], resourceNames: [cluster-owner], verbs: [bind]}\n",
    );
    server.kubectl_ok(&[
        "create",
        "clusterrolebinding",
        "dave-binds",
        "--clusterrole=owner-binder",
        "--user=dave",
    ]);
    eventually("dave may bind cluster-owner", || {
        kubectl_stdin_as(&server, &dave, &["create", "-f", "-"], crtb)
            .status
            .success()
    });
    // Built-in roles are lariat's: only what Rancher lets users change may change.
    let refused = server.kubectl_err(&[
        "patch",
        "roletemplate",
        "cluster-member",
        "--type=merge",
        "-p",
        r#"{"rules":[{"apiGroups":["*"],"resources":["*"],"verbs":["*"]}]}"#,
    ]);
    assert!(
        refused.contains("it is built in, so only locked"),
        "{refused}"
    );
    server.kubectl_ok(&[
        "patch",
        "roletemplate",
        "cluster-member",
        "--type=merge",
        "-p",
        r#"{"locked":true}"#,
    ]);
    let output = server.kubectl_stdin(
        &["create", "-f", "-"],
        "apiVersion: management.cattle.io/v3\nkind: RoleTemplate\nmetadata: {name: fake}\nbuiltin: true\ncontext: cluster\n",
    );
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("only lariat's own roles are builtin")
    );
    // Locked: no new binding, nor a template or global role that would carry it.
    for (what, manifest) in [
        (
            "template",
            "apiVersion: management.cattle.io/v3\nkind: RoleTemplate\nmetadata: {name: wrapper}\ncontext: cluster\nroleTemplateNames: [cluster-member]\n",
        ),
        (
            "global role",
            "apiVersion: management.cattle.io/v3\nkind: GlobalRole\nmetadata: {name: everywhere}\ninheritedClusterRoles: [cluster-member]\n",
        ),
    ] {
        let output = server.kubectl_stdin(&["create", "-f", "-"], manifest);
        let text = String::from_utf8_lossy(&output.stderr).to_string();
        assert!(
            text.contains(r#"RoleTemplate "cluster-member" is locked"#),
            "{what}: {text}"
        );
    }
    // Inheritance cannot loop, however it is edited.
    server.apply_ok(
        &["apply", "-f", "-"],
        "apiVersion: management.cattle.io/v3\nkind: RoleTemplate\nmetadata: {name: a}\ncontext: project\n---\napiVersion: management.cattle.io/v3\nkind: RoleTemplate\nmetadata: {name: b}\ncontext: project\nroleTemplateNames: [a]\n",
    );
    let refused = server.kubectl_err(&[
        "patch",
        "roletemplate",
        "a",
        "--type=merge",
        "-p",
        r#"{"roleTemplateNames":["b"]}"#,
    ]);
    assert!(
        refused.contains(r#"RoleTemplate "b" inherits "a": inheritance cannot loop"#),
        "{refused}"
    );

    // The built-in templates are there, as Rancher ships them.
    let templates = server.kubectl_ok(&["get", "roletemplates", "-o", "name"]);
    for name in [
        "cluster-owner",
        "cluster-member",
        "project-owner",
        "project-member",
        "read-only",
    ] {
        assert!(
            templates.contains(&format!("roletemplate.management.cattle.io/{name}")),
            "{templates}"
        );
    }
}

fn kubectl_stdin_as(
    server: &TestServer,
    kubeconfig: &Path,
    args: &[&str],
    input: &str,
) -> std::process::Output {
    use std::io::Write;
    let mut child = server
        .kubectl_command(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn updating_or_patching_does_not_grant_creating() {
    let server = TestServer::start();
    server.apply_ok(
        &["apply", "-f", "-"],
        r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: change-only, namespace: default}
rules:
- apiGroups: ["", "coordination.k8s.io"]
  resources: [configmaps, leases]
  verbs: [get, update, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: eve-changes, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: change-only}
subjects: [{kind: User, name: eve, apiGroup: rbac.authorization.k8s.io}]
"#,
    );
    let eve = user_kubeconfig(&server, "eve", &[], "1h");
    let lease = |name: &str| {
        format!(
            "{{\"apiVersion\":\"coordination.k8s.io/v1\",\"kind\":\"Lease\",\"metadata\":{{\"name\":\"{name}\",\"namespace\":\"default\"}}}}"
        )
    };
    // A PUT creates a missing Lease, so it needs create, as kube-apiserver asks.
    let put = kubectl_stdin_as(
        &server,
        &eve,
        &["replace", "-f", "-"],
        &lease("made-by-eve"),
    );
    let text = String::from_utf8_lossy(&put.stderr);
    assert!(!put.status.success(), "eve may not create by PUT");
    assert!(text.contains("cannot create"), "{text}");
    assert!(
        !server
            .kubectl(&["get", "lease", "made-by-eve"])
            .status
            .success()
    );
    // Server-side apply creates too: patch alone does not let it.
    let apply = kubectl_stdin_as(
        &server,
        &eve,
        &["apply", "--server-side", "-f", "-"],
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: applied-by-eve, namespace: default}\n",
    );
    let text = String::from_utf8_lossy(&apply.stderr);
    assert!(!apply.status.success(), "eve may not create by apply");
    assert!(text.contains("cannot create"), "{text}");
    // What exists, eve changes, by PUT and by apply alike.
    server.apply_ok(&["apply", "-f", "-"], &lease("shared"));
    server.kubectl_ok(&["create", "configmap", "shared"]);
    let put = kubectl_stdin_as(&server, &eve, &["replace", "-f", "-"], &lease("shared"));
    assert!(
        put.status.success(),
        "{}",
        String::from_utf8_lossy(&put.stderr)
    );
    let apply = kubectl_stdin_as(
        &server,
        &eve,
        &["apply", "--server-side", "-f", "-"],
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: shared, namespace: default}\ndata: {by: eve}\n",
    );
    assert!(
        apply.status.success(),
        "{}",
        String::from_utf8_lossy(&apply.stderr)
    );
}
