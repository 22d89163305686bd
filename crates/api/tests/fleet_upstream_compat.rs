//! Checks lariat's Fleet CRDs (`fleet.cattle.io/v1alpha1`) against Fleet's own, kind by kind.
//!
//! lariat implements a subset of Fleet's fields: every field it has must be Fleet's, with
//! Fleet's type, format and allowed values, so a user's manifest means the same to both. A
//! field it lacks is refused by the API server (strict field validation), not ignored. The
//! only fields Fleet lacks are lariat's own extensions, listed in `EXTENSIONS`.

mod support;

use std::collections::BTreeSet;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use lariat_api::fleet::{Bundle, BundleDeployment, ClusterGroup, Content, FleetCluster, GitRepo};
use serde_json::Value;

/// lariat's additions to Fleet's schemas, by kind and path.
const EXTENSIONS: &[(&str, &str)] = &[
    ("GitRepo", ".status.failureGroups"),
    ("Bundle", ".status.failureGroups"),
];

/// Fleet's CRDs, from `shared/reference/fleet/crds.yaml`.
fn upstream() -> Vec<Value> {
    let path = support::reference_dir().join("../fleet/crds.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| {
            use serde::Deserialize;
            Value::deserialize(doc).expect("a YAML document")
        })
        .filter(|doc| !doc.is_null())
        .collect()
}

fn upstream_kind(kind: &str) -> Value {
    upstream()
        .into_iter()
        .find(|crd| crd["spec"]["names"]["kind"] == kind)
        .unwrap_or_else(|| panic!("Fleet has no {kind}"))
}

fn ours() -> Vec<CustomResourceDefinition> {
    vec![
        GitRepo::crd(),
        Bundle::crd(),
        BundleDeployment::crd(),
        FleetCluster::crd(),
        ClusterGroup::crd(),
        Content::crd(),
    ]
}

fn enum_values(node: &Value) -> Option<BTreeSet<String>> {
    node["enum"]
        .as_array()
        .map(|values| values.iter().map(|v| v.to_string()).collect())
}

/// Where lariat's schema at `path` is not Fleet's.
fn compare(kind: &str, path: &str, ours: &Value, theirs: &Value, problems: &mut Vec<String>) {
    let int_or_string = |n: &Value| n["x-kubernetes-int-or-string"] == true;
    if int_or_string(ours) != int_or_string(theirs) {
        problems.push(format!("{path}: int-or-string differs"));
        return;
    }
    if ours["type"] != theirs["type"] {
        problems.push(format!(
            "{path}: type {} where Fleet has {}",
            ours["type"], theirs["type"]
        ));
        return;
    }
    // Integer widths (`int32`, `int64`) are hints Fleet's generator leaves out; a string's
    // format (`date-time`, `byte`) is a rule.
    if ours["type"] == "string" && !ours["format"].is_null() && ours["format"] != theirs["format"] {
        problems.push(format!(
            "{path}: format {} where Fleet has {}",
            ours["format"], theirs["format"]
        ));
    }
    if let Some(values) = enum_values(ours) {
        match enum_values(theirs) {
            Some(upstream) if values.is_subset(&upstream) => {}
            other => problems.push(format!(
                "{path}: values {values:?} where Fleet allows {other:?}"
            )),
        }
    }
    if let Some(properties) = ours["properties"].as_object() {
        for (name, schema) in properties {
            let child = format!("{path}.{name}");
            if EXTENSIONS.contains(&(kind, child.as_str())) {
                assert!(
                    theirs["properties"][name].is_null(),
                    "{kind} {child} is Fleet's now: no longer an extension"
                );
                continue;
            }
            match theirs["properties"].get(name) {
                Some(upstream) => compare(kind, &child, schema, upstream, problems),
                None => problems.push(format!("{child}: not a field of Fleet's {kind}")),
            }
        }
    }
    if ours["items"].is_object() {
        compare(
            kind,
            &format!("{path}[]"),
            &ours["items"],
            &theirs["items"],
            problems,
        );
    }
}

