//! `lariat bench`: starts a real server process, drives it with kube-rs over HTTPS, and
//! prints throughput, latency percentiles, list-time growth and server memory.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::{StreamExt, TryStreamExt};
use kube::ResourceExt;
use kube::api::{
    Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use lariat_controllers::capi;
use lariat_store::etcd_process::EtcdProcess;
use serde_json::json;

mod access;
mod agents;
mod aws;
mod fleet;
mod ha;
mod limits;
mod rbac;
mod workloads;

#[derive(clap::Subcommand)]
pub enum BenchCommand {
    /// Create, get, list and watch Cluster objects through the API, on SQLite and on etcd.
    Api(ApiArgs),
    /// Provision many in-memory clusters and time them until every machine runs; then roll a
    /// large MachineDeployment to a new version.
    Lifecycle(LifecycleArgs),
    /// Connect many simulated agents to one server, restart it, and time the reconnection
    /// storm; measure memory per agent and the proxy's added latency.
    Agents(agents::AgentsArgs),
    /// Make EKS clusters with node groups against moto, counting AWS requests: to make one,
    /// to make many, and per cluster in steady state.
    Aws(aws::AwsArgs),
    /// Roll a commit out to many in-memory clusters through their agents, relabel one
    /// cluster among many GitRepos, and measure the idle fleet.
    Fleet(fleet::FleetArgs),
    /// What RBAC adds to a request: reads by a bound user against an admin's, before and
    /// after thousands of roles and bindings.
    Rbac(rbac::RbacArgs),
    /// Rancher's scopes reaching many in-memory clusters: from a GlobalRoleBinding or
    /// ProjectRoleTemplateBindings to the RBAC they mean in every cluster.
    Access(access::AccessArgs),
    /// Three servers joined on a three-member etcd: creates per second over one, two and
    /// three replicas, and how long the controllers' Lease takes to change hands after the
    /// holder is killed.
    Ha(ha::HaArgs),
    /// Each way the bounded-cost probe exhausted a server (patch amplification, deep nesting,
    /// large objects watched, anonymous connections, oversized bodies over HTTP/2): whether
    /// the limit held, peak memory and the worst /healthz latency during each.
    Limits(limits::LimitsArgs),
    /// In-memory clusters that run Deployments: time until every one is Available, server
    /// CPU and memory per Pod, and the idle cost with every Pod Running.
    Workloads(workloads::WorkloadsArgs),
}

#[derive(clap::Args)]
pub struct LifecycleArgs {
    #[arg(long, default_value_t = 100)]
    clusters: usize,
    #[arg(long, default_value_t = 3)]
    control_plane: u32,
    #[arg(long, default_value_t = 10)]
    workers: u32,
    /// Workers of the MachineDeployment rolled to a new version.
    #[arg(long, default_value_t = 100)]
    upgrade_workers: u32,
    /// Seconds the idle fleet (every machine Running, nothing changing) is measured for.
    #[arg(long, default_value_t = 660)]
    idle_seconds: u64,
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
    /// Kinds to measure (comma-separated): ConfigMap (a core kind: the API's own cost), Cluster
    /// (a Cluster API custom resource: schema validation and defaulting on top).
    #[arg(long, value_delimiter = ',', default_value = "ConfigMap,Cluster")]
    kinds: Vec<BenchKind>,
}

/// A kind `bench api` creates, reads, lists and watches.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
#[value(rename_all = "PascalCase")]
enum BenchKind {
    ConfigMap,
    Cluster,
}

impl BenchKind {
    fn api(self, client: kube::Client) -> Api<DynamicObject> {
        match self {
            BenchKind::ConfigMap => Api::namespaced_with(
                client,
                "default",
                &ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
            ),
            BenchKind::Cluster => clusters(client),
        }
    }

    /// An object of the kind, about 400 bytes of JSON either way.
    fn object(self, name: &str) -> DynamicObject {
        match self {
            BenchKind::ConfigMap => serde_json::from_value(json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "labels": {"env": "bench", "shard": (name.len() % 7).to_string()}},
                "data": {
                    "endpoint": format!("{name}.example.com:6443"),
                    "pods": "192.168.0.0/16",
                    "services": "10.96.0.0/12",
                    "infrastructure": format!("infrastructure.cluster.x-k8s.io/v1beta1/InMemoryCluster/{name}"),
                }
            }))
            .expect("a valid object"),
            BenchKind::Cluster => cluster(name),
        }
    }
}

