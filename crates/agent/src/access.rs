//! The agent's access half: it keeps in its own cluster the RBAC that its Cluster's
//! ClusterAccess (on the management API, see `lariat_api::management`) says Rancher's bindings
//! grant there, as Rancher's cluster controllers do:
//!
//! - a ClusterRole per RoleTemplate in use;
//! - a ClusterRoleBinding per cluster-scope binding;
//! - a RoleBinding per project-scope binding in every namespace annotated with the project's
//!   ID (`field.cattle.io/projectId`), so a namespace moved to another project changes who
//!   reaches it as soon as the agent sees the Namespace change.
//!
//! Everything it writes carries [`ACCESS_LABEL`]; what carries it and is no longer wanted is
//! deleted. A ClusterRole of the same name that someone else made is left alone and reported.
//! It is woken by watches (the ClusterAccess, Namespaces, its own objects) and writes the
//! outcome in the ClusterAccess's status. Plain kube-rs calls, so a real API server enforces
//! the result exactly as the simulated ones here do.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleBinding};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use lariat_api::management::{ACCESS_LABEL, cluster_access_resource};
use lariat_api::rancher::PROJECT_ID_ANNOTATION;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use crate::AbortOnDrop;
use crate::bundles::{Session, per_session, upstream_client};

/// The field manager of what the access half applies.
const FIELD_MANAGER: &str = "lariat-access";
/// After a failed round, the next one comes this much later (sooner if something changes).
const RETRY: Duration = Duration::from_secs(5);

#[derive(Deserialize, Default, Clone, PartialEq)]
#[serde(rename_all = "camelCase", default)]
struct AccessSpec {
    cluster_roles: Vec<WantedRole>,
    cluster_role_bindings: Vec<WantedBinding>,
    project_role_bindings: Vec<WantedBinding>,
}

#[derive(Deserialize, Default, Clone, PartialEq)]
struct WantedRole {
    name: String,
    rules: Vec<PolicyRule>,
}

#[derive(Deserialize, Default, Clone, PartialEq)]
#[serde(rename_all = "camelCase", default)]
struct WantedBinding {
    name: String,
    role_name: String,
    subjects: Vec<WantedSubject>,
    project_id: Option<String>,
}

#[derive(Deserialize, Default, Clone, PartialEq)]
#[serde(default)]
struct WantedSubject {
    kind: String,
    name: String,
}

/// Runs the access half until the task is dropped, one session (credential) at a time.
pub(crate) async fn run(downstream: kube::Client, sessions: watch::Receiver<Option<Session>>) {
    per_session(sessions, "cannot follow the cluster's access", |session| {
        serve(downstream.clone(), session)
    })
    .await
}

/// A reflector of `api` (with `config`) whose every event wakes the reconciler; its watch
/// stops when the handle is dropped (with the session).
fn follow<K>(
    api: Api<K>,
    config: watcher::Config,
    wake: mpsc::Sender<()>,
) -> (Store<K>, AbortOnDrop)
where
    K: Resource + Clone + std::fmt::Debug + Send + Sync + serde::de::DeserializeOwned + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    follow_with(api, config, wake, Default::default())
}

fn follow_with<K>(
    api: Api<K>,
    config: watcher::Config,
    wake: mpsc::Sender<()>,
    dynamic: K::DynamicType,
) -> (Store<K>, AbortOnDrop)
where
    K: Resource + Clone + std::fmt::Debug + Send + Sync + serde::de::DeserializeOwned + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    let writer = reflector::store::Writer::new(dynamic);
    let reader = writer.as_reader();
    let task = tokio::spawn(
        watcher(api, config)
            .default_backoff()
            .reflect(writer)
            .for_each(move |event| {
                if let Err(error) = event {
                    tracing::debug!(%error, "an access watch failed; it backs off and retries");
                }
                let _ = wake.try_send(());
                std::future::ready(())
            }),
    );
    (reader, AbortOnDrop(task))
}

struct Caches {
    access: Store<DynamicObject>,
    namespaces: Store<Namespace>,
    roles: Store<ClusterRole>,
    cluster_bindings: Store<ClusterRoleBinding>,
    bindings: Store<RoleBinding>,
    _watches: Vec<AbortOnDrop>,
}

/// How long the first lists may take before the session is tried again (a credential the
/// server refuses leaves a watch retrying forever).
const READY_WITHIN: Duration = Duration::from_secs(30);

