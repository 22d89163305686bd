//! Kubernetes versions as Cluster API writes them (`v1.30.2`, `v1.31.0-rc.1+build`): parsed
//! once here for admission, upgrades, kubeadm's API choice and the simulated `/version`.

/// A version's numbers; pre-release and build suffixes are accepted and not compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct KubernetesVersion {
    pub major: u64,
    pub minor: u64,
    pub patch: u64,
}

impl KubernetesVersion {
    /// `v` then three dot-separated numbers without leading zeros, then an optional `-` or
    /// `+` suffix of `[A-Za-z0-9-_.+]`, as Cluster API's webhooks accept; `None` otherwise.
    pub fn parse(text: &str) -> Option<KubernetesVersion> {
        let rest = text.strip_prefix('v')?;
        let core_end = rest.find(['-', '+']).unwrap_or(rest.len());
        let (core, suffix) = rest.split_at(core_end);
        if !suffix
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.+".contains(c))
        {
            return None;
        }
        let numbers: Vec<u64> = core
            .split('.')
            .map(|n| {
                (!n.is_empty() && (n == "0" || !n.starts_with('0')))
                    .then(|| n.parse().ok())
                    .flatten()
            })
            .collect::<Option<_>>()?;
        match numbers.as_slice() {
            [major, minor, patch] => Some(KubernetesVersion {
                major: *major,
                minor: *minor,
                patch: *patch,
            }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::KubernetesVersion;

    #[test]
    fn parses_what_cluster_api_accepts() {
        let v = |major, minor, patch| {
            Some(KubernetesVersion {
                major,
                minor,
                patch,
            })
        };
        for (text, expect) in [
            ("v1.30.2", v(1, 30, 2)),
            ("v1.31.0-rc.1+build.5", v(1, 31, 0)),
            ("v1.30.0", v(1, 30, 0)),
            ("1.30.2", None),
            ("v1.30", None),
            ("v1.030.2", None),
            ("v1.30.2-rc 1", None),
            ("", None),
        ] {
            assert_eq!(KubernetesVersion::parse(text), expect, "{text}");
        }
        assert!(KubernetesVersion::parse("v1.9.0") < KubernetesVersion::parse("v1.10.0"));
    }
}
