//! Values as Helm coalesces them: the user's over each chart's `values.yaml`, a `null` that
//! deletes a default, globals copied down to subcharts, and subcharts switched off by their
//! `condition` or `tags`.

use serde_json::{Map, Value};

use crate::chart::Chart;
use crate::semver;

/// The values a chart renders with: `user` over the chart's defaults, all the way down
/// its subcharts (Helm's `CoalesceValues`).
pub fn coalesce(chart: &Chart, user: &Map<String, Value>) -> Map<String, Value> {
    let mut dest = user.clone();
    coalesce_chart(chart, &mut dest);
    dest
}

fn coalesce_chart(chart: &Chart, dest: &mut Map<String, Value>) {
    coalesce_defaults(chart, dest);
    for sub in &chart.dependencies {
        let entry = dest
            .entry(sub.name().to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        if !entry.is_object() {
            continue;
        }
        let parent_globals = dest.get("global").cloned();
        let Some(Value::Object(sub_values)) = dest.get_mut(sub.name()) else {
            continue;
        };
        copy_globals(sub_values, parent_globals);
        coalesce_chart(sub, sub_values);
    }
}

/// The parent's `global` over the subchart's own: the parent's wins.
fn copy_globals(sub: &mut Map<String, Value>, parent: Option<Value>) {
    let Some(Value::Object(parent)) = parent else {
        return;
    };
    let mut globals = match sub.remove("global") {
        Some(Value::Object(g)) => g,
        Some(other) => {
            sub.insert("global".into(), other);
            return;
        }
        None => Map::new(),
    };
    for (key, value) in parent {
        match (value, globals.get(&key)) {
            (Value::Object(parent_table), Some(Value::Object(own))) => {
                let mut merged = parent_table;
                coalesce_tables(&mut merged, own.clone(), true);
                globals.insert(key, Value::Object(merged));
            }
            (Value::Object(_), Some(_)) => {}
            (_, Some(Value::Object(_))) => {}
            (value, _) => {
                globals.insert(key, value);
            }
        }
    }
    sub.insert("global".into(), Value::Object(globals));
}

/// The chart's `values.yaml` under what `dest` already holds.
fn coalesce_defaults(chart: &Chart, dest: &mut Map<String, Value>) {
    for (key, default) in &chart.values {
        match dest.get_mut(key) {
            Some(Value::Null) => {
                dest.remove(key);
            }
            Some(Value::Object(user_table)) => {
                let Value::Object(default_table) = default else {
                    continue;
                };
                let mut defaults = default_table.clone();
                // A subchart's table keeps its nulls: they delete the subchart's own defaults.
                let is_subchart = chart.dependencies.iter().any(|d| d.name() == key);
                if !is_subchart {
                    remove_nulls(&mut defaults);
                }
                coalesce_tables(user_table, defaults, is_subchart);
            }
            Some(_) => {}
            None => match default {
                Value::Null => {}
                Value::Object(table) => {
                    let mut table = table.clone();
                    remove_nulls(&mut table);
                    dest.insert(key.clone(), Value::Object(table));
                }
                other => {
                    dest.insert(key.clone(), other.clone());
                }
            },
        }
    }
}

/// `src` under `dst`: what `dst` lacks is taken from `src`; a `null` in `dst` deletes
/// the key (unless merging, which keeps it for a subchart to read).
pub(crate) fn coalesce_tables(
    dst: &mut Map<String, Value>,
    mut src: Map<String, Value>,
    merge: bool,
) {
    let src_non_null: Vec<String> = src
        .iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, _)| k.clone())
        .collect();
    for (key, value) in dst.iter() {
        if value.is_null() {
            src.insert(key.clone(), Value::Null);
        }
    }
    for (key, value) in src {
        match dst.get_mut(&key) {
            Some(Value::Null) if !merge && src_non_null.contains(&key) => {
                dst.remove(&key);
            }
            None => {
                dst.insert(key, value);
            }
            Some(Value::Object(dst_table)) => {
                if let Value::Object(src_table) = value {
                    coalesce_tables(dst_table, src_table, merge);
                }
            }
            Some(_) => {}
        }
    }
}

