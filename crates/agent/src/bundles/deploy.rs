//! Applying a BundleDeployment's manifests to this cluster, and the record of what it applied.
//!
//! The record is a ConfigMap per BundleDeployment in `lariat-system` (as Helm keeps a release
//! Secret): which version was applied and every object it applied. It is written before an
//! apply that adds objects (so an object is never applied without being recorded, even if the
//! agent dies mid-way) and after the apply and prune succeed, so what leaves the manifests,
//! or a whole BundleDeployment that goes, is deleted even after a restart.

use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::monitor::Fresh;
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
}

impl Kind {
    pub fn key(&self) -> String {
        format!("{}/{}", self.resource.api_version, self.resource.kind)
    }
}

/// Which object: what the record keeps and the status names.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectKey {
    pub api_version: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
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

/// What a BundleDeployment applied.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The version last applied in full (empty while the first is on its way).
    pub deployment_id: String,
    pub keep_resources: bool,
    pub resources: BTreeSet<ObjectKey>,
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
    Some(Record {
        deployment_id: data.get("deploymentID").cloned().unwrap_or_default(),
        keep_resources: data.get("keepResources").is_some_and(|v| v == "true"),
        resources: serde_json::from_str(data.get("resources")?).ok()?,
    })
}

async fn write_record(agent: &Agent, name: &str, record: &Record) -> Result<(), Error> {
    crate::ensure_namespace(&agent.downstream, CREDENTIAL_NAMESPACE).await?;
    let resources =
        serde_json::to_string(&record.resources).map_err(|e| Error::Invalid(e.to_string()))?;
    let body = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": record_name(name), "namespace": CREDENTIAL_NAMESPACE,
                     "labels": {RECORD_LABEL: "bundle-deployment"}},
        "data": {"bundleDeployment": name, "deploymentID": record.deployment_id,
                 "keepResources": record.keep_resources.to_string(), "resources": resources},
    });
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

/// The BundleDeployments that have a record here.
pub(super) async fn recorded(agent: &Agent) -> Result<Vec<String>, Error> {
    let list = records(agent)
        .list(&ListParams::default().labels(RECORD_LABEL))
        .await?;
    let mut names = Vec::new();
    let mut cache = agent.records.lock().await;
    for cm in list {
        let Some(name) = cm.data.as_ref().and_then(|d| d.get("bundleDeployment")) else {
            continue;
        };
        cache.insert(name.clone(), parse_record(&cm));
        names.push(name.clone());
    }
    Ok(names)
}

