//! The README's in-memory walkthrough, run as written: the code block is read from README.md
//! and each line is run by bash against a real server, with `lariat` and `kubectl` on PATH.
//! If the README and the product drift apart, this fails.

mod common;

use std::path::Path;
use std::process::Command;

use common::{TestServer, eventually, path_with_lariat, readme_block as block};

/// bash in `dir`, with the built `lariat` first on PATH, `home` as HOME and, when given,
/// `kubeconfig` as KUBECONFIG (else none).
fn bash(dir: &Path, home: &Path, kubeconfig: Option<&Path>) -> Command {
    let mut command = Command::new("bash");
    command
        .current_dir(dir)
        .env("PATH", path_with_lariat())
        .env("HOME", home);
    match kubeconfig {
        Some(kubeconfig) => command.env("KUBECONFIG", kubeconfig),
        None => command.env_remove("KUBECONFIG"),
    };
    command
}

/// Runs `script` with `command`; it must succeed. What it printed.
fn run_ok(mut command: Command, script: &str) -> String {
    let output = command.args(["-c", script]).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "the script failed:\n{script}\n{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// A README block as one bash script that stops at the first failure and stops what it put
/// in the background: a line ending in a `-w` watch runs for five seconds, and a command the
/// README shows refused (the next line is a `# Error from server (Forbidden)` comment) must be
/// refused so.
fn as_script(lines: impl IntoIterator<Item = impl AsRef<str>>) -> String {
    let mut script = String::from("set -euo pipefail\ntrap 'jobs -p | xargs -r kill' EXIT\n");
    let lines: Vec<String> = lines.into_iter().map(|l| l.as_ref().to_string()).collect();
    for (i, line) in lines.iter().enumerate() {
        let line = line.as_str();
        let command = line.split("  #").next().unwrap_or_default().trim_end();
        let refused = lines
            .get(i + 1)
            .and_then(|next| next.strip_prefix("# Error from server ("))
            .and_then(|rest| rest.split(')').next());
        // What a cluster's agent applies takes it a moment: a command the README says is
        // allowed downstream is given ten seconds to become so.
        let allowed_downstream = line.contains("# allowed, by");
        if allowed_downstream {
            script.push_str(&format!(
                "for _ in $(seq 50); do {command} && break; sleep 0.2; done\n{command}\n"
            ));
        } else if let Some(reason) = refused {
            script.push_str(&format!(
                "{{ {command} 2>&1 || true; }} | grep -q 'Error from server ({reason})'\n"
            ));
        } else if command.ends_with(" -w") {
            script.push_str(&format!("timeout 5 {command} || [ $? = 124 ]\n"));
        } else {
            script.push_str(line);
            script.push('\n');
        }
    }
    script
}

/// The commands of the walkthrough under `heading`, with continuation lines joined.
fn walkthrough(heading: &str) -> Vec<String> {
    let block = block(heading);
    let mut commands = vec![];
    let mut pending = String::new();
    for line in block.lines() {
        pending.push_str(line.trim_end_matches('\\'));
        if !line.ends_with('\\') {
            commands.push(std::mem::take(&mut pending));
        }
    }
    commands.retain(|c| !c.trim().is_empty());
    commands
}

#[test]
fn the_in_memory_walkthrough_runs_as_written() {
    let server = TestServer::start();
    let work = tempfile::tempdir().unwrap();
    let path = path_with_lariat();
    let commands = walkthrough("## Walkthrough: a whole cluster on the in-memory provider");
    assert!(commands.len() >= 10, "{commands:?}");
    for command in commands {
        let output = Command::new("bash")
            .args(["-o", "pipefail", "-c", &command])
            .current_dir(work.path())
            .env("PATH", &path)
            .env("KUBECONFIG", server.kubeconfig())
            .env("HOME", server.home.path())
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "README command failed: {command}\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        if command.contains("get nodes") {
            let nodes = String::from_utf8_lossy(&output.stdout);
            let listed = nodes.lines().count().saturating_sub(1);
            assert!(listed >= 3, "{nodes}");
            assert_eq!(nodes.matches(" Ready ").count(), listed, "{nodes}");
        }
    }
}

