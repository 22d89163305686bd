//! What this lariat supports, in one place: `lariat version --matrix` prints it, admission
//! holds Cluster API's Kubernetes versions to it, and the tunnel holds agents to it. The docs
//! (`docs/operations.md`) state the same; a test keeps them together.

use crate::KubernetesVersion;

/// The Kubernetes minor versions lariat provisions and manages, oldest and newest, as
/// `(major, minor)`: six minors, as Cluster API supports for its workload clusters.
pub const KUBERNETES: ((u64, u64), (u64, u64)) = ((1, 28), (1, 33));

/// This lariat's version (`major.minor.patch`), as the server and agent report it.
pub const LARIAT: &str = env!("CARGO_PKG_VERSION");

/// Whether `(major, minor)` lies in [`KUBERNETES`].
pub fn kubernetes_supported(major: u64, minor: u64) -> bool {
    (KUBERNETES.0..=KUBERNETES.1).contains(&(major, minor))
}

/// The refusal for a Kubernetes version outside [`KUBERNETES`], or `None`.
pub fn kubernetes_refusal(version: &KubernetesVersion) -> Option<String> {
    (!kubernetes_supported(version.major, version.minor)).then(|| {
        format!(
            "Kubernetes v{}.{} is outside what this lariat provisions and manages: {} (see `lariat version --matrix`)",
            version.major,
            version.minor,
            kubernetes_range()
        )
    })
}

/// `v1.28 to v1.33`.
pub fn kubernetes_range() -> String {
    let ((a, b), (c, d)) = KUBERNETES;
    format!("v{a}.{b} to v{c}.{d}")
}

/// `(major, minor)` of a lariat version (`0.1.0`, `v0.2.3-rc.1`); `None` if it is not one.
pub fn lariat_minor(version: &str) -> Option<(u64, u64)> {
    let version = version.strip_prefix('v').unwrap_or(version);
    let core = version.split(['-', '+']).next()?;
    let numbers: Vec<u64> = core
        .split('.')
        .map(|n| n.parse().ok())
        .collect::<Option<_>>()?;
    match numbers.as_slice() {
        [major, minor, _patch] => Some((*major, *minor)),
        _ => None,
    }
}

/// How an agent's version stands against this server's.
#[derive(Debug, PartialEq, Eq)]
pub enum AgentSkew {
    /// The same minor, or one older (agents are upgraded after the servers, as kubelets
    /// after their API server).
    Supported,
    /// One minor newer: an agent upgraded before every server replica was, in a rolling
    /// upgrade. Accepted; its Cluster says so until the servers catch up.
    Newer,
    /// Anything else: refused, with why and what to do.
    Refused(String),
}

/// Judges an agent's reported version (`None`: it reported none) against the server's.
pub fn agent_skew(server: &str, agent: Option<&str>) -> AgentSkew {
    let Some(ours) = lariat_minor(server) else {
        return AgentSkew::Supported;
    };
    let refused = |why: String| {
        AgentSkew::Refused(format!(
            "{why}; this server (v{server}) accepts agents of v{}.{}, one minor older, or one minor newer (with a warning): import the cluster again to install a matching agent",
            ours.0, ours.1
        ))
    };
    let Some(agent) = agent else {
        return refused("the agent did not report its version".into());
    };
    let Some(theirs) = lariat_minor(agent) else {
        return refused(format!(
            "the agent reported {agent:?}, which is not a version"
        ));
    };
    if theirs.0 != ours.0 {
        return refused(format!("agent {agent} is of another major version"));
    }
    match theirs.1 as i64 - ours.1 as i64 {
        0 | -1 => AgentSkew::Supported,
        1 => AgentSkew::Newer,
        _ => refused(format!(
            "agent {agent} is too far from this server's version"
        )),
    }
}

/// Whether two lariat versions may serve one datastore side by side: during a rolling
/// upgrade, replicas of one minor and of the next.
pub fn replicas_compatible(a: &str, b: &str) -> bool {
    match (lariat_minor(a), lariat_minor(b)) {
        (Some(a), Some(b)) => a.0 == b.0 && a.1.abs_diff(b.1) <= 1,
        _ => false,
    }
}

/// The matrix as `lariat version --matrix` prints it.
pub fn matrix() -> String {
    let (major, minor) = lariat_minor(LARIAT).unwrap_or((0, 0));
    let older = minor
        .checked_sub(1)
        .map_or(String::new(), |older| format!(" and v{major}.{older}"));
    format!(
        "lariat v{LARIAT} support matrix\n\
         Kubernetes provisioned and managed:  {}\n\
         Agents accepted:                     v{major}.{minor}{older}; v{major}.{} with a warning\n\
         Server replicas side by side:        one minor apart at most (upgrade v{major}.{minor} to v{major}.{}, then on)\n\
         Clients:                             kubectl v1.27 to v1.33, kube-rs\n",
        kubernetes_range(),
        minor + 1,
        minor + 1,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubernetes_versions_inside_and_outside_the_matrix() {
        let v = |text: &str| KubernetesVersion::parse(text).unwrap();
        assert!(kubernetes_refusal(&v("v1.28.0")).is_none());
        assert!(kubernetes_refusal(&v("v1.33.9")).is_none());
        let refusal = kubernetes_refusal(&v("v1.27.3")).unwrap();
        assert!(refusal.contains("v1.28 to v1.33"), "{refusal}");
        assert!(kubernetes_refusal(&v("v1.34.0")).is_some());
        assert!(kubernetes_refusal(&v("v2.28.0")).is_some());
    }

    #[test]
    fn agents_are_held_to_the_skew_policy() {
        assert_eq!(agent_skew("0.5.2", Some("0.5.0")), AgentSkew::Supported);
        assert_eq!(agent_skew("0.5.2", Some("v0.4.9")), AgentSkew::Supported);
        assert_eq!(agent_skew("0.5.2", Some("0.6.0-rc.1")), AgentSkew::Newer);
        for agent in [
            Some("0.3.0"),
            Some("0.7.0"),
            Some("1.5.0"),
            Some("latest"),
            None,
        ] {
            match agent_skew("0.5.2", agent) {
                AgentSkew::Refused(why) => {
                    assert!(why.contains("import the cluster again"), "{why}")
                }
                other => panic!("{agent:?}: {other:?}"),
            }
        }
        assert!(replicas_compatible("0.5.0", "0.6.1"));
        assert!(replicas_compatible("0.5.0", "0.5.3"));
        assert!(!replicas_compatible("0.5.0", "0.7.0"));
        assert!(!replicas_compatible("0.5.0", "1.5.0"));
        assert!(matrix().contains("v1.28 to v1.33"));
    }
}
