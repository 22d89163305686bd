//! Rancher's scopes (`management.cattle.io/v3`, see `lariat_api::rancher`) turned into RBAC:
//!
//! - on lariat itself, through RBAC's index (`rbac.rs`): a GlobalRoleBinding grants its
//!   GlobalRole's `rules` everywhere and its `namespacedRules` in their namespaces; any binding
//!   that reaches a cluster (a ClusterRoleTemplateBinding, a ProjectRoleTemplateBinding, a
//!   GlobalRole with `inheritedClusterRoles`) grants reading that Cluster and its proxy, so a
//!   caller with no binding for a cluster is refused at lariat's proxy before anything is sent;
//! - in each downstream cluster, through its ClusterAccess (written by [`publish_accesses`],
//!   applied by the cluster's agent): a ClusterRole per RoleTemplate in use and the bindings
//!   of it. Requests through the proxy impersonate the caller, so the downstream API server
//!   decides what they may do there.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::rbac::v1::{PolicyRule, Subject};
pub use lariat_api::rancher::GROUP;
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::Digest;

use crate::follow::{Mirror, put};
use crate::resources::{Resources, WriteOptions};
use crate::status::{ApiError, ApiResult};

pub const PREFIX: &str = "/registry/management.cattle.io/";
const CLUSTERS: &str = "/registry/cluster.x-k8s.io/clusters/";
const CAPI_GROUP: &str = "cluster.x-k8s.io";

#[derive(Deserialize, Default, Clone, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct GlobalRole {
    pub rules: Vec<PolicyRule>,
    pub inherited_cluster_roles: Vec<String>,
    pub namespaced_rules: BTreeMap<String, Vec<PolicyRule>>,
}

#[derive(Deserialize, Default, Clone, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct GlobalRoleBinding {
    pub user_name: Option<String>,
    pub group_principal_name: Option<String>,
    pub global_role_name: String,
}

impl GlobalRoleBinding {
    pub fn subject(&self) -> Option<Subject> {
        Subjects {
            user_name: self.user_name.clone(),
            group_principal_name: self.group_principal_name.clone(),
            ..Default::default()
        }
        .subject()
    }
}

#[derive(Deserialize, Default, Clone, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct RoleTemplate {
    pub rules: Vec<PolicyRule>,
    pub external: bool,
    pub external_rules: Vec<PolicyRule>,
    pub context: String,
    pub role_template_names: Vec<String>,
    pub locked: bool,
}

/// Who a role-template binding is for: a user or a group, by name or by principal.
#[derive(Deserialize, Default, Clone, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct Subjects {
    pub user_name: Option<String>,
    pub user_principal_name: Option<String>,
    pub group_name: Option<String>,
    pub group_principal_name: Option<String>,
}

impl Subjects {
    fn set(field: &Option<String>) -> Option<&str> {
        field.as_deref().filter(|s| !s.is_empty())
    }

    /// The fields given, by name.
    pub fn given(&self) -> Vec<&'static str> {
        [
            ("userName", &self.user_name),
            ("userPrincipalName", &self.user_principal_name),
            ("groupName", &self.group_name),
            ("groupPrincipalName", &self.group_principal_name),
        ]
        .into_iter()
        .filter(|(_, value)| Subjects::set(value).is_some())
        .map(|(name, _)| name)
        .collect()
    }

    /// The binding's subject: a user named by `userName` (or its principal), else a group.
    pub fn subject(&self) -> Option<Subject> {
        let (kind, name) = if let Some(user) =
            Subjects::set(&self.user_name).or(Subjects::set(&self.user_principal_name))
        {
            ("User", user)
        } else {
            let group =
                Subjects::set(&self.group_name).or(Subjects::set(&self.group_principal_name))?;
            ("Group", group)
        };
        Some(Subject {
            kind: kind.into(),
            name: name.into(),
            api_group: Some(crate::rbac::GROUP.into()),
            namespace: None,
        })
    }
}

#[derive(Deserialize, Default, Clone, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterRoleTemplateBinding {
    #[serde(flatten)]
    pub subjects: Subjects,
    pub cluster_name: String,
    pub role_template_name: String,
}

#[derive(Deserialize, Default, Clone, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ProjectSpec {
    pub cluster_name: String,
}

#[derive(Deserialize, Default, Clone, PartialEq)]
#[serde(default)]
pub struct Project {
    pub spec: ProjectSpec,
}

#[derive(Deserialize, Default, Clone, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ProjectRoleTemplateBinding {
    #[serde(flatten)]
    pub subjects: Subjects,
    pub project_name: String,
    pub role_template_name: String,
}

impl ProjectRoleTemplateBinding {
    /// `<cluster>:<project>`, split.
    pub fn project(&self) -> Option<(&str, &str)> {
        self.project_name.split_once(':')
    }
}

/// Rancher's kinds as last seen in the store, keyed `NAME` or `NAMESPACE/NAME`.
#[derive(Default)]
pub struct Objects {
    pub global_roles: HashMap<String, GlobalRole>,
    pub global_role_bindings: HashMap<String, GlobalRoleBinding>,
    pub role_templates: HashMap<String, RoleTemplate>,
    pub cluster_bindings: HashMap<String, ClusterRoleTemplateBinding>,
    pub projects: HashMap<String, Project>,
    pub project_bindings: HashMap<String, ProjectRoleTemplateBinding>,
}

