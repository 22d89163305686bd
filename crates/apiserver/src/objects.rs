//! Object metadata rules shared by every kind: names, label and field selectors, timestamps.

use serde_json::{Map, Value};

use crate::status::{ApiError, ApiResult, Cause};

/// RFC 1123 subdomain: what most Kubernetes object names must be.
pub fn is_dns1123_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

/// RFC 1123 label: namespace names.
pub fn is_dns1123_label(name: &str) -> bool {
    name.len() <= 63 && !name.contains('.') && is_dns1123_subdomain(name)
}

/// RFC 1035 label: resource (plural) names.
pub fn is_dns1035_label(name: &str) -> bool {
    is_dns1123_label(name) && name.as_bytes()[0].is_ascii_lowercase()
}

pub fn name_causes(name: &str, label: bool) -> Vec<Cause> {
    let value = Value::from(name);
    if name.is_empty() {
        return vec![Cause::required("metadata.name")];
    }
    let ok = if label {
        is_dns1123_label(name)
    } else {
        is_dns1123_subdomain(name)
    };
    if ok {
        return vec![];
    }
    let what = if label {
        "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc')"
    } else {
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com')"
    };
    vec![Cause::invalid("metadata.name", &value, what)]
}

/// Checks label keys and values as Kubernetes does (qualified names, 63-character values).
pub fn label_causes(labels: &Value, field: &str) -> Vec<Cause> {
    let mut causes = vec![];
    let Some(map) = labels.as_object() else {
        if !labels.is_null() {
            causes.push(Cause::type_invalid(field, labels, "object"));
        }
        return causes;
    };
    for (key, value) in map {
        let (prefix, name) = key
            .rsplit_once('/')
            .map_or((None, key.as_str()), |(p, n)| (Some(p), n));
        let name_ok = !name.is_empty()
            && name.len() <= 63
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && name.as_bytes()[0].is_ascii_alphanumeric()
            && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric();
        if !name_ok || prefix.is_some_and(|p| !is_dns1123_subdomain(p)) {
            causes.push(Cause::invalid(field, &Value::from(key.as_str()), "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"));
        }
        match value.as_str() {
            Some("") => {}
            Some(v)
                if v.len() <= 63
                    && v.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
                    && v.as_bytes()[0].is_ascii_alphanumeric()
                    && v.as_bytes()[v.len() - 1].is_ascii_alphanumeric() => {}
            _ => causes.push(Cause::invalid(
                format!("{field}.{key}"),
                value,
                "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
            )),
        }
    }
    causes
}

pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

pub fn meta(object: &Value) -> &Value {
    &object["metadata"]
}

pub fn meta_mut(object: &mut Value) -> &mut Map<String, Value> {
    if !object["metadata"].is_object() {
        object["metadata"] = Value::Object(Map::new());
    }
    object["metadata"]
        .as_object_mut()
        .expect("metadata is an object")
}

pub fn name_of(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap_or_default()
}

