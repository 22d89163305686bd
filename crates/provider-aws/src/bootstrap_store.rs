//! Where an AWSMachine's bootstrap data waits for its instance, as Cluster API AWS keeps it
//! unless told otherwise (`spec.cloudInit`). The user data, which anyone allowed to describe
//! the instance may read, would show a kubeadm join token, or a control plane's CA keys. So
//! the data is gzipped, split into entries of AWS Secrets Manager (or SecureString
//! parameters of SSM Parameter Store: `secureSecretsBackend: ssm-parameter-store`) tagged as
//! the instance is, and the user data is only lariat's own script (below): it reads the
//! entries with the instance's role, deletes them, and hands the data to cloud-init.
//!
//! The entries are named as Cluster API AWS names them (`aws.cluster.x-k8s.io/<id>-<n>`,
//! `/cluster.x-k8s.io/<id>/<n>`), so the instance profiles `clusterawsadm bootstrap iam`
//! makes may read and delete them; `<id>` is the AWSMachine's UID. The prefix and count are
//! recorded in the spec (`secretPrefix`, `secretCount`) before any entry is made, so a crash
//! in between leaks nothing. lariat deletes what the instance left once its Machine has a
//! Node, when the instance is gone, and with the AWSMachine; it touches only entries tagged
//! as its cluster's.

use std::collections::BTreeMap;
use std::io::Write;

use aws_sdk_ssm::types::{ParameterType, ResourceTypeForTagging};
use aws_smithy_types::Blob;
use base64::Engine;
use flate2::Compression;
use flate2::write::GzEncoder;
use lariat_api::aws::machine::CloudInit;

use crate::identity::Session;
use crate::sdk::{AwsError, AwsResult};
use crate::tags::Owner;

