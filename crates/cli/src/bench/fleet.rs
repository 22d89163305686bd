//! `lariat bench fleet`: Fleet at scale in one process. Many in-memory clusters, each with its
//! in-process agent; a real git repository (made with `git`, fetched by the server with gix)
//! whose commit rolls out to every cluster; then many GitRepos and one cluster relabelled
//! into one of them; then the idle fleet.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use lariat_api::fleet::{Bundle, BundleDeployment, GitRepo};
use serde_json::json;

use super::{
    ServerProcess, create_inmemory_clusters, load_average, requests, requests_per, until_connected,
};

#[derive(clap::Args)]
pub struct FleetArgs {
    /// In-memory clusters (each with one control-plane machine and its agent).
    #[arg(long, default_value_t = 1000)]
    clusters: usize,
    /// Bundles in the repository every cluster gets (one Deployment of one replica each).
    #[arg(long, default_value_t = 10)]
    bundles: usize,
    /// GitRepos present when one cluster is relabelled into one of them.
    #[arg(long, default_value_t = 300)]
    git_repos: usize,
    /// Seconds the idle fleet is measured for: eleven minutes by default, so that the agents'
    /// resyncs (ten minutes) and watch renewals fall inside the window.
    #[arg(long, default_value_t = 660)]
    idle_seconds: u64,
    /// Each bundle a Helm chart (a Deployment, its Service and ServiceAccount, named by the
    /// usual helpers) rendered and released by each cluster's agent, instead of the plain
    /// Deployment.
    #[arg(long)]
    helm: bool,
}

const WORKSPACE: &str = lariat_api::fleet::DEFAULT_WORKSPACE;

