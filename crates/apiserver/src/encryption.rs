//! Encryption at rest for Secrets: AES-256-GCM with a key kept outside the store, so a copy of
//! the database (or of etcd) holds no secret in the clear.

use std::path::Path;

use ring::aead::{AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};

use crate::status::{ApiError, ApiResult};

/// Marks an encrypted value; anything else is stored in the clear (and still readable, so data
/// written before encryption was enabled keeps working).
const PREFIX: &[u8] = b"lariat:aes256gcm:v1:";
const NONCE_LEN: usize = 12;

pub struct Cipher {
    key: LessSafeKey,
    random: SystemRandom,
}

impl Cipher {
    /// Loads the 32-byte key at `path`, creating it (readable by its owner only) on first use.
    pub fn load_or_create(path: &Path) -> Result<Cipher, String> {
        let key = match std::fs::read(path) {
            Ok(bytes) if bytes.len() == 32 => bytes,
            Ok(bytes) => {
                return Err(format!(
                    "{} holds {} bytes; an encryption key has 32",
                    path.display(),
                    bytes.len()
                ));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut key = vec![0u8; 32];
                SystemRandom::new()
                    .fill(&mut key)
                    .map_err(|_| "no system randomness".to_string())?;
                write_secret(path, &key)
                    .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
                key
            }
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        Cipher::from_key(&key)
    }

    pub fn from_key(key: &[u8]) -> Result<Cipher, String> {
        let unbound = UnboundKey::new(&AES_256_GCM, key)
            .map_err(|_| "an encryption key has 32 bytes".to_string())?;
        Ok(Cipher {
            key: LessSafeKey::new(unbound),
            random: SystemRandom::new(),
        })
    }

    pub fn encrypt(&self, plaintext: &[u8]) -> ApiResult<Vec<u8>> {
        let mut nonce = [0u8; NONCE_LEN];
        self.random
            .fill(&mut nonce)
            .map_err(|_| ApiError::internal("no system randomness"))?;
        let mut sealed = plaintext.to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::empty(),
                &mut sealed,
            )
            .map_err(|_| ApiError::internal("encryption failed"))?;
        Ok([PREFIX, &nonce, &sealed].concat())
    }

    /// The plaintext of a stored value, decrypting it when it is encrypted.
    pub fn decrypt<'a>(&self, stored: &'a [u8]) -> ApiResult<std::borrow::Cow<'a, [u8]>> {
        let Some(rest) = stored.strip_prefix(PREFIX) else {
            return Ok(std::borrow::Cow::Borrowed(stored));
        };
        if rest.len() < NONCE_LEN {
            return Err(ApiError::internal("an encrypted value is truncated"));
        }
        let (nonce, sealed) = rest.split_at(NONCE_LEN);
        let nonce =
            Nonce::try_assume_unique_for_key(nonce).map_err(|_| ApiError::internal("bad nonce"))?;
        let mut buffer = sealed.to_vec();
        let plaintext = self
            .key
            .open_in_place(nonce, Aad::empty(), &mut buffer)
            .map_err(|_| {
                ApiError::internal(
                    "a stored secret cannot be decrypted: is this the server's encryption key?",
                )
            })?;
        Ok(std::borrow::Cow::Owned(plaintext.to_vec()))
    }
}

fn write_secret(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_plaintext_passthrough() {
        let cipher = Cipher::from_key(&[7u8; 32]).unwrap();
        let sealed = cipher.encrypt(b"{\"data\":{\"k\":\"c2VjcmV0\"}}").unwrap();
        assert!(!sealed.windows(8).any(|w| w == b"c2VjcmV0"));
        assert_eq!(
            &*cipher.decrypt(&sealed).unwrap(),
            b"{\"data\":{\"k\":\"c2VjcmV0\"}}"
        );
        assert_eq!(&*cipher.decrypt(b"{}").unwrap(), b"{}");
        let other = Cipher::from_key(&[8u8; 32]).unwrap();
        assert_eq!(other.decrypt(&sealed).unwrap_err().code().as_u16(), 500);
    }
}
