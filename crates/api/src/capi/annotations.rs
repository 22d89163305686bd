//! Well-known annotation keys Cluster API reads or writes on its objects.

/// On any CAPI object (or its Cluster): stop reconciling it while present.
pub const PAUSED: &str = "cluster.x-k8s.io/paused";
/// On a Machine: delete this one first when its MachineSet scales down.
pub const DELETE_MACHINE: &str = "cluster.x-k8s.io/delete-machine";
/// On a Machine: ask the MachineHealthCheck to remediate it now.
pub const REMEDIATE_MACHINE: &str = "cluster.x-k8s.io/remediate-machine";
/// On a Machine: MachineHealthChecks leave it alone.
pub const SKIP_REMEDIATION: &str = "cluster.x-k8s.io/skip-remediation";
/// On a Node: the name of the Cluster it belongs to.
pub const CLUSTER_NAME: &str = "cluster.x-k8s.io/cluster-name";
/// On a Node: the namespace of the Cluster it belongs to.
pub const CLUSTER_NAMESPACE: &str = "cluster.x-k8s.io/cluster-namespace";
/// On a Node: the name of the Machine it belongs to.
pub const MACHINE: &str = "cluster.x-k8s.io/machine";
/// On a Node: the kind of the Machine's owner (e.g. MachineSet).
pub const OWNER_KIND: &str = "cluster.x-k8s.io/owner-kind";
/// On a Node: the name of the Machine's owner.
pub const OWNER_NAME: &str = "cluster.x-k8s.io/owner-name";
/// On an object cloned from a template: the template's name.
pub const TEMPLATE_CLONED_FROM_NAME: &str = "cluster.x-k8s.io/cloned-from-name";
/// On an object cloned from a template: the template's `Kind.group`.
pub const TEMPLATE_CLONED_FROM_GROUP_KIND: &str = "cluster.x-k8s.io/cloned-from-groupkind";
/// On a MachineDeployment and its MachineSets: the rollout revision.
pub const REVISION: &str = "machinedeployment.clusters.x-k8s.io/revision";
/// On a MachineSet: the replicas its MachineDeployment wanted when it last scaled it.
pub const DESIRED_REPLICAS: &str = "machinedeployment.clusters.x-k8s.io/desired-replicas";
/// On a MachineSet: the most replicas its MachineDeployment may have during a rollout.
pub const MAX_REPLICAS: &str = "machinedeployment.clusters.x-k8s.io/max-replicas";
/// On a Machine: skip draining its Node on deletion.
pub const EXCLUDE_NODE_DRAINING: &str = "machine.cluster.x-k8s.io/exclude-node-draining";
/// On a Machine: do not wait for volumes to detach on deletion.
pub const EXCLUDE_WAIT_FOR_NODE_VOLUME_DETACH: &str =
    "machine.cluster.x-k8s.io/exclude-wait-for-node-volume-detach";
/// Prefix of annotations that hold a Machine's deletion before its Node is drained.
pub const PRE_DRAIN_DELETE_HOOK_PREFIX: &str = "pre-drain.delete.hook.machine.cluster.x-k8s.io";
/// Prefix of annotations that hold a Machine's deletion before its infrastructure is deleted.
pub const PRE_TERMINATE_DELETE_HOOK_PREFIX: &str =
    "pre-terminate.delete.hook.machine.cluster.x-k8s.io";
