//! Helm's template functions: gtmpl-ng's Sprig set, with Helm's own added (`include`,
//! `tpl`, `required`, `lookup`, the YAML and JSON conversions) and the Sprig functions it
//! lacks (`nindent`, `join`, `splitList`, `sortAlpha`, `semverCompare`, ...).
//!
//! Template functions are bare `fn` pointers, so the ones that need the render they run
//! in (the chart's templates for `include`, the cluster for `lookup`) read it from the
//! thread, where [`crate::engine`] installs it for the length of one render.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Instant;

use gtmpl_ng::{Context, Func, FuncError, Template, Value};
use serde_json::Value as Json;

use crate::goyaml;
use crate::semver;

/// How deep `include` and `tpl` may nest. Helm allows 1,000 references to one name; each
/// level holds a render's stack and output until it returns, so lariat stops far earlier
/// (real charts nest a handful deep) and says so.
pub const MAX_INCLUDE_DEPTH: usize = 32;

/// Reads an object from the cluster a chart is installed into, for `lookup`.
pub trait Lookup {
    /// `name` empty lists; the answer is the object, a `List`, or `None` when absent.
    fn lookup(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Json>, String>;
}

/// What the functions of one render share: the chart's template set and the cluster.
pub(crate) struct RenderScope {
    pub template: Rc<Template>,
    /// The chart's templates that `define` something, by name, for `tpl`.
    pub definitions: Rc<Vec<(String, String)>>,
    pub lookup: Option<std::sync::Arc<dyn Lookup + Send + Sync>>,
    pub depth: usize,
    /// Each `include` is a render of its own, with its own budget from gtmpl-ng; these
    /// bound the chart's render as a whole, so that templates including each other
    /// twice at every level cannot multiply past them.
    pub deadline: Instant,
    pub included_bytes: usize,
    pub max_bytes: usize,
}

thread_local! {
    static SCOPE: RefCell<Option<RenderScope>> = const { RefCell::new(None) };
}

/// Installs `scope` for the current thread until the guard drops.
pub(crate) fn enter(scope: RenderScope) -> ScopeGuard {
    SCOPE.with(|s| *s.borrow_mut() = Some(scope));
    ScopeGuard
}

pub(crate) struct ScopeGuard;

impl Drop for ScopeGuard {
    fn drop(&mut self) {
        SCOPE.with(|s| *s.borrow_mut() = None);
    }
}

/// The name of the entry template that renders any named template with any data.
pub(crate) const ENTRY: &str = "lariat.entry";
pub(crate) const ENTRY_BODY: &str = "{{- template (index . 0) (index . 1) -}}";

/// The names of every function a chart's templates may call.
pub fn names() -> Vec<&'static str> {
    all().into_iter().map(|(name, _)| name).collect()
}

/// Every function a chart's templates may call: Sprig's and Helm's own.
pub(crate) fn all() -> Vec<(&'static str, Func)> {
    let mut funcs = sprig();
    funcs.extend([
        ("include", include as Func),
        ("tpl", tpl),
        ("required", required),
        ("lookup", lookup),
        ("toYaml", to_yaml),
        ("mustToYaml", to_yaml),
        ("fromYaml", from_yaml),
        ("fromYamlArray", from_yaml_array),
        ("fromJson", from_json),
        ("fromJsonArray", from_json_array),
        ("getHostByName", get_host_by_name),
        ("lariatMethod", crate::files::method),
    ]);
    funcs
}

