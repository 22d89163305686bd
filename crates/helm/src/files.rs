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
    let pattern = Glob::new(name_arg(args, "Glob")?.as_bytes())?;
    let matched = contents(args)?
        .iter()
        .filter(|(name, _)| pattern.matches(name.as_bytes()))
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
/// `[abc]` and `{a,b}` choose. Compiled once per `.Files.Glob`, and matched in time
/// proportional to pattern × path: a pattern comes from the chart, and `**a**a…` must not
/// backtrack exponentially, nor `{,,}{,,}…` expand without end.
struct Glob {
    alternatives: Vec<Vec<Token>>,
}

/// The longest glob pattern, and the most alternatives its braces may spell out.
const MAX_GLOB_BYTES: usize = 1024;
const MAX_GLOB_ALTERNATIVES: usize = 256;

impl Glob {
    fn new(pattern: &[u8]) -> Result<Glob, FuncError> {
        if pattern.len() > MAX_GLOB_BYTES {
            return Err(FuncError::Generic(format!(
                ".Files.Glob: a pattern is at most {MAX_GLOB_BYTES} bytes"
            )));
        }
        let mut done: Vec<Vec<u8>> = Vec::new();
        let mut pending = vec![pattern.to_vec()];
        while let Some(current) = pending.pop() {
            let open = current.iter().position(|&c| c == b'{');
            let close =
                open.and_then(|o| current[o..].iter().position(|&c| c == b'}').map(|c| c + o));
            let (Some(open), Some(close)) = (open, close) else {
                done.push(current);
                continue;
            };
            for choice in current[open + 1..close].split(|&c| c == b',') {
                let mut candidate = current[..open].to_vec();
                candidate.extend_from_slice(choice);
                candidate.extend_from_slice(&current[close + 1..]);
                pending.push(candidate);
            }
            if done.len() + pending.len() > MAX_GLOB_ALTERNATIVES {
                return Err(FuncError::Generic(format!(
                    ".Files.Glob: the pattern's braces spell out more than {MAX_GLOB_ALTERNATIVES} alternatives"
                )));
            }
        }
        Ok(Glob {
            alternatives: done.iter().map(|a| tokens(a)).collect(),
        })
    }

    fn matches(&self, name: &[u8]) -> bool {
        self.alternatives.iter().any(|tokens| matches(tokens, name))
    }
}

#[cfg(test)]
fn glob_match(pattern: &[u8], name: &[u8]) -> bool {
    Glob::new(pattern).is_ok_and(|g| g.matches(name))
}

enum Token {
    /// `*` (`crosses`: false) or `**`.
    Star {
        crosses: bool,
    },
    Any,
    Class {
        set: Vec<(u8, u8)>,
        negate: bool,
    },
    Byte(u8),
}

fn tokens(pattern: &[u8]) -> Vec<Token> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < pattern.len() {
        match pattern[i] {
            b'*' if pattern.get(i + 1) == Some(&b'*') => {
                out.push(Token::Star { crosses: true });
                i += 2;
            }
            b'*' => {
                out.push(Token::Star { crosses: false });
                i += 1;
            }
            b'?' => {
                out.push(Token::Any);
                i += 1;
            }
            b'[' if let Some(length) = pattern[i..].iter().position(|&c| c == b']') => {
                let end = i + length;
                let mut body = &pattern[i + 1..end];
                let negate = matches!(body.first(), Some(b'!') | Some(b'^'));
                if negate {
                    body = &body[1..];
                }
                let mut set = Vec::new();
                let mut k = 0;
                while k < body.len() {
                    if k + 2 < body.len() && body[k + 1] == b'-' {
                        set.push((body[k], body[k + 2]));
                        k += 3;
                    } else {
                        set.push((body[k], body[k]));
                        k += 1;
                    }
                }
                out.push(Token::Class { set, negate });
                i = end + 1;
            }
            c => {
                out.push(Token::Byte(c));
                i += 1;
            }
        }
    }
    out
}

/// Runs the pattern as a set of positions over the path, one byte at a time.
fn matches(tokens: &[Token], name: &[u8]) -> bool {
    let n = tokens.len();
    // A star matches nothing too: a position at a star also stands after it.
    let close = |states: &mut Vec<bool>| {
        for i in 0..n {
            if states[i] && matches!(tokens[i], Token::Star { .. }) {
                states[i + 1] = true;
            }
        }
    };
    let mut states = vec![false; n + 1];
    states[0] = true;
    close(&mut states);
    for &c in name {
        let mut next = vec![false; n + 1];
        for i in 0..n {
            if !states[i] {
                continue;
            }
            match &tokens[i] {
                Token::Star { crosses } => {
                    if *crosses || c != b'/' {
                        next[i] = true;
                    }
                }
                Token::Any => next[i + 1] |= c != b'/',
                Token::Class { set, negate } => {
                    next[i + 1] |= set.iter().any(|(lo, hi)| (*lo..=*hi).contains(&c)) != *negate;
                }
                Token::Byte(b) => next[i + 1] |= *b == c,
            }
        }
        close(&mut next);
        states = next;
    }
    states[n]
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
    use super::{Glob, glob_match};

    #[test]
    fn globs_as_helm_does() {
        assert!(glob_match(b"config/*.yaml", b"config/a.yaml"));
        assert!(!glob_match(b"config/*.yaml", b"config/sub/a.yaml"));
        assert!(glob_match(b"config/**.yaml", b"config/sub/a.yaml"));
        assert!(glob_match(b"files/{a,b}.txt", b"files/b.txt"));
        assert!(glob_match(b"f?le[0-9]", b"file7"));
        // Linear, not exponential: this pattern backtracks 2^40 ways in a naive matcher.
        let pattern = "**a".repeat(40) + "b";
        assert!(!glob_match(pattern.as_bytes(), "a".repeat(200).as_bytes()));
        // Ten groups of eleven choices would be 11^10 alternatives: refused at once.
        assert!(Glob::new("{,,,,,,,,,,}".repeat(10).as_bytes()).is_err());
    }
}
