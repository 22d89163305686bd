//! Renders a chart's templates as Helm's engine does: every template of the chart and its
//! subcharts in one template set (so `define`s are shared, the parent's winning), each
//! rendered with its own chart's `.Values`, `.Chart` and `.Files`, and Go's `<no value>`
//! for a missing key written as nothing.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gtmpl_ng::{Context, Limits, Template, Value};
use serde_json::{Map, Value as Json, json};

use crate::chart::Chart;
use crate::functions::{self, ENTRY, ENTRY_BODY, Lookup, RenderScope};
use crate::{HelmError, semver, values};

/// The release a chart is rendered for (`.Release`).
#[derive(Clone, Debug)]
pub struct Release {
    pub name: String,
    pub namespace: String,
    pub revision: u64,
    pub is_upgrade: bool,
    /// Render without checking the values against `values.schema.json` (Helm's
    /// `--skip-schema-validation`, Fleet's `skipSchemaValidation`).
    pub skip_schema_validation: bool,
}

/// What the target cluster serves (`.Capabilities`).
#[derive(Clone, Debug)]
pub struct Capabilities {
    /// `v1.28.9`, as the cluster's `/version` says it.
    pub kube_version: String,
    /// `apps/v1`, and `apps/v1/Deployment` for each kind, as discovery lists them.
    pub api_versions: Vec<String>,
}

impl Default for Capabilities {
    /// Helm's fallback when no cluster is asked (its golden files are made with it):
    /// Kubernetes v1.20.0, and the built-in API groups.
    fn default() -> Self {
        let api_versions = [
            "v1",
            "admissionregistration.k8s.io/v1",
            "apiextensions.k8s.io/v1",
            "apiregistration.k8s.io/v1",
            "apps/v1",
            "authentication.k8s.io/v1",
            "authorization.k8s.io/v1",
            "autoscaling/v1",
            "autoscaling/v2",
            "batch/v1",
            "certificates.k8s.io/v1",
            "coordination.k8s.io/v1",
            "discovery.k8s.io/v1",
            "events.k8s.io/v1",
            "flowcontrol.apiserver.k8s.io/v1",
            "networking.k8s.io/v1",
            "node.k8s.io/v1",
            "policy/v1",
            "rbac.authorization.k8s.io/v1",
            "scheduling.k8s.io/v1",
            "storage.k8s.io/v1",
        ];
        Capabilities {
            kube_version: "v1.20.0".into(),
            api_versions: api_versions.map(String::from).to_vec(),
        }
    }
}

/// How one chart's render is bounded as a whole: every template, `include` and `tpl` of it
/// (each render is also bounded by gtmpl-ng: iterations, nesting, its own output).
#[derive(Clone, Debug)]
pub struct Bounds {
    /// Wall time for the whole chart.
    pub time: Duration,
    /// Bytes the chart's templates may write, `include`s counted. Nested renders hold their
    /// output until they return, so a chart can hold this many bytes per level of nesting
    /// ([`crate::functions::MAX_INCLUDE_DEPTH`]) at once.
    pub output_bytes: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            time: Duration::from_secs(10),
            output_bytes: 16 << 20,
        }
    }
}

/// The rendered templates by name (`chart/templates/x.yaml`), partials left out, and the
/// chart's `NOTES.txt`.
#[derive(Debug, Default)]
pub struct Rendered {
    pub files: BTreeMap<String, String>,
    pub notes: String,
    /// The CRDs (`crds/`) of the chart and of the subcharts it renders with, by path, as
    /// Helm installs them before anything else, once.
    pub crds: Vec<(String, Vec<u8>)>,
}

/// The stack of a render's thread. Templates nest, `include` renders within a render, and
/// values a template builds (a `dict` inside a `dict`, once per iteration) are dropped
/// recursively: a render runs on a thread of its own with room for all of it, so that no
/// chart can overflow the stack of the process that renders it. Only the pages used are paid.
const RENDER_STACK: usize = 64 << 20;
/// Iterations one render may run in all (gtmpl-ng's default is 1,000,000): what bounds how
/// deep a template can nest the values it builds, and so the stack their drop needs.
const MAX_ITERATIONS: usize = 200_000;

