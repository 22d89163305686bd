//! What one GitRepo may cost the server, and where it may make the server connect.
//!
//! A commit is refused, with the file or bundle and the limit named, when one of its files is
//! larger than [`Limits::max_file_bytes`], when one bundle's files together are larger than
//! [`Limits::max_bundle_bytes`], or when it has more than [`Limits::max_files`] files and
//! directories. Sizes come from the objects' headers, before any content is inflated; while
//! a fetch indexes what it received, gix allocates no object larger than
//! [`Limits::object_ceiling`] (`gitoxide.objects.allocLimit`).
//!
//! A repository's host is resolved before anything is fetched from it, and one in a network
//! that is the server's own surroundings (loopback, link-local, private, shared address
//! space, unspecified; see [`internal`]) is refused unless [`Limits::allowed_networks`]
//! holds it: otherwise a namespace editor could make the server reach its etcd or any
//! internal service, and tell from the GitRepo's condition which ports answer.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub use ipnet::IpNet;

/// The largest file a commit may hold: 10 MiB. A Bundle is one API object, and Fleet's are
/// bound by etcd's request size (about 1.5 MiB, its manifests gzip-compressed, so some 10
/// MiB of YAML at most): no single manifest of a deployable bundle comes near it, the
/// largest CRD files are a few MiB, and a larger file is an artifact (a binary, an archive)
/// that is no manifest.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;
/// The most one bundle's files may hold together, uncompressed: 50 MiB, five times what
/// fits in one Bundle object once compressed, so that no bundle Fleet could deploy is
/// refused while one poll's memory stays bounded.
pub const DEFAULT_MAX_BUNDLE_BYTES: u64 = 50 * 1024 * 1024;
/// The most files and directories one commit may have: 10,000. The repositories Fleet
/// deploys from (fleet-examples, a platform team's monorepo of manifests) have hundreds to
/// a few thousand; every one is listed (its header read) at every new commit.
pub const DEFAULT_MAX_FILES: usize = 10_000;

/// What Fleet reads from git at most, and which internal networks it may fetch from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The largest file a commit may hold (`--fleet-max-file-bytes`).
    pub max_file_bytes: u64,
    /// The most one bundle's files (every file under its root that no deeper root owns) may
    /// hold together, uncompressed (`--fleet-max-bundle-bytes`).
    pub max_bundle_bytes: u64,
    /// The most files and directories one commit may have (`--fleet-max-files`).
    pub max_files: usize,
    /// Internal networks GitRepos may fetch from nonetheless, e.g. an internal git server's
    /// (`--fleet-allow-networks 10.20.0.0/16`). None by default: a public address is
    /// always allowed, an internal one only inside these.
    pub allowed_networks: Vec<IpNet>,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            max_bundle_bytes: DEFAULT_MAX_BUNDLE_BYTES,
            max_files: DEFAULT_MAX_FILES,
            allowed_networks: Vec::new(),
        }
    }
}

impl Limits {
    /// The largest object gix may inflate into memory, while a fetch indexes the pack it
    /// received (it must inflate each object to learn its id) and while a file is read: the
    /// larger of the two size limits. A file between [`Limits::max_file_bytes`] and this is
    /// refused by its name once fetched; a larger one fails the fetch itself, unread, so its
    /// name is not known.
    pub fn object_ceiling(&self) -> u64 {
        self.max_file_bytes.max(self.max_bundle_bytes)
    }

    /// Whether the server may connect to `ip` for a GitRepo: any public address, and an
    /// internal one inside [`Limits::allowed_networks`].
    pub fn allows(&self, ip: IpAddr) -> bool {
        !internal(ip)
            || self
                .allowed_networks
                .iter()
                .any(|network| network.contains(&ip) || network.contains(&ip.to_canonical()))
    }
}

/// Parses `--fleet-allow-networks`: networks separated by commas or spaces, each a CIDR
/// (`10.0.0.0/8`, `fd00::/8`) or one address (`192.168.1.20`, taken as a /32 or /128).
pub fn parse_networks(text: &str) -> Result<Vec<IpNet>, String> {
    text.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|item| !item.is_empty())
        .map(|item| {
            item.parse::<IpNet>()
                .or_else(|_| item.parse::<IpAddr>().map(IpNet::from))
                .map(|network| network.trunc())
                .map_err(|_| {
                    format!(
                        "{item:?} is not a network: write a CIDR such as 10.0.0.0/8 or fd00::/8, or one address"
                    )
                })
        })
        .collect()
}

