//! What a GitRepo's paths become: bundles. Within each path, the path itself and every
//! directory below it holding a `fleet.yaml` are bundle roots; each manifest file (`*.yaml`,
//! `*.yml`, `*.json`) belongs to the deepest root above it, as in Fleet. A root's `fleet.yaml`
//! sets its bundle's options.
//!
//! Everything is checked here, before anything is deployed: a file that is not YAML, or a
//! `fleet.yaml` with a field lariat does not know, fails the whole commit with the file and
//! the reason, and the last good commit stays deployed.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use lariat_api::fleet::{
    BundleRef, BundleResource, BundleSpec, BundleTarget, CorrectDrift, HelmOptions,
    KustomizeOptions, RolloutStrategy, Target, YamlOptions,
};
use serde::Deserialize;

use crate::git::Entry;
use crate::limits::{LimitError, Limits};

/// The options file of a bundle root.
pub const FLEET_YAML: &str = "fleet.yaml";
/// What makes a directory a Helm chart.
const CHART_YAML: &str = "Chart.yaml";

/// A bundle made from one root of a repository.
#[derive(Clone, Debug, PartialEq)]
pub struct ScannedBundle {
    /// The root, relative to the repository (`""` for the repository's root).
    pub root: String,
    /// Labels from `fleet.yaml`, for the Bundle object.
    pub labels: BTreeMap<String, String>,
    pub spec: BundleSpec,
    /// The dependencies its chart's `Chart.yaml` lists and its `charts/` lacks, to be fetched
    /// from their repositories once the commit is read (`crate::charts`), as Fleet's agent
    /// runs `helm dependency update`; none when `helm.disableDependencyUpdate`.
    pub chart_dependencies: Vec<lariat_helm::chart::Dependency>,
}

/// Why a commit cannot be deployed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{file}: {reason}")]
pub struct ScanError {
    /// The file at fault, relative to the repository.
    pub file: String,
    pub reason: String,
}

/// `fleet.yaml`, the fields lariat implements; any other is refused by name.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FleetYaml {
    default_namespace: Option<String>,
    namespace: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    depends_on: Option<Vec<BundleRef>>,
    rollout_strategy: Option<RolloutStrategy>,
    target_customizations: Option<Vec<BundleTarget>>,
    keep_resources: Option<bool>,
    correct_drift: Option<CorrectDrift>,
    paused: Option<bool>,
    yaml: Option<YamlOptions>,
    helm: Option<HelmOptions>,
    kustomize: Option<KustomizeOptions>,
}

/// Reads a `fleet.yaml`.
fn fleet_yaml(file: &str, content: &[u8]) -> Result<FleetYaml, ScanError> {
    let fail = |reason: String| ScanError {
        file: file.to_string(),
        reason,
    };
    let text = std::str::from_utf8(content).map_err(|_| fail("is not UTF-8 text".into()))?;
    // fleet.yaml is one document.
    let raw = match lariat_yaml::documents(text).into_iter().next() {
        Some(document) => document.map_err(|e| fail(format!("is not YAML: {e}")))?,
        None => serde_json::Value::Null,
    };
    if raw.is_null() {
        return Ok(FleetYaml::default());
    }
    check_helm_fields(&raw).map_err(fail)?;
    let parsed: FleetYaml = serde_json::from_value(raw).map_err(|e| fail(e.to_string()))?;
    if let Some(strategy) = &parsed.rollout_strategy {
        crate::rollout::validate(strategy).map_err(fail)?;
    }
    for (i, customization) in parsed.target_customizations.iter().flatten().enumerate() {
        if let Some(problem) = crate::target::target_problem(&customization.target) {
            return Err(fail(format!("targetCustomizations[{i}].{problem}")));
        }
        if let Some(helm) = &customization.helm
            && (helm.chart.is_some() || helm.repo.is_some() || helm.version.is_some())
        {
            return Err(fail(format!(
                "targetCustomizations[{i}].helm: a target changes values and release options, not the chart (chart, repo, version)"
            )));
        }
    }
    let kustomize_dirs = parsed
        .kustomize
        .iter()
        .map(|k| ("kustomize".to_string(), k))
        .chain(
            parsed
                .target_customizations
                .iter()
                .flatten()
                .enumerate()
                .filter_map(|(i, c)| {
                    Some((
                        format!("targetCustomizations[{i}].kustomize"),
                        c.kustomize.as_ref()?,
                    ))
                }),
        );
    for (field, kustomize) in kustomize_dirs {
        let dir = kustomize.dir.as_deref().unwrap_or_default();
        if dir.starts_with('/') || dir.split('/').any(|part| part == "..") {
            return Err(fail(format!(
                "{field}.dir {dir:?} leaves the bundle's directory; name a directory within it"
            )));
        }
    }
    for (i, dependency) in parsed.depends_on.iter().flatten().enumerate() {
        if let Some(problem) = dependency
            .selector
            .as_ref()
            .and_then(lariat_api::names::selector_problem)
        {
            return Err(fail(format!("dependsOn[{i}].selector: {problem}")));
        }
    }
    Ok(parsed)
}

