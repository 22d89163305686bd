//! The cluster's certificate authorities and service-account key pair: what kubeadm expects
//! under `/etc/kubernetes/pki`, generated here once per cluster so every control-plane node
//! shares them (Cluster API's `<cluster>-ca`, `-etcd`, `-proxy` and `-sa` Secrets).
//!
//! Keys are ECDSA P-256 (ring, through rcgen, cannot generate RSA keys); kubeadm and the
//! Kubernetes components accept ECDSA CAs and service-account keys.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
use sha2::{Digest, Sha256};

/// What went wrong with a certificate or key.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("cannot generate the {purpose}: {source}")]
    Generate {
        purpose: &'static str,
        #[source]
        source: rcgen::Error,
    },
    #[error("the {purpose} certificate is not a PEM X.509 certificate: {message}")]
    ParseCertificate {
        purpose: &'static str,
        message: String,
    },
    #[error("the {purpose} certificate is not a certificate authority")]
    NotCa { purpose: &'static str },
    #[error("the {purpose} {what} is missing or not PEM")]
    MissingPem {
        purpose: &'static str,
        what: &'static str,
    },
}

/// One of the four cluster-wide key pairs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Purpose {
    /// The cluster CA (`<cluster>-ca`): signs the API server's and the kubelets' certificates.
    ClusterCa,
    /// The etcd CA (`<cluster>-etcd`).
    EtcdCa,
    /// The front-proxy CA (`<cluster>-proxy`), for the aggregation layer.
    FrontProxyCa,
    /// The service-account signing key pair (`<cluster>-sa`); not a certificate.
    ServiceAccount,
}

impl Purpose {
    /// Every key pair, in the order they are written to a node.
    pub const ALL: [Purpose; 4] = [
        Purpose::ClusterCa,
        Purpose::EtcdCa,
        Purpose::FrontProxyCa,
        Purpose::ServiceAccount,
    ];

    /// The suffix of the Secret `<cluster>-<suffix>`, as Cluster API names them.
    pub fn secret_suffix(self) -> &'static str {
        match self {
            Purpose::ClusterCa => "ca",
            Purpose::EtcdCa => "etcd",
            Purpose::FrontProxyCa => "proxy",
            Purpose::ServiceAccount => "sa",
        }
    }

    pub fn secret_name(self, cluster: &str) -> String {
        format!("{cluster}-{}", self.secret_suffix())
    }

    /// A name for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Purpose::ClusterCa => "cluster CA",
            Purpose::EtcdCa => "etcd CA",
            Purpose::FrontProxyCa => "front-proxy CA",
            Purpose::ServiceAccount => "service-account key pair",
        }
    }

    /// The common name kubeadm itself gives the CA.
    fn common_name(self) -> &'static str {
        match self {
            Purpose::ClusterCa => "kubernetes",
            Purpose::EtcdCa => "etcd-ca",
            Purpose::FrontProxyCa => "front-proxy-ca",
            Purpose::ServiceAccount => "service-accounts",
        }
    }

    /// Where kubeadm looks for the certificate (or public key) and the key, under the
    /// certificates directory `dir`.
    pub fn node_paths(self, dir: &str) -> (String, String) {
        let dir = dir.trim_end_matches('/');
        let (cert, key) = match self {
            Purpose::ClusterCa => ("ca.crt", "ca.key"),
            Purpose::EtcdCa => ("etcd/ca.crt", "etcd/ca.key"),
            Purpose::FrontProxyCa => ("front-proxy-ca.crt", "front-proxy-ca.key"),
            Purpose::ServiceAccount => ("sa.pub", "sa.key"),
        };
        (format!("{dir}/{cert}"), format!("{dir}/{key}"))
    }
}

/// A PEM certificate (for the service-account pair: a PEM public key) and its PEM key, as the
/// Secrets keep them in `tls.crt` and `tls.key`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyPairPem {
    pub cert: String,
    pub key: String,
}

/// The cluster's key pairs, as a node's bootstrap data needs them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterCertificates {
    pub pairs: Vec<(Purpose, KeyPairPem)>,
}

impl ClusterCertificates {
    pub fn get(&self, purpose: Purpose) -> Option<&KeyPairPem> {
        self.pairs
            .iter()
            .find(|(p, _)| *p == purpose)
            .map(|(_, pair)| pair)
    }

    /// Generates all four, for tests and for a cluster that has none yet.
    pub fn generate() -> Result<ClusterCertificates, CertError> {
        Ok(ClusterCertificates {
            pairs: Purpose::ALL
                .iter()
                .map(|p| Ok((*p, generate(*p)?)))
                .collect::<Result<_, CertError>>()?,
        })
    }
}

