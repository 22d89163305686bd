//! Field ownership (`metadata.managedFields`) and server-side apply.
//!
//! Every write records which manager set which fields, in Kubernetes' `FieldsV1` format.
//! Apply merges a manager's intent into the object, removes fields the manager stopped
//! applying (unless another manager owns them too), and refuses, with a 409 naming each field,
//! to change a value another manager owns unless `force` is set. Lists are atomic: a list is
//! one field, owned and replaced whole.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use crate::objects::now_rfc3339;
use crate::status::{ApiError, ApiResult, Cause};

/// A path to one owned field: object keys from the root. Lists and scalars end a path.
pub type FieldPath = Vec<String>;
pub type FieldSet = BTreeSet<FieldPath>;

/// Metadata fields the server owns; they are never tracked.
const SERVER_METADATA: [&str; 9] = [
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
];

/// The leaf fields of `object` that a manager can own. `status` belongs to the status
/// subresource and is tracked only there.
pub fn leaves(object: &Value, subresource: Option<&str>) -> FieldSet {
    let mut set = FieldSet::new();
    for (path, value) in tracked_roots(object, subresource) {
        collect(value, path, &mut set);
    }
    set
}

/// Where the fields a manager can own start in `object`, with their values: each top-level
/// field the write's subresource tracks, and each metadata field the server does not own.
fn tracked_roots<'a>(
    object: &'a Value,
    subresource: Option<&str>,
) -> BTreeMap<FieldPath, &'a Value> {
    let mut roots = BTreeMap::new();
    let Some(fields) = object.as_object() else {
        return roots;
    };
    for (key, value) in fields {
        let tracked = match key.as_str() {
            "apiVersion" | "kind" => false,
            "status" => subresource == Some("status"),
            _ => subresource != Some("status"),
        };
        if !tracked {
            continue;
        }
        if key == "metadata" {
            for (mkey, mvalue) in value.as_object().into_iter().flatten() {
                if !SERVER_METADATA.contains(&mkey.as_str()) {
                    roots.insert(vec![key.clone(), mkey.clone()], mvalue);
                }
            }
        } else {
            roots.insert(vec![key.clone()], value);
        }
    }
    roots
}

fn collect(value: &Value, path: FieldPath, set: &mut FieldSet) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (key, child) in map {
                let mut next = path.clone();
                next.push(key.clone());
                collect(child, next, set);
            }
        }
        _ => {
            set.insert(path);
        }
    }
}

pub fn lookup<'a>(object: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter()
        .try_fold(object, |node, key| node.as_object()?.get(key))
}

fn remove_path(object: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut node = object;
    for key in parents {
        match node.as_object_mut().and_then(|m| m.get_mut(key)) {
            Some(child) => node = child,
            None => return,
        }
    }
    if let Some(map) = node.as_object_mut() {
        map.remove(last);
    }
}

/// `.spec.replicas`, as conflicts are reported.
pub fn render(path: &[String]) -> String {
    path.iter().map(|k| format!(".{k}")).collect()
}

/// `FieldsV1`: `{"f:spec": {"f:replicas": {}}}`.
pub fn encode(set: &FieldSet) -> Value {
    let mut root = Map::new();
    for path in set {
        let mut node = &mut root;
        for key in path {
            node = node
                .entry(format!("f:{key}"))
                .or_insert_with(|| Value::Object(Map::new()))
                .as_object_mut()
                .expect("fieldsV1 nodes are objects");
        }
    }
    Value::Object(root)
}

pub fn decode(fields: &Value) -> FieldSet {
    fn walk(node: &Value, path: FieldPath, set: &mut FieldSet) {
        let children: Vec<(&String, &Value)> = node
            .as_object()
            .map(|m| m.iter().filter(|(k, _)| k.starts_with("f:")).collect())
            .unwrap_or_default();
        if children.is_empty() {
            if !path.is_empty() {
                set.insert(path);
            }
            return;
        }
        for (key, child) in children {
            let mut next = path.clone();
            next.push(key[2..].to_string());
            walk(child, next, set);
        }
    }
    let mut set = FieldSet::new();
    walk(fields, vec![], &mut set);
    set
}

/// One `managedFields` entry, decoded.
#[derive(Clone, Debug, PartialEq)]
struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    subresource: Option<String>,
    time: String,
    fields: FieldSet,
}

