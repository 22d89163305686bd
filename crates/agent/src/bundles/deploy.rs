//! Applying a BundleDeployment's manifests to this cluster, and the record of what it applied.
//!
//! The record is a ConfigMap per BundleDeployment in `lariat-system` (as Helm keeps a release
//! Secret): every object the BundleDeployment applied, and which of them it found already
//! there (adopted: never deleted, only released). It is written before an apply that adds
//! objects, so an object is never applied without being recorded even if the agent dies
//! mid-way, and after a prune. Only what the record names, and what still carries the
//! BundleDeployment's label, is ever deleted, so objects lariat did not create (a namespace
//! that was there before, another bundle's object) survive a prune or an uninstall.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::ResourceExt;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, Preconditions,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Agent, Error};
use crate::CREDENTIAL_NAMESPACE;

/// The field manager of everything the agent applies.
pub const FIELD_MANAGER: &str = "lariat";
/// On every object the agent applies: the BundleDeployment it belongs to.
pub const BUNDLE_DEPLOYMENT_LABEL: &str = "fleet.lariat.dev/bundle-deployment";
/// On the records, so they can be listed.
const RECORD_LABEL: &str = "fleet.lariat.dev/record";
const RECORD_PREFIX: &str = "fleet-bundle-";

/// A kind as this cluster serves it.
#[derive(Clone, Debug)]
pub struct Kind {
    pub resource: ApiResource,
    pub namespaced: bool,
    /// Known from a CustomResourceDefinition among the manifests, not (yet) from discovery:
    /// it may take a moment to be served once the definition is applied.
    pub defined_by_manifests: bool,
}

impl Kind {
    /// One watch per group and kind, whichever version the manifests use.
    pub fn key(&self) -> String {
        format!("{}/{}", self.resource.group, self.resource.kind)
    }
}

/// Which object: what the record keeps and the status names. Two keys are the same object
/// whatever API version they name it in (`policy/v1beta1` and `policy/v1`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectKey {
    pub api_version: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
}

impl ObjectKey {
    pub fn group(&self) -> &str {
        self.api_version
            .split_once('/')
            .map_or("", |(group, _)| group)
    }

    fn identity(&self) -> (&str, &str, Option<&str>, &str) {
        (
            self.group(),
            &self.kind,
            self.namespace.as_deref(),
            &self.name,
        )
    }
}

impl PartialEq for ObjectKey {
    fn eq(&self, other: &Self) -> bool {
        self.identity() == other.identity()
    }
}

impl Eq for ObjectKey {}

impl std::hash::Hash for ObjectKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.identity().hash(state);
    }
}

impl PartialOrd for ObjectKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ObjectKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.identity().cmp(&other.identity())
    }
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(namespace) => write!(f, "{} {namespace}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// One object of the manifests, ready to apply here.
#[derive(Clone, Debug)]
pub struct Desired {
    pub key: ObjectKey,
    pub kind: Kind,
    pub object: Value,
}

/// Objects just written, newer than the watches may show yet, and objects just deleted.
#[derive(Debug, Default)]
pub struct Fresh {
    pub written: BTreeMap<ObjectKey, DynamicObject>,
    pub deleted: BTreeSet<ObjectKey>,
}

/// What a BundleDeployment applied.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The namespace of the BundleDeployment (its cluster's), so a sweep only ever looks at
    /// the records of the cluster this agent serves now.
    pub namespace: String,
    pub keep_resources: bool,
    /// Every object applied.
    pub resources: BTreeSet<ObjectKey>,
    /// Those that were there before it: released, never deleted.
    pub adopted: BTreeSet<ObjectKey>,
    /// The Helm release it recorded, `namespace/name`: its history goes with it.
    pub helm_release: Option<String>,
    /// The digest of that release's delete hooks ([`super::hooks::digest`]): at uninstall
    /// only hooks that match it run, since the release's Secrets live in a namespace others
    /// may write to.
    pub deletion_hooks: Option<String>,
    /// The digest of the manifest of the last revision of that release it deployed
    /// ([`super::release::manifest_digest`]): the only one a failed upgrade rolls back to.
    pub release_manifest: Option<String>,
}

