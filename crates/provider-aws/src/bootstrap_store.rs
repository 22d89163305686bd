//! Where an AWSMachine's bootstrap data waits for its instance, as Cluster API AWS keeps it
//! unless told otherwise (`spec.cloudInit`). The user data, which anyone allowed to describe
//! the instance may read, would show a kubeadm join token, or a control plane's CA keys. So
//! the data is gzipped, split into entries of AWS Secrets Manager (or SecureString
//! parameters of SSM Parameter Store: `secureSecretsBackend: ssm-parameter-store`) tagged as
//! the instance is, and the user data is only lariat's own script (below): it reads the
//! entries with the instance's role, deletes them, and hands the data to cloud-init.
//!
//! The entries are named under Cluster API AWS's prefixes (`aws.cluster.x-k8s.io/`,
//! `/cluster.x-k8s.io/`), so the instance profiles `clusterawsadm bootstrap iam` makes may
//! read and delete them, and the calls lariat makes are those its controller policy allows
//! (create, tag, delete: never a read). A prefix names the AWSMachine's UID, a hash of the
//! data and the count of entries, and lariat touches only entries under a prefix it derives
//! itself: no user can point it at another machine's entries, nor make it call AWS for more
//! entries than it wrote. An entry that exists already holds what lariat would write (an
//! earlier attempt wrote it), and new data gets new names rather than overwriting what an
//! instance may be reading. The prefix and count are recorded in the spec (`secretPrefix`,
//! `secretCount`) before any entry is made, so a crash in between leaks nothing; lariat
//! deletes what the instance left once its Machine has a Node, when the instance is gone, and
//! with the AWSMachine. The record is the only one: a user who edits it away leaves the
//! entries to the instance (which deletes them when it boots) or to AWS's console; they are
//! tagged with the cluster's ownership tag.

use std::collections::BTreeMap;
use std::io::Write;

use aws_sdk_ssm::types::ParameterType;
use aws_smithy_types::Blob;
use base64::Engine;
use flate2::Compression;
use flate2::write::GzEncoder;
use lariat_api::aws::machine::CloudInit;
use sha2::{Digest, Sha256};

use crate::identity::Session;
use crate::sdk::{AwsError, AwsResult};

/// Where the entries are kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    SecretsManager,
    ParameterStore,
}

/// The most entries one machine's data may take: 1 MiB (a Secret's most) of data that does
/// not compress, in parameters.
pub const MAX_ENTRIES: usize = 400;

impl Backend {
    /// The backend `spec.cloudInit` asks for: `None` when the data goes into the user data
    /// as it is (`insecureSkipSecretsManager`, as Cluster API AWS's EKS templates set).
    pub fn of(cloud_init: Option<&CloudInit>) -> Option<Backend> {
        match cloud_init {
            Some(c) if c.insecure_skip_secrets_manager == Some(true) => None,
            Some(c) if c.secure_secrets_backend.as_deref() == Some("ssm-parameter-store") => {
                Some(Backend::ParameterStore)
            }
            _ => Some(Backend::SecretsManager),
        }
    }

    /// The AWS service, as messages name it.
    pub fn service(self) -> &'static str {
        match self {
            Backend::SecretsManager => "AWS Secrets Manager",
            Backend::ParameterStore => "SSM Parameter Store",
        }
    }

    /// Where the `count` entries of the AWSMachine `uid` go, for packed data whose hash is
    /// `hash`. The count is part of the name, so a count edited in the spec is not believed.
    fn prefix(self, uid: &str, hash: &str, count: usize) -> String {
        format!("{}{uid}-{hash}-{count}", self.root())
    }

    /// Cluster API AWS's prefixes (a parameter's name may not begin with "aws" or "ssm").
    fn root(self) -> &'static str {
        match self {
            Backend::SecretsManager => "aws.cluster.x-k8s.io/",
            Backend::ParameterStore => "/cluster.x-k8s.io/",
        }
    }

    /// Between the prefix and an entry's index.
    fn separator(self) -> char {
        match self {
            Backend::SecretsManager => '-',
            Backend::ParameterStore => '/',
        }
    }

    /// Gzipped bytes per entry. A secret holds 64 KiB, counted (Cluster API AWS says) in
    /// base64; a standard parameter 4 KiB of text, which base64 makes of 3 KiB.
    fn chunk_size(self) -> usize {
        match self {
            Backend::SecretsManager => 48 * 1024,
            Backend::ParameterStore => 3000,
        }
    }
}

/// A machine's entries: where, and how many.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entries {
    pub backend: Backend,
    pub prefix: String,
    pub count: usize,
}

