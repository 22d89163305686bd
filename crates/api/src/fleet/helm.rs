//! Fleet's `helm` options: a bundle that deploys a Helm chart, rendered and installed by the
//! agent of each cluster as a Helm release of that cluster (Fleet's `HelmOptions`, the fields
//! lariat implements).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// How a bundle's chart is rendered and released.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HelmOptions {
    /// The chart: a directory of the bundle (`./chart`), by default the bundle's own
    /// directory when it holds a `Chart.yaml`; a chart's name in `repo`; or a chart's
    /// `oci://` reference.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chart: Option<String>,
    /// An HTTPS Helm repository (or an `oci://` registry path) to fetch `chart` from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repo: Option<String>,
    /// The chart's version (or version range) in `repo`; the newest stable by default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The release's name; by default the bundle's, as Fleet names it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 53),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub release_name: Option<String>,
    /// Values over the chart's `values.yaml` (and over `valuesFiles`). Strings may be Go
    /// templates in `${ }` (`${ .ClusterLabels.region }`), rendered for each cluster, and a
    /// string `global.fleet.clusterLabels.<label>` becomes that label's value, as in Fleet.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::schema::PreserveUnknownObject>")]
    pub values: Option<Map<String, Value>>,
    /// Values each given as a Go template in `${ }`, rendered for each cluster and read as
    /// YAML, each replacing the key of the same name in `values`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub template_values: Option<std::collections::BTreeMap<String, String>>,
    /// Take `values` as they are: no `${ }` templates, no cluster labels.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disable_pre_process: bool,
    /// Files of the bundle to read values from, in order, over `values` (read when the
    /// bundle is, so a BundleDeployment's `values` already hold them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub values_files: Option<Vec<String>>,
    /// ConfigMaps and Secrets of the cluster to read values from when deploying, over the
    /// rest (a Secret's after a ConfigMap's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub values_from: Option<Vec<ValuesFrom>>,
    /// How many release revisions to keep in the cluster (Helm's `--history-max`); 0 keeps
    /// Fleet's default, 2.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub max_history: i32,
    /// Replace what the API will not change in place: an object whose update is refused for
    /// an immutable field (a Deployment's selector, a Job's template) is deleted and created
    /// again, as Helm's `--force` replaces it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub force: bool,
    /// Roll a failed upgrade back to the last deployed revision, and uninstall a failed
    /// install, as Helm's `--atomic` (`--rollback-on-failure`) does: the release's objects
    /// must be ready within `timeoutSeconds` (Helm's five minutes by default), its hooks must
    /// succeed, and the cluster must take every object.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub atomic: bool,
    /// Deploy over objects another release or no release owns.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub take_ownership: bool,
    /// Use the chart's `charts/` as it is: dependencies `Chart.yaml` lists and `charts/`
    /// lacks are not fetched from their repositories (the render then fails, as Helm's).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disable_dependency_update: bool,
    /// Fleet's: wait for the chart's Jobs to complete before it is Ready. lariat always does
    /// (a Job is ready once complete), so the field changes nothing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub wait_for_jobs: bool,
    /// Fleet's: no DNS lookups in templates (`getHostByName`). lariat never makes them (it
    /// answers ""), so the field changes nothing.
    #[serde(
        default,
        rename = "disableDNS",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub disable_dns: bool,
    /// Render without checking the values against the chart's `values.schema.json`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub skip_schema_validation: bool,
    /// How long a render may take, and each hook, and (with `atomic`) the wait for the
    /// release's objects to be ready, in seconds.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub timeout_seconds: i32,
}

impl HelmOptions {
    /// The names of the fields, as `fleet.yaml` spells them (from the type's own schema, so
    /// that a field added here is known everywhere that checks names).
    pub fn field_names() -> Vec<String> {
        let schema = schemars::SchemaGenerator::default().into_root_schema_for::<HelmOptions>();
        schema
            .get("properties")
            .and_then(|p| p.as_object())
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default()
    }
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

/// Values read from the cluster a bundle deploys to (Fleet's `ValuesFrom`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValuesFrom {
    /// A key of a ConfigMap holding values as YAML.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_map_key_ref: Option<KeyRef>,
    /// A key of a Secret holding values as YAML.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<KeyRef>,
}

/// A key of a ConfigMap or Secret in the cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyRef {
    /// Its name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its namespace; by default the release's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The key; by default `values.yaml`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}