fn is_manifest(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name != FLEET_YAML
        && [".yaml", ".yml", ".json"]
            .iter()
            .any(|suffix| name.ends_with(suffix))
}

/// The directory of a path (`""` for a file at the root).
fn parent(path: &str) -> &str {
    path.rsplit_once('/').map(|(dir, _)| dir).unwrap_or("")
}

/// Whether `path` is `root` or below it.
fn within(path: &str, root: &str) -> bool {
    root.is_empty() || path == root || path.starts_with(&format!("{root}/"))
}

/// Checks that a manifest file is YAML (or JSON), every document of it a mapping with
/// `apiVersion` and `kind`.
fn check_manifest(path: &str, content: &[u8]) -> Result<(), ScanError> {
    let fail = |reason: String| ScanError {
        file: path.to_string(),
        reason,
    };
    let text = std::str::from_utf8(content).map_err(|_| fail("is not UTF-8 text".into()))?;
    for (index, document) in lariat_yaml::documents(text).into_iter().enumerate() {
        let value = document.map_err(|e| fail(format!("is not YAML: {e}")))?;
        if value.is_null() {
            continue;
        }
        let Some(map) = value.as_object() else {
            return Err(fail(format!(
                "document {} is not a Kubernetes object (a mapping with apiVersion and kind)",
                index + 1
            )));
        };
        // An overlay's patch is a fragment; everything else must be a whole object.
        if path.split('/').any(|part| part == "overlays") {
            continue;
        }
        for key in ["apiVersion", "kind"] {
            if !map.get(key).is_some_and(|v| v.is_string()) {
                return Err(fail(format!("document {} has no {key}", index + 1)));
            }
        }
    }
    Ok(())
}

/// A GitRepo's `paths`, relative to the repository's root (`""` for the root itself, which
/// is what none means).
fn normalized(paths: &[String]) -> Vec<String> {
    if paths.is_empty() {
        vec![String::new()]
    } else {
        paths
            .iter()
            .map(|p| p.trim_matches('/').trim_start_matches("./").to_string())
            .map(|p| if p == "." { String::new() } else { p })
            .collect()
    }
}

/// The bundle roots of `paths` (normalized) among the files `names` of a commit: each path,
/// and each directory below one holding a `fleet.yaml`; sorted.
fn roots<'a>(
    names: impl Iterator<Item = &'a str> + Clone,
    paths: &[String],
) -> Result<Vec<String>, ScanError> {
    let mut roots: Vec<String> = Vec::new();
    for path in paths {
        if !names.clone().any(|file| within(file, path)) {
            return Err(ScanError {
                file: if path.is_empty() {
                    ".".into()
                } else {
                    path.clone()
                },
                reason: "no such path in the repository at this commit".into(),
            });
        }
        roots.push(path.clone());
        for file in names.clone().filter(|f| within(f, path)) {
            if file.rsplit('/').next() == Some(FLEET_YAML) {
                roots.push(parent(file).to_string());
            }
        }
    }
    roots.sort();
    roots.dedup();
    Ok(roots)
}

/// The root whose bundle `file` belongs to: the deepest above it, within the paths.
fn owner<'r>(file: &str, roots: &'r [String], paths: &[String]) -> Option<&'r String> {
    roots
        .iter()
        .filter(|r| within(file, r) && paths.iter().any(|p| within(r, p)))
        .max_by_key(|r| r.len())
}

