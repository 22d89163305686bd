//! YAML written byte for byte as Helm's `toYaml` writes it.
//!
//! Helm marshals with sigs.k8s.io/yaml: JSON first, then go-yaml v2's emitter (a port of
//! libyaml). Charts' golden files and users' diffs depend on its exact choices, which no
//! Rust YAML crate makes: keys in go-yaml's "natural" order (`a2` before `a10`), strings
//! that would read back as another type double-quoted, strings with `: ` single-quoted,
//! sequences in a mapping not indented, and plain or quoted strings folded after column 80.
//! This module re-implements those rules (read from go-yaml v2's `encode.go`, `resolve.go`,
//! `sorter.go` and `emitterc.go`) for the JSON data model that reaches it.

use std::cmp::Ordering;

use serde_json::Value;

/// go-yaml's line width: a plain or quoted scalar is folded at a space past this column.
const BEST_WIDTH: usize = 80;
/// go-yaml's indentation step.
const BEST_INDENT: i32 = 2;
/// A mapping key longer than this is written as a complex key (`? key`).
const SIMPLE_KEY_LIMIT: usize = 128;

/// `value` as go-yaml v2 marshals it, ending in a newline.
pub fn to_string(value: &Value) -> String {
    let mut emitter = Emitter {
        out: String::new(),
        column: 0,
        indent: -1,
        indents: Vec::new(),
        whitespace: true,
        indention: true,
    };
    emitter.node(value, Context::Root);
    emitter.write_indent();
    emitter.out
}

#[derive(Clone, Copy, PartialEq)]
enum Context {
    Root,
    Sequence,
    MappingValue,
    SimpleKey,
    ComplexKey,
}

#[derive(Clone, Copy, PartialEq)]
enum Style {
    Plain,
    SingleQuoted,
    DoubleQuoted,
    Literal,
}

struct Emitter {
    out: String,
    column: usize,
    indent: i32,
    indents: Vec<i32>,
    whitespace: bool,
    indention: bool,
}

impl Emitter {
    fn node(&mut self, value: &Value, context: Context) {
        match value {
            Value::Null => self.scalar("null", Style::Plain, context),
            Value::Bool(b) => self.scalar(if *b { "true" } else { "false" }, Style::Plain, context),
            Value::Number(n) => self.scalar(&number(n), Style::Plain, context),
            Value::String(s) => self.scalar(s, string_style(s), context),
            Value::Array(items) if items.is_empty() => self.indicator("[]", true, false, false),
            Value::Object(map) if map.is_empty() => self.indicator("{}", true, false, false),
            Value::Array(items) => {
                let indentless = context == Context::MappingValue && !self.indention;
                self.increase_indent(false, indentless);
                for item in items {
                    self.write_indent();
                    self.indicator("-", true, false, true);
                    self.node(item, Context::Sequence);
                }
                self.pop_indent();
            }
            Value::Object(map) => {
                let keys = merge_sort(map.keys().collect(), &|a: &&String, b: &&String| {
                    natural_order(a, b)
                });
                self.increase_indent(false, false);
                for key in keys {
                    self.write_indent();
                    let key_value = Value::String(key.clone());
                    if key.len() <= SIMPLE_KEY_LIMIT && !key.chars().any(is_break) {
                        self.node(&key_value, Context::SimpleKey);
                        self.indicator(":", false, false, false);
                    } else {
                        self.indicator("?", true, false, true);
                        self.node(&key_value, Context::ComplexKey);
                        self.write_indent();
                        self.indicator(":", true, false, true);
                    }
                    self.node(&map[key.as_str()], Context::MappingValue);
                }
                self.pop_indent();
            }
        }
    }

    fn scalar(&mut self, text: &str, requested: Style, context: Context) {
        let style = select_style(text, requested, context == Context::SimpleKey);
        self.increase_indent(true, false);
        let allow_breaks = context != Context::SimpleKey;
        match style {
            Style::Plain => self.plain(text, allow_breaks),
            Style::SingleQuoted => self.single_quoted(text, allow_breaks),
            Style::DoubleQuoted => self.double_quoted(text, allow_breaks),
            Style::Literal => self.literal(text),
        }
        self.pop_indent();
    }

    fn increase_indent(&mut self, flow: bool, indentless: bool) {
        self.indents.push(self.indent);
        if self.indent < 0 {
            self.indent = if flow { BEST_INDENT } else { 0 };
        } else if !indentless {
            self.indent += BEST_INDENT;
        }
    }

