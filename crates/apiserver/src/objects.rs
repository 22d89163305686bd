//! Object metadata rules shared by every kind: names, label and field selectors, timestamps.

use serde_json::{Map, Value};

use crate::status::{ApiError, ApiResult, Cause};

/// The namespace finalizer (in `spec.finalizers`): the namespace is emptied first.
pub const NAMESPACE_FINALIZER: &str = "kubernetes";

pub use lariat_api::names::{
    is_dns1123_label, is_dns1123_subdomain, is_label_value, is_qualified_name,
};

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

/// RBAC's names (`system:basic-user`): any path segment, as kube-apiserver allows them.
pub fn path_segment_name_causes(name: &str) -> Vec<Cause> {
    if name.is_empty() {
        return vec![Cause::required("metadata.name")];
    }
    let why = if name == "." || name == ".." {
        Some(format!("may not be '{name}'"))
    } else {
        ["/", "%"]
            .into_iter()
            .find(|c| name.contains(c))
            .map(|c| format!("may not contain '{c}'"))
    };
    match why {
        Some(why) => vec![Cause::invalid("metadata.name", &Value::from(name), why)],
        None if name.len() > 253 => vec![Cause::invalid(
            "metadata.name",
            &Value::from(name),
            "must be no more than 253 characters",
        )],
        None => vec![],
    }
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
        if !is_qualified_name(key) {
            causes.push(Cause::invalid(field, &Value::from(key.as_str()), "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"));
        }
        if !value.as_str().is_some_and(is_label_value) {
            causes.push(Cause::invalid(
                format!("{field}.{key}"),
                value,
                "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
            ));
        }
    }
    causes
}

/// The most data a ConfigMap or Secret may hold, as in Kubernetes (1 MiB).
pub const MAX_DATA_BYTES: usize = 1024 * 1024;

/// A ConfigMap or Secret key: `[-._a-zA-Z0-9]+`, at most 253 characters, not `.` or `..`
/// and not starting with `..` (keys become file names in volumes).
pub fn data_key_causes(field: &str, key: &str) -> Vec<Cause> {
    let ok = !key.is_empty()
        && key.len() <= 253
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && key != "."
        && !key.starts_with("..");
    if ok {
        return vec![];
    }
    vec![Cause::invalid(
        field,
        &Value::from(key),
        "a valid config key must consist of alphanumeric characters, '-', '_' or '.', be at most 253 characters, and not be '.' or start with '..' (e.g. 'key.name')",
    )]
}

pub fn data_size_causes(field: &str, size: usize) -> Vec<Cause> {
    if size <= MAX_DATA_BYTES {
        return vec![];
    }
    vec![Cause {
        reason: "FieldValueTooLong",
        message: format!("Too long: must have at most {MAX_DATA_BYTES} bytes"),
        field: field.into(),
    }]
}

