//! Helm charts rendered as Helm renders them, for Fleet bundles that deploy a chart.
//!
//! - [`chart`]: a chart and its subcharts loaded from their files.
//! - [`values`]: the user's values coalesced over each chart's defaults; subcharts
//!   switched on and off by `condition` and `tags`.
//! - [`schema`]: the values checked against each chart's `values.schema.json`.
//! - [`engine`]: every template rendered with Go's `text/template` semantics (gtmpl-ng)
//!   and Helm's functions ([`functions`]), `.Files` and `.Capabilities` ([`files`]).
//! - [`manifests`]: the rendered documents split, hooks set apart, kinds in Helm's
//!   install order, and `helm template`'s text.
//! - `sprig`: Sprig's functions where gtmpl-ng's differ from Sprig's.
//! - [`goyaml`]: `toYaml` byte for byte as Go's YAML library writes it.

pub mod archive;
pub mod chart;
pub mod engine;
mod files;
pub mod functions;
pub mod goyaml;
pub mod manifests;
pub mod schema;
pub mod semver;
mod sprig;
pub mod values;

pub use chart::Chart;
pub use engine::{Bounds, Capabilities, Release, Rendered, render};

/// Why a chart could not be loaded or rendered; each names the file it is about.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum HelmError {
    #[error("{file}: {message}")]
    Chart { file: String, message: String },
    #[error("{message}")]
    Template { message: String },
}
