//! Patches: strategic merge patches (as kustomize merges them without a schema: maps by
//! key, lists of objects by the key their elements share, `$patch: delete` and `replace`),
//! JSON 6902 patches, and the selectors that say which objects a patch is for.

use regex::Regex;
use serde_json::{Map, Value};

use crate::Error;
use crate::kustomization::{PatchOptions, Selector};
use crate::resource::{Id, Resource};

/// The fields kustomize merges a list of objects by, when its elements all have one: the
/// first such, in this order (kustomize's associative keys for kinds without a schema).
const ASSOCIATIVE_KEYS: [&str; 7] = [
    "mountPath",
    "devicePath",
    "ip",
    "type",
    "topologyKey",
    "name",
    "containerPort",
];

/// Which objects of `set` a patch's `target` selects: group, version and kind as they are
/// now; name and namespace (regular expressions, whole) as they were read or are now;
/// labels and annotations by selector.
pub(crate) fn select(
    file: &str,
    set: &[Resource],
    selector: &Selector,
) -> Result<Vec<usize>, Error> {
    let pattern = |field: &Option<String>| -> Result<Option<Regex>, Error> {
        field
            .as_ref()
            .filter(|p| !p.is_empty())
            .map(|p| {
                Regex::new(&format!("^(?:{p})$"))
                    .map_err(|e| Error::new(file, format!("patch target {p:?}: {e}")))
            })
            .transpose()
    };
    let name = pattern(&selector.name)?;
    let namespace = pattern(&selector.namespace)?;
    let labels = parse_selector(file, selector.label_selector.as_deref())?;
    let annotations = parse_selector(file, selector.annotation_selector.as_deref())?;
    let wanted = |want: &Option<String>, have: &str| {
        want.as_deref().is_none_or(|w| w.is_empty() || w == have)
    };
    let mut chosen = Vec::new();
    for (index, resource) in set.iter().enumerate() {
        let current = resource.id();
        let original = resource
            .previous
            .first()
            .cloned()
            .unwrap_or_else(|| current.clone());
        let name_fits = |id: &Id| name.as_ref().is_none_or(|re| re.is_match(&id.name));
        let namespace_fits = |id: &Id| {
            namespace
                .as_ref()
                .is_none_or(|re| re.is_match(&id.namespace))
        };
        if wanted(&selector.group, &current.group)
            && wanted(&selector.version, &current.version)
            && wanted(&selector.kind, &current.kind)
            && (name_fits(&original) || name_fits(&current))
            && (namespace_fits(&original) || namespace_fits(&current))
            && labels
                .iter()
                .all(|r| r.matches(resource.object["metadata"].get("labels")))
            && annotations
                .iter()
                .all(|r| r.matches(resource.object["metadata"].get("annotations")))
        {
            chosen.push(index);
        }
    }
    Ok(chosen)
}

/// One requirement of a label selector (`a=b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`).
struct Requirement {
    key: String,
    values: Vec<String>,
    operator: Operator,
}

enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

impl Requirement {
    fn matches(&self, map: Option<&Value>) -> bool {
        let value = map.and_then(|m| m.get(&self.key)).and_then(Value::as_str);
        match self.operator {
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::In => value.is_some_and(|v| self.values.iter().any(|w| w == v)),
            Operator::NotIn => value.is_none_or(|v| self.values.iter().all(|w| w != v)),
        }
    }
}