/// One values file over another, as `helm -f a.yaml -f b.yaml` layers them: `layer`
/// wins, tables merged key by key.
pub fn merge_over(base: &mut Map<String, Value>, layer: Map<String, Value>) {
    for (key, value) in layer {
        match (base.get_mut(&key), value) {
            (Some(Value::Object(table)), Value::Object(over)) => merge_over(table, over),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

fn remove_nulls(map: &mut Map<String, Value>) {
    map.retain(|_, v| !v.is_null());
    for value in map.values_mut() {
        if let Value::Object(table) = value {
            remove_nulls(table);
        }
    }
}

/// Drops the subcharts that `condition` or `tags` switch off, and renames aliased ones
/// (Helm's `ProcessDependencies`).
pub fn enable_dependencies(chart: &mut Chart, user: &Map<String, Value>) {
    enable_at(chart, user, "");
}

fn enable_at(chart: &mut Chart, values: &Map<String, Value>, path: &str) {
    if chart.metadata.dependencies.is_empty() {
        return;
    }
    let loaded = std::mem::take(&mut chart.dependencies);
    let requested = |sub: &Chart| {
        chart
            .metadata
            .dependencies
            .iter()
            .any(|d| d.name == sub.name() && version_matches(&d.version, sub))
    };
    let mut kept: Vec<Chart> = loaded
        .iter()
        .filter(|sub| !requested(sub))
        .cloned()
        .collect();
    for dependency in &mut chart.metadata.dependencies {
        if let Some(sub) = loaded
            .iter()
            .find(|s| s.name() == dependency.name && version_matches(&dependency.version, s))
        {
            let mut sub = sub.clone();
            if !dependency.alias.is_empty() {
                sub.metadata.name = dependency.alias.clone();
            }
            kept.push(sub);
        }
        if !dependency.alias.is_empty() {
            dependency.name = dependency.alias.clone();
        }
    }
    chart.dependencies = kept;
    let coalesced = coalesce(chart, values);
    let tags = match coalesced.get("tags") {
        Some(Value::Object(tags)) => Some(tags),
        _ => None,
    };
    let mut disabled = Vec::new();
    for dependency in &chart.metadata.dependencies {
        let mut enabled = true;
        if let Some(tags) = tags {
            let states: Vec<bool> = dependency
                .tags
                .iter()
                .filter_map(|t| tags.get(t)?.as_bool())
                .collect();
            if !states.is_empty() && !states.contains(&true) {
                enabled = false;
            }
        }
        for condition in dependency
            .condition
            .split(',')
            .map(str::trim)
            .filter(|c| !c.is_empty())
        {
            if let Some(state) =
                path_value(&coalesced, &format!("{path}{condition}")).and_then(Value::as_bool)
            {
                enabled = state;
                break;
            }
        }
        if !enabled {
            disabled.push(dependency.name.clone());
        }
    }
    chart
        .dependencies
        .retain(|sub| !disabled.contains(&sub.metadata.name));
    chart
        .metadata
        .dependencies
        .retain(|d| !disabled.contains(&d.name));
    for sub in &mut chart.dependencies {
        let sub_path = format!("{path}{}.", sub.metadata.name);
        enable_at(sub, &coalesced, &sub_path);
    }
}

/// Copies what each dependency's `import-values` names into the parent's values, under the
/// parent's own (Helm's `processDependencyImportValues`): `{child: a.b, parent: x}` puts the
/// subchart's `a.b` table at `x`, and a plain name `n` merges the subchart's `exports.n` into
/// the parent's top level. Children first, so an import can carry a grandchild's.
pub fn import_values(chart: &mut Chart) {
    for sub in &mut chart.dependencies {
        import_values(sub);
    }
    if chart
        .metadata
        .dependencies
        .iter()
        .all(|d| d.import_values.is_empty())
    {
        return;
    }
    let current = coalesce(chart, &Map::new());
    let mut imported = Map::new();
    for dependency in &chart.metadata.dependencies {
        for item in &dependency.import_values {
            let (child, parent) = match item {
                Value::String(name) => (format!("exports.{name}"), ".".to_string()),
                Value::Object(pair) => {
                    let text = |key: &str| match pair.get(key) {
                        Some(Value::String(s)) => s.clone(),
                        Some(other) => other.to_string(),
                        None => String::new(),
                    };
                    (text("child"), text("parent"))
                }
                _ => continue,
            };
            let Some(Value::Object(table)) =
                path_value(&current, &format!("{}.{child}", dependency.name))
            else {
                continue;
            };
            let mut placed = table.clone();
            if parent != "." {
                for key in parent.split('.').rev() {
                    placed = Map::from_iter([(key.to_string(), Value::Object(placed))]);
                }
            }
            coalesce_tables(&mut imported, placed, true);
        }
    }
    // The parent's own values win over what it imports.
    let mut values = current;
    coalesce_tables(&mut values, imported, true);
    chart.values = values;
}

fn version_matches(constraint: &str, chart: &Chart) -> bool {
    constraint.is_empty() || semver::satisfies(constraint, &chart.metadata.version).unwrap_or(false)
}

/// Sets `a.b.c` in `values` to `value`, as `--set a.b.c=value` does (tables made on the way,
/// a scalar in the way replaced by one).
pub fn set_path(values: &mut Map<String, Value>, path: &str, value: Value) {
    let mut parts: Vec<&str> = path.split('.').collect();
    let last = parts.pop().unwrap_or_default();
    let mut current = values;
    for part in parts {
        let entry = current
            .entry(part)
            .or_insert_with(|| Value::Object(Map::new()));
        if !entry.is_object() {
            *entry = Value::Object(Map::new());
        }
        let Value::Object(next) = entry else { return };
        current = next;
    }
    current.insert(last.to_string(), value);
}

/// `a.b.c` in `values`.
pub(crate) fn path_value<'a>(values: &'a Map<String, Value>, path: &str) -> Option<&'a Value> {
    let mut parts = path.split('.');
    let mut current = values.get(parts.next()?)?;
    for part in parts {
        current = current.as_object()?.get(part)?;
    }
    Some(current)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn user_values_override_defaults_and_null_deletes_one() {
        let mut dst = map(json!({"a": {"x": 1, "gone": null}, "b": 2}));
        coalesce_tables(
            &mut dst,
            map(json!({"a": {"x": 0, "y": 3, "gone": 4}, "c": 5})),
            false,
        );
        assert_eq!(
            Value::Object(dst),
            json!({"a": {"x": 1, "y": 3}, "b": 2, "c": 5})
        );
    }
}
