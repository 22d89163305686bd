//! `lariat bench access`: Rancher's scopes reaching many clusters. Many in-memory clusters,
//! each with its in-process agent and one namespace in a project of its own; then the time
//! from a write on the management API to the RBAC it means existing in every cluster:
//! one GlobalRoleBinding (a ClusterRoleBinding in each cluster), one
//! ProjectRoleTemplateBinding per project created at once (a RoleBinding in each cluster), and
//! a single ProjectRoleTemplateBinding at a time. "Exists" is read from each cluster itself,
//! through the proxy.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use kube::api::{Api, DynamicObject, PostParams};
use lariat_api::rancher;
use serde_json::json;

use super::{
    ServerProcess, create_inmemory_clusters, load_average, percentile_ms, until_connected,
};

#[derive(clap::Args)]
pub struct AccessArgs {
    /// In-memory clusters (each with one control-plane machine and its agent).
    #[arg(long, default_value_t = 100)]
    clusters: usize,
    /// Single ProjectRoleTemplateBindings timed one after another.
    #[arg(long, default_value_t = 10)]
    singles: usize,
}

const NAMESPACE: &str = "fleet-default";
const TEAM: &str = "team";

fn cluster_name(i: usize) -> String {
    format!("access-{i:04}")
}

fn proxy(cluster: &str, path: &str) -> String {
    format!("/k8s/clusters/{NAMESPACE}/{cluster}{path}")
}

/// Whether `path` exists in `cluster` and its body says `wanted`, asked of the cluster itself.
async fn exists(
    client: &kube::Client,
    cluster: &str,
    path: &str,
    wanted: &str,
) -> anyhow::Result<bool> {
    let request = http::Request::get(proxy(cluster, path)).body(Vec::new())?;
    match client.request_text(request).await {
        Ok(body) => Ok(body.contains(wanted)),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
        Err(e) => Err(e).with_context(|| format!("GET {path} in {cluster}")),
    }
}

