//! `lariat bench`: starts a real server process, drives it with kube-rs over HTTPS, and
//! prints throughput, latency percentiles, list-time growth and server memory.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::{StreamExt, TryStreamExt};
use kube::api::{
    Api, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::discovery::ApiResource;
use lariat_store::etcd_process::EtcdProcess;
use serde_json::json;

#[derive(clap::Subcommand)]
pub enum BenchCommand {
    /// Create, get, list and watch Cluster objects through the API, on SQLite and on etcd.
    Api(ApiArgs),
}

#[derive(clap::Args)]
pub struct ApiArgs {
    /// Object counts to run with (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "10000,100000")]
    objects: Vec<usize>,
    /// Concurrent client requests.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Backends to measure (comma-separated): sqlite, etcd.
    #[arg(long, value_delimiter = ',', default_value = "sqlite,etcd")]
    backends: Vec<String>,
    /// Random gets per run.
    #[arg(long, default_value_t = 10000)]
    gets: usize,
    /// Updates whose watch delivery is timed.
    #[arg(long, default_value_t = 2000)]
    watched_updates: usize,
}

pub async fn run(what: BenchCommand) -> anyhow::Result<()> {
    match what {
        BenchCommand::Api(args) => api(args).await,
    }
}

/// A server process of our own binary, on a fresh data directory.
struct ServerProcess {
    child: Child,
    _dir: tempfile::TempDir,
    kubeconfig: std::path::PathBuf,
}

impl ServerProcess {
    fn start(etcd: Option<&str>) -> anyhow::Result<ServerProcess> {
        let dir = tempfile::tempdir()?;
        let log = dir.path().join("server.log");
        let mut command = Command::new(std::env::current_exe()?);
        command
            .arg("server")
            .arg("--data-dir")
            .arg(dir.path())
            .args(["--listen", "127.0.0.1:0"])
            .env("LARIAT_LOG", "warn,lariat=info,lariat_apiserver=info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?);
        if let Some(endpoint) = etcd {
            command.args([
                "--datastore-endpoint",
                endpoint,
                "--datastore-prefix",
                "/bench",
            ]);
        }
        let child = command.spawn().context("start the server")?;
        let deadline = Instant::now() + Duration::from_secs(60);
        while !std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("listening on")
        {
            if Instant::now() > deadline {
                bail!(
                    "the server did not start: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(ServerProcess {
            child,
            kubeconfig: dir.path().join("kubeconfig.yaml"),
            _dir: dir,
        })
    }

    /// Resident and peak resident memory of the server, in MiB.
    fn memory_mib(&self) -> (f64, f64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
                .map_or(0.0, |kb| kb / 1024.0)
        };
        (field("VmRSS:"), field("VmHWM:"))
    }

    /// User + system CPU seconds the server has used.
    fn cpu_seconds(&self) -> f64 {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        let fields: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .collect();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        (ticks(11) + ticks(12)) / 100.0
    }

    async fn client(&self) -> anyhow::Result<kube::Client> {
        client_for(&self.kubeconfig).await
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn client_for(path: &Path) -> anyhow::Result<kube::Client> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

fn clusters(client: kube::Client) -> Api<DynamicObject> {
    let resource = ApiResource {
        group: "cluster.x-k8s.io".into(),
        version: "v1beta1".into(),
        api_version: "cluster.x-k8s.io/v1beta1".into(),
        kind: "Cluster".into(),
        plural: "clusters".into(),
    };
    Api::namespaced_with(client, "default", &resource)
}

fn cluster(name: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "Cluster",
        "metadata": {"name": name, "labels": {"env": "bench", "shard": (name.len() % 7).to_string()}},
        "spec": {
            "clusterNetwork": {"pods": {"cidrBlocks": ["192.168.0.0/16"]}, "services": {"cidrBlocks": ["10.96.0.0/12"]}},
            "controlPlaneEndpoint": {"host": format!("{name}.example.com"), "port": 6443},
            "infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "InMemoryCluster", "name": name},
        }
    }))
    .expect("a valid object")
}

/// Latency samples of one phase.
struct Samples {
    latencies: Vec<Duration>,
    elapsed: Duration,
}

impl Samples {
    fn line(&mut self, what: &str) -> String {
        self.latencies.sort();
        let pick = |q: f64| {
            let i = ((self.latencies.len() as f64 - 1.0) * q).round() as usize;
            self.latencies
                .get(i)
                .copied()
                .unwrap_or_default()
                .as_secs_f64()
                * 1000.0
        };
        format!(
            "  {what:<8} {:>8} ops  {:>9.0} ops/s  p50 {:>7.2} ms  p99 {:>7.2} ms",
            self.latencies.len(),
            self.latencies.len() as f64 / self.elapsed.as_secs_f64(),
            pick(0.5),
            pick(0.99)
        )
    }
}

/// Runs `count` operations with `concurrency` workers, timing each.
async fn timed<F, Fut>(count: usize, concurrency: usize, operation: F) -> anyhow::Result<Samples>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let next = Arc::new(AtomicUsize::new(0));
    let operation = Arc::new(operation);
    let started = Instant::now();
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let next = next.clone();
            let operation = operation.clone();
            tokio::spawn(async move {
                let mut latencies = vec![];
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= count {
                        return Ok::<_, anyhow::Error>(latencies);
                    }
                    let t = Instant::now();
                    operation(i).await?;
                    latencies.push(t.elapsed());
                }
            })
        })
        .collect();
    let mut latencies = Vec::with_capacity(count);
    for worker in workers {
        latencies.extend(worker.await??);
    }
    Ok(Samples {
        latencies,
        elapsed: started.elapsed(),
    })
}

