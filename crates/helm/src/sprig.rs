//! Sprig's functions where gtmpl-ng's differ from Sprig v3 (what Helm registers): argument
//! order (`has`, `dig`, `pluck`, `regexReplaceAll`), merging (`merge` keeps the first dict's
//! values and merges nested dicts), Go's conversions (`int` of a float or a string, `toString`
//! of nil), nil handling (`quote`, `cat`, `first`, `get`), Go's type and kind names, and
//! strings (`title`, `trimSuffix` once, `substr` clamped). Each one is Sprig's behaviour.
//!
//! gtmpl-ng passes values, not references, so `set`, `unset` and `merge` cannot change a
//! dict in place; the common statement `$_ := set $dict ...` is rewritten to assign the
//! result back (`crate::files::rewrite_actions`).

use std::collections::HashMap;

use gtmpl_ng::{Func, FuncError, Value};

use crate::functions::{arg, check_output, generic, text};

/// The corrections, registered after gtmpl-ng's functions so that they replace them.
pub(crate) const CORRECTIONS: &[(&str, Func)] = &[
    ("has", has),
    ("mustHas", has),
    ("regexReplaceAll", regex_replace_all),
    ("mustRegexReplaceAll", regex_replace_all),
    ("regexReplaceAllLiteral", regex_replace_all_literal),
    ("mustRegexReplaceAllLiteral", regex_replace_all_literal),
    ("merge", merge),
    ("mustMerge", merge),
    ("mergeOverwrite", merge_overwrite),
    ("mustMergeOverwrite", merge_overwrite),
    ("dig", dig),
    ("pluck", pluck),
    ("get", get),
    ("keys", keys),
    ("title", title),
    ("untitle", untitle),
    ("trimPrefix", trim_prefix),
    ("trimSuffix", trim_suffix),
    ("trimAll", trim_all),
    ("quote", quote),
    ("squote", squote),
    ("cat", cat),
    ("substr", substr),
    ("toString", to_string),
    ("int", int),
    ("int64", int),
    ("float64", float64),
    ("atoi", atoi),
    ("first", first),
    ("mustFirst", first),
    ("last", last),
    ("mustLast", last),
    ("compact", compact),
    ("mustCompact", compact),
    ("typeOf", type_of),
    ("kindOf", kind_of),
    ("typeIs", type_is),
    ("kindIs", kind_is),
];

fn is_nil(value: &Value) -> bool {
    matches!(value, Value::Nil | Value::NoValue)
}

/// A value as Sprig's `strval` writes it: nil as Go's `<nil>`.
fn strval(value: &Value) -> String {
    match value {
        Value::Nil | Value::NoValue => "<nil>".into(),
        other => text(other),
    }
}

fn map_of(value: &Value) -> Option<&HashMap<String, Value>> {
    match value {
        Value::Map(map) | Value::Object(map) => Some(map),
        _ => None,
    }
}

/// Sprig's `empty`: nil, false, 0, "" and empty lists and dicts (gtmpl-ng's `empty`, whose
/// name says the opposite).
use gtmpl_ng::helm_functions::value_is_truthy as is_empty;

/// `has needle list`, Sprig's order (the list last, so that `$list | has x` reads). A nil
/// list holds nothing.
fn has(args: &[Value]) -> Result<Value, FuncError> {
    // Compared as Go's reflect.DeepEqual compares (dicts whatever their order), not by how
    // they print.
    let needle = arg(args, 0, "has")?;
    match arg(args, 1, "has")? {
        Value::Array(items) => Ok(Value::Bool(items.iter().any(|item| item == needle))),
        Value::Nil | Value::NoValue => Ok(Value::Bool(false)),
        _ => Err(generic("has: the second argument must be a list")),
    }
}

/// `regexReplaceAll regex text replacement`; `$1` and `${name}` expand as in Go.
fn regex_replace_all(args: &[Value]) -> Result<Value, FuncError> {
    replace_matches(args, "regexReplaceAll", false)
}

/// `regexReplaceAllLiteral regex text replacement`: the replacement as it is written.
fn regex_replace_all_literal(args: &[Value]) -> Result<Value, FuncError> {
    replace_matches(args, "regexReplaceAllLiteral", true)
}

