//! Kubernetes bootstrap tokens (`[a-z0-9]{6}.[a-z0-9]{16}`): the shared secret a joining
//! node presents for discovery and TLS bootstrap.
//!
//! One token per cluster is kept in the management Secret `<cluster>-bootstrap-token` and
//! reused. The init configuration registers it in the workload cluster (`bootstrapTokens`), so
//! joins work without this provider ever reaching the workload cluster's API.

use std::fmt;

use rand::Rng;

/// The token's public id and its secret half.
#[derive(Clone, PartialEq, Eq)]
pub struct BootstrapToken {
    pub id: String,
    pub secret: String,
}

/// The alphabet kubeadm's token format allows.
const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";

/// The group kubeadm gives node bootstrap tokens; its RBAC lets them create CSRs.
pub const NODE_BOOTSTRAP_GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";

impl BootstrapToken {
    /// A new random token, from the operating system's CSPRNG (through `rand`'s thread RNG).
    pub fn generate() -> BootstrapToken {
        let mut rng = rand::rng();
        let mut pick = |n: usize| -> String {
            (0..n)
                .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
                .collect()
        };
        BootstrapToken {
            id: pick(6),
            secret: pick(16),
        }
    }

    /// Reads `id` and `secret` back, refusing anything not in the token format.
    pub fn from_parts(id: &str, secret: &str) -> Option<BootstrapToken> {
        let valid = |s: &str, len: usize| {
            s.len() == len
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        };
        (valid(id, 6) && valid(secret, 16)).then(|| BootstrapToken {
            id: id.into(),
            secret: secret.into(),
        })
    }

    /// Parses `id.secret`.
    pub fn parse(token: &str) -> Option<BootstrapToken> {
        let (id, secret) = token.split_once('.')?;
        BootstrapToken::from_parts(id, secret)
    }
}

impl fmt::Display for BootstrapToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.id, self.secret)
    }
}

/// Debug output hides the secret half, so a token never reaches a log by accident.
impl fmt::Debug for BootstrapToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BootstrapToken({}.<redacted>)", self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_tokens_match_the_kubeadm_format() {
        for _ in 0..200 {
            let token = BootstrapToken::generate().to_string();
            let (id, secret) = token.split_once('.').unwrap();
            assert_eq!((id.len(), secret.len()), (6, 16), "{token}");
            assert!(
                token
                    .bytes()
                    .all(|b| b == b'.' || b.is_ascii_lowercase() || b.is_ascii_digit()),
                "{token}"
            );
            assert_eq!(BootstrapToken::parse(&token).unwrap().to_string(), token);
        }
        assert_ne!(BootstrapToken::generate(), BootstrapToken::generate());
    }

    #[test]
    fn parse_refuses_other_shapes() {
        let check = |input: &str, ok: bool| {
            assert_eq!(BootstrapToken::parse(input).is_some(), ok, "{input}");
        };
        check("abcdef.0123456789abcdef", true);
        check("abcdef0123456789abcdef", false);
        check("ABCDEF.0123456789abcdef", false);
        check("abcde.0123456789abcdef", false);
        check("abcdef.0123456789abcde", false);
        check("abcdef.0123456789abcdef.x", false);
        check("abc-ef.0123456789abcdef", false);
    }

    #[test]
    fn debug_hides_the_secret() {
        let token = BootstrapToken::parse("abcdef.0123456789abcdef").unwrap();
        assert_eq!(format!("{token:?}"), "BootstrapToken(abcdef.<redacted>)");
    }
}
