//! The README's in-memory walkthrough, run as written: the code block is read from README.md
//! and each line is run by bash against a real server, with `lariat` and `kubectl` on PATH.
//! If the README and the product drift apart, this fails.

mod common;

use std::process::Command;

use common::TestServer;

/// The first ```sh block after `heading` in the README, with continuation lines joined.
fn walkthrough(heading: &str) -> Vec<String> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("README.md");
    let section = readme
        .split(heading)
        .nth(1)
        .unwrap_or_else(|| panic!("README has no {heading:?}"));
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a sh block");
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
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_lariat"))
        .parent()
        .unwrap()
        .to_path_buf();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
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
