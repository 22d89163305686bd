//! `configMapGenerator` and `secretGenerator`: ConfigMaps and Secrets made from literals,
//! files and env files, as kustomize makes them, and the hash kustomize appends to their
//! names so that a change of content is a new object (and a rollout of what mounts it).

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::Error;
use crate::build::Loader;
use crate::kustomization::{GeneratorArgs, GeneratorOptions, pairs};
use crate::resource::Resource;

/// What a generated object does to one of the same name from a base.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Behavior {
    Create,
    Merge,
    Replace,
}

/// A ConfigMap (`secret` false) or Secret made from `args` in the kustomization at `dir`.
pub(crate) fn generate(
    loader: &mut Loader,
    file: &str,
    dir: &str,
    args: &GeneratorArgs,
    global: Option<&GeneratorOptions>,
    secret: bool,
) -> Result<(Behavior, Resource), Error> {
    let kind = if secret { "Secret" } else { "ConfigMap" };
    let fail = |message: String| Error::new(file, message);
    let name = args
        .name
        .clone()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| fail(format!("a {kind} generator must have a name")))?;
    let behavior = match args.behavior.as_deref() {
        None | Some("") | Some("create") => Behavior::Create,
        Some("merge") => Behavior::Merge,
        Some("replace") => Behavior::Replace,
        Some(other) => {
            return Err(fail(format!(
                "{kind} {name}: behavior {other:?} is not create, merge or replace"
            )));
        }
    };
    if args.secret_type.is_some() && !secret {
        return Err(fail(format!(
            "ConfigMap {name}: type is a Secret generator's field"
        )));
    }
    let mut data = BTreeMap::new();
    for (key, value) in
        key_values(loader, dir, args).map_err(|e| fail(format!("{kind} {name}: {e}")))?
    {
        if !is_data_key(&key) {
            return Err(fail(format!(
                "{kind} {name}: {key:?} is not a valid key (letters, digits, '-', '_' or '.')"
            )));
        }
        if data.insert(key.clone(), value).is_some() {
            return Err(fail(format!(
                "{kind} {name} illegally repeats the key `{key}`"
            )));
        }
    }
    loader.charge(file, data.iter().map(|(k, v)| k.len() + v.len()).sum())?;
    let mut object = json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name}});
    if let Some(namespace) = args.namespace.as_ref().filter(|n| !n.is_empty()) {
        object["metadata"]["namespace"] = json!(namespace);
    }
    if secret {
        let encoded: Map<String, Value> = data
            .iter()
            .map(|(k, v)| (k.clone(), json!(BASE64.encode(v))))
            .collect();
        object["type"] = json!(args.secret_type.as_deref().unwrap_or("Opaque"));
        // A Secret always has its data, if empty (a ConfigMap has none then).
        object["data"] = Value::Object(encoded);
    } else {
        let (mut text, mut binary) = (Map::new(), Map::new());
        for (key, value) in &data {
            match std::str::from_utf8(value) {
                Ok(s) => text.insert(key.clone(), json!(s)),
                Err(_) => binary.insert(key.clone(), json!(BASE64.encode(value))),
            };
        }
        if !text.is_empty() {
            object["data"] = Value::Object(text);
        }
        if !binary.is_empty() {
            object["binaryData"] = Value::Object(binary);
        }
    }
    let options = merged_options(global, args.options.as_ref());
    let mut resource = Resource::new(object);
    let labels = pairs(&options.labels);
    let annotations = pairs(&options.annotations);
    if !labels.is_empty() {
        resource
            .metadata()
            .insert("labels".into(), Value::Object(labels));
    }
    if !annotations.is_empty() {
        resource
            .metadata()
            .insert("annotations".into(), Value::Object(annotations));
    }
    if options.immutable == Some(true) {
        resource.object["immutable"] = json!(true);
    }
    resource.needs_hash = options.disable_name_suffix_hash != Some(true);
    Ok((behavior, resource))
}

/// The kustomization's `generatorOptions` and a generator's own `options`: labels and
/// annotations together (the generator's winning), each switch on if either turns it on.
fn merged_options(
    global: Option<&GeneratorOptions>,
    local: Option<&GeneratorOptions>,
) -> GeneratorOptions {
    let mut merged = global.cloned().unwrap_or_default();
    if let Some(local) = local {
        merged.labels.extend(local.labels.clone());
        merged.annotations.extend(local.annotations.clone());
        for (mine, theirs) in [
            (
                &mut merged.disable_name_suffix_hash,
                local.disable_name_suffix_hash,
            ),
            (&mut merged.immutable, local.immutable),
        ] {
            if theirs == Some(true) {
                *mine = Some(true);
            }
        }
    }
    merged
}

/// The key/value pairs of a generator, in kustomize's order: env files, literals, files.
fn key_values(
    loader: &mut Loader,
    dir: &str,
    args: &GeneratorArgs,
) -> Result<Vec<(String, Vec<u8>)>, String> {
    let mut all = Vec::new();
    for env in args.envs.iter().chain(args.env.iter()) {
        let content = loader.read_within(dir, env).map_err(|e| e.message)?;
        all.extend(env_file(env, &content)?);
    }
    for literal in &args.literals {
        let (key, value) = literal
            .split_once('=')
            .filter(|(key, _)| !key.is_empty())
            .ok_or_else(|| format!("invalid literal source {literal:?}, expected key=value"))?;
        all.push((key.to_string(), unquoted(value).as_bytes().to_vec()));
    }
    for source in &args.files {
        let (key, path) = match source.matches('=').count() {
            0 => (
                source.rsplit('/').next().unwrap_or(source).to_string(),
                source.as_str(),
            ),
            1 => {
                let (key, path) = source.split_once('=').unwrap_or_default();
                if key.is_empty() || path.is_empty() {
                    return Err(format!(
                        "file source {source:?} needs both a key and a path (key=path)"
                    ));
                }
                (key.to_string(), path)
            }
            _ => {
                return Err(format!(
                    "file source {source:?}: a key name or file path contains '='"
                ));
            }
        };
        let content = loader.read_within(dir, path).map_err(|e| e.message)?;
        all.push((key, content));
    }
    Ok(all)
}

