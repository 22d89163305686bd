//! lariat's resource types and the CustomResourceDefinitions generated from them; no I/O.
//!
//! The API server serves every kind in [`builtin_crds`] through the same generic machinery as a
//! user-installed CRD, so the schema, printer columns, names and subresources it needs all come
//! from the Rust types in [`capi`].

pub mod capi;
mod schema;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// The CustomResourceDefinitions lariat serves without anyone installing them.
///
/// Today these are the Cluster API core kinds of `cluster.x-k8s.io/v1beta1`, in the order a
/// cluster is built from the top down: Cluster, MachineDeployment, MachineSet, Machine,
/// MachineHealthCheck.
pub fn builtin_crds() -> Vec<CustomResourceDefinition> {
    capi::crds()
}