/// The Cluster API seed walkthrough, run as one bash script (it has a here-document) from a
/// directory whose `lariat-data` is the server's. Its closing `kubectl get clusters -w`
/// watches forever, so the script stops it after five seconds; everything else must succeed.
#[test]
fn the_cluster_api_seed_walkthrough_runs_as_written() {
    let server = TestServer::start();
    let work = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(server.data_dir(), work.path().join("lariat-data")).unwrap();
    let script = as_script(block("## Walkthrough: the Cluster API seed, with kubectl").lines());
    assert!(
        script.contains("timeout 5 kubectl get clusters -w"),
        "{script}"
    );
    let stdout = run_ok(bash(work.path(), server.home.path(), None), &script);
    assert!(
        stdout.contains("clusters "),
        "api-resources lists clusters: {stdout}"
    );
    assert!(
        stdout.contains("cluster.cluster.x-k8s.io/prod-us-east created"),
        "{stdout}"
    );
    assert!(stdout.contains("CLUSTERCLASS"), "{stdout}");
    assert!(stdout.contains("FIELD: clusterNetwork"), "{stdout}");
    assert!(stdout.contains("serverside-applied"), "{stdout}");
    // What the prose after the block promises.
    let cluster = server.kubectl_ok(&["get", "cluster", "prod-us-east"]);
    assert!(cluster.contains("Provisioning"), "{cluster}");
    eventually(
        "the condition names the command that enables the provider",
        || {
            let described = server.kubectl_ok(&["describe", "cluster", "prod-us-east"]);
            described.contains("InfrastructureReady")
                && described.contains("AWSCluster prod-us-east does not exist yet")
                && described.contains("run `lariat init --infrastructure aws`")
        },
    );
    // A cluster with no workers yet has no Workers branch; its last branch closes the tree.
    let tree = server.lariat(&["describe", "cluster", "prod-us-east"]);
    let tree = String::from_utf8_lossy(&tree.stdout).to_string();
    assert!(!tree.contains("Workers"), "{tree}");
    assert!(
        tree.lines()
            .last()
            .is_some_and(|l| l.starts_with("└─ClusterInfrastructure - AWSCluster/prod-us-east")),
        "{tree}"
    );
}

/// The import walkthrough, run as written, with a second lariat server standing in for the
/// cluster to import (its kubeconfig renamed `edge`, one Node in it). SERVER, TOKEN and SHA256
/// are what `lariat cluster import edge` printed; the closing watch is stopped after 5 s.
#[test]
fn the_import_walkthrough_runs_as_written() {
    let server = TestServer::start();
    let downstream = TestServer::start();
    downstream.apply_ok(
        &["create", "-f", "-"],
        "apiVersion: v1\nkind: Node\nmetadata: {name: edge-node-1}\n",
    );
    let work = tempfile::tempdir().unwrap();
    let edge = work.path().join("edge.kubeconfig");
    let renamed: String = std::fs::read_to_string(downstream.kubeconfig())
        .unwrap()
        .lines()
        .map(|line| match line.trim() {
            "- name: lariat" => "- name: edge".to_string(),
            "cluster: lariat" => line.replace("lariat", "edge"),
            "- name: admin" => "- name: edge-admin".to_string(),
            "user: admin" => line.replace("admin", "edge-admin"),
            "- name: admin@lariat" => "- name: edge".to_string(),
            "current-context: admin@lariat" => "current-context: edge".to_string(),
            _ => line.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&edge, renamed).unwrap();
    let kubeconfig = format!("{}:{}", server.kubeconfig().display(), edge.display());
    let bash = |script: &str| {
        bash(
            work.path(),
            server.home.path(),
            Some(Path::new(&kubeconfig)),
        )
        .args(["-c", script])
        .output()
        .unwrap()
    };

    let mut lines = block("## Walkthrough: import a cluster lariat did not create")
        .lines()
        .map(String::from)
        .collect::<Vec<_>>()
        .into_iter();
    let import = lines.next().unwrap();
    assert!(import.starts_with("lariat cluster import edge"), "{import}");
    let output = bash(&import);
    let printed = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(output.status.success(), "{printed}{output:?}");
    let after = |flag: &str| {
        printed
            .split(flag)
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("{flag} in {printed}"))
            .to_string()
    };
    let checksum = after("--ca-checksum ");
    assert!(
        printed.contains("--token-file edge.token") && !printed.contains("--token "),
        "the token stays in its file: {printed}"
    );
    let token_file = work.path().join("edge.token");
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&token_file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let token = std::fs::read_to_string(&token_file).unwrap();
    // A file that holds no token is refused in one line, before anything is dialled.
    std::fs::write(work.path().join("empty.token"), "\n").unwrap();
    let refused = bash(
        "lariat agent --server https://127.0.0.1:1 --token-file empty.token --ca-checksum x --kubeconfig edge.kubeconfig",
    );
    assert!(
        String::from_utf8_lossy(&refused.stderr)
            .contains("--token-file empty.token holds no token"),
        "{refused:?}"
    );
    assert!(!printed.contains(token.trim()), "{printed}");
    // An existing path is never overwritten, and nothing is made when it is refused.
    let again = bash("lariat cluster import edge-2 --token-file edge.token");
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("--token-file edge.token exists"),
        "{again:?}"
    );
    assert_eq!(std::fs::read_to_string(&token_file).unwrap(), token);
    assert!(
        !server
            .kubectl(&["get", "cluster", "edge-2"])
            .status
            .success()
    );

    let lines = lines.map(|line| {
        line.replace("SERVER", &server.address)
            .replace("SHA256", &checksum)
    });
    let script = as_script(lines);
    let output = bash(&script);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the walkthrough failed:\n{script}\n{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("deployment.apps/lariat-agent created"),
        "{stdout}"
    );
    assert!(
        stdout.contains("cluster.cluster.x-k8s.io/edge condition met"),
        "{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("edge") && l.contains("Provisioned")),
        "{stdout}"
    );
    assert!(
        stdout.lines().any(|l| l.starts_with("edge-node-1")),
        "the imported cluster's nodes, through the tunnel: {stdout}"
    );
    assert!(
        std::fs::read_to_string(work.path().join("edge-via-lariat.yaml"))
            .unwrap()
            .contains("/k8s/clusters/default/edge")
    );
}

