//! What a request carries when the server passes it on as its caller: into an agent's tunnel
//! (`Impersonate-User` for the downstream cluster) or to another replica (its forwarded-user
//! headers). Whatever identity the caller itself sent is dropped first.

use axum::http::{HeaderValue, header};

use crate::status::ApiError;

/// The caller a proxy request forwarded by another replica acts for (its name), set by the
/// forwarding replica (`replicas.rs`).
pub const FORWARDED_USER: &str = "x-lariat-forwarded-user";
/// The caller's groups, one header each, set by the forwarding replica.
pub const FORWARDED_GROUP: &str = "x-lariat-forwarded-group";
/// Every header starting with this is the replicas' own: never taken from a caller, never sent
/// downstream.
pub const FORWARDED_PREFIX: &str = "x-lariat-forwarded-";

/// A user or group name as a header value sent `whither`, refused unless the receiver reads
/// back exactly this name: HTTP drops whitespace around a value (so `" system:masters"` would
/// arrive as `system:masters`, past every check of the `system:` prefix) and cannot carry
/// control characters.
pub fn identity_header(text: &str, whither: &str) -> Result<HeaderValue, ApiError> {
    let faithful = !text.is_empty() && text.trim() == text && !text.chars().any(char::is_control);
    faithful
        .then(|| HeaderValue::from_bytes(text.as_bytes()).ok())
        .flatten()
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "the identity {text:?} cannot be sent {whither} as an HTTP header: names with surrounding whitespace or control characters are refused"
            ))
        })
}

/// Removes from a proxied request what is the caller's business with lariat and no one
/// else's: its credentials, hop-by-hop headers, and any identity it claims. Impersonation is
/// lariat's to grant (with RBAC), not the caller's to ask of the agent; nor may a caller claim
/// an identity with front-proxy headers (`X-Remote-User`) or the replicas' own
/// (`x-lariat-forwarded-*`).
pub fn strip_caller_headers(headers: &mut axum::http::HeaderMap) {
    for hop in [
        header::AUTHORIZATION,
        header::HOST,
        header::CONNECTION,
        header::UPGRADE,
        header::TE,
        header::TRANSFER_ENCODING,
        header::PROXY_AUTHORIZATION,
        header::COOKIE,
    ] {
        headers.remove(hop);
    }
    headers.remove("keep-alive");
    headers.remove("proxy-connection");
    let identities: Vec<_> = headers
        .keys()
        .filter(|name| {
            let name = name.as_str();
            name.starts_with("impersonate-")
                || name.starts_with("x-remote-")
                || name.starts_with(FORWARDED_PREFIX)
        })
        .cloned()
        .collect();
    for name in identities {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_go_out_only_as_headers_read_back_the_same() {
        for sent in ["system:masters", "alice", "josé@example.com", "a b"] {
            let value = identity_header(sent, "downstream").unwrap();
            assert_eq!(std::str::from_utf8(value.as_bytes()).unwrap(), sent);
        }
        // HTTP would drop the whitespace (" system:masters" arriving as system:masters) or
        // cannot carry the character.
        for refused in [
            " system:masters",
            "system:masters ",
            "\tsystem:masters",
            "a\nb",
            "a\u{7f}",
            "",
        ] {
            assert!(
                identity_header(refused, "downstream").is_err(),
                "{refused:?}"
            );
        }
    }
}