fn parse_selector(file: &str, text: Option<&str>) -> Result<Vec<Requirement>, Error> {
    let Some(text) = text.filter(|t| !t.trim().is_empty()) else {
        return Ok(Vec::new());
    };
    // Split at commas outside parentheses.
    let (mut parts, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    let fail = || {
        Error::new(
            file,
            format!("patch target selector {text:?} is not a label selector"),
        )
    };
    let list = |s: &str| -> Result<Vec<String>, Error> {
        let inner = s
            .trim()
            .strip_prefix('(')
            .and_then(|s| s.strip_suffix(')'))
            .ok_or_else(fail)?;
        Ok(inner.split(',').map(|v| v.trim().to_string()).collect())
    };
    let mut requirements = Vec::new();
    for part in parts.into_iter().map(str::trim) {
        let requirement = if let Some((key, value)) = part.split_once("!=") {
            Requirement {
                key: key.trim().into(),
                values: vec![value.trim().into()],
                operator: Operator::NotIn,
            }
        } else if let Some((key, value)) = part.split_once("==").or_else(|| part.split_once('=')) {
            Requirement {
                key: key.trim().into(),
                values: vec![value.trim().into()],
                operator: Operator::In,
            }
        } else if let Some((key, rest)) = part.split_once(" notin ") {
            Requirement {
                key: key.trim().into(),
                values: list(rest)?,
                operator: Operator::NotIn,
            }
        } else if let Some((key, rest)) = part.split_once(" in ") {
            Requirement {
                key: key.trim().into(),
                values: list(rest)?,
                operator: Operator::In,
            }
        } else if let Some(key) = part.strip_prefix('!') {
            Requirement {
                key: key.trim().into(),
                values: Vec::new(),
                operator: Operator::DoesNotExist,
            }
        } else if !part.is_empty() && !part.contains(char::is_whitespace) {
            Requirement {
                key: part.into(),
                values: Vec::new(),
                operator: Operator::Exists,
            }
        } else {
            return Err(fail());
        };
        requirements.push(requirement);
    }
    Ok(requirements)
}

/// The body of a patch: a JSON 6902 patch (a list of operations) or strategic merge
/// patches (one per document).
pub(crate) enum Body {
    Json6902(json_patch::Patch),
    Strategic(Vec<Value>),
}

pub(crate) fn parse_body(file: &str, text: &str) -> Result<Body, Error> {
    let mut documents = Vec::new();
    for document in lariat_yaml::documents(text) {
        match document.map_err(|e| Error::new(file, format!("patch is not YAML: {e}")))? {
            Value::Null => {}
            value => documents.push(value),
        }
    }
    if let [Value::Array(_)] = documents.as_slice() {
        let operations = documents.pop().unwrap_or_default();
        let patch = serde_json::from_value(operations)
            .map_err(|e| Error::new(file, format!("not a JSON 6902 patch: {e}")))?;
        return Ok(Body::Json6902(patch));
    }
    if documents.iter().any(|d| !d.is_object()) {
        return Err(Error::new(
            file,
            "a patch is a strategic merge patch (a mapping) or a JSON 6902 patch (a list of operations)",
        ));
    }
    Ok(Body::Strategic(documents))
}

/// Applies a JSON 6902 patch to `resource`.
pub(crate) fn apply_json6902(
    file: &str,
    resource: &mut Resource,
    patch: &json_patch::Patch,
) -> Result<(), Error> {
    let before = resource.id();
    let mut object = resource.object.clone();
    json_patch::patch(&mut object, patch)
        .map_err(|e| Error::new(file, format!("JSON patch on {before}: {e}")))?;
    if !object.is_object() {
        return Err(Error::new(
            file,
            format!("JSON patch on {before} leaves no object"),
        ));
    }
    resource.object = object;
    remember(resource, before);
    Ok(())
}

/// Applies a strategic merge patch to `resource`; whether the patch deletes it
/// (`$patch: delete`).
pub(crate) fn apply_strategic(
    resource: &mut Resource,
    patch: &Value,
    options: PatchOptions,
) -> bool {
    if patch.get("$patch").and_then(Value::as_str) == Some("delete") {
        return true;
    }
    let before = resource.id();
    let mut patch = patch.clone();
    if let Value::Object(map) = &mut patch {
        if !options.allow_kind_change {
            map.remove("apiVersion");
            map.remove("kind");
        }
        if let Some(Value::Object(metadata)) = map.get_mut("metadata") {
            if !options.allow_name_change {
                metadata.remove("name");
            }
            metadata.remove("namespace");
        }
    }
    if let (Value::Object(target), Value::Object(patch)) = (&mut resource.object, &patch) {
        merge_map(target, patch);
    }
    remember(resource, before);
    false
}

/// Keeps the id `resource` had before a patch renamed it.
fn remember(resource: &mut Resource, before: Id) {
    let after = resource.id();
    if after.name != before.name || after.kind != before.kind || after.namespace != before.namespace
    {
        resource.previous.push(before);
    }
}

fn merge_map(target: &mut Map<String, Value>, patch: &Map<String, Value>) {
    if patch.get("$patch").and_then(Value::as_str) == Some("replace") {
        *target = cleaned(patch);
        return;
    }
    for (key, value) in patch {
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(list)), Value::Array(gone)) = (target.get_mut(field), value) {
                list.retain(|v| !gone.contains(v));
            }
            continue;
        }
        if key.starts_with('$') {
            continue;
        }
        match value {
            Value::Null => {
                target.remove(key);
            }
            Value::Object(inner)
                if inner.get("$patch").and_then(Value::as_str) == Some("delete") =>
            {
                target.remove(key);
            }
            Value::Object(inner) => match target.get_mut(key) {
                Some(Value::Object(existing)) => merge_map(existing, inner),
                _ => {
                    target.insert(key.clone(), Value::Object(cleaned(inner)));
                }
            },
            Value::Array(items) => match target.get_mut(key) {
                Some(Value::Array(existing)) => merge_list(existing, items, key),
                _ => {
                    target.insert(key.clone(), Value::Array(cleaned_list(items)));
                }
            },
            scalar => {
                target.insert(key.clone(), scalar.clone());
            }
        }
    }
}