/// Sprig's functions, as a Go program registers them (`sprig.TxtFuncMap`), without `env`,
/// `expandenv` and `getHostByName`: what a template that is not a chart's may call (Fleet's
/// `helm.values` templates). Some are lariat's where gtmpl-ng's differ from Go's output.
pub(crate) fn sprig() -> Vec<(&'static str, Func)> {
    let mut funcs: Vec<(&'static str, Func)> = gtmpl_ng::helm_functions::HELM_FUNCTIONS.to_vec();
    funcs.extend([
        ("fail", fail as Func),
        ("toJson", to_json),
        ("mustToJson", to_json),
        ("toRawJson", to_json),
        ("mustToRawJson", to_json),
        ("toPrettyJson", to_pretty_json),
        ("mustToPrettyJson", to_pretty_json),
        ("nindent", nindent),
        ("join", join),
        ("splitList", split_list),
        ("split", split),
        ("sortAlpha", sort_alpha),
        ("tuple", tuple),
        ("semverCompare", semver_compare),
        ("semver", semver_of),
    ]);
    funcs.extend(crate::sprig::CORRECTIONS);
    funcs
}

pub(crate) fn arg<'a>(args: &'a [Value], i: usize, function: &str) -> Result<&'a Value, FuncError> {
    args.get(i)
        .ok_or_else(|| FuncError::AtLeastXArgs(function.into(), i + 1))
}

pub(crate) fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Nil | Value::NoValue => String::new(),
        other => other.to_string(),
    }
}

pub(crate) fn generic(message: impl Into<String>) -> FuncError {
    FuncError::Generic(message.into())
}

/// Renders a named template with `data` and returns its text (`include "name" .`).
fn include(args: &[Value]) -> Result<Value, FuncError> {
    let name = text(arg(args, 0, "include")?);
    let data = args.get(1).cloned().unwrap_or(Value::Nil);
    let template = SCOPE.with(|s| {
        let mut scope = s.borrow_mut();
        let scope = scope.as_mut().ok_or_else(|| generic("include: called outside a chart render"))?;
        if scope.depth >= MAX_INCLUDE_DEPTH {
            return Err(generic(format!(
                "include {name:?}: templates nest more than {MAX_INCLUDE_DEPTH} deep (a template that includes itself?)"
            )));
        }
        if Instant::now() > scope.deadline {
            return Err(generic(format!("include {name:?}: the chart's render ran out of time")));
        }
        scope.depth += 1;
        Ok(scope.template.clone())
    })?;
    let rendered = template.render(&Context::from(Value::Array(vec![
        Value::String(name),
        data,
    ])));
    let over_budget = SCOPE.with(|s| {
        let mut scope = s.borrow_mut();
        let scope = scope.as_mut()?;
        scope.depth -= 1;
        scope.included_bytes += rendered.as_ref().map_or(0, String::len);
        (scope.included_bytes > scope.max_bytes).then_some(scope.max_bytes)
    });
    if let Some(max) = over_budget {
        return Err(generic(format!(
            "include: the chart's templates wrote more than {max} bytes"
        )));
    }
    rendered
        .map(Value::String)
        .map_err(|e| generic(e.to_string()))
}

/// Renders a string as a template with `data` (`tpl .Values.text .`).
fn tpl(args: &[Value]) -> Result<Value, FuncError> {
    let source = text(arg(args, 0, "tpl")?);
    let data = args.get(1).cloned().unwrap_or(Value::Nil);
    // The render's own limits, not gtmpl-ng's defaults.
    let mut template = Template::with_limits(gtmpl_ng::limits::active());
    template.name = "gotpl".into();
    template.add_funcs(&all());
    // `include` reaches the chart's templates through the render's set; `{{ template }}`
    // can only reach those parsed with the text, so the chart's `define`s come along then.
    if source.contains("template") {
        let definitions =
            SCOPE.with(|s| s.borrow().as_ref().map(|scope| scope.definitions.clone()));
        for (name, text) in definitions.iter().flat_map(|d| d.iter()) {
            template
                .add_template(name.clone(), text.clone())
                .map_err(|e| generic(format!("tpl: {name}: {e}")))?;
        }
    }
    let rewritten = crate::files::rewrite_actions(&source);
    template
        .add_template("gotpl", rewritten)
        .map_err(|e| generic(format!("tpl: cannot parse its template: {e}")))?;
    let entered = SCOPE.with(|s| {
        let mut scope = s.borrow_mut();
        let scope = scope
            .as_mut()
            .ok_or_else(|| generic("tpl: called outside a chart render"))?;
        if scope.depth >= MAX_INCLUDE_DEPTH {
            return Err(generic(format!(
                "tpl: templates nest more than {MAX_INCLUDE_DEPTH} deep"
            )));
        }
        if Instant::now() > scope.deadline {
            return Err(generic("tpl: the chart's render ran out of time"));
        }
        scope.depth += 1;
        Ok(())
    });
    entered?;
    let rendered = template.render(&Context::from(data));
    SCOPE.with(|s| {
        if let Some(scope) = s.borrow_mut().as_mut() {
            scope.depth -= 1;
        }
    });
    rendered
        .map(|out| Value::String(out.replace("<no value>", "")))
        .map_err(|e| generic(format!("tpl: {e}")))
}