/// Why a commit's files are not read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlanError {
    #[error(transparent)]
    Scan(#[from] ScanError),
    #[error(transparent)]
    Limit(#[from] LimitError),
}

/// What [`bundles`] reads of a commit, decided from `listing` (every file of the commit with
/// its size, as [`crate::git::list`] finds them) before anything is read, and checked
/// against `limits`: every file under `paths` is at most `max_file_bytes`, and a bundle's
/// files (every file under its root that no deeper root owns, as Fleet bundles a directory)
/// hold at most `max_bundle_bytes` together. Returns each bundle's manifests and
/// `fleet.yaml`, the files whose content [`bundles`] looks at; so no more than the bundles'
/// files is ever read, and nothing outside `paths`.
pub fn plan<'a>(
    listing: &'a [Entry],
    paths: &[String],
    limits: &Limits,
) -> Result<Vec<&'a Entry>, PlanError> {
    let paths = normalized(paths);
    let roots = roots(listing.iter().map(|e| e.path.as_str()), &paths)?;
    let mut totals: BTreeMap<&str, u64> = BTreeMap::new();
    let mut wanted = Vec::new();
    // A root with a chart or a kustomization in it is read whole: a chart's templates and
    // helpers are not manifests, and the agent renders them all; a kustomization's patches
    // and generators' files are not either, and kustomize reads them.
    let read_whole: Vec<&String> = listing
        .iter()
        .filter(|e| {
            let name = e.path.rsplit('/').next().unwrap_or_default();
            name == CHART_YAML || lariat_kustomize::KUSTOMIZATION_FILES.contains(&name)
        })
        .filter_map(|e| owner(&e.path, &roots, &paths))
        .collect();
    for entry in listing {
        let Some(root) = owner(&entry.path, &roots, &paths) else {
            continue;
        };
        if entry.size > limits.max_file_bytes {
            return Err(LimitError::File {
                path: entry.path.clone(),
                size: entry.size,
                limit: limits.max_file_bytes,
            }
            .into());
        }
        let total = totals.entry(root.as_str()).or_default();
        *total = total.saturating_add(entry.size);
        if is_manifest(&entry.path)
            || entry.path == join(root, FLEET_YAML)
            || read_whole.contains(&root)
        {
            wanted.push(entry);
        }
    }
    if let Some((root, size)) = totals
        .into_iter()
        .find(|(_, size)| *size > limits.max_bundle_bytes)
    {
        return Err(LimitError::Bundle {
            root: root.to_string(),
            size,
            limit: limits.max_bundle_bytes,
        }
        .into());
    }
    Ok(wanted)
}

/// The bundles of `paths` (relative to the repository; none means the root), from `files`
/// (every file of the repository at one commit, as [`crate::git::files`] reads them; the
/// content of a file [`plan`] does not return is not looked at, and may be left empty),
/// with the GitRepo's targets and options applied.
pub fn bundles(
    files: &[(String, Vec<u8>)],
    paths: &[String],
    targets: &[Target],
    repo_options: &RepoOptions,
) -> Result<Vec<ScannedBundle>, ScanError> {
    let paths = normalized(paths);
    for (i, target) in targets.iter().enumerate() {
        if let Some(problem) = crate::target::target_problem(target) {
            return Err(ScanError {
                file: format!("the GitRepo's spec.targets[{i}]"),
                reason: problem,
            });
        }
    }
    let roots = roots(files.iter().map(|(file, _)| file.as_str()), &paths)?;
    let mut bundles = Vec::new();
    for root in &roots {
        let options = match files.iter().find(|(f, _)| *f == join(root, FLEET_YAML)) {
            Some((file, content)) => fleet_yaml(file, content)?,
            None => FleetYaml::default(),
        };
        let (helm, chart_dependencies) = match helm_options(root, &options, files)? {
            Some((helm, missing)) => (Some(helm), missing),
            None => (None, Vec::new()),
        };
        let kustomize = kustomize_options(root, &options, files);
        let whole = helm.is_some() || kustomize.is_some();
        let mut resources = Vec::new();
        for (file, content) in files.iter().filter(|(f, _)| whole || is_manifest(f)) {
            // The deepest root above the file owns it.
            if owner(file, &roots, &paths) != Some(root) {
                continue;
            }
            if file == &join(root, FLEET_YAML) {
                continue;
            }
            if !whole {
                check_manifest(file, content)?;
            }
            let name = if root.is_empty() {
                file.clone()
            } else {
                file[root.len() + 1..].to_string()
            };
            // A chart's or a kustomization's binary files (an icon, a keystore) travel
            // base64-encoded, as Fleet carries them; manifests are text by the check above.
            let (content, encoding) = match std::str::from_utf8(content) {
                Ok(text) => (text.to_string(), None),
                Err(_) => (BASE64.encode(content), Some("base64".to_string())),
            };
            resources.push(BundleResource {
                name: Some(name),
                content: Some(content),
                encoding,
            });
        }
        // A chart from a Helm repository needs no file of the repository's own.
        if resources.is_empty() && !helm.as_ref().is_some_and(is_remote) {
            continue;
        }
        // A fleet.yaml customization comes first; the GitRepo's own targets follow, and also
        // restrict where any of them may reach.
        let mut bundle_targets = options.target_customizations.unwrap_or_default();
        bundle_targets.extend(targets.iter().cloned().map(|target| BundleTarget {
            target,
            ..Default::default()
        }));
        let spec = BundleSpec {
            resources: Some(resources),
            default_namespace: options.default_namespace,
            namespace: repo_options.target_namespace.clone().or(options.namespace),
            keep_resources: repo_options.keep_resources || options.keep_resources.unwrap_or(false),
            correct_drift: repo_options.correct_drift.clone().or(options.correct_drift),
            yaml: options.yaml,
            helm,
            kustomize,
            paused: options.paused.unwrap_or(false),
            depends_on: options.depends_on,
            rollout_strategy: options.rollout_strategy,
            targets: Some(bundle_targets),
            target_restrictions: Some(targets.to_vec()),
        };
        bundles.push(ScannedBundle {
            root: root.clone(),
            labels: options.labels.unwrap_or_default(),
            spec,
            chart_dependencies,
        });
    }
    Ok(bundles)
}