impl Entry {
    /// Whether this is `writer`'s entry for `operation` (one per manager, operation and
    /// subresource); [`is_entry_of`] asks the same of a stored entry.
    fn is_of(&self, writer: &Writer, operation: &str) -> bool {
        self.manager == writer.manager
            && self.operation == operation
            && self.subresource == writer.subresource
    }
}

fn entries(object: &Value) -> Vec<Entry> {
    object["metadata"]["managedFields"]
        .as_array()
        .map(|list| list.iter().map(entry).collect())
        .unwrap_or_default()
}

fn entry(raw: &Value) -> Entry {
    Entry {
        manager: raw["manager"].as_str().unwrap_or_default().to_string(),
        operation: raw["operation"].as_str().unwrap_or("Update").to_string(),
        api_version: raw["apiVersion"].as_str().unwrap_or_default().to_string(),
        subresource: raw["subresource"].as_str().map(String::from),
        time: raw["time"].as_str().unwrap_or_default().to_string(),
        fields: decode(&raw["fieldsV1"]),
    }
}

/// The stored form of an entry; none for an entry that owns nothing.
fn stored_form(entry: Entry) -> Option<Value> {
    if entry.fields.is_empty() {
        return None;
    }
    let mut v = json!({
        "manager": entry.manager,
        "operation": entry.operation,
        "apiVersion": entry.api_version,
        "time": entry.time,
        "fieldsType": "FieldsV1",
        "fieldsV1": encode(&entry.fields),
    });
    if let Some(sub) = entry.subresource {
        v["subresource"] = json!(sub);
    }
    Some(v)
}

fn store_entries(object: &mut Value, list: Vec<Entry>) {
    set_entries(object, list.into_iter().filter_map(stored_form).collect());
}

/// Sets the object's `managedFields` to `rendered`, or removes them when there are none.
fn set_entries(object: &mut Value, rendered: Vec<Value>) {
    let meta = crate::objects::meta_mut(object);
    if rendered.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert("managedFields".into(), Value::Array(rendered));
    }
}

/// Who is writing, and through which subresource.
#[derive(Clone, Debug)]
pub struct Writer {
    pub manager: String,
    /// The full apiVersion the write used, such as `apps/v1`.
    pub api_version: String,
    pub subresource: Option<String>,
}

/// Records an ordinary write (create, update, patch): the fields whose value changed move to
/// `writer`'s `Update` entry.
pub fn record_update(old: Option<&Value>, new: &mut Value, writer: &Writer) {
    let subresource = writer.subresource.as_deref();
    let Some(old) = old else {
        let mut list = vec![];
        let created = leaves(new, subresource);
        if !created.is_empty() {
            upsert(&mut list, writer, "Update", created, false);
        }
        store_entries(new, list);
        return;
    };
    let (changed, removed) = changes(old, new, subresource);
    let stored = old["metadata"]["managedFields"].as_array();
    if changed.is_empty() && removed.is_empty() && stored.is_none_or(|s| s.iter().all(is_canonical))
    {
        // Nobody's fields moved: the entries stay as stored, whatever the request carried
        // (most writes, a controller's status write among them, are here).
        let meta = crate::objects::meta_mut(new);
        match stored.filter(|entries| !entries.is_empty()) {
            None => {
                meta.remove("managedFields");
            }
            Some(entries) => {
                if meta.get("managedFields").and_then(Value::as_array) != Some(entries) {
                    meta.insert("managedFields".into(), Value::Array(entries.clone()));
                }
            }
        }
        return;
    }
    // Only the entries the write touches are decoded and rendered again: the writer's own,
    // and those that owned a field it changed or removed. The others (a controller's status
    // write leaves its creator's alone) stay as stored.
    let writers_entry = stored
        .into_iter()
        .flatten()
        .find(|raw| is_entry_of(raw, writer, "Update"));
    let mut rendered = Vec::new();
    // The writer's entry, decoded, and where it goes among the others.
    let mut own: Option<(usize, Entry)> = None;
    for raw in stored.into_iter().flatten() {
        let is_own = writers_entry.is_some_and(|entry| std::ptr::eq(entry, raw));
        if !is_own
            && is_canonical(raw)
            && !changed
                .iter()
                .chain(&removed)
                .any(|path| owns(&raw["fieldsV1"], path))
        {
            rendered.push(raw.clone());
            continue;
        }
        let mut entry = entry(raw);
        entry
            .fields
            .retain(|p| !changed.contains(p) && !removed.contains(p));
        if is_own {
            own = Some((rendered.len(), entry));
            rendered.push(Value::Null);
        } else {
            rendered.extend(stored_form(entry));
        }
    }
    let (at, mut list) = match own {
        Some((at, entry)) => (at, vec![entry]),
        None => (rendered.len(), vec![]),
    };
    if !changed.is_empty() {
        upsert(&mut list, writer, "Update", changed, false);
    }
    match list.pop().and_then(stored_form) {
        Some(entry) if at < rendered.len() => rendered[at] = entry,
        Some(entry) => rendered.push(entry),
        None if at < rendered.len() => {
            rendered.remove(at);
        }
        None => {}
    }
    set_entries(new, rendered);
}

