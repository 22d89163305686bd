//! Helm's own golden tests of `helm template` (helm/helm, `pkg/cmd/template_test.go`), run
//! against lariat's renderer: the same charts, the same flags, and the output compared
//! byte for byte with Helm's expected files (tests/data/helm, see its NOTICE).

use std::path::Path;

use lariat_helm::chart::read_values;
use lariat_helm::{Bounds, Capabilities, Chart, Release, manifests, render};
use serde_json::{Map, Value, json};

mod common;
use common::load_dir;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/helm");

#[derive(Default)]
struct Case {
    chart: &'static str,
    golden: &'static str,
    /// `--set key.path=value`
    set: Vec<(&'static str, Value)>,
    /// `--values`/`-f`, relative to the chart
    values_file: Option<&'static str>,
    kube_version: Option<&'static str>,
    api_versions: Vec<&'static str>,
    include_crds: bool,
    skip_tests: bool,
    skip_schema_validation: bool,
}

/// `helm template` as the golden case runs it, or its error.
fn template(case: &Case) -> Result<String, String> {
    let chart_dir = Path::new(DATA).join("testcharts").join(case.chart);
    let chart = Chart::load(&load_dir(&chart_dir)).map_err(|e| e.to_string())?;
    let mut values = Map::new();
    if let Some(file) = case.values_file {
        let data = std::fs::read(chart_dir.join(file)).unwrap();
        values = read_values(&data, file).map_err(|e| e.to_string())?;
    }
    for (path, value) in &case.set {
        lariat_helm::values::set_path(&mut values, path, value.clone());
    }
    let mut capabilities = Capabilities::default();
    if let Some(version) = case.kube_version {
        capabilities.kube_version = format!("v{version}");
    }
    capabilities
        .api_versions
        .extend(case.api_versions.iter().map(|v| v.to_string()));
    let release = Release {
        name: "release-name".into(),
        namespace: "default".into(),
        revision: 1,
        is_upgrade: false,
        skip_schema_validation: case.skip_schema_validation,
    };
    let rendered = render(
        &chart,
        &values,
        &release,
        &capabilities,
        None,
        &Bounds::default(),
    )
    .map_err(|e| e.to_string())?;
    manifests::template_output(&rendered, case.include_crds, case.skip_tests)
        .map_err(|e| e.to_string())
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            chart: "subchart",
            golden: "template.txt",
            ..Case::default()
        },
        Case {
            chart: "subchart",
            golden: "template-set.txt",
            set: vec![("service.name", json!("apache"))],
            ..Case::default()
        },
        Case {
            chart: "subchart",
            golden: "template-values-files.txt",
            values_file: Some("charts/subchartA/values.yaml"),
            ..Case::default()
        },
        Case {
            chart: "subchart",
            golden: "template-with-kube-version.txt",
            kube_version: Some("1.16.0"),
            ..Case::default()
        },
        Case {
            chart: "subchart",
            golden: "template-with-api-version.txt",
            api_versions: vec!["helm.k8s.io/test", "helm.k8s.io/test2"],
            ..Case::default()
        },
        Case {
            chart: "subchart",
            golden: "template-with-crds.txt",
            include_crds: true,
            ..Case::default()
        },
        Case {
            chart: "subchart",
            golden: "template-skip-tests.txt",
            skip_tests: true,
            ..Case::default()
        },
        Case {
            chart: "object-order",
            golden: "object-order.txt",
            ..Case::default()
        },
        Case {
            chart: "issue-9027",
            golden: "issue-9027.txt",
            ..Case::default()
        },
        Case {
            chart: "subchart",
            golden: "template-subchart-cm.txt",
            set: vec![
                ("configmap.enabled", json!(true)),
                ("subchartb.enabled", json!(true)),
            ],
            ..Case::default()
        },
        Case {
            chart: "subchart",
            golden: "template-subchart-cm-set.txt",
            set: vec![
                ("configmap.enabled", json!(true)),
                ("subchartb.enabled", json!(true)),
                ("configmap.value", json!("baz")),
            ],
            ..Case::default()
        },
        Case {
            chart: "subchart",
            golden: "template-subchart-cm-set-file.txt",
            values_file: Some("extra_values.yaml"),
            ..Case::default()
        },
        Case {
            chart: "chart-with-template-lib-dep",
            golden: "template-chart-with-template-lib-dep.txt",
            ..Case::default()
        },
        // The same library chart, packaged: charts/common-0.0.5.tgz.
        Case {
            chart: "chart-with-template-lib-archive-dep",
            golden: "template-chart-with-template-lib-archive-dep.txt",
            ..Case::default()
        },
    ]
}

