//! `.Files` (`Get`, `GetBytes`, `Glob`, `Lines`, `AsConfig`, `AsSecrets`) and
//! `.Capabilities.APIVersions` (`Has`), as Go templates call them.
//!
//! In Helm, `.Files` is a map of path to content with methods, and `APIVersions` a list with
//! one. Here they are that map and that list, so `range $path, $_ := .Files.Glob "x/*"`,
//! `len` and `if` see what Go's see; their methods, which gtmpl-ng cannot call on a map (nor
//! with arguments on anything), are rewritten in the template's source to calls of
//! [`method`]: `.Files.Get "a"` is `lariatMethod .Files "Get" "a"`, and
//! `(.Files.Glob "x/*").AsConfig` is `(lariatMethod (.Files.Glob ...) "AsConfig")`.
//!
//! The same pass rewrites a raw string (`` `a\.b` ``) that holds a backslash as the quoted
//! string Go reads it as (`"a\\.b"`): gtmpl-ng reads escapes in raw strings too.

use base64::Engine as _;
use gtmpl_ng::{FuncError, Value};
use std::collections::HashMap;

use crate::chart::File;
use crate::goyaml;

/// A binary file's entry in `.Files`: its bytes base64-encoded under this key, since a
/// template's strings are text. `AsSecrets` encodes the bytes themselves; `Get` refuses.
const BINARY: &str = "lariat.binary.base64";

pub(crate) fn files_value(files: &[File]) -> Value {
    Value::Map(
        files
            .iter()
            .map(|f| {
                let value = match std::str::from_utf8(&f.data) {
                    Ok(text) => Value::String(text.to_string()),
                    Err(_) => Value::Map(
                        [(
                            BINARY.to_string(),
                            Value::String(
                                base64::engine::general_purpose::STANDARD.encode(&f.data),
                            ),
                        )]
                        .into_iter()
                        .collect(),
                    ),
                };
                (f.name.clone(), value)
            })
            .collect(),
    )
}

