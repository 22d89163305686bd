//! The patch formats kubectl and clients send: JSON merge patch (RFC 7386), JSON patch
//! (RFC 6902) and strategic merge patch for core kinds.

use serde_json::Value;

use crate::status::{ApiError, ApiResult};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    Json,
    Merge,
    Strategic,
    Apply,
}

impl PatchType {
    pub fn from_content_type(content_type: &str) -> ApiResult<PatchType> {
        let essence = content_type.split(';').next().unwrap_or_default().trim();
        match essence {
            "application/json-patch+json" => Ok(PatchType::Json),
            "application/merge-patch+json" => Ok(PatchType::Merge),
            "application/strategic-merge-patch+json" => Ok(PatchType::Strategic),
            "application/apply-patch+yaml" => Ok(PatchType::Apply),
            other => Err(ApiError::UnsupportedMediaType {
                message: format!(
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml (got {other:?})"
                ),
            }),
        }
    }
}

/// A patch body, decoded once (within [`crate::limits::MAX_DEPTH`]) however many times a
/// write retries it.
pub struct Patch {
    patch_type: PatchType,
    value: Value,
    /// A JSON patch's operations, checked for count and form before any is applied.
    operations: Option<json_patch::Patch>,
}

impl Patch {
    pub fn parse(patch_type: PatchType, body: &[u8]) -> ApiResult<Patch> {
        let value = crate::limits::json(body, "the patch").map_err(|e| match e {
            ApiError::BadRequest { message } => {
                ApiError::bad_request(format!("error decoding patch: {message}"))
            }
            other => other,
        })?;
        let operations = match patch_type {
            PatchType::Json => {
                crate::limits::check_patch_operations(value.as_array().map_or(0, Vec::len))?;
                Some(serde_json::from_value(value.clone()).map_err(|e| {
                    ApiError::bad_request(format!("the JSON patch is invalid: {e}"))
                })?)
            }
            PatchType::Merge if !value.is_object() => {
                return Err(ApiError::bad_request("a merge patch must be a JSON object"));
            }
            PatchType::Strategic if !value.is_object() => {
                return Err(ApiError::bad_request(
                    "a strategic merge patch must be a JSON object",
                ));
            }
            PatchType::Apply => {
                return Err(ApiError::UnsupportedMediaType {
                    message: "an apply patch is not supported here".into(),
                });
            }
            _ => None,
        };
        Ok(Patch {
            patch_type,
            value,
            operations,
        })
    }

    /// The decoded body (a JSON patch's operations as an array).
    pub fn value(&self) -> &Value {
        &self.value
    }

    /// `target` with the patch applied. A JSON patch may copy at most `max_bytes` in all:
    /// copies are the one way a small patch makes a large object (each `copy` of the root
    /// doubles it), so what each would copy is measured, within what is left of the budget,
    /// before it is made.
    pub fn apply(&self, target: &Value, max_bytes: usize) -> ApiResult<Value> {
        let mut result = target.clone();
        match (&self.operations, self.patch_type) {
            (Some(operations), _) => {
                let mut copied = 0usize;
                for operation in &operations.0 {
                    if let json_patch::PatchOperation::Copy(copy) = operation
                        && let Some(source) = result.pointer(copy.from.as_str())
                    {
                        let left = max_bytes.saturating_sub(copied);
                        copied += crate::limits::encoded_size_within(source, left)
                            .ok_or_else(|| crate::limits::patch_copies_too_much(max_bytes))?;
                    }
                    // `patch_unsafe` leaves a half-patched document on failure instead of
                    // undoing: `result` is a copy thrown away on error, and json-patch's undo
                    // itself panics on some sequences (a move to the root, then a failing
                    // op), which the fuzz test found.
                    json_patch::patch_unsafe(&mut result, std::slice::from_ref(operation))
                        .map_err(|e| ApiError::Invalid {
                            message: format!(
                                "the server rejected our request due to an error in our request: {e}"
                            ),
                            target: Default::default(),
                            causes: vec![],
                        })?;
                }
            }
            (None, PatchType::Merge) => json_patch::merge(&mut result, &self.value),
            (None, _) => strategic_merge(&mut result, &self.value)?,
        }
        Ok(result)
    }
}

