//! Replicas joining one datastore with one token (`--token`), as k3s servers join over an
//! external datastore: the first server stores the secrets every replica must share (the
//! CA, the service-account signing key and the encryption key of Secrets) in the datastore,
//! sealed with a key derived from the token; every later server with the same token unseals
//! them into its data directory before it starts. So every kubeconfig, ServiceAccount token,
//! agent (`--ca-checksum`) and encrypted Secret works against every replica, while a copy of
//! the datastore alone gives none of them away.
//!
//! Each replica issues its own serving certificate from the shared CA, for its own names.

use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use lariat_store::Store;
use ring::rand::SecureRandom;
use serde::{Deserialize, Serialize};

use crate::encryption::Cipher;
use crate::pki;

/// Where the sealed secrets live, under the store's prefix.
pub const BOOTSTRAP_KEY: &str = "/bootstrap/v1";
/// PBKDF2-HMAC-SHA256 rounds turning the token into the sealing key (OWASP's 2023 figure), so
/// guessing a token from a copy of the datastore costs that much per guess.
const ITERATIONS: u32 = 600_000;
/// The shortest token accepted: a guessable one would unseal the CA from a datastore copy.
pub const MIN_TOKEN_LEN: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    #[error(
        "the join token is not the one this datastore's servers were started with; give the same token as the first server (--token, --token-file or LARIAT_JOIN_TOKEN)"
    )]
    WrongToken,
    #[error(
        "a join token must be at least {MIN_TOKEN_LEN} characters: generate one with `openssl rand -hex 32`"
    )]
    WeakToken,
    #[error(
        "this datastore's servers share one CA and key set, joined with a token: give this server the same token (--token, --token-file or LARIAT_JOIN_TOKEN)"
    )]
    TokenRequired,
    #[error(
        "--encryption-key-file holds another key than the servers on this datastore use; drop the flag to use theirs"
    )]
    OtherEncryptionKey,
    #[error(
        "the datastore's bootstrap data is unreadable ({0}); was it written by a newer lariat?"
    )]
    Malformed(String),
    #[error("cannot read or write the datastore: {0}")]
    Store(#[from] lariat_store::Error),
    #[error("{0}")]
    Local(String),
}

/// The shared secrets, as stored (sealed) in the datastore.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Sealed {
    kdf: String,
    iterations: u32,
    salt: String,
    /// AES-256-GCM, as [`Cipher`] seals: a marker, the nonce, then ciphertext and tag.
    sealed: String,
}

#[derive(Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct Material {
    ca_cert: String,
    ca_key: String,
    service_account_key: String,
    encryption_key: String,
}

/// Where a server keeps the shared secrets on disk.
pub struct Files {
    pub tls_dir: PathBuf,
    /// The admin kubeconfigs: issued again when the CA changes.
    pub kubeconfigs: Vec<PathBuf>,
    pub encryption_key: PathBuf,
    /// The encryption key file was given (`--encryption-key-file`): it is never replaced.
    pub encryption_key_given: bool,
}