/// A root's kustomize options, when kustomize builds it, as Fleet decides: its `fleet.yaml`
/// says `kustomize:` (for the bundle or a target), or it holds a kustomization itself. With a
/// chart, the kustomization is built over the chart's output (by the agent, as Fleet's
/// post-renders).
fn kustomize_options(
    root: &str,
    options: &FleetYaml,
    files: &[(String, Vec<u8>)],
) -> Option<KustomizeOptions> {
    let at_root = lariat_kustomize::KUSTOMIZATION_FILES
        .iter()
        .any(|name| files.iter().any(|(f, _)| *f == join(root, name)));
    let for_targets = options
        .target_customizations
        .iter()
        .flatten()
        .any(|c| c.kustomize.is_some());
    options
        .kustomize
        .clone()
        .or_else(|| (at_root || for_targets).then(KustomizeOptions::default))
}

/// Fleet's `helm` fields lariat reads: `HelmOptions`'s.
static HELM_FIELDS: std::sync::LazyLock<Vec<String>> =
    std::sync::LazyLock::new(HelmOptions::field_names);

/// Refuses a `helm` field (of the bundle or of a target) lariat does not read, by name, so
/// that none is silently skipped.
fn check_helm_fields(raw: &serde_json::Value) -> Result<(), String> {
    let mut sections = vec![("helm".to_string(), &raw["helm"])];
    for (i, customization) in raw["targetCustomizations"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        sections.push((
            format!("targetCustomizations[{i}].helm"),
            &customization["helm"],
        ));
    }
    for (at, helm) in sections {
        for field in helm.as_object().into_iter().flat_map(|m| m.keys()) {
            if HELM_FIELDS.contains(field) {
                continue;
            }
            return Err(format!("{at}.{field}: not a field lariat knows"));
        }
    }
    Ok(())
}