/// Where the entries are kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    SecretsManager,
    ParameterStore,
}

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

    /// The prefix of a machine's entries, `uid` being its AWSMachine's.
    pub fn prefix(self, uid: &str) -> String {
        match self {
            Backend::SecretsManager => format!("aws.cluster.x-k8s.io/{uid}"),
            // A parameter's name may not begin with "aws" or "ssm".
            Backend::ParameterStore => format!("/cluster.x-k8s.io/{uid}"),
        }
    }

    fn entry(self, prefix: &str, index: usize) -> String {
        match self {
            Backend::SecretsManager => format!("{prefix}-{index}"),
            Backend::ParameterStore => format!("{prefix}/{index}"),
        }
    }

    /// Gzipped bytes per entry: a secret holds 64 KiB of binary; a standard parameter 4 KiB
    /// of text, which base64 makes of 3 KiB.
    fn chunk_size(self) -> usize {
        match self {
            Backend::SecretsManager => 60 * 1024,
            Backend::ParameterStore => 3 * 1024,
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
    fn names(&self) -> impl Iterator<Item = String> + '_ {
        (0..self.count).map(|i| self.backend.entry(&self.prefix, i))
    }

    /// The user data that fetches the entries: a MIME multipart document for cloud-init with
    /// a boothook (run before anything else cloud-init does) that writes the data to a file,
    /// and an include of that file.
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
        let names: Vec<String> = self.names().map(|n| format!("'{n}'")).collect();
        let script = FETCH_SCRIPT
            .replace("@ENTRIES@", &names.join(" "))
            .replace("@REGION@", region)
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

/// Where the boothook leaves the data for cloud-init (root's only).
pub const DATA_FILE: &str = "/etc/lariat/bootstrap-data";
const BOUNDARY: &str = "==lariat-bootstrap-data==";

/// The boothook. cloud-init runs boothooks at every boot: once the data is there, it is not
/// fetched again (its entries are gone by then). The instance's role may lag its start, so
/// reads are retried for a few minutes.
const FETCH_SCRIPT: &str = r#"#!/bin/bash
# lariat: this instance's bootstrap data is kept out of its user data. Fetch it with the
# instance's role, delete what held it, and leave it for cloud-init's include below.
set -o nounset -o pipefail
umask 077
data=/etc/lariat/bootstrap-data
region='@REGION@'
entries=(@ENTRIES@)
[ -s "$data" ] && exit 0
mkdir -p "$(dirname "$data")"
read_entry() { @READ@ | base64 --decode; }
delete_entry() { @DELETE@ >/dev/null; }
fetch() {
  : >"$data.gz"
  for entry in "${entries[@]}"; do
    read_entry "$entry" >>"$data.gz" || return 1
  done
  gunzip --stdout "$data.gz" >"$data.new" && mv "$data.new" "$data"
}
for attempt in 1 2 3 4 5 6 7 8 9 10; do
  fetch && break
  echo "lariat: cannot read the bootstrap data yet (attempt $attempt of 10)" >&2
  sleep $((attempt * 5))
done
rm -f "$data.gz" "$data.new"
if [ ! -s "$data" ]; then
  echo "lariat: no bootstrap data: this instance will not join its cluster" >&2
  exit 1
fi
for entry in "${entries[@]}"; do
  delete_entry "$entry" || echo "lariat: could not delete $entry (lariat will)" >&2
done
"#;

/// The data as the entries hold it: gzipped, then split.
pub fn pack(backend: Backend, data: &[u8]) -> Vec<Vec<u8>> {
    let mut zipped = GzEncoder::new(Vec::new(), Compression::best());
    zipped.write_all(data).expect("writing to memory");
    let zipped = zipped.finish().expect("writing to memory");
    zipped
        .chunks(backend.chunk_size())
        .map(<[u8]>::to_vec)
        .collect()
}

/// Writes the entries: each made with `tags`, or overwritten when an earlier attempt made it.
/// An entry of the same name that is not this cluster's is an error, and left alone.
pub async fn store(
    session: &Session,
    owner: &Owner,
    entries: &Entries,
    chunks: &[Vec<u8>],
    tags: &BTreeMap<String, String>,
) -> Result<(), AwsError> {
    for (name, chunk) in entries.names().zip(chunks) {
        match entries.backend {
            Backend::SecretsManager => {
                let client = session.aws().secrets_manager(&session.config);
                let created = client
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
                    .aws();
                match created {
                    Err(error) if error.code == "ResourceExistsException" => {
                        ensure_owned(session, owner, entries.backend, &name).await?;
                        client
                            .put_secret_value()
                            .secret_id(&name)
                            .secret_binary(Blob::new(chunk.clone()))
                            .send()
                            .await
                            .aws()?;
                    }
                    other => {
                        other?;
                    }
                }
            }
            Backend::ParameterStore => {
                let client = session.aws().ssm(&session.config);
                let value = base64::engine::general_purpose::STANDARD.encode(chunk);
                // SSM takes tags only when it makes a parameter, and overwrites only without.
                let created = client
                    .put_parameter()
                    .name(&name)
                    .r#type(ParameterType::SecureString)
                    .value(&value)
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
                    .aws();
                match created {
                    Err(error) if error.code == "ParameterAlreadyExists" => {
                        ensure_owned(session, owner, entries.backend, &name).await?;
                        client
                            .put_parameter()
                            .name(&name)
                            .r#type(ParameterType::SecureString)
                            .value(&value)
                            .overwrite(true)
                            .send()
                            .await
                            .aws()?;
                    }
                    other => {
                        other?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// Deletes the entries the instance left (those of them that are this cluster's).
pub async fn delete(session: &Session, owner: &Owner, entries: &Entries) -> Result<(), AwsError> {
    for name in entries.names() {
        match owned(session, owner, entries.backend, &name).await? {
            Some(true) => {}
            Some(false) | None => continue,
        }
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
            Err(error) if !error.is_not_found() => return Err(error),
            _ => {}
        }
    }
    Ok(())
}

/// Whether the entry is this cluster's by its tags; `None` when it does not exist.
async fn owned(
    session: &Session,
    owner: &Owner,
    backend: Backend,
    name: &str,
) -> Result<Option<bool>, AwsError> {
    let tags: Vec<(String, String)> = match backend {
        Backend::SecretsManager => {
            let described = session
                .aws()
                .secrets_manager(&session.config)
                .describe_secret()
                .secret_id(name)
                .send()
                .await
                .aws();
            match described {
                Ok(secret) => secret
                    .tags()
                    .iter()
                    .map(|t| {
                        (
                            t.key().unwrap_or_default().to_owned(),
                            t.value().unwrap_or_default().to_owned(),
                        )
                    })
                    .collect(),
                Err(error) if error.is_not_found() => return Ok(None),
                Err(error) => return Err(error),
            }
        }
        Backend::ParameterStore => {
            let listed = session
                .aws()
                .ssm(&session.config)
                .list_tags_for_resource()
                .resource_type(ResourceTypeForTagging::Parameter)
                .resource_id(name)
                .send()
                .await
                .aws();
            match listed {
                Ok(listed) => listed
                    .tag_list()
                    .iter()
                    .map(|t| (t.key().to_owned(), t.value().to_owned()))
                    .collect(),
                Err(error) if error.is_not_found() || error.code == "InvalidResourceId" => {
                    return Ok(None);
                }
                Err(error) => return Err(error),
            }
        }
    };
    Ok(Some(
        owner.owns(tags.iter().map(|(k, v)| (k.as_str(), v.as_str()))),
    ))
}

async fn ensure_owned(
    session: &Session,
    owner: &Owner,
    backend: Backend,
    name: &str,
) -> Result<(), AwsError> {
    match owned(session, owner, backend, name).await? {
        Some(false) => Err(AwsError {
            code: "BootstrapDataEntryNotOwned".into(),
            message: format!(
                "{name} exists and is not cluster {}/{}'s: lariat does not overwrite it",
                owner.namespace, owner.cluster
            ),
        }),
        // Gone since (deleted by hand): the next attempt makes it.
        None => Err(AwsError {
            code: "BootstrapDataEntryGone".into(),
            message: format!("{name} was deleted while lariat wrote it"),
        }),
        Some(true) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

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
        let chunks = pack(Backend::ParameterStore, &data);
        assert!(chunks.len() >= 6, "{}", chunks.len());
        assert!(chunks.iter().all(|c| c.len() <= 3 * 1024));
        let joined: Vec<u8> = chunks.concat();
        let mut unzipped = Vec::new();
        flate2::read::GzDecoder::new(&joined[..])
            .read_to_end(&mut unzipped)
            .unwrap();
        assert_eq!(unzipped, data);
        assert_eq!(pack(Backend::SecretsManager, &data).len(), 1);
        // The same data packs the same (the count recorded before writing stays right).
        assert_eq!(pack(Backend::ParameterStore, &data), chunks);
    }

    #[test]
    fn the_user_data_names_every_entry_and_no_data() {
        let entries = Entries {
            backend: Backend::SecretsManager,
            prefix: Backend::SecretsManager.prefix("3f0c"),
            count: 2,
        };
        let user_data = entries.user_data("eu-west-1");
        assert!(user_data.starts_with("Content-Type: multipart/mixed"));
        assert!(
            user_data
                .contains("entries=('aws.cluster.x-k8s.io/3f0c-0' 'aws.cluster.x-k8s.io/3f0c-1')")
        );
        assert!(user_data.contains("region='eu-west-1'"));
        assert!(user_data.contains("text/cloud-boothook"));
        assert!(user_data.contains(&format!("file://{DATA_FILE}")));
        assert!(user_data.contains(&format!("data={DATA_FILE}")));
        let parameters = Entries {
            backend: Backend::ParameterStore,
            prefix: Backend::ParameterStore.prefix("3f0c"),
            count: 1,
        };
        assert!(
            parameters
                .user_data("eu-west-1")
                .contains("entries=('/cluster.x-k8s.io/3f0c/0')")
        );
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
