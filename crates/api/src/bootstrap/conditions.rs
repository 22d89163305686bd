//! Condition types and reasons of KubeadmConfig, in the style of [`crate::capi::conditions`].
//!
//! KubeadmConfig uses the Cluster API [`Condition`](crate::capi::Condition) type; these
//! constants name what the kubeadm bootstrap controller sets on it, besides the summary
//! [`READY`].

pub use crate::capi::conditions::READY;

// Condition types.

/// The Secret with the node's bootstrap data exists and `status.dataSecretName` names it.
pub const DATA_SECRET_AVAILABLE: &str = "DataSecretAvailable";
/// The cluster certificates the node needs exist (generated on the first control-plane node).
pub const CERTIFICATES_AVAILABLE: &str = "CertificatesAvailable";

// Reasons.

/// Waiting for the Cluster's infrastructure to be ready before producing bootstrap data.
pub const WAITING_FOR_CLUSTER_INFRASTRUCTURE_REASON: &str = "WaitingForClusterInfrastructure";
/// Waiting for the control plane to be initialized before a node can join it.
pub const WAITING_FOR_CONTROL_PLANE_AVAILABLE_REASON: &str = "WaitingForControlPlaneAvailable";
/// Producing the bootstrap data, or writing its Secret, failed.
pub const DATA_SECRET_GENERATION_FAILED_REASON: &str = "DataSecretGenerationFailed";
/// Generating or looking up the cluster certificates failed.
pub const CERTIFICATES_GENERATION_FAILED_REASON: &str = "CertificatesGenerationFailed";
/// The cluster certificates exist but cannot be used.
pub const CERTIFICATES_CORRUPTED_REASON: &str = "CertificatesCorrupted";
