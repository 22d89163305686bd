//! The Bundle controller: one BundleDeployment per cluster a Bundle targets, in that
//! cluster's namespace, naming the Content (the manifests resolved for it, stored once per
//! distinct set) and the options to apply it with; BundleDeployments of clusters no longer
//! targeted are deleted. The Bundle's status counts them by state and groups the clusters
//! that are not ready by cause.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use lariat_api::fleet::{
    Bundle, BundleDeployment, BundleDeploymentOptions, BundleDeploymentSpec,
    BundleDeploymentStatus, BundleDisplay, BundleSpec, BundleStatus, BundleSummary, BundleTarget,
    ClusterGroup, Content, ContentFields, FailureGroup, FleetCluster, HelmOptions,
};
use lariat_controllers::Error;
use lariat_controllers::object::{ensure_finalizer, patch_status, remove_finalizer};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::rollout::{self, Member, Plan};
use crate::target::{Candidate, target_for};
use crate::{Context, conditions};

/// Kept on a Bundle until its BundleDeployments (in other namespaces) are deleted.
pub const FINALIZER: &str = "fleet.cattle.io/bundle-finalizer";
/// On every BundleDeployment: its Bundle, and its cluster.
pub const BUNDLE_NAME_LABEL: &str = "fleet.cattle.io/bundle-name";
pub const BUNDLE_NAMESPACE_LABEL: &str = "fleet.cattle.io/bundle-namespace";
pub const CLUSTER_LABEL: &str = "fleet.cattle.io/cluster";
/// The field manager BundleDeployments are written as.
const MANAGER: &str = "lariat-fleet";
/// Directory of a bundle whose files customize it per target (`yaml.overlays`).
const OVERLAYS: &str = "overlays/";

/// The manifests of a bundle for one target: its kustomization built, when kustomize builds
/// it; else every document of its files (overlays aside), with the target's overlays
/// applied (a file of the overlay replaces or adds the file of the same name;
/// `<name>_patch.yaml` merge-patches each document of `<name>.yaml`).
pub fn resolve(spec: &BundleSpec, target: &BundleTarget) -> Result<Vec<Value>, String> {
    if is_kustomized(spec, target) {
        return kustomized(spec, target);
    }
    let resources = spec.resources.as_deref().unwrap_or_default();
    let content = |name: &str| -> Option<&str> {
        resources
            .iter()
            .find(|r| r.name.as_deref() == Some(name))
            .and_then(|r| r.content.as_deref())
    };
    let mut files: BTreeMap<String, String> = resources
        .iter()
        .filter_map(|r| Some((r.name.clone()?, r.content.clone().unwrap_or_default())))
        .filter(|(name, _)| !name.starts_with(OVERLAYS))
        .collect();
    let mut patches: Vec<(String, String)> = Vec::new();
    let overlays = spec
        .yaml
        .iter()
        .chain(target.yaml.iter())
        .flat_map(|y| y.overlays.iter().flatten());
    for overlay in overlays {
        let prefix = format!("{OVERLAYS}{overlay}/");
        let mut found = false;
        for resource in resources {
            let Some(name) = resource.name.as_deref() else {
                continue;
            };
            let Some(relative) = name.strip_prefix(&prefix) else {
                continue;
            };
            found = true;
            let text = content(name).unwrap_or_default().to_string();
            match ["_patch.yaml", "_patch.yml", "_patch.json"]
                .iter()
                .find_map(|suffix| relative.strip_suffix(suffix))
            {
                Some(base) => patches.push((base.to_string(), text)),
                None => {
                    files.insert(relative.to_string(), text);
                }
            }
        }
        if !found {
            return Err(format!("overlay {overlay:?} has no files under {prefix}"));
        }
    }
    let mut documents: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for (name, text) in &files {
        documents.insert(name.clone(), parse(name, text)?);
    }
    for (base, patch) in patches {
        let target_file = ["yaml", "yml", "json"]
            .iter()
            .map(|ext| format!("{base}.{ext}"))
            .find(|f| documents.contains_key(f))
            .ok_or_else(|| format!("the patch {base}_patch has no file {base}.yaml to patch"))?;
        for patch in parse(&format!("{base}_patch"), &patch)? {
            for document in documents.get_mut(&target_file).into_iter().flatten() {
                json_patch::merge(document, &patch);
            }
        }
    }
    Ok(documents.into_values().flatten().collect())
}

