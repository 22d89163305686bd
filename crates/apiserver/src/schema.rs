//! Structural OpenAPI v3 schemas, as CustomResourceDefinitions carry them: validation with one
//! cause per bad field, pruning of unknown fields, and defaulting.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use regex::Regex;
use serde_json::{Map, Value};

use crate::status::Cause;

/// What one pass over an object found.
#[derive(Debug, Default)]
pub struct Findings {
    /// Values that break the schema: a 422.
    pub causes: Vec<Cause>,
    /// Fields the schema does not know; pruned, and a 400 under `fieldValidation=Strict`.
    pub unknown: Vec<String>,
}

/// Defaults, prunes and validates `object` (a whole object, `apiVersion` to `status`) in place.
/// `metadata`, `apiVersion` and `kind` are the API server's business and are left alone.
pub fn process(schema: &Value, object: &mut Value) -> Findings {
    let mut findings = Findings::default();
    let Some(fields) = object.as_object_mut() else {
        findings
            .causes
            .push(Cause::type_invalid("", object, "object"));
        return findings;
    };
    let properties = schema.get("properties").and_then(Value::as_object);
    let keys: Vec<String> = fields.keys().cloned().collect();
    for key in keys {
        if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        match properties.and_then(|p| p.get(&key)) {
            Some(sub) => {
                let value = fields.get_mut(&key).expect("key listed");
                walk(sub, value, &key, &mut findings);
                if value.is_null() && !nullable(sub) {
                    fields.remove(&key);
                }
            }
            None if preserves_unknown(schema) => {}
            None => {
                fields.remove(&key);
                findings.unknown.push(key);
            }
        }
    }
    if let Some(properties) = properties {
        for (key, sub) in properties {
            if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            if !fields.contains_key(key)
                && let Some(default) = sub.get("default")
            {
                let mut value = default.clone();
                walk(sub, &mut value, key, &mut findings);
                fields.insert(key.clone(), value);
            }
        }
    }
    required(schema, fields, "", &mut findings);
    findings
}

fn nullable(schema: &Value) -> bool {
    schema
        .get("nullable")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

fn preserves_unknown(schema: &Value) -> bool {
    schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn required(schema: &Value, fields: &Map<String, Value>, path: &str, findings: &mut Findings) {
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for name in required.iter().filter_map(Value::as_str) {
            if matches!(name, "apiVersion" | "kind" | "metadata") && path.is_empty() {
                continue;
            }
            if !fields.contains_key(name) {
                findings.causes.push(Cause::required(join(path, name)));
            }
        }
    }
}

fn walk(schema: &Value, value: &mut Value, path: &str, findings: &mut Findings) {
    if value.is_null() {
        return;
    }
    let int_or_string = schema
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let declared = schema.get("type").and_then(Value::as_str);
    if int_or_string {
        if !(value.is_i64() || value.is_u64() || value.is_string()) {
            findings
                .causes
                .push(Cause::type_invalid(path, value, "integer or string"));
            return;
        }
        // An IntOrString's number is 32 bits wide, as Kubernetes' (and lariat's) types hold it.
        if value.is_number() && value.as_i64().and_then(|n| i32::try_from(n).ok()).is_none() {
            findings.causes.push(Cause::invalid(
                path,
                value,
                "must be a 32-bit integer or a string",
            ));
            return;
        }
    } else if let Some(expected) = declared {
        let ok = match expected {
            "object" => value.is_object(),
            "array" => value.is_array(),
            "string" => value.is_string(),
            "boolean" => value.is_boolean(),
            "integer" => {
                value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0)
            }
            "number" => value.is_number(),
            _ => true,
        };
        if !ok {
            findings
                .causes
                .push(Cause::type_invalid(path, value, expected));
            return;
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        findings
            .causes
            .push(Cause::not_supported(path, value, allowed));
    }
    match value {
        Value::Object(fields) => walk_object(schema, fields, path, findings),
        Value::Array(items) => {
            if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
                && items.len() as u64 > max
            {
                findings.causes.push(Cause {
                    reason: "FieldValueTooMany",
                    message: format!("Too many: {}: must have at most {max} items", items.len()),
                    field: path.to_string(),
                });
            }
            if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
                && (items.len() as u64) < min
            {
                findings.causes.push(Cause::invalid(
                    path,
                    &Value::from(items.len()),
                    format!("should have at least {min} items"),
                ));
            }
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    walk(item_schema, item, &format!("{path}[{i}]"), findings);
                }
            }
        }
        Value::String(text) => walk_string(schema, text, path, findings),
        Value::Number(n) => walk_number(schema, n, path, findings),
        _ => {}
    }
}