/// Replaces match by match, so that the output is bounded as it grows (a short text with many
/// matches and a long replacement would otherwise be built whole before it is measured).
fn replace_matches(args: &[Value], function: &str, literal: bool) -> Result<Value, FuncError> {
    let pattern = text(arg(args, 0, function)?);
    let source = text(arg(args, 1, function)?);
    let replacement = text(arg(args, 2, function)?);
    let regex = regex::Regex::new(&pattern).map_err(|e| generic(format!("{function}: {e}")))?;
    let mut out = String::with_capacity(source.len());
    let mut copied = 0;
    for captures in regex.captures_iter(&source) {
        let whole = captures.get(0).expect("group 0 is the match");
        // What the expansion could write at most (each `$` a group, within the match),
        // checked before it is written.
        let expansion = if literal {
            replacement.len()
        } else {
            replacement.len() + replacement.matches('$').count() * whole.len()
        };
        let at_most = out.len() + (whole.start() - copied) + expansion;
        check_output(function, Some(at_most))?;
        out.push_str(&source[copied..whole.start()]);
        if literal {
            out.push_str(&replacement);
        } else {
            captures.expand(&replacement, &mut out);
        }
        copied = whole.end();
        check_output(function, Some(out.len()))?;
    }
    out.push_str(&source[copied..]);
    check_output(function, Some(out.len()))?;
    Ok(Value::String(out))
}

/// `merge dst src...`: `dst` with what it lacks (or holds empty) taken from each source,
/// dicts merged key by key (mergo's `Merge`, as Sprig calls it).
fn merge(args: &[Value]) -> Result<Value, FuncError> {
    merged(args, "merge", false)
}

/// `mergeOverwrite dst src...`: each source's non-empty values over `dst`, dicts merged key
/// by key.
fn merge_overwrite(args: &[Value]) -> Result<Value, FuncError> {
    merged(args, "mergeOverwrite", true)
}

fn merged(args: &[Value], function: &str, overwrite: bool) -> Result<Value, FuncError> {
    let mut dst = map_of(arg(args, 0, function)?)
        .cloned()
        .ok_or_else(|| generic(format!("{function}: the first argument must be a dict")))?;
    for src in &args[1..] {
        if let Some(src) = map_of(src) {
            merge_into(&mut dst, src, overwrite);
        }
    }
    Ok(Value::Map(dst))
}

fn merge_into(dst: &mut HashMap<String, Value>, src: &HashMap<String, Value>, overwrite: bool) {
    for (key, value) in src {
        match dst.get_mut(key) {
            Some(Value::Map(inner) | Value::Object(inner)) if map_of(value).is_some() => {
                merge_into(inner, map_of(value).expect("checked"), overwrite);
            }
            // Kept: a value the destination holds, unless overwriting (mergo's map merge
            // assigns the source's value then, an empty one too).
            Some(existing) if !is_empty(existing) && !overwrite => {}
            _ => {
                dst.insert(key.clone(), value.clone());
            }
        }
    }
}

/// `dig "a" "b" default dict`: the value at the keys' path, or the default.
fn dig(args: &[Value]) -> Result<Value, FuncError> {
    if args.len() < 3 {
        return Err(generic("dig: needs keys, a default and a dict"));
    }
    let (dict, rest) = args.split_last().expect("three at least");
    let (default, keys) = rest.split_last().expect("two at least");
    let mut at = dict;
    for (i, key) in keys.iter().enumerate() {
        let map = map_of(at).ok_or_else(|| generic("dig: a value on the path is not a dict"))?;
        match map.get(&text(key)) {
            Some(next) if i + 1 == keys.len() => return Ok(next.clone()),
            Some(next) => at = next,
            None => return Ok(default.clone()),
        }
    }
    Ok(default.clone())
}

/// `pluck "key" dict...`: the key's value in each dict that has it.
fn pluck(args: &[Value]) -> Result<Value, FuncError> {
    let key = text(arg(args, 0, "pluck")?);
    Ok(Value::Array(
        args[1..]
            .iter()
            .filter_map(map_of)
            .filter_map(|map| map.get(&key).cloned())
            .collect(),
    ))
}

/// `get dict "key"`: the value, or "" when the dict has none.
fn get(args: &[Value]) -> Result<Value, FuncError> {
    let map = map_of(arg(args, 0, "get")?).ok_or_else(|| generic("get: not a dict"))?;
    let key = text(arg(args, 1, "get")?);
    Ok(map
        .get(&key)
        .cloned()
        .unwrap_or(Value::String(String::new())))
}

/// `keys dict...`: the keys of every dict (sorted; Go's order is random).
fn keys(args: &[Value]) -> Result<Value, FuncError> {
    let mut keys: Vec<String> = args
        .iter()
        .filter_map(map_of)
        .flat_map(|map| map.keys().cloned())
        .collect();
    keys.sort();
    Ok(Value::Array(keys.into_iter().map(Value::String).collect()))
}

/// Each word's first letter changed by `change`, words split as Go's `strings.Title` splits.
fn each_word(s: &str, change: fn(char) -> String) -> String {
    let mut out = String::with_capacity(s.len());
    let mut after_separator = true;
    for c in s.chars() {
        if after_separator && c.is_alphabetic() {
            out.push_str(&change(c));
        } else {
            out.push(c);
        }
        after_separator = !(c.is_alphanumeric() || c == '_');
    }
    out
}

