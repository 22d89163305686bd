//! Who is calling: bearer tokens (stored as SHA-256 hashes only) and client certificates
//! signed by the server's CA; and the seam where authorization plugs in.

use std::sync::Arc;

use lariat_store::Store;
use rand::RngCore;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::status::{ApiError, ApiResult};

/// An authenticated caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
}

/// Where token hashes live in the store; the API never serves this prefix.
const TOKEN_PREFIX: &str = "/lariat/tokens/";

/// SHA-256 as lowercase hex: how bearer tokens, agent tokens and credentials are stored, and
/// the CA checksum agents pin.
pub fn sha256_hex(data: impl AsRef<[u8]>) -> String {
    Sha256::digest(data.as_ref())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[derive(Clone)]
pub struct Authenticator {
    store: Arc<dyn Store>,
}

impl Authenticator {
    pub fn new(store: Arc<dyn Store>) -> Authenticator {
        Authenticator { store }
    }

    /// Creates a bearer token for `user`; only its hash is stored, so this is the one time the
    /// token is seen.
    pub async fn create_token(&self, user: &str, groups: &[&str]) -> ApiResult<String> {
        let mut secret = [0u8; 32];
        rand::rng().fill_bytes(&mut secret);
        let token: String = secret.iter().map(|b| format!("{b:02x}")).collect();
        let record =
            json!({"user": user, "groups": groups, "created": crate::objects::now_rfc3339()});
        self.store
            .create(
                &format!("{TOKEN_PREFIX}{}", sha256_hex(&token)),
                record.to_string().into_bytes(),
            )
            .await?;
        Ok(token)
    }

    /// The user behind `Authorization: Bearer <token>`, if the token is known.
    pub async fn user_for_token(&self, token: &str) -> ApiResult<Option<User>> {
        let Some(kv) = self
            .store
            .get(&format!("{TOKEN_PREFIX}{}", sha256_hex(token)))
            .await?
        else {
            return Ok(None);
        };
        let record: Value = serde_json::from_slice(&kv.value)
            .map_err(|e| ApiError::internal(format!("corrupt token record: {e}")))?;
        if let Some(expires) = record["expires"].as_str()
            && chrono::DateTime::parse_from_rfc3339(expires).is_ok_and(|t| t < chrono::Utc::now())
        {
            return Ok(None);
        }
        Ok(Some(User {
            name: record["user"].as_str().unwrap_or_default().to_string(),
            groups: record["groups"]
                .as_array()
                .map(|g| {
                    g.iter()
                        .filter_map(|s| s.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default(),
        }))
    }

    /// Resolves the caller from a verified client certificate or a bearer token.
    pub async fn authenticate(
        &self,
        authorization: Option<&str>,
        certificate: Option<&User>,
    ) -> ApiResult<User> {
        if let Some(header) = authorization {
            let token = header
                .strip_prefix("Bearer ")
                .map(str::trim)
                .ok_or(ApiError::Unauthorized)?;
            return self
                .user_for_token(token)
                .await?
                .ok_or(ApiError::Unauthorized);
        }
        certificate.cloned().ok_or(ApiError::Unauthorized)
    }
}

/// The user named by a client certificate the TLS layer already verified against the CA:
/// CN is the user, each O a group, as in Kubernetes.
pub fn user_from_certificate(der: &[u8]) -> Option<User> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let name = subject
        .iter_common_name()
        .next()?
        .as_str()
        .ok()?
        .to_string();
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(String::from))
        .collect();
    Some(User { name, groups })
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
}

/// The authorization seam: RBAC (Global, Cluster and Project scopes) plugs in here.
pub trait Authorizer: Send + Sync + 'static {
    /// `Err(reason)` refuses the request with 403.
    fn authorize(&self, user: &User, attributes: &Attributes) -> Result<(), String>;
}

/// Until RBAC lands, every authenticated user may do everything.
pub struct AllowAuthenticated;

impl Authorizer for AllowAuthenticated {
    fn authorize(&self, _user: &User, _attributes: &Attributes) -> Result<(), String> {
        Ok(())
    }
}
