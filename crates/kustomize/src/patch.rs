//! Patches: strategic merge patches (as kustomize merges them without a schema: maps by
//! key, lists of objects by the key their elements share, `$patch: delete` and `replace`),
//! JSON 6902 patches, and the selectors that say which objects a patch is for.

use regex::{Regex, RegexBuilder};
use serde_json::{Map, Value};

use crate::Error;
use crate::build::Loader;
use crate::kustomization::{PatchOptions, Selector};
use crate::resource::{Id, Resource};

/// Which objects of `set` a patch's `target` selects: group, version and kind as they are
/// now; name and namespace (regular expressions, whole) as they were read or are now;
/// labels and annotations by selector.
pub(crate) fn select(
    file: &str,
    set: &[Resource],
    selector: &Selector,
) -> Result<Vec<usize>, Error> {
    // As kustomize reads a target: each field a regular expression of the whole value.
    let pattern = |field: &Option<String>| -> Result<Option<Regex>, Error> {
        field
            .as_ref()
            .filter(|p| !p.is_empty())
            .map(|p| {
                RegexBuilder::new(&format!("^(?:{p})$"))
                    .size_limit(1 << 20)
                    .build()
                    .map_err(|e| Error::new(file, format!("patch target {p:?}: {e}")))
            })
            .transpose()
    };
    let group = pattern(&selector.group)?;
    let version = pattern(&selector.version)?;
    let kind = pattern(&selector.kind)?;
    let name = pattern(&selector.name)?;
    let namespace = pattern(&selector.namespace)?;
    let labels = parse_selector(file, selector.label_selector.as_deref())?;
    let annotations = parse_selector(file, selector.annotation_selector.as_deref())?;
    let fits = |re: &Option<Regex>, value: &str| re.as_ref().is_none_or(|re| re.is_match(value));
    let mut chosen = Vec::new();
    for (index, resource) in set.iter().enumerate() {
        let current = resource.id();
        let original = resource
            .previous
            .first()
            .cloned()
            .unwrap_or_else(|| current.clone());
        if fits(&group, &current.group)
            && fits(&version, &current.version)
            && fits(&kind, &current.kind)
            && (fits(&name, &original.name) || fits(&name, &current.name))
            && (fits(&namespace, original.effective_namespace())
                || fits(&namespace, current.effective_namespace()))
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

/// Applies a JSON 6902 patch to `resource`, one operation at a time, each one's result
/// weighed against the build's budget (a `copy` can double an object) and its nesting
/// bounded, so no patch can make an object the build cannot afford or walk.
pub(crate) fn apply_json6902(
    loader: &mut Loader,
    file: &str,
    resource: &mut Resource,
    patch: &json_patch::Patch,
) -> Result<(), Error> {
    let before = resource.id();
    let mut object = resource.object.clone();
    for operation in &patch.0 {
        json_patch::patch(&mut object, std::slice::from_ref(operation))
            .map_err(|e| Error::new(file, format!("JSON patch on {before}: {e}")))?;
        let (bytes, depth) = weight(&object);
        if depth > MAX_NESTING {
            return Err(Error::new(
                file,
                format!("JSON patch on {before} nests its fields more than {MAX_NESTING} deep"),
            ));
        }
        loader.charge(file, bytes)?;
    }
    resource.object = object;
    check_shape(&resource.object)
        .map_err(|e| Error::new(file, format!("JSON patch on {before} {e}")))?;
    remember(resource, before);
    Ok(())
}

/// How deep an object's fields may nest once patched: 128, as deep as YAML is read.
const MAX_NESTING: usize = 128;

/// What a value weighs, about (64 bytes a node, and its strings), and how deep it nests;
/// walked without recursion, whatever its depth.
fn weight(value: &Value) -> (usize, usize) {
    let (mut bytes, mut deepest) = (0usize, 0usize);
    let mut pending = vec![(value, 1usize)];
    while let Some((value, depth)) = pending.pop() {
        deepest = deepest.max(depth);
        bytes = bytes.saturating_add(64);
        match value {
            Value::String(s) => bytes = bytes.saturating_add(s.len()),
            Value::Array(items) => pending.extend(items.iter().map(|v| (v, depth + 1))),
            Value::Object(map) => {
                for (key, v) in map {
                    bytes = bytes.saturating_add(key.len());
                    pending.push((v, depth + 1));
                }
            }
            _ => {}
        }
    }
    (bytes, deepest)
}

/// What every object of a build must still be after a patch: a mapping with a kind and
/// a metadata mapping naming it.
fn check_shape(object: &Value) -> Result<(), String> {
    if !object.is_object() {
        return Err("leaves no object".into());
    }
    if object["kind"].as_str().is_none_or(str::is_empty) {
        return Err("leaves it without a kind".into());
    }
    if object["metadata"]["name"]
        .as_str()
        .is_none_or(str::is_empty)
    {
        return Err("leaves it without metadata.name".into());
    }
    Ok(())
}

/// Applies a strategic merge patch to `resource`; whether the patch deletes it
/// (`$patch: delete`).
pub(crate) fn apply_strategic(
    resource: &mut Resource,
    patch: &Value,
    options: PatchOptions,
) -> Result<bool, String> {
    if patch.get("$patch").and_then(Value::as_str) == Some("delete") {
        return Ok(true);
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
    let schema = Schema {
        builtin: is_builtin_group(&before.group),
        service: before.kind == "Service" && before.group.is_empty(),
    };
    let original = resource.object.clone();
    if let (Value::Object(target), Value::Object(patch)) = (&mut resource.object, &patch) {
        merge_map(target, patch, schema);
    }
    if let Err(problem) = check_shape(&resource.object) {
        resource.object = original;
        return Err(format!("the patch of {before} {problem}"));
    }
    remember(resource, before);
    Ok(false)
}

/// What kustomize knows of a kind's lists: for Kubernetes' own kinds, the key each list of
/// objects is merged by (its `patchMergeKey`); for any other, nothing: lists are replaced.
#[derive(Clone, Copy)]
struct Schema {
    builtin: bool,
    /// A Service, whose `ports` are merged by `port`, not by `containerPort`.
    service: bool,
}

/// The API groups of Kubernetes' own kinds, whose schemas kustomize has.
fn is_builtin_group(group: &str) -> bool {
    matches!(
        group,
        "" | "apps"
            | "batch"
            | "autoscaling"
            | "policy"
            | "networking.k8s.io"
            | "rbac.authorization.k8s.io"
            | "storage.k8s.io"
            | "scheduling.k8s.io"
            | "admissionregistration.k8s.io"
            | "apiextensions.k8s.io"
            | "apiregistration.k8s.io"
            | "certificates.k8s.io"
            | "coordination.k8s.io"
            | "discovery.k8s.io"
            | "events.k8s.io"
            | "node.k8s.io"
            | "extensions"
    )
}

/// Keeps the id `resource` had before a patch renamed it.
fn remember(resource: &mut Resource, before: Id) {
    let after = resource.id();
    if after.name != before.name || after.kind != before.kind || after.namespace != before.namespace
    {
        resource.previous.push(before);
    }
}

fn merge_map(target: &mut Map<String, Value>, patch: &Map<String, Value>, schema: Schema) {
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
                Some(Value::Object(existing)) => merge_map(existing, inner, schema),
                _ => {
                    target.insert(key.clone(), Value::Object(cleaned(inner)));
                }
            },
            Value::Array(items) => match target.get_mut(key) {
                Some(Value::Array(existing)) => merge_list(existing, items, key, schema),
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

fn merge_list(target: &mut Vec<Value>, patch: &[Value], field: &str, schema: Schema) {
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
    if schema.builtin && field == "finalizers" {
        // A set of strings, merged.
        for item in patch {
            if !target.contains(item) {
                target.push(item.clone());
            }
        }
        return;
    }
    let Some(key) = merge_key(field, schema) else {
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
                merge_map(&mut existing, fields, schema);
                merged.push(Value::Object(existing));
            }
            _ => merged.push(Value::Object(cleaned(fields))),
        }
    }
    merged.extend(rest.into_iter().flatten());
    *target = merged;
}

/// The key a list of Kubernetes' own objects is merged by (its `patchMergeKey`); none for
/// a list another kind holds, or one Kubernetes replaces whole.
fn merge_key(field: &str, schema: Schema) -> Option<&'static str> {
    if !schema.builtin {
        return None;
    }
    Some(match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "resourceClaims"
        | "readinessGates" => "name",
        "volumeMounts" => "mountPath",
        "volumeDevices" => "devicePath",
        "hostAliases" => "ip",
        "conditions" => "type",
        "topologySpreadConstraints" => "topologyKey",
        "ownerReferences" => "uid",
        "ports" if schema.service => "port",
        "ports" => "containerPort",
        _ => return None,
    })
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
