//! A Helm bundle on this cluster: its chart rendered against this cluster, as Fleet's agent
//! renders it — `.Capabilities` from this cluster's version and API groups, `lookup` reading
//! from it — into the objects the rest of the agent applies and monitors, the chart's CRDs
//! first.
//!
//! A render is paid once per version: it is kept by deployment ID, as Helm renders at
//! install and upgrade, not at every look.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use kube::api::{Api, DynamicObject, GroupVersionKind, ListParams};
use lariat_api::fleet::{BundleDeploymentOptions, HelmOptions};
use lariat_helm::chart::read_values;
use lariat_helm::functions::Lookup;
use lariat_helm::{Bounds, Capabilities, Chart, Release, goyaml, manifests};

use super::hooks::Hook;
use super::release::ReleaseData;
use serde_json::{Map, Value};

/// How long a render may take when the bundle does not say (`helm.timeoutSeconds`).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a hook may run when the bundle does not say: Helm's `--timeout` default.
pub(super) const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(300);
/// How long `atomic` waits for the objects when the bundle does not say: Helm 4's status
/// waiter's default, which Fleet's agent gets.
const DEFAULT_WAIT: Duration = Duration::from_secs(30);
/// The longest a hook (or `atomic`'s wait) may hold one of the agent's workers, whatever the
/// bundle says.
const MAX_HOOK_SECONDS: u64 = 600;
/// The longest a render may take whatever the bundle says: a repository's author cannot
/// hold an agent's CPU longer.
const MAX_RENDER_SECONDS: u64 = 60;

/// How long this cluster's discovery stands for `.Capabilities`: Helm reads it once per
/// command; an agent deploying many charts reads it at most this often, and again after it
/// installs CRDs (which add kinds).
const CAPABILITIES_LIFETIME: Duration = Duration::from_secs(30);

/// This cluster's `.Capabilities`, read from discovery when older than
/// [`CAPABILITIES_LIFETIME`] or forgotten; renders that start together wait for one read.
#[derive(Default)]
pub(super) struct CapabilitiesCache(tokio::sync::Mutex<Option<(Instant, Arc<Capabilities>)>>);

impl CapabilitiesCache {
    async fn get(&self, client: &kube::Client) -> Result<Arc<Capabilities>, kube::Error> {
        let mut known = self.0.lock().await;
        if let Some((read, capabilities)) = &*known
            && read.elapsed() < CAPABILITIES_LIFETIME
        {
            return Ok(capabilities.clone());
        }
        let fresh = Arc::new(capabilities(client).await?);
        *known = Some((Instant::now(), fresh.clone()));
        Ok(fresh)
    }

    /// The next render reads discovery again.
    pub(super) async fn forget(&self) {
        *self.0.lock().await = None;
    }
}

/// The namespace a Helm bundle's release lives in, and its objects that name none.
pub(super) fn release_namespace(options: &BundleDeploymentOptions) -> String {
    options
        .namespace
        .clone()
        .or_else(|| options.default_namespace.clone())
        .unwrap_or_else(|| "default".to_string())
}

/// A Helm bundle's chart rendered for this cluster: the objects to apply, and the release
/// to record once they are.
#[derive(Debug)]
pub(super) struct Rendered {
    pub objects: std::sync::Arc<Vec<Value>>,
    /// The chart's CRDs (`crds/`): created when absent, never updated or deleted, as Helm.
    pub crds: Vec<Value>,
    /// Its install and upgrade hooks, in the order they run.
    pub hooks: Vec<Hook>,
    /// How long a hook may take (`helm.timeoutSeconds`, Helm's five minutes by default).
    pub timeout: Duration,
    /// With `atomic`, how long the objects may take to be ready (`helm.timeoutSeconds`,
    /// Helm 4's 30 s by default).
    pub wait: Duration,
    pub release: ReleaseData,
}

