//! Each Cluster's ClusterAccess: the RBAC its agent keeps in its cluster for Rancher's
//! bindings (a ClusterRole per RoleTemplate in use and the bindings of it), written from
//! Rancher's kinds and the Clusters, and where each binding stands downstream
//! (`status.summary`), from where each ClusterAccess stands. Requests through the proxy
//! impersonate the caller, so the downstream API server decides what they may do there.
//!
//! A controller like any other: it watches through the API (kube-rs watchers) and writes
//! through the client it is given, the leader's fenced one.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::ApiResource;
use kube::runtime::{WatchStreamExt, watcher};
use lariat_api::rancher::KINDS;
use serde_json::{Value, json};

use super::grants::Objects;

/// Rancher's kinds, the Clusters and their ClusterAccesses, as [`publish_accesses`] last saw
/// them.
#[derive(Default)]
struct AccessInputs {
    objects: Objects,
    /// `NAMESPACE/NAME` → uid.
    clusters: HashMap<String, String>,
    /// `NAMESPACE/NAME` → what is stored of its ClusterAccess.
    accesses: HashMap<String, Access>,
    /// A binding's key (`PLURAL/[NAMESPACE/]NAME`) → its stored `status`.
    statuses: HashMap<String, Value>,
}

/// A ClusterAccess as stored: what it asks and what its agent last said of it.
#[derive(PartialEq)]
struct Access {
    spec: Value,
    generation: i64,
    observed: i64,
    /// The `Applied` condition: whether, and why not.
    applied: Option<(bool, String)>,
}

impl Access {
    fn of(mut object: Value) -> Access {
        let applied = object["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Applied")
            .map(|c| {
                (
                    c["status"] == "True",
                    c["message"].as_str().unwrap_or_default().to_string(),
                )
            });
        Access {
            generation: object["metadata"]["generation"]
                .as_i64()
                .unwrap_or_default(),
            observed: object["status"]["observedGeneration"]
                .as_i64()
                .unwrap_or(-1),
            applied,
            spec: object["spec"].take(),
        }
    }
}

/// Where a binding stands in the downstream clusters it reaches, as Rancher's summaries say.
#[derive(Clone, PartialEq)]
enum Remote {
    Complete,
    InProgress,
    Error(String),
}

impl Remote {
    /// The worse of two: an error wins, then what is still in progress.
    fn and(self, other: Remote) -> Remote {
        match (self, other) {
            (Remote::Error(e), _) | (_, Remote::Error(e)) => Remote::Error(e),
            (Remote::InProgress, _) | (_, Remote::InProgress) => Remote::InProgress,
            _ => Remote::Complete,
        }
    }

    /// A binding's `status`: on lariat itself it is in force at once (the RBAC index follows
    /// it), so its summary is the downstream one.
    fn status(&self) -> Value {
        let summary = match self {
            Remote::Complete => "Complete",
            Remote::InProgress => "InProgress",
            Remote::Error(_) => "Error",
        };
        let mut status =
            json!({"summary": summary, "summaryLocal": "Complete", "summaryRemote": summary});
        if let Remote::Error(message) = self {
            status["remoteConditions"] =
                json!([{"type": "Applied", "status": "False", "message": message}]);
        }
        status
    }
}

/// What to write: ClusterAccesses (the Cluster `NAMESPACE/NAME`, its uid, the `spec` wanted)
/// and bindings' statuses (the binding's key, `PLURAL/[NAMESPACE/]NAME`, the `status` wanted).
#[derive(Default)]
struct Pending {
    accesses: Vec<(String, String, Value)>,
    statuses: Vec<(String, Value)>,
}

impl AccessInputs {
    /// Where the ClusterAccess of Cluster `key` stands against the `spec` wanted of it.
    fn remote(&self, key: &str, wanted: &Value) -> Remote {
        match self.accesses.get(key) {
            Some(access) if access.spec == *wanted && access.observed == access.generation => {
                match &access.applied {
                    Some((true, _)) => Remote::Complete,
                    Some((false, why)) => Remote::Error(format!("cluster {key}: {why}")),
                    None => Remote::InProgress,
                }
            }
            _ => Remote::InProgress,
        }
    }

