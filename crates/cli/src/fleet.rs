//! `lariat fleet diagnose`: which clusters have not converged, grouped by cause and ranked by
//! how many clusters each cause holds back, with the object to look at next. Fleet's own
//! `BUNDLESREADY 12/14` says how many; this says which and why.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use kube::ResourceExt;
use kube::api::{Api, ListParams};
use lariat_api::fleet::{Bundle, GitRepo};
use serde::Serialize;

#[derive(clap::Subcommand)]
pub enum FleetCommand {
    /// The clusters that have not converged, grouped by cause, most clusters first.
    Diagnose(DiagnoseArgs),
}

#[derive(clap::Args)]
pub struct DiagnoseArgs {
    /// Only this GitRepo's bundles.
    git_repo: Option<String>,
    /// The workspace (namespace) of the GitRepos.
    #[arg(short = 'n', long, default_value = lariat_api::fleet::DEFAULT_WORKSPACE)]
    namespace: String,
    /// Output format: `text` or `json`.
    #[arg(short = 'o', long, default_value = "text")]
    output: String,
    /// Kubeconfig of the lariat server [default: $KUBECONFIG, ~/.kube/config, ./lariat-data/kubeconfig.yaml].
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
}

/// One cause and everything it holds back.
#[derive(Serialize, Debug, PartialEq)]
pub struct Group {
    /// The GitRepo a cause is on, when it is the GitRepo's (no cluster involved).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub git_repo: Option<String>,
    pub state: String,
    pub message: String,
    pub clusters: Vec<String>,
    pub bundles: Vec<String>,
    /// What to look at next.
    pub next: String,
}

pub async fn run(command: FleetCommand) -> anyhow::Result<()> {
    let FleetCommand::Diagnose(args) = command;
    if !["text", "json"].contains(&args.output.as_str()) {
        anyhow::bail!(
            "-o {} is not an output format: use text or json",
            args.output
        );
    }
    let client = crate::connect::client(args.kubeconfig.as_ref()).await?;
    let ns = &args.namespace;
    let repos: Api<GitRepo> = Api::namespaced(client.clone(), ns);
    let bundles: Api<Bundle> = Api::namespaced(client, ns);
    let mut params = ListParams::default();
    let repos = match &args.git_repo {
        Some(name) => {
            let Some(repo) = repos.get_opt(name).await? else {
                anyhow::bail!(
                    "GitRepo {name:?} not found in namespace {ns:?}: list them with `kubectl get gitrepos -n {ns}`"
                );
            };
            params = params.labels(&format!("fleet.cattle.io/repo-name={name}"));
            vec![repo]
        }
        None => repos.list(&ListParams::default()).await?.items,
    };
    let bundles = bundles.list(&params).await?.items;
    let groups = diagnose(&repos, &bundles, ns);
    if args.output == "json" {
        println!("{}", serde_json::to_string_pretty(&groups)?);
        return Ok(());
    }
    if groups.is_empty() {
        println!("every targeted cluster has converged");
        return Ok(());
    }
    for group in &groups {
        let count = group.clusters.len();
        let who = match (&group.git_repo, count) {
            (Some(repo), _) => format!("GitRepo {repo}"),
            (None, 0) => "no cluster yet".to_string(),
            (None, 1) => "1 cluster".to_string(),
            (None, n) => format!("{n} clusters"),
        };
        println!("{who}  {}  {}", group.state, group.message);
        if count > 0 {
            println!("  clusters: {}", group.clusters.join(", "));
        }
        if !group.bundles.is_empty() {
            println!("  bundles:  {}", group.bundles.join(", "));
        }
        println!("  next:     {}", group.next);
    }
    Ok(())
}

/// One cause's clusters and bundles, gathered from every Bundle.
#[derive(Default)]
struct Merged {
    message: String,
    clusters: BTreeSet<String>,
    bundles: BTreeSet<String>,
}

