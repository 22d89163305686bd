//! Keeps ARCHITECTURE.md honest: every crate in the workspace is named in it.

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
