//! Agents for in-memory clusters. A provisioned cluster gets an agent once its control plane
//! is up (Rancher's seed: the agent is deployed, dials home and registers the cluster). A real
//! cluster runs it as a Deployment from the import manifest; an in-memory cluster has no
//! kubelet, so its agent runs in this process against the simulated API, through the same
//! code: a registration token, a TLS connection to the server's own address checked against
//! the CA checksum, the upgrade, and the credential kept in the simulated cluster.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::controller::Action;
use lariat_api::capi::Cluster;
use lariat_controllers::Error;
use tokio::sync::watch;

use crate::{Context, cluster_key};

/// Where agents dial: the server's own HTTPS address and its CA checksum.
#[derive(Clone)]
pub struct Home {
    pub server: String,
    pub ca_checksum: String,
}

#[derive(Default)]
pub struct Agents {
    running: Mutex<HashMap<String, watch::Sender<bool>>>,
}

impl Agents {
    fn stop(&self, cluster: &str) {
        if let Some(stop) = self.running.lock().expect("lock").remove(cluster) {
            let _ = stop.send(true);
        }
    }
}

/// How long the token an in-process agent registers with lives: it is used within seconds.
const TOKEN_TTL: Duration = Duration::from_secs(600);

/// Reconciles a Cluster: runs an agent for it while it is an in-memory cluster whose control
/// plane is initialized, and stops the agent when the Cluster goes.
pub async fn reconcile(cluster: Arc<Cluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    let Some(home) = ctx.home.clone() else {
        return Ok(Action::await_change());
    };
    let namespace = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    let key = format!("{namespace}/{name}");
    let infrastructure = cluster.spec.infrastructure_ref.clone().unwrap_or_default();
    let in_memory = infrastructure.kind.as_deref() == Some("InMemoryCluster");
    let initialized = cluster
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.is_true("ControlPlaneInitialized")));
    if !in_memory || cluster.metadata.deletion_timestamp.is_some() {
        ctx.agents.stop(&key);
        return Ok(Action::await_change());
    }
    if !initialized || ctx.agents.running.lock().expect("lock").contains_key(&key) {
        return Ok(Action::await_change());
    }
    let simulated = cluster_key(
        &namespace,
        infrastructure.name.as_deref().unwrap_or_default(),
    );
    let Some(downstream) = ctx.clusters.client(&simulated) else {
        return Ok(Action::requeue(Duration::from_secs(1)));
    };
    let token = lariat_management::credentials::create_registration_token(
        &ctx.client,
        &namespace,
        &name,
        TOKEN_TTL,
    )
    .await?;
    let (stop, mut stopped) = watch::channel(false);
    ctx.agents
        .running
        .lock()
        .expect("lock")
        .insert(key.clone(), stop);
    tracing::info!(cluster = %key, "starting the in-process agent of an in-memory cluster");
    tokio::spawn(lariat_agent::run(
        lariat_agent::Config::new(home.server, token, home.ca_checksum, downstream),
        async move {
            let _ = stopped.wait_for(|s| *s).await;
        },
    ));
    Ok(Action::await_change())
}