/// A string's length, pattern and format.
fn walk_string(schema: &Value, text: &str, path: &str, findings: &mut Findings) {
    let shown = Value::String(text.to_string());
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
        && text.chars().count() as u64 > max
    {
        findings.causes.push(Cause {
            reason: "FieldValueTooLong",
            message: format!("Too long: may not be more than {max} bytes"),
            field: path.to_string(),
        });
    }
    if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
        && (text.chars().count() as u64) < min
    {
        findings.causes.push(Cause::invalid(
            path,
            &shown,
            format!("should be at least {min} chars long"),
        ));
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
        match compiled(pattern) {
            Some(re) if !re.is_match(text) => {
                findings.causes.push(Cause::invalid(
                    path,
                    &shown,
                    format!("should match '{pattern}'"),
                ));
            }
            _ => {}
        }
    }
    if schema.get("format").and_then(Value::as_str) == Some("byte") && {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD
            .decode(text.as_bytes())
            .is_err()
    } {
        // Bytes are often a secret's (a Secret's data, a key): never echoed.
        findings.causes.push(Cause::invalid(
            path,
            &Value::String("<withheld>".into()),
            "must be base64-encoded",
        ));
    }
    if schema.get("format").and_then(Value::as_str) == Some("date-time")
        && chrono::DateTime::parse_from_rfc3339(text).is_err()
    {
        findings.causes.push(Cause::invalid(
            path,
            &shown,
            "must be an RFC 3339 date-time",
        ));
    }
}

/// A number's width and bounds.
fn walk_number(schema: &Value, n: &serde_json::Number, path: &str, findings: &mut Findings) {
    let shown = Value::Number(n.clone());
    let x = n.as_f64().unwrap_or_default();
    if schema.get("format").and_then(Value::as_str) == Some("int32")
        && n.as_i64().and_then(|n| i32::try_from(n).ok()).is_none()
        && n.as_f64()
            .is_none_or(|f| f.fract() != 0.0 || f.abs() > i32::MAX as f64)
    {
        findings
            .causes
            .push(Cause::invalid(path, &shown, "must fit in 32 bits"));
    }
    let exclusive = |key: &str| schema.get(key).and_then(Value::as_bool).unwrap_or(false);
    if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
        && (x < min || (exclusive("exclusiveMinimum") && x == min))
    {
        let how = if exclusive("exclusiveMinimum") {
            "greater than"
        } else {
            "greater than or equal to"
        };
        findings.causes.push(Cause::invalid(
            path,
            &shown,
            format!("should be {how} {min}"),
        ));
    }
    if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
        && (x > max || (exclusive("exclusiveMaximum") && x == max))
    {
        let how = if exclusive("exclusiveMaximum") {
            "less than"
        } else {
            "less than or equal to"
        };
        findings.causes.push(Cause::invalid(
            path,
            &shown,
            format!("should be {how} {max}"),
        ));
    }
}