/// `metadata.ownerReferences`: objects naming apiVersion, kind, name and uid as strings, with
/// at most one controller.
pub fn owner_reference_causes(references: &Value) -> Vec<Cause> {
    const FIELD: &str = "metadata.ownerReferences";
    let Some(references) = references.as_array() else {
        return if references.is_null() {
            vec![]
        } else {
            vec![Cause::type_invalid(FIELD, references, "array")]
        };
    };
    let mut causes = vec![];
    for (i, reference) in references.iter().enumerate() {
        if !reference.is_object() {
            causes.push(Cause::type_invalid(
                format!("{FIELD}[{i}]"),
                reference,
                "object",
            ));
            continue;
        }
        for field in ["apiVersion", "kind", "name", "uid"] {
            match &reference[field] {
                Value::String(s) if !s.is_empty() => {}
                Value::String(_) | Value::Null => {
                    causes.push(Cause::required(format!("{FIELD}[{i}].{field}")))
                }
                other => causes.push(Cause::type_invalid(
                    format!("{FIELD}[{i}].{field}"),
                    other,
                    "string",
                )),
            }
        }
        for field in ["controller", "blockOwnerDeletion"] {
            let value = &reference[field];
            if !value.is_null() && !value.is_boolean() {
                causes.push(Cause::type_invalid(
                    format!("{FIELD}[{i}].{field}"),
                    value,
                    "boolean",
                ));
            }
        }
    }
    if references
        .iter()
        .filter(|r| r["controller"] == true)
        .count()
        > 1
    {
        causes.push(Cause::invalid(
            FIELD,
            &Value::from("..."),
            "Only one reference can have Controller set to true",
        ));
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
    GreaterThan(String, i64),
    LessThan(String, i64),
}

/// A parsed `labelSelector` (`a=b,c!=d,e in (x,y),!f,g>3`) or `fieldSelector`
/// (`metadata.name=x`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

/// The tokens of Kubernetes's label selector grammar (`k8s.io/apimachinery/pkg/labels`).
#[derive(Clone, Debug, PartialEq)]
enum Token {
    Identifier(String),
    Not,
    Equals,
    DoubleEquals,
    NotEquals,
    In,
    NotIn,
    GreaterThan,
    LessThan,
    Open,
    Close,
    Comma,
}

impl Token {
    fn describe(token: Option<&Token>) -> String {
        match token {
            None => "end of string".into(),
            Some(Token::Identifier(s)) => format!("'{s}'"),
            Some(other) => format!("'{}'", other.symbol()),
        }
    }

    fn symbol(&self) -> &'static str {
        match self {
            Token::Identifier(_) => "identifier",
            Token::Not => "!",
            Token::Equals => "=",
            Token::DoubleEquals => "==",
            Token::NotEquals => "!=",
            Token::In => "in",
            Token::NotIn => "notin",
            Token::GreaterThan => ">",
            Token::LessThan => "<",
            Token::Open => "(",
            Token::Close => ")",
            Token::Comma => ",",
        }
    }
}

/// Splits a label selector into tokens: whitespace separates, the symbols `! = == != ( ) , > <`
/// stand alone, and every other run of characters is an identifier (or `in`/`notin`).
fn tokenize(text: &str) -> Vec<Token> {
    const SPECIAL: &[char] = &['!', '=', '(', ')', ',', '>', '<'];
    let mut tokens = vec![];
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        if SPECIAL.contains(&c) {
            chars.next();
            let doubled = chars.peek() == Some(&'=');
            tokens.push(match c {
                '!' if doubled => {
                    chars.next();
                    Token::NotEquals
                }
                '=' if doubled => {
                    chars.next();
                    Token::DoubleEquals
                }
                '!' => Token::Not,
                '=' => Token::Equals,
                '(' => Token::Open,
                ')' => Token::Close,
                ',' => Token::Comma,
                '>' => Token::GreaterThan,
                _ => Token::LessThan,
            });
            continue;
        }
        let mut word = String::new();
        while let Some(&c) = chars.peek() {
            if c.is_whitespace() || SPECIAL.contains(&c) {
                break;
            }
            word.push(c);
            chars.next();
        }
        tokens.push(match word.as_str() {
            "in" => Token::In,
            "notin" => Token::NotIn,
            _ => Token::Identifier(word),
        });
    }
    tokens
}

struct SelectorParser {
    tokens: std::vec::IntoIter<Token>,
    peeked: Option<Token>,
}

impl SelectorParser {
    fn peek(&mut self) -> Option<&Token> {
        if self.peeked.is_none() {
            self.peeked = self.tokens.next();
        }
        self.peeked.as_ref()
    }

    fn next(&mut self) -> Option<Token> {
        self.peek();
        self.peeked.take()
    }

    fn key(&mut self) -> Result<String, String> {
        match self.next() {
            Some(Token::Identifier(key)) if is_qualified_name(&key) => Ok(key),
            Some(Token::Identifier(key)) => Err(format!(
                "invalid label key {key:?}: a key is an optional DNS subdomain prefix and '/', then a name of at most 63 alphanumeric characters, '-', '_' or '.' that starts and ends with an alphanumeric character"
            )),
            other => Err(format!(
                "found {}, expected: identifier",
                Token::describe(other.as_ref())
            )),
        }
    }

    fn value(&mut self) -> Result<String, String> {
        let value = match self.peek() {
            Some(Token::Identifier(_)) => match self.next() {
                Some(Token::Identifier(v)) => v,
                _ => unreachable!("peeked an identifier"),
            },
            // `a=` selects an empty value.
            Some(Token::Comma) | None => String::new(),
            other => {
                return Err(format!(
                    "found {}, expected: identifier",
                    Token::describe(other)
                ));
            }
        };
        if !is_label_value(&value) {
            return Err(format!(
                "invalid label value {value:?}: at most 63 alphanumeric characters, '-', '_' or '.', starting and ending with an alphanumeric character"
            ));
        }
        Ok(value)
    }