fn merge_list(target: &mut Vec<Value>, patch: &[Value], field: &str) {
    let directive = |v: &Value| v.get("$patch").and_then(Value::as_str).map(str::to_string);
    if patch
        .iter()
        .any(|v| directive(v).as_deref() == Some("replace"))
    {
        *target = cleaned_list(
            &patch
                .iter()
                .filter(|v| directive(v).as_deref() != Some("replace"))
                .cloned()
                .collect::<Vec<_>>(),
        );
        return;
    }
    let Some(key) = merge_key(field, target, patch) else {
        *target = cleaned_list(patch);
        return;
    };
    // As kustomize merges: the patch's elements first, in its order (each merged into the
    // element it matches, or new), then the elements it did not name.
    let mut merged = Vec::with_capacity(target.len() + patch.len());
    let mut rest: Vec<Option<Value>> = std::mem::take(target).into_iter().map(Some).collect();
    for item in patch {
        let Value::Object(fields) = item else {
            continue;
        };
        let position = rest
            .iter()
            .position(|t| t.as_ref().is_some_and(|t| t.get(key) == fields.get(key)));
        let existing = position.and_then(|at| rest[at].take());
        match (directive(item).as_deref(), existing) {
            (Some("delete"), _) => {}
            (_, Some(Value::Object(mut existing))) => {
                merge_map(&mut existing, fields);
                merged.push(Value::Object(existing));
            }
            _ => merged.push(Value::Object(cleaned(fields))),
        }
    }
    merged.extend(rest.into_iter().flatten());
    *target = merged;
}

/// The key a list of objects is merged by, if its elements all have one.
fn merge_key(field: &str, target: &[Value], patch: &[Value]) -> Option<&'static str> {
    let all_have = |key: &str| {
        !patch.is_empty()
            && patch
                .iter()
                .chain(target)
                .all(|v| v.get(key).is_some_and(|k| !k.is_null()))
    };
    // Kubernetes merges a container's ports by number, a Service's by port.
    if field == "ports" {
        return ["containerPort", "port"].into_iter().find(|k| all_have(k));
    }
    ASSOCIATIVE_KEYS.into_iter().find(|k| all_have(k))
}

/// A patch's map as a value to insert: directives and nulls left out.
fn cleaned(map: &Map<String, Value>) -> Map<String, Value> {
    map.iter()
        .filter(|(k, v)| !k.starts_with('$') && !v.is_null())
        .map(|(k, v)| {
            let v = match v {
                Value::Object(inner) => Value::Object(cleaned(inner)),
                Value::Array(items) => Value::Array(cleaned_list(items)),
                other => other.clone(),
            };
            (k.clone(), v)
        })
        .collect()
}

fn cleaned_list(items: &[Value]) -> Vec<Value> {
    items
        .iter()
        .map(|v| match v {
            Value::Object(inner) => Value::Object(cleaned(inner)),
            other => other.clone(),
        })
        .collect()
}