/// A target's `helm` over the bundle's, as Fleet combines them: each side's `valuesFiles`
/// (files of the bundle) merged over its own `values`, then the target's values merged key by
/// key over the bundle's; its `valuesFrom` after the bundle's; the other options it sets
/// replacing the bundle's (a target cannot change the chart: `scan` refuses it).
fn customized(
    spec: &BundleSpec,
    base: &HelmOptions,
    over: Option<&HelmOptions>,
) -> Result<HelmOptions, String> {
    let mut values = values_with_files(spec, base)?;
    let mut values_from = base.values_from.clone().unwrap_or_default();
    if let Some(over) = over {
        lariat_helm::values::merge_over(&mut values, values_with_files(spec, over)?);
        for item in over.values_from.iter().flatten() {
            if !values_from.contains(item) {
                values_from.push(item.clone());
            }
        }
    }
    let over = over.cloned().unwrap_or_default();
    let mut template_values = base.template_values.clone().unwrap_or_default();
    template_values.extend(over.template_values.unwrap_or_default());
    Ok(HelmOptions {
        template_values: (!template_values.is_empty()).then_some(template_values),
        disable_pre_process: over.disable_pre_process || base.disable_pre_process,
        release_name: over.release_name.or(base.release_name.clone()),
        values: (!values.is_empty()).then_some(values),
        values_files: None,
        values_from: (!values_from.is_empty()).then_some(values_from),
        max_history: if over.max_history != 0 {
            over.max_history
        } else {
            base.max_history
        },
        take_ownership: over.take_ownership || base.take_ownership,
        force: over.force || base.force,
        skip_schema_validation: over.skip_schema_validation || base.skip_schema_validation,
        timeout_seconds: if over.timeout_seconds != 0 {
            over.timeout_seconds
        } else {
            base.timeout_seconds
        },
        ..base.clone()
    })
}

/// A file of a bundle, as it is in the repository (binary files travel base64-encoded).
fn file_bytes(resource: &lariat_api::fleet::BundleResource) -> Result<Vec<u8>, String> {
    let name = resource.name.as_deref().unwrap_or_default();
    let text = resource.content.as_deref().unwrap_or_default();
    match resource.encoding.as_deref() {
        Some("base64") => {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|e| format!("{name}: {e}"))
        }
        None | Some("") => Ok(text.as_bytes().to_vec()),
        Some(other) => Err(format!("{name}: encoding {other:?} is not base64")),
    }
}

/// Whether a bundle is built with kustomize for `target`.
pub fn is_kustomized(spec: &BundleSpec, target: &BundleTarget) -> bool {
    spec.kustomize.is_some() || target.kustomize.is_some()
}

/// A kustomize bundle's objects for one target: the kustomization of the target's
/// `kustomize.dir` (else the bundle's, else its root) built as Fleet's agent builds it, the
/// bundle's files standing for the repository.
fn kustomized(spec: &BundleSpec, target: &BundleTarget) -> Result<Vec<Value>, String> {
    let dir = target
        .kustomize
        .as_ref()
        .or(spec.kustomize.as_ref())
        .and_then(|k| k.dir.clone())
        .unwrap_or_default();
    let mut files = lariat_kustomize::Files::new();
    for resource in spec.resources.iter().flatten() {
        if let Some(name) = &resource.name {
            files.insert(name.clone(), file_bytes(resource)?);
        }
    }
    lariat_kustomize::build(&files, &dir, lariat_kustomize::Bounds::default())
        .map_err(|e| format!("kustomize: {e}"))
}

/// `values`, with each of `valuesFiles` (files of the bundle) merged over them in order.
fn values_with_files(
    spec: &BundleSpec,
    helm: &HelmOptions,
) -> Result<serde_json::Map<String, Value>, String> {
    let mut values = helm.values.clone().unwrap_or_default();
    for file in helm.values_files.iter().flatten() {
        let name = file.trim_start_matches("./");
        let resource = spec
            .resources
            .iter()
            .flatten()
            .find(|r| r.name.as_deref() == Some(name))
            .ok_or_else(|| format!("helm.valuesFiles: {file} is not in the bundle"))?;
        let data = file_bytes(resource).map_err(|e| format!("helm.valuesFiles: {e}"))?;
        let layer = lariat_helm::chart::read_values(&data, name).map_err(|e| e.to_string())?;
        lariat_helm::values::merge_over(&mut values, layer);
    }
    Ok(values)
}

/// A Helm bundle's Content: its files, each `{"name", "content"}`, for the agent to render.
pub fn chart_files(spec: &BundleSpec) -> Vec<Value> {
    spec.resources
        .iter()
        .flatten()
        .filter_map(|r| {
            let mut file = serde_json::json!({"name": r.name.clone()?, "content": r.content.clone().unwrap_or_default()});
            if let Some(encoding) = &r.encoding {
                file["encoding"] = encoding.clone().into();
            }
            Some(file)
        })
        .collect()
}

/// A Helm release's name for a bundle, as Fleet names it when `releaseName` is not set: the
/// bundle's name, within Helm's 53 characters.
pub fn release_name(bundle: &str) -> String {
    if bundle.len() <= 53 {
        return bundle.to_string();
    }
    let hash = &sha256(bundle.as_bytes())[..8];
    format!("{}-{hash}", bundle[..44].trim_end_matches(['-', '.']))
}

/// The documents of a YAML (or JSON) file, empty ones left out.
fn parse(name: &str, text: &str) -> Result<Vec<Value>, String> {
    lariat_yaml::documents(text)
        .into_iter()
        .map(|document| document.map_err(|e| format!("{name}: {e}")))
        .filter(|d| !matches!(d, Ok(Value::Null)))
        .collect()
}

