//! Who a request is from and what it wants, as every part of the server speaks of it: the
//! caller ([`User`]) and how it reached the server ([`Peer`]), a request's [`Attributes`] and
//! the [`Authorizer`] seam that decides on them, and the small helpers of credentials (bearer
//! tokens, constant-time comparison, SHA-256). A leaf: it knows nothing of how callers are
//! authenticated (`auth.rs`) or authorized (`rbac.rs`).

use std::net::SocketAddr;
use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use sha2::{Digest, Sha256};

use crate::status::ApiError;

/// An authenticated caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
}

/// Who is on the other end of a request, as the transport saw it. The authenticator of the
/// domain the request reaches turns this into a [`User`].
#[derive(Clone, Debug)]
pub enum Peer {
    /// A caller inside this process (lariat's own controllers), trusted as this user.
    InProcess(User),
    /// A TLS client: the certificate chain it proved it holds the key of (not yet checked
    /// against any CA: each domain checks against its own) and its address.
    Remote {
        certificates: Option<Arc<Vec<CertificateDer<'static>>>>,
        address: SocketAddr,
    },
}

impl Peer {
    /// The client address of a request whose transport left its `Peer` among `extensions`
    /// (none for a caller inside this process).
    pub fn ip_of(extensions: &axum::http::Extensions) -> Option<std::net::IpAddr> {
        extensions
            .get::<Peer>()
            .and_then(Peer::address)
            .map(|a| a.ip())
    }

    pub fn address(&self) -> Option<SocketAddr> {
        match self {
            Peer::Remote { address, .. } => Some(*address),
            Peer::InProcess(_) => None,
        }
    }
}

/// The token of an `Authorization: Bearer <token>` header (the scheme in any case, as
/// RFC 9110 and kube-apiserver take it).
pub fn bearer_token(header: &str) -> Option<&str> {
    let (scheme, token) = header.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Whether two secrets (or their hashes) are equal, in time that does not depend on where
/// they differ.
pub fn same_secret(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.ct_eq(b).into()
}
/// SHA-256 as lowercase hex: how bearer tokens, agent tokens and credentials are stored, and
/// the CA checksum agents pin.
pub fn sha256_hex(data: impl AsRef<[u8]>) -> String {
    Sha256::digest(data.as_ref())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// What a request wants to do, for an authorizer to decide on.
#[derive(Clone, Debug)]
pub struct Attributes {
    pub verb: String,
    pub group: String,
    pub resource: String,
    pub subresource: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// A non-resource request's path (`/apis`, `/metrics`): then only `verb` counts besides.
    pub path: Option<String>,
}

impl Attributes {
    /// A request for a path that is no resource, with its HTTP method as the verb.
    pub fn non_resource(verb: &str, path: &str) -> Attributes {
        Attributes {
            verb: verb.into(),
            group: String::new(),
            resource: String::new(),
            subresource: None,
            namespace: None,
            name: None,
            path: Some(path.into()),
        }
    }

    /// The resource as kubectl names it across groups: `deployments.apps`.
    pub fn qualified_resource(&self) -> String {
        if self.group.is_empty() {
            self.resource.clone()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }

    /// The 403 for a refused request, in kube-apiserver's words (`deployments.apps is
    /// forbidden: User "alice" cannot list resource "deployments" in API group "apps" in
    /// the namespace "team-b"`), with the authorizer's reason if any.
    pub fn forbidden(&self, user: &User, reason: &str) -> ApiError {
        let mut message = match &self.path {
            Some(path) => format!(
                "forbidden: User {:?} cannot {} path {path:?}",
                user.name, self.verb
            ),
            None => {
                let resource = match &self.subresource {
                    Some(sub) => format!("{}/{sub}", self.resource),
                    None => self.resource.clone(),
                };
                let qualified = self.qualified_resource();
                let object = match &self.name {
                    Some(name) => format!("{qualified} {name:?}"),
                    None => qualified,
                };
                let place = match &self.namespace {
                    Some(namespace) => format!("in the namespace {namespace:?}"),
                    None => "at the cluster scope".into(),
                };
                format!(
                    "{object} is forbidden: User {:?} cannot {} resource {resource:?} in API group {:?} {place}",
                    user.name, self.verb, self.group
                )
            }
        };
        if !reason.is_empty() {
            message.push_str(": ");
            message.push_str(reason);
        }
        ApiError::Forbidden { message }
    }
}

/// The authorization seam: RBAC (`rbac.rs`), after the extensions' authorizers (`extension.rs`,
/// which decide for the identities they confine: the agents' fixed scope).
pub trait Authorizer: Send + Sync + 'static {
    /// `Err(reason)` refuses the request with 403 (the reason may be empty).
    fn authorize(&self, user: &User, attributes: &Attributes) -> Result<(), String>;

    /// The objects of `attributes`' resource (and namespace) that `user` may `get` by name
    /// (rules with `resourceNames`): what a refused list tells the caller it may read.
    fn readable_by_name(&self, _user: &User, _attributes: &Attributes) -> Vec<String> {
        Vec::new()
    }
}

/// Every authenticated user may do everything: the simulated workload clusters' authorizer,
/// until their own RBAC is enforced.
pub struct AllowAuthenticated;

impl Authorizer for AllowAuthenticated {
    fn authorize(&self, _user: &User, _attributes: &Attributes) -> Result<(), String> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_scheme_is_read_in_any_case() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer abc "), Some("abc"));
        assert_eq!(bearer_token("BEARER abc"), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer "), None);
        assert_eq!(bearer_token("Bearerabc"), None);
    }
}
