//! Well-known label keys Cluster API puts on, and selects, its objects.

/// The name of the Cluster an object belongs to; on every CAPI object and on Machines' Nodes.
pub const CLUSTER_NAME: &str = "cluster.x-k8s.io/cluster-name";
/// The name of the MachineDeployment a MachineSet or Machine belongs to.
pub const MACHINE_DEPLOYMENT_NAME: &str = "cluster.x-k8s.io/deployment-name";
/// The name of the MachineSet a Machine belongs to.
pub const MACHINE_SET_NAME: &str = "cluster.x-k8s.io/set-name";
/// The name of the MachinePool a Machine belongs to.
pub const MACHINE_POOL_NAME: &str = "cluster.x-k8s.io/pool-name";
/// Present (with an empty value) on control-plane Machines.
pub const MACHINE_CONTROL_PLANE: &str = "cluster.x-k8s.io/control-plane";
/// The name of the control plane object a control-plane Machine belongs to.
pub const MACHINE_CONTROL_PLANE_NAME: &str = "cluster.x-k8s.io/control-plane-name";
/// The name of the provider that owns an installed component (e.g. `infrastructure-aws`).
pub const PROVIDER_NAME: &str = "cluster.x-k8s.io/provider";
/// Lets several controller instances split the objects they watch by this label's value.
pub const WATCH_FILTER: &str = "cluster.x-k8s.io/watch-filter";
/// Marks Machines whose infrastructure may be taken away at any time (e.g. spot instances).
pub const INTERRUPTIBLE: &str = "cluster.x-k8s.io/interruptible";
/// On objects the topology controller manages for a Cluster built from a ClusterClass.
pub const TOPOLOGY_OWNED: &str = "topology.cluster.x-k8s.io/owned";
/// The topology name of the MachineDeployment a managed object belongs to.
pub const TOPOLOGY_MACHINE_DEPLOYMENT_NAME: &str = "topology.cluster.x-k8s.io/deployment-name";
/// Labels under this domain on a Machine are kept in sync onto its Node.
pub const MANAGED_NODE_LABEL_DOMAIN: &str = "node.cluster.x-k8s.io";
/// On a provider's CRD: the Cluster API contract it implements (`v1beta1`), valued with the
/// CRD versions that implement it, `_`-separated, oldest first (e.g. `v1alpha1`).
pub const CONTRACT_V1BETA1: &str = "cluster.x-k8s.io/v1beta1";