/// The pairs of an env file: `KEY=value` per line; blank lines and `#` comments skipped,
/// a line without `=` an empty value.
fn env_file(name: &str, content: &[u8]) -> Result<Vec<(String, Vec<u8>)>, String> {
    let text =
        std::str::from_utf8(content).map_err(|_| format!("env file {name} is not UTF-8 text"))?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut pairs = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim_start();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (key, value) = line.split_once('=').unwrap_or((line, ""));
        if !is_env_name(key) {
            return Err(format!(
                "env file {name} line {}: {key:?} is not a valid environment variable name",
                number + 1
            ));
        }
        pairs.push((key.to_string(), value.as_bytes().to_vec()));
    }
    Ok(pairs)
}

/// A literal's value without one pair of surrounding quotes.
fn unquoted(value: &str) -> &str {
    let bytes = value.as_bytes();
    if bytes.len() >= 2 && bytes[0] == bytes[bytes.len() - 1] && matches!(bytes[0], b'"' | b'\'') {
        &value[1..value.len() - 1]
    } else {
        value
    }
}

fn is_data_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 253
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && key != "."
        && key != ".."
}

fn is_env_name(key: &str) -> bool {
    let mut bytes = key.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || matches!(b, b'-' | b'_' | b'.'))
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// What a generated object with `behavior` merge or replace does to `base`, the one from a
/// base of the same name, as kustomize does it: the generated object takes its place (its
/// type, its immutability), under the base's name and history; merge keeps the base's data,
/// labels and annotations under the generated ones, replace only the labels and annotations.
pub(crate) fn absorb(base: &mut Resource, generated: Resource, behavior: Behavior) {
    let mut object = generated.object;
    if behavior == Behavior::Merge {
        for field in ["data", "binaryData", "stringData"] {
            if let Some(Value::Object(old)) = base.object.get(field) {
                let mut merged = old.clone();
                if let Some(Value::Object(new)) = object.get(field) {
                    merged.extend(new.clone());
                }
                object[field] = Value::Object(merged);
            }
        }
    }
    for field in ["labels", "annotations"] {
        if let Some(Value::Object(old)) = base.object["metadata"].get(field) {
            let mut merged = old.clone();
            if let Some(Value::Object(new)) = object["metadata"].get(field) {
                merged.extend(new.clone());
            }
            object["metadata"][field] = Value::Object(merged);
        }
    }
    for field in ["name", "namespace"] {
        match base.object["metadata"].get(field) {
            Some(value) => object["metadata"][field] = value.clone(),
            None => {
                object["metadata"].as_object_mut().map(|m| m.remove(field));
            }
        }
    }
    base.object = object;
    base.needs_hash = base.needs_hash && generated.needs_hash;
}

/// kustomize's name hash of a ConfigMap or Secret: the SHA-256 of its kind and data (and
/// type, for a Secret) as Go's JSON encoder writes them, its first ten hex digits with
/// vowels and easily confused digits replaced, as `kubectl create configmap --append-hash`.
pub(crate) fn name_hash(object: &Value) -> String {
    let field = |name: &str| match object.get(name) {
        Some(v @ Value::Object(_)) => v.clone(),
        Some(Value::String(s)) => Value::String(s.clone()),
        _ => Value::String(String::new()),
    };
    let kind = crate::resource::str_at(object, &["kind"]);
    let mut encoded = Map::new();
    encoded.insert("kind".into(), json!(kind));
    // kustomize looks the name up as one field called "metadata/name", which no object
    // has: the name it hashes is always empty, and so is lariat's, for the same hashes.
    encoded.insert("name".into(), json!(""));
    encoded.insert("data".into(), field("data"));
    let optional = if kind == "Secret" {
        encoded.insert("type".into(), field("type"));
        "stringData"
    } else {
        "binaryData"
    };
    if let Some(v @ Value::Object(_)) = object.get(optional) {
        encoded.insert(optional.into(), v.clone());
    }
    let mut text = String::new();
    go_json(&Value::Object(encoded), &mut text);
    let digest = Sha256::digest(text.as_bytes());
    digest
        .iter()
        .flat_map(|b| [b >> 4, b & 0xf])
        .take(10)
        .map(|nibble| match nibble {
            0 => 'g',
            1 => 'h',
            3 => 'k',
            10 => 'm',
            14 => 't',
            n => char::from_digit(u32::from(n), 16).unwrap_or('0'),
        })
        .collect()
}

/// JSON as Go's `encoding/json` writes it: keys sorted, and `<`, `>`, `&`, U+2028 and
/// U+2029 escaped.
fn go_json(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                go_string(key, out);
                out.push(':');
                go_json(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                go_json(item, out);
            }
            out.push(']');
        }
        Value::String(s) => go_string(s, out),
        other => out.push_str(&other.to_string()),
    }
}

fn go_string(s: &str, out: &mut String) {
    let plain = serde_json::to_string(s).unwrap_or_default();
    for c in plain.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
}