/// Strategic merge for the core kinds lariat serves (Namespace, ConfigMap, Secret, Event):
/// none has a list with a merge key, so it is a merge patch that also honours the
/// `$patch: replace|delete` and `$retainKeys` directives kubectl may send, and
/// `$deleteFromPrimitiveList/<field>` for primitive lists such as finalizers.
fn strategic_merge(target: &mut Value, patch: &Value) -> ApiResult<()> {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return Ok(());
    };
    match patch.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            let mut replaced = patch.clone();
            replaced.remove("$patch");
            *target = Value::Object(replaced);
            return Ok(());
        }
        Some("delete") => {
            *target = Value::Null;
            return Ok(());
        }
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "unknown patch directive $patch: {other}"
            )));
        }
        None => {}
    }
    if !target.is_object() {
        *target = Value::Object(Default::default());
    }
    let fields = target.as_object_mut().expect("object");
    if let Some(keep) = patch.get("$retainKeys").and_then(Value::as_array) {
        let keep: Vec<&str> = keep.iter().filter_map(Value::as_str).collect();
        fields.retain(|k, _| keep.contains(&k.as_str()));
    }
    for (key, value) in patch {
        if key == "$retainKeys" || key.starts_with("$setElementOrder/") {
            continue;
        }
        if let Some(list) = key.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(items)), Some(remove)) =
                (fields.get_mut(list), value.as_array())
            {
                items.retain(|i| !remove.contains(i));
            }
            continue;
        }
        match value {
            Value::Null => {
                fields.remove(key);
            }
            Value::Object(_) => {
                let entry = fields.entry(key.clone()).or_insert(Value::Null);
                strategic_merge(entry, value)?;
                if entry.is_null() {
                    fields.remove(key);
                }
            }
            other => {
                fields.insert(key.clone(), other.clone());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn patch(target: &Value, patch_type: PatchType, body: &[u8]) -> ApiResult<Value> {
        Patch::parse(patch_type, body)?.apply(target, crate::limits::DEFAULT_MAX_OBJECT_BYTES)
    }

    /// Regression (the bounded-cost probe): 18 copies of the root in a 700-byte patch took the
    /// server to 2.3 GB.
    #[test]
    fn copies_are_bounded_before_they_are_made() {
        let target =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "x".repeat(1000)}});
        let ops: Vec<Value> = (0..40)
            .map(|n| json!({"op": "copy", "from": "", "path": format!("/k{n}")}))
            .collect();
        let started = std::time::Instant::now();
        let error = patch(&target, PatchType::Json, json!(ops).to_string().as_bytes()).unwrap_err();
        assert_eq!(error.code().as_u16(), 413, "{error}");
        assert!(error.to_string().contains("--max-object-bytes"), "{error}");
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        // A few copies within the budget are fine.
        let few = json!([{"op": "copy", "from": "/data/a", "path": "/data/b"}]);
        let copied = patch(&target, PatchType::Json, few.to_string().as_bytes()).unwrap();
        assert_eq!(copied["data"]["b"], target["data"]["a"]);
    }

    #[test]
    fn too_many_operations_are_refused() {
        let ops: Vec<Value> = (0..10_001)
            .map(|_| json!({"op": "test", "path": "/kind", "value": "ConfigMap"}))
            .collect();
        let error = patch(
            &json!({"kind": "ConfigMap"}),
            PatchType::Json,
            json!(ops).to_string().as_bytes(),
        )
        .unwrap_err();
        assert_eq!(error.code().as_u16(), 413, "{error}");
        assert!(error.to_string().contains("10000"), "{error}");
    }

    /// Regression (found by the fuzz test): json-patch's undo of a failed patch panicked after
    /// a move to the root.
    #[test]
    fn a_failing_json_patch_after_a_move_to_the_root_is_an_error() {
        let target = json!({"metadata": {"name": "c"}, "data": {"a": "b"}});
        let body = json!([
            {"op": "move", "path": "", "from": "/data"},
            {"op": "move", "path": "/metadata", "from": "/data"},
        ]);
        let error = patch(&target, PatchType::Json, body.to_string().as_bytes()).unwrap_err();
        assert_eq!(error.code(), axum::http::StatusCode::UNPROCESSABLE_ENTITY);
    }

    fn check(patch_type: PatchType, target: Value, body: Value, expect: Value) {
        let got = patch(&target, patch_type, body.to_string().as_bytes()).unwrap();
        assert_eq!(got, expect);
    }

    #[test]
    fn merge_patch() {
        check(
            PatchType::Merge,
            json!({"a": {"b": 1, "c": 2}}),
            json!({"a": {"b": null, "d": 3}}),
            json!({"a": {"c": 2, "d": 3}}),
        );
    }

    #[test]
    fn json_patch() {
        check(
            PatchType::Json,
            json!({"spec": {"replicas": 1}}),
            json!([{"op": "replace", "path": "/spec/replicas", "value": 5}]),
            json!({"spec": {"replicas": 5}}),
        );
        let failed = patch(
            &json!({}),
            PatchType::Json,
            br#"[{"op":"test","path":"/x","value":1}]"#,
        )
        .unwrap_err();
        assert_eq!(failed.code().as_u16(), 422);
    }

    #[test]
    fn strategic_merge_directives() {
        check(
            PatchType::Strategic,
            json!({"metadata": {"finalizers": ["a", "b"]}, "data": {"x": "1"}}),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}, "data": {"$patch": "replace", "y": "2"}}),
            json!({"metadata": {"finalizers": ["b"]}, "data": {"y": "2"}}),
        );
    }

    #[test]
    fn unknown_content_type_is_415() {
        assert_eq!(
            PatchType::from_content_type("text/plain")
                .unwrap_err()
                .code()
                .as_u16(),
            415
        );
        assert_eq!(
            PatchType::from_content_type("application/merge-patch+json; charset=utf-8").unwrap(),
            PatchType::Merge
        );
    }
}