impl Objects {
    /// Applies one stored change (`key` relative to [`PREFIX`]); `None` deletes. Returns
    /// whether what these objects grant changed (a binding's status is no such change).
    pub fn apply(&mut self, key: &str, value: Option<&[u8]>) -> bool {
        let Some((plural, name)) = key.split_once('/') else {
            return false;
        };
        match plural {
            "globalroles" => put(&mut self.global_roles, name, value),
            "globalrolebindings" => put(&mut self.global_role_bindings, name, value),
            "roletemplates" => put(&mut self.role_templates, name, value),
            "clusterroletemplatebindings" => put(&mut self.cluster_bindings, name, value),
            "projects" => put(&mut self.projects, name, value),
            "projectroletemplatebindings" => put(&mut self.project_bindings, name, value),
            _ => false,
        }
    }

    /// The rules of RoleTemplate `name` with those of the templates it inherits
    /// (`roleTemplateNames`, recursively); `None` when it does not exist.
    pub fn template_rules(&self, name: &str) -> Option<Vec<PolicyRule>> {
        fn collect(
            objects: &Objects,
            name: &str,
            seen: &mut HashSet<String>,
            rules: &mut Vec<PolicyRule>,
        ) -> bool {
            let Some(template) = objects.role_templates.get(name) else {
                return false;
            };
            if !seen.insert(name.to_string()) {
                return true;
            }
            let own = if template.external {
                &template.external_rules
            } else {
                &template.rules
            };
            for rule in own {
                if !rules.contains(rule) {
                    rules.push(rule.clone());
                }
            }
            for inherited in &template.role_template_names {
                collect(objects, inherited, seen, rules);
            }
            true
        }
        let mut rules = Vec::new();
        collect(self, name, &mut HashSet::new(), &mut rules).then_some(rules)
    }

    /// The cluster and project of PRTB `key` (`NAMESPACE/NAME`), when its Project is beside it
    /// and of that cluster: what it reaches, if anything.
    pub fn project_of<'a>(
        &self,
        key: &str,
        binding: &'a ProjectRoleTemplateBinding,
    ) -> Option<(&'a str, &'a str)> {
        let (namespace, _) = key.split_once('/')?;
        let (cluster, project) = binding.project()?;
        self.projects
            .get(&format!("{namespace}/{project}"))
            .is_some_and(|p| p.spec.cluster_name == cluster)
            .then_some((cluster, project))
    }

    /// What each binding grants on lariat itself: `(subject, namespace, rules)`, a namespace of
    /// `None` meaning everywhere.
    pub fn management_grants(&self) -> Vec<(Subject, Option<String>, Vec<PolicyRule>)> {
        let mut grants = Vec::new();
        for binding in self.global_role_bindings.values() {
            let (Some(subject), Some(role)) = (
                binding.subject(),
                self.global_roles.get(&binding.global_role_name),
            ) else {
                continue;
            };
            grants.push((subject.clone(), None, role.rules.clone()));
            for (namespace, rules) in &role.namespaced_rules {
                grants.push((subject.clone(), Some(namespace.clone()), rules.clone()));
            }
            if !role.inherited_cluster_roles.is_empty() {
                grants.push((subject, None, reach_cluster(None)));
            }
        }
        for (key, binding) in &self.cluster_bindings {
            let (Some(subject), Some((namespace, _))) =
                (binding.subjects.subject(), key.split_once('/'))
            else {
                continue;
            };
            grants.push((
                subject,
                Some(namespace.to_string()),
                reach_cluster(Some(&binding.cluster_name)),
            ));
        }
        for (key, binding) in &self.project_bindings {
            let (Some(subject), Some((namespace, _))) =
                (binding.subjects.subject(), key.split_once('/'))
            else {
                continue;
            };
            let Some((cluster, project)) = self.project_of(key, binding) else {
                continue;
            };
            let mut rules = reach_cluster(Some(cluster));
            rules.push(read(GROUP, "projects", Some(project)));
            grants.push((subject, Some(namespace.to_string()), rules));
        }
        grants
    }

    /// The ClusterAccess `spec` of Cluster `namespace/cluster`: the RBAC its agent keeps there.
    pub fn cluster_access(&self, namespace: &str, cluster: &str) -> Value {
        let mut used: Vec<String> = Vec::new();
        let mut cluster_bindings = Vec::new();
        let mut project_bindings = Vec::new();
        let mut bind = |name: String, template: &str, subject: Subject, project: Option<&str>| {
            let Some(role_template) = self.role_templates.get(template) else {
                return;
            };
            used.push(template.to_string());
            // An external template's rules are the cluster's own ClusterRole of its name; any
            // other's are lariat's ClusterRole, named apart from the cluster's own.
            let role_name = if role_template.external {
                template.to_string()
            } else {
                cluster_role_name(template)
            };
            let mut binding = json!({
                "name": name,
                "roleName": role_name,
                "subjects": [{"kind": subject.kind, "name": subject.name}],
            });
            match project {
                Some(project) => {
                    binding["projectId"] = json!(project);
                    project_bindings.push(binding);
                }
                None => cluster_bindings.push(binding),
            }
        };
        let mut global: Vec<(&String, &GlobalRoleBinding)> =
            self.global_role_bindings.iter().collect();
        global.sort_by_key(|(name, _)| *name);
        for (name, binding) in global {
            let (Some(subject), Some(role)) = (
                binding.subject(),
                self.global_roles.get(&binding.global_role_name),
            ) else {
                continue;
            };
            for template in &role.inherited_cluster_roles {
                // Hashed: `a` with `cluster-owner` and `a-cluster` with `owner` are two.
                bind(
                    hashed_name(&format!("lariat-grb-{name}"), &format!("{name}/{template}")),
                    template,
                    subject.clone(),
                    None,
                );
            }
        }
        let prefix = format!("{namespace}/");
        let mut in_namespace: Vec<(&String, &ClusterRoleTemplateBinding)> = self
            .cluster_bindings
            .iter()
            .filter(|(key, b)| key.starts_with(&prefix) && b.cluster_name == cluster)
            .collect();
        in_namespace.sort_by_key(|(key, _)| *key);
        for (key, binding) in in_namespace {
            if let Some(subject) = binding.subjects.subject() {
                let name = downstream_name(&format!("lariat-crtb-{}", &key[prefix.len()..]));
                bind(name, &binding.role_template_name, subject, None);
            }
        }
        let mut in_projects: Vec<(&String, &ProjectRoleTemplateBinding)> = self
            .project_bindings
            .iter()
            .filter(|(key, b)| {
                key.starts_with(&prefix)
                    && self.project_of(key, b).is_some_and(|(c, _)| c == cluster)
            })
            .collect();
        in_projects.sort_by_key(|(key, _)| *key);
        for (key, binding) in in_projects {
            if let Some(subject) = binding.subjects.subject() {
                let name = downstream_name(&format!("lariat-prtb-{}", &key[prefix.len()..]));
                bind(
                    name,
                    &binding.role_template_name,
                    subject,
                    Some(&binding.project_name),
                );
            }
        }
        used.sort();
        used.dedup();
        let cluster_roles: Vec<Value> = used
            .into_iter()
            .filter(|template| !self.role_templates[template].external)
            .map(|template| {
                json!({"name": cluster_role_name(&template), "rules": self.template_rules(&template).unwrap_or_default()})
            })
            .collect();
        json!({
            "clusterRoles": cluster_roles,
            "clusterRoleBindings": cluster_bindings,
            "projectRoleBindings": project_bindings,
        })
    }
}

