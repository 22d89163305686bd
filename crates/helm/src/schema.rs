//! `values.schema.json`: the coalesced values checked against the schema of the chart and of
//! each subchart it renders with, as Helm checks them before rendering, with Helm's messages.
//!
//! Helm validates with santhosh-tekuri/jsonschema (Go); boon is the same author's validator
//! for Rust, with the same error tree, so the messages below are Go's words over boon's
//! errors. A schema is never allowed to read a file or the network: a `$ref` to anything but
//! the schema itself and the JSON Schema drafts is refused by name (Helm would fetch an
//! http(s) reference from where it runs; a chart that needs one can set
//! `skipSchemaValidation`), and `urn:` references are permissive, as in Helm.

use std::error::Error;
use std::fmt::Write;

use boon::{Compiler, ErrorKind, Schemas, UrlLoader, ValidationError};
use serde_json::{Map, Number, Value};

use crate::{Chart, HelmError};

/// Where Helm puts a chart's schema, so that `$ref`s within it resolve as in Helm.
const SCHEMA_URL: &str = "file:///values.schema.json";

/// Subschemas a schema may unfold to, its `$ref`s followed (a cycle counted once). A small
/// schema whose references each name the next one twice unfolds exponentially, and the
/// validator walks every unfolded subschema for each value it applies to, without a clock:
/// this is what bounds a validation's time. Real charts' schemas unfold to a few thousand.
pub const MAX_UNFOLDED_SUBSCHEMAS: u64 = 100_000;
/// How deep `$ref`s may lead (the validator follows them recursively).
pub const MAX_REFERENCE_DEPTH: usize = 1_000;
/// Unfolded subschemas times values: what bounds a validation's time (tens of millions of
/// steps are a few seconds).
pub const MAX_VALIDATION_WORK: u64 = 50_000_000;

/// How many values `value` holds, itself and every member.
fn value_count(value: &Value) -> u64 {
    match value {
        Value::Array(items) => 1 + items.iter().map(value_count).sum::<u64>(),
        Value::Object(map) => 1 + map.values().map(value_count).sum::<u64>(),
        _ => 1,
    }
}

/// Refuses what would let the unfolding bound miss a reference: a `$ref` that is not a JSON
/// pointer into this document (`#`, `#/...`) or a `urn:` (permissive, as in Helm), and an
/// `$id` or `$anchor` below the root (which would give a pointer another base).
fn check_references(schema: &Value, root: bool, depth: usize) -> Result<(), String> {
    if depth > MAX_REFERENCE_DEPTH {
        return Err(format!(
            "the schema nests more than {MAX_REFERENCE_DEPTH} deep"
        ));
    }
    match schema {
        Value::Object(map) => {
            for (keyword, value) in map {
                match (keyword.as_str(), value) {
                    ("$ref" | "$dynamicRef" | "$recursiveRef", Value::String(reference)) => {
                        if !(reference == "#"
                            || reference.starts_with("#/")
                            || reference.starts_with("urn:"))
                        {
                            return Err(format!(
                                "$ref {reference:?}: lariat follows references within the schema only (#/...)"
                            ));
                        }
                    }
                    ("$id" | "$anchor" | "$dynamicAnchor", Value::String(_)) if !root => {
                        return Err(format!(
                            "{keyword} below the schema's root: lariat reads one schema resource"
                        ));
                    }
                    _ => check_references(value, false, depth + 1)?,
                }
            }
            Ok(())
        }
        Value::Array(items) => items
            .iter()
            .try_for_each(|item| check_references(item, false, depth + 1)),
        _ => Ok(()),
    }
}

/// Checks `values` (the chart's coalesced values) against `chart`'s schema and each enabled
/// subchart's against its own; every failing chart is named, as Helm names them.
pub fn validate(chart: &Chart, values: &Map<String, Value>) -> Result<(), HelmError> {
    let mut report = String::new();
    validate_into(chart, values, &mut report)?;
    if report.is_empty() {
        return Ok(());
    }
    Err(HelmError::Template {
        message: format!(
            "values don't meet the specifications of the schema(s) in the following chart(s):\n{report}"
        ),
    })
}

