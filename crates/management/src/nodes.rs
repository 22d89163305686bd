//! Each connected cluster's Nodes, watched through its tunnel: the figures its
//! ClusterConnection shows (how many, how many Ready, their capacity) follow the Nodes as they
//! change, for one watch per cluster renewed every half hour, where a list of every cluster's
//! Nodes every minute cost 17 requests a second at 1,000 clusters. Only the figures are kept,
//! not the Nodes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::runtime::watcher;
use tokio::sync::Notify;

use crate::bounded::{Allowance, BoundedBody, Limits};
use crate::hub::Tunnel;

/// What a cluster's Nodes add up to.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct NodeFigures {
    pub(crate) nodes: i64,
    pub(crate) ready: i64,
    /// CPU in millicores, memory in MiB, Pods: their capacities summed.
    pub(crate) cpu: String,
    pub(crate) memory: String,
    pub(crate) pods: String,
}

/// One Node's part of the figures.
#[derive(Clone, Copy, Default)]
struct NodePart {
    ready: bool,
    cpu_millis: f64,
    memory_bytes: f64,
    pods: f64,
}

/// What the watch knows: nothing yet, the figures, or why the cluster's API did not answer.
pub(crate) type Seen = Option<Result<NodeFigures, String>>;

/// The watch of one tunnel's Nodes; dropping it ends the watch.
pub(crate) struct NodeWatch {
    /// The tunnel it watches through: a new tunnel needs a new watch.
    pub(crate) tunnel: u64,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

/// The last figures, and since when the watch has been failing (and why).
#[derive(Default)]
struct State {
    figures: Option<NodeFigures>,
    failing: Option<(Instant, String)>,
}

/// How long a watch may fail before its cluster's API is reported as not answering: a watch
/// expired (410) or one failed request is listed again at once, and should not flip the
/// cluster's Connected condition for a moment.
const FAILING_FOR: Duration = Duration::from_secs(30);

impl Drop for NodeWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// How long one watch of a cluster's Nodes runs before it is renewed (kube-apiserver's
/// default).
const WATCH_SECONDS: u32 = 1800;

/// What one cluster's Node watch may cost the management plane: a page of its list or one
/// event at most 16 MiB, arriving within 60 s of its first byte, and 1 MiB a second on
/// average beyond that burst (a busy 5,000-Node cluster sends well under it).
const LIMITS: Limits = Limits {
    line_bytes: 16 * 1024 * 1024,
    line_time: Duration::from_secs(60),
    bytes_per_second: 1024 * 1024,
};

// A page read at the rate from an empty allowance must arrive well within its time.
const _: () =
    assert!(LIMITS.line_bytes as u64 / LIMITS.bytes_per_second * 2 < LIMITS.line_time.as_secs());

/// The most Nodes counted in one cluster: twice the 5,000 Kubernetes is tested with.
const MAX_NODES: usize = 10_000;

/// How long a cluster with more than [`MAX_NODES`] waits before its Nodes are listed again.
const OVER_LIMIT_PAUSE: Duration = Duration::from_secs(600);

/// Nodes asked for in one page of the list.
const PAGE_SIZE: u32 = 100;

impl NodeWatch {
    /// Starts watching the Nodes of `tunnel`'s cluster; `changed` is notified whenever what it
    /// knows changes.
    pub(crate) fn start(tunnel: &Tunnel, changed: Arc<Notify>) -> NodeWatch {
        let state: Arc<Mutex<State>> = Arc::default();
        let api: Api<Node> = Api::all(client_through(tunnel));
        let task = tokio::spawn(follow(api, state.clone(), changed));
        NodeWatch {
            tunnel: tunnel.id,
            state,
            task,
        }
    }

