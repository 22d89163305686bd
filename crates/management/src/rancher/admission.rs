//! Admission of writes of Rancher's access-control kinds, with what they refer to (read from
//! the store as it is now, so a Project and its binding applied together are judged in order)
//! and who writes them: Rancher's webhook's checks, and escalation prevention as RBAC's.

use std::collections::HashSet;

use k8s_openapi::api::rbac::v1::PolicyRule;
use lariat_api::rancher::{GROUP, GlobalRole, RoleTemplate};
use lariat_apiserver::identity::User;
use lariat_apiserver::rbac::{self, Rbac};
use lariat_apiserver::status::{ApiError, ApiResult, Cause};
use lariat_apiserver::strategy::{Reader, Validator, Validators, Write};
use serde_json::{Value, json};

const CAPI_GROUP: &str = "cluster.x-k8s.io";

/// Rancher's access-control kinds' validator, and the ClusterAccesses', for the server's
/// configuration.
pub fn validators() -> Validators {
    let plurals: Vec<&str> = lariat_api::rancher::KINDS.iter().map(|(_, p)| *p).collect();
    Validators::default()
        .with_shared(GROUP, &plurals, std::sync::Arc::new(Rancher))
        .with_shared(
            lariat_api::management::GROUP,
            &["clusteraccesses"],
            std::sync::Arc::new(ClusterAccesses),
        )
}

/// A ClusterAccess is lariat's to write (from Rancher's bindings, `accesses.rs`): anyone else
/// is refused, whatever RBAC grants; its agent writes only its status.
struct ClusterAccesses;

#[async_trait::async_trait]
impl Validator for ClusterAccesses {
    async fn validate(
        &self,
        write: Write<'_>,
        object: &mut Value,
        _old: Option<&Value>,
    ) -> ApiResult<Vec<Cause>> {
        match write.requester {
            // Judged by how it arrived, not by its name: anyone may be impersonated.
            Some(_) if write.in_process => Ok(Vec::new()),
            Some(_) => Err(ApiError::Forbidden {
                message: format!(
                    "clusteraccesses.{} {:?} is forbidden: lariat writes ClusterAccesses from Rancher's bindings ({GROUP}); change those instead",
                    lariat_api::management::GROUP,
                    object["metadata"]["name"].as_str().unwrap_or_default()
                ),
            }),
            _ => Ok(Vec::new()),
        }
    }
}

struct Rancher;