fn validate_into(
    chart: &Chart,
    values: &Map<String, Value>,
    report: &mut String,
) -> Result<(), HelmError> {
    if let Some(schema) = &chart.schema
        && let Some(failure) = check(schema, values).map_err(|message| HelmError::Chart {
            file: format!("{}/values.schema.json", chart.name()),
            message,
        })?
    {
        let _ = write!(report, "{}:\n{failure}\n", chart.name());
    }
    for sub in &chart.dependencies {
        match values.get(sub.name()) {
            None | Some(Value::Null) => {}
            Some(Value::Object(sub_values)) => validate_into(sub, sub_values, report)?,
            Some(other) => {
                let _ = write!(
                    report,
                    "{}:\ninvalid type for values: expected object (map), got {}\n",
                    sub.name(),
                    go_type(other)
                );
            }
        }
    }
    Ok(())
}

/// `Ok(None)` when `values` meet `schema`; `Ok(Some(failures))` as Helm lists them; `Err`
/// when the schema itself cannot be used.
fn check(schema: &[u8], values: &Map<String, Value>) -> Result<Option<String>, String> {
    let document: Value = serde_json::from_slice(schema).map_err(|e| format!("not JSON: {e}"))?;
    check_references(&document, true, 0)?;
    let mut unfolding = Unfolding::new(&document);
    let unfolded = unfolding.size(&document, 0);
    if unfolding.too_deep {
        return Err(format!(
            "the schema's $refs lead more than {MAX_REFERENCE_DEPTH} deep, deeper than lariat follows"
        ));
    }
    if unfolded > MAX_UNFOLDED_SUBSCHEMAS {
        return Err(format!(
            "the schema unfolds to more than {MAX_UNFOLDED_SUBSCHEMAS} subschemas through its \
             $refs, more than lariat checks values against"
        ));
    }
    // The validator's work is at most each value checked against each unfolded subschema.
    let work = unfolded.saturating_mul(value_count(&Value::Object(values.clone())));
    if work > MAX_VALIDATION_WORK {
        return Err(format!(
            "checking these values against the schema would take more than {MAX_VALIDATION_WORK} \
             steps (its unfolded subschemas times the values)"
        ));
    }
    let mut compiler = Compiler::new();
    compiler.use_loader(Box::new(NoLoading));
    compiler
        .add_resource(SCHEMA_URL, document)
        .map_err(|e| e.to_string())?;
    let mut schemas = Schemas::new();
    let index = compiler
        .compile(SCHEMA_URL, &mut schemas)
        .map_err(|e| format!("{e:#}"))?;
    let instance = Value::Object(values.clone());
    match schemas.validate(&instance, index) {
        Ok(()) => Ok(None),
        Err(error) => {
            let mut text = String::new();
            display(&error, 0, &mut text);
            // Helm drops the first line, which names the schema's URL.
            let text = text
                .strip_prefix(&format!(
                    "jsonschema validation failed with '{SCHEMA_URL}#'\n"
                ))
                .unwrap_or(&text)
                .to_string();
            Ok(Some(text))
        }
    }
}

/// The size of a schema with every local `$ref` replaced by what it names, counted without
/// building it: each subschema's size once, by address; a reference back into a subschema
/// still being counted (a recursive schema) counts 1.
struct Unfolding<'a> {
    root: &'a Value,
    sizes: std::collections::HashMap<*const Value, u64>,
    counting: std::collections::HashSet<*const Value>,
    /// Set when references lead deeper than [`MAX_REFERENCE_DEPTH`].
    too_deep: bool,
}

impl<'a> Unfolding<'a> {
    fn new(root: &'a Value) -> Self {
        Unfolding {
            root,
            sizes: Default::default(),
            counting: Default::default(),
            too_deep: false,
        }
    }

    fn size(&mut self, schema: &'a Value, depth: usize) -> u64 {
        let key = schema as *const Value;
        if let Some(size) = self.sizes.get(&key) {
            return *size;
        }
        if depth > MAX_REFERENCE_DEPTH {
            self.too_deep = true;
            return MAX_UNFOLDED_SUBSCHEMAS + 1;
        }
        if !self.counting.insert(key) {
            return 1;
        }
        let mut size = 1u64;
        if let Value::Object(map) = schema {
            for (keyword, value) in map {
                for child in subschemas(keyword, value) {
                    size = size.saturating_add(self.size(child, depth + 1));
                }
                if matches!(keyword.as_str(), "$ref" | "$recursiveRef" | "$dynamicRef")
                    && let Some(target) = value.as_str().and_then(|r| self.resolve(r))
                {
                    size = size.saturating_add(self.size(target, depth + 1));
                }
                if size > MAX_UNFOLDED_SUBSCHEMAS {
                    break;
                }
            }
        }
        self.counting.remove(&key);
        self.sizes.insert(key, size);
        size
    }

