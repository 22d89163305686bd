//! Four widely used charts, as their projects publish them (tests/data/charts, see its
//! NOTICE): ingress-nginx, cert-manager, Bitnami's nginx (with Bitnami's common library
//! chart) and kube-state-metrics. Each renders with its default values and with one
//! non-default values file (tests/data/chart-values), every document is a Kubernetes object,
//! and every function their templates call is one lariat implements. The CLI's tests apply
//! the same renders to a simulated cluster with `kubectl apply --dry-run=server`.

use std::collections::BTreeSet;
use std::path::Path;

use lariat_helm::chart::read_values;
use lariat_helm::{Bounds, Capabilities, Chart, Release, manifests, render};
use serde_json::{Map, Value};

mod common;
use common::load_dir;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data");
const CHARTS: [&str; 4] = [
    "ingress-nginx",
    "cert-manager",
    "nginx",
    "kube-state-metrics",
];

fn rendered(chart: &str, values_file: Option<&str>) -> Vec<Value> {
    let dir = Path::new(DATA).join("charts").join(chart);
    let loaded = Chart::load(&load_dir(&dir)).unwrap_or_else(|e| panic!("{chart}: {e}"));
    let values = match values_file {
        Some(file) => read_values(&std::fs::read(file).unwrap(), file).unwrap(),
        None => Map::new(),
    };
    let capabilities = Capabilities {
        kube_version: "v1.30.2".into(),
        ..Capabilities::default()
    };
    let release = Release {
        name: "it".into(),
        namespace: "apps".into(),
        revision: 1,
        is_upgrade: false,
        skip_schema_validation: false,
    };
    let out = render(
        &loaded,
        &values,
        &release,
        &capabilities,
        None,
        &Bounds::default(),
    )
    .unwrap_or_else(|e| panic!("{chart} with {values_file:?}: {e}"));
    let mut objects = Vec::new();
    for (file, text) in &out.files {
        for document in manifests::split_documents(text) {
            let value: Value = serde_yaml_ng::from_str(&document)
                .unwrap_or_else(|e| panic!("{chart}: {file} is not YAML: {e}\n{document}"));
            if !value.is_null() {
                objects.push(value);
            }
        }
    }
    objects
}

#[test]
fn widely_used_charts_render_with_default_and_custom_values() {
    for chart in CHARTS {
        let custom = Path::new(DATA)
            .join("chart-values")
            .join(format!("{chart}.yaml"));
        let defaults = rendered(chart, None);
        let customized = rendered(chart, Some(custom.to_str().unwrap()));
        for (values, objects) in [("defaults", &defaults), ("custom values", &customized)] {
            assert!(objects.len() >= 3, "{chart} ({values}): {objects:?}");
            for object in objects {
                for field in ["apiVersion", "kind"] {
                    assert!(object[field].is_string(), "{chart} ({values}): {object}");
                }
                assert!(
                    object["metadata"]["name"].is_string(),
                    "{chart} ({values}): {object}"
                );
            }
        }
        let kinds = |objects: &Vec<Value>| -> BTreeSet<String> {
            objects
                .iter()
                .map(|o| o["kind"].as_str().unwrap().to_string())
                .collect()
        };
        println!(
            "{chart}: defaults {:?}; custom {:?}",
            kinds(&defaults),
            kinds(&customized)
        );
        assert_ne!(
            defaults, customized,
            "{chart}: the custom values changed nothing"
        );
    }
}

/// Go's own template functions and keywords, which gtmpl-ng implements.
const GO_BUILTINS: &[&str] = &[
    "and", "or", "not", "len", "index", "print", "printf", "println", "eq", "ne", "lt", "le", "gt",
    "ge", "call", "html", "js", "urlquery", "slice", "if", "else", "end", "range", "with",
    "define", "template", "block", "nil", "true", "false", "break", "continue",
];

/// Every name the charts' templates call, each one lariat implements; printed for the record.
#[test]
fn every_function_the_charts_call_is_implemented() {
    let name = regex::Regex::new(r"(?:^|[^.$\w])([A-Za-z_]\w*)").unwrap();
    let known: BTreeSet<&str> = lariat_helm::functions::names()
        .into_iter()
        .chain(GO_BUILTINS.iter().copied())
        .collect();
    let mut used = BTreeSet::new();
    for chart in CHARTS {
        let files = load_dir(&Path::new(DATA).join("charts").join(chart));
        for (path, data) in files {
            if !path.contains("templates/") || path.ends_with(".json") {
                continue;
            }
            for code in action_code(&String::from_utf8_lossy(&data)) {
                for call in name.captures_iter(&code) {
                    used.insert(call[1].to_string());
                }
            }
        }
    }
    let missing: Vec<&String> = used
        .iter()
        .filter(|f| !known.contains(f.as_str()))
        .collect();
    let functions: Vec<&String> = used
        .iter()
        .filter(|f| !GO_BUILTINS.contains(&f.as_str()))
        .collect();
    println!("{} functions used: {functions:?}", functions.len());
    assert!(missing.is_empty(), "not implemented: {missing:?}");
}

/// The code of each action of a template, its literals and comments blanked out, read as Go's
/// lexer reads it (a `}}` inside a string does not end the action).
fn action_code(source: &str) -> Vec<String> {
    let bytes = source.as_bytes();
    let mut actions = Vec::new();
    let mut i = 0;
    while let Some(open) = bytes[i..]
        .windows(2)
        .position(|w| w == b"{{")
        .map(|o| o + i)
    {
        let mut code = String::new();
        let mut j = open + 2;
        while j < bytes.len() && !bytes[j..].starts_with(b"}}") {
            let close: Option<&str> = match bytes[j] {
                b'"' => Some("\""),
                b'\'' => Some("'"),
                b'`' => Some("`"),
                b'/' if bytes[j..].starts_with(b"/*") => Some("*/"),
                _ => None,
            };
            match close {
                Some(close) => {
                    let mut k = j + 1;
                    while k < bytes.len() && !bytes[k..].starts_with(close.as_bytes()) {
                        k += if close != "`" && close != "*/" && bytes[k] == b'\\' {
                            2
                        } else {
                            1
                        };
                    }
                    j = k + close.len();
                    code.push(' ');
                }
                None => {
                    code.push(bytes[j] as char);
                    j += 1;
                }
            }
        }
        actions.push(code);
        i = (j + 2).min(source.len());
    }
    actions
}
