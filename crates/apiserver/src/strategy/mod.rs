//! The write rules of the kinds the generic server owns (core v1, events, RBAC,
//! apiextensions, lariat's tokens, the Jobs simulated clusters serve) as [`Strategy`]s; every other kind's come from the crate
//! that owns it, handed to the server in its configuration ([`crate::Config::strategies`]).
//! The generic verbs (`resources.rs`) ask the set by group and resource and name no kind.

pub use lariat_api::admission::{Strategies, Strategy, immutable};

mod core;
pub(crate) mod crd;
mod events;
mod rbac;
mod tokens;
mod validator;
mod workloads;

pub use crd::accept_builtin as accept_crd;
pub use rbac::rule_causes;
pub use validator::{Reader, Validator, Validators, Write};

/// The kinds a PUT creates when the object is absent (kube-apiserver's `AllowCreateOnUpdate`
/// of their strategies): by API group and resource. Every other kind, custom resources
/// included, answers a PUT of a missing object with 404, so a mistyped name never creates
/// an object, as `kubectl replace` users expect.
pub const CREATE_ON_UPDATE: &[(&str, &str)] = &[
    ("", "endpoints"),
    ("", "events"),
    ("", "limitranges"),
    ("", "services"),
    ("coordination.k8s.io", "leases"),
    ("events.k8s.io", "events"),
    ("rbac.authorization.k8s.io", "roles"),
    ("rbac.authorization.k8s.io", "clusterroles"),
    ("rbac.authorization.k8s.io", "rolebindings"),
    ("rbac.authorization.k8s.io", "clusterrolebindings"),
];

/// The strategies of the kinds every lariat server serves. CustomResourceDefinitions are
/// admitted apart ([`crd::admit`]), against the kinds the server serves.
pub fn builtin() -> Strategies {
    Strategies::default()
        .with("", &["secrets"], core::Secrets)
        .with("", &["configmaps"], core::ConfigMaps)
        .with("", &["namespaces"], core::Namespaces)
        .with("batch", &["jobs"], workloads::Jobs)
        .with(
            "apps",
            &["deployments", "statefulsets", "daemonsets", "replicasets"],
            workloads::Selectors,
        )
        .with("", &["events"], events::Events)
        .with("events.k8s.io", &["events"], events::EventsV1)
        .with("management.lariat.dev", &["tokens"], tokens::Tokens)
        .with(
            "rbac.authorization.k8s.io",
            &["roles", "clusterroles"],
            rbac::Roles,
        )
        .with(
            "rbac.authorization.k8s.io",
            &["rolebindings", "clusterrolebindings"],
            rbac::Bindings,
        )
}
