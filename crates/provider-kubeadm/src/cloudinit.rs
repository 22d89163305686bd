//! The `#cloud-config` document a node boots with: the kubeadm configuration and the cluster
//! certificates in `write_files`, the user's files, users, NTP, disks and mounts, and `runcmd`
//! running the user's commands around `kubeadm init` or `kubeadm join`.
//!
//! Rendering is a pure function of the spec (with Secret references already resolved), the
//! Cluster facts, the certificates and the token, so the same inputs give byte-identical data
//! and a reconcile that changes nothing rewrites nothing.

use serde_json::{Map, Value, json};

use crate::certs::{self, ClusterCertificates, Purpose};
use crate::kubeadm::{self, ClusterFacts, KubeadmError, Role};
use crate::token::BootstrapToken;

/// Where the kubeadm configuration is written on the node.
pub const KUBEADM_CONFIG_PATH: &str = "/run/kubeadm/kubeadm.yaml";
/// Written when kubeadm succeeded, as Cluster API's bootstrap success sentinel.
pub const SENTINEL_PATH: &str = "/run/cluster-api/bootstrap-success.complete";

/// Why bootstrap data cannot be rendered; each is for the user to fix in the spec or the
/// cluster's Secrets.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error(transparent)]
    Kubeadm(#[from] KubeadmError),
    #[error("the {0} is missing from the cluster certificates")]
    MissingCertificate(&'static str),
    #[error(transparent)]
    Certificate(#[from] certs::CertError),
    #[error("spec.files[{index}] ({path}) has no content")]
    FileWithoutContent { index: usize, path: String },
    #[error(
        "spec.files[{index}] ({path}) has contentFormat Template, which this provider does not render"
    )]
    TemplateFile { index: usize, path: String },
}

/// Everything a node's bootstrap data is made of.
pub struct RenderInput<'a> {
    pub role: Role,
    /// The KubeadmConfig's `spec`, with `contentFrom` and `passwdFrom` resolved to inline
    /// `content` and `passwd` (see [`crate::reconcile`]).
    pub spec: &'a Value,
    pub facts: &'a ClusterFacts,
    /// The cluster's key pairs; workers need only the cluster CA's certificate (for its hash).
    pub certificates: &'a ClusterCertificates,
    pub token: &'a BootstrapToken,
}

/// Renders the `#cloud-config` document.
pub fn render(input: &RenderInput<'_>) -> Result<String, RenderError> {
    let ca = input
        .certificates
        .get(Purpose::ClusterCa)
        .ok_or(RenderError::MissingCertificate(
            Purpose::ClusterCa.describe(),
        ))?;
    let hash = certs::ca_cert_hash(&ca.cert)?;
    let documents = kubeadm::documents(input.role, input.spec, input.facts, input.token, &hash)?;
    let kubeadm_yaml = kubeadm::to_yaml(&documents);

    let mut files = vec![write_file(KUBEADM_CONFIG_PATH, "0640", &kubeadm_yaml)];
    // Only control-plane nodes get the CAs and their keys: kubeadm signs the node's serving
    // certificates with them. A worker gets none: it trusts the cluster CA through the pinned
    // hash, and kubeadm's join preflight refuses a worker whose ca.crt already exists.
    if input.role.is_control_plane() {
        let dir = kubeadm::certificates_dir(input.spec);
        for purpose in Purpose::ALL {
            let pair = input
                .certificates
                .get(purpose)
                .ok_or(RenderError::MissingCertificate(purpose.describe()))?;
            let (cert_path, key_path) = purpose.node_paths(&dir);
            files.push(write_file(&cert_path, "0644", &pair.cert));
            files.push(write_file(&key_path, "0600", &pair.key));
        }
    }
    files.extend(user_files(input.spec)?);
    // write_files creates parent directories; the sentinel command needs /run/cluster-api.
    files.push(write_file(
        "/run/cluster-api/placeholder",
        "0640",
        "This placeholder file makes cloud-init create /run/cluster-api for the bootstrap success sentinel.",
    ));

    let mut doc = Map::new();
    doc.insert("write_files".into(), json!(files));
    doc.insert("runcmd".into(), json!(commands(input)));
    let boot = strings(&input.spec["bootCommands"]);
    if !boot.is_empty() {
        doc.insert("bootcmd".into(), json!(boot));
    }
    if let Some(users) = users(&input.spec["users"]) {
        doc.insert("users".into(), users);
    }
    if let Some(ntp) = ntp(&input.spec["ntp"]) {
        doc.insert("ntp".into(), ntp);
    }
    if let Some((disks, filesystems)) = disk_setup(&input.spec["diskSetup"]) {
        if !disks.is_empty() {
            doc.insert("disk_setup".into(), Value::Object(disks));
        }
        if !filesystems.is_empty() {
            doc.insert("fs_setup".into(), json!(filesystems));
        }
    }
    if let Some(mounts) = input.spec["mounts"].as_array().filter(|m| !m.is_empty()) {
        doc.insert("mounts".into(), json!(mounts));
    }
    let body = crate::yaml::to_string(&Value::Object(doc));
    Ok(format!("#cloud-config\n{body}"))
}

