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
    /// List every condition of these kinds under their rows: a comma-separated list of kinds
    /// (Cluster, KubeadmControlPlane, MachineDeployment, Machine, ...) or `all`.
    #[arg(long, value_delimiter = ',')]
    show_conditions: Vec<String>,
    /// Group machines in the same state into one row, as clusterctl does (`--grouping=false`
    /// lists each).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    grouping: bool,
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

impl Row {
    fn heading(label: &str) -> Row {
        Row {
            label: label.into(),
            ready: String::new(),
            severity: String::new(),
            reason: String::new(),
            since: String::new(),
            message: String::new(),
        }
    }
}

fn has_ready(object: &DynamicObject) -> bool {
    object.data["status"]["conditions"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready"))
}

/// A row from one condition's status, severity, reason, time and message.
fn from_condition(label: String, c: &Value) -> Row {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    Row {
        label,
        ready: text(&c["status"]),
        severity: text(&c["severity"]),
        reason: text(&c["reason"]),
        since: since(c["lastTransitionTime"].as_str()),
        message: text(&c["message"]),
    }
}

/// Every condition but Ready, one row each, drawn as leaves of a tree.
fn condition_rows(object: &DynamicObject) -> Vec<Row> {
    let leaves = object.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["type"] != "Ready")
        .map(|c| {
            let type_ = c["type"].as_str().unwrap_or_default();
            (from_condition(type_.to_string(), c), vec![])
        })
        .collect();
    tree(leaves)
}

/// Machines: one row each, or, when grouping, one row per group of two or more in the same
/// state (`3 Machines...`, naming them), as clusterctl describe prints them.
fn machine_rows(machines: &[&DynamicObject], grouping: bool, conditions: bool) -> Vec<Row> {
    let mut groups: Vec<(Row, Vec<&DynamicObject>)> = vec![];
    for machine in machines {
        let line = row(String::new(), machine);
        let same = |r: &Row| {
            r.ready == line.ready
                && r.severity == line.severity
                && r.reason == line.reason
                && r.message == line.message
        };
        match groups
            .iter_mut()
            .find(|(r, _)| grouping && !conditions && same(r))
        {
            Some((_, members)) => members.push(machine),
            None => groups.push((line, vec![machine])),
        }
    }
    let branches = groups
        .into_iter()
        .map(|(mut line, members)| {
            if let [machine] = members[..] {
                return node("Machine", machine, conditions);
            }
            let names: Vec<String> = members.iter().map(|m| m.name_any()).collect();
            line.label = format!("{} Machines...", members.len());
            line.message = if line.message.is_empty() {
                format!("See {}", names.join(", "))
            } else {
                format!("{} (see {})", line.message, names.join(", "))
            };
            (line, vec![])
        })
        .collect();
    tree(branches)
}

