//! lariat's resource types and the CustomResourceDefinitions generated from them; no I/O.
//!
//! The API server serves every kind in [`builtin_crds`] through the same generic machinery as a
//! user-installed CRD, so the schema, printer columns, names and subresources it needs all come
//! from the Rust types in [`capi`], [`controlplane`], [`bootstrap`] and [`infrastructure`].

pub mod bootstrap;
pub mod capi;
pub mod clusterctl;
mod contract;
pub mod controlplane;
pub mod fleet;
pub mod infrastructure;
pub mod management;
mod version;
pub use version::KubernetesVersion;
mod schema;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// The CustomResourceDefinitions lariat serves without anyone installing them.
///
/// First the Cluster API core kinds of `cluster.x-k8s.io/v1beta1`, in the order a cluster is
/// built from the top down (Cluster, MachineDeployment, MachineSet, Machine,
/// MachineHealthCheck); then KubeadmControlPlane and its template
/// (`controlplane.cluster.x-k8s.io/v1beta1`), KubeadmConfig and its template
/// (`bootstrap.cluster.x-k8s.io/v1beta1`), and the in-memory provider's InMemoryCluster,
/// InMemoryMachine and InMemoryMachineTemplate (`infrastructure.cluster.x-k8s.io/v1alpha1`);
/// then the provider inventory (`clusterctl.cluster.x-k8s.io/v1alpha3` Provider); then
/// lariat's own ClusterRegistrationToken (`management.lariat.dev/v1`); last Fleet's kinds
/// (`fleet.cattle.io/v1alpha1`).
pub fn builtin_crds() -> Vec<CustomResourceDefinition> {
    let mut crds = capi::crds();
    crds.extend(controlplane::crds());
    crds.extend(bootstrap::crds());
    crds.extend(infrastructure::crds());
    crds.push(clusterctl::crd());
    crds.extend(management::crds());
    crds.extend(fleet::crds());
    crds
}