#[async_trait::async_trait]
impl Validator for Rancher {
    async fn validate(
        &self,
        write: Write<'_>,
        object: &mut Value,
        old: Option<&Value>,
    ) -> ApiResult<Vec<Cause>> {
        admit(write, object, old).await
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
    reader: &dyn Reader,
    plural: &str,
    namespace: Option<&str>,
    name: &str,
) -> ApiResult<Option<T>> {
    let object = reader.get(GROUP, plural, namespace, name).await?;
    Ok(object.and_then(|object| serde_json::from_value(object).ok()))
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
async fn inherits(reader: &dyn Reader, name: &str, ancestor: &str) -> ApiResult<bool> {
    let mut seen = HashSet::new();
    let mut pending = vec![name.to_string()];
    while let Some(next) = pending.pop() {
        if next == ancestor {
            return Ok(true);
        }
        if !seen.insert(next.clone()) {
            continue;
        }
        let template: Option<RoleTemplate> = stored(reader, "roletemplates", None, &next).await?;
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
/// - Escalation prevention ([`confirm_escalation`]).
async fn admit(write: Write<'_>, object: &mut Value, old: Option<&Value>) -> ApiResult<Vec<Cause>> {
    let Write {
        reader,
        rbac,
        requester,
        plural,
        ..
    } = write;
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
        let template: Option<RoleTemplate> = stored(reader, "roletemplates", None, name).await?;
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
        "roletemplates" => causes.extend(check_inheritance(reader, object, old).await?),
        "globalrolebindings" => {
            let name = &object["globalRoleName"];
            global_role = stored(
                reader,
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
                            stored(reader, "roletemplates", None, template).await?;
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
            let found = reader
                .get(CAPI_GROUP, "clusters", Some(&namespace), cluster)
                .await?;
            match found {
                Some(found) => owned_by(object, &found),
                None => causes.push(Cause::invalid("clusterName", &value, format!("no Cluster {cluster:?} in namespace {namespace:?}: a ClusterRoleTemplateBinding lives beside its Cluster"))),
            }
        }
        "projectroletemplatebindings" => {
            let template = &object["roleTemplateName"];
            causes.extend(template_of("roleTemplateName", template, "project", true).await?);
            causes.extend(check_project(reader, object).await?);
        }
        _ => {}
    }
    if !causes.is_empty() {
        return Ok(causes);
    }
    if let Some(user) = requester
        && !user.groups.iter().any(|g| g == rbac::MASTERS)
    {
        if plural == "globalrolebindings" && global_role.is_none() {
            let name = object["globalRoleName"].as_str().unwrap_or_default();
            global_role = stored(reader, "globalroles", None, name).await?;
        }
        confirm_escalation(rbac, user, plural, object, global_role.as_ref())?;
    }
    Ok(causes)
}

/// A RoleTemplate's inherited templates: each exists, takes a new reference only when not
/// locked, and does not inherit this one back.
async fn check_inheritance(
    reader: &dyn Reader,
    object: &Value,
    old: Option<&Value>,
) -> ApiResult<Vec<Cause>> {
    // Whether `name` is new in the list (not in the object's old version).
    let fresh = |name: &Value| {
        old.is_none_or(|o| {
            !o["roleTemplateNames"]
                .as_array()
                .is_some_and(|list| list.contains(name))
        })
    };
    let mut causes = vec![];
    let names = object["roleTemplateNames"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let own = object["metadata"]["name"].as_str().unwrap_or_default();
    for (i, name) in names.iter().enumerate() {
        let field = format!("roleTemplateNames[{i}]");
        let inherited = name.as_str().unwrap_or_default();
        let template: Option<RoleTemplate> =
            stored(reader, "roletemplates", None, inherited).await?;
        let why = match template {
            None => "no RoleTemplate of that name".to_string(),
            Some(t) if t.locked && fresh(name) => {
                format!("RoleTemplate {inherited:?} is locked: it takes no new references")
            }
            Some(_) if inherits(reader, inherited, own).await? => {
                format!("RoleTemplate {inherited:?} inherits {own:?}: inheritance cannot loop")
            }
            Some(_) => continue,
        };
        causes.push(Cause::invalid(field, name, why));
    }
    Ok(causes)
}

/// A ProjectRoleTemplateBinding's Project: beside it, of the cluster it names; the binding
/// is owned by it, so it goes with it, as in Rancher.
async fn check_project(reader: &dyn Reader, object: &mut Value) -> ApiResult<Vec<Cause>> {
    let namespace = object["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let value = object["projectName"].clone();
    if let Some((cluster, project)) = value.as_str().and_then(|p| p.split_once(':')) {
        let found: Option<Value> = stored(reader, "projects", Some(&namespace), project).await?;
        let of = |p: &Value| {
            p["spec"]["clusterName"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        };
        match found {
            None => {
                return Ok(vec![Cause::invalid(
                    "projectName",
                    &value,
                    format!(
                        "no Project {project:?} in namespace {namespace:?}: a ProjectRoleTemplateBinding lives beside its Project"
                    ),
                )]);
            }
            Some(p) if of(&p) != cluster => {
                return Ok(vec![Cause::invalid(
                    "projectName",
                    &value,
                    format!("Project {project:?} belongs to cluster {:?}", of(&p)),
                )]);
            }
            // Owned by its Project, so it goes with it, as in Rancher.
            Some(p) => owned_by(object, &p),
        }
    }
    Ok(vec![])
}

/// Escalation prevention for Rancher's kinds: a GlobalRole's rules must be the writer's
/// own (or it holds `escalate` on it), and granting in every cluster
/// (`inheritedClusterRoles`) or writing a RoleTemplate (whose rules apply downstream, where
/// lariat cannot compare them with the writer's) needs `escalate` or full authority; a
/// GlobalRoleBinding needs `bind` on its GlobalRole or the role's rules; a cluster or
/// project binding needs `bind` on its RoleTemplate.
fn confirm_escalation(
    rbac: &Rbac,
    user: &User,
    plural: &str,
    object: &Value,
    bound_role: Option<&GlobalRole>,
) -> ApiResult<()> {
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let namespace = object["metadata"]["namespace"]
        .as_str()
        .filter(|ns| !ns.is_empty());
    let may = |verb: &str, resource: &str, name: &str| {
        rbac.may(user, verb, GROUP, resource, namespace, name)
    };
    let forbidden = |why: String| ApiError::Forbidden {
        message: format!("{plural}.{GROUP} {name:?} is forbidden: {why}"),
    };
    let lacking =
        |rules: &[PolicyRule], namespace: Option<&str>| rbac.lacking(user, rules, namespace);
    let all_authority = || lacking(&rbac::full_authority(), None).is_empty();
    let escalation = |missing: Vec<String>| {
        forbidden(format!(
            "user {:?} is attempting to grant permissions not currently held:\n{}",
            user.name,
            missing.join("\n")
        ))
    };
    let global_role = |role: &GlobalRole, allowed_by: &str| -> ApiResult<()> {
        if !role.inherited_cluster_roles.is_empty() && !all_authority() {
            return Err(forbidden(format!(
                "granting roles in every cluster (inheritedClusterRoles) needs {allowed_by} or cluster-admin privileges"
            )));
        }
        let mut missing = lacking(&role.rules, None);
        for (namespace, rules) in &role.namespaced_rules {
            missing.extend(lacking(rules, Some(namespace)));
        }
        if missing.is_empty() {
            Ok(())
        } else {
            Err(escalation(missing))
        }
    };
    match plural {
        "globalroles" => {
            if may("escalate", plural, name) {
                return Ok(());
            }
            let role: GlobalRole =
                serde_json::from_value(object.clone()).map_err(|e| forbidden(e.to_string()))?;
            global_role(&role, "the escalate verb on globalroles")
        }
        "globalrolebindings" => {
            let role_name = object["globalRoleName"].as_str().unwrap_or_default();
            if may("bind", "globalroles", role_name) {
                return Ok(());
            }
            let role = bound_role
                .ok_or_else(|| forbidden(format!("globalroles.{GROUP} {role_name:?} not found")))?;
            global_role(role, "the bind verb on that GlobalRole")
        }
        "roletemplates" => {
            if may("escalate", plural, name) || all_authority() {
                return Ok(());
            }
            Err(forbidden(
                "a RoleTemplate's rules apply in downstream clusters, where lariat cannot compare them with yours: writing one needs the escalate verb on roletemplates or cluster-admin privileges".into(),
            ))
        }
        "clusterroletemplatebindings" | "projectroletemplatebindings" => {
            let template = object["roleTemplateName"].as_str().unwrap_or_default();
            if may("bind", "roletemplates", template) || all_authority() {
                return Ok(());
            }
            Err(forbidden(format!(
                "binding RoleTemplate {template:?} needs the bind verb on roletemplates {template:?}"
            )))
        }
        _ => Ok(()),
    }
}
