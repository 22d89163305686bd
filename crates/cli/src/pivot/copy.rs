//! Writing a graph somewhere and taking it away from where it was. Every step can be run
//! again after a crash: an object created by a move carries its source uid in an
//! annotation, so a second attempt finds its own work instead of duplicating it.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

use anyhow::{Context as _, bail};
use kube::api::{
    Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, PropagationPolicy,
};
use kube::core::ApiResource;
use kube::discovery::{ApiCapabilities, Scope};
use serde_json::{Value, json};

use super::graph::{Graph, Object, Served, creation_order, list_all, servers_own};
use super::journal::Entry;
use kube::ResourceExt;

/// On every object a move created: the uid it had in the source.
pub const MOVED_FROM: &str = "lariat.dev/moved-from";

/// A server objects are read from or written to.
pub struct Server {
    pub client: kube::Client,
    pub served: Served,
    /// Its URL, as the kubeconfig names it.
    pub url: String,
    /// What the server is whatever its address: the sha256 of the CA its kubeconfig
    /// trusts (the URL if it names none), so a server restarted on another port, or reached
    /// under another name, is still itself.
    pub identity: String,
}

impl Server {
    pub async fn connect(config: kube::Config, what: &str) -> anyhow::Result<Server> {
        let identity = match config.root_cert.as_ref().and_then(|c| c.first()) {
            Some(ca) => lariat_apiserver::identity::sha256_hex(ca),
            None => config.cluster_url.to_string(),
        };
        let url = config
            .cluster_url
            .to_string()
            .trim_end_matches('/')
            .to_string();
        let client = kube::Client::try_from(config)?;
        let served = Served::discover(&client, what).await?;
        Ok(Server {
            client,
            served,
            url,
            identity,
        })
    }

    fn api(
        &self,
        gvk: &kube::core::GroupVersionKind,
        namespace: &str,
    ) -> anyhow::Result<(Api<DynamicObject>, ApiCapabilities)> {
        let (resource, capabilities) =
            self.served.discovery().resolve_gvk(gvk).with_context(|| {
                format!(
                    "{} does not serve {}/{} {}",
                    self.url, gvk.group, gvk.version, gvk.kind
                )
            })?;
        Ok((
            self.api_for(&resource, &capabilities, namespace),
            capabilities,
        ))
    }

    fn api_for(
        &self,
        resource: &ApiResource,
        capabilities: &ApiCapabilities,
        namespace: &str,
    ) -> Api<DynamicObject> {
        if capabilities.scope == Scope::Namespaced {
            Api::namespaced_with(self.client.clone(), namespace, resource)
        } else {
            Api::all_with(self.client.clone(), resource)
        }
    }

    /// The objects of `entries` as they are now (all of them, or an error naming the first
    /// one missing).
    pub async fn read(&self, entries: &[Entry]) -> anyhow::Result<Graph> {
        let mut objects = Vec::with_capacity(entries.len());
        for entry in entries {
            let gvk = entry.gvk();
            let (api, capabilities) = self.api(&gvk, &entry.namespace)?;
            let object = api
                .get_opt(&entry.name)
                .await
                .map_err(|e| crate::connect::refused(e, &format!("read {}", entry.display())))?
                .with_context(|| format!("{} is gone from the source", entry.display()))?;
            if object.metadata.uid.as_deref() != Some(entry.uid.as_str()) {
                bail!(
                    "{} in the source was deleted and made again since the move began",
                    entry.display()
                );
            }
            let resource = self
                .served
                .discovery()
                .resolve_gvk(&gvk)
                .map(|(r, _)| r)
                .unwrap_or_else(|| ApiResource::from_gvk(&gvk));
            objects.push(Object {
                group: gvk.group,
                version: gvk.version,
                kind: gvk.kind,
                plural: resource.plural,
                namespaced: capabilities.scope == Scope::Namespaced,
                object,
            });
        }
        Ok(Graph { objects })
    }