/// On every object a release deploys, as Helm marks them: how `helm upgrade` knows its own.
const RELEASE_NAME: &str = "meta.helm.sh/release-name";
const RELEASE_NAMESPACE: &str = "meta.helm.sh/release-namespace";

/// Whether `object` (as it is in the cluster) is part of release `name` in `namespace`.
pub(super) fn belongs_to(object: &kube::api::DynamicObject, name: &str, namespace: &str) -> bool {
    let annotations = &object.metadata.annotations;
    let get = |key: &str| {
        annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .map(String::as_str)
    };
    get(RELEASE_NAME) == Some(name) && get(RELEASE_NAMESPACE) == Some(namespace)
}

/// The objects of a Helm bundle's chart on this cluster, or why it cannot be rendered
/// (naming the file, template and line).
pub(super) async fn render(
    downstream: &kube::Client,
    known_capabilities: &CapabilitiesCache,
    bundle_deployment: &str,
    files: &[Value],
    options: &BundleDeploymentOptions,
    helm: &HelmOptions,
) -> Result<Rendered, String> {
    let mut bundle: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for file in files {
        let (Some(name), Some(content)) = (file["name"].as_str(), file["content"].as_str()) else {
            continue;
        };
        let data = match file["encoding"].as_str() {
            None | Some("") => content.as_bytes().to_vec(),
            Some("base64") => base64::engine::general_purpose::STANDARD
                .decode(content)
                .map_err(|e| format!("{name}: not base64: {e}"))?,
            Some(other) => {
                return Err(format!(
                    "{name}: encoding {other:?} is not one lariat reads"
                ));
            }
        };
        bundle.insert(name.to_string(), data);
    }
    let chart_dir = helm.chart.clone().unwrap_or_default();
    let prefix = if chart_dir.is_empty() {
        String::new()
    } else {
        format!("{chart_dir}/")
    };
    let chart = match bundle
        .get(&chart_dir)
        .filter(|_| chart_dir.ends_with(".tgz"))
    {
        // A packaged chart: fetched from a Helm repository, or kept so in git.
        Some(archive) => Chart::load_archive(&chart_dir, archive).map_err(|e| e.to_string())?,
        None => {
            let chart_files: BTreeMap<String, Vec<u8>> = bundle
                .iter()
                .filter_map(|(name, data)| {
                    Some((name.strip_prefix(&prefix)?.to_string(), data.clone()))
                })
                .collect();
            Chart::load(&chart_files).map_err(|e| format!("{prefix}{e}"))?
        }
    };
    // `values` hold the bundle's valuesFiles already (merged when the bundle was read).
    let mut values = helm.values.clone().unwrap_or_default();
    for item in helm.values_from.iter().flatten() {
        values_from(downstream, item, &release_namespace(options), &mut values).await?;
    }
    let capabilities = known_capabilities
        .get(downstream)
        .await
        .map_err(|e| format!("cannot read this cluster's version and API groups: {e}"))?;
    let name = helm.release_name.clone().unwrap_or_default();
    let namespace = release_namespace(options);
    let (revision, is_upgrade) =
        super::release::next_revision(downstream, &namespace, &name, bundle_deployment).await?;
    let release = Release {
        name,
        namespace,
        revision,
        is_upgrade,
        skip_schema_validation: helm.skip_schema_validation,
    };
    let timeout = u64::try_from(helm.timeout_seconds)
        .ok()
        .filter(|s| *s > 0)
        .map_or(DEFAULT_TIMEOUT, |s| {
            Duration::from_secs(s.min(MAX_RENDER_SECONDS))
        });
    let bounds = Bounds {
        time: timeout,
        ..Bounds::default()
    };
    let chart_json = super::release::chart_json(&chart);
    let release_timeout = u64::try_from(helm.timeout_seconds)
        .ok()
        .filter(|s| *s > 0)
        .map(|s| Duration::from_secs(s.min(MAX_HOOK_SECONDS)));
    let keeper = bundle_deployment.to_string();
    let kustomize_dir = options
        .kustomize
        .as_ref()
        .map(|k| k.dir.clone().unwrap_or_default());
    let config = Value::Object(values.clone());
    let lookup: std::sync::Arc<dyn Lookup + Send + Sync> = std::sync::Arc::new(ClusterLookup {
        client: downstream.clone(),
        runtime: tokio::runtime::Handle::current(),
        timeout,
    });
    // The render blocks (lookups wait on this runtime): off the async workers.
    tokio::task::spawn_blocking(move || {
        let rendered = lariat_helm::render(
            &chart,
            &values,
            &release,
            &capabilities,
            Some(lookup),
            &bounds,
        )
        .map_err(|e| truncated(&e.to_string()))?;
        let (mut objects, hooks, mut manifest) = objects(&rendered, &release)?;
        if let Some(dir) = &kustomize_dir
            && let Some(built) = post_render(&bundle, dir, &manifest)?
        {
            manifest = built
                .iter()
                .map(|o| format!("---\n{}", goyaml::to_string(o)))
                .collect();
            objects = built;
            objects
                .iter_mut()
                .for_each(|o| mark(o, &release.name, &release.namespace));
        }
        let crds = crds(&rendered)?;
        let data = ReleaseData {
            name: release.name.clone(),
            namespace: release.namespace.clone(),
            chart: chart_json,
            config,
            manifest,
            notes: rendered.notes,
            bundle_deployment: keeper,
            is_upgrade: release.is_upgrade,
        };
        Ok(Rendered {
            objects: std::sync::Arc::new(objects),
            crds,
            hooks,
            timeout: release_timeout.unwrap_or(DEFAULT_HOOK_TIMEOUT),
            wait: release_timeout.unwrap_or(DEFAULT_WAIT),
            release: data,
        })
    })
    .await
    .map_err(|_| "the render stopped before it finished".to_string())?
}

