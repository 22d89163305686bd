//! `lariat bench workloads`: in-memory clusters that run Deployments, as issue 42's figures
//! ask: how long until every Deployment of every cluster is Available, the server's CPU and
//! memory per Pod (the simulated clusters, their controllers, schedulers and kubelets run in
//! the server's process), and the idle cost once every Pod runs.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use serde_json::json;

use super::{Row, ServerProcess, load_average, machines_api, until_running};

#[derive(clap::Args)]
pub struct WorkloadsArgs {
    /// In-memory clusters, each a control plane and `--workers` workers.
    #[arg(long, default_value_t = 100)]
    clusters: usize,
    #[arg(long, default_value_t = 2)]
    workers: u32,
    /// Deployments per cluster.
    #[arg(long, default_value_t = 10)]
    deployments: usize,
    /// Replicas per Deployment.
    #[arg(long, default_value_t = 10)]
    replicas: usize,
    /// Seconds the idle clusters (every Pod Running) are measured for.
    #[arg(long, default_value_t = 60)]
    idle_seconds: u64,
}

/// A kube-rs client for the simulated cluster `name`, from its `<name>-kubeconfig` Secret.
async fn workload_client(management: &kube::Client, name: &str) -> anyhow::Result<kube::Client> {
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(management.clone(), "default");
    let secret = secrets.get(&format!("{name}-kubeconfig")).await?;
    let value = secret
        .data
        .and_then(|d| d.get("value").cloned())
        .context("the kubeconfig Secret has no value")?;
    let kubeconfig = kube::config::Kubeconfig::from_yaml(std::str::from_utf8(&value.0)?)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

fn deployment(name: &str, replicas: usize) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27",
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]},
            },
        },
    }))
    .expect("a valid Deployment")
}

/// How many of the Deployments in `clients`' clusters are Available with every replica.
async fn available(clients: &[kube::Client], replicas: usize) -> anyhow::Result<usize> {
    let resource = kube::api::ApiResource::erase::<k8s_openapi::api::apps::v1::Deployment>(&());
    let mut count = 0;
    for client in clients {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &resource);
        count += api
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|d| d.data["status"]["availableReplicas"].as_u64() == Some(replicas as u64))
            .count();
    }
    Ok(count)
}

pub async fn run(args: WorkloadsArgs) -> anyhow::Result<()> {
    let load = load_average();
    let pods = args.clusters * args.deployments * args.replicas;
    println!(
        "lariat bench workloads: {} in-memory clusters x {} Deployments of {} replicas ({pods} Pods); load average {load}",
        args.clusters, args.deployments, args.replicas,
    );
    let server = ServerProcess::for_inmemory_clusters(args.clusters, vec![])?;
    let client = server.client().await?;
    let names: Vec<String> = (0..args.clusters).map(|i| format!("w-{i:04}")).collect();
    for name in &names {
        let manifests = crate::generate::cluster(&crate::generate::ClusterArgs {
            flavor: None,
            region: None,
            name: name.clone(),
            infrastructure: "inmemory".into(),
            kubernetes_version: "v1.30.2".into(),
            control_plane_machine_count: 1,
            worker_machine_count: args.workers,
            namespace: "default".into(),
            provisioning_delay: "0s".into(),
        })?;
        super::apply_all(&client, &manifests).await?;
    }
    let machines = args.clusters * (1 + args.workers as usize);
    until_running(
        &machines_api(client.clone()),
        machines,
        "v1.30.2",
        Instant::now(),
    )
    .await?;
    let mut clients = Vec::with_capacity(names.len());
    for name in &names {
        clients.push(workload_client(&client, name).await?);
    }
    let (rss_before, _) = server.memory_mib();
    let cpu_before = server.cpu_seconds();
    let started = Instant::now();
    let resource = kube::api::ApiResource::erase::<k8s_openapi::api::apps::v1::Deployment>(&());
    for cluster in &clients {
        let api: Api<DynamicObject> = Api::namespaced_with(cluster.clone(), "default", &resource);
        for d in 0..args.deployments {
            api.create(
                &PostParams::default(),
                &deployment(&format!("app-{d}"), args.replicas),
            )
            .await?;
        }
    }
    let wanted = args.clusters * args.deployments;
    let deadline = started + Duration::from_secs(1800);
    loop {
        let ready = available(&clients, args.replicas).await?;
        if ready == wanted {
            break;
        }
        if Instant::now() > deadline {
            bail!("only {ready} of {wanted} Deployments Available after 30 minutes");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let took = started.elapsed().as_secs_f64();
    let cpu = server.cpu_seconds() - cpu_before;
    let (rss, peak) = server.memory_mib();
    println!(
        "  all {wanted} Deployments Available ({pods} Pods Running) after {took:.1} s ({:.0} Pods/s)",
        pods as f64 / took
    );
    println!(
        "  server CPU {cpu:.1} s ({:.2} ms per Pod); memory {rss_before:.0} -> {rss:.0} MiB ({:.1} KiB per Pod), peak {peak:.0} MiB",
        cpu * 1000.0 / pods as f64,
        (rss - rss_before) * 1024.0 / pods as f64
    );
    let cpu_before = server.cpu_seconds();
    tokio::time::sleep(Duration::from_secs(args.idle_seconds)).await;
    let idle = (server.cpu_seconds() - cpu_before) * 100.0 / args.idle_seconds as f64;
    println!(
        "  idle, every Pod Running, over {} s: server CPU {idle:.1}% of one core",
        args.idle_seconds
    );
    Row::new(&load)
        .cell(args.clusters)
        .cell(pods)
        .cell(format!("{took:.1} s"))
        .cell(format!("{:.2} ms", cpu * 1000.0 / pods as f64))
        .cell(format!(
            "{:.1} KiB",
            (rss - rss_before) * 1024.0 / pods as f64
        ))
        .cell(format!("{peak:.0} MiB"))
        .cell(format!("{idle:.1}% ({} s)", args.idle_seconds))
        .print("bench workloads");
    Ok(())
}
