//! Every `lariat bench` runs here at a tiny size, and what it prints is checked for shape, not
//! speed: a bench nobody runs rots (`bench fleet` relabelled `fleet-0007`, a cluster only a
//! fleet of eight or more has, and failed on any smaller one). Rows meant for
//! docs/benchmarks.md must have the columns of their table there.

use std::process::Command;

/// Runs `lariat bench ARGS` to completion; its standard output.
fn bench(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_lariat"))
        .arg("bench")
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "lariat bench {}: {}\n{stdout}\n{}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    for nonsense in ["NaN", "inf ", "-inf"] {
        assert!(!stdout.contains(nonsense), "{nonsense} in:\n{stdout}");
    }
    stdout
}

/// The rows `output` prints for the table of `bench` in docs/benchmarks.md, each checked
/// against the columns of that table's header.
fn rows(output: &str, bench: &str) -> Vec<Vec<String>> {
    let marker = format!("row of docs/benchmarks.md's `{bench}` table: ");
    let docs = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/benchmarks.md"
    ))
    .unwrap();
    // The first table under a heading that names the bench.
    let header = docs
        .split("\n## ")
        .filter(|section| section.starts_with(&format!("`{bench}")))
        .find_map(|section| section.lines().find(|l| l.starts_with("| date |")))
        .unwrap_or_else(|| panic!("docs/benchmarks.md has no table for `{bench}`"));
    let columns = cells(header).len();
    let rows: Vec<Vec<String>> = output
        .lines()
        .filter_map(|line| line.split_once(&marker).map(|(_, row)| cells(row)))
        .collect();
    assert!(!rows.is_empty(), "no row for `{bench}` in:\n{output}");
    for row in &rows {
        assert_eq!(row.len(), columns, "{row:?} against {header}");
        assert!(row.iter().all(|c| !c.is_empty()), "an empty cell: {row:?}");
        assert!(
            chrono::NaiveDate::parse_from_str(&row[0], "%Y-%m-%d").is_ok(),
            "a date first: {row:?}"
        );
    }
    rows
}

fn cells(row: &str) -> Vec<String> {
    row.trim()
        .trim_matches('|')
        .split('|')
        .map(|c| c.trim().to_string())
        .collect()
}

/// The number a cell starts with ("1400 µs", "0.8 s").
fn number(cell: &str) -> f64 {
    let digits: String = cell
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == '-' || *c == '+')
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("not a number: {cell:?}"))
}

#[test]
fn bench_api() {
    let output = bench(&[
        "api",
        "--objects",
        "60",
        "--gets",
        "60",
        "--watched-updates",
        "20",
        "--concurrency",
        "4",
    ]);
    let rows = rows(&output, "bench api");
    let runs: Vec<(&str, &str, &str)> = rows
        .iter()
        .map(|r| (r[3].as_str(), r[4].as_str(), r[5].as_str()))
        .collect();
    assert_eq!(
        runs,
        [
            ("sqlite", "ConfigMap", "60"),
            ("sqlite", "Cluster", "60"),
            ("etcd", "ConfigMap", "60"),
            ("etcd", "Cluster", "60"),
        ]
    );
    for row in &rows {
        // Creates per second, server CPU per create, gets per second, updates per second.
        for cell in [&row[6], &row[7], &row[8], &row[10]] {
            assert!(number(cell) > 0.0, "{row:?}");
        }
    }
}

#[test]
fn bench_lifecycle() {
    let output = bench(&[
        "lifecycle",
        "--clusters",
        "2",
        "--control-plane",
        "1",
        "--workers",
        "1",
        "--upgrade-workers",
        "2",
        "--idle-seconds",
        "2",
    ]);
    assert!(output.contains("all 4 machines Running after"), "{output}");
    assert!(
        output.contains("rolling upgrade of a 2-machine MachineDeployment"),
        "{output}"
    );
    let row = &rows(&output, "bench lifecycle")[0];
    assert_eq!(row[3], "4", "{row:?}");
    assert!(number(&row[5]) > 0.0, "server CPU per machine: {row:?}");
    assert!(number(&row[6]) >= 1.0, "store writes per machine: {row:?}");
}