/// Whether a stored entry is as [`stored_form`] writes one, so that keeping it is rendering it
/// again: a client that wrote managedFields itself (with no field manager, nothing is
/// recorded) may have stored anything, which the next recorded write puts in shape.
fn is_canonical(raw: &Value) -> bool {
    fn fields_only(node: &Value) -> bool {
        node.as_object().is_some_and(|m| {
            m.iter()
                .all(|(key, child)| key.starts_with("f:") && fields_only(child))
        })
    }
    let Some(entry) = raw.as_object() else {
        return false;
    };
    let text = |key: &str| entry.get(key).is_some_and(Value::is_string);
    let known = [
        "manager",
        "operation",
        "apiVersion",
        "time",
        "fieldsType",
        "fieldsV1",
    ];
    text("manager")
        && text("operation")
        && text("apiVersion")
        && text("time")
        && entry["fieldsType"] == "FieldsV1"
        && entry["fieldsV1"].as_object().is_some_and(|m| !m.is_empty())
        && fields_only(&entry["fieldsV1"])
        && entry.iter().all(|(key, value)| {
            known.contains(&key.as_str()) || (key == "subresource" && value.is_string())
        })
}

/// Whether a stored entry is `writer`'s for `operation`, as [`Entry::is_of`] decides for a
/// decoded one.
fn is_entry_of(raw: &Value, writer: &Writer, operation: &str) -> bool {
    raw["manager"].as_str().unwrap_or_default() == writer.manager
        && raw["operation"].as_str().unwrap_or("Update") == operation
        && raw["subresource"].as_str() == writer.subresource.as_deref()
}

/// Whether `FieldsV1` owns `path`: it has the path's node, and that node is a leaf (as
/// [`decode`] reads them).
fn owns(fields: &Value, path: &[String]) -> bool {
    let node = path.iter().try_fold(fields, |node, key| {
        node.as_object()?
            .iter()
            .find(|(k, _)| k.strip_prefix("f:") == Some(key.as_str()))
            .map(|(_, child)| child)
    });
    node.is_some_and(|node| {
        !node
            .as_object()
            .is_some_and(|m| m.keys().any(|k| k.starts_with("f:")))
    })
}

/// What a write changed of the fields `leaves` tracks, found in one walk of both objects: the
/// leaves of `new` whose value differs from `old`'s (new ones included), and the leaves of
/// `old` that `new` no longer has.
fn changes(old: &Value, new: &Value, subresource: Option<&str>) -> (FieldSet, FieldSet) {
    let (before, after) = (
        tracked_roots(old, subresource),
        tracked_roots(new, subresource),
    );
    let mut found = Changes::default();
    for (path, value) in &after {
        found.walk(before.get(path).copied(), value, &mut path.clone());
    }
    for (path, value) in before
        .into_iter()
        .filter(|(path, _)| !after.contains_key(path))
    {
        collect(value, path, &mut found.removed);
    }
    (found.changed, found.removed)
}

#[derive(Default)]
struct Changes {
    changed: FieldSet,
    removed: FieldSet,
}

impl Changes {
    /// Compares `new` at `path` with what `old` had there.
    fn walk(&mut self, old: Option<&Value>, new: &Value, path: &mut FieldPath) {
        let old_fields = old.and_then(Value::as_object).filter(|m| !m.is_empty());
        match new {
            Value::Object(fields) if !fields.is_empty() => {
                for (key, child) in fields {
                    path.push(key.clone());
                    self.walk(old_fields.and_then(|m| m.get(key)), child, path);
                    path.pop();
                }
                match old_fields {
                    Some(before) => {
                        for (key, child) in before
                            .iter()
                            .filter(|(k, _)| !fields.contains_key(k.as_str()))
                        {
                            let mut gone = path.clone();
                            gone.push(key.clone());
                            collect(child, gone, &mut self.removed);
                        }
                    }
                    // The old value here was a leaf; the new one's leaves are deeper.
                    None if old.is_some() => {
                        self.removed.insert(path.clone());
                    }
                    None => {}
                }
            }
            leaf => {
                if old != Some(leaf) {
                    self.changed.insert(path.clone());
                }
                // An object before: its leaves are gone, this one replaces them.
                if let Some(before) = old_fields {
                    for (key, child) in before {
                        let mut gone = path.clone();
                        gone.push(key.clone());
                        collect(child, gone, &mut self.removed);
                    }
                }
            }
        }
    }
}

