//! Property test over the whole request surface, in process: random methods, paths, query
//! parameters (selectors, dryRun, resource versions, field managers...), content types and
//! bodies (arbitrary JSON, JSON patches, YAML). Whatever comes in, the server answers with no
//! panic and no 500, and a refused or dry-run request leaves the store untouched.
//!
//! `PROPTEST_CASES` bounds the run (CI uses the default below).

mod common;

use common::Fixture;
use proptest::prelude::*;
use serde_json::{Value, json};

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::String),
        prop_oneof![
            Just("metadata"),
            Just("name"),
            Just("c"),
            Just("data"),
            Just("spec"),
            Just("status"),
            Just("All"),
            Just("v1"),
            Just("ConfigMap"),
        ]
        .prop_map(|s| json!(s)),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("metadata".to_string()),
                    Just("name".to_string()),
                    Just("namespace".to_string()),
                    Just("labels".to_string()),
                    Just("resourceVersion".to_string()),
                    Just("ownerReferences".to_string()),
                    Just("finalizers".to_string()),
                    Just("data".to_string()),
                    Just("apiVersion".to_string()),
                    Just("kind".to_string()),
                    Just("dryRun".to_string()),
                    Just("propagationPolicy".to_string()),
                    ".{0,8}",
                ],
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn json_patch() -> impl Strategy<Value = Value> {
    let op = (
        prop_oneof![
            Just("add"),
            Just("remove"),
            Just("replace"),
            Just("move"),
            Just("copy"),
            Just("test"),
            Just("bogus")
        ],
        prop_oneof![
            3 => Just(String::new()),
            3 => prop_oneof![
                Just(""),
                Just("/"),
                Just("/metadata"),
                Just("/metadata/name"),
                Just("/metadata/resourceVersion"),
                Just("/metadata/labels"),
                Just("/data"),
                Just("/data/a"),
                Just("/status"),
            ]
            .prop_map(String::from),
            1 => "/[a-z~0-9/]{0,10}",
        ],
        json_value(),
    )
        .prop_map(
            |(op, path, value)| json!({"op": op, "path": path, "from": "/data", "value": value}),
        );
    prop::collection::vec(op, 0..4).prop_map(Value::Array)
}

fn query_value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("All".to_string()),
        Just("true".to_string()),
        Just("0".to_string()),
        Just("99999999".to_string()),
        Just("Exact".to_string()),
        Just("NotOlderThan".to_string()),
        Just("!!!app".to_string()),
        Just("app in (web,db)".to_string()),
        Just("app=web,!tier".to_string()),
        Just("metadata.name=c".to_string()),
        Just("Strict".to_string()),
        Just("Foreground".to_string()),
        ".{0,16}",
    ]
}

fn request() -> impl Strategy<Value = (String, String, Vec<(String, String)>, String, String)> {
    let method = prop_oneof![
        Just("GET"),
        Just("POST"),
        Just("PUT"),
        Just("PATCH"),
        Just("DELETE")
    ]
    .prop_map(String::from);
    let path = prop_oneof![
        Just("/api/v1/namespaces/default/configmaps"),
        Just("/api/v1/namespaces/default/configmaps/c"),
        Just("/api/v1/namespaces/default/configmaps/d"),
        Just("/api/v1/namespaces/default/secrets/s"),
        Just("/api/v1/namespaces/default"),
        Just("/api/v1/namespaces/default/status"),
        Just("/api/v1/namespaces"),
        Just("/apis/cluster.x-k8s.io/v1beta1/namespaces/default/clusters"),
        Just("/apis/cluster.x-k8s.io/v1beta1/namespaces/default/clusters/x/status"),
        Just("/apis/cluster.x-k8s.io/v1beta1/namespaces/default/machinedeployments/x/scale"),
    ]
    .prop_map(String::from);
    let query = prop::collection::vec(
        (
            prop_oneof![
                Just("dryRun"),
                Just("labelSelector"),
                Just("fieldSelector"),
                Just("resourceVersion"),
                Just("resourceVersionMatch"),
                Just("limit"),
                Just("continue"),
                Just("fieldManager"),
                Just("fieldValidation"),
                Just("propagationPolicy"),
                Just("force"),
            ]
            .prop_map(String::from),
            query_value(),
        ),
        0..4,
    );
    let content_type = prop_oneof![
        Just("application/json"),
        Just("application/merge-patch+json"),
        Just("application/json-patch+json"),
        Just("application/strategic-merge-patch+json"),
        Just("application/apply-patch+yaml"),
        Just("application/yaml"),
    ]
    .prop_map(String::from);
    // Bodies mostly of the shape the content type announces, so they reach deep into the
    // verbs, sometimes anything at all.
    let typed = content_type.prop_flat_map(|content_type| {
        let body = match content_type.as_str() {
            "application/json-patch+json" => prop_oneof![
                4 => json_patch().prop_map(|v| v.to_string()),
                1 => ".{0,40}",
            ]
            .boxed(),
            "application/apply-patch+yaml" | "application/yaml" => prop_oneof![
                json_value().prop_map(|v| serde_yaml_ng::to_string(&v).unwrap_or_default()),
                json_value().prop_map(|v| v.to_string()),
                ".{0,40}",
            ]
            .boxed(),
            _ => prop_oneof![
                4 => json_value().prop_map(|v| v.to_string()),
                1 => ".{0,40}",
            ]
            .boxed(),
        };
        (Just(content_type), body)
    });
    (method, path, query, typed).prop_map(|(m, p, q, (c, b))| (m, p, q, c, b))
}