#[test]
fn every_field_is_fleets_with_fleets_type() {
    let mut problems = Vec::new();
    for crd in ours() {
        let ours = support::to_json(&crd);
        let kind = crd.spec.names.kind.clone();
        let theirs = upstream_kind(&kind);
        let theirs = &support::version(&theirs, "v1alpha1")["schema"]["openAPIV3Schema"];
        let schema = support::only_schema(&ours);
        for (part, ours) in schema["properties"].as_object().unwrap() {
            if ["apiVersion", "kind", "metadata"].contains(&part.as_str()) {
                continue;
            }
            match theirs["properties"].get(part) {
                Some(theirs) => compare(&kind, &format!(".{part}"), ours, theirs, &mut problems),
                None => problems.push(format!(".{part}: not a field of Fleet's {kind}")),
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn names_and_scope_are_fleets() {
    for crd in ours() {
        let ours = support::to_json(&crd);
        let kind = crd.spec.names.kind.clone();
        let theirs = upstream_kind(&kind);
        for key in ["group", "scope"] {
            assert_eq!(ours["spec"][key], theirs["spec"][key], "{kind} {key}");
        }
        for key in ["kind", "plural", "singular"] {
            assert_eq!(
                ours["spec"]["names"][key], theirs["spec"]["names"][key],
                "{kind} names.{key}"
            );
        }
        assert_eq!(
            support::version(&ours, "v1alpha1")["subresources"]["status"],
            serde_json::json!({}),
            "{kind} has a status subresource"
        );
    }
}

#[test]
fn kubectl_get_shows_what_fleet_users_read() {
    let columns = |crd: &CustomResourceDefinition| -> Vec<(String, String)> {
        let crd = support::to_json(crd);
        support::version(&crd, "v1alpha1")["additionalPrinterColumns"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                (
                    c["name"].as_str().unwrap().to_string(),
                    c["jsonPath"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    // The seed's `kubectl get gitrepo`: NAME REPO COMMIT BUNDLESREADY, from Fleet's fields.
    let git_repo = columns(&GitRepo::crd());
    let names: Vec<&str> = git_repo.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names[..3], ["Repo", "Commit", "BundlesReady"]);
    assert_eq!(git_repo[2].1, ".status.display.readyBundleDeployments");
    // The rest as Fleet's own columns.
    for crd in [
        Bundle::crd(),
        BundleDeployment::crd(),
        FleetCluster::crd(),
        ClusterGroup::crd(),
    ] {
        let kind = crd.spec.names.kind.clone();
        let theirs = upstream_kind(&kind);
        let upstream: Vec<(String, String)> =
            support::version(&theirs, "v1alpha1")["additionalPrinterColumns"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| {
                    (
                        c["name"].as_str().unwrap().to_string(),
                        c["jsonPath"].as_str().unwrap().to_string(),
                    )
                })
                .collect();
        assert_eq!(columns(&crd), upstream, "{kind}");
    }
}

#[test]
fn the_seeds_git_repo_applies_unchanged() {
    let manifest = serde_json::json!({
        "apiVersion": "fleet.cattle.io/v1alpha1",
        "kind": "GitRepo",
        "metadata": {"name": "platform-baseline", "namespace": "fleet-default"},
        "spec": {
            "repo": "https://github.com/example-org/platform-manifests",
            "branch": "main",
            "targets": [{"clusterSelector": {"matchLabels": {"env": "production"}}}],
        },
    });
    assert_eq!(
        support::schema_problems::<GitRepo>(&manifest),
        Vec::<String>::new()
    );
    let repo: GitRepo = support::round_trip(&manifest);
    assert_eq!(repo.spec.branch.as_deref(), Some("main"));
}

#[test]
fn generated_schemas_are_structural() {
    for crd in ours() {
        let json = support::to_json(&crd);
        let mut problems = Vec::new();
        support::structural_problems("", support::only_schema(&json), &mut problems);
        assert!(problems.is_empty(), "{}: {problems:?}", crd.spec.names.kind);
    }
}

#[test]
fn the_walker_notices_a_field_fleet_does_not_have() {
    let theirs = upstream_kind("GitRepo");
    let theirs = &support::version(&theirs, "v1alpha1")["schema"]["openAPIV3Schema"];
    let crd = GitRepo::crd();
    let mut ours = support::only_schema(&support::to_json(&crd)).clone();
    ours["properties"]["spec"]["properties"]["invented"] = serde_json::json!({"type": "string"});
    ours["properties"]["spec"]["properties"]["paused"] = serde_json::json!({"type": "string"});
    let mut problems = Vec::new();
    compare(
        "GitRepo",
        ".spec",
        &ours["properties"]["spec"],
        &theirs["properties"]["spec"],
        &mut problems,
    );
    problems.sort();
    assert_eq!(
        problems,
        [
            ".spec.invented: not a field of Fleet's GitRepo",
            ".spec.paused: type \"string\" where Fleet has \"boolean\"",
        ]
    );
}
