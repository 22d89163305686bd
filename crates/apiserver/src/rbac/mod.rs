//! Kubernetes RBAC (rbac.authorization.k8s.io/v1) as kube-apiserver enforces it: Roles and
//! ClusterRoles hold rules, RoleBindings and ClusterRoleBindings grant them to users, groups
//! and ServiceAccounts. [`Rbac`] answers every request from an index of grants by subject,
//! rebuilt by one watch on the four kinds, so a decision reads no store: it walks only the
//! grants of the caller's name and groups. `system:masters` is allowed everything before RBAC
//! is asked, as kube-apiserver's own authorizer chain does.
//!
//! Writes to the four kinds pass [`Rbac::confirm_write`] (escalation prevention): no one
//! creates a role holding rules they do not hold themselves (or the `escalate` verb on it),
//! nor binds a role whose rules they do not hold (or the `bind` verb on it).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use k8s_openapi::api::rbac::v1::{
    AggregationRule, ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef,
    Subject,
};
use lariat_store::Store;
use serde_json::{Value, json};

use crate::identity::{Attributes, Authorizer, User};
use crate::status::{ApiError, ApiResult};

pub mod defaults;

pub const GROUP: &str = "rbac.authorization.k8s.io";
/// Allowed everything, whatever the bindings say.
pub const MASTERS: &str = "system:masters";
/// Every authenticated caller is in this group.
pub const AUTHENTICATED: &str = "system:authenticated";
const PREFIX: &str = "/registry/rbac.authorization.k8s.io/";

/// Kinds beyond RBAC's own whose objects grant rules on this server too (Rancher's bindings,
/// from the management plane's configuration), kept as RBAC's index keeps its four: from one
/// watch of their API group.
pub trait GrantSource: Send + Sync {
    /// The API group whose objects it reads.
    fn group(&self) -> &'static str;
    /// Forgets everything (a fresh list follows).
    fn clear(&mut self);
    /// One object of the group, `PLURAL/NAME` or `PLURAL/NAMESPACE/NAME`, its JSON; `None`
    /// when deleted. Returns whether what it grants may have changed.
    fn apply(&mut self, key: &str, value: Option<&[u8]>) -> bool;
    /// What its objects grant: `(subject, namespace, rules)`, a namespace of `None` meaning
    /// everywhere.
    fn grants(&self) -> Vec<(Subject, Option<String>, Vec<PolicyRule>)>;
}

/// The four kinds as last seen in the store, keyed as stored (`NAMESPACE/NAME` or `NAME`),
/// and the sources of further grants with the store prefix of each.
#[derive(Default)]
struct Objects {
    roles: HashMap<String, Role>,
    cluster_roles: HashMap<String, ClusterRole>,
    role_bindings: HashMap<String, RoleBinding>,
    cluster_role_bindings: HashMap<String, ClusterRoleBinding>,
    sources: Vec<(String, Box<dyn GrantSource>)>,
}

impl Objects {
    fn with_sources(sources: Vec<Box<dyn GrantSource>>) -> Objects {
        Objects {
            sources: sources
                .into_iter()
                .map(|source| (format!("/registry/{}/", source.group()), source))
                .collect(),
            ..Default::default()
        }
    }

    /// The store prefixes RBAC follows: its own and its sources'.
    fn prefixes(&self) -> Vec<String> {
        std::iter::once(PREFIX.to_string())
            .chain(self.sources.iter().map(|(prefix, _)| prefix.clone()))
            .collect()
    }
}

impl crate::follow::Mirror for Objects {
    fn clear(&mut self) {
        self.roles.clear();
        self.cluster_roles.clear();
        self.role_bindings.clear();
        self.cluster_role_bindings.clear();
        for (_, source) in &mut self.sources {
            source.clear();
        }
    }

