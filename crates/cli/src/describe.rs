//! `lariat describe cluster`: a cluster's status as a tree (cluster, infrastructure, control
//! plane, machine deployments, machines) with each node's readiness, as `clusterctl describe
//! cluster` prints it.

use std::path::PathBuf;

use anyhow::bail;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::GroupVersionKind;
use lariat_controllers::capi;
use serde_json::Value;

#[derive(clap::Subcommand)]
pub enum DescribeCommand {
    /// The status tree of one cluster.
    Cluster(ClusterArgs),
}

#[derive(clap::Args)]
pub struct ClusterArgs {
    /// The Cluster to describe.
    name: String,
    /// Namespace of the Cluster.
    #[arg(short = 'n', long, default_value = "default")]
    namespace: String,
    /// Kubeconfig of the lariat server [default: $KUBECONFIG, ~/.kube/config, ./lariat-data/kubeconfig.yaml].
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
}

/// One line of the tree: readiness, and why not.
struct Row {
    label: String,
    ready: String,
    severity: String,
    reason: String,
    since: String,
    message: String,
}

fn since(time: Option<&str>) -> String {
    let Some(at) = time.and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok()) else {
        return String::new();
    };
    let seconds = (chrono::Utc::now() - at.with_timezone(&chrono::Utc))
        .num_seconds()
        .max(0);
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

fn row(label: String, object: &DynamicObject) -> Row {
    let ready_condition = object.data["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
        .cloned();
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    match ready_condition {
        Some(c) => Row {
            label,
            ready: text(&c["status"]),
            severity: text(&c["severity"]),
            reason: text(&c["reason"]),
            since: since(c["lastTransitionTime"].as_str()),
            message: text(&c["message"]),
        },
        None => {
            let phase = text(&object.data["status"]["phase"]);
            let ready = object.data["status"]["ready"]
                .as_bool()
                .unwrap_or(phase == "Running");
            Row {
                label,
                ready: if ready { "True".into() } else { "False".into() },
                severity: String::new(),
                reason: if ready { String::new() } else { phase },
                since: since(
                    object
                        .metadata
                        .creation_timestamp
                        .as_ref()
                        .map(|t| t.0.to_string())
                        .as_deref(),
                ),
                message: String::new(),
            }
        }
    }
}

async fn referenced(
    client: &kube::Client,
    namespace: &str,
    reference: &Value,
) -> Option<DynamicObject> {
    let api_version = reference["apiVersion"].as_str()?;
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, reference["kind"].as_str()?);
    let (resource, _) = kube::discovery::pinned_kind(client, &gvk).await.ok()?;
    Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &resource)
        .get_opt(reference["name"].as_str()?)
        .await
        .ok()?
}

pub async fn run(command: DescribeCommand) -> anyhow::Result<()> {
    let DescribeCommand::Cluster(args) = command;
    let client = crate::connect::client(args.kubeconfig.as_ref()).await?;
    let ns = &args.namespace;
    let clusters: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &capi("Cluster"));
    let Some(cluster) = clusters.get_opt(&args.name).await? else {
        bail!(
            "cluster {:?} not found in namespace {ns:?}: list them with `kubectl get clusters -A`",
            args.name
        );
    };
    let selector = format!("cluster.x-k8s.io/cluster-name={}", args.name);
    let machines: Vec<DynamicObject> =
        Api::<DynamicObject>::namespaced_with(client.clone(), ns, &capi("Machine"))
            .list(&ListParams::default().labels(&selector))
            .await?
            .items;
    let deployments: Vec<DynamicObject> =
        Api::<DynamicObject>::namespaced_with(client.clone(), ns, &capi("MachineDeployment"))
            .list(&ListParams::default().labels(&selector))
            .await?
            .items;

    let mut rows = vec![row(format!("Cluster/{}", cluster.name_any()), &cluster)];
    if let Some(infra) = referenced(&client, ns, &cluster.data["spec"]["infrastructureRef"]).await {
        rows.push(row(
            format!(
                "├─ClusterInfrastructure - {}/{}",
                infra
                    .types
                    .as_ref()
                    .map(|t| t.kind.as_str())
                    .unwrap_or_default(),
                infra.name_any()
            ),
            &infra,
        ));
    }
    let control_plane_machines: Vec<&DynamicObject> = machines
        .iter()
        .filter(|m| m.labels().contains_key("cluster.x-k8s.io/control-plane"))
        .collect();
    if let Some(cp) = referenced(&client, ns, &cluster.data["spec"]["controlPlaneRef"]).await {
        rows.push(row(
            format!(
                "├─ControlPlane - {}/{}",
                cp.types
                    .as_ref()
                    .map(|t| t.kind.as_str())
                    .unwrap_or_default(),
                cp.name_any()
            ),
            &cp,
        ));
    } else if !control_plane_machines.is_empty() {
        rows.push(Row {
            label: "├─ControlPlane".into(),
            ready: String::new(),
            severity: String::new(),
            reason: String::new(),
            since: String::new(),
            message: String::new(),
        });
    }
    for (i, machine) in control_plane_machines.iter().enumerate() {
        let branch = if i + 1 == control_plane_machines.len() {
            "└─"
        } else {
            "├─"
        };
        rows.push(row(
            format!("│ {branch}Machine/{}", machine.name_any()),
            machine,
        ));
    }
    rows.push(Row {
        label: "└─Workers".into(),
        ready: String::new(),
        severity: String::new(),
        reason: String::new(),
        since: String::new(),
        message: String::new(),
    });
    for (d, deployment) in deployments.iter().enumerate() {
        let last_deployment = d + 1 == deployments.len();
        rows.push(row(
            format!(
                "  {}MachineDeployment/{}",
                if last_deployment { "└─" } else { "├─" },
                deployment.name_any()
            ),
            deployment,
        ));
        let owned: Vec<&DynamicObject> = machines
            .iter()
            .filter(|m| {
                m.labels().get("cluster.x-k8s.io/deployment-name") == Some(&deployment.name_any())
            })
            .collect();
        for (i, machine) in owned.iter().enumerate() {
            let branch = if i + 1 == owned.len() {
                "└─"
            } else {
                "├─"
            };
            let rail = if last_deployment { " " } else { "│" };
            rows.push(row(
                format!("  {rail} {branch}Machine/{}", machine.name_any()),
                machine,
            ));
        }
    }
    let width = rows
        .iter()
        .map(|r| r.label.chars().count())
        .max()
        .unwrap_or(4)
        .max(4);
    println!(
        "{:<width$}  {:<5}  {:<8}  {:<30}  {:<5}  MESSAGE",
        "NAME", "READY", "SEVERITY", "REASON", "SINCE"
    );
    for r in rows {
        let pad = width - r.label.chars().count();
        println!(
            "{}{}  {:<5}  {:<8}  {:<30}  {:<5}  {}",
            r.label,
            " ".repeat(pad),
            r.ready,
            r.severity,
            r.reason,
            r.since,
            r.message
        );
    }
    Ok(())
}