    fn pop_indent(&mut self) {
        self.indent = self.indents.pop().unwrap_or(-1);
    }

    fn put(&mut self, c: char) {
        self.out.push(c);
        self.column += 1;
    }

    fn put_break(&mut self) {
        self.out.push('\n');
        self.column = 0;
    }

    fn write_break(&mut self, c: char) {
        if c == '\n' {
            self.put_break();
        } else {
            self.out.push(c);
            self.column = 0;
        }
    }

    fn write_indent(&mut self) {
        let indent = self.indent.max(0) as usize;
        if !self.indention || self.column > indent || (self.column == indent && !self.whitespace) {
            self.put_break();
        }
        while self.column < indent {
            self.put(' ');
        }
        self.whitespace = true;
        self.indention = true;
    }

    fn indicator(
        &mut self,
        text: &str,
        need_whitespace: bool,
        is_whitespace: bool,
        is_indention: bool,
    ) {
        if need_whitespace && !self.whitespace {
            self.put(' ');
        }
        for c in text.chars() {
            self.put(c);
        }
        self.whitespace = is_whitespace;
        self.indention = self.indention && is_indention;
    }

    fn plain(&mut self, text: &str, allow_breaks: bool) {
        if !self.whitespace {
            self.put(' ');
        }
        let chars: Vec<char> = text.chars().collect();
        let (mut spaces, mut breaks) = (false, false);
        for (i, &c) in chars.iter().enumerate() {
            if c == ' ' {
                let next_is_space = chars.get(i + 1) == Some(&' ');
                if allow_breaks && !spaces && self.column > BEST_WIDTH && !next_is_space {
                    self.write_indent();
                } else {
                    self.put(c);
                }
                spaces = true;
            } else if is_break(c) {
                if !breaks && c == '\n' {
                    self.put_break();
                }
                self.write_break(c);
                self.indention = true;
                breaks = true;
            } else {
                if breaks {
                    self.write_indent();
                }
                self.put(c);
                self.indention = false;
                spaces = false;
                breaks = false;
            }
        }
        self.whitespace = false;
        self.indention = false;
    }

    fn single_quoted(&mut self, text: &str, allow_breaks: bool) {
        self.indicator("'", true, false, false);
        let chars: Vec<char> = text.chars().collect();
        let (mut spaces, mut breaks) = (false, false);
        for (i, &c) in chars.iter().enumerate() {
            if c == ' ' {
                let next_is_space = chars.get(i + 1) == Some(&' ');
                if allow_breaks
                    && !spaces
                    && self.column > BEST_WIDTH
                    && i > 0
                    && i < chars.len() - 1
                    && !next_is_space
                {
                    self.write_indent();
                } else {
                    self.put(c);
                }
                spaces = true;
            } else if is_break(c) {
                if !breaks && c == '\n' {
                    self.put_break();
                }
                self.write_break(c);
                self.indention = true;
                breaks = true;
            } else {
                if breaks {
                    self.write_indent();
                }
                if c == '\'' {
                    self.put('\'');
                }
                self.put(c);
                self.indention = false;
                spaces = false;
                breaks = false;
            }
        }
        self.indicator("'", false, false, false);
        self.whitespace = false;
        self.indention = false;
    }

    fn double_quoted(&mut self, text: &str, allow_breaks: bool) {
        self.indicator("\"", true, false, false);
        let chars: Vec<char> = text.chars().collect();
        let mut spaces = false;
        for (i, &c) in chars.iter().enumerate() {
            if !is_printable(c) || c == '\u{FEFF}' || is_break(c) || c == '"' || c == '\\' {
                self.put('\\');
                match escape(c) {
                    Some(e) => self.put(e),
                    None => {
                        let (letter, width) = match c as u32 {
                            0..=0xFF => ('x', 2),
                            0x100..=0xFFFF => ('u', 4),
                            _ => ('U', 8),
                        };
                        self.put(letter);
                        for ch in format!("{:0width$X}", c as u32, width = width).chars() {
                            self.put(ch);
                        }
                    }
                }
                spaces = false;
            } else if c == ' ' {
                if allow_breaks
                    && !spaces
                    && self.column > BEST_WIDTH
                    && i > 0
                    && i < chars.len() - 1
                {
                    self.write_indent();
                    if chars.get(i + 1) == Some(&' ') {
                        self.put('\\');
                    }
                } else {
                    self.put(c);
                }
                spaces = true;
            } else {
                self.put(c);
                spaces = false;
            }
        }
        self.indicator("\"", false, false, false);
        self.whitespace = false;
        self.indention = false;
    }

