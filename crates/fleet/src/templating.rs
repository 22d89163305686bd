//! A Helm bundle's values made for one cluster, as Fleet's controller makes them before it
//! writes the cluster's BundleDeployment:
//! - a string value `global.fleet.clusterLabels.<label>` becomes the cluster's label (an
//!   error when the cluster has no such label, as in Fleet);
//! - unless `disablePreProcess`, the values are a Go template between `${` and `}` over
//!   `.ClusterName`, `.ClusterNamespace`, `.ClusterLabels`, `.ClusterAnnotations` and
//!   `.ClusterValues` (the Fleet Cluster's `spec.templateValues`), with Sprig's functions;
//!   each `templateValues` entry is such a template too, read as YAML, replacing its key.
//!
//! Only values that hold a template or a label reference are made per cluster; others are the
//! target's, shared by all its clusters. Fleet fails a key the cluster lacks
//! (`missingkey=error`); lariat's templates see it as Go's `<no value>`, and a value left
//! holding that text fails the same way, so a pipeline such as `| default "x"` over a missing
//! label gives its default in lariat where Fleet fails.

use kube::ResourceExt;
use lariat_api::fleet::{FleetCluster, HelmOptions};
use serde_json::{Map, Value, json};

/// Fleet's prefix for a value naming a cluster label.
const LABEL_PREFIX: &str = "global.fleet.clusterLabels.";
/// How deep values are searched for label references (Fleet's limit).
const MAX_LABEL_DEPTH: usize = 50;
/// Fleet's delimiters: `{{` would be YAML's flow mapping in `fleet.yaml`.
const DELIMITERS: (&str, &str) = ("${", "}");
/// What a missing key prints as in a Go template.
const NO_VALUE: &str = "<no value>";
/// What one values template may take: values are small, and the templates run on the
/// management plane for every cluster (the bundle's budget over all of them is
/// `bundle::TEMPLATING_BUDGET`).
const TEMPLATE_BOUNDS: lariat_helm::Bounds = lariat_helm::Bounds {
    time: std::time::Duration::from_secs(1),
    output_bytes: 1 << 20,
};

/// Whether `helm`'s values must be made for each cluster.
pub fn per_cluster(helm: &HelmOptions) -> bool {
    let templated = !helm.disable_pre_process
        && (helm.template_values.as_ref().is_some_and(|t| !t.is_empty())
            || helm
                .values
                .as_ref()
                .is_some_and(|v| holds(v, &|s| s.contains("${"))));
    templated
        || helm
            .values
            .as_ref()
            .is_some_and(|v| holds(v, &|s| s.starts_with(LABEL_PREFIX)))
}

/// Whether a key or string anywhere in `values` meets `test`.
fn holds(values: &Map<String, Value>, test: &dyn Fn(&str) -> bool) -> bool {
    fn any(value: &Value, test: &dyn Fn(&str) -> bool) -> bool {
        match value {
            Value::String(s) => test(s),
            Value::Array(items) => items.iter().any(|v| any(v, test)),
            Value::Object(map) => holds(map, test),
            _ => false,
        }
    }
    values.iter().any(|(k, v)| test(k) || any(v, test))
}

/// The most `templateValues` entries a bundle may have.
pub const MAX_TEMPLATE_VALUES: usize = 100;

/// `helm`'s values made for `cluster`, all its templates within `deadline`; the message says
/// what failed, naming the template.
pub fn for_cluster(
    helm: &HelmOptions,
    cluster: &FleetCluster,
    deadline: std::time::Instant,
) -> Result<HelmOptions, String> {
    if helm
        .template_values
        .as_ref()
        .is_some_and(|t| t.len() > MAX_TEMPLATE_VALUES)
    {
        return Err(format!(
            "helm.templateValues: more than {MAX_TEMPLATE_VALUES} entries"
        ));
    }
    let out_of_time = || {
        (std::time::Instant::now() > deadline).then(|| {
            "helm.values: this bundle's templates ran out of time for its clusters".to_string()
        })
    };
    let mut helm = helm.clone();
    let mut values = helm.values.take().unwrap_or_default();
    substitute_labels(&mut values, cluster.labels(), 0)?;
    if !helm.disable_pre_process {
        let context = json!({
            "ClusterName": cluster.name_any(),
            "ClusterNamespace": cluster.namespace().unwrap_or_default(),
            "ClusterLabels": cluster.labels(),
            "ClusterAnnotations": cluster.annotations(),
            "ClusterValues": cluster.spec.template_values.clone().unwrap_or_default(),
        });
        if holds(&values, &|s| s.contains("${")) {
            let text = lariat_helm::goyaml::to_string(&Value::Object(values));
            let rendered = render("helm.values", &text, &context)?;
            values = lariat_helm::chart::read_values(rendered.as_bytes(), "helm.values")
                .map_err(|e| format!("helm.values: the rendered template is not values: {e}"))?;
        }
        for (key, source) in helm.template_values.take().unwrap_or_default() {
            if let Some(error) = out_of_time() {
                return Err(error);
            }
            let name = format!("helm.templateValues.{key}");
            let rendered = render(&name, &source, &context)?;
            let value: Value = serde_yaml_ng::from_str(&rendered)
                .map_err(|e| format!("{name}: the rendered template is not YAML: {e}"))?;
            values.insert(key, value);
        }
    }
    helm.values = (!values.is_empty()).then_some(values);
    Ok(helm)
}

