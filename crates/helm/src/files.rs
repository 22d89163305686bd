//! The objects templates call methods on: `.Files` (`Get`, `GetBytes`, `Glob`, `Lines`,
//! `AsConfig`, `AsSecrets`) and `.Capabilities.APIVersions` (`Has`).
//!
//! gtmpl-ng calls a function held in a field with the object that holds it first, so each
//! object carries its data in a field of its own beside its methods.

use base64::Engine as _;
use gtmpl_ng::{Func, FuncError, Function, Value};
use std::collections::HashMap;

use crate::chart::File;
use crate::goyaml;

const FILES: &str = "__files";
const VERSIONS: &str = "__versions";

pub(crate) fn files_value(files: &[File]) -> Value {
    let contents = files
        .iter()
        .map(|f| {
            (
                f.name.clone(),
                Value::String(String::from_utf8_lossy(&f.data).into_owned()),
            )
        })
        .collect();
    files_object(contents)
}

fn files_object(contents: HashMap<String, Value>) -> Value {
    let methods: [(&str, Func); 6] = [
        ("Get", get),
        ("GetBytes", get),
        ("Glob", glob),
        ("Lines", lines),
        ("AsConfig", as_config),
        ("AsSecrets", as_secrets),
    ];
    let mut object: HashMap<String, Value> = methods
        .into_iter()
        .map(|(name, f)| (name.to_string(), Value::Function(Function { f })))
        .collect();
    object.insert(FILES.into(), Value::Map(contents));
    Value::Object(object)
}

fn contents(args: &[Value]) -> Result<&HashMap<String, Value>, FuncError> {
    match args.first() {
        Some(Value::Object(object)) => match object.get(FILES) {
            Some(Value::Map(files)) => Ok(files),
            _ => Err(FuncError::Generic(".Files: not a Files object".into())),
        },
        _ => Err(FuncError::Generic(".Files: not a Files object".into())),
    }
}

fn name_arg(args: &[Value], method: &str) -> Result<String, FuncError> {
    match args.get(1) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Ok(other.to_string()),
        None => Err(FuncError::ExactlyXArgs(format!(".Files.{method}"), 1)),
    }
}

/// `.Files.Get "path"`: the file's text, or "" when the chart has no such file.
fn get(args: &[Value]) -> Result<Value, FuncError> {
    let name = name_arg(args, "Get")?;
    Ok(contents(args)?
        .get(&name)
        .cloned()
        .unwrap_or(Value::String(String::new())))
}

fn lines(args: &[Value]) -> Result<Value, FuncError> {
    let name = name_arg(args, "Lines")?;
    let Some(Value::String(text)) = contents(args)?.get(&name) else {
        return Ok(Value::Array(Vec::new()));
    };
    let text = text.strip_suffix('\n').unwrap_or(text);
    Ok(Value::Array(
        text.split('\n').map(|l| Value::String(l.into())).collect(),
    ))
}

/// `.Files.Glob "config/*.yaml"`: the files whose paths match, as Files again.
fn glob(args: &[Value]) -> Result<Value, FuncError> {
    let pattern = name_arg(args, "Glob")?;
    let matched = contents(args)?
        .iter()
        .filter(|(name, _)| glob_match(pattern.as_bytes(), name.as_bytes()))
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect();
    Ok(files_object(matched))
}

/// The files as a ConfigMap's `data`: base name to text, as YAML.
fn as_config(args: &[Value]) -> Result<Value, FuncError> {
    let map = by_base_name(contents(args)?, |text| text.to_string());
    Ok(Value::String(yaml_without_newline(map)))
}

/// The files as a Secret's `data`: base name to base64.
fn as_secrets(args: &[Value]) -> Result<Value, FuncError> {
    let map = by_base_name(contents(args)?, |text| {
        base64::engine::general_purpose::STANDARD.encode(text)
    });
    Ok(Value::String(yaml_without_newline(map)))
}

fn by_base_name(
    files: &HashMap<String, Value>,
    encode: impl Fn(&str) -> String,
) -> serde_json::Map<String, serde_json::Value> {
    files
        .iter()
        .map(|(name, value)| {
            let base = name.rsplit('/').next().unwrap_or(name).to_string();
            let text = match value {
                Value::String(s) => s.as_str(),
                _ => "",
            };
            (base, serde_json::Value::String(encode(text)))
        })
        .collect()
}

fn yaml_without_newline(map: serde_json::Map<String, serde_json::Value>) -> String {
    if map.is_empty() {
        return String::new();
    }
    let yaml = goyaml::to_string(&serde_json::Value::Object(map));
    yaml.strip_suffix('\n').unwrap_or(&yaml).to_string()
}