/// A downstream object name from a binding's: a valid name of at most 253 characters, unique
/// for each binding (a long one is cut and keeps a hash of the whole).
fn downstream_name(name: &str) -> String {
    if name.len() <= 253 {
        return name.to_string();
    }
    hashed_name(name, name)
}

/// `readable` (cut to fit) and a hash of `identity`: one name per identity, whatever the
/// readable part's ambiguities.
fn hashed_name(readable: &str, identity: &str) -> String {
    let hash = sha2::Sha256::digest(identity.as_bytes());
    let hash: String = hash.iter().take(6).map(|b| format!("{b:02x}")).collect();
    let mut end = readable.len().min(253 - 13);
    while !readable.is_char_boundary(end) {
        end -= 1;
    }
    let cut = &readable[..end];
    format!("{}-{hash}", cut.trim_end_matches(['-', '.']))
}

/// The downstream ClusterRole of RoleTemplate `template` (not external): prefixed, so it never
/// is, nor binds to, one of the cluster's own ClusterRoles (`admin`, `view`, ...).
pub fn cluster_role_name(template: &str) -> String {
    downstream_name(&format!("lariat-{template}"))
}

fn read(group: &str, resource: &str, name: Option<&str>) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.into()]),
        resources: Some(vec![resource.into()]),
        resource_names: name.map(|n| vec![n.into()]),
        verbs: vec!["get".into()],
        non_resource_urls: None,
    }
}

/// Reading Cluster `name` (`None`: every one) and every verb of its proxy, whose requests the
/// downstream API server then decides.
fn reach_cluster(name: Option<&str>) -> Vec<PolicyRule> {
    let names = name.map(|n| vec![n.to_string()]);
    let mut clusters = read(CAPI_GROUP, "clusters", name);
    if name.is_none() {
        clusters.verbs.extend(["list".into(), "watch".into()]);
    }
    vec![
        clusters,
        PolicyRule {
            api_groups: Some(vec![CAPI_GROUP.into()]),
            resources: Some(vec!["clusters/proxy".into()]),
            resource_names: names,
            verbs: vec!["*".into()],
            non_resource_urls: None,
        },
    ]
}

/// Rancher's kinds, the Clusters and their ClusterAccesses, followed for [`publish_accesses`].
#[derive(Default)]
struct AccessInputs {
    objects: Objects,
    /// `NAMESPACE/NAME` → uid.
    clusters: HashMap<String, String>,
    /// `NAMESPACE/NAME` → what is stored of its ClusterAccess.
    accesses: HashMap<String, Access>,
    /// A binding's key (relative to [`PREFIX`]) → its stored `status`.
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

const ACCESSES: &str = "/registry/management.lariat.dev/clusteraccesses/";

impl Mirror for AccessInputs {
    fn clear(&mut self) {
        *self = AccessInputs::default();
    }

