//! Rancher's access-control kinds (`management.cattle.io/v3`), field-compatible with Rancher's,
//! so a platform team's GlobalRoles, RoleTemplates and bindings read the same here:
//!
//! - scopes: Global (every cluster and lariat itself) through GlobalRole and
//!   GlobalRoleBinding; Cluster (all of one cluster) through ClusterRoleTemplateBinding; Project
//!   (some namespaces of one cluster) through Project and ProjectRoleTemplateBinding;
//! - RoleTemplate: the rules a cluster or project binding grants in the downstream cluster.
//!
//! As in Rancher, every kind but Project keeps its fields beside `metadata` rather than under a
//! `spec`. Where lariat places them: a ClusterRoleTemplateBinding, a Project and a
//! ProjectRoleTemplateBinding live in the namespace of the Cluster API Cluster they concern, and
//! `clusterName` names that Cluster there. A downstream namespace joins a project with the
//! annotation [`PROJECT_ID_ANNOTATION`] `<cluster>:<project>`.
//!
//! Fields Rancher has and lariat does not implement (a Project's quotas) are absent from the
//! schemas, so strict field validation refuses them rather than pretending to enforce them.

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1::{PolicyRule, Subject};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

pub const GROUP: &str = "management.cattle.io";
pub const VERSION: &str = "v3";
pub const API_VERSION: &str = "management.cattle.io/v3";
/// On a downstream Namespace: the project it belongs to, `<cluster>:<project>`.
pub const PROJECT_ID_ANNOTATION: &str = "field.cattle.io/projectId";

/// The abbreviations Rancher's users type for the bindings (`kubectl get prtb -A`).
fn short_names(kind: &str) -> Vec<&'static str> {
    match kind {
        "GlobalRoleBinding" => vec!["grb"],
        "ClusterRoleTemplateBinding" => vec!["crtb"],
        "ProjectRoleTemplateBinding" => vec!["prtb"],
        _ => vec![],
    }
}

/// The plural of each kind, by kind.
pub const KINDS: [(&str, &str); 6] = [
    ("GlobalRole", "globalroles"),
    ("GlobalRoleBinding", "globalrolebindings"),
    ("RoleTemplate", "roletemplates"),
    ("ClusterRoleTemplateBinding", "clusterroletemplatebindings"),
    ("Project", "projects"),
    ("ProjectRoleTemplateBinding", "projectroletemplatebindings"),
];

// The kinds' fields that lariat reads, typed (what the schemas above hold in full). Each reads
// every object the schema admits: a missing field is its default.

/// The rules a GlobalRole grants on lariat itself, and the cluster roles it grants in every
/// downstream cluster.
#[derive(Serialize, Deserialize, Default, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct GlobalRole {
    pub rules: Vec<PolicyRule>,
    pub inherited_cluster_roles: Vec<String>,
    pub namespaced_rules: BTreeMap<String, Vec<PolicyRule>>,
}

#[derive(Serialize, Deserialize, Default, Clone, Debug, PartialEq)]
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

#[derive(Serialize, Deserialize, Default, Clone, Debug, PartialEq)]
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
#[derive(Serialize, Deserialize, Default, Clone, Debug, PartialEq)]
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
            api_group: Some("rbac.authorization.k8s.io".into()),
            namespace: None,
        })
    }
}

#[derive(Serialize, Deserialize, Default, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterRoleTemplateBinding {
    #[serde(flatten)]
    pub subjects: Subjects,
    pub cluster_name: String,
    pub role_template_name: String,
}

#[derive(Serialize, Deserialize, Default, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ProjectSpec {
    pub cluster_name: String,
}

#[derive(Serialize, Deserialize, Default, Clone, Debug, PartialEq)]
#[serde(default)]
pub struct Project {
    pub spec: ProjectSpec,
}

#[derive(Serialize, Deserialize, Default, Clone, Debug, PartialEq)]
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

pub fn resource(kind: &str) -> kube::core::ApiResource {
    let plural = KINDS
        .iter()
        .find(|(k, _)| *k == kind)
        .map(|(_, p)| *p)
        .unwrap_or_else(|| panic!("{kind} is not one of Rancher's access kinds"));
    kube::core::ApiResource {
        group: GROUP.into(),
        version: VERSION.into(),
        api_version: API_VERSION.into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// An rbac.authorization.k8s.io/v1 PolicyRule.
pub fn policy_rule_schema() -> Value {
    let strings = json!({"type": "array", "items": {"type": "string"}});
    json!({
        "type": "object",
        "required": ["verbs"],
        "properties": {
            "apiGroups": strings, "resources": strings, "resourceNames": strings,
            "nonResourceURLs": strings, "verbs": strings,
        },
    })
}

fn rules_schema() -> Value {
    json!({"type": "array", "items": policy_rule_schema()})
}

fn condition_schema() -> Value {
    let string = json!({"type": "string"});
    json!({"type": "array", "items": {"type": "object", "properties": {
        "type": string, "status": string, "reason": string, "message": string,
        "lastUpdateTime": string, "lastTransitionTime": string,
        "observedGeneration": {"type": "integer"},
    }}})
}

/// The status Rancher gives its bindings.
fn binding_status_schema() -> Value {
    let string = json!({"type": "string"});
    json!({"type": "object", "properties": {
        "lastUpdateTime": string, "observedGenerationLocal": {"type": "integer"},
        "observedGenerationRemote": {"type": "integer"}, "summary": string,
        "summaryLocal": string, "summaryRemote": string,
        "localConditions": condition_schema(), "remoteConditions": condition_schema(),
    }})
}

fn crd(
    kind: &str,
    namespaced: bool,
    properties: Value,
    required: &[&str],
    columns: Value,
) -> CustomResourceDefinition {
    let plural = resource(kind).plural;
    let string = json!({"type": "string"});
    let mut schema = json!({
        "type": "object",
        "properties": {"apiVersion": string, "kind": string, "metadata": {"type": "object"}},
    });
    for (name, field) in properties.as_object().expect("properties").clone() {
        schema["properties"][name] = field;
    }
    if !required.is_empty() {
        schema["required"] = json!(required);
    }
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{GROUP}")},
        "spec": {
            "group": GROUP,
            "names": {"kind": kind, "listKind": format!("{kind}List"), "plural": plural,
                      "singular": kind.to_lowercase(), "shortNames": short_names(kind)},
            "scope": if namespaced { "Namespaced" } else { "Cluster" },
            "versions": [{
                "name": VERSION, "served": true, "storage": true,
                "additionalPrinterColumns": columns,
                "schema": {"openAPIV3Schema": schema},
            }],
        },
    }))
    .map(|mut crd: CustomResourceDefinition| {
        if properties.get("status").is_some() {
            crd.spec.versions[0].subresources =
                Some(serde_json::from_value(json!({"status": {}})).expect("status subresource"));
        }
        crd
    })
    .unwrap_or_else(|e| panic!("the {kind} CRD is well-formed: {e}"))
}