    /// The statuses of the bindings that differ from where they stand, given where each
    /// Cluster's access stands (`remote`, by Cluster key).
    fn statuses(&self, remote: &BTreeMap<&str, Remote>) -> Vec<(String, Value)> {
        let of_cluster = |key: String| {
            remote
                .get(key.as_str())
                .cloned()
                .unwrap_or(Remote::InProgress)
        };
        let objects = &self.objects;
        let mut wanted: Vec<(String, Remote)> = Vec::new();
        for (name, binding) in &objects.global_role_bindings {
            let reaches_clusters = objects
                .global_roles
                .get(&binding.global_role_name)
                .is_some_and(|role| !role.inherited_cluster_roles.is_empty());
            let state = if reaches_clusters {
                remote.values().cloned().fold(Remote::Complete, Remote::and)
            } else {
                Remote::Complete
            };
            wanted.push((format!("globalrolebindings/{name}"), state));
        }
        for (key, binding) in &objects.cluster_bindings {
            let namespace = key.split_once('/').map_or("", |(ns, _)| ns);
            let state = of_cluster(format!("{namespace}/{}", binding.cluster_name));
            wanted.push((format!("clusterroletemplatebindings/{key}"), state));
        }
        for (key, binding) in &objects.project_bindings {
            let namespace = key.split_once('/').map_or("", |(ns, _)| ns);
            let state = match objects.project_of(key, binding) {
                Some((cluster, _)) => of_cluster(format!("{namespace}/{cluster}")),
                None => Remote::Error(format!(
                    "project {} is not in namespace {namespace}",
                    binding.project_name
                )),
            };
            wanted.push((format!("projectroletemplatebindings/{key}"), state));
        }
        let mut differ: Vec<(String, Value)> = wanted
            .into_iter()
            .map(|(key, state)| (key, state.status()))
            .filter(|(key, status)| {
                let stored = self.statuses.get(key).unwrap_or(&Value::Null);
                [
                    "summary",
                    "summaryLocal",
                    "summaryRemote",
                    "remoteConditions",
                ]
                .iter()
                .any(|field| stored[field] != status[field])
            })
            .collect();
        differ.sort_by(|a, b| a.0.cmp(&b.0));
        differ
    }
}

/// What a watched object is.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Kind {
    /// One of Rancher's kinds, by plural.
    Rancher(&'static str),
    Cluster,
    Access,
}

impl Kind {
    fn resource(self) -> ApiResource {
        match self {
            Kind::Rancher(plural) => {
                let kind = KINDS
                    .iter()
                    .find(|(_, p)| *p == plural)
                    .map(|(k, _)| *k)
                    .expect("one of Rancher's kinds");
                lariat_api::rancher::resource(kind)
            }
            Kind::Cluster => crate::records::cluster_resource(),
            Kind::Access => lariat_api::management::cluster_access_resource(),
        }
    }

    fn all() -> Vec<Kind> {
        KINDS
            .iter()
            .map(|(_, plural)| Kind::Rancher(plural))
            .chain([Kind::Cluster, Kind::Access])
            .collect()
    }

    /// Where `object` is kept in [`AccessInputs`]: `PLURAL/[NAMESPACE/]NAME` for Rancher's
    /// kinds, `NAMESPACE/NAME` for the others.
    fn key(self, object: &DynamicObject) -> String {
        let name = object.metadata.name.clone().unwrap_or_default();
        let within = match &object.metadata.namespace {
            Some(namespace) => format!("{namespace}/{name}"),
            None => name,
        };
        match self {
            Kind::Rancher(plural) => format!("{plural}/{within}"),
            _ => within,
        }
    }
}

impl AccessInputs {
    /// Forgets every object of `kind` (a fresh list of it follows).
    fn clear(&mut self, kind: Kind) {
        match kind {
            Kind::Rancher(plural) => {
                let prefix = format!("{plural}/");
                let keys: Vec<String> = self
                    .statuses
                    .keys()
                    .filter(|key| key.starts_with(&prefix))
                    .cloned()
                    .collect();
                for key in keys {
                    self.statuses.remove(&key);
                }
                self.objects.forget(plural);
            }
            Kind::Cluster => self.clusters.clear(),
            Kind::Access => self.accesses.clear(),
        }
    }

