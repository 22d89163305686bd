//! `lariat bench ha`: three servers joined on a three-member etcd (Debian's), as an operator
//! runs them. It measures creates per second spread over one, two and three replicas, and the
//! controllers' failover: how long after a `kill -9` of the Lease holder another replica
//! holds it; and, with agents given every replica's URL, how long after a `kill -9` of one
//! replica all of them are connected again.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DynamicObject, PostParams};
use lariat_store::etcd_process::EtcdCluster;

use super::agents::{Downstream, imported_clusters, start_agents, until_connected};
use super::{
    RequestCounts, ServerProcess, cluster, clusters, load_average, requests, requests_per, timed,
};

#[derive(clap::Args)]
pub struct HaArgs {
    /// Cluster objects created in each round (1, 2 and 3 replicas).
    #[arg(long, default_value_t = 3000)]
    objects: usize,
    /// Concurrent requests, spread evenly over the replicas of the round.
    #[arg(long, default_value_t = 48)]
    concurrency: usize,
    /// How many times the leader is killed and its successor timed.
    #[arg(long, default_value_t = 3)]
    failovers: usize,
    /// Simulated agents spread over the three replicas, one of which is then killed (0: none).
    #[arg(long, default_value_t = 10_000)]
    agents: usize,
}

const TOKEN: &str = "lariat-bench-join-token";