/// Generates a new key pair: a self-signed CA valid for ten years (kubeadm's CA lifetime), or
/// for the service account a bare key pair whose "certificate" is the PEM public key.
pub fn generate(purpose: Purpose) -> Result<KeyPairPem, CertError> {
    let failed = |source| CertError::Generate {
        purpose: purpose.describe(),
        source,
    };
    let key = KeyPair::generate().map_err(failed)?;
    if purpose == Purpose::ServiceAccount {
        return Ok(KeyPairPem {
            cert: key.public_key_pem(),
            key: key.serialize_pem(),
        });
    }
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(failed)?;
    params
        .distinguished_name
        .push(DnType::CommonName, purpose.common_name());
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    // Valid from the first of this month: a node whose clock lags a little still accepts it.
    // The first of a month exists in every year, unlike the 29th of February.
    use chrono::Datelike;
    let today = chrono::Utc::now().date_naive();
    let month = today.month() as u8;
    params.not_before = rcgen::date_time_ymd(today.year(), month, 1);
    params.not_after = rcgen::date_time_ymd(today.year() + 10, month, 1);
    let cert = params.self_signed(&key).map_err(failed)?;
    Ok(KeyPairPem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// Checks that a stored pair is usable: PEM key, and for CAs a parseable CA certificate.
/// Keys are not parsed, so pairs written by other tools (RSA, PKCS#1) are accepted.
pub fn validate(purpose: Purpose, pair: &KeyPairPem) -> Result<(), CertError> {
    let pem = |text: &str, what| {
        if text.contains("-----BEGIN ") {
            Ok(())
        } else {
            Err(CertError::MissingPem {
                purpose: purpose.describe(),
                what,
            })
        }
    };
    pem(&pair.key, "key")?;
    if purpose == Purpose::ServiceAccount {
        return pem(&pair.cert, "public key");
    }
    pem(&pair.cert, "certificate")?;
    with_certificate(purpose, &pair.cert, |cert| {
        if cert.is_ca() {
            Ok(())
        } else {
            Err(CertError::NotCa {
                purpose: purpose.describe(),
            })
        }
    })?
}

/// kubeadm's CA pin, `sha256:<hex>` of the CA certificate's DER SubjectPublicKeyInfo: what
/// `kubeadm join --discovery-token-ca-cert-hash` and `discovery.bootstrapToken.caCertHashes`
/// take.
pub fn ca_cert_hash(cert_pem: &str) -> Result<String, CertError> {
    with_certificate(Purpose::ClusterCa, cert_pem, |cert| {
        let digest = Sha256::digest(cert.tbs_certificate.subject_pki.raw);
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        format!("sha256:{hex}")
    })
}

fn with_certificate<T>(
    purpose: Purpose,
    cert_pem: &str,
    f: impl FnOnce(&x509_parser::certificate::X509Certificate<'_>) -> T,
) -> Result<T, CertError> {
    let failed = |message: String| CertError::ParseCertificate {
        purpose: purpose.describe(),
        message,
    };
    let (_, pem) =
        x509_parser::pem::parse_x509_pem(cert_pem.as_bytes()).map_err(|e| failed(e.to_string()))?;
    let cert = pem.parse_x509().map_err(|e| failed(e.to_string()))?;
    Ok(f(&cert))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::PublicKeyData;

    #[test]
    fn generated_pairs_validate_and_land_where_kubeadm_looks() {
        let check = |purpose: Purpose, expect_paths: (&str, &str)| {
            let pair = generate(purpose).unwrap();
            validate(purpose, &pair).unwrap();
            let (cert, key) = purpose.node_paths("/etc/kubernetes/pki/");
            assert_eq!((cert.as_str(), key.as_str()), expect_paths, "{purpose:?}");
        };
        check(
            Purpose::ClusterCa,
            ("/etc/kubernetes/pki/ca.crt", "/etc/kubernetes/pki/ca.key"),
        );
        check(
            Purpose::EtcdCa,
            (
                "/etc/kubernetes/pki/etcd/ca.crt",
                "/etc/kubernetes/pki/etcd/ca.key",
            ),
        );
        check(
            Purpose::FrontProxyCa,
            (
                "/etc/kubernetes/pki/front-proxy-ca.crt",
                "/etc/kubernetes/pki/front-proxy-ca.key",
            ),
        );
        check(
            Purpose::ServiceAccount,
            ("/etc/kubernetes/pki/sa.pub", "/etc/kubernetes/pki/sa.key"),
        );
    }

    #[test]
    fn ca_cert_hash_is_sha256_of_the_public_key_info() {
        let pair = generate(Purpose::ClusterCa).unwrap();
        let key = KeyPair::from_pem(&pair.key).unwrap();
        let digest = Sha256::digest(key.subject_public_key_info());
        let expect: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            ca_cert_hash(&pair.cert).unwrap(),
            format!("sha256:{expect}")
        );
    }

    #[test]
    fn unusable_pairs_are_refused() {
        let ca = generate(Purpose::ClusterCa).unwrap();
        let sa = generate(Purpose::ServiceAccount).unwrap();
        let check = |purpose, pair: KeyPairPem, ok: bool| {
            assert_eq!(validate(purpose, &pair).is_ok(), ok, "{purpose:?} {pair:?}");
        };
        check(Purpose::ClusterCa, ca.clone(), true);
        check(
            Purpose::ClusterCa,
            KeyPairPem {
                cert: "garbage".into(),
                ..ca.clone()
            },
            false,
        );
        check(
            Purpose::ClusterCa,
            KeyPairPem {
                key: String::new(),
                ..ca.clone()
            },
            false,
        );
        // A service-account public key is not a CA certificate.
        check(Purpose::ClusterCa, sa.clone(), false);
        check(Purpose::ServiceAccount, sa, true);
    }
}