impl Entries {
    /// The entries a spec records for the AWSMachine `uid`, if lariat made them: their
    /// prefix is one lariat derives for that UID (which also says which backend holds them,
    /// whatever the spec asks now). Anything else recorded there is nobody's lariat touches.
    pub fn recorded(cloud_init: Option<&CloudInit>, uid: &str) -> Option<Entries> {
        let cloud_init = cloud_init?;
        let prefix = cloud_init.secret_prefix.clone()?;
        let count = usize::try_from(cloud_init.secret_count?)
            .ok()
            .filter(|c| (1..=MAX_ENTRIES).contains(c))?;
        let backend = [Backend::SecretsManager, Backend::ParameterStore]
            .into_iter()
            .find(|b| {
                prefix
                    .strip_prefix(b.root())
                    .and_then(|rest| rest.strip_prefix(uid))
                    .and_then(|rest| rest.strip_prefix('-'))
                    .and_then(|rest| rest.split_once('-'))
                    .is_some_and(|(hash, named)| {
                        hash.len() == 16
                            && hash.bytes().all(|c| c.is_ascii_hexdigit())
                            && named == count.to_string()
                    })
            })?;
        Some(Entries {
            backend,
            prefix,
            count,
        })
    }

    fn names(&self) -> impl Iterator<Item = String> + '_ {
        (0..self.count).map(|i| format!("{}{}{i}", self.prefix, self.backend.separator()))
    }

    /// The user data that fetches the entries: a MIME multipart document for cloud-init with
    /// a boothook that fetches the data into a file, and an include of that file. cloud-init
    /// reads includes before it runs boothooks, so on first boot the include finds nothing;
    /// the boothook then restarts cloud-init, whose second pass includes the data (as Cluster
    /// API AWS's script does). The file is under `/var/lib/cloud/instance/`, this instance's
    /// own: an AMI made from a booted instance does not hand its data to the next.
    pub fn user_data(&self, region: &str) -> String {
        let (read, delete) = match self.backend {
            Backend::SecretsManager => (
                "aws secretsmanager get-secret-value --region \"$region\" --secret-id \"$1\" --query SecretBinary --output text",
                "aws secretsmanager delete-secret --region \"$region\" --secret-id \"$1\" --force-delete-without-recovery",
            ),
            Backend::ParameterStore => (
                "aws ssm get-parameter --region \"$region\" --name \"$1\" --with-decryption --query Parameter.Value --output text",
                "aws ssm delete-parameter --region \"$region\" --name \"$1\"",
            ),
        };
        let script = FETCH_SCRIPT
            .replace("@DATA@", DATA_FILE)
            .replace("@PREFIX@", &shell_quote(&self.prefix))
            .replace("@SEPARATOR@", &self.backend.separator().to_string())
            .replace("@COUNT@", &self.count.to_string())
            .replace("@REGION@", &shell_quote(region))
            .replace("@READ@", read)
            .replace("@DELETE@", delete);
        format!(
            "Content-Type: multipart/mixed; boundary=\"{BOUNDARY}\"\nMIME-Version: 1.0\n\n\
             --{BOUNDARY}\nContent-Type: text/cloud-boothook; charset=\"us-ascii\"\n\n{script}\n\
             --{BOUNDARY}\nContent-Type: text/x-include-url; charset=\"us-ascii\"\n\nfile://{DATA_FILE}\n\
             --{BOUNDARY}--\n"
        )
    }
}

/// `text` as one single-quoted shell word.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// Where the boothook leaves the data for cloud-init (root's only).
pub const DATA_FILE: &str = "/var/lib/cloud/instance/lariat-bootstrap-data";
const BOUNDARY: &str = "==lariat-bootstrap-data==";

/// The boothook. cloud-init runs boothooks at every boot: once the data is there, it is not
/// fetched again (its entries are gone by then). The instance's role may lag its start, so
/// reads are retried for a few minutes.
const FETCH_SCRIPT: &str = r#"#!/bin/bash
# lariat: this instance's bootstrap data is kept out of its user data. Fetch it with the
# instance's role, delete what held it, and have cloud-init read it through the include below.
set -o nounset -o pipefail
umask 077
data=@DATA@
prefix=@PREFIX@
count=@COUNT@
region=@REGION@
[ -s "$data" ] && exit 0
read_entry() { @READ@ | base64 --decode; }
delete_entry() { @DELETE@ >/dev/null; }
fetch() {
  : >"$data.gz"
  for ((i = 0; i < count; i++)); do
    read_entry "$prefix@SEPARATOR@$i" >>"$data.gz" || return 1
  done
  gunzip --stdout "$data.gz" >"$data.new" && mv "$data.new" "$data"
}
for attempt in 1 2 3 4 5 6 7 8 9 10; do
  fetch && break
  echo "lariat: cannot read the bootstrap data yet (attempt $attempt of 10)" >&2
  [ "$attempt" -lt 10 ] && sleep $((attempt * 5))
