//! `lariat bench aws`: the AWS provider's API economy against moto, in one process (the SDK's
//! call counter is read where the provider runs): the calls to make one EKS cluster with a
//! node group, the time to make many, and the calls per cluster of a reconcile in steady
//! state, mutating ones apart.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use lariat_provider_aws::moto::Moto;
use lariat_provider_aws::{Aws, Settings};
use serde_json::{Value, json};

use super::load_average;

#[derive(clap::Args)]
pub struct AwsArgs {
    /// EKS clusters made together (each with a managed node group of 3).
    #[arg(long, default_value_t = 50)]
    clusters: usize,
}

const NS: &str = "bench";

type Calls = BTreeMap<(String, String), u64>;

/// Requests between two counts: total, and the mutating ones (anything but Describe, List,
/// Get).
fn delta(before: &Calls, after: &Calls) -> (u64, u64, Vec<String>) {
    let mut total = 0;
    let mut mutating = 0;
    let mut names = Vec::new();
    for (key @ (_, operation), count) in after {
        let n = count - before.get(key).copied().unwrap_or(0);
        if n == 0 {
            continue;
        }
        total += n;
        if !["Describe", "List", "Get"]
            .iter()
            .any(|p| operation.starts_with(p))
        {
            mutating += n;
        }
        names.push(format!("{operation} {n}"));
    }
    (total, mutating, names)
}

fn manifests(name: &str) -> Vec<Value> {
    vec![
        json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "AWSManagedCluster", "name": name},
            "controlPlaneRef": {"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "AWSManagedControlPlane", "name": format!("{name}-control-plane")},
        }}),
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "AWSManagedCluster",
            "metadata": {"name": name, "namespace": NS}, "spec": {}}),
        json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "AWSManagedControlPlane",
            "metadata": {"name": format!("{name}-control-plane"), "namespace": NS},
            "spec": {"region": "us-east-1", "version": "v1.31.0",
                     "identityRef": {"kind": "AWSClusterStaticIdentity", "name": "bench"}}}),
        json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "MachinePool",
        "metadata": {"name": format!("{name}-pool-0"), "namespace": NS},
        "spec": {"clusterName": name, "replicas": 3, "template": {"spec": {
            "clusterName": name, "version": "v1.31.0", "bootstrap": {"dataSecretName": ""},
            "infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "AWSManagedMachinePool", "name": format!("{name}-pool-0")},
        }}}}),
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "AWSManagedMachinePool",
            "metadata": {"name": format!("{name}-pool-0"), "namespace": NS},
            "spec": {"instanceType": "t3.large", "scaling": {"minSize": 1, "maxSize": 10}}}),
    ]
}

