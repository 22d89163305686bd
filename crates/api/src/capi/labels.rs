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

/// A name as Cluster API writes it into a label's value (`format.MustFormatValue`): the name
/// itself when it is a valid label value, else `hash_<FNV-1a 32 of it, base64url>_z`, so that
/// an object whose name is longer than a label value may be (63 characters: a KubeadmControlPlane
/// of a Cluster named with 50) still labels and selects its Machines.
pub fn format_value(name: &str) -> String {
    if is_label_value(name) {
        return name.to_string();
    }
    use base64::Engine as _;
    let hash = name.bytes().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    });
    format!(
        "hash_{}_z",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(hash.to_be_bytes())
    )
}

/// Whether `value` may be a label's value: at most 63 characters, empty or alphanumeric at
/// both ends with `-`, `_` and `.` between.
fn is_label_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    let edge = |b: Option<&u8>| b.is_none_or(u8::is_ascii_alphanumeric);
    bytes.len() <= 63
        && edge(bytes.first())
        && edge(bytes.last())
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_too_long_for_a_label_are_hashed_as_cluster_api_hashes_them() {
        assert_eq!(format_value("prod-control-plane"), "prod-control-plane");
        assert_eq!(format_value(""), "");
        let long = format!("c{}-control-plane", "x".repeat(49));
        // Cluster API's own output for this name (FNV-1a 32, base64url without padding).
        assert_eq!(format_value(&long), "hash_jKgBfQ_z");
        assert_eq!(format_value(&"a".repeat(63)), "a".repeat(63));
        assert!(format_value(&"a".repeat(64)).starts_with("hash_"));
        assert!(format_value("-edge").starts_with("hash_"));
    }
}