    fn literal(&mut self, text: &str) {
        self.indicator("|", true, false, false);
        let chars: Vec<char> = text.chars().collect();
        if chars.first().is_some_and(|&c| c == ' ' || is_break(c)) {
            self.indicator(&BEST_INDENT.to_string(), false, false, false);
        }
        let chomp = match chars.as_slice() {
            [] => Some("-"),
            [.., last] if !is_break(*last) => Some("-"),
            [_] => Some("+"),
            [.., before, _] if is_break(*before) => Some("+"),
            _ => None,
        };
        if let Some(chomp) = chomp {
            self.indicator(chomp, false, false, false);
        }
        self.put_break();
        self.indention = true;
        self.whitespace = true;
        let mut breaks = true;
        for &c in &chars {
            if is_break(c) {
                self.write_break(c);
                self.indention = true;
                breaks = true;
            } else {
                if breaks {
                    self.write_indent();
                }
                self.put(c);
                self.indention = false;
                breaks = false;
            }
        }
    }
}

/// The style go-yaml's encoder asks for: literal for text with a newline, double-quoted
/// for text that would read back as something other than a string.
fn string_style(s: &str) -> Style {
    if s.contains('\n') {
        Style::Literal
    } else if resolves_to_string(s) && !is_base60_float(s) {
        Style::Plain
    } else {
        Style::DoubleQuoted
    }
}

/// The emitter's downgrade of the requested style by what the text contains.
fn select_style(text: &str, requested: Style, simple_key: bool) -> Style {
    let analysis = Analysis::of(text);
    let mut style = requested;
    if simple_key && analysis.multiline {
        style = Style::DoubleQuoted;
    }
    if style == Style::Plain && (!analysis.block_plain_allowed || (text.is_empty() && simple_key)) {
        style = Style::SingleQuoted;
    }
    if style == Style::SingleQuoted && !analysis.single_quoted_allowed {
        style = Style::DoubleQuoted;
    }
    if style == Style::Literal && (!analysis.block_allowed || simple_key) {
        style = Style::DoubleQuoted;
    }
    style
}

struct Analysis {
    multiline: bool,
    block_plain_allowed: bool,
    single_quoted_allowed: bool,
    block_allowed: bool,
}

impl Analysis {
    fn of(text: &str) -> Analysis {
        if text.is_empty() {
            return Analysis {
                multiline: false,
                block_plain_allowed: true,
                single_quoted_allowed: true,
                block_allowed: false,
            };
        }
        let chars: Vec<char> = text.chars().collect();
        let mut block_indicators = text.starts_with("---") || text.starts_with("...");
        let (mut line_breaks, mut special) = (false, false);
        let (mut leading, mut trailing_space, mut trailing_break) = (false, false, false);
        let (mut break_space, mut space_break) = (false, false);
        let (mut previous_space, mut previous_break) = (false, false);
        let mut preceded_by_whitespace = true;
        for (i, &c) in chars.iter().enumerate() {
            let followed_by_whitespace = chars.get(i + 1).is_none_or(|&n| n == ' ' || n == '\t');
            let first = i == 0;
            match c {
                '#' | ',' | '[' | ']' | '{' | '}' | '&' | '*' | '!' | '|' | '>' | '\'' | '"'
                | '%' | '@' | '`'
                    if first =>
                {
                    block_indicators = true
                }
                '?' | ':' | '-' if first && followed_by_whitespace => block_indicators = true,
                ':' if !first && followed_by_whitespace => block_indicators = true,
                '#' if !first && preceded_by_whitespace => block_indicators = true,
                _ => {}
            }
            if !is_printable(c) {
                special = true;
            }
            let last = i + 1 == chars.len();
            if c == ' ' {
                leading |= first;
                trailing_space |= last;
                break_space |= previous_break;
                previous_space = true;
                previous_break = false;
            } else if is_break(c) {
                line_breaks = true;
                leading |= first;
                trailing_break |= last;
                space_break |= previous_space;
                previous_space = false;
                previous_break = true;
            } else {
                previous_space = false;
                previous_break = false;
            }
            preceded_by_whitespace = c == ' ' || c == '\t' || is_break(c);
        }
        let mut analysis = Analysis {
            multiline: line_breaks,
            block_plain_allowed: true,
            single_quoted_allowed: true,
            block_allowed: true,
        };
        if leading || trailing_space || trailing_break || line_breaks || block_indicators {
            analysis.block_plain_allowed = false;
        }
        if trailing_space {
            analysis.block_allowed = false;
        }
        if break_space {
            analysis.block_plain_allowed = false;
            analysis.single_quoted_allowed = false;
        }
        if space_break || special {
            analysis.block_plain_allowed = false;
            analysis.single_quoted_allowed = false;
            analysis.block_allowed = false;
        }
        analysis
    }
}

