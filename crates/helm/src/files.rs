//! `.Files` (`Get`, `GetBytes`, `Glob`, `Lines`, `AsConfig`, `AsSecrets`) and
//! `.Capabilities.APIVersions` (`Has`), as Go templates call them.
//!
//! In Helm, `.Files` is a map of path to content with methods, and `APIVersions` a list with
//! one. Here they are that map and that list, so `range $path, $_ := .Files.Glob "x/*"`,
//! `len` and `if` see what Go's see; their methods, which gtmpl-ng cannot call on a map (nor
//! with arguments on anything), are rewritten in the template's source to calls of
//! [`method`]: `.Files.Get "a"` is `lariatMethod .Files "Get" "a"`, and
//! `(.Files.Glob "x/*").AsConfig` is `(lariatMethod (.Files.Glob ...) "AsConfig")`.

use base64::Engine as _;
use gtmpl_ng::{FuncError, Value};
use std::collections::HashMap;

use crate::chart::File;
use crate::goyaml;

pub(crate) fn files_value(files: &[File]) -> Value {
    Value::Map(
        files
            .iter()
            .map(|f| {
                (
                    f.name.clone(),
                    Value::String(String::from_utf8_lossy(&f.data).into_owned()),
                )
            })
            .collect(),
    )
}

pub(crate) fn api_versions_value(versions: &[String]) -> Value {
    Value::Array(versions.iter().map(|v| Value::String(v.clone())).collect())
}

/// `lariatMethod receiver "Name" args...`: a method of `.Files` (a map) or of
/// `.Capabilities.APIVersions` (a list).
pub(crate) fn method(args: &[Value]) -> Result<Value, FuncError> {
    let name = match args.get(1) {
        Some(Value::String(name)) => name.as_str(),
        _ => {
            return Err(FuncError::Generic(
                "a method call needs a method name".into(),
            ));
        }
    };
    let argument = || match args.get(2) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Ok(other.to_string()),
        None => Err(FuncError::ExactlyXArgs(name.to_string(), 1)),
    };
    match (args.first(), name) {
        (Some(Value::Map(files)), "Get" | "GetBytes") => Ok(files
            .get(&argument()?)
            .cloned()
            .unwrap_or(Value::String(String::new()))),
        (Some(Value::Map(files)), "Lines") => Ok(lines(files, &argument()?)),
        (Some(Value::Map(files)), "Glob") => glob(files, &argument()?),
        (Some(Value::Map(files)), "AsConfig") => {
            Ok(Value::String(as_yaml(files, |text| text.to_string())))
        }
        (Some(Value::Map(files)), "AsSecrets") => Ok(Value::String(as_yaml(files, |text| {
            base64::engine::general_purpose::STANDARD.encode(text)
        }))),
        (Some(Value::Array(versions)), "Has") => {
            let wanted = argument()?;
            Ok(Value::Bool(
                versions
                    .iter()
                    .any(|v| matches!(v, Value::String(s) if *s == wanted)),
            ))
        }
        (receiver, _) => Err(FuncError::Generic(format!(
            "{name} is not a method of {}",
            receiver.map_or("nothing".to_string(), |r| r
                .to_string()
                .chars()
                .take(40)
                .collect())
        ))),
    }
}

/// `.Files.Lines "path"`: the file's lines, without a last empty one.
fn lines(files: &HashMap<String, Value>, name: &str) -> Value {
    let Some(Value::String(text)) = files.get(name) else {
        return Value::Array(Vec::new());
    };
    let text = text.strip_suffix('\n').unwrap_or(text);
    Value::Array(text.split('\n').map(|l| Value::String(l.into())).collect())
}

/// `.Files.Glob "config/*.yaml"`: the files whose paths match, as Files again.
fn glob(files: &HashMap<String, Value>, pattern: &str) -> Result<Value, FuncError> {
    let pattern = Glob::new(pattern.as_bytes())?;
    Ok(Value::Map(
        files
            .iter()
            .filter(|(name, _)| pattern.matches(name.as_bytes()))
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect(),
    ))
}

