//! A small YAML writer for JSON values whose output means the same to YAML 1.1 readers
//! (cloud-init's PyYAML, kubeadm's go-yaml) as to YAML 1.2 ones.
//!
//! A YAML 1.2 emitter leaves `on`, `yes`, `off` or `1:30` unquoted because they are strings
//! in 1.2, but PyYAML reads them as booleans and sexagesimal numbers, so a user's
//! `kubeletExtraArgs: {x: "on"}` or file content would reach the node changed. This writer
//! leaves a string plain only when it starts with a letter or `/`, is not one of YAML 1.1's
//! boolean or null words and holds nothing YAML treats specially; it writes multi-line text as
//! a literal block (readable PEM and scripts) and everything else double-quoted with JSON's
//! escapes, which every YAML version reads alike.

use serde_json::{Map, Value};

/// The value as a YAML document (no leading `---`), ending in a newline.
pub fn to_string(value: &Value) -> String {
    let mut out = String::new();
    match value {
        Value::Object(map) if !map.is_empty() => write_map(&mut out, map, 0),
        Value::Array(list) if !list.is_empty() => write_list(&mut out, list, 0),
        scalar => {
            out.push_str(&inline(scalar));
            out.push('\n');
        }
    }
    out
}

fn write_map(out: &mut String, map: &Map<String, Value>, indent: usize) {
    for (key, value) in map {
        push_indent(out, indent);
        out.push_str(&string(key));
        out.push(':');
        write_nested(out, value, indent);
    }
}

fn write_list(out: &mut String, list: &[Value], indent: usize) {
    for item in list {
        push_indent(out, indent);
        out.push('-');
        match item {
            // The first entry of a nested block goes on the dash's line: "- key: value".
            Value::Object(map) if !map.is_empty() => {
                let mut nested = String::new();
                write_map(&mut nested, map, indent + 2);
                out.push(' ');
                out.push_str(&nested[indent + 2..]);
            }
            Value::Array(inner) if !inner.is_empty() => {
                let mut nested = String::new();
                write_list(&mut nested, inner, indent + 2);
                out.push(' ');
                out.push_str(&nested[indent + 2..]);
            }
            _ => write_nested(out, item, indent),
        }
    }
}

/// What follows a `key:` or `-`: a nested block on the next lines, or a scalar on this one.
fn write_nested(out: &mut String, value: &Value, indent: usize) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            out.push('\n');
            write_map(out, map, indent + 2);
        }
        Value::Array(list) if !list.is_empty() => {
            out.push('\n');
            write_list(out, list, indent + 2);
        }
        Value::String(text) if block_safe(text) => write_block(out, text, indent + 2),
        scalar => {
            out.push(' ');
            out.push_str(&inline(scalar));
            out.push('\n');
        }
    }
}

fn push_indent(out: &mut String, indent: usize) {
    out.extend(std::iter::repeat_n(' ', indent));
}

fn inline(value: &Value) -> String {
    match value {
        Value::String(text) => string(text),
        Value::Object(_) => "{}".into(),
        Value::Array(_) => "[]".into(),
        // null, booleans and numbers are written as JSON writes them, which YAML reads alike.
        other => other.to_string(),
    }
}

/// YAML 1.1's booleans and nulls (PyYAML and go-yaml v2 also take `y` and `n`).
const SPECIAL_WORDS: &[&str] = &[
    "y", "n", "yes", "no", "on", "off", "true", "false", "null", "nil",
];

/// A string plain when that is unambiguous, double-quoted (JSON escapes) otherwise.
fn string(text: &str) -> String {
    if plain_safe(text) {
        text.to_string()
    } else {
        serde_json::to_string(text).expect("a string serializes")
    }
}

fn plain_safe(text: &str) -> bool {
    let Some(first) = text.chars().next() else {
        return false;
    };
    // A leading digit, sign or dot could be a number, date or `.inf`; a leading indicator
    // character would start a different YAML construct.
    (first.is_ascii_alphabetic() || first == '/')
        && text.chars().all(|c| c.is_ascii_graphic() || c == ' ')
        && !text.contains(": ")
        && !text.contains(" #")
        && !text.ends_with([' ', ':'])
        && !SPECIAL_WORDS.contains(&text.to_ascii_lowercase().as_str())
}