/// A glob over `/`-separated paths: `*` and `?` stay within a segment, `**` crosses them,
/// `[abc]` and `{a,b}` choose.
fn glob_match(pattern: &[u8], name: &[u8]) -> bool {
    match pattern.first() {
        None => name.is_empty(),
        Some(b'*') if pattern.get(1) == Some(&b'*') => {
            let rest = &pattern[2..];
            (0..=name.len()).any(|i| glob_match(rest, &name[i..]))
        }
        Some(b'*') => {
            let rest = &pattern[1..];
            for i in 0..=name.len() {
                if glob_match(rest, &name[i..]) {
                    return true;
                }
                if name.get(i) == Some(&b'/') {
                    break;
                }
            }
            false
        }
        Some(b'?') => {
            name.first().is_some_and(|&c| c != b'/') && glob_match(&pattern[1..], &name[1..])
        }
        Some(b'[') => {
            let Some(end) = pattern.iter().position(|&c| c == b']') else {
                return false;
            };
            let set = &pattern[1..end];
            let (negate, set) = match set.first() {
                Some(b'!') | Some(b'^') => (true, &set[1..]),
                _ => (false, set),
            };
            let Some(&c) = name.first() else { return false };
            let mut hit = false;
            let mut i = 0;
            while i < set.len() {
                if i + 2 < set.len() && set[i + 1] == b'-' {
                    hit |= (set[i]..=set[i + 2]).contains(&c);
                    i += 3;
                } else {
                    hit |= set[i] == c;
                    i += 1;
                }
            }
            hit != negate && glob_match(&pattern[end + 1..], &name[1..])
        }
        Some(b'{') => {
            let Some(end) = pattern.iter().position(|&c| c == b'}') else {
                return false;
            };
            let rest = &pattern[end + 1..];
            pattern[1..end].split(|&c| c == b',').any(|alternative| {
                let mut candidate = alternative.to_vec();
                candidate.extend_from_slice(rest);
                glob_match(&candidate, name)
            })
        }
        Some(&c) => name.first() == Some(&c) && glob_match(&pattern[1..], &name[1..]),
    }
}

pub(crate) fn api_versions_value(versions: &[String]) -> Value {
    let mut object = HashMap::new();
    object.insert("Has".to_string(), Value::Function(Function { f: has }));
    object.insert(
        VERSIONS.to_string(),
        Value::Array(versions.iter().map(|v| Value::String(v.clone())).collect()),
    );
    Value::Object(object)
}

/// `.Capabilities.APIVersions.Has "apps/v1"` (or `"apps/v1/Deployment"`).
fn has(args: &[Value]) -> Result<Value, FuncError> {
    let Some(Value::Object(object)) = args.first() else {
        return Err(FuncError::Generic(
            "APIVersions.Has: not an APIVersions object".into(),
        ));
    };
    let wanted = name_arg(args, "Has")?;
    let found = matches!(object.get(VERSIONS), Some(Value::Array(list)) if list.iter().any(|v| matches!(v, Value::String(s) if *s == wanted)));
    Ok(Value::Bool(found))
}

/// gtmpl-ng calls a method only without arguments (`.Files.AsConfig`); Go calls
/// `.Files.Get "a"` too. Inside each action, outside string literals, such calls on
/// `.Files` and `.APIVersions` are rewritten to `lariatMethod .Files "Get" "a"`, which
/// [`method`] dispatches to the same function.
pub(crate) fn rewrite_method_calls(source: &str) -> String {
    static CALL: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(
            r"(?P<receiver>(?:\$[A-Za-z0-9_]*)?(?:\.[A-Za-z_][A-Za-z0-9_]*)*\.(?:Files|APIVersions))\.(?P<method>Get|GetBytes|Glob|Lines|Has)\b",
        )
        .expect("the method-call pattern is valid")
    });
    if !source.contains(".Files.") && !source.contains(".APIVersions.") {
        return source.to_string();
    }
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(open) = rest.find("{{") {
        out.push_str(&rest[..open]);
        let action = &rest[open..];
        let close = action.find("}}").map_or(action.len(), |c| c + 2);
        let (action, after) = action.split_at(close);
        // Rewrite the code between string literals, never inside one.
        let mut in_string: Option<char> = None;
        let mut segment = String::new();
        let mut chars = action.chars().peekable();
        while let Some(c) = chars.next() {
            match in_string {
                Some(quote) => {
                    out.push(c);
                    if c == '\\' && quote == '"' {
                        if let Some(escaped) = chars.next() {
                            out.push(escaped);
                        }
                    } else if c == quote {
                        in_string = None;
                    }
                }
                None if c == '"' || c == '`' => {
                    out.push_str(&CALL.replace_all(&segment, "lariatMethod $receiver \"$method\""));
                    segment.clear();
                    out.push(c);
                    in_string = Some(c);
                }
                None => segment.push(c),
            }
        }
        out.push_str(&CALL.replace_all(&segment, "lariatMethod $receiver \"$method\""));
        rest = after;
    }
    out.push_str(rest);
    out
}

/// `lariatMethod receiver "Name" args...`: calls the receiver's method with arguments.
pub(crate) fn method(args: &[Value]) -> Result<Value, FuncError> {
    let (Some(receiver @ Value::Object(object)), Some(Value::String(name))) =
        (args.first(), args.get(1))
    else {
        return Err(FuncError::Generic(
            "a method call needs an object and a method name".into(),
        ));
    };
    let Some(Value::Function(function)) = object.get(name) else {
        return Err(FuncError::Generic(format!("no method {name}")));
    };
    let mut call = vec![receiver.clone()];
    call.extend_from_slice(&args[2..]);
    (function.f)(&call)
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn globs_as_helm_does() {
        assert!(glob_match(b"config/*.yaml", b"config/a.yaml"));
        assert!(!glob_match(b"config/*.yaml", b"config/sub/a.yaml"));
        assert!(glob_match(b"config/**.yaml", b"config/sub/a.yaml"));
        assert!(glob_match(b"files/{a,b}.txt", b"files/b.txt"));
        assert!(glob_match(b"f?le[0-9]", b"file7"));
    }
}
