//! What is particular to one kind when it is written, one strategy per kind, as
//! kube-apiserver's registry keeps one per resource (`pkg/registry/.../strategy.go`) and
//! Cluster API one webhook per kind: defaulting, canonicalisation and the validation a schema
//! cannot say. The generic verbs (`resources.rs`) name no kind; they ask [`for_kind`].

use serde_json::Value;

use crate::registry::Registry;
use crate::status::Cause;

mod aws;
mod capi;
mod core;
mod crd;
mod events;
mod rancher;
mod rbac;
mod tokens;

/// One kind's write rules.
pub trait Strategy: Send + Sync {
    /// Completes `object` (a create when `old` is `None`, else an update of `old`) after the
    /// schema has run, and returns what refuses it; each cause names its field.
    fn admit(&self, registry: &Registry, object: &mut Value, old: Option<&Value>) -> Vec<Cause>;
}

pub use crd::accept_builtin as accept_crd;

/// The strategy of the kind served at `group`/`plural`, if it has one.
pub fn for_kind(group: &str, plural: &str) -> Option<&'static dyn Strategy> {
    Some(match (group, plural) {
        ("", "secrets") => &core::Secrets,
        ("", "configmaps") => &core::ConfigMaps,
        ("", "namespaces") => &core::Namespaces,
        ("", "events") => &events::Events,
        ("events.k8s.io", "events") => &events::EventsV1,
        ("apiextensions.k8s.io", "customresourcedefinitions") => &crd::CustomResourceDefinitions,
        ("management.lariat.dev", "tokens") => &tokens::Tokens,
        ("management.cattle.io", "globalroles") => &rancher::GlobalRoles,
        ("management.cattle.io", "roletemplates") => &rancher::RoleTemplates,
        ("management.cattle.io", "projects") => &rancher::Projects,
        (
            "management.cattle.io",
            "globalrolebindings" | "clusterroletemplatebindings" | "projectroletemplatebindings",
        ) => &rancher::Bindings,
        ("rbac.authorization.k8s.io", "roles" | "clusterroles") => &rbac::Roles,
        ("rbac.authorization.k8s.io", "rolebindings" | "clusterrolebindings") => &rbac::Bindings,
        ("cluster.x-k8s.io", "clusters") => &capi::Clusters,
        ("cluster.x-k8s.io", "machinedeployments" | "machinesets" | "machines") => {
            &capi::MachineOwners
        }
        ("cluster.x-k8s.io", "machinehealthchecks") => &capi::MachineHealthChecks,
        ("controlplane.cluster.x-k8s.io", "kubeadmcontrolplanes") => &capi::KubeadmControlPlanes,
        ("controlplane.cluster.x-k8s.io", "awsmanagedcontrolplanes") => &aws::ManagedControlPlanes,
        ("infrastructure.cluster.x-k8s.io", "awsmanagedmachinepools") => &aws::ManagedMachinePools,
        ("infrastructure.cluster.x-k8s.io", "awsclusters") => &aws::Clusters,
        ("infrastructure.cluster.x-k8s.io", "awsmachines" | "awsmachinetemplates") => {
            &aws::Machines
        }
        ("cluster.x-k8s.io", "machinepools") => &capi::MachinePools,
        ("infrastructure.cluster.x-k8s.io", "awsclustercontrolleridentities") => {
            &aws::ControllerIdentities
        }
        _ => return None,
    })
}

/// `field` may not change once set.
pub(crate) fn immutable(
    object: &Value,
    old: Option<&Value>,
    path: &[&str],
    field: &str,
) -> Vec<Cause> {
    let pick = |o: &Value| {
        let mut node = o.clone();
        for key in path {
            node = node[key].take();
        }
        node
    };
    match old.map(pick) {
        Some(before) if !before.is_null() && before != pick(object) => {
            vec![Cause::invalid(field, &pick(object), "field is immutable")]
        }
        _ => vec![],
    }
}
