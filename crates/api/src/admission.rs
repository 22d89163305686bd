//! What a kind checks when it is written, beyond what its schema says: kube-apiserver's
//! per-kind strategies (`pkg/registry/<group>/<kind>/strategy.go`) and Cluster API's webhooks
//! (`<kind>_webhook.go`) in one shape. The crate that owns a kind writes its [`Strategy`] and
//! hands it over in a [`Strategies`] set; the API server asks the set by group and resource,
//! and names no kind itself.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde_json::Value;

/// One kind's write rules.
pub trait Strategy: Send + Sync {
    /// Fills in what the kind's defaulting webhook fills in, before the schema runs (as
    /// kube-apiserver calls mutating webhooks before it validates), so that a field the
    /// schema requires and upstream's webhook completes is not refused. Not called for
    /// subresource writes.
    fn default_fields(&self, _object: &mut Value, _old: Option<&Value>) {}

    /// Completes `object` (a create when `old` is `None`, else an update of `old`) after the
    /// schema has run, and returns what refuses it; each cause names its field.
    fn admit(&self, object: &mut Value, old: Option<&Value>) -> Vec<Cause>;
}

/// Something each of some resources has (a kind's [`Strategy`], the API server's validators),
/// by API group and resource (plural): asked with borrowed names at every write.
pub struct ByResource<T: ?Sized> {
    by_group: BTreeMap<String, BTreeMap<String, Arc<T>>>,
}

impl<T: ?Sized> Default for ByResource<T> {
    fn default() -> Self {
        ByResource {
            by_group: BTreeMap::new(),
        }
    }
}

impl<T: ?Sized> Clone for ByResource<T> {
    fn clone(&self) -> Self {
        ByResource {
            by_group: self.by_group.clone(),
        }
    }
}

impl<T: ?Sized> ByResource<T> {
    /// `item` for the resources `plurals` of `group`.
    pub fn with_shared(mut self, group: &str, plurals: &[&str], item: Arc<T>) -> Self {
        let resources = self.by_group.entry(group.to_string()).or_default();
        for plural in plurals {
            resources.insert(plural.to_string(), item.clone());
        }
        self
    }

    /// Both sets; `other`'s wins where both have one.
    pub fn and(mut self, other: ByResource<T>) -> Self {
        for (group, resources) in other.by_group {
            self.by_group.entry(group).or_default().extend(resources);
        }
        self
    }

    /// What `plural` in `group` has, if anything.
    pub fn get(&self, group: &str, plural: &str) -> Option<&T> {
        self.by_group
            .get(group)?
            .get(plural)
            .map(|item| item.as_ref())
    }
}

impl<T: ?Sized> fmt::Debug for ByResource<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = self.by_group.iter().flat_map(|(group, resources)| {
            resources
                .keys()
                .map(move |plural| format!("{plural}.{group}"))
        });
        f.debug_set().entries(names).finish()
    }
}

/// The strategies of some kinds.
pub type Strategies = ByResource<dyn Strategy>;

impl ByResource<dyn Strategy> {
    /// `strategy` for the resources `plurals` of `group`.
    pub fn with(self, group: &str, plurals: &[&str], strategy: impl Strategy + 'static) -> Self {
        self.with_shared(group, plurals, Arc::new(strategy))
    }
}

/// `field` (at `path`) may not change once set.
pub fn immutable(object: &Value, old: Option<&Value>, path: &[&str], field: &str) -> Vec<Cause> {
    let pick = |o: &Value| {
        path.iter()
            .try_fold(o, |node, key| node.get(key))
            .cloned()
            .unwrap_or(Value::Null)
    };
    match old.map(pick) {
        Some(before) if !before.is_null() && before != pick(object) => {
            vec![Cause::invalid(field, &pick(object), "field is immutable")]
        }
        _ => vec![],
    }
}

/// One bad field, as `Status.details.causes[]` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    /// `FieldValueInvalid`, `FieldValueRequired`, `FieldValueNotSupported`, ...
    pub reason: &'static str,
    pub message: String,
    /// Dotted path such as `spec.replicas` or `metadata.name`.
    pub field: String,
}

impl Cause {
    pub fn invalid(field: impl Into<String>, value: &Value, why: impl AsRef<str>) -> Cause {
        Cause {
            reason: "FieldValueInvalid",
            message: format!("Invalid value: {}: {}", short_value(value), why.as_ref()),
            field: field.into(),
        }
    }

    pub fn forbidden(field: impl Into<String>, why: &str) -> Cause {
        Cause {
            reason: "FieldValueForbidden",
            message: format!("Forbidden: {why}"),
            field: field.into(),
        }
    }

    pub fn required(field: impl Into<String>) -> Cause {
        Cause {
            reason: "FieldValueRequired",
            message: "Required value".into(),
            field: field.into(),
        }
    }

    pub fn not_supported(field: impl Into<String>, value: &Value, allowed: &[Value]) -> Cause {
        let allowed: Vec<String> = allowed.iter().map(short_value).collect();
        Cause {
            reason: "FieldValueNotSupported",
            message: format!(
                "Unsupported value: {}: supported values: {}",
                short_value(value),
                allowed.join(", ")
            ),
            field: field.into(),
        }
    }

    pub fn type_invalid(field: impl Into<String>, value: &Value, expected: &str) -> Cause {
        Cause {
            reason: "FieldValueTypeInvalid",
            message: format!(
                "Invalid value: {}: must be of type {expected}, not {}",
                short_value(value),
                json_type(value),
            ),
            field: field.into(),
        }
    }