async fn apply(client: &kube::Client, object: Value) -> anyhow::Result<()> {
    let object: DynamicObject = serde_json::from_value(object)?;
    let gvk = kube::core::GroupVersionKind::try_from(object.types.as_ref().context("types")?)?;
    let resource = kube::core::ApiResource::from_gvk(&gvk);
    let api: Api<DynamicObject> = match &object.metadata.namespace {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    api.patch(
        object.metadata.name.as_deref().unwrap_or_default(),
        &PatchParams::apply("bench").force(),
        &Patch::Apply(&object),
    )
    .await?;
    Ok(())
}

/// How many of the clusters `names` run their node group (MachinePool Running with 3).
async fn running(client: &kube::Client, names: &[String]) -> anyhow::Result<usize> {
    let pools: Api<lariat_api::capi::MachinePool> = Api::namespaced(client.clone(), NS);
    let list = pools.list(&Default::default()).await?;
    Ok(list
        .items
        .iter()
        .filter(|p| names.contains(&p.spec.cluster_name))
        .filter(|p| {
            p.status.as_ref().is_some_and(|s| {
                s.replicas == Some(3)
                    && s.phase == Some(lariat_api::capi::machine_pool::MachinePoolPhase::Running)
            })
        })
        .count())
}

/// The distinct reasons the provider's objects give for not being ready, with counts.
async fn not_ready(client: &kube::Client) -> anyhow::Result<Vec<String>> {
    let mut reasons = BTreeMap::<String, usize>::new();
    for resource in [
        lariat_provider_aws::control_plane::resource(),
        lariat_provider_aws::managed_machine_pool::resource(),
    ] {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &resource);
        for object in api.list(&Default::default()).await? {
            for condition in object.data["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
            {
                if condition["type"] == "Ready" && condition["status"] != "True" {
                    *reasons
                        .entry(format!(
                            "{}: {} {}",
                            resource.kind, condition["reason"], condition["message"]
                        ))
                        .or_default() += 1;
                }
            }
        }
    }
    // And the pools not running: their phase and what their infrastructure says.
    let pools: Api<lariat_api::capi::MachinePool> = Api::namespaced(client.clone(), NS);
    let groups: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NS,
        &lariat_provider_aws::managed_machine_pool::resource(),
    );
    for pool in pools.list(&Default::default()).await? {
        let status = pool.status.clone().unwrap_or_default();
        if status.phase == Some(lariat_api::capi::machine_pool::MachinePoolPhase::Running) {
            continue;
        }
        let name = pool.metadata.name.clone().unwrap_or_default();
        let group = groups.get_opt(&name).await?;
        *reasons
            .entry(format!(
                "MachinePool {:?} {:?} replicas, its node group ready {} replicas {}",
                status.phase,
                status.replicas,
                group
                    .as_ref()
                    .map(|g| g.data["status"]["ready"].clone())
                    .unwrap_or_default(),
                group
                    .as_ref()
                    .map(|g| g.data["status"]["replicas"].clone())
                    .unwrap_or_default(),
            ))
            .or_default() += 1;
    }
    Ok(reasons
        .into_iter()
        .map(|(reason, n)| format!("{n}x {reason}"))
        .collect())
}