/// The groups, most clusters first: a GitRepo that cannot be deployed, then every Bundle's
/// failure groups merged across Bundles by state and cause.
pub fn diagnose(repos: &[GitRepo], bundles: &[Bundle], namespace: &str) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    for repo in repos {
        let refused = repo
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| {
                c.iter()
                    .find(|c| c.type_ == "Accepted" && c.status == "False")
            });
        if let Some(condition) = refused {
            groups.push(Group {
                git_repo: Some(repo.name_any()),
                state: condition
                    .reason
                    .clone()
                    .unwrap_or_else(|| "NotAccepted".into()),
                message: condition.message.clone().unwrap_or_default(),
                clusters: vec![],
                bundles: vec![],
                next: format!(
                    "kubectl describe gitrepo {} -n {namespace}",
                    repo.name_any()
                ),
            });
        }
    }
    let mut merged: BTreeMap<(String, String), Merged> = BTreeMap::new();
    for bundle in bundles {
        for group in bundle
            .status
            .as_ref()
            .and_then(|s| s.failure_groups.as_ref())
            .into_iter()
            .flatten()
        {
            let entry = merged
                .entry(lariat_fleet::bundle::cause(group))
                .or_insert_with(|| Merged {
                    message: group.message.clone(),
                    ..Default::default()
                });
            entry.clusters.extend(group.clusters.iter().cloned());
            entry.bundles.insert(bundle.name_any());
        }
    }
    let mut from_bundles: Vec<Group> = merged
        .into_iter()
        .map(|((state, _), Merged { message, clusters, bundles })| {
            let first_bundle = bundles.iter().next().cloned().unwrap_or_default();
            let first_cluster = clusters.iter().next().cloned().unwrap_or_default();
            // A rollout's hold is the Bundle's doing: its partitions say where it stands.
            let next = if state == "OutOfSync" {
                format!(
                    "kubectl get bundle {first_bundle} -n {namespace} -o yaml   (status.partitions, spec.rolloutStrategy)"
                )
            } else {
                format!(
                    "kubectl get bundledeployments -A -l fleet.cattle.io/bundle-name={first_bundle},fleet.cattle.io/cluster={first_cluster} -o yaml"
                )
            };
            Group {
                git_repo: None,
                next,
                state,
                message,
                clusters: clusters.into_iter().collect(),
                bundles: bundles.into_iter().collect(),
            }
        })
        .collect();
    from_bundles.sort_by(|a, b| {
        b.clusters
            .len()
            .cmp(&a.clusters.len())
            .then(a.state.cmp(&b.state))
    });
    groups.extend(from_bundles);
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn causes_merge_across_bundles_and_rank_by_clusters() {
        let bundle = |name: &str, groups: serde_json::Value| -> Bundle {
            serde_json::from_value(json!({
                "apiVersion": "fleet.cattle.io/v1alpha1", "kind": "Bundle",
                "metadata": {"name": name, "namespace": "fleet-default"},
                "spec": {}, "status": {"failureGroups": groups},
            }))
            .unwrap()
        };
        let bundles = [
            bundle(
                "apps",
                json!([
                    {"state": "ErrApplied", "message": "quota exceeded on 3 pods", "count": 2, "clusters": ["a", "b"]},
                    {"state": "NotReady", "message": "0/3 replicas", "count": 1, "clusters": ["c"]},
                ]),
            ),
            bundle(
                "infra",
                json!([
                    {"state": "ErrApplied", "message": "quota exceeded on 5 pods", "count": 2, "clusters": ["b", "d"]},
                ]),
            ),
        ];
        let groups = diagnose(&[], &bundles, "fleet-default");
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[0].state, "ErrApplied");
        assert_eq!(groups[0].clusters, ["a", "b", "d"]);
        assert_eq!(groups[0].bundles, ["apps", "infra"]);
        assert!(groups[0].next.contains("fleet.cattle.io/bundle-name=apps"));
        assert_eq!(groups[1].clusters, ["c"]);
        assert_eq!(groups[0].git_repo, None);

        // A GitRepo that cannot deploy comes first, named; a rollout's hold points at the
        // Bundle's partitions.
        let repo: GitRepo = serde_json::from_value(json!({
            "apiVersion": "fleet.cattle.io/v1alpha1", "kind": "GitRepo",
            "metadata": {"name": "platform", "namespace": "fleet-default"},
            "spec": {"repo": "file:///x"},
            "status": {"conditions": [{"type": "Accepted", "status": "False",
                "reason": "RevisionNotFound", "message": "revision \"v9\" is no tag"}]},
        }))
        .unwrap();
        let held = [bundle(
            "apps",
            json!([{"state": "OutOfSync", "message": "the new version waits", "count": 1, "clusters": ["a"]}]),
        )];
        let groups = diagnose(&[repo], &held, "fleet-default");
        assert_eq!(groups[0].git_repo.as_deref(), Some("platform"));
        assert_eq!(groups[0].state, "RevisionNotFound");
        assert!(
            groups[1]
                .next
                .starts_with("kubectl get bundle apps -n fleet-default -o yaml")
        );
    }
}