    fn apply(&mut self, key: &str, value: Option<&[u8]>) -> bool {
        for (prefix, source) in &mut self.sources {
            if let Some(key) = key.strip_prefix(prefix.as_str()) {
                return source.apply(key, value);
            }
        }
        let Some((plural, name)) = key.strip_prefix(PREFIX).and_then(|k| k.split_once('/')) else {
            return false;
        };
        match plural {
            "roles" => crate::follow::put(&mut self.roles, name, value),
            "clusterroles" => crate::follow::put(&mut self.cluster_roles, name, value),
            "rolebindings" => crate::follow::put(&mut self.role_bindings, name, value),
            "clusterrolebindings" => {
                crate::follow::put(&mut self.cluster_role_bindings, name, value)
            }
            _ => false,
        }
    }
}

impl Objects {
    /// The rules of ClusterRole `name`: its own, or for an aggregated one the union of the
    /// rules of every ClusterRole its selectors match (themselves aggregated or not).
    fn cluster_role_rules(&self, name: &str, seen: &mut HashSet<String>) -> Vec<PolicyRule> {
        if !seen.insert(name.to_string()) {
            return vec![];
        }
        let Some(role) = self.cluster_roles.get(name) else {
            return vec![];
        };
        let Some(aggregation) = &role.aggregation_rule else {
            return role.rules.clone().unwrap_or_default();
        };
        let mut rules: Vec<PolicyRule> = Vec::new();
        let mut names: Vec<&String> = self
            .cluster_roles
            .iter()
            .filter(|(other, r)| *other != name && aggregates(aggregation, r))
            .map(|(other, _)| other)
            .collect();
        names.sort();
        for other in names {
            for rule in self.cluster_role_rules(other, seen) {
                if !rules.contains(&rule) {
                    rules.push(rule);
                }
            }
        }
        rules
    }

    fn index(&self) -> Index {
        let mut index = Index::default();
        for name in self.cluster_roles.keys() {
            let rules = self.cluster_role_rules(name, &mut HashSet::new());
            index.cluster_roles.insert(name.clone(), Arc::new(rules));
        }
        for (key, role) in &self.roles {
            let rules = role.rules.clone().unwrap_or_default();
            index.roles.insert(key.clone(), Arc::new(rules));
        }
        for binding in self.cluster_role_bindings.values() {
            if binding.role_ref.kind != "ClusterRole" {
                continue;
            }
            let Some(rules) = index.cluster_roles.get(&binding.role_ref.name).cloned() else {
                continue;
            };
            for subject in binding.subjects.iter().flatten() {
                if let Some(key) = subject_key(subject, None) {
                    index.grants.entry(key).or_default().push(Grant {
                        namespace: None,
                        rules: rules.clone(),
                    });
                }
            }
        }
        let granted = self.sources.iter().flat_map(|(_, source)| source.grants());
        for (subject, namespace, rules) in granted {
            if let Some(key) = subject_key(&subject, None) {
                index.grants.entry(key).or_default().push(Grant {
                    namespace,
                    rules: Arc::new(rules),
                });
            }
        }
        for binding in self.role_bindings.values() {
            let namespace = binding.metadata.namespace.clone().unwrap_or_default();
            let Some(rules) = index.role_ref_rules(&binding.role_ref, &namespace) else {
                continue;
            };
            for subject in binding.subjects.iter().flatten() {
                if let Some(key) = subject_key(subject, Some(&namespace)) {
                    index.grants.entry(key).or_default().push(Grant {
                        namespace: Some(namespace.clone()),
                        rules: rules.clone(),
                    });
                }
            }
        }
        index
    }
}

/// Whether ClusterRole `role` is selected by `aggregation` (matchLabels and matchExpressions,
/// as a label selector).
fn aggregates(aggregation: &AggregationRule, role: &ClusterRole) -> bool {
    let labels = role.metadata.labels.clone().unwrap_or_default();
    aggregation
        .cluster_role_selectors
        .iter()
        .flatten()
        .any(|selector| {
            let by_label = selector
                .match_labels
                .iter()
                .flatten()
                .all(|(k, v)| labels.get(k) == Some(v));
            let by_expression = selector.match_expressions.iter().flatten().all(|e| {
                let values = e.values.clone().unwrap_or_default();
                match e.operator.as_str() {
                    "In" => labels.get(&e.key).is_some_and(|v| values.contains(v)),
                    "NotIn" => labels.get(&e.key).is_none_or(|v| !values.contains(v)),
                    "Exists" => labels.contains_key(&e.key),
                    "DoesNotExist" => !labels.contains_key(&e.key),
                    _ => false,
                }
            });
            // An empty selector selects nothing here: aggregating every ClusterRole into one
            // is never what a role's author meant.
            let empty = selector.match_labels.as_ref().is_none_or(|m| m.is_empty())
                && selector
                    .match_expressions
                    .as_ref()
                    .is_none_or(|m| m.is_empty());
            !empty && by_label && by_expression
        })
}