/// Helm's `required`: fails on nil and on the empty string, nothing else.
fn required(args: &[Value]) -> Result<Value, FuncError> {
    let message = text(arg(args, 0, "required")?);
    match args.get(1).unwrap_or(&Value::Nil) {
        Value::Nil | Value::NoValue => Err(generic(message)),
        Value::String(s) if s.is_empty() => Err(generic(message)),
        value => Ok(value.clone()),
    }
}

fn fail(args: &[Value]) -> Result<Value, FuncError> {
    Err(generic(text(arg(args, 0, "fail")?)))
}

/// `lookup "v1" "Secret" "ns" "name"`: the object from the cluster, or an empty map when
/// it is absent or no cluster is there (as `helm template` answers).
fn lookup(args: &[Value]) -> Result<Value, FuncError> {
    let field = |i| {
        args.get(i)
            .map(text)
            .ok_or_else(|| FuncError::ExactlyXArgs("lookup".into(), 4))
    };
    let (api_version, kind, namespace, name) = (field(0)?, field(1)?, field(2)?, field(3)?);
    let client = SCOPE.with(|s| s.borrow().as_ref().and_then(|scope| scope.lookup.clone()));
    let Some(client) = client else {
        return Ok(Value::Map(Default::default()));
    };
    match client.lookup(&api_version, &kind, &namespace, &name) {
        Ok(Some(object)) => Ok(from_json_value(object)),
        Ok(None) => Ok(Value::Map(Default::default())),
        Err(e) => Err(generic(format!(
            "lookup {api_version} {kind} {namespace}/{name}: {e}"
        ))),
    }
}

/// A template value as JSON, maps' keys in Go's order (sorted), as `json.Marshal` has them.
/// Recursive: gtmpl-ng refuses a function result nested deeper than 128 levels, and values
/// files and lookups are read within the same depth by their parsers.
pub(crate) fn to_json_value(value: &Value) -> Json {
    match value {
        Value::Nil | Value::NoValue | Value::Function(_) => Json::Null,
        Value::Bool(b) => Json::Bool(*b),
        Value::String(s) => Json::String(s.clone()),
        Value::Number(n) => match n.kind() {
            gtmpl_ng::NumberKind::Unsigned(u) => Json::from(u),
            gtmpl_ng::NumberKind::Signed(i) => Json::from(i),
            gtmpl_ng::NumberKind::Float(f) => {
                serde_json::Number::from_f64(f).map_or(Json::Null, Json::Number)
            }
        },
        Value::Array(items) => Json::Array(items.iter().map(to_json_value).collect()),
        Value::Map(map) | Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            Json::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), to_json_value(&map[k])))
                    .collect(),
            )
        }
    }
}

/// JSON as a template value: objects become maps, whose missing keys read as no value.
pub(crate) fn from_json_value(value: Json) -> Value {
    match value {
        Json::Null => Value::Nil,
        Json::Bool(b) => Value::Bool(b),
        Json::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => Value::from(u),
            (_, Some(i), _) => Value::from(i),
            (_, _, f) => Value::from(f.unwrap_or(0.0)),
        },
        Json::String(s) => Value::String(s),
        Json::Array(items) => Value::Array(items.into_iter().map(from_json_value).collect()),
        Json::Object(map) => Value::Map(
            map.into_iter()
                .map(|(k, v)| (k, from_json_value(v)))
                .collect(),
        ),
    }
}

fn to_yaml(args: &[Value]) -> Result<Value, FuncError> {
    let yaml = goyaml::to_string(&to_json_value(arg(args, 0, "toYaml")?));
    Ok(Value::String(
        yaml.strip_suffix('\n').unwrap_or(&yaml).to_string(),
    ))
}