fn record_name(bundle_deployment: &str) -> String {
    format!("{RECORD_PREFIX}{bundle_deployment}")
}

fn records(agent: &Agent) -> Api<ConfigMap> {
    Api::namespaced(agent.downstream.clone(), CREDENTIAL_NAMESPACE)
}

/// What BundleDeployment `name` applied, if anything.
pub(super) async fn record(agent: &Agent, name: &str) -> Result<Option<Record>, Error> {
    let mut cache = agent.records.lock().await;
    if let Some(record) = cache.get(name) {
        return Ok(record.clone());
    }
    let found = records(agent).get_opt(&record_name(name)).await?;
    let record = found.and_then(|cm| parse_record(&cm));
    cache.insert(name.to_string(), record.clone());
    Ok(record)
}

fn parse_record(cm: &ConfigMap) -> Option<Record> {
    let data = cm.data.as_ref()?;
    let set = |key: &str| -> Option<BTreeSet<ObjectKey>> {
        match data.get(key) {
            Some(text) => serde_json::from_str(text).ok(),
            None => Some(BTreeSet::new()),
        }
    };
    Some(Record {
        namespace: data.get("namespace").cloned().unwrap_or_default(),
        keep_resources: data.get("keepResources").is_some_and(|v| v == "true"),
        resources: set("resources")?,
        adopted: set("adopted")?,
        helm_release: data.get("helmRelease").cloned(),
        deletion_hooks: data.get("deletionHooks").cloned(),
        release_manifest: data.get("releaseManifest").cloned(),
    })
}

async fn write_record(agent: &Agent, name: &str, record: &Record) -> Result<(), Error> {
    ensure_namespace(agent, CREDENTIAL_NAMESPACE)
        .await
        .map_err(Error::Invalid)?;
    let json = |set: &BTreeSet<ObjectKey>| {
        serde_json::to_string(set).map_err(|e| Error::Invalid(e.to_string()))
    };
    let body = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": record_name(name), "namespace": CREDENTIAL_NAMESPACE,
                     "labels": {RECORD_LABEL: "bundle-deployment"}},
        "data": {"bundleDeployment": name, "namespace": record.namespace,
                 "keepResources": record.keep_resources.to_string(),
                 "resources": json(&record.resources)?, "adopted": json(&record.adopted)?},
    });
    let mut body = body;
    if let Some(release) = &record.helm_release {
        body["data"]["helmRelease"] = release.clone().into();
    }
    if let Some(digest) = &record.deletion_hooks {
        body["data"]["deletionHooks"] = digest.clone().into();
    }
    if let Some(digest) = &record.release_manifest {
        body["data"]["releaseManifest"] = digest.clone().into();
    }
    records(agent)
        .patch(
            &record_name(name),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(body),
        )
        .await?;
    agent
        .records
        .lock()
        .await
        .insert(name.to_string(), Some(record.clone()));
    Ok(())
}

/// The BundleDeployments of namespace `namespace` that have a record here.
pub(super) async fn recorded(agent: &Agent, namespace: &str) -> Result<Vec<String>, Error> {
    let list = records(agent)
        .list(&ListParams::default().labels(RECORD_LABEL))
        .await?;
    let mut names = Vec::new();
    let mut cache = agent.records.lock().await;
    for cm in list {
        let Some(name) = cm.data.as_ref().and_then(|d| d.get("bundleDeployment")) else {
            continue;
        };
        let Some(record) = parse_record(&cm) else {
            continue;
        };
        if record.namespace != namespace {
            continue;
        }
        // What a reconcile wrote meanwhile is newer than this list.
        cache.entry(name.clone()).or_insert(Some(record));
        names.push(name.clone());
    }
    Ok(names)
}