/// The index key of a binding's subject: `u:NAME` or `g:NAME`; a ServiceAccount is the user
/// `system:serviceaccount:NAMESPACE:NAME`.
fn subject_key(subject: &Subject, binding_namespace: Option<&str>) -> Option<String> {
    match subject.kind.as_str() {
        "User" => Some(format!("u:{}", subject.name)),
        "Group" => Some(format!("g:{}", subject.name)),
        "ServiceAccount" => {
            let namespace = subject.namespace.as_deref().or(binding_namespace)?;
            Some(format!(
                "u:system:serviceaccount:{namespace}:{}",
                subject.name
            ))
        }
        _ => None,
    }
}

/// Rules granted by one binding, where they apply.
struct Grant {
    /// `None`: everywhere (a ClusterRoleBinding); else only in this namespace.
    namespace: Option<String>,
    rules: Arc<Vec<PolicyRule>>,
}

#[derive(Default)]
struct Index {
    grants: HashMap<String, Vec<Grant>>,
    cluster_roles: HashMap<String, Arc<Vec<PolicyRule>>>,
    /// By `NAMESPACE/NAME`.
    roles: HashMap<String, Arc<Vec<PolicyRule>>>,
}

impl Index {
    fn role_ref_rules(&self, role_ref: &RoleRef, namespace: &str) -> Option<Arc<Vec<PolicyRule>>> {
        match role_ref.kind.as_str() {
            "ClusterRole" => self.cluster_roles.get(&role_ref.name).cloned(),
            "Role" => self
                .roles
                .get(&format!("{namespace}/{}", role_ref.name))
                .cloned(),
            _ => None,
        }
    }

    /// The grants that apply to `user` in `namespace` (`None`: cluster-wide ones only).
    fn grants<'a>(
        &'a self,
        user: &'a User,
        namespace: Option<&'a str>,
    ) -> impl Iterator<Item = &'a Grant> + 'a {
        std::iter::once(format!("u:{}", user.name))
            .chain(user.groups.iter().map(|g| format!("g:{g}")))
            .filter_map(|key| self.grants.get(&key))
            .flatten()
            .filter(move |grant| {
                grant.namespace.is_none() || grant.namespace.as_deref() == namespace
            })
    }
}

impl Rbac {
    /// A Token authenticates as `spec.user` in `spec.groups`: its creator must be that user
    /// with those groups, or hold `impersonate` on that user and on each group they lack.
    fn confirm_token(&self, user: &User, object: &Value) -> ApiResult<()> {
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let subject = object["spec"]["user"].as_str().unwrap_or_default();
        let may_impersonate = |resource: &str, name: &str| {
            self.authorize(
                user,
                &Attributes {
                    verb: "impersonate".into(),
                    group: String::new(),
                    resource: resource.into(),
                    subresource: None,
                    namespace: None,
                    name: Some(name.into()),
                    path: None,
                },
            )
            .is_ok()
        };
        let mut lacking = Vec::new();
        if subject != user.name && !may_impersonate("users", subject) {
            lacking.push(format!("users {subject:?}"));
        }
        for group in object["spec"]["groups"].as_array().into_iter().flatten() {
            let group = group.as_str().unwrap_or_default();
            if !user.groups.iter().any(|g| g == group) && !may_impersonate("groups", group) {
                lacking.push(format!("groups {group:?}"));
            }
        }
        if lacking.is_empty() {
            return Ok(());
        }
        Err(ApiError::Forbidden {
            message: format!(
                "tokens.{} {name:?} is forbidden: User {:?} may create tokens only for itself and its own groups; this one needs impersonate on {}",
                lariat_api::management::GROUP,
                user.name,
                lacking.join(" and ")
            ),
        })
    }
}