/// `fromYaml`: a map, or a map holding `Error` when the text is not one (as Helm does).
fn from_yaml(args: &[Value]) -> Result<Value, FuncError> {
    let source = text(arg(args, 0, "fromYaml")?);
    Ok(match serde_yaml_ng::from_str::<Json>(&source) {
        Ok(Json::Object(map)) => from_json_value(Json::Object(map)),
        Ok(Json::Null) => Value::Map(Default::default()),
        Ok(_) => error_map("error unmarshaling JSON: cannot unmarshal into map"),
        Err(e) => error_map(&e.to_string()),
    })
}

fn from_yaml_array(args: &[Value]) -> Result<Value, FuncError> {
    let source = text(arg(args, 0, "fromYamlArray")?);
    Ok(match serde_yaml_ng::from_str::<Json>(&source) {
        Ok(Json::Array(items)) => from_json_value(Json::Array(items)),
        Ok(Json::Null) => Value::Array(Vec::new()),
        Ok(_) => Value::Array(vec![Value::String(
            "error unmarshaling JSON: not an array".into(),
        )]),
        Err(e) => Value::Array(vec![Value::String(e.to_string())]),
    })
}

fn error_map(message: &str) -> Value {
    Value::Map(
        [("Error".to_string(), Value::String(message.to_string()))]
            .into_iter()
            .collect(),
    )
}

fn to_json(args: &[Value]) -> Result<Value, FuncError> {
    let json = serde_json::to_string(&to_json_value(arg(args, 0, "toJson")?))
        .map_err(|e| generic(e.to_string()))?;
    Ok(Value::String(json))
}

fn to_pretty_json(args: &[Value]) -> Result<Value, FuncError> {
    let value = to_json_value(arg(args, 0, "toPrettyJson")?);
    let json = serde_json::to_string_pretty(&value).map_err(|e| generic(e.to_string()))?;
    Ok(Value::String(json))
}

fn from_json(args: &[Value]) -> Result<Value, FuncError> {
    let source = text(arg(args, 0, "fromJson")?);
    Ok(match serde_json::from_str::<Json>(&source) {
        Ok(Json::Object(map)) => from_json_value(Json::Object(map)),
        Ok(_) => error_map("json: cannot unmarshal into map"),
        Err(e) => error_map(&e.to_string()),
    })
}

fn from_json_array(args: &[Value]) -> Result<Value, FuncError> {
    let source = text(arg(args, 0, "fromJsonArray")?);
    Ok(match serde_json::from_str::<Json>(&source) {
        Ok(Json::Array(items)) => from_json_value(Json::Array(items)),
        Ok(_) => Value::Array(vec![Value::String(
            "json: cannot unmarshal into array".into(),
        )]),
        Err(e) => Value::Array(vec![Value::String(e.to_string())]),
    })
}

fn count(value: &Value, function: &str) -> Result<usize, FuncError> {
    match value {
        Value::Number(n) => n
            .as_i64()
            .map(|i| i.max(0) as usize)
            .ok_or_else(|| generic(format!("{function}: not a count"))),
        Value::String(s) => s
            .trim()
            .parse()
            .map_err(|_| generic(format!("{function}: {s:?} is not a count"))),
        _ => Err(generic(format!(
            "{function}: the first argument is a count of spaces"
        ))),
    }
}

/// What one function call may hand back, by the render's limits.
fn output_limit() -> usize {
    gtmpl_ng::limits::active()
        .function_output
        .unwrap_or(usize::MAX)
}

/// Refuses an output of `size` bytes past the render's limit, before it is built.
pub(crate) fn check_output(function: &str, size: Option<usize>) -> Result<(), FuncError> {
    let limit = output_limit();
    match size {
        Some(size) if size <= limit => Ok(()),
        size => Err(FuncError::TooMuchOutput {
            function: function.into(),
            count: size.unwrap_or(usize::MAX),
            what: "characters".into(),
            limit,
        }),
    }
}