fn row(label: String, object: &DynamicObject) -> Row {
    let ready_condition = object.data["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
        .cloned();
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    match ready_condition {
        Some(c) => from_condition(label, &c),
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

/// Its agent's connection: an imported cluster's, or one lariat installed; `None` for a
/// cluster no agent serves.
async fn connection_row(
    client: &kube::Client,
    cluster: &DynamicObject,
) -> anyhow::Result<Option<Row>> {
    let ns = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    let connections: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &lariat_api::management::cluster_connection_resource(),
    );
    let connection = connections.get_opt(&name).await?;
    if connection.is_none()
        && !cluster
            .annotations()
            .contains_key(lariat_api::management::IMPORTED_ANNOTATION)
    {
        return Ok(None);
    }
    let status = connection
        .as_ref()
        .map(|c| c.data["status"].clone())
        .unwrap_or_default();
    let connected = status["connected"] == true;
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    Ok(Some(Row {
        label: format!("Connection - ClusterConnection/{name}"),
        ready: if connected { "True" } else { "False" }.into(),
        severity: if connected { "" } else { "Warning" }.into(),
        reason: if connected { "" } else { "AgentDisconnected" }.into(),
        since: since(status["lastHeartbeat"].as_str()),
        message: if connected {
            format!(
                "Kubernetes {}, {} nodes ({} ready)",
                text(&status["kubernetesVersion"]),
                status["nodeCount"].as_i64().unwrap_or(0),
                status["readyNodeCount"].as_i64().unwrap_or(0)
            )
        } else {
            status["message"]
                .as_str()
                .unwrap_or("its agent has never connected")
                .to_string()
        },
    }))
}

/// The branches of a tree as rows: `├─` before each but the last (`└─`), and a rail down
/// the left of what hangs under each but the last.
fn tree(branches: Vec<(Row, Vec<Row>)>) -> Vec<Row> {
    let count = branches.len();
    let mut rows = vec![];
    for (i, (mut line, children)) in branches.into_iter().enumerate() {
        let last = i + 1 == count;
        line.label = format!("{}{}", if last { "└─" } else { "├─" }, line.label);
        rows.push(line);
        for mut child in children {
            child.label = format!("{}{}", if last { "  " } else { "│ " }, child.label);
            rows.push(child);
        }
    }
    rows
}

/// The rows as a table under kubectl-style headings, the NAME column as wide as its longest.
fn print(rows: Vec<Row>) {
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
}

/// One object's row (`Kind/name`) and, if asked, its conditions to hang under it.
fn node(kind: &str, object: &DynamicObject, conditions: bool) -> (Row, Vec<Row>) {
    let line = row(format!("{kind}/{}", object.name_any()), object);
    let children = if conditions {
        condition_rows(object)
    } else {
        vec![]
    };
    (line, children)
}

/// The Workers branch: each MachineDeployment with its machines, each MachinePool with the
/// provider's object that runs its instances (an EKS node group, an auto-scaling group).
async fn worker_rows(
    client: &kube::Client,
    ns: &str,
    deployments: &[DynamicObject],
    pools: &[DynamicObject],
    machines: &[DynamicObject],
    grouping: bool,
    show: &impl Fn(&str) -> bool,
) -> Vec<Row> {
    let mut branches = vec![];
    for deployment in deployments {
        let owned: Vec<&DynamicObject> = machines
            .iter()
            .filter(|m| {
                m.labels()
                    .get(lariat_api::capi::labels::MACHINE_DEPLOYMENT_NAME)
                    == Some(&lariat_api::capi::labels::format_value(
                        &deployment.name_any(),
                    ))
            })
            .collect();
        let (line, mut children) = node("MachineDeployment", deployment, show("MachineDeployment"));
        children.extend(machine_rows(&owned, grouping, show("Machine")));
        branches.push((line, children));
    }
    for pool in pools {
        let (line, mut children) = node("MachinePool", pool, show("MachinePool"));
        let wanted = &pool.data["spec"]["template"]["spec"]["infrastructureRef"];
        let kind = wanted["kind"].as_str().unwrap_or_default();
        if let Some(object) = referenced(client, ns, wanted).await {
            children.extend(tree(vec![node(kind, &object, show(kind))]));
        }
        branches.push((line, children));
    }
    tree(branches)
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
    let pools: Vec<DynamicObject> =
        Api::<DynamicObject>::namespaced_with(client.clone(), ns, &capi("MachinePool"))
            .list(&ListParams::default().labels(&selector))
            .await?
            .items;

    let show = |kind: &str| {
        args.show_conditions
            .iter()
            .any(|k| k.eq_ignore_ascii_case("all") || k.eq_ignore_ascii_case(kind))
    };
    // The Cluster's own conditions run down the rail its branches hang from.
    let (line, conditions) = node("Cluster", &cluster, show("Cluster"));
    let mut rows = vec![line];
    rows.extend(conditions.into_iter().map(|mut c| {
        c.label = format!("│ {}", c.label);
        c
    }));
    let cluster_condition = |type_: &str| {
        cluster.data["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == type_))
            .cloned()
    };
    let control_plane_machines: Vec<&DynamicObject> = machines
        .iter()
        .filter(|m| m.labels().contains_key("cluster.x-k8s.io/control-plane"))
        .collect();
    // The cluster's branches, each a row and what hangs under it; the last is drawn with `└─`.
    let mut branches: Vec<(Row, Vec<Row>)> = vec![];
    // Infrastructure and control plane: the object's own Ready, else what the Cluster says of
    // it (an object nothing reconciles has no status of its own). The control-plane machines
    // hang under the control plane.
    for (reference, title, condition) in [
        (
            "infrastructureRef",
            "ClusterInfrastructure",
            "InfrastructureReady",
        ),
        ("controlPlaneRef", "ControlPlane", "ControlPlaneReady"),
    ] {
        let wanted = &cluster.data["spec"][reference];
        if !wanted.is_object() {
            continue;
        }
        let kind = wanted["kind"].as_str().unwrap_or_default();
        let name = wanted["name"].as_str().unwrap_or_default();
        let label = format!("{title} - {kind}/{name}");
        let mut children = vec![];
        let line = match referenced(&client, ns, wanted).await {
            Some(object) => {
                let mut line = row(label, &object);
                if !has_ready(&object)
                    && let Some(c) = cluster_condition(condition)
                {
                    line = from_condition(line.label, &c);
                }
                if show(kind) {
                    children.extend(condition_rows(&object));
                }
                line
            }
            None => Row {
                label,
                ready: "False".into(),
                severity: "Warning".into(),
                reason: "NotFound".into(),
                since: String::new(),
                message: format!("{kind} {name} does not exist"),
            },
        };
        if reference == "controlPlaneRef" {
            children.extend(machine_rows(
                &control_plane_machines,
                args.grouping,
                show("Machine"),
            ));
        }
        branches.push((line, children));
    }
    if !control_plane_machines.is_empty() && !cluster.data["spec"]["controlPlaneRef"].is_object() {
        branches.push((
            Row::heading("ControlPlane"),
            machine_rows(&control_plane_machines, args.grouping, show("Machine")),
        ));
    }
    if let Some(connection) = connection_row(&client, &cluster).await? {
        branches.push((connection, vec![]));
    }
    let workers = worker_rows(
        &client,
        ns,
        &deployments,
        &pools,
        &machines,
        args.grouping,
        &show,
    )
    .await;
    // A cluster without workers (yet) has no Workers branch, as clusterctl draws it.
    if !workers.is_empty() {
        branches.push((Row::heading("Workers"), workers));
    }
    rows.extend(tree(branches));
    print(rows);
    Ok(())
}
