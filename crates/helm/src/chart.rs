//! A chart as Helm loads one from its files: `Chart.yaml`, `values.yaml`, `templates/`,
//! subcharts under `charts/`, and every other file as `.Files` (the CRDs under `crds/`
//! among them).

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use crate::HelmError;

/// How deep subcharts may nest (`charts/a/charts/b/...`); real charts nest two or three.
pub const MAX_SUBCHART_DEPTH: usize = 8;

/// One file of a chart, by its path inside the chart.
#[derive(Clone, Debug, PartialEq)]
pub struct File {
    pub name: String,
    pub data: Vec<u8>,
}

/// A loaded chart and its subcharts.
#[derive(Clone, Debug)]
pub struct Chart {
    pub metadata: Metadata,
    /// `values.yaml`, as read.
    pub values: Map<String, Value>,
    /// `values.schema.json`, if the chart has one.
    pub schema: Option<Vec<u8>>,
    pub templates: Vec<File>,
    /// Every file that is not metadata, values, a template or a subchart's.
    pub files: Vec<File>,
    pub dependencies: Vec<Chart>,
}

/// `Chart.yaml`. Strings that YAML reads as numbers (`appVersion: 1.10`) stay strings.
/// Written as Helm writes its metadata to a release: its JSON names, empty fields left out.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Metadata {
    #[serde(deserialize_with = "scalar_string")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(deserialize_with = "scalar_string")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(deserialize_with = "scalar_string")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub version: String,
    #[serde(deserialize_with = "scalar_string")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kube_version: String,
    #[serde(deserialize_with = "scalar_string")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub description: String,
    #[serde(rename = "type", deserialize_with = "scalar_string")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub chart_type: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub keywords: Vec<String>,
    #[serde(deserialize_with = "scalar_string")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub home: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dependencies: Vec<Dependency>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub maintainers: Vec<Maintainer>,
    #[serde(deserialize_with = "scalar_string")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub icon: String,
    #[serde(deserialize_with = "scalar_string")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub app_version: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub deprecated: bool,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    #[serde(deserialize_with = "scalar_string")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub condition: String,
    #[serde(deserialize_with = "scalar_string")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub tags: String,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Maintainer {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub email: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub url: String,
}

/// An entry of `dependencies:` in `Chart.yaml`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Dependency {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(deserialize_with = "scalar_string")]
    #[serde(skip_serializing_if = "String::is_empty")]
    pub version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub repository: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub condition: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[serde(rename = "import-values")]
    pub import_values: Vec<Value>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub alias: String,
}

/// A scalar as its YAML text: `appVersion: 1.10` is "1.10", as sigs.k8s.io/yaml gives a
/// string field, not the float 1.1.
fn scalar_string<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(deserializer)?.unwrap_or_default())
}

impl Chart {
    /// Loads a chart from its files, keyed by path inside the chart (`Chart.yaml`,
    /// `templates/deployment.yaml`, `charts/sub/Chart.yaml`).
    /// Packaged subcharts (`charts/*.tgz`) are unpacked, within [`crate::archive::Budget`].
    pub fn load(files: &BTreeMap<String, Vec<u8>>) -> Result<Chart, HelmError> {
        Chart::load_at(files, "", &mut crate::archive::Budget::default())
    }

    /// Loads a packaged chart (`name`, a `.tgz` as `helm package` writes it).
    pub fn load_archive(name: &str, archive: &[u8]) -> Result<Chart, HelmError> {
        let mut budget = crate::archive::Budget::default();
        let files = crate::archive::unpack(name, archive, &mut budget)?;
        Chart::load_at(&files, &format!("{name}/"), &mut budget)
    }

    fn load_at(
        files: &BTreeMap<String, Vec<u8>>,
        at: &str,
        budget: &mut crate::archive::Budget,
    ) -> Result<Chart, HelmError> {
        // Each level copies the files below it: a chart nesting `charts/a/charts/a/...`
        // would pay its size once per level.
        if at.matches("charts/").count() > MAX_SUBCHART_DEPTH {
            return Err(HelmError::Chart {
                file: format!("{at}Chart.yaml"),
                message: format!("subcharts nest more than {MAX_SUBCHART_DEPTH} deep"),
            });
        }
        let chart_yaml = files.get("Chart.yaml").ok_or_else(|| HelmError::Chart {
            file: format!("{at}Chart.yaml"),
            message: "a chart needs a Chart.yaml".into(),
        })?;
        let metadata: Metadata = parse_yaml(chart_yaml, &format!("{at}Chart.yaml"))?;
        if metadata.name.is_empty() {
            return Err(HelmError::Chart {
                file: format!("{at}Chart.yaml"),
                message: "name is required".into(),
            });
        }
        if !matches!(metadata.chart_type.as_str(), "" | "application" | "library") {
            return Err(HelmError::Chart {
                file: format!("{at}Chart.yaml"),
                message: "validation: chart.metadata.type must be application or library".into(),
            });
        }
        let values = match files.get("values.yaml") {
            Some(data) => read_values(data, &format!("{at}values.yaml"))?,
            None => Map::new(),
        };
        let mut chart = Chart {
            metadata,
            values,
            schema: files.get("values.schema.json").cloned(),
            templates: Vec::new(),
            files: Vec::new(),
            dependencies: Vec::new(),
        };
        // A subchart is a directory under charts/ or an archive there.
        let mut subcharts: BTreeMap<&str, BTreeMap<String, Vec<u8>>> = BTreeMap::new();
        let mut archives: BTreeMap<&str, &[u8]> = BTreeMap::new();
        for (name, data) in files {
            if let Some(rest) = name.strip_prefix("charts/") {
                // Helm skips subcharts whose names start with `_` or `.`.
                if rest.starts_with(['_', '.']) {
                    continue;
                }
                match rest.split_once('/') {
                    Some((sub, path)) => {
                        subcharts
                            .entry(sub)
                            .or_default()
                            .insert(path.to_string(), data.clone());
                    }
                    None if rest.ends_with(".tgz") || rest.ends_with(".tar.gz") => {
                        archives.insert(rest, data);
                    }
                    None => {}
                }
                continue;
            }
            let file = File {
                name: name.clone(),
                data: data.clone(),
            };
            match name.as_str() {
                "Chart.yaml" | "values.yaml" | "values.schema.json" | "Chart.lock"
                | "requirements.yaml" | "requirements.lock" => {}
                // Helm ignores hidden files under templates/ (`templates/.?*`).
                _ if name.starts_with("templates/") => {
                    if !name
                        .rsplit('/')
                        .next()
                        .is_some_and(|base| base.starts_with('.'))
                    {
                        chart.templates.push(file);
                    }
                }
                _ => chart.files.push(file),
            }
        }
        for (sub, sub_files) in subcharts {
            chart.dependencies.push(Chart::load_at(
                &sub_files,
                &format!("{at}charts/{sub}/"),
                budget,
            )?);
        }
        for (archive, data) in archives {
            let name = format!("{at}charts/{archive}");
            let sub_files = crate::archive::unpack(&name, data, budget)?;
            chart
                .dependencies
                .push(Chart::load_at(&sub_files, &format!("{name}/"), budget)?);
        }
        Ok(chart)
    }

