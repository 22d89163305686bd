//! Fleet's kinds through the real kubectl: what a Fleet user types on day one works, and
//! `clusters` still means Cluster API's.

mod common;

use std::path::Path;
use std::process::Command;

use std::time::Duration;

use common::{SEED_CLUSTER, TestServer, eventually, eventually_within};
use serde_json::Value;

/// The seed's GitRepo, as a Fleet user writes it.
const SEED_GIT_REPO: &str = r#"apiVersion: fleet.cattle.io/v1alpha1
kind: GitRepo
metadata:
  name: platform-baseline
  namespace: fleet-default
spec:
  repo: https://github.com/example-org/platform-manifests
  branch: main
  targets:
  - clusterSelector:
      matchLabels:
        env: production
"#;

fn header(table: &str) -> Vec<String> {
    table
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .map(String::from)
        .collect()
}

#[test]
fn fleet_workspaces_exist_from_the_first_start() {
    let server = TestServer::start();
    let namespaces = server.kubectl_ok(&["get", "namespaces", "-o", "name"]);
    for workspace in ["namespace/fleet-default", "namespace/fleet-local"] {
        assert!(namespaces.lines().any(|l| l == workspace), "{namespaces}");
    }
}

#[test]
fn the_seeds_git_repo_applies_and_prints_like_fleet() {
    let server = TestServer::start();
    let applied = server.apply_ok(&["apply", "-f", "-"], SEED_GIT_REPO);
    assert!(
        applied.contains("gitrepo.fleet.cattle.io/platform-baseline created"),
        "{applied}"
    );
    let table = server.kubectl_ok(&["get", "gitrepo", "-n", "fleet-default"]);
    assert_eq!(
        header(&table)[..4],
        ["NAME", "REPO", "COMMIT", "BUNDLESREADY"],
        "{table}"
    );
    assert!(
        table
            .lines()
            .nth(1)
            .is_some_and(|row| row.starts_with("platform-baseline")
                && row.contains("https://github.com/example-org/platform-manifests")),
        "{table}"
    );
    let bundles = server.kubectl_ok(&["get", "bundles", "-n", "fleet-default"]);
    assert!(
        bundles.is_empty() || bundles.contains("No resources"),
        "{bundles}"
    );
}

#[test]
fn a_fleet_field_lariat_does_not_implement_is_refused_not_ignored() {
    let server = TestServer::start();
    let manifest = SEED_GIT_REPO.replace(
        "  branch: main\n",
        "  branch: main\n  helmSecretNameForPaths: creds\n",
    );
    let output = server.kubectl_stdin(&["apply", "-f", "-"], &manifest);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "applied: {stderr}");
    assert!(
        stderr.contains("helmSecretNameForPaths") && stderr.contains("unknown field"),
        "{stderr}"
    );
}

#[test]
fn clusters_still_means_cluster_api_beside_fleets_clusters() {
    let server = TestServer::start();
    server.apply_ok(&["apply", "-f", "-"], SEED_CLUSTER);
    server.apply_ok(
        &["apply", "-f", "-"],
        "apiVersion: fleet.cattle.io/v1alpha1\nkind: Cluster\nmetadata:\n  name: prod-us-east\n  namespace: fleet-default\nspec: {}\n",
    );
    // The short plural picks Cluster API's kind (discovery lists its group first).
    let table = server.kubectl_ok(&["get", "clusters", "-A"]);
    assert!(header(&table).contains(&"PHASE".to_string()), "{table}");
    assert!(!table.contains("fleet-default"), "{table}");
    // Fleet's, by its full name: the one applied, and the one lariat keeps for the Cluster.
    let fleet = server.kubectl_ok(&["get", "clusters.fleet.cattle.io", "-A"]);
    let rows: Vec<Vec<&str>> = fleet
        .lines()
        .skip(1)
        .map(|row| row.split_whitespace().take(2).collect())
        .collect();
    assert!(
        header(&fleet).contains(&"BUNDLES-READY".to_string())
            && rows.contains(&vec!["fleet-default", "prod-us-east"])
            && rows.contains(&vec!["default", "prod-us-east"]),
        "{fleet}"
    );
}

/// A server that lets GitRepos name `file://` repositories under `dir` (and nowhere else).
fn serving_repositories_in(dir: &Path) -> TestServer {
    std::fs::create_dir_all(dir).unwrap();
    TestServer::start_with(&["--fleet-file-repos", dir.to_str().unwrap()])
}

/// Runs `git` in `dir` (the tests make real repositories; lariat fetches them with gix).
fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "test")
        .env("GIT_AUTHOR_EMAIL", "test@example.com")
        .env("GIT_COMMITTER_NAME", "test")
        .env("GIT_COMMITTER_EMAIL", "test@example.com")
        .output()
        .expect("run git");
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap().trim().to_string()
}

/// Writes `files` into the repository at `dir` and commits them; returns the commit.
fn commit(dir: &Path, files: &[(&str, &str)]) -> String {
    for (path, content) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "change"]);
    git(dir, &["rev-parse", "HEAD"])
}

const CONFIG_MAP: &str =
    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  color: blue\n";

/// An object of the `fleet-default` workspace, as `kubectl get RESOURCE NAME -o json` prints it.
fn workspace_object(server: &TestServer, resource: &str, name: &str) -> Value {
    serde_json::from_str(&server.kubectl_ok(&[
        "get",
        resource,
        name,
        "-n",
        "fleet-default",
        "-o",
        "json",
    ]))
    .unwrap()
}

fn git_repo(server: &TestServer, name: &str) -> Value {
    workspace_object(server, "gitrepo", name)
}

