//! Rancher's access kinds (`management.cattle.io/v3`), validated as Rancher's webhook does what
//! a schema cannot say: a binding is for exactly one user or group and never changes, a
//! Project stays in its cluster, rules are well-formed RBAC rules. What they refer to (roles,
//! templates, projects) and who may write them are judged apart (`admission.rs`).

use serde_json::Value;

use lariat_api::admission::{Cause, Strategies, Strategy, immutable};
use lariat_api::rancher::GROUP;
use lariat_apiserver::strategy::rule_causes;

const SUBJECTS: [&str; 4] = [
    "userName",
    "userPrincipalName",
    "groupName",
    "groupPrincipalName",
];

pub struct GlobalRoles;

impl Strategy for GlobalRoles {
    fn admit(&self, object: &mut Value, old: Option<&Value>) -> Vec<Cause> {
        let mut causes = rule_causes(&object["rules"], "rules", false);
        for (namespace, rules) in object["namespacedRules"].as_object().into_iter().flatten() {
            causes.extend(rule_causes(
                rules,
                &format!("namespacedRules[{namespace}]"),
                true,
            ));
        }
        causes.extend(immutable(object, old, &["builtin"], "builtin"));
        causes
    }
}

pub struct RoleTemplates;

impl Strategy for RoleTemplates {
    fn admit(&self, object: &mut Value, old: Option<&Value>) -> Vec<Cause> {
        let mut causes = rule_causes(&object["rules"], "rules", false);
        causes.extend(rule_causes(
            &object["externalRules"],
            "externalRules",
            false,
        ));
        causes.extend(immutable(object, old, &["builtin"], "builtin"));
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        if object["external"] == true && name.starts_with("lariat-") {
            causes.push(Cause::forbidden(
                "metadata.name",
                "an external template binds the cluster's own ClusterRole of its name, and lariat- names are lariat's own roles there",
            ));
        }
        let inherits = object["roleTemplateNames"].as_array().into_iter().flatten();
        for (i, inherited) in inherits.enumerate() {
            if inherited == name {
                causes.push(Cause::invalid(
                    format!("roleTemplateNames[{i}]"),
                    inherited,
                    "a RoleTemplate cannot inherit itself",
                ));
            }
        }
        causes
    }
}

/// GlobalRoleBindings, ClusterRoleTemplateBindings and ProjectRoleTemplateBindings.
pub struct Bindings;

impl Strategy for Bindings {
    fn admit(&self, object: &mut Value, old: Option<&Value>) -> Vec<Cause> {
        let (subjects, references): (&[&str], &[&str]) = match object["kind"].as_str() {
            Some("GlobalRoleBinding") => (&["userName", "groupPrincipalName"], &["globalRoleName"]),
            Some("ClusterRoleTemplateBinding") => (&SUBJECTS, &["clusterName", "roleTemplateName"]),
            _ => (&SUBJECTS, &["projectName", "roleTemplateName"]),
        };
        let mut causes = vec![];
        let given: Vec<&str> = subjects
            .iter()
            .copied()
            .filter(|field| object[*field].as_str().is_some_and(|v| !v.is_empty()))
            .collect();
        let users = given.iter().filter(|f| f.starts_with("user")).count();
        let groups = given.len() - users;
        if users == 0 && groups == 0 {
            causes.push(Cause::required(subjects.join(" or ")));
        } else if users > 0 && groups > 0 {
            causes.push(Cause::forbidden(
                given.join(", "),
                "a binding is for one user or one group, not both",
            ));
        }
        for field in &given {
            if object[*field]
                .as_str()
                .is_some_and(|v| v.starts_with("system:"))
            {
                causes.push(Cause::forbidden(
                    *field,
                    "names starting with system: are Kubernetes's own identities; in a downstream cluster they would be that cluster's",
                ));
            }
        }
        for field in subjects.iter().chain(references) {
            causes.extend(immutable(object, old, &[field], field));
            if references.contains(field)
                && object[*field].as_str().is_none_or(|value| value.is_empty())
            {
                causes.push(Cause::required(*field));
            }
        }
        causes
    }
}

pub struct Projects;

impl Strategy for Projects {
    fn admit(&self, object: &mut Value, old: Option<&Value>) -> Vec<Cause> {
        immutable(object, old, &["spec", "clusterName"], "spec.clusterName")
    }
}

/// The rules of Rancher's access-control kinds, for the server's configuration.
pub fn strategies() -> Strategies {
    Strategies::default()
        .with(GROUP, &["globalroles"], GlobalRoles)
        .with(GROUP, &["roletemplates"], RoleTemplates)
        .with(GROUP, &["projects"], Projects)
        .with(
            GROUP,
            &[
                "globalrolebindings",
                "clusterroletemplatebindings",
                "projectroletemplatebindings",
            ],
            Bindings,
        )
}