    pub fn name(&self) -> &str {
        &self.metadata.name
    }

    /// The dependencies `Chart.yaml` lists that `charts/` does not hold (by name, as Helm's
    /// `CheckDependencies` looks for them).
    pub fn missing_dependencies(&self) -> Vec<&Dependency> {
        self.metadata
            .dependencies
            .iter()
            .filter(|d| !self.dependencies.iter().any(|sub| sub.name() == d.name))
            .collect()
    }

    pub fn is_library(&self) -> bool {
        self.metadata.chart_type == "library"
    }

    /// The chart's CRDs (`crds/*.yaml`, `*.yml`, `*.json`), as Helm installs them first.
    pub fn crds(&self) -> impl Iterator<Item = &File> {
        self.files.iter().filter(|f| {
            f.name.starts_with("crds/")
                && [".yaml", ".yml", ".json"]
                    .iter()
                    .any(|ext| f.name.ends_with(ext))
        })
    }

    /// `.Chart` as templates see it: Helm's metadata under its Go field names.
    pub(crate) fn metadata_value(&self, is_root: bool) -> Value {
        let m = &self.metadata;
        let mut map = Map::new();
        let strings = [
            ("Name", &m.name),
            ("Home", &m.home),
            ("Version", &m.version),
            ("Description", &m.description),
            ("Icon", &m.icon),
            ("APIVersion", &m.api_version),
            ("Condition", &m.condition),
            ("Tags", &m.tags),
            ("AppVersion", &m.app_version),
            ("KubeVersion", &m.kube_version),
            ("Type", &m.chart_type),
        ];
        for (key, value) in strings {
            map.insert(key.into(), Value::String(value.clone()));
        }
        map.insert("Sources".into(), serde_json::json!(m.sources));
        map.insert("Keywords".into(), serde_json::json!(m.keywords));
        map.insert("Deprecated".into(), Value::Bool(m.deprecated));
        map.insert("Annotations".into(), serde_json::json!(m.annotations));
        let maintainers = m
            .maintainers
            .iter()
            .map(|x| serde_json::json!({"Name": x.name, "Email": x.email, "URL": x.url}))
            .collect();
        map.insert("Maintainers".into(), Value::Array(maintainers));
        let dependencies = m
            .dependencies
            .iter()
            .map(|d| {
                serde_json::json!({"Name": d.name, "Version": d.version, "Repository": d.repository,
                    "Condition": d.condition, "Tags": d.tags, "Enabled": true,
                    "ImportValues": d.import_values, "Alias": d.alias})
            })
            .collect();
        map.insert("Dependencies".into(), Value::Array(dependencies));
        map.insert("IsRoot".into(), Value::Bool(is_root));
        Value::Object(map)
    }
}

/// Reads a values file: a YAML mapping (an empty file is no values).
pub fn read_values(data: &[u8], file: &str) -> Result<Map<String, Value>, HelmError> {
    match parse_yaml::<Value>(data, file)? {
        Value::Object(map) => Ok(map),
        Value::Null => Ok(Map::new()),
        _ => Err(HelmError::Chart {
            file: file.into(),
            message: "values must be a YAML mapping".into(),
        }),
    }
}

pub(crate) fn parse_yaml<T: serde::de::DeserializeOwned>(
    data: &[u8],
    file: &str,
) -> Result<T, HelmError> {
    if data.iter().all(u8::is_ascii_whitespace) {
        return serde_json::from_value(Value::Null)
            .or_else(|_| serde_json::from_value(Value::Object(Map::new())))
            .map_err(|e| HelmError::Chart {
                file: file.into(),
                message: e.to_string(),
            });
    }
    serde_yaml_ng::from_slice(data).map_err(|e| HelmError::Chart {
        file: file.into(),
        message: e.to_string(),
    })
}