/// The most of a render's error that reaches the BundleDeployment's status: a template's
/// `fail` writes what it likes, and the status is read upstream.
const MAX_MESSAGE: usize = 1024;

fn truncated(message: &str) -> String {
    if message.len() <= MAX_MESSAGE {
        return message.to_string();
    }
    let mut end = MAX_MESSAGE;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &message[..end])
}

/// The hook events lariat runs: an install's, an upgrade's, and an uninstall's (from the
/// release the cluster keeps, once the bundle is gone).
const RUN_EVENTS: [&str; 6] = [
    "pre-install",
    "post-install",
    "pre-upgrade",
    "post-upgrade",
    "pre-delete",
    "post-delete",
];

/// The chart's manifests in Helm's install order, as objects marked as the release's; its
/// install, upgrade and delete hooks in the order they run; and the release's manifest text.
fn objects(
    rendered: &lariat_helm::Rendered,
    release: &Release,
) -> Result<(Vec<Value>, Vec<Hook>, String), String> {
    let (hooks, sorted) = manifests::sort(&rendered.files).map_err(|e| e.to_string())?;
    let mut runnable = Vec::new();
    for hook in hooks
        .into_iter()
        .filter(|h| h.events.iter().any(|e| RUN_EVENTS.contains(&e.as_str())))
    {
        let m = &hook.manifest;
        let object: Value =
            serde_yaml_ng::from_str(&m.content).map_err(|e| format!("{}: {e}", m.source))?;
        runnable.push(Hook {
            object,
            kind: m.kind.clone(),
            name: m.name.clone(),
            source: m.source.clone(),
            manifest: m.content.clone(),
            events: hook.events,
            weight: hook.weight,
            delete_policies: hook.delete_policies,
        });
    }
    super::hooks::sort(&mut runnable);
    let manifest: String = sorted
        .iter()
        .map(|m| format!("---\n# Source: {}\n{}\n", m.source, m.content))
        .collect();
    let mut objects = Vec::new();
    for m in sorted {
        let mut value: Value =
            serde_yaml_ng::from_str(&m.content).map_err(|e| format!("{}: {e}", m.source))?;
        if !value.is_null() {
            mark(&mut value, &release.name, &release.namespace);
            objects.push(value);
        }
    }
    Ok((objects, runnable, manifest))
}