/// Renders `chart` with the user's values over its defaults, on a thread of its own (see
/// [`RENDER_STACK`]); blocks until it is done, within `bounds`.
pub fn render(
    chart: &Chart,
    user_values: &Map<String, Json>,
    release: &Release,
    capabilities: &Capabilities,
    lookup: Option<Arc<dyn Lookup + Send + Sync>>,
    bounds: &Bounds,
) -> Result<Rendered, HelmError> {
    on_render_thread(|| render_here(chart, user_values, release, capabilities, lookup, bounds))
}

/// Runs `work` on a thread of its own with [`RENDER_STACK`], and waits for it.
fn on_render_thread<T: Send>(
    work: impl FnOnce() -> Result<T, HelmError> + Send,
) -> Result<T, HelmError> {
    std::thread::scope(|scope| {
        let thread = std::thread::Builder::new()
            .name("helm-render".into())
            .stack_size(RENDER_STACK)
            .spawn_scoped(scope, work)
            .map_err(|e| HelmError::Template {
                message: format!("cannot start a render: {e}"),
            })?;
        thread.join().unwrap_or_else(|_| {
            Err(HelmError::Template {
                message: "the render failed unexpectedly".into(),
            })
        })
    })
}

/// Renders one template that is not a chart's (Fleet's `helm.values` templates) with `data`:
/// Go's `text/template` with Sprig's functions only (no `include`, `tpl`, `lookup`, `env`),
/// its actions between `delimiters` (Go's `Delims`), bounded as a chart's render is. A missing
/// key prints as Go prints it, `<no value>`.
pub fn render_text(
    name: &str,
    source: &str,
    delimiters: (&str, &str),
    data: &Json,
    bounds: &Bounds,
) -> Result<String, HelmError> {
    let source = with_braces(source, delimiters).map_err(|message| HelmError::Template {
        message: format!("template: {name}: {message}"),
    })?;
    // What gtmpl-ng reads differently from Go, as for a chart's templates.
    let source = crate::files::rewrite_actions(&source);
    on_render_thread(|| {
        let mut template = Template::with_limits(limits(bounds));
        template.name = name.into();
        template.add_funcs(&functions::sprig());
        template.parse(source).map_err(|e| HelmError::Template {
            message: e.to_string(),
        })?;
        template
            .render(&Context::from(functions::from_json_value(data.clone())))
            .map_err(|e| HelmError::Template {
                message: e.to_string(),
            })
    })
}

/// A template whose actions are between `delimiters` rewritten with Go's default `{{ }}`
/// (gtmpl-ng has no others): text that holds `{{` is quoted as an action, and each action
/// ends at the first right delimiter outside its strings and comments, as Go's lexer ends it.
fn with_braces(source: &str, (left, right): (&str, &str)) -> Result<String, String> {
    // `{{` in text, and a `{` just before an action (which would make `{{{`), as actions
    // that print them.
    let quote_braces = |text: &str, before_action: bool| {
        let quoted = text.replace("{{", "{{\"{{\"}}");
        match quoted.strip_suffix('{') {
            Some(rest) if before_action => format!("{rest}{{{{\"{{\"}}}}"),
            _ => quoted,
        }
    };
    let mut out = String::with_capacity(source.len() + 16);
    let mut rest = source;
    while let Some(start) = rest.find(left) {
        out.push_str(&quote_braces(&rest[..start], true));
        out.push_str("{{");
        rest = &rest[start + left.len()..];
        let end = action_end(rest, right)
            .ok_or_else(|| format!("unclosed action (no {right:?} after {left:?})"))?;
        out.push_str(&rest[..end]);
        out.push_str("}}");
        rest = &rest[end + right.len()..];
    }
    out.push_str(&quote_braces(rest, false));
    Ok(out)
}

/// Where the action at the start of `text` ends: the first `right` outside a quoted string,
/// raw string, character constant or comment.
fn action_end(text: &str, right: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i..].starts_with(right.as_bytes()) {
            return Some(i);
        }
        i = crate::files::literal_end(bytes, i).unwrap_or(i + 1);
    }
    None
}

/// gtmpl-ng's limits for a render within `bounds`.
fn limits(bounds: &Bounds) -> Limits {
    Limits::default()
        .with_output_bytes(bounds.output_bytes)
        .with_deadline(bounds.time)
        .with_total_iterations(MAX_ITERATIONS)
}

