//! Condition types and reasons of KubeadmControlPlane, in the style of
//! [`crate::capi::conditions`].
//!
//! KubeadmControlPlane uses the Cluster API [`Condition`](crate::capi::Condition) type. Besides
//! its own conditions, the controller sets per-component health conditions on each
//! control-plane Machine; those are named here too, since only this controller writes them.

pub use crate::capi::conditions::{
    MACHINES_CREATED, MACHINES_READY, READY, RESIZED, SCALING_DOWN_REASON, SCALING_UP_REASON,
};

// KubeadmControlPlane condition types.

/// The control plane's API server can be reached; `kubeadm init` has completed.
pub const AVAILABLE: &str = "Available";
/// The cluster certificates exist (generated or provided by the user).
pub const CERTIFICATES_AVAILABLE: &str = "CertificatesAvailable";
/// Every control-plane Machine matches the current spec; `False` during a rollout.
pub const MACHINES_SPEC_UP_TO_DATE: &str = "MachinesSpecUpToDate";
/// The API server, controller-manager and scheduler Pods are healthy on every Machine.
pub const CONTROL_PLANE_COMPONENTS_HEALTHY: &str = "ControlPlaneComponentsHealthy";
/// The stacked etcd cluster is healthy: every member is started and agrees on the members.
pub const ETCD_CLUSTER_HEALTHY: &str = "EtcdClusterHealthy";

// Condition types set on each control-plane Machine.

/// The Machine's API server Pod is running and ready.
pub const MACHINE_API_SERVER_POD_HEALTHY: &str = "APIServerPodHealthy";
/// The Machine's controller-manager Pod is running and ready.
pub const MACHINE_CONTROLLER_MANAGER_POD_HEALTHY: &str = "ControllerManagerPodHealthy";
/// The Machine's scheduler Pod is running and ready.
pub const MACHINE_SCHEDULER_POD_HEALTHY: &str = "SchedulerPodHealthy";
/// The Machine's etcd Pod is running and ready.
pub const MACHINE_ETCD_POD_HEALTHY: &str = "EtcdPodHealthy";
/// The Machine's etcd member is healthy and part of the cluster.
pub const MACHINE_ETCD_MEMBER_HEALTHY: &str = "EtcdMemberHealthy";

// Reasons.

/// `Available` is `False` until `kubeadm init` completes on the first Machine.
pub const WAITING_FOR_KUBEADM_INIT_REASON: &str = "WaitingForKubeadmInit";
/// Generating or looking up the cluster certificates failed.
pub const CERTIFICATES_GENERATION_FAILED_REASON: &str = "CertificatesGenerationFailed";
/// Cloning the infrastructure template for a new Machine failed.
pub const INFRASTRUCTURE_TEMPLATE_CLONING_FAILED_REASON: &str =
    "InfrastructureTemplateCloningFailed";
/// Creating the KubeadmConfig for a new Machine failed.
pub const BOOTSTRAP_TEMPLATE_CLONING_FAILED_REASON: &str = "BootstrapTemplateCloningFailed";
/// Creating a new Machine failed.
pub const MACHINE_GENERATION_FAILED_REASON: &str = "MachineGenerationFailed";
/// Machines are being replaced because the spec changed or a rollout was requested.
pub const ROLLING_UPDATE_IN_PROGRESS_REASON: &str = "RollingUpdateInProgress";
/// Some control-plane component is unhealthy.
pub const CONTROL_PLANE_COMPONENTS_UNHEALTHY_REASON: &str = "ControlPlaneComponentsUnhealthy";
/// The health of some control-plane component is unknown.
pub const CONTROL_PLANE_COMPONENTS_UNKNOWN_REASON: &str = "ControlPlaneComponentsUnknown";
/// The control-plane components could not be inspected, e.g. the API server is unreachable.
pub const CONTROL_PLANE_COMPONENTS_INSPECTION_FAILED_REASON: &str =
    "ControlPlaneComponentsInspectionFailed";
/// Some etcd member is unhealthy.
pub const ETCD_CLUSTER_UNHEALTHY_REASON: &str = "EtcdClusterUnhealthy";
/// The health of some etcd member is unknown.
pub const ETCD_CLUSTER_UNKNOWN_REASON: &str = "EtcdClusterUnknown";
/// The etcd cluster could not be inspected.
pub const ETCD_CLUSTER_INSPECTION_FAILED_REASON: &str = "EtcdClusterInspectionFailed";
/// A component Pod has not started yet.
pub const POD_PROVISIONING_REASON: &str = "PodProvisioning";
/// A component Pod does not exist.
pub const POD_MISSING_REASON: &str = "PodMissing";
/// A component Pod failed.
pub const POD_FAILED_REASON: &str = "PodFailed";
/// A component Pod could not be inspected.
pub const POD_INSPECTION_FAILED_REASON: &str = "PodInspectionFailed";
/// The Machine's etcd member reports an alarm or is not part of the cluster.
pub const ETCD_MEMBER_UNHEALTHY_REASON: &str = "EtcdMemberUnhealthy";