/// RBAC's decisions, from the index one watch keeps.
pub struct Rbac {
    index: RwLock<Arc<Index>>,
    /// What the index is built from, until [`Rbac::follow`] takes it.
    objects: std::sync::Mutex<Option<Objects>>,
}

impl Rbac {
    /// Reads the four kinds (and what `sources` read) from `store` and indexes them, so the
    /// server decides from its first request; [`Rbac::follow`] keeps the index current from
    /// then on.
    pub async fn load(
        store: &Arc<dyn Store>,
        sources: Vec<Box<dyn GrantSource>>,
    ) -> Result<Arc<Rbac>, lariat_store::Error> {
        let mut objects = Objects::with_sources(sources);
        let prefixes = objects.prefixes();
        let prefixes: Vec<&str> = prefixes.iter().map(String::as_str).collect();
        crate::follow::load(store, &prefixes, &mut objects).await?;
        let rbac = Arc::new(Rbac {
            index: RwLock::new(Arc::new(objects.index())),
            objects: std::sync::Mutex::new(Some(objects)),
        });
        Ok(rbac)
    }

    fn publish(&self, objects: &Objects) {
        let index = Arc::new(objects.index());
        *self.index.write().expect("rbac index lock") = index;
    }

    fn current(&self) -> Arc<Index> {
        self.index.read().expect("rbac index lock").clone()
    }

    /// Keeps the index in step with the store until `stop`.
    pub async fn follow(
        self: Arc<Self>,
        store: Arc<dyn Store>,
        stop: tokio::sync::watch::Receiver<bool>,
    ) {
        let Some(mut objects) = self.objects.lock().expect("rbac objects lock").take() else {
            return;
        };
        let prefixes = objects.prefixes();
        let prefixes: Vec<&str> = prefixes.iter().map(String::as_str).collect();
        crate::follow::follow(
            store,
            &prefixes,
            &mut objects,
            |objects| self.publish(objects),
            stop,
        )
        .await;
    }

