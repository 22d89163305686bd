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

/// Schema of a JSON object the API server must keep as it is (a `runtime.RawExtension` whose
/// CRD says it is an object).
pub(crate) struct PreserveUnknownObject;

impl JsonSchema for PreserveUnknownObject {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "PreserveUnknownObject".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true })
    }
}

/// Schema of `resource.Quantity`: an integer or a decimal string with an optional suffix.
pub(crate) struct Quantity;

impl JsonSchema for Quantity {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "Quantity".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "x-kubernetes-int-or-string": true, "pattern": QUANTITY_PATTERN })
    }
}

/// Schema of a Go `int` field whose CRD names no format: an integer of any size.
pub(crate) struct Integer;

impl JsonSchema for Integer {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "Integer".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "integer" })
    }
}

/// Schema of a Go `[]byte`: a base64 string.
pub(crate) struct Bytes;

impl JsonSchema for Bytes {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "Bytes".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "string", "format": "byte" })
    }
}

/// Schema of `corev1.Taint`, the taint kubeadm registers a Node with.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)] // Only its schema is used.
pub(crate) struct Taint {
    /// What the taint does to Pods that do not tolerate it.
    effect: String,
    /// The taint key.
    key: String,
    /// When the taint was added (only for NoExecute taints).
    time_added: Option<DateTime>,
    /// The taint value.
    value: Option<String>,
}

/// Schema of `corev1.EnvVar`, an environment variable of a control-plane component.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)] // Only its schema is used.
pub(crate) struct EnvVar {
    /// The variable's name.
    name: String,
    /// The variable's value, with `$(VAR)` references expanded.
    value: Option<String>,
    /// Where the value comes from, when it is not given inline.
    value_from: Option<EnvVarSource>,
}

/// Schema of `corev1.EnvVarSource`.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)] // Only its schema is used.
struct EnvVarSource {
    /// A key of a ConfigMap.
    config_map_key_ref: Option<ConfigMapKeySelector>,
    /// A field of the Pod.
    field_ref: Option<ObjectFieldSelector>,
    /// A key of an env file in a volume.
    file_key_ref: Option<FileKeySelector>,
    /// A resource limit or request of a container.
    resource_field_ref: Option<ResourceFieldSelector>,
    /// A key of a Secret.
    secret_key_ref: Option<SecretKeySelector>,
}

/// Schema of `corev1.ConfigMapKeySelector`.
#[derive(JsonSchema)]
#[schemars(extend("x-kubernetes-map-type" = "atomic"))]
#[allow(dead_code)] // Only its schema is used.
struct ConfigMapKeySelector {
    /// The key to select.
    key: String,
    /// The ConfigMap's name.
    #[schemars(extend("default" = ""))]
    name: Option<String>,
    /// Whether the ConfigMap or key may be missing.
    optional: Option<bool>,
}

/// Schema of `corev1.SecretKeySelector`.
#[derive(JsonSchema)]
#[schemars(extend("x-kubernetes-map-type" = "atomic"))]
#[allow(dead_code)] // Only its schema is used.
struct SecretKeySelector {
    /// The key to select.
    key: String,
    /// The Secret's name.
    #[schemars(extend("default" = ""))]
    name: Option<String>,
    /// Whether the Secret or key may be missing.
    optional: Option<bool>,
}

/// Schema of `corev1.ObjectFieldSelector`.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-map-type" = "atomic"))]
#[allow(dead_code)] // Only its schema is used.
struct ObjectFieldSelector {
    /// The schema version `fieldPath` is written in.
    api_version: Option<String>,
    /// The path of the field to select.
    field_path: String,
}

/// Schema of `corev1.FileKeySelector`.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-map-type" = "atomic"))]
#[allow(dead_code)] // Only its schema is used.
struct FileKeySelector {
    /// The key to select in the env file.
    key: String,
    /// Whether the file or key may be missing.
    #[schemars(extend("default" = false))]
    optional: Option<bool>,
    /// The env file's path inside the volume.
    path: String,
    /// The volume holding the env file.
    volume_name: String,
}

/// Schema of `corev1.ResourceFieldSelector`.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-map-type" = "atomic"))]
#[allow(dead_code)] // Only its schema is used.
struct ResourceFieldSelector {
    /// The container whose resource is selected.
    container_name: Option<String>,
    /// The unit the value is divided by.
    divisor: Option<Quantity>,
    /// The resource to select, e.g. `limits.cpu`.
    resource: String,
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

/// Upstream's pattern for `resource.Quantity` strings, e.g. `500m` or `1Gi`.
pub(crate) const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// lariat's pattern for non-negative Go durations such as `2s`, `1m30s` or `0`, for its own
/// kinds; upstream kinds leave durations unrestricted and keep that.
pub(crate) const DURATION_PATTERN: &str = r"^(0|([0-9]+(\.[0-9]*)?(ns|us|µs|ms|s|m|h))+)$";