/// Polls every cluster in `pending` until `path(cluster)` exists in each and says `wanted`;
/// the time it took.
async fn until_everywhere(
    client: &kube::Client,
    mut pending: Vec<String>,
    path: impl Fn(&str) -> String,
    wanted: &str,
    started: Instant,
) -> anyhow::Result<Duration> {
    let deadline = started + Duration::from_secs(120 + pending.len() as u64);
    while !pending.is_empty() {
        let mut still = Vec::new();
        for cluster in pending {
            if !exists(client, &cluster, &path(&cluster), wanted).await? {
                still.push(cluster);
            }
        }
        pending = still;
        if Instant::now() > deadline {
            bail!(
                "{} clusters never got it: {:?}",
                pending.len(),
                &pending[..pending.len().min(5)]
            );
        }
        if !pending.is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    Ok(started.elapsed())
}

fn object(
    kind: &str,
    namespace: Option<&str>,
    name: &str,
    fields: serde_json::Value,
) -> DynamicObject {
    let mut value = json!({
        "apiVersion": rancher::API_VERSION, "kind": kind,
        "metadata": {"name": name},
    });
    if let Some(namespace) = namespace {
        value["metadata"]["namespace"] = json!(namespace);
    }
    for (field, v) in fields.as_object().into_iter().flatten() {
        value[field] = v.clone();
    }
    serde_json::from_value(value).expect("a well-formed object")
}

// Long: a benchmark's scenario, its steps in the order they run and print their figures.
pub async fn run(args: AccessArgs) -> anyhow::Result<()> {
    println!(
        "lariat bench access: {} in-memory clusters, one project each; load average {}",
        args.clusters,
        load_average()
    );
    let server = ServerProcess::for_inmemory_clusters(args.clusters, vec![])?;
    let client = server.client().await?;
    let names: Vec<String> = (0..args.clusters).map(cluster_name).collect();
    let started = Instant::now();
    create_inmemory_clusters(&client, NAMESPACE, names.clone(), json!({})).await?;
    until_connected(&client, args.clusters).await?;
    println!(
        "  {} clusters provisioned and their agents connected in {:.1} s",
        args.clusters,
        started.elapsed().as_secs_f64()
    );

    // In each cluster one namespace, in a project of its own.
    let post = PostParams::default();
    let projects: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), NAMESPACE, &rancher::resource("Project"));
    for cluster in &names {
        let project = format!("p-{cluster}");
        projects
            .create(
                &post,
                &object(
                    "Project",
                    Some(NAMESPACE),
                    &project,
                    json!({"spec": {"displayName": project, "clusterName": cluster}}),
                ),
            )
            .await?;
        let namespace = json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": TEAM, "annotations": {rancher::PROJECT_ID_ANNOTATION: format!("{cluster}:{project}")}},
        });
        let request = http::Request::post(proxy(cluster, "/api/v1/namespaces"))
            .header("content-type", "application/json")
            .body(serde_json::to_vec(&namespace)?)?;
        client
            .request_text(request)
            .await
            .with_context(|| format!("create namespace {TEAM} in {cluster}"))?;
    }

    // 1. One GlobalRoleBinding whose role reaches every cluster.
    let global_roles: Api<DynamicObject> =
        Api::all_with(client.clone(), &rancher::resource("GlobalRole"));
    global_roles
        .create(
            &post,
            &object(
                "GlobalRole",
                None,
                "auditor",
                json!({"inheritedClusterRoles": ["cluster-member"]}),
            ),
        )
        .await?;
    let global_bindings: Api<DynamicObject> =
        Api::all_with(client.clone(), &rancher::resource("GlobalRoleBinding"));
    let cpu_before = server.cpu_seconds();
    let started = Instant::now();
    global_bindings
        .create(
            &post,
            &object(
                "GlobalRoleBinding",
                None,
                "auditors",
                json!({"globalRoleName": "auditor", "groupPrincipalName": "auditors"}),
            ),
        )
        .await?;
    // Its binding's name is hashed: found among lariat's by the role it binds.
    let took = until_everywhere(
        &client,
        names.clone(),
        |_| "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings?labelSelector=management.lariat.dev%2Faccess".into(),
        "\"lariat-cluster-member\"",
        started,
    )
    .await?;
    println!(
        "  one GlobalRoleBinding: its ClusterRoleBinding in all {} clusters {:.2} s after the write; server CPU {:.1} s",
        args.clusters,
        took.as_secs_f64(),
        server.cpu_seconds() - cpu_before
    );

    // 2. One ProjectRoleTemplateBinding per project, all created at once.
    let project_bindings: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NAMESPACE,
        &rancher::resource("ProjectRoleTemplateBinding"),
    );
    let cpu_before = server.cpu_seconds();
    let started = Instant::now();
    for cluster in &names {
        let binding = object(
            "ProjectRoleTemplateBinding",
            Some(NAMESPACE),
            &format!("dev-{cluster}"),
            json!({"projectName": format!("{cluster}:p-{cluster}"), "roleTemplateName": "project-member", "userName": format!("dev-{cluster}")}),
        );
        project_bindings.create(&post, &binding).await?;
    }
    let written = started.elapsed();
    let took = until_everywhere(
        &client,
        names.clone(),
        |cluster| format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{TEAM}/rolebindings/lariat-prtb-dev-{cluster}"),
        "",
        started,
    )
    .await?;
    println!(
        "  {} ProjectRoleTemplateBindings (one per cluster, written in {:.2} s): every RoleBinding in place {:.2} s after the first write; server CPU {:.1} s",
        args.clusters,
        written.as_secs_f64(),
        took.as_secs_f64(),
        server.cpu_seconds() - cpu_before
    );

    // 3. One ProjectRoleTemplateBinding at a time, each to its RoleBinding.
    let mut samples = Vec::new();
    for i in 0..args.singles.min(args.clusters) {
        let cluster = cluster_name(i);
        let name = format!("single-{cluster}");
        let started = Instant::now();
        let binding = object(
            "ProjectRoleTemplateBinding",
            Some(NAMESPACE),
            &name,
            json!({"projectName": format!("{cluster}:p-{cluster}"), "roleTemplateName": "read-only", "userName": name}),
        );
        project_bindings.create(&post, &binding).await?;
        samples.push(
            until_everywhere(
                &client,
                vec![cluster.clone()],
                |_| format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{TEAM}/rolebindings/lariat-prtb-{name}"),
                "",
                started,
            )
            .await?,
        );
    }
    samples.sort();
    println!(
        "  one ProjectRoleTemplateBinding to its RoleBinding ({} samples among {} clusters): p50 {:.0} ms, max {:.0} ms",
        samples.len(),
        args.clusters,
        percentile_ms(&samples, 0.5),
        percentile_ms(&samples, 1.0)
    );
    let (rss, peak) = server.memory_mib();
    println!("  server memory {rss:.0} MiB (peak {peak:.0})");
    Ok(())
}
