//! kustomize's own krusty tests, ported as data (tests/data/krusty, made from kustomize's
//! api/krusty/*_test.go by scripts/krusty-cases.py): each case's files are built as
//! `kustomize build` builds them and the objects compared with the ones kustomize expects,
//! in order. Objects, not text: lariat applies what it builds rather than printing YAML.
//! Cases for what lariat does not build (vars, plugins, build metadata, ...) are listed in
//! NOT_BUILT with the reason; every other case must pass.

use std::path::Path;

use lariat_kustomize::{Bounds, Files, build};
use serde_json::Value;

/// Cases lariat does not reproduce, by file name prefix, and why: features it refuses by
/// name, and one case that only works on a whole file system.
const NOT_BUILT: &[(&str, &str)] = &[
    ("variableref.", "vars: refused (deprecated by kustomize)"),
    ("originannotation.", "buildMetadata: refused"),
    ("transformerannotation.", "buildMetadata: refused"),
    (
        "configmaps.TestConfigMapGeneratorLiteralNewline",
        "generators (plugins): refused",
    ),
    (
        "namereference.TestEmptyFieldSpecValue",
        "generators (plugins): refused",
    ),
    (
        "namespacepropagation.TestNamespacePropagationDoesNotBreakGeneratorMerge",
        "generators (plugins): refused",
    ),
    (
        "complexcomposition.TestComplexComposition_Dev_SuccessWithBaseTransformers",
        "generators (plugins): refused",
    ),
    (
        "complexcomposition.TestComplexComposition_Prod_SuccessWithBaseTransformers",
        "generators (plugins): refused",
    ),
    (
        "transformersimage.TestTransfomersImageCustomConfig",
        "configurations: refused",
    ),
    (
        "transformersimage.TestTransfomersImageKnativeConfig",
        "configurations: refused",
    ),
    (
        "legacyprefixsuffixtransformer.",
        "transformers (plugins): refused",
    ),
    ("localconfig.", "transformers (plugins): refused"),
    (
        "nameupdateinroleref.TestNameUpdateInRoleRef2",
        "transformers (plugins): refused",
    ),
    (
        "intermediateresourceid.TestIntermediateNameSecretKeyRefDiamond",
        "configurations: refused",
    ),
    ("namereference.TestIssue4682", "configurations: refused"),
    ("namereference.TestIssue4884", "configurations: refused"),
    (
        "namespaces.TestNameReferenceDeploymentIssue3489",
        "builds from / and lists ../ov1, which a bundle's files cannot reach",
    ),
];

struct Case {
    files: Files,
    dir: String,
    expected: Vec<Value>,
}

fn read_case(text: &str) -> Case {
    let mut files = Files::new();
    let (mut dir, mut expected) = (String::new(), String::new());
    for section in text.split("\n=== ").skip(1) {
        let (header, body) = section.split_once('\n').unwrap_or((section, ""));
        if let Some(path) = header.strip_prefix("file ") {
            files.insert(path.to_string(), body.as_bytes().to_vec());
        } else if let Some(path) = header.strip_prefix("build ") {
            dir = path.to_string();
        } else if header == "expected" {
            expected = body.to_string();
        }
    }
    let expected = lariat_yaml::documents(&expected)
        .into_iter()
        .map(|d| d.expect("expected output is YAML"))
        .filter(|v| !v.is_null())
        .collect();
    Case {
        files,
        dir,
        expected,
    }
}

#[test]
fn kustomize_krusty_cases_build_as_kustomize_builds_them() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/krusty");
    let mut names: Vec<String> = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".txt"))
        .collect();
    names.sort();
    let (mut passed, mut failures) = (0, Vec::new());
    let mut skipped = 0;
    for name in &names {
        if NOT_BUILT.iter().any(|(prefix, _)| name.starts_with(prefix)) {
            skipped += 1;
            continue;
        }
        let case = read_case(&std::fs::read_to_string(data.join(name)).unwrap());
        match build(&case.files, &case.dir, Bounds::default()) {
            Ok(objects) if objects == case.expected => passed += 1,
            Ok(objects) => failures.push(format!(
                "{name}: built\n{}\nexpected\n{}",
                serde_json::to_string_pretty(&objects).unwrap(),
                serde_json::to_string_pretty(&case.expected).unwrap()
            )),
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    assert!(passed >= 120, "only {passed} cases ran");
    println!("{passed} krusty cases built as kustomize builds them, {skipped} not built");
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n\n{}",
        failures.len(),
        failures.len() + passed,
        failures.join("\n\n")
    );
}
