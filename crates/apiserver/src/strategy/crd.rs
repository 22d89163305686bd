//! CustomResourceDefinitions: a valid definition that does not redefine a kind lariat serves
//! itself, an immutable scope, and the status kube-apiserver reports once names are accepted.

use serde_json::{Value, json};

use crate::objects::now_rfc3339;
use crate::registry::{Origin, Registry, ResourceType};
use crate::status::Cause;

/// A CustomResourceDefinition's rules, against the kinds `registry` serves.
pub fn admit(registry: &Registry, object: &mut Value, old: Option<&Value>) -> Vec<Cause> {
    let rt = match ResourceType::from_crd(object, Origin::Custom) {
        Ok(rt) => rt,
        Err(causes) => return causes,
    };
    let mut causes = vec![];
    if let Some(existing) = registry.get(&rt.group, &rt.plural)
        && existing.origin != Origin::Custom
    {
        causes.push(Cause::invalid(
            "spec.names.plural",
            &json!(rt.plural),
            "is served by lariat itself and cannot be redefined",
        ));
    }
    if let Some(old) = old
        && old["spec"]["scope"] != object["spec"]["scope"]
    {
        causes.push(Cause::invalid(
            "spec.scope",
            &object["spec"]["scope"],
            "field is immutable",
        ));
    }
    accept(object, &rt);
    causes
}

/// The status kube-apiserver reports once a CRD's names are accepted.
fn accept(object: &mut Value, rt: &ResourceType) {
    let names = object["spec"]["names"].clone();
    object["status"] = json!({
        "acceptedNames": names,
        "storedVersions": rt.versions.iter().filter(|v| v.storage).map(|v| v.name.clone()).collect::<Vec<_>>(),
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now_rfc3339()},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now_rfc3339()},
        ],
    });
}

/// Completes a built-in kind's CRD as the strategy completes a user's (its status).
pub fn accept_builtin(object: &mut Value) {
    if let Ok(rt) = ResourceType::from_crd(object, Origin::Lariat) {
        accept(object, &rt);
    }
}