/// The files as a ConfigMap's or a Secret's `data`: base name to (encoded) text, as YAML.
fn as_yaml(files: &HashMap<String, Value>, encode: impl Fn(&str) -> String) -> String {
    let map: serde_json::Map<String, serde_json::Value> = files
        .iter()
        .map(|(name, value)| {
            let base = name.rsplit('/').next().unwrap_or(name).to_string();
            let text = match value {
                Value::String(s) => s.as_str(),
                _ => "",
            };
            (base, serde_json::Value::String(encode(text)))
        })
        .collect();
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

/// Rewrites the method calls of `.Files` and `.APIVersions` in a template's actions (see
/// the module's documentation), never inside a string literal.
pub(crate) fn rewrite_method_calls(source: &str) -> String {
    static CALL: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(
            r"(?P<receiver>(?:\$[A-Za-z0-9_]*)?(?:\.[A-Za-z_][A-Za-z0-9_]*)*\.(?:Files|APIVersions))\.(?P<method>Get|GetBytes|Glob|Lines|AsConfig|AsSecrets|Has)\b",
        )
        .expect("the method-call pattern is valid")
    });
    if !source.contains("Files") && !source.contains(".APIVersions.") {
        return source.to_string();
    }
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(open) = rest.find("{{") {
        out.push_str(&rest[..open]);
        let action = &rest[open..];
        let close = action.find("}}").map_or(action.len(), |c| c + 2);
        let (action, after) = action.split_at(close);
        let mut rewritten = String::with_capacity(action.len());
        for (code, literal) in pieces(action) {
            rewritten.push_str(&CALL.replace_all(code, "lariatMethod $receiver \"$method\""));
            rewritten.push_str(literal);
        }
        out.push_str(&rewrite_parenthesized(&rewritten));
        rest = after;
    }
    out.push_str(rest);
    out
}

/// An action as code and the string literal after it, in turn.
fn pieces(action: &str) -> Vec<(&str, &str)> {
    let mut out = Vec::new();
    let mut start = 0;
    let bytes = action.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'"' || bytes[i] == b'`' {
            let quote = bytes[i];
            let mut end = i + 1;
            while end < bytes.len() && bytes[end] != quote {
                end += if bytes[end] == b'\\' && quote == b'"' {
                    2
                } else {
                    1
                };
            }
            let end = (end + 1).min(bytes.len());
            out.push((&action[start..i], &action[i..end]));
            start = end;
            i = end;
        } else {
            i += 1;
        }
    }
    out.push((&action[start..], ""));
    out
}

/// `(X).AsConfig` and `(X).AsSecrets`, outside string literals, as `(lariatMethod (X) "AsConfig")`.
fn rewrite_parenthesized(action: &str) -> String {
    let mut text = action.to_string();
    for method in ["AsConfig", "AsSecrets"] {
        let suffix = format!(").{method}");
        let mut from = 0;
        while let Some(found) = text[from..].find(&suffix).map(|at| at + from) {
            let end = found + suffix.len();
            if text[end..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
                || in_literal(&text, found)
            {
                from = end;
                continue;
            }
            let Some(open) = matching_open(&text, found) else {
                from = end;
                continue;
            };
            let replacement = format!("(lariatMethod {} \"{method}\")", &text[open..=found]);
            text.replace_range(open..end, &replacement);
            from = open + replacement.len();
        }
    }
    text
}

/// Whether byte `at` of an action is inside a string literal.
fn in_literal(action: &str, at: usize) -> bool {
    let mut offset = 0;
    for (code, literal) in pieces(action) {
        offset += code.len();
        if at >= offset && at < offset + literal.len() {
            return true;
        }
        offset += literal.len();
    }
    false
}

/// The `(` that the `)` at byte `close` closes, outside string literals.
fn matching_open(action: &str, close: usize) -> Option<usize> {
    let bytes = action.as_bytes();
    let mut depth = 0usize;
    for at in (0..=close).rev() {
        if in_literal(action, at) {
            continue;
        }
        match bytes[at] {
            b')' => depth += 1,
            b'(' => {
                depth -= 1;
                if depth == 0 {
                    return Some(at);
                }
            }
            _ => {}
        }
    }
    None
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

    #[test]
    fn method_calls_are_rewritten_outside_strings() {
        let rewritten = super::rewrite_method_calls(
            r#"a {{ .Files.Get "x.Files.Get" }} {{ (.Files.Glob "c/*").AsConfig | indent 2 }} {{ $.Capabilities.APIVersions.Has "v1" }} .Files.Get"#,
        );
        assert_eq!(
            rewritten,
            r#"a {{ lariatMethod .Files "Get" "x.Files.Get" }} {{ (lariatMethod (lariatMethod .Files "Glob" "c/*") "AsConfig") | indent 2 }} {{ lariatMethod $.Capabilities.APIVersions "Has" "v1" }} .Files.Get"#
        );
    }
}