/// `nindent N text`: a newline, then `text` with every line indented by N spaces.
fn nindent(args: &[Value]) -> Result<Value, FuncError> {
    let spaces = count(arg(args, 0, "nindent")?, "nindent")?;
    let body = text(arg(args, 1, "nindent")?);
    let lines = body.matches('\n').count() + 1;
    check_output(
        "nindent",
        spaces
            .checked_mul(lines)
            .and_then(|pad| pad.checked_add(body.len() + 1)),
    )?;
    let pad = " ".repeat(spaces);
    Ok(Value::String(format!(
        "\n{pad}{}",
        body.replace('\n', &format!("\n{pad}"))
    )))
}

fn strings_of(value: &Value) -> Vec<String> {
    match value {
        Value::Array(items) => items.iter().map(text).collect(),
        Value::Nil | Value::NoValue => Vec::new(),
        other => vec![text(other)],
    }
}

/// `join sep list`.
fn join(args: &[Value]) -> Result<Value, FuncError> {
    let separator = text(arg(args, 0, "join")?);
    let items = strings_of(arg(args, 1, "join")?);
    let size = items
        .iter()
        .try_fold(0usize, |total, item| total.checked_add(item.len()))
        .and_then(|total| {
            total.checked_add(separator.len().checked_mul(items.len().saturating_sub(1))?)
        });
    check_output("join", size)?;
    Ok(Value::String(items.join(&separator)))
}

/// `splitList sep text`.
fn split_list(args: &[Value]) -> Result<Value, FuncError> {
    let separator = text(arg(args, 0, "splitList")?);
    let source = text(arg(args, 1, "splitList")?);
    Ok(Value::Array(
        source
            .split(separator.as_str())
            .map(|s| Value::String(s.into()))
            .collect(),
    ))
}

/// `split sep text`: a map `_0`, `_1`, ... of the parts.
fn split(args: &[Value]) -> Result<Value, FuncError> {
    let separator = text(arg(args, 0, "split")?);
    let source = text(arg(args, 1, "split")?);
    Ok(Value::Map(
        source
            .split(separator.as_str())
            .enumerate()
            .map(|(i, s)| (format!("_{i}"), Value::String(s.into())))
            .collect(),
    ))
}

fn sort_alpha(args: &[Value]) -> Result<Value, FuncError> {
    let mut items = strings_of(arg(args, 0, "sortAlpha")?);
    items.sort();
    Ok(Value::Array(items.into_iter().map(Value::String).collect()))
}

fn tuple(args: &[Value]) -> Result<Value, FuncError> {
    Ok(Value::Array(args.to_vec()))
}

/// `semver "1.2.3-rc.1+b5"`: Sprig's version object, as a map of the fields templates read
/// (`.Major`, `.Minor`, `.Patch`, `.Prerelease`, `.Metadata`, `.Original`).
fn semver_of(args: &[Value]) -> Result<Value, FuncError> {
    let original = text(arg(args, 0, "semver")?);
    let version = semver::Version::parse(&original)
        .ok_or_else(|| generic(format!("semver: {original:?} is not a semantic version")))?;
    let (major, minor) = version.major_minor();
    let metadata = original.split_once('+').map_or("", |(_, m)| m).to_string();
    Ok(Value::Map(
        [
            ("Major", Value::from(major)),
            ("Minor", Value::from(minor)),
            ("Patch", Value::from(version.patch())),
            (
                "Prerelease",
                Value::String(version.prerelease().to_string()),
            ),
            ("Metadata", Value::String(metadata)),
            ("Original", Value::String(original.clone())),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect(),
    ))
}

/// `semverCompare ">=1.19-0" .Capabilities.KubeVersion.GitVersion`.
fn semver_compare(args: &[Value]) -> Result<Value, FuncError> {
    let constraint = text(arg(args, 0, "semverCompare")?);
    let version = text(arg(args, 1, "semverCompare")?);
    semver::satisfies(&constraint, &version)
        .map(Value::Bool)
        .map_err(generic)
}

/// Helm answers DNS lookups with "" unless `--enable-dns`; lariat never resolves.
fn get_host_by_name(_: &[Value]) -> Result<Value, FuncError> {
    Ok(Value::String(String::new()))
}
