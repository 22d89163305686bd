//! The reporter: what the agents' connections look like, written where a user looks. Every
//! replica reports the tunnels it holds (a ClusterConnection per Cluster naming the replica,
//! and the Cluster's `Connected` condition), at once when one opens or closes or a cluster's
//! Nodes change (watched through the tunnel, `nodes.rs`), and looks again every [`HEARTBEAT`]
//! besides; the leader also reports the clusters no live replica holds, and collects expired
//! registration tokens and orphaned credentials.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::header;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use lariat_api::management::{self, NAMESPACE};
use lariat_apiserver::extension::Handle;
use lariat_apiserver::replicas::Replicas;
use serde_json::json;

use crate::credentials::CLUSTER_LABEL;
use crate::hub::{Tunnel, Tunnels};
use crate::nodes::{self, NodeWatch};
use crate::records::{Records, cluster_resource};

/// The Cluster condition that warns of an agent newer than the server.
pub const AGENT_VERSION_CONDITION: &str = "AgentVersionSupported";

/// How often the server looks at every Cluster's tunnel. A lost connection shows within this
/// plus HTTP/2's keep-alive timeout (10 s pings, 10 s to answer): under 30 s.
pub const HEARTBEAT: Duration = Duration::from_secs(10);
/// How often a connected cluster's version is asked and its `lastHeartbeat` written (a
/// check-in): Fleet's agents check in every 15 minutes, and a write per cluster per minute was
/// 17 writes a second at 1,000 idle clusters. What changes is written at once: a connection
/// opening or closing, its Nodes (watched), an API that stops answering. A check-in that
/// fails is tried again on the next pass.
const HEARTBEAT_WRITE: Duration = Duration::from_secs(15 * 60);

/// Reports the connections of the agents whose tunnels this replica holds: a
/// ClusterConnection per Cluster with an agent (or imported) naming this replica in
/// `status.replica`, and the Cluster's `Connected` condition, until `stop`. Every replica runs
/// it for its own tunnels, at once when one connects or closes and every [`HEARTBEAT`]
/// besides; the replica that leads (`leader`, whose writes are fenced) also reports the
/// clusters no live replica holds as disconnected, and collects expired tokens and orphaned
/// credentials.
pub(crate) async fn report(
    tunnels: Arc<Tunnels>,
    records: Arc<Records>,
    server: Handle,
    replicas: Arc<Replicas>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let client = server.client();
    let leader = (server.leadership(), server.controller_client());
    let mut ticker = tokio::time::interval(HEARTBEAT);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut held = Held::default();
    let mut collected: Option<Instant> = None;
    let mut last_error: Option<String> = None;
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = ticker.tick() => {}
            _ = tunnels.changed.notified() => {}
        }
        let (leadership, leader_client) = &leader;
        let leading = leadership.holds().then_some(leader_client);
        let collect =
            leading.is_some() && collected.is_none_or(|at| at.elapsed() >= GARBAGE_INTERVAL);
        if collect {
            collected = Some(Instant::now());
        }
        let pass = Pass {
            tunnels: &tunnels,
            replicas: &replicas,
            records: &records,
            client: &client,
            leader: leading,
        };
        match pass.run(&mut held, collect).await {
            Ok(()) => last_error = None,
            Err(error) => {
                if last_error.as_ref() != Some(&error) {
                    tracing::warn!(%error, "cannot report agent connections");
                }
                last_error = Some(error);
            }
        }
        // Connections arriving in a crowd are reported together, at most a pass a second.
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// How often the leader deletes expired registration tokens and orphaned credentials.
const GARBAGE_INTERVAL: Duration = Duration::from_secs(60);

/// The watch of the Nodes of each cluster whose tunnel this replica holds (by Cluster,
/// `namespace/name`). A watch holds its tunnel open: it goes as soon as the tunnel is no
/// longer held.
#[derive(Default)]
struct Held {
    nodes: HashMap<String, NodeWatch>,
}

