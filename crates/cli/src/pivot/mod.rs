//! `lariat move`: clusterctl's pivot. A namespace's Clusters and everything that belongs to
//! them go from one management server to another (lariat, or any Kubernetes API server with
//! Cluster API's CRDs), or to and from a backup directory.
//!
//! The order: discover the graph (`graph`), check what the move would break (`preflight`),
//! record the journal on the source (`journal`), pause the source's Clusters, copy to the
//! target owners first and verify it object by object (`copy`), and only then delete from
//! the source and unpause in the target. Rerunning the same command resumes from the
//! journal; `--abort` undoes a move that has not started deleting.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::bail;

mod agents;
mod copy;
mod graph;
mod journal;
mod preflight;

use copy::Server;
use graph::{Graph, Inventory, Selector};
use journal::{Entry, Journal, Phase};

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("destination").required(true).args(["to_kubeconfig", "to_directory", "from_directory"])))]
pub struct MoveArgs {
    /// Kubeconfig of the server to move to: another lariat server, or a Kubernetes API
    /// server with Cluster API's CRDs (a Cluster API management cluster).
    #[arg(long)]
    to_kubeconfig: Option<PathBuf>,
    /// Write the objects to this directory (one YAML file each) instead: a backup.
    #[arg(long)]
    to_directory: Option<PathBuf>,
    /// Restore the objects of a backup directory into the server of --kubeconfig.
    #[arg(long)]
    from_directory: Option<PathBuf>,
    /// The namespace whose Clusters move [default: the kubeconfig context's, else default].
    #[arg(short = 'n', long)]
    namespace: Option<String>,
    /// Print the objects, what the move would break and the command that would pass; change
    /// nothing.
    #[arg(long)]
    dry_run: bool,
    /// Move this object too, one the preflight names (KIND or KIND/NAME; repeatable).
    #[arg(long, value_name = "KIND[/NAME]")]
    include: Vec<Selector>,
    /// Leave this object in the source, acknowledging what it references will be gone
    /// (KIND or KIND/NAME; repeatable).
    #[arg(long, value_name = "KIND[/NAME]")]
    leave: Vec<Selector>,
    /// Move clusters that are still provisioning, scaling or rolling out, as they are.
    #[arg(long)]
    force: bool,
    /// Undo a move that stopped before it began deleting from the source: delete what it
    /// created in the target and unpause the source's Clusters.
    #[arg(long, requires = "to_kubeconfig", conflicts_with_all = ["to_directory", "from_directory", "dry_run"])]
    abort: bool,
    /// Kubeconfig of the source server (of the target, with --from-directory) [default:
    /// $KUBECONFIG, ~/.kube/config, ./lariat-data/kubeconfig.yaml].
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
}