fn write_file(path: &str, permissions: &str, content: &str) -> Value {
    json!({"path": path, "owner": "root:root", "permissions": permissions, "content": content})
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

/// The user's `spec.files`, in cloud-init's `write_files` shape (cloud-init reads Cluster API's
/// encodings `base64`, `gzip` and `gzip+base64` as they are).
fn user_files(spec: &Value) -> Result<Vec<Value>, RenderError> {
    let mut out = vec![];
    for (index, file) in spec["files"].as_array().into_iter().flatten().enumerate() {
        let path = file["path"].as_str().unwrap_or_default().to_string();
        if file["contentFormat"] == "Template" {
            return Err(RenderError::TemplateFile { index, path });
        }
        let Some(content) = file["content"].as_str() else {
            return Err(RenderError::FileWithoutContent { index, path });
        };
        let mut entry = Map::new();
        entry.insert("path".into(), json!(path));
        for (from, to) in [
            ("owner", "owner"),
            ("permissions", "permissions"),
            ("encoding", "encoding"),
            ("append", "append"),
        ] {
            if !file[from].is_null() {
                entry.insert(to.into(), file[from].clone());
            }
        }
        entry.insert("content".into(), json!(content));
        out.push(Value::Object(entry));
    }
    Ok(out)
}

/// `preKubeadmCommands`, kubeadm (writing the sentinel only when it succeeds), then
/// `postKubeadmCommands`.
fn commands(input: &RenderInput<'_>) -> Vec<String> {
    let verb = match input.role {
        Role::Init => "init",
        Role::JoinControlPlane | Role::JoinWorker => "join",
    };
    let verbosity = input.spec["verbosity"]
        .as_i64()
        .map(|v| format!(" --v={v}"))
        .unwrap_or_default();
    let mut out = strings(&input.spec["preKubeadmCommands"]);
    out.push(format!(
        "kubeadm {verb} --config {KUBEADM_CONFIG_PATH}{verbosity} && echo success > {SENTINEL_PATH}"
    ));
    out.extend(strings(&input.spec["postKubeadmCommands"]));
    out
}

/// `spec.users` in cloud-init's key names.
fn users(value: &Value) -> Option<Value> {
    let users = value.as_array().filter(|u| !u.is_empty())?;
    let renamed = [
        ("name", "name"),
        ("gecos", "gecos"),
        ("groups", "groups"),
        ("homeDir", "homedir"),
        ("inactive", "inactive"),
        ("shell", "shell"),
        ("passwd", "passwd"),
        ("primaryGroup", "primary_group"),
        ("lockPassword", "lock_passwd"),
        ("sudo", "sudo"),
        ("sshAuthorizedKeys", "ssh_authorized_keys"),
    ];
    Some(Value::Array(
        users
            .iter()
            .map(|user| {
                let mut entry = Map::new();
                for (from, to) in renamed {
                    if !user[from].is_null() {
                        entry.insert(to.into(), user[from].clone());
                    }
                }
                Value::Object(entry)
            })
            .collect(),
    ))
}

fn ntp(value: &Value) -> Option<Value> {
    let ntp = value.as_object()?;
    let mut entry = Map::new();
    if let Some(enabled) = ntp.get("enabled").filter(|v| v.is_boolean()) {
        entry.insert("enabled".into(), enabled.clone());
    }
    let servers = strings(&value["servers"]);
    if !servers.is_empty() {
        entry.insert("servers".into(), json!(servers));
    }
    (!entry.is_empty()).then_some(Value::Object(entry))
}

/// cloud-init's MBR partition type codes for Cluster API's partition type names; GPT GUIDs
/// pass through.
fn partition_type(name: &str) -> String {
    match name {
        "Linux" => "83",
        "LinuxSwap" => "82",
        "LinuxRAID" => "fd",
        "LVM" => "8e",
        "Fat32" => "0c",
        "NTFS" => "07",
        "LinuxExtended" => "05",
        other => other,
    }
    .to_string()
}

/// `spec.diskSetup` as cloud-init's `disk_setup` (keyed by device) and `fs_setup`.
fn disk_setup(value: &Value) -> Option<(Map<String, Value>, Vec<Value>)> {
    value.as_object()?;
    let mut disks = Map::new();
    for partition in value["partitions"].as_array().into_iter().flatten() {
        let Some(device) = partition["device"].as_str() else {
            continue;
        };
        let layout = match partition["diskLayout"].as_array() {
            Some(parts) if !parts.is_empty() => Value::Array(
                parts
                    .iter()
                    .map(|p| match p["partitionType"].as_str() {
                        Some(t) => json!([p["percentage"], partition_type(t)]),
                        None => p["percentage"].clone(),
                    })
                    .collect(),
            ),
            _ => json!(partition["layout"].as_bool().unwrap_or(false)),
        };
        let mut entry = Map::new();
        entry.insert(
            "table_type".into(),
            json!(partition["tableType"].as_str().unwrap_or("mbr")),
        );
        entry.insert("layout".into(), layout);
        if let Some(overwrite) = partition["overwrite"].as_bool() {
            entry.insert("overwrite".into(), json!(overwrite));
        }
        disks.insert(device.into(), Value::Object(entry));
    }
    let renamed = [
        ("label", "label"),
        ("filesystem", "filesystem"),
        ("device", "device"),
        ("partition", "partition"),
        ("overwrite", "overwrite"),
        ("replaceFS", "replace_fs"),
        ("extraOpts", "extra_opts"),
    ];
    let filesystems = value["filesystems"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|fs| {
            let mut entry = Map::new();
            for (from, to) in renamed {
                if !fs[from].is_null() {
                    entry.insert(to.into(), fs[from].clone());
                }
            }
            Value::Object(entry)
        })
        .collect();
    Some((disks, filesystems))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs::KeyPairPem;
    use crate::object::at;
    use std::sync::LazyLock;

    /// Generating keys is the slow part; every test shares one set.
    static CERTS: LazyLock<ClusterCertificates> =
        LazyLock::new(|| ClusterCertificates::generate().unwrap());

    fn facts() -> ClusterFacts {
        ClusterFacts::from_cluster(
            "demo",
            &crate::kubeadm::tests::spec_of(
                json!({"spec": {"controlPlaneEndpoint": {"host": "10.0.0.1", "port": 6443}}}),
            ),
            Some("v1.30.2"),
        )
    }

    fn token() -> BootstrapToken {
        BootstrapToken::parse("abcdef.0123456789abcdef").unwrap()
    }

    fn spec() -> Value {
        json!({
            "files": [{"path": "/etc/motd", "owner": "root:root", "permissions": "0644", "content": "hello\n"}],
            "preKubeadmCommands": ["echo pre"],
            "postKubeadmCommands": ["echo post"],
            "users": [{"name": "ops", "sudo": "ALL=(ALL) NOPASSWD:ALL", "sshAuthorizedKeys": ["ssh-ed25519 AAAA"], "lockPassword": true}],
            "ntp": {"enabled": true, "servers": ["time.example"]},
            "mounts": [["/dev/sdb1", "/data"]],
            "verbosity": 5,
        })
    }

    fn render_as(role: Role, spec: &Value) -> (String, Value) {
        let text = render(&RenderInput {
            role,
            spec,
            facts: &facts(),
            certificates: &CERTS,
            token: &token(),
        })
        .unwrap();
        let parsed: Value = serde_yaml_ng::from_str(&text).unwrap();
        (text, parsed)
    }

    fn file<'a>(doc: &'a Value, path: &str) -> Option<&'a Value> {
        doc["write_files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["path"] == path)
    }

    fn kubeadm_docs(doc: &Value) -> Vec<Value> {
        let text = file(doc, KUBEADM_CONFIG_PATH).unwrap()["content"]
            .as_str()
            .unwrap();
        text.split("---\n")
            .filter(|d| !d.is_empty())
            .map(|d| serde_yaml_ng::from_str(d).unwrap())
            .collect()
    }

    /// role -> (kubeadm kinds, kubeadm command, which pki files exist).
    #[test]
    fn each_role_gets_its_kubeadm_command_and_certificates() {
        let ca_key = "/etc/kubernetes/pki/ca.key";
        let ca_crt = "/etc/kubernetes/pki/ca.crt";
        let cases = [
            (
                Role::Init,
                vec!["ClusterConfiguration", "InitConfiguration"],
                "kubeadm init --config /run/kubeadm/kubeadm.yaml --v=5 && echo success > /run/cluster-api/bootstrap-success.complete",
                true,
            ),
            (
                Role::JoinControlPlane,
                vec!["JoinConfiguration"],
                "kubeadm join --config /run/kubeadm/kubeadm.yaml --v=5 && echo success > /run/cluster-api/bootstrap-success.complete",
                true,
            ),
            (
                Role::JoinWorker,
                vec!["JoinConfiguration"],
                "kubeadm join --config /run/kubeadm/kubeadm.yaml --v=5 && echo success > /run/cluster-api/bootstrap-success.complete",
                false,
            ),
        ];
        for (role, kinds, command, control_plane) in cases {
            let (text, doc) = render_as(role, &spec());
            assert!(text.starts_with("#cloud-config\n"), "{role:?}");
            let got: Vec<String> = kubeadm_docs(&doc)
                .iter()
                .map(|d| d["kind"].as_str().unwrap().to_string())
                .collect();
            assert_eq!(got, kinds, "{role:?}");
            assert_eq!(
                doc["runcmd"],
                json!(["echo pre", command, "echo post"]),
                "{role:?}"
            );
            assert_eq!(
                file(&doc, ca_key).is_some(),
                control_plane,
                "{role:?} ca.key"
            );
            assert_eq!(
                file(&doc, ca_crt).is_some(),
                control_plane,
                "{role:?} ca.crt"
            );
            let keys = doc["write_files"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|f| f["content"].as_str().unwrap().contains("PRIVATE KEY"))
                .count();
            assert_eq!(keys, if control_plane { 4 } else { 0 }, "{role:?} keys");
            // The user's parts are there for every role.
            assert_eq!(file(&doc, "/etc/motd").unwrap()["content"], "hello\n");
            assert_eq!(doc["users"][0]["lock_passwd"], true);
            assert_eq!(
                doc["users"][0]["ssh_authorized_keys"][0],
                "ssh-ed25519 AAAA"
            );
            assert_eq!(
                doc["ntp"],
                json!({"enabled": true, "servers": ["time.example"]})
            );
            assert_eq!(doc["mounts"], json!([["/dev/sdb1", "/data"]]));
        }
    }

    #[test]
    fn control_plane_files_carry_the_cluster_pairs() {
        let (_, doc) = render_as(Role::JoinControlPlane, &json!({}));
        for purpose in Purpose::ALL {
            let pair: &KeyPairPem = CERTS.get(purpose).unwrap();
            let (cert, key) = purpose.node_paths("/etc/kubernetes/pki");
            assert_eq!(file(&doc, &cert).unwrap()["content"], pair.cert.as_str());
            assert_eq!(file(&doc, &key).unwrap()["content"], pair.key.as_str());
            assert_eq!(file(&doc, &key).unwrap()["permissions"], "0600");
        }
        let custom = json!({"clusterConfiguration": {"certificatesDir": "/srv/pki"}});
        let (_, doc) = render_as(Role::Init, &custom);
        assert!(file(&doc, "/srv/pki/ca.key").is_some());
        assert!(file(&doc, "/etc/kubernetes/pki/ca.key").is_none());
    }

    #[test]
    fn joins_pin_the_cluster_ca() {
        let hash = certs::ca_cert_hash(&CERTS.get(Purpose::ClusterCa).unwrap().cert).unwrap();
        for role in [Role::JoinWorker, Role::JoinControlPlane] {
            let (_, doc) = render_as(role, &json!({}));
            let join = &kubeadm_docs(&doc)[0];
            let discovery = at(join, &["discovery", "bootstrapToken"]);
            assert_eq!(discovery["caCertHashes"], json!([hash]), "{role:?}");
            assert_eq!(discovery["token"], "abcdef.0123456789abcdef", "{role:?}");
            assert_eq!(discovery["apiServerEndpoint"], "10.0.0.1:6443", "{role:?}");
        }
        let (_, doc) = render_as(Role::Init, &json!({}));
        assert_eq!(
            kubeadm_docs(&doc)[1]["bootstrapTokens"][0]["token"],
            "abcdef.0123456789abcdef"
        );
    }

    #[test]
    fn rendering_is_deterministic() {
        let (first, _) = render_as(Role::Init, &spec());
        let (second, _) = render_as(Role::Init, &spec());
        assert_eq!(first, second);
    }

    #[test]
    fn disks_and_boot_commands_use_cloud_init_names() {
        let spec = json!({
            "bootCommands": ["echo boot"],
            "diskSetup": {
                "partitions": [{"device": "/dev/sdb", "layout": true, "diskLayout": [
                    {"percentage": 70}, {"percentage": 30, "partitionType": "LinuxSwap"},
                ], "overwrite": false}],
                "filesystems": [{"device": "/dev/sdb1", "filesystem": "ext4", "label": "data", "replaceFS": "ntfs", "extraOpts": ["-F"]}],
            },
        });
        let (_, doc) = render_as(Role::JoinWorker, &spec);
        assert_eq!(doc["bootcmd"], json!(["echo boot"]));
        assert_eq!(
            doc["disk_setup"],
            json!({"/dev/sdb": {"table_type": "mbr", "layout": [70, [30, "82"]], "overwrite": false}})
        );
        assert_eq!(
            doc["fs_setup"],
            json!([{"label": "data", "filesystem": "ext4", "device": "/dev/sdb1", "replace_fs": "ntfs", "extra_opts": ["-F"]}])
        );
    }

    #[test]
    fn unrenderable_files_are_the_users_to_fix() {
        let check = |file: Value| {
            let spec = json!({"files": [file]});
            let error = render(&RenderInput {
                role: Role::JoinWorker,
                spec: &spec,
                facts: &facts(),
                certificates: &CERTS,
                token: &token(),
            })
            .unwrap_err();
            assert!(
                matches!(
                    error,
                    RenderError::FileWithoutContent { index: 0, .. }
                        | RenderError::TemplateFile { index: 0, .. }
                ),
                "{error}"
            );
        };
        check(json!({"path": "/a", "contentFrom": {"secret": {"name": "s", "key": "k"}}}));
        check(json!({"path": "/a", "content": "{{ .x }}", "contentFormat": "Template"}));
    }
}