/// Multi-line text a literal block keeps exactly: printable lines, none of them only spaces,
/// the first with text not indented (the block's indentation is read from it).
fn block_safe(text: &str) -> bool {
    text.contains('\n')
        && text.chars().all(|c| c == '\n' || !c.is_control())
        && !text
            .split('\n')
            .any(|line| !line.is_empty() && line.trim_start_matches(' ').is_empty())
        && text
            .split('\n')
            .find(|line| !line.is_empty())
            .is_some_and(|line| !line.starts_with(' '))
        && !text.starts_with('\n')
}

/// A literal block (`|`), with the chomping indicator that keeps the trailing newlines:
/// `|-` for none, `|` for one, `|+` for more.
fn write_block(out: &mut String, text: &str, indent: usize) {
    let (indicator, body) = match text.strip_suffix('\n') {
        None => ("|-", text),
        Some(body) if body.ends_with('\n') => ("|+", body),
        Some(body) => ("|", body),
    };
    out.push(' ');
    out.push_str(indicator);
    out.push('\n');
    for line in body.split('\n') {
        if !line.is_empty() {
            push_indent(out, indent);
            out.push_str(line);
        }
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Strings -> how they are written as a map value.
    #[test]
    fn ambiguous_strings_are_quoted() {
        let check = |input: &str, expect: &str| {
            let out = to_string(&json!({ "k": input }));
            assert_eq!(out, format!("k: {expect}\n"), "{input:?}");
        };
        check("kubeadm", "kubeadm");
        check("echo pre", "echo pre");
        check("sha256:00ff", "sha256:00ff");
        check("/etc/kubernetes/pki", "/etc/kubernetes/pki");
        check(
            "system:bootstrappers:kubeadm:default-node-token",
            "system:bootstrappers:kubeadm:default-node-token",
        );
        for word in [
            "on", "On", "yes", "NO", "off", "y", "n", "true", "False", "null",
        ] {
            check(word, &format!("\"{word}\""));
        }
        check("0640", "\"0640\"");
        check("1:30", "\"1:30\"");
        check("10.0.0.1:6443", "\"10.0.0.1:6443\"");
        check("2001-01-01", "\"2001-01-01\"");
        check("1e3", "\"1e3\"");
        check(".inf", "\".inf\"");
        check("", "\"\"");
        check("~", "\"~\"");
        check("a: b", "\"a: b\"");
        check("a #b", "\"a #b\"");
        check("trailing ", "\"trailing \"");
        check("*alias", "\"*alias\"");
        check("-v", "\"-v\"");
        check("tab\there", "\"tab\\there\"");
        check("x && echo y > /f", "x && echo y > /f");
        check("héllo", "\"héllo\"");
    }

    #[test]
    fn multi_line_text_is_a_literal_block_with_the_right_chomping() {
        let check = |input: &str, expect: &str| {
            assert_eq!(to_string(&json!({ "k": input })), expect, "{input:?}");
        };
        check("a\nb\n", "k: |\n  a\n  b\n");
        check("a\nb", "k: |-\n  a\n  b\n");
        check("a\n\n", "k: |+\n  a\n\n");
        check("a\n\nb\n", "k: |\n  a\n\n  b\n");
        // Not representable as a plain literal block: quoted.
        check(" indented\nx\n", "k: \" indented\\nx\\n\"\n");
        check("a\n  \nb", "k: \"a\\n  \\nb\"\n");
        check("\nleading", "k: \"\\nleading\"\n");
        check("cr\r\nlf", "k: \"cr\\r\\nlf\"\n");
    }

    #[test]
    fn nesting_round_trips_through_a_yaml_parser() {
        let value = json!({
            "write_files": [
                {"path": "/a", "permissions": "0600", "content": "-----BEGIN X-----\nabc\n-----END X-----\n"},
                {"path": "/b", "content": "on"},
            ],
            "runcmd": ["echo pre", "kubeadm init --config /run/kubeadm/kubeadm.yaml && echo success > /x"],
            "mounts": [["/dev/sdb1", "/data"], []],
            "empty": {},
            "nested": {"list": [1, 2.5, true, null], "map": {"on": "yes"}},
            "users": [{"name": "ops", "ssh_authorized_keys": ["ssh-ed25519 AAAA x@y"]}],
        });
        let text = to_string(&value);
        let parsed: Value = serde_yaml_ng::from_str(&text).unwrap();
        assert_eq!(parsed, value, "{text}");
        assert!(text.contains("- path: /a\n"), "{text}");
        assert!(
            text.contains("    content: |\n      -----BEGIN X-----\n"),
            "{text}"
        );
        assert_eq!(to_string(&json!([])), "[]\n");
        assert_eq!(to_string(&json!(["a"])), "- a\n");
    }
}