pub async fn run(args: MoveArgs) -> anyhow::Result<()> {
    let namespace = match &args.namespace {
        Some(namespace) => namespace.clone(),
        None => crate::connect::current_context(args.kubeconfig.as_ref())
            .ok()
            .and_then(|(_, named)| named.context?.namespace)
            .unwrap_or_else(|| "default".to_string()),
    };
    let started = Instant::now();
    let here = Server::connect(
        crate::connect::config(args.kubeconfig.as_ref()).await?,
        "the server",
    )
    .await?;
    if let Some(directory) = &args.from_directory {
        return restore(&args, &here, directory, started).await;
    }
    let journal = Journal::load(&here.client, &namespace).await?;
    if let Some(directory) = &args.to_directory {
        if journal.is_some() {
            bail!(
                "a move of namespace {namespace} is under way: finish it (rerun it) or undo it (--abort) first"
            );
        }
        return backup(&args, &here, &namespace, directory).await;
    }
    let path = args
        .to_kubeconfig
        .as_ref()
        .expect("clap requires a destination");
    let target_config = crate::connect::config(Some(path)).await?;
    let target = Server::connect(target_config, "the target").await?;
    if target.identity == here.identity || target.url == here.url {
        bail!(
            "the source and the target are the same server ({}): pass the other server's kubeconfig to --to-kubeconfig",
            here.url
        );
    }
    match journal {
        Some(journal) if journal.target_identity != target.identity => bail!(
            "a move of namespace {namespace} to {} is under way: rerun it with that server's kubeconfig (at whatever address it has now), or undo it with --abort and that kubeconfig",
            journal.target
        ),
        None if args.abort => bail!(
            "no move of namespace {namespace} is under way in {}: nothing to abort",
            here.url
        ),
        None => {
            let Some(graph) = plan(&args, &here, Some(&target), &namespace).await? else {
                return Ok(());
            };
            let journal = Journal {
                target: target.url.clone(),
                target_identity: target.identity.clone(),
                phase: Phase::Copying,
                objects: graph.objects.iter().map(Entry::of).collect(),
                paused: graph
                    .clusters()
                    .filter(|c| c.object.data["spec"]["paused"] == true)
                    .map(|c| c.name().to_string())
                    .collect(),
            };
            journal.create(&here.client, &namespace).await?;
            println!(
                "Journal written: ConfigMap {namespace}/{} in the source",
                journal::NAME
            );
            finish(&here, &target, path, &namespace, journal, started).await
        }
        Some(mut journal) => {
            journal.check_confined(&namespace)?;
            if args.abort {
                return abort(&here, &target, &namespace, journal).await;
            }
            println!(
                "Resuming the move of namespace {namespace} to {} ({} objects; {})",
                target.url,
                journal.objects.len(),
                match journal.phase {
                    Phase::Copying => "the source is whole",
                    Phase::Deleting => "the target holds everything",
                }
            );
            if args.dry_run {
                println!(
                    "Dry run: nothing changed. The same command without --dry-run finishes the move{}",
                    if journal.phase == Phase::Copying {
                        "; --abort undoes it"
                    } else {
                        ""
                    }
                );
                return Ok(());
            }
            if journal.phase == Phase::Copying {
                // The source is whole: discover and check again, so what appeared meanwhile
                // moves or is named, and the move takes only what discovery finds.
                let Some(graph) = plan(&args, &here, Some(&target), &namespace).await? else {
                    return Ok(());
                };
                let found: HashSet<&str> = graph.uids();
                if let Some(stray) = journal
                    .objects
                    .iter()
                    .find(|e| !found.contains(e.uid.as_str()))
                {
                    bail!(
                        "the move's journal names {}, which is no longer part of the move: undo it with --abort, then move again",
                        stray.display()
                    );
                }
                journal.objects = graph.objects.iter().map(Entry::of).collect();
                journal.save(&here.client, &namespace).await?;
            }
            finish(&here, &target, path, &namespace, journal, started).await
        }
    }
}

/// Discovery and preflight. `None` when it was a dry run (everything printed); an error when
/// the move would break something.
async fn plan(
    args: &MoveArgs,
    source: &Server,
    target: Option<&Server>,
    namespace: &str,
) -> anyhow::Result<Option<Graph>> {
    println!(
        "Discovering Cluster API objects in namespace {namespace} of {}",
        source.url
    );
    let inventory = Inventory::read(&source.client, source.served.discovery()).await?;
    let graph = Graph::discover(&inventory, namespace, &args.include);
    let clusters = graph.clusters().count();
    if clusters == 0 {
        bail!(
            "namespace {namespace} of {} has no Cluster: nothing to move (pass --namespace)",
            source.url
        );
    }
    println!(
        "Found {} objects of {clusters} clusters: {}",
        graph.objects.len(),
        graph.summary()
    );
    let (findings, would_be) = tied(&inventory, namespace, args);
    let mut refusals = preflight::settled(&graph, args.force);
    if let Some(target) = target {
        refusals
            .extend(preflight::target(&graph, &inventory, &target.served, &target.client).await?);
    }
    if args.dry_run {
        println!("\nObjects, in the order they would be created:");
        for object in &graph.objects {
            println!("  {}", object.display(namespace));
        }
        let members = graph.uids();
        let more: Vec<String> = would_be
            .objects
            .iter()
            .filter(|o| {
                !members.contains(o.uid())
                    && !findings.iter().any(|f| f.left == o.display(namespace))
            })
            .map(|o| o.display(namespace))
            .collect();
        if !more.is_empty() {
            println!("\nWhat the command below includes takes these along too (what they own):");
            for object in more {
                println!("  {object}");
            }
        }
    }
    if !findings.is_empty() {
        println!(
            "\nLeft outside the move, but tied to it ({}):",
            findings.len()
        );
        for finding in &findings {
            println!("  {}", finding.why);
        }
    }
    if !refusals.is_empty() {
        println!("\nThe move cannot start:");
        for refusal in &refusals {
            println!("  {refusal}");
        }
    }
    if args.dry_run {
        let given: Vec<String> = std::env::args()
            .skip(1)
            .filter(|a| a != "--dry-run")
            .collect();
        let mut command = format!("lariat {}", given.join(" "));
        let mut wanted: Vec<(&str, &str)> = findings
            .iter()
            .map(|f| {
                (
                    if f.elsewhere { "--leave" } else { "--include" },
                    f.selector.as_str(),
                )
            })
            .collect();
        wanted.sort();
        wanted.dedup();
        for (flag, selector) in wanted {
            command.push_str(&format!(" {flag} {selector}"));
        }
        if refusals.is_empty() {
            println!(
                "\nDry run: nothing changed. This command would move it{}:\n  {command}",
                if findings.is_empty() {
                    ""
                } else {
                    " (--leave KIND/NAME instead of --include leaves an object behind)"
                }
            );
        } else {
            println!(
                "\nDry run: nothing changed. Once what cannot start is fixed, this command would move it:\n  {command}"
            );
        }
        return Ok(None);
    }
    if !findings.is_empty() || !refusals.is_empty() {
        bail!(
            "nothing was changed: {}{}{} (--dry-run prints the command that would pass)",
            if findings.is_empty() {
                String::new()
            } else {
                format!(
                    "{} objects are tied to the move: --include or --leave each",
                    findings.len()
                )
            },
            if findings.is_empty() || refusals.is_empty() {
                ""
            } else {
                "; "
            },
            if refusals.is_empty() {
                String::new()
            } else {
                format!("{} reasons it cannot start", refusals.len())
            },
        );
    }
    Ok(Some(graph))
}