/// Whether `ip` is in the server's own surroundings rather than on the internet: loopback,
/// unspecified and "this network" (0.0.0.0/8, which Linux connects to loopback),
/// link-local, private (RFC 1918, IPv6 unique-local fc00::/7 and the deprecated site-local
/// fec0::/10), shared address space (100.64.0.0/10, carrier-grade NAT and some clouds'
/// internal ranges), IETF protocol assignments (192.0.0.0/24), benchmarking
/// (198.18.0.0/15), multicast, reserved (240.0.0.0/4) and broadcast; and an IPv6 address
/// that carries such an IPv4 one (IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible
/// `::a.b.c.d`, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`).
pub fn internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(ip) => internal_v4(ip),
        IpAddr::V6(ip) => internal_v6(ip),
    }
}

fn internal_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    a == 0
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || (a == 100 && (64..128).contains(&b))
        || (a == 192 && b == 0 && c == 0)
        || (a == 198 && (b == 18 || b == 19))
        || ip.is_multicast()
        || a >= 240
}

fn internal_v6(ip: Ipv6Addr) -> bool {
    let segments = ip.segments();
    let embedded = |high: u16, low: u16| {
        Ipv4Addr::new((high >> 8) as u8, high as u8, (low >> 8) as u8, low as u8)
    };
    if let Some(v4) = ip.to_ipv4_mapped() {
        return internal_v4(v4);
    }
    match segments {
        // Unspecified, loopback, and IPv4-compatible (deprecated, still routed by some stacks).
        [0, 0, 0, 0, 0, 0, high, low] => {
            ip.is_unspecified() || ip.is_loopback() || internal_v4(embedded(high, low))
        }
        // NAT64's well-known prefix: a gateway would connect to the embedded IPv4 address.
        [0x64, 0xff9b, 0, 0, 0, 0, high, low] => internal_v4(embedded(high, low)),
        // 6to4: the embedded IPv4 address is the relay's way in.
        [0x2002, high, low, ..] => internal_v4(embedded(high, low)),
        [first, ..] => {
            (first & 0xfe00) == 0xfc00 // unique local, fc00::/7
                || (first & 0xffc0) == 0xfe80 // link-local, fe80::/10
                || (first & 0xffc0) == 0xfec0 // site-local (deprecated), fec0::/10
                || (first & 0xff00) == 0xff00 // multicast, ff00::/8
        }
    }
}

/// Why a commit is too large to be read, in words a GitRepo's condition can carry: the
/// file or bundle, its size, and the limit with the server flag that sets it.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum LimitError {
    #[error(
        "{path} is {size} bytes, more than the {limit}-byte limit of one file (--fleet-max-file-bytes)"
    )]
    File { path: String, size: u64, limit: u64 },
    #[error(
        "{} holds {size} bytes of files, more than the {limit}-byte limit of one bundle (--fleet-max-bundle-bytes)",
        bundle_at(root)
    )]
    Bundle { root: String, size: u64, limit: u64 },
    #[error(
        "the commit has more than {limit} files and directories, the limit of one commit (--fleet-max-files)"
    )]
    Files { limit: usize },
    /// A fetch received an object larger than [`Limits::object_ceiling`]: refused before it
    /// was inflated, hence before its id, let alone its path, was known.
    #[error(
        "the commit holds a file of more than {ceiling} bytes, over the {limit}-byte limit of one file (--fleet-max-file-bytes); it was refused unread, so its path is not known"
    )]
    Unread { ceiling: u64, limit: u64 },
}

impl LimitError {
    /// The reason word of the GitRepo's condition.
    pub fn reason(&self) -> &'static str {
        match self {
            LimitError::File { .. } | LimitError::Unread { .. } => "FileTooLarge",
            LimitError::Bundle { .. } => "BundleTooLarge",
            LimitError::Files { .. } => "TooManyFiles",
        }
    }
}