    /// A ClusterAccess's status, or a Cluster's change that keeps its uid, matters not.
    fn apply(&mut self, key: &str, value: Option<&[u8]>) -> bool {
        let object = value.and_then(|v| serde_json::from_slice::<Value>(v).ok());
        if let Some(key) = key.strip_prefix(PREFIX) {
            let granted = self.objects.apply(key, value);
            let before = match object {
                Some(mut object) if key.contains("bindings/") => {
                    self.statuses.insert(key.into(), object["status"].take())
                }
                _ => self.statuses.remove(key),
            };
            return granted || before.as_ref() != self.statuses.get(key);
        }
        if let Some(key) = key.strip_prefix(ACCESSES) {
            let before = match object {
                Some(object) => self.accesses.insert(key.into(), Access::of(object)),
                None => self.accesses.remove(key),
            };
            before.as_ref() != self.accesses.get(key)
        } else if let Some(key) = key.strip_prefix(CLUSTERS) {
            // A Cluster being deleted gets no access written: its garbage collection takes it.
            let live = object
                .filter(|o| o["metadata"]["deletionTimestamp"].is_null())
                .and_then(|o| o["metadata"]["uid"].as_str().map(String::from));
            let before = match live {
                Some(uid) => self.clusters.insert(key.into(), uid),
                None => self.clusters.remove(key),
            };
            before.as_ref() != self.clusters.get(key)
        } else {
            false
        }
    }
}

/// What to write: ClusterAccesses (the Cluster `NAMESPACE/NAME`, its uid, the `spec` wanted)
/// and bindings' statuses (the binding's key relative to [`PREFIX`], the `status` wanted).
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

/// Keeps every Cluster's ClusterAccess equal to what Rancher's kinds say of it, until `stop`.
/// Level-based: after every batch of changes (to Rancher's kinds, the Clusters or the
/// ClusterAccesses themselves) the accesses that differ from what is wanted are written.
pub async fn publish_accesses(resources: Resources, stop: tokio::sync::watch::Receiver<bool>) {
    let (wake, mut woken) = tokio::sync::watch::channel(Arc::new(Pending::default()));
    let writer = {
        let resources = resources.clone();
        let mut stop = stop.clone();
        tokio::spawn(async move {
            const FIRST_RETRY: std::time::Duration = std::time::Duration::from_secs(1);
            let mut retry_in = FIRST_RETRY;
            let mut last_failure = String::new();
            loop {
                let pending = woken.borrow_and_update().clone();
                let failures = write(&resources, &pending).await;
                // Each distinct failure is logged once; retries back off to a minute.
                if !failures.is_empty() && failures != last_failure {
                    tracing::warn!(%failures, "cannot write clusters' accesses; retrying");
                }
                let failed = !failures.is_empty();
                retry_in = if failed {
                    (retry_in * 2).min(std::time::Duration::from_secs(60))
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
        })
    };
    let mut inputs = AccessInputs::default();
    crate::follow::follow(
        resources.store.clone(),
        &[PREFIX, CLUSTERS, ACCESSES],
        &mut inputs,
        |inputs| {
            let mut pending = Pending::default();
            // Ordered, so a binding that reaches several clusters in error names the same
            // one each time, and its status is written once.
            let mut remote = BTreeMap::new();
            for (key, uid) in &inputs.clusters {
                let Some((namespace, name)) = key.split_once('/') else {
                    continue;
                };
                let spec = inputs.objects.cluster_access(namespace, name);
                remote.insert(key.as_str(), inputs.remote(key, &spec));
                if inputs.accesses.get(key).map(|a| &a.spec) != Some(&spec) {
                    pending.accesses.push((key.clone(), uid.clone(), spec));
                }
            }
            pending.accesses.sort_by(|a, b| a.0.cmp(&b.0));
            pending.statuses = inputs.statuses(&remote);
            let _ = wake.send(Arc::new(pending));
        },
        stop,
    )
    .await;
    writer.abort();
}

/// Writes each pending ClusterAccess and binding status; what failed ("" when all were
/// written).
async fn write(resources: &Resources, pending: &Pending) -> String {
    let options = WriteOptions {
        field_manager: "lariat".into(),
        ..Default::default()
    };
    let access = lariat_api::management::cluster_access_resource();
    let mut failures = Vec::new();
    // Accesses first: they are what takes effect downstream; statuses only report.
    for (key, uid, spec) in &pending.accesses {
        let (namespace, name) = key.split_once('/').unwrap_or_default();
        let Some(scope) = resources.scope(&access.group, &access.plural, Some(namespace)) else {
            return "ClusterAccess is not served".into();
        };
        let outcome = match resources.get(&scope, name).await {
            Ok(current) if current["spec"] == *spec => Ok(()),
            Ok(mut current) => {
                current["spec"] = spec.clone();
                resources
                    .update(&scope, name, current, None, &options)
                    .await
                    .map(|_| ())
            }
            Err(ApiError::NotFound { .. }) => {
                let object = json!({
                    "apiVersion": access.api_version,
                    "kind": access.kind,
                    "metadata": {
                        "name": name, "namespace": namespace,
                        "ownerReferences": [{
                            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
                            "name": name, "uid": uid, "controller": true,
                            "blockOwnerDeletion": true,
                        }],
                    },
                    "spec": spec,
                });
                resources.create(&scope, object, &options).await.map(|_| ())
            }
            Err(e) => Err(e),
        };
        if let Err(e) = outcome {
            failures.push(format!("{key}: {e}"));
        }
    }
    for (key, status) in &pending.statuses {
        if let Err(e) = write_status(resources, key, status, &options).await {
            failures.push(format!("{key}: {e}"));
        }
    }
    failures.join("; ")
}

/// Sets the summary fields of binding `key` (`PLURAL/[NAMESPACE/]NAME`) to those of `status`.
async fn write_status(
    resources: &Resources,
    key: &str,
    status: &Value,
    options: &WriteOptions,
) -> ApiResult<()> {
    let mut parts = key.split('/');
    let plural = parts.next().unwrap_or_default();
    let (namespace, name) = match (parts.next(), parts.next()) {
        (Some(namespace), Some(name)) => (Some(namespace), name),
        (Some(name), None) => (None, name),
        _ => return Ok(()),
    };
    let Some(scope) = resources.scope(GROUP, plural, namespace) else {
        return Ok(());
    };
    let mut current = match resources.get(&scope, name).await {
        Ok(current) => current,
        Err(ApiError::NotFound { .. }) => return Ok(()),
        Err(e) => return Err(e),
    };
    if !current["status"].is_object() {
        current["status"] = json!({});
    }
    for field in [
        "summary",
        "summaryLocal",
        "summaryRemote",
        "remoteConditions",
    ] {
        match &status[field] {
            Value::Null => {
                current["status"]
                    .as_object_mut()
                    .expect("object")
                    .remove(field);
            }
            value => current["status"][field] = value.clone(),
        }
    }
    match resources
        .update(&scope, name, current, Some("status"), options)
        .await
    {
        Ok(_) | Err(ApiError::NotFound { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Built-in GlobalRoles and RoleTemplates are lariat's, as Rancher's are Rancher's: no one else
/// marks one `builtin`, and of a built-in one only what Rancher lets users change may change
/// (the rest is put back at every start).
pub fn confirm_builtin(plural: &str, object: &Value, old: Option<&Value>) -> ApiResult<()> {
    if !matches!(plural, "globalroles" | "roletemplates") {
        return Ok(());
    }
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let forbidden = |why: String| ApiError::Forbidden {
        message: format!("{plural}.{GROUP} {name:?} is forbidden: {why}"),
    };
    let Some(old) = old.filter(|o| o["builtin"] == true) else {
        if object["builtin"] == true {
            return Err(forbidden(
                "only lariat's own roles are builtin: leave the field out".into(),
            ));
        }
        return Ok(());
    };
    const USERS_MAY_CHANGE: [&str; 6] = [
        "metadata",
        "status",
        "locked",
        "clusterCreatorDefault",
        "projectCreatorDefault",
        "newUserDefault",
    ];
    let mut fields: Vec<&String> = object
        .as_object()
        .into_iter()
        .flatten()
        .chain(old.as_object().into_iter().flatten())
        .map(|(field, _)| field)
        .filter(|field| !USERS_MAY_CHANGE.contains(&field.as_str()))
        .filter(|field| object[field.as_str()] != old[field.as_str()])
        .collect();
    fields.sort();
    fields.dedup();
    if fields.is_empty() {
        return Ok(());
    }
    let fields: Vec<&str> = fields.iter().map(|f| f.as_str()).collect();
    Err(forbidden(format!(
        "it is built in, so only {} may change, not {}: copy it under another name to make your own",
        USERS_MAY_CHANGE[2..].join(", "),
        fields.join(", ")
    )))
}

/// One of Rancher's objects as stored now (`None` when there is none, or no name was given):
/// admission reads what a write refers to from the store, so a Project and its binding applied
/// together are judged in order.
async fn stored<T: serde::de::DeserializeOwned>(
    resources: &Resources,
    plural: &str,
    namespace: Option<&str>,
    name: &str,
) -> ApiResult<Option<T>> {
    if name.is_empty() {
        return Ok(None);
    }
    let Some(scope) = resources.scope(GROUP, plural, namespace) else {
        return Ok(None);
    };
    match resources.get(&scope, name).await {
        Ok(object) => Ok(serde_json::from_value(object).ok()),
        Err(ApiError::NotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Adds `owner` to `object`'s owner references (once).
fn owned_by(object: &mut Value, owner: &Value) {
    let reference = json!({
        "apiVersion": owner["apiVersion"], "kind": owner["kind"],
        "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
    });
    let references = &mut object["metadata"]["ownerReferences"];
    if !references.is_array() {
        *references = json!([]);
    }
    let list = references.as_array_mut().expect("an array");
    if !list.iter().any(|r| r["uid"] == reference["uid"]) {
        list.push(reference);
    }
}

/// Whether RoleTemplate `name` inherits `ancestor`, itself or through others.
async fn inherits(resources: &Resources, name: &str, ancestor: &str) -> ApiResult<bool> {
    let mut seen = HashSet::new();
    let mut pending = vec![name.to_string()];
    while let Some(next) = pending.pop() {
        if next == ancestor {
            return Ok(true);
        }
        if !seen.insert(next.clone()) {
            continue;
        }
        let template: Option<RoleTemplate> =
            stored(resources, "roletemplates", None, &next).await?;
        if let Some(template) = template {
            pending.extend(template.role_template_names);
        }
    }
    Ok(false)
}

/// Admission of a write of one of Rancher's kinds, after its schema and strategy: what
/// refuses it as invalid (the causes), or as beyond its writer (`Err`, a 403).
///
/// - What it refers to must exist, as Rancher's webhook checks: a binding's GlobalRole or
///   RoleTemplate, of the binding's context; a project binding's Project, beside it and of its
///   cluster; a template's inherited templates, without a cycle. A locked template takes no
///   new reference (a binding, a GlobalRole's or a template's inheritance, a binding of a
///   GlobalRole granting it).
/// - Built-in roles are lariat's ([`confirm_builtin`]).
/// - Escalation prevention ([`crate::rbac::Rbac::confirm_rancher`]).
pub async fn admit(
    resources: &Resources,
    rbac: &crate::rbac::Rbac,
    requester: Option<&crate::auth::User>,
    plural: &str,
    object: &mut Value,
    old: Option<&Value>,
) -> ApiResult<Vec<crate::status::Cause>> {
    use crate::status::Cause;
    if requester.is_some() {
        confirm_builtin(plural, object, old)?;
    }
    let mut causes = vec![];
    // A binding's fields never change: what it referred to was checked when it was made.
    let check = !(plural.ends_with("bindings") && old.is_some());
    // Whether `name` is new in list `field` (not in the object's old version).
    let fresh = |field: &str, name: &Value| {
        old.is_none_or(|o| !o[field].as_array().is_some_and(|list| list.contains(name)))
    };
    let template_of = async |field: &str, value: &Value, context: &str, fresh: bool| {
        let name = value.as_str().unwrap_or_default();
        let template: Option<RoleTemplate> = stored(resources, "roletemplates", None, name).await?;
        let why = match template {
            None => format!("roletemplates.{GROUP} {name:?} not found"),
            Some(t) if t.context != context => format!(
                "RoleTemplate {name:?} has context {:?}; this binding needs one of context {context:?}",
                t.context
            ),
            Some(t) if t.locked && fresh => {
                format!("RoleTemplate {name:?} is locked: it takes no new bindings")
            }
            Some(_) => return Ok::<_, ApiError>(None),
        };
        Ok(Some(Cause::invalid(field, value, why)))
    };
    let list =
        |field: &str| -> Vec<Value> { object[field].as_array().cloned().unwrap_or_default() };
    let mut global_role: Option<GlobalRole> = None;
    match plural {
        _ if !check => {}
        "globalroles" => {
            for (i, name) in list("inheritedClusterRoles").iter().enumerate() {
                let field = format!("inheritedClusterRoles[{i}]");
                let is_new = fresh("inheritedClusterRoles", name);
                causes.extend(template_of(&field, name, "cluster", is_new).await?);
            }
        }
        "roletemplates" => {
            let own = object["metadata"]["name"].as_str().unwrap_or_default();
            for (i, name) in list("roleTemplateNames").iter().enumerate() {
                let field = format!("roleTemplateNames[{i}]");
                let inherited = name.as_str().unwrap_or_default();
                let template: Option<RoleTemplate> =
                    stored(resources, "roletemplates", None, inherited).await?;
                let why = match template {
                    None => "no RoleTemplate of that name".to_string(),
                    Some(t) if t.locked && fresh("roleTemplateNames", name) => {
                        format!("RoleTemplate {inherited:?} is locked: it takes no new references")
                    }
                    Some(_) if inherits(resources, inherited, own).await? => {
                        format!(
                            "RoleTemplate {inherited:?} inherits {own:?}: inheritance cannot loop"
                        )
                    }
                    Some(_) => continue,
                };
                causes.push(Cause::invalid(field, name, why));
            }
        }
        "globalrolebindings" => {
            let name = &object["globalRoleName"];
            global_role = stored(
                resources,
                "globalroles",
                None,
                name.as_str().unwrap_or_default(),
            )
            .await?;
            match &global_role {
                None => causes.push(Cause::invalid(
                    "globalRoleName",
                    name,
                    format!("globalroles.{GROUP} not found"),
                )),
                Some(role) => {
                    for template in &role.inherited_cluster_roles {
                        let template_object: Option<RoleTemplate> =
                            stored(resources, "roletemplates", None, template).await?;
                        if template_object.is_some_and(|t| t.locked) {
                            causes.push(Cause::invalid(
                                "globalRoleName",
                                name,
                                format!("RoleTemplate {template:?}, which this GlobalRole grants in every cluster, is locked: it takes no new bindings"),
                            ));
                        }
                    }
                }
            }
        }
        "clusterroletemplatebindings" => {
            let template = &object["roleTemplateName"];
            causes.extend(template_of("roleTemplateName", template, "cluster", true).await?);
            // Owned by its Cluster, so it goes with it: a new Cluster of that name starts
            // with no one's bindings.
            let namespace = object["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let value = object["clusterName"].clone();
            let cluster = value.as_str().unwrap_or_default();
            let found = match resources.scope(CAPI_GROUP, "clusters", Some(&namespace)) {
                Some(scope) if !cluster.is_empty() => match resources.get(&scope, cluster).await {
                    Ok(found) => Some(found),
                    Err(ApiError::NotFound { .. }) => None,
                    Err(e) => return Err(e),
                },
                _ => None,
            };
            match found {
                Some(found) => owned_by(object, &found),
                None => causes.push(Cause::invalid("clusterName", &value, format!("no Cluster {cluster:?} in namespace {namespace:?}: a ClusterRoleTemplateBinding lives beside its Cluster"))),
            }
        }
        "projectroletemplatebindings" => {
            let template = &object["roleTemplateName"];
            causes.extend(template_of("roleTemplateName", template, "project", true).await?);
            let namespace = object["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let value = object["projectName"].clone();
            if let Some((cluster, project)) = value.as_str().and_then(|p| p.split_once(':')) {
                let found: Option<Value> =
                    stored(resources, "projects", Some(&namespace), project).await?;
                let of = |p: &Value| {
                    p["spec"]["clusterName"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string()
                };
                match found {
                    None => causes.push(Cause::invalid("projectName", &value, format!("no Project {project:?} in namespace {namespace:?}: a ProjectRoleTemplateBinding lives beside its Project"))),
                    Some(p) if of(&p) != cluster => causes.push(Cause::invalid("projectName", &value, format!("Project {project:?} belongs to cluster {:?}", of(&p)))),
                    // Owned by its Project, so it goes with it, as in Rancher.
                    Some(p) => owned_by(object, &p),
                }
            }
        }
        _ => {}
    }
    if !causes.is_empty() {
        return Ok(causes);
    }
    if let Some(user) = requester
        && !user.groups.iter().any(|g| g == crate::rbac::MASTERS)
    {
        if plural == "globalrolebindings" && global_role.is_none() {
            let name = object["globalRoleName"].as_str().unwrap_or_default();
            global_role = stored(resources, "globalroles", None, name).await?;
        }
        rbac.confirm_rancher(user, plural, object, global_role.as_ref())?;
    }
    Ok(causes)
}

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> Value {
    json!({"apiGroups": groups, "resources": resources, "verbs": verbs})
}

const READ: &[&str] = &["get", "list", "watch"];

/// The RoleTemplates and GlobalRoles Rancher ships, as lariat's `builtin` ones.
pub fn builtins() -> Vec<(&'static str, Value)> {
    let everything = vec![
        rule(&["*"], &["*"], &["*"]),
        json!({"nonResourceURLs": ["*"], "verbs": ["*"]}),
    ];
    // What a project's members work with, namespaced (a RoleBinding in each namespace).
    let workloads = |verbs: &[&str], secrets: bool| {
        let mut core = vec![
            "pods",
            "pods/log",
            "services",
            "endpoints",
            "configmaps",
            "persistentvolumeclaims",
            "serviceaccounts",
            "events",
            "replicationcontrollers",
        ];
        if secrets {
            core.extend(["secrets", "pods/exec", "pods/attach", "pods/portforward"]);
        }
        vec![
            rule(&[""], &core, verbs),
            // The namespace itself, read: a RoleBinding in it reaches only it, so members
            // see their project's namespaces and no other.
            rule(&[""], &["namespaces"], &["get"]),
            rule(&["apps", "batch", "autoscaling"], &["*"], verbs),
            rule(
                &["networking.k8s.io"],
                &["ingresses", "networkpolicies"],
                verbs,
            ),
            rule(&["policy"], &["poddisruptionbudgets"], verbs),
        ]
    };
    let mut member = workloads(&["*"], true);
    member.push(rule(
        &[crate::rbac::GROUP],
        &["roles", "rolebindings"],
        READ,
    ));
    let template = |name: &str, display: &str, context: &str, rules: Vec<Value>| {
        json!({
            "apiVersion": lariat_api::rancher::API_VERSION, "kind": "RoleTemplate",
            "metadata": {"name": name}, "displayName": display, "context": context,
            "builtin": true, "rules": rules,
        })
    };
    let global = |name: &str, display: &str, rules: Vec<Value>, inherited: &[&str]| {
        json!({
            "apiVersion": lariat_api::rancher::API_VERSION, "kind": "GlobalRole",
            "metadata": {"name": name}, "displayName": display, "builtin": true,
            "rules": rules, "inheritedClusterRoles": inherited,
        })
    };
    vec![
        (
            "roletemplates",
            template(
                "cluster-owner",
                "Cluster Owner",
                "cluster",
                everything.clone(),
            ),
        ),
        (
            "roletemplates",
            template(
                "cluster-member",
                "Cluster Member",
                "cluster",
                vec![
                    rule(&[""], &["nodes", "namespaces", "persistentvolumes"], READ),
                    rule(&["storage.k8s.io"], &["storageclasses"], READ),
                    rule(
                        &["apiextensions.k8s.io"],
                        &["customresourcedefinitions"],
                        READ,
                    ),
                    rule(&["metrics.k8s.io"], &["nodes", "pods"], READ),
                ],
            ),
        ),
        (
            "roletemplates",
            template(
                "project-owner",
                "Project Owner",
                "project",
                vec![rule(&["*"], &["*"], &["*"])],
            ),
        ),
        (
            "roletemplates",
            template("project-member", "Project Member", "project", member),
        ),
        (
            "roletemplates",
            template("read-only", "Read-only", "project", workloads(READ, false)),
        ),
        (
            "globalroles",
            global("admin", "Admin", everything, &["cluster-owner"]),
        ),
        (
            "globalroles",
            global(
                "restricted-admin",
                "Restricted Admin",
                vec![rule(&[CAPI_GROUP], &["clusters"], READ)],
                &["cluster-owner"],
            ),
        ),
    ]
}

/// Creates the built-in RoleTemplates and GlobalRoles, and puts back what a newer build
/// changes in them: they are lariat's (`builtin: true`), as Rancher's are Rancher's.
pub async fn bootstrap(resources: &Resources) -> crate::status::ApiResult<()> {
    let options = WriteOptions {
        field_manager: "lariat".into(),
        ..Default::default()
    };
    for (plural, wanted) in builtins() {
        let scope = resources
            .scope(GROUP, plural, None)
            .expect("Rancher's kinds are built in");
        let name = wanted["metadata"]["name"].as_str().unwrap_or_default();
        match resources.get(&scope, name).await {
            Ok(mut current) => {
                let mut changed = false;
                for (field, value) in wanted.as_object().into_iter().flatten() {
                    if field != "metadata" && current[field] != *value {
                        current[field] = value.clone();
                        changed = true;
                    }
                }
                if changed {
                    resources
                        .update(&scope, name, current, None, &options)
                        .await?;
                }
            }
            Err(ApiError::NotFound { .. }) => {
                match resources.create(&scope, wanted.clone(), &options).await {
                    Ok(_) | Err(ApiError::AlreadyExists { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn objects(items: Vec<(&str, Value)>) -> Objects {
        let mut objects = Objects::default();
        for (key, value) in items {
            objects.apply(key, Some(&serde_json::to_vec(&value).unwrap()));
        }
        objects
    }

    fn rule(resource: &str) -> Value {
        json!({"apiGroups": [""], "resources": [resource], "verbs": ["get"]})
    }

    fn fixture() -> Objects {
        objects(vec![
            (
                "roletemplates/base",
                json!({"context": "project", "rules": [rule("configmaps")]}),
            ),
            (
                "roletemplates/dev",
                json!({"context": "project", "rules": [rule("secrets")], "roleTemplateNames": ["base", "loop"]}),
            ),
            (
                "roletemplates/loop",
                json!({"context": "project", "roleTemplateNames": ["dev"]}),
            ),
            (
                "roletemplates/owner",
                json!({"context": "cluster", "rules": [rule("*")]}),
            ),
            (
                "roletemplates/view",
                json!({"context": "cluster", "external": true}),
            ),
            ("projects/team/p1", json!({"spec": {"clusterName": "c1"}})),
            ("projects/team/p2", json!({"spec": {"clusterName": "c2"}})),
            (
                "projectroletemplatebindings/team/alice",
                json!({"metadata": {"name": "alice", "namespace": "team"}, "projectName": "c1:p1", "roleTemplateName": "dev", "userName": "alice"}),
            ),
            (
                "projectroletemplatebindings/team/liar",
                json!({"metadata": {"name": "liar", "namespace": "team"}, "projectName": "c1:p2", "roleTemplateName": "dev", "userName": "mallory"}),
            ),
            (
                "clusterroletemplatebindings/team/bob",
                json!({"metadata": {"name": "bob", "namespace": "team"}, "clusterName": "c1", "roleTemplateName": "owner", "groupName": "ops"}),
            ),
            (
                "clusterroletemplatebindings/team/gone",
                json!({"metadata": {"name": "gone", "namespace": "team"}, "clusterName": "c1", "roleTemplateName": "missing", "userName": "x"}),
            ),
            (
                "globalroles/auditor",
                json!({"inheritedClusterRoles": ["view"], "rules": [rule("nodes")]}),
            ),
            (
                "globalrolebindings/carol",
                json!({"globalRoleName": "auditor", "userName": "carol"}),
            ),
        ])
    }

    #[test]
    fn templates_inherit_recursively_and_survive_loops() {
        let objects = fixture();
        let rules = objects.template_rules("dev").unwrap();
        let resources: Vec<_> = rules
            .iter()
            .map(|r| r.resources.clone().unwrap()[0].clone())
            .collect();
        assert_eq!(resources, ["secrets", "configmaps"]);
        assert!(objects.template_rules("missing").is_none());
    }

    #[test]
    fn a_clusters_access_has_what_concerns_it_only() {
        let objects = fixture();
        let access = objects.cluster_access("team", "c1");
        assert_eq!(
            access,
            json!({
                "clusterRoles": [
                    {"name": "lariat-dev", "rules": [rule("secrets"), rule("configmaps")]},
                    {"name": "lariat-owner", "rules": [rule("*")]},
                ],
                "clusterRoleBindings": [
                    {"name": hashed_name("lariat-grb-carol", "carol/view"), "roleName": "view", "subjects": [{"kind": "User", "name": "carol"}]},
                    {"name": "lariat-crtb-bob", "roleName": "lariat-owner", "subjects": [{"kind": "Group", "name": "ops"}]},
                ],
                "projectRoleBindings": [
                    {"name": "lariat-prtb-alice", "roleName": "lariat-dev", "projectId": "c1:p1", "subjects": [{"kind": "User", "name": "alice"}]},
                ],
            }),
            "an external template is the cluster's own ClusterRole; a missing one binds nothing; a project of c2 named as c1's reaches nowhere"
        );
        let other = objects.cluster_access("team", "c2");
        assert_eq!(other["projectRoleBindings"], json!([]));
        assert_eq!(
            other["clusterRoleBindings"].as_array().unwrap().len(),
            1,
            "the global role reaches every cluster"
        );
        assert_eq!(
            objects.cluster_access("elsewhere", "c1")["projectRoleBindings"],
            json!([])
        );
    }

    #[test]
    fn bindings_reach_their_clusters_proxy_on_lariat() {
        let objects = fixture();
        let grants = objects.management_grants();
        let of = |name: &str| -> Vec<(Option<String>, Vec<PolicyRule>)> {
            grants
                .iter()
                .filter(|(s, _, _)| s.name == name)
                .map(|(_, ns, rules)| (ns.clone(), rules.clone()))
                .collect()
        };
        let alice = of("alice");
        assert_eq!(alice.len(), 1);
        assert_eq!(alice[0].0.as_deref(), Some("team"));
        assert!(
            alice[0]
                .1
                .iter()
                .any(|r| r.resources == Some(vec!["clusters/proxy".into()])
                    && r.resource_names == Some(vec!["c1".into()]))
        );
        assert!(
            of("mallory").is_empty(),
            "a project binding naming the wrong cluster grants nothing"
        );
        let carol = of("carol");
        assert!(carol.iter().any(|(ns, rules)| {
            ns.is_none()
                && rules.iter().any(|r| {
                    r.resources == Some(vec!["clusters/proxy".into()]) && r.resource_names.is_none()
                })
        }));
        assert!(carol.iter().any(|(_, rules)| {
            rules
                .iter()
                .any(|r| r.resources == Some(vec!["nodes".into()]))
        }));
    }

    #[test]
    fn global_bindings_of_lookalike_names_stay_apart() {
        assert_ne!(
            hashed_name("lariat-grb-a", "a/cluster-owner"),
            hashed_name("lariat-grb-a-cluster", "a-cluster/owner")
        );
    }

    #[test]
    fn long_binding_names_stay_valid_and_distinct() {
        let a = downstream_name(&format!("lariat-crtb-{}", "a".repeat(250)));
        let b = downstream_name(&format!("lariat-crtb-{}b", "a".repeat(249)));
        assert!(a.len() <= 253 && b.len() <= 253);
        assert_ne!(a, b);
        assert!(lariat_api::names::is_dns1123_subdomain(&a));
    }
}