/// Where Fleet's post-renderer puts a chart's manifests in the kustomization's directory.
const POST_RENDERED: &str = "fleet-manifests.yaml";

/// Fleet's post-renderer: when the bundle has a kustomization in `dir`, it is built with the
/// chart's manifests as its first resource (`fleet-manifests.yaml` of that directory, listed
/// unless it is already), and what it builds are the release's objects. `None` when there is
/// no kustomization there: the chart's objects stay as rendered, as in Fleet.
fn post_render(
    bundle: &BTreeMap<String, Vec<u8>>,
    dir: &str,
    manifest: &str,
) -> Result<Option<Vec<Value>>, String> {
    let mut parts: Vec<&str> = Vec::new();
    for part in dir.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts
                    .pop()
                    .ok_or_else(|| format!("kustomize.dir {dir:?} leaves the bundle"))?;
            }
            part => parts.push(part),
        }
    }
    let dir = parts.join("/");
    let dir = dir.as_str();
    let within = |name: &str| {
        if dir.is_empty() {
            name.to_string()
        } else {
            format!("{dir}/{name}")
        }
    };
    let Some(kustomization) = lariat_kustomize::KUSTOMIZATION_FILES
        .iter()
        .map(|name| within(name))
        .find(|path| bundle.contains_key(path))
    else {
        return Ok(None);
    };
    let mut files = bundle.clone();
    // There even when the chart renders nothing, as in Fleet; listed only when it holds some.
    files.insert(within(POST_RENDERED), manifest.as_bytes().to_vec());
    if !manifest.trim().is_empty() {
        let text = String::from_utf8_lossy(&bundle[&kustomization]).to_string();
        let mut document = match lariat_yaml::documents(&text).into_iter().next() {
            Some(Ok(Value::Object(document))) => document,
            Some(Err(e)) => return Err(format!("{kustomization}: {e}")),
            _ => Map::new(),
        };
        let resources = document
            .entry("resources")
            .or_insert_with(|| Value::Array(Vec::new()));
        let Some(list) = resources.as_array_mut() else {
            return Err(format!("{kustomization}: resources is not a list"));
        };
        if !list.iter().any(|r| r == POST_RENDERED) {
            list.insert(0, POST_RENDERED.into());
        }
        // JSON is YAML: the kustomization is read back as any other.
        files.insert(
            kustomization,
            Value::Object(document).to_string().into_bytes(),
        );
    }
    lariat_kustomize::build(&files, dir, lariat_kustomize::Bounds::default())
        .map(Some)
        .map_err(|e| truncated(&format!("kustomize over the chart's output: {e}")))
}

/// The chart's CRDs as objects.
fn crds(rendered: &lariat_helm::Rendered) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    for (source, data) in &rendered.crds {
        for document in manifests::split_documents(&String::from_utf8_lossy(data)) {
            let value: Value =
                serde_yaml_ng::from_str(&document).map_err(|e| format!("{source}: {e}"))?;
            if !value.is_null() {
                out.push(value);
            }
        }
    }
    Ok(out)
}

/// Creates the CRDs that are not there yet; one that is, is left as it is (Helm neither
/// upgrades nor deletes `crds/`).
pub(super) async fn install_crds(client: &kube::Client, crds: &[Value]) -> Result<(), String> {
    let resource = kube::api::ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
        "customresourcedefinitions",
    );
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    for crd in crds {
        let object: DynamicObject =
            serde_json::from_value(crd.clone()).map_err(|e| format!("a CRD of the chart: {e}"))?;
        match api.create(&kube::api::PostParams::default(), &object).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => {
                return Err(format!(
                    "cannot create CustomResourceDefinition {}: {e}",
                    object.metadata.name.unwrap_or_default()
                ));
            }
        }
    }
    Ok(())
}

