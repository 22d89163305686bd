//! `lariat bench agents`: many agents in this process against one server process, as a fleet
//! of downstream clusters would dial in. It times the first connection of all, the server's
//! memory per connected agent, the reconnection storm after a `kill -9` and restart, and the
//! latency the tunnel adds to a request compared with asking the cluster directly.
//!
//! The agents share one simulated downstream cluster (an in-process lariat API on an
//! in-memory store), each keeping its credential in a Secret of its own.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use futures::StreamExt;
use kube::api::{Api, DynamicObject, PostParams};
use lariat_api::management::IMPORTED_ANNOTATION;
use serde_json::json;
use tokio::sync::watch;

use super::ServerProcess;

#[derive(clap::Args)]
pub struct AgentsArgs {
    /// Simulated agents (one imported Cluster each).
    #[arg(long, default_value_t = 1000)]
    agents: usize,
    /// The server's admitted agent handshakes per second.
    #[arg(long, default_value_t = lariat_management::DEFAULT_HANDSHAKES_PER_SECOND)]
    handshake_rate: f64,
    /// Sequential requests timed through the proxy and directly.
    #[arg(long, default_value_t = 1000)]
    latency_requests: usize,
}

/// Waits until `count` agents report a tunnel up; returns how long it took.
pub(super) async fn until_connected(
    states: &[watch::Receiver<bool>],
    count: usize,
    started: Instant,
    timeout: Duration,
) -> anyhow::Result<Duration> {
    loop {
        let up = states.iter().filter(|s| *s.borrow()).count();
        if up >= count {
            return Ok(started.elapsed());
        }
        if started.elapsed() > timeout {
            bail!("only {up} of {count} agents connected after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn percentiles(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort();
    (
        super::percentile_ms(&samples, 0.5),
        super::percentile_ms(&samples, 0.99),
    )
}

async fn time_gets(
    client: &kube::Client,
    path: &str,
    count: usize,
) -> anyhow::Result<Vec<Duration>> {
    let mut samples = Vec::with_capacity(count);
    for _ in 0..count {
        let started = Instant::now();
        client
            .request_text(http::Request::get(path).body(Vec::new())?)
            .await
            .with_context(|| format!("GET {path}"))?;
        samples.push(started.elapsed());
    }
    Ok(samples)
}

pub async fn run(args: AgentsArgs) -> anyhow::Result<()> {
    let load = super::load_average();
    println!(
        "lariat bench agents: {} agents in one process, handshake rate {}/s; load average {load}",
        args.agents, args.handshake_rate,
    );
    // Every agent dials from this one address, which the per-client connection cap would
    // otherwise (rightly) treat as one abusive client.
    let room = (args.agents * 2).max(1024).to_string();
    let mut server = ServerProcess::start_with(vec![
        "--no-controllers".into(),
        "--agent-handshake-rate".into(),
        args.handshake_rate.to_string(),
        "--max-connections".into(),
        room.clone(),
        "--max-connections-per-client".into(),
        room.clone(),
        "--max-unauthenticated-connections".into(),
        room.clone(),
        "--max-unauthenticated-connections-per-client".into(),
        room,
    ])?;
    let management = server.client().await?;

    let downstream = Downstream::start().await?;
    let started = Instant::now();
    let tokens = imported_clusters(&management, args.agents).await?;
    println!(
        "  created {} imported clusters and tokens in {:.1} s",
        args.agents,
        started.elapsed().as_secs_f64()
    );

    let (idle_rss, _) = server.memory_mib();
    let server_url = format!("https://{}", server.address);
    let checksum = lariat_apiserver::identity::sha256_hex(std::fs::read(
        server.dir.path().join("tls/ca.crt"),
    )?);
    let cpu_before = server.cpu_seconds();
    let started = Instant::now();
    let (states, stop_agents) = start_agents(&server_url, tokens, &checksum, &downstream.client);
    let first = until_connected(&states, args.agents, started, Duration::from_secs(600)).await?;
    let cpu = server.cpu_seconds() - cpu_before;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (rss, peak) = server.memory_mib();
    println!(
        "  all {} agents connected in {:.1} s ({:.0} handshakes/s, server CPU {:.1} s)",
        args.agents,
        first.as_secs_f64(),
        args.agents as f64 / first.as_secs_f64(),
        cpu
    );
    println!(
        "  server memory {rss:.0} MiB (peak {peak:.0} MiB), idle before agents {idle_rss:.0} MiB: {:.1} KiB per connected agent",
        (rss - idle_rss) * 1024.0 / args.agents as f64
    );

    // Latency: the same GET through the proxy and straight to the cluster.
    let direct = super::client_for(&downstream.dir.path().join("kubeconfig.yaml")).await?;
    let (direct_p50, direct_p99) =
        percentiles(time_gets(&direct, "/api/v1/namespaces/default", args.latency_requests).await?);
    let (proxy_p50, proxy_p99) = percentiles(
        time_gets(
            &management,
            "/k8s/clusters/default/agent-00000/api/v1/namespaces/default",
            args.latency_requests,
        )
        .await?,
    );
    println!(
        "  GET namespace, {} sequential requests: direct p50 {direct_p50:.2} ms p99 {direct_p99:.2} ms; through the tunnel p50 {proxy_p50:.2} ms p99 {proxy_p99:.2} ms (+{:.2} ms at p50)",
        args.latency_requests,
        proxy_p50 - direct_p50
    );

    // The storm: kill -9, restart on the same address, time until every agent is back.
    let load_before = super::load_average();
    server.kill9();
    let down = Instant::now();
    while states.iter().any(|s| *s.borrow()) {
        if down.elapsed() > Duration::from_secs(60) {
            bail!("agents did not notice the server was gone within a minute");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let noticed = down.elapsed();
    let started = Instant::now();
    server.relaunch()?;
    let restarted = started.elapsed();
    let cpu_before = server.cpu_seconds();
    let back = until_connected(&states, args.agents, started, Duration::from_secs(600)).await?;
    println!(
        "  after kill -9 (every agent noticed within {:.2} s) and restart (listening again after {:.1} s; load average before {load_before}): all {} agents back in {:.1} s from the restart ({:.0} handshakes/s, server CPU {:.1} s)",
        noticed.as_secs_f64(),
        restarted.as_secs_f64(),
        args.agents,
        back.as_secs_f64(),
        args.agents as f64 / (back - restarted).as_secs_f64().max(0.001),
        server.cpu_seconds() - cpu_before
    );
    super::Row::new(&load)
        .cell(args.agents)
        .cell(format!("{:.1} s", first.as_secs_f64()))
        .cell(format!(
            "{:.1} KiB",
            (rss - idle_rss) * 1024.0 / args.agents as f64
        ))
        .cell(format!("+{:.2} ms", proxy_p50 - direct_p50))
        .cell(format!("{:.2} ms", proxy_p99))
        .cell(format!("{:.1} s", back.as_secs_f64()))
        .print("bench agents");
    let _ = stop_agents.send(true);
    drop(downstream);
    Ok(())
}

/// The downstream cluster simulated agents serve: a lariat API in this process, on an
/// in-memory store; it stops when dropped.
pub(super) struct Downstream {
    pub dir: tempfile::TempDir,
    pub client: kube::Client,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Downstream {
    pub async fn start() -> anyhow::Result<Downstream> {
        let dir = tempfile::tempdir()?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let server = lariat_apiserver::Server::start(
            lariat_apiserver::Config::new(dir.path()),
            Arc::new(lariat_store::memory::MemoryStore::new()),
            listener,
        )
        .await?;
        let client = server.local_client();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(server.serve(async move {
            let _ = stopped.await;
        }));
        Ok(Downstream {
            dir,
            client,
            _stop: stop,
        })
    }
}

/// Creates `count` imported Clusters through `management`, and a registration token for each.
pub(super) async fn imported_clusters(
    management: &kube::Client,
    count: usize,
) -> anyhow::Result<Vec<String>> {
    let clusters: Api<DynamicObject> = Api::namespaced_with(
        management.clone(),
        "default",
        &lariat_controllers::capi("Cluster"),
    );
    futures::stream::iter(0..count)
        .map(|i| {
            let (clusters, client) = (clusters.clone(), management.clone());
            async move {
                let name = format!("agent-{i:05}");
                let cluster: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
                    "metadata": {"name": name, "annotations": {IMPORTED_ANNOTATION: "true"}},
                    "spec": {},
                }))?;
                clusters.create(&PostParams::default(), &cluster).await?;
                let token = lariat_management::credentials::create_registration_token(
                    &client,
                    "default",
                    &name,
                    Duration::from_secs(7200),
                )
                .await?;
                Ok::<_, anyhow::Error>(token)
            }
        })
        .buffered(32)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect()
}

/// Starts one agent in this process per token, dialling `server` (one URL, or several
/// replicas' separated by commas), all serving `downstream`: whether each is connected, and
/// what stops them all.
pub(super) fn start_agents(
    server: &str,
    tokens: Vec<String>,
    checksum: &str,
    downstream: &kube::Client,
) -> (Vec<watch::Receiver<bool>>, watch::Sender<bool>) {
    let (stop_agents, agents_stopped) = watch::channel(false);
    let mut states = Vec::with_capacity(tokens.len());
    for (i, token) in tokens.into_iter().enumerate() {
        let (connected, state) = watch::channel(false);
        states.push(state);
        let mut config = lariat_agent::Config::new(
            server.to_string(),
            token,
            checksum.to_string(),
            downstream.clone(),
        );
        config.credential_secret = format!("agent-credential-{i:05}");
        config.connected = Some(connected);
        // Thousands of agents share one cluster here: this measures the tunnels alone.
        config.bundles = false;
        let mut stopped = agents_stopped.clone();
        tokio::spawn(lariat_agent::run(config, async move {
            let _ = stopped.wait_for(|s| *s).await;
        }));
    }
    (states, stop_agents)
}