/// One reporting pass of one replica.
struct Pass<'a> {
    tunnels: &'a Tunnels,
    replicas: &'a Replicas,
    records: &'a Records,
    /// This replica's writes (its own tunnels).
    client: &'a kube::Client,
    /// The leader's fenced writes, when this replica leads.
    leader: Option<&'a kube::Client>,
}

/// Who reports a Cluster's connection in a pass, and with which client.
enum Reporter {
    /// This replica holds the tunnel.
    Holder(Tunnel),
    /// This replica held it, and lost it.
    FormerHolder,
    /// No live replica holds it: the leader says so.
    Leader,
}

impl Pass<'_> {
    /// One pass over every Cluster: the connection state of those this replica reports (its
    /// Nodes as watched; its version asked through the tunnel on connecting and every
    /// [`HEARTBEAT_WRITE`]), and, when `collect`, the garbage of expired tokens and orphaned
    /// credentials.
    async fn run(&self, held: &mut Held, collect: bool) -> Result<(), String> {
        held.nodes.retain(|k, _| self.tunnels.is_connected(k));
        if !self.records.ready().await {
            return Err("the Clusters and ClusterConnections are not listed yet".into());
        }
        let mut known: HashMap<String, Arc<DynamicObject>> = self
            .records
            .connections()
            .into_iter()
            .map(|c| (object_key(&c), c))
            .collect();
        let clusters = self.records.clusters();
        // A tunnel outlives neither its Cluster nor a re-import under the same name. A Cluster
        // the watch has not brought yet is looked for in the store before its tunnel closes.
        let existing: std::collections::HashSet<String> =
            clusters.iter().map(|c| object_key(c)).collect();
        for connected in self.tunnels.keys() {
            if !existing.contains(&connected) && !cluster_stored(self.client, &connected).await? {
                self.tunnels.disconnect(&connected);
            }
        }
        if collect
            && let Some(leader) = self.leader
            && let Err(error) = collect_garbage(leader, &existing).await
        {
            tracing::warn!(%error, "cannot collect expired tokens and orphaned credentials");
        }
        let me = self.replicas.identity();
        let mut work = vec![];
        for cluster in clusters {
            if cluster.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let key = object_key(&cluster);
            let imported = cluster
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(management::IMPORTED_ANNOTATION));
            let existing = known.remove(&key);
            let status = existing.as_ref().map(|c| &c.data["status"]);
            let connected = status.is_some_and(|s| s["connected"] == true);
            let holder = status
                .and_then(|s| s["replica"].as_str())
                .unwrap_or_default();
            let elsewhere = connected && holder != me && self.replicas.is_live(holder);
            let reporter = match self.tunnels.get(&key) {
                // An agent keeps one tunnel: when the record shows a newer one on another
                // replica, this one is what is left of the agent's last connection.
                Some(tunnel) if elsewhere && !newer_than_record(&tunnel, status) => {
                    tracing::info!(cluster = %key, holder, "the agent reconnected to another replica; closing its old tunnel here");
                    self.tunnels.disconnect_stale(&key, tunnel.id);
                    continue;
                }
                Some(tunnel) => Reporter::Holder(tunnel),
                None if elsewhere => continue,
                None if connected && holder == me => Reporter::FormerHolder,
                None if self.leader.is_some() && (existing.is_some() || imported) => {
                    Reporter::Leader
                }
                None => continue,
            };
            let (ask, nodes) = match &reporter {
                // The version is asked on connecting (a reconnection the record missed
                // included: HEARTBEAT then shows the new connection, not the old one's last
                // check-in), then at each check-in: not on every pass, which in a
                // reconnection storm come each second, for thousands.
                Reporter::Holder(tunnel) => {
                    let ask = !connected
                        || holder != me
                        || newer_than_record(tunnel, status)
                        || status.is_none_or(|s| heartbeat_due(&s["lastHeartbeat"]));
                    let watch = match held.nodes.remove(&key) {
                        Some(watch) if watch.tunnel == tunnel.id => watch,
                        _ => NodeWatch::start(tunnel, self.tunnels.changed.clone()),
                    };
                    let nodes = watch.seen();
                    held.nodes.insert(key.clone(), watch);
                    (ask, nodes)
                }
                _ => (false, None),
            };
            work.push((key, cluster, existing, reporter, ask, nodes));
        }
        use futures::StreamExt;
        futures::stream::iter(work)
            .for_each_concurrent(
                64,
                |(key, cluster, existing, reporter, ask, nodes)| async move {
                    let (client, tunnel) = match reporter {
                        Reporter::Holder(tunnel) => (self.client, Some(tunnel)),
                        Reporter::FormerHolder => (self.client, None),
                        Reporter::Leader => (self.leader.unwrap_or(self.client), None),
                    };
                    let known = Known { ask, nodes };
                    if let Err(error) =
                        report_cluster(client, &cluster, existing.as_deref(), tunnel, known, me)
                            .await
                    {
                        tracing::warn!(cluster = %key, %error, "cannot report the agent connection");
                    }
                },
            )
            .await;
        held.nodes.retain(|k, _| self.tunnels.is_connected(k));
        Ok(())
    }
}

