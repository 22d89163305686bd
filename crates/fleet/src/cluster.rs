//! Fleet's Clusters: one for every lariat Cluster (cluster.x-k8s.io), same namespace and
//! name, owned by it and carrying its labels, so targets choose clusters by the labels users
//! put on the Clusters they manage. Each gets a namespace of its own for its
//! BundleDeployments (`cluster-<namespace>-<name>-<hash>`, as Fleet's), which its agent reads
//! and nothing else does.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use lariat_api::capi::Cluster;
use lariat_api::fleet::{
    AgentStatus, BundleDeployment, BundleSummary, FleetCluster, FleetClusterDisplay,
    FleetClusterSpec,
};
use lariat_controllers::Error;
use lariat_controllers::object::{owner_reference, patch_status, remove_finalizer};
use serde_json::{Value, json};

use crate::Context;

/// Kept on a Fleet Cluster until its BundleDeployments' namespace is deleted.
pub const FINALIZER: &str = "fleet.cattle.io/cluster-finalizer";
/// On a cluster's namespace: whose it is.
pub const CLUSTER_NAMESPACE_LABEL: &str = "fleet.cattle.io/cluster-namespace";
pub const CLUSTER_NAME_LABEL: &str = "fleet.cattle.io/cluster";

pub use lariat_api::fleet::cluster_namespace;