    /// One object of `kind` as it is now (`None`: deleted). Returns whether it matters to what
    /// is written: a ClusterAccess's status does, a Cluster's change that keeps its uid does
    /// not.
    fn apply(&mut self, kind: Kind, key: &str, object: Option<Value>) -> bool {
        match kind {
            Kind::Rancher(_) => {
                let bytes = object
                    .as_ref()
                    .map(|o| serde_json::to_vec(o).unwrap_or_default());
                let granted = self.objects.apply(key, bytes.as_deref());
                let before = match object {
                    Some(mut object) if key.contains("bindings/") => {
                        self.statuses.insert(key.into(), object["status"].take())
                    }
                    _ => self.statuses.remove(key),
                };
                granted || before.as_ref() != self.statuses.get(key)
            }
            Kind::Access => {
                let before = match object {
                    Some(object) => self.accesses.insert(key.into(), Access::of(object)),
                    None => self.accesses.remove(key),
                };
                before.as_ref() != self.accesses.get(key)
            }
            Kind::Cluster => {
                // A Cluster being deleted gets no access written: its garbage collection takes
                // it.
                let live = object
                    .filter(|o| o["metadata"]["deletionTimestamp"].is_null())
                    .and_then(|o| o["metadata"]["uid"].as_str().map(String::from));
                let before = match live {
                    Some(uid) => self.clusters.insert(key.into(), uid),
                    None => self.clusters.remove(key),
                };
                before.as_ref() != self.clusters.get(key)
            }
        }
    }

    /// What to write now: the accesses that differ from what is wanted, and the bindings'
    /// statuses that differ from where they stand.
    fn pending(&self) -> Pending {
        let mut pending = Pending::default();
        // Ordered, so a binding that reaches several clusters in error names the same one
        // each time, and its status is written once.
        let mut remote = BTreeMap::new();
        for (key, uid) in &self.clusters {
            let Some((namespace, name)) = key.split_once('/') else {
                continue;
            };
            let spec = self.objects.cluster_access(namespace, name);
            remote.insert(key.as_str(), self.remote(key, &spec));
            if self.accesses.get(key).map(|a| &a.spec) != Some(&spec) {
                pending.accesses.push((key.clone(), uid.clone(), spec));
            }
        }
        pending.accesses.sort_by(|a, b| a.0.cmp(&b.0));
        pending.statuses = self.statuses(&remote);
        pending
    }
}

/// Keeps every Cluster's ClusterAccess equal to what Rancher's kinds say of it, until `stop`.
/// Level-based: after every batch of changes (to Rancher's kinds, the Clusters or the
/// ClusterAccesses themselves), once every kind has been listed, the accesses that differ
/// from what is wanted are written, through `client`.
pub(crate) async fn publish_accesses(
    client: kube::Client,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let (wake, woken) = tokio::sync::watch::channel(Arc::new(Pending::default()));
    let writer = tokio::spawn(write_when_woken(client.clone(), woken, stop.clone()));
    let streams = Kind::all().into_iter().map(|kind| {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &kind.resource());
        watcher(api, watcher::Config::default())
            .default_backoff()
            .map(move |event| (kind, event))
            .boxed()
    });
    let mut events = futures::stream::select_all(streams);
    let mut inputs = AccessInputs::default();
    // Kinds being listed (their view is partial) and kinds never listed yet.
    let mut listing: HashSet<Kind> = HashSet::new();
    let mut unlisted: HashSet<Kind> = Kind::all().into_iter().collect();
    let mut last_error = String::new();
    loop {
        let first = tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            event = events.next() => event,
        };
        let Some(first) = first else { break };
        let mut batch = vec![first];
        while let Some(Some(next)) = futures::FutureExt::now_or_never(events.next()) {
            batch.push(next);
        }
        let mut matters = false;
        for (kind, event) in batch {
            let event = match event {
                Ok(event) => event,
                Err(error) => {
                    // Each distinct failure is logged once; the watcher retries with backoff.
                    if error.to_string() != last_error {
                        last_error = error.to_string();
                        tracing::warn!(%error, ?kind, "cannot watch what clusters' accesses are made of; retrying");
                    }
                    continue;
                }
            };
            let value = |object: &DynamicObject| serde_json::to_value(object).ok();
            matters |= match event {
                watcher::Event::Init => {
                    listing.insert(kind);
                    inputs.clear(kind);
                    true
                }
                watcher::Event::InitApply(object) | watcher::Event::Apply(object) => {
                    inputs.apply(kind, &kind.key(&object), value(&object))
                }
                watcher::Event::Delete(object) => inputs.apply(kind, &kind.key(&object), None),
                watcher::Event::InitDone => {
                    listing.remove(&kind);
                    unlisted.remove(&kind);
                    true
                }
            };
        }
        if matters && listing.is_empty() && unlisted.is_empty() {
            let _ = wake.send(Arc::new(inputs.pending()));
        }
    }
    writer.abort();
}

