//! Schema stand-ins for k8s-openapi types, which lariat builds without their `schemars` feature.
//!
//! The fields themselves keep the k8s-openapi types (so controllers can use them directly); only
//! the generated OpenAPI schema comes from the stand-ins here, via `#[schemars(with = "...")]`.

use std::borrow::Cow;
use std::collections::BTreeMap;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};

/// Schema of `metav1.Time`: an RFC 3339 timestamp string.
pub(crate) struct DateTime;

impl JsonSchema for DateTime {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "DateTime".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "string", "format": "date-time" })
    }
}

/// Schema of `intstr.IntOrString`: Kubernetes' structural marker for "integer or string".
pub(crate) struct IntOrString;

impl JsonSchema for IntOrString {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "IntOrString".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "x-kubernetes-int-or-string": true })
    }
}

/// Schema of an arbitrary JSON value the API server must keep as it is (no pruning).
pub(crate) struct PreserveUnknownFields;

impl JsonSchema for PreserveUnknownFields {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "PreserveUnknownFields".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "x-kubernetes-preserve-unknown-fields": true })
    }
}

/// Schema of `metav1.LabelSelector`.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-map-type" = "atomic"))]
#[allow(dead_code)] // Only its schema is used.
pub(crate) struct LabelSelector {
    /// Requirements that must all hold.
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    match_expressions: Option<Vec<LabelSelectorRequirement>>,
    /// Labels that must all be present with these values.
    match_labels: Option<BTreeMap<String, String>>,
}

/// Schema of `metav1.LabelSelectorRequirement`.
#[derive(JsonSchema)]
#[allow(dead_code)] // Only its schema is used.
pub(crate) struct LabelSelectorRequirement {
    /// The label key the requirement applies to.
    key: String,
    /// How the key relates to the values: In, NotIn, Exists or DoesNotExist.
    operator: String,
    /// The values for In and NotIn; empty for Exists and DoesNotExist.
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    values: Option<Vec<String>>,
}

/// Upstream's pattern for condition types: a CamelCase name, optionally prefixed by a DNS
/// subdomain and a slash.
pub(crate) const CONDITION_TYPE_PATTERN: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$";

/// Upstream's pattern for `metav1.Condition` reasons.
pub(crate) const CONDITION_REASON_PATTERN: &str = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$";

/// Upstream's pattern for taint keys: a label-style key, optionally prefixed.
pub(crate) const TAINT_KEY_PATTERN: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/)?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$";

/// Upstream's pattern for taint values: a label-style value, possibly empty.
pub(crate) const TAINT_VALUE_PATTERN: &str = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";

/// Upstream's pattern for namespace names (a DNS label).
pub(crate) const DNS_LABEL_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";

/// Upstream's pattern for `unhealthyRange`, e.g. `[3-5]`.
pub(crate) const UNHEALTHY_RANGE_PATTERN: &str = r"^\[[0-9]+-[0-9]+\]$";