/// The users-and-tokens block, then the Rancher scopes block, run as written from a directory
/// whose `lariat-data` is the server's, with an in-memory cluster `edge`: a token for alice,
/// her namespace and binding, what she may do and what she is refused, a token revoked; then
/// a Project of edge with alice a member, what she may read in edge and what she may not.
#[test]
fn the_rbac_and_project_walkthroughs_run_as_written() {
    let server = TestServer::start();
    server.init_inmemory();
    server.apply_ok(
        &["apply", "-f", "-"],
        &common::small_inmemory_cluster("edge"),
    );
    let work = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(server.data_dir(), work.path().join("lariat-data")).unwrap();
    let kubeconfig = server.kubeconfig();
    let run = |script: &str| {
        run_ok(
            bash(work.path(), server.home.path(), Some(&kubeconfig)),
            script,
        )
    };
    let script = as_script(block("Give someone access with a token of their own").lines());
    assert!(
        script.contains("grep -q 'Error from server (Forbidden)'"),
        "{script}"
    );
    let stdout = run(&script);
    assert!(stdout.contains("namespace/team-a created"), "{stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("token-") && l.contains(" bob ")),
        "{stdout}"
    );
    assert!(stdout.contains("revoked"), "{stdout}");
    let bob = std::fs::read_to_string(work.path().join("bob.token")).unwrap();
    let (code, _) = server.curl("GET", "/api/v1/namespaces", Some(bob.trim()), None, None);
    assert_eq!(code, 401, "a revoked token is refused at once");
    let tokens = server.lariat(&["token", "list"]);
    let tokens = String::from_utf8_lossy(&tokens.stdout);
    assert!(
        tokens.contains("alice") && !tokens.contains("bob"),
        "{tokens}"
    );

    // The ServiceAccount block: its token reads what `view` allows in team-a, as that
    // ServiceAccount.
    let script = as_script(block("ServiceAccounts get short-lived signed tokens").lines());
    let stdout = run(&script);
    let jwt = stdout.lines().last().unwrap_or_default().trim().to_string();
    assert_eq!(jwt.split('.').count(), 3, "a JWT: {stdout}");
    let (code, body) = server.curl(
        "GET",
        "/api/v1/namespaces/team-a/configmaps",
        Some(&jwt),
        None,
        None,
    );
    assert_eq!(code, 200, "{body}");
    let (code, _) = server.curl(
        "GET",
        "/api/v1/namespaces/team-a/secrets",
        Some(&jwt),
        None,
        None,
    );
    assert_eq!(code, 403, "view does not read Secrets");

    common::eventually_within(
        std::time::Duration::from_secs(120),
        "edge is Ready and its agent connected",
        || {
            common::cluster_condition(&server, "edge", "Ready") == "True"
                && common::cluster_condition(&server, "edge", "Connected") == "True"
        },
    );
    let script = as_script(block("## Projects, cluster owners and global roles").lines());
    assert!(script.contains("for _ in $(seq 50)"), "{script}");
    let stdout = run(&script);
    assert!(stdout.contains("namespace/web annotated"), "{stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("edge") && l.contains("True")),
        "the ClusterAccess is applied: {stdout}"
    );
}