async fn list_seconds(
    api: &Api<DynamicObject>,
    limit: Option<u32>,
) -> anyhow::Result<(f64, usize)> {
    let started = Instant::now();
    let mut params = ListParams::default();
    if let Some(limit) = limit {
        params = params.limit(limit);
    }
    let mut total = 0;
    loop {
        let page = api.list(&params).await?;
        total += page.items.len();
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => break,
        }
    }
    Ok((started.elapsed().as_secs_f64(), total))
}

async fn api(args: ApiArgs) -> anyhow::Result<()> {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "lariat bench api: concurrency {}, load average {}",
        args.concurrency,
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    for backend in &args.backends {
        for &objects in &args.objects {
            let etcd = match backend.as_str() {
                "sqlite" => None,
                "etcd" => Some(
                    EtcdProcess::start().context("start etcd (apt-get install -y etcd-server)")?,
                ),
                other => bail!("unknown backend {other:?}: use sqlite or etcd"),
            };
            let endpoint = etcd.as_ref().map(|e| e.endpoint());
            let server = ServerProcess::start(endpoint.as_deref())?;
            let api = clusters(server.client().await?);
            println!("\n{backend}, {objects} Cluster objects");
            let (idle_rss, _) = server.memory_mib();

            // Create in tenths, timing a full list after each tenth to show how list time grows.
            let mut creates = Samples {
                latencies: vec![],
                elapsed: Duration::ZERO,
            };
            let mut growth = vec![];
            let cpu_before = server.cpu_seconds();
            for tenth in 0..10 {
                let (from, to) = (objects * tenth / 10, objects * (tenth + 1) / 10);
                let api_for = api.clone();
                let part = timed(to - from, args.concurrency, move |i| {
                    let api = api_for.clone();
                    async move {
                        api.create(
                            &PostParams::default(),
                            &cluster(&format!("c{:07}", from + i)),
                        )
                        .await?;
                        Ok(())
                    }
                })
                .await?;
                creates.latencies.extend(part.latencies);
                creates.elapsed += part.elapsed;
                let (seconds, count) = list_seconds(&api, None).await?;
                growth.push((count, seconds));
            }
            let create_cpu = server.cpu_seconds() - cpu_before;
            println!(
                "{}   (server CPU {:.1} s, {:.0} µs per create)",
                creates.line("create"),
                create_cpu,
                create_cpu * 1e6 / objects as f64
            );

            let api_for = api.clone();
            let mut gets = timed(args.gets, args.concurrency, move |i| {
                let api = api_for.clone();
                let name = format!("c{:07}", (i * 7919) % objects);
                async move {
                    api.get(&name).await?;
                    Ok(())
                }
            })
            .await?;
            println!("{}", gets.line("get"));

            let (full, count) = list_seconds(&api, None).await?;
            let (paged, _) = list_seconds(&api, Some(500)).await?;
            println!(
                "  list     all {count} in {:.0} ms ({:.0} objects/s); in pages of 500: {:.0} ms",
                full * 1000.0,
                count as f64 / full,
                paged * 1000.0
            );
            let growth_line: Vec<String> = growth
                .iter()
                .map(|(n, s)| format!("{n}:{:.0}ms", s * 1000.0))
                .collect();
            println!("  list growth (objects:time) {}", growth_line.join(" "));

            // Watch delivery: time from each update's acknowledgement to its event.
            let updates = args.watched_updates.min(objects);
            let start_rv = api
                .list(&ListParams::default().limit(1))
                .await?
                .metadata
                .resource_version
                .unwrap_or_default();
            let mut stream = api
                .watch(&WatchParams::default().timeout(290), &start_rv)
                .await?
                .boxed();
            let acked = Arc::new(std::sync::Mutex::new(std::collections::HashMap::<
                String,
                Instant,
            >::new()));
            let acked_for = acked.clone();
            let api_for = api.clone();
            let started = Instant::now();
            let writer = tokio::spawn(timed(updates, args.concurrency, move |i| {
                let api = api_for.clone();
                let acked = acked_for.clone();
                async move {
                    let patched = api
                        .patch(
                            &format!("c{i:07}"),
                            &PatchParams::default(),
                            &Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}})),
                        )
                        .await?;
                    acked.lock().expect("lock").insert(
                        patched.metadata.resource_version.unwrap_or_default(),
                        Instant::now(),
                    );
                    Ok(())
                }
            }));
            let mut delivery = vec![];
            let mut seen = 0;
            while seen < updates {
                let event =
                    tokio::time::timeout(Duration::from_secs(60), stream.try_next()).await??;
                let Some(WatchEvent::Modified(object)) = event else {
                    continue;
                };
                seen += 1;
                let rv = object.metadata.resource_version.unwrap_or_default();
                let now = Instant::now();
                // An event can arrive before its writer records the acknowledgement; count that as zero.
                let ack = acked.lock().expect("lock").get(&rv).copied().unwrap_or(now);
                delivery.push(now.saturating_duration_since(ack));
            }
            let mut patches = writer.await??;
            let mut watch = Samples {
                latencies: delivery,
                elapsed: started.elapsed(),
            };
            println!("{}", patches.line("update"));
            println!("{}   (delivery after acknowledgement)", watch.line("watch"));

            let (rss, peak) = server.memory_mib();
            println!(
                "  server memory: idle {idle_rss:.0} MiB, now {rss:.0} MiB, peak {peak:.0} MiB ({:.1} KiB per object above idle)",
                (rss - idle_rss).max(0.0) * 1024.0 / objects as f64
            );
            drop(server);
            drop(etcd);
        }
    }
    Ok(())
}