fn git(dir: &Path, args: &[&str]) -> anyhow::Result<String> {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "bench@example.com")
        .env("GIT_COMMITTER_NAME", "bench")
        .env("GIT_COMMITTER_EMAIL", "bench@example.com")
        .output()
        .context("run git (the benchmark makes its repository with it)")?;
    if !output.status.success() {
        bail!("git {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// Writes `bundles` directories (bundles) of one Deployment each, `version` in its Pods'
/// template (so that a new version rolls a new Pod out), and commits; with `helm`, each
/// bundle is a chart and `version` one of its values (a new version is a Helm upgrade). Each
/// bundle is Ready once its Deployment is Available: its Pod scheduled on the cluster's one
/// Node (the control plane, which it tolerates) and Ready.
fn commit(repo: &Path, bundles: usize, version: &str, helm: bool) -> anyhow::Result<String> {
    for i in 0..bundles {
        let dir = repo.join(format!("bundle-{i:02}"));
        std::fs::create_dir_all(&dir)?;
        if helm {
            write_chart(&dir, i, version)?;
            continue;
        }
        // A fleet.yaml makes the directory a bundle of its own.
        std::fs::write(dir.join("fleet.yaml"), "defaultNamespace: bench\n")?;
        std::fs::write(
            dir.join("app.yaml"),
            format!(
                "apiVersion: apps/v1
kind: Deployment
metadata: {{name: app-{i:02}, namespace: bench}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: app-{i:02}}}}}
  template:
    metadata:
      labels: {{app: app-{i:02}}}
      annotations: {{bench.lariat.dev/version: \"{version}\"}}
    spec:
      tolerations: [{{key: node-role.kubernetes.io/control-plane, effect: NoSchedule}}]
      containers: [{{name: app, image: \"nginx:1.27\"}}]
"
            ),
        )?;
    }
    git(repo, &["add", "-A"])?;
    git(repo, &["commit", "-q", "-m", version])?;
    git(repo, &["rev-parse", "HEAD"])
}

/// Bundle `i` as a chart as `helm create` lays one out: helpers naming and labelling the
/// objects, a Deployment, its Service and ServiceAccount, values for the image and
/// tolerations; `version` in the fleet.yaml's values.
fn write_chart(dir: &Path, i: usize, version: &str) -> anyhow::Result<()> {
    let chart = dir.join("chart");
    std::fs::create_dir_all(chart.join("templates"))?;
    let files = [
        (
            "fleet.yaml".to_string(),
            format!("defaultNamespace: bench\nhelm:\n  chart: ./chart\n  releaseName: app-{i:02}\n  values:\n    version: \"{version}\"\n"),
        ),
        (
            "chart/Chart.yaml".into(),
            "apiVersion: v2\nname: app\ndescription: A web application\ntype: application\nversion: 0.1.0\nappVersion: \"1.27\"\n".into(),
        ),
        (
            "chart/values.yaml".into(),
            "replicaCount: 1\nimage:\n  repository: nginx\n  tag: \"\"\nversion: \"\"\nservice:\n  type: ClusterIP\n  port: 80\ntolerations:\n- key: node-role.kubernetes.io/control-plane\n  effect: NoSchedule\nresources: {}\n".into(),
        ),
        ("chart/templates/_helpers.tpl".into(), CHART_HELPERS.into()),
        ("chart/templates/deployment.yaml".into(), CHART_DEPLOYMENT.into()),
        ("chart/templates/service.yaml".into(), CHART_SERVICE.into()),
        ("chart/templates/serviceaccount.yaml".into(), CHART_SERVICE_ACCOUNT.into()),
    ];
    for (name, content) in files {
        std::fs::write(dir.join(name), content)?;
    }
    Ok(())
}

const CHART_HELPERS: &str = r#"{{- define "app.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "app.fullname" -}}
{{- if contains (include "app.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "app.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "app.selectorLabels" -}}
app.kubernetes.io/name: {{ include "app.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "app.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "app.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}
"#;

const CHART_DEPLOYMENT: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "app.fullname" . }}
  labels:
    {{- include "app.labels" . | nindent 4 }}
spec:
  replicas: {{ .Values.replicaCount }}
  selector:
    matchLabels:
      {{- include "app.selectorLabels" . | nindent 6 }}
  template:
    metadata:
      annotations:
        bench.lariat.dev/version: {{ .Values.version | quote }}
      labels:
        {{- include "app.selectorLabels" . | nindent 8 }}
    spec:
      serviceAccountName: {{ include "app.fullname" . }}
      {{- with .Values.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
      - name: {{ .Chart.Name }}
        image: "{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}"
        ports:
        - name: http
          containerPort: {{ .Values.service.port }}
        resources:
          {{- toYaml .Values.resources | nindent 10 }}
"#;

const CHART_SERVICE: &str = r#"apiVersion: v1
kind: Service
metadata:
  name: {{ include "app.fullname" . }}
  labels:
    {{- include "app.labels" . | nindent 4 }}
spec:
  type: {{ .Values.service.type }}
  ports:
  - port: {{ .Values.service.port }}
    targetPort: http
    name: http
  selector:
    {{- include "app.selectorLabels" . | nindent 4 }}
"#;

const CHART_SERVICE_ACCOUNT: &str = r#"apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ include "app.fullname" . }}
  labels:
    {{- include "app.labels" . | nindent 4 }}
"#;

/// The Secret whose `gitlab` token the rollout's GitRepo checks its webhook deliveries by.
const WEBHOOK_SECRET: &str = "bench-webhook";
const WEBHOOK_TOKEN: &str = "bench-webhook-token";

/// The URL GitRepos of `repo` follow.
fn repo_url(repo: &Path) -> String {
    format!("file://{}", repo.display())
}

/// A GitRepo of `repo` for the clusters `selector` chooses, polled at Fleet's default
/// interval (15 s), its objects in `target_namespace` if given (one object belongs to one
/// bundle: GitRepos of the same repository on one cluster need their own), fetching at once
/// when a webhook delivery proves `webhook_secret`'s token.
fn git_repo(
    name: &str,
    repo: &Path,
    selector: serde_json::Value,
    webhook_secret: Option<&str>,
    target_namespace: Option<&str>,
) -> anyhow::Result<GitRepo> {
    let mut spec = json!({"repo": repo_url(repo), "branch": "main",
                          "targets": [{"clusterSelector": selector}]});
    if let Some(secret) = webhook_secret {
        spec["webhookSecret"] = secret.into();
    }
    if let Some(namespace) = target_namespace {
        spec["targetNamespace"] = namespace.into();
    }
    Ok(serde_json::from_value(json!({
        "apiVersion": lariat_api::fleet::API_VERSION, "kind": "GitRepo",
        "metadata": {"name": name, "namespace": WORKSPACE},
        "spec": spec,
    }))?)
}

/// Waits until every Bundle of GitRepo `name` is at `commit` and each of its
/// `clusters` BundleDeployments is Ready at that version (the Bundles' own counts, written
/// once they have seen their BundleDeployments at the new version).
async fn until_ready(
    client: &kube::Client,
    name: &str,
    commit: &str,
    bundles: usize,
    clusters: usize,
) -> anyhow::Result<()> {
    let api: Api<Bundle> = Api::namespaced(client.clone(), WORKSPACE);
    let of_repo = ListParams::default().labels(&format!("fleet.cattle.io/repo-name={name}"));
    let deadline = Instant::now() + Duration::from_secs(1800);
    loop {
        let list = api.list(&of_repo).await?.items;
        let done = list
            .iter()
            .filter(|b| {
                let status = b.status.clone().unwrap_or_default();
                let summary = status.summary.unwrap_or_default();
                b.labels().get("fleet.cattle.io/commit").map(String::as_str) == Some(commit)
                    && status.observed_generation == b.metadata.generation
                    && summary.ready as usize == clusters
                    && summary.desired_ready as usize == clusters
            })
            .count();
        if done == bundles && list.len() == bundles {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("only {done} of {bundles} bundles of {name} Ready at {commit} after 30 minutes");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Announces the push of `commit` to `repo`'s main branch as GitLab does (a `Push Hook`
/// delivery with the GitRepo's token), to the server's Fleet webhook.
async fn announce(client: &kube::Client, repo: &Path, commit: &str) -> anyhow::Result<()> {
    let body = json!({"object_kind": "push", "ref": "refs/heads/main", "checkout_sha": commit,
                      "project": {"git_http_url": repo_url(repo)}});
    let request = http::Request::post(lariat_fleet::webhook::PATH)
        .header("X-Gitlab-Event", "Push Hook")
        .header("X-Gitlab-Token", WEBHOOK_TOKEN)
        .header("Content-Type", "application/json")
        .body(serde_json::to_vec(&body)?)?;
    let answer = client.request_text(request).await?;
    if !answer.contains("platform") {
        bail!("the webhook delivery triggered no fetch of GitRepo platform: {answer}");
    }
    Ok(())
}

/// Store writes so far (the store's revision).
async fn revision(client: &kube::Client) -> anyhow::Result<i64> {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    Ok(namespaces
        .list(&ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .unwrap_or_default()
        .parse()
        .unwrap_or(0))
}

// Long: a benchmark's scenario, its steps in the order they run and print their figures.
pub async fn run(args: FleetArgs) -> anyhow::Result<()> {
    let load = load_average();
    println!(
        "lariat bench fleet: {} in-memory clusters x {} {} bundles, {} GitRepos; load average {load}",
        args.clusters,
        args.bundles,
        if args.helm {
            "Helm chart"
        } else {
            "Deployment"
        },
        args.git_repos,
    );
    let mut row = super::Row::new(&load)
        .cell(args.clusters)
        .cell(args.clusters * args.bundles);
    let repos_dir = tempfile::tempdir()?;
    let repo = repos_dir.path().join("platform");
    std::fs::create_dir_all(&repo)?;
    git(&repo, &["init", "-q", "-b", "main"])?;
    let first = commit(&repo, args.bundles, "1", args.helm)?;
    let server = ServerProcess::for_inmemory_clusters(
        args.clusters,
        vec![
            "--fleet-file-repos".into(),
            repos_dir.path().display().to_string(),
        ],
    )?;
    let client = server.client().await?;

    // The clusters, each labelled for the GitRepo.
    let started = Instant::now();
    let names = (0..args.clusters)
        .map(|i| format!("fleet-{i:04}"))
        .collect();
    create_inmemory_clusters(&client, WORKSPACE, names, json!({"env": "bench"})).await?;
    until_connected(&client, args.clusters).await?;
    println!(
        "  {} clusters provisioned and their agents connected in {:.1} s",
        args.clusters,
        started.elapsed().as_secs_f64()
    );

    // 1. One GitRepo, every cluster, every bundle: from the GitRepo to all Ready, then a
    // commit changing every bundle, to all Ready again.
    let repos: Api<GitRepo> = Api::namespaced(client.clone(), WORKSPACE);
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(client.clone(), WORKSPACE);
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": WEBHOOK_SECRET},
                "stringData": {"gitlab": WEBHOOK_TOKEN},
            }))?,
        )
        .await?;
    let desired = args.clusters * args.bundles;
    for (what, commit_of) in [("first rollout", None), ("a new commit", Some("2"))] {
        let cpu_before = server.cpu_seconds();
        let writes_before = revision(&client).await?;
        let requests_before = requests(&client).await?;
        let started = Instant::now();
        let head = match commit_of {
            None => {
                repos
                    .create(
                        &PostParams::default(),
                        &git_repo(
                            "platform",
                            &repo,
                            json!({"matchLabels": {"env": "bench"}}),
                            Some(WEBHOOK_SECRET),
                            None,
                        )?,
                    )
                    .await?;
                first.clone()
            }
            Some(version) => {
                let head = commit(&repo, args.bundles, version, args.helm)?;
                announce(&client, &repo, &head).await?;
                head
            }
        };
        until_ready(&client, "platform", &head, args.bundles, args.clusters).await?;
        let took = started.elapsed().as_secs_f64();
        let cpu = server.cpu_seconds() - cpu_before;
        let writes = revision(&client).await? - writes_before;
        let (rss, peak) = server.memory_mib();
        let requests_after = requests(&client).await?;
        row = row.cell(format!("{took:.1} s"));
        println!(
            "  {what}: {desired} BundleDeployments Ready (each a Deployment Available) {took:.1} s after the {} (Fleet's default polling, 15 s; the commit announced by webhook); server CPU {cpu:.1} s ({:.0}% of one core), store writes {writes} ({:.1} per BundleDeployment), memory {rss:.0} MiB (peak {peak:.0})",
            if commit_of.is_some() {
                "commit"
            } else {
                "GitRepo"
            },
            cpu * 100.0 / took,
            writes as f64 / desired as f64
        );
        for api in ["management", "workload"] {
            let per = requests_per(&requests_before, &requests_after, api, desired as f64);
            println!("    {api} API requests per BundleDeployment {per}");
        }
    }

    // 2. Many GitRepos, each for a label no cluster has; one cluster relabelled into one.
    let started = Instant::now();
    for i in 0..args.git_repos {
        repos
            .create(
                &PostParams::default(),
                &git_repo(
                    &format!("team-{i:03}"),
                    &repo,
                    json!({"matchLabels": {"team": format!("t{i:03}")}}),
                    None,
                    Some(&format!("team-{i:03}")),
                )?,
            )
            .await?;
    }
    // Every one fetched and its bundles written (with nowhere to go yet), each Bundle's
    // first status too, so what follows is measured on a settled server.
    let deadline = Instant::now() + Duration::from_secs(1800);
    let bundles_api: Api<Bundle> = Api::namespaced(client.clone(), WORKSPACE);
    loop {
        let fetched = repos
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|r| r.status.as_ref().and_then(|s| s.commit.as_ref()).is_some())
            .count();
        let settled = bundles_api
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|b| {
                b.status.as_ref().and_then(|s| s.observed_generation) == b.metadata.generation
            })
            .count();
        if fetched > args.git_repos && settled == (args.git_repos + 1) * args.bundles {
            break;
        }
        if Instant::now() > deadline {
            bail!("only {fetched} GitRepos fetched after 30 minutes");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!(
        "  {} more GitRepos created, fetched and their Bundles' status written in {:.1} s",
        args.git_repos,
        started.elapsed().as_secs_f64()
    );
    let chosen = args.git_repos / 2;
    // One cluster in the middle of the fleet (whatever its size).
    let cluster = &format!("fleet-{:04}", args.clusters / 2);
    let namespace = lariat_api::fleet::cluster_namespace(WORKSPACE, cluster);
    let deployments: Api<BundleDeployment> = Api::namespaced(client.clone(), &namespace);
    let theirs = ListParams::default().labels(&format!(
        "fleet.cattle.io/bundle-name=team-{chosen:03}-bundle-00"
    ));
    let clusters: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        WORKSPACE,
        &lariat_controllers::capi("Cluster"),
    );
    let started = Instant::now();
    clusters
        .patch(
            cluster,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": format!("t{chosen:03}")}}})),
        )
        .await?;
    let mut exists = None;
    let deadline = started + Duration::from_secs(300);
    let ready = loop {
        let found = deployments.list(&theirs).await?.items;
        if !found.is_empty() && exists.is_none() {
            exists = Some(started.elapsed());
        }
        let done = found.iter().any(|bd| {
            bd.status
                .as_ref()
                .is_some_and(|s| s.ready && s.applied_deployment_id == bd.spec.deployment_id)
        });
        if done {
            break started.elapsed();
        }
        if Instant::now() > deadline {
            bail!("the relabelled cluster's BundleDeployment was not Ready within 5 minutes");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    row = row.cell(format!("{:.0} ms", ready.as_secs_f64() * 1000.0));
    println!(
        "  relabel one cluster into 1 of {} GitRepos: BundleDeployment exists after {:.0} ms, Ready after {:.0} ms",
        args.git_repos + 1,
        exists.unwrap_or(ready).as_secs_f64() * 1000.0,
        ready.as_secs_f64() * 1000.0
    );

    // 3. Nothing changing.
    let cpu_before = server.cpu_seconds();
    let requests_before = requests(&client).await?;
    tokio::time::sleep(Duration::from_secs(args.idle_seconds)).await;
    let cpu = server.cpu_seconds() - cpu_before;
    let requests_after = requests(&client).await?;
    let seconds = args.idle_seconds as f64;
    let (rss, peak) = server.memory_mib();
    println!(
        "  idle over {} s ({} clusters, {} GitRepos, {} BundleDeployments): server CPU {:.1}% of one core, memory {rss:.0} MiB (peak {peak:.0})",
        args.idle_seconds,
        args.clusters,
        args.git_repos + 1,
        desired,
        cpu * 100.0 / seconds
    );
    row = row
        .cell(format!("{:.1}%", cpu * 100.0 / seconds))
        .cell(format!("{rss:.0} MiB"));
    for api in ["management", "workload"] {
        let per_second = requests_per(&requests_before, &requests_after, api, seconds);
        println!("  idle {api} API requests per second {per_second}");
        let total = per_second.split_whitespace().next().unwrap_or("?");
        row = row.cell(total);
    }
    row.cell(format!("{} s", args.idle_seconds))
        .print("bench fleet");
    Ok(())
}