/// The Fleet walkthrough, run as written from a directory whose `repos` the server may fetch
/// from (started as the README says): an in-memory cluster, a git repository made on the
/// spot, a GitRepo targeting the cluster by label, and the ConfigMap in the cluster itself.
#[test]
fn the_fleet_walkthrough_runs_as_written() {
    let work = tempfile::tempdir().unwrap();
    let repos = work.path().join("repos");
    std::fs::create_dir_all(&repos).unwrap();
    let server = TestServer::start_with(&["--fleet-file-repos", repos.to_str().unwrap()]);
    let kubeconfig = server.kubeconfig();
    let run = |script: &str| {
        run_ok(
            bash(work.path(), server.home.path(), Some(&kubeconfig)),
            script,
        )
    };
    let stdout = run(&as_script(block("## Fleet: manifests from git").lines()));
    assert!(
        stdout.contains("gitrepo.fleet.cattle.io/platform condition met"),
        "{stdout}"
    );
    assert!(
        stdout.lines().any(|l| l.starts_with("settings ")),
        "the ConfigMap, read in the cluster: {stdout}"
    );
    // Then the blocks after it: a cluster imported into the workspace (its agent is not run
    // here: its BundleDeployment waits for it), and the webhook secret given to the GitRepo.
    for anchor in [
        "so import clusters for Fleet into it",
        "give the GitRepo the secret",
    ] {
        run(&as_script(block(anchor).lines()));
    }
    assert_eq!(
        server
            .kubectl_ok(&[
                "get",
                "bundledeployments",
                "-A",
                "-l",
                "fleet.cattle.io/cluster=edge",
                "-o",
                "name"
            ])
            .lines()
            .count(),
        1,
        "the imported cluster has its BundleDeployment"
    );
    assert_eq!(
        server.kubectl_ok(&[
            "get",
            "gitrepo",
            "platform",
            "-n",
            "fleet-default",
            "-o",
            "jsonpath={.spec.webhookSecret}"
        ]),
        "hooks"
    );
}

/// The move block, run as written against three servers: `prod` of the source holds an
/// in-memory cluster and two objects that name it (Widget w1, moved; Report weekly, left);
/// `target.yaml` and `fresh.yaml` are the other two servers' kubeconfigs.
#[test]
fn the_move_block_runs_as_written() {
    let crd = |kind: &str| {
        let plural = format!("{}s", kind.to_lowercase());
        format!(
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {{name: {plural}.example.com}}\nspec:\n  group: example.com\n  scope: Namespaced\n  names: {{kind: {kind}, plural: {plural}}}\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema: {{openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}}}\n"
        )
    };
    let (source, target, fresh) = (
        TestServer::start(),
        TestServer::start(),
        TestServer::start(),
    );
    for server in [&source, &target, &fresh] {
        server.init_inmemory();
        server.apply_ok(&["apply", "-f", "-"], &crd("Widget"));
    }
    source.apply_ok(&["apply", "-f", "-"], &crd("Report"));
    source.kubectl_ok(&["create", "namespace", "prod"]);
    source.apply_ok(
        &["apply", "-f", "-"],
        &common::small_inmemory_cluster_with("dev", &["-n", "prod"]),
    );
    source.apply_ok(
        &["apply", "-n", "prod", "-f", "-"],
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1}\nspec: {clusterName: dev}\n---\napiVersion: example.com/v1\nkind: Report\nmetadata: {name: weekly}\nspec: {clusterName: dev}\n",
    );
    common::eventually_within(
        std::time::Duration::from_secs(60),
        "dev's machines have their nodes",
        || {
            let nodes = source.kubectl_ok(&[
                "get",
                "machines",
                "-n",
                "prod",
                "-o",
                "jsonpath={.items[*].status.nodeRef.name}",
            ]);
            nodes.split_whitespace().count() == 2
        },
    );
    let work = tempfile::tempdir().unwrap();
    std::fs::copy(target.kubeconfig(), work.path().join("target.yaml")).unwrap();
    std::fs::copy(fresh.kubeconfig(), work.path().join("fresh.yaml")).unwrap();
    let script = as_script(block("## Moving clusters to another server").lines());
    let stdout = run_ok(
        bash(work.path(), source.home.path(), Some(&source.kubeconfig())),
        &script,
    );
    assert!(
        stdout.contains("Report/weekly references Cluster/dev at spec.clusterName")
            && stdout.contains("--include Report/weekly --include Widget/w1"),
        "the dry run names both and the command: {stdout}"
    );
    assert!(stdout.contains("Moved "), "{stdout}");
    assert!(stdout.contains("Restored "), "{stdout}");
    for server in [&target, &fresh] {
        server.kubectl_ok(&["get", "cluster", "dev", "-n", "prod"]);
        server.kubectl_ok(&["get", "widget", "w1", "-n", "prod"]);
    }
    source.kubectl_ok(&["get", "report", "weekly", "-n", "prod"]);
    assert!(
        !source
            .kubectl(&["get", "cluster", "dev", "-n", "prod"])
            .status
            .success()
    );
}