/// Makes this server's data directory hold the datastore's shared secrets: unsealed from the
/// datastore when a server stored them before, else this server's own (created if new) are
/// sealed and stored for the others.
pub async fn join(store: &dyn Store, token: &str, files: &Files) -> Result<(), JoinError> {
    if token.chars().count() < MIN_TOKEN_LEN {
        return Err(JoinError::WeakToken);
    }
    loop {
        if let Some(stored) = store.get(BOOTSTRAP_KEY).await? {
            let material = unseal(&stored.value, token)?;
            return install(&material, files);
        }
        let material = local_material(files)?;
        match store.create(BOOTSTRAP_KEY, seal(&material, token)?).await {
            Ok(_) => {
                tracing::info!("stored this server's CA and keys for the servers that join it");
                return Ok(());
            }
            // Another first server stored its own meanwhile: join it instead.
            Err(lariat_store::Error::AlreadyExists(_)) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Refuses a server without a join token on a datastore whose servers joined with one: with
/// a CA and encryption key of its own it would write Secrets the others cannot read.
pub async fn check_tokenless(store: &dyn Store) -> Result<(), JoinError> {
    match store.get(BOOTSTRAP_KEY).await? {
        Some(_) => Err(JoinError::TokenRequired),
        None => Ok(()),
    }
}

/// Seals the datastore's shared secrets with `new` in place of `old` (`lariat admin
/// rotate-token`); servers started with `old` keep running, and start again with `new`.
pub async fn rotate(store: &dyn Store, old: &str, new: &str) -> Result<(), JoinError> {
    if new.chars().count() < MIN_TOKEN_LEN {
        return Err(JoinError::WeakToken);
    }
    let stored = store.get(BOOTSTRAP_KEY).await?.ok_or_else(|| {
        JoinError::Local(
            "this datastore holds no join token's data: no server was started on it with --token"
                .into(),
        )
    })?;
    let material = unseal(&stored.value, old)?;
    store
        .update(BOOTSTRAP_KEY, seal(&material, new)?, stored.mod_revision)
        .await?;
    Ok(())
}

fn derive(token: &str, salt: &[u8], iterations: u32) -> Result<Cipher, JoinError> {
    let mut key = [0u8; 32];
    ring::pbkdf2::derive(
        ring::pbkdf2::PBKDF2_HMAC_SHA256,
        std::num::NonZeroU32::new(iterations)
            .ok_or_else(|| JoinError::Malformed("zero iterations".into()))?,
        salt,
        token.as_bytes(),
        &mut key,
    );
    Cipher::from_key(&key).map_err(JoinError::Local)
}

fn seal(material: &Material, token: &str) -> Result<Vec<u8>, JoinError> {
    let mut salt = [0u8; 16];
    ring::rand::SystemRandom::new()
        .fill(&mut salt)
        .map_err(|_| JoinError::Local("no system randomness".into()))?;
    let plaintext = serde_json::to_vec(material).expect("material serializes");
    let sealed = derive(token, &salt, ITERATIONS)?
        .encrypt(&plaintext)
        .map_err(|e| JoinError::Local(e.to_string()))?;
    Ok(serde_json::to_vec(&Sealed {
        kdf: "pbkdf2-hmac-sha256".into(),
        iterations: ITERATIONS,
        salt: BASE64.encode(salt),
        sealed: BASE64.encode(sealed),
    })
    .expect("sealed serializes"))
}

fn unseal(stored: &[u8], token: &str) -> Result<Material, JoinError> {
    let malformed = |e: &dyn std::fmt::Display| JoinError::Malformed(e.to_string());
    let sealed: Sealed = serde_json::from_slice(stored).map_err(|e| malformed(&e))?;
    if sealed.kdf != "pbkdf2-hmac-sha256" {
        return Err(malformed(&format!("key derivation {:?}", sealed.kdf)));
    }
    let salt = BASE64.decode(&sealed.salt).map_err(|e| malformed(&e))?;
    let ciphertext = BASE64.decode(&sealed.sealed).map_err(|e| malformed(&e))?;
    // The ciphertext always carries the marker: without it `decrypt` would pass it through.
    if !ciphertext.starts_with(b"lariat:") {
        return Err(malformed(&"not sealed"));
    }
    let plaintext = derive(token, &salt, sealed.iterations)?
        .decrypt(&ciphertext)
        .map_err(|_| JoinError::WrongToken)?;
    serde_json::from_slice(&plaintext).map_err(|e| malformed(&e))
}

/// This server's own secrets, created where missing (what a first start creates anyway).
fn local_material(files: &Files) -> Result<Material, JoinError> {
    let local = |e: &dyn std::fmt::Display| JoinError::Local(e.to_string());
    let (ca_cert, ca_key) = pki::load_or_create_ca(&files.tls_dir).map_err(|e| local(&e))?;
    let service_account_key = crate::service_accounts::load_or_create_key(
        &files.tls_dir.join(pki::SERVICE_ACCOUNT_KEY_FILE),
    )
    .map_err(|e| local(&e))?
    .serialize_pem();
    Cipher::load_or_create(&files.encryption_key).map_err(|e| local(&e))?;
    let encryption_key = std::fs::read(&files.encryption_key).map_err(|e| local(&e))?;
    Ok(Material {
        ca_cert,
        ca_key,
        service_account_key,
        encryption_key: BASE64.encode(encryption_key),
    })
}

/// Writes the shared secrets where this server reads them, replacing what differs.
fn install(material: &Material, files: &Files) -> Result<(), JoinError> {
    let local = |path: &Path, e: &dyn std::fmt::Display| {
        JoinError::Local(format!("cannot write {}: {e}", path.display()))
    };
    let key = BASE64
        .decode(&material.encryption_key)
        .map_err(|e| JoinError::Malformed(e.to_string()))?;
    let key_path = &files.encryption_key;
    if std::fs::read(key_path).ok().as_deref() != Some(key.as_slice()) {
        if files.encryption_key_given && key_path.exists() {
            return Err(JoinError::OtherEncryptionKey);
        }
        pki::write_file(key_path, &key, true).map_err(|e| local(key_path, &e))?;
    }
    let ca_path = files.tls_dir.join(pki::CA_CERT_FILE);
    let ca_changed = std::fs::read_to_string(&ca_path).ok().as_deref() != Some(&material.ca_cert);
    for (name, contents, secret) in [
        (pki::CA_KEY_FILE, &material.ca_key, true),
        (pki::CA_CERT_FILE, &material.ca_cert, false),
        (
            pki::SERVICE_ACCOUNT_KEY_FILE,
            &material.service_account_key,
            true,
        ),
    ] {
        let path = files.tls_dir.join(name);
        if std::fs::read_to_string(&path).ok().as_deref() != Some(contents.as_str()) {
            pki::write_file(&path, contents, secret).map_err(|e| local(&path, &e))?;
        }
    }
    if ca_changed {
        // Issued by another CA: issued again from this one at start.
        let stale = pki::SERVING_FILES
            .iter()
            .map(|name| files.tls_dir.join(name))
            .chain(files.kubeconfigs.iter().cloned());
        for path in stale {
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(local(&path, &e)),
            }
        }
        tracing::info!("joined the datastore's servers: their CA and keys are this server's now");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(dir: &Path) -> Files {
        Files {
            tls_dir: dir.join("tls"),
            kubeconfigs: vec![dir.join("kubeconfig.yaml")],
            encryption_key: dir.join("encryption.key"),
            encryption_key_given: false,
        }
    }

    #[tokio::test]
    async fn servers_with_one_token_share_their_secrets_and_others_are_refused() {
        let store = lariat_store::memory::MemoryStore::new();
        let (first, second, third) = (tempdir("first"), tempdir("second"), tempdir("third"));
        let token = "a-token-of-enough-length";
        join(&store, token, &files(&first)).await.unwrap();
        // The second has secrets of its own already (it ran alone before): they are replaced.
        local_material(&files(&second)).unwrap();
        std::fs::write(second.join("tls/server.crt"), "old").unwrap();
        std::fs::write(second.join("kubeconfig.yaml"), "old").unwrap();
        join(&store, token, &files(&second)).await.unwrap();
        for name in [
            "tls/ca.crt",
            "tls/ca.key",
            "tls/service-account.key",
            "encryption.key",
        ] {
            assert_eq!(
                std::fs::read(first.join(name)).unwrap(),
                std::fs::read(second.join(name)).unwrap(),
                "{name}"
            );
        }
        assert!(
            !second.join("tls/server.crt").exists() && !second.join("kubeconfig.yaml").exists(),
            "reissued from the shared CA"
        );
        // Nothing secret is stored in the clear.
        let stored = store.get(BOOTSTRAP_KEY).await.unwrap().unwrap().value;
        let ca_key = std::fs::read_to_string(first.join("tls/ca.key")).unwrap();
        let body = ca_key.lines().nth(1).unwrap();
        assert!(!String::from_utf8_lossy(&stored).contains(body));

        let wrong = join(&store, "another-token-of-length", &files(&third)).await;
        assert!(
            matches!(wrong, Err(JoinError::WrongToken)),
            "{:?}",
            wrong.err()
        );
        assert!(matches!(
            join(&store, "short", &files(&third)).await,
            Err(JoinError::WeakToken)
        ));

        // Rotation: the new token joins, the old one no longer does.
        rotate(&store, token, "the-rotated-token-123")
            .await
            .unwrap();
        join(&store, "the-rotated-token-123", &files(&third))
            .await
            .unwrap();
        assert_eq!(
            std::fs::read(first.join("tls/ca.crt")).unwrap(),
            std::fs::read(third.join("tls/ca.crt")).unwrap()
        );
        assert!(matches!(
            join(&store, token, &files(&third)).await,
            Err(JoinError::WrongToken)
        ));
        assert!(matches!(
            rotate(&store, token, "yet-another-token-1").await,
            Err(JoinError::WrongToken)
        ));
        for dir in [first, second, third] {
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    fn tempdir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "lariat-bootstrap-{name}-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