    /// A reference within the document (`#`, `#/$defs/x`); others are counted as 1.
    fn resolve(&self, reference: &str) -> Option<&'a Value> {
        let pointer = reference.strip_prefix('#')?;
        if pointer.is_empty() {
            return Some(self.root);
        }
        let pointer = percent_decode(pointer);
        self.root.pointer(&pointer)
    }
}

/// The schemas a keyword applies to the value or to its members (not `$defs`, which apply
/// only through a reference).
fn subschemas<'a>(keyword: &str, value: &'a Value) -> Vec<&'a Value> {
    match (keyword, value) {
        (
            "not"
            | "if"
            | "then"
            | "else"
            | "items"
            | "additionalItems"
            | "additionalProperties"
            | "contains"
            | "propertyNames"
            | "unevaluatedItems"
            | "unevaluatedProperties"
            | "contentSchema",
            Value::Object(_),
        ) => vec![value],
        ("allOf" | "anyOf" | "oneOf" | "prefixItems" | "items", Value::Array(list)) => {
            list.iter().collect()
        }
        (
            "properties" | "patternProperties" | "dependentSchemas" | "dependencies",
            Value::Object(map),
        ) => map.values().filter(|v| v.is_object()).collect(),
        _ => Vec::new(),
    }
}

fn percent_decode(pointer: &str) -> String {
    let bytes = pointer.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The loader a schema gets: no files, no network; `urn:` references accept anything.
struct NoLoading;

impl UrlLoader for NoLoading {
    fn load(&self, url: &str) -> Result<Value, Box<dyn Error>> {
        if url.starts_with("urn:") {
            return Ok(Value::Bool(true));
        }
        Err(format!(
            "{url} cannot be loaded: lariat resolves a schema's references only within \
             values.schema.json (set skipSchemaValidation to deploy without the check)"
        )
        .into())
    }
}

/// The error tree as santhosh-tekuri/jsonschema prints it: one `- at '<pointer>': <why>` line
/// per failure, nested causes indented two spaces further; a reference with one cause is
/// skipped, as there.
fn display(error: &ValidationError, indent: usize, out: &mut String) {
    let skip = error.causes.len() == 1 && matches!(error.kind, ErrorKind::Reference { .. });
    let mut indent = indent;
    if !skip {
        if indent > 0 {
            out.push('\n');
            out.push_str(&"  ".repeat(indent - 1));
            out.push_str("- ");
        }
        indent += 1;
        if let ErrorKind::Schema { url } = &error.kind {
            let _ = write!(out, "jsonschema validation failed with {}", quote(url));
        } else {
            let location = error.instance_location.to_string();
            let _ = write!(out, "at {}: {}", quote(&location), message(&error.kind));
        }
    }
    for cause in &error.causes {
        display(cause, indent, out);
    }
}

/// One failure in Go's words (santhosh-tekuri/jsonschema's `kind` package).
fn message(kind: &ErrorKind) -> String {
    match kind {
        ErrorKind::Group | ErrorKind::Reference { .. } => "validation failed".into(),
        ErrorKind::Schema { url } => format!("jsonschema validation failed with {}", quote(url)),
        ErrorKind::ContentSchema => "contentSchema failed".into(),
        ErrorKind::PropertyName { prop } => format!("invalid propertyName {}", quote(prop)),
        ErrorKind::RefCycle {
            url,
            kw_loc1,
            kw_loc2,
        } => format!("both {kw_loc1} and {kw_loc2} resolve to {url:?} causing reference cycle"),
        ErrorKind::FalseSchema => "false schema".into(),
        ErrorKind::Type { got, want } => {
            let want: Vec<String> = want.iter().map(|t| t.to_string()).collect();
            format!("got {got}, want {}", want.join(" or "))
        }
        ErrorKind::Enum { want } => match primitives(want.iter()) {
            Some(values) if values.len() == 1 => format!("value must be {}", values[0]),
            Some(values) => format!("value must be one of {}", values.join(", ")),
            None => "enum failed".into(),
        },
        ErrorKind::Const { want } => match primitives(std::iter::once(*want)) {
            Some(values) => format!("value must be {}", values[0]),
            None => "const failed".into(),
        },
        ErrorKind::Format { got, want, err } => {
            let got = primitives(std::iter::once(got.as_ref()))
                .map(|v| v[0].clone())
                .unwrap_or_else(|| "value".into());
            format!("{got} is not valid {want}: {err}")
        }
        ErrorKind::MinProperties { got, want } => format!("minProperties: got {got}, want {want}"),
        ErrorKind::MaxProperties { got, want } => format!("maxProperties: got {got}, want {want}"),
        ErrorKind::AdditionalProperties { got } => {
            let names: Vec<String> = got.iter().map(|p| quote(p)).collect();
            format!("additional properties {} not allowed", names.join(", "))
        }
        ErrorKind::Required { want } if want.len() == 1 => {
            format!("missing property {}", quote(want[0]))
        }
        ErrorKind::Required { want } => {
            let names: Vec<String> = want.iter().map(|p| quote(p)).collect();
            format!("missing properties {}", names.join(", "))
        }
        ErrorKind::Dependency { prop, missing }
        | ErrorKind::DependentRequired { prop, missing } => {
            let names: Vec<String> = missing.iter().map(|p| quote(p)).collect();
            format!(
                "properties {} required, if {} exists",
                names.join(", "),
                quote(prop)
            )
        }
        ErrorKind::MinItems { got, want } => format!("minItems: got {got}, want {want}"),
        ErrorKind::MaxItems { got, want } => format!("maxItems: got {got}, want {want}"),
        ErrorKind::Contains => "no items match contains schema".into(),
        ErrorKind::MinContains { got, want } if got.is_empty() => {
            format!("min {want} items required to match contains schema, but none matched")
        }
        ErrorKind::MinContains { got, want } => format!(
            "min {want} items required to match contains schema, but matched {} items at {}",
            got.len(),
            indices(got)
        ),
        ErrorKind::MaxContains { got, want } => format!(
            "max {want} items required to match contains schema, but matched {} items at {}",
            got.len(),
            indices(got)
        ),
        ErrorKind::UniqueItems { got: [i, j] } => format!("items at {i} and {j} are equal"),
        ErrorKind::AdditionalItems { got } => format!("last {got} additionalItem(s) not allowed"),
        ErrorKind::MinLength { got, want } => format!("minLength: got {got}, want {want}"),
        ErrorKind::MaxLength { got, want } => format!("maxLength: got {got}, want {want}"),
        ErrorKind::Pattern { got, want } => {
            format!("{} does not match pattern {}", quote(got), quote(want))
        }
        ErrorKind::ContentEncoding { want, err } => {
            format!("value is not {} encoded: {err}", quote(want))
        }
        ErrorKind::ContentMediaType { want, err, .. } => {
            format!("value if not of mediatype {}: {err}", quote(want))
        }
        ErrorKind::Minimum { got, want } => bound("minimum", got, want),
        ErrorKind::Maximum { got, want } => bound("maximum", got, want),
        ErrorKind::ExclusiveMinimum { got, want } => bound("exclusiveMinimum", got, want),
        ErrorKind::ExclusiveMaximum { got, want } => bound("exclusiveMaximum", got, want),
        ErrorKind::MultipleOf { got, want } => bound("multipleOf", got, want),
        ErrorKind::Not => "not failed".into(),
        ErrorKind::AllOf => "allOf failed".into(),
        ErrorKind::AnyOf => "anyOf failed".into(),
        ErrorKind::OneOf(None) => "oneOf failed, none matched".into(),
        ErrorKind::OneOf(Some((i, j))) => format!("oneOf failed, subschemas {i}, {j} matched"),
    }
}

fn bound(keyword: &str, got: &Number, want: &Number) -> String {
    format!("{keyword}: got {}, want {}", go_float(got), go_float(want))
}

/// `[1 2]` without its brackets, as Go prints a slice of indices.
fn indices(got: &[usize]) -> String {
    got.iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Each value as Go's message shows it, or `None` if any is an array or object.
fn primitives<'a>(values: impl Iterator<Item = &'a Value>) -> Option<Vec<String>> {
    values
        .map(|v| match v {
            Value::String(s) => Some(quote(s)),
            Value::Array(_) | Value::Object(_) => None,
            Value::Number(n) => Some(go_float(n)),
            other => Some(other.to_string()),
        })
        .collect()
}

/// A number as Go's `%v` prints a float64: shortest digits, exponent form below 1e-4 and from
/// 1e21 on (`1e+21`, `1e-05`).
fn go_float(n: &Number) -> String {
    let f = n.as_f64().unwrap_or(0.0);
    let magnitude = f.abs();
    if f == 0.0 || (1e-4..1e21).contains(&magnitude) {
        return format!("{f}");
    }
    let text = format!("{f:e}");
    let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
    let (sign, digits) = match exponent.strip_prefix('-') {
        Some(digits) => ('-', digits),
        None => ('+', exponent),
    };
    format!("{mantissa}e{sign}{digits:0>2}")
}

/// A string in single quotes as the Go library quotes it: Go's escapes, `"` bare, `'` escaped.
fn quote(s: &str) -> String {
    crate::sprig::go_quoted(s, '\'')
}

/// The Go type Helm names for values that are not a map.
fn go_type(value: &Value) -> &'static str {
    match value {
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float64",
        Value::Number(_) => "int64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
        Value::Null => "<nil>",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_as_go_prints_a_float64() {
        let n = |v: f64| go_float(&Number::from_f64(v).unwrap());
        assert_eq!(n(-5.0), "-5");
        assert_eq!(n(0.5), "0.5");
        assert_eq!(n(1e21), "1e+21");
        assert_eq!(n(0.00001), "1e-05");
        assert_eq!(go_float(&Number::from(100000)), "100000");
    }

    #[test]
    fn a_schema_that_unfolds_exponentially_is_refused_before_it_is_used() {
        let mut defs = Map::new();
        for level in 0..40 {
            let next = format!("#/$defs/d{}", level + 1);
            defs.insert(
                format!("d{level}"),
                serde_json::json!({"allOf": [{"$ref": next}, {"$ref": next}]}),
            );
        }
        defs.insert("d40".into(), serde_json::json!({"type": "object"}));
        let schema = serde_json::json!({"$ref": "#/$defs/d0", "$defs": defs});
        let error = check(schema.to_string().as_bytes(), &Map::new()).unwrap_err();
        assert!(error.contains("unfolds to more than"), "{error}");
        // A recursive schema (a tree of values) is fine.
        let tree = serde_json::json!({"type": "object",
            "properties": {"children": {"type": "array", "items": {"$ref": "#"}}}});
        let values = serde_json::json!({"children": [{"children": []}]});
        assert_eq!(
            check(tree.to_string().as_bytes(), values.as_object().unwrap()),
            Ok(None)
        );
    }

    #[test]
    fn a_schema_may_not_read_files_or_the_network_or_name_itself_otherwise() {
        for reference in [
            "file:///etc/passwd",
            "https://example.com/s.json",
            "values.schema.json#/$defs/a",
            "#anchor",
        ] {
            let schema = serde_json::json!({"$ref": reference, "$defs": {"a": {}}});
            let error = check(schema.to_string().as_bytes(), &Map::new()).unwrap_err();
            assert!(error.contains("within the schema only"), "{error}");
        }
        let nested_id = serde_json::json!({"properties": {"a": {"$id": "other.json"}}});
        let error = check(nested_id.to_string().as_bytes(), &Map::new()).unwrap_err();
        assert!(error.contains("below the schema's root"), "{error}");
        // A long chain of references is refused before the validator follows it.
        let mut defs = Map::new();
        for level in 0..2_000 {
            defs.insert(
                format!("d{level}"),
                serde_json::json!({"$ref": format!("#/$defs/d{}", level + 1)}),
            );
        }
        defs.insert("d2000".into(), serde_json::json!({}));
        let chain = serde_json::json!({"$ref": "#/$defs/d0", "$defs": defs});
        let error = check(chain.to_string().as_bytes(), &Map::new()).unwrap_err();
        assert!(error.contains("deep"), "{error}");
    }

    #[test]
    fn strings_are_quoted_as_the_go_library_quotes_them() {
        assert_eq!(quote(r#"it's "x""#), r#"'it\'s "x"'"#);
        assert_eq!(quote("a\nb"), r"'a\nb'");
    }
}