pub fn finalizers(object: &Value) -> Vec<String> {
    object["metadata"]["finalizers"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|f| f.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

#[derive(Clone, Debug, PartialEq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A parsed `labelSelector` (`a=b,c!=d,e in (x,y),!f`) or `fieldSelector` (`metadata.name=x`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

impl Selector {
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    pub fn parse_labels(text: &str) -> ApiResult<Selector> {
        let mut requirements = vec![];
        for term in split_terms(text) {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            let bad = || {
                ApiError::bad_request(format!(
                    "unable to parse requirement: invalid label selector term {term:?}"
                ))
            };
            let requirement = if let Some(key) = term.strip_prefix('!') {
                Requirement::DoesNotExist(key.trim().to_string())
            } else if let Some((key, rest)) = split_word(term, " notin ") {
                Requirement::NotIn(key, parse_set(&rest).ok_or_else(bad)?)
            } else if let Some((key, rest)) = split_word(term, " in ") {
                Requirement::In(key, parse_set(&rest).ok_or_else(bad)?)
            } else if let Some((key, value)) = term.split_once("!=") {
                Requirement::NotEquals(key.trim().into(), value.trim().into())
            } else if let Some((key, value)) =
                term.split_once("==").or_else(|| term.split_once('='))
            {
                Requirement::Equals(key.trim().into(), value.trim().into())
            } else if term
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_./".contains(&b))
            {
                Requirement::Exists(term.to_string())
            } else {
                return Err(bad());
            };
            requirements.push(requirement);
        }
        Ok(Selector { requirements })
    }

    /// Field selectors support `=`, `==` and `!=` on the fields the kind allows.
    pub fn parse_fields(text: &str, allowed: &dyn Fn(&str) -> bool) -> ApiResult<Selector> {
        let mut requirements = vec![];
        for term in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let requirement = if let Some((key, value)) = term.split_once("!=") {
                Requirement::NotEquals(key.trim().into(), value.trim().into())
            } else if let Some((key, value)) =
                term.split_once("==").or_else(|| term.split_once('='))
            {
                Requirement::Equals(key.trim().into(), value.trim().into())
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid field selector term {term:?}: expected FIELD=VALUE or FIELD!=VALUE"
                )));
            };
            let (Requirement::Equals(key, _) | Requirement::NotEquals(key, _)) = &requirement
            else {
                unreachable!()
            };
            if !allowed(key) {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {key}"
                )));
            }
            requirements.push(requirement);
        }
        Ok(Selector { requirements })
    }

    /// Matches against a lookup (label map, or dotted field paths).
    pub fn matches(&self, lookup: &dyn Fn(&str) -> Option<String>) -> bool {
        self.requirements.iter().all(|r| match r {
            Requirement::Equals(k, v) => lookup(k).as_deref() == Some(v.as_str()),
            Requirement::NotEquals(k, v) => lookup(k).as_deref() != Some(v.as_str()),
            Requirement::In(k, vs) => lookup(k).is_some_and(|x| vs.contains(&x)),
            Requirement::NotIn(k, vs) => lookup(k).is_none_or(|x| !vs.contains(&x)),
            Requirement::Exists(k) => lookup(k).is_some(),
            Requirement::DoesNotExist(k) => lookup(k).is_none(),
        })
    }

    pub fn matches_labels(&self, object: &Value) -> bool {
        let labels = &object["metadata"]["labels"];
        self.matches(&|k| labels.get(k).and_then(Value::as_str).map(String::from))
    }

    /// Field values are read by dotted path; a missing field reads as "" as in Kubernetes.
    pub fn matches_fields(&self, object: &Value) -> bool {
        self.matches(&|path| {
            let mut node = object;
            for part in path.split('.') {
                node = &node[part];
            }
            Some(match node {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            })
        })
    }
}

/// Splits on commas that are not inside `( )`.
fn split_terms(text: &str) -> Vec<String> {
    let (mut terms, mut current, mut depth) = (vec![], String::new(), 0);
    for c in text.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                terms.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    terms.push(current);
    terms
}

fn split_word(term: &str, word: &str) -> Option<(String, String)> {
    term.split_once(word)
        .map(|(k, rest)| (k.trim().to_string(), rest.trim().to_string()))
}

fn parse_set(text: &str) -> Option<Vec<String>> {
    let inner = text.strip_prefix('(')?.strip_suffix(')')?;
    Some(
        inner
            .split(',')
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names() {
        for (name, subdomain, label) in [
            ("prod-us-east", true, true),
            ("a.b", true, false),
            ("Prod", false, false),
            ("-a", false, false),
            ("a-", false, false),
            ("", false, false),
            ("a_b", false, false),
        ] {
            assert_eq!(is_dns1123_subdomain(name), subdomain, "{name}");
            assert_eq!(is_dns1123_label(name), label, "{name}");
        }
    }

    #[test]
    fn label_selectors() {
        let object = json!({"metadata": {"labels": {"env": "prod", "tier": "web"}}});
        for (selector, expect) in [
            ("env=prod", true),
            ("env==prod", true),
            ("env!=prod", false),
            ("env in (prod, dev)", true),
            ("env notin (prod)", false),
            ("tier,env=prod", true),
            ("!tier", false),
            ("!missing", true),
            ("missing", false),
            ("", true),
        ] {
            let parsed = Selector::parse_labels(selector).unwrap();
            assert_eq!(parsed.matches_labels(&object), expect, "{selector}");
        }
        assert!(Selector::parse_labels("env in prod").is_err());
    }

    #[test]
    fn field_selectors() {
        let object = json!({"metadata": {"name": "a", "namespace": "ns"}});
        let allowed = |f: &str| f.starts_with("metadata.");
        assert!(
            Selector::parse_fields("metadata.name=a", &allowed)
                .unwrap()
                .matches_fields(&object)
        );
        assert!(
            !Selector::parse_fields("metadata.name!=a", &allowed)
                .unwrap()
                .matches_fields(&object)
        );
        assert!(Selector::parse_fields("spec.x=a", &allowed).is_err());
    }
}