/// Writes what is pending whenever it changes, and again after a failure (backing off to a
/// minute), until `stop`.
async fn write_when_woken(
    client: kube::Client,
    mut woken: tokio::sync::watch::Receiver<Arc<Pending>>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    const FIRST_RETRY: Duration = Duration::from_secs(1);
    let mut retry_in = FIRST_RETRY;
    let mut last_failure = String::new();
    loop {
        let pending = woken.borrow_and_update().clone();
        let failures = write(&client, &pending).await;
        // Each distinct failure is logged once; retries back off to a minute.
        if !failures.is_empty() && failures != last_failure {
            tracing::warn!(%failures, "cannot write clusters' accesses; retrying");
        }
        let failed = !failures.is_empty();
        retry_in = if failed {
            (retry_in * 2).min(Duration::from_secs(60))
        } else {
            FIRST_RETRY
        };
        last_failure = failures;
        tokio::select! {
            _ = stop.changed() => return,
            changed = woken.changed() => if changed.is_err() { return },
            // A write that failed is tried again, unless newer wishes came first.
            _ = tokio::time::sleep(retry_in), if failed => {}
        }
    }
}

fn params() -> PostParams {
    PostParams {
        field_manager: Some("lariat".into()),
        ..Default::default()
    }
}

/// Writes each pending ClusterAccess and binding status; what failed ("" when all were
/// written).
async fn write(client: &kube::Client, pending: &Pending) -> String {
    let resource = lariat_api::management::cluster_access_resource();
    let mut failures = Vec::new();
    // Accesses first: they are what takes effect downstream; statuses only report.
    for (key, uid, spec) in &pending.accesses {
        let (namespace, name) = key.split_once('/').unwrap_or_default();
        let accesses: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), namespace, &resource);
        let outcome = match accesses.get_opt(name).await {
            Ok(Some(current)) if current.data["spec"] == *spec => Ok(()),
            Ok(Some(mut current)) => {
                current.data["spec"] = spec.clone();
                accesses
                    .replace(name, &params(), &current)
                    .await
                    .map(|_| ())
            }
            Ok(None) => {
                let object: DynamicObject = match serde_json::from_value(json!({
                    "apiVersion": resource.api_version,
                    "kind": resource.kind,
                    "metadata": {
                        "name": name, "namespace": namespace,
                        "ownerReferences": [{
                            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
                            "name": name, "uid": uid, "controller": true,
                            "blockOwnerDeletion": true,
                        }],
                    },
                    "spec": spec,
                })) {
                    Ok(object) => object,
                    Err(e) => {
                        failures.push(format!("{key}: {e}"));
                        continue;
                    }
                };
                match accesses.create(&params(), &object).await {
                    // Made meanwhile: the next pass compares it.
                    Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
                    other => other.map(|_| ()),
                }
            }
            Err(e) => Err(e),
        };
        if let Err(e) = outcome {
            failures.push(format!("{key}: {e}"));
        }
    }
    for (key, status) in &pending.statuses {
        if let Err(e) = write_status(client, key, status).await {
            failures.push(format!("{key}: {e}"));
        }
    }
    failures.join("; ")
}

/// Sets the summary fields of binding `key` (`PLURAL/[NAMESPACE/]NAME`) to those of `status`.
async fn write_status(client: &kube::Client, key: &str, status: &Value) -> kube::Result<()> {
    let mut parts = key.split('/');
    let plural = parts.next().unwrap_or_default();
    let (namespace, name) = match (parts.next(), parts.next()) {
        (Some(namespace), Some(name)) => (Some(namespace), name),
        (Some(name), None) => (None, name),
        _ => return Ok(()),
    };
    let Some(plural) = KINDS.iter().map(|(_, p)| *p).find(|p| *p == plural) else {
        return Ok(());
    };
    let resource = Kind::Rancher(plural).resource();
    let api: Api<DynamicObject> = match namespace {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let Some(mut current) = api.get_opt(name).await? else {
        return Ok(());
    };
    if !current.data["status"].is_object() {
        current.data["status"] = json!({});
    }
    for field in [
        "summary",
        "summaryLocal",
        "summaryRemote",
        "remoteConditions",
    ] {
        match &status[field] {
            Value::Null => {
                current.data["status"]
                    .as_object_mut()
                    .expect("object")
                    .remove(field);
            }
            value => current.data["status"][field] = value.clone(),
        }
    }
    match api.replace_status(name, &params(), &current).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}