/// Helm's marks of a release's object: `app.kubernetes.io/managed-by: Helm` and the release's
/// name and namespace as annotations.
pub(super) fn mark(object: &mut Value, name: &str, namespace: &str) {
    let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    if let Some(labels) = metadata
        .entry("labels")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
    {
        labels.insert("app.kubernetes.io/managed-by".into(), "Helm".into());
    }
    if let Some(annotations) = metadata
        .entry("annotations")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
    {
        annotations.insert(RELEASE_NAME.into(), name.into());
        annotations.insert(RELEASE_NAMESPACE.into(), namespace.into());
    }
}

/// Merges the values a `valuesFrom` entry names, a ConfigMap's then a Secret's, over
/// `values` (as Fleet's agent reads them: the release's namespace unless one is named, the
/// key `values.yaml` unless one is).
async fn values_from(
    client: &kube::Client,
    item: &lariat_api::fleet::ValuesFrom,
    release_namespace: &str,
    values: &mut Map<String, Value>,
) -> Result<(), String> {
    let place = |r: &lariat_api::fleet::KeyRef| {
        (
            r.name.clone().unwrap_or_default(),
            r.namespace
                .clone()
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| release_namespace.to_string()),
            r.key
                .clone()
                .filter(|k| !k.is_empty())
                .unwrap_or_else(|| "values.yaml".to_string()),
        )
    };
    if let Some(reference) = &item.config_map_key_ref {
        let (name, namespace, key) = place(reference);
        let api: Api<k8s_openapi::api::core::v1::ConfigMap> =
            Api::namespaced(client.clone(), &namespace);
        let found = api
            .get(&name)
            .await
            .map_err(|e| format!("helm.valuesFrom: ConfigMap {namespace}/{name}: {e}"))?;
        let text = found
            .data
            .and_then(|d| d.get(&key).cloned())
            .ok_or_else(|| {
                format!("helm.valuesFrom: ConfigMap {namespace}/{name} has no key {key}")
            })?;
        let layer = read_values(
            text.as_bytes(),
            &format!("ConfigMap {namespace}/{name} key {key}"),
        )
        .map_err(|e| e.to_string())?;
        lariat_helm::values::merge_over(values, layer);
    }
    if let Some(reference) = &item.secret_key_ref {
        let (name, namespace, key) = place(reference);
        let api: Api<k8s_openapi::api::core::v1::Secret> =
            Api::namespaced(client.clone(), &namespace);
        let found = api
            .get(&name)
            .await
            .map_err(|e| format!("helm.valuesFrom: Secret {namespace}/{name}: {e}"))?;
        let data = found
            .data
            .and_then(|d| d.get(&key).cloned())
            .ok_or_else(|| {
                format!("helm.valuesFrom: Secret {namespace}/{name} has no key {key}")
            })?;
        // Named, never quoted: the values may be secret.
        let layer = read_values(&data.0, "").map_err(|_| {
            format!("helm.valuesFrom: Secret {namespace}/{name} key {key} is not YAML values")
        })?;
        lariat_helm::values::merge_over(values, layer);
    }
    Ok(())
}

/// What `.Capabilities` says: this cluster's version and every group version and kind it serves.
async fn capabilities(client: &kube::Client) -> Result<Capabilities, kube::Error> {
    let version = client.apiserver_version().await?;
    let mut api_versions = Vec::new();
    for core in client.list_core_api_versions().await?.versions {
        for resource in client.list_core_api_resources(&core).await?.resources {
            api_versions.push(format!("{core}/{}", resource.kind));
        }
        api_versions.push(core);
    }
    for group in client.list_api_groups().await?.groups {
        for version in group.versions {
            if let Ok(resources) = client
                .list_api_group_resources(&version.group_version)
                .await
            {
                api_versions.extend(
                    resources
                        .resources
                        .iter()
                        .map(|r| format!("{}/{}", version.group_version, r.kind)),
                );
            }
            api_versions.push(version.group_version);
        }
    }
    api_versions.sort();
    api_versions.dedup();
    Ok(Capabilities {
        kube_version: version.git_version,
        api_versions,
    })
}