/// A root's Helm options, when it deploys a chart: its `fleet.yaml` says `helm:`, or it
/// holds a `Chart.yaml` itself; with the dependencies its chart lacks. The chart is loaded
/// here, so that a broken one is refused with its file before anything is deployed.
fn helm_options(
    root: &str,
    options: &FleetYaml,
    files: &[(String, Vec<u8>)],
) -> Result<Option<(HelmOptions, Vec<lariat_helm::chart::Dependency>)>, ScanError> {
    let fleet_yaml = join(root, FLEET_YAML);
    let is_chart = files.iter().any(|(f, _)| *f == join(root, CHART_YAML));
    let Some(mut helm) = options
        .helm
        .clone()
        .or_else(|| is_chart.then(HelmOptions::default))
    else {
        return Ok(None);
    };
    let refuse = |reason: String| ScanError {
        file: fleet_yaml.clone(),
        reason,
    };
    let chart = helm.chart.clone().unwrap_or_default();
    if is_remote(&helm) {
        // Fetched once the commit is read (crate::charts), not here: scanning reads no network.
        if chart.is_empty() {
            return Err(refuse(
                "helm.repo names a repository; helm.chart names the chart in it".into(),
            ));
        }
        return Ok(Some((helm, Vec::new())));
    }
    if helm.version.is_some() {
        return Err(refuse(
            "helm.version chooses a chart's version in helm.repo; a chart in the repository has its own".into(),
        ));
    }
    let chart_dir = chart.trim_start_matches("./").trim_matches('/').to_string();
    if chart_dir.split('/').any(|part| part == "..") {
        return Err(refuse(format!(
            "helm.chart {chart:?} leaves the bundle's directory"
        )));
    }
    let chart_root = if chart_dir.is_empty() {
        root.to_string()
    } else {
        join(root, &chart_dir)
    };
    let prefix = if chart_root.is_empty() {
        String::new()
    } else {
        format!("{chart_root}/")
    };
    let loaded = match chart_dir.strip_suffix(".tgz") {
        // A packaged chart kept in the repository.
        Some(_) => match files.iter().find(|(f, _)| *f == chart_root) {
            Some((_, archive)) => lariat_helm::Chart::load_archive(&chart_dir, archive),
            None => return Err(refuse(format!("helm.chart {chart:?} is not in the bundle"))),
        },
        None => {
            let chart_files: BTreeMap<String, Vec<u8>> = files
                .iter()
                .filter_map(|(f, content)| {
                    Some((f.strip_prefix(&prefix)?.to_string(), content.clone()))
                })
                .filter(|(f, _)| f != FLEET_YAML || !chart_dir.is_empty())
                .collect();
            lariat_helm::Chart::load(&chart_files)
        }
    };
    let loaded = loaded.map_err(|e| match e {
        lariat_helm::HelmError::Chart { file, message } => ScanError {
            file: join(&chart_root, &file),
            reason: message,
        },
        other => refuse(other.to_string()),
    })?;
    // A packaged chart holds its dependencies as it was packaged, as Helm takes it.
    let missing = if helm.disable_dependency_update || chart_dir.ends_with(".tgz") {
        Vec::new()
    } else {
        loaded.missing_dependencies().into_iter().cloned().collect()
    };
    for values_file in helm.values_files.iter().flatten() {
        let path = join(root, values_file.trim_start_matches("./"));
        if !files.iter().any(|(f, _)| *f == path) {
            return Err(refuse(format!(
                "helm.valuesFiles: {values_file} is not in the bundle"
            )));
        }
    }
    helm.chart = Some(chart_dir);
    Ok(Some((helm, missing)))
}

/// Whether a bundle's chart is fetched from a Helm repository or a URL.
pub fn is_remote(helm: &HelmOptions) -> bool {
    let chart = helm.chart.as_deref().unwrap_or_default();
    helm.repo.as_deref().is_some_and(|r| !r.is_empty())
        || ["https://", "http://", "oci://"]
            .iter()
            .any(|scheme| chart.starts_with(scheme))
}

/// The options a GitRepo sets for all its bundles.
#[derive(Clone, Debug, Default)]
pub struct RepoOptions {
    pub target_namespace: Option<String>,
    pub keep_resources: bool,
    pub correct_drift: Option<CorrectDrift>,
}

fn join(root: &str, name: &str) -> String {
    if root.is_empty() {
        name.to_string()
    } else {
        format!("{root}/{name}")
    }
}

/// A bundle's name: the GitRepo's name, then its root with `/` as `-`, lower case, within
/// Kubernetes' 63 characters (a hash of the whole keeps long ones apart).
pub fn bundle_name(repo: &str, root: &str) -> String {
    let mut name = repo.to_string();
    for part in root.split('/').filter(|p| !p.is_empty()) {
        name.push('-');
        name.push_str(part);
    }
    let mut name: String = name
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if name.len() > 63 {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        name.hash(&mut hasher);
        let hash = format!("{:08x}", hasher.finish() as u32);
        name.truncate(63 - 9);
        name = format!("{}-{hash}", name.trim_end_matches('-'));
    }
    name.trim_matches('-').to_string()
}