/// What is tied to the move and neither included nor left: the objects tied to the graph, and
/// those tied to them in turn once they are included (a Project, then its role bindings), so
/// one dry run names them all. Empty exactly when the graph itself has nothing tied to it.
/// Also returns the graph those inclusions would make, which may take more along (what a
/// Project owns), so a dry run names that too.
fn tied(
    inventory: &Inventory,
    namespace: &str,
    args: &MoveArgs,
) -> (Vec<preflight::Finding>, Graph) {
    let mut include = args.include.clone();
    let mut findings: Vec<preflight::Finding> = Vec::new();
    loop {
        let graph = Graph::discover(inventory, namespace, &include);
        let mut more = false;
        for finding in preflight::scan(inventory, &graph, namespace, &args.leave) {
            if findings.iter().any(|f| f.why == finding.why) {
                continue;
            }
            if !finding.elsewhere
                && !findings.iter().any(|f| f.selector == finding.selector)
                && let Ok(selector) = finding.selector.parse()
            {
                include.push(selector);
                more = true;
            }
            findings.push(finding);
        }
        if !more {
            return (findings, graph);
        }
    }
}

/// Copy, verify, delete from the source, unpause: from wherever the journal says.
async fn finish(
    source: &Server,
    target: &Server,
    target_kubeconfig: &PathBuf,
    namespace: &str,
    mut journal: Journal,
    started: Instant,
) -> anyhow::Result<()> {
    let clusters: Vec<&Entry> = journal.objects.iter().filter(|e| e.is_cluster()).collect();
    if journal.phase == Phase::Copying {
        println!("Pausing {} clusters in the source", clusters.len());
        source.pause(&clusters, |_| true).await?;
        let graph = source.read(&journal.objects).await?;
        println!("Creating {} objects in the target", graph.objects.len());
        let created = target.create(&graph).await?;
        if created < graph.objects.len() {
            println!(
                "  {} were there from an earlier attempt",
                graph.objects.len() - created
            );
        }
        println!("Verifying {} objects in the target", graph.objects.len());
        target.verify(&graph).await?;
        let followed = agents::hand_off(source, target, target_kubeconfig, &graph).await?;
        for name in &followed.connected {
            println!("Agent of Cluster/{name} connected to the target");
        }
        for (name, why) in &followed.reimport {
            println!(
                "Agent of Cluster/{name} did not follow ({why}): once the move ends, import it again with `lariat cluster import {name} -n {namespace} --kubeconfig TARGET` and apply what it prints"
            );
        }
        journal.phase = Phase::Deleting;
        journal.save(&source.client, namespace).await?;
    }
    println!("Deleting {} objects from the source", journal.objects.len());
    target.holds(&journal.objects).await?;
    source.forget(&journal.objects).await?;
    source.delete(&journal.objects, false).await?;
    // Again: the source's Fleet may have made its records anew while the Clusters lived.
    source.forget(&journal.objects).await?;
    unpause(target, &journal, "the target").await?;
    // Best effort: the move is done whether or not its users can be told where it went (a
    // record grown past one object's size, say), so a failure here is said, not fatal.
    if let Err(e) = journal::record_moved(
        &source.client,
        &target.client,
        &target.url,
        namespace,
        &journal.objects,
    )
    .await
    {
        eprintln!("warning: the move is done, but where its clusters went is not recorded: {e:#}");
    }
    Journal::remove(&source.client, namespace).await?;
    let graph_summary = graph::count_kinds(journal.objects.iter().map(|e| e.kind.as_str()));
    println!(
        "Moved {} objects ({graph_summary}) of namespace {namespace} from {} to {} in {:.1}s",
        journal.objects.len(),
        source.url,
        target.url,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

async fn abort(
    source: &Server,
    target: &Server,
    namespace: &str,
    journal: Journal,
) -> anyhow::Result<()> {
    if journal.phase == Phase::Deleting {
        bail!(
            "the move of namespace {namespace} has begun deleting from the source, and the target holds everything: finish it by running it again without --abort"
        );
    }
    println!(
        "Deleting what the move created in the target {}",
        target.url
    );
    let deleted = target.delete(&journal.objects, true).await?;
    // With the target's own records of them (its Fleet's, an agent's connection).
    target.forget(&journal.objects).await?;
    unpause(source, &journal, "the source").await?;
    Journal::remove(&source.client, namespace).await?;
    println!("Aborted: {deleted} objects deleted from the target; the source is as it was");
    Ok(())
}

/// Puts the moved Clusters' `spec.paused` back as it was before the move, on `server`.
async fn unpause(server: &Server, journal: &Journal, which: &str) -> anyhow::Result<()> {
    let clusters: Vec<&Entry> = journal.objects.iter().filter(|e| e.is_cluster()).collect();
    let was_paused: HashSet<&str> = journal.paused.iter().map(String::as_str).collect();
    let unpausing = clusters
        .iter()
        .filter(|c| !was_paused.contains(c.name.as_str()))
        .count();
    println!("Unpausing {unpausing} clusters in {which}");
    server
        .pause(&clusters, |name| was_paused.contains(name))
        .await
}

/// `--to-directory`: the graph as it is, each object in a file, with its Clusters' own
/// `spec.paused` (they are paused only while being read).
async fn backup(
    args: &MoveArgs,
    source: &Server,
    namespace: &str,
    directory: &std::path::Path,
) -> anyhow::Result<()> {
    let Some(graph) = plan(args, source, None, namespace).await? else {
        return Ok(());
    };
    let entries: Vec<Entry> = graph.objects.iter().map(Entry::of).collect();
    let clusters: Vec<&Entry> = entries.iter().filter(|e| e.is_cluster()).collect();
    let was_paused: HashSet<String> = graph
        .clusters()
        .filter(|c| c.object.data["spec"]["paused"] == true)
        .map(|c| c.name().to_string())
        .collect();
    source.pause(&clusters, |_| true).await?;
    let read = source.read(&entries).await;
    source
        .pause(&clusters, |name| was_paused.contains(name))
        .await?;
    let mut graph = read?;
    for cluster in graph.objects.iter_mut().filter(|o| o.is_cluster()) {
        let paused = was_paused.contains(cluster.name());
        cluster.object.data["spec"]["paused"] = serde_json::json!(paused);
    }
    copy::write_directory(directory, &graph)?;
    println!(
        "Wrote {} objects ({}) to {}",
        graph.objects.len(),
        graph.summary(),
        directory.display()
    );
    Ok(())
}

/// `--from-directory`: a backup into the server of --kubeconfig, Clusters paused until
/// every object is there and verified. Rerunning after a failure finds its own work.
async fn restore(
    args: &MoveArgs,
    target: &Server,
    directory: &std::path::Path,
    started: Instant,
) -> anyhow::Result<()> {
    let graph = copy::read_directory(directory)?;
    println!(
        "Read {} objects ({}) from {}",
        graph.objects.len(),
        graph.summary(),
        directory.display()
    );
    let empty = Inventory::empty();
    let refusals = preflight::target(&graph, &empty, &target.served, &target.client).await?;
    if !refusals.is_empty() {
        println!("\nThe restore cannot start:");
        for refusal in &refusals {
            println!("  {refusal}");
        }
        bail!(
            "nothing was changed: {} reasons the restore cannot start",
            refusals.len()
        );
    }
    if args.dry_run {
        println!("Dry run: nothing changed");
        return Ok(());
    }
    println!("Creating {} objects in {}", graph.objects.len(), target.url);
    target.create(&graph).await?;
    target.verify(&graph).await?;
    let entries: Vec<Entry> = graph.objects.iter().map(Entry::of).collect();
    let clusters: Vec<&Entry> = entries.iter().filter(|e| e.is_cluster()).collect();
    let was_paused: HashSet<String> = graph
        .clusters()
        .filter(|c| c.object.data["spec"]["paused"] == true)
        .map(|c| c.name().to_string())
        .collect();
    target
        .pause(&clusters, |name| was_paused.contains(name))
        .await?;
    println!(
        "Restored {} objects ({}) in {:.1}s",
        graph.objects.len(),
        graph.summary(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
