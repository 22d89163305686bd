//! The server's certificate authority, serving certificate and client certificates, created
//! on first start under `<data-dir>/tls` and reused afterwards.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SerialNumber,
};
use time::OffsetDateTime;

#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("cannot read or write {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot create certificate: {0}")]
    Certificate(#[from] rcgen::Error),
}

/// PEM-encoded CA and serving certificate with their keys.
#[derive(Clone)]
pub struct Pki {
    pub ca_cert_pem: String,
    ca_key_pem: String,
    pub server_cert_pem: String,
    pub server_key_pem: String,
}

fn read(path: &Path) -> Result<Option<String>, PkiError> {
    match fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(PkiError::Io {
            path: path.into(),
            source,
        }),
    }
}

/// Reads a key file, narrowing its mode back to its owner's if something widened it (a
/// kubelet applying a pod's fsGroup makes every file on the volume group-readable).
fn read_secret(path: &Path) -> Result<Option<String>, PkiError> {
    let text = read(path)?;
    if text.is_some() {
        keep_private(path).map_err(|source| PkiError::Io {
            path: path.into(),
            source,
        })?;
    }
    Ok(text)
}

/// Narrows a file that holds a secret to mode 0600 if it is wider.
pub fn keep_private(path: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(path)?.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            fs::set_permissions(path, fs::Permissions::from_mode(0o600))?;
        }
    }
    Ok(())
}

/// Checks a name for the serving certificate (`--tls-san`): an IP address, or a DNS name
/// whose first label may be the wildcard `*`. Returns it as the certificate will hold it.
pub fn subject_alt_name(text: &str) -> Result<String, String> {
    let name = text.trim();
    let bracketed = name.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bracketed.parse::<std::net::IpAddr>() {
        return Ok(ip.to_string());
    }
    let lower = name.to_ascii_lowercase();
    let labels: Vec<&str> = lower.split('.').collect();
    let label_ok = |label: &str| {
        !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    let wildcard = labels.len() > 2 && labels[0] == "*";
    let valid = lower.len() <= 253
        && labels
            .iter()
            .skip(usize::from(wildcard))
            .all(|label| label_ok(label));
    if valid {
        Ok(lower)
    } else {
        Err(format!(
            "{text:?} is neither an IP address nor a DNS name (letters, digits and hyphens in dot-separated labels; only a first label may be *)"
        ))
    }
}

/// `https://HOST[:PORT]`, as clients and agents are told to reach a server: `(host for the
/// certificate, host:port)`. No user, path, query or fragment; a port from 1 to 65535.
pub fn server_url(url: &str) -> Result<(String, String), String> {
    let bad = |why: &str| format!("{url:?}: {why}; expected https://HOST or https://HOST:PORT");
    if url.contains(['#', '?', '@']) || url.chars().any(char::is_whitespace) {
        return Err(bad("no user, query, fragment or spaces"));
    }
    let uri: axum::http::Uri = url.parse().map_err(|_| bad("not a URL"))?;
    if uri.scheme_str() != Some("https") {
        return Err(bad("the scheme must be https"));
    }
    if uri.path() != "/" && !uri.path().is_empty() {
        return Err(bad("no path"));
    }
    let authority = uri.authority().ok_or_else(|| bad("no host"))?;
    // The text after the host: `Authority::port` reads an out-of-range port as none at all.
    let after_host = authority
        .as_str()
        .rsplit_once(']')
        .map_or(authority.as_str(), |(_, rest)| rest);
    let port = match after_host.rsplit_once(':') {
        None => 443,
        Some((_, port)) => port
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| bad("the port must be from 1 to 65535"))?,
    };
    let host = subject_alt_name(authority.host()).map_err(|e| bad(&e))?;
    if host.starts_with('*') {
        return Err(bad("a wildcard names no one host"));
    }
    let client_host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.clone()
    };
    Ok((host, format!("{client_host}:{port}")))
}

/// Writes a file readable by its owner only when it holds a secret.
pub fn write_file(path: &Path, contents: impl AsRef<[u8]>, secret: bool) -> Result<(), PkiError> {
    let io = |source| PkiError::Io {
        path: path.into(),
        source,
    };
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(io)?;
    }
    let tmp = path.with_extension("tmp");
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(if secret { 0o600 } else { 0o644 });
    }
    let mut file = options.open(&tmp).map_err(io)?;
    file.write_all(contents.as_ref()).map_err(io)?;
    file.sync_all().map_err(io)?;
    fs::rename(&tmp, path).map_err(io)
}