fn walk_object(
    schema: &Value,
    fields: &mut Map<String, Value>,
    path: &str,
    findings: &mut Findings,
) {
    let properties = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties");
    let keys: Vec<String> = fields.keys().cloned().collect();
    for key in keys {
        let sub = properties.and_then(|p| p.get(&key)).or(match additional {
            Some(Value::Object(s)) => Some(additional.expect("matched"))
                .filter(|_| !s.is_empty())
                .or(None),
            _ => None,
        });
        let child = join(path, &key);
        match sub {
            Some(sub) => {
                let value = fields.get_mut(&key).expect("key listed");
                walk(sub, value, &child, findings);
                if value.is_null() && !nullable(sub) {
                    fields.remove(&key);
                }
            }
            None if preserves_unknown(schema) || additional == Some(&Value::Bool(true)) => {}
            None if matches!(additional, Some(Value::Object(s)) if s.is_empty()) => {}
            None if properties.is_none() && schema.get("type").is_none() => {}
            None => {
                fields.remove(&key);
                findings.unknown.push(child);
            }
        }
    }
    if let Some(properties) = properties {
        for (key, sub) in properties {
            if !fields.contains_key(key)
                && let Some(default) = sub.get("default")
            {
                let mut value = default.clone();
                walk(sub, &mut value, &join(path, key), findings);
                fields.insert(key.clone(), value);
            }
        }
    }
    if let Some(max) = schema.get("maxProperties").and_then(Value::as_u64)
        && fields.len() as u64 > max
    {
        findings.causes.push(Cause::invalid(
            path,
            &Value::from(fields.len()),
            format!("must have at most {max} properties"),
        ));
    }
    required(schema, fields, path, findings);
}

/// Patterns are compiled once: schemas are few, objects many.
fn compiled(pattern: &str) -> Option<Regex> {
    static CACHE: LazyLock<Mutex<HashMap<String, Option<Regex>>>> = LazyLock::new(Default::default);
    let mut cache = CACHE.lock().expect("pattern cache");
    cache
        .entry(pattern.to_string())
        .or_insert_with(|| Regex::new(pattern).ok())
        .clone()
}

