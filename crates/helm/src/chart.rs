//! A chart as Helm loads one from its files: `Chart.yaml`, `values.yaml`, `templates/`,
//! subcharts under `charts/`, and every other file as `.Files` (the CRDs under `crds/`
//! among them).

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use crate::HelmError;

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
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Metadata {
    #[serde(deserialize_with = "scalar_string")]
    pub api_version: String,
    #[serde(deserialize_with = "scalar_string")]
    pub name: String,
    #[serde(deserialize_with = "scalar_string")]
    pub version: String,
    #[serde(deserialize_with = "scalar_string")]
    pub kube_version: String,
    #[serde(deserialize_with = "scalar_string")]
    pub description: String,
    #[serde(rename = "type", deserialize_with = "scalar_string")]
    pub chart_type: String,
    pub keywords: Vec<String>,
    #[serde(deserialize_with = "scalar_string")]
    pub home: String,
    pub sources: Vec<String>,
    pub dependencies: Vec<Dependency>,
    pub maintainers: Vec<Maintainer>,
    #[serde(deserialize_with = "scalar_string")]
    pub icon: String,
    #[serde(deserialize_with = "scalar_string")]
    pub app_version: String,
    pub deprecated: bool,
    pub annotations: BTreeMap<String, String>,
    #[serde(deserialize_with = "scalar_string")]
    pub condition: String,
    #[serde(deserialize_with = "scalar_string")]
    pub tags: String,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Maintainer {
    pub name: String,
    pub email: String,
    pub url: String,
}

/// An entry of `dependencies:` in `Chart.yaml`.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Dependency {
    pub name: String,
    #[serde(deserialize_with = "scalar_string")]
    pub version: String,
    pub repository: String,
    pub condition: String,
    pub tags: Vec<String>,
    pub import_values: Vec<Value>,
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
    pub fn load(files: &BTreeMap<String, Vec<u8>>) -> Result<Chart, HelmError> {
        Chart::load_at(files, "")
    }

    fn load_at(files: &BTreeMap<String, Vec<u8>>, at: &str) -> Result<Chart, HelmError> {
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
        let mut subcharts: BTreeMap<&str, BTreeMap<String, Vec<u8>>> = BTreeMap::new();
        for (name, data) in files {
            if let Some(rest) = name.strip_prefix("charts/") {
                match rest.split_once('/') {
                    Some((sub, path)) => {
                        subcharts
                            .entry(sub)
                            .or_default()
                            .insert(path.to_string(), data.clone());
                    }
                    None if rest.ends_with(".tgz") || rest.ends_with(".tar.gz") => {
                        return Err(HelmError::Chart {
                            file: format!("{at}{name}"),
                            message: "packaged subcharts are not supported yet: unpack it into charts/ as a directory".into(),
                        });
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
                _ if name.starts_with("templates/") => chart.templates.push(file),
                _ => chart.files.push(file),
            }
        }
        for (sub, sub_files) in subcharts {
            chart
                .dependencies
                .push(Chart::load_at(&sub_files, &format!("{at}charts/{sub}/"))?);
        }
        Ok(chart)
    }

    pub fn name(&self) -> &str {
        &self.metadata.name
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