/// `lookup` against this cluster, from the render's thread.
struct ClusterLookup {
    client: kube::Client,
    runtime: tokio::runtime::Handle,
    timeout: Duration,
}

impl Lookup for ClusterLookup {
    fn lookup(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, String> {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let client = self.client.clone();
        let (namespace, name) = (namespace.to_string(), name.to_string());
        let read = async move {
            let (resource, capabilities) = match kube::discovery::pinned_kind(&client, &gvk).await {
                Ok(found) => found,
                // Helm answers a kind the cluster does not serve with an empty map.
                Err(kube::Error::Api(e)) if e.code == 404 => return Ok(None),
                Err(e) => return Err(e.to_string()),
            };
            let api: Api<DynamicObject> = if capabilities.scope
                == kube::discovery::Scope::Namespaced
                && !namespace.is_empty()
            {
                Api::namespaced_with(client, &namespace, &resource)
            } else {
                Api::all_with(client, &resource)
            };
            if name.is_empty() {
                let list = api
                    .list(&ListParams::default())
                    .await
                    .map_err(|e| e.to_string())?;
                let items: Vec<Value> = list
                    .items
                    .iter()
                    .filter_map(|o| serde_json::to_value(o).ok())
                    .collect();
                return Ok(Some(
                    serde_json::json!({"apiVersion": "v1", "kind": format!("{kind}List"), "items": items}),
                ));
            }
            match api.get_opt(&name).await {
                Ok(found) => Ok(found.and_then(|o| serde_json::to_value(o).ok())),
                Err(e) => Err(e.to_string()),
            }
        };
        let timeout = self.timeout;
        self.runtime.block_on(async move {
            tokio::time::timeout(timeout, read)
                .await
                .unwrap_or_else(|_| Err("timed out".into()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST: &str = "---\n# Source: web/templates/cm.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  color: green\n";

    fn bundle(files: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
        files
            .iter()
            .map(|(name, text)| (name.to_string(), text.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn the_kustomization_is_built_over_the_charts_manifests_as_fleet_post_renders() {
        let files = bundle(&[(
            "overlays/eu/kustomization.yaml",
            "namePrefix: eu-\nresources: []\n",
        )]);
        // The directory is cleaned as Fleet's filepath.Join cleans it.
        for dir in ["overlays/eu", "./overlays/eu/", "overlays/x/../eu"] {
            let built = post_render(&files, dir, MANIFEST).unwrap().unwrap();
            assert_eq!(built.len(), 1, "{dir}");
            assert_eq!(built[0]["metadata"]["name"], "eu-settings", "{dir}");
        }
        // No kustomization there: the chart's objects stay as rendered.
        assert!(
            post_render(&files, "overlays/us", MANIFEST)
                .unwrap()
                .is_none()
        );
        // Out of the bundle: refused, not skipped.
        let error = post_render(&files, "overlays/../../x", MANIFEST).unwrap_err();
        assert!(error.contains("leaves the bundle"), "{error}");
        // A chart that renders nothing: the file is there, empty, for a kustomization
        // that lists it itself.
        let listing = bundle(&[
            (
                "kustomization.yaml",
                "resources: [fleet-manifests.yaml, extra.yaml]\n",
            ),
            (
                "extra.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: extra\n",
            ),
        ]);
        let built = post_render(&listing, "", "").unwrap().unwrap();
        assert_eq!(built.len(), 1);
        assert_eq!(built[0]["metadata"]["name"], "extra");
        // A kustomization that fails says so, with kustomize's reason.
        let broken = bundle(&[("kustomization.yaml", "resources: [missing.yaml]\n")]);
        let error = post_render(&broken, "", MANIFEST).unwrap_err();
        assert!(
            error.starts_with("kustomize over the chart's output"),
            "{error}"
        );
    }
}
