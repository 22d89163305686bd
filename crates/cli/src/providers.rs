//! The providers built into lariat and the two halves of enabling one, as `clusterctl init`
//! does: `lariat init` checks a provider's contract and records it in the inventory (one
//! clusterctl-compatible `Provider` object in `lariat-system`); the server runs a provider's
//! controllers only while its inventory entry exists, and reports on that entry whether they
//! run.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use futures::{StreamExt, TryStreamExt};
use kube::runtime::WatchStreamExt;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use lariat_api::capi::labels::PROVIDER_NAME;
use lariat_api::clusterctl::{self, BOOTSTRAP, CONTROL_PLANE, CORE, INFRASTRUCTURE};
use lariat_controllers::cache::Caches;
use lariat_provider_inmemory::simulated::SimulatedClusters;
use serde_json::json;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The Cluster API contract core speaks; a provider must implement it to be enabled.
pub const CONTRACT: &str = "v1beta1";

/// A provider compiled into this binary.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Builtin {
    pub provider_type: &'static str,
    pub name: &'static str,
}

pub const BUILTIN: &[Builtin] = &[
    Builtin {
        provider_type: CORE,
        name: "cluster-api",
    },
    Builtin {
        provider_type: BOOTSTRAP,
        name: "kubeadm",
    },
    Builtin {
        provider_type: CONTROL_PLANE,
        name: "kubeadm",
    },
    Builtin {
        provider_type: INFRASTRUCTURE,
        name: "inmemory",
    },
    Builtin {
        provider_type: INFRASTRUCTURE,
        name: "aws",
    },
];

/// Every built-in provider has the version of the binary it is built into.
pub fn version() -> String {
    format!("v{}", env!("CARGO_PKG_VERSION"))
}

impl Builtin {
    pub fn inventory_name(&self) -> String {
        clusterctl::inventory_name(self.provider_type, self.name)
    }

    /// The CRDs this provider brings, found by their `cluster.x-k8s.io/provider` label.
    fn crds(&self) -> Vec<CustomResourceDefinition> {
        let name = self.inventory_name();
        lariat_api::builtin_crds()
            .into_iter()
            .filter(|crd| crd.labels().get(PROVIDER_NAME) == Some(&name))
            .collect()
    }
}

/// `lariat init`'s arguments.
#[derive(clap::Args)]
pub struct InitArgs {
    /// Infrastructure provider to enable, NAME or NAME:VERSION (repeatable), e.g. inmemory.
    #[arg(long = "infrastructure")]
    infrastructure: Vec<String>,
    /// Bootstrap provider to enable.
    #[arg(long = "bootstrap", default_value = "kubeadm")]
    bootstrap: Vec<String>,
    /// Control plane provider to enable.
    #[arg(long = "control-plane", default_value = "kubeadm")]
    control_plane: Vec<String>,
    /// Kubeconfig of the lariat server [default: $KUBECONFIG, ~/.kube/config, ./lariat-data/kubeconfig.yaml].
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Seconds to wait for the server to report every provider running.
    #[arg(long, default_value_t = 60)]
    wait_seconds: u64,
}

/// Resolves `NAME[:VERSION]` of a provider type against the built-in providers, or says why not.
pub fn resolve(provider_type: &'static str, spec: &str) -> anyhow::Result<Builtin> {
    let (name, pin) = match spec.split_once(':') {
        Some((name, pin)) => (name, Some(pin)),
        None => (spec, None),
    };
    let kind = clusterctl::inventory_name(provider_type, "")
        .trim_end_matches('-')
        .to_string();
    let Some(found) = BUILTIN
        .iter()
        .find(|b| b.provider_type == provider_type && b.name == name)
    else {
        let known: Vec<&str> = BUILTIN
            .iter()
            .filter(|b| b.provider_type == provider_type)
            .map(|b| b.name)
            .collect();
        // Providers users know from Cluster API, which this build does not carry yet.
        const UPSTREAM: &[&str] = &["azure", "gcp", "vsphere", "docker", "openstack", "metal3"];
        let upstream = if UPSTREAM.contains(&name) {
            " (it is a Cluster API provider this build does not include yet)"
        } else {
            ""
        };
        bail!(
            "unknown {kind} provider {name:?}{upstream}: this lariat has {}",
            known.join(", ")
        );
    };
    if let Some(pin) = pin
        && pin != version()
    {
        bail!(
            "{kind} provider {name} {pin} is not in this build: lariat {} ships {name} {}; drop the version or use lariat {}",
            env!("CARGO_PKG_VERSION"),
            version(),
            pin.trim_start_matches('v')
        );
    }
    Ok(*found)
}