done
rm -f "$data.gz" "$data.new"
if [ ! -s "$data" ]; then
  echo "lariat: no bootstrap data: this instance will not join its cluster" >&2
  exit 1
fi
for ((i = 0; i < count; i++)); do
  delete_entry "$prefix@SEPARATOR@$i" || echo "lariat: could not delete $prefix@SEPARATOR@$i (lariat will)" >&2
done
# cloud-init looked for the data before this ran: once more, with the data there.
if [ -d /run/systemd/system ]; then
  systemctl restart cloud-init
fi
"#;

/// The data as the entries hold it (gzipped, then split), and the entries' hash.
pub struct Packed {
    pub chunks: Vec<Vec<u8>>,
    hash: String,
}

impl Packed {
    pub fn new(backend: Backend, data: &[u8]) -> Packed {
        let mut zipped = GzEncoder::new(Vec::new(), Compression::best());
        zipped.write_all(data).expect("writing to memory");
        let zipped = zipped.finish().expect("writing to memory");
        let digest = Sha256::digest(&zipped);
        Packed {
            chunks: zipped
                .chunks(backend.chunk_size())
                .map(<[u8]>::to_vec)
                .collect(),
            hash: digest[..8].iter().map(|b| format!("{b:02x}")).collect(),
        }
    }

    /// The entries this data goes into, for the AWSMachine `uid`.
    pub fn entries(&self, backend: Backend, uid: &str) -> Entries {
        Entries {
            backend,
            prefix: backend.prefix(uid, &self.hash, self.chunks.len()),
            count: self.chunks.len(),
        }
    }
}

/// Writes the entries, each made with `tags`. One that exists already was written by an
/// earlier attempt with the same bytes (its name says so), and is left as it is.
pub async fn store(
    session: &Session,
    entries: &Entries,
    packed: &Packed,
    tags: &BTreeMap<String, String>,
) -> Result<(), AwsError> {
    for (name, chunk) in entries.names().zip(&packed.chunks) {
        let created = match entries.backend {
            Backend::SecretsManager => session
                .aws()
                .secrets_manager(&session.config)
                .create_secret()
                .name(&name)
                .secret_binary(Blob::new(chunk.clone()))
                .set_tags(Some(
                    tags.iter()
                        .map(|(k, v)| {
                            aws_sdk_secretsmanager::types::Tag::builder()
                                .key(k)
                                .value(v)
                                .build()
                        })
                        .collect(),
                ))
                .send()
                .await
                .aws()
                .map(drop),
            Backend::ParameterStore => session
                .aws()
                .ssm(&session.config)
                .put_parameter()
                .name(&name)
                .r#type(ParameterType::SecureString)
                .value(base64::engine::general_purpose::STANDARD.encode(chunk))
                .set_tags(Some(
                    tags.iter()
                        .map(|(k, v)| {
                            aws_sdk_ssm::types::Tag::builder()
                                .key(k)
                                .value(v)
                                .build()
                                .expect("key and value are set")
                        })
                        .collect(),
                ))
                .send()
                .await
                .aws()
                .map(drop),
        };
        match created {
            Err(error)
                if error.code == "ResourceExistsException"
                    || error.code == "ParameterAlreadyExists" => {}
            other => other?,
        }
    }
    Ok(())
}

