//! Agents follow a move to another lariat server: the source tells each connected agent the
//! target's URL, CA checksum and a registration token the target issued for its Cluster
//! (over its tunnel, as the Cluster's `handoff` subresource); the agent checks the target's
//! CA, keeps the new home in its cluster and registers there. An in-memory cluster's agent
//! runs in the server that hosts its simulation, so the target starts its own.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};

use super::copy::Server;
use super::graph::Graph;

/// How long a registration made for a handoff works: long enough for an agent that is
/// reconnecting anyway.
const TOKEN_TTL: Duration = Duration::from_secs(3600);
/// How long an agent may take to check the target and keep its new home.
const HANDOFF_WAIT: Duration = Duration::from_secs(15);
/// How long the move waits for handed-off agents to connect to the target.
const CONNECT_WAIT: Duration = Duration::from_secs(60);

/// What became of each cluster's agent.
#[derive(Default)]
pub struct Followed {
    pub connected: Vec<String>,
    /// Clusters whose agent must be imported again into the target, and why.
    pub reimport: Vec<(String, String)>,
}

fn connections() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "management.lariat.dev",
        "v1",
        "ClusterConnection",
    ))
}

async fn connected(server: &Server, namespace: &str, name: &str) -> bool {
    let api: Api<DynamicObject> =
        Api::namespaced_with(server.client.clone(), namespace, &connections());
    matches!(api.get_opt(name).await, Ok(Some(c)) if c.data["status"]["connected"] == true)
}

pub async fn hand_off(
    source: &Server,
    target: &Server,
    target_kubeconfig: &PathBuf,
    graph: &Graph,
) -> anyhow::Result<Followed> {
    let mut followed = Followed::default();
    let mut waiting = Vec::new();
    let mut home: Option<(String, String)> = None;
    for cluster in graph.clusters() {
        let (namespace, name) = (cluster.namespace(), cluster.name());
        if cluster.object.data["spec"]["infrastructureRef"]["kind"] == "InMemoryCluster" {
            continue;
        }
        let known: Api<DynamicObject> =
            Api::namespaced_with(source.client.clone(), namespace, &connections());
        let Some(connection) = known.get_opt(name).await.ok().flatten() else {
            // No agent ever connected (a cluster still coming up): nothing to follow.
            continue;
        };
        if connected(target, namespace, name).await {
            followed.connected.push(name.to_string());
            continue;
        }
        if connection.data["status"]["connected"] != true {
            followed.reimport.push((
                name.to_string(),
                "its agent is not connected to the source".into(),
            ));
            continue;
        }
        if target
            .served
            .discovery()
            .resolve_gvk(&GroupVersionKind::gvk(
                "management.lariat.dev",
                "v1",
                "ClusterRegistrationToken",
            ))
            .is_none()
        {
            followed.reimport.push((
                name.to_string(),
                "the target is not a lariat server: install an agent of its own there".into(),
            ));
            continue;
        }
        let (url, checksum) = match &home {
            Some(home) => home.clone(),
            None => {
                let url =
                    crate::import::server_url(&target.client, Some(target_kubeconfig)).await?;
                let ca = target
                    .client
                    .request_text(http::Request::get("/cacerts").body(Vec::new())?)
                    .await
                    .map_err(|e| crate::connect::refused(e, "read the target's CA"))?;
                let found = (url, lariat_apiserver::identity::sha256_hex(&ca));
                home = Some(found.clone());
                found
            }
        };
        let token = lariat_management::credentials::create_registration_token(
            &target.client,
            namespace,
            name,
            TOKEN_TTL,
        )
        .await
        .map_err(|e| anyhow::anyhow!("cannot register Cluster/{name} with the target: {e}"))?;
        let body = serde_json::json!({"server": url, "caChecksum": checksum, "token": token});
        let request = http::Request::post(format!(
            "/k8s/clusters/{namespace}/{name}{}",
            lariat_agent::HANDOFF_PATH
        ))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(serde_json::to_vec(&body)?)?;
        // Bounded: the client retries an agent that is unavailable, which here means gone.
        match tokio::time::timeout(HANDOFF_WAIT, source.client.request_text(request)).await {
            Ok(Ok(_)) => waiting.push((namespace.to_string(), name.to_string())),
            Ok(Err(kube::Error::Api(status))) => {
                followed.reimport.push((name.to_string(), status.message))
            }
            Ok(Err(e)) => followed.reimport.push((name.to_string(), e.to_string())),
            Err(_) => followed.reimport.push((
                name.to_string(),
                format!("its agent did not answer within {HANDOFF_WAIT:?}"),
            )),
        }
    }
    let deadline = Instant::now() + CONNECT_WAIT;
    while !waiting.is_empty() {
        let mut still = Vec::new();
        for (namespace, name) in waiting {
            if connected(target, &namespace, &name).await {
                followed.connected.push(name);
            } else {
                still.push((namespace, name));
            }
        }
        waiting = still;
        if Instant::now() > deadline {
            for (_, name) in waiting.drain(..) {
                followed.reimport.push((name, format!("its agent took the handoff but did not connect to the target within {CONNECT_WAIT:?}")));
            }
            break;
        }
        if !waiting.is_empty() {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    Ok(followed)
}