/// The SHA-256 of some bytes, in hex.
fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The BundleDeployments of a Bundle, wherever they are.
fn deployments_of(ctx: &Context, namespace: &str, name: &str) -> Vec<Arc<BundleDeployment>> {
    ctx.caches
        .typed::<BundleDeployment>()
        .store()
        .state()
        .into_iter()
        .filter(|bd| {
            bd.labels().get(BUNDLE_NAMESPACE_LABEL).map(String::as_str) == Some(namespace)
                && bd.labels().get(BUNDLE_NAME_LABEL).map(String::as_str) == Some(name)
        })
        .collect()
}

/// Where one targeted cluster stands.
struct Standing {
    cluster: String,
    state: &'static str,
    message: String,
}

pub async fn reconcile(bundle: Arc<Bundle>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = bundle.namespace().unwrap_or_default();
    let name = bundle.name_any();
    let api: Api<Bundle> = Api::namespaced(ctx.client.clone(), &namespace);
    ctx.caches.typed::<BundleDeployment>().synced().await?;
    if bundle.metadata.deletion_timestamp.is_some() {
        delete_deployments(&ctx, &deployments_of(&ctx, &namespace, &name)).await?;
        remove_finalizer(&api, &bundle, FINALIZER).await?;
        return Ok(Action::await_change());
    }
    if ensure_finalizer(&api, &bundle, FINALIZER).await? {
        return Ok(Action::await_change());
    }
    let (clusters, groups) = workspace_members(&ctx, &namespace).await?;
    let groups: Vec<&ClusterGroup> = groups.iter().map(|g| g.as_ref()).collect();

    let existing = deployments_of(&ctx, &namespace, &name);
    let by_namespace: HashMap<&str, Arc<BundleDeployment>> = existing
        .iter()
        .filter_map(|bd| Some((bd.metadata.namespace.as_deref()?, bd.clone())))
        .collect();
    let mut wanted: BTreeSet<(String, String)> = BTreeSet::new();
    let mut standings: Vec<Standing> = Vec::new();
    let mut planned: Vec<Planned> = Vec::new();
    // What each target (by its address in the spec) resolves to, worked out once: all the
    // clusters it chooses get the same manifests (a thousand clusters, one parse, one hash).
    let mut versions: HashMap<usize, Result<BundleDeploymentSpec, String>> = HashMap::new();
    let mut templating = Duration::ZERO;
    for cluster in &clusters {
        let Some(target) = target_for(&bundle.spec, &Candidate::of(cluster), &groups) else {
            continue;
        };
        let cluster_name = cluster.name_any();
        let Some(cluster_namespace) = cluster.status.as_ref().and_then(|s| s.namespace.clone())
        else {
            standings.push(Standing {
                cluster: cluster_name,
                state: "Pending",
                message: "the cluster's namespace does not exist yet".into(),
            });
            continue;
        };
        let version = match versions.entry(std::ptr::from_ref(target).addr()) {
            Entry::Occupied(known) => known.into_mut(),
            Entry::Vacant(new) => new.insert(version_for(&ctx, &bundle, target).await?),
        };
        let made = match version {
            Ok(version) => made_for(version, cluster, &mut templating).await,
            Err(message) => Err(message.clone()),
        };
        let spec = match made {
            Ok(made) => BundleDeploymentSpec {
                paused: bundle.spec.paused || cluster.spec.paused,
                ..made
            },
            Err(message) => {
                standings.push(Standing {
                    cluster: cluster_name,
                    state: "InvalidCustomization",
                    message: message.clone(),
                });
                // What the cluster runs stays: a version that cannot be made is no reason
                // to take the last good one away.
                wanted.insert((cluster_namespace, name.clone()));
                continue;
            }
        };
        wanted.insert((cluster_namespace.clone(), name.clone()));
        let current = by_namespace.get(cluster_namespace.as_str()).cloned();
        planned.push(Planned {
            cluster: cluster.clone(),
            namespace: cluster_namespace,
            current,
            spec,
        });
    }
    let (plan, strategy_error) = rollout_plan(&bundle, &planned, &groups);
    for (i, planned) in planned.iter().enumerate() {
        let cluster_name = planned.cluster.name_any();
        let mut spec = planned.spec.clone();
        spec.staged_deployment_id = spec.deployment_id.clone();
        spec.staged_options = spec.options.clone();
        let held = match &planned.current {
            Some(current) if !plan.promote[i] => {
                spec.deployment_id = current.spec.deployment_id.clone();
                spec.options = current.spec.options.clone();
                Some(held_because(
                    &plan,
                    i,
                    spec.paused,
                    strategy_error.as_deref(),
                ))
            }
            _ => None,
        };
        let labels = deployment_labels(&bundle, &cluster_name);
        let stale = |bd: &BundleDeployment| {
            bd.spec != spec || labels.iter().any(|(k, v)| bd.labels().get(k) != Some(v))
        };
        if planned.current.as_deref().is_none_or(stale) {
            write_deployment(
                &ctx,
                &bundle,
                &cluster_name,
                &planned.namespace,
                spec.clone(),
            )
            .await?;
        }
        let offline = offline_since(&ctx, &namespace, &cluster_name);
        standings.push(standing(
            &cluster_name,
            planned.current.as_deref(),
            &spec,
            offline.as_deref(),
            held,
        ));
    }
    let stale: Vec<Arc<BundleDeployment>> = existing
        .iter()
        .filter(|bd| !wanted.contains(&(bd.namespace().unwrap_or_default(), bd.name_any())))
        .cloned()
        .collect();
    delete_deployments(&ctx, &stale).await?;
    let before = bundle.status.clone().unwrap_or_default();
    let mut status = summarize(&bundle, &before, &standings, strategy_error.as_deref());
    status.max_unavailable = Some(plan.max_unavailable as i32);
    status.unavailable = Some(plan.unavailable as i32);
    status.max_unavailable_partitions = Some(plan.max_unavailable_partitions as i32);
    status.unavailable_partitions = Some(plan.unavailable_partitions as i32);
    status.partitions = (!plan.partitions.is_empty()).then_some(plan.partitions);
    if status != before {
        let value = conditions::status_patch(&before, &status)?;
        tracing::debug!(bundle = %format!("{namespace}/{name}"), patch = %value, "bundle status");
        patch_status(&api, &name, value).await?;
    }
    // Its BundleDeployments', clusters' and groups' changes wake it.
    Ok(lariat_controllers::resync())
}

