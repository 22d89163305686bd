//! The generic server names no kind beyond the core Kubernetes groups, as `k8s.io/apiserver`
//! names none of `k8s.io/kubernetes`' (a tidy check, as rust-analyzer's `tidy` tests keep its
//! crate boundaries): Cluster API's, Fleet's, Rancher's and AWS's kinds, their write rules
//! and their controllers belong to the crates that own them, which hand them to the server in
//! its configuration.

use std::path::{Path, PathBuf};

/// What names a product's kind: its API groups, its AWS kinds, and its types' modules.
const PRODUCT_NAMES: &[&str] = &[
    "cluster.x-k8s.io",
    "cattle.io",
    "AWS",
    "lariat_api::capi",
    "lariat_api::aws",
    "lariat_api::fleet",
    "lariat_api::rancher",
    "lariat_api::controlplane",
    "lariat_api::infrastructure",
    "lariat_api::bootstrap",
];

/// Files that still name a product's kind, each until its concern moves to the crate that
/// owns it (issue 38). The list only shrinks: a file that no longer names one must leave it.
const NOT_MOVED_YET: &[&str] = &[
    // The agents' scope (Fleet's BundleDeployments and Contents of their cluster).
    "agents.rs",
    // The cluster proxy (Cluster API Clusters).
    "http.rs",
    // Fleet's workspaces created at start.
    "lib.rs",
    // Rancher's access-control kinds: grants, admission, and RBAC's index of them.
    "rancher.rs",
    "rbac.rs",
    "strategy/mod.rs",
    "strategy/rancher.rs",
    // The tunnel hub, which reports Cluster conditions.
    "tunnel.rs",
];

fn sources(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read the source folder") {
        let path = entry.expect("a source entry").path();
        if path.is_dir() {
            sources(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

#[test]
fn the_generic_server_names_no_product_kind() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![];
    sources(&root, &mut files);
    let mut naming = vec![];
    let mut moved = vec![];
    for file in &files {
        let relative = file
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let text = std::fs::read_to_string(file).unwrap();
        let named: Vec<&str> = PRODUCT_NAMES
            .iter()
            .copied()
            .filter(|name| text.contains(name))
            .collect();
        let excused = NOT_MOVED_YET.contains(&relative.as_str());
        if !named.is_empty() && !excused {
            naming.push(format!("{relative} names {}", named.join(", ")));
        }
        if named.is_empty() && excused {
            moved.push(relative);
        }
    }
    assert!(
        naming.is_empty(),
        "the generic server names a product's kind; move it to the crate that owns the kind and hand it over in lariat_apiserver::Config: {naming:#?}"
    );
    assert!(
        moved.is_empty(),
        "these files name no product's kind any more: take them off NOT_MOVED_YET: {moved:?}"
    );
}