/// Deletes the entries the instance left.
pub async fn delete(session: &Session, entries: &Entries) -> Result<(), AwsError> {
    for name in entries.names() {
        let deleted = match entries.backend {
            Backend::SecretsManager => session
                .aws()
                .secrets_manager(&session.config)
                .delete_secret()
                .secret_id(&name)
                .force_delete_without_recovery(true)
                .send()
                .await
                .aws()
                .map(drop),
            Backend::ParameterStore => session
                .aws()
                .ssm(&session.config)
                .delete_parameter()
                .name(&name)
                .send()
                .await
                .aws()
                .map(drop),
        };
        match deleted {
            // Gone, or going (Secrets Manager deletes in the background).
            Err(error) if error.is_not_found() || error.code == "InvalidRequestException" => {}
            other => other?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    const UID: &str = "3f0c2d1e-6b7a-4c58-9d0e-1a2b3c4d5e6f";

    #[test]
    fn data_is_gzipped_and_split_by_what_each_backend_holds() {
        // Incompressible enough to need several parameters.
        let mut state = 7u64;
        let data: Vec<u8> = (0..20_000)
            .map(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
                (state >> 33) as u8
            })
            .collect();
        let packed = Packed::new(Backend::ParameterStore, &data);
        assert!(packed.chunks.len() >= 6, "{}", packed.chunks.len());
        assert!(packed.chunks.iter().all(|c| c.len() <= 3000));
        let mut unzipped = Vec::new();
        flate2::read::GzDecoder::new(&packed.chunks.concat()[..])
            .read_to_end(&mut unzipped)
            .unwrap();
        assert_eq!(unzipped, data);
        assert_eq!(Packed::new(Backend::SecretsManager, &data).chunks.len(), 1);
        // The same data packs the same, under the same names; other data under others.
        let entries = packed.entries(Backend::ParameterStore, UID);
        let again = Packed::new(Backend::ParameterStore, &data);
        assert_eq!(again.chunks, packed.chunks);
        assert_eq!(again.entries(Backend::ParameterStore, UID), entries);
        let other = Packed::new(Backend::ParameterStore, b"#cloud-config\n");
        assert_ne!(
            other.entries(Backend::ParameterStore, UID).prefix,
            entries.prefix
        );
    }

    #[test]
    fn only_entries_lariat_derives_for_the_machine_are_its() {
        let packed = Packed::new(Backend::SecretsManager, b"#cloud-config\n");
        let entries = packed.entries(Backend::SecretsManager, UID);
        assert!(
            entries
                .prefix
                .starts_with(&format!("aws.cluster.x-k8s.io/{UID}-"))
        );
        let record = |prefix: &str, count: i32, backend: Option<&str>| CloudInit {
            secret_prefix: Some(prefix.into()),
            secret_count: Some(count),
            secure_secrets_backend: backend.map(str::to_owned),
            ..Default::default()
        };
        assert_eq!(
            Entries::recorded(Some(&record(&entries.prefix, 1, None)), UID),
            Some(entries.clone())
        );
        // The prefix says which backend holds them, whatever the spec asks now.
        assert_eq!(
            Entries::recorded(
                Some(&record(&entries.prefix, 1, Some("ssm-parameter-store"))),
                UID
            )
            .map(|e| e.backend),
            Some(Backend::SecretsManager)
        );
        // Another machine's, a name set by hand, or a count out of bounds: not lariat's.
        let other_uid = "0a0b0c0d-0000-4000-8000-000000000000";
        for (prefix, count) in [
            (entries.prefix.replace(UID, other_uid), 1),
            ("prod/db-password".to_owned(), 1),
            (format!("aws.cluster.x-k8s.io/{UID}"), 1),
            (entries.prefix.clone(), 0),
            (entries.prefix.clone(), 2),
            (entries.prefix.clone(), i32::MAX),
        ] {
            assert_eq!(
                Entries::recorded(Some(&record(&prefix, count, None)), UID),
                None,
                "{prefix} {count}"
            );
        }
    }

    #[test]
    fn the_user_data_names_the_entries_and_holds_no_data() {
        let data = b"#cloud-config\nruncmd: [kubeadm join]\n";
        let packed = Packed::new(Backend::SecretsManager, data);
        let entries = packed.entries(Backend::SecretsManager, UID);
        let user_data = entries.user_data("eu-west-1");
        assert!(user_data.starts_with("Content-Type: multipart/mixed"));
        assert!(user_data.contains(&format!("prefix='{}'\ncount=1\n", entries.prefix)));
        assert!(user_data.contains("region='eu-west-1'"));
        assert!(user_data.contains("\"$prefix-$i\""));
        assert!(user_data.contains("text/cloud-boothook"));
        assert!(user_data.contains(&format!("file://{DATA_FILE}")));
        assert!(user_data.contains(&format!("data={DATA_FILE}")));
        assert!(!user_data.contains("kubeadm"));
        let parameters =
            Packed::new(Backend::ParameterStore, data).entries(Backend::ParameterStore, UID);
        let user_data = parameters.user_data("eu-west-1");
        assert!(user_data.contains("\"$prefix/$i\""), "{user_data}");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn the_backend_is_the_spec_s() {
        let skip = CloudInit {
            insecure_skip_secrets_manager: Some(true),
            ..Default::default()
        };
        assert_eq!(Backend::of(Some(&skip)), None);
        assert_eq!(Backend::of(None), Some(Backend::SecretsManager));
        let ssm = CloudInit {
            secure_secrets_backend: Some("ssm-parameter-store".into()),
            ..Default::default()
        };
        assert_eq!(Backend::of(Some(&ssm)), Some(Backend::ParameterStore));
    }
}