/// Whether the Cluster `key` (`namespace/name`) is in the store, read past the cache: what
/// the cache misses may be only a moment old.
async fn cluster_stored(client: &kube::Client, key: &str) -> Result<bool, String> {
    let (namespace, name) = key.split_once('/').unwrap_or_default();
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &cluster_resource());
    clusters
        .get_opt(name)
        .await
        .map(|c| c.is_some())
        .map_err(|e| format!("cannot read Cluster {key}: {e}"))
}

/// `namespace/name`, the key tunnels are held under.
fn object_key(object: &DynamicObject) -> String {
    format!(
        "{}/{}",
        object.metadata.namespace.as_deref().unwrap_or_default(),
        object.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Records in the Cluster `key`'s ClusterConnection that this replica holds its agent's new
/// `tunnel`, as the agent connects, so the other replicas forward its requests here from then
/// on rather than after the next report pass, which first asks each new tunnel's cluster for
/// its figures: seconds, in a reconnection storm. A record another replica wrote meanwhile is
/// read again, twice at most; what is left is the reporter's.
pub(crate) async fn record_new_tunnel(
    client: kube::Client,
    replicas: Arc<Replicas>,
    records: Arc<Records>,
    key: String,
    tunnel: Tunnel,
) {
    let (namespace, name) = key.split_once('/').unwrap_or_default();
    let connections: Api<DynamicObject> = Api::namespaced_with(
        client,
        namespace,
        &management::cluster_connection_resource(),
    );
    let me = replicas.identity();
    let mut record = records.connection(namespace, name);
    for _ in 0..3 {
        // No record yet: the reporter creates it, naming this replica.
        let Some(current) = record else { return };
        if current.data["status"]["replica"] == me {
            return;
        }
        let mut claimed = (*current).clone();
        if !claimed.data["status"].is_object() {
            claimed.data["status"] = json!({});
        }
        let status = &mut claimed.data["status"];
        status["replica"] = json!(me);
        status["agentVersion"] = json!(tunnel.agent_version);
        status["connectedSince"] = json!(tunnel_since(&tunnel));
        match connections
            .replace_status(name, &PostParams::default(), &claimed)
            .await
        {
            Ok(_) => return,
            Err(kube::Error::Api(e)) if e.code == 409 => {
                record = connections.get_opt(name).await.ok().flatten().map(Arc::new);
            }
            Err(error) => {
                tracing::warn!(cluster = %key, %error, "cannot record which replica holds the agent's tunnel; the reporter will");
                return;
            }
        }
    }
}

/// When `tunnel` came up, as a ClusterConnection records it (to the second).
fn tunnel_since(tunnel: &Tunnel) -> String {
    let since =
        chrono::Utc::now() - chrono::Duration::from_std(tunnel.since.elapsed()).unwrap_or_default();
    since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Whether `tunnel` came after the connection a ClusterConnection's status records (to the
/// second it is recorded in).
fn newer_than_record(tunnel: &Tunnel, status: Option<&serde_json::Value>) -> bool {
    let recorded = status
        .and_then(|s| s["connectedSince"].as_str())
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok());
    let since =
        chrono::Utc::now() - chrono::Duration::from_std(tunnel.since.elapsed()).unwrap_or_default();
    recorded.is_none_or(|at| since.timestamp() > at.timestamp())
}

/// Deletes registration tokens past their expiry and credentials of Clusters that are gone,
/// so neither outlives its use.
async fn collect_garbage(
    client: &kube::Client,
    existing: &std::collections::HashSet<String>,
) -> kube::Result<()> {
    let tokens: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NAMESPACE,
        &management::registration_token_resource(),
    );
    for token in tokens.list(&Default::default()).await?.items {
        let expired = token.data["spec"]["expirationTimestamp"]
            .as_str()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .is_none_or(|t| t < chrono::Utc::now());
        if expired {
            let _ = tokens
                .delete(
                    token.metadata.name.as_deref().unwrap_or_default(),
                    &Default::default(),
                )
                .await;
        }
    }
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    for secret in secrets
        .list(&ListParams::default().labels(CLUSTER_LABEL))
        .await?
        .items
    {
        let owner = secret
            .data
            .as_ref()
            .and_then(|d| d.get("cluster"))
            .map(|v| String::from_utf8_lossy(&v.0).to_string())
            .unwrap_or_default();
        if !existing.contains(&owner) && !cluster_stored(client, &owner).await.unwrap_or(true) {
            tracing::info!(cluster = %owner, "deleting the agent credential of a deleted cluster");
            let _ = secrets
                .delete(
                    secret.metadata.name.as_deref().unwrap_or_default(),
                    &Default::default(),
                )
                .await;
        }
    }
    Ok(())
}

async fn get_json(tunnel: &Tunnel, path: &str) -> Result<serde_json::Value, String> {
    // The whole exchange, body included, is bounded in time and size: one stalled or
    // flooding agent must not hold up the reporter for every other cluster.
    tokio::time::timeout(Duration::from_secs(5), async {
        let mut sender = tunnel.sender.clone();
        sender.ready().await.map_err(|e| e.to_string())?;
        let request = axum::http::Request::get(format!("http://agent{path}"))
            .header(header::ACCEPT, "application/json")
            .body(Body::empty())
            .map_err(|e| e.to_string())?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let body = http_body_util::BodyExt::collect(http_body_util::Limited::new(
            response.into_body(),
            16 * 1024 * 1024,
        ))
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
        if !status.is_success() {
            return Err(format!("{path}: {status}"));
        }
        serde_json::from_slice(&body).map_err(|e| e.to_string())
    })
    .await
    .map_err(|_| format!("{path}: no answer within 5s"))?
}

/// Whether a connected cluster's check-in is due, given its recorded `lastHeartbeat`.
fn heartbeat_due(last: &serde_json::Value) -> bool {
    last.as_str()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .is_none_or(|t| {
            (chrono::Utc::now() - t.with_timezone(&chrono::Utc))
                .to_std()
                .unwrap_or_default()
                >= HEARTBEAT_WRITE
        })
}

/// The cluster's Kubernetes version, asked through the tunnel.
async fn version(tunnel: &Tunnel) -> Result<String, String> {
    let version = get_json(tunnel, "/version").await?;
    Ok(version["gitVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string())
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The warning condition for a Cluster whose agent runs `agent_version`, if it is newer than
/// this server (the matrix serves it, and asks for the replicas' upgrade); `since` is when an
/// earlier warning began.
fn agent_version_warning(agent_version: &str, since: Option<String>) -> Option<serde_json::Value> {
    let server = lariat_api::support::LARIAT;
    match lariat_api::support::agent_skew(server, Some(agent_version)) {
        lariat_api::support::AgentSkew::Newer => Some(json!({
            "type": AGENT_VERSION_CONDITION, "status": "False", "severity": "Warning",
            "reason": "AgentNewerThanServer", "lastTransitionTime": since.unwrap_or_else(now),
            "message": format!("the agent runs lariat v{agent_version}, newer than this server's v{server}: upgrade the server replicas (lariat version --matrix)"),
        })),
        _ => None,
    }
}

/// What a pass knows of a held tunnel's cluster: whether to ask its version, and its Nodes as
/// watched.
struct Known {
    ask: bool,
    nodes: nodes::Seen,
}

/// Writes one Cluster's ClusterConnection and `Connected` condition: what `known` says of it
/// (the version asked through the tunnel when `known.ask`), the last figures otherwise.
async fn report_cluster(
    client: &kube::Client,
    cluster: &DynamicObject,
    existing: Option<&DynamicObject>,
    tunnel: Option<Tunnel>,
    known: Known,
    me: &str,
) -> kube::Result<()> {
    let namespace = cluster.metadata.namespace.clone().unwrap_or_default();
    let name = cluster.metadata.name.clone().unwrap_or_default();
    let connections: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &namespace,
        &management::cluster_connection_resource(),
    );
    let old = existing
        .as_ref()
        .map(|c| c.data["status"].clone())
        .unwrap_or(serde_json::Value::Null);
    let version = match &tunnel {
        Some(tunnel) if known.ask => Some(version(tunnel).await),
        _ => None,
    };
    let mut status = old.clone();
    if !status.is_object() {
        status = json!({});
    }
    if let Some(tunnel) = &tunnel {
        status["replica"] = json!(me);
        status["agentVersion"] = json!(tunnel.agent_version);
    }
    if let Some(tunnel) = &tunnel
        && (old["connected"] != true
            || old["replica"] != me
            || newer_than_record(tunnel, Some(&old)))
    {
        status["connectedSince"] = json!(tunnel_since(tunnel));
    }
    if tunnel.is_some() {
        status["connected"] = json!(true);
        if let Some(Ok(version)) = &version {
            status["kubernetesVersion"] = json!(version);
        }
        if let Some(Ok(figures)) = &known.nodes {
            status["nodeCount"] = json!(figures.nodes);
            status["readyNodeCount"] = json!(figures.ready);
            status["capacity"] =
                json!({"cpu": figures.cpu, "memory": figures.memory, "pods": figures.pods});
        }
        let checked_in = matches!(version, Some(Ok(_)));
        let failed = [
            version.and_then(Result::err),
            known.nodes.and_then(Result::err),
        ]
        .into_iter()
        .flatten()
        .next();
        status["message"] = match &failed {
            Some(error) => json!(format!(
                "the tunnel is up but the cluster's API did not answer: {error}"
            )),
            None => json!(""),
        };
        // A check-in: the cluster's API answered the version asked now. Not moved by other
        // changes, so Fleet's LAST-SEEN, which follows it, moves every 15 minutes.
        if checked_in {
            status["lastHeartbeat"] = json!(now());
        }
    } else {
        if old["connected"] == true && old["replica"] == me {
            // This replica held the tunnel until now: the cluster was reached until now.
            status["lastHeartbeat"] = json!(now());
        }
        status["connected"] = json!(false);
        status["message"] = json!("no agent is connected");
    }
    let mut record = match existing {
        Some(record) => record.clone(),
        None => {
            let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": management::API_VERSION,
            "kind": "ClusterConnection",
            "metadata": {"name": name, "namespace": namespace,
                "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
                    "name": name, "uid": cluster.metadata.uid.clone().unwrap_or_default()}]},
            "spec": {},
        }))
        .expect("a well-formed ClusterConnection");
            match connections.create(&PostParams::default(), &object).await {
                Ok(created) => created,
                // Another replica created it first: the next pass reads it.
                Err(kube::Error::Api(e)) if e.code == 409 => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    };
    if status != old {
        // Conditional on what this pass read: when another replica has written since (an
        // agent that moved), its word stands and the next pass looks again.
        record.data["status"] = status.clone();
        match connections
            .replace_status(&name, &PostParams::default(), &record)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    report_connected(client, cluster, tunnel.as_ref(), &status).await
}

/// The Cluster's own view of its connection: a Connected condition, which its controller
/// turns into Ready for an imported cluster, and a warning while its agent is newer than the
/// server.
async fn report_connected(
    client: &kube::Client,
    cluster: &DynamicObject,
    tunnel: Option<&Tunnel>,
    status: &serde_json::Value,
) -> kube::Result<()> {
    let namespace = cluster.metadata.namespace.clone().unwrap_or_default();
    let name = cluster.metadata.name.clone().unwrap_or_default();
    let connected = status["connected"] == true && status["message"] == "";
    let mut conditions = cluster.data["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let before = conditions.clone();
    // An agent newer than the server is served, with a warning on its Cluster until the
    // replicas are upgraded (`lariat version --matrix`); the warning goes with the agent.
    if let Some(tunnel) = tunnel {
        let since = before
            .iter()
            .find(|c| c["type"] == AGENT_VERSION_CONDITION)
            .and_then(|c| c["lastTransitionTime"].as_str().map(String::from));
        conditions.retain(|c| c["type"] != AGENT_VERSION_CONDITION);
        conditions.extend(agent_version_warning(&tunnel.agent_version, since));
    }
    let current = conditions
        .iter()
        .find(|c| c["type"] == "Connected")
        .cloned();
    let wanted_status = if connected { "True" } else { "False" };
    let flipped = current.as_ref().map(|c| c["status"].clone()) != Some(json!(wanted_status));
    if flipped {
        conditions.retain(|c| c["type"] != "Connected");
        let mut condition =
            json!({"type": "Connected", "status": wanted_status, "lastTransitionTime": now()});
        if !connected {
            condition["severity"] = json!("Warning");
            condition["reason"] = json!("AgentDisconnected");
            condition["message"] = json!(
                status["message"]
                    .as_str()
                    .unwrap_or("no agent is connected")
            );
        }
        conditions.push(condition);
    }
    if conditions != before {
        let clusters: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &namespace, &cluster_resource());
        clusters
            .patch_status(
                &name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({"status": {"conditions": conditions}})),
            )
            .await?;
    }
    if flipped {
        tracing::info!(cluster = %format!("{namespace}/{name}"), connected, "cluster connection changed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_newer_than_the_server_is_warned_of_on_its_cluster() {
        let (major, minor) =
            lariat_api::support::lariat_minor(lariat_api::support::LARIAT).unwrap();
        let newer = format!("{major}.{}.0", minor + 1);
        let warning = agent_version_warning(&newer, None).expect("a warning");
        assert_eq!(
            (&warning["type"], &warning["status"], &warning["reason"]),
            (
                &json!(AGENT_VERSION_CONDITION),
                &json!("False"),
                &json!("AgentNewerThanServer")
            )
        );
        assert!(warning["message"].as_str().unwrap().contains(&newer));
        // It keeps the time it began.
        let kept = agent_version_warning(&newer, Some("2026-01-01T00:00:00Z".into())).unwrap();
        assert_eq!(kept["lastTransitionTime"], "2026-01-01T00:00:00Z");
        // The same version, and one older, are no warning.
        assert!(agent_version_warning(lariat_api::support::LARIAT, None).is_none());
        if minor > 0 {
            assert!(agent_version_warning(&format!("{major}.{}.0", minor - 1), None).is_none());
        }
    }
}
