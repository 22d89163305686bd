//! Kubernetes' naming rules (object names, label keys and values) and label selector
//! validation, shared by the API server and the controllers that check what users wrote.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// RFC 1123 subdomain: what most Kubernetes object names must be.
pub fn is_dns1123_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

/// RFC 1123 label: namespace names.
pub fn is_dns1123_label(name: &str) -> bool {
    name.len() <= 63 && !name.contains('.') && is_dns1123_subdomain(name)
}

/// A label key: an optional DNS subdomain prefix and `/`, then a name of at most 63
/// alphanumerics, `-`, `_` or `.`, starting and ending alphanumeric.
pub fn is_qualified_name(key: &str) -> bool {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    prefix.is_none_or(is_dns1123_subdomain) && is_label_value(name) && !name.is_empty()
}

/// A label value: empty, or at most 63 alphanumerics, `-`, `_` or `.`, starting and ending
/// alphanumeric.
pub fn is_label_value(value: &str) -> bool {
    value.is_empty()
        || (value.len() <= 63
            && value
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && value.as_bytes()[0].is_ascii_alphanumeric()
            && value.as_bytes()[value.len() - 1].is_ascii_alphanumeric())
}

/// Why a label selector is not one Kubernetes would accept, if it is not: each key a
/// qualified name, each value a label value, operators In and NotIn with values, Exists and
/// DoesNotExist without.
pub fn selector_problem(selector: &LabelSelector) -> Option<String> {
    for (key, value) in selector.match_labels.iter().flatten() {
        if !is_qualified_name(key) {
            return Some(format!("matchLabels: {key:?} is not a valid label key"));
        }
        if !is_label_value(value) {
            return Some(format!("matchLabels: {value:?} is not a valid label value"));
        }
    }
    for expression in selector.match_expressions.iter().flatten() {
        let key = &expression.key;
        if !is_qualified_name(key) {
            return Some(format!(
                "matchExpressions: {key:?} is not a valid label key"
            ));
        }
        let values = expression.values.as_deref().unwrap_or_default();
        match expression.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => {
                return Some(format!(
                    "matchExpressions: {} on {key:?} needs values",
                    expression.operator
                ));
            }
            "In" | "NotIn" => {
                if let Some(value) = values.iter().find(|v| !is_label_value(v)) {
                    return Some(format!(
                        "matchExpressions: {value:?} is not a valid label value"
                    ));
                }
            }
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                return Some(format!(
                    "matchExpressions: {} on {key:?} takes no values",
                    expression.operator
                ));
            }
            "Exists" | "DoesNotExist" => {}
            other => {
                return Some(format!(
                    "matchExpressions: operator {other:?} is not In, NotIn, Exists or DoesNotExist"
                ));
            }
        }
    }
    None
}

/// Whether `labels` satisfy a label selector (`matchLabels` and `matchExpressions` with In,
/// NotIn, Exists, DoesNotExist). An empty selector matches everything, as in Kubernetes.
pub fn selects(
    selector: &LabelSelector,
    labels: &std::collections::BTreeMap<String, String>,
) -> bool {
    let labels_match = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let expressions_match = selector.match_expressions.iter().flatten().all(|e| {
        let value = labels.get(&e.key);
        let values = e.values.as_deref().unwrap_or_default();
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            // An operator Kubernetes does not know selects nothing.
            _ => false,
        }
    });
    labels_match && expressions_match
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    #[test]
    fn selectors_are_checked_as_kubernetes_checks_them() {
        let expression = |key: &str, operator: &str, values: &[&str]| LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: key.into(),
                operator: operator.into(),
                values: Some(values.iter().map(|v| v.to_string()).collect()),
            }]),
            ..Default::default()
        };
        assert_eq!(selector_problem(&expression("env", "In", &["prod"])), None);
        assert_eq!(
            selector_problem(&expression("example.com/env", "Exists", &[])),
            None
        );
        assert!(
            selector_problem(&expression("env", "Bogus", &["x"]))
                .unwrap()
                .contains("Bogus")
        );
        assert!(selector_problem(&expression("a b", "NotIn", &["x"])).is_some());
        assert!(selector_problem(&expression("env", "In", &[])).is_some());
        assert!(selector_problem(&expression("env", "Exists", &["x"])).is_some());
        assert!(selector_problem(&expression("env", "In", &["not valid"])).is_some());
        let labels = LabelSelector {
            match_labels: Some([("env".to_string(), "a b".to_string())].into()),
            ..Default::default()
        };
        assert!(selector_problem(&labels).is_some());
    }
}
