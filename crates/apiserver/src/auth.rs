//! Who is calling. Each trust domain (the management plane, each simulated workload cluster)
//! has its own [`Authenticator`]: its own CA for client certificates and its own records of
//! the credentials it issued, kept in that domain's store. A credential is accepted only by
//! the domain that issued it, only while its record exists (deleting the record revokes it)
//! and only until the expiry the record names. Tokens are stored as SHA-256 hashes only.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lariat_store::{ListOptions, Store};
use rand::RngCore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::ClientCertVerifier;
use serde::{Deserialize, Serialize};
use sha2::Digest as _;

use crate::identity::{Peer, User, bearer_token, same_secret, sha256_hex};
use crate::oidc::Oidc;
use crate::pki::{IssuedCertificate, Pki};
use crate::service_accounts::ServiceAccounts;

use crate::status::{ApiError, ApiResult};

/// Where token records live in a domain's store; the API never serves this prefix.
const TOKEN_PREFIX: &str = "/lariat/tokens/";
/// Where the API's Tokens (`management.lariat.dev`) are stored, by name.
const TOKEN_OBJECT_PREFIX: &str = "/registry/management.lariat.dev/tokens/";
/// Where client certificate records live, by serial.
const CERTIFICATE_PREFIX: &str = "/lariat/certificates/";

/// What a domain knows of one credential it issued.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Record {
    user: String,
    groups: Vec<String>,
    /// What the credential dies with: `admin` for the server's admin kubeconfigs,
    /// `kubeconfig` for a simulated cluster's, and so on.
    owner: String,
    created: String,
    expires: String,
}

impl Record {
    fn new(user: &str, groups: &[&str], owner: &str, lifetime: Duration) -> Record {
        let now = chrono::Utc::now();
        Record {
            user: user.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            owner: owner.into(),
            created: rfc3339(now),
            expires: rfc3339(
                now + chrono::Duration::from_std(lifetime).unwrap_or(chrono::Duration::days(365)),
            ),
        }
    }

    fn remaining(&self) -> Option<Duration> {
        let expires = chrono::DateTime::parse_from_rfc3339(&self.expires).ok()?;
        (expires.with_timezone(&chrono::Utc) - chrono::Utc::now())
            .to_std()
            .ok()
            .filter(|d| !d.is_zero())
    }

    fn user(&self) -> User {
        User {
            name: self.user.clone(),
            groups: self.groups.clone(),
        }
    }
}