async fn serve(downstream: kube::Client, session: Session) -> Result<(), crate::bundles::Error> {
    let session = &session;
    let (namespace, name) = session.cluster.split_once('/').ok_or_else(|| {
        crate::bundles::Error::Invalid(format!("malformed cluster {:?}", session.cluster))
    })?;
    let upstream = upstream_client(session, namespace)?;
    let access_api: Api<DynamicObject> =
        Api::namespaced_with(upstream, namespace, &cluster_access_resource());
    let (wake, mut woken) = mpsc::channel(1);
    let labelled = || crate::watch_config().labels(ACCESS_LABEL);
    let (access, access_watch) = follow_with(
        access_api.clone(),
        crate::watch_config().fields(&format!("metadata.name={name}")),
        wake.clone(),
        cluster_access_resource(),
    );
    let (namespaces, namespaces_watch) = follow(
        Api::all(downstream.clone()),
        crate::watch_config(),
        wake.clone(),
    );
    let (roles, roles_watch) = follow(Api::all(downstream.clone()), labelled(), wake.clone());
    let (cluster_bindings, cluster_bindings_watch) =
        follow(Api::all(downstream.clone()), labelled(), wake.clone());
    let (bindings, bindings_watch) = follow(Api::all(downstream.clone()), labelled(), wake.clone());
    let caches = Caches {
        access,
        namespaces,
        roles,
        cluster_bindings,
        bindings,
        _watches: vec![
            access_watch,
            namespaces_watch,
            roles_watch,
            cluster_bindings_watch,
            bindings_watch,
        ],
    };
    let ready = async {
        caches.access.wait_until_ready().await?;
        caches.namespaces.wait_until_ready().await?;
        caches.roles.wait_until_ready().await?;
        caches.cluster_bindings.wait_until_ready().await?;
        caches.bindings.wait_until_ready().await
    };
    tokio::time::timeout(READY_WITHIN, ready)
        .await
        .map_err(|_| {
            crate::bundles::Error::Invalid(format!(
                "the cluster's access and RBAC were not listed within {READY_WITHIN:?}"
            ))
        })?
        .map_err(|e| crate::bundles::Error::Invalid(format!("a watch ended: {e}")))?;
    tracing::info!(cluster = %session.cluster, "keeping the cluster's access");
    let mut last_error = String::new();
    let mut last_status = Value::Null;
    loop {
        let Some(access) = caches.access.state().into_iter().next() else {
            // No ClusterAccess yet, or none for a moment (the server writes it again): what is
            // in place stays until one says otherwise.
            if tokio::time::timeout(RETRY, woken.recv()).await == Ok(None) {
                return Ok(());
            }
            continue;
        };
        let outcome = match serde_json::from_value::<AccessSpec>(access.data["spec"].clone()) {
            Ok(spec) => reconcile(&downstream, &caches, &spec).await,
            // A newer server's shape: touch nothing rather than prune on a misreading.
            Err(error) => Err(format!("cannot read the ClusterAccess's spec: {error}")),
        };
        let condition = match &outcome {
            Ok(summary) => {
                json!({"type": "Applied", "status": "True", "reason": "Applied", "message": summary})
            }
            Err(problem) => {
                json!({"type": "Applied", "status": "False", "reason": "Failed", "message": problem})
            }
        };
        let status = json!({
            "observedGeneration": access.metadata.generation,
            "conditions": [condition],
        });
        let mut reported = access.data["status"].clone();
        if let Some(condition) = reported["conditions"]
            .get_mut(0)
            .and_then(Value::as_object_mut)
        {
            condition.remove("lastTransitionTime");
        }
        if status != last_status || reported != status {
            let mut stamped = status.clone();
            stamped["conditions"][0]["lastTransitionTime"] =
                json!(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
            if access.data["status"]["conditions"][0]["status"] == status["conditions"][0]["status"]
            {
                stamped["conditions"][0]["lastTransitionTime"] =
                    access.data["status"]["conditions"][0]["lastTransitionTime"].clone();
            }
            let patch = json!({"status": stamped});
            match access_api
                .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => last_status = status,
                Err(error) => tracing::warn!(%error, "cannot report the cluster's access"),
            }
        }
        match outcome {
            Err(problem) => {
                if problem != last_error {
                    tracing::warn!(%problem, "cannot apply all of the cluster's access; retrying");
                    last_error = problem;
                }
                if tokio::time::timeout(RETRY, woken.recv()).await == Ok(None) {
                    return Ok(());
                }
            }
            Ok(_) => {
                last_error.clear();
                if woken.recv().await.is_none() {
                    return Ok(());
                }
            }
        }
        // Let a burst of changes (a namespace created with its bindings) settle into one round.
        tokio::time::sleep(Duration::from_millis(50)).await;
        while woken.try_recv().is_ok() {}
    }
}

