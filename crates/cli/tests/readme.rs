//! The README's in-memory walkthrough, run as written: the code block is read from README.md
//! and each line is run by bash against a real server, with `lariat` and `kubectl` on PATH.
//! If the README and the product drift apart, this fails.

mod common;

use std::process::Command;

use common::TestServer;

/// The first ```sh block after `heading` in the README.
fn block(heading: &str) -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("README.md");
    let section = readme
        .split(heading)
        .nth(1)
        .unwrap_or_else(|| panic!("README has no {heading:?}"));
    section
        .split("```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a sh block")
        .to_string()
}

/// `PATH` with the built `lariat` first.
fn path_with_lariat() -> String {
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_lariat"))
        .parent()
        .unwrap()
        .to_path_buf();
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
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
    let mut script = String::from("set -euo pipefail\n");
    for line in block("## Walkthrough: the Cluster API seed, with kubectl").lines() {
        let command = line.split("  #").next().unwrap_or_default().trim_end();
        if command.ends_with(" -w") {
            script.push_str(&format!("timeout 5 {command} || [ $? = 124 ]\n"));
        } else {
            script.push_str(line);
            script.push('\n');
        }
    }
    assert!(
        script.contains("timeout 5 kubectl get clusters -w"),
        "{script}"
    );
    let output = Command::new("bash")
        .args(["-c", &script])
        .current_dir(work.path())
        .env("PATH", path_with_lariat())
        .env("HOME", server.home.path())
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the walkthrough failed:\n{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
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
    let described = server.kubectl_ok(&["describe", "cluster", "prod-us-east"]);
    assert!(described.contains("InfrastructureReady"), "{described}");
}