fn is_break(c: char) -> bool {
    matches!(c, '\r' | '\n' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

/// libyaml's printable set; go-yaml escapes everything outside it, astral characters included.
fn is_printable(c: char) -> bool {
    matches!(c as u32, 0x0A | 0x20..=0x7E | 0xA0..=0xD7FF | 0xE000..=0xFFFD) && c != '\u{FEFF}'
}

fn escape(c: char) -> Option<char> {
    Some(match c {
        '\0' => '0',
        '\u{07}' => 'a',
        '\u{08}' => 'b',
        '\t' => 't',
        '\n' => 'n',
        '\u{0B}' => 'v',
        '\u{0C}' => 'f',
        '\r' => 'r',
        '\u{1B}' => 'e',
        '"' => '"',
        '\\' => '\\',
        '\u{85}' => 'N',
        '\u{A0}' => '_',
        '\u{2028}' => 'L',
        '\u{2029}' => 'P',
        _ => return None,
    })
}

/// Whether go-yaml would read `s`, unquoted, back as a string (its `resolve`): not a YAML
/// 1.1 boolean or null, not an integer in any of Go's bases, not a float, not a timestamp.
fn resolves_to_string(s: &str) -> bool {
    const SPECIAL: &[&str] = &[
        "y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON", "n", "N", "no",
        "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF", "", "~", "null", "Null",
        "NULL", ".nan", ".NaN", ".NAN", ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf",
        "-.Inf", "-.INF", "<<",
    ];
    if SPECIAL.contains(&s) {
        return false;
    }
    match s.as_bytes()[0] {
        b'.' => s.parse::<f64>().is_err() || s.contains(['i', 'I', 'n', 'N']),
        b'+' | b'-' | b'0'..=b'9' => {
            if is_timestamp(s) {
                return false;
            }
            let plain = s.replace('_', "");
            !(go_parses_int(&plain) || is_yaml_float(&plain) || is_binary(&plain))
        }
        _ => true,
    }
}

/// Go's `strconv.ParseInt(s, 0, 64)` or `ParseUint`: an optional sign, then decimal,
/// `0x`, `0o`, `0b` or a leading-zero octal.
fn go_parses_int(s: &str) -> bool {
    let unsigned = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (digits, radix) =
        if let Some(hex) = unsigned.strip_prefix("0x").or(unsigned.strip_prefix("0X")) {
            (hex, 16)
        } else if let Some(oct) = unsigned.strip_prefix("0o").or(unsigned.strip_prefix("0O")) {
            (oct, 8)
        } else if let Some(bin) = unsigned.strip_prefix("0b").or(unsigned.strip_prefix("0B")) {
            (bin, 2)
        } else if unsigned.len() > 1 && unsigned.starts_with('0') {
            (&unsigned[1..], 8)
        } else {
            (unsigned, 10)
        };
    !digits.is_empty() && u64::from_str_radix(digits, radix).is_ok()
}

fn is_yaml_float(s: &str) -> bool {
    // ^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$
    let unsigned = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(at) => (&unsigned[..at], Some(&unsigned[at + 1..])),
        None => (unsigned, None),
    };
    let digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = match mantissa.split_once('.') {
        Some(("", fraction)) => !fraction.is_empty() && digits(fraction),
        Some((whole, fraction)) => !whole.is_empty() && digits(whole) && digits(fraction),
        None => !mantissa.is_empty() && digits(mantissa),
    };
    let exponent_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['+', '-']).unwrap_or(e);
        !e.is_empty() && digits(e)
    });
    mantissa_ok && exponent_ok
}

fn is_binary(s: &str) -> bool {
    s.strip_prefix("-0b")
        .or(s.strip_prefix("0b"))
        .is_some_and(|b| !b.is_empty() && b.bytes().all(|c| c == b'0' || c == b'1'))
}