fn rfc3339(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Refused credentials since start, for `/metrics`.
static REFUSED: AtomicU64 = AtomicU64::new(0);
/// When a refusal was last logged (seconds since the Unix epoch): at most one line per
/// [`REFUSAL_LOG_INTERVAL`], so a flood of bad tokens cannot flood the log.
static LAST_REFUSAL_LOG: AtomicU64 = AtomicU64::new(0);
const REFUSAL_LOG_INTERVAL: u64 = 10;

/// Counts a refused credential and logs it, at most once per interval with the count since.
pub fn record_refusal(path: &str, address: Option<SocketAddr>) {
    let total = REFUSED.fetch_add(1, Ordering::Relaxed) + 1;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let last = LAST_REFUSAL_LOG.load(Ordering::Relaxed);
    if now >= last + REFUSAL_LOG_INTERVAL
        && LAST_REFUSAL_LOG
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    {
        let client = address.map(|a| a.ip().to_string()).unwrap_or_default();
        tracing::info!(
            path,
            client,
            refused_total = total,
            "request refused: no valid credential (logged at most every {REFUSAL_LOG_INTERVAL}s; the count is in /metrics)"
        );
    }
}

/// The authentication counters in Prometheus text format.
pub fn metrics() -> String {
    format!(
        "# HELP lariat_authentication_failures_total Requests refused for want of a valid credential.\n# TYPE lariat_authentication_failures_total counter\nlariat_authentication_failures_total {}\n",
        REFUSED.load(Ordering::Relaxed)
    )
}

#[derive(Clone)]
pub struct Authenticator {
    store: Arc<dyn Store>,
    /// Checks client certificates against this domain's CA; `None`: certificates are refused.
    certificates: Option<Arc<dyn ClientCertVerifier>>,
    /// Leaf certificates the CA was found to have signed, with what each request reads of them.
    verified: Arc<std::sync::Mutex<std::collections::HashMap<[u8; 32], Verified>>>,
    /// Issues and checks this domain's ServiceAccount tokens; `None`: it issues none.
    service_accounts: Option<Arc<ServiceAccounts>>,
    /// Checks ID tokens of an OpenID Connect provider (`--oidc-issuer-url`).
    oidc: Option<Arc<Oidc>>,
}

impl Authenticator {
    /// An authenticator for the domain whose records are in `store` and whose client
    /// certificates `ca_pem` signs (empty: the domain accepts no certificates).
    pub fn new(store: Arc<dyn Store>, ca_pem: &str) -> Result<Authenticator, String> {
        let certificates = if ca_pem.is_empty() {
            None
        } else {
            let ca = CertificateDer::from_pem_slice(ca_pem.as_bytes())
                .map_err(|e| format!("CA certificate: {e}"))?;
            let mut roots = rustls::RootCertStore::empty();
            roots.add(ca).map_err(|e| format!("CA certificate: {e}"))?;
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                Arc::new(rustls::crypto::ring::default_provider()),
            )
            .build()
            .map_err(|e| format!("client verifier: {e}"))?;
            Some(verifier as Arc<dyn ClientCertVerifier>)
        };
        Ok(Authenticator {
            store,
            certificates,
            verified: Default::default(),
            service_accounts: None,
            oidc: None,
        })
    }

    /// This authenticator, also accepting the ServiceAccount tokens `accounts` issues.
    pub fn with_service_accounts(mut self, accounts: Arc<ServiceAccounts>) -> Authenticator {
        self.service_accounts = Some(accounts);
        self
    }

    /// This authenticator, also accepting ID tokens of the OIDC provider `oidc` trusts.
    pub fn with_oidc(mut self, oidc: Arc<Oidc>) -> Authenticator {
        self.oidc = Some(oidc);
        self
    }

    /// What issues this domain's ServiceAccount tokens (TokenRequest), if anything does.
    pub fn service_accounts(&self) -> Option<&ServiceAccounts> {
        self.service_accounts.as_deref()
    }

    /// Creates a bearer token for `user`, owned by `owner`, valid for `lifetime`; only its
    /// hash is stored, so this is the one time the token is seen.
    pub async fn create_token(
        &self,
        user: &str,
        groups: &[&str],
        owner: &str,
        lifetime: Duration,
    ) -> ApiResult<String> {
        let mut secret = [0u8; 32];
        rand::rng().fill_bytes(&mut secret);
        let token: String = secret.iter().map(|b| format!("{b:02x}")).collect();
        self.record(
            &format!("{TOKEN_PREFIX}{}", sha256_hex(&token)),
            &Record::new(user, groups, owner, lifetime),
        )
        .await?;
        Ok(token)
    }

    /// Issues a client certificate from this domain's CA (`pki`) and records it, owned by
    /// `owner`, valid for `lifetime`.
    pub async fn issue_certificate(
        &self,
        pki: &Pki,
        user: &str,
        groups: &[&str],
        owner: &str,
        lifetime: Duration,
    ) -> ApiResult<IssuedCertificate> {
        let issued = pki
            .issue_client(user, groups, lifetime)
            .map_err(|e| ApiError::internal(e.to_string()))?;
        let mut record = Record::new(user, groups, owner, lifetime);
        record.expires = rfc3339(issued.not_after);
        self.record(&format!("{CERTIFICATE_PREFIX}{}", issued.serial), &record)
            .await?;
        Ok(issued)
    }

    async fn record(&self, key: &str, record: &Record) -> ApiResult<()> {
        let bytes = serde_json::to_vec(record).map_err(|e| ApiError::internal(e.to_string()))?;
        self.store.create(key, bytes).await?;
        Ok(())
    }

    async fn lookup(&self, key: &str) -> ApiResult<Option<Record>> {
        let Some(kv) = self.store.get(key).await? else {
            return Ok(None);
        };
        let record: Record = serde_json::from_slice(&kv.value)
            .map_err(|e| ApiError::internal(format!("corrupt credential record: {e}")))?;
        Ok(record.remaining().is_some().then_some(record))
    }

    /// Revokes every credential `owner` holds (tokens and certificates), and any expired
    /// record on the way. Returns how many live credentials were revoked.
    pub async fn revoke(&self, owner: &str) -> ApiResult<usize> {
        let mut revoked = 0;
        for prefix in [TOKEN_PREFIX, CERTIFICATE_PREFIX] {
            let listed = self.store.list(prefix, ListOptions::default()).await?;
            for kv in listed.items {
                let record = serde_json::from_slice::<Record>(&kv.value).ok();
                let expired = record.as_ref().is_none_or(|r| r.remaining().is_none());
                let owned = record.as_ref().is_some_and(|r| r.owner == owner);
                if owned || expired {
                    match self.store.delete(&kv.key, kv.mod_revision).await {
                        Ok(_) => revoked += usize::from(owned && !expired),
                        Err(
                            lariat_store::Error::NotFound(_) | lariat_store::Error::Conflict { .. },
                        ) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        }
        Ok(revoked)
    }

    /// How long the client certificate in `cert_pem` stays valid here: `None` when this
    /// domain did not issue it, revoked it, or it expired.
    pub async fn certificate_remaining(&self, cert_pem: &str) -> Option<Duration> {
        let der = CertificateDer::from_pem_slice(cert_pem.as_bytes()).ok()?;
        let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref()).ok()?;
        let serial = serial_of(&cert);
        self.lookup(&format!("{CERTIFICATE_PREFIX}{serial}"))
            .await
            .ok()
            .flatten()?
            .remaining()
    }

    /// How long `token` stays valid here, `None` when it is unknown, revoked or expired.
    pub async fn token_remaining(&self, token: &str) -> Option<Duration> {
        self.lookup(&format!("{TOKEN_PREFIX}{}", sha256_hex(token)))
            .await
            .ok()
            .flatten()?
            .remaining()
    }

    /// The user behind `Authorization: Bearer <token>`, if this domain issued the token and it
    /// is neither revoked nor expired.
    pub async fn user_for_token(&self, token: &str) -> ApiResult<Option<User>> {
        Ok(self
            .lookup(&format!("{TOKEN_PREFIX}{}", sha256_hex(token)))
            .await?
            .map(|r| r.user()))
    }

    /// The user behind a client certificate chain, if this domain's CA signed it, it is in
    /// its validity period and its record says it is still live.
    pub async fn user_for_certificates(
        &self,
        chain: &[CertificateDer<'static>],
    ) -> ApiResult<Option<User>> {
        let Some(serial) = self.verified(chain) else {
            return Ok(None);
        };
        Ok(self
            .lookup(&format!("{CERTIFICATE_PREFIX}{serial}"))
            .await?
            .map(|r| r.user()))
    }

    /// Whether this domain's CA signed the client certificate chain and it is in its validity
    /// period (whatever the records say of it).
    pub fn verifies(&self, chain: &[CertificateDer<'static>]) -> bool {
        self.verified(chain).is_some()
    }

    /// The serial of the chain's leaf, if this domain's CA signed it and it is in its validity
    /// period. A connection presents the same chain with every request: its signature is
    /// checked once per leaf (tens of microseconds, a third of a small request's cost when it
    /// was checked on every request) and its expiry on every request.
    fn verified(&self, chain: &[CertificateDer<'static>]) -> Option<String> {
        let (verifier, (leaf, intermediates)) = (self.certificates.as_ref()?, chain.split_first()?);
        let fingerprint: [u8; 32] = sha2::Sha256::digest(leaf.as_ref()).into();
        let now = UnixTime::now();
        let known = self
            .verified
            .lock()
            .expect("lock")
            .get(&fingerprint)
            .cloned();
        if let Some(known) = known {
            return (now.as_secs() < known.not_after).then_some(known.serial);
        }
        verifier.verify_client_cert(leaf, intermediates, now).ok()?;
        let (_, cert) = x509_parser::parse_x509_certificate(leaf.as_ref()).ok()?;
        let known = Verified {
            serial: serial_of(&cert),
            not_after: u64::try_from(cert.validity().not_after.timestamp()).unwrap_or(0),
        };
        let mut verified = self.verified.lock().expect("lock");
        // Each live client certificate is one entry; a flood of distinct valid ones (each
        // signed by this CA) empties the map rather than growing it.
        if verified.len() >= MAX_VERIFIED_CERTIFICATES {
            verified.clear();
        }
        verified.insert(fingerprint, known.clone());
        Some(known.serial)
    }

    /// The user behind a Token's bearer `<name>:<secret>` (`lariat token create`), if the
    /// Token exists, the secret's hash matches and it has not expired.
    pub async fn user_for_api_token(&self, token: &str) -> ApiResult<Option<User>> {
        let Some((name, secret)) = token.split_once(':') else {
            return Ok(None);
        };
        let well_formed = !name.is_empty()
            && name.len() <= 253
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
        if !well_formed {
            return Ok(None);
        }
        let key = format!("{TOKEN_OBJECT_PREFIX}{name}");
        let Some(kv) = self.store.get(&key).await? else {
            return Ok(None);
        };
        let Ok(object) = serde_json::from_slice::<serde_json::Value>(&kv.value) else {
            return Ok(None);
        };
        let spec = &object["spec"];
        let hash = spec["tokenHash"].as_str().unwrap_or_default();
        if !same_secret(sha256_hex(secret).as_bytes(), hash.as_bytes()) {
            return Ok(None);
        }
        let live = spec["expirationTimestamp"]
            .as_str()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .is_some_and(|at| at > chrono::Utc::now());
        let user = spec["user"].as_str().filter(|u| !u.is_empty());
        Ok(user.filter(|_| live).map(|name| User {
            name: name.to_string(),
            groups: spec["groups"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|g| g.as_str().map(String::from))
                .collect(),
        }))
    }

    /// The user behind a JWT: a ServiceAccount token of this domain, or an ID token of the
    /// OIDC provider, whichever `issuer` (the token's unchecked `iss`) names.
    async fn user_for_jwt(&self, token: &str, issuer: &str) -> ApiResult<Option<User>> {
        if let Some(accounts) = &self.service_accounts
            && let Some(user) = accounts.authenticate(token, issuer).await?
        {
            return Ok(Some(user));
        }
        match &self.oidc {
            Some(oidc) if oidc.issuer() == issuer => oidc.authenticate(token).await.map(Some),
            _ => Ok(None),
        }
    }

    /// Resolves the caller from a bearer token or, without one, from the peer's certificate.
    pub async fn authenticate(
        &self,
        authorization: Option<&str>,
        peer: Option<&Peer>,
    ) -> ApiResult<User> {
        if let Some(header) = authorization {
            let token = bearer_token(header).ok_or(ApiError::Unauthorized)?;
            let user = if token.contains(':') {
                self.user_for_api_token(token).await?
            } else if let Some(issuer) = crate::service_accounts::issuer_of(token) {
                self.user_for_jwt(token, &issuer).await?
            } else {
                self.user_for_token(token).await?
            };
            return user.ok_or(ApiError::Unauthorized);
        }
        match peer {
            Some(Peer::InProcess(user)) => Ok(user.clone()),
            Some(Peer::Remote {
                certificates: Some(chain),
                ..
            }) => self
                .user_for_certificates(chain)
                .await?
                .ok_or(ApiError::Unauthorized),
            _ => Err(ApiError::Unauthorized),
        }
    }
}

/// Client certificates [`Authenticator::verified`] keeps before it starts over.
const MAX_VERIFIED_CERTIFICATES: usize = 4096;

/// What a request reads of a client certificate whose signature was checked.
#[derive(Clone)]
struct Verified {
    serial: String,
    /// Seconds since the Unix epoch after which it is no longer valid.
    not_after: u64,
}

/// A certificate's serial number as lowercase hex without leading zero bytes, the key of its
/// record.
fn serial_of(cert: &x509_parser::certificate::X509Certificate<'_>) -> String {
    let bytes = cert.tbs_certificate.raw_serial();
    let trimmed = match bytes.iter().position(|b| *b != 0) {
        Some(i) => &bytes[i..],
        None => bytes,
    };
    trimmed.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    use lariat_store::memory::MemoryStore;

    fn chain(pem: &str) -> Vec<CertificateDer<'static>> {
        vec![CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()]
    }

    #[tokio::test]
    async fn a_certificate_is_valid_only_in_the_domain_that_issued_it_and_until_revoked() {
        let (pki_a, pki_b) = (
            Pki::in_memory_ca("a").unwrap(),
            Pki::in_memory_ca("b").unwrap(),
        );
        let a = Authenticator::new(Arc::new(MemoryStore::new()), &pki_a.ca_cert_pem).unwrap();
        let b = Authenticator::new(Arc::new(MemoryStore::new()), &pki_b.ca_cert_pem).unwrap();
        let day = Duration::from_secs(86400);
        let issued = a
            .issue_certificate(&pki_a, "alice", &["devs"], "admin", day)
            .await
            .unwrap();
        let user = a.user_for_certificates(&chain(&issued.cert_pem)).await;
        assert_eq!(user.unwrap().unwrap().groups, vec!["devs".to_string()]);
        assert!(
            b.user_for_certificates(&chain(&issued.cert_pem))
                .await
                .unwrap()
                .is_none(),
            "another domain's CA did not sign it"
        );
        // Signed by A's CA but never recorded (a key A's CA signed elsewhere, or a record
        // deleted): refused.
        let unrecorded = pki_a
            .issue_client("mallory", &["system:masters"], day)
            .unwrap();
        assert!(
            a.user_for_certificates(&chain(&unrecorded.cert_pem))
                .await
                .unwrap()
                .is_none()
        );
        assert_eq!(a.revoke("admin").await.unwrap(), 1);
        assert!(
            a.user_for_certificates(&chain(&issued.cert_pem))
                .await
                .unwrap()
                .is_none(),
            "revoked"
        );
    }

    #[tokio::test]
    async fn a_certificate_checked_once_is_still_refused_when_it_expires() {
        let pki = Pki::in_memory_ca("a").unwrap();
        let a = Authenticator::new(Arc::new(MemoryStore::new()), &pki.ca_cert_pem).unwrap();
        let issued = a
            .issue_certificate(&pki, "alice", &[], "admin", Duration::from_secs(1))
            .await
            .unwrap();
        let chain = chain(&issued.cert_pem);
        assert!(a.user_for_certificates(&chain).await.unwrap().is_some());
        assert!(
            a.user_for_certificates(&chain).await.unwrap().is_some(),
            "again, from what the first request checked"
        );
        // The time is what is tested: the certificate's notAfter, which has whole seconds.
        tokio::time::sleep(Duration::from_millis(2100)).await;
        assert!(
            a.user_for_certificates(&chain).await.unwrap().is_none(),
            "expired since its signature was checked"
        );
    }

    #[tokio::test]
    async fn tokens_expire_and_die_with_their_owner() {
        let a = Authenticator::new(Arc::new(MemoryStore::new()), "").unwrap();
        let kept = a
            .create_token("u", &[], "other", Duration::from_secs(60))
            .await
            .unwrap();
        let revoked = a
            .create_token("u", &[], "admin", Duration::from_secs(60))
            .await
            .unwrap();
        let expired = a
            .create_token("u", &[], "other", Duration::ZERO)
            .await
            .unwrap();
        assert!(a.user_for_token(&expired).await.unwrap().is_none());
        assert_eq!(a.revoke("admin").await.unwrap(), 1);
        assert!(a.user_for_token(&revoked).await.unwrap().is_none());
        assert!(a.user_for_token(&kept).await.unwrap().is_some());
    }
}