/// The AWS walkthrough against moto, started as the README says (on free ports rather than
/// 5000 and 6443, which other servers here may hold), from a fresh directory: the provider
/// enabled with moto's credentials, an EKS cluster generated, applied, scaled and upgraded.
#[test]
fn the_aws_walkthrough_runs_as_written_against_moto() {
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let (moto, lariat) = (free(), free());
    let start = block("Without an AWS account, moto stands in")
        .replace("5000", &moto.to_string())
        .replace(
            "lariat server &",
            &format!("lariat server --listen 127.0.0.1:{lariat} &"),
        );
    let walkthrough = block("## AWS: EKS clusters, as Cluster API AWS makes them");
    let (first, rest) = walkthrough.split_once('\n').unwrap();
    assert!(first.contains("lariat server &"), "{first}");
    // A person types the next command once the server is up; the script waits for it.
    let wait =
        "for _ in $(seq 150); do kubectl get namespaces >/dev/null 2>&1 && break; sleep 0.2; done";
    let lines: Vec<&str> = start.lines().chain([wait]).chain(rest.lines()).collect();
    let script = as_script(lines);
    let work = tempfile::tempdir().unwrap();
    let kubeconfig = work.path().join("lariat-data/kubeconfig.yaml");
    let home = tempfile::tempdir().unwrap();
    let mut command = bash(work.path(), home.path(), Some(&kubeconfig));
    command.env_remove("AWS_PROFILE");
    let stdout = run_ok(
        command,
        &format!(
            "{script}\nkubectl wait --for=jsonpath='{{.status.phase}}'=Provisioned cluster/prod --timeout=2m\n"
        ),
    );
    for expected in [
        "machinepool.cluster.x-k8s.io/prod-pool-0 scaled",
        "awsmanagedcontrolplane.controlplane.cluster.x-k8s.io/prod-control-plane patched",
        "cluster.cluster.x-k8s.io/prod condition met",
    ] {
        assert!(stdout.contains(expected), "{expected}: {stdout}");
    }
}

/// The backup block while the server runs (into this test's directory rather than /backups),
/// then the rotation block: the server stopped, `lariat admin rotate`, and the block's
/// `lariat server` (the test's server started again on the same data directory). The old
/// admin kubeconfig is refused after it, the new one works, and the backup serves the data.
#[test]
fn the_backup_and_rotation_blocks_run_as_written() {
    let mut server = TestServer::start();
    server.kubectl_ok(&["create", "configmap", "kept", "--from-literal=k=v"]);
    let work = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(server.data_dir(), work.path().join("lariat-data")).unwrap();
    let backups = work.path().join("backups");
    let home = server.home.path().to_path_buf();
    let run = |script: &str| run_ok(bash(work.path(), &home, None), script);
    let backup = block("is backed up while it runs").replace("/backups", backups.to_str().unwrap());
    run(&as_script(backup.lines()));
    let copy = backups.join("lariat-2026-12-03");
    assert!(copy.is_dir(), "{copy:?}");

    let old = work.path().join("old-admin.yaml");
    std::fs::copy(server.kubeconfig(), &old).unwrap();
    let rotation = block("To replace the admin credentials on purpose");
    let (rotate, restart) = rotation.trim_end().split_once('\n').unwrap();
    assert!(restart.starts_with("lariat server "), "{restart}");
    server.terminate();
    run(&as_script([rotate]));
    server.launch();
    // The old kubeconfig at the server's new address: its certificate is refused.
    let server_url = format!("https://{}", server.address);
    let refused = server.kubectl_as(&old, &["--server", &server_url, "get", "namespaces"]);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && said.contains("You must be logged in"),
        "the old admin certificate is refused: {said}"
    );
    assert_eq!(
        server.kubectl_ok(&["get", "configmap", "kept", "-o", "jsonpath={.data.k}"]),
        "v"
    );
}

