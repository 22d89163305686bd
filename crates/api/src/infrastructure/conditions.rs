//! Condition types and reasons of the in-memory infrastructure kinds, in the style of
//! [`crate::capi::conditions`].
//!
//! InMemoryCluster and InMemoryMachine use the Cluster API [`Condition`](crate::capi::Condition)
//! type and summarise these conditions in [`READY`], which mirrors `status.ready`.

pub use crate::capi::conditions::READY;

// InMemoryCluster condition types.

/// The control-plane endpoint is assigned and the simulated API server listens there.
pub const CONTROL_PLANE_ENDPOINT_AVAILABLE: &str = "ControlPlaneEndpointAvailable";

// InMemoryMachine condition types.

/// The simulated machine has finished provisioning and booted (`spec.behavior` decides
/// when, or never).
pub const PROVISIONED: &str = "Provisioned";
/// The machine's Node is registered in the simulated workload cluster and `Ready`.
pub const NODE_READY: &str = "NodeReady";

// Reasons.

/// Waiting for the InMemoryCluster to be ready before provisioning a machine.
pub const WAITING_FOR_CLUSTER_INFRASTRUCTURE_REASON: &str = "WaitingForClusterInfrastructure";
/// Waiting for the Machine's bootstrap data before provisioning.
pub const WAITING_FOR_BOOTSTRAP_DATA_REASON: &str = "WaitingForBootstrapData";
/// Provisioning has started and `behavior.provisioningDelay` has not passed yet.
pub const PROVISIONING_REASON: &str = "Provisioning";
/// Injected failure: `behavior.neverBoots` keeps the machine from ever booting.
pub const NEVER_BOOTS_REASON: &str = "NeverBoots";
/// Injected failure: the Node turned `NotReady` after `behavior.nodeNotReadyAfter`.
pub const NODE_NOT_READY_REASON: &str = "NodeNotReady";