/// A cycle among bundles' `dependsOn` (by name, or by a selector on their labels), as the
/// names along it back to the first (`a, b, a`): none of them could ever be deployed.
pub fn dependency_cycle(
    bundles: &[(String, BTreeMap<String, String>, Vec<BundleRef>)],
) -> Option<Vec<String>> {
    let edges: Vec<Vec<usize>> = bundles
        .iter()
        .map(|(_, _, depends_on)| {
            (0..bundles.len())
                .filter(|&j| {
                    let (name, labels, _) = &bundles[j];
                    depends_on.iter().any(|d| match (&d.name, &d.selector) {
                        (Some(wanted), _) => wanted == name,
                        (None, Some(selector)) => lariat_api::fleet::selects(selector, labels),
                        (None, None) => false,
                    })
                })
                .collect()
        })
        .collect();
    // Depth-first, colouring nodes: 1 on the current path, 2 finished.
    fn visit(
        node: usize,
        edges: &[Vec<usize>],
        colour: &mut [u8],
        path: &mut Vec<usize>,
    ) -> Option<Vec<usize>> {
        colour[node] = 1;
        path.push(node);
        for &next in &edges[node] {
            if colour[next] == 1 {
                let start = path.iter().position(|&n| n == next).unwrap_or(0);
                let mut cycle = path[start..].to_vec();
                cycle.push(next);
                return Some(cycle);
            }
            if colour[next] == 0
                && let Some(cycle) = visit(next, edges, colour, path)
            {
                return Some(cycle);
            }
        }
        path.pop();
        colour[node] = 2;
        None
    }
    let mut colour = vec![0u8; bundles.len()];
    for start in 0..bundles.len() {
        if colour[start] == 0
            && let Some(cycle) = visit(start, &edges, &mut colour, &mut Vec::new())
        {
            return Some(cycle.into_iter().map(|i| bundles[i].0.clone()).collect());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    #[test]
    fn depends_on_cycles_are_found_by_name_and_by_selector() {
        let by_name = |name: &str| BundleRef {
            name: Some(name.into()),
            selector: None,
        };
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let chain = vec![
            ("app".to_string(), labels(&[]), vec![by_name("db")]),
            (
                "db".to_string(),
                labels(&[("tier", "data")]),
                vec![by_name("crds")],
            ),
            ("crds".to_string(), labels(&[]), vec![]),
        ];
        assert_eq!(dependency_cycle(&chain), None);
        let mut cycle = chain.clone();
        cycle[2].2 = vec![BundleRef {
            name: None,
            selector: Some(
                serde_json::from_value(serde_json::json!({"matchLabels": {"tier": "data"}}))
                    .unwrap(),
            ),
        }];
        assert_eq!(
            dependency_cycle(&cycle),
            Some(vec!["db".to_string(), "crds".to_string(), "db".to_string()])
        );
        let selfish = vec![("a".to_string(), labels(&[]), vec![by_name("a")])];
        assert_eq!(
            dependency_cycle(&selfish),
            Some(vec!["a".to_string(), "a".to_string()])
        );
    }

    use super::*;

    fn file(path: &str, content: &str) -> (String, Vec<u8>) {
        (path.to_string(), content.as_bytes().to_vec())
    }

    const CM: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n";

    #[test]
    fn each_root_with_a_fleet_yaml_is_its_own_bundle() {
        let files = [
            file("README.md", "hi"),
            file("apps/base.yaml", CM),
            file(
                "apps/web/fleet.yaml",
                "defaultNamespace: web\nlabels:\n  team: web\n",
            ),
            file("apps/web/deploy.yaml", &format!("{CM}---\n{CM}")),
            file("apps/web/sub/more.yml", CM),
            file("other/x.yaml", CM),
        ];
        let target = Target {
            cluster_name: Some("c1".into()),
            ..Default::default()
        };
        let bundles = bundles(
            &files,
            &["apps".into()],
            std::slice::from_ref(&target),
            &RepoOptions::default(),
        )
        .unwrap();
        let roots: Vec<&str> = bundles.iter().map(|b| b.root.as_str()).collect();
        assert_eq!(roots, ["apps", "apps/web"]);
        let names = |b: &ScannedBundle| -> Vec<String> {
            b.spec
                .resources
                .iter()
                .flatten()
                .map(|r| r.name.clone().unwrap())
                .collect()
        };
        assert_eq!(names(&bundles[0]), ["base.yaml"]);
        assert_eq!(names(&bundles[1]), ["deploy.yaml", "sub/more.yml"]);
        assert_eq!(bundles[1].spec.default_namespace.as_deref(), Some("web"));
        assert_eq!(bundles[1].labels["team"], "web");
        assert_eq!(bundles[1].spec.target_restrictions, Some(vec![target]));
        assert_eq!(bundle_name("platform", "apps/web"), "platform-apps-web");
        assert_eq!(bundle_name("platform", ""), "platform");
        assert!(bundle_name("p", &"x/".repeat(60)).len() <= 63);
    }

    #[test]
    fn bad_files_fail_the_commit_with_the_file_and_the_reason() {
        let options = RepoOptions::default();
        let error = bundles(&[file("a.yaml", "key: [unclosed")], &[], &[], &options).unwrap_err();
        assert_eq!(error.file, "a.yaml");
        assert!(error.reason.contains("is not YAML"), "{error}");
        let error = bundles(&[file("a.yaml", "just: data\n")], &[], &[], &options).unwrap_err();
        assert!(error.reason.contains("no apiVersion"), "{error}");
        // 300 KB whose aliases repeat a 5 KB string 100,000 times (500 MB decoded).
        let bomb = format!(
            "apiVersion: v1\nkind: ConfigMap\ndata:\n  a: &a \"{}\"\n  b: [{}]\n",
            "x".repeat(5_000),
            vec!["*a"; 100_000].join(",")
        );
        let error = bundles(&[file("bomb.yaml", &bomb)], &[], &[], &options).unwrap_err();
        assert_eq!(error.file, "bomb.yaml");
        assert!(error.reason.contains("YAML aliases repeat"), "{error}");
        let error = bundles(
            &[
                file("fleet.yaml", "kustomize:\n  dir: ../x\n"),
                file("a.yaml", CM),
            ],
            &[],
            &[],
            &options,
        )
        .unwrap_err();
        assert_eq!(error.file, "fleet.yaml");
        assert!(error.reason.contains("leaves the bundle"), "{error}");
        let error = bundles(
            &[
                file("fleet.yaml", "helm:\n  chart: x\n"),
                file("a.yaml", CM),
            ],
            &[],
            &[],
            &options,
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "x/Chart.yaml: a chart needs a Chart.yaml"
        );
        // A chart from a Helm repository is fetched once the commit is read, not here.
        let remote = bundles(
            &[file(
                "fleet.yaml",
                "helm:\n  repo: https://charts.example.com\n  chart: web\n  version: ~1.2\n",
            )],
            &[],
            &[],
            &options,
        )
        .unwrap();
        let helm = remote[0].spec.helm.as_ref().unwrap();
        assert_eq!(helm.version.as_deref(), Some("~1.2"));
        assert!(is_remote(helm));
        let error = bundles(
            &[file(
                "fleet.yaml",
                "helm:\n  repo: https://charts.example.com\n",
            )],
            &[],
            &[],
            &options,
        )
        .unwrap_err();
        assert!(
            error.reason.contains("helm.chart names the chart"),
            "{error}"
        );
        let error = bundles(
            &[file(
                "fleet.yaml",
                "helm:\n  chart: x\ntargetCustomizations:\n- name: eu\n  clusterName: eu-1\n  helm:\n    chart: y\n",
            )],
            &[],
            &[],
            &options,
        )
        .unwrap_err();
        assert!(
            error
                .reason
                .starts_with("targetCustomizations[0].helm: a target changes values"),
            "{error}"
        );
        let error = bundles(
            &[file("fleet.yaml", "bogus: 1\n"), file("a.yaml", CM)],
            &[],
            &[],
            &options,
        )
        .unwrap_err();
        assert!(error.reason.contains("unknown field `bogus`"), "{error}");
        for (yaml, expected) in [
            (
                "helm:\n  bogus: true\n",
                "helm.bogus: not a field lariat knows",
            ),
            (
                "helm: {}\ntargetCustomizations:\n- name: x\n  helm:\n    bogus: 1\n",
                "targetCustomizations[0].helm.bogus: not a field lariat knows",
            ),
        ] {
            let error = fleet_yaml("fleet.yaml", yaml.as_bytes()).err().unwrap();
            assert!(error.reason.starts_with(expected), "{error}");
        }
        assert!(
            fleet_yaml(
                "fleet.yaml",
                b"helm:\n  waitForJobs: true\n  disableDNS: true\n"
            )
            .is_ok()
        );
        let error = bundles(
            &[
                file("fleet.yaml", "rolloutStrategy:\n  maxUnavailable: most\n"),
                file("a.yaml", CM),
            ],
            &[],
            &[],
            &options,
        )
        .unwrap_err();
        assert!(
            error.reason.contains("rolloutStrategy.maxUnavailable")
                && error.reason.contains("most"),
            "{error}"
        );
        for (fleet_yaml, expected) in [
            (
                "targetCustomizations:\n- clusterSelector: {matchExpressions: [{key: env, operator: Bogus, values: [x]}]}\n",
                "targetCustomizations[0].clusterSelector",
            ),
            (
                "dependsOn:\n- selector: {matchLabels: {\"a b\": x}}\n",
                "dependsOn[0].selector",
            ),
            (
                "rolloutStrategy:\n  partitions:\n  - clusterSelector: {matchExpressions: [{key: env, operator: In}]}\n",
                "rolloutStrategy.partitions[0].clusterSelector",
            ),
            ("rolloutStrategy:\n  maxUnavailable: -5\n", "negative"),
        ] {
            let error = bundles(
                &[file("fleet.yaml", fleet_yaml), file("a.yaml", CM)],
                &[],
                &[],
                &options,
            )
            .unwrap_err();
            assert!(error.reason.contains(expected), "{error}");
        }
        let bad_target = Target {
            cluster_selector: Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
                    match_labels: Some([("a b".to_string(), "x".to_string())].into()),
                    ..Default::default()
                },
            ),
            ..Default::default()
        };
        let error = bundles(&[file("a.yaml", CM)], &[], &[bad_target], &options).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("the GitRepo's spec.targets[0]: clusterSelector"),
            "{error}"
        );
        let error = bundles(&[file("a.yaml", CM)], &["missing".into()], &[], &options).unwrap_err();
        assert_eq!(error.file, "missing");
    }

    #[test]
    fn a_chart_is_bundled_whole_and_its_templates_are_not_read_as_manifests() {
        let files = [
            file(
                "app/fleet.yaml",
                "helm:\n  chart: ./chart\n  releaseName: web\n  values:\n    replicas: 3\n",
            ),
            file(
                "app/chart/Chart.yaml",
                "apiVersion: v2\nname: web\nversion: 0.1.0\n",
            ),
            file(
                "app/chart/templates/cm.yaml",
                "kind: ConfigMap\nname: {{ .Release.Name }}\n",
            ),
            file(
                "app/chart/templates/_helpers.tpl",
                "{{ define \"x\" }}{{ end }}",
            ),
            file(
                "plain/Chart.yaml",
                "apiVersion: v2\nname: plain\nversion: 1.0.0\n",
            ),
            file(
                "plain/templates/a.yaml",
                "{{ if .Values.x }}x: 1{{ end }}\n",
            ),
        ];
        let scanned = bundles(
            &files,
            &["app".into(), "plain".into()],
            &[],
            &RepoOptions::default(),
        )
        .unwrap();
        assert_eq!(scanned.len(), 2);
        let app = &scanned[0];
        let helm = app.spec.helm.as_ref().unwrap();
        assert_eq!(helm.chart.as_deref(), Some("chart"));
        assert_eq!(helm.release_name.as_deref(), Some("web"));
        let names: Vec<_> = app
            .spec
            .resources
            .iter()
            .flatten()
            .filter_map(|r| r.name.clone())
            .collect();
        assert_eq!(
            names,
            [
                "chart/Chart.yaml",
                "chart/templates/cm.yaml",
                "chart/templates/_helpers.tpl"
            ]
        );
        // A binary file of a chart travels base64-encoded, byte for byte.
        let binary = bundles(
            &[
                file("Chart.yaml", "apiVersion: v2\nname: icon\nversion: 1.0.0\n"),
                (
                    "files/icon.png".to_string(),
                    vec![0x89, 0x50, 0xff, 0x00, 0xfe],
                ),
            ],
            &[],
            &[],
            &RepoOptions::default(),
        )
        .unwrap();
        let icon = binary[0]
            .spec
            .resources
            .iter()
            .flatten()
            .find(|r| r.name.as_deref() == Some("files/icon.png"))
            .unwrap();
        assert_eq!(icon.encoding.as_deref(), Some("base64"));
        assert_eq!(
            BASE64.decode(icon.content.as_deref().unwrap()).unwrap(),
            [0x89, 0x50, 0xff, 0x00, 0xfe]
        );
        // A root holding a Chart.yaml is a chart without a fleet.yaml saying so.
        assert_eq!(
            scanned[1].spec.helm.as_ref().unwrap().chart.as_deref(),
            Some("")
        );
    }
}