/// A file's text, or why it has none.
fn text_of(name: &str, value: &Value) -> Result<String, FuncError> {
    match value {
        Value::String(text) => Ok(text.clone()),
        Value::Map(map) if map.contains_key(BINARY) => Err(FuncError::Generic(format!(
            ".Files: {name} is binary, not text (.Files.AsSecrets encodes it)"
        ))),
        _ => Ok(String::new()),
    }
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
        (Some(Value::Map(files)), "Get" | "GetBytes") => {
            let name = argument()?;
            match files.get(&name) {
                Some(value) => text_of(&name, value).map(Value::String),
                None => Ok(Value::String(String::new())),
            }
        }

        (Some(Value::Map(files)), "Lines") => Ok(lines(files, &argument()?)),
        (Some(Value::Map(files)), "Glob") => glob(files, &argument()?),
        (Some(Value::Map(files)), "AsConfig") => as_yaml(files, false).map(Value::String),
        (Some(Value::Map(files)), "AsSecrets") => as_yaml(files, true).map(Value::String),
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
fn as_yaml(files: &HashMap<String, Value>, secrets: bool) -> Result<String, FuncError> {
    let mut map = serde_json::Map::new();
    for (name, value) in files {
        let base = name.rsplit('/').next().unwrap_or(name).to_string();
        let encoded = match (value, secrets) {
            (Value::Map(binary), true) if binary.contains_key(BINARY) => binary[BINARY].to_string(),
            (value, true) => {
                base64::engine::general_purpose::STANDARD.encode(text_of(name, value)?)
            }
            (value, false) => text_of(name, value)?,
        };
        map.insert(base, serde_json::Value::String(encoded));
    }
    let yaml = goyaml::to_string(&serde_json::Value::Object(map));
    Ok(yaml.strip_suffix('\n').unwrap_or(&yaml).to_string())
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

/// An action longer than this is left as it is: no template a person writes has one, and
/// rewriting is linear in it, but it should not be paid for a chart's deliberate giant.
const MAX_REWRITTEN_ACTION: usize = 64 << 10;
/// Parenthesized method calls rewritten in one action at most.
const MAX_PARENTHESIZED: usize = 64;

/// Rewrites the method calls of `.Files` and `.APIVersions` in a template's actions (see
/// the module's documentation), never inside a string, raw string, character or comment,
/// and raw strings with a backslash as quoted strings. One pass finds the actions, another
/// each one's literals: linear in the source.
pub(crate) fn rewrite_actions(source: &str) -> String {
    static CALL: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(
            r"(?P<receiver>(?:\$[A-Za-z0-9_]*)?(?:\.[A-Za-z_][A-Za-z0-9_]*)*\.(?:Files|APIVersions))\.(?P<method>Get|GetBytes|Glob|Lines|AsConfig|AsSecrets|Has)\b",
        )
        .expect("the method-call pattern is valid")
    });
    // `{{ $_ := set $dict "k" v }}` as `{{ $dict = set $dict "k" v }}`: gtmpl-ng's dicts are
    // values, so the change must be assigned back to be seen (see `crate::sprig`).
    static CHANGE: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(
            r"^\{\{(?P<trim>-?\s*)\$_\s*:=\s*(?P<function>set|unset|merge|mustMerge|mergeOverwrite|mustMergeOverwrite)\s+(?P<dict>\$[A-Za-z_][A-Za-z0-9_]*)(?P<after>\s)",
        )
        .expect("the change pattern is valid")
    });
    let methods = source.contains("Files") || source.contains(".APIVersions.");
    let changes = source.contains("$_");
    if !methods && !changes && !source.contains('`') {
        return source.to_string();
    }
    let mut out = String::with_capacity(source.len());
    let mut copied = 0;
    for (start, end) in actions(source) {
        out.push_str(&source[copied..start]);
        let action = &source[start..end];
        if action.len() > MAX_REWRITTEN_ACTION {
            out.push_str(action);
        } else {
            let action = if changes {
                CHANGE.replace(action, "{{$trim$dict = $function $dict$after")
            } else {
                action.into()
            };
            let action = if methods {
                rewrite_parenthesized(&action)
            } else {
                action.into_owned()
            };
            let literals = literal_ranges(&action);
            let mut at = 0;
            for range in literals
                .iter()
                .cloned()
                .chain(std::iter::once(action.len()..action.len()))
            {
                let code = &action[at..range.start];
                if methods {
                    out.push_str(&CALL.replace_all(code, "lariatMethod $receiver \"$method\""));
                } else {
                    out.push_str(code);
                }
                out.push_str(&quoted_raw_string(&action[range.clone()]));
                at = range.end;
            }
        }
        copied = end;
    }
    out.push_str(&source[copied..]);
    out
}

/// A raw string holding a backslash as the quoted string with the same value; any other
/// literal as it is.
fn quoted_raw_string(literal: &str) -> std::borrow::Cow<'_, str> {
    let Some(inner) = literal
        .strip_prefix('`')
        .and_then(|l| l.strip_suffix('`'))
        .filter(|inner| inner.contains('\\'))
    else {
        return literal.into();
    };
    let mut quoted = String::with_capacity(literal.len() + 8);
    quoted.push('"');
    for c in inner.chars() {
        match c {
            '\\' => quoted.push_str("\\\\"),
            '"' => quoted.push_str("\\\""),
            '\n' => quoted.push_str("\\n"),
            '\r' => quoted.push_str("\\r"),
            '\t' => quoted.push_str("\\t"),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted.into()
}

/// The byte ranges of the actions (`{{` to `}}`) of a template, a `}}` inside a literal or
/// comment not ending one.
fn actions(source: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(open) = source[from..].find("{{").map(|o| o + from) {
        let body = &source[open..];
        let end = close_of(body).map_or(source.len(), |c| open + c);
        out.push((open, end));
        from = end;
    }
    out
}

/// Where the action that `action` starts with ends (just after its `}}`).
fn close_of(action: &str) -> Option<usize> {
    let bytes = action.as_bytes();
    let mut i = 2;
    while i < bytes.len() {
        match literal_end(bytes, i) {
            Some(end) => i = end,
            None if bytes[i..].starts_with(b"}}") => return Some(i + 2),
            None => i += 1,
        }
    }
    None
}

/// If a literal or comment starts at `i`, where it ends (past its closing delimiter).
pub(crate) fn literal_end(bytes: &[u8], i: usize) -> Option<usize> {
    let find = |from: usize, close: &[u8], escapes: bool| {
        let mut j = from;
        while j < bytes.len() {
            if escapes && bytes[j] == b'\\' {
                j += 2;
            } else if bytes[j..].starts_with(close) {
                return j + close.len();
            } else {
                j += 1;
            }
        }
        bytes.len()
    };
    match bytes[i] {
        b'"' => Some(find(i + 1, b"\"", true)),
        b'`' => Some(find(i + 1, b"`", false)),
        b'\'' => Some(find(i + 1, b"'", true)),
        b'/' if bytes.get(i + 1) == Some(&b'*') => Some(find(i + 2, b"*/", false)),
        _ => None,
    }
}

/// The literals and comments of one action.
fn literal_ranges(action: &str) -> Vec<std::ops::Range<usize>> {
    let bytes = action.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match literal_end(bytes, i) {
            Some(end) => {
                out.push(i..end);
                i = end;
            }
            None => i += 1,
        }
    }
    out
}