    /// Whether `user` may `verb` the object `name` of `group`/`resource` in `namespace`.
    pub fn may(
        &self,
        user: &User,
        verb: &str,
        group: &str,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> bool {
        let attributes = Attributes {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: None,
            namespace: namespace.map(String::from),
            name: Some(name.into()),
            path: None,
        };
        self.authorize(user, &attributes).is_ok()
    }

    /// The rules `user` holds in `namespace` (`None`: cluster-wide), as a
    /// SelfSubjectRulesReview lists them.
    pub fn rules_for(&self, user: &User, namespace: Option<&str>) -> Vec<PolicyRule> {
        let index = self.current();
        let mut rules: Vec<PolicyRule> = Vec::new();
        for grant in index.grants(user, namespace) {
            for rule in grant.rules.iter() {
                if !rules.contains(rule) {
                    rules.push(rule.clone());
                }
            }
        }
        rules
    }

    /// Escalation prevention for a write of `object` (a Role, ClusterRole, RoleBinding or
    /// ClusterRoleBinding, as kube-apiserver's RBAC storage checks it; or a Token) by `user`.
    pub fn confirm_write(
        &self,
        user: &User,
        group: &str,
        plural: &str,
        object: &Value,
    ) -> ApiResult<()> {
        if user.groups.iter().any(|g| g == MASTERS) {
            return Ok(());
        }
        if group == lariat_api::management::GROUP && plural == "tokens" {
            return self.confirm_token(user, object);
        }
        if group != GROUP {
            return Ok(());
        }
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let namespace = object["metadata"]["namespace"]
            .as_str()
            .filter(|ns| !ns.is_empty());
        let may = |verb: &str, resource: &str, name: &str| {
            self.may(user, verb, GROUP, resource, namespace, name)
        };
        let forbidden = |why: String| ApiError::Forbidden {
            message: format!("{plural}.{GROUP} \"{name}\" is forbidden: {why}"),
        };
        let rules: Vec<PolicyRule> = match plural {
            "roles" | "clusterroles" => {
                if may("escalate", plural, name) {
                    return Ok(());
                }
                if !object["aggregationRule"].is_null() {
                    // What an aggregated role holds is decided by others' labels later, so only
                    // a holder of every permission may create one.
                    let held = self.rules_for(user, namespace);
                    let all = full_authority()
                        .iter()
                        .flat_map(atomic_rules)
                        .all(|servant| held.iter().any(|owner| covers(owner, &servant)));
                    if all {
                        return Ok(());
                    }
                    return Err(forbidden(
                        "must have cluster-admin privileges to use the aggregationRule".into(),
                    ));
                } else {
                    serde_json::from_value(object["rules"].clone()).unwrap_or_default()
                }
            }
            "rolebindings" | "clusterrolebindings" => {
                let role_ref: RoleRef = serde_json::from_value(object["roleRef"].clone())
                    .map_err(|e| forbidden(format!("roleRef: {e}")))?;
                let role_plural = if role_ref.kind == "Role" {
                    "roles"
                } else {
                    "clusterroles"
                };
                if may("bind", role_plural, &role_ref.name) {
                    return Ok(());
                }
                let index = self.current();
                match index.role_ref_rules(&role_ref, namespace.unwrap_or_default()) {
                    Some(rules) => rules.to_vec(),
                    None => {
                        return Err(forbidden(format!(
                            "{role_plural}.{GROUP} \"{}\" not found",
                            role_ref.name
                        )));
                    }
                }
            }
            _ => return Ok(()),
        };
        let held = self.rules_for(user, namespace);
        let missing: Vec<String> = rules
            .iter()
            .flat_map(atomic_rules)
            .filter(|servant| !held.iter().any(|owner| covers(owner, servant)))
            .map(|rule| describe_rule(&rule))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let groups: Vec<String> = user.groups.iter().map(|g| format!("{g:?}")).collect();
        Err(forbidden(format!(
            "user {:?} (groups=[{}]) is attempting to grant RBAC permissions not currently held:\n{}",
            user.name,
            groups.join(" "),
            missing.join("\n")
        )))
    }
}

impl Rbac {
    /// What of `rules` (in `namespace`, `None`: cluster-wide) `user` does not hold, each rule
    /// described as kube-apiserver's escalation refusals list them: empty when it holds all.
    pub fn lacking(
        &self,
        user: &User,
        rules: &[PolicyRule],
        namespace: Option<&str>,
    ) -> Vec<String> {
        let held = self.rules_for(user, namespace);
        rules
            .iter()
            .flat_map(atomic_rules)
            .filter(|servant| !held.iter().any(|owner| covers(owner, servant)))
            .map(|rule| describe_rule(&rule))
            .collect()
    }
}

impl Authorizer for Rbac {
    fn authorize(&self, user: &User, attributes: &Attributes) -> Result<(), String> {
        if user.groups.iter().any(|g| g == MASTERS) {
            return Ok(());
        }
        let index = self.current();
        let namespace = attributes.namespace.as_deref();
        let allowed = index
            .grants(user, namespace)
            .any(|grant| grant.rules.iter().any(|rule| allows(rule, attributes)));
        // As kube-apiserver's RBAC authorizer: a refusal has no reason beyond the request.
        if allowed { Ok(()) } else { Err(String::new()) }
    }