    /// What the watch knows now: its figures, unless it has been failing for
    /// [`FAILING_FOR`].
    pub(crate) fn seen(&self) -> Seen {
        let state = self.state.lock().expect("lock");
        match &state.failing {
            Some((since, why)) if since.elapsed() >= FAILING_FOR => Some(Err(why.clone())),
            _ => state.figures.clone().map(Ok),
        }
    }
}

/// Follows the Nodes of `api` into `state`, notifying `changed` when what it knows changes.
/// A failed watch is listed afresh after a pause (1 s, doubling up to 30 s), as client-go's
/// reflectors do, rather than resumed: a cluster whose API comes back with no Node changed
/// would otherwise never say it answers again.
async fn follow(api: Api<Node>, state: Arc<Mutex<State>>, changed: Arc<Notify>) {
    let config = watcher::Config::default()
        .timeout(WATCH_SECONDS)
        .page_size(PAGE_SIZE);
    let mut pause = Duration::from_secs(1);
    loop {
        let mut parts: HashMap<String, NodePart> = HashMap::new();
        let mut listing: HashMap<String, NodePart> = HashMap::new();
        let mut events = watcher(api.clone(), config.clone()).boxed();
        let failure = loop {
            let Some(event) = events.next().await else {
                break "the watch of the cluster's Nodes ended".to_string();
            };
            match event {
                Ok(watcher::Event::Init) => listing.clear(),
                Ok(watcher::Event::InitApply(node)) => {
                    listing.insert(node_name(&node), part(&node));
                    if listing.len() > MAX_NODES {
                        break too_many();
                    }
                }
                Ok(watcher::Event::InitDone) => {
                    parts = std::mem::take(&mut listing);
                    pause = Duration::from_secs(1);
                    answered(&state, figures(&parts), &changed);
                }
                Ok(watcher::Event::Apply(node)) => {
                    parts.insert(node_name(&node), part(&node));
                    if parts.len() > MAX_NODES {
                        break too_many();
                    }
                    answered(&state, figures(&parts), &changed);
                }
                Ok(watcher::Event::Delete(node)) => {
                    parts.remove(&node_name(&node));
                    answered(&state, figures(&parts), &changed);
                }
                Err(error) => break describe(&error),
            }
        };
        // The reporter's next pass sees it, once it has lasted.
        {
            let mut state = state.lock().expect("lock");
            match &mut state.failing {
                Some((_, why)) => *why = failure,
                None => state.failing = Some((Instant::now(), failure)),
            }
        }
        // A cluster over the limit is not listed again for a while: each list costs the
        // management plane up to the whole rate.
        if parts.len().max(listing.len()) > MAX_NODES {
            pause = OVER_LIMIT_PAUSE;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(30));
    }
}

/// Why a cluster's Nodes are not counted: more than [`MAX_NODES`].
fn too_many() -> String {
    format!("the cluster has more than {MAX_NODES} Nodes, the most lariat counts")
}

/// The cluster's API answered with `figures`.
fn answered(state: &Mutex<State>, figures: NodeFigures, changed: &Notify) {
    let mut state = state.lock().expect("lock");
    let recovered = state.failing.take().is_some();
    if recovered || state.figures.as_ref() != Some(&figures) {
        state.figures = Some(figures);
        changed.notify_one();
    }
}

/// Why a watch failed, in the API's own words where it answered.
fn describe(error: &watcher::Error) -> String {
    let client = match error {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => e,
        watcher::Error::WatchError(status) => return status.message.clone(),
        other => return other.to_string(),
    };
    match client {
        kube::Error::Api(status) if !status.message.is_empty() => status.message.clone(),
        other => other.to_string(),
    }
}

/// A client of the cluster's API through its agent's tunnel, its answers read within
/// [`LIMITS`].
fn client_through(tunnel: &Tunnel) -> kube::Client {
    let sender = tunnel.sender.clone();
    let allowance = Allowance::new(LIMITS);
    let service = tower::service_fn(move |request: axum::http::Request<kube::client::Body>| {
        let mut sender = sender.clone();
        let allowance = allowance.clone();
        async move {
            sender.ready().await?;
            let (mut parts, body) = request.into_parts();
            let path = parts
                .uri
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .to_string();
            parts.uri = format!("http://agent{path}").parse()?;
            let response = sender
                .send_request(axum::http::Request::from_parts(parts, Body::new(body)))
                .await?;
            Ok::<_, tower::BoxError>(response.map(|body| BoundedBody::new(body, &allowance)))
        }
    });
    kube::Client::new(service, "default")
}

fn node_name(node: &Node) -> String {
    node.metadata.name.clone().unwrap_or_default()
}

fn part(node: &Node) -> NodePart {
    let status = node.status.as_ref();
    let capacity = |key: &str| {
        status
            .and_then(|s| s.capacity.as_ref())
            .and_then(|c| c.get(key))
            .and_then(|q| lariat_api::parse_quantity(&q.0))
            .unwrap_or(0.0)
    };
    NodePart {
        ready: status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True")),
        cpu_millis: capacity("cpu") * 1000.0,
        memory_bytes: capacity("memory"),
        pods: capacity("pods"),
    }
}

fn figures(parts: &HashMap<String, NodePart>) -> NodeFigures {
    let sum = |f: fn(&NodePart) -> f64| parts.values().map(f).sum::<f64>();
    NodeFigures {
        nodes: parts.len() as i64,
        ready: parts.values().filter(|p| p.ready).count() as i64,
        cpu: format!("{}m", sum(|p| p.cpu_millis).round() as i64),
        memory: format!(
            "{}Mi",
            (sum(|p| p.memory_bytes) / (1024.0 * 1024.0)).round() as i64
        ),
        pods: format!("{}", sum(|p| p.pods).round() as i64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_add_up_the_nodes() {
        let node = |ready: &str| -> Node {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "n"},
                "status": {
                    "capacity": {"cpu": "1500m", "memory": "2Gi", "pods": "110"},
                    "conditions": [{"type": "Ready", "status": ready}],
                },
            }))
            .unwrap()
        };
        let parts = HashMap::from([
            ("a".to_string(), part(&node("True"))),
            ("b".to_string(), part(&node("False"))),
        ]);
        assert_eq!(
            figures(&parts),
            NodeFigures {
                nodes: 2,
                ready: 1,
                cpu: "3000m".into(),
                memory: "4096Mi".into(),
                pods: "220".into(),
            }
        );
        assert_eq!(figures(&HashMap::new()).cpu, "0m");
    }
}
