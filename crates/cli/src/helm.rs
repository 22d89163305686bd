//! `lariat helm template`: a chart rendered as a Fleet bundle's chart will be, printed as
//! `helm template` prints it, so a chart can be checked against lariat before it is pushed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use lariat_helm::chart::read_values;
use lariat_helm::{Bounds, Capabilities, Chart, Release, manifests, render};
use serde_json::{Map, Value};

/// A chart directory larger than this is refused before it is read further.
const MAX_CHART_BYTES: u64 = 64 << 20;
const MAX_CHART_FILES: usize = 10_000;

#[derive(Subcommand)]
pub enum HelmCommand {
    /// Render a chart directory locally, as `helm template` does.
    Template(TemplateArgs),
}

#[derive(Args)]
pub struct TemplateArgs {
    /// The chart's directory (the one holding Chart.yaml).
    chart: PathBuf,
    /// The release name.
    #[arg(long, default_value = "release-name")]
    name: String,
    /// The release namespace.
    #[arg(long, short = 'n', default_value = "default")]
    namespace: String,
    /// A values file, over the chart's values.yaml (repeatable; later ones win).
    #[arg(long = "values", short = 'f')]
    values: Vec<PathBuf>,
    /// A value on the command line, `key.path=value` (repeatable; wins over files).
    #[arg(long)]
    set: Vec<String>,
    /// The Kubernetes version to render for.
    #[arg(long, default_value = "1.20.0")]
    kube_version: String,
    /// An API version the cluster serves beyond the built-in ones (repeatable).
    #[arg(long = "api-versions", short = 'a')]
    api_versions: Vec<String>,
    /// Print the chart's CRDs (crds/) first.
    #[arg(long)]
    include_crds: bool,
    /// Leave out test hooks.
    #[arg(long)]
    skip_tests: bool,
    /// Render without checking the values against values.schema.json.
    #[arg(long)]
    skip_schema_validation: bool,
}

pub fn run(command: HelmCommand) -> anyhow::Result<()> {
    let HelmCommand::Template(args) = command;
    let chart = Chart::load(&read_chart(&args.chart)?)?;
    let mut values = Map::new();
    for file in &args.values {
        let data = std::fs::read(file)
            .with_context(|| format!("cannot read values file {}", file.display()))?;
        let layer = read_values(&data, &file.display().to_string())?;
        lariat_helm::values::merge_over(&mut values, layer);
    }
    for assignment in &args.set {
        let Some((path, text)) = assignment.split_once('=') else {
            bail!(
                "--set {assignment:?}: expected key.path=value, for example --set image.tag=1.2.3"
            );
        };
        lariat_helm::values::set_path(&mut values, path, parse_scalar(text));
    }
    let mut capabilities = Capabilities {
        kube_version: format!("v{}", args.kube_version.trim_start_matches('v')),
        ..Capabilities::default()
    };
    capabilities.api_versions.extend(
        args.api_versions
            .iter()
            .flat_map(|v| v.split(','))
            .map(str::to_string),
    );
    let release = Release {
        name: args.name,
        namespace: args.namespace,
        revision: 1,
        is_upgrade: false,
        skip_schema_validation: args.skip_schema_validation,
    };
    let rendered = render(
        &chart,
        &values,
        &release,
        &capabilities,
        None,
        &Bounds::default(),
    )?;
    print!(
        "{}",
        manifests::template_output(&rendered, args.include_crds, args.skip_tests)?
    );
    Ok(())
}

/// The chart's files by path inside it, bounded in count and size.
fn read_chart(dir: &Path) -> anyhow::Result<BTreeMap<String, Vec<u8>>> {
    if !dir.join("Chart.yaml").is_file() {
        bail!(
            "{} has no Chart.yaml: give the directory of a Helm chart",
            dir.display()
        );
    }
    let mut files = BTreeMap::new();
    let mut total = 0u64;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        for entry in std::fs::read_dir(&current)
            .with_context(|| format!("cannot read {}", current.display()))?
        {
            let entry = entry?;
            let kind = entry.file_type()?;
            let path = entry.path();
            if kind.is_dir() {
                pending.push(path);
            } else if kind.is_file() {
                total += entry.metadata()?.len();
                if total > MAX_CHART_BYTES || files.len() >= MAX_CHART_FILES {
                    bail!(
                        "{} is larger than a chart may be ({MAX_CHART_BYTES} bytes, {MAX_CHART_FILES} files)",
                        dir.display()
                    );
                }
                let name = path.strip_prefix(dir)?.to_string_lossy().replace('\\', "/");
                files.insert(name, std::fs::read(&path)?);
            }
        }
    }
    Ok(files)
}

/// `--set` reads `true`, `false`, `null` and integers as such, as Helm's strvals does.
fn parse_scalar(text: &str) -> Value {
    match text {
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        "null" => Value::Null,
        _ => text
            .parse::<i64>()
            .map(Value::from)
            .unwrap_or_else(|_| Value::String(text.to_string())),
    }
}