/// Refuses what Helm will not install: a library chart, or one whose `charts/` lacks a
/// dependency `Chart.yaml` lists.
fn installable(chart: &Chart) -> Result<(), HelmError> {
    if chart.is_library() {
        return Err(HelmError::Chart {
            file: "Chart.yaml".into(),
            message: "library charts are not installable".into(),
        });
    }
    let missing: Vec<&str> = chart
        .missing_dependencies()
        .iter()
        .map(|d| d.name.as_str())
        .collect();
    if !missing.is_empty() {
        return Err(HelmError::Chart {
            file: "Chart.yaml".into(),
            message: format!(
                "found in Chart.yaml, but missing in charts/ directory: {}",
                missing.join(", ")
            ),
        });
    }
    Ok(())
}

fn render_here(
    chart: &Chart,
    user_values: &Map<String, Json>,
    release: &Release,
    capabilities: &Capabilities,
    lookup: Option<Arc<dyn Lookup + Send + Sync>>,
    bounds: &Bounds,
) -> Result<Rendered, HelmError> {
    installable(chart)?;
    let mut chart = chart.clone();
    values::enable_dependencies(&mut chart, user_values);
    values::import_values(&mut chart);
    let kube_version = &chart.metadata.kube_version;
    if !kube_version.is_empty()
        && !semver::satisfies(kube_version, &capabilities.kube_version).unwrap_or(false)
    {
        return Err(HelmError::Chart {
            file: "Chart.yaml".into(),
            message: format!(
                "chart requires kubeVersion: {kube_version} which is incompatible with Kubernetes {}",
                capabilities.kube_version
            ),
        });
    }
    let values = values::coalesce(&chart, user_values);
    if !release.skip_schema_validation {
        crate::schema::validate(&chart, &values)?;
    }
    let top = json!({
        "Release": {"Name": release.name, "Namespace": release.namespace, "IsUpgrade": release.is_upgrade,
            "IsInstall": !release.is_upgrade, "Revision": release.revision, "Service": "Helm"},
        "Values": values,
    });
    let mut templates = Vec::new();
    let mut contexts = Vec::new();
    collect(
        &chart,
        &top,
        capabilities_value(capabilities),
        "",
        true,
        &mut templates,
        &mut contexts,
    );

    // Helm parses the deepest paths first, so that a parent's `define` replaces a subchart's.
    templates.sort_by(|a, b| {
        let depth = |t: &Collected| t.name.matches('/').count();
        depth(b).cmp(&depth(a)).then_with(|| b.name.cmp(&a.name))
    });
    let mut set = Template::with_limits(limits(bounds));
    set.name = ENTRY.into();
    set.add_funcs(&functions::all());
    set.add_template(ENTRY, ENTRY_BODY)
        .map_err(|e| HelmError::Template {
            message: e.to_string(),
        })?;
    for t in &templates {
        set.add_template(t.name.clone(), t.source.clone())
            .map_err(|e| HelmError::Template {
                message: format!("parse error in {:?}: {e}", t.name),
            })?;
    }
    let set = Rc::new(set);
    let definitions = templates
        .iter()
        .filter(|t| t.source.contains("define"))
        .map(|t| (t.name.clone(), t.source.clone()))
        .collect();
    let _scope = functions::enter(RenderScope {
        template: set.clone(),
        definitions: Rc::new(definitions),
        lookup,
        depth: 0,
        deadline: Instant::now() + bounds.time,
        included_bytes: 0,
        max_bytes: bounds.output_bytes,
    });
    let mut rendered = Rendered {
        crds: crate::manifests::crds_with_subcharts(&chart, ""),
        ..Rendered::default()
    };
    let root_notes = format!("{}/templates/NOTES.txt", chart.name());
    let deadline = Instant::now() + bounds.time;
    let mut written = 0usize;
    for t in templates.iter().rev() {
        let base = t.name.rsplit('/').next().unwrap_or("");
        if base.starts_with('_') {
            continue;
        }
        // Each render is bounded by gtmpl-ng on its own; these bound the chart's as a whole.
        if Instant::now() > deadline {
            return Err(HelmError::Template {
                message: format!(
                    "the chart's render took longer than {:?}, at {}",
                    bounds.time, t.name
                ),
            });
        }
        let mut data = contexts[t.context].clone();
        if let Value::Map(map) = &mut data {
            let template = json!({"Name": t.name, "BasePath": t.base_path});
            map.insert("Template".into(), functions::from_json_value(template));
        }
        let output = set
            .render(&Context::from(Value::Array(vec![
                Value::String(t.name.clone()),
                data,
            ])))
            .map_err(|e| HelmError::Template {
                message: without_entry(&e.to_string()),
            })?
            .replace("<no value>", "");
        written += output.len();
        if written > bounds.output_bytes {
            return Err(HelmError::Template {
                message: format!(
                    "the chart's templates wrote more than {} bytes, at {}",
                    bounds.output_bytes, t.name
                ),
            });
        }
        if t.name.ends_with("/NOTES.txt") {
            if t.name == root_notes {
                rendered.notes = output;
            }
        } else {
            rendered.files.insert(t.name.clone(), output);
        }
    }
    Ok(rendered)
}