pub async fn run(what: BenchCommand) -> anyhow::Result<()> {
    match what {
        BenchCommand::Api(args) => api(args).await,
        BenchCommand::Lifecycle(args) => lifecycle(args).await,
        BenchCommand::Agents(args) => agents::run(args).await,
        BenchCommand::Fleet(args) => fleet::run(args).await,
        BenchCommand::Aws(args) => aws::run(args).await,
        BenchCommand::Rbac(args) => rbac::run(args).await,
        BenchCommand::Access(args) => access::run(args).await,
        BenchCommand::Ha(args) => ha::run(args).await,
        BenchCommand::Limits(args) => limits::run(args).await,
        BenchCommand::Workloads(args) => workloads::run(args).await,
    }
}

/// A server process of our own binary, on a fresh data directory.
struct ServerProcess {
    child: Child,
    dir: tempfile::TempDir,
    kubeconfig: std::path::PathBuf,
    args: Vec<String>,
    /// `127.0.0.1:PORT` it listens on.
    address: String,
}

impl ServerProcess {
    /// A server without controllers, on SQLite or on the etcd at `etcd`.
    fn without_controllers(etcd: Option<&str>) -> anyhow::Result<ServerProcess> {
        let mut args: Vec<String> = vec!["--no-controllers".into()];
        if let Some(endpoint) = etcd {
            args.extend(
                [
                    "--datastore-endpoint",
                    endpoint,
                    "--datastore-prefix",
                    "/bench",
                ]
                .map(String::from),
            );
        }
        ServerProcess::start_with(args)
    }

    /// `lariat init --infrastructure inmemory` against it.
    fn init_inmemory(&self) -> anyhow::Result<()> {
        let init = Command::new(std::env::current_exe()?)
            .args(["init", "--infrastructure", "inmemory", "--kubeconfig"])
            .arg(&self.kubeconfig)
            .output()?;
        if !init.status.success() {
            bail!(
                "lariat init failed: {}",
                String::from_utf8_lossy(&init.stderr)
            );
        }
        Ok(())
    }

    /// A server (with `args`) for `clusters` in-memory clusters, the in-memory provider
    /// enabled. Every in-process agent dials the server from one address (its tunnel, and its
    /// watches and requests on the API), which the per-client connection cap would otherwise
    /// (rightly) treat as one abusive client.
    fn for_inmemory_clusters(
        clusters: usize,
        mut args: Vec<String>,
    ) -> anyhow::Result<ServerProcess> {
        args.extend([
            "--max-connections".into(),
            (clusters * 8 + 16_384).to_string(),
            "--max-connections-per-client".into(),
            (clusters * 8).max(1024).to_string(),
            "--max-unauthenticated-connections".into(),
            (clusters * 8).max(1024).to_string(),
            "--max-unauthenticated-connections-per-client".into(),
            (clusters * 8).max(1024).to_string(),
        ]);
        let server = ServerProcess::start_with(args)?;
        server.init_inmemory()?;
        Ok(server)
    }

    fn start_with(args: Vec<String>) -> anyhow::Result<ServerProcess> {
        let dir = tempfile::tempdir()?;
        let (child, address) = ServerProcess::spawn(dir.path(), &args, "127.0.0.1:0")?;
        Ok(ServerProcess {
            child,
            kubeconfig: dir.path().join("kubeconfig.yaml"),
            dir,
            args,
            address,
        })
    }