    fn readable_by_name(&self, user: &User, attributes: &Attributes) -> Vec<String> {
        let index = self.current();
        let mut names: Vec<String> = Vec::new();
        for grant in index.grants(user, attributes.namespace.as_deref()) {
            for rule in grant.rules.iter() {
                let Some(first) = rule.resource_names.iter().flatten().next() else {
                    continue;
                };
                let get = Attributes {
                    verb: "get".into(),
                    subresource: None,
                    name: Some(first.clone()),
                    ..attributes.clone()
                };
                if allows(rule, &get) {
                    names.extend(rule.resource_names.iter().flatten().cloned());
                }
            }
        }
        names.sort();
        names.dedup();
        names
    }
}

fn has(list: &Option<Vec<String>>, wanted: &str) -> bool {
    list.iter().flatten().any(|v| v == wanted)
}

/// Whether `rule` allows the request `attributes` (kube-apiserver's `RuleAllows`).
pub fn allows(rule: &PolicyRule, attributes: &Attributes) -> bool {
    let verb = &attributes.verb;
    if !rule.verbs.iter().any(|v| v == "*" || v == verb) {
        return false;
    }
    if let Some(path) = &attributes.path {
        return rule.non_resource_urls.iter().flatten().any(|url| {
            url == "*"
                || url == path
                || url
                    .strip_suffix('*')
                    .is_some_and(|prefix| path.starts_with(prefix))
        });
    }
    let group_matches = has(&rule.api_groups, &attributes.group) || has(&rule.api_groups, "*");
    if !group_matches {
        return false;
    }
    let combined = match &attributes.subresource {
        Some(sub) => format!("{}/{sub}", attributes.resource),
        None => attributes.resource.clone(),
    };
    let resource_matches = rule.resources.iter().flatten().any(|r| {
        r == "*"
            || *r == combined
            || attributes
                .subresource
                .as_ref()
                .is_some_and(|sub| r.strip_prefix("*/") == Some(sub.as_str()))
    });
    if !resource_matches {
        return false;
    }
    match &rule.resource_names {
        Some(names) if !names.is_empty() => attributes
            .name
            .as_ref()
            .is_some_and(|name| names.contains(name)),
        _ => true,
    }
}

/// Every permission there is: what `cluster-admin` holds.
pub fn full_authority() -> Vec<PolicyRule> {
    vec![
        PolicyRule {
            api_groups: Some(vec!["*".into()]),
            resources: Some(vec!["*".into()]),
            verbs: vec!["*".into()],
            ..Default::default()
        },
        PolicyRule {
            non_resource_urls: Some(vec!["*".into()]),
            verbs: vec!["*".into()],
            ..Default::default()
        },
    ]
}

/// `rule` split into rules of one verb, group, resource and name each (or one verb and URL).
fn atomic_rules(rule: &PolicyRule) -> Vec<PolicyRule> {
    let mut out = Vec::new();
    let one = |v: &str| Some(vec![v.to_string()]);
    for verb in &rule.verbs {
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                let names: Vec<Option<&String>> = match &rule.resource_names {
                    Some(names) if !names.is_empty() => names.iter().map(Some).collect(),
                    _ => vec![None],
                };
                for name in names {
                    out.push(PolicyRule {
                        verbs: vec![verb.clone()],
                        api_groups: one(group),
                        resources: one(resource),
                        resource_names: name.map(|n| vec![n.clone()]),
                        ..Default::default()
                    });
                }
            }
        }
        for url in rule.non_resource_urls.iter().flatten() {
            out.push(PolicyRule {
                verbs: vec![verb.clone()],
                non_resource_urls: one(url),
                ..Default::default()
            });
        }
    }
    out
}

/// Whether `owner` holds the atomic rule `servant` (kube-apiserver's `ruleCovers`).
fn covers(owner: &PolicyRule, servant: &PolicyRule) -> bool {
    let verb = &servant.verbs[0];
    if !owner.verbs.iter().any(|v| v == "*" || v == verb) {
        return false;
    }
    if let Some(url) = servant.non_resource_urls.iter().flatten().next() {
        return owner.non_resource_urls.iter().flatten().any(|o| {
            o == "*"
                || o == url
                || o.strip_suffix('*')
                    .is_some_and(|prefix| url.starts_with(prefix))
        });
    }
    let group = servant
        .api_groups
        .iter()
        .flatten()
        .next()
        .cloned()
        .unwrap_or_default();
    let resource = servant
        .resources
        .iter()
        .flatten()
        .next()
        .cloned()
        .unwrap_or_default();
    if !(has(&owner.api_groups, "*") || has(&owner.api_groups, &group)) {
        return false;
    }
    let resource_covered = owner.resources.iter().flatten().any(|o| {
        o == "*"
            || *o == resource
            || match resource.split_once('/') {
                Some((base, sub)) => {
                    o.strip_prefix("*/") == Some(sub) || o.strip_suffix("/*") == Some(base)
                }
                None => false,
            }
    });
    if !resource_covered {
        return false;
    }
    match &owner.resource_names {
        Some(names) if !names.is_empty() => servant
            .resource_names
            .iter()
            .flatten()
            .next()
            .is_some_and(|n| names.contains(n)),
        _ => true,
    }
}