/// The anchors the tests read README blocks by (`readme_block`), with the test file that
/// runs each block.
const RUN: &[(&str, &str)] = &[
    (
        "## Walkthrough: the Cluster API seed, with kubectl",
        "readme.rs",
    ),
    (
        "## Walkthrough: a whole cluster on the in-memory provider",
        "readme.rs",
    ),
    (
        "## Walkthrough: import a cluster lariat did not create",
        "readme.rs",
    ),
    ("## Moving clusters to another server", "readme.rs"),
    ("## Fleet: manifests from git", "readme.rs"),
    ("so import clusters for Fleet into it", "readme.rs"),
    ("give the GitRepo the secret", "readme.rs"),
    (
        "## AWS: EKS clusters, as Cluster API AWS makes them",
        "readme.rs",
    ),
    ("Without an AWS account, moto stands in", "readme.rs"),
    ("Run three servers on one etcd cluster", "ha.rs"),
    ("Each replica also keeps a Lease of its own", "ha.rs"),
    ("is backed up while it runs", "readme.rs"),
    ("Give someone access with a token of their own", "readme.rs"),
    ("ServiceAccounts get short-lived signed tokens", "readme.rs"),
    ("sign in with its ID tokens", "identities.rs"),
    ("## Projects, cluster owners and global roles", "readme.rs"),
    ("To replace the admin credentials on purpose", "readme.rs"),
];

/// The blocks no test runs as written, and why each cannot be.
const NOT_RUN: &[(&str, &str)] = &[
    (
        "## Quick start",
        "it is CI itself: `.ci/run` runs scripts/test, and the server is what every test starts",
    ),
    (
        "## Releases, the image, and lariat in a cluster",
        "CI's release stage runs scripts/release, and tests/distribution.rs checks what it makes",
    ),
    (
        "holds the key and the server's host keys",
        "it reaches GitHub over ssh; tests/fleet.rs fetches over ssh from a local sshd with the same kind of Secret",
    ),
    (
        "Inspect and publish it with skopeo",
        "it publishes to registries; tests/distribution.rs inspects and runs the image it names",
    ),
    (
        "an overlay changes\n  them",
        "it needs a cluster that runs Pods; tests/distribution.rs validates deploy/ against a lariat server with a strict server-side dry run",
    ),
    (
        "**Replicas on etcd** are backed up with etcd's snapshot",
        "it restores three etcd members on three machines; tests/ha.rs runs the same etcdctl snapshot save and restore against this machine's etcd",
    ),
    (
        "## Benchmarks",
        "each bench takes minutes at these sizes; tests/benches.rs runs every one at small sizes",
    ),
];

/// Every ```sh block of the README is run as written by a test (`RUN`), or says why it cannot
/// be (`NOT_RUN`): a new block nobody runs fails here.
#[test]
fn every_shell_block_of_the_readme_is_run_by_a_test() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let block_at = |anchor: &str| {
        let at = readme
            .find(anchor)
            .unwrap_or_else(|| panic!("README has no {anchor:?}"));
        at + readme[at..].find("```sh\n").expect("a sh block after it")
    };
    let tests_dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/");
    let mut covered = std::collections::BTreeSet::new();
    for (anchor, file) in RUN {
        let source = std::fs::read_to_string(format!("{tests_dir}{file}")).unwrap();
        assert!(
            source.contains(&format!("{anchor:?}")),
            "tests/{file} reads no block by {anchor:?}"
        );
        covered.insert(block_at(anchor));
    }
    for (anchor, _why) in NOT_RUN {
        covered.insert(block_at(anchor));
    }
    let mut missing = vec![];
    for (at, _) in readme.match_indices("```sh\n") {
        if !covered.contains(&at) {
            let line = readme[..at].lines().count() + 1;
            missing.push(format!(
                "line {line}: {}",
                readme[at + 6..].lines().next().unwrap_or_default()
            ));
        }
    }
    assert!(
        missing.is_empty(),
        "README blocks no test runs: {missing:#?}"
    );
}