    pub fn unknown(field: impl Into<String>) -> Cause {
        Cause {
            reason: "FieldValueInvalid",
            message: "unknown field".into(),
            field: field.into(),
        }
    }

    /// `spec.replicas: Invalid value: 7: must be ...`, as kube-apiserver joins causes.
    pub fn render(&self) -> String {
        format!("{}: {}", self.field, self.message)
    }
}

fn short_value(value: &Value) -> String {
    let text = value.to_string();
    if text.len() > 80 {
        format!("{}...", &text[..text.floor_char_boundary(77)])
    } else {
        text
    }
}

pub fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// `object` with one node replaced by a value of each JSON type, for every node down to five
/// levels: what a strategy must answer with causes, never a panic (the API server would
/// answer a panic with 500). For the tests of every crate that writes strategies.
pub fn retyped(object: &Value) -> Vec<Value> {
    const DEPTH: usize = 5;
    let kinds = [
        Value::String("x".into()),
        Value::from(7),
        Value::Bool(true),
        Value::Array(vec![Value::from(1)]),
        serde_json::json!({"x": 1}),
        Value::Null,
    ];
    let mut paths: Vec<Vec<PathStep>> = vec![];
    collect_paths(object, &mut vec![], DEPTH, &mut paths);
    let mut variants = vec![];
    for path in paths {
        for kind in &kinds {
            let mut variant = object.clone();
            if let Some(node) = node_at(&mut variant, &path) {
                *node = kind.clone();
                variants.push(variant);
            }
        }
    }
    variants
}

#[derive(Clone)]
enum PathStep {
    Key(String),
    Index(usize),
}

fn collect_paths(
    node: &Value,
    at: &mut Vec<PathStep>,
    depth: usize,
    paths: &mut Vec<Vec<PathStep>>,
) {
    if depth == 0 {
        return;
    }
    let children: Vec<(PathStep, &Value)> = match node {
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| (PathStep::Key(k.clone()), v))
            .collect(),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, v)| (PathStep::Index(i), v))
            .collect(),
        _ => return,
    };
    for (step, child) in children {
        at.push(step);
        paths.push(at.clone());
        collect_paths(child, at, depth - 1, paths);
        at.pop();
    }
}

fn node_at<'a>(mut node: &'a mut Value, path: &[PathStep]) -> Option<&'a mut Value> {
    for step in path {
        node = match step {
            PathStep::Key(key) => node.get_mut(key)?,
            PathStep::Index(index) => node.get_mut(*index)?,
        };
    }
    Some(node)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The value a user wrote is in the message, not only its JSON type (issue 41: `port:
    /// eighty` was reported as `Invalid value: "string": integer expected`).
    #[test]
    fn a_wrong_type_names_the_value() {
        let cause = Cause::type_invalid("spec.ports[0].port", &json!("eighty"), "integer");
        assert_eq!(
            cause.render(),
            r#"spec.ports[0].port: Invalid value: "eighty": must be of type integer, not string"#
        );
        assert_eq!(cause.reason, "FieldValueTypeInvalid");
    }

    /// Refuses every write, naming itself in the cause's field.
    struct Refuses(&'static str);

    impl Strategy for Refuses {
        fn admit(&self, _: &mut Value, _: Option<&Value>) -> Vec<Cause> {
            vec![Cause::forbidden(self.0, "refused")]
        }
    }

    fn refusal(strategies: &Strategies, group: &str, plural: &str) -> Option<String> {
        let strategy = strategies.get(group, plural)?;
        Some(strategy.admit(&mut json!({}), None).remove(0).field)
    }

    #[test]
    fn strategies_are_found_by_group_and_resource_and_later_sets_win() {
        let base = Strategies::default()
            .with("example.com", &["widgets", "gadgets"], Refuses("base"))
            .with("", &["configmaps"], Refuses("core"));
        let more = Strategies::default().with("example.com", &["gadgets"], Refuses("more"));
        let both = base.and(more);
        assert_eq!(
            refusal(&both, "example.com", "widgets").as_deref(),
            Some("base")
        );
        assert_eq!(
            refusal(&both, "example.com", "gadgets").as_deref(),
            Some("more")
        );
        assert_eq!(refusal(&both, "", "configmaps").as_deref(), Some("core"));
        assert_eq!(
            refusal(&both, "", "widgets"),
            None,
            "the group is part of the name"
        );
        assert_eq!(
            format!("{both:?}"),
            r#"{"configmaps.", "gadgets.example.com", "widgets.example.com"}"#
        );
    }

    #[test]
    fn immutable_fields_may_be_set_once() {
        let old = json!({"spec": {"region": "eu-west-1"}});
        let moved = json!({"spec": {"region": "us-east-1"}});
        assert!(immutable(&old, None, &["spec", "region"], "spec.region").is_empty());
        assert!(immutable(&old, Some(&old), &["spec", "region"], "spec.region").is_empty());
        let causes = immutable(&moved, Some(&old), &["spec", "region"], "spec.region");
        assert_eq!(causes[0].field, "spec.region");
        assert!(causes[0].message.ends_with("field is immutable"));
        assert!(immutable(&moved, Some(&json!({})), &["spec", "region"], "x").is_empty());
    }

    #[test]
    fn retyped_replaces_every_node_by_every_type() {
        let variants = retyped(&json!({"spec": {"a": [1], "b": "x"}}));
        // spec, spec.a, spec.a[0], spec.b: four nodes, six types each.
        assert_eq!(variants.len(), 24);
        assert!(variants.contains(&json!({"spec": {"a": [null], "b": "x"}})));
        assert!(variants.contains(&json!({"spec": true})));
    }
}