fn status_columns() -> Value {
    json!([
        {"name": "Status", "type": "string", "jsonPath": ".status.summary"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ])
}

/// The subject fields of the two role-template bindings: a user or a group, by name or by
/// principal (lariat's users and groups are plain names, so a principal is one too).
fn subject_properties() -> serde_json::Map<String, Value> {
    let name = json!({"type": "string", "maxLength": 253});
    [
        "userName",
        "userPrincipalName",
        "groupName",
        "groupPrincipalName",
    ]
    .into_iter()
    .map(|field| (field.to_string(), name.clone()))
    .collect()
}

pub fn crds() -> Vec<CustomResourceDefinition> {
    let string = json!({"type": "string"});
    let boolean = json!({"type": "boolean"});
    let names = json!({"type": "array", "items": {"type": "string"}});
    let global_role = crd(
        "GlobalRole",
        false,
        json!({
            "displayName": string, "description": string, "rules": rules_schema(),
            "newUserDefault": boolean, "builtin": boolean,
            "inheritedClusterRoles": names,
            "namespacedRules": {"type": "object", "additionalProperties": rules_schema()},
            "status": {"type": "object", "properties": {
                "observedGeneration": {"type": "integer"}, "lastUpdateTime": string,
                "summary": string, "conditions": condition_schema(),
            }},
        }),
        &[],
        status_columns(),
    );
    let global_role_binding = crd(
        "GlobalRoleBinding",
        false,
        json!({
            "userName": string, "groupPrincipalName": string, "globalRoleName": string,
            "status": binding_status_schema(),
        }),
        &["globalRoleName"],
        status_columns(),
    );
    let role_template = crd(
        "RoleTemplate",
        false,
        json!({
            "displayName": string, "description": string, "rules": rules_schema(),
            "builtin": boolean, "external": boolean, "externalRules": rules_schema(),
            "hidden": boolean, "locked": boolean, "clusterCreatorDefault": boolean,
            "projectCreatorDefault": boolean,
            "context": {"type": "string", "enum": ["", "cluster", "project"]},
            "roleTemplateNames": names, "administrative": boolean,
        }),
        &[],
        json!([
            {"name": "Context", "type": "string", "jsonPath": ".context"},
            {"name": "Display Name", "type": "string", "jsonPath": ".displayName"},
            {"name": "Locked", "type": "boolean", "jsonPath": ".locked"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ]),
    );
    let mut crtb = subject_properties();
    crtb.insert("clusterName".into(), string.clone());
    crtb.insert("roleTemplateName".into(), string.clone());
    crtb.insert("status".into(), binding_status_schema());
    let crtb = crd(
        "ClusterRoleTemplateBinding",
        true,
        Value::Object(crtb),
        &["clusterName", "roleTemplateName"],
        json!([
            {"name": "Cluster", "type": "string", "jsonPath": ".clusterName"},
            {"name": "Role", "type": "string", "jsonPath": ".roleTemplateName"},
            {"name": "Status", "type": "string", "jsonPath": ".status.summary"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ]),
    );
    let project = crd(
        "Project",
        true,
        json!({
            "spec": {
                "type": "object",
                "required": ["displayName", "clusterName"],
                "properties": {
                    "displayName": {"type": "string", "minLength": 1},
                    "description": string,
                    "clusterName": {"type": "string", "minLength": 1},
                },
            },
            "status": {"type": "object", "properties": {"conditions": condition_schema()}},
        }),
        &["spec"],
        json!([
            {"name": "ClusterName", "type": "string", "jsonPath": ".spec.clusterName"},
            {"name": "DisplayName", "type": "string", "jsonPath": ".spec.displayName"},
            {"name": "Description", "type": "string", "jsonPath": ".spec.description"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ]),
    );
    let mut prtb = subject_properties();
    prtb.insert(
        "projectName".into(),
        json!({"type": "string", "pattern": "^[^:]+:[^:]+$"}),
    );
    prtb.insert("roleTemplateName".into(), string.clone());
    prtb.insert("status".into(), binding_status_schema());
    let prtb = crd(
        "ProjectRoleTemplateBinding",
        true,
        Value::Object(prtb),
        &["projectName", "roleTemplateName"],
        json!([
            {"name": "Project", "type": "string", "jsonPath": ".projectName"},
            {"name": "Role", "type": "string", "jsonPath": ".roleTemplateName"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ]),
    );
    vec![
        global_role,
        global_role_binding,
        role_template,
        crtb,
        project,
        prtb,
    ]
}