/// The clusters (by name, those being deleted left out) and cluster groups of a workspace,
/// from the shared caches.
async fn workspace_members(
    ctx: &Context,
    namespace: &str,
) -> Result<(Vec<Arc<FleetCluster>>, Vec<Arc<ClusterGroup>>), Error> {
    let clusters_cache = ctx.caches.typed::<FleetCluster>();
    clusters_cache.synced().await?;
    let groups_cache = ctx.caches.typed::<ClusterGroup>();
    groups_cache.synced().await?;
    let in_namespace = |ns: Option<&str>| ns == Some(namespace);
    let mut clusters: Vec<Arc<FleetCluster>> = clusters_cache
        .store()
        .state()
        .into_iter()
        .filter(|c| in_namespace(c.metadata.namespace.as_deref()))
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .collect();
    clusters.sort_by_key(|c| c.name_any());
    let groups = groups_cache
        .store()
        .state()
        .into_iter()
        .filter(|g| in_namespace(g.metadata.namespace.as_deref()))
        .collect();
    Ok((clusters, groups))
}

/// Deletes BundleDeployments, those already gone included.
async fn delete_deployments(
    ctx: &Context,
    deployments: &[Arc<BundleDeployment>],
) -> Result<(), Error> {
    for bd in deployments {
        let bds: Api<BundleDeployment> =
            Api::namespaced(ctx.client.clone(), &bd.namespace().unwrap_or_default());
        match bds.delete(&bd.name_any(), &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// The BundleDeployment spec of the bundle's newest version for the clusters `target`
/// chooses (not yet paused for a paused cluster), its content stored; the customization's
/// error when `target`'s cannot be applied.
async fn version_for(
    ctx: &Context,
    bundle: &Bundle,
    target: &BundleTarget,
) -> Result<Result<BundleDeploymentSpec, String>, Error> {
    if let Some(error) = bundle
        .annotations()
        .get(crate::charts::CHART_ERROR_ANNOTATION)
    {
        return Ok(Err(error.clone()));
    }
    // A chart's files go to the agent as they are (it renders them against its cluster);
    // plain manifests are resolved here, once per target.
    let helm = match bundle
        .spec
        .helm
        .as_ref()
        .map(|helm| customized(&bundle.spec, helm, target.helm.as_ref()))
    {
        None => None,
        Some(Err(message)) => return Ok(Err(message)),
        Some(Ok(mut options)) => {
            options
                .release_name
                .get_or_insert_with(|| release_name(&bundle.name_any()));
            Some(options)
        }
    };
    let resolved = match &helm {
        Some(_) => Ok(chart_files(&bundle.spec)),
        // kustomize builds cost more than reading manifests: off the async threads.
        None if is_kustomized(&bundle.spec, target) => {
            let (spec, target) = (bundle.spec.clone(), target.clone());
            tokio::task::spawn_blocking(move || resolve(&spec, &target))
                .await
                .map_err(|e| Error::Invalid(format!("kustomize build: {e}")))?
        }
        None => resolve(&bundle.spec, target),
    };
    let manifests = match resolved {
        Ok(manifests) => manifests,
        Err(message) => return Ok(Err(message)),
    };
    let content = serde_json::to_vec(&manifests).map_err(|e| Error::Invalid(e.to_string()))?;
    let sha = sha256(&content);
    let content_name = format!("s-{sha}");
    ensure_content(ctx, &content_name, content, &sha).await?;
    let options = BundleDeploymentOptions {
        default_namespace: target
            .default_namespace
            .clone()
            .or(bundle.spec.default_namespace.clone()),
        namespace: target.namespace.clone().or(bundle.spec.namespace.clone()),
        keep_resources: bundle.spec.keep_resources,
        correct_drift: bundle.spec.correct_drift.clone(),
        // A chart's kustomization is built by the agent over what the chart renders there.
        kustomize: helm
            .as_ref()
            .and_then(|_| target.kustomize.clone().or(bundle.spec.kustomize.clone())),
        helm,
    };
    Ok(Ok(BundleDeploymentSpec {
        deployment_id: Some(deployment_id(&content_name, &options)),
        options: Some(options),
        correct_drift: bundle.spec.correct_drift.clone(),
        depends_on: bundle.spec.depends_on.clone(),
        ..Default::default()
    }))
}

/// What a bundle's values templates may take in one reconcile, its clusters together: the
/// templates are a repository author's, run on the management plane.
const TEMPLATING_BUDGET: Duration = Duration::from_secs(10);

/// `version` for one cluster: its Helm values made for the cluster when they hold templates or
/// label references ([`crate::templating`]), off the async threads, the deployment ID
/// following them; `spent` is the bundle's templating so far.
async fn made_for(
    version: &BundleDeploymentSpec,
    cluster: &Arc<FleetCluster>,
    spent: &mut Duration,
) -> Result<BundleDeploymentSpec, String> {
    let Some(options) = &version.options else {
        return Ok(version.clone());
    };
    let Some(helm) = options
        .helm
        .as_ref()
        .filter(|h| crate::templating::per_cluster(h))
    else {
        return Ok(version.clone());
    };
    if *spent > TEMPLATING_BUDGET {
        return Err(format!(
            "helm.values: this bundle's templates took more than {}s for its clusters together; \
             make them simpler or set disablePreProcess",
            TEMPLATING_BUDGET.as_secs()
        ));
    }
    let started = Instant::now();
    let deadline = started + TEMPLATING_BUDGET.saturating_sub(*spent);
    let (helm, made_cluster) = (helm.clone(), cluster.clone());
    let helm = tokio::task::spawn_blocking(move || {
        crate::templating::for_cluster(&helm, &made_cluster, deadline)
    })
    .await
    .map_err(|e| format!("helm.values: {e}"))??;
    *spent += started.elapsed();
    let options = BundleDeploymentOptions {
        helm: Some(helm),
        ..options.clone()
    };
    let content_name = version
        .deployment_id
        .as_deref()
        .and_then(|id| id.split_once(':'))
        .map(|(content, _)| content.to_string())
        .unwrap_or_default();
    Ok(BundleDeploymentSpec {
        deployment_id: Some(deployment_id(&content_name, &options)),
        options: Some(options),
        ..version.clone()
    })
}

/// A version's ID: its content and the hash of the options it is applied with.
fn deployment_id(content_name: &str, options: &BundleDeploymentOptions) -> String {
    let options_hash = sha256(&serde_json::to_vec(options).unwrap_or_default());
    format!("{content_name}:{}", &options_hash[..16])
}

/// Which clusters get the new version now (`rolloutStrategy`); the others have it staged. A
/// strategy that cannot be read sends nothing new out, and says why.
fn rollout_plan(
    bundle: &Bundle,
    planned: &[Planned],
    groups: &[&ClusterGroup],
) -> (Plan, Option<String>) {
    let strategy = bundle.spec.rollout_strategy.clone().unwrap_or_default();
    let members: Vec<Member<'_>> = planned
        .iter()
        .map(|p| Member {
            cluster: Candidate::of(&p.cluster),
            current: p
                .current
                .as_ref()
                .is_none_or(|bd| bd.spec.deployment_id == p.spec.deployment_id),
            unavailable: p.current.as_deref().is_some_and(unavailable),
            paused: p.spec.paused,
        })
        .collect();
    match rollout::plan(&strategy, &members, groups) {
        Ok(plan) => (plan, None),
        // Nothing new goes out under a strategy that cannot be read.
        Err(message) => (
            Plan {
                promote: members.iter().map(|m| m.current).collect(),
                partition_of: vec![0; members.len()],
                ..Default::default()
            },
            Some(format!("spec.rolloutStrategy: {message}")),
        ),
    }
}

/// A cluster the bundle goes to, with the new version for it.
struct Planned {
    cluster: Arc<FleetCluster>,
    /// The cluster's namespace, where its BundleDeployment is.
    namespace: String,
    current: Option<Arc<BundleDeployment>>,
    spec: BundleDeploymentSpec,
}

/// Whether the version a BundleDeployment was given is not applied and Ready (as Fleet
/// counts unavailable clusters for a rollout).
fn unavailable(bd: &BundleDeployment) -> bool {
    bd.status
        .as_ref()
        .is_none_or(|s| s.applied_deployment_id != bd.spec.deployment_id || !s.ready)
}

/// "1 cluster", "2 clusters".
fn clusters(count: usize) -> String {
    if count == 1 {
        "1 cluster".into()
    } else {
        format!("{count} clusters")
    }
}

/// Why a cluster keeps its version while the new one waits, in words for its standing.
fn held_because(plan: &Plan, member: usize, paused: bool, strategy_error: Option<&str>) -> String {
    if paused {
        return "paused: the new version waits until the bundle and cluster are unpaused".into();
    }
    if let Some(error) = strategy_error {
        return format!("the new version waits: {error}");
    }
    let partition = &plan.partitions[plan.partition_of[member]];
    let name = partition.name.as_deref().unwrap_or_default();
    if plan.unavailable >= plan.max_unavailable {
        format!(
            "the new version waits for the rollout: {} unavailable, maxUnavailable {}",
            clusters(plan.unavailable),
            plan.max_unavailable
        )
    } else if partition.unavailable >= partition.max_unavailable {
        format!(
            "the new version waits for the rollout: partition {name} has {} of {} unavailable, maxUnavailable {}",
            partition.unavailable,
            clusters(partition.count as usize),
            partition.max_unavailable
        )
    } else {
        format!(
            "the new version waits for the rollout: an earlier partition than {name} is over its maxUnavailable"
        )
    }
}

/// Creates the Content if it does not exist yet (it never changes: its name is its hash).
async fn ensure_content(
    ctx: &Context,
    name: &str,
    content: Vec<u8>,
    sha: &str,
) -> Result<(), Error> {
    if ctx.caches.typed::<Content>().get("", name).await?.is_some() {
        return Ok(());
    }
    let contents: Api<Content> = Api::all(ctx.client.clone());
    let object = Content {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        spec: ContentFields {
            content: Some(ByteString(content)),
            sha256sum: Some(sha.to_string()),
        },
        status: None,
    };
    match contents.create(&PostParams::default(), &object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// A BundleDeployment's labels: the Bundle's (which `dependsOn` selectors match on the
/// agent's side; not its commit, which would rewrite every BundleDeployment at every commit),
/// and which bundle and cluster it is.
fn deployment_labels(bundle: &Bundle, cluster: &str) -> BTreeMap<String, String> {
    let mut labels: BTreeMap<String, String> = bundle
        .labels()
        .iter()
        .filter(|(k, _)| k.as_str() != crate::git_repo::COMMIT_LABEL)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    labels.extend([
        (BUNDLE_NAME_LABEL.to_string(), bundle.name_any()),
        (
            BUNDLE_NAMESPACE_LABEL.to_string(),
            bundle.namespace().unwrap_or_default(),
        ),
        (CLUSTER_LABEL.to_string(), cluster.to_string()),
    ]);
    labels
}

async fn write_deployment(
    ctx: &Context,
    bundle: &Bundle,
    cluster: &str,
    namespace: &str,
    spec: BundleDeploymentSpec,
) -> Result<(), Error> {
    let name = bundle.name_any();
    let object = BundleDeployment {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace.to_string()),
            labels: Some(deployment_labels(bundle, cluster)),
            ..Default::default()
        },
        spec,
        status: None,
    };
    let mut body = serde_json::to_value(&object).map_err(|e| Error::Invalid(e.to_string()))?;
    body["apiVersion"] = lariat_api::fleet::API_VERSION.into();
    body["kind"] = "BundleDeployment".into();
    let api: Api<BundleDeployment> = Api::namespaced(ctx.client.clone(), namespace);
    api.patch(
        &name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(body),
    )
    .await?;
    Ok(())
}

/// When the cluster's agent was last heard from, if its tunnel is down now (from its
/// ClusterConnection; empty if it never connected); `None` while it is up, or for a cluster
/// that has no ClusterConnection.
fn offline_since(ctx: &Context, namespace: &str, cluster: &str) -> Option<String> {
    let connection = ctx
        .caches
        .of(&lariat_api::management::cluster_connection_resource())
        .get_now(namespace, cluster)?;
    let status = &connection.data["status"];
    (status["connected"] == false).then(|| {
        status["lastHeartbeat"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    })
}

/// The reason an agent gives a BundleDeployment it holds back for its `dependsOn`.
const DEPENDENCY_NOT_READY: &str = "DependencyNotReady";

/// Where a cluster stands with its BundleDeployment (as it was before this reconcile wrote
/// a new version, if it did). A cluster whose agent is gone is `Offline`, one cause for all
/// such clusters, rather than each showing whatever its last report said.
fn standing(
    cluster: &str,
    current: Option<&BundleDeployment>,
    spec: &BundleDeploymentSpec,
    offline_since: Option<&str>,
    held: Option<String>,
) -> Standing {
    let status = current.and_then(|bd| bd.status.as_ref());
    let condition = |type_: &str| {
        status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == type_))
    };
    let message = |type_: &str| {
        condition(type_)
            .and_then(|c| c.message.clone())
            .unwrap_or_default()
    };
    let ready = is_ready(status, spec.deployment_id.as_deref());
    let (state, message) = match status {
        _ if !ready && offline_since.is_some() => (
            "Offline",
            match offline_since.unwrap_or_default() {
                "" => "the cluster's agent has not connected yet".to_string(),
                at => format!("the cluster's agent is disconnected (last heard from {at})"),
            },
        ),
        None => (
            "WaitApplied",
            "waiting for the cluster's agent to apply it".to_string(),
        ),
        // The rollout holds the new version back; the cluster keeps what it has.
        _ if held.is_some() => ("OutOfSync", held.unwrap_or_default()),
        // Its agent holds it back until what it depends on is Ready there (`dependsOn`).
        Some(_)
            if condition("Deployed").is_some_and(|c| {
                c.status == "False" && c.reason.as_deref() == Some(DEPENDENCY_NOT_READY)
            }) =>
        {
            ("WaitApplied", message("Deployed"))
        }
        Some(_) if condition("Deployed").is_some_and(|c| c.status == "False") => {
            ("ErrApplied", message("Deployed"))
        }
        Some(s) if s.applied_deployment_id != spec.deployment_id => (
            "WaitApplied",
            "waiting for the cluster's agent to apply the new version".to_string(),
        ),
        Some(s) if !s.ready => ("NotReady", message("Ready")),
        Some(s) if !s.non_modified => ("Modified", message("Monitored")),
        Some(_) => ("Ready", String::new()),
    };
    Standing {
        cluster: cluster.to_string(),
        state,
        message,
    }
}

/// Whether a BundleDeployment's status says it is Ready at `deployment_id`: that version
/// applied without error, every object ready and unmodified. A Bundle counts its clusters and
/// a Fleet Cluster its bundles by this one test, so the two never disagree.
pub fn is_ready(status: Option<&BundleDeploymentStatus>, deployment_id: Option<&str>) -> bool {
    status.is_some_and(|s| {
        let failed = s
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Deployed" && c.status == "False");
        s.ready && s.non_modified && !failed && s.applied_deployment_id.as_deref() == deployment_id
    })
}

/// The most clusters a failure group names (its `count` counts them all).
pub const FAILURE_GROUP_CLUSTERS: usize = 50;

/// What Bundles' failure groups are merged by (a GitRepo's, `lariat fleet diagnose`): their
/// state, and their message with what differs between clusters taken out.
pub fn cause(group: &FailureGroup) -> (String, String) {
    (group.state.clone(), normalize(&group.message, ""))
}

/// A message with what differs between clusters taken out (cluster names, hashes, numbers,
/// times), so clusters failing for the same reason share one group.
pub fn normalize(message: &str, cluster: &str) -> String {
    static PATTERNS: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(
            r"\d{4}-\d\d-\d\dT[\d:.]+Z?|\b[0-9a-f]{5,}\b|-[a-z0-9]{5}\b|\b\d+(\.\d+)?\b",
        )
        .expect("a valid pattern")
    });
    PATTERNS
        .replace_all(&replace_word(message, cluster, "<cluster>"), "<n>")
        .into_owned()
}

