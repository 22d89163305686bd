//! RBAC's four kinds, validated as kube-apiserver validates them: a rule names verbs and
//! either resources (with their API groups) or, in a ClusterRole only, non-resource URLs; a
//! binding's `roleRef` names a Role or ClusterRole and never changes; a subject is a User, a
//! Group or a ServiceAccount (whose namespace a ClusterRoleBinding must give). Who may write
//! them at all is escalation prevention's business (`rbac.rs`).

use serde_json::{Value, json};

use crate::rbac::GROUP;
use crate::status::Cause;
use lariat_api::admission::Strategy;

pub struct Roles;

impl Strategy for Roles {
    fn admit(&self, object: &mut Value, _old: Option<&Value>) -> Vec<Cause> {
        rule_causes(&object["rules"], "rules", object["kind"] == "Role")
    }
}

/// What is wrong with a list of PolicyRules at `field` (`namespaced`: of a Role, which cannot
/// name non-resource URLs).
pub fn rule_causes(rules: &Value, field: &str, namespaced: bool) -> Vec<Cause> {
    let mut causes = vec![];
    let Some(rules) = rules.as_array() else {
        return causes;
    };
    let prefix = field;
    for (i, rule) in rules.iter().enumerate() {
        let field = |name: &str| format!("{prefix}[{i}].{name}");
        let set = |name: &str| rule[name].as_array().is_some_and(|a| !a.is_empty());
        if !set("verbs") {
            causes.push(Cause::required(field("verbs")));
        }
        if set("nonResourceURLs") {
            if namespaced {
                causes.push(Cause::invalid(
                    field("nonResourceURLs"),
                    &rule["nonResourceURLs"],
                    "namespaced rules cannot apply to non-resource URLs",
                ));
            }
            if set("apiGroups") || set("resources") {
                causes.push(Cause::invalid(
                    field("nonResourceURLs"),
                    &rule["nonResourceURLs"],
                    "rules cannot apply to both regular resources and non-resource URLs",
                ));
            }
            continue;
        }
        if rule["apiGroups"].as_array().is_none() {
            causes.push(Cause::required(field("apiGroups")));
        }
        if !set("resources") {
            causes.push(Cause::required(field("resources")));
        }
    }
    causes
}

pub struct Bindings;

impl Strategy for Bindings {
    fn admit(&self, object: &mut Value, old: Option<&Value>) -> Vec<Cause> {
        let cluster_wide = object["kind"] == "ClusterRoleBinding";
        let mut causes = vec![];
        let role_ref = &object["roleRef"];
        if role_ref["apiGroup"] != GROUP {
            causes.push(Cause::not_supported(
                "roleRef.apiGroup",
                &role_ref["apiGroup"],
                &[json!(GROUP)],
            ));
        }
        let kinds: &[&str] = if cluster_wide {
            &["ClusterRole"]
        } else {
            &["Role", "ClusterRole"]
        };
        if !kinds.iter().any(|k| role_ref["kind"] == *k) {
            causes.push(Cause::not_supported(
                "roleRef.kind",
                &role_ref["kind"],
                &kinds.iter().map(|k| json!(k)).collect::<Vec<_>>(),
            ));
        }
        if role_ref["name"].as_str().is_none_or(str::is_empty) {
            causes.push(Cause::required("roleRef.name"));
        }
        if let Some(old) = old
            && old["roleRef"] != object["roleRef"]
        {
            causes.push(Cause::invalid(
                "roleRef",
                &object["roleRef"],
                "cannot change roleRef",
            ));
        }
        let Some(subjects) = object["subjects"].as_array_mut() else {
            return causes;
        };
        for (i, subject) in subjects.iter_mut().enumerate() {
            let field = |name: &str| format!("subjects[{i}].{name}");
            if subject["name"].as_str().is_none_or(str::is_empty) {
                causes.push(Cause::required(field("name")));
            }
            let kind = subject["kind"].as_str().unwrap_or_default().to_string();
            match kind.as_str() {
                "User" | "Group" => {
                    // kubectl and older manifests leave it out; kube-apiserver defaults it.
                    if subject["apiGroup"].as_str().is_none_or(str::is_empty) {
                        subject["apiGroup"] = json!(GROUP);
                    } else if subject["apiGroup"] != GROUP {
                        causes.push(Cause::not_supported(
                            field("apiGroup"),
                            &subject["apiGroup"],
                            &[json!(GROUP)],
                        ));
                    }
                }
                "ServiceAccount" => {
                    if subject["apiGroup"].as_str().is_some_and(|g| !g.is_empty()) {
                        causes.push(Cause::not_supported(
                            field("apiGroup"),
                            &subject["apiGroup"],
                            &[json!("")],
                        ));
                    }
                    if cluster_wide && subject["namespace"].as_str().is_none_or(str::is_empty) {
                        causes.push(Cause::required(field("namespace")));
                    }
                }
                _ => causes.push(Cause::not_supported(
                    field("kind"),
                    &subject["kind"],
                    &[json!("ServiceAccount"), json!("User"), json!("Group")],
                )),
            }
        }
        causes
    }
}