fn labels() -> BTreeMap<String, String> {
    BTreeMap::from([(ACCESS_LABEL.to_string(), "true".to_string())])
}

fn subjects(binding: &WantedBinding) -> Vec<k8s_openapi::api::rbac::v1::Subject> {
    binding
        .subjects
        .iter()
        .map(|s| k8s_openapi::api::rbac::v1::Subject {
            kind: s.kind.clone(),
            name: s.name.clone(),
            api_group: Some("rbac.authorization.k8s.io".into()),
            namespace: None,
        })
        .collect()
}

fn role_ref(binding: &WantedBinding) -> k8s_openapi::api::rbac::v1::RoleRef {
    k8s_openapi::api::rbac::v1::RoleRef {
        api_group: Some("rbac.authorization.k8s.io".into()),
        kind: "ClusterRole".into(),
        name: binding.role_name.clone(),
    }
}

/// One round: every wanted object applied if it differs, every labelled one not wanted
/// deleted. A summary of what is in place, or what went wrong.
async fn reconcile(
    downstream: &kube::Client,
    caches: &Caches,
    spec: &AccessSpec,
) -> Result<String, String> {
    let mut problems: Vec<String> = Vec::new();
    let apply = PatchParams::apply(FIELD_MANAGER).force();

    // ClusterRoles, one per RoleTemplate.
    let roles: Api<ClusterRole> = Api::all(downstream.clone());
    let mut wanted_roles = HashSet::new();
    // Roles not applied: nothing is bound to them, since what they hold is not lariat's word.
    let mut not_applied = HashSet::new();
    for wanted in &spec.cluster_roles {
        wanted_roles.insert(wanted.name.clone());
        let current = caches.roles.get(&reflector::ObjectRef::new(&wanted.name));
        if current
            .as_ref()
            .is_some_and(|c| c.rules.as_ref() == Some(&wanted.rules))
        {
            continue;
        }
        if current.is_none() {
            match roles.get_opt(&wanted.name).await {
                Ok(Some(theirs)) if !theirs.labels().contains_key(ACCESS_LABEL) => {
                    problems.push(format!(
                        "ClusterRole {:?} exists and is not lariat's: its RoleTemplate is not applied, nor bound (rename one of them)",
                        wanted.name
                    ));
                    not_applied.insert(wanted.name.clone());
                    continue;
                }
                Err(error) => {
                    problems.push(format!("ClusterRole {:?}: {error}", wanted.name));
                    not_applied.insert(wanted.name.clone());
                    continue;
                }
                _ => {}
            }
        }
        let role = ClusterRole {
            metadata: kube::api::ObjectMeta {
                name: Some(wanted.name.clone()),
                labels: Some(labels()),
                ..Default::default()
            },
            rules: Some(wanted.rules.clone()),
            aggregation_rule: None,
        };
        if let Err(error) = roles
            .patch(&wanted.name, &apply, &Patch::Apply(&with_kind(&role)))
            .await
        {
            problems.push(format!("ClusterRole {:?}: {error}", wanted.name));
            not_applied.insert(wanted.name.clone());
        }
    }

    // ClusterRoleBindings, one per cluster-scope binding.
    let cluster_bindings: Api<ClusterRoleBinding> = Api::all(downstream.clone());
    let mut wanted_cluster_bindings = HashSet::new();
    for wanted in &spec.cluster_role_bindings {
        if not_applied.contains(&wanted.role_name) {
            continue;
        }
        wanted_cluster_bindings.insert(wanted.name.clone());
        let current = caches
            .cluster_bindings
            .get(&reflector::ObjectRef::new(&wanted.name));
        let current = current.as_deref().map(|c| (&c.role_ref, &c.subjects));
        if let Err(error) = put_binding(&cluster_bindings, current, wanted, None).await {
            problems.push(format!("ClusterRoleBinding {:?}: {error}", wanted.name));
        }
    }

    // RoleBindings, one per project-scope binding in each namespace of its project.
    let mut members: HashMap<&str, Vec<String>> = HashMap::new();
    let namespaces = caches.namespaces.state();
    for namespace in &namespaces {
        if namespace.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if let Some(project) = namespace.annotations().get(PROJECT_ID_ANNOTATION) {
            members
                .entry(project.as_str())
                .or_default()
                .push(namespace.name_any());
        }
    }
    let mut wanted_bindings = HashSet::new();
    let mut placed = 0;
    for wanted in &spec.project_role_bindings {
        if not_applied.contains(&wanted.role_name) {
            continue;
        }
        let project = wanted.project_id.as_deref().unwrap_or_default();
        for namespace in members.get(project).into_iter().flatten() {
            wanted_bindings.insert((namespace.clone(), wanted.name.clone()));
            placed += 1;
            let api: Api<RoleBinding> = Api::namespaced(downstream.clone(), namespace);
            let current = caches
                .bindings
                .get(&reflector::ObjectRef::new(&wanted.name).within(namespace));
            let current = current.as_deref().map(|c| (&c.role_ref, &c.subjects));
            if let Err(error) = put_binding(&api, current, wanted, Some(namespace)).await {
                problems.push(format!(
                    "RoleBinding {namespace}/{:?}: {error}",
                    wanted.name
                ));
            }
        }
    }

    // What is lariat's and no longer wanted.
    let delete = DeleteParams::default();
    for role in caches.roles.state() {
        if !wanted_roles.contains(&role.name_any()) {
            gone(roles.delete(&role.name_any(), &delete).await, &mut problems);
        }
    }
    for binding in caches.cluster_bindings.state() {
        if !wanted_cluster_bindings.contains(&binding.name_any()) {
            gone(
                cluster_bindings.delete(&binding.name_any(), &delete).await,
                &mut problems,
            );
        }
    }
    for binding in caches.bindings.state() {
        let namespace = binding.namespace().unwrap_or_default();
        if !wanted_bindings.contains(&(namespace.clone(), binding.name_any())) {
            let api: Api<RoleBinding> = Api::namespaced(downstream.clone(), &namespace);
            gone(
                api.delete(&binding.name_any(), &delete).await,
                &mut problems,
            );
        }
    }
    if problems.is_empty() {
        Ok(format!(
            "{} ClusterRoles, {} ClusterRoleBindings, {placed} RoleBindings",
            spec.cluster_roles.len(),
            spec.cluster_role_bindings.len()
        ))
    } else {
        problems.sort();
        Err(problems.join("; "))
    }
}

