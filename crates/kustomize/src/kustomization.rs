//! A kustomization file, the fields lariat builds; any other field kustomize knows is
//! refused by name, and a field it does not know as kustomize refuses it.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::Error;

/// What a kustomization is: a `Kustomization`, or a `Component` included by one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Kustomization,
    Component,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Kustomization {
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub resources: Vec<String>,
    #[serde(default)]
    pub bases: Vec<String>,
    #[serde(default)]
    pub components: Vec<String>,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub name_prefix: Option<String>,
    #[serde(default)]
    pub name_suffix: Option<String>,
    #[serde(default)]
    pub common_labels: BTreeMap<String, Scalar>,
    #[serde(default)]
    pub labels: Vec<Label>,
    #[serde(default)]
    pub common_annotations: BTreeMap<String, Scalar>,
    #[serde(default)]
    pub images: Vec<Image>,
    /// kustomize's old name for `images`.
    #[serde(default)]
    pub image_tags: Vec<Image>,
    #[serde(default)]
    pub replicas: Vec<Replica>,
    #[serde(default)]
    pub patches: Vec<Patch>,
    #[serde(default)]
    pub patches_strategic_merge: Vec<String>,
    #[serde(default)]
    pub patches_json6902: Vec<Patch>,
    #[serde(default)]
    pub config_map_generator: Vec<GeneratorArgs>,
    #[serde(default)]
    pub secret_generator: Vec<GeneratorArgs>,
    #[serde(default)]
    pub generator_options: Option<GeneratorOptions>,
}

/// A label or annotation value: YAML may write `1` or `true` where kustomize reads text.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum Scalar {
    Text(String),
    Number(serde_json::Number),
    Bool(bool),
}

impl Scalar {
    pub fn text(&self) -> String {
        match self {
            Scalar::Text(text) => text.clone(),
            Scalar::Number(number) => number.to_string(),
            Scalar::Bool(b) => b.to_string(),
        }
    }
}

/// As JSON values, for writing into objects.
pub(crate) fn pairs(map: &BTreeMap<String, Scalar>) -> serde_json::Map<String, Value> {
    map.iter()
        .map(|(k, v)| (k.clone(), Value::String(v.text())))
        .collect()
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Label {
    #[serde(default)]
    pub pairs: BTreeMap<String, Scalar>,
    #[serde(default)]
    pub include_selectors: bool,
    #[serde(default)]
    pub include_templates: bool,
    #[serde(default)]
    pub include_volume_claim_templates: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Image {
    pub name: String,
    #[serde(default)]
    pub new_name: Option<String>,
    #[serde(default)]
    pub new_tag: Option<Scalar>,
    #[serde(default)]
    pub tag_suffix: Option<String>,
    #[serde(default)]
    pub digest: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Replica {
    pub name: String,
    pub count: i64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Patch {
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub patch: Option<String>,
    #[serde(default)]
    pub target: Option<Selector>,
    #[serde(default)]
    pub options: Option<PatchOptions>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Selector {
    #[serde(default)]
    pub group: Option<String>,
    #[serde(default)]
    pub version: Option<String>,
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub label_selector: Option<String>,
    #[serde(default)]
    pub annotation_selector: Option<String>,
}

#[derive(Debug, Default, Clone, Copy, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct PatchOptions {
    #[serde(default)]
    pub allow_name_change: bool,
    #[serde(default)]
    pub allow_kind_change: bool,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct GeneratorArgs {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub behavior: Option<String>,
    #[serde(default)]
    pub literals: Vec<String>,
    #[serde(default)]
    pub files: Vec<String>,
    #[serde(default)]
    pub envs: Vec<String>,
    #[serde(default)]
    pub env: Option<String>,
    #[serde(default)]
    pub options: Option<GeneratorOptions>,
    /// A Secret's type (`Opaque` by default); refused for a ConfigMap.
    #[serde(default, rename = "type")]
    pub secret_type: Option<String>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct GeneratorOptions {
    #[serde(default)]
    pub labels: BTreeMap<String, Scalar>,
    #[serde(default)]
    pub annotations: BTreeMap<String, Scalar>,
    #[serde(default)]
    pub disable_name_suffix_hash: Option<bool>,
    #[serde(default)]
    pub immutable: Option<bool>,
}

/// Fields of a kustomization kustomize knows and lariat does not build, with why.
const UNSUPPORTED: &[(&str, &str)] = &[
    (
        "vars",
        "vars are deprecated by kustomize; use replacements or patches",
    ),
    (
        "replacements",
        "replacements are not built by lariat yet; use patches",
    ),
    (
        "helmCharts",
        "use the bundle's helm: options (fleet.yaml) to deploy a chart",
    ),
    (
        "helmGlobals",
        "use the bundle's helm: options (fleet.yaml) to deploy a chart",
    ),
    (
        "helmChartInflationGenerator",
        "use the bundle's helm: options (fleet.yaml) to deploy a chart",
    ),
    ("generators", "generator plugins are disabled, as in Fleet"),
    (
        "transformers",
        "transformer plugins are disabled, as in Fleet",
    ),
    ("validators", "validator plugins are disabled, as in Fleet"),
    (
        "configurations",
        "custom transformer configurations are not read by lariat yet",
    ),
    (
        "crds",
        "CRD-declared name references are not read by lariat yet",
    ),
    (
        "openapi",
        "custom OpenAPI schemas are not read by lariat yet",
    ),
    (
        "sortOptions",
        "lariat applies objects in its own order; sortOptions has no effect there",
    ),
    (
        "buildMetadata",
        "build metadata annotations are not written by lariat",
    ),
];

/// Removes every null field (a key written with nothing after it), at any depth.
fn drop_nulls(value: &mut Value) {
    let mut pending = vec![value];
    while let Some(value) = pending.pop() {
        match value {
            Value::Object(map) => {
                map.retain(|_, v| !v.is_null());
                pending.extend(map.values_mut());
            }
            Value::Array(items) => pending.extend(items.iter_mut()),
            _ => {}
        }
    }
}

/// Reads a kustomization file, and says which it is.
pub(crate) fn parse(file: &str, content: &[u8]) -> Result<(Kind, Kustomization), Error> {
    let fail = |message: String| Error::new(file, message);
    let text = std::str::from_utf8(content).map_err(|_| fail("is not UTF-8 text".into()))?;
    let value = match lariat_yaml::documents(text).into_iter().next() {
        Some(document) => document.map_err(|e| fail(format!("is not YAML: {e}")))?,
        None => Value::Null,
    };
    let value = match value {
        Value::Null => Value::Object(Default::default()),
        Value::Object(mut map) => {
            // Read by kustomize only to know what the file is.
            map.remove("apiVersion");
            map.remove("metadata");
            let mut value = Value::Object(map);
            // `resources:` with every entry commented out is an empty list, as in kustomize.
            drop_nulls(&mut value);
            value
        }
        _ => return Err(fail("is not a mapping of kustomization fields".into())),
    };
    for (field, why) in UNSUPPORTED {
        if value.get(field).is_some_and(|v| !v.is_null()) {
            return Err(fail(format!("{field} is not supported by lariat: {why}")));
        }
    }
    let kustomization: Kustomization =
        serde_json::from_value(value).map_err(|e| fail(format!("invalid kustomization: {e}")))?;
    let kind = match kustomization.kind.as_deref() {
        None | Some("") | Some("Kustomization") => Kind::Kustomization,
        Some("Component") => Kind::Component,
        Some(other) => {
            return Err(fail(format!(
                "kind {other:?} is not a kustomization (Kustomization or Component)"
            )));
        }
    };
    Ok((kind, kustomization))
}