/// A rule as kube-apiserver prints one it refuses to grant.
fn describe_rule(rule: &PolicyRule) -> String {
    let list = |v: &[String]| {
        v.iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut parts = Vec::new();
    if let Some(groups) = &rule.api_groups {
        parts.push(format!("APIGroups:[{}]", list(groups)));
    }
    if let Some(resources) = &rule.resources {
        parts.push(format!("Resources:[{}]", list(resources)));
    }
    if let Some(names) = rule.resource_names.as_ref().filter(|n| !n.is_empty()) {
        parts.push(format!("ResourceNames:[{}]", list(names)));
    }
    if let Some(urls) = &rule.non_resource_urls {
        parts.push(format!("NonResourceURLs:[{}]", list(urls)));
    }
    parts.push(format!("Verbs:[{}]", list(&rule.verbs)));
    format!("{{{}}}", parts.join(", "))
}

/// A SelfSubjectRulesReview's status for `rules`.
pub fn rules_review_status(rules: &[PolicyRule]) -> Value {
    let resource_rules: Vec<Value> = rules
        .iter()
        .filter(|r| r.non_resource_urls.as_ref().is_none_or(|u| u.is_empty()))
        .map(|r| {
            json!({
                "verbs": r.verbs,
                "apiGroups": r.api_groups.clone().unwrap_or_default(),
                "resources": r.resources.clone().unwrap_or_default(),
                "resourceNames": r.resource_names.clone().unwrap_or_default(),
            })
        })
        .collect();
    let non_resource_rules: Vec<Value> = rules
        .iter()
        .filter(|r| r.non_resource_urls.as_ref().is_some_and(|u| !u.is_empty()))
        .map(|r| json!({"verbs": r.verbs, "nonResourceURLs": r.non_resource_urls}))
        .collect();
    json!({
        "resourceRules": resource_rules,
        "nonResourceRules": non_resource_rules,
        "incomplete": false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(value: Value) -> PolicyRule {
        serde_json::from_value(value).unwrap()
    }

    fn request(
        verb: &str,
        group: &str,
        resource: &str,
        sub: Option<&str>,
        name: Option<&str>,
    ) -> Attributes {
        Attributes {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: sub.map(String::from),
            namespace: Some("team-a".into()),
            name: name.map(String::from),
            path: None,
        }
    }

    #[test]
    fn rules_match_as_kube_apiserver_matches_them() {
        let pods =
            rule(json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}));
        assert!(allows(&pods, &request("get", "", "pods", None, Some("x"))));
        assert!(!allows(
            &pods,
            &request("delete", "", "pods", None, Some("x"))
        ));
        assert!(!allows(&pods, &request("get", "apps", "pods", None, None)));
        // A subresource is its own resource: `pods` does not reach `pods/log`.
        assert!(!allows(
            &pods,
            &request("get", "", "pods", Some("log"), Some("x"))
        ));
        let logs = rule(json!({"apiGroups": ["*"], "resources": ["*/log"], "verbs": ["*"]}));
        assert!(allows(
            &logs,
            &request("get", "", "pods", Some("log"), Some("x"))
        ));
        assert!(!allows(&logs, &request("get", "", "pods", None, Some("x"))));
        let named = rule(
            json!({"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["a"], "verbs": ["get", "list"]}),
        );
        assert!(allows(
            &named,
            &request("get", "", "secrets", None, Some("a"))
        ));
        assert!(!allows(
            &named,
            &request("get", "", "secrets", None, Some("b"))
        ));
        assert!(
            !allows(&named, &request("list", "", "secrets", None, None)),
            "a list names nothing"
        );
        let urls = rule(json!({"nonResourceURLs": ["/apis/*", "/version"], "verbs": ["get"]}));
        assert!(allows(
            &urls,
            &Attributes::non_resource("get", "/apis/example.com")
        ));
        assert!(allows(&urls, &Attributes::non_resource("get", "/version")));
        assert!(!allows(
            &urls,
            &Attributes::non_resource("get", "/versionx")
        ));
        assert!(!allows(
            &urls,
            &Attributes::non_resource("post", "/version")
        ));
        assert!(
            !allows(&pods, &Attributes::non_resource("get", "/api")),
            "resource rules reach no URL"
        );
    }

    #[test]
    fn covering_is_per_verb_resource_and_name() {
        let owner = rule(
            json!({"apiGroups": [""], "resources": ["pods", "*/status"], "verbs": ["get", "update"]}),
        );
        let wanted = |v: Value| atomic_rules(&rule(v)).iter().all(|r| covers(&owner, r));
        assert!(wanted(
            json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]})
        ));
        assert!(wanted(
            json!({"apiGroups": [""], "resources": ["pods"], "resourceNames": ["a"], "verbs": ["get"]})
        ));
        assert!(wanted(
            json!({"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["update"]})
        ));
        assert!(
            !wanted(json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]})),
            "* is more than any verb list"
        );
        assert!(!wanted(
            json!({"apiGroups": ["*"], "resources": ["pods"], "verbs": ["get"]})
        ));
        assert!(!wanted(
            json!({"apiGroups": [""], "resources": ["pods", "secrets"], "verbs": ["get"]})
        ));
        let named_owner = rule(
            json!({"apiGroups": [""], "resources": ["pods"], "resourceNames": ["a"], "verbs": ["get"]}),
        );
        let all_pods = atomic_rules(&rule(
            json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}),
        ));
        assert!(
            !covers(&named_owner, &all_pods[0]),
            "one pod is not every pod"
        );
    }

    fn objects(items: Vec<(&str, Value)>) -> Objects {
        let mut objects = Objects::default();
        for (key, value) in items {
            let key = if key.starts_with('/') {
                key.to_string()
            } else {
                format!("{PREFIX}{key}")
            };
            crate::follow::Mirror::apply(
                &mut objects,
                &key,
                Some(&serde_json::to_vec(&value).unwrap()),
            );
        }
        objects
    }

    #[test]
    fn grants_follow_bindings_namespaces_and_aggregation() {
        let objects = objects(vec![
            (
                "clusterroles/agg",
                json!({"metadata": {"name": "agg"}, "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"x": "y"}}]}}),
            ),
            (
                "clusterroles/part",
                json!({"metadata": {"name": "part", "labels": {"x": "y"}}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
            ),
            (
                "clusterroles/loop",
                json!({"metadata": {"name": "loop", "labels": {"x": "y"}}, "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"x": "y"}}]}}),
            ),
            (
                "rolebindings/team-a/devs",
                json!({"metadata": {"name": "devs", "namespace": "team-a"}, "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": "agg"}, "subjects": [{"kind": "Group", "name": "devs"}, {"kind": "ServiceAccount", "name": "ci"}]}),
            ),
            (
                "rolebindings/team-a/missing",
                json!({"metadata": {"name": "missing", "namespace": "team-a"}, "roleRef": {"apiGroup": GROUP, "kind": "Role", "name": "nope"}, "subjects": [{"kind": "User", "name": "eve"}]}),
            ),
        ]);
        let rbac = Rbac {
            index: RwLock::new(Arc::new(objects.index())),
            objects: Default::default(),
        };
        let dev = User {
            name: "alice".into(),
            groups: vec!["devs".into()],
        };
        let get = |ns: &str| Attributes {
            namespace: Some(ns.into()),
            ..request("get", "", "pods", None, Some("p"))
        };
        assert!(rbac.authorize(&dev, &get("team-a")).is_ok());
        assert!(rbac.authorize(&dev, &get("team-b")).is_err());
        let ci = User {
            name: "system:serviceaccount:team-a:ci".into(),
            groups: vec![],
        };
        assert!(
            rbac.authorize(&ci, &get("team-a")).is_ok(),
            "a ServiceAccount subject defaults to the binding's namespace"
        );
        let eve = User {
            name: "eve".into(),
            groups: vec![],
        };
        assert!(
            rbac.authorize(&eve, &get("team-a")).is_err(),
            "a binding to a missing role grants nothing"
        );
        let root = User {
            name: "root".into(),
            groups: vec![MASTERS.into()],
        };
        assert!(rbac.authorize(&root, &get("team-b")).is_ok());
    }
}