/// go-yaml's timestamp forms: a date (`2006-1-2`), optionally followed by a time.
fn is_timestamp(s: &str) -> bool {
    let bytes = s.as_bytes();
    if bytes.len() < 8 || !bytes[..4].iter().all(u8::is_ascii_digit) || bytes[4] != b'-' {
        return false;
    }
    let date_end = s.find(['T', 't', ' ']).unwrap_or(s.len());
    let mut parts = s[5..date_end].split('-');
    let (Some(month), Some(day), None) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let number = |t: &str, max: u32| {
        (1..=2).contains(&t.len()) && t.parse::<u32>().is_ok_and(|n| (1..=max).contains(&n))
    };
    if !number(month, 12) || !number(day, 31) {
        return false;
    }
    if date_end == s.len() {
        return true;
    }
    // go-yaml's forms: `2006-1-2T15:4:5.999999999Z07:00` (a zone required after `T`) and
    // `2006-1-2 15:4:5.999999999` (none allowed after a space).
    let time = &s[date_end + 1..];
    let zoned = time.ends_with('Z') || time.rfind(['+', '-']).is_some_and(|at| at > 0);
    let with_zone = s.as_bytes()[date_end] != b' ';
    zoned == with_zone && is_time(time)
}

fn is_time(t: &str) -> bool {
    let t = t.trim_end_matches('Z');
    let clock = t.split(['+', '-']).next().unwrap_or("");
    let clock = clock.split('.').next().unwrap_or("");
    let fields: Vec<&str> = clock.split(':').collect();
    fields.len() == 3
        && fields
            .iter()
            .all(|f| (1..=2).contains(&f.len()) && f.bytes().all(|b| b.is_ascii_digit()))
}

fn is_base60_float(s: &str) -> bool {
    // ^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$
    let unsigned = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (body, fraction) = match unsigned.split_once('.') {
        Some((body, fraction)) => (body, Some(fraction)),
        None => (unsigned, None),
    };
    let mut groups = body.split(':');
    let head = groups.next().unwrap_or("");
    let head_ok = head.bytes().next().is_some_and(|b| b.is_ascii_digit())
        && head.bytes().all(|b| b.is_ascii_digit() || b == b'_');
    let rest: Vec<&str> = groups.collect();
    let rest_ok = !rest.is_empty()
        && rest.iter().all(|g| match g.as_bytes() {
            [d] => d.is_ascii_digit(),
            [t, d] => (b'0'..=b'5').contains(t) && d.is_ascii_digit(),
            _ => false,
        });
    let fraction_ok = fraction.is_none_or(|f| f.bytes().all(|b| b.is_ascii_digit() || b == b'_'));
    head_ok && rest_ok && fraction_ok
}

/// A number as go-yaml writes it: integers in decimal, floats as Go's `%g` at the
/// shortest precision that reads back (`1.5`, `1.2345675e+06`, `1e-05`).
fn number(n: &serde_json::Number) -> String {
    if let Some(i) = n.as_i64() {
        return i.to_string();
    }
    if let Some(u) = n.as_u64() {
        return u.to_string();
    }
    let f = n.as_f64().unwrap_or(0.0);
    if f.is_finite() && f.fract() == 0.0 && f.abs() < 1e21 {
        // JSON writes a whole float without a fraction, and go-yaml reads that as an integer.
        return format!("{f:.0}");
    }
    go_format_g(f)
}

pub(crate) fn go_format_g(f: f64) -> String {
    if f.is_nan() {
        return ".nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            ".inf".into()
        } else {
            "-.inf".into()
        };
    }
    let scientific = format!("{f:e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    // strconv.FormatFloat(f, 'g', -1, 64): the exponent form below 1e-4 and from 1e6 on.
    if !(-4..6).contains(&exponent) {
        return format!(
            "{mantissa}e{}{:02}",
            if exponent < 0 { '-' } else { '+' },
            exponent.abs()
        );
    }
    format!("{f}")
}

/// A stable merge sort that never fails: go-yaml's key order is not a total order (`9` <
/// `10` < `1a` < `9`), and the standard library's sorts may panic on such an order.
fn merge_sort<T: Copy>(items: Vec<T>, order: &dyn Fn(&T, &T) -> Ordering) -> Vec<T> {
    if items.len() <= 1 {
        return items;
    }
    let mut right = items;
    let left = right.drain(..right.len() / 2).collect();
    let (left, right) = (merge_sort(left, order), merge_sort(right, order));
    let mut out = Vec::with_capacity(left.len() + right.len());
    let (mut i, mut j) = (0, 0);
    while i < left.len() && j < right.len() {
        if order(&right[j], &left[i]) == Ordering::Less {
            out.push(right[j]);
            j += 1;
        } else {
            out.push(left[i]);
            i += 1;
        }
    }
    out.extend_from_slice(&left[i..]);
    out.extend_from_slice(&right[j..]);
    out
}