/// `text` with each occurrence of `word` as a word of its own (not within a longer word: a
/// cluster called "a" is not every letter a) replaced. Not a regex: this runs for every
/// cluster not ready, at every summary of a rollout to thousands of them.
fn replace_word(text: &str, word: &str, replacement: &str) -> String {
    if word.is_empty() {
        return text.to_string();
    }
    let in_word = |c: char| c.is_alphanumeric() || c == '_';
    let mut replaced = String::with_capacity(text.len());
    let (mut copied, mut from) = (0, 0);
    while let Some(found) = text[from..].find(word) {
        let (at, end) = (from + found, from + found + word.len());
        let before = text[..at].chars().next_back();
        let after = text[end..].chars().next();
        if before.is_some_and(in_word) || after.is_some_and(in_word) {
            // Not a word of its own here; one may still start within it (`a-a` in `xa-a-a`).
            from = at + text[at..].chars().next().map_or(1, char::len_utf8);
            continue;
        }
        replaced.push_str(&text[copied..at]);
        replaced.push_str(replacement);
        (copied, from) = (end, end);
    }
    replaced.push_str(&text[copied..]);
    replaced
}

/// The Bundle's status from where its clusters stand.
fn summarize(
    bundle: &Bundle,
    before: &BundleStatus,
    standings: &[Standing],
    strategy_error: Option<&str>,
) -> BundleStatus {
    let mut summary = BundleSummary {
        desired_ready: standings.len() as i32,
        ..Default::default()
    };
    let mut groups: BTreeMap<(&str, String), Vec<&Standing>> = BTreeMap::new();
    for standing in standings {
        match standing.state {
            "Ready" => summary.ready += 1,
            "NotReady" => summary.not_ready += 1,
            "Modified" => summary.modified += 1,
            "ErrApplied" | "InvalidCustomization" => summary.err_applied += 1,
            "WaitApplied" | "Offline" => summary.wait_applied += 1,
            "OutOfSync" => summary.out_of_sync += 1,
            _ => summary.pending += 1,
        }
        if standing.state != "Ready" {
            groups
                .entry((
                    standing.state,
                    normalize(&standing.message, &standing.cluster),
                ))
                .or_default()
                .push(standing);
        }
    }
    let mut failure_groups: Vec<FailureGroup> = groups
        .into_iter()
        .map(|((state, _), members)| FailureGroup {
            state: state.to_string(),
            message: members[0].message.clone(),
            count: members.len() as i32,
            clusters: members
                .iter()
                .take(FAILURE_GROUP_CLUSTERS)
                .map(|m| m.cluster.clone())
                .collect(),
        })
        .collect();
    failure_groups.sort_by(|a, b| b.count.cmp(&a.count).then(a.state.cmp(&b.state)));
    let ready = summary.ready == summary.desired_ready && strategy_error.is_none();
    let message = strategy_error
        .map(str::to_string)
        .into_iter()
        .chain(failure_groups.iter().take(3).map(|g| {
            let who =
                conditions::first_names(g.clusters.iter().map(String::as_str), g.count as usize);
            if g.message.is_empty() {
                format!("{} on {who}", g.state)
            } else {
                format!("{} on {who}: {}", g.state, g.message)
            }
        }))
        .collect::<Vec<_>>()
        .join("; ");
    let mut list = before.conditions.clone().unwrap_or_default();
    conditions::set(
        &mut list,
        "Ready",
        ready,
        if ready { "" } else { "NotReady" },
        &message,
    );
    BundleStatus {
        observed_generation: bundle.metadata.generation,
        display: Some(BundleDisplay {
            ready_clusters: Some(format!("{}/{}", summary.ready, summary.desired_ready)),
            state: failure_groups.first().map(|g| g.state.clone()),
        }),
        summary: Some(summary),
        conditions: Some(list),
        failure_groups: (!failure_groups.is_empty()).then_some(failure_groups),
        ..before.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lariat_api::fleet::{BundleResource, YamlOptions};

    fn resource(name: &str, content: &str) -> BundleResource {
        BundleResource {
            name: Some(name.into()),
            content: Some(content.into()),
            encoding: None,
        }
    }

    #[test]
    fn ready_means_this_version_applied_without_error_and_every_object_ready() {
        let status: BundleDeploymentStatus = serde_json::from_value(serde_json::json!({
            "appliedDeploymentID": "c:1", "ready": true, "nonModified": true,
            "conditions": [{"type": "Deployed", "status": "True"}],
        }))
        .unwrap();
        assert!(is_ready(Some(&status), Some("c:1")));
        assert!(!is_ready(Some(&status), Some("c:2")), "another version");
        assert!(!is_ready(None, Some("c:1")), "never reported");
        let mut failed = status.clone();
        failed.conditions.as_mut().unwrap()[0].status = "False".into();
        assert!(!is_ready(Some(&failed), Some("c:1")), "a failed apply");
        let modified = BundleDeploymentStatus {
            non_modified: false,
            ..status
        };
        assert!(!is_ready(Some(&modified), Some("c:1")), "modified");
    }

    #[test]
    fn overlays_replace_and_patch_per_target() {
        let spec = BundleSpec {
            resources: Some(vec![
                resource(
                    "cm.yaml",
                    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {color: blue, size: m}\n",
                ),
                resource(
                    "more.yaml",
                    "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n---\n",
                ),
                resource(
                    "overlays/eu/cm_patch.yaml",
                    "data: {color: green, size: null}\n",
                ),
                resource(
                    "overlays/eu/extra.yaml",
                    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: extra}\n",
                ),
            ]),
            ..Default::default()
        };
        let plain = resolve(&spec, &BundleTarget::default()).unwrap();
        assert_eq!(plain.len(), 2, "overlays are not manifests by themselves");
        assert_eq!(plain[0]["data"]["color"], "blue");
        let eu = BundleTarget {
            yaml: Some(YamlOptions {
                overlays: Some(vec!["eu".into()]),
            }),
            ..Default::default()
        };
        let customized = resolve(&spec, &eu).unwrap();
        assert_eq!(customized.len(), 3);
        assert_eq!(customized[0]["data"], serde_json::json!({"color": "green"}));
        assert_eq!(customized[1]["metadata"]["name"], "extra");
        let missing = BundleTarget {
            yaml: Some(YamlOptions {
                overlays: Some(vec!["us".into()]),
            }),
            ..Default::default()
        };
        assert!(
            resolve(&spec, &missing)
                .unwrap_err()
                .contains("overlay \"us\"")
        );
    }

    #[test]
    fn clusters_whose_agent_is_gone_are_one_group() {
        let spec = BundleDeploymentSpec {
            deployment_id: Some("s-1:2".into()),
            ..Default::default()
        };
        let a = standing("a", None, &spec, Some("2026-12-01T10:00:00Z"), None);
        let b = standing("b", None, &spec, Some("2026-12-01T11:30:00Z"), None);
        assert_eq!((a.state, b.state), ("Offline", "Offline"));
        assert_eq!(normalize(&a.message, "a"), normalize(&b.message, "b"));
        assert_eq!(standing("c", None, &spec, None, None).state, "WaitApplied");
    }

    #[test]
    fn messages_that_differ_only_by_cluster_hash_or_count_group_together() {
        let a = normalize(
            "Deployment web-7d9f8c6b5-x2k4p on prod-1: 0/3 replicas available",
            "prod-1",
        );
        let b = normalize(
            "Deployment web-84c6d5f9b-qq7zt on prod-22: 1/3 replicas available",
            "prod-22",
        );
        assert_eq!(a, b);
        assert_ne!(a, normalize("image pull failed on prod-1", "prod-1"));
        let short = |cluster| normalize("waiting for the cluster's agent to apply it", cluster);
        assert_eq!(
            short("a"),
            short("b"),
            "a one-letter cluster name is not every letter"
        );
        assert_eq!(
            replace_word("prod-1 and prod-10, xprod-1, (prod-1)", "prod-1", "<c>"),
            "<c> and prod-10, xprod-1, (<c>)"
        );
        assert_eq!(replace_word("a_b b", "b", "<c>"), "a_b <c>");
        assert_eq!(replace_word("xa-a-a", "a-a", "<c>"), "xa-<c>");
    }
}