/// Removes what BundleDeployment `name` applied: deletes what it created (unless it kept its
/// resources), releases what it adopted or keeps, then drops its record. What cannot be
/// removed stays in the record for the next try.
pub(super) async fn uninstall(agent: &Agent, name: &str) -> Result<(), Error> {
    let Some(record) = record(agent, name).await? else {
        return Ok(());
    };
    // A chart's release: its pre-delete hooks before its objects go, post-delete after, as
    // `helm uninstall` runs them (a failing one stops the uninstall, to be tried again).
    let helm_release = record
        .helm_release
        .as_deref()
        .and_then(|r| r.split_once('/'));
    let mut deletion_hooks = match helm_release {
        Some((namespace, release)) => {
            match super::release::latest(&agent.downstream, namespace, release).await? {
                Some(kept) => super::hooks::from_release(&kept, &["pre-delete", "post-delete"])
                    .map_err(Error::Invalid)?,
                None => Vec::new(),
            }
        }
        None => Vec::new(),
    };
    if super::hooks::digest(&deletion_hooks) != record.deletion_hooks {
        tracing::warn!(
            bundle = %name,
            "the release's delete hooks are not the ones this agent installed: not run"
        );
        deletion_hooks.clear();
    }
    let run_hooks = async |event: &str| -> Result<(), Error> {
        if let Some((namespace, _)) = helm_release {
            let timeout = super::helm::DEFAULT_HOOK_TIMEOUT;
            super::hooks::run(
                &agent.downstream,
                &deletion_hooks,
                event,
                namespace,
                timeout,
            )
            .await
            .map_err(Error::Invalid)?;
        }
        Ok(())
    };
    run_hooks("pre-delete").await?;
    let mut left = BTreeSet::new();
    let mut first_error = None;
    for key in record.resources.iter().rev() {
        let outcome = if record.keep_resources || record.adopted.contains(key) {
            release(agent, key).await
        } else {
            delete_owned(agent, key, name).await
        };
        if let Err(message) = outcome {
            first_error.get_or_insert(message);
            left.insert(key.clone());
        }
    }
    if let Some(message) = first_error {
        let remaining = Record {
            adopted: record.adopted.intersection(&left).cloned().collect(),
            resources: left,
            ..record
        };
        write_record(agent, name, &remaining).await?;
        return Err(Error::Invalid(message));
    }
    run_hooks("post-delete").await?;
    if let Some((namespace, release)) = helm_release {
        super::release::remove(&agent.downstream, namespace, release).await?;
    }
    match records(agent)
        .delete(&record_name(name), &DeleteParams::default())
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    agent.records.lock().await.remove(name);
    tracing::info!(bundle = %name, "removed what a deleted bundle applied");
    Ok(())
}

/// The kind `api_version`/`kind` as this cluster serves it: from discovery, or from a
/// CustomResourceDefinition among the manifests being applied (served once that is applied).
async fn kind_of(
    agent: &Agent,
    api_version: &str,
    kind: &str,
    manifests: &[Value],
) -> Result<Kind, String> {
    let key = format!("{api_version}/{kind}");
    if let Some(found) = agent.kinds.lock().expect("lock").get(&key) {
        return Ok(found.clone());
    }
    let (group, version) = match api_version.split_once('/') {
        Some((group, version)) => (group, version),
        None => ("", api_version),
    };
    let gvk = GroupVersionKind::gvk(group, version, kind);
    match kube::discovery::pinned_kind(&agent.downstream, &gvk).await {
        Ok((resource, capabilities)) => {
            let found = Kind {
                resource,
                namespaced: capabilities.scope == kube::discovery::Scope::Namespaced,
                defined_by_manifests: false,
            };
            agent
                .kinds
                .lock()
                .expect("lock")
                .insert(key, found.clone());
            Ok(found)
        }
        Err(error) => defined_in(manifests, &gvk).ok_or_else(|| match error {
            kube::Error::Api(e) if e.code == 404 => format!(
                "this cluster does not serve {kind} in {api_version} (is its CustomResourceDefinition installed?)"
            ),
            other => format!("cannot look up {kind} in {api_version}: {other}"),
        }),
    }
}