/// go-yaml v2's key order: letters after other characters, runs of digits compared as
/// numbers, so `a2` sorts before `a10`.
fn natural_order(a: &str, b: &str) -> Ordering {
    let (ar, br): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    for i in 0..ar.len().min(br.len()) {
        if ar[i] == br[i] {
            continue;
        }
        let (al, bl) = (ar[i].is_alphabetic(), br[i].is_alphabetic());
        if al && bl {
            return ar[i].cmp(&br[i]);
        }
        if al || bl {
            return if bl {
                Ordering::Less
            } else {
                Ordering::Greater
            };
        }
        let (mut an, mut bn) = (0i64, 0i64);
        if ar[i] == '0' || br[i] == '0' {
            let mut j = i;
            while j > 0 && ar[j - 1].is_ascii_digit() {
                j -= 1;
                if ar[j] != '0' {
                    an = 1;
                    bn = 1;
                    break;
                }
            }
        }
        let mut ai = i;
        while ai < ar.len() && ar[ai].is_ascii_digit() {
            an = an
                .wrapping_mul(10)
                .wrapping_add(i64::from(ar[ai] as u8 - b'0'));
            ai += 1;
        }
        let mut bi = i;
        while bi < br.len() && br[bi].is_ascii_digit() {
            bn = bn
                .wrapping_mul(10)
                .wrapping_add(i64::from(br[bi] as u8 - b'0'));
            bi += 1;
        }
        if an != bn {
            return an.cmp(&bn);
        }
        if ai != bi {
            return ai.cmp(&bi);
        }
        return ar[i].cmp(&br[i]);
    }
    ar.len().cmp(&br.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn writes_as_go_yaml_v2() {
        let cases = [
            (json!({"b": 1, "a": "x"}), "a: x\nb: 1\n"),
            (
                json!({"list": ["a", "b"], "m": {}, "s": []}),
                "list:\n- a\n- b\nm: {}\ns: []\n",
            ),
            (
                json!([{"a": 1, "b": [1, 2]}]),
                "- a: 1\n  b:\n  - 1\n  - 2\n",
            ),
            (
                json!({"t": "true", "n": "123", "e": "", "f": "1.5", "h": "0x1F", "y": "y"}),
                // Keys too: `y` and `n` are YAML 1.1 booleans.
                "e: \"\"\nf: \"1.5\"\nh: \"0x1F\"\n\"n\": \"123\"\nt: \"true\"\n\"y\": \"y\"\n",
            ),
            (
                json!({"c": "a: b", "s": "*x", "d": "-", "w": " lead", "p": "1.2.3"}),
                "c: 'a: b'\nd: '-'\np: 1.2.3\ns: '*x'\nw: ' lead'\n",
            ),
            (json!({"m": "line1\nline2"}), "m: |-\n  line1\n  line2\n"),
            (json!({"m": "line1\n"}), "m: |\n  line1\n"),
            (json!({"m": "tab\there"}), "m: \"tab\\there\"\n"),
            (
                json!({"date": "2020-01-02", "time": "12:30"}),
                "date: \"2020-01-02\"\ntime: \"12:30\"\n",
            ),
            (
                json!({"a10": 1, "a2": 2, "a_b": 3, "aB": 4}),
                "a_b: 3\na2: 2\na10: 1\naB: 4\n",
            ),
            (json!(1.5), "1.5\n"),
            (json!(1234567.5), "1.2345675e+06\n"),
            (json!("plain"), "plain\n"),
            (json!(null), "null\n"),
        ];
        for (value, expected) in cases {
            assert_eq!(to_string(&value), expected, "{value}");
        }
        // Not a total order, and no panic for it.
        let keys: serde_json::Map<String, Value> = ["9", "10", "1a", "a", "_"]
            .iter()
            .map(|k| (k.to_string(), json!(1)))
            .collect();
        assert_eq!(to_string(&Value::Object(keys)).lines().count(), 5);
    }

    #[test]
    fn folds_long_plain_strings_after_column_80() {
        let long = "word ".repeat(30).trim_end().to_string();
        let out = to_string(&json!({ "description": long }));
        let first = out.lines().next().unwrap();
        assert!(first.len() > 80 && first.len() < 90, "{out}");
        assert!(out.lines().nth(1).unwrap().starts_with("  word"), "{out}");
    }
}