/// Deletes what BundleDeployment `name` applied (unless it kept its resources), then its record.
pub(super) async fn uninstall(agent: &Agent, name: &str) -> Result<(), Error> {
    let Some(record) = record(agent, name).await? else {
        return Ok(());
    };
    if !record.keep_resources {
        for key in record.resources.iter().rev() {
            delete(agent, key).await.map_err(Error::Invalid)?;
        }
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
    tracing::info!(bundle = %name, "deleted what a removed bundle applied");
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
    options: &lariat_api::fleet::BundleDeploymentOptions,
) -> Result<Vec<Desired>, String> {
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
        let found = kind_of(agent, api_version, kind, manifests).await?;
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

/// Server-side apply of one object, owning every field it sets. A kind whose definition was
/// applied moments ago may not be served yet: that is retried for a few seconds.
async fn apply_one(agent: &Agent, desired: &Desired) -> Result<DynamicObject, String> {
    let api = api_for(agent, &desired.kind, desired.key.namespace.as_deref());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mut attempts = 0;
    loop {
        match api
            .patch(&desired.key.name, &params, &Patch::Apply(&desired.object))
            .await
        {
            Ok(object) => return Ok(object),
            Err(kube::Error::Api(e)) if e.code == 404 && attempts < 20 => {
                attempts += 1;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(kube::Error::Api(e)) => return Err(format!("{}: {}", desired.key, e.message)),
            Err(e) => return Err(format!("{}: {e}", desired.key)),
        }
    }
}

/// Deletes one object; one already gone is fine.
async fn delete(agent: &Agent, key: &ObjectKey) -> Result<(), String> {
    let kind = kind_of(agent, &key.api_version, &key.kind, &[]).await?;
    match api_for(agent, &kind, key.namespace.as_deref())
        .delete(&key.name, &DeleteParams::background())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(kube::Error::Api(e)) => Err(format!("cannot delete {key}: {}", e.message)),
        Err(e) => Err(format!("cannot delete {key}: {e}")),
    }
}

/// Creates the namespaces the objects go to that neither exist nor are among them. They are
/// left in place when the bundle goes, as `helm install --create-namespace` leaves them.
async fn ensure_namespaces(agent: &Agent, desired: &[Desired]) -> Result<(), String> {
    let declared: HashSet<&str> = desired
        .iter()
        .filter(|d| d.key.kind == "Namespace" && d.key.api_version == "v1")
        .map(|d| d.key.name.as_str())
        .collect();
    let needed: BTreeSet<&str> = desired
        .iter()
        .filter_map(|d| d.key.namespace.as_deref())
        .filter(|ns| !declared.contains(ns))
        .collect();
    let namespaces: Api<Namespace> = Api::all(agent.downstream.clone());
    for namespace in needed {
        if agent.namespaces.lock().expect("lock").contains(namespace) {
            continue;
        }
        let exists = namespaces
            .get_opt(namespace)
            .await
            .map_err(|e| format!("cannot read namespace {namespace}: {e}"))?
            .is_some();
        if !exists {
            let object: Namespace =
                serde_json::from_value(json!({"metadata": {"name": namespace}}))
                    .map_err(|e| e.to_string())?;
            match namespaces.create(&PostParams::default(), &object).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(kube::Error::Api(e)) => {
                    return Err(format!(
                        "cannot create namespace {namespace}: {}",
                        e.message
                    ));
                }
                Err(e) => return Err(format!("cannot create namespace {namespace}: {e}")),
            }
        }
        agent
            .namespaces
            .lock()
            .expect("lock")
            .insert(namespace.to_string());
    }
    Ok(())
}

/// Applies a version: records the objects it adds, creates missing namespaces, applies every
/// object, deletes what the previous version had and this one does not (unless
/// `keepResources`), and records the version as applied. Returns the objects as applied, or
/// what the API refused (the first refusal, and how many more).
pub(super) async fn apply(
    agent: &Agent,
    name: &str,
    deployment_id: &str,
    options: &lariat_api::fleet::BundleDeploymentOptions,
    desired: &[Desired],
) -> Result<Fresh, String> {
    let previous = record(agent, name)
        .await
        .map_err(|e| format!("cannot read what was applied before: {e}"))?
        .unwrap_or_default();
    let wanted: BTreeSet<ObjectKey> = desired.iter().map(|d| d.key.clone()).collect();
    if !wanted.is_subset(&previous.resources) {
        let intent = Record {
            deployment_id: previous.deployment_id.clone(),
            keep_resources: options.keep_resources,
            resources: previous.resources.union(&wanted).cloned().collect(),
        };
        write_record(agent, name, &intent)
            .await
            .map_err(|e| format!("cannot record what is about to be applied: {e}"))?;
    }
    ensure_namespaces(agent, desired).await?;
    let mut fresh = Fresh::default();
    let mut refused = Vec::new();
    for object in desired {
        match apply_one(agent, object).await {
            Ok(live) => {
                fresh.written.insert(object.key.clone(), live);
            }
            Err(message) => refused.push(message),
        }
    }
    if let Some(first) = refused.first() {
        agent.namespaces.lock().expect("lock").clear();
        return Err(match refused.len() {
            1 => first.clone(),
            n => format!("{first} (and {} more)", n - 1),
        });
    }
    for gone in previous.resources.difference(&wanted) {
        if options.keep_resources {
            release(agent, gone).await?;
        } else {
            delete(agent, gone).await?;
        }
        fresh.deleted.insert(gone.clone());
    }
    let done = Record {
        deployment_id: deployment_id.to_string(),
        keep_resources: options.keep_resources,
        resources: wanted,
    };
    write_record(agent, name, &done)
        .await
        .map_err(|e| format!("cannot record what was applied: {e}"))?;
    tracing::info!(bundle = %name, %deployment_id, objects = desired.len(), "applied");
    Ok(fresh)
}

/// An object kept when it left the manifests (`keepResources`) no longer belongs to the
/// BundleDeployment: its label goes, so it is neither watched nor reported as orphaned.
async fn release(agent: &Agent, key: &ObjectKey) -> Result<(), String> {
    let kind = kind_of(agent, &key.api_version, &key.kind, &[]).await?;
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
/// field) is deleted and created again.
pub(super) async fn correct(
    agent: &Agent,
    desired: &[Desired],
    seen: &super::monitor::Seen,
    force: bool,
) -> Result<Fresh, String> {
    let mut restored = Fresh::default();
    let drifted: HashSet<&ObjectKey> = seen
        .modified
        .iter()
        .map(|m| &m.key)
        .chain(seen.missing.iter())
        .collect();
    let mut refused = None;
    for object in desired.iter().filter(|d| drifted.contains(&d.key)) {
        let outcome = match apply_one(agent, object).await {
            Err(_) if force => {
                delete(agent, &object.key).await?;
                apply_one(agent, object).await
            }
            outcome => outcome,
        };
        match outcome {
            Ok(live) => {
                restored.written.insert(object.key.clone(), live);
            }
            Err(message) => {
                refused.get_or_insert(message);
            }
        }
    }
    for orphan in &seen.orphaned {
        delete(agent, orphan).await?;
        restored.deleted.insert(orphan.clone());
    }
    match refused {
        Some(message) => Err(message),
        None => Ok(restored),
    }
}