    fn set(&mut self) -> Result<Vec<String>, String> {
        match self.next() {
            Some(Token::Open) => {}
            other => {
                return Err(format!(
                    "found {}, expected: '('",
                    Token::describe(other.as_ref())
                ));
            }
        }
        let mut values = vec![];
        loop {
            match self.peek() {
                Some(Token::Close) if !values.is_empty() => {
                    self.next();
                    return Ok(values);
                }
                Some(Token::Close) => {
                    return Err("for 'in', 'notin' operators, values set can't be empty".into());
                }
                _ => {}
            }
            let value = match self.peek() {
                Some(Token::Comma | Token::Close) => String::new(),
                _ => self.value()?,
            };
            values.push(value);
            match self.next() {
                Some(Token::Comma) => {}
                Some(Token::Close) => return Ok(values),
                other => {
                    return Err(format!(
                        "found {}, expected: ',' or ')'",
                        Token::describe(other.as_ref())
                    ));
                }
            }
        }
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        if self.peek() == Some(&Token::Not) {
            self.next();
            return Ok(Requirement::DoesNotExist(self.key()?));
        }
        let key = self.key()?;
        let operator = match self.peek() {
            Some(Token::Comma) | None => return Ok(Requirement::Exists(key)),
            _ => self.next().expect("peeked"),
        };
        Ok(match operator {
            Token::Equals | Token::DoubleEquals => Requirement::Equals(key, self.value()?),
            Token::NotEquals => Requirement::NotEquals(key, self.value()?),
            Token::In => Requirement::In(key, self.set()?),
            Token::NotIn => Requirement::NotIn(key, self.set()?),
            Token::GreaterThan | Token::LessThan => {
                let value = self.value()?;
                let number = value.parse::<i64>().map_err(|_| {
                    format!("for 'Gt', 'Lt' operators, the value must be an integer, not {value:?}")
                })?;
                if operator == Token::GreaterThan {
                    Requirement::GreaterThan(key, number)
                } else {
                    Requirement::LessThan(key, number)
                }
            }
            other => {
                return Err(format!(
                    "found '{}', expected: in, notin, =, ==, !=, gt, lt",
                    other.symbol()
                ));
            }
        })
    }
}

impl Selector {
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Parses a label selector with Kubernetes's grammar and validation: anything else is a
    /// 400, never a selector that matches more than was asked.
    pub fn parse_labels(text: &str) -> ApiResult<Selector> {
        let mut parser = SelectorParser {
            tokens: tokenize(text).into_iter(),
            peeked: None,
        };
        let mut requirements = vec![];
        let fail = |why: String| {
            ApiError::bad_request(format!(
                "unable to parse requirement: invalid label selector {text:?}: {why}"
            ))
        };
        if parser.peek().is_none() {
            return Ok(Selector { requirements });
        }
        loop {
            requirements.push(parser.requirement().map_err(fail)?);
            match parser.next() {
                None => return Ok(Selector { requirements }),
                Some(Token::Comma) if parser.peek().is_some() => {}
                Some(Token::Comma) => {
                    return Err(fail("found end of string, expected: identifier".into()));
                }
                other => {
                    return Err(fail(format!(
                        "found {}, expected: ',' or 'end of string'",
                        Token::describe(other.as_ref())
                    )));
                }
            }
        }
    }