/// An error's text without the frames of lariat's entry template, which the chart's author
/// never wrote.
fn without_entry(message: &str) -> String {
    message
        .lines()
        .filter(|line| !line.contains(ENTRY))
        .collect::<Vec<_>>()
        .join("\n")
}

struct Collected {
    name: String,
    source: String,
    base_path: String,
    /// Which of the contexts it renders in: one per chart, cloned for one render at a time,
    /// so a chart's values and files are held once however many templates it has.
    context: usize,
}

/// Every template of `chart` and its subcharts, each with the context it renders in.
fn collect(
    chart: &Chart,
    parent: &Json,
    capabilities: Value,
    prefix: &str,
    is_root: bool,
    out: &mut Vec<Collected>,
    contexts: &mut Vec<Value>,
) -> Json {
    let scoped_values = if is_root {
        parent["Values"].clone()
    } else {
        match &parent["Values"][chart.name()] {
            Json::Object(table) => Json::Object(table.clone()),
            _ => Json::Object(Map::new()),
        }
    };
    let path = format!("{prefix}{}", chart.name());
    let mut context = json!({
        "Chart": chart.metadata_value(is_root),
        "Release": parent["Release"],
        "Values": scoped_values,
    });
    let mut subcharts = Map::new();
    for sub in &chart.dependencies {
        let sub_context = collect(
            sub,
            &context,
            capabilities.clone(),
            &format!("{path}/charts/"),
            false,
            out,
            contexts,
        );
        subcharts.insert(sub.name().to_string(), sub_context);
    }
    context["Subcharts"] = Json::Object(subcharts);
    let mut value = functions::from_json_value(context.clone());
    if let Value::Map(map) = &mut value {
        map.insert("Capabilities".into(), capabilities);
        map.insert("Files".into(), crate::files::files_value(&chart.files));
    }
    contexts.push(value);
    let index = contexts.len() - 1;
    for template in &chart.templates {
        // A library chart's only templates are its partials.
        let base = template.name.rsplit('/').next().unwrap_or("");
        if chart.is_library() && !base.starts_with('_') {
            continue;
        }
        out.push(Collected {
            name: format!("{path}/{}", template.name),
            source: crate::files::rewrite_actions(&String::from_utf8_lossy(&template.data)),
            base_path: format!("{path}/templates"),
            context: index,
        });
    }
    context
}

fn capabilities_value(capabilities: &Capabilities) -> Value {
    let version = semver::Version::parse(&capabilities.kube_version);
    let (major, minor) = version.map(|v| v.major_minor()).unwrap_or_default();
    let kube = json!({
        "Version": capabilities.kube_version, "GitVersion": capabilities.kube_version,
        "Major": major.to_string(), "Minor": minor.to_string(),
    });
    let mut value = functions::from_json_value(json!({
        "KubeVersion": kube,
        "HelmVersion": {"Version": "v3.18.0", "GitCommit": "", "GitTreeState": "", "GoVersion": ""},
    }));
    if let Value::Map(map) = &mut value {
        map.insert(
            "APIVersions".into(),
            crate::files::api_versions_value(&capabilities.api_versions),
        );
    }
    value
}