/// Patches aimed at objects that exist, where a patch does its real work.
fn patch_request() -> impl Strategy<Value = (String, String, Vec<(String, String)>, String, String)>
{
    let path = prop_oneof![
        Just("/api/v1/namespaces/default/configmaps/c"),
        Just("/api/v1/namespaces/default/secrets/s"),
        Just("/api/v1/namespaces/default/status"),
        Just("/api/v1/namespaces/default"),
    ]
    .prop_map(String::from);
    let query = prop::collection::vec(
        (
            prop_oneof![
                Just("dryRun"),
                Just("fieldManager"),
                Just("fieldValidation")
            ]
            .prop_map(String::from),
            query_value(),
        ),
        0..2,
    );
    let body = prop_oneof![
        3 => (Just("application/json-patch+json".to_string()), json_patch().prop_map(|v| v.to_string())),
        2 => (Just("application/merge-patch+json".to_string()), json_value().prop_map(|v| v.to_string())),
        1 => (Just("application/strategic-merge-patch+json".to_string()), json_value().prop_map(|v| v.to_string())),
        1 => (Just("application/apply-patch+yaml".to_string()), json_value().prop_map(|v| v.to_string())),
    ];
    (path, query, body).prop_map(|(p, q, (c, b))| ("PATCH".to_string(), p, q, c, b))
}

thread_local! {
    static FIXTURE: Fixture = Fixture::new();
}

/// Sends one generated request and checks the properties every answer must have.
fn check(
    (method, path, query, content_type, body): (
        String,
        String,
        Vec<(String, String)>,
        String,
        String,
    ),
) -> Result<(), TestCaseError> {
    FIXTURE.with(|fixture| {
        let encoded: String = serde_urlencoded::to_string(&query).unwrap();
        let uri = if encoded.is_empty() {
            path.clone()
        } else {
            format!("{path}?{encoded}")
        };
        let before = fixture.revision();
        let (code, text) = fixture.send(&method, &uri, &content_type, body.clone());
        prop_assert!(
            code != 500 && code < 600,
            "{method} {uri} [{content_type}] {body} -> {code} {text}"
        );
        let refused = code >= 400;
        let dry = query.iter().any(|(k, v)| k == "dryRun" && v == "All");
        if refused || dry || method == "GET" {
            prop_assert_eq!(
                fixture.revision(),
                before,
                "{} {} {} -> {} wrote",
                method,
                uri,
                body,
                code
            );
        }
        Ok(())
    })
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(1000),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn any_request_no_panic_no_500_no_write_when_refused(request in request()) {
        check(request)?;
    }

    #[test]
    fn patches_no_panic_no_500_no_write_when_refused(request in patch_request()) {
        check(request)?;
    }
}