#[test]
fn bench_workloads() {
    let output = bench(&[
        "workloads",
        "--clusters",
        "2",
        "--workers",
        "1",
        "--deployments",
        "2",
        "--replicas",
        "3",
        "--idle-seconds",
        "2",
    ]);
    assert!(
        output.contains("all 4 Deployments Available (12 Pods Running)"),
        "{output}"
    );
    let row = &rows(&output, "bench workloads")[0];
    assert_eq!((row[3].as_str(), row[4].as_str()), ("2", "12"), "{row:?}");
    assert!(number(&row[6]) > 0.0, "server CPU per Pod: {row:?}");
}

#[test]
fn bench_agents() {
    let output = bench(&["agents", "--agents", "5", "--latency-requests", "20"]);
    assert!(output.contains("all 5 agents back in"), "{output}");
    let row = &rows(&output, "bench agents")[0];
    assert_eq!(row[3], "5", "{row:?}");
}

#[test]
fn bench_fleet() {
    let output = bench(&[
        "fleet",
        "--clusters",
        "2",
        "--bundles",
        "2",
        "--git-repos",
        "3",
        "--idle-seconds",
        "2",
    ]);
    assert!(
        output.contains("first rollout: 4 BundleDeployments Ready"),
        "{output}"
    );
    assert!(
        output.contains("relabel one cluster into 1 of 4 GitRepos"),
        "{output}"
    );
    let row = &rows(&output, "bench fleet")[0];
    assert_eq!((row[3].as_str(), row[4].as_str()), ("2", "4"), "{row:?}");
}

#[test]
fn bench_rbac() {
    let output = bench(&[
        "rbac",
        "--bindings",
        "20",
        "--roles",
        "5",
        "--gets",
        "40",
        "--concurrency",
        "2",
    ]);
    assert!(
        output.contains("created 5 ClusterRoles at") && output.contains("20 RoleBindings at"),
        "{output}"
    );
    assert_eq!(output.matches("admin p50").count(), 2, "{output}");
}

#[test]
fn bench_access() {
    let output = bench(&["access", "--clusters", "2", "--singles", "2"]);
    for line in [
        "2 clusters provisioned and their agents connected in",
        "one GlobalRoleBinding: its ClusterRoleBinding in all 2 clusters",
        "2 ProjectRoleTemplateBindings (one per cluster",
        "one ProjectRoleTemplateBinding to its RoleBinding (2 samples among 2 clusters)",
    ] {
        assert!(output.contains(line), "{line:?} in:\n{output}");
    }
}

#[test]
fn bench_aws() {
    let output = bench(&["aws", "--clusters", "2"]);
    for line in [
        "one EKS cluster with a node group of 3:",
        "2 EKS clusters with node groups: all running in",
        "steady state, one reconcile of each object:",
    ] {
        assert!(output.contains(line), "{line:?} in:\n{output}");
    }
}

#[test]
fn bench_ha() {
    let output = bench(&[
        "ha",
        "--objects",
        "30",
        "--concurrency",
        "6",
        "--failovers",
        "1",
        "--agents",
        "6",
    ]);
    for line in [
        "Controller failover after kill -9 of the Lease holder",
        "another replica holds the Lease",
        "all 6 connected in",
        "all 6 connected again in",
    ] {
        assert!(output.contains(line), "{line:?} in:\n{output}");
    }
}

#[test]
fn bench_limits() {
    let output = bench(&[
        "limits",
        "--large-writes",
        "3",
        "--unread-objects",
        "2",
        "--depth",
        "2000",
        // Speed is not what this test checks, and the tests' build is unoptimized.
        "--max-healthz-ms",
        "10000",
    ]);
    let outcomes: Vec<&str> = output
        .lines()
        .skip_while(|l| !l.starts_with("vector"))
        .skip(1)
        .collect();
    assert!(outcomes.len() >= 5, "{output}");
    assert!(
        outcomes.iter().all(|l| l.contains("held (")),
        "every limit held:\n{output}"
    );
}
