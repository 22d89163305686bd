//! Rendered templates into manifests as Helm orders them: documents split at `---`,
//! hooks (`helm.sh/hook`) set apart with their weights, the rest in Helm's install order
//! of kinds, and the text `helm template` prints.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::HelmError;
use crate::chart::Chart;

/// One document of a rendered template.
#[derive(Clone, Debug, PartialEq)]
pub struct Manifest {
    /// The template it came from (`chart/templates/x.yaml`).
    pub source: String,
    pub content: String,
    pub kind: String,
    pub name: String,
}

/// A document annotated as a hook.
#[derive(Clone, Debug, PartialEq)]
pub struct Hook {
    pub manifest: Manifest,
    /// `pre-install`, `post-upgrade`, `test`, ...
    pub events: Vec<String>,
    pub weight: i64,
    /// `before-hook-creation`, `hook-succeeded`, `hook-failed`.
    pub delete_policies: Vec<String>,
}

/// Helm's install order of kinds; kinds not listed go after, alphabetically.
const INSTALL_ORDER: &[&str] = &[
    "PriorityClass",
    "Namespace",
    "NetworkPolicy",
    "ResourceQuota",
    "LimitRange",
    "PodSecurityPolicy",
    "PodDisruptionBudget",
    "ServiceAccount",
    "Secret",
    "SecretList",
    "ConfigMap",
    "StorageClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleList",
    "ClusterRoleBinding",
    "ClusterRoleBindingList",
    "Role",
    "RoleList",
    "RoleBinding",
    "RoleBindingList",
    "Service",
    "DaemonSet",
    "Pod",
    "ReplicationController",
    "ReplicaSet",
    "Deployment",
    "HorizontalPodAutoscaler",
    "StatefulSet",
    "Job",
    "CronJob",
    "IngressClass",
    "Ingress",
    "APIService",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
];

const HOOK_EVENTS: &[&str] = &[
    "pre-install",
    "post-install",
    "pre-delete",
    "post-delete",
    "pre-upgrade",
    "post-upgrade",
    "pre-rollback",
    "post-rollback",
    "test",
    "test-success",
];

#[derive(Deserialize, Default)]
struct Head {
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    metadata: Option<HeadMetadata>,
}

#[derive(Deserialize, Default)]
struct HeadMetadata {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    annotations: Option<BTreeMap<String, serde_json::Value>>,
}

/// The documents of one rendered file, as Helm's `SplitManifests` cuts them.
pub fn split_documents(text: &str) -> Vec<String> {
    let mut documents = Vec::new();
    let mut current = String::new();
    for line in text.trim_start().split_inclusive('\n') {
        // Helm's separator, `(?m)^---[ \t]*`, takes `---` and the blanks after it.
        if let Some(rest) = line.strip_prefix("---") {
            documents.push(std::mem::take(&mut current));
            current.push_str(rest.trim_start_matches([' ', '\t']));
        } else {
            current.push_str(line);
        }
    }
    documents.push(current);
    documents
        .into_iter()
        .filter(|d| !d.trim().is_empty())
        .map(|d| d.trim_start().to_string())
        .collect()
}

/// Splits and orders rendered templates into hooks and manifests.
pub fn sort(files: &BTreeMap<String, String>) -> Result<(Vec<Hook>, Vec<Manifest>), HelmError> {
    let mut hooks = Vec::new();
    let mut manifests = Vec::new();
    for (source, text) in files {
        let base = source.rsplit('/').next().unwrap_or("");
        if base.starts_with('_') || text.trim().is_empty() {
            continue;
        }
        for content in split_documents(text) {
            let head: Head =
                serde_yaml_ng::from_str(&content).map_err(|e| HelmError::Template {
                    message: format!("YAML parse error on {source}: {e}"),
                })?;
            let metadata = head.metadata.unwrap_or_default();
            let annotations = metadata.annotations.unwrap_or_default();
            let manifest = Manifest {
                source: source.clone(),
                content,
                kind: head.kind.unwrap_or_default(),
                name: metadata.name.unwrap_or_default(),
            };
            let annotation = |key: &str| {
                annotations
                    .get(key)
                    .and_then(|v| v.as_str())
                    .map(str::to_string)
            };
            let Some(events) = annotation("helm.sh/hook") else {
                manifests.push(manifest);
                continue;
            };
            let events: Vec<String> = events.split(',').map(|e| e.trim().to_lowercase()).collect();
            if events.iter().any(|e| !HOOK_EVENTS.contains(&e.as_str())) {
                // Helm skips a document whose hook it does not know.
                continue;
            }
            let list = |key: &str| {
                annotation(key)
                    .map(|v| {
                        v.split(',')
                            .map(|p| p.trim().to_lowercase())
                            .filter(|p| !p.is_empty())
                            .collect()
                    })
                    .unwrap_or_default()
            };
            hooks.push(Hook {
                weight: annotation("helm.sh/hook-weight")
                    .and_then(|w| w.trim().parse().ok())
                    .unwrap_or(0),
                delete_policies: list("helm.sh/hook-delete-policy"),
                events,
                manifest,
            });
        }
    }
    manifests.sort_by(|a, b| kind_order(&a.kind, &b.kind));
    hooks.sort_by(|a, b| kind_order(&a.manifest.kind, &b.manifest.kind));
    Ok((hooks, manifests))
}

/// Helm's install order of two kinds.
pub fn kind_order(a: &str, b: &str) -> std::cmp::Ordering {
    let rank = |k: &str| INSTALL_ORDER.iter().position(|x| *x == k);
    match (rank(a), rank(b)) {
        (Some(x), Some(y)) => x.cmp(&y),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

/// What `helm template` prints: the CRDs when asked, the manifests in install order, then
/// the hooks (tests left out when asked).
pub fn template_output(
    rendered: &crate::Rendered,
    include_crds: bool,
    skip_tests: bool,
) -> Result<String, HelmError> {
    let (hooks, manifests) = sort(&rendered.files)?;
    let mut body = String::new();
    if include_crds {
        for (source, data) in &rendered.crds {
            body.push_str(&format!(
                "---\n# Source: {source}\n{}\n",
                String::from_utf8_lossy(data)
            ));
        }
    }
    for m in &manifests {
        body.push_str(&format!("---\n# Source: {}\n{}\n", m.source, m.content));
    }
    let mut out = format!("{}\n", body.trim());
    for hook in &hooks {
        if skip_tests
            && hook
                .events
                .iter()
                .any(|e| e == "test" || e == "test-success")
        {
            continue;
        }
        out.push_str(&format!(
            "---\n# Source: {}\n{}\n",
            hook.manifest.source, hook.manifest.content
        ));
    }
    Ok(out)
}

/// The CRDs of a chart and its subcharts, by their path under the top chart.
pub fn crds_with_subcharts(chart: &Chart, prefix: &str) -> Vec<(String, Vec<u8>)> {
    let path = format!("{prefix}{}", chart.name());
    let mut out: Vec<(String, Vec<u8>)> = chart
        .crds()
        .map(|f| (format!("{path}/{}", f.name), f.data.clone()))
        .collect();
    for sub in &chart.dependencies {
        out.extend(crds_with_subcharts(sub, &format!("{path}/charts/")));
    }
    out
}