    /// Field selectors support `=`, `==` and `!=` on the fields the kind allows; `\`
    /// escapes a `,`, `=` or `\` in a value, as in Kubernetes.
    /// `resolve` gives the path a field label reads (`source` reads `source.component` on
    /// core Events), or `None` for a label the kind does not support.
    pub fn parse_fields(
        text: &str,
        resolve: &dyn Fn(&str) -> Option<String>,
    ) -> ApiResult<Selector> {
        let mut requirements = vec![];
        if text.trim().is_empty() {
            return Ok(Selector { requirements });
        }
        for term in split_unescaped(text, ',') {
            let term = term.trim();
            let bad = || {
                ApiError::bad_request(format!(
                    "invalid field selector {text:?}: the term {term:?} is not FIELD=VALUE, FIELD==VALUE or FIELD!=VALUE"
                ))
            };
            let (key, value, negated) = if let Some((k, v)) = split_operator(term, "!=") {
                (k, v, true)
            } else if let Some((k, v)) =
                split_operator(term, "==").or_else(|| split_operator(term, "="))
            {
                (k, v, false)
            } else {
                return Err(bad());
            };
            let key = key.trim();
            if key.is_empty() || key.contains(char::is_whitespace) {
                return Err(bad());
            }
            let Some(path) = resolve(key) else {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {key}"
                )));
            };
            let value = unescape(value);
            requirements.push(if negated {
                Requirement::NotEquals(path, value)
            } else {
                Requirement::Equals(path, value)
            });
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
            Requirement::GreaterThan(k, n) => lookup(k)
                .and_then(|x| x.parse::<i64>().ok())
                .is_some_and(|x| x > *n),
            Requirement::LessThan(k, n) => lookup(k)
                .and_then(|x| x.parse::<i64>().ok())
                .is_some_and(|x| x < *n),
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

/// Splits on `separator` where it is not escaped with `\\`.
fn split_unescaped(text: &str, separator: char) -> Vec<&str> {
    let mut parts = vec![];
    let (mut start, mut escaped) = (0, false);
    for (i, c) in text.char_indices() {
        match c {
            '\\' if !escaped => escaped = true,
            c if c == separator && !escaped => {
                parts.push(&text[start..i]);
                start = i + c.len_utf8();
            }
            _ => escaped = false,
        }
    }
    parts.push(&text[start..]);
    parts
}

/// Splits a field selector term at its first unescaped `operator`.
fn split_operator<'a>(term: &'a str, operator: &str) -> Option<(&'a str, &'a str)> {
    let mut escaped = false;
    for (i, c) in term.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        if c == '\\' {
            escaped = true;
            continue;
        }
        if term[i..].starts_with(operator) {
            return Some((&term[..i], &term[i + operator.len()..]));
        }
    }
    None
}

fn unescape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut escaped = false;
    for c in value.chars() {
        if c == '\\' && !escaped {
            escaped = true;
            continue;
        }
        escaped = false;
        out.push(c);
    }
    out
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

    /// Regression: `!!!app`, `!ap p`, `=====` and over-long keys were accepted, and some
    /// matched every object (a deletecollection with one emptied a namespace).
    #[test]
    fn label_selector_grammar_is_kubernetes_s() {
        let long_key = "a".repeat(64);
        let long_prefix = format!("{}/x", "a".repeat(254));
        for selector in [
            "!!!app",
            "!ap p",
            "=====",
            "=",
            "a b",
            "a,",
            ",a",
            "a in ()",
            "a in (b",
            "a in b",
            "a notin",
            "a==b==c",
            "a=b c",
            "a>b",
            "a!",
            "(a)",
            "-a",
            "a-",
            "a=-b",
            long_key.as_str(),
            long_prefix.as_str(),
            "bad key/..",
        ] {
            assert!(
                Selector::parse_labels(selector).is_err(),
                "{selector:?} must be refused"
            );
        }
        let object = json!({"metadata": {"labels": {"app": "web", "n": "5", "example.com/x": ""}}});
        for (selector, expect) in [
            ("app=", false),
            ("example.com/x=", true),
            ("example.com/x", true),
            ("n>4", true),
            ("n<5", false),
            ("app in (web,)", true),
            ("  app  =  web  ", true),
            ("app notin (db)", true),
            ("!app", false),
        ] {
            let parsed =
                Selector::parse_labels(selector).unwrap_or_else(|e| panic!("{selector:?}: {e}"));
            assert_eq!(parsed.matches_labels(&object), expect, "{selector}");
        }
    }

    #[test]
    fn field_selectors() {
        let object = json!({"metadata": {"name": "a", "namespace": "ns"}});
        let allowed = |f: &str| f.starts_with("metadata.").then(|| f.to_string());
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
        for bad in ["metadata.name", "=a", "metadata.name!a", "metadata name=a"] {
            assert!(Selector::parse_fields(bad, &allowed).is_err(), "{bad}");
        }
        let escaped = Selector::parse_fields(r"metadata.name=a\,b", &allowed).unwrap();
        assert!(escaped.matches_fields(&json!({"metadata": {"name": "a,b"}})));
    }
}