fn render(name: &str, source: &str, context: &Value) -> Result<String, String> {
    let rendered =
        lariat_helm::engine::render_text(name, source, DELIMITERS, context, &TEMPLATE_BOUNDS)
            .map_err(|e| format!("{name}: {e}"))?;
    if rendered.contains(NO_VALUE) && !source.contains(NO_VALUE) {
        return Err(format!(
            "{name}: the template names a key this cluster does not have (a label, annotation or \
             templateValues key); Fleet fails such a template"
        ));
    }
    Ok(rendered)
}

/// Replaces each string `global.fleet.clusterLabels.<label>` with the label's value, in maps
/// and in maps within lists, as Fleet does.
fn substitute_labels(
    values: &mut Map<String, Value>,
    labels: &std::collections::BTreeMap<String, String>,
    depth: usize,
) -> Result<(), String> {
    if depth > MAX_LABEL_DEPTH {
        return Err(format!(
            "helm.values: nested more than {MAX_LABEL_DEPTH} deep for cluster label references"
        ));
    }
    for value in values.values_mut() {
        match value {
            Value::String(s) if s.starts_with(LABEL_PREFIX) => {
                let label = &s[LABEL_PREFIX.len()..];
                let found = labels.get(label).ok_or_else(|| {
                    format!("helm.values: {s}: the cluster has no label {label:?}")
                })?;
                *value = Value::String(found.clone());
            }
            Value::Object(map) => substitute_labels(map, labels, depth + 1)?,
            Value::Array(items) => {
                for item in items {
                    if let Value::Object(map) = item {
                        substitute_labels(map, labels, depth + 1)?;
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use lariat_api::fleet::FleetClusterSpec;

    fn cluster() -> FleetCluster {
        let mut cluster = FleetCluster::new("prod-eu", FleetClusterSpec::default());
        cluster.metadata.namespace = Some("fleet-default".into());
        cluster
            .labels_mut()
            .insert("region".into(), "eu-west-1".into());
        cluster.labels_mut().insert("env".into(), "prod".into());
        cluster.spec.template_values = Some(
            json!({"replicas": 3, "zones": ["a", "b"]})
                .as_object()
                .unwrap()
                .clone(),
        );
        cluster
    }

    fn later() -> std::time::Instant {
        std::time::Instant::now() + std::time::Duration::from_secs(10)
    }

    fn helm(values: Value) -> HelmOptions {
        HelmOptions {
            values: Some(values.as_object().unwrap().clone()),
            ..Default::default()
        }
    }

    #[test]
    fn values_are_rendered_with_the_clusters_labels_values_and_name() {
        let mut options = helm(json!({
            "region": "${ .ClusterLabels.region }",
            "name": "${ .ClusterName }.${ .ClusterNamespace }",
            "replicas": "${ .ClusterValues.replicas }",
            "tier": "${ if eq .ClusterLabels.env \"prod\" }gold${ else }bronze${ end }",
            "zones": "${ .ClusterValues.zones | toJson }",
            "literal": "{{ not a template }}",
            "plain": 7,
            "env": "global.fleet.clusterLabels.env",
        }));
        options.template_values = Some(
            [(
                "ingress".to_string(),
                "hosts:\n- ${ .ClusterName }.example.com".to_string(),
            )]
            .into(),
        );
        assert!(per_cluster(&options));
        let made = for_cluster(&options, &cluster(), later()).unwrap();
        assert_eq!(
            Value::Object(made.values.unwrap()),
            json!({
                "region": "eu-west-1",
                "name": "prod-eu.fleet-default",
                "replicas": 3,
                "tier": "gold",
                "zones": ["a", "b"],
                "literal": "{{ not a template }}",
                "plain": 7,
                "env": "prod",
                "ingress": {"hosts": ["prod-eu.example.com"]},
            })
        );
        assert!(made.template_values.is_none());
    }

    #[test]
    fn values_without_templates_are_shared_and_pre_processing_can_be_turned_off() {
        assert!(!per_cluster(&helm(
            json!({"a": "b", "c": [1, {"d": "{{ x }}"}]})
        )));
        let mut options = helm(json!({"a": "${ .ClusterName }"}));
        options.disable_pre_process = true;
        assert!(!per_cluster(&options));
        assert_eq!(
            for_cluster(&options, &cluster(), later())
                .unwrap()
                .values
                .unwrap()["a"],
            "${ .ClusterName }"
        );
    }

    #[test]
    fn a_key_the_cluster_lacks_or_a_broken_template_fails_with_its_name() {
        let error = for_cluster(
            &helm(json!({"a": "${ .ClusterLabels.nosuch }"})),
            &cluster(),
            later(),
        )
        .unwrap_err();
        assert!(error.contains("does not have"), "{error}");
        let error = for_cluster(
            &helm(json!({"a": "global.fleet.clusterLabels.nosuch"})),
            &cluster(),
            later(),
        )
        .unwrap_err();
        assert!(error.contains("no label \"nosuch\""), "{error}");
        let error =
            for_cluster(&helm(json!({"a": "${ .ClusterName "})), &cluster(), later()).unwrap_err();
        assert!(error.starts_with("helm.values: "), "{error}");
        let mut options = helm(json!({}));
        options.template_values = Some([("x".to_string(), "${ fail \"no\" }".to_string())].into());
        let error = for_cluster(&options, &cluster(), later()).unwrap_err();
        assert!(error.starts_with("helm.templateValues.x: "), "{error}");
    }

    #[test]
    fn templates_cannot_read_the_environment() {
        let error = for_cluster(
            &helm(json!({"a": "${ env \"HOME\" }"})),
            &cluster(),
            later(),
        )
        .unwrap_err();
        assert!(error.contains("env"), "{error}");
    }
}
