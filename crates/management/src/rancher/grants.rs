//! What Rancher's bindings grant. On lariat itself, through RBAC's index (this is its
//! [`GrantSource`]): a GlobalRoleBinding grants its GlobalRole's `rules` everywhere and its
//! `namespacedRules` in their namespaces; any binding that reaches a cluster (a
//! ClusterRoleTemplateBinding, a ProjectRoleTemplateBinding, a GlobalRole with
//! `inheritedClusterRoles`) grants reading that Cluster and its proxy, so a caller with no
//! binding for a cluster is refused at lariat's proxy before anything is sent. In each
//! downstream cluster, through its ClusterAccess ([`Objects::cluster_access`]).

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::rbac::v1::{PolicyRule, Subject};
use lariat_api::rancher::{
    ClusterRoleTemplateBinding, GROUP, GlobalRole, GlobalRoleBinding, Project,
    ProjectRoleTemplateBinding, RoleTemplate,
};
use lariat_apiserver::follow::put;
use lariat_apiserver::rbac::GrantSource;
use serde_json::{Value, json};
use sha2::Digest;

const CAPI_GROUP: &str = "cluster.x-k8s.io";

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
    /// Applies one stored change (`key`: `PLURAL/NAME` or `PLURAL/NAMESPACE/NAME`); `None`
    /// deletes. Returns
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

    /// Forgets every object of the kind `plural`.
    pub fn forget(&mut self, plural: &str) {
        match plural {
            "globalroles" => self.global_roles.clear(),
            "globalrolebindings" => self.global_role_bindings.clear(),
            "roletemplates" => self.role_templates.clear(),
            "clusterroletemplatebindings" => self.cluster_bindings.clear(),
            "projects" => self.projects.clear(),
            "projectroletemplatebindings" => self.project_bindings.clear(),
            _ => {}
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

/// RBAC's index of Rancher's grants on lariat, kept by the index's own watch.
#[derive(Default)]
pub struct Grants(Objects);

impl GrantSource for Grants {
    fn group(&self) -> &'static str {
        GROUP
    }

    fn clear(&mut self) {
        self.0 = Objects::default();
    }

    fn apply(&mut self, key: &str, value: Option<&[u8]>) -> bool {
        self.0.apply(key, value)
    }

    fn grants(&self) -> Vec<(Subject, Option<String>, Vec<PolicyRule>)> {
        self.0.management_grants()
    }
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