/// A client certificate just issued, and the serial that names it in the authenticator's
/// records.
pub struct IssuedCertificate {
    pub cert_pem: String,
    pub key_pem: String,
    pub serial: String,
    pub not_after: chrono::DateTime<chrono::Utc>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A self-signed CA certificate and key (PEM).
fn new_ca(common_name: &str) -> Result<(String, String), PkiError> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = rcgen::date_time_ymd(2025, 1, 1);
    params.not_after = rcgen::date_time_ymd(2035, 1, 1);
    let cert = params.self_signed(&key)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// The CA certificate and key (PEM) in `dir` (`ca.crt`, `ca.key`), created if missing.
pub fn load_or_create_ca(dir: &Path) -> Result<(String, String), PkiError> {
    let ca_cert_path = dir.join(CA_CERT_FILE);
    let ca_key_path = dir.join(CA_KEY_FILE);
    Ok(match (read(&ca_cert_path)?, read_secret(&ca_key_path)?) {
        (Some(cert), Some(key)) => (cert, key),
        _ => {
            let (cert, key) = new_ca("lariat-ca")?;
            write_file(&ca_key_path, &key, true)?;
            write_file(&ca_cert_path, &cert, false)?;
            (cert, key)
        }
    })
}

/// The files of `<data-dir>/tls` that replicas share ([`crate::bootstrap`]); each replica
/// issues its own serving certificate from the CA.
pub const CA_CERT_FILE: &str = "ca.crt";
pub const CA_KEY_FILE: &str = "ca.key";
pub const SERVICE_ACCOUNT_KEY_FILE: &str = "service-account.key";
/// The serving certificate's files: removed when the CA changes, so they are issued again.
pub const SERVING_FILES: [&str; 3] = ["server.crt", "server.key", "server.sans"];

impl Pki {
    /// Loads the PKI from `dir`, creating what is missing. The serving certificate is
    /// reissued when the requested names change.
    pub fn load_or_create(dir: &Path, sans: &[String]) -> Result<Pki, PkiError> {
        let (ca_cert_pem, ca_key_pem) = load_or_create_ca(dir)?;
        let mut pki = Pki {
            ca_cert_pem,
            ca_key_pem,
            server_cert_pem: String::new(),
            server_key_pem: String::new(),
        };
        let sans_path = dir.join("server.sans");
        let wanted = sans.join("\n");
        let server_cert_path = dir.join("server.crt");
        let server_key_path = dir.join("server.key");
        match (
            read(&server_cert_path)?,
            read_secret(&server_key_path)?,
            read(&sans_path)?,
        ) {
            (Some(cert), Some(key), Some(recorded)) if recorded == wanted => {
                pki.server_cert_pem = cert;
                pki.server_key_pem = key;
            }
            _ => {
                let (cert, key) = pki.issue(
                    sans,
                    "lariat-server",
                    &[],
                    ExtendedKeyUsagePurpose::ServerAuth,
                    None,
                )?;
                write_file(&server_key_path, &key, true)?;
                write_file(&server_cert_path, &cert, false)?;
                write_file(&sans_path, &wanted, false)?;
                pki.server_cert_pem = cert;
                pki.server_key_pem = key;
            }
        }
        Ok(pki)
    }

    /// A CA that lives only in memory, for a trust domain that lives only in memory (a
    /// simulated workload cluster): it signs that domain's client certificates and nothing else.
    pub fn in_memory_ca(common_name: &str) -> Result<Pki, PkiError> {
        let (ca_cert_pem, ca_key_pem) = new_ca(common_name)?;
        Ok(Pki {
            ca_cert_pem,
            ca_key_pem,
            server_cert_pem: String::new(),
            server_key_pem: String::new(),
        })
    }

    /// A client certificate for `user` in `groups` (the subject's CN and O, as Kubernetes
    /// reads them), valid from now for `lifetime`, with a random serial the authenticator
    /// records so it can be revoked.
    pub fn issue_client(
        &self,
        user: &str,
        groups: &[&str],
        lifetime: Duration,
    ) -> Result<IssuedCertificate, PkiError> {
        let now = OffsetDateTime::now_utc();
        let serial: [u8; 16] = rand::random();
        // A positive DER integer: the top bit clear.
        let mut serial = serial.to_vec();
        serial[0] &= 0x7f;
        serial[0] |= 0x01;
        let (cert_pem, key_pem) = self.issue(
            &[],
            user,
            groups,
            ExtendedKeyUsagePurpose::ClientAuth,
            Some((
                now - time::Duration::minutes(5),
                now + lifetime,
                serial.clone(),
            )),
        )?;
        Ok(IssuedCertificate {
            cert_pem,
            key_pem,
            serial: hex(&serial),
            not_after: chrono::Utc::now()
                + chrono::Duration::from_std(lifetime).unwrap_or(chrono::Duration::days(365)),
        })
    }