/// Keeps the Fleet Cluster of a lariat Cluster, and its namespace.
pub async fn mirror(cluster: Arc<Cluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    if cluster.metadata.deletion_timestamp.is_some() {
        // The garbage collector deletes its Fleet Cluster; that one's finalizer the namespace.
        return Ok(Action::await_change());
    }
    let namespace = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    let own_namespace = cluster_namespace(&namespace, &name);
    let api: Api<FleetCluster> = Api::namespaced(ctx.client.clone(), &namespace);
    let labels = cluster.labels().clone();
    let existing = ctx
        .caches
        .typed::<FleetCluster>()
        .get(&namespace, &name)
        .await?;
    let fleet = match existing {
        None => {
            let owner = serde_json::from_value(owner_reference(cluster.as_ref(), true))
                .map_err(|e| Error::Invalid(e.to_string()))?;
            let object = FleetCluster {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some(namespace.clone()),
                    labels: Some(labels.clone()),
                    owner_references: Some(vec![owner]),
                    finalizers: Some(vec![FINALIZER.to_string()]),
                    ..Default::default()
                },
                spec: FleetClusterSpec::default(),
                status: None,
            };
            match api.create(&PostParams::default(), &object).await {
                Ok(created) => created,
                // Made meanwhile (the cache lags): the next change brings it back.
                Err(kube::Error::Api(e)) if e.code == 409 => return Ok(Action::await_change()),
                Err(e) => return Err(e.into()),
            }
        }
        Some(fleet) => {
            if fleet.labels() != &labels {
                // A merge patch: labels the Cluster lost are removed (null).
                let mut patch: serde_json::Map<String, Value> = fleet
                    .labels()
                    .keys()
                    .filter(|k| !labels.contains_key(*k))
                    .map(|k| (k.clone(), Value::Null))
                    .collect();
                patch.extend(labels.iter().map(|(k, v)| (k.clone(), json!(v))));
                api.patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"labels": patch}})),
                )
                .await?;
            }
            (*fleet).clone()
        }
    };
    // Its namespace, from the cache: made again if someone deleted it (its deletion wakes
    // this).
    if ctx
        .caches
        .typed::<Namespace>()
        .get("", &own_namespace)
        .await?
        .is_none_or(|n| n.metadata.deletion_timestamp.is_some())
    {
        let namespaces: Api<Namespace> = Api::all(ctx.client.clone());
        let object = Namespace {
            metadata: ObjectMeta {
                name: Some(own_namespace.clone()),
                labels: Some(BTreeMap::from([
                    (CLUSTER_NAMESPACE_LABEL.to_string(), namespace.clone()),
                    (CLUSTER_NAME_LABEL.to_string(), name.clone()),
                ])),
                ..Default::default()
            },
            ..Default::default()
        };
        match namespaces.create(&PostParams::default(), &object).await {
            Ok(_) => {}
            // Exists, or still being deleted: the next change of it brings this back.
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    if fleet.status.as_ref().and_then(|s| s.namespace.as_deref()) != Some(own_namespace.as_str()) {
        patch_status(&api, &name, json!({"namespace": own_namespace})).await?;
    }
    Ok(lariat_controllers::resync())
}

/// A Fleet Cluster's status: how many of its BundleDeployments are ready (`kubectl get
/// clusters.fleet.cattle.io` shows it). Going: its BundleDeployments' namespace goes with it.
pub async fn reconcile(fleet: Arc<FleetCluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    if fleet.metadata.deletion_timestamp.is_none() {
        let Some(own) = fleet.status.as_ref().and_then(|s| s.namespace.clone()) else {
            return Ok(Action::await_change());
        };
        let deployments = ctx.caches.typed::<BundleDeployment>();
        deployments.synced().await?;
        let mine: Vec<_> = deployments
            .store()
            .state()
            .into_iter()
            .filter(|bd| bd.metadata.namespace.as_deref() == Some(own.as_str()))
            .collect();
        let ready = mine
            .iter()
            .filter(|bd| {
                crate::bundle::is_ready(bd.status.as_ref(), bd.spec.deployment_id.as_deref())
            })
            .count() as i32;
        let desired = mine.len() as i32;
        let before = fleet.status.clone().unwrap_or_default();
        let mut status = before.clone();
        status.summary = Some(BundleSummary {
            desired_ready: desired,
            ready,
            ..before.summary.clone().unwrap_or_default()
        });
        let agent = Agent::of(&ctx, &fleet);
        let recorded = before.agent.as_ref().and_then(|a| a.last_seen.as_deref());
        status.agent = Some(AgentStatus {
            last_seen: agent.last_seen(recorded),
            ..before.agent.clone().unwrap_or_default()
        });
        let (state, reason, message) = match agent.heartbeat.as_deref() {
            None => (
                Some("WaitCheckIn"),
                "WaitCheckIn",
                "its agent has not connected yet".to_string(),
            ),
            Some(at) if !agent.connected => (
                Some("Offline"),
                "Offline",
                format!("its agent is disconnected (last seen {at})"),
            ),
            Some(_) if ready < desired => (
                Some("NotReady"),
                "NotReady",
                format!("{} of {desired} bundles are not ready", desired - ready),
            ),
            Some(_) => (None, "", String::new()),
        };
        status.display = Some(FleetClusterDisplay {
            ready_bundles: Some(format!("{ready}/{desired}")),
            state: state.map(str::to_string),
        });
        let mut list = status.conditions.take().unwrap_or_default();
        crate::conditions::set(&mut list, "Ready", state.is_none(), reason, &message);
        status.conditions = Some(list);
        if status != before {
            let namespace = fleet.namespace().unwrap_or_default();
            let api: Api<FleetCluster> = Api::namespaced(ctx.client.clone(), &namespace);
            let value = crate::conditions::status_patch(&before, &status)?;
            patch_status(&api, &fleet.name_any(), value).await?;
        }
        // Its BundleDeployments' changes wake it.
        return Ok(lariat_controllers::resync());
    }
    let namespace = fleet.namespace().unwrap_or_default();
    let own = cluster_namespace(&namespace, &fleet.name_any());
    let namespaces: Api<Namespace> = Api::all(ctx.client.clone());
    match namespaces.delete(&own, &Default::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    let api: Api<FleetCluster> = Api::namespaced(ctx.client.clone(), &namespace);
    remove_finalizer(&api, &fleet, FINALIZER).await?;
    Ok(Action::await_change())
}

/// How often a connected agent's `lastSeen` is brought up to date: Fleet's agents check in
/// every 15 minutes. A disconnection records its last heartbeat at once.
pub const CHECK_IN: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// A cluster's agent, as its tunnel's ClusterConnection tells.
pub struct Agent {
    pub connected: bool,
    /// Its last heartbeat (RFC 3339); none if it never connected.
    pub heartbeat: Option<String>,
}

impl Agent {
    pub fn of(ctx: &Context, fleet: &FleetCluster) -> Agent {
        let connection = ctx
            .caches
            .of(&lariat_api::management::cluster_connection_resource())
            .get_now(
                fleet.metadata.namespace.as_deref().unwrap_or_default(),
                &fleet.name_any(),
            );
        Agent::from_connection(connection.as_ref().map(|c| &c.data["status"]))
    }

    pub fn from_connection(status: Option<&Value>) -> Agent {
        Agent {
            connected: status.is_some_and(|s| s["connected"] == true),
            heartbeat: status
                .and_then(|s| s["lastHeartbeat"].as_str())
                .map(str::to_string),
        }
    }

    /// The `lastSeen` to record, given the one recorded: the last heartbeat when the agent
    /// is gone, and while it is connected, a new one every [`CHECK_IN`] (the ClusterConnection's
    /// heartbeat moves as often; a write for each would be for nothing).
    pub fn last_seen(&self, recorded: Option<&str>) -> Option<String> {
        let Some(heartbeat) = self.heartbeat.as_deref() else {
            return recorded.map(str::to_string);
        };
        let parse = |t: &str| chrono::DateTime::parse_from_rfc3339(t).ok();
        let due = match (recorded.and_then(parse), parse(heartbeat)) {
            (Some(recorded), Some(heartbeat)) if self.connected => {
                (heartbeat - recorded).to_std().is_ok_and(|d| d >= CHECK_IN)
            }
            _ => recorded != Some(heartbeat),
        };
        Some(
            if due {
                heartbeat
            } else {
                recorded.unwrap_or(heartbeat)
            }
            .to_string(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_seen_follows_check_ins_not_every_heartbeat() {
        let agent = |connected: bool, heartbeat: &str| Agent {
            connected,
            heartbeat: Some(heartbeat.to_string()),
        };
        let at = "2026-12-01T10:00:00Z";
        assert_eq!(agent(true, at).last_seen(None).as_deref(), Some(at));
        // A minute later, still connected: unchanged.
        let later = "2026-12-01T10:01:00Z";
        assert_eq!(agent(true, later).last_seen(Some(at)).as_deref(), Some(at));
        // Fifteen minutes later: checked in.
        let check_in = "2026-12-01T10:15:00Z";
        assert_eq!(
            agent(true, check_in).last_seen(Some(at)).as_deref(),
            Some(check_in)
        );
        // Gone: its last heartbeat, at once.
        assert_eq!(
            agent(false, later).last_seen(Some(at)).as_deref(),
            Some(later)
        );
        // Never connected: nothing to say.
        let never = Agent::from_connection(None);
        assert_eq!(never.last_seen(None), None);
        assert!(!never.connected);
    }

    #[test]
    fn cluster_namespaces_are_unique_and_short_enough() {
        let a = cluster_namespace("fleet-default", "prod-us-east");
        assert!(a.starts_with("cluster-fleet-default-prod-us-east-"), "{a}");
        assert_ne!(a, cluster_namespace("fleet-default", "prod-us-west"));
        let long = cluster_namespace("fleet-default", &"x".repeat(80));
        assert!(long.len() <= 63, "{long}");
        assert_ne!(long, cluster_namespace("fleet-default", &"x".repeat(81)));
    }
}