/// The kind of an object recorded earlier, in whichever version of its group this cluster
/// serves now (the recorded version may be gone); `None` when the cluster serves no such
/// kind any more (so no such object can exist).
async fn served_kind(agent: &Agent, key: &ObjectKey) -> Result<Option<Kind>, String> {
    if let Ok(kind) = kind_of(agent, &key.api_version, &key.kind, &[]).await {
        return Ok(Some(kind));
    }
    match kube::discovery::group(&agent.downstream, key.group()).await {
        Ok(group) => Ok(group
            .recommended_kind(&key.kind)
            .map(|(resource, capabilities)| Kind {
                resource,
                namespaced: capabilities.scope == kube::discovery::Scope::Namespaced,
                defined_by_manifests: false,
            })),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
        Err(e) => Err(format!("cannot look up {}: {e}", key.kind)),
    }
}

/// The kind a CustomResourceDefinition among `manifests` defines, if one defines `gvk`.
fn defined_in(manifests: &[Value], gvk: &GroupVersionKind) -> Option<Kind> {
    manifests.iter().find_map(|m| {
        let spec = &m["spec"];
        let is_crd = m["kind"] == "CustomResourceDefinition"
            && spec["group"] == gvk.group.as_str()
            && spec["names"]["kind"] == gvk.kind.as_str();
        let versions = spec["versions"].as_array()?;
        (is_crd && versions.iter().any(|v| v["name"] == gvk.version.as_str())).then(|| Kind {
            resource: ApiResource::from_gvk_with_plural(
                gvk,
                spec["names"]["plural"].as_str().unwrap_or_default(),
            ),
            namespaced: spec["scope"] != "Cluster",
            defined_by_manifests: true,
        })
    })
}

/// Apply order: namespaces, then definitions, then everything else in the manifests' order.
fn rank(kind: &str) -> u8 {
    match kind {
        "Namespace" => 0,
        "CustomResourceDefinition" => 1,
        _ => 2,
    }
}

/// The manifests as objects for this cluster: each with its namespace (the options', its
/// own, the default namespace, or `default`) and the label naming its BundleDeployment. A
/// manifest that cannot be applied is an error naming it.
pub(super) async fn desired(
    agent: &Agent,
    bundle_deployment: &str,
    manifests: &[Value],
    definitions: &[Value],
    options: &lariat_api::fleet::BundleDeploymentOptions,
) -> Result<Vec<Desired>, String> {
    // The CustomResourceDefinitions that may define the manifests' kinds before this
    // cluster serves them: among the manifests, or installed beside them (a chart's crds/).
    let defining: Vec<Value> = definitions
        .iter()
        .chain(manifests)
        .filter(|m| m["kind"] == "CustomResourceDefinition")
        .cloned()
        .collect();
    let mut desired = Vec::with_capacity(manifests.len());
    let mut seen = HashSet::new();
    for (index, manifest) in manifests.iter().enumerate() {
        let (Some(api_version), Some(kind)) =
            (manifest["apiVersion"].as_str(), manifest["kind"].as_str())
        else {
            return Err(format!(
                "object {} of the manifests has no apiVersion or kind",
                index + 1
            ));
        };
        let Some(name) = manifest["metadata"]["name"]
            .as_str()
            .filter(|n| !n.is_empty())
        else {
            return Err(format!("{kind} {} of the manifests has no name", index + 1));
        };
        let found = kind_of(agent, api_version, kind, &defining).await?;
        let mut object = manifest.clone();
        let namespace = found.namespaced.then(|| {
            options
                .namespace
                .clone()
                .or_else(|| manifest["metadata"]["namespace"].as_str().map(String::from))
                .or_else(|| options.default_namespace.clone())
                .unwrap_or_else(|| "default".to_string())
        });
        let metadata = object["metadata"]
            .as_object_mut()
            .ok_or_else(|| format!("{kind} {name}: metadata is not an object"))?;
        match &namespace {
            Some(namespace) => metadata.insert("namespace".into(), namespace.clone().into()),
            None => metadata.remove("namespace"),
        };
        let labels = metadata
            .entry("labels")
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .ok_or_else(|| format!("{kind} {name}: metadata.labels is not an object"))?;
        labels.insert(BUNDLE_DEPLOYMENT_LABEL.into(), bundle_deployment.into());
        let key = ObjectKey {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            namespace,
            name: name.to_string(),
        };
        if !seen.insert(key.clone()) {
            return Err(format!("{key} appears twice in the manifests"));
        }
        desired.push(Desired {
            key,
            kind: found,
            object,
        });
    }
    desired.sort_by_key(|d| rank(&d.key.kind));
    Ok(desired)
}

