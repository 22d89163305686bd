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
        if !named.is_empty() {
            naming.push(format!("{relative} names {}", named.join(", ")));
        }
    }
    assert!(
        naming.is_empty(),
        "the generic server names a product's kind; move it to the crate that owns the kind and hand it over in lariat_apiserver::Config: {naming:#?}"
    );
}
