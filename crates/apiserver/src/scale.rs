//! The `scale` subresource: an `autoscaling/v1` Scale view of a kind's replica fields, as
//! `kubectl scale` and autoscalers use it.

use serde_json::{Value, json};

use crate::resources::{Resources, Scope, WriteOptions, Written};
use crate::status::{ApiError, ApiResult, Cause};
use crate::table::evaluate;

fn path_keys(path: &str) -> Vec<String> {
    path.trim_start_matches('.')
        .split('.')
        .filter(|k| !k.is_empty())
        .map(String::from)
        .collect()
}

impl Resources {
    /// The Scale of `object` per its kind's declared replica paths.
    pub fn scale_of(&self, scope: &Scope, object: &Value) -> ApiResult<Value> {
        let scale = scope
            .rt
            .version(&scope.version)
            .and_then(|v| v.scale.clone())
            .ok_or_else(|| ApiError::bad_request("this kind has no scale subresource"))?;
        let first = |path: &str| evaluate(path, object).into_iter().next();
        let meta = &object["metadata"];
        let mut status = json!({"replicas": first(&scale.status_replicas_path).and_then(|v| v.as_i64()).unwrap_or(0)});
        if let Some(selector) = scale
            .label_selector_path
            .as_deref()
            .and_then(first)
            .and_then(|v| v.as_str().map(String::from))
        {
            status["selector"] = json!(selector);
        }
        Ok(json!({
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {
                "name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"],
                "resourceVersion": meta["resourceVersion"], "creationTimestamp": meta["creationTimestamp"],
            },
            "spec": {"replicas": first(&scale.spec_replicas_path).and_then(|v| v.as_i64()).unwrap_or(0)},
            "status": status,
        }))
    }

    /// Changes the replica count through a function of the current Scale (a PUT body or a
    /// patch), and answers with the new Scale.
    pub async fn update_scale<F>(
        &self,
        scope: &Scope,
        name: &str,
        options: &WriteOptions,
        change: F,
    ) -> ApiResult<Written>
    where
        F: Fn(&Value) -> ApiResult<Value>,
    {
        let spec_path = scope
            .rt
            .version(&scope.version)
            .and_then(|v| v.scale.clone())
            .map(|s| path_keys(&s.spec_replicas_path))
            .ok_or_else(|| ApiError::bad_request("this kind has no scale subresource"))?;
        let written = self
            .write_loop(scope, name, None, options, None, |current| {
                let current = current
                    .ok_or_else(|| ApiError::not_found(&scope.rt.plural, &scope.rt.group, name))?;
                let wanted = change(&self.scale_of(scope, current)?)?;
                let replicas = &wanted["spec"]["replicas"];
                let Some(count) = replicas
                    .as_i64()
                    .filter(|n| *n >= 0 && *n <= i32::MAX as i64)
                else {
                    return Err(ApiError::invalid(
                        "Scale",
                        "autoscaling",
                        name,
                        vec![Cause::invalid(
                            "spec.replicas",
                            replicas,
                            "must be a non-negative 32-bit integer",
                        )],
                    ));
                };
                let mut object = current.clone();
                let mut node = &mut object;
                for key in &spec_path {
                    if !node[key.as_str()].is_object()
                        && key != spec_path.last().expect("non-empty path")
                    {
                        node[key.as_str()] = json!({});
                    }
                    node = &mut node[key.as_str()];
                }
                *node = json!(count);
                Ok(object)
            })
            .await?;
        Ok(Written {
            object: self.scale_of(scope, &written.object)?,
            ..written
        })
    }
}
