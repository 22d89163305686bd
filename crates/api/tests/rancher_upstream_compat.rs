//! Rancher's access-control kinds keep Rancher's names, scopes and fields: every field the
//! reference summary (`shared/reference/rancher/README.md`) lists for a kind is in lariat's
//! schema, where Rancher puts it (beside `metadata`, or under `spec` for Project), except the
//! few lariat does not implement, which it refuses rather than ignores.

mod support;

use serde_json::Value;

/// `(kind, namespaced, fields)` from the reference summary's table.
fn reference() -> Vec<(String, bool, Vec<String>)> {
    let path = support::reference_dir().join("../rancher/README.md");
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    text.lines()
        .filter(|line| {
            line.starts_with("| ") && !line.starts_with("| kind") && !line.starts_with("|---")
        })
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let fields = cells[3]
                .split('`')
                .skip(1)
                .step_by(2)
                .filter(|f| f.chars().next().is_some_and(char::is_lowercase))
                .filter(|f| !f.contains(' ') && !matches!(*f, "cluster" | "project"))
                .map(String::from)
                .collect();
            (
                cells[1].to_string(),
                cells[2].starts_with("namespaced"),
                fields,
            )
        })
        .collect()
}

/// Rancher's fields lariat does not implement (a Project's quotas): absent from the schema, so
/// strict field validation refuses them.
const NOT_IMPLEMENTED: [&str; 3] = [
    "spec.resourceQuota",
    "spec.namespaceDefaultResourceQuota",
    "spec.containerDefaultResourceLimit",
];

fn ours(kind: &str) -> Value {
    let crd = lariat_api::rancher::crds()
        .into_iter()
        .find(|crd| crd.spec.names.kind == kind)
        .unwrap_or_else(|| panic!("lariat serves no {kind}"));
    serde_json::to_value(crd).unwrap()
}

#[test]
fn every_field_rancher_lists_is_there_with_rancher_scope() {
    let reference = reference();
    assert_eq!(reference.len(), 6, "the six kinds of the summary");
    for (kind, namespaced, fields) in reference {
        let crd = ours(&kind);
        assert_eq!(crd["spec"]["group"], "management.cattle.io", "{kind}");
        assert_eq!(crd["spec"]["versions"][0]["name"], "v3", "{kind}");
        let scope = if namespaced { "Namespaced" } else { "Cluster" };
        assert_eq!(crd["spec"]["scope"], scope, "{kind}");
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        assert!(
            !fields.is_empty(),
            "{kind}: no fields read from the summary"
        );
        for field in fields {
            let mut node = schema;
            for part in field.split('.') {
                node = &node["properties"][part];
            }
            if NOT_IMPLEMENTED.contains(&field.as_str()) {
                assert!(
                    node.is_null(),
                    "{kind}: {field} is implemented now: take it off the list"
                );
            } else {
                assert!(node.is_object(), "{kind}: {field} is missing");
            }
        }
    }
}

#[test]
fn nothing_is_kept_that_the_schema_does_not_name() {
    for crd in lariat_api::rancher::crds() {
        let text = serde_json::to_string(&crd).unwrap();
        assert!(
            !text.contains("x-kubernetes-preserve-unknown-fields"),
            "{}",
            crd.spec.names.kind
        );
    }
}
