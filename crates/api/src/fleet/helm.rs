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
    /// The chart: a directory of the bundle (`./chart`); by default the bundle's own
    /// directory when it holds a `Chart.yaml`. Helm repositories and `oci://` are refused
    /// for now, by name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chart: Option<String>,
    /// An HTTPS Helm repository to fetch `chart` from (refused for now).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repo: Option<String>,
    /// The chart's version in `repo` (refused for now).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The release's name; by default the bundle's, as Fleet names it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 53),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub release_name: Option<String>,
    /// Values over the chart's `values.yaml` (and over `valuesFiles`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<crate::schema::PreserveUnknownObject>")]
    pub values: Option<Map<String, Value>>,
    /// Files of the bundle to read values from, in order, under `values`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub values_files: Option<Vec<String>>,
    /// How many release revisions to keep in the cluster (Helm's `--history-max`); 0 keeps all.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub max_history: i32,
    /// Deploy over objects another release or no release owns.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub take_ownership: bool,
    /// How long a render and its install may take, in seconds.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub timeout_seconds: i32,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}