fn api_for(agent: &Agent, kind: &Kind, namespace: Option<&str>) -> Api<DynamicObject> {
    match namespace {
        Some(namespace) => {
            Api::namespaced_with(agent.downstream.clone(), namespace, &kind.resource)
        }
        None => Api::all_with(agent.downstream.clone(), &kind.resource),
    }
}

/// Server-side apply of one object, owning every field it sets. A kind whose definition is
/// among the manifests may not be served for a moment after it is applied: that is retried
/// for a few seconds.
async fn apply_one(agent: &Agent, desired: &Desired) -> Result<DynamicObject, kube::Error> {
    let api = api_for(agent, &desired.kind, desired.key.namespace.as_deref());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mut attempts = 0;
    loop {
        match api
            .patch(&desired.key.name, &params, &Patch::Apply(&desired.object))
            .await
        {
            Err(kube::Error::Api(e))
                if e.code == 404 && desired.kind.defined_by_manifests && attempts < 20 =>
            {
                attempts += 1;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            outcome => return outcome,
        }
    }
}

/// Records what the agent needs to trust of the release BundleDeployment `name` deployed:
/// the digests of its delete hooks and of its manifest.
pub(super) async fn remember_release(
    agent: &Agent,
    name: &str,
    deletion_hooks: Option<String>,
    manifest: Option<String>,
) -> Result<(), String> {
    let remember = |e: Error| format!("cannot record the release's digests: {e}");
    let Some(mut kept) = record(agent, name).await.map_err(remember)? else {
        return Ok(());
    };
    if kept.deletion_hooks == deletion_hooks && kept.release_manifest == manifest {
        return Ok(());
    }
    kept.deletion_hooks = deletion_hooks;
    kept.release_manifest = manifest;
    write_record(agent, name, &kept).await.map_err(remember)
}

/// Whether the API refused an object only because it would change an immutable field.
fn is_immutable(error: &kube::core::Status) -> bool {
    error.message.contains("field is immutable")
}

/// An apply's error as the status says it: the object, and the API's own words.
fn refusal(key: &ObjectKey, error: &kube::Error) -> String {
    match error {
        kube::Error::Api(e) => format!("{key}: {}", e.message),
        other => format!("{key}: {other}"),
    }
}

/// Deletes an object if it is still this BundleDeployment's (carries its label; the uid
/// checked so a new object of the same name is never the one deleted). One already gone, or
/// of a kind no longer served, is fine.
async fn delete_owned(
    agent: &Agent,
    key: &ObjectKey,
    bundle_deployment: &str,
) -> Result<(), String> {
    let Some(kind) = served_kind(agent, key).await? else {
        return Ok(());
    };
    let api = api_for(agent, &kind, key.namespace.as_deref());
    let live = match api.get_opt(&key.name).await {
        Ok(Some(live)) => live,
        Ok(None) => return Ok(()),
        Err(e) => return Err(format!("cannot read {key}: {e}")),
    };
    if live
        .labels()
        .get(BUNDLE_DEPLOYMENT_LABEL)
        .map(String::as_str)
        != Some(bundle_deployment)
    {
        return Ok(());
    }
    let params = DeleteParams::background().preconditions(Preconditions {
        uid: live.uid(),
        resource_version: None,
    });
    match api.delete(&key.name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
        Err(kube::Error::Api(e)) => Err(format!("cannot delete {key}: {}", e.message)),
        Err(e) => Err(format!("cannot delete {key}: {e}")),
    }
}

/// Creates namespace `name` if this agent has not seen it exist yet.
pub(super) async fn ensure_namespace(agent: &Agent, name: &str) -> Result<(), String> {
    if agent.namespaces.lock().expect("lock").contains(name) {
        return Ok(());
    }
    let namespaces: Api<Namespace> = Api::all(agent.downstream.clone());
    let exists = namespaces
        .get_opt(name)
        .await
        .map_err(|e| format!("cannot read namespace {name}: {e}"))?
        .is_some();
    if !exists {
        let object: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))
            .map_err(|e| e.to_string())?;
        match namespaces.create(&PostParams::default(), &object).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(kube::Error::Api(e)) => {
                return Err(format!("cannot create namespace {name}: {}", e.message));
            }
            Err(e) => return Err(format!("cannot create namespace {name}: {e}")),
        }
    }
    agent
        .namespaces
        .lock()
        .expect("lock")
        .insert(name.to_string());
    Ok(())
}