/// Checks that a CRD schema is structural enough to prune and validate with: every node has a
/// type (or is int-or-string / preserves unknown fields), patterns compile, defaults match.
pub fn check_structural(schema: &Value, path: &str, causes: &mut Vec<Cause>) {
    let Some(node) = schema.as_object() else {
        causes.push(Cause::type_invalid(path, schema, "object"));
        return;
    };
    let has_type = node.get("type").and_then(Value::as_str).is_some();
    let escape = node.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true))
        || node.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    // The root, and any node that has children, must say what it is.
    let must_be_typed = path.ends_with("openAPIV3Schema")
        || node.contains_key("properties")
        || node.contains_key("items");
    if !has_type && !escape && must_be_typed {
        causes.push(Cause::required(format!("{path}.type")));
    }
    if let Some(t) = node.get("type") {
        let allowed = ["object", "array", "string", "integer", "number", "boolean"];
        if !t.as_str().is_some_and(|t| allowed.contains(&t)) {
            let values: Vec<Value> = allowed.iter().map(|s| Value::from(*s)).collect();
            causes.push(Cause::not_supported(format!("{path}.type"), t, &values));
        }
    }
    if let Some(pattern) = node.get("pattern").and_then(Value::as_str)
        && compiled(pattern).is_none()
    {
        causes.push(Cause::invalid(
            format!("{path}.pattern"),
            &Value::from(pattern),
            "must be a valid regular expression",
        ));
    }
    if node.get("type").and_then(Value::as_str) == Some("array") && !node.contains_key("items") {
        causes.push(Cause::required(format!("{path}.items")));
    }
    if let Some(properties) = node.get("properties").and_then(Value::as_object) {
        for (key, sub) in properties {
            check_structural(sub, &format!("{path}.properties[{key}]"), causes);
        }
    }
    if let Some(items) = node.get("items") {
        check_structural(items, &format!("{path}.items"), causes);
    }
    if let Some(additional @ Value::Object(_)) = node.get("additionalProperties") {
        check_structural(additional, &format!("{path}.additionalProperties"), causes);
    }
    if let Some(default) = node.get("default") {
        let mut value = default.clone();
        let mut findings = Findings::default();
        walk(schema, &mut value, "", &mut findings);
        if !findings.causes.is_empty() {
            causes.push(Cause::invalid(
                format!("{path}.default"),
                default,
                "must validate against its own schema",
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["size"],
                    "properties": {
                        "size": {"type": "integer", "minimum": 1, "maximum": 10},
                        "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                        "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 5},
                        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "port": {"x-kubernetes-int-or-string": true},
                        "ca": {"type": "string", "format": "byte"},
                        "count": {"type": "integer", "format": "int32"}
                    }
                }
            }
        })
    }

    fn check(mut object: Value, causes: &[(&str, &str)], unknown: &[&str]) -> Value {
        let findings = process(&schema(), &mut object);
        let got: Vec<(String, String)> = findings
            .causes
            .iter()
            .map(|c| (c.field.clone(), c.reason.to_string()))
            .collect();
        let want: Vec<(String, String)> = causes
            .iter()
            .map(|(f, r)| (f.to_string(), r.to_string()))
            .collect();
        assert_eq!(got, want, "causes for {object}");
        assert_eq!(findings.unknown, unknown);
        object
    }

    #[test]
    fn bytes_are_base64_and_32_bit_numbers_fit() {
        check(
            json!({"spec": {"size": 1, "ca": "aGVsbG8=", "count": 7, "port": -5}}),
            &[],
            &[],
        );
        check(
            json!({"spec": {"size": 1, "ca": "!!not base64", "count": 4294967296_i64, "port": -9223372036854775808_i64}}),
            &[
                ("spec.ca", "FieldValueInvalid"),
                ("spec.count", "FieldValueInvalid"),
                ("spec.port", "FieldValueInvalid"),
            ],
            &[],
        );
    }

    #[test]
    fn valid_object_gets_defaults() {
        let out = check(json!({"spec": {"size": 3}}), &[], &[]);
        assert_eq!(out["spec"]["color"], "red");
    }

    #[test]
    fn each_bad_field_is_one_cause() {
        check(
            json!({"spec": {"size": 11, "color": "green", "name": "ABCDEFG", "tags": ["a", "b", "c"], "port": 1.5}}),
            &[
                ("spec.size", "FieldValueInvalid"),
                ("spec.color", "FieldValueNotSupported"),
                ("spec.name", "FieldValueTooLong"),
                ("spec.name", "FieldValueInvalid"),
                ("spec.tags", "FieldValueTooMany"),
                ("spec.port", "FieldValueTypeInvalid"),
            ],
            &[],
        );
        check(
            json!({"spec": {}}),
            &[("spec.size", "FieldValueRequired")],
            &[],
        );
        check(
            json!({"spec": {"size": "3"}}),
            &[("spec.size", "FieldValueTypeInvalid")],
            &[],
        );
    }

    #[test]
    fn unknown_fields_are_pruned_except_where_preserved() {
        let out = check(
            json!({"spec": {"size": 1, "bogus": 1, "free": {"anything": {"goes": 1}}, "labels": {"a": "b"}}, "extra": true}),
            &[],
            &["spec.bogus", "extra"],
        );
        assert!(out["spec"].get("bogus").is_none());
        assert_eq!(out["spec"]["free"]["anything"]["goes"], 1);
        assert_eq!(out["spec"]["labels"]["a"], "b");
    }

    #[test]
    fn structural_check_names_untyped_nodes() {
        let mut causes = vec![];
        check_structural(
            &json!({"type": "object", "properties": {"a": {"properties": {}}, "b": {"type": "array"}}}),
            "s",
            &mut causes,
        );
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(fields, ["s.properties[a].type", "s.properties[b].items"]);
    }
}