/// `(X).AsConfig` and `(X).AsSecrets`, outside literals, as `(lariatMethod (X) "AsConfig")`.
fn rewrite_parenthesized(action: &str) -> String {
    let mut text = action.to_string();
    for _ in 0..MAX_PARENTHESIZED {
        // Literals masked out, so that parentheses and names inside them do not count.
        let mut masked = text.clone().into_bytes();
        for range in literal_ranges(&text) {
            masked[range].fill(b'_');
        }
        let mut stack = Vec::new();
        let mut found = None;
        for (at, &byte) in masked.iter().enumerate() {
            match byte {
                b'(' => stack.push(at),
                b')' => {
                    let open = stack.pop();
                    let rest = &masked[at + 1..];
                    let method = ["AsConfig", "AsSecrets"].into_iter().find(|m| {
                        rest.starts_with(format!(".{m}").as_bytes())
                            && !rest
                                .get(m.len() + 1)
                                .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
                    });
                    if let (Some(open), Some(method)) = (open, method) {
                        found = Some((open, at, method));
                        break;
                    }
                }
                _ => {}
            }
        }
        let Some((open, close, method)) = found else {
            break;
        };
        let end = close + 1 + method.len() + 1;
        let replacement = format!("(lariatMethod {} \"{method}\")", &text[open..=close]);
        text.replace_range(open..end, &replacement);
    }
    text
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
        let rewritten = super::rewrite_actions(
            r#"a {{ .Files.Get "x.Files.Get" }} {{ (.Files.Glob "c/*").AsConfig | indent 2 }} {{ $.Capabilities.APIVersions.Has "v1" }} .Files.Get"#,
        );
        assert_eq!(
            rewritten,
            r#"a {{ lariatMethod .Files "Get" "x.Files.Get" }} {{ (lariatMethod (lariatMethod .Files "Glob" "c/*") "AsConfig") | indent 2 }} {{ lariatMethod $.Capabilities.APIVersions "Has" "v1" }} .Files.Get"#
        );
        // `}}`, parentheses and calls inside strings, raw strings and comments stay as they are.
        let source = r#"{{ replace "}}" "" (.Files.Get "a") }}{{ $x := "}}{{ .Files.Get" }}{{/* .Files.Get ")" */}}{{ `(.Files.Get).AsConfig` }}"#;
        assert_eq!(
            super::rewrite_actions(source),
            r#"{{ replace "}}" "" (lariatMethod .Files "Get" "a") }}{{ $x := "}}{{ .Files.Get" }}{{/* .Files.Get ")" */}}{{ `(.Files.Get).AsConfig` }}"#
        );
    }

    #[test]
    fn raw_strings_with_a_backslash_become_the_quoted_strings_go_reads() {
        assert_eq!(
            super::rewrite_actions(r#"{{ regexMatch `^a\.b"c$` .x }} `t\` {{ `plain` }}"#),
            r#"{{ regexMatch "^a\\.b\"c$" .x }} `t\` {{ `plain` }}"#
        );
    }

    #[test]
    fn rewriting_a_giant_action_is_linear() {
        // 50,000 unmatched `x).AsConfig`: quadratic matching would not finish.
        let source = format!(
            "{{{{ {} .Files.Get \"a\" }}}}",
            "x).AsConfig ".repeat(50_000)
        );
        let started = std::time::Instant::now();
        let _ = super::rewrite_actions(&source);
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }
}