#[test]
fn helm_template_golden_files_match_byte_for_byte() {
    let mut failures = Vec::new();
    for case in cases() {
        let expected =
            std::fs::read_to_string(Path::new(DATA).join("output").join(case.golden)).unwrap();
        match template(&case) {
            Ok(actual) if actual == expected => {}
            Ok(actual) => failures.push(format!(
                "{} ({}):\n{}",
                case.golden,
                case.chart,
                first_difference(&expected, &actual)
            )),
            Err(e) => failures.push(format!("{} ({}): error {e}", case.golden, case.chart)),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} golden files differ:\n\n{}",
        failures.len(),
        cases().len(),
        failures.join("\n\n")
    );
}

fn first_difference(expected: &str, actual: &str) -> String {
    for (i, (e, a)) in expected.lines().zip(actual.lines()).enumerate() {
        if e != a {
            return format!("line {}: expected {e:?}\n         actual   {a:?}", i + 1);
        }
    }
    format!(
        "lengths differ: expected {} lines, actual {}",
        expected.lines().count(),
        actual.lines().count()
    )
}

#[test]
fn a_chart_type_helm_does_not_know_is_refused() {
    let case = Case {
        chart: "lib-chart",
        ..Case::default()
    };
    let error = template(&case).unwrap_err();
    let expected =
        std::fs::read_to_string(Path::new(DATA).join("output/template-lib-chart.txt")).unwrap();
    let expected = expected.trim().trim_start_matches("Error: ");
    assert!(error.contains(expected), "{error}");
}

/// Helm's install cases with `values.schema.json` (`pkg/cmd/install_test.go`): the values
/// that meet the schemas render, and the others fail with Helm's message, byte for byte.
#[test]
fn values_are_checked_against_each_charts_schema_with_helms_messages() {
    let parent = "chart-with-schema-and-subchart";
    let cases = [
        (
            Case {
                chart: "chart-with-schema",
                ..Case::default()
            },
            None,
        ),
        (
            Case {
                chart: "chart-with-schema-negative",
                ..Case::default()
            },
            Some("schema-negative.txt"),
        ),
        (
            Case {
                chart: "chart-with-schema",
                values_file: Some("extra-values.yaml"),
                ..Case::default()
            },
            Some("schema-negative.txt"),
        ),
        (
            Case {
                chart: "chart-with-schema",
                set: vec![("age", json!(-5))],
                ..Case::default()
            },
            Some("schema-negative-cli.txt"),
        ),
        (
            Case {
                chart: parent,
                ..Case::default()
            },
            Some("subchart-schema-negative.txt"),
        ),
        (
            Case {
                chart: parent,
                set: vec![
                    ("lastname", json!("doe")),
                    ("subchart-with-schema.age", json!(25)),
                ],
                ..Case::default()
            },
            None,
        ),
        (
            Case {
                chart: parent,
                set: vec![
                    ("lastname", json!("doe")),
                    ("subchart-with-schema.age", json!(-25)),
                ],
                ..Case::default()
            },
            Some("subchart-schema-cli-negative.txt"),
        ),
        (
            Case {
                chart: parent,
                set: vec![
                    ("lastname", json!("doe")),
                    ("subchart-with-schema.age", json!(-25)),
                ],
                skip_schema_validation: true,
                ..Case::default()
            },
            None,
        ),
    ];
    for (case, golden) in cases {
        let result = template(&case);
        match golden {
            None => assert!(result.is_ok(), "{}: {result:?}", case.chart),
            Some(golden) => {
                let expected =
                    std::fs::read_to_string(Path::new(DATA).join("output").join(golden)).unwrap();
                let expected = expected
                    .strip_prefix("Error: INSTALLATION FAILED: ")
                    .unwrap()
                    .strip_suffix('\n')
                    .unwrap();
                assert_eq!(result.unwrap_err(), expected, "{golden}");
            }
        }
    }
}