/// Creates the namespaces the objects go to that are not among them. They are left in place
/// when the bundle goes, as `helm install --create-namespace` leaves them.
async fn ensure_namespaces(agent: &Agent, desired: &[Desired]) -> Result<(), String> {
    let declared: HashSet<&str> = desired
        .iter()
        .filter(|d| d.key.kind == "Namespace" && d.key.group().is_empty())
        .map(|d| d.key.name.as_str())
        .collect();
    let needed: BTreeSet<&str> = desired
        .iter()
        .filter_map(|d| d.key.namespace.as_deref())
        .filter(|ns| !declared.contains(ns))
        .collect();
    for namespace in needed {
        ensure_namespace(agent, namespace).await?;
    }
    Ok(())
}

/// `namespace/name` of a Helm bundle's release.
fn helm_release(options: &lariat_api::fleet::BundleDeploymentOptions) -> Option<String> {
    let helm = options.helm.as_ref()?;
    Some(format!(
        "{}/{}",
        super::helm::release_namespace(options),
        helm.release_name.clone().unwrap_or_default()
    ))
}

/// The objects among `keys` that exist already without this BundleDeployment's label: they
/// are adopted (applied over, never deleted). The agent's own namespace always is. For a
/// Helm bundle, one that is not the release's is refused unless `takeOwnership`.
async fn found_already(
    agent: &Agent,
    keys: &[&Desired],
    bundle_deployment: &str,
    options: &lariat_api::fleet::BundleDeploymentOptions,
) -> Result<BTreeSet<ObjectKey>, String> {
    let mut adopted = BTreeSet::new();
    for desired in keys {
        let own_namespace = desired.key.kind == "Namespace"
            && desired.key.group().is_empty()
            && desired.key.name == CREDENTIAL_NAMESPACE;
        let api = api_for(agent, &desired.kind, desired.key.namespace.as_deref());
        let existing = match api.get_opt(&desired.key.name).await {
            Ok(existing) => existing,
            // Not served yet (defined by the manifests): nothing of it exists.
            Err(kube::Error::Api(e)) if e.code == 404 => None,
            Err(e) => return Err(format!("cannot read {}: {e}", desired.key)),
        };
        // Another BundleDeployment's, while that one still holds it: a conflict, as Helm
        // and Fleet refuse one object in two releases (taking it over would leave it to
        // whichever goes last, and then orphaned).
        let owner = existing
            .as_ref()
            .and_then(|o| o.labels().get(BUNDLE_DEPLOYMENT_LABEL).cloned())
            .filter(|owner| owner != bundle_deployment);
        if let Some(owner) = owner
            && record(agent, &owner)
                .await
                .ok()
                .flatten()
                .is_some_and(|r| r.resources.contains(&desired.key))
        {
            return Err(format!(
                "{} is deployed by bundle {owner} already: one object cannot belong to two bundles",
                desired.key
            ));
        }
        // Helm deploys over an object only if it is its release's, or told to take it.
        if let (Some(helm), Some(object)) = (&options.helm, &existing) {
            let release = helm.release_name.clone().unwrap_or_default();
            let release_namespace = super::helm::release_namespace(options);
            let ours = object
                .labels()
                .get(BUNDLE_DEPLOYMENT_LABEL)
                .map(String::as_str)
                == Some(bundle_deployment);
            if !ours
                && !helm.take_ownership
                && !super::helm::belongs_to(object, &release, &release_namespace)
            {
                return Err(format!(
                    "{} exists and is not part of release {release}: set helm.takeOwnership to deploy over it",
                    desired.key
                ));
            }
        }
        let foreign = existing.is_some_and(|o| {
            o.labels().get(BUNDLE_DEPLOYMENT_LABEL).map(String::as_str) != Some(bundle_deployment)
        });
        if own_namespace || foreign {
            adopted.insert(desired.key.clone());
        }
    }
    Ok(adopted)
}