pub async fn init(args: InitArgs) -> anyhow::Result<()> {
    let mut wanted = vec![BUILTIN[0]];
    for (provider_type, specs) in [
        (BOOTSTRAP, &args.bootstrap),
        (CONTROL_PLANE, &args.control_plane),
        (INFRASTRUCTURE, &args.infrastructure),
    ] {
        for spec in specs {
            wanted.push(resolve(provider_type, spec)?);
        }
    }
    let client = crate::connect::client(args.kubeconfig.as_ref()).await?;
    for provider in &wanted {
        check_contract(&client, provider).await?;
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces.get_opt(clusterctl::NAMESPACE).await?.is_none() {
        let namespace =
            serde_json::from_value(json!({"metadata": {"name": clusterctl::NAMESPACE}}))?;
        match namespaces.create(&PostParams::default(), &namespace).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    let inventory: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        clusterctl::NAMESPACE,
        &clusterctl::api_resource(),
    );
    for provider in &wanted {
        let name = provider.inventory_name();
        println!(
            "Installing provider={name:?} version={:?} targetNamespace={:?}",
            version(),
            clusterctl::NAMESPACE
        );
        let entry = json!({
            "apiVersion": clusterctl::API_VERSION,
            "kind": clusterctl::KIND,
            "metadata": {"name": name, "labels": {PROVIDER_NAME: name}},
            "providerName": provider.name,
            "type": provider.provider_type,
            "version": version(),
        });
        inventory
            .patch(
                &name,
                &PatchParams::apply("lariat-init").force(),
                &Patch::Apply(entry),
            )
            .await
            .with_context(|| format!("cannot record provider {name}"))?;
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(args.wait_seconds);
    for provider in &wanted {
        let name = provider.inventory_name();
        loop {
            let entry = inventory.get(&name).await?;
            let conditions = lariat_controllers::conditions::json::existing(&entry.data["status"]);
            if lariat_controllers::conditions::json::is_true(&conditions, "Ready") {
                break;
            }
            // The server says why it cannot run the provider (the AWS provider without
            // credentials): that is the answer, no need to wait for the deadline.
            if let Some(refused) = conditions
                .iter()
                .find(|c| c["type"] == "Ready" && c["status"] == "False" && c["reason"] != STARTING)
            {
                bail!(
                    "provider {name} cannot run: {}",
                    refused["message"].as_str().unwrap_or_default()
                );
            }
            if tokio::time::Instant::now() > deadline {
                bail!(
                    "provider {name} is recorded but the server has not reported it running after {}s: check the server's log",
                    args.wait_seconds
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    println!("\nYour management cluster has been initialized successfully!\n");
    if !wanted.iter().any(|p| p.provider_type == INFRASTRUCTURE) {
        let available: Vec<&str> = BUILTIN
            .iter()
            .filter(|b| b.provider_type == INFRASTRUCTURE)
            .map(|b| b.name)
            .collect();
        println!(
            "No infrastructure provider is enabled yet, and a cluster needs one. This lariat has: {}.\nEnable one with:\n\n  lariat init --infrastructure {}",
            available.join(", "),
            available.first().copied().unwrap_or("NAME")
        );
    }
    if let Some(infrastructure) = wanted.iter().find(|p| p.provider_type == INFRASTRUCTURE) {
        println!("You can now create your first workload cluster by running the following:\n");
        println!(
            "  lariat generate cluster [name] --infrastructure {} --kubernetes-version [version] | kubectl apply -f -",
            infrastructure.name
        );
    }
    Ok(())
}

/// Refuses a provider the server cannot run: its kinds must be served at the API versions this
/// CLI's providers implement, and core's kinds at contract `v1beta1`. A server from another
/// lariat release (or a cluster that is not a lariat server) fails here, not object by object.
async fn check_contract(client: &Client, provider: &Builtin) -> anyhow::Result<()> {
    let name = provider.inventory_name();
    let mut expected: Vec<(String, String, String)> = provider
        .crds()
        .iter()
        .filter_map(|crd| {
            let version = crd.spec.versions.iter().find(|v| v.storage)?;
            Some((
                crd.spec.group.clone(),
                version.name.clone(),
                crd.spec.names.kind.clone(),
            ))
        })
        .collect();
    if provider.provider_type == CORE {
        expected.push(("cluster.x-k8s.io".into(), CONTRACT.into(), "Cluster".into()));
    }
    for (group, version, kind) in expected {
        let served = match kube::discovery::group(client, &group).await {
            Ok(served) => served,
            Err(kube::Error::Discovery(_)) => {
                bail!(
                    "provider {name} cannot run here: the server does not serve {group}; point --kubeconfig at a lariat server"
                )
            }
            Err(e) => return Err(e.into()),
        };
        let versions: Vec<String> = served.versions().map(String::from).collect();
        if !versions.contains(&version) {
            bail!(
                "provider {name} is incompatible with this server: it needs {kind} at {group}/{version} (contract {CONTRACT}) but the server serves {group} at {}; use the lariat CLI of the server's release",
                versions.join(", ")
            );
        }
        if served
            .versioned_resources(&version)
            .iter()
            .all(|(r, _)| r.kind != kind)
        {
            bail!(
                "provider {name} is incompatible with this server: {group}/{version} has no kind {kind}; use the lariat CLI of the server's release"
            );
        }
    }
    Ok(())
}

/// The server half: runs each built-in provider's controllers while its inventory entry
/// exists, and marks the entry Ready, or not Ready with the reason. Core's controllers run
/// regardless; the `cluster-api` entry is recorded for clusterctl compatibility.
pub async fn run_enabled(
    caches: Arc<Caches>,
    clusters: SimulatedClusters,
    home: lariat_provider_inmemory::agents::Home,
    stopped: watch::Receiver<bool>,
) {
    let client = caches.client().clone();
    let inventory: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        clusterctl::NAMESPACE,
        &clusterctl::api_resource(),
    );
    let mut running: HashMap<String, (watch::Sender<bool>, JoinHandle<()>)> = HashMap::new();
    let events = watcher(inventory.clone(), watcher::Config::default())
        .default_backoff()
        .take_until({
            let mut stopped = stopped.clone();
            async move {
                let _ = stopped.wait_for(|s| *s).await;
            }
        });
    futures::pin_mut!(events);
    loop {
        let event = match events.try_next().await {
            Ok(Some(event)) => event,
            Ok(None) => break,
            Err(error) => {
                tracing::warn!(%error, "provider inventory watch failed; retrying");
                continue;
            }
        };
        match event {
            watcher::Event::Apply(entry) | watcher::Event::InitApply(entry) => {
                let name = entry.name_any();
                let report = Report {
                    inventory: inventory.clone(),
                    name: name.clone(),
                };
                match BUILTIN.iter().find(|b| b.inventory_name() == name) {
                    None => {
                        report
                            .ready(
                                false,
                                "UnknownProvider",
                                &format!("lariat has no built-in provider {name}"),
                            )
                            .await
                    }
                    Some(provider) if !running.contains_key(&name) => {
                        let (stop, stop_rx) = watch::channel(false);
                        let handle = start(
                            provider,
                            caches.clone(),
                            clusters.clone(),
                            home.clone(),
                            report,
                            either_stops(stopped.clone(), stop_rx),
                        );
                        running.insert(name.clone(), (stop, handle));
                    }
                    // Running: its task reports on the entry.
                    Some(_) => {}
                }
            }
            watcher::Event::Delete(entry) => {
                if let Some((stop, handle)) = running.remove(&entry.name_any()) {
                    let _ = stop.send(true);
                    let _ = handle.await;
                    tracing::info!(provider = %entry.name_any(), "provider disabled; its controllers stopped");
                }
            }
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
    }
    for (_, (stop, handle)) in running {
        let _ = stop.send(true);
        let _ = handle.await;
    }
}

async fn either_stops(mut a: watch::Receiver<bool>, mut b: watch::Receiver<bool>) {
    tokio::select! {
        _ = a.wait_for(|s| *s) => {}
        _ = b.wait_for(|s| *s) => {}
    }
}

/// The reason of `Ready=False` while the server checks what a provider needs.
const STARTING: &str = "Starting";

/// Writes a provider's `Ready` condition on its inventory entry.
struct Report {
    inventory: Api<DynamicObject>,
    name: String,
}

impl Report {
    async fn ready(&self, ready: bool, reason: &str, message: &str) {
        let entry = match self.inventory.get(&self.name).await {
            Ok(entry) => entry,
            Err(error) => {
                tracing::warn!(provider = %self.name, %error, "cannot read provider entry");
                return;
            }
        };
        let mut conditions = lariat_controllers::conditions::json::existing(&entry.data["status"]);
        lariat_controllers::conditions::json::set(&mut conditions, "Ready", ready, reason, message);
        if json!(conditions) != entry.data["status"]["conditions"]
            && let Err(error) = lariat_controllers::object::patch_status(
                &self.inventory,
                &self.name,
                json!({"conditions": conditions}),
            )
            .await
        {
            tracing::warn!(provider = %self.name, %error, "cannot report provider status");
        }
    }
}

/// Runs a provider's controllers until `shutdown`, once what they need is there (the AWS
/// provider: the controller's own credentials, checked again every 30 s while they are not),
/// and reports on its entry whether they run.
fn start(
    provider: &Builtin,
    caches: Arc<Caches>,
    clusters: SimulatedClusters,
    home: lariat_provider_inmemory::agents::Home,
    report: Report,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> JoinHandle<()> {
    let provider = *provider;
    tokio::spawn(async move {
        let shutdown = futures::FutureExt::shared(Box::pin(shutdown));
        if (provider.provider_type, provider.name) == (INFRASTRUCTURE, "aws") {
            let aws = lariat_provider_aws::Aws::new(lariat_provider_aws::Settings::default());
            report
                .ready(
                    false,
                    STARTING,
                    "checking the AWS credentials of lariat server",
                )
                .await;
            loop {
                match lariat_provider_aws::check_controller_credentials(&aws).await {
                    Ok(caller) => {
                        tracing::info!(
                            account = %caller.account,
                            arn = %caller.arn,
                            "the AWS provider's own credentials"
                        );
                        break;
                    }
                    Err(error) => {
                        tracing::warn!(provider = %report.name, %error, "provider cannot start");
                        report
                            .ready(false, error.reason(), &error.to_string())
                            .await;
                    }
                }
                tokio::select! {
                    _ = shutdown.clone() => return,
                    _ = tokio::time::sleep(Duration::from_secs(30)) => {}
                }
            }
        }
        tracing::info!(provider = %report.name, "provider enabled; its controllers run");
        report.ready(true, "", "").await;
        run(provider, caches, clusters, home, shutdown).await;
    })
}

async fn run(
    provider: Builtin,
    caches: Arc<Caches>,
    clusters: SimulatedClusters,
    home: lariat_provider_inmemory::agents::Home,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    match (provider.provider_type, provider.name) {
        (BOOTSTRAP, "kubeadm") => lariat_provider_kubeadm::run_bootstrap(caches, shutdown).await,
        (CONTROL_PLANE, "kubeadm") => {
            lariat_provider_kubeadm::run_control_plane(caches, shutdown).await
        }
        (INFRASTRUCTURE, "inmemory") => {
            lariat_provider_inmemory::run(caches, clusters, Some(home), shutdown).await
        }
        (INFRASTRUCTURE, "aws") => {
            let aws = lariat_provider_aws::Aws::new(lariat_provider_aws::Settings::default());
            lariat_provider_aws::run(caches, aws, shutdown).await
        }
        // Core runs from the start, enabled or not.
        _ => shutdown.await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_known_names_and_refuses_others() {
        assert_eq!(
            resolve(INFRASTRUCTURE, "inmemory")
                .unwrap()
                .inventory_name(),
            "infrastructure-inmemory"
        );
        assert_eq!(
            resolve(INFRASTRUCTURE, &format!("inmemory:{}", version()))
                .unwrap()
                .name,
            "inmemory"
        );
        let unknown = resolve(INFRASTRUCTURE, "nosuch").unwrap_err().to_string();
        assert_eq!(
            unknown,
            "unknown infrastructure provider \"nosuch\": this lariat has inmemory, aws"
        );
        let pinned = resolve(INFRASTRUCTURE, "inmemory:v9.9.9")
            .unwrap_err()
            .to_string();
        assert!(
            pinned.starts_with("infrastructure provider inmemory v9.9.9 is not in this build"),
            "{pinned}"
        );
        assert!(resolve(BOOTSTRAP, "talos").is_err());
    }

    #[test]
    fn every_builtin_but_core_brings_crds() {
        for provider in BUILTIN.iter().skip(1) {
            assert!(!provider.crds().is_empty(), "{}", provider.inventory_name());
        }
    }
}
