//! Keeps ARCHITECTURE.md honest: every crate in the workspace is named in it. And keeps
//! functions short enough to read: one over [`LONGEST`] lines says why beside it, or is on
//! the list of those still to split, which only shrinks. And keeps CI's build to one: the
//! tests resolve every dependency with the release binary's features.

#[test]
fn every_crate_is_in_the_architecture_document() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let document = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let mut missing = vec![];
    for entry in std::fs::read_dir(root.join("crates")).expect("crates/") {
        let entry = entry.expect("entry");
        if entry.path().join("Cargo.toml").exists() {
            let name = format!("crates/{}", entry.file_name().to_string_lossy());
            if !document.contains(&name) {
                missing.push(name);
            }
        }
    }
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md does not describe {missing:?}"
    );
}

/// The most lines a function runs (signature to closing brace) without a reason beside it.
const LONGEST: usize = 150;

/// Each function under `crates/*/src` with its length in lines and whether a `// Long:`
/// comment stands above it (its doc comment and attributes between). A function is a line
/// starting with `fn` (after visibility and `async`), running to the first line that closes
/// it at its own indentation, as rustfmt lays every function out. Tests are exempt.
fn functions(root: &std::path::Path) -> Vec<(String, usize, bool)> {
    fn rust_files(dir: &std::path::Path, files: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                rust_files(&path, files);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let mut files = vec![];
    for entry in std::fs::read_dir(root.join("crates"))
        .expect("crates/")
        .flatten()
    {
        rust_files(&entry.path().join("src"), &mut files);
    }
    let mut found = vec![];
    for file in files {
        let text = std::fs::read_to_string(&file).expect("source");
        let lines: Vec<&str> = text.lines().collect();
        let relative = file
            .strip_prefix(root)
            .unwrap_or(&file)
            .to_string_lossy()
            .replace("/./", "/");
        for (start, line) in lines.iter().enumerate() {
            let indent = line.len() - line.trim_start().len();
            let mut rest = line.trim_start();
            for prefix in ["pub(crate) ", "pub(super) ", "pub ", "async "] {
                rest = rest.strip_prefix(prefix).unwrap_or(rest);
            }
            let Some(name) = rest.strip_prefix("fn ") else {
                continue;
            };
            let name: String = name
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let close = format!("{}}}", " ".repeat(indent));
            let Some(end) = lines[start..].iter().position(|l| *l == close) else {
                continue;
            };
            // What stands above: attributes, doc comments and comments.
            let above: Vec<&str> = lines[..start]
                .iter()
                .rev()
                .map(|l| l.trim())
                .take_while(|l| l.starts_with("#[") || l.starts_with("//"))
                .collect();
            if above.iter().any(|l| l.contains("test]")) {
                continue;
            }
            let reason = above.iter().any(|l| l.starts_with("// Long:"));
            found.push((format!("{relative}:{name}"), end + 1, reason));
        }
    }
    found
}

#[test]
fn no_function_runs_long_without_a_reason() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let root = root.canonicalize().expect("the workspace");
    let functions = functions(&root);
    assert!(
        functions.len() > 1000,
        "the scan found only {} functions: it no longer reads the sources",
        functions.len()
    );
    let long: Vec<String> = functions
        .iter()
        .filter(|(_, lines, reason)| *lines > LONGEST && !reason)
        .map(|(name, lines, _)| format!("{name} ({lines} lines)"))
        .collect();
    assert!(
        long.is_empty(),
        "functions over {LONGEST} lines: split them, or say why above them in a `// Long:` comment: {long:#?}"
    );
}

/// Each package `cargo tree` lists with the features it is built with, one per line.
fn resolved(args: &[&str]) -> std::collections::BTreeMap<String, String> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = std::process::Command::new(cargo)
        .current_dir(root)
        .args([
            "tree",
            "--locked",
            "--target",
            "x86_64-unknown-linux-gnu",
            "--prefix",
            "none",
        ])
        .args(["--format", "{p}|{f}"])
        .args(args)
        .output()
        .expect("cargo tree");
    assert!(
        output.status.success(),
        "cargo tree: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.trim_end_matches(" (*)").split_once('|'))
        .map(|(package, features)| (package.to_string(), features.to_string()))
        .collect()
}

/// scripts/test builds the release binary, then the tests with the same profile and flags so
/// that they reuse its dependencies. A dev-dependency that turns on one more feature of a shared
/// crate (tokio's `test-util` did) makes that crate and everything built on it, the AWS SDK's
/// crates included, compile twice in CI.
#[test]
fn the_tests_build_every_dependency_as_the_binary_does() {
    let binary = resolved(&["--package", "lariat", "--edges", "no-dev"]);
    let tests = resolved(&["--workspace"]);
    assert!(binary.len() > 100, "cargo tree listed only {binary:?}");
    let differ: Vec<String> = binary
        .iter()
        .filter_map(|(package, features)| {
            let theirs = tests.get(package)?;
            (theirs != features).then(|| format!("{package}: [{features}] vs [{theirs}] in tests"))
        })
        .collect();
    assert!(
        differ.is_empty(),
        "the tests build these with other features than the binary, so CI builds them and \
         everything above them twice; drop the feature from the dev-dependency: {differ:#?}"
    );
}
