//! Which clusters a Bundle goes to: Fleet's targets (a cluster name, a label selector, a
//! ClusterGroup by name or by labels) and restrictions, and the first target that matches a
//! cluster decides what it gets.

use std::collections::BTreeMap;

use lariat_api::fleet::{BundleSpec, BundleTarget, ClusterGroup, FleetCluster, Target};

pub use lariat_api::fleet::selects;

/// The cluster's name and labels, as targets see them.
pub struct Candidate<'a> {
    pub name: &'a str,
    pub labels: &'a BTreeMap<String, String>,
}

impl<'a> Candidate<'a> {
    pub fn of(cluster: &'a FleetCluster) -> Candidate<'a> {
        static NONE: BTreeMap<String, String> = BTreeMap::new();
        Candidate {
            name: cluster.metadata.name.as_deref().unwrap_or_default(),
            labels: cluster.metadata.labels.as_ref().unwrap_or(&NONE),
        }
    }
}

/// Whether a target chooses the cluster: every criterion it sets must hold, and a target
/// that sets none chooses nothing.
pub fn chooses(target: &Target, cluster: &Candidate<'_>, groups: &[&ClusterGroup]) -> bool {
    let in_group = |group: &ClusterGroup| {
        group
            .spec
            .selector
            .as_ref()
            .is_some_and(|s| selects(s, cluster.labels))
    };
    let criteria = [
        target.cluster_name.as_ref().map(|n| n == cluster.name),
        target
            .cluster_selector
            .as_ref()
            .map(|s| selects(s, cluster.labels)),
        target.cluster_group.as_ref().map(|name| {
            groups
                .iter()
                .any(|g| g.metadata.name.as_deref() == Some(name.as_str()) && in_group(g))
        }),
        target.cluster_group_selector.as_ref().map(|selector| {
            groups.iter().any(|g| {
                let group_labels = g.metadata.labels.clone().unwrap_or_default();
                selects(selector, &group_labels) && in_group(g)
            })
        }),
    ];
    let set: Vec<bool> = criteria.into_iter().flatten().collect();
    !set.is_empty() && set.iter().all(|ok| *ok)
}

/// Why a target's selectors are not valid label selectors, if one is not (`clusterSelector:
/// ...` or `clusterGroupSelector: ...`).
pub fn target_problem(target: &Target) -> Option<String> {
    [
        ("clusterSelector", target.cluster_selector.as_ref()),
        (
            "clusterGroupSelector",
            target.cluster_group_selector.as_ref(),
        ),
    ]
    .into_iter()
    .find_map(|(field, selector)| {
        lariat_api::names::selector_problem(selector?).map(|e| format!("{field}: {e}"))
    })
}

/// The target of a Bundle that decides what `cluster` gets, or `None` when the bundle does not
/// go there (no target chooses it, a restriction excludes it, or its target says
/// `doNotDeploy`).
pub fn target_for<'s>(
    spec: &'s BundleSpec,
    cluster: &Candidate<'_>,
    groups: &[&ClusterGroup],
) -> Option<&'s BundleTarget> {
    if let Some(restrictions) = spec.target_restrictions.as_deref()
        && !restrictions.iter().any(|r| chooses(r, cluster, groups))
    {
        return None;
    }
    let target = spec
        .targets
        .iter()
        .flatten()
        .find(|t| chooses(&t.target, cluster, groups))?;
    (!target.do_not_deploy).then_some(target)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn selector(pairs: &[(&str, &str)]) -> LabelSelector {
        LabelSelector {
            match_labels: Some(labels(pairs)),
            ..Default::default()
        }
    }

    #[test]
    fn selectors_match_like_kubernetes() {
        let prod = labels(&[("env", "prod"), ("region", "eu")]);
        assert!(selects(&selector(&[("env", "prod")]), &prod));
        assert!(!selects(&selector(&[("env", "dev")]), &prod));
        assert!(selects(&LabelSelector::default(), &prod));
        let expression = |operator: &str, values: &[&str]| LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "region".into(),
                operator: operator.into(),
                values: Some(values.iter().map(|v| v.to_string()).collect()),
            }]),
            ..Default::default()
        };
        assert!(selects(&expression("In", &["eu", "us"]), &prod));
        assert!(!selects(&expression("NotIn", &["eu"]), &prod));
        assert!(selects(&expression("Exists", &[]), &prod));
        assert!(!selects(&expression("DoesNotExist", &[]), &prod));
        assert!(!selects(&expression("Near", &["eu"]), &prod));
    }

    #[test]
    fn the_first_matching_target_decides_within_the_restrictions() {
        let prod = labels(&[("env", "prod")]);
        let cluster = Candidate {
            name: "c1",
            labels: &prod,
        };
        let by_selector = |pairs: &[(&str, &str)]| Target {
            cluster_selector: Some(selector(pairs)),
            ..Default::default()
        };
        let spec = BundleSpec {
            targets: Some(vec![
                BundleTarget {
                    target: Target {
                        cluster_name: Some("c1".into()),
                        ..Default::default()
                    },
                    default_namespace: Some("special".into()),
                    ..Default::default()
                },
                BundleTarget {
                    target: by_selector(&[("env", "prod")]),
                    ..Default::default()
                },
            ]),
            target_restrictions: Some(vec![by_selector(&[("env", "prod")])]),
            ..Default::default()
        };
        let chosen = target_for(&spec, &cluster, &[]).unwrap();
        assert_eq!(chosen.default_namespace.as_deref(), Some("special"));
        let dev = labels(&[("env", "dev")]);
        let other = Candidate {
            name: "c1",
            labels: &dev,
        };
        assert!(target_for(&spec, &other, &[]).is_none(), "restricted");
        assert!(
            !chooses(&Target::default(), &cluster, &[]),
            "an empty target chooses nothing"
        );
        let group: ClusterGroup = serde_json::from_value(serde_json::json!({
            "apiVersion": "fleet.cattle.io/v1alpha1", "kind": "ClusterGroup",
            "metadata": {"name": "prod", "labels": {"tier": "gold"}},
            "spec": {"selector": {"matchLabels": {"env": "prod"}}},
        }))
        .unwrap();
        let by_group = Target {
            cluster_group: Some("prod".into()),
            ..Default::default()
        };
        assert!(chooses(&by_group, &cluster, &[&group]));
        assert!(!chooses(&by_group, &other, &[&group]));
        let by_group_labels = Target {
            cluster_group_selector: Some(selector(&[("tier", "gold")])),
            ..Default::default()
        };
        assert!(chooses(&by_group_labels, &cluster, &[&group]));
    }
}