    fn issue(
        &self,
        sans: &[String],
        common_name: &str,
        organizations: &[&str],
        usage: ExtendedKeyUsagePurpose,
        validity: Option<(OffsetDateTime, OffsetDateTime, Vec<u8>)>,
    ) -> Result<(String, String), PkiError> {
        let ca_key = KeyPair::from_pem(&self.ca_key_pem)?;
        let issuer = Issuer::from_ca_cert_pem(&self.ca_cert_pem, ca_key)?;
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(sans.to_vec())?;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        for org in organizations {
            params
                .distinguished_name
                .push(DnType::OrganizationName, *org);
        }
        params.extended_key_usages = vec![usage];
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        match validity {
            Some((not_before, not_after, serial)) => {
                params.not_before = not_before;
                params.not_after = not_after;
                params.serial_number = Some(SerialNumber::from_slice(&serial));
            }
            None => {
                params.not_before = rcgen::date_time_ymd(2025, 1, 1);
                params.not_after = rcgen::date_time_ymd(2035, 1, 1);
            }
        }
        let cert = params.signed_by(&key, &issuer)?;
        Ok((cert.pem(), key.serialize_pem()))
    }

    /// `sha256` of the CA certificate PEM, hex: what agents pin with `--ca-checksum`.
    pub fn ca_checksum(&self) -> String {
        crate::identity::sha256_hex(&self.ca_cert_pem)
    }
}

/// A kubeconfig for `server` trusting the CA, with one cluster named `cluster`, one user and
/// one context `<user>@<cluster>` (as Cluster API names them, so kubeconfigs merge without
/// collisions).
pub fn kubeconfig(
    server: &str,
    ca_pem: &str,
    cluster: &str,
    user: &str,
    credential: Credential,
) -> String {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let user_block = match credential {
        Credential::Certificate { cert_pem, key_pem } => format!(
            "    client-certificate-data: {}\n    client-key-data: {}\n",
            b64(&cert_pem),
            b64(&key_pem)
        ),
        Credential::Token(token) => format!("    token: {token}\n"),
    };
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {cluster}\n  cluster:\n    server: {server}\n    certificate-authority-data: {}\nusers:\n- name: {user}\n  user:\n{user_block}contexts:\n- name: {user}@{cluster}\n  context:\n    cluster: {cluster}\n    user: {user}\n    namespace: default\ncurrent-context: {user}@{cluster}\n",
        b64(ca_pem)
    )
}

pub enum Credential {
    Certificate { cert_pem: String, key_pem: String },
    Token(String),
}

#[cfg(test)]
mod name_tests {
    #[test]
    fn certificate_names_and_server_urls_are_checked() {
        use super::{server_url, subject_alt_name};
        for (text, want) in [
            ("lariat.example.com", Some("lariat.example.com")),
            (" Lariat.Example.com ", Some("lariat.example.com")),
            ("*.example.com", Some("*.example.com")),
            ("10.0.0.1", Some("10.0.0.1")),
            ("[::1]", Some("::1")),
            ("*", None),
            ("foo.*.com", None),
            ("*.com", None),
            ("a b", None),
            ("a;b", None),
            ("1.2.3.4/24", None),
            ("http://x.com", None),
            ("x.com:6443", None),
            ("-bad-.com", None),
            ("a..b", None),
            ("émoji.example", None),
        ] {
            assert_eq!(subject_alt_name(text).ok().as_deref(), want, "{text:?}");
        }
        for (url, want) in [
            (
                "https://lariat.example.com",
                Some(("lariat.example.com", "lariat.example.com:443")),
            ),
            (
                "https://lariat.example.com:7443/",
                Some(("lariat.example.com", "lariat.example.com:7443")),
            ),
            ("https://10.0.0.1:6443", Some(("10.0.0.1", "10.0.0.1:6443"))),
            ("https://[::1]:6443", Some(("::1", "[::1]:6443"))),
            ("https://host:99999", None),
            ("https://host:0", None),
            ("https://host/path", None),
            ("https://u:p@host", None),
            ("https://host?x=1", None),
            ("https://host#frag", None),
            ("https://*.example.com", None),
            ("https://a'b", None),
            ("http://host", None),
            ("host:6443", None),
            ("", None),
        ] {
            let got = server_url(url).ok();
            let got = got.as_ref().map(|(h, a)| (h.as_str(), a.as_str()));
            assert_eq!(got, want, "{url:?}");
        }
    }
}