fn condition(repo: &Value, type_: &str) -> Value {
    repo["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == type_)
        .cloned()
        .unwrap_or(Value::Null)
}

fn bundle(server: &TestServer, name: &str) -> Option<Value> {
    let output = server.kubectl(&["get", "bundle", name, "-n", "fleet-default", "-o", "json"]);
    output
        .status
        .success()
        .then(|| serde_json::from_slice(&output.stdout).unwrap())
}

#[test]
fn a_git_repo_becomes_bundles_follows_new_commits_and_keeps_the_last_good_one() {
    let work = tempfile::tempdir().unwrap();
    let server = serving_repositories_in(work.path());
    let upstream = work.path().join("platform");
    std::fs::create_dir_all(&upstream).unwrap();
    git(&upstream, &["init", "-q", "-b", "main"]);
    let first = commit(
        &upstream,
        &[
            ("apps/base.yaml", CONFIG_MAP),
            ("apps/web/fleet.yaml", "defaultNamespace: web\n"),
            ("apps/web/app.yaml", CONFIG_MAP),
            ("docs/README.md", "not a manifest"),
        ],
    );
    apply_platform_git_repo(
        &server,
        &upstream,
        "  paths: [apps]\n  pollingInterval: 1s\n  targets:\n  - clusterSelector: {matchLabels: {env: prod}}\n",
    );
    eventually("the first commit is deployed as two bundles", || {
        git_repo(&server, "platform")["status"]["commit"] == first.as_str()
            && bundle(&server, "platform-apps").is_some()
            && bundle(&server, "platform-apps-web").is_some()
    });
    let repo = git_repo(&server, "platform");
    assert_eq!(condition(&repo, "Accepted")["status"], "True", "{repo}");
    let web = bundle(&server, "platform-apps-web").unwrap();
    assert_eq!(web["spec"]["defaultNamespace"], "web");
    assert_eq!(web["spec"]["resources"][0]["name"], "app.yaml");
    assert_eq!(
        web["metadata"]["labels"]["fleet.cattle.io/commit"],
        first.as_str()
    );
    assert_eq!(
        web["spec"]["targets"][0]["clusterSelector"]["matchLabels"]["env"],
        "prod"
    );
    let table = server.kubectl_ok(&["get", "gitrepo", "-n", "fleet-default"]);
    assert!(table.contains(&first), "{table}");

    // A Bundle deleted by hand is put back at the next fetch.
    server.kubectl_ok(&[
        "delete",
        "bundle",
        "platform-apps",
        "-n",
        "fleet-default",
        "--timeout=30s",
    ]);
    eventually("the deleted bundle is back", || {
        bundle(&server, "platform-apps").is_some()
    });
    // So is one whose spec or labels were changed by hand (a poll that finds the commit it
    // deployed reads it again only then).
    server.kubectl_ok(&[
        "patch",
        "bundle",
        "platform-apps-web",
        "-n",
        "fleet-default",
        "--type=merge",
        "-p",
        r#"{"spec":{"defaultNamespace":"elsewhere"}}"#,
    ]);
    eventually("the bundle's spec is put back", || {
        bundle(&server, "platform-apps-web").is_some_and(|b| b["spec"]["defaultNamespace"] == "web")
    });
    server.kubectl_ok(&[
        "label",
        "--overwrite",
        "bundle",
        "platform-apps-web",
        "-n",
        "fleet-default",
        "fleet.cattle.io/commit=forged",
    ]);
    eventually("the bundle's labels are put back", || {
        bundle(&server, "platform-apps-web")
            .is_some_and(|b| b["metadata"]["labels"]["fleet.cattle.io/commit"] == first.as_str())
    });

    // Another GitRepo whose bundle would take the same name is told so; the first keeps it.
    server.apply_ok(
        &["apply", "-f", "-"],
        &format!(
            "apiVersion: fleet.cattle.io/v1alpha1\nkind: GitRepo\nmetadata:\n  name: platform-apps\n  namespace: fleet-default\nspec:\n  repo: file://{}\n  branch: main\n",
            upstream.display()
        ),
    );
    eventually("the second GitRepo is refused its bundle's name", || {
        condition(&git_repo(&server, "platform-apps"), "Accepted")["reason"] == "BundleNameTaken"
            || condition(&git_repo(&server, "platform-apps"), "Accepted")["reason"]
                == "InvalidBundle"
    });

    // A new commit is seen within the polling interval.
    let second = commit(
        &upstream,
        &[("apps/web/app.yaml", &CONFIG_MAP.replace("blue", "green"))],
    );
    eventually("the second commit is deployed", || {
        bundle(&server, "platform-apps-web").is_some_and(|b| {
            b["spec"]["resources"][0]["content"]
                .as_str()
                .is_some_and(|c| c.contains("green"))
        }) && git_repo(&server, "platform")["status"]["commit"] == second.as_str()
    });

    // A commit that cannot be deployed changes nothing, and says which file and why.
    let broken = commit(&upstream, &[("apps/web/broken.yaml", "kind: [unclosed")]);
    eventually("the broken commit is refused", || {
        let repo = git_repo(&server, "platform");
        repo["status"]["pollingCommit"] == broken.as_str()
            && condition(&repo, "Accepted")["status"] == "False"
    });
    let repo = git_repo(&server, "platform");
    let refused = condition(&repo, "Accepted");
    assert_eq!(refused["reason"], "InvalidBundle", "{refused}");
    let message = refused["message"].as_str().unwrap();
    assert!(
        message.contains("apps/web/broken.yaml")
            && message.contains(&format!("commit {} stays deployed", &second[..12])),
        "{message}"
    );
    assert_eq!(
        repo["status"]["commit"],
        second.as_str(),
        "the last good commit stays"
    );
    assert_eq!(condition(&repo, "Ready")["status"], "False");

    // Fixed, and a path removed: its bundle goes.
    git(&upstream, &["rm", "-q", "-r", "apps/web"]);
    let fixed = commit(&upstream, &[]);
    eventually(
        "the fix is deployed and the removed path's bundle deleted",
        || {
            git_repo(&server, "platform")["status"]["commit"] == fixed.as_str()
                && bundle(&server, "platform-apps-web").is_none()
        },
    );

    // Paused: a new commit is fetched and waits, and the GitRepo says so.
    server.kubectl_ok(&[
        "patch",
        "gitrepo",
        "platform",
        "-n",
        "fleet-default",
        "--type=merge",
        "-p",
        r#"{"spec":{"paused":true}}"#,
    ]);
    let waiting = commit(&upstream, &[("apps/later.yaml", CONFIG_MAP)]);
    eventually("the paused GitRepo says the commit waits", || {
        let repo = git_repo(&server, "platform");
        let accepted = condition(&repo, "Accepted");
        repo["status"]["pollingCommit"] == waiting.as_str()
            && repo["status"]["commit"] == fixed.as_str()
            && accepted["reason"] == "Paused"
            && accepted["message"]
                .as_str()
                .is_some_and(|m| m.starts_with(&format!("spec.paused: commit {}", &waiting[..12])))
    });
    server.kubectl_ok(&[
        "patch",
        "gitrepo",
        "platform",
        "-n",
        "fleet-default",
        "--type=merge",
        "-p",
        r#"{"spec":{"paused":false}}"#,
    ]);
    eventually("unpaused, it is deployed", || {
        git_repo(&server, "platform")["status"]["commit"] == waiting.as_str()
    });

    // Deleting the GitRepo deletes its bundles and its clone.
    let uid = git_repo(&server, "platform")["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    let clone = server.data_dir().join("fleet/git").join(&uid);
    assert!(clone.is_dir(), "the clone lives under the data dir");
    server.kubectl_ok(&[
        "delete",
        "gitrepo",
        "platform",
        "-n",
        "fleet-default",
        "--timeout=30s",
    ]);
    eventually("its bundles are gone", || {
        bundle(&server, "platform-apps").is_none()
    });
    assert!(!clone.exists(), "the clone is removed");
}

#[test]
fn unreachable_repositories_and_missing_branches_are_conditions_not_crashes() {
    let work = tempfile::tempdir().unwrap();
    let server = serving_repositories_in(&work.path().join("allowed"));
    let upstream = work.path().join("allowed/repo");
    std::fs::create_dir_all(&upstream).unwrap();
    git(&upstream, &["init", "-q", "-b", "main"]);
    commit(&upstream, &[("cm.yaml", CONFIG_MAP)]);
    // A repository on the server's disk outside what it allows, also through `..`.
    let outside = work.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    git(&outside, &["init", "-q", "-b", "main"]);
    commit(&outside, &[("cm.yaml", CONFIG_MAP)]);
    let apply = |name: &str, url: &str, branch: &str| {
        server.apply_ok(
            &["apply", "-f", "-"],
            &format!(
                "apiVersion: fleet.cattle.io/v1alpha1\nkind: GitRepo\nmetadata:\n  name: {name}\n  namespace: fleet-default\nspec:\n  repo: {url}\n  branch: {branch}\n"
            ),
        )
    };
    apply(
        "no-branch",
        &format!("file://{}", upstream.display()),
        "release",
    );
    apply(
        "nowhere",
        &format!("file://{}/allowed/missing", work.path().display()),
        "main",
    );
    apply("outside", &format!("file://{}", outside.display()), "main");
    apply(
        "sneaky",
        &format!("file://{}/allowed/../outside", work.path().display()),
        "main",
    );
    // A bare path is on the server's disk too: refused, not read.
    apply("bare", &outside.display().to_string(), "main");
    apply("bad-credential", "https://example.invalid/repo.git", "main");
    server.kubectl_ok(&[
        "patch",
        "gitrepo",
        "bad-credential",
        "-n",
        "fleet-default",
        "--type=merge",
        "-p",
        r#"{"spec":{"clientSecretName":"missing"}}"#,
    ]);
    // ssh without known hosts: refused before any connection (no trust on first use).
    server.apply_ok(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: ssh-key\n  namespace: fleet-default\ntype: kubernetes.io/ssh-auth\nstringData:\n  ssh-privatekey: not-checked-before-known-hosts\n",
    );
    server.apply_ok(
        &["apply", "-f", "-"],
        "apiVersion: fleet.cattle.io/v1alpha1\nkind: GitRepo\nmetadata:\n  name: ssh-no-hosts\n  namespace: fleet-default\nspec:\n  repo: git@127.0.0.1:org/repo.git\n  clientSecretName: ssh-key\n",
    );
    // A revision: a tag is deployed, and stays deployed as the branch moves on; one that
    // does not exist is named.
    let first = git(&upstream, &["rev-parse", "HEAD"]);
    git(&upstream, &["tag", "v1"]);
    commit(
        &upstream,
        &[("cm.yaml", &CONFIG_MAP.replace("blue", "green"))],
    );
    let pinned = |name: &str, revision: &str| {
        server.apply_ok(
            &["apply", "-f", "-"],
            &format!(
                "apiVersion: fleet.cattle.io/v1alpha1\nkind: GitRepo\nmetadata:\n  name: {name}\n  namespace: fleet-default\nspec:\n  repo: file://{}\n  revision: {revision}\n",
                upstream.display()
            ),
        )
    };
    pinned("pinned", "v1");
    pinned("no-revision", "v9");
    let reason = |name: &str| condition(&git_repo(&server, name), "Accepted")["reason"].clone();
    eventually("each says what is wrong", || {
        reason("ssh-no-hosts") == "InvalidCredential"
            && reason("no-revision") == "RevisionNotFound"
            && git_repo(&server, "pinned")["status"]["commit"] == first.as_str()
            && reason("no-branch") == "BranchNotFound"
            && reason("nowhere") == "Unreachable"
            && reason("bad-credential") == "CredentialNotFound"
            && reason("outside") == "FileRepositoryNotAllowed"
            && reason("sneaky") == "FileRepositoryNotAllowed"
            && reason("bare") == "FileRepositoryNotAllowed"
    });
    assert!(
        ["outside", "sneaky", "bare"]
            .iter()
            .all(|name| bundle(&server, name).is_none()),
        "nothing was read from outside"
    );
    let message = condition(&git_repo(&server, "ssh-no-hosts"), "Accepted")["message"].clone();
    assert!(
        message.as_str().unwrap().contains("known_hosts"),
        "{message}"
    );
    let message = condition(&git_repo(&server, "no-branch"), "Accepted")["message"].clone();
    assert!(
        message.as_str().unwrap().contains("\"release\""),
        "{message}"
    );
    let events = server.kubectl_ok(&["get", "events", "-n", "fleet-default", "-o", "json"]);
    assert!(
        events.contains("BranchNotFound"),
        "a Warning Event says so too"
    );
    assert!(!server.log().contains("panicked"), "{}", server.log());
}

fn bundle_deployments(server: &TestServer, bundle: &str) -> Vec<Value> {
    let list: Value = serde_json::from_str(&server.kubectl_ok(&[
        "get",
        "bundledeployments",
        "-A",
        "-l",
        &format!("fleet.cattle.io/bundle-name={bundle}"),
        "-o",
        "json",
    ]))
    .unwrap();
    list["items"].as_array().cloned().unwrap_or_default()
}

fn clusters_of(deployments: &[Value]) -> Vec<String> {
    let mut names: Vec<String> = deployments
        .iter()
        .map(|bd| {
            bd["metadata"]["labels"]["fleet.cattle.io/cluster"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    names.sort();
    names
}

#[test]
fn bundles_go_to_the_clusters_their_labels_choose_and_follow_relabelling() {
    let work = tempfile::tempdir().unwrap();
    let server = serving_repositories_in(work.path());
    let upstream = work.path().join("platform");
    std::fs::create_dir_all(&upstream).unwrap();
    git(&upstream, &["init", "-q", "-b", "main"]);
    commit(&upstream, &[("cm.yaml", CONFIG_MAP)]);
    for (name, env) in [("a", "prod"), ("b", "prod"), ("c", "dev")] {
        server.apply_ok(
            &["apply", "-f", "-"],
            &format!("apiVersion: cluster.x-k8s.io/v1beta1\nkind: Cluster\nmetadata:\n  name: {name}\n  namespace: fleet-default\n  labels: {{env: {env}}}\nspec: {{}}\n"),
        );
    }
    eventually(
        "each Cluster has its Fleet Cluster, labels and namespace",
        || {
            let list: Value = serde_json::from_str(&server.kubectl_ok(&[
                "get",
                "clusters.fleet.cattle.io",
                "-n",
                "fleet-default",
                "-o",
                "json",
            ]))
            .unwrap();
            let items = list["items"].as_array().cloned().unwrap_or_default();
            items.len() == 3
                && items.iter().all(|c| c["status"]["namespace"].is_string())
                && items.iter().any(|c| {
                    c["metadata"]["name"] == "c" && c["metadata"]["labels"]["env"] == "dev"
                })
        },
    );
    apply_platform_git_repo(
        &server,
        &upstream,
        "  targets:\n  - clusterSelector: {matchLabels: {env: prod}}\n",
    );
    eventually("a BundleDeployment for each prod cluster", || {
        clusters_of(&bundle_deployments(&server, "platform")) == ["a", "b"]
    });
    let deployment = &bundle_deployments(&server, "platform")[0];
    let id = deployment["spec"]["deploymentID"].as_str().unwrap();
    let content = id.split(':').next().unwrap();
    let stored: Value =
        serde_json::from_str(&server.kubectl_ok(&["get", "content", content, "-o", "json"]))
            .unwrap();
    use base64::Engine;
    let manifests: Value = serde_json::from_slice(
        &base64::engine::general_purpose::STANDARD
            .decode(stored["content"].as_str().unwrap())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(manifests[0]["kind"], "ConfigMap", "{manifests}");

    // Nothing has applied them yet: the GitRepo says 0 of 2, and the Bundle names who waits.
    eventually("the rollup counts the clusters", || {
        git_repo(&server, "platform")["status"]["display"]["readyBundleDeployments"] == "0/2"
    });
    let bundle = bundle(&server, "platform").unwrap();
    let group = &bundle["status"]["failureGroups"][0];
    assert_eq!(group["state"], "WaitApplied", "{bundle}");
    assert_eq!(group["clusters"], serde_json::json!(["a", "b"]), "{bundle}");
    // The GitRepo carries its Bundles' failure groups too.
    eventually("the GitRepo's failure groups", || {
        let groups = &git_repo(&server, "platform")["status"]["failureGroups"];
        groups[0]["state"] == "WaitApplied"
            && groups[0]["clusters"] == serde_json::json!(["a", "b"])
            && groups[0]["count"] == 2
    });
    let table = server.kubectl_ok(&["get", "gitrepo", "-n", "fleet-default"]);
    assert!(table.contains("0/2"), "{table}");
    // `lariat fleet diagnose` says which clusters, why, and where to look.
    let output = server.lariat(&["fleet", "diagnose", "platform"]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        text.starts_with("2 clusters  WaitApplied")
            && text.contains("clusters: a, b")
            && text.contains(
                "kubectl get bundledeployments -A -l fleet.cattle.io/bundle-name=platform"
            ),
        "{text}"
    );
    let output = server.lariat(&["fleet", "diagnose", "-o", "json"]);
    let groups: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(groups[0]["clusters"], serde_json::json!(["a", "b"]));
    let missing = server.lariat(&["fleet", "diagnose", "nope"]);
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr)
            .contains("not found in namespace \"fleet-default\"")
    );

    // Each Fleet Cluster counts its own: `kubectl get clusters.fleet.cattle.io` shows it.
    eventually("a's Fleet Cluster counts its bundle", || {
        server.kubectl_ok(&[
            "get",
            "clusters.fleet.cattle.io",
            "a",
            "-n",
            "fleet-default",
            "-o",
            "jsonpath={.status.display.readyBundles}",
        ]) == "0/1"
    });

    // No agent has connected: each Fleet Cluster waits for its check-in, and a ClusterGroup
    // of the prod ones counts them and names them.
    let fleet_cluster = |name: &str| workspace_object(&server, "clusters.fleet.cattle.io", name);
    assert_eq!(
        fleet_cluster("a")["status"]["display"]["state"],
        "WaitCheckIn"
    );
    server.apply_ok(
        &["apply", "-f", "-"],
        "apiVersion: fleet.cattle.io/v1alpha1\nkind: ClusterGroup\nmetadata:\n  name: prod\n  namespace: fleet-default\nspec:\n  selector: {matchLabels: {env: prod}}\n",
    );
    let group_status = || workspace_object(&server, "clustergroup", "prod")["status"].clone();
    eventually("the group counts its clusters", || {
        let status = group_status();
        status["clusterCount"] == 2
            && status["nonReadyClusters"] == serde_json::json!(["a", "b"])
            && status["display"]["readyClusters"] == "0/2"
            && status["display"]["readyBundles"] == "0/2"
    });
    let table = server.kubectl_ok(&["get", "clustergroups", "-n", "fleet-default"]);
    assert!(table.contains("0/2"), "{table}");

    // Relabelling retargets: c gains one, a loses its.
    server.kubectl_ok(&[
        "label",
        "cluster.cluster.x-k8s.io",
        "c",
        "-n",
        "fleet-default",
        "env=prod",
        "--overwrite",
    ]);
    server.kubectl_ok(&[
        "label",
        "cluster.cluster.x-k8s.io",
        "a",
        "-n",
        "fleet-default",
        "env=dev",
        "--overwrite",
    ]);
    eventually("the BundleDeployments follow the labels", || {
        clusters_of(&bundle_deployments(&server, "platform")) == ["b", "c"]
    });
    eventually("so does the group", || {
        group_status()["nonReadyClusters"] == serde_json::json!(["b", "c"])
    });

    // A Fleet Cluster deleted by hand comes back, namespace and BundleDeployment too.
    server.kubectl_ok(&[
        "delete",
        "clusters.fleet.cattle.io",
        "c",
        "-n",
        "fleet-default",
        "--wait=false",
    ]);
    eventually("c's Fleet side is put back", || {
        clusters_of(&bundle_deployments(&server, "platform")) == ["b", "c"]
    });

    // A deleted cluster takes its Fleet Cluster, namespace and BundleDeployment with it.
    let namespace =
        workspace_object(&server, "clusters.fleet.cattle.io", "b")["status"]["namespace"]
            .as_str()
            .unwrap()
            .to_string();
    server.kubectl_ok(&[
        "delete",
        "cluster.cluster.x-k8s.io",
        "b",
        "-n",
        "fleet-default",
        "--timeout=30s",
    ]);
    eventually("b's Fleet side is gone", || {
        clusters_of(&bundle_deployments(&server, "platform")) == ["c"]
            && !server
                .kubectl(&["get", "namespace", &namespace])
                .status
                .success()
            && !server
                .kubectl(&[
                    "get",
                    "clusters.fleet.cattle.io",
                    "b",
                    "-n",
                    "fleet-default",
                ])
                .status
                .success()
    });
}

fn the_bundle_deployment(server: &TestServer, bundle: &str) -> Value {
    bundle_deployments(server, bundle)
        .into_iter()
        .next()
        .unwrap_or(Value::Null)
}

fn fleet_condition(object: &Value, type_: &str) -> (String, String) {
    let c = condition(object, type_);
    (
        c["status"].as_str().unwrap_or_default().to_string(),
        c["message"].as_str().unwrap_or_default().to_string(),
    )
}

fn first_group(server: &TestServer, name: &str) -> Value {
    bundle(server, name)
        .map(|b| b["status"]["failureGroups"][0].clone())
        .unwrap_or(Value::Null)
}

const WEB: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: team-a
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: nginx}]
";

#[test]
fn an_imported_clusters_agent_applies_its_bundles_and_says_what_became_of_them() {
    let work = tempfile::tempdir().unwrap();
    let management = serving_repositories_in(&work.path().join("repos"));
    let downstream = TestServer::start();
    let (token, checksum) =
        common::import_cluster_with(&management, &["edge", "-n", "fleet-default"]);
    management.kubectl_ok(&[
        "label",
        "cluster.cluster.x-k8s.io",
        "edge",
        "-n",
        "fleet-default",
        "env=prod",
    ]);
    let server_url = format!("https://{}", management.address);
    let start_agent = || {
        common::Agent::start(
            management.data_dir(),
            "edge",
            &server_url,
            &token,
            &checksum,
            &downstream,
        )
    };
    let agent = start_agent();
    let upstream = work.path().join("repos/platform");
    std::fs::create_dir_all(&upstream).unwrap();
    git(&upstream, &["init", "-q", "-b", "main"]);
    commit(&upstream, &[("cm.yaml", CONFIG_MAP), ("web.yaml", WEB)]);
    apply_platform_git_repo(
        &management,
        &upstream,
        "  pollingInterval: 5s\n  targets:\n  - clusterSelector: {matchLabels: {env: prod}}\n",
    );

    // The agent applies the manifests with server-side apply, creating the namespace they need.
    eventually_within(
        Duration::from_secs(60),
        "the manifests are in the cluster",
        || {
            downstream
                .kubectl(&["get", "deployment", "web", "-n", "team-a"])
                .status
                .success()
        },
    );
    assert_eq!(
        downstream.kubectl_ok(&[
            "get",
            "configmap",
            "settings",
            "-n",
            "default",
            "-o",
            "jsonpath={.metadata.labels.fleet\\.lariat\\.dev/bundle-deployment} {.metadata.managedFields[0].manager} {.metadata.managedFields[0].operation}"
        ]),
        "platform lariat Apply"
    );
    // No Deployment controller runs in this cluster: the Deployment is not ready, and says why.
    eventually("the Deployment is reported not ready", || {
        let bd = the_bundle_deployment(&management, "platform");
        fleet_condition(&bd, "Deployed").0 == "True"
            && fleet_condition(&bd, "Ready")
                .1
                .contains("Deployment team-a/web: waiting for the Deployment controller")
    });
    eventually("the Bundle groups the cluster as NotReady", || {
        let group = first_group(&management, "platform");
        group["state"] == "NotReady" && group["clusters"] == serde_json::json!(["edge"])
    });
    // The test plays the Deployment controller: one replica short, then all there.
    let deployment_status = |available: u32| {
        downstream.kubectl_ok(&[
            "patch", "deployment", "web", "-n", "team-a", "--subresource=status", "--type=merge", "-p",
            &format!(r#"{{"status":{{"observedGeneration":1,"replicas":2,"updatedReplicas":2,"availableReplicas":{available},"conditions":[{{"type":"Available","status":"False","reason":"MinimumReplicasUnavailable","message":"Deployment does not have minimum availability."}}]}}}}"#),
        ]);
    };
    deployment_status(1);
    eventually("the Deployment's own words reach the Bundle", || {
        first_group(&management, "platform")["message"]
            .as_str()
            .is_some_and(|m| {
                m.contains("replicas available: Deployment does not have minimum availability")
            })
    });
    deployment_status(2);
    eventually("the GitRepo is ready", || {
        git_repo(&management, "platform")["status"]["display"]["readyBundleDeployments"] == "1/1"
    });
    // Converged: no failure group, no state left behind from before.
    eventually("the Bundle has no failure group left", || {
        bundle(&management, "platform").is_some_and(|b| {
            b["status"]["failureGroups"].is_null() && b["status"]["display"]["state"].is_null()
        })
    });

    // Drift: a change downstream is Modified, with the fields and the patch that restores them.
    downstream.kubectl_ok(&[
        "patch",
        "configmap",
        "settings",
        "-n",
        "default",
        "--type=merge",
        "-p",
        r#"{"data":{"color":"red"}}"#,
    ]);
    eventually("the change is reported as drift", || {
        let bd = the_bundle_deployment(&management, "platform");
        bd["status"]["modifiedStatus"][0]["patch"] == r#"{"data":{"color":"blue"}}"#
            // What `kubectl get bundledeployments` shows as its STATUS.
            && fleet_condition(&bd, "Ready").1 == "ConfigMap default/settings changed: data.color"
            && first_group(&management, "platform")["message"]
                == "ConfigMap default/settings changed: data.color"
    });
    assert_eq!(first_group(&management, "platform")["state"], "Modified");
    // correctDrift puts it back, and puts back what is deleted.
    management.kubectl_ok(&[
        "patch",
        "gitrepo",
        "platform",
        "-n",
        "fleet-default",
        "--type=merge",
        "-p",
        r#"{"spec":{"correctDrift":{"enabled":true}}}"#,
    ]);
    let color = || {
        downstream
            .kubectl(&[
                "get",
                "configmap",
                "settings",
                "-n",
                "default",
                "-o",
                "jsonpath={.data.color}",
            ])
            .stdout
    };
    eventually("correctDrift restores the change", || color() == b"blue");
    downstream.kubectl_ok(&["delete", "configmap", "settings", "-n", "default"]);
    eventually("correctDrift restores the deleted object", || {
        color() == b"blue"
    });
    eventually("the GitRepo is ready again", || {
        git_repo(&management, "platform")["status"]["display"]["readyBundleDeployments"] == "1/1"
    });
    eventually("edge's Fleet Cluster counts its bundle ready", || {
        workspace_object(&management, "clusters.fleet.cattle.io", "edge")["status"]["display"]["readyBundles"]
            == "1/1"
    });

    // A manifest the cluster's API refuses: ErrApplied with the API's own words; what was
    // applied before stays.
    commit(
        &upstream,
        &[("web.yaml", &WEB.replace("replicas: 2", "replicas: two"))],
    );
    eventually_within(Duration::from_secs(40), "the refusal is reported", || {
        let bd = the_bundle_deployment(&management, "platform");
        let (status, message) = fleet_condition(&bd, "Deployed");
        status == "False"
            && message.starts_with("Deployment team-a/web: ")
            && message.contains("replicas")
    });
    eventually("the Bundle groups it as ErrApplied", || {
        first_group(&management, "platform")["state"] == "ErrApplied"
    });
    // The Fleet Cluster counts it as the Bundle does, by one test of readiness.
    eventually(
        "edge's Fleet Cluster counts the failed bundle as not ready",
        || {
            let fleet = workspace_object(&management, "clusters.fleet.cattle.io", "edge");
            fleet["status"]["display"]["readyBundles"] == "0/1"
                && fleet["status"]["display"]["state"] == "NotReady"
        },
    );
    assert_eq!(color(), b"blue");

    // The agent's credential reaches its own BundleDeployments and nothing else.
    let credential = common::agent_credential(&downstream);
    let own = the_bundle_deployment(&management, "platform")["metadata"]["namespace"]
        .as_str()
        .unwrap()
        .to_string();
    management.apply_ok(
        &["apply", "-f", "-"],
        "apiVersion: cluster.x-k8s.io/v1beta1\nkind: Cluster\nmetadata:\n  name: other\n  namespace: fleet-default\n  labels: {env: prod}\nspec: {}\n",
    );
    eventually("the other cluster has its BundleDeployment", || {
        bundle_deployments(&management, "platform").len() == 2
    });
    let others = lariat_api_namespace("fleet-default", "other");
    let content = the_bundle_deployment(&management, "platform")["spec"]["deploymentID"]
        .as_str()
        .unwrap()
        .split(':')
        .next()
        .unwrap()
        .to_string();
    let as_agent = |method: &str, path: &str, body: Option<&str>| {
        management.curl(
            method,
            path,
            Some(&credential),
            body.map(|_| "application/merge-patch+json"),
            body.map(str::as_bytes),
        )
    };
    let fleet = "/apis/fleet.cattle.io/v1alpha1";
    for allowed in [
        format!("{fleet}/namespaces/{own}/bundledeployments"),
        format!("{fleet}/namespaces/{own}/bundledeployments/platform"),
        format!("{fleet}/contents/{content}"),
    ] {
        let (code, body) = as_agent("GET", &allowed, None);
        assert_eq!(code, 200, "{allowed}: {body}");
    }
    for refused in [
        format!("{fleet}/namespaces/{others}/bundledeployments"),
        format!("{fleet}/bundledeployments"),
        format!("{fleet}/namespaces/fleet-default/bundles"),
        format!("{fleet}/namespaces/fleet-default/gitrepos"),
        format!("{fleet}/contents"),
        format!(
            "{fleet}/contents/s-0000000000000000000000000000000000000000000000000000000000000000"
        ),
        "/api/v1/namespaces/lariat-system/secrets".to_string(),
        "/apis/cluster.x-k8s.io/v1beta1/clusters".to_string(),
        "/apis".to_string(),
        "/k8s/clusters/fleet-default/edge/api/v1/namespaces".to_string(),
        "/metrics".to_string(),
    ] {
        let (code, body) = as_agent("GET", &refused, None);
        assert_eq!(code, 403, "{refused}: {body}");
    }
    let (code, _) = as_agent(
        "DELETE",
        &format!("{fleet}/namespaces/{own}/bundledeployments/platform"),
        None,
    );
    assert_eq!(code, 403);
    let (code, body) = as_agent(
        "PATCH",
        &format!("{fleet}/namespaces/{others}/bundledeployments/platform/status"),
        Some(r#"{"status":{"ready":true}}"#),
    );
    assert_eq!(code, 403, "{body}");
    // Through the status subresource, only status changes: not labels, finalizers or spec.
    let (code, body) = as_agent(
        "PATCH",
        &format!("{fleet}/namespaces/{own}/bundledeployments/platform/status"),
        Some(r#"{"metadata":{"labels":{"stolen":"yes"}},"spec":{"paused":true}}"#),
    );
    assert_eq!(code, 200, "{body}");
    let bd = the_bundle_deployment(&management, "platform");
    assert!(bd["metadata"]["labels"]["stolen"].is_null(), "{bd}");
    assert!(bd["spec"]["paused"].is_null(), "{bd}");
    // A registration token is no identity on the API, and the admin is not an agent.
    let (code, _) = management.curl(
        "GET",
        &format!("{fleet}/namespaces/{own}/bundledeployments"),
        Some(&token),
        None,
        None,
    );
    assert_eq!(code, 401);
    let (code, _) = management.curl("GET", "/apis", Some(&management.admin_token()), None, None);
    assert_eq!(code, 200);
    management.kubectl_ok(&[
        "delete",
        "cluster.cluster.x-k8s.io",
        "other",
        "-n",
        "fleet-default",
    ]);

    // Fixed in git, while the agent is away: the cluster is Offline, one group; when the
    // agent returns it catches up.
    drop(agent);
    commit(
        &upstream,
        &[
            ("web.yaml", WEB),
            ("cm.yaml", &CONFIG_MAP.replace("blue", "green")),
        ],
    );
    eventually_within(
        Duration::from_secs(60),
        "the cluster shows as offline",
        || first_group(&management, "platform")["state"] == "Offline",
    );
    let fleet_cluster =
        || workspace_object(&management, "clusters.fleet.cattle.io", "edge")["status"].clone();
    eventually(
        "its Fleet Cluster says when its agent was last seen",
        || {
            let status = fleet_cluster();
            status["display"]["state"] == "Offline"
                && status["agent"]["lastSeen"].is_string()
                && status["conditions"][0]["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("its agent is disconnected (last seen "))
        },
    );
    let agent = start_agent();
    eventually_within(
        Duration::from_secs(60),
        "the returning agent applies the fix",
        || {
            color() == b"green"
                && fleet_condition(&the_bundle_deployment(&management, "platform"), "Deployed").0
                    == "True"
        },
    );

    eventually("its Fleet Cluster is back", || {
        fleet_cluster()["display"]["state"] != "Offline"
    });

    // What leaves git is deleted from the cluster.
    git(&upstream, &["rm", "-q", "cm.yaml"]);
    git(&upstream, &["commit", "-q", "-m", "drop the settings"]);
    eventually_within(
        Duration::from_secs(40),
        "the removed manifest is pruned",
        || {
            !downstream
                .kubectl(&["get", "configmap", "settings", "-n", "default"])
                .status
                .success()
        },
    );
    assert!(
        downstream
            .kubectl(&["get", "deployment", "web", "-n", "team-a"])
            .status
            .success()
    );

    // Relabelled out of the target: its BundleDeployment goes, and the agent removes what it applied.
    management.kubectl_ok(&[
        "label",
        "cluster.cluster.x-k8s.io",
        "edge",
        "-n",
        "fleet-default",
        "env=dev",
        "--overwrite",
    ]);
    eventually_within(
        Duration::from_secs(40),
        "the bundle's objects leave the cluster",
        || {
            !downstream
                .kubectl(&["get", "deployment", "web", "-n", "team-a"])
                .status
                .success()
                && !downstream
                    .kubectl(&[
                        "get",
                        "configmap",
                        "fleet-bundle-platform",
                        "-n",
                        "lariat-system",
                    ])
                    .status
                    .success()
        },
    );
    assert!(!agent.log().contains("panicked"), "{}", agent.log());
    assert!(
        !management.log().contains(&credential),
        "the credential is never logged"
    );
}

/// The namespace of a cluster's BundleDeployments, as the server names it.
fn lariat_api_namespace(namespace: &str, name: &str) -> String {
    lariat_api::fleet::cluster_namespace(namespace, name)
}

/// In-memory clusters in `fleet-default`, each labelled `region=REGION`.
fn in_memory_clusters(server: &TestServer, clusters: &[(&str, &str)]) {
    in_memory_clusters_whose_pods(server, clusters, "");
}

/// In-memory clusters whose Nodes' kubelets fail Pods as `pods` (the YAML of the machine
/// template's `behavior.pods`, indented under it) says.
fn in_memory_clusters_whose_pods(server: &TestServer, clusters: &[(&str, &str)], pods: &str) {
    server.init_inmemory();
    for (name, region) in clusters {
        let manifests = common::generate_cluster(&[
            name,
            "--infrastructure",
            "inmemory",
            "--control-plane-machine-count",
            "1",
            "--worker-machine-count",
            "0",
            "--kubernetes-version",
            "v1.30.2",
            "-n",
            "fleet-default",
        ]);
        let manifests = manifests.replace("      behavior:\n", &format!("      behavior:\n{pods}"));
        server.apply_ok(&["apply", "-f", "-"], &manifests);
        server.kubectl_ok(&[
            "label",
            "cluster.cluster.x-k8s.io",
            name,
            "-n",
            "fleet-default",
            &format!("region={region}"),
        ]);
    }
}

#[test]
fn a_rollout_strategy_holds_a_broken_version_at_the_first_cluster() {
    let work = tempfile::tempdir().unwrap();
    let server = serving_repositories_in(&work.path().join("repos"));
    in_memory_clusters(&server, &[("c-1", "eu"), ("c-2", "eu"), ("c-3", "eu")]);
    let upstream = work.path().join("repos/platform");
    std::fs::create_dir_all(&upstream).unwrap();
    git(&upstream, &["init", "-q", "-b", "main"]);
    let settings = |data: &str| CONFIG_MAP.replace("color: blue", data);
    let fleet_yaml = "defaultNamespace: app\nrolloutStrategy:\n  maxUnavailable: 1\n";
    commit(
        &upstream,
        &[
            ("app/settings.yaml", CONFIG_MAP),
            ("app/fleet.yaml", fleet_yaml),
        ],
    );
    apply_platform_git_repo(
        &server,
        &upstream,
        "  pollingInterval: 5s\n  targets:\n  - clusterSelector: {}\n",
    );
    let ready = |count: &str| {
        git_repo(&server, "platform")["status"]["display"]["readyBundleDeployments"] == count
    };
    eventually_within(
        Duration::from_secs(120),
        "the first version is everywhere",
        || ready("3/3"),
    );
    let color = |cluster: &str, key: &str| {
        let kubeconfig = server.workload_kubeconfig_in("fleet-default", cluster);
        let output = server.kubectl_as(
            &kubeconfig,
            &[
                "get",
                "configmap",
                "settings",
                "-n",
                "app",
                "-o",
                &format!("jsonpath={{.data.{key}}}"),
            ],
        );
        String::from_utf8_lossy(&output.stdout).to_string()
    };
    // A version the clusters' API refuses (a value that is not a string): one cluster gets
    // it and fails; the others keep the first version, the new one staged.
    commit(
        &upstream,
        &[("app/settings.yaml", &settings("replicas: 3"))],
    );
    eventually_within(
        Duration::from_secs(60),
        "the rollout stops at one cluster",
        || {
            let Some(bundle) = bundle(&server, "platform-app") else {
                return false;
            };
            let status = &bundle["status"];
            status["summary"]["errApplied"] == 1
                && status["summary"]["outOfSync"] == 2
                && status["unavailable"] == 1
                && status["maxUnavailable"] == 1
        },
    );
    let groups = bundle(&server, "platform-app").unwrap()["status"]["failureGroups"].clone();
    let held = groups
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["state"] == "OutOfSync")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        held["clusters"],
        serde_json::json!(["c-2", "c-3"]),
        "{groups}"
    );
    assert!(
        held["message"]
            .as_str()
            .is_some_and(|m| m.contains("maxUnavailable 1")),
        "{held}"
    );
    let deployments = bundle_deployments(&server, "platform-app");
    let held_back = deployments
        .iter()
        .filter(|bd| bd["spec"]["deploymentID"] != bd["spec"]["stagedDeploymentID"])
        .count();
    assert_eq!(
        held_back, 2,
        "two hold the old version with the new one staged"
    );
    // Nothing changed where the rollout did not reach: their agents apply `deploymentID`,
    // never the staged version, and report the version the rollout kept applied and ready;
    // their clusters still have it (the failed cluster's API refused the new one).
    for kept in deployments
        .iter()
        .filter(|bd| bd["spec"]["deploymentID"] != bd["spec"]["stagedDeploymentID"])
    {
        assert_eq!(
            kept["status"]["appliedDeploymentID"], kept["spec"]["deploymentID"],
            "{kept}"
        );
        assert_eq!(kept["status"]["ready"], true, "{kept}");
    }
    for cluster in ["c-2", "c-3"] {
        assert_eq!(color(cluster, "color"), "blue", "{cluster}");
    }
    // The fix goes to the failed cluster at once, then to one cluster at a time.
    commit(
        &upstream,
        &[("app/settings.yaml", &settings("color: green"))],
    );
    eventually_within(
        Duration::from_secs(90),
        "the fix reaches every cluster",
        || ready("3/3"),
    );
    for cluster in ["c-1", "c-2", "c-3"] {
        assert_eq!(color(cluster, "color"), "green", "{cluster}");
    }
    let status = bundle(&server, "platform-app").unwrap()["status"].clone();
    assert_eq!(status["unavailable"], 0, "{status}");
    assert_eq!(status["partitions"][0]["count"], 3, "{status}");
}

#[test]
fn in_memory_clusters_converge_and_a_customisation_that_breaks_one_names_only_it() {
    let work = tempfile::tempdir().unwrap();
    let server = serving_repositories_in(&work.path().join("repos"));
    in_memory_clusters(&server, &[("eu-1", "eu"), ("eu-2", "eu"), ("us-1", "us")]);
    let upstream = work.path().join("repos/platform");
    std::fs::create_dir_all(&upstream).unwrap();
    git(&upstream, &["init", "-q", "-b", "main"]);
    // The us clusters get a customisation their API refuses (a ConfigMap value that is not a
    // string); the eu clusters get the manifests as they are.
    commit(
        &upstream,
        &[
            ("app/settings.yaml", CONFIG_MAP),
            (
                "app/fleet.yaml",
                "defaultNamespace: app\ntargetCustomizations:\n- name: us\n  clusterSelector: {matchLabels: {region: us}}\n  yaml:\n    overlays: [us]\n",
            ),
            (
                "app/overlays/us/settings_patch.yaml",
                "data:\n  replicas: 3\n",
            ),
        ],
    );
    apply_platform_git_repo(
        &server,
        &upstream,
        "  pollingInterval: 5s\n  targets:\n  - clusterSelector: {}\n",
    );
    eventually_within(
        Duration::from_secs(120),
        "the eu clusters are ready and the us one failed",
        || {
            let repo = git_repo(&server, "platform");
            let group = first_group(&server, "platform-app");
            repo["status"]["display"]["readyBundleDeployments"] == "2/3"
                && group["state"] == "ErrApplied"
                && group["clusters"] == serde_json::json!(["us-1"])
        },
    );
    let group = first_group(&server, "platform-app");
    assert!(
        group["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("ConfigMap app/settings: ") && m.contains("replicas")),
        "{group}"
    );
    let output = server.lariat(&["fleet", "diagnose", "platform"]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.starts_with("1 cluster  ErrApplied") && text.contains("clusters: us-1"),
        "{text}"
    );
    // In the eu clusters' own APIs the ConfigMap is there, in the namespace fleet.yaml names.
    for name in ["eu-1", "eu-2"] {
        let kubeconfig = server.workload_kubeconfig_in("fleet-default", name);
        let output = server.kubectl_as(
            &kubeconfig,
            &[
                "get",
                "configmap",
                "settings",
                "-n",
                "app",
                "-o",
                "jsonpath={.data.color}",
            ],
        );
        assert_eq!(output.stdout, b"blue", "{name}");
    }
    // The fix reaches the one that failed.
    commit(
        &upstream,
        &[(
            "app/overlays/us/settings_patch.yaml",
            "data:\n  replicas: \"3\"\n",
        )],
    );
    eventually_within(Duration::from_secs(60), "every cluster is ready", || {
        git_repo(&server, "platform")["status"]["display"]["readyBundleDeployments"] == "3/3"
    });
    let kubeconfig = server.workload_kubeconfig_in("fleet-default", "us-1");
    let output = server.kubectl_as(
        &kubeconfig,
        &[
            "get",
            "configmap",
            "settings",
            "-n",
            "app",
            "-o",
            "jsonpath={.data.replicas}",
        ],
    );
    assert_eq!(output.stdout, b"3");
}

#[test]
fn clusters_whose_pods_fail_alike_are_one_failure_group_in_their_pods_words() {
    let work = tempfile::tempdir().unwrap();
    let server = serving_repositories_in(&work.path().join("repos"));
    in_memory_clusters_whose_pods(
        &server,
        &[("eu-1", "eu"), ("eu-2", "eu")],
        "        pods:\n          imagePullFailures: [\"*:broken\"]\n          crashLoops: [\"*:crash\"]\n          neverReady: [\"*:unready\"]\n",
    );
    let upstream = work.path().join("repos/platform");
    std::fs::create_dir_all(&upstream).unwrap();
    git(&upstream, &["init", "-q", "-b", "main"]);
    // The clusters have one Node, the tainted control plane, which the Deployments tolerate;
    // each Deployment fails in one of the three ways the Nodes inject.
    let deployment = |name: &str, image: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    spec:\n      tolerations: [{{key: node-role.kubernetes.io/control-plane, effect: NoSchedule}}]\n      containers: [{{name: {name}, image: \"{image}\"}}]\n"
        )
    };
    let manifests = [
        deployment("web", "nginx:broken"),
        deployment("worker", "busybox:crash"),
        deployment("api", "nginx:unready"),
    ]
    .join("---\n");
    commit(
        &upstream,
        &[
            ("app/fleet.yaml", "defaultNamespace: default\n"),
            ("app/deployments.yaml", &manifests),
        ],
    );
    apply_platform_git_repo(&server, &upstream, "  targets:\n  - clusterSelector: {}\n");
    eventually_within(
        Duration::from_secs(120),
        "both clusters fail alike, in their Pods' words",
        || {
            let group = first_group(&server, "platform-app");
            group["clusters"] == serde_json::json!(["eu-1", "eu-2"])
                && group["message"].as_str().is_some_and(|m| {
                    m.contains("ImagePullBackOff")
                        && m.contains("CrashLoopBackOff")
                        && m.contains("ContainersNotReady")
                })
        },
    );
    let group = first_group(&server, "platform-app");
    let message = group["message"].as_str().unwrap();
    for said in [
        "Deployment default/web: 0/1 replicas available: Deployment does not have minimum availability.; its Pods: container web: ImagePullBackOff: Back-off pulling image \"nginx:broken\"",
        "Deployment default/worker: 0/1 replicas available: Deployment does not have minimum availability.; its Pods: container worker: CrashLoopBackOff, last exit code 1 (Error)",
        "Deployment default/api: 0/1 replicas available: Deployment does not have minimum availability.; its Pods: ContainersNotReady: containers with unready status: [api]",
    ] {
        assert!(message.contains(said), "{said:?} missing: {group}");
    }
    let output = server.lariat(&["fleet", "diagnose", "platform"]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.starts_with("2 clusters  NotReady")
            && text.contains("ImagePullBackOff")
            && text.contains("clusters: eu-1, eu-2"),
        "{text}"
    );
}

#[test]
fn depends_on_holds_a_bundle_back_until_its_dependency_is_ready_and_a_cycle_is_refused() {
    let work = tempfile::tempdir().unwrap();
    let server = serving_repositories_in(&work.path().join("repos"));
    server.init_inmemory();
    let manifests = common::generate_cluster(&[
        "solo",
        "--infrastructure",
        "inmemory",
        "--kubernetes-version",
        "v1.30.2",
        "-n",
        "fleet-default",
    ]);
    server.apply_ok(&["apply", "-f", "-"], &manifests);
    let upstream = work.path().join("repos/platform");
    std::fs::create_dir_all(&upstream).unwrap();
    git(&upstream, &["init", "-q", "-b", "main"]);
    let good = commit(
        &upstream,
        &[
            ("db/fleet.yaml", "labels: {tier: data}\n"),
            ("db/db.yaml", &WEB.replace("name: web", "name: db")),
            (
                "app/fleet.yaml",
                "dependsOn:\n- selector: {matchLabels: {tier: data}}\n",
            ),
            ("app/settings.yaml", CONFIG_MAP),
        ],
    );
    apply_platform_git_repo(
        &server,
        &upstream,
        "  pollingInterval: 5s\n  targets:\n  - clusterName: solo\n",
    );
    // The database is applied but not ready (its Pods cannot be scheduled: the cluster's one
    // Node is its control plane, tainted as kubeadm taints it), so the app waits, and says
    // for what.
    eventually_within(
        Duration::from_secs(60),
        "the app waits for the database",
        || {
            let group = first_group(&server, "platform-app");
            group["state"] == "WaitApplied"
                && group["message"].as_str().is_some_and(|m| {
                    m == "waiting for the bundles labelled tier=data to be Ready on this cluster"
                })
        },
    );
    let kubeconfig = server.workload_kubeconfig_in("fleet-default", "solo");
    let in_cluster = |args: &[&str]| server.kubectl_as(&kubeconfig, args);
    assert!(
        in_cluster(&["get", "deployment", "db", "-n", "team-a"])
            .status
            .success()
    );
    assert!(
        !in_cluster(&["get", "configmap", "settings", "-n", "default"])
            .status
            .success()
    );
    assert!(
        String::from_utf8_lossy(&in_cluster(&["describe", "pods", "-n", "team-a"]).stdout)
            .contains("untolerated taint {node-role.kubernetes.io/control-plane: }")
    );
    // The control plane takes workloads too, as on a one-Node cluster: the database becomes
    // ready and the app follows.
    let untainted = in_cluster(&[
        "taint",
        "nodes",
        "--all",
        "node-role.kubernetes.io/control-plane-",
    ]);
    assert!(untainted.status.success(), "{untainted:?}");
    eventually_within(
        Duration::from_secs(30),
        "the app is applied once the database is ready",
        || {
            in_cluster(&["get", "configmap", "settings", "-n", "default"])
                .status
                .success()
        },
    );
    eventually("every bundle is ready", || {
        git_repo(&server, "platform")["status"]["display"]["readyBundleDeployments"] == "2/2"
    });

    // A commit whose dependsOn makes a cycle is refused, saying which; the last good one stays.
    commit(
        &upstream,
        &[(
            "db/fleet.yaml",
            "labels: {tier: data}\ndependsOn:\n- name: platform-app\n",
        )],
    );
    eventually_within(Duration::from_secs(30), "the cycle is refused", || {
        let repo = git_repo(&server, "platform");
        let accepted = condition(&repo, "Accepted");
        accepted["reason"] == "DependsOnCycle"
            && accepted["message"].as_str().is_some_and(|m| {
                m.contains("platform-app -> platform-db -> platform-app")
                    || m.contains("platform-db -> platform-app -> platform-db")
            })
            && repo["status"]["commit"] == good.as_str()
    });

    // A second GitRepo deploying the same object to the same cluster is refused there, as
    // Helm and Fleet refuse one object in two releases; the first keeps it.
    server.apply_ok(
        &["apply", "-f", "-"],
        &format!(
            "apiVersion: fleet.cattle.io/v1alpha1\nkind: GitRepo\nmetadata:\n  name: copy\n  namespace: fleet-default\nspec:\n  repo: file://{}\n  branch: main\n  paths: [app]\n  targets:\n  - clusterName: solo\n",
            upstream.display()
        ),
    );
    eventually_within(Duration::from_secs(60), "the copy is refused", || {
        let group = first_group(&server, "copy-app");
        group["state"] == "ErrApplied"
            && group["message"].as_str().is_some_and(|m| {
                m.contains("ConfigMap default/settings is deployed by bundle platform-app already")
            })
    });
    let owner = || {
        String::from_utf8_lossy(
            &in_cluster(&[
                "get",
                "configmap",
                "settings",
                "-n",
                "default",
                "-o",
                "jsonpath={.metadata.labels.fleet\\.lariat\\.dev/bundle-deployment}",
            ])
            .stdout,
        )
        .to_string()
    };
    assert_eq!(owner(), "platform-app");
    // Removing a bundle deletes only what its record in the cluster names, and the agent
    // records what it is about to apply after the check that refused the copy: the copy's
    // removal has nothing to delete.
    assert!(
        !in_cluster(&[
            "get",
            "configmap",
            "fleet-bundle-copy-app",
            "-n",
            "lariat-system"
        ])
        .status
        .success(),
        "the refused copy recorded nothing it applied"
    );
    server.kubectl_ok(&["delete", "gitrepo", "copy", "-n", "fleet-default"]);
    eventually("the copy's bundle is gone", || {
        bundle(&server, "copy-app").is_none()
    });
    assert_eq!(owner(), "platform-app", "the first bundle still owns it");
    // Deleting the owner's GitRepo removes it from the cluster: nothing is orphaned.
    server.kubectl_ok(&["delete", "gitrepo", "platform", "-n", "fleet-default"]);
    eventually_within(
        Duration::from_secs(40),
        "its objects leave the cluster",
        || {
            !in_cluster(&["get", "configmap", "settings", "-n", "default"])
                .status
                .success()
        },
    );
    // A namespace of the cluster is deleted as in a real cluster (contents, then itself).
    let deleted = in_cluster(&["delete", "namespace", "team-a", "--timeout=30s"]);
    assert!(
        deleted.status.success(),
        "{}",
        String::from_utf8_lossy(&deleted.stderr)
    );
}

/// Applies GitRepo `platform` in fleet-default for the repository at `repo`, on branch main,
/// with `spec` (further YAML lines of its spec, indented two spaces).
fn apply_platform_git_repo(server: &TestServer, repo: &Path, spec: &str) {
    server.apply_ok(
        &["apply", "-f", "-"],
        &format!(
            "apiVersion: fleet.cattle.io/v1alpha1\nkind: GitRepo\nmetadata:\n  name: platform\n  namespace: fleet-default\nspec:\n  repo: file://{}\n  branch: main\n{spec}",
            repo.display()
        ),
    );
}

/// GitHub's signature of a delivery: `sha256=` and the HMAC-SHA256 of the body, in hex.
fn github_signature(secret: &str, body: &str) -> String {
    use hmac::Mac;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body.as_bytes());
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256={hex}")
}

#[test]
fn a_signed_push_webhook_fetches_at_once_and_a_forged_one_is_refused() {
    let work = tempfile::tempdir().unwrap();
    let server = serving_repositories_in(&work.path().join("repos"));
    let upstream = work.path().join("repos/platform");
    std::fs::create_dir_all(&upstream).unwrap();
    git(&upstream, &["init", "-q", "-b", "main"]);
    let first = commit(&upstream, &[("cm.yaml", CONFIG_MAP)]);
    server.kubectl_ok(&[
        "create",
        "secret",
        "generic",
        "hooks",
        "-n",
        "fleet-default",
        "--from-literal=github=s3cret",
        "--from-literal=gitlab=t0ken",
    ]);
    // Polling off: only a webhook makes it fetch again.
    apply_platform_git_repo(
        &server,
        &upstream,
        "  disablePolling: true\n  webhookSecret: hooks\n",
    );
    eventually("the first commit is fetched", || {
        git_repo(&server, "platform")["status"]["commit"] == first.as_str()
    });
    let second = commit(
        &upstream,
        &[("cm.yaml", &CONFIG_MAP.replace("blue", "red"))],
    );
    let payload = |commit: &str| {
        format!(
            r#"{{"ref":"refs/heads/main","after":"{commit}","repository":{{"clone_url":"file://{}"}}}}"#,
            upstream.display()
        )
    };
    let deliver = |headers: &[String], body: &str| {
        let mut args = vec!["-X".to_string(), "POST".to_string()];
        for header in headers {
            args.extend(["-H".to_string(), header.clone()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        server.curl_with(
            &args,
            &format!("https://{}/v3/fleet/webhook", server.address),
            Some(body.as_bytes()),
        )
    };
    // Forged: a wrong signature, no signature, a GitLab token that is wrong.
    let body = payload(&second);
    for headers in [
        vec![
            "X-GitHub-Event: push".to_string(),
            format!("X-Hub-Signature-256: {}", github_signature("guess", &body)),
        ],
        vec!["X-GitHub-Event: push".to_string()],
    ] {
        let (code, answer) = deliver(&headers, &body);
        assert_eq!(code, 401, "{headers:?}: {answer}");
    }
    let gitlab = |commit: &str| {
        format!(
            r#"{{"ref":"refs/heads/main","checkout_sha":"{commit}","project":{{"git_http_url":"file://{}"}}}}"#,
            upstream.display()
        )
    };
    let (code, answer) = deliver(
        &[
            "X-Gitlab-Event: Push Hook".to_string(),
            "X-Gitlab-Token: guess".to_string(),
        ],
        &gitlab(&second),
    );
    assert_eq!(code, 401, "{answer}");
    // Not a webhook at all, or not JSON.
    let (code, _) = deliver(&[], &body);
    assert_eq!(code, 400);
    let (code, _) = deliver(&["X-GitHub-Event: push".to_string()], "not json");
    assert_eq!(code, 400);
    // GitHub's ping is answered and does nothing.
    let (code, answer) = deliver(&["X-GitHub-Event: ping".to_string()], "{}");
    assert_eq!(code, 200, "{answer}");
    // With polling off, only a push recorded on the GitRepo (`webhookCommit`, written before
    // the delivery is answered) makes it fetch again: none was.
    let repo = git_repo(&server, "platform");
    assert!(repo["status"]["webhookCommit"].is_null(), "{repo}");
    assert_eq!(repo["status"]["commit"], first.as_str());

    // Signed: fetched at once, though polling is off.
    let (code, answer) = deliver(
        &[
            "X-GitHub-Event: push".to_string(),
            format!("X-Hub-Signature-256: {}", github_signature("s3cret", &body)),
        ],
        &body,
    );
    assert_eq!(code, 200, "{answer}");
    assert!(answer.contains("fleet-default/platform"), "{answer}");
    eventually("the pushed commit is fetched", || {
        let repo = git_repo(&server, "platform");
        repo["status"]["commit"] == second.as_str()
            && repo["status"]["webhookCommit"] == second.as_str()
    });
    // And GitLab's, with its token.
    let third = commit(
        &upstream,
        &[("cm.yaml", &CONFIG_MAP.replace("blue", "green"))],
    );

    let (code, answer) = deliver(
        &[
            "X-Gitlab-Event: Push Hook".to_string(),
            "X-Gitlab-Token: t0ken".to_string(),
        ],
        &gitlab(&third),
    );
    assert_eq!(code, 200, "{answer}");
    eventually("GitLab's push is fetched", || {
        git_repo(&server, "platform")["status"]["commit"] == third.as_str()
    });

    // A GitRepo of the same repository without a webhook secret (and no gitjob-webhook
    // Secret in lariat-system) is never triggered, whatever a delivery is signed with.
    server.apply_ok(
        &["apply", "-f", "-"],
        &format!(
            "apiVersion: fleet.cattle.io/v1alpha1\nkind: GitRepo\nmetadata:\n  name: unguarded\n  namespace: fleet-default\nspec:\n  repo: file://{}\n  branch: main\n  disablePolling: true\n",
            upstream.display()
        ),
    );
    eventually("the unguarded GitRepo fetched once", || {
        git_repo(&server, "unguarded")["status"]["commit"] == third.as_str()
    });
    let fourth = commit(
        &upstream,
        &[("cm.yaml", &CONFIG_MAP.replace("blue", "red"))],
    );
    let pushed = payload(&fourth);
    for secret in ["s3cret", "", "guess"] {
        let (code, answer) = deliver(
            &[
                "X-GitHub-Event: push".to_string(),
                format!("X-Hub-Signature-256: {}", github_signature(secret, &pushed)),
            ],
            &pushed,
        );
        assert!(!answer.contains("unguarded"), "{secret:?}: {answer}");
        if secret == "s3cret" {
            assert_eq!(code, 200, "{answer}");
        } else {
            assert_eq!(code, 401, "{secret:?}: {answer}");
        }
    }
    eventually("the guarded one fetches the push", || {
        git_repo(&server, "platform")["status"]["commit"] == fourth.as_str()
    });
    // Every delivery was answered, and a push is recorded on a GitRepo before its answer:
    // without `webhookCommit`, nothing makes the unguarded one (polling off) fetch again.
    let unguarded = git_repo(&server, "unguarded");
    assert_eq!(unguarded["status"]["commit"], third.as_str());
    assert!(
        unguarded["status"]["webhookCommit"].is_null(),
        "{unguarded}"
    );
    assert!(!server.log().contains("s3cret") && !server.log().contains("t0ken"));
}

const WIDGET_CRD: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, plural: widgets, singular: widget}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
";

const CHART_YAML: &str = "apiVersion: v2\nname: web\nversion: 0.1.0\nappVersion: \"1.25\"\n";
const CHART_VALUES: &str = "color: green\nimage: nginx\n";
const CHART_HELPERS: &str = r#"{{- define "web.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
"#;
const CHART_CONFIG_MAP: &str = r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-settings
  labels:
    {{- include "web.labels" . | nindent 4 }}
data:
  color: {{ .Values.color | quote }}
  image: {{ required "values: image is required" .Values.image | quote }}
  namespace: {{ .Release.Namespace }}
  revision: "{{ .Release.Revision }}"
  kube: "{{ .Capabilities.KubeVersion.Major }}.{{ .Capabilities.KubeVersion.Minor }}"
  {{- if semverCompare ">=1.25-0" .Capabilities.KubeVersion.GitVersion }}
  modern: "true"
  {{- end }}
  {{- if .Capabilities.APIVersions.Has "apps/v1/Deployment" }}
  deployments: "served"
  {{- end }}
  {{- with .Values.region }}
  region: {{ . | quote }}
  {{- end }}
"#;
const CHART_SCHEMA: &str =
    r#"{"properties": {"color": {"type": "string"}, "image": {"type": "string"}}}"#;

/// The kubeconfig of in-memory cluster `cluster`, once it answers, with namespace `namespace`
/// made in it.
fn workload_with_namespace(
    server: &TestServer,
    cluster: &str,
    namespace: &str,
) -> std::path::PathBuf {
    let secret = format!("{cluster}-kubeconfig");
    eventually_within(Duration::from_secs(60), "the cluster's kubeconfig", || {
        server
            .kubectl(&["get", "secret", &secret, "-n", "fleet-default"])
            .status
            .success()
    });
    let kubeconfig = server.workload_kubeconfig_in("fleet-default", cluster);
    eventually_within(Duration::from_secs(60), "the cluster's API answers", || {
        server
            .kubectl_as(&kubeconfig, &["create", "namespace", namespace])
            .status
            .success()
    });
    kubeconfig
}

/// Revision `version` of Helm release `release` in cluster `cluster`, decoded as Helm decodes
/// its Secret (base64, gzip, JSON); null when there is none.
fn helm_release(
    server: &TestServer,
    cluster: &str,
    namespace: &str,
    release: &str,
    version: u32,
) -> Value {
    use base64::Engine as _;
    use std::io::Read as _;
    let kubeconfig = server.workload_kubeconfig_in("fleet-default", cluster);
    let name = format!("sh.helm.release.v1.{release}.v{version}");
    let output = server.kubectl_as(
        &kubeconfig,
        &["get", "secret", &name, "-n", namespace, "-o", "json"],
    );
    let Ok(secret) = serde_json::from_slice::<Value>(&output.stdout) else {
        return Value::Null;
    };
    assert_eq!(secret["type"], "helm.sh/release.v1", "{secret}");
    assert_eq!(secret["metadata"]["labels"]["owner"], "helm", "{secret}");
    let engine = base64::engine::general_purpose::STANDARD;
    let once = engine
        .decode(secret["data"]["release"].as_str().unwrap())
        .unwrap();
    let gzipped = engine.decode(once).unwrap();
    let mut json = Vec::new();
    flate2::read::GzDecoder::new(gzipped.as_slice())
        .read_to_end(&mut json)
        .unwrap();
    serde_json::from_slice(&json).unwrap()
}

/// The ConfigMap `name` in namespace `namespace` of in-memory cluster `cluster`.
fn workload_config_map(server: &TestServer, cluster: &str, namespace: &str, name: &str) -> Value {
    let kubeconfig_secret = format!("{cluster}-kubeconfig");
    if !server
        .kubectl(&["get", "secret", &kubeconfig_secret, "-n", "fleet-default"])
        .status
        .success()
    {
        return Value::Null;
    }
    let kubeconfig = server.workload_kubeconfig_in("fleet-default", cluster);
    let output = server.kubectl_as(
        &kubeconfig,
        &["get", "configmap", name, "-n", namespace, "-o", "json"],
    );
    serde_json::from_slice(&output.stdout).unwrap_or(Value::Null)
}

#[test]
fn a_helm_chart_in_the_repository_renders_per_cluster_and_a_broken_one_fails_alone() {
    let work = tempfile::tempdir().unwrap();
    let server = serving_repositories_in(&work.path().join("repos"));
    in_memory_clusters(&server, &[("eu-1", "eu"), ("us-1", "us")]);
    let upstream = work.path().join("repos/platform");
    std::fs::create_dir_all(&upstream).unwrap();
    git(&upstream, &["init", "-q", "-b", "main"]);
    commit(
        &upstream,
        &[
            ("plain/settings.yaml", CONFIG_MAP),
            (
                "web/fleet.yaml",
                "defaultNamespace: web\nhelm:\n  chart: ./chart\n  releaseName: shop\n  values:\n    color: blue\n    region: ${ .ClusterLabels.region }-${ .ClusterName }\ntargetCustomizations:\n- name: us\n  clusterSelector: {matchLabels: {region: us}}\n  helm:\n    values:\n      color: red\n",
            ),
            ("web/chart/Chart.yaml", CHART_YAML),
            ("web/chart/values.yaml", CHART_VALUES),
            ("web/chart/values.schema.json", CHART_SCHEMA),
            ("web/chart/templates/_helpers.tpl", CHART_HELPERS),
            ("web/chart/templates/configmap.yaml", CHART_CONFIG_MAP),
        ],
    );
    apply_platform_git_repo(
        &server,
        &upstream,
        "  pollingInterval: 5s\n  paths: [plain, web]\n  targets:\n  - clusterSelector: {}\n",
    );
    eventually_within(
        Duration::from_secs(120),
        "both bundles ready on both clusters",
        || git_repo(&server, "platform")["status"]["display"]["readyBundleDeployments"] == "4/4",
    );
    // Rendered on each cluster with its own values and its own version (v1.30.2) and groups;
    // `${ }` values made for each cluster from its labels and name, as Fleet makes them.
    for (cluster, color, region) in [("eu-1", "blue", "eu-eu-1"), ("us-1", "red", "us-us-1")] {
        let settings = workload_config_map(&server, cluster, "web", "shop-settings");
        let data = &settings["data"];
        assert_eq!(data["color"], color, "{cluster}: {settings}");
        assert_eq!(data["region"], region, "{cluster}: {settings}");
        assert_eq!(data["image"], "nginx", "{settings}");
        assert_eq!(data["namespace"], "web", "{settings}");
        assert_eq!(data["kube"], "1.30", "{settings}");
        assert_eq!(data["modern"], "true", "{settings}");
        assert_eq!(data["deployments"], "served", "{settings}");
        assert_eq!(data["revision"], "1", "{settings}");
        assert_eq!(
            settings["metadata"]["labels"]["app.kubernetes.io/instance"], "shop",
            "{settings}"
        );
    }
    // Each cluster keeps the release as Helm does: `helm list` and `helm history` read these.
    let v1 = helm_release(&server, "eu-1", "web", "shop", 1);
    assert_eq!(v1["info"]["status"], "deployed", "{v1}");
    assert_eq!(v1["info"]["description"], "Install complete", "{v1}");
    assert_eq!(v1["config"]["color"], "blue", "{v1}");
    assert_eq!(v1["chart"]["metadata"]["name"], "web", "{v1}");
    // Helm's own JSON: a string where Helm has a string field.
    assert_eq!(v1["chart"]["metadata"]["appVersion"], "1.25", "{v1}");
    assert!(
        v1["manifest"]
            .as_str()
            .is_some_and(|m| m.starts_with("---\n# Source: web/templates/configmap.yaml\n")),
        "{v1}"
    );
    // What Helm itself would take as its own: the release's marks on every object.
    let settings = workload_config_map(&server, "eu-1", "web", "shop-settings");
    assert_eq!(
        settings["metadata"]["annotations"]["meta.helm.sh/release-name"],
        "shop"
    );
    assert_eq!(
        settings["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "Helm"
    );
    // New values are an upgrade: revision 2 deployed, revision 1 superseded.
    commit(
        &upstream,
        &[("web/chart/values.yaml", "color: green\nimage: httpd\n")],
    );
    eventually_within(Duration::from_secs(120), "the upgrade reached eu-1", || {
        workload_config_map(&server, "eu-1", "web", "shop-settings")["data"]["image"] == "httpd"
    });
    eventually_within(Duration::from_secs(30), "revision 2 recorded", || {
        helm_release(&server, "eu-1", "web", "shop", 2)["info"]["status"] == "deployed"
    });
    let v1 = helm_release(&server, "eu-1", "web", "shop", 1);
    assert_eq!(v1["info"]["status"], "superseded", "{v1}");
    let settings = workload_config_map(&server, "eu-1", "web", "shop-settings");
    assert_eq!(settings["data"]["revision"], "2", "{settings}");
    // A template that fails names its file and line on the chart's bundle; the other bundle
    // of the same commit stays deployed and ready.
    commit(
        &upstream,
        &[("web/chart/values.yaml", "color: green\nimage: \"\"\n")],
    );
    eventually_within(
        Duration::from_secs(120),
        "the chart's bundle failed",
        || first_group(&server, "platform-web")["state"] == "ErrApplied",
    );
    let group = first_group(&server, "platform-web");
    let message = group["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("web/templates/configmap.yaml:9:")
            && message.contains("values: image is required"),
        "{group}"
    );
    assert!(!message.contains("lariat.entry"), "{message}");
    // Values that do not meet the chart's values.schema.json fail as Helm fails them.
    commit(
        &upstream,
        &[("web/chart/values.yaml", "color: green\nimage: 5\n")],
    );
    eventually_within(Duration::from_secs(120), "the schema refused it", || {
        first_group(&server, "platform-web")["message"]
            .as_str()
            .is_some_and(|m| m.contains("at '/image': got number, want string"))
    });
    let message = first_group(&server, "platform-web")["message"].to_string();
    assert!(
        message.contains("values don't meet the specifications of the schema(s)"),
        "{message}"
    );
    let plain = bundle(&server, "platform-plain").unwrap();
    assert_eq!(
        plain["status"]["display"]["readyClusters"], "2/2",
        "{plain}"
    );
}

#[test]
fn a_chart_deploys_over_an_object_only_when_told_and_its_release_history_goes_with_it() {
    let work = tempfile::tempdir().unwrap();
    let server = serving_repositories_in(&work.path().join("repos"));
    in_memory_clusters(&server, &[("eu-1", "eu")]);
    // Someone made the chart's ConfigMap by hand before the chart came.
    let kubeconfig = workload_with_namespace(&server, "eu-1", "web");
    let created = server.kubectl_as(
        &kubeconfig,
        &[
            "create",
            "configmap",
            "shop-settings",
            "-n",
            "web",
            "--from-literal=color=hand-made",
        ],
    );
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let upstream = work.path().join("repos/platform");
    std::fs::create_dir_all(&upstream).unwrap();
    git(&upstream, &["init", "-q", "-b", "main"]);
    let fleet_yaml = "defaultNamespace: web\nhelm:\n  releaseName: shop\n";
    commit(
        &upstream,
        &[
            ("web/fleet.yaml", fleet_yaml),
            ("web/Chart.yaml", CHART_YAML),
            ("web/values.yaml", CHART_VALUES),
            ("web/templates/_helpers.tpl", CHART_HELPERS),
            ("web/templates/configmap.yaml", CHART_CONFIG_MAP),
            ("web/crds/widgets.yaml", WIDGET_CRD),
        ],
    );
    apply_platform_git_repo(
        &server,
        &upstream,
        "  pollingInterval: 5s\n  paths: [web]\n  targets:\n  - clusterSelector: {}\n",
    );
    // As Helm refuses: the object is no release's.
    eventually_within(
        Duration::from_secs(120),
        "the bundle refuses the hand-made object",
        || {
            first_group(&server, "platform-web")["message"]
                .as_str()
                .is_some_and(|m| {
                    m.contains("ConfigMap web/shop-settings exists and is not part of release shop")
                })
        },
    );
    assert_eq!(
        workload_config_map(&server, "eu-1", "web", "shop-settings")["data"]["color"],
        "hand-made"
    );
    commit(
        &upstream,
        &[(
            "web/fleet.yaml",
            &format!("{fleet_yaml}  takeOwnership: true\n"),
        )],
    );
    eventually_within(Duration::from_secs(120), "taken over", || {
        workload_config_map(&server, "eu-1", "web", "shop-settings")["data"]["color"] == "green"
    });
    assert_eq!(
        helm_release(&server, "eu-1", "web", "shop", 1)["info"]["status"],
        "deployed"
    );
    // maxHistory 1 keeps only the newest revision, as `helm upgrade --history-max 1`.
    commit(
        &upstream,
        &[
            (
                "web/fleet.yaml",
                &format!("{fleet_yaml}  takeOwnership: true\n  maxHistory: 1\n"),
            ),
            ("web/values.yaml", "color: teal\nimage: nginx\n"),
        ],
    );
    eventually_within(Duration::from_secs(120), "revision 2 alone", || {
        helm_release(&server, "eu-1", "web", "shop", 2)["info"]["status"] == "deployed"
            && helm_release(&server, "eu-1", "web", "shop", 1).is_null()
    });
    // The chart's crds/ were installed first, and are not the release's.
    let crd = server.kubectl_as(
        &kubeconfig,
        &["get", "crd", "widgets.example.com", "-o", "json"],
    );
    let crd: Value = serde_json::from_slice(&crd.stdout).unwrap_or(Value::Null);
    assert_eq!(crd["spec"]["group"], "example.com", "{crd}");
    assert!(
        crd["metadata"]["annotations"]["meta.helm.sh/release-name"].is_null(),
        "{crd}"
    );
    // The bundle goes: so does the release's history, as `helm uninstall` leaves none.
    server.kubectl_ok(&["delete", "gitrepo", "platform", "-n", "fleet-default"]);
    eventually_within(
        Duration::from_secs(120),
        "the release history is gone",
        || helm_release(&server, "eu-1", "web", "shop", 1).is_null(),
    );
    // Helm never deletes the CRDs of crds/ (their custom resources would go with them).
    let kept = server.kubectl_as(&kubeconfig, &["get", "crd", "widgets.example.com"]);
    assert!(
        kept.status.success(),
        "{}",
        String::from_utf8_lossy(&kept.stderr)
    );
}

#[test]
fn chart_values_layer_as_fleet_layers_them_files_over_inline_and_the_cluster_over_both() {
    let work = tempfile::tempdir().unwrap();
    let server = serving_repositories_in(&work.path().join("repos"));
    in_memory_clusters(&server, &[("eu-1", "eu")]);
    let kubeconfig = workload_with_namespace(&server, "eu-1", "web");
    // Values kept in the cluster itself, as an operator leaves them for Fleet to read.
    for args in [
        vec![
            "create",
            "configmap",
            "shop-values",
            "-n",
            "web",
            "--from-literal=values.yaml=image: from-configmap\n",
        ],
        vec![
            "create",
            "secret",
            "generic",
            "shop-secret",
            "-n",
            "web",
            "--from-literal=extra.yaml=color: from-secret\n",
        ],
    ] {
        let output = server.kubectl_as(&kubeconfig, &args);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let upstream = work.path().join("repos/platform");
    std::fs::create_dir_all(&upstream).unwrap();
    git(&upstream, &["init", "-q", "-b", "main"]);
    commit(
        &upstream,
        &[
            (
                "web/fleet.yaml",
                "defaultNamespace: web\nhelm:\n  releaseName: shop\n  values: {color: inline, image: inline, extra: inline}\n  valuesFiles: [prod.yaml]\n",
            ),
            ("web/prod.yaml", "color: from-file\nimage: from-file\n"),
            ("web/Chart.yaml", CHART_YAML),
            ("web/values.yaml", CHART_VALUES),
            ("web/templates/_helpers.tpl", CHART_HELPERS),
            ("web/templates/configmap.yaml", CHART_CONFIG_MAP),
        ],
    );
    apply_platform_git_repo(
        &server,
        &upstream,
        "  pollingInterval: 5s\n  paths: [web]\n  targets:\n  - clusterSelector: {}\n",
    );
    eventually_within(
        Duration::from_secs(120),
        "deployed from the files' values",
        || {
            workload_config_map(&server, "eu-1", "web", "shop-settings")["data"]["color"]
                == "from-file"
        },
    );
    assert_eq!(
        workload_config_map(&server, "eu-1", "web", "shop-settings")["data"]["image"],
        "from-file"
    );
    // The cluster's values, over the rest: a ConfigMap's, then a Secret's.
    commit(
        &upstream,
        &[(
            "web/fleet.yaml",
            "defaultNamespace: web\nhelm:\n  releaseName: shop\n  values: {color: inline, image: inline}\n  valuesFiles: [prod.yaml]\n  valuesFrom:\n  - configMapKeyRef: {name: shop-values}\n  - secretKeyRef: {name: shop-secret, key: extra.yaml}\n",
        )],
    );
    eventually_within(
        Duration::from_secs(120),
        "deployed from the cluster's values",
        || {
            let data = &workload_config_map(&server, "eu-1", "web", "shop-settings")["data"];
            data["color"] == "from-secret" && data["image"] == "from-configmap"
        },
    );
    // A values source that is not there fails this bundle, naming it.
    commit(
        &upstream,
        &[(
            "web/fleet.yaml",
            "defaultNamespace: web\nhelm:\n  releaseName: shop\n  valuesFrom:\n  - configMapKeyRef: {name: missing-values}\n",
        )],
    );
    eventually_within(
        Duration::from_secs(120),
        "the missing ConfigMap named",
        || {
            first_group(&server, "platform-web")["message"]
                .as_str()
                .is_some_and(|m| m.contains("helm.valuesFrom: ConfigMap web/missing-values"))
        },
    );
}

const HOOK_JOB: &str = r#"apiVersion: batch/v1
kind: Job
metadata:
  name: {{ .Release.Name }}-migrate
  annotations:
    helm.sh/hook: pre-install,pre-upgrade
    helm.sh/hook-weight: "-5"
    helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      tolerations: [{operator: Exists}]
      containers: [{name: migrate, image: {{ .Values.migrateImage | default "busybox:1" }}}]
"#;
const HOOK_CONFIG_MAP: &str = r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-post
  annotations:
    helm.sh/hook: post-install,post-upgrade
data:
  revision: "{{ .Release.Revision }}"
"#;
const DELETE_HOOKS: &str = r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-goodbye
  annotations:
    helm.sh/hook: pre-delete
data:
  revision: "{{ .Release.Revision }}"
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-gone
  annotations:
    helm.sh/hook: post-delete
    helm.sh/hook-weight: "1"
"#;

#[test]
fn chart_hooks_run_around_the_release_and_a_failing_one_stops_the_upgrade() {
    let work = tempfile::tempdir().unwrap();
    let server = serving_repositories_in(&work.path().join("repos"));
    in_memory_clusters_whose_pods(
        &server,
        &[("eu-1", "eu")],
        "        pods:\n          crashLoops: [\"*:crash\"]\n",
    );
    let upstream = work.path().join("repos/platform");
    std::fs::create_dir_all(&upstream).unwrap();
    git(&upstream, &["init", "-q", "-b", "main"]);
    commit(
        &upstream,
        &[
            (
                "web/fleet.yaml",
                "defaultNamespace: web\nhelm:\n  releaseName: shop\n",
            ),
            ("web/Chart.yaml", CHART_YAML),
            ("web/values.yaml", CHART_VALUES),
            ("web/templates/_helpers.tpl", CHART_HELPERS),
            ("web/templates/configmap.yaml", CHART_CONFIG_MAP),
            ("web/templates/pre-job.yaml", HOOK_JOB),
            ("web/templates/post-configmap.yaml", HOOK_CONFIG_MAP),
            ("web/templates/delete-hooks.yaml", DELETE_HOOKS),
        ],
    );
    apply_platform_git_repo(
        &server,
        &upstream,
        "  pollingInterval: 5s\n  paths: [web]\n  targets:\n  - clusterSelector: {}\n",
    );
    eventually_within(Duration::from_secs(120), "installed with its hooks", || {
        workload_config_map(&server, "eu-1", "web", "shop-post")["data"]["revision"] == "1"
    });
    let kubeconfig = server.workload_kubeconfig_in("fleet-default", "eu-1");
    // The pre-install Job ran before the release's objects and, succeeded, was deleted.
    let job = server.kubectl_as(&kubeconfig, &["get", "job", "shop-migrate", "-n", "web"]);
    assert!(
        !job.status.success(),
        "the succeeded hook Job is still there"
    );
    let v1 = helm_release(&server, "eu-1", "web", "shop", 1);
    let hooks = v1["hooks"].as_array().cloned().unwrap_or_default();
    let summary: Vec<(String, String)> = hooks
        .iter()
        .map(|h| {
            (
                h["name"].as_str().unwrap_or_default().to_string(),
                h["last_run"]["phase"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("shop-migrate".to_string(), "Succeeded".to_string()),
            ("shop-post".to_string(), "Succeeded".to_string()),
            ("shop-goodbye".to_string(), String::new()),
            ("shop-gone".to_string(), String::new()),
        ],
        "{v1}"
    );
    // Hooks are not the release's objects.
    let post = workload_config_map(&server, "eu-1", "web", "shop-post");
    assert!(
        post["metadata"]["annotations"]["meta.helm.sh/release-name"].is_null(),
        "{post}"
    );
    // An upgrade whose pre-upgrade hook fails stops there: the release's objects stay as they were.
    commit(
        &upstream,
        &[(
            "web/values.yaml",
            "color: purple\nimage: nginx\nmigrateImage: busybox:crash\n",
        )],
    );
    eventually_within(Duration::from_secs(120), "the failing hook named", || {
        first_group(&server, "platform-web")["message"]
            .as_str()
            .is_some_and(|m| {
                m.contains("pre-upgrade hook Job shop-migrate (web/templates/pre-job.yaml) failed")
            })
    });
    assert_eq!(
        workload_config_map(&server, "eu-1", "web", "shop-settings")["data"]["color"],
        "green"
    );
    assert!(helm_release(&server, "eu-1", "web", "shop", 2).is_null());
    // The bundle removed: its release's pre-delete hook runs while the release's objects are
    // there, the objects go, then the post-delete hook, then the release's history.
    server.kubectl_ok(&["delete", "gitrepo", "platform", "-n", "fleet-default"]);
    eventually_within(Duration::from_secs(120), "the release uninstalled", || {
        workload_config_map(&server, "eu-1", "web", "shop-gone")["metadata"]["name"] == "shop-gone"
            && helm_release(&server, "eu-1", "web", "shop", 1).is_null()
    });
    let goodbye = workload_config_map(&server, "eu-1", "web", "shop-goodbye");
    assert_eq!(goodbye["data"]["revision"], "1", "{goodbye}");
    let settings = server.kubectl_as(
        &kubeconfig,
        &["get", "configmap", "shop-settings", "-n", "web"],
    );
    assert!(
        !settings.status.success(),
        "the release's objects are still there"
    );
}

const KUSTOMIZE_BASE: &str = "resources:\n- namespace.yaml\n- account.yaml\nconfigMapGenerator:\n- name: settings\n  literals:\n  - color=blue\n";
const KUSTOMIZE_ACCOUNT: &str = "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: runner\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: runner\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: view\nsubjects:\n- kind: ServiceAccount\n  name: runner\n";

/// The objects of `resource` in namespace `namespace` of in-memory cluster `cluster`.
fn workload_items(
    server: &TestServer,
    cluster: &str,
    resource: &str,
    namespace: &str,
) -> Vec<Value> {
    let kubeconfig = server.workload_kubeconfig_in("fleet-default", cluster);
    let output = server.kubectl_as(
        &kubeconfig,
        &["get", resource, "-n", namespace, "-o", "json"],
    );
    let list: Value = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
    list["items"].as_array().cloned().unwrap_or_default()
}

#[test]
fn a_kustomization_builds_per_target_overlay_and_a_broken_overlay_fails_only_its_clusters() {
    let work = tempfile::tempdir().unwrap();
    let server = serving_repositories_in(&work.path().join("repos"));
    in_memory_clusters(&server, &[("eu-1", "eu"), ("us-1", "us")]);
    let upstream = work.path().join("repos/platform");
    std::fs::create_dir_all(&upstream).unwrap();
    git(&upstream, &["init", "-q", "-b", "main"]);
    // Fleet's usual layout: a base, one overlay per region, fleet.yaml choosing the overlay
    // by the cluster's labels.
    commit(
        &upstream,
        &[
            ("plain/settings.yaml", CONFIG_MAP),
            (
                "shop/fleet.yaml",
                "kustomize:\n  dir: overlays/eu\ntargetCustomizations:\n- name: us\n  clusterSelector: {matchLabels: {region: us}}\n  kustomize:\n    dir: overlays/us\n",
            ),
            ("shop/base/kustomization.yaml", KUSTOMIZE_BASE),
            (
                "shop/base/namespace.yaml",
                "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: placeholder\n",
            ),
            ("shop/base/account.yaml", KUSTOMIZE_ACCOUNT),
            (
                "shop/overlays/eu/kustomization.yaml",
                "resources:\n- ../../base\nnamespace: shop\nnamePrefix: eu-\n",
            ),
            (
                "shop/overlays/us/kustomization.yaml",
                "resources:\n- ../../base\nnamespace: shop\nnamePrefix: us-\ncommonLabels:\n  region: us\nconfigMapGenerator:\n- name: settings\n  behavior: merge\n  files:\n  - motd.txt\n  literals:\n  - color=red\n",
            ),
            ("shop/overlays/us/motd.txt", "welcome <west>\n"),
        ],
    );
    apply_platform_git_repo(
        &server,
        &upstream,
        "  pollingInterval: 5s\n  paths: [plain, shop]\n  targets:\n  - clusterSelector: {}\n",
    );
    eventually_within(
        Duration::from_secs(120),
        "both bundles ready on both clusters",
        || git_repo(&server, "platform")["status"]["display"]["readyBundleDeployments"] == "4/4",
    );
    // Each cluster has its overlay's build: the prefix, the namespace, the generated
    // ConfigMap with kustomize's hash, and the RoleBinding naming the renamed account.
    for (cluster, color) in [("eu-1", "blue"), ("us-1", "red")] {
        let maps = workload_items(&server, cluster, "configmaps", "shop");
        let settings = maps
            .iter()
            .find(|m| {
                m["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with(&format!("{}-settings-", &cluster[..2])))
            })
            .unwrap_or_else(|| panic!("{cluster}: {maps:?}"));
        assert_eq!(settings["data"]["color"], color, "{settings}");
        let bindings = workload_items(&server, cluster, "rolebindings", "shop");
        let subject = &bindings[0]["subjects"][0];
        assert_eq!(
            subject["name"],
            format!("{}-runner", &cluster[..2]),
            "{bindings:?}"
        );
        assert_eq!(subject["namespace"], "shop", "{bindings:?}");
    }
    let us = workload_items(&server, "us-1", "configmaps", "shop");
    let settings = us.iter().find(|m| m["data"]["color"] == "red").unwrap();
    assert_eq!(
        settings["data"]["motd.txt"], "welcome <west>\n",
        "{settings}"
    );
    assert_eq!(settings["metadata"]["labels"]["region"], "us", "{settings}");
    // An overlay whose patch names an object the build does not have fails its clusters
    // alone, naming the file; the base's other overlay and the plain bundle stay ready.
    commit(
        &upstream,
        &[(
            "shop/overlays/us/kustomization.yaml",
            "resources:\n- ../../base\nnamespace: shop\npatches:\n- patch: |\n    apiVersion: v1\n    kind: ConfigMap\n    metadata:\n      name: nosuch\n    data:\n      x: y\n",
        )],
    );
    eventually_within(
        Duration::from_secs(120),
        "the us cluster's build failed",
        || first_group(&server, "platform-shop")["clusters"] == serde_json::json!(["us-1"]),
    );
    let group = first_group(&server, "platform-shop");
    let message = group["message"].as_str().unwrap_or_default();
    // Files are named within the bundle, as in Fleet.
    assert!(
        message.starts_with("kustomize: overlays/us/kustomization.yaml: ")
            && message.contains("nosuch"),
        "{group}"
    );
    assert_eq!(group["state"], "InvalidCustomization", "{group}");
    let plain = bundle(&server, "platform-plain").unwrap();
    assert_eq!(
        plain["status"]["display"]["readyClusters"], "2/2",
        "{plain}"
    );
    let eu = workload_items(&server, "eu-1", "configmaps", "shop");
    assert!(eu.iter().any(|m| m["data"]["color"] == "blue"), "{eu:?}");
    // The us cluster keeps running its last good build meanwhile.
    let us = workload_items(&server, "us-1", "configmaps", "shop");
    assert!(us.iter().any(|m| m["data"]["color"] == "red"), "{us:?}");
}

/// A Helm repository served over https by Python's http.server (a real server, not lariat's
/// code), answering only with the `charts`/`s3cret` password: `index.yaml` and the archives
/// in `dir`. Returns the server (killed on drop), its URL and its authority's PEM.
struct HelmRepository {
    child: std::process::Child,
    url: String,
    ca: String,
}

impl Drop for HelmRepository {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const HELM_REPOSITORY_SERVER: &str = r#"
import base64, http.server, ssl, sys
class Handler(http.server.SimpleHTTPRequestHandler):
    def do_GET(self):
        expected = "Basic " + base64.b64encode(b"charts:s3cret").decode()
        if self.headers.get("Authorization") != expected:
            self.send_response(401); self.end_headers(); return
        super().do_GET()
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: Handler(*a, directory=sys.argv[1]))
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(sys.argv[2], sys.argv[3])
server.socket = context.wrap_socket(server.socket, server_side=True)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

/// Packages chart `web` at `version` into `dir` with `tar`, as `helm package` lays it out.
fn package_web_chart(dir: &Path, version: &str) -> String {
    let build = dir.join(format!("build-{version}/web"));
    std::fs::create_dir_all(build.join("templates")).unwrap();
    std::fs::write(
        build.join("Chart.yaml"),
        format!("apiVersion: v2\nname: web\nversion: {version}\nappVersion: \"{version}\"\n"),
    )
    .unwrap();
    std::fs::write(build.join("values.yaml"), "color: blue\n").unwrap();
    std::fs::write(
        build.join("templates/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-settings\ndata:\n  color: {{ .Values.color }}\n  version: {{ .Chart.Version | quote }}\n",
    )
    .unwrap();
    let archive = format!("web-{version}.tgz");
    let status = Command::new("tar")
        .args(["czf", &archive, "-C"])
        .arg(dir.join(format!("build-{version}")))
        .arg("web")
        .current_dir(dir)
        .status()
        .unwrap();
    assert!(status.success());
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(std::fs::read(dir.join(&archive)).unwrap());
    format!("  - version: {version}\n    urls: [{archive}]\n    digest: {digest:x}\n")
}

fn helm_repository(dir: &Path) -> HelmRepository {
    std::fs::create_dir_all(dir).unwrap();
    let mut index = String::from("apiVersion: v1\nentries:\n  web:\n");
    for version in ["1.1.0", "1.2.0", "1.2.3"] {
        index.push_str(&package_web_chart(dir, version));
    }
    std::fs::write(dir.join("index.yaml"), index).unwrap();
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
    let issuer = rcgen::Issuer::from_ca_cert_pem(&ca_pem, ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let tls = dir.with_file_name("tls");
    std::fs::create_dir_all(&tls).unwrap();
    std::fs::write(tls.join("tls.crt"), leaf.pem()).unwrap();
    std::fs::write(tls.join("tls.key"), key.serialize_pem()).unwrap();
    let mut child = Command::new("python3")
        .args(["-c", HELM_REPOSITORY_SERVER])
        .arg(dir)
        .arg(tls.join("tls.crt"))
        .arg(tls.join("tls.key"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run python3");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    HelmRepository {
        child,
        url: format!("https://127.0.0.1:{}", line.trim()),
        ca: ca_pem,
    }
}

#[test]
fn a_chart_from_a_helm_repository_is_fetched_with_the_git_repos_credential_and_deployed() {
    use base64::Engine as _;
    let work = tempfile::tempdir().unwrap();
    let charts = helm_repository(&work.path().join("charts"));
    let repos = work.path().join("repos");
    std::fs::create_dir_all(&repos).unwrap();
    // The repository listens on loopback, which the server reaches only when told.
    let server = TestServer::start_with(&[
        "--fleet-file-repos",
        repos.to_str().unwrap(),
        "--fleet-allow-networks",
        "127.0.0.0/8",
    ]);
    in_memory_clusters(&server, &[("eu-1", "eu")]);
    server.apply_ok(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: helm-repo\n  namespace: fleet-default\ntype: kubernetes.io/basic-auth\nstringData:\n  username: charts\n  password: s3cret\n",
    );
    let upstream = repos.join("platform");
    std::fs::create_dir_all(&upstream).unwrap();
    git(&upstream, &["init", "-q", "-b", "main"]);
    commit(
        &upstream,
        &[
            ("plain/settings.yaml", CONFIG_MAP),
            (
                "web/fleet.yaml",
                &format!(
                    "defaultNamespace: web\nhelm:\n  repo: {}\n  chart: web\n  version: \"~1.2.0\"\n  releaseName: shop\n  values:\n    color: red\n",
                    charts.url
                ),
            ),
        ],
    );
    let ca = base64::engine::general_purpose::STANDARD.encode(&charts.ca);
    apply_platform_git_repo(
        &server,
        &upstream,
        &format!(
            "  pollingInterval: 5s\n  paths: [plain, web]\n  helmSecretName: helm-repo\n  helmRepoURLRegex: 'https://127\\.0\\.0\\.1:'\n  caBundle: {ca}\n  targets:\n  - clusterSelector: {{}}\n"
        ),
    );
    eventually_within(Duration::from_secs(120), "both bundles ready", || {
        git_repo(&server, "platform")["status"]["display"]["readyBundleDeployments"] == "2/2"
    });
    // The newest version the range allows, rendered with the bundle's values.
    let settings = workload_config_map(&server, "eu-1", "web", "shop-settings");
    assert_eq!(settings["data"]["color"], "red", "{settings}");
    assert_eq!(settings["data"]["version"], "1.2.3", "{settings}");
    let release = helm_release(&server, "eu-1", "web", "shop", 1);
    assert_eq!(
        release["chart"]["metadata"]["version"], "1.2.3",
        "{release}"
    );
    // A version the repository does not have fails that bundle alone, saying why; its
    // cluster keeps running what it had, and the other bundle of the commit is untouched.
    commit(
        &upstream,
        &[(
            "web/fleet.yaml",
            &format!(
                "defaultNamespace: web\nhelm:\n  repo: {}\n  chart: web\n  version: \">=2\"\n  releaseName: shop\n",
                charts.url
            ),
        )],
    );
    eventually_within(
        Duration::from_secs(120),
        "the chart's bundle says its chart cannot be fetched",
        || first_group(&server, "platform-web")["state"] == "InvalidCustomization",
    );
    let group = first_group(&server, "platform-web");
    let message = group["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("web/fleet.yaml: chart \"web\" from https://127.0.0.1:")
            && message.contains("no version of \"web\" that meets \">=2\""),
        "{group}"
    );
    let settings = workload_config_map(&server, "eu-1", "web", "shop-settings");
    assert_eq!(settings["data"]["version"], "1.2.3", "{settings}");
    let plain = bundle(&server, "platform-plain").unwrap();
    assert_eq!(
        plain["status"]["display"]["readyClusters"], "1/1",
        "{plain}"
    );
}

/// Four widely used charts (lariat-helm's test data: ingress-nginx, cert-manager, Bitnami's
/// nginx, kube-state-metrics), each rendered by `lariat helm template` with its defaults and
/// with one other values file, and every object accepted by a simulated cluster's
/// `kubectl apply --dry-run=server`, as a real cluster would be asked.
#[test]
fn widely_used_charts_render_to_objects_a_cluster_accepts() {
    let server = TestServer::start();
    in_memory_clusters(&server, &[("charts-1", "eu")]);
    let kubeconfig = workload_with_namespace(&server, "charts-1", "apps");
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../helm/tests/data");
    for chart in [
        "ingress-nginx",
        "cert-manager",
        "nginx",
        "kube-state-metrics",
    ] {
        let dir = data.join("charts").join(chart);
        let custom = data.join("chart-values").join(format!("{chart}.yaml"));
        for values in [None, Some(custom.to_str().unwrap())] {
            let mut args = vec![
                "helm",
                "template",
                dir.to_str().unwrap(),
                "--name",
                "it",
                "--namespace",
                "apps",
                "--kube-version",
                "1.30.2",
            ];
            args.extend(values.map(|file| ["--values", file]).into_iter().flatten());
            let rendered = Command::new(env!("CARGO_BIN_EXE_lariat"))
                .args(&args)
                .output()
                .unwrap();
            let manifests = String::from_utf8_lossy(&rendered.stdout).to_string();
            assert!(
                rendered.status.success(),
                "{chart} {values:?}: {}",
                String::from_utf8_lossy(&rendered.stderr)
            );
            let objects = manifests.matches("\nkind: ").count();
            let kubeconfig = kubeconfig.to_str().unwrap();
            let applied = server.kubectl_stdin(
                &[
                    "--kubeconfig",
                    kubeconfig,
                    "apply",
                    "--dry-run=server",
                    "-f",
                    "-",
                ],
                &manifests,
            );
            let out = String::from_utf8_lossy(&applied.stdout);
            assert!(
                applied.status.success(),
                "{chart} {values:?}: {}\n{out}",
                String::from_utf8_lossy(&applied.stderr)
            );
            assert_eq!(
                out.matches("(server dry run)").count(),
                objects,
                "{chart} {values:?}: {out}"
            );
        }
    }
}

const SELECTED_DEPLOYMENT: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}
spec:
  replicas: 1
  selector:
    matchLabels: {app: {{ .Values.app }}}
  template:
    metadata:
      labels: {app: {{ .Values.app }}}
    spec:
      tolerations: [{operator: Exists}]
      containers: [{name: web, image: nginx}]
"#;

/// A chart upgrade that changes an immutable field (a Deployment's selector) is refused by
/// the cluster, as a real one refuses it, and named; with `helm.force` the object is replaced.
#[test]
fn an_upgrade_that_changes_an_immutable_field_needs_force_and_force_replaces() {
    let work = tempfile::tempdir().unwrap();
    let server = serving_repositories_in(&work.path().join("repos"));
    in_memory_clusters(&server, &[("eu-1", "eu")]);
    let upstream = work.path().join("repos/platform");
    std::fs::create_dir_all(&upstream).unwrap();
    git(&upstream, &["init", "-q", "-b", "main"]);
    let fleet_yaml = "defaultNamespace: web\nhelm:\n  releaseName: shop\n";
    commit(
        &upstream,
        &[
            ("web/fleet.yaml", fleet_yaml),
            ("web/Chart.yaml", CHART_YAML),
            ("web/values.yaml", "app: one\n"),
            ("web/templates/deployment.yaml", SELECTED_DEPLOYMENT),
        ],
    );
    apply_platform_git_repo(
        &server,
        &upstream,
        "  pollingInterval: 5s\n  paths: [web]\n  targets:\n  - clusterSelector: {}\n",
    );
    let kubeconfig = workload_with_namespace(&server, "eu-1", "scratch");
    let selector = || {
        let output = server.kubectl_as(
            &kubeconfig,
            &[
                "get",
                "deployment",
                "shop",
                "-n",
                "web",
                "-o",
                "jsonpath={.spec.selector.matchLabels.app}",
            ],
        );
        String::from_utf8_lossy(&output.stdout).to_string()
    };
    eventually_within(Duration::from_secs(120), "installed", || {
        selector() == "one"
    });
    commit(&upstream, &[("web/values.yaml", "app: two\n")]);
    eventually_within(
        Duration::from_secs(120),
        "the immutable selector named",
        || {
            first_group(&server, "platform-web")["message"]
                .as_str()
                .is_some_and(|m| m.contains("spec.selector") && m.contains("field is immutable"))
        },
    );
    assert_eq!(selector(), "one");
    commit(
        &upstream,
        &[("web/fleet.yaml", &format!("{fleet_yaml}  force: true\n"))],
    );
    eventually_within(Duration::from_secs(120), "replaced with force", || {
        selector() == "two"
            && bundle(&server, "platform-web")
                .is_some_and(|b| b["status"]["display"]["readyClusters"] == "1/1")
    });
}

const IMAGE_DEPLOYMENT: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}
spec:
  replicas: 1
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      tolerations: [{operator: Exists}]
      containers: [{name: web, image: {{ .Values.image }}}]
"#;

/// The status and description of each revision of Helm release `release`, from 1 to `last`.
fn release_history(
    server: &TestServer,
    cluster: &str,
    namespace: &str,
    release: &str,
    last: u32,
) -> Vec<(String, String)> {
    (1..=last)
        .map(|version| {
            let r = helm_release(server, cluster, namespace, release, version);
            let said = |field: &str| r["info"][field].as_str().unwrap_or_default().to_string();
            (said("status"), said("description"))
        })
        .collect()
}

/// Writes revision `version` of Helm release `release` as Helm's Secret driver would, status
/// `deployed`, with `manifest`, as someone other than the agent could.
fn plant_release(
    server: &TestServer,
    cluster: &str,
    namespace: &str,
    release: &str,
    version: u32,
    manifest: &str,
) {
    use base64::Engine as _;
    use std::io::Write as _;
    let body = serde_json::json!({"name": release, "namespace": namespace, "version": version,
        "info": {"status": "deployed", "description": "planted"}, "manifest": manifest,
        "config": {}, "chart": {"metadata": {"name": "web", "version": "0.1.0"}}});
    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gzip.write_all(body.to_string().as_bytes()).unwrap();
    let engine = base64::engine::general_purpose::STANDARD;
    let inner = engine.encode(gzip.finish().unwrap());
    let secret = serde_json::json!({"apiVersion": "v1", "kind": "Secret", "type": "helm.sh/release.v1",
        "metadata": {"name": format!("sh.helm.release.v1.{release}.v{version}"), "namespace": namespace,
            "labels": {"owner": "helm", "name": release, "status": "deployed", "version": version.to_string()}},
        "data": {"release": engine.encode(inner)}});
    let kubeconfig = server.workload_kubeconfig_in("fleet-default", cluster);
    let file = kubeconfig.with_file_name("planted-release.json");
    std::fs::write(&file, secret.to_string()).unwrap();
    let applied = server.kubectl_as(&kubeconfig, &["apply", "-f", file.to_str().unwrap()]);
    assert!(applied.status.success(), "the planted release: {applied:?}");
}

/// `helm.atomic`, as Helm's `--atomic`: an upgrade whose objects are not ready within
/// `timeoutSeconds` is recorded as failed and rolled back to the revision before it; an
/// install that fails so is uninstalled. Neither is tried again until the bundle changes.
#[test]
fn atomic_rolls_a_failed_upgrade_back_and_uninstalls_a_failed_install() {
    let work = tempfile::tempdir().unwrap();
    let server = serving_repositories_in(&work.path().join("repos"));
    in_memory_clusters_whose_pods(
        &server,
        &[("eu-1", "eu")],
        "        pods:\n          crashLoops: [\"*:crash\"]\n",
    );
    let upstream = work.path().join("repos/platform");
    std::fs::create_dir_all(&upstream).unwrap();
    git(&upstream, &["init", "-q", "-b", "main"]);
    let fleet_yaml = |release: &str| {
        format!(
            "defaultNamespace: web\nhelm:\n  releaseName: {release}\n  atomic: true\n  timeoutSeconds: 8\n  maxHistory: 5\n"
        )
    };
    commit(
        &upstream,
        &[
            ("web/fleet.yaml", &fleet_yaml("shop")),
            ("web/Chart.yaml", CHART_YAML),
            ("web/values.yaml", CHART_VALUES),
            ("web/templates/_helpers.tpl", CHART_HELPERS),
            ("web/templates/configmap.yaml", CHART_CONFIG_MAP),
            ("web/templates/deployment.yaml", IMAGE_DEPLOYMENT),
        ],
    );
    apply_platform_git_repo(
        &server,
        &upstream,
        "  pollingInterval: 5s\n  paths: [web]\n  targets:\n  - clusterSelector: {}\n",
    );
    eventually_within(Duration::from_secs(120), "installed and ready", || {
        bundle(&server, "platform-web")
            .is_some_and(|b| b["status"]["display"]["readyClusters"] == "1/1")
    });
    // Anyone who may write Secrets in the release's namespace can add a "deployed" revision;
    // a rollback must not apply what it says.
    plant_release(
        &server,
        "eu-1",
        "web",
        "shop",
        2,
        "---\n# Source: web/templates/x.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: planted\n  namespace: web\n",
    );
    // An upgrade whose Pods crash: not ready in 8 s, so undone.
    commit(
        &upstream,
        &[("web/values.yaml", "color: purple\nimage: busybox:crash\n")],
    );
    eventually_within(Duration::from_secs(120), "the upgrade rolled back", || {
        first_group(&server, "platform-web")["message"]
            .as_str()
            .is_some_and(|m| {
                m.contains("release shop failed, and has been rolled back due to rollback-on-failure being set")
                    && m.contains(
                        "timed out after 8s waiting for the release's objects to be ready",
                    )
                    && m.contains("Deployment web/shop is not ready")
            })
    });
    let settings = workload_config_map(&server, "eu-1", "web", "shop-settings");
    assert_eq!(settings["data"]["color"], "green", "{settings}");
    let kubeconfig = server.workload_kubeconfig_in("fleet-default", "eu-1");
    let image = server.kubectl_as(
        &kubeconfig,
        &[
            "get",
            "deployment",
            "shop",
            "-n",
            "web",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image}",
        ],
    );
    assert_eq!(String::from_utf8_lossy(&image.stdout), "nginx");
    assert!(workload_config_map(&server, "eu-1", "web", "planted").is_null());
    let history = release_history(&server, "eu-1", "web", "shop", 4);
    assert_eq!(history[0], ("superseded".into(), "Install complete".into()));
    assert_eq!(history[1], ("superseded".into(), "planted".into()));
    assert_eq!(history[2].0, "failed");
    assert!(
        history[2]
            .1
            .starts_with("Upgrade \"shop\" failed: timed out after 8s"),
        "{history:?}"
    );
    assert_eq!(history[3], ("deployed".into(), "Rollback to 1".into()));
    assert_eq!(
        helm_release(&server, "eu-1", "web", "shop", 4)["config"]["color"],
        Value::Null,
        "the rollback's values are revision 1's"
    );
    // Not tried again while the bundle stays as it is.
    std::thread::sleep(Duration::from_secs(12));
    assert!(helm_release(&server, "eu-1", "web", "shop", 5).is_null());
    // An install that fails so is uninstalled: no objects, no history.
    commit(
        &upstream,
        &[
            ("broken/fleet.yaml", &fleet_yaml("cart")),
            ("broken/Chart.yaml", CHART_YAML),
            ("broken/values.yaml", "image: busybox:crash\n"),
            ("broken/templates/_helpers.tpl", CHART_HELPERS),
            ("broken/templates/configmap.yaml", CHART_CONFIG_MAP),
            ("broken/templates/deployment.yaml", IMAGE_DEPLOYMENT),
        ],
    );
    apply_platform_git_repo(
        &server,
        &upstream,
        "  pollingInterval: 5s\n  paths: [web, broken]\n  targets:\n  - clusterSelector: {}\n",
    );
    eventually_within(Duration::from_secs(120), "the install undone", || {
        first_group(&server, "platform-broken")["message"]
            .as_str()
            .is_some_and(|m| {
                m.contains("release cart failed, and has been uninstalled due to rollback-on-failure being set")
            })
    });
    assert!(workload_config_map(&server, "eu-1", "web", "cart-settings").is_null());
    let deployment = server.kubectl_as(&kubeconfig, &["get", "deployment", "cart", "-n", "web"]);
    assert!(
        !deployment.status.success(),
        "the failed install's Deployment is still there"
    );
    assert!(helm_release(&server, "eu-1", "web", "cart", 1).is_null());
    // A new commit is tried: this one is ready in time.
    commit(&upstream, &[("broken/values.yaml", "image: nginx\n")]);
    eventually_within(Duration::from_secs(120), "the fixed install ready", || {
        bundle(&server, "platform-broken")
            .is_some_and(|b| b["status"]["display"]["readyClusters"] == "1/1")
    });
    assert_eq!(
        release_history(&server, "eu-1", "web", "cart", 1),
        [("deployed".to_string(), "Install complete".to_string())]
    );
}

/// A chart bundle with a kustomization, as Fleet post-renders it: the chart's output is the
/// kustomization's first resource, per target's `kustomize.dir`; a target without one gets
/// the chart as rendered. The release records what was applied.
#[test]
fn kustomize_builds_over_a_charts_output_per_target() {
    let work = tempfile::tempdir().unwrap();
    let server = serving_repositories_in(&work.path().join("repos"));
    in_memory_clusters(&server, &[("eu-1", "eu"), ("us-1", "us")]);
    let upstream = work.path().join("repos/platform");
    std::fs::create_dir_all(&upstream).unwrap();
    git(&upstream, &["init", "-q", "-b", "main"]);
    commit(
        &upstream,
        &[
            (
                "web/fleet.yaml",
                "defaultNamespace: web\nhelm:\n  releaseName: shop\ntargetCustomizations:\n- name: eu\n  clusterSelector: {matchLabels: {region: eu}}\n  kustomize:\n    dir: overlays/eu\n",
            ),
            ("web/Chart.yaml", CHART_YAML),
            ("web/values.yaml", CHART_VALUES),
            ("web/templates/_helpers.tpl", CHART_HELPERS),
            ("web/templates/configmap.yaml", CHART_CONFIG_MAP),
            (
                "web/overlays/eu/kustomization.yaml",
                "labels:\n- pairs: {tier: frontend}\npatches:\n- target: {kind: ConfigMap, name: shop-settings}\n  patch: |-\n    - op: replace\n      path: /data/color\n      value: blue\nconfigMapGenerator:\n- name: extra\n  literals: [region=eu]\n",
            ),
        ],
    );
    apply_platform_git_repo(
        &server,
        &upstream,
        "  pollingInterval: 5s\n  paths: [web]\n  targets:\n  - clusterSelector: {}\n",
    );
    eventually_within(Duration::from_secs(120), "deployed to both", || {
        bundle(&server, "platform-web")
            .is_some_and(|b| b["status"]["display"]["readyClusters"] == "2/2")
    });
    let eu = workload_config_map(&server, "eu-1", "web", "shop-settings");
    assert_eq!(eu["data"]["color"], "blue", "{eu}");
    assert_eq!(eu["metadata"]["labels"]["tier"], "frontend", "{eu}");
    assert_eq!(
        eu["metadata"]["annotations"]["meta.helm.sh/release-name"], "shop",
        "{eu}"
    );
    let generated = workload_items(&server, "eu-1", "configmaps", "web");
    assert!(
        generated.iter().any(|cm| cm["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("extra-") && cm["data"]["region"] == "eu")),
        "{generated:?}"
    );
    let us = workload_config_map(&server, "us-1", "web", "shop-settings");
    assert_eq!(us["data"]["color"], "green", "{us}");
    assert!(us["metadata"]["labels"]["tier"].is_null(), "{us}");
    let manifest = helm_release(&server, "eu-1", "web", "shop", 1)["manifest"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        manifest.contains("tier: frontend") && manifest.contains("color: blue"),
        "{manifest}"
    );
}
