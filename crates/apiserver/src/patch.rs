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

/// Applies a JSON or merge patch body to `target`.
pub fn patch(target: &Value, patch_type: PatchType, body: &[u8]) -> ApiResult<Value> {
    let parsed: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
    let mut result = target.clone();
    match patch_type {
        PatchType::Json => {
            let ops: json_patch::Patch = serde_json::from_value(parsed)
                .map_err(|e| ApiError::bad_request(format!("the JSON patch is invalid: {e}")))?;
            // `patch_unsafe` leaves a half-patched document on failure instead of undoing:
            // `result` is a copy thrown away on error, and json-patch's undo itself panics on
            // some sequences (a move to the root, then a failing op), which the fuzz test found.
            json_patch::patch_unsafe(&mut result, &ops).map_err(|e| ApiError::Invalid {
                message: format!(
                    "the server rejected our request due to an error in our request: {e}"
                ),
                target: Default::default(),
                causes: vec![],
            })?;
        }
        PatchType::Merge => {
            if !parsed.is_object() {
                return Err(ApiError::bad_request("a merge patch must be a JSON object"));
            }
            json_patch::merge(&mut result, &parsed);
        }
        PatchType::Strategic => {
            if !parsed.is_object() {
                return Err(ApiError::bad_request(
                    "a strategic merge patch must be a JSON object",
                ));
            }
            strategic_merge(&mut result, &parsed)?;
        }
        PatchType::Apply => unreachable!("apply is handled by the managed-fields module"),
    }
    Ok(result)
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
