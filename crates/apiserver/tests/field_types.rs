//! Every served kind, with each of its top-level fields and each field of its `spec` given
//! each JSON type (string, number, bool, array, object, null), sent as a create, an update
//! and each kind of patch: the answer is a success or a 4xx `Status`, never a 500 (the
//! bounded-cost probe found Namespaces with `"spec": "x"` answered 500 by a contained panic).
//!
//! Writes are dry runs, so every combination meets the same stored object; the dry run goes
//! through every step of a real write but the store's.

mod common;

use common::Fixture;
use serde_json::{Map, Value, json};

/// One value of each JSON type.
fn each_type() -> [Value; 6] {
    [
        json!("x"),
        json!(7),
        json!(true),
        json!([1]),
        json!({"a": 1}),
        Value::Null,
    ]
}

/// Where a kind's objects are created.
fn collection(group: &str, version: &str, plural: &str, namespaced: bool) -> String {
    let base = if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    };
    let namespace = if namespaced {
        "/namespaces/default"
    } else {
        ""
    };
    format!("{base}{namespace}/{plural}")
}

/// The fields a schema names at `properties`, in order.
fn fields(schema: &Value) -> Vec<String> {
    schema["properties"]
        .as_object()
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

fn with(base: &Value, path: &[&str], value: &Value) -> Value {
    let mut object = base.clone();
    let mut at = &mut object;
    for field in &path[..path.len() - 1] {
        if !at[*field].is_object() {
            at[*field] = Value::Object(Map::new());
        }
        at = &mut at[*field];
    }
    at[path[path.len() - 1]] = value.clone();
    object
}

#[test]
fn every_field_of_every_kind_given_every_json_type_is_a_4xx_not_a_500() {
    let fixture = Fixture::new();
    let mut failures = vec![];
    let mut requests = 0;
    for rt in fixture.server.resources().registry.all() {
        let version = rt.storage_version();
        let schema = version.schema.clone().unwrap_or(Value::Null);
        let path = collection(&rt.group, &version.name, &rt.plural, rt.namespaced);
        let api_version = rt.api_version(&version.name);
        let name = "field-probe";
        let base = json!({"apiVersion": api_version, "kind": rt.kind, "metadata": {"name": name}});
        // A real object for updates and patches to meet, when the bare one is valid.
        let (created, _) = fixture.send("POST", &path, "application/json", base.to_string());
        let exists = created == 201;
        let mut paths: Vec<Vec<String>> = fields(&schema)
            .into_iter()
            .chain(["spec".into(), "status".into()])
            .map(|f| vec![f])
            .collect();
        paths.extend(
            fields(&schema["properties"]["spec"])
                .into_iter()
                .map(|f| vec!["spec".to_string(), f]),
        );
        paths.dedup();
        for field in &paths {
            let field: Vec<&str> = field.iter().map(String::as_str).collect();
            for value in each_type() {
                let object = with(&base, &field, &value);
                let mut sent = vec![(
                    "POST",
                    format!("{path}?dryRun=All"),
                    "application/json",
                    object.to_string(),
                )];
                if exists {
                    let named = format!("{path}/{name}?dryRun=All");
                    let pointer = format!("/{}", field.join("/"));
                    let merge = with(&json!({}), &field, &value);
                    sent.extend([
                        ("PUT", named.clone(), "application/json", object.to_string()),
                        (
                            "PATCH",
                            named.clone(),
                            "application/merge-patch+json",
                            merge.to_string(),
                        ),
                        (
                            "PATCH",
                            named.clone(),
                            "application/json-patch+json",
                            json!([{"op": "add", "path": pointer, "value": value}]).to_string(),
                        ),
                        (
                            "PATCH",
                            named.clone(),
                            "application/strategic-merge-patch+json",
                            merge.to_string(),
                        ),
                        (
                            "PATCH",
                            format!("{named}&fieldManager=probe&force=true"),
                            "application/apply-patch+yaml",
                            object.to_string(),
                        ),
                    ]);
                }
                for (method, uri, content_type, body) in sent {
                    requests += 1;
                    let (code, answer) = fixture.send(method, &uri, content_type, body.clone());
                    let status: Value = serde_json::from_str(&answer).unwrap_or_default();
                    if code >= 500 || (code >= 400 && status["kind"] != "Status") {
                        failures.push(format!(
                            "{method} {uri} ({content_type}) {body}: {code} {answer}"
                        ));
                    }
                }
            }
        }
    }
    assert!(requests > 1000, "only {requests} requests were sent");
    assert!(
        failures.is_empty(),
        "{} of {requests} requests were not answered with a success or a 4xx Status:\n{}",
        failures.len(),
        failures[..failures.len().min(40)].join("\n")
    );
}