async fn until_running(
    client: &kube::Client,
    names: &[String],
    moto: &Moto,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    // moto, one Python process, is the limit from about 20 clusters (its tag-filtered
    // Describe calls scan every resource): time grows faster than the count.
    let deadline = started + Duration::from_secs(120 + 20 * names.len() as u64);
    let (mut reported, moto_before) = (started, moto.cpu_time().unwrap_or_default());
    loop {
        let done = running(client, names).await?;
        if done == names.len() {
            break;
        }
        if reported.elapsed() > Duration::from_secs(30) {
            // Whether they are still coming, and whether moto is the limit.
            reported = Instant::now();
            let busy = moto
                .cpu_time()
                .unwrap_or_default()
                .saturating_sub(moto_before);
            println!(
                "  {done} of {} running after {:.0} s; moto busy {:.0}% of the time",
                names.len(),
                started.elapsed().as_secs_f64(),
                100.0 * busy.as_secs_f64() / started.elapsed().as_secs_f64()
            );
        }
        if Instant::now() > deadline {
            bail!(
                "only {} of {} clusters run their node group after {:?}; why: {}",
                running(client, names).await?,
                names.len(),
                started.elapsed(),
                not_ready(client).await?.join("; ")
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(started.elapsed())
}

/// Waits until no request has been sent for 3 s (objects still changing are looked at every
/// second).
async fn settled(aws: &Aws) {
    let mut last = aws.calls();
    loop {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let now = aws.calls();
        if now == last {
            return;
        }
        last = now;
    }
}

pub async fn run(args: AwsArgs) -> anyhow::Result<()> {
    println!("load average at start: {}", load_average());
    let moto = Moto::start();
    let dir = tempfile::tempdir()?;
    let store = Arc::new(lariat_store::sqlite::SqliteStore::open(
        &dir.path().join("db"),
    )?);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let plane = lariat_management::Plane::new(
        lariat_management::DEFAULT_HANDSHAKES_PER_SECOND,
        Default::default(),
    )
    .map_err(|e| anyhow::anyhow!(e))?;
    let simulated = lariat_provider_inmemory::simulated::SimulatedClusters::new();
    let config = crate::management_config(dir.path(), &plane, &simulated);
    let server = lariat_apiserver::Server::start(config, store, listener).await?;
    let client = server.local_client();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let until_stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    tokio::spawn(server.serve(until_stopped(stopped.clone())));
    for namespace in [lariat_api::clusterctl::NAMESPACE, NS] {
        apply(
            &client,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}),
        )
        .await?;
    }
    apply(
        &client,
        json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "bench", "namespace": lariat_api::clusterctl::NAMESPACE},
        "stringData": {"AccessKeyID": "AKIABENCH", "SecretAccessKey": "bench"}}),
    )
    .await?;
    apply(
        &client,
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
        "kind": "AWSClusterStaticIdentity", "metadata": {"name": "bench"},
        "spec": {"secretRef": "bench", "allowedNamespaces": {}}}),
    )
    .await?;
    let caches = lariat_controllers::cache::Caches::new(client.clone());
    let aws = Aws::new(Settings {
        endpoint_url: Some(moto.endpoint.clone()),
        // moto makes things at once; AWS would be polled every 15 s.
        poll_while_changing: Duration::from_secs(1),
        ..Settings::default()
    });
    tokio::spawn(lariat_controllers::run(
        caches.clone(),
        until_stopped(stopped.clone()),
    ));
    tokio::spawn(lariat_provider_aws::run(
        caches,
        aws.clone(),
        until_stopped(stopped.clone()),
    ));

    // One cluster alone: every request it takes to make it.
    let before = aws.calls();
    let first = vec!["first".to_owned()];
    for object in manifests("first") {
        apply(&client, object).await?;
    }
    let took = until_running(&client, &first, &moto).await?;
    settled(&aws).await;
    let (total, mutating, names) = delta(&before, &aws.calls());
    println!(
        "one EKS cluster with a node group of 3: {total} AWS requests ({mutating} mutating), ready in {:.1} s",
        took.as_secs_f64()
    );
    println!("  {}", names.join(", "));

    // Many at once.
    let names: Vec<String> = (0..args.clusters).map(|i| format!("c{i:03}")).collect();
    let before = aws.calls();
    let started = Instant::now();
    for name in &names {
        for object in manifests(name) {
            apply(&client, object).await?;
        }
    }
    let moto_before = moto.cpu_time().unwrap_or_default();
    let took = until_running(&client, &names, &moto).await?;
    let moto_busy = moto
        .cpu_time()
        .unwrap_or_default()
        .saturating_sub(moto_before);
    let elapsed = started.elapsed().max(took);
    settled(&aws).await;
    let (total, mutating, _) = delta(&before, &aws.calls());
    println!(
        "{} EKS clusters with node groups: all running in {:.1} s ({:.2} s per cluster), {} requests per cluster ({} mutating); moto busy {:.0}% of that time",
        args.clusters,
        elapsed.as_secs_f64(),
        elapsed.as_secs_f64() / args.clusters as f64,
        total / args.clusters as u64,
        mutating / args.clusters as u64,
        100.0 * moto_busy.as_secs_f64() / took.as_secs_f64(),
    );

    // Steady state: one reconcile of each object of every cluster (what each resync costs).
    let before = aws.calls();
    let all: Vec<String> = first.iter().chain(&names).cloned().collect();
    for resource in [
        lariat_provider_aws::control_plane::resource(),
        lariat_provider_aws::managed_machine_pool::resource(),
        lariat_provider_aws::managed_cluster::resource(),
    ] {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &resource);
        for object in api.list(&Default::default()).await? {
            api.patch(
                object.metadata.name.as_deref().unwrap_or_default(),
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"bench.lariat.dev/poke": "1"}}})),
            )
            .await?;
        }
    }
    settled(&aws).await;
    let (total, mutating, names) = delta(&before, &aws.calls());
    println!(
        "steady state, one reconcile of each object: {:.1} AWS requests per cluster, {mutating} mutating in all",
        total as f64 / all.len() as f64
    );
    println!("  {}", names.join(", "));
    println!("load average at end: {}", load_average());
    let _ = stop.send(true);
    Ok(())
}