/// `object` as server-side apply wants it: with apiVersion and kind.
fn with_kind<K: Resource<DynamicType = ()> + serde::Serialize>(object: &K) -> Value {
    let mut value = serde_json::to_value(object).expect("a Kubernetes object serializes");
    value["apiVersion"] = json!(K::api_version(&()));
    value["kind"] = json!(K::kind(&()));
    value
}

/// Applies `wanted` (a ClusterRoleBinding, or a RoleBinding in `namespace`) unless it is
/// already as wanted; a binding whose role changed is made again, since its `roleRef` cannot
/// change in place. One of that name that is not lariat's (not in its labelled cache) is left
/// alone, as its ClusterRoles are.
async fn put_binding<K>(
    api: &Api<K>,
    current: Option<(
        &k8s_openapi::api::rbac::v1::RoleRef,
        &Option<Vec<k8s_openapi::api::rbac::v1::Subject>>,
    )>,
    wanted: &WantedBinding,
    namespace: Option<&str>,
) -> Result<(), String>
where
    K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let (role_ref, subjects) = (role_ref(wanted), Some(subjects(wanted)));
    let name = wanted.name.as_str();
    // ClusterRoleBindings and RoleBindings have one shape.
    let mut body = json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": {"name": name, "labels": labels()},
        "roleRef": role_ref,
        "subjects": subjects,
    });
    if let Some(namespace) = namespace {
        body["metadata"]["namespace"] = json!(namespace);
    }
    let (role_ref, subjects) = (&role_ref, &subjects);
    match current {
        Some((current_ref, current_subjects)) => {
            if current_ref == role_ref && current_subjects == subjects {
                return Ok(());
            }
            if current_ref != role_ref {
                api.delete(name, &DeleteParams::default())
                    .await
                    .map_err(|e| e.to_string())?;
            }
        }
        None => {
            if api
                .get_opt(name)
                .await
                .map_err(|e| e.to_string())?
                .is_some()
            {
                return Err("exists and is not lariat's: not changed (rename or delete it)".into());
            }
        }
    }
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await
    .map(|_| ())
    .map_err(|e| e.to_string())
}

/// A deletion's outcome: already gone is fine.
fn gone<T>(outcome: kube::Result<T>, problems: &mut Vec<String>) {
    match outcome {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(error) => problems.push(format!("delete: {error}")),
    }
}