pub async fn run(args: HaArgs) -> anyhow::Result<()> {
    println!(
        "lariat bench ha: 3 servers joined on a 3-member etcd, concurrency {}; load average {}",
        args.concurrency,
        load_average()
    );
    let etcd = EtcdCluster::start(3).context("start etcd (apt-get install -y etcd-server)")?;
    // Every agent dials from this one address, which the per-client connection cap would
    // otherwise (rightly) treat as one abusive client.
    let room = (args.agents * 2).max(1024).to_string();
    let joined = vec![
        "--datastore-endpoint".to_string(),
        etcd.endpoints(),
        "--token".into(),
        TOKEN.into(),
        "--max-connections".into(),
        room.clone(),
        "--max-connections-per-client".into(),
        room.clone(),
        "--max-unauthenticated-connections".into(),
        room.clone(),
        "--max-unauthenticated-connections-per-client".into(),
        room,
    ];
    // The first server seals the CA and keys; the others join it.
    let mut servers = vec![ServerProcess::start_with(joined.clone())?];
    for _ in 1..3 {
        servers.push(ServerProcess::start_with(joined.clone())?);
    }
    let mut apis = vec![];
    for server in &servers {
        apis.push(clusters(server.client().await?));
    }

    println!("\nAPI throughput (Cluster creates; each replica's own kubeconfig, one CA)");
    let mut base = 0.0;
    for replicas in 1..=3 {
        let round = apis[..replicas].to_vec();
        let offset = replicas * 1_000_000;
        let mut samples = timed(args.objects, args.concurrency, move |i| {
            let api = round[i % round.len()].clone();
            async move {
                api.create(
                    &PostParams::default(),
                    &cluster(&format!("r{:07}", offset + i)),
                )
                .await?;
                Ok(())
            }
        })
        .await?;
        let rate = args.objects as f64 / samples.elapsed.as_secs_f64();
        if replicas == 1 {
            base = rate;
        }
        println!(
            "{}   {:.2}× one replica",
            samples.line(&format!("{replicas} repl")),
            rate / base
        );
    }

    println!("\nController failover after kill -9 of the Lease holder");
    let mut times = vec![];
    for _ in 0..args.failovers {
        let leases: Api<Lease> = Api::namespaced(servers[0].client().await?, "lariat-system");
        let holder = holder_of(&leases).await?;
        let Some(leader) = servers
            .iter()
            .position(|s| holder.contains(&format!("_{}_", port(&s.address))))
        else {
            bail!("no server holds the controllers' Lease (holder {holder:?})");
        };
        servers[leader].kill9();
        let killed = Instant::now();
        let watcher = (leader + 1) % servers.len();
        let leases: Api<Lease> = Api::namespaced(servers[watcher].client().await?, "lariat-system");
        loop {
            let now = holder_of(&leases).await.unwrap_or_default();
            if !now.is_empty() && now != holder {
                break;
            }
            if killed.elapsed() > Duration::from_secs(60) {
                bail!("no replica took the Lease within 60 s of the leader's death");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let took = killed.elapsed();
        println!(
            "  another replica holds the Lease {:.1} s after the kill",
            took.as_secs_f64()
        );
        times.push(took);
        servers[leader].relaunch()?;
    }
    if !times.is_empty() {
        times.sort();
        println!(
            "  failover: median {:.1} s, worst {:.1} s (Lease 10 s, renewed every 1 s); load average {}",
            times[times.len() / 2].as_secs_f64(),
            times[times.len() - 1].as_secs_f64(),
            load_average()
        );
    }
    if args.agents > 0 {
        agents_after_a_replica_dies(&mut servers, args.agents).await?;
    }
    Ok(())
}

/// `agents` simulated agents, each given all three replicas' URLs, connect; then one replica
/// is killed and the time until every agent is connected again is printed.
async fn agents_after_a_replica_dies(
    servers: &mut [ServerProcess],
    agents: usize,
) -> anyhow::Result<()> {
    println!(
        "
{agents} agents over 3 replicas, one replica killed"
    );
    let management = servers[0].client().await?;
    let downstream = Downstream::start().await?;
    let started = Instant::now();
    let tokens = imported_clusters(&management, agents).await?;
    println!(
        "  created {agents} imported clusters and tokens in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let urls: Vec<String> = servers
        .iter()
        .map(|s| format!("https://{}", s.address))
        .collect();
    let checksum = lariat_apiserver::identity::sha256_hex(std::fs::read(
        servers[0].dir.path().join("tls/ca.crt"),
    )?);
    let started = Instant::now();
    let (states, stop_agents) =
        start_agents(&urls.join(","), tokens, &checksum, &downstream.client);
    let first = until_connected(&states, agents, started, Duration::from_secs(900)).await?;
    println!(
        "  all {agents} connected in {:.1} s ({:.0} handshakes/s over 3 replicas); load average {}",
        first.as_secs_f64(),
        agents as f64 / first.as_secs_f64(),
        load_average()
    );
    // Each server logs the agents it admits: the share of the one killed is what reconnects.
    let connected_to = |server: &ServerProcess| server.log().matches("agent connected").count();
    let mut shares: Vec<usize> = servers.iter().map(connected_to).collect();
    while shares.iter().sum::<usize>() < agents && started.elapsed() < Duration::from_secs(900) {
        tokio::time::sleep(Duration::from_millis(20)).await;
        shares = servers.iter().map(connected_to).collect();
    }
    // The agents pick their replica themselves: the one holding most tunnels dies, so that
    // some always have to move however few there are.
    let victim = (0..servers.len()).max_by_key(|&i| shares[i]).unwrap_or(0);
    let survivors: Vec<usize> = (0..servers.len()).filter(|&i| i != victim).collect();
    let held = tunnels_held(&management, &servers[victim].address).await?;
    let handshakes = |servers: &[ServerProcess]| -> usize {
        survivors.iter().map(|&i| connected_to(&servers[i])).sum()
    };
    let handshakes_before = handshakes(servers);
    let mut before = RequestCounts::new();
    for &i in &survivors {
        add_counts(&mut before, requests(&servers[i].client().await?).await?);
    }
    servers[victim].kill9();
    let killed = Instant::now();
    while states.iter().all(|s| *s.borrow()) {
        if killed.elapsed() > Duration::from_secs(60) {
            bail!("no agent noticed the replica was gone within a minute");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let back = until_connected(&states, agents, killed, Duration::from_secs(900)).await?;
    let moved = handshakes(servers) - handshakes_before;
    println!(
        "  handshakes per replica {shares:?}; after kill -9 of replica {victim}: all {agents} connected again in {:.1} s ({moved} tunnels moved); load average {}",
        back.as_secs_f64(),
        load_average()
    );
    // The ClusterConnections catch up: first none names the dead replica (every replica
    // forwards to the new holders), then all say their cluster's API answers.
    let survivor = servers[survivors[0]].client().await?;
    let (mut claimed, mut answered) = (None, None);
    while answered.is_none() {
        let (naming, connected) = tunnels_held(&survivor, &servers[victim].address).await?;
        if naming == 0 {
            claimed.get_or_insert(killed.elapsed());
            if connected == agents {
                answered = Some(killed.elapsed());
            }
        }
        if killed.elapsed() > Duration::from_secs(900) {
            bail!("ClusterConnections did not catch up within 15 minutes of the kill");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "  ClusterConnections after the kill: none names the dead replica at {:.1} s ({} did when it died); all connected with their API answering at {:.1} s",
        claimed.unwrap_or_default().as_secs_f64(),
        held.0,
        answered.unwrap_or_default().as_secs_f64()
    );
    let mut after = RequestCounts::new();
    for &i in &survivors {
        add_counts(&mut after, requests(&servers[i].client().await?).await?);
    }
    // What the survivors' API served meanwhile: the agents' handshakes, the reporters' writes
    // and reads, per tunnel that moved.
    println!(
        "  management API requests on the survivors per moved tunnel: {}",
        requests_per(&before, &after, "management", moved.max(1) as f64)
    );
    let _ = stop_agents.send(true);
    servers[victim].relaunch()?;
    Ok(())
}

/// How many ClusterConnections name the replica at `address` as holding their agent's tunnel,
/// and how many say their cluster is connected.
async fn tunnels_held(management: &kube::Client, address: &str) -> anyhow::Result<(usize, usize)> {
    let connections: Api<DynamicObject> = Api::all_with(
        management.clone(),
        &lariat_api::management::cluster_connection_resource(),
    );
    let replica = format!("_{}_", port(address));
    let connections = connections.list(&Default::default()).await?.items;
    let naming = connections
        .iter()
        .filter(|c| {
            c.data["status"]["replica"]
                .as_str()
                .is_some_and(|r| r.contains(&replica))
        })
        .count();
    let connected = connections
        .iter()
        .filter(|c| c.data["status"]["connected"] == true)
        .count();
    Ok((naming, connected))
}

fn add_counts(total: &mut RequestCounts, counts: RequestCounts) {
    for (key, n) in counts {
        *total.entry(key).or_default() += n;
    }
}

async fn holder_of(leases: &Api<Lease>) -> anyhow::Result<String> {
    let lease = leases.get("lariat-controllers").await?;
    Ok(lease
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default())
}

fn port(address: &str) -> &str {
    address.rsplit(':').next().unwrap_or_default()
}