/// Applies a version: records the objects it adds (noting those that were there already),
/// creates missing namespaces, applies every object, and removes what the previous version
/// had and this one does not (deleted if it created them, released if it adopted them or
/// `keepResources`; a namespace still holding objects of this version stays). Returns the
/// objects as applied, or what the API refused (the first refusal, and how many more).
pub(super) async fn apply(
    agent: &Agent,
    name: &str,
    namespace: &str,
    options: &lariat_api::fleet::BundleDeploymentOptions,
    desired: &[Desired],
) -> Result<Fresh, String> {
    let previous = record(agent, name)
        .await
        .map_err(|e| format!("cannot read what was applied before: {e}"))?
        .unwrap_or_default();
    let wanted: BTreeSet<ObjectKey> = desired.iter().map(|d| d.key.clone()).collect();
    let new: Vec<&Desired> = desired
        .iter()
        .filter(|d| !previous.resources.contains(&d.key))
        .collect();
    let mut adopted = previous.adopted.clone();
    if !new.is_empty() {
        adopted.extend(found_already(agent, &new, name, options).await?);
        // Helm leaves an object annotated `helm.sh/resource-policy: keep` when it goes.
        adopted.extend(
            new.iter()
                .filter(|d| {
                    d.object["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
                })
                .map(|d| d.key.clone()),
        );
        let intent = Record {
            namespace: namespace.to_string(),
            keep_resources: options.keep_resources,
            resources: previous.resources.union(&wanted).cloned().collect(),
            adopted: adopted.clone(),
            helm_release: helm_release(options),
            deletion_hooks: previous.deletion_hooks.clone(),
            release_manifest: previous.release_manifest.clone(),
        };
        write_record(agent, name, &intent)
            .await
            .map_err(|e| format!("cannot record what is about to be applied: {e}"))?;
    }
    ensure_namespaces(agent, desired).await?;
    let mut fresh = Fresh::default();
    let mut refused = Vec::new();
    let force = options.helm.as_ref().is_some_and(|h| h.force);
    for object in desired {
        let outcome = match apply_one(agent, object).await {
            // `helm.force`: an object refused only for an immutable field is replaced.
            Err(kube::Error::Api(e)) if force && e.code == 422 && is_immutable(&e) => {
                delete_owned(agent, &object.key, name).await?;
                apply_one(agent, object).await
            }
            outcome => outcome,
        };
        match outcome {
            Ok(live) => {
                fresh.written.insert(object.key.clone(), live);
            }
            Err(error) => refused.push(refusal(&object.key, &error)),
        }
    }
    if let Some(first) = refused.first() {
        // A namespace may have gone: look again next time.
        agent.namespaces.lock().expect("lock").clear();
        return Err(match refused.len() {
            1 => first.clone(),
            n => format!("{first} (and {} more)", n - 1),
        });
    }
    let still_used: HashSet<&str> = wanted
        .iter()
        .filter_map(|k| k.namespace.as_deref())
        .collect();
    let mut left = BTreeSet::new();
    let mut failed = None;
    for gone in previous.resources.difference(&wanted) {
        let holds_wanted = gone.kind == "Namespace"
            && gone.group().is_empty()
            && still_used.contains(gone.name.as_str());
        let outcome = if options.keep_resources || adopted.contains(gone) || holds_wanted {
            release(agent, gone).await
        } else {
            delete_owned(agent, gone, name).await
        };
        match outcome {
            Ok(()) => {
                fresh.deleted.insert(gone.clone());
            }
            Err(message) => {
                failed.get_or_insert(message);
                left.insert(gone.clone());
            }
        }
    }
    let resources: BTreeSet<ObjectKey> = wanted.union(&left).cloned().collect();
    let done = Record {
        namespace: namespace.to_string(),
        keep_resources: options.keep_resources,
        adopted: adopted.intersection(&resources).cloned().collect(),
        resources,
        helm_release: helm_release(options),
        deletion_hooks: previous.deletion_hooks.clone(),
        release_manifest: previous.release_manifest.clone(),
    };
    if record(agent, name).await.ok().flatten().as_ref() != Some(&done) {
        write_record(agent, name, &done)
            .await
            .map_err(|e| format!("cannot record what was applied: {e}"))?;
    }
    if let Some(message) = failed {
        return Err(message);
    }
    tracing::debug!(bundle = %name, objects = desired.len(), "applied");
    Ok(fresh)
}

/// An object that stays when it leaves the manifests (adopted, or `keepResources`) no longer
/// belongs to the BundleDeployment: its label goes, so it is neither watched nor reported as
/// orphaned.
async fn release(agent: &Agent, key: &ObjectKey) -> Result<(), String> {
    let Some(kind) = served_kind(agent, key).await? else {
        return Ok(());
    };
    let patch = json!({"metadata": {"labels": {BUNDLE_DEPLOYMENT_LABEL: null}}});
    match api_for(agent, &kind, key.namespace.as_deref())
        .patch(&key.name, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(format!("cannot release {key}: {e}")),
    }
}

/// Puts back what drifted (`correctDrift`): applies changed and missing objects again and
/// deletes orphans. With `force`, an object the API will not change in place (an immutable
/// field: 422 Invalid) is deleted and created again; no other error deletes anything.
pub(super) async fn correct(
    agent: &Agent,
    name: &str,
    desired: &[Desired],
    to_restore: &HashSet<&ObjectKey>,
    orphaned: &[ObjectKey],
    force: bool,
) -> Result<Fresh, String> {
    let mut restored = Fresh::default();
    let drifted: Vec<Desired> = desired
        .iter()
        .filter(|d| to_restore.contains(&d.key))
        .cloned()
        .collect();
    ensure_namespaces(agent, &drifted).await?;
    let mut refused = None;
    for object in &drifted {
        let outcome = match apply_one(agent, object).await {
            Err(kube::Error::Api(e)) if force && e.code == 422 => {
                delete_owned(agent, &object.key, name).await?;
                apply_one(agent, object).await
            }
            outcome => outcome,
        };
        match outcome {
            Ok(live) => {
                restored.written.insert(object.key.clone(), live);
            }
            Err(error) => {
                refused.get_or_insert(refusal(&object.key, &error));
            }
        }
    }
    for orphan in orphaned {
        delete_owned(agent, orphan, name).await?;
        restored.deleted.insert(orphan.clone());
    }
    match refused {
        Some(message) => Err(message),
        None => Ok(restored),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_is_the_same_in_any_version_of_its_group() {
        let key = |api_version: &str, kind: &str| ObjectKey {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: Some("web".into()),
            name: "budget".into(),
        };
        assert_eq!(
            key("policy/v1beta1", "PodDisruptionBudget"),
            key("policy/v1", "PodDisruptionBudget")
        );
        let set: BTreeSet<ObjectKey> = [key("policy/v1beta1", "PodDisruptionBudget")].into();
        assert!(set.contains(&key("policy/v1", "PodDisruptionBudget")));
        assert_ne!(key("v1", "ConfigMap"), key("v1", "Secret"));
        assert_ne!(key("a.example/v1", "Thing"), key("b.example/v1", "Thing"));
    }
}