fn title(args: &[Value]) -> Result<Value, FuncError> {
    let s = text(arg(args, 0, "title")?);
    Ok(Value::String(each_word(&s, |c| c.to_uppercase().collect())))
}

fn untitle(args: &[Value]) -> Result<Value, FuncError> {
    let s = text(arg(args, 0, "untitle")?);
    Ok(Value::String(each_word(&s, |c| c.to_lowercase().collect())))
}

/// `trimPrefix "-" s`: the prefix removed once.
fn trim_prefix(args: &[Value]) -> Result<Value, FuncError> {
    let prefix = text(arg(args, 0, "trimPrefix")?);
    let s = text(arg(args, 1, "trimPrefix")?);
    Ok(Value::String(
        s.strip_prefix(&prefix).unwrap_or(&s).to_string(),
    ))
}

/// `trimSuffix "-" s`: the suffix removed once.
fn trim_suffix(args: &[Value]) -> Result<Value, FuncError> {
    let suffix = text(arg(args, 0, "trimSuffix")?);
    let s = text(arg(args, 1, "trimSuffix")?);
    Ok(Value::String(
        s.strip_suffix(&suffix).unwrap_or(&s).to_string(),
    ))
}

/// `trimAll "$-" s`: every character of the set trimmed from both ends.
fn trim_all(args: &[Value]) -> Result<Value, FuncError> {
    let set: Vec<char> = text(arg(args, 0, "trimAll")?).chars().collect();
    let s = text(arg(args, 1, "trimAll")?);
    Ok(Value::String(s.trim_matches(set.as_slice()).to_string()))
}

/// `quote a b`: each non-nil argument in double quotes with Go's escapes, space-separated.
fn quote(args: &[Value]) -> Result<Value, FuncError> {
    let quoted: Vec<String> = args
        .iter()
        .filter(|v| !is_nil(v))
        .map(|v| go_quote(&strval(v)))
        .collect();
    Ok(Value::String(quoted.join(" ")))
}

/// `squote a b`: each non-nil argument in single quotes, space-separated.
fn squote(args: &[Value]) -> Result<Value, FuncError> {
    let quoted: Vec<String> = args
        .iter()
        .filter(|v| !is_nil(v))
        .map(|v| format!("'{}'", strval(v)))
        .collect();
    Ok(Value::String(quoted.join(" ")))
}

/// `cat a b`: the non-nil arguments, space-separated.
fn cat(args: &[Value]) -> Result<Value, FuncError> {
    let parts: Vec<String> = args.iter().filter(|v| !is_nil(v)).map(strval).collect();
    Ok(Value::String(parts.join(" ")))
}

/// Go's `%q`: `"` and `\` escaped, control characters as Go writes them.
fn go_quote(s: &str) -> String {
    go_quoted(s, '"')
}

/// `s` between `quote`s with Go's escapes (`strconv.Quote`'s, with `quote` the one escaped).
pub(crate) fn go_quoted(s: &str, quote: char) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// `substr start end s`, byte offsets as in Go: a negative start is 0, an end past the text
/// or negative is its end.
fn substr(args: &[Value]) -> Result<Value, FuncError> {
    let start = go_int(arg(args, 0, "substr")?);
    let end = go_int(arg(args, 1, "substr")?);
    let s = text(arg(args, 2, "substr")?);
    let len = s.len() as i64;
    let (from, to) = if start < 0 {
        (0, end)
    } else if end < 0 || end > len {
        (start, len)
    } else {
        (start, end)
    };
    let (from, to) = (from as usize, to.max(0) as usize);
    s.get(from..to)
        .map(|part| Value::String(part.to_string()))
        .ok_or_else(|| {
            generic(format!(
                "substr: {start}..{end} is out of range for {len} bytes"
            ))
        })
}

fn to_string(args: &[Value]) -> Result<Value, FuncError> {
    Ok(Value::String(strval(arg(args, 0, "toString")?)))
}

/// A value as spf13/cast's `ToInt` reads it: floats truncated, strings parsed as Go's
/// `ParseInt(s, 0)` reads them (`0x1f`, `010` octal) after a zero decimal part is dropped,
/// anything else 0.
fn go_int(value: &Value) -> i64 {
    match value {
        Value::Number(n) => n
            .as_i64()
            .or_else(|| n.as_f64().map(|f| f.trunc() as i64))
            .unwrap_or(0),
        Value::Bool(b) => i64::from(*b),
        Value::String(s) => parse_go_int(trim_zero_decimal(s)).unwrap_or(0),
        _ => 0,
    }
}