fn upsert(
    list: &mut Vec<Entry>,
    writer: &Writer,
    operation: &str,
    fields: FieldSet,
    replace: bool,
) {
    let time = now_rfc3339();
    match list.iter_mut().find(|e| e.is_of(writer, operation)) {
        Some(entry) => {
            if replace {
                entry.fields = fields;
            } else {
                entry.fields.extend(fields);
            }
            entry.time = time;
            entry.api_version = writer.api_version.clone();
        }
        None => list.push(Entry {
            manager: writer.manager.clone(),
            operation: operation.to_string(),
            api_version: writer.api_version.clone(),
            subresource: writer.subresource.clone(),
            time,
            fields,
        }),
    }
}

/// Server-side apply of `applied` (the manager's whole intent) onto `current`.
/// Returns the object to write, with its managed fields updated.
pub fn apply(
    current: Option<&Value>,
    applied: &Value,
    writer: &Writer,
    force: bool,
) -> ApiResult<Value> {
    let wanted = leaves(applied, writer.subresource.as_deref());
    let mut list = current.map(entries).unwrap_or_default();
    let is_mine = |e: &Entry| e.is_of(writer, "Apply");

    // A field conflicts when another manager owns it and this apply would change its value.
    let mut conflicts: BTreeMap<String, Vec<FieldPath>> = BTreeMap::new();
    if let Some(current) = current {
        for entry in list.iter().filter(|e| !is_mine(e)) {
            for path in entry.fields.intersection(&wanted) {
                if lookup(current, path) != lookup(applied, path) {
                    conflicts
                        .entry(entry.manager.clone())
                        .or_default()
                        .push(path.clone());
                }
            }
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(conflict_error(&conflicts));
    }

    let mut merged = current.cloned().unwrap_or_else(|| json!({}));
    let previously: FieldSet = list
        .iter()
        .filter(|e| is_mine(e))
        .flat_map(|e| e.fields.clone())
        .collect();
    for path in previously.difference(&wanted) {
        let shared = list.iter().any(|e| !is_mine(e) && e.fields.contains(path));
        if !shared {
            remove_path(&mut merged, path);
        }
    }
    merge_into(&mut merged, applied);

    // Fields whose value this apply changed leave their other owners; equal values are shared.
    for entry in list.iter_mut().filter(|e| !is_mine(e)) {
        entry.fields.retain(|p| {
            !wanted.contains(p) || current.and_then(|c| lookup(c, p)) == lookup(applied, p)
        });
    }
    upsert(&mut list, writer, "Apply", wanted, true);
    store_entries(&mut merged, list);
    Ok(merged)
}

/// Objects merge key by key; everything else (lists included) is replaced.
fn merge_into(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (key, value) in p {
                match t.get_mut(key) {
                    Some(existing) if existing.is_object() && value.is_object() => {
                        merge_into(existing, value)
                    }
                    _ => {
                        t.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        (target, patch) => *target = patch.clone(),
    }
}

fn conflict_error(conflicts: &BTreeMap<String, Vec<FieldPath>>) -> ApiError {
    let total: usize = conflicts.values().map(Vec::len).sum();
    let mut causes = vec![];
    let mut parts = vec![];
    for (manager, paths) in conflicts {
        for path in paths {
            causes.push(Cause {
                reason: "FieldManagerConflict",
                message: format!("conflict with \"{manager}\""),
                field: render(path),
            });
        }
        if total == 1 {
            parts.push(format!(
                "conflict with \"{manager}\": {}",
                render(&paths[0])
            ));
        } else {
            let lines: Vec<String> = paths.iter().map(|p| format!("- {}", render(p))).collect();
            parts.push(format!(
                "conflicts with \"{manager}\":\n{}",
                lines.join("\n")
            ));
        }
    }
    let plural = if total == 1 { "conflict" } else { "conflicts" };
    ApiError::Conflict {
        message: format!("Apply failed with {total} {plural}: {}", parts.join("\n")),
        target: None,
        causes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer(manager: &str) -> Writer {
        Writer {
            manager: manager.into(),
            api_version: "v1".into(),
            subresource: None,
        }
    }

    fn owners(object: &Value, path: &[&str]) -> Vec<String> {
        let path: FieldPath = path.iter().map(|s| s.to_string()).collect();
        entries(object)
            .into_iter()
            .filter(|e| e.fields.contains(&path))
            .map(|e| e.manager)
            .collect()
    }

    /// A random JSON tree over a few keys, so that two trees share paths often: objects
    /// (some empty), lists, scalars and nulls, as far as `depth`.
    fn random_tree(rng: &mut impl rand::Rng, depth: u32) -> Value {
        let choice = if depth == 0 {
            rng.random_range(2..6)
        } else {
            rng.random_range(0..6)
        };
        match choice {
            0 | 1 => Value::Object(
                (0..rng.random_range(0..4))
                    .map(|_| {
                        let key =
                            ["a", "b", "c", "status", "metadata", "kind"][rng.random_range(0..6)];
                        (key.to_string(), random_tree(rng, depth - 1))
                    })
                    .collect(),
            ),
            2 => json!([rng.random_range(0..3)]),
            3 => json!(rng.random_range(0..3)),
            4 => Value::Null,
            _ => json!({}),
        }
    }

    /// The one-walk diff says what comparing every leaf of both objects says (how it was
    /// computed before: each leaf's path built and looked up in both).
    #[test]
    fn changes_are_what_comparing_every_leaf_finds() {
        use rand::Rng;
        let mut rng = rand::rng();
        for _ in 0..20_000 {
            let old = random_tree(&mut rng, 4);
            let new = if rng.random_range(0..10) < 3 {
                old.clone()
            } else {
                random_tree(&mut rng, 4)
            };
            let mut metadata_new = new.clone();
            if rng.random_range(0..2) == 0 && metadata_new.is_object() {
                metadata_new["metadata"] = json!({"labels": random_tree(&mut rng, 2), "name": "x"});
            }
            for subresource in [None, Some("status")] {
                let before = leaves(&old, subresource);
                let after = leaves(&metadata_new, subresource);
                let changed: FieldSet = after
                    .iter()
                    .filter(|p| lookup(&old, p) != lookup(&metadata_new, p))
                    .cloned()
                    .collect();
                let removed: FieldSet = before.difference(&after).cloned().collect();
                assert_eq!(
                    changes(&old, &metadata_new, subresource),
                    (changed, removed),
                    "{old} -> {metadata_new} ({subresource:?})"
                );
            }
        }
    }

    /// What recording a write did before it decoded only the entries it touches: every entry
    /// decoded, the changed and removed fields taken from each, the writer's entry upserted,
    /// every entry rendered again.
    fn record_update_decoding_every_entry(old: &Value, new: &mut Value, writer: &Writer) {
        let subresource = writer.subresource.as_deref();
        let mut list = entries(old);
        let (before, after) = (leaves(old, subresource), leaves(new, subresource));
        let changed: FieldSet = after
            .iter()
            .filter(|p| lookup(old, p) != lookup(new, p))
            .cloned()
            .collect();
        let removed: FieldSet = before.difference(&after).cloned().collect();
        for entry in &mut list {
            entry
                .fields
                .retain(|p| !changed.contains(p) && !removed.contains(p));
        }
        if !changed.is_empty() {
            upsert(&mut list, writer, "Update", changed, false);
        }
        store_entries(new, list);
    }

    #[test]
    fn recorded_writes_are_what_decoding_every_entry_records() {
        use rand::Rng;
        let mut rng = rand::rng();
        let object = |rng: &mut rand::rngs::ThreadRng| {
            json!({"metadata": {"name": "x", "labels": random_tree(rng, 2)},
                "spec": random_tree(rng, 3), "status": random_tree(rng, 3)})
        };
        let writers: Vec<Writer> = ["a", "b", "c"]
            .into_iter()
            .flat_map(|manager| {
                [None, Some("status".to_string())].map(|subresource| Writer {
                    subresource,
                    ..writer(manager)
                })
            })
            .collect();
        let without_times = |object: &Value| {
            let mut entries = object["metadata"]["managedFields"].clone();
            for entry in entries.as_array_mut().into_iter().flatten() {
                entry.as_object_mut().unwrap().remove("time");
            }
            entries
        };
        for _ in 0..3_000 {
            let mut current = object(&mut rng);
            record_update(
                None,
                &mut current,
                &writers[rng.random_range(0..writers.len())],
            );
            for _ in 0..rng.random_range(0..6) {
                let mut next = object(&mut rng);
                let writer = &writers[rng.random_range(0..writers.len())];
                record_update(Some(&current), &mut next, writer);
                current = next;
            }
            // What a client that records no manager may have stored, and may send.
            let written_by_a_client = [
                json!(null),
                json!([]),
                json!("text"),
                json!([{"manager": "x", "fieldsV1": {}}]),
                json!([{"manager": "a", "operation": "Update", "apiVersion": "v1", "time": "t",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {".": {}, "f:a": {}}}}]),
                json!([7, {"manager": "b", "operation": "Update", "apiVersion": "v1", "time": "t",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}, "subresource": "status"}]),
            ];
            if rng.random_range(0..4) == 0 {
                let chosen = rng.random_range(0..written_by_a_client.len());
                current["metadata"]["managedFields"] = written_by_a_client[chosen].clone();
            }
            let mut new = if rng.random_range(0..4) == 0 {
                current.clone()
            } else {
                object(&mut rng)
            };
            if rng.random_range(0..4) == 0 {
                new["metadata"]["managedFields"] = json!(null);
            }
            let mut expected = new.clone();
            let writer = &writers[rng.random_range(0..writers.len())];
            record_update(Some(&current), &mut new, writer);
            record_update_decoding_every_entry(&current, &mut expected, writer);
            assert_eq!(
                without_times(&new),
                without_times(&expected),
                "{current} by {writer:?}"
            );
        }
    }

    #[test]
    fn fields_v1_round_trips() {
        let object = json!({"metadata": {"labels": {"a": "1"}, "name": "x"}, "data": {"k": "v", "l": "w"}, "spec": {"list": [1, 2]}});
        let set = leaves(&object, None);
        assert_eq!(
            encode(&set),
            json!({"f:data": {"f:k": {}, "f:l": {}}, "f:metadata": {"f:labels": {"f:a": {}}}, "f:spec": {"f:list": {}}})
        );
        assert_eq!(decode(&encode(&set)), set);
    }

    #[test]
    fn apply_conflicts_name_the_field_and_force_takes_ownership() {
        let alice = apply(
            None,
            &json!({"data": {"k": "1", "shared": "s"}}),
            &writer("alice"),
            false,
        )
        .unwrap();
        let err = apply(
            Some(&alice),
            &json!({"data": {"k": "2", "shared": "s"}}),
            &writer("bob"),
            false,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Apply failed with 1 conflict: conflict with \"alice\": .data.k"
        );
        assert_eq!(err.code().as_u16(), 409);
        let forced = apply(
            Some(&alice),
            &json!({"data": {"k": "2", "shared": "s"}}),
            &writer("bob"),
            true,
        )
        .unwrap();
        assert_eq!(forced["data"]["k"], "2");
        assert_eq!(owners(&forced, &["data", "k"]), ["bob"]);
        assert_eq!(owners(&forced, &["data", "shared"]), ["alice", "bob"]);
    }

    #[test]
    fn apply_removes_fields_the_manager_stopped_applying_unless_shared() {
        let first = apply(
            None,
            &json!({"data": {"a": "1", "b": "2"}}),
            &writer("alice"),
            false,
        )
        .unwrap();
        let mut edited = first.clone();
        edited["data"]["c"] = json!("3");
        record_update(Some(&first), &mut edited, &writer("kubectl-edit"));
        let second = apply(
            Some(&edited),
            &json!({"data": {"a": "1"}}),
            &writer("alice"),
            false,
        )
        .unwrap();
        assert_eq!(second["data"], json!({"a": "1", "c": "3"}));
    }

    #[test]
    fn updates_take_ownership_of_changed_fields() {
        let first = apply(
            None,
            &json!({"spec": {"replicas": 3}}),
            &writer("alice"),
            false,
        )
        .unwrap();
        let mut scaled = first.clone();
        scaled["spec"]["replicas"] = json!(5);
        record_update(Some(&first), &mut scaled, &writer("kubectl-scale"));
        assert_eq!(owners(&scaled, &["spec", "replicas"]), ["kubectl-scale"]);
        let err = apply(
            Some(&scaled),
            &json!({"spec": {"replicas": 3}}),
            &writer("alice"),
            false,
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("conflict with \"kubectl-scale\": .spec.replicas"),
            "{err}"
        );
    }
}
