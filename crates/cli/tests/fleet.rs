//! Fleet's kinds through the real kubectl: what a Fleet user types on day one works, and
//! `clusters` still means Cluster API's.

mod common;

use common::{SEED_CLUSTER, TestServer};

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
        "  branch: main\n  helmSecretName: creds\n",
    );
    let output = server.kubectl_stdin(&["apply", "-f", "-"], &manifest);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "applied: {stderr}");
    assert!(
        stderr.contains("helmSecretName") && stderr.contains("unknown field"),
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
    let fleet = server.kubectl_ok(&["get", "clusters.fleet.cattle.io", "-A"]);
    assert!(
        header(&fleet).contains(&"BUNDLES-READY".to_string())
            && fleet
                .lines()
                .nth(1)
                .is_some_and(|row| row.starts_with("fleet-default")),
        "{fleet}"
    );
}
