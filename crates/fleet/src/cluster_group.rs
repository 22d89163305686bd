//! A ClusterGroup's status: the clusters its selector chooses in its namespace, which of them
//! are not ready, and their bundles summed (`kubectl get clustergroups` shows it).

use std::sync::Arc;

use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use lariat_api::fleet::{
    BundleSummary, ClusterGroup, ClusterGroupDisplay, ClusterGroupStatus, FleetCluster,
};
use lariat_controllers::Error;
use lariat_controllers::object::patch_status;

use crate::Context;
use crate::target::selects;

/// How many not-ready clusters a group names (as Fleet's, which names ten).
const NAMED: usize = 10;

pub async fn reconcile(group: Arc<ClusterGroup>, ctx: Arc<Context>) -> Result<Action, Error> {
    if group.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let namespace = group.namespace().unwrap_or_default();
    let clusters = ctx.caches.typed::<FleetCluster>();
    clusters.synced().await?;
    let mut members: Vec<Arc<FleetCluster>> = match group.spec.selector.as_ref() {
        // No selector chooses nothing, as for targets.
        None => Vec::new(),
        Some(selector) => clusters
            .store()
            .state()
            .into_iter()
            .filter(|c| c.metadata.namespace.as_deref() == Some(namespace.as_str()))
            .filter(|c| selects(selector, c.labels()))
            .collect(),
    };
    members.sort_by_key(|c| c.name_any());
    let before = group.status.clone().unwrap_or_default();
    let status = summarize(&before, &members);
    if status != before {
        let api: Api<ClusterGroup> = Api::namespaced(ctx.client.clone(), &namespace);
        let value = crate::conditions::status_patch(&before, &status)?;
        patch_status(&api, &group.name_any(), value).await?;
    }
    // Its clusters' changes wake it.
    Ok(lariat_controllers::resync())
}

fn summarize(before: &ClusterGroupStatus, members: &[Arc<FleetCluster>]) -> ClusterGroupStatus {
    let mut summary = BundleSummary::default();
    let mut not_ready: Vec<(String, String, String)> = Vec::new();
    for cluster in members {
        let status = cluster.status.clone().unwrap_or_default();
        if let Some(part) = &status.summary {
            summary += part;
        }
        let ready = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        if !ready {
            let state = status
                .display
                .and_then(|d| d.state)
                .unwrap_or_else(|| "WaitCheckIn".into());
            let message = status
                .conditions
                .iter()
                .flatten()
                .find(|c| c.type_ == "Ready")
                .and_then(|c| c.message.clone())
                .unwrap_or_default();
            not_ready.push((cluster.name_any(), state, message));
        }
    }
    let total = members.len();
    let ready = total - not_ready.len();
    let message = match not_ready.as_slice() {
        [] => String::new(),
        [(name, state, message)] => format!("{state} on {name}: {message}"),
        _ => format!(
            "{} of {total} clusters are not ready: {}",
            not_ready.len(),
            crate::conditions::first_names(not_ready.iter().map(|n| n.0.as_str()), not_ready.len())
        ),
    };
    let mut conditions = before.conditions.clone().unwrap_or_default();
    crate::conditions::set(
        &mut conditions,
        "Ready",
        not_ready.is_empty(),
        if not_ready.is_empty() { "" } else { "NotReady" },
        &message,
    );
    ClusterGroupStatus {
        cluster_count: total as i32,
        non_ready_cluster_count: not_ready.len() as i32,
        non_ready_clusters: (!not_ready.is_empty())
            .then(|| not_ready.iter().take(NAMED).map(|n| n.0.clone()).collect()),
        display: Some(ClusterGroupDisplay {
            ready_clusters: Some(format!("{ready}/{total}")),
            ready_bundles: Some(format!("{}/{}", summary.ready, summary.desired_ready)),
            state: not_ready.first().map(|n| n.1.clone()),
        }),
        summary: Some(summary),
        conditions: Some(conditions),
        ..before.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lariat_api::fleet::{FleetClusterStatus, FleetCondition};

    fn cluster(name: &str, ready: bool, bundles: (i32, i32)) -> Arc<FleetCluster> {
        let mut cluster = FleetCluster::new(name, Default::default());
        cluster.status = Some(FleetClusterStatus {
            summary: Some(BundleSummary {
                ready: bundles.0,
                desired_ready: bundles.1,
                ..Default::default()
            }),
            display: (!ready).then(|| lariat_api::fleet::FleetClusterDisplay {
                state: Some("NotReady".into()),
                ..Default::default()
            }),
            conditions: Some(vec![FleetCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                message: (!ready).then(|| "1 of 2 bundles are not ready".into()),
                ..Default::default()
            }]),
            ..Default::default()
        });
        Arc::new(cluster)
    }

    #[test]
    fn a_group_counts_its_clusters_and_names_those_not_ready() {
        let members = [
            cluster("a", true, (2, 2)),
            cluster("b", false, (1, 2)),
            cluster("c", true, (2, 2)),
        ];
        let status = summarize(&ClusterGroupStatus::default(), &members);
        assert_eq!(
            (status.cluster_count, status.non_ready_cluster_count),
            (3, 1)
        );
        assert_eq!(status.non_ready_clusters, Some(vec!["b".to_string()]));
        let display = status.display.unwrap();
        assert_eq!(display.ready_clusters.as_deref(), Some("2/3"));
        assert_eq!(display.ready_bundles.as_deref(), Some("5/6"));
        let ready = &status.conditions.unwrap()[0];
        assert_eq!(ready.status, "False");
        assert_eq!(
            ready.message.as_deref(),
            Some("NotReady on b: 1 of 2 bundles are not ready")
        );
        let empty = summarize(&ClusterGroupStatus::default(), &[]);
        assert_eq!(
            empty.display.unwrap().ready_clusters.as_deref(),
            Some("0/0")
        );
    }
}