    /// Starts `lariat server` and waits until it listens; returns its address.
    fn spawn(dir: &Path, args: &[String], listen: &str) -> anyhow::Result<(Child, String)> {
        let log = dir.join("server.log");
        let child = Command::new(std::env::current_exe()?)
            .arg("server")
            .arg("--data-dir")
            .arg(dir)
            .args(["--listen", listen])
            .args(args)
            // LARIAT_BENCH_SERVER_LOG traces the server (its log is in its data directory).
            .env(
                "LARIAT_LOG",
                std::env::var("LARIAT_BENCH_SERVER_LOG")
                    .unwrap_or_else(|_| "warn,lariat=info,lariat_apiserver=info".into()),
            )
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .context("start the server")?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            // Up to the `;` after the address: the log may be read mid-line.
            if let Some((address, _)) = text
                .split("listening on https://")
                .nth(1)
                .and_then(|rest| rest.split_once(';'))
            {
                return Ok((child, address.to_string()));
            }
            if Instant::now() > deadline {
                bail!("the server did not start: {text}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// What the server logged since it was (last) started.
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// `kill -9`: no shutdown path runs.
    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The same server again, on the same address and data.
    fn relaunch(&mut self) -> anyhow::Result<()> {
        let (child, _) = ServerProcess::spawn(self.dir.path(), &self.args, &self.address)?;
        self.child = child;
        Ok(())
    }

    /// Resident and peak resident memory of the server, in MiB.
    fn memory_mib(&self) -> (f64, f64) {
        (self.status_mib("VmRSS:"), self.status_mib("VmHWM:"))
    }

    /// The server's private (anonymous) resident memory in MiB: its heap and stacks, without
    /// the pages of its binary mapped from the page cache, which RSS counts too.
    fn heap_mib(&self) -> f64 {
        self.status_mib("RssAnon:")
    }

    /// A memory figure of the server's `/proc/PID/status`, in MiB.
    fn status_mib(&self, field: &str) -> f64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default()
            .lines()
            .find(|l| l.starts_with(field))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
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
    Api::namespaced_with(client, "default", &capi("Cluster"))
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

/// One row of a bench's table in docs/benchmarks.md, printed as the bench's last line so
/// that a run's figures are kept as they were printed: the date, the commit, the load average
/// when the bench started, then the bench's figures in its table's column order.
struct Row {
    cells: Vec<String>,
}

impl Row {
    fn new(load_at_start: &str) -> Row {
        let load = load_at_start.split_whitespace().next().unwrap_or("?");
        Row {
            cells: vec![
                chrono::Utc::now().format("%Y-%m-%d").to_string(),
                commit(),
                load.to_string(),
            ],
        }
    }

    fn cell(mut self, value: impl std::fmt::Display) -> Row {
        self.cells.push(value.to_string());
        self
    }

    fn print(&self, bench: &str) {
        println!(
            "  row of docs/benchmarks.md's `{bench}` table: | {} |",
            self.cells.join(" | ")
        );
    }
}

/// The commit this binary was built from: the release build's, else the checkout's (with
/// `+dirty` for uncommitted changes), else `?`.
fn commit() -> String {
    if let Some(commit) = option_env!("LARIAT_COMMIT") {
        return commit.chars().take(7).collect();
    }
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match git(&["rev-parse", "--short=7", "HEAD"]) {
        Some(head)
            if git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|changes| !changes.is_empty()) =>
        {
            format!("{head}+dirty")
        }
        Some(head) => head,
        None => "?".into(),
    }
}

/// The machine's load average (1, 5 and 15 minutes), printed with every figure.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The `q` quantile of sorted latencies, in milliseconds.
fn percentile_ms(sorted: &[Duration], q: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted.get(i).copied().unwrap_or_default().as_secs_f64() * 1000.0
}

/// Latency samples of one phase.
struct Samples {
    latencies: Vec<Duration>,
    elapsed: Duration,
}

impl Samples {
    fn rate(&self) -> f64 {
        self.latencies.len() as f64 / self.elapsed.as_secs_f64()
    }

    /// The `q` quantile in milliseconds (after [`Samples::line`], which sorts).
    fn percentile(&self, q: f64) -> f64 {
        percentile_ms(&self.latencies, q)
    }

    fn line(&mut self, what: &str) -> String {
        self.latencies.sort();
        format!(
            "  {what:<8} {:>8} ops  {:>9.0} ops/s  p50 {:>7.2} ms  p99 {:>7.2} ms",
            self.latencies.len(),
            self.rate(),
            self.percentile(0.5),
            self.percentile(0.99)
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

// Long: a benchmark's scenario, its steps in the order they run and print their figures.
async fn api(args: ApiArgs) -> anyhow::Result<()> {
    let load = load_average();
    println!(
        "lariat bench api: concurrency {}, load average {load}",
        args.concurrency
    );
    for backend in &args.backends {
        for (&kind, &objects) in args
            .kinds
            .iter()
            .flat_map(|kind| args.objects.iter().map(move |objects| (kind, objects)))
        {
            let etcd = match backend.as_str() {
                "sqlite" => None,
                "etcd" => Some(
                    EtcdProcess::start().context("start etcd (apt-get install -y etcd-server)")?,
                ),
                other => bail!("unknown backend {other:?}: use sqlite or etcd"),
            };
            let endpoint = etcd.as_ref().map(|e| e.endpoint());
            let server = ServerProcess::without_controllers(endpoint.as_deref())?;
            let api = kind.api(server.client().await?);
            println!("\n{backend}, {objects} {kind:?} objects");
            let (idle_rss, _) = server.memory_mib();
            let idle_heap = server.heap_mib();

            // Create in tenths, timing a full list after each tenth to show how list time grows.
            let mut creates = Samples {
                latencies: vec![],
                elapsed: Duration::ZERO,
            };
            let mut growth = vec![];
            // The creates' CPU only: the lists between tenths are timed on their own (they
            // were counted in until session 30).
            let mut create_cpu = 0.0;
            for tenth in 0..10 {
                let cpu_before = server.cpu_seconds();
                let (from, to) = (objects * tenth / 10, objects * (tenth + 1) / 10);
                let api_for = api.clone();
                let part = timed(to - from, args.concurrency, move |i| {
                    let api = api_for.clone();
                    async move {
                        api.create(
                            &PostParams::default(),
                            &kind.object(&format!("c{:07}", from + i)),
                        )
                        .await?;
                        Ok(())
                    }
                })
                .await?;
                create_cpu += server.cpu_seconds() - cpu_before;
                creates.latencies.extend(part.latencies);
                creates.elapsed += part.elapsed;
                let (seconds, count) = list_seconds(&api, None).await?;
                growth.push((count, seconds));
            }
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
            let heap = server.heap_mib();
            println!(
                "  server memory: idle {idle_rss:.0} MiB ({idle_heap:.0} MiB heap), now {rss:.0} MiB ({heap:.0} MiB heap), peak {peak:.0} MiB ({:.1} KiB per object above idle)",
                (rss - idle_rss).max(0.0) * 1024.0 / objects as f64
            );
            Row::new(&load)
                .cell(backend)
                .cell(format!("{kind:?}"))
                .cell(objects)
                .cell(format!("{:.0}", creates.rate()))
                .cell(format!("{:.0} µs", create_cpu * 1e6 / objects as f64))
                .cell(format!("{:.0}", gets.rate()))
                .cell(format!("{:.0} ms", full * 1000.0))
                .cell(format!("{:.0}", patches.rate()))
                .cell(format!("{:.1} ms", watch.percentile(0.99)))
                .cell(format!("{idle_rss:.0} MiB ({idle_heap:.0} heap)"))
                .cell(format!("{rss:.0} MiB ({heap:.0} heap)"))
                .print("bench api");
            drop(server);
            drop(etcd);
        }
    }
    Ok(())
}

/// Creates every object of a multi-document manifest.
async fn apply_all(client: &kube::Client, manifests: &str) -> anyhow::Result<()> {
    use serde::Deserialize;
    let objects = serde_yaml_ng::Deserializer::from_str(manifests)
        .map(DynamicObject::deserialize)
        .collect::<Result<Vec<_>, _>>()?;
    for object in objects {
        let types = object
            .types
            .clone()
            .context("every object has apiVersion and kind")?;
        let (group, version) = types
            .api_version
            .rsplit_once('/')
            .unwrap_or(("", &types.api_version));
        let gvk = kube::core::GroupVersionKind::gvk(group, version, &types.kind);
        let (resource, _) = kube::discovery::pinned_kind(client, &gvk).await?;
        let namespace = object.metadata.namespace.as_deref().unwrap_or("default");
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
        api.create(&PostParams::default(), &object).await?;
    }
    Ok(())
}

fn machines_api(client: kube::Client) -> Api<DynamicObject> {
    Api::namespaced_with(client, "default", &capi("Machine"))
}

/// Creates an in-memory cluster (one control-plane machine, no workers, booting at once) for
/// each of `names` in `namespace`, labelled with `labels`, eight writers at a time.
async fn create_inmemory_clusters(
    client: &kube::Client,
    namespace: &str,
    names: Vec<String>,
    labels: serde_json::Value,
) -> anyhow::Result<()> {
    use std::sync::Mutex;
    let names = Arc::new(Mutex::new(names));
    let creators: Vec<_> = (0..8)
        .map(|_| {
            let (client, names, labels) = (client.clone(), names.clone(), labels.clone());
            let namespace = namespace.to_string();
            tokio::spawn(async move {
                let api: Api<DynamicObject> =
                    Api::namespaced_with(client.clone(), &namespace, &capi("Cluster"));
                loop {
                    let Some(name) = names.lock().expect("lock").pop() else {
                        return Ok::<_, anyhow::Error>(());
                    };
                    let manifests = crate::generate::cluster(&crate::generate::ClusterArgs {
                        flavor: None,
                        region: None,
                        name: name.clone(),
                        infrastructure: "inmemory".into(),
                        kubernetes_version: "v1.30.2".into(),
                        control_plane_machine_count: 1,
                        worker_machine_count: 0,
                        namespace: namespace.clone(),
                        provisioning_delay: "0s".into(),
                    })?;
                    apply_all(&client, &manifests).await?;
                    api.patch(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(serde_json::json!({"metadata": {"labels": labels}})),
                    )
                    .await?;
                }
            })
        })
        .collect();
    for creator in creators {
        creator.await??;
    }
    Ok(())
}

/// Waits (at most a minute, or 200 ms per cluster if that is longer) until `clusters`
/// ClusterConnections say their agent is connected.
async fn until_connected(client: &kube::Client, clusters: usize) -> anyhow::Result<()> {
    let connections: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &lariat_api::management::cluster_connection_resource(),
    );
    let patience = Duration::from_millis(200 * clusters as u64).max(Duration::from_secs(60));
    let deadline = Instant::now() + patience;
    loop {
        let list = connections.list(&ListParams::default()).await?.items;
        let connected = list
            .iter()
            .filter(|c| c.data["status"]["connected"] == true)
            .count();
        if connected >= clusters {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("only {connected} of {clusters} agents connected within {patience:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn until_running(
    api: &Api<DynamicObject>,
    expected: usize,
    version: &str,
    started: Instant,
) -> anyhow::Result<Duration> {
    use kube::runtime::watcher::{self, Event};
    // Watched rather than listed again and again: at 13,000 machines each list would cost the
    // server as much as the work being timed.
    let deadline = tokio::time::Instant::from_std(started + Duration::from_secs(1800));
    let is_running = |m: &DynamicObject| {
        m.data["status"]["phase"] == "Running"
            && m.data["spec"]["version"] == version
            && m.metadata.deletion_timestamp.is_none()
    };
    // Each machine's name and whether it runs `version`; how many do.
    let mut machines: std::collections::HashMap<String, bool> = Default::default();
    let mut running = 0;
    let mut listed = false;
    let mut events = std::pin::pin!(watcher::watcher(api.clone(), watcher::Config::default()));
    loop {
        let event = match tokio::time::timeout_at(deadline, events.try_next()).await {
            Ok(event) => event?.context("the watch of Machines ended")?,
            Err(_) => {
                bail!("only {running} of {expected} machines run {version} after 30 minutes");
            }
        };
        match event {
            Event::Init => {
                machines.clear();
                running = 0;
                listed = false;
            }
            Event::InitDone => listed = true,
            Event::InitApply(m) | Event::Apply(m) => {
                let now = is_running(&m);
                if machines.insert(m.name_any(), now) == Some(true) {
                    running -= 1;
                }
                running += usize::from(now);
            }
            Event::Delete(m) => {
                if machines.remove(&m.name_any()) == Some(true) {
                    running -= 1;
                }
            }
        }
        if listed && machines.len() == expected && running == expected {
            return Ok(started.elapsed());
        }
    }
}

/// Reconciles so far per controller, from the server's `/metrics`.
async fn reconciles(client: &kube::Client) -> anyhow::Result<Vec<(String, f64)>> {
    let text = client
        .request_text(http::Request::get("/metrics").body(Vec::new())?)
        .await?;
    let mut counts: std::collections::BTreeMap<String, f64> = Default::default();
    for line in text
        .lines()
        .filter(|l| l.starts_with("lariat_reconciles_total{"))
    {
        *counts.entry(metric_label(line, "controller")).or_default() += metric_value(line);
    }
    Ok(counts.into_iter().collect())
}

/// A label's value in a Prometheus text sample line ("" when the line has no such label).
fn metric_label(line: &str, name: &str) -> String {
    line.split(&format!("{name}=\""))
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_default()
        .to_string()
}

/// The value of a Prometheus text sample line.
fn metric_value(line: &str) -> f64 {
    line.rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// Requests served so far, counted by `(api, verb, resource)`, from the server's `/metrics`
/// (`apiserver_request_total`; `api` is `management` or `workload`; discovery documents have
/// no resource).
type RequestCounts = std::collections::BTreeMap<(String, String, String), f64>;

async fn requests(client: &kube::Client) -> anyhow::Result<RequestCounts> {
    let text = client
        .request_text(http::Request::get("/metrics").body(Vec::new())?)
        .await?;
    let mut counts = RequestCounts::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
    {
        let resource = match metric_label(line, "resource") {
            resource if resource.is_empty() => "discovery".to_string(),
            resource => resource,
        };
        let key = (
            metric_label(line, "api"),
            metric_label(line, "verb"),
            resource,
        );
        *counts.entry(key).or_default() += metric_value(line);
    }
    Ok(counts)
}

/// Requests of `api` between two counts, divided by `per`: the total, then "VERB n" for each
/// verb, then the resources most read with GET, most listed, and most written (POST, PUT,
/// PATCH, APPLY, DELETE).
fn requests_per(before: &RequestCounts, after: &RequestCounts, api: &str, per: f64) -> String {
    let mut by_verb = std::collections::BTreeMap::<&str, f64>::new();
    let mut reads = std::collections::BTreeMap::<&str, f64>::new();
    let mut writes = std::collections::BTreeMap::<&str, f64>::new();
    let mut lists = std::collections::BTreeMap::<&str, f64>::new();
    for ((which, verb, resource), n) in after.iter().filter(|((which, ..), _)| which == api) {
        let delta = n - before
            .get(&(which.clone(), verb.clone(), resource.clone()))
            .copied()
            .unwrap_or(0.0);
        if delta > 0.0 {
            *by_verb.entry(verb).or_default() += delta / per;
            match verb.as_str() {
                "GET" => *reads.entry(resource).or_default() += delta / per,
                "LIST" => *lists.entry(resource).or_default() += delta / per,
                "WATCH" => {}
                _ => *writes.entry(resource).or_default() += delta / per,
            }
        }
    }
    let top = |counts: std::collections::BTreeMap<&str, f64>| -> String {
        let mut counts: Vec<(&str, f64)> = counts.into_iter().collect();
        counts.sort_by(|a, b| b.1.total_cmp(&a.1));
        let top: Vec<String> = counts
            .iter()
            .take(6)
            .map(|(resource, n)| format!("{resource} {n:.1}"))
            .collect();
        if top.is_empty() {
            "nothing".into()
        } else {
            top.join(", ")
        }
    };
    // `+ 0.0`: an empty sum of f64 is -0.0.
    let total: f64 = by_verb.values().sum::<f64>() + 0.0;
    let verbs: Vec<String> = by_verb.iter().map(|(v, n)| format!("{v} {n:.1}")).collect();
    format!(
        "{total:.1} ({}; GET of {}; LIST of {}; writes to {})",
        if verbs.is_empty() {
            "none".to_string()
        } else {
            verbs.join(", ")
        },
        top(reads),
        top(lists),
        top(writes)
    )
}

// Long: a benchmark's scenario, its steps in the order they run and print their figures.
async fn lifecycle(args: LifecycleArgs) -> anyhow::Result<()> {
    let load = load_average();
    println!(
        "lariat bench lifecycle: {} clusters x ({} control plane + {} workers), in-memory provider, zero delay; load average {load}",
        args.clusters, args.control_plane, args.workers,
    );
    let server = ServerProcess::for_inmemory_clusters(args.clusters, vec![])?;
    let client = server.client().await?;
    let machines = machines_api(client.clone());
    let expected = args.clusters * (args.control_plane + args.workers) as usize;
    let cpu_before = server.cpu_seconds();
    let requests_before = requests(&client).await?;
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let creators: Vec<_> = (0..8)
        .map(|_| {
            let (client, next) = (client.clone(), next.clone());
            let (clusters, cp, workers) = (args.clusters, args.control_plane, args.workers);
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= clusters {
                        return Ok::<_, anyhow::Error>(());
                    }
                    let manifests = crate::generate::cluster(&crate::generate::ClusterArgs {
                        flavor: None,
                        region: None,
                        name: format!("bench-{i:04}"),
                        infrastructure: "inmemory".into(),
                        kubernetes_version: "v1.30.2".into(),
                        control_plane_machine_count: cp,
                        worker_machine_count: workers,
                        namespace: "default".into(),
                        provisioning_delay: "0s".into(),
                    })?;
                    apply_all(&client, &manifests).await?;
                }
            })
        })
        .collect();
    for creator in creators {
        creator.await??;
    }
    let applied = started.elapsed();
    let took = until_running(&machines, expected, "v1.30.2", started).await?;
    let cpu = server.cpu_seconds() - cpu_before;
    let revision: i64 = machines
        .list(&ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .unwrap_or_default()
        .parse()
        .unwrap_or(0);
    let (rss, peak) = server.memory_mib();
    let reconciles = reconciles(&client).await?;
    let requests_after = requests(&client).await?;
    println!(
        "  applied {} clusters in {:.1} s",
        args.clusters,
        applied.as_secs_f64()
    );
    println!(
        "  all {expected} machines Running after {:.1} s ({:.1} machines/s)",
        took.as_secs_f64(),
        expected as f64 / took.as_secs_f64()
    );
    let per_controller: Vec<String> = reconciles
        .iter()
        .map(|(controller, n)| format!("{controller} {n:.0}"))
        .collect();
    let total_reconciles: f64 = reconciles.iter().map(|(_, n)| n).sum();
    println!(
        "  reconciles {total_reconciles:.0} ({:.0}/s: {}), {:.1} per machine",
        total_reconciles / took.as_secs_f64(),
        per_controller.join(", "),
        total_reconciles / expected as f64
    );
    println!(
        "  store writes {revision} ({:.0}/s, {:.1} per machine), server CPU {:.1} s ({:.0}% of one core, {:.0} ms per machine)",
        revision as f64 / took.as_secs_f64(),
        revision as f64 / expected as f64,
        cpu,
        cpu * 100.0 / took.as_secs_f64(),
        cpu * 1000.0 / expected as f64
    );
    for api in ["management", "workload"] {
        let per_machine = requests_per(&requests_before, &requests_after, api, expected as f64);
        println!("  {api} API requests per machine {per_machine}");
    }
    let mut row = Row::new(&load)
        .cell(expected)
        .cell(format!("{:.1} s", took.as_secs_f64()))
        .cell(format!("{:.0} ms", cpu * 1000.0 / expected as f64))
        .cell(format!("{:.1}", revision as f64 / expected as f64));
    println!(
        "  server memory now {rss:.0} MiB, peak {peak:.0} MiB ({:.0} KiB per machine)",
        rss * 1024.0 / expected as f64
    );

    // The idle fleet: every machine Running, every agent connected, nothing changing (an
    // agent's first heartbeat within the window would be counted as idle cost).
    until_connected(&client, args.clusters).await?;
    let cpu_before = server.cpu_seconds();
    let requests_before = requests(&client).await?;
    tokio::time::sleep(Duration::from_secs(args.idle_seconds)).await;
    let cpu = server.cpu_seconds() - cpu_before;
    let requests_after = requests(&client).await?;
    let seconds = args.idle_seconds as f64;
    println!(
        "  idle, {expected} machines Running, over {} s: server CPU {:.1}% of one core",
        args.idle_seconds,
        cpu * 100.0 / seconds
    );
    row = row
        .cell(format!("{peak:.0} MiB"))
        .cell(format!("{:.1}%", cpu * 100.0 / seconds));
    for api in ["management", "workload"] {
        let per_second = requests_per(&requests_before, &requests_after, api, seconds);
        println!("  idle {api} API requests per second {per_second}");
    }

    // A rolling upgrade of one large MachineDeployment.
    let manifests = crate::generate::cluster(&crate::generate::ClusterArgs {
        flavor: None,
        region: None,
        name: "upgrade".into(),
        infrastructure: "inmemory".into(),
        kubernetes_version: "v1.30.2".into(),
        control_plane_machine_count: 1,
        worker_machine_count: args.upgrade_workers,
        namespace: "default".into(),
        provisioning_delay: "0s".into(),
    })?;
    let started = Instant::now();
    apply_all(&client, &manifests).await?;
    let total = expected + 1 + args.upgrade_workers as usize;
    until_running(&machines, total, "v1.30.2", started).await?;
    let deployments: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &capi("MachineDeployment"));
    let started = Instant::now();
    deployments
        .patch(
            "upgrade-md-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"spec": {"version": "v1.31.0"}}}})),
        )
        .await?;
    let deadline = started + Duration::from_secs(1800);
    loop {
        let list = machines
            .list(&ListParams::default().labels("cluster.x-k8s.io/deployment-name=upgrade-md-0"))
            .await?;
        let upgraded = list
            .items
            .iter()
            .filter(|m| {
                m.data["spec"]["version"] == "v1.31.0" && m.data["status"]["phase"] == "Running"
            })
            .count();
        if upgraded == args.upgrade_workers as usize
            && list.items.len() == args.upgrade_workers as usize
        {
            break;
        }
        if Instant::now() > deadline {
            bail!("the rolling upgrade did not finish in 30 minutes ({upgraded} upgraded)");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!(
        "  rolling upgrade of a {}-machine MachineDeployment (maxSurge 1, maxUnavailable 0): {:.1} s",
        args.upgrade_workers,
        started.elapsed().as_secs_f64()
    );
    row.cell(format!("{:.1} s", started.elapsed().as_secs_f64()))
        .print("bench lifecycle");
    Ok(())
}