/// spf13/cast's `trimZeroDecimal`: `1.00` is `1`; `1.5` and `1.` stay.
fn trim_zero_decimal(s: &str) -> &str {
    let bytes = s.as_bytes();
    let mut found_zero = false;
    for i in (1..=bytes.len()).rev() {
        match bytes[i - 1] {
            b'.' if found_zero => return &s[..i - 1],
            b'.' => {}
            b'0' => found_zero = true,
            _ => return s,
        }
    }
    s
}

/// `strconv.ParseInt(s, 0, 64)`.
fn parse_go_int(s: &str) -> Option<i64> {
    let (negative, digits) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let digits = digits.replace('_', "");
    let lower = digits.to_ascii_lowercase();
    let (radix, body) = if let Some(hex) = lower.strip_prefix("0x") {
        (16, hex.to_string())
    } else if let Some(binary) = lower.strip_prefix("0b") {
        (2, binary.to_string())
    } else if let Some(octal) = lower.strip_prefix("0o") {
        (8, octal.to_string())
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, lower[1..].to_string())
    } else {
        (10, lower)
    };
    let magnitude = i64::from_str_radix(&body, radix).ok()?;
    Some(if negative { -magnitude } else { magnitude })
}

fn int(args: &[Value]) -> Result<Value, FuncError> {
    Ok(Value::from(go_int(arg(args, 0, "int")?)))
}

/// spf13/cast's `ToFloat64`: numbers, numeric strings, booleans; anything else 0.
fn float64(args: &[Value]) -> Result<Value, FuncError> {
    let f = match arg(args, 0, "float64")? {
        Value::Number(n) => match n.kind() {
            gtmpl_ng::NumberKind::Unsigned(u) => u as f64,
            gtmpl_ng::NumberKind::Signed(i) => i as f64,
            gtmpl_ng::NumberKind::Float(f) => f,
        },
        Value::Bool(b) => f64::from(u8::from(*b)),
        Value::String(s) => s.parse().unwrap_or(0.0),
        _ => 0.0,
    };
    Ok(Value::from(f))
}

/// `strconv.Atoi`: a decimal integer, else 0.
fn atoi(args: &[Value]) -> Result<Value, FuncError> {
    Ok(Value::from(
        text(arg(args, 0, "atoi")?).parse::<i64>().unwrap_or(0),
    ))
}

fn list_of<'a>(args: &'a [Value], function: &str) -> Result<&'a [Value], FuncError> {
    match arg(args, 0, function)? {
        Value::Array(items) => Ok(items),
        Value::Nil | Value::NoValue => Ok(&[]),
        _ => Err(generic(format!("{function}: not a list"))),
    }
}

/// `first list`: nil for an empty list.
fn first(args: &[Value]) -> Result<Value, FuncError> {
    Ok(list_of(args, "first")?
        .first()
        .cloned()
        .unwrap_or(Value::Nil))
}

/// `last list`: nil for an empty list.
fn last(args: &[Value]) -> Result<Value, FuncError> {
    Ok(list_of(args, "last")?.last().cloned().unwrap_or(Value::Nil))
}

/// `compact list`: the list without its empty values.
fn compact(args: &[Value]) -> Result<Value, FuncError> {
    Ok(Value::Array(
        list_of(args, "compact")?
            .iter()
            .filter(|v| !is_empty(v))
            .cloned()
            .collect(),
    ))
}

/// Go's `%T` of a value as Helm's values hold it.
fn go_type(value: &Value) -> &'static str {
    match value {
        Value::Nil | Value::NoValue => "<nil>",
        Value::Bool(_) => "bool",
        Value::String(_) => "string",
        Value::Number(n) if n.as_i64().is_some() || n.as_u64().is_some() => "int",
        Value::Number(_) => "float64",
        Value::Array(_) => "[]interface {}",
        Value::Map(_) | Value::Object(_) => "map[string]interface {}",
        Value::Function(_) => "func",
    }
}

/// Go's `reflect.Kind` name of a value.
fn go_kind(value: &Value) -> &'static str {
    match value {
        Value::Nil | Value::NoValue => "invalid",
        Value::Array(_) => "slice",
        Value::Map(_) | Value::Object(_) => "map",
        other => go_type(other),
    }
}

fn type_of(args: &[Value]) -> Result<Value, FuncError> {
    Ok(Value::String(go_type(arg(args, 0, "typeOf")?).into()))
}

fn kind_of(args: &[Value]) -> Result<Value, FuncError> {
    Ok(Value::String(go_kind(arg(args, 0, "kindOf")?).into()))
}

fn type_is(args: &[Value]) -> Result<Value, FuncError> {
    let want = text(arg(args, 0, "typeIs")?);
    Ok(Value::Bool(go_type(arg(args, 1, "typeIs")?) == want))
}

fn kind_is(args: &[Value]) -> Result<Value, FuncError> {
    let want = text(arg(args, 0, "kindIs")?);
    Ok(Value::Bool(go_kind(arg(args, 1, "kindIs")?) == want))
}