    /// Sets `spec.paused` on these Clusters: true, or back to what it was.
    pub async fn pause(
        &self,
        clusters: &[&Entry],
        paused: impl Fn(&str) -> bool,
    ) -> anyhow::Result<()> {
        for cluster in clusters {
            let (api, _) = self.api(&cluster.gvk(), &cluster.namespace)?;
            let value = if paused(&cluster.name) {
                json!(true)
            } else {
                Value::Null
            };
            match api
                .patch(
                    &cluster.name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"paused": value}})),
                )
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(e) => {
                    return Err(crate::connect::refused(
                        e,
                        &format!("set spec.paused on {}", cluster.display()),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Creates the graph here, owners first, each owner reference pointing at its owner's
    /// new uid, Clusters paused and status as it was. An object already here from an earlier
    /// attempt at the same move is taken as created; a cluster-wide one made by someone
    /// else is left as it is (it may serve other clusters here). Returns how many were created.
    pub async fn create(&self, graph: &Graph) -> anyhow::Result<usize> {
        let mut uids: HashMap<String, String> = HashMap::new();
        let mut created = 0;
        for namespace in graph
            .objects
            .iter()
            .filter(|o| o.namespaced)
            .map(Object::namespace)
            .collect::<HashSet<_>>()
        {
            ensure_namespace(&self.client, namespace).await?;
        }
        for object in &graph.objects {
            let (api, capabilities) = self.api(&object.gvk(), object.namespace())?;
            let body = prepared(object, &uids)?;
            let written = match api.create(&PostParams::default(), &body).await {
                Ok(written) => {
                    created += 1;
                    written
                }
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    let existing = api.get(object.name()).await?;
                    let ours = moved_from(&existing) == Some(object.uid());
                    if !ours && object.namespaced {
                        bail!(
                            "{} is already in the target, not from this move: delete it there, or move into another server",
                            object.display("")
                        );
                    }
                    existing
                }
                Err(e) => {
                    return Err(crate::connect::refused(
                        e,
                        &format!("create {} in the target", object.display("")),
                    ));
                }
            };
            let new_uid = written.metadata.uid.clone().unwrap_or_default();
            uids.insert(object.uid().to_string(), new_uid);
            let has_status = capabilities
                .subresources
                .iter()
                .any(|(r, _)| r.plural == "status");
            let status = &object.object.data["status"];
            if has_status
                && !status.is_null()
                && moved_from(&written) == Some(object.uid())
                && written.data["status"] != *status
            {
                // A merge patch, not a replace over the version just created: the target's
                // controllers may already have written the copy's status (its `Paused`
                // condition), and the source's status wins whichever came first.
                let patch = Patch::Merge(serde_json::json!({ "status": status }));
                api.patch_status(object.name(), &PatchParams::default(), &patch)
                    .await
                    .map_err(|e| {
                        crate::connect::refused(
                            e,
                            &format!("write the status of {} in the target", object.display("")),
                        )
                    })?;
            }
        }
        Ok(created)
    }

    /// Reads every object of the graph back and compares it with the source: its labels,
    /// its spec (or data) and its owners. The target may add defaults, never drop or change.
    pub async fn verify(&self, graph: &Graph) -> anyhow::Result<()> {
        let source_kinds: HashMap<&str, (&str, &str)> = graph
            .objects
            .iter()
            .map(|o| (o.uid(), (o.kind.as_str(), o.name())))
            .collect();
        for object in &graph.objects {
            let (api, _) = self.api(&object.gvk(), object.namespace())?;
            let what = object.display("");
            let copy = api.get_opt(object.name()).await?.with_context(|| {
                format!("{what} is missing from the target after it was written")
            })?;
            if moved_from(&copy) != Some(object.uid()) && object.namespaced {
                bail!("{what} in the target is not the copy this move wrote");
            }
            for field in ["spec", "data", "stringData", "type"] {
                let mut original = object.object.data[field].clone();
                if object.is_cluster() && field == "spec" {
                    // Paused here until the end of the move, whatever it was.
                    original["paused"] = Value::Null;
                }
                if !original.is_null() && !contains(&copy.data[field], &original) {
                    bail!("{what} in the target differs from the original in its {field}");
                }
            }
            let labels = |o: &DynamicObject| o.metadata.labels.clone().unwrap_or_default();
            if !labels(&object.object)
                .iter()
                .all(|(k, v)| labels(&copy).get(k) == Some(v))
            {
                bail!("{what} in the target lacks labels the original has");
            }
            let owners = |o: &DynamicObject, names: &dyn Fn(&str) -> Option<(String, String)>| {
                o.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .filter_map(|r| names(&r.uid))
                    .collect::<HashSet<_>>()
            };
            let in_graph = |uid: &str| {
                source_kinds
                    .get(uid)
                    .map(|(k, n)| (k.to_string(), n.to_string()))
            };
            let wanted = owners(&object.object, &in_graph);
            let copied: HashSet<(String, String)> = copy
                .metadata
                .owner_references
                .iter()
                .flatten()
                .map(|r| (r.kind.clone(), r.name.clone()))
                .collect();
            if !wanted.is_subset(&copied) && object.namespaced {
                bail!("{what} in the target lost an owner the original has");
            }
        }
        Ok(())
    }

    /// Whether this server holds a copy of every namespaced object of `entries` made by the
    /// move: checked before the source gives anything up, whatever a journal says.
    pub async fn holds(&self, entries: &[Entry]) -> anyhow::Result<()> {
        for entry in entries.iter().filter(|e| !e.namespace.is_empty()) {
            let (api, _) = self.api(&entry.gvk(), &entry.namespace)?;
            let copy = api.get_opt(&entry.name).await.map_err(|e| {
                crate::connect::refused(e, &format!("read {} in the target", entry.display()))
            })?;
            if copy.as_ref().and_then(moved_from) != Some(entry.uid.as_str()) {
                bail!(
                    "the target does not hold the move's copy of {}: nothing more is deleted from the source; run the move again, or --abort it",
                    entry.display()
                );
            }
        }
        Ok(())
    }

    /// Deletes these objects, what they own last, and then removes their finalizers: their
    /// Clusters are paused, so no controller here acts on the deletion. Dependents are
    /// orphaned, so what the user chose to leave stays. Cluster-wide objects stay: they may
    /// serve clusters that do not move. Gone already is fine.
    pub async fn delete(&self, entries: &[Entry], only_ours: bool) -> anyhow::Result<usize> {
        let mut deleted = 0;
        for entry in entries.iter().rev() {
            let (api, capabilities) = self.api(&entry.gvk(), &entry.namespace)?;
            if capabilities.scope != Scope::Namespaced {
                continue;
            }
            let Some(object) = api.get_opt(&entry.name).await? else {
                continue;
            };
            let ours = if only_ours {
                moved_from(&object) == Some(entry.uid.as_str())
            } else {
                object.metadata.uid.as_deref() == Some(entry.uid.as_str())
            };
            if !ours {
                continue;
            }
            let params = DeleteParams {
                propagation_policy: Some(PropagationPolicy::Orphan),
                preconditions: Some(kube::api::Preconditions {
                    uid: object.metadata.uid.clone(),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            // Deleted first, then its finalizers removed: no controller may add one to an
            // object being deleted, so nothing holds it after. The garbage collector's
            // `orphan` finalizer stays, to orphan its dependents.
            let deleting = match api.delete(&entry.name, &params).await {
                Ok(either) => either.left(),
                Err(kube::Error::Api(status)) if status.code == 404 => continue,
                Err(e) => {
                    return Err(crate::connect::refused(
                        e,
                        &format!("delete {}", entry.display()),
                    ));
                }
            };
            deleted += 1;
            let Some(deleting) = deleting else {
                continue;
            };
            strip_finalizers(&api, deleting, &entry.display()).await?;
        }
        Ok(deleted)
    }

    /// Deletes the server's own records of the moved objects (a ClusterConnection, Fleet's
    /// Cluster: what [`servers_own`] names and the objects own): deleting the objects with
    /// orphaned dependents left them behind, and the server's controllers, paused, do not.
    pub async fn forget(&self, entries: &[Entry]) -> anyhow::Result<()> {
        let moved = Moved::of(entries);
        for group in self.served.discovery().groups() {
            for (resource, capabilities) in group.recommended_resources() {
                if servers_own(&resource.group, &resource.kind).is_none()
                    || !capabilities.supports_operation(kube::discovery::verbs::LIST)
                {
                    continue;
                }
                for record in list_all(&self.client, &resource).await? {
                    if !moved.owns(&record) {
                        continue;
                    }
                    let namespace = record.metadata.namespace.clone().unwrap_or_default();
                    match self
                        .api_for(&resource, &capabilities, &namespace)
                        .delete(&record.name_any(), &DeleteParams::default())
                        .await
                    {
                        Ok(_) => {}
                        Err(kube::Error::Api(status)) if status.code == 404 => {}
                        Err(e) => {
                            return Err(crate::connect::refused(
                                e,
                                &format!("delete {} {}", resource.kind, record.name_any()),
                            ));
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// Removes every finalizer but the garbage collector's `orphan` from an object being
/// deleted, written against the version read (the collector changes the list too: a stale
/// write would add back a finalizer it removed, which the API refuses).
async fn strip_finalizers(
    api: &Api<DynamicObject>,
    mut object: DynamicObject,
    what: &str,
) -> anyhow::Result<()> {
    for _ in 0..10 {
        let finalizers = object.metadata.finalizers.clone().unwrap_or_default();
        let kept: Vec<&String> = finalizers.iter().filter(|f| *f == "orphan").collect();
        if kept.len() == finalizers.len() {
            return Ok(());
        }
        let name = object.metadata.name.clone().unwrap_or_default();
        let patch = json!({"metadata": {"finalizers": kept, "resourceVersion": object.metadata.resource_version}});
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 || status.code == 403 => {
                match api.get_opt(&name).await? {
                    Some(now) => object = now,
                    None => return Ok(()),
                }
            }
            Err(e) => {
                return Err(crate::connect::refused(
                    e,
                    &format!("remove the finalizers of {what}"),
                ));
            }
        }
    }
    anyhow::bail!("cannot remove the finalizers of {what}: it keeps changing; run the move again")
}

/// The source uid a moved object came from.
pub fn moved_from(object: &DynamicObject) -> Option<&str> {
    object
        .metadata
        .annotations
        .as_ref()?
        .get(MOVED_FROM)
        .map(String::as_str)
}

async fn ensure_namespace(client: &kube::Client, namespace: &str) -> anyhow::Result<()> {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    if api.get_opt(namespace).await?.is_some() {
        return Ok(());
    }
    let body = serde_json::from_value(json!({"metadata": {"name": namespace}}))?;
    match api.create(&PostParams::default(), &body).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(e) => Err(crate::connect::refused(
            e,
            &format!("create namespace {namespace} in the target"),
        )),
    }
}

/// The object as it is written to the target: what the source server assigned (uid,
/// resourceVersion, timestamps, managedFields) dropped, owner references pointing at the
/// owners' new uids, the source uid recorded, and a Cluster paused until the move ends.
fn prepared(object: &Object, uids: &HashMap<String, String>) -> anyhow::Result<DynamicObject> {
    let mut copy = object.object.clone();
    let source_uid = object.uid().to_string();
    let meta = &mut copy.metadata;
    meta.uid = None;
    meta.resource_version = None;
    meta.creation_timestamp = None;
    meta.deletion_timestamp = None;
    meta.deletion_grace_period_seconds = None;
    meta.generation = None;
    meta.managed_fields = None;
    meta.self_link = None;
    if let Some(owners) = meta.owner_references.as_mut() {
        owners.retain_mut(|owner| match uids.get(&owner.uid) {
            Some(uid) => {
                owner.uid = uid.clone();
                true
            }
            None => false,
        });
    }
    meta.annotations
        .get_or_insert_with(Default::default)
        .insert(MOVED_FROM.to_string(), source_uid);
    if object.is_cluster() {
        copy.data["spec"]["paused"] = json!(true);
    }
    Ok(copy)
}

/// Whether `copy` holds everything `original` does (a server may add defaults).
fn contains(copy: &Value, original: &Value) -> bool {
    match (copy, original) {
        (Value::Object(copy), Value::Object(original)) => original
            .iter()
            .all(|(k, v)| v.is_null() || copy.get(k).is_some_and(|c| contains(c, v))),
        (Value::Array(copy), Value::Array(original)) => {
            copy.len() == original.len() && copy.iter().zip(original).all(|(c, o)| contains(c, o))
        }
        (copy, original) => copy == original,
    }
}

/// The largest file a restore reads: the API's own limit on an object.
const MAX_FILE_BYTES: u64 = 3 * 1024 * 1024;

/// clusterctl's file name for an object in a backup directory.
fn file_name(object: &Object) -> String {
    format!(
        "{}_{}_{}.yaml",
        object.kind,
        object.namespace(),
        object.name()
    )
}

/// Writes each object to its own YAML file, as `clusterctl move --to-directory` does.
pub fn write_directory(directory: &Path, graph: &Graph) -> anyhow::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(directory)
        .with_context(|| format!("cannot create {}", directory.display()))?;
    if std::fs::read_dir(directory)?.next().is_some() {
        bail!(
            "{} is not empty: write a backup into a new directory",
            directory.display()
        );
    }
    std::fs::set_permissions(
        directory,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .with_context(|| format!("cannot restrict {} to its owner", directory.display()))?;
    for object in &graph.objects {
        let mut value = serde_json::to_value(&object.object)?;
        value["metadata"]
            .as_object_mut()
            .map(|m| m.remove("managedFields"));
        let path = directory.join(file_name(object));
        let text = serde_yaml_ng::to_string(&value)?;
        // Secrets (CA keys, kubeconfigs) are among them: readable by their owner only.
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("cannot write {}", path.display()))?;
        std::io::Write::write_all(&mut file, text.as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// Reads a backup directory's objects (every `.yaml` file in it), in creation order.
pub fn read_directory(directory: &Path) -> anyhow::Result<Graph> {
    let entries = std::fs::read_dir(directory).with_context(|| {
        format!(
            "cannot read {}: pass a directory written by --to-directory",
            directory.display()
        )
    })?;
    let mut objects = Vec::new();
    for entry in entries {
        let path = entry?.path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        // Only the files a backup writes: no symlink followed out of the directory, nothing
        // larger than an object can be, and a bad file named, never quoted.
        let meta = std::fs::symlink_metadata(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        if !meta.is_file() {
            bail!(
                "{} is not a regular file: a backup holds only the files --to-directory wrote",
                path.display()
            );
        }
        if meta.len() > MAX_FILE_BYTES {
            bail!(
                "{} is larger than any object ({} bytes): it was not written by --to-directory",
                path.display(),
                meta.len()
            );
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let not_object = || {
            anyhow::anyhow!(
                "{} is not a Kubernetes object (a YAML mapping with apiVersion, kind and metadata)",
                path.display()
            )
        };
        let value: Value = serde_yaml_ng::from_str(&text).map_err(|_| not_object())?;
        if !value.is_object() {
            return Err(not_object());
        }
        let object = Object::from_json(value).map_err(|_| not_object())?;
        if object.uid().is_empty() {
            bail!(
                "{} has no metadata.uid: it was not written by --to-directory",
                path.display()
            );
        }
        objects.push(object);
    }
    if objects.is_empty() {
        bail!(
            "{} holds no objects (.yaml files written by --to-directory)",
            directory.display()
        );
    }
    Ok(Graph {
        objects: creation_order(objects),
    })
}

/// The objects a move's journal names, as the server's records of them are found.
struct Moved<'a> {
    /// Each uid with the namespace the journal puts it in: an owner reference counts only
    /// within that namespace (Kubernetes' own rule for owners), so a forged journal that pairs
    /// a name here with the uid of another namespace's Cluster cannot reach that namespace's
    /// records (the bounded-cost probe deleted team-b's this way).
    uids: HashMap<&'a str, &'a str>,
    /// Clusters by namespace and name: a record named as its Cluster (a ClusterConnection,
    /// Fleet's Cluster) is found even once its owner reference is gone.
    clusters: HashSet<(&'a str, &'a str)>,
}

impl<'a> Moved<'a> {
    fn of(entries: &'a [Entry]) -> Moved<'a> {
        Moved {
            uids: entries
                .iter()
                .map(|e| (e.uid.as_str(), e.namespace.as_str()))
                .collect(),
            clusters: entries
                .iter()
                .filter(|e| e.is_cluster())
                .map(|e| (e.namespace.as_str(), e.name.as_str()))
                .collect(),
        }
    }

    /// Whether `record` is the server's record of a moved object.
    fn owns(&self, record: &DynamicObject) -> bool {
        let namespace = record.metadata.namespace.as_deref().unwrap_or_default();
        let name = record.metadata.name.as_deref().unwrap_or_default();
        self.clusters.contains(&(namespace, name))
            || record
                .owner_references()
                .iter()
                .any(|o| self.uids.get(o.uid.as_str()) == Some(&namespace))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression (the bounded-cost probe): a forged journal naming Cluster team-a/dev with
    /// the uid of team-b/prod made `lariat move -n team-a` delete team-b's ClusterAccess and
    /// ClusterConnection.
    #[test]
    fn only_records_in_the_moved_objects_namespace_are_forgotten() {
        let record = |namespace: &str, name: &str, owner_uid: &str| -> DynamicObject {
            serde_json::from_value(json!({
                "apiVersion": "management.lariat.dev/v1", "kind": "ClusterConnection",
                "metadata": {"name": name, "namespace": namespace, "ownerReferences": [{
                    "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
                    "name": "prod", "uid": owner_uid}]},
            }))
            .unwrap()
        };
        let forged = [Entry {
            api_version: "cluster.x-k8s.io/v1beta1".into(),
            kind: "Cluster".into(),
            namespace: "team-a".into(),
            name: "dev".into(),
            uid: "uid-of-team-b-prod".into(),
        }];
        let moved = Moved::of(&forged);
        assert!(!moved.owns(&record("team-b", "prod", "uid-of-team-b-prod")));
        assert!(!moved.owns(&record("team-b", "other", "uid-of-team-b-prod")));
        assert!(moved.owns(&record("team-a", "access", "uid-of-team-b-prod")));
        assert!(
            moved.owns(&record("team-a", "dev", "unrelated")),
            "named as its Cluster"
        );
        assert!(!moved.owns(&record("team-a", "other", "unrelated")));
    }

    #[test]
    fn a_copy_may_add_defaults_but_not_drop_or_change() {
        let original = json!({"a": 1, "b": {"c": [1, {"d": 2}]}, "e": null});
        assert!(contains(
            &json!({"a": 1, "b": {"c": [1, {"d": 2, "x": 3}]}, "y": true}),
            &original
        ));
        assert!(!contains(
            &json!({"a": 1, "b": {"c": [1, {"d": 3}]}}),
            &original
        ));
        assert!(!contains(&json!({"a": 1, "b": {"c": [1]}}), &original));
        assert!(!contains(&json!({"b": {"c": [1, {"d": 2}]}}), &original));
    }

    #[test]
    fn a_prepared_object_keeps_its_owners_under_their_new_uids() {
        let object = Object::from_json(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
            "metadata": {"name": "dev", "namespace": "ns", "uid": "u-dev", "resourceVersion": "7",
                "creationTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["f"],
                "ownerReferences": [{"apiVersion": "v1", "kind": "A", "name": "a", "uid": "u-a"},
                                    {"apiVersion": "v1", "kind": "B", "name": "b", "uid": "u-gone"}]},
            "spec": {"paused": false}}))
        .unwrap();
        let uids = HashMap::from([("u-a".to_string(), "new-a".to_string())]);
        let copy = prepared(&object, &uids).unwrap();
        assert_eq!(copy.metadata.uid, None);
        assert_eq!(copy.metadata.resource_version, None);
        assert_eq!(copy.metadata.finalizers, Some(vec!["f".to_string()]));
        let owners = copy.metadata.owner_references.unwrap();
        assert_eq!(owners.len(), 1);
        assert_eq!(owners[0].uid, "new-a");
        assert_eq!(copy.metadata.annotations.unwrap()[MOVED_FROM], "u-dev");
        assert_eq!(copy.data["spec"]["paused"], true);
    }
}