fn bundle_at(root: &str) -> String {
    if root.is_empty() {
        "the bundle at the repository's root".to_string()
    } else {
        format!("bundle {root}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_addresses_are_told_from_public_ones() {
        let check = |input: &str, expect: bool| {
            let ip: IpAddr = input.parse().unwrap();
            assert_eq!(internal(ip), expect, "{input}");
        };
        for (input, expect) in [
            // Loopback, unspecified, "this network".
            ("127.0.0.1", true),
            ("127.255.255.254", true),
            ("0.0.0.0", true),
            ("0.1.2.3", true),
            ("::1", true),
            ("::", true),
            // Private and shared address space.
            ("10.0.0.1", true),
            ("172.16.0.1", true),
            ("172.31.255.255", true),
            ("172.32.0.1", false),
            ("192.168.1.1", true),
            ("100.64.0.1", true),
            ("100.127.255.255", true),
            ("100.128.0.1", false),
            ("100.63.255.255", false),
            ("fc00::1", true),
            ("fd12:3456::1", true),
            ("fec0::1", true),
            // Link-local (cloud metadata services live there).
            ("169.254.169.254", true),
            ("fe80::1", true),
            ("febf::1", true),
            // IPv4 inside IPv6.
            ("::ffff:127.0.0.1", true),
            ("::ffff:10.1.2.3", true),
            ("::ffff:169.254.169.254", true),
            ("::ffff:8.8.8.8", false),
            ("::127.0.0.1", true),
            ("64:ff9b::a00:1", true),
            ("64:ff9b::808:808", false),
            ("2002:7f00:1::", true),
            ("2002:808:808::", false),
            // Neither a host on the internet nor one to connect to.
            ("192.0.0.8", true),
            ("198.18.0.1", true),
            ("224.0.0.1", true),
            ("255.255.255.255", true),
            ("240.0.0.1", true),
            ("ff02::1", true),
            // Public.
            ("8.8.8.8", false),
            ("140.82.112.3", false),
            ("1.1.1.1", false),
            ("2606:4700:4700::1111", false),
            ("2001:db8::1", false),
            ("fbff::1", false),
            ("fe00::1", false),
        ] {
            check(input, expect);
        }
    }

    #[test]
    fn allowed_networks_let_internal_addresses_through() {
        let check = |networks: &str, input: &str, expect: bool| {
            let limits = Limits {
                allowed_networks: parse_networks(networks).unwrap(),
                ..Limits::default()
            };
            let ip: IpAddr = input.parse().unwrap();
            assert_eq!(limits.allows(ip), expect, "{networks:?} {input}");
        };
        for (networks, input, expect) in [
            ("", "8.8.8.8", true),
            ("", "127.0.0.1", false),
            ("", "10.1.2.3", false),
            ("127.0.0.0/8", "127.0.0.1", true),
            ("127.0.0.0/8", "::ffff:127.0.0.1", true),
            ("127.0.0.0/8", "::1", false),
            ("10.20.0.0/16, fd00::/8", "10.20.3.4", true),
            ("10.20.0.0/16, fd00::/8", "10.21.3.4", false),
            ("10.20.0.0/16,fd00::/8", "fd00::5", true),
            ("192.168.1.20", "192.168.1.20", true),
            ("192.168.1.20", "192.168.1.21", false),
            ("::1", "::1", true),
            // Host bits are dropped: 10.1.2.3/8 is 10.0.0.0/8.
            ("10.1.2.3/8", "10.200.0.1", true),
        ] {
            check(networks, input, expect);
        }
        for bad in ["git.internal", "10.0.0.0/33", "10.0.0", "fd00::/129"] {
            let error = parse_networks(bad).unwrap_err();
            assert!(error.contains(bad), "{error}");
        }
    }

    #[test]
    fn limit_errors_name_the_file_the_bundle_and_the_flag() {
        assert_eq!(
            LimitError::File {
                path: "charts/big.bin".into(),
                size: 419_430_400,
                limit: DEFAULT_MAX_FILE_BYTES
            }
            .to_string(),
            "charts/big.bin is 419430400 bytes, more than the 10485760-byte limit of one file (--fleet-max-file-bytes)"
        );
        let bundle = |root: &str| LimitError::Bundle {
            root: root.into(),
            size: 60,
            limit: 50,
        };
        assert!(
            bundle("apps/web")
                .to_string()
                .starts_with("bundle apps/web holds 60 bytes"),
            "{}",
            bundle("apps/web")
        );
        assert!(
            bundle("")
                .to_string()
                .starts_with("the bundle at the repository's root holds")
        );
        assert!(
            LimitError::Files { limit: 3 }
                .to_string()
                .contains("more than 3 files and directories")
        );
    }
}
