//! kubeadm's configuration files (`ClusterConfiguration` + `InitConfiguration` for init,
//! `JoinConfiguration` for joins), built from a KubeadmConfig's spec and completed from its
//! Cluster and Machine, in the kubeadm API version the Machine's Kubernetes version reads.
//!
//! The spec's kubeadm types have Cluster API `v1beta1`'s shape, which is kubeadm `v1beta3`'s
//! with a few additions; for `v1beta4` the fields kubeadm moved or reshaped are converted here
//! (`extraArgs` maps become name/value lists, timeouts move under `timeouts`). Values the user
//! set always win over the defaults taken from the Cluster.

use serde_json::{Map, Value, json};

use lariat_api::capi::ClusterSpec;
use lariat_api::capi::cluster::NetworkRanges;

use crate::object::at;
use crate::token::{BootstrapToken, NODE_BOOTSTRAP_GROUP};

/// Where kubeadm keeps certificates unless `clusterConfiguration.certificatesDir` says otherwise.
pub const DEFAULT_CERTIFICATES_DIR: &str = "/etc/kubernetes/pki";

/// What cannot be rendered from the spec as it is.
#[derive(Debug, thiserror::Error)]
pub enum KubeadmError {
    #[error(
        "joinConfiguration.controlPlane is set, but Machine is not a control-plane Machine (label {label} missing)"
    )]
    WorkerWithControlPlane { label: &'static str },
    #[error("the join needs an API server endpoint: the Cluster has no spec.controlPlaneEndpoint")]
    NoEndpoint,
}

/// What kubeadm does on the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// `kubeadm init`: the first control-plane node, which creates the cluster.
    Init,
    /// `kubeadm join` with `controlPlane` set: another control-plane node.
    JoinControlPlane,
    /// `kubeadm join`: a worker.
    JoinWorker,
}

impl Role {
    /// The label value recorded on the data Secret (see [`crate::reconcile::ROLE_LABEL`]).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Init => "init",
            Role::JoinControlPlane => "join-control-plane",
            Role::JoinWorker => "join",
        }
    }

    /// Control-plane nodes get the cluster CAs' keys; workers never do.
    pub fn is_control_plane(self) -> bool {
        matches!(self, Role::Init | Role::JoinControlPlane)
    }
}

/// The kubeadm configuration API a node's kubeadm reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KubeadmApi {
    V1Beta3,
    V1Beta4,
}

impl KubeadmApi {
    /// `v1beta4` from Kubernetes v1.31 (where kubeadm introduced it), `v1beta3` before, and
    /// `v1beta3` when the version is unknown, since every kubeadm from v1.22 on reads it.
    pub fn for_kubernetes_version(version: Option<&str>) -> KubeadmApi {
        // Only major and minor decide, so a version kubeadm's own configs write loosely
        // (`1.31`, no `v`, no patch) decides as well as a Cluster API one: not the strict
        // `lariat_api::KubernetesVersion`.
        let minor = version.and_then(|v| {
            let mut parts = v.trim_start_matches('v').split('.');
            let major: u32 = parts.next()?.parse().ok()?;
            let minor: u32 = parts.next()?.parse().ok()?;
            Some((major, minor))
        });
        match minor {
            Some((major, minor)) if major > 1 || minor >= 31 => KubeadmApi::V1Beta4,
            _ => KubeadmApi::V1Beta3,
        }
    }

    pub fn api_version(self) -> &'static str {
        match self {
            KubeadmApi::V1Beta3 => "kubeadm.k8s.io/v1beta3",
            KubeadmApi::V1Beta4 => "kubeadm.k8s.io/v1beta4",
        }
    }
}

/// What the Cluster and the Machine contribute to kubeadm's configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterFacts {
    pub cluster_name: String,
    /// `host:port` of Cluster `spec.controlPlaneEndpoint`, when it has one.
    pub control_plane_endpoint: Option<String>,
    /// Machine `spec.version`.
    pub kubernetes_version: Option<String>,
    /// Cluster `spec.clusterNetwork.pods.cidrBlocks`, comma-separated.
    pub pod_subnet: Option<String>,
    /// Cluster `spec.clusterNetwork.services.cidrBlocks`, comma-separated.
    pub service_subnet: Option<String>,
    /// Cluster `spec.clusterNetwork.serviceDomain`.
    pub dns_domain: Option<String>,
}

impl ClusterFacts {
    /// Reads the facts from a Cluster's JSON and its Machine's Kubernetes version.
    pub fn from_cluster(cluster_name: &str, cluster: &ClusterSpec, version: Option<&str>) -> Self {
        let endpoint = cluster.control_plane_endpoint.as_ref();
        let host = endpoint
            .and_then(|e| e.host.as_deref())
            .filter(|h| !h.is_empty());
        let control_plane_endpoint = host.map(|host| {
            let port = endpoint
                .and_then(|e| e.port)
                .filter(|p| *p > 0)
                .unwrap_or(6443);
            if host.contains(':') && !host.starts_with('[') {
                format!("[{host}]:{port}")
            } else {
                format!("{host}:{port}")
            }
        });
        let network = cluster.cluster_network.as_ref();
        let blocks = |ranges: Option<&NetworkRanges>| {
            let list = ranges.map(|r| r.cidr_blocks.as_slice()).unwrap_or_default();
            (!list.is_empty()).then(|| list.join(","))
        };
        ClusterFacts {
            cluster_name: cluster_name.into(),
            control_plane_endpoint,
            kubernetes_version: version.map(String::from),
            pod_subnet: blocks(network.and_then(|n| n.pods.as_ref())),
            service_subnet: blocks(network.and_then(|n| n.services.as_ref())),
            dns_domain: network.and_then(|n| n.service_domain.clone()),
        }
    }
}

/// The certificates directory the spec asks for.
pub fn certificates_dir(spec: &Value) -> String {
    at(spec, &["clusterConfiguration", "certificatesDir"])
        .as_str()
        .filter(|dir| !dir.is_empty())
        .unwrap_or(DEFAULT_CERTIFICATES_DIR)
        .to_string()
}

/// The kubeadm documents for `role`: ClusterConfiguration then InitConfiguration for init,
/// JoinConfiguration for joins.
pub fn documents(
    role: Role,
    spec: &Value,
    facts: &ClusterFacts,
    token: &BootstrapToken,
    ca_cert_hash: &str,
) -> Result<Vec<Value>, KubeadmError> {
    let api = KubeadmApi::for_kubernetes_version(facts.kubernetes_version.as_deref());
    let mut cluster = section(spec, "clusterConfiguration");
    // Moves to Init/JoinConfiguration `timeouts` in v1beta4.
    let control_plane_timeout = match api {
        KubeadmApi::V1Beta3 => None,
        KubeadmApi::V1Beta4 => cluster
            .get_mut("apiServer")
            .and_then(Value::as_object_mut)
            .and_then(|a| a.remove("timeoutForControlPlane")),
    };
    match role {
        Role::Init => {
            default_cluster_configuration(&mut cluster, facts);
            convert_cluster_configuration(&mut cluster, api);
            let mut init = section(spec, "initConfiguration");
            add_bootstrap_token(&mut init, token, &facts.cluster_name);
            convert_node_registration(&mut init, api);
            if let Some(timeout) = control_plane_timeout {
                timeouts(&mut init).insert("controlPlaneComponentHealthCheck".into(), timeout);
            }
            Ok(vec![
                document(api, "ClusterConfiguration", cluster),
                document(api, "InitConfiguration", init),
            ])
        }
        Role::JoinControlPlane | Role::JoinWorker => {
            let mut join = section(spec, "joinConfiguration");
            let has_control_plane = join.get("controlPlane").is_some_and(|v| !v.is_null());
            if role == Role::JoinControlPlane && !has_control_plane {
                join.insert("controlPlane".into(), json!({}));
            }
            if role == Role::JoinWorker && has_control_plane {
                return Err(KubeadmError::WorkerWithControlPlane {
                    label: lariat_api::capi::labels::MACHINE_CONTROL_PLANE,
                });
            }
            default_discovery(&mut join, facts, token, ca_cert_hash)?;
            convert_node_registration(&mut join, api);
            if api == KubeadmApi::V1Beta4 {
                let discovery_timeout = join
                    .get_mut("discovery")
                    .and_then(Value::as_object_mut)
                    .and_then(|d| d.remove("timeout"));
                if let Some(timeout) = discovery_timeout {
                    timeouts(&mut join).insert("discovery".into(), timeout);
                }
                if let Some(timeout) = control_plane_timeout.filter(|_| has_control_plane) {
                    timeouts(&mut join).insert("controlPlaneComponentHealthCheck".into(), timeout);
                }
            }
            Ok(vec![document(api, "JoinConfiguration", join)])
        }
    }
}

/// The documents as one multi-document YAML file, each opened with `---`.
pub fn to_yaml(documents: &[Value]) -> String {
    let mut out = String::new();
    for doc in documents {
        out.push_str("---\n");
        out.push_str(&crate::yaml::to_string(doc));
    }
    out
}

/// A copy of one of the spec's kubeadm sections, without the `apiVersion`/`kind` a user may
/// have copied in from a kubeadm file (the version is chosen here).
fn section(spec: &Value, name: &str) -> Map<String, Value> {
    let mut map = spec[name].as_object().cloned().unwrap_or_default();
    map.remove("apiVersion");
    map.remove("kind");
    map
}

fn document(api: KubeadmApi, kind: &str, body: Map<String, Value>) -> Value {
    let mut doc = Map::new();
    doc.insert("apiVersion".into(), json!(api.api_version()));
    doc.insert("kind".into(), json!(kind));
    doc.extend(body);
    Value::Object(doc)
}

/// Sets `key` to `value` unless the user set a non-empty value.
fn default_str(map: &mut Map<String, Value>, key: &str, value: Option<&str>) {
    let unset = match map.get(key) {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty(),
        Some(_) => false,
    };
    if let (true, Some(value)) = (unset, value) {
        map.insert(key.into(), json!(value));
    }
}

fn object_entry<'a>(map: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let entry = map.entry(key).or_insert_with(|| json!({}));
    if !entry.is_object() {
        *entry = json!({});
    }
    entry.as_object_mut().expect("just made an object")
}

fn timeouts(map: &mut Map<String, Value>) -> &mut Map<String, Value> {
    object_entry(map, "timeouts")
}

/// Cluster API's defaults: the Cluster's name, endpoint and networks, the Machine's version.
fn default_cluster_configuration(cluster: &mut Map<String, Value>, facts: &ClusterFacts) {
    default_str(cluster, "clusterName", Some(&facts.cluster_name));
    default_str(
        cluster,
        "controlPlaneEndpoint",
        facts.control_plane_endpoint.as_deref(),
    );
    default_str(
        cluster,
        "kubernetesVersion",
        facts.kubernetes_version.as_deref(),
    );
    let networking = object_entry(cluster, "networking");
    default_str(networking, "podSubnet", facts.pod_subnet.as_deref());
    default_str(networking, "serviceSubnet", facts.service_subnet.as_deref());
    default_str(networking, "dnsDomain", facts.dns_domain.as_deref());
    if networking.is_empty() {
        cluster.remove("networking");
    }
}

/// Registers the cluster's join token at init, so nodes can join with it later. It does not
/// expire (`ttl: 0s`): this provider cannot reach the workload cluster to renew it.
fn add_bootstrap_token(init: &mut Map<String, Value>, token: &BootstrapToken, cluster: &str) {
    let tokens = init.entry("bootstrapTokens").or_insert_with(|| json!([]));
    if !tokens.is_array() {
        *tokens = json!([]);
    }
    let list = tokens.as_array_mut().expect("just made a list");
    let text = token.to_string();
    if list.iter().any(|t| t["token"] == text) {
        return;
    }
    list.push(json!({
        "token": text,
        "description": format!("lariat: joins nodes to cluster {cluster}"),
        "ttl": "0s",
        "usages": ["signing", "authentication"],
        "groups": [NODE_BOOTSTRAP_GROUP],
    }));
}

/// Token discovery against the Cluster's endpoint, pinned to the cluster CA, unless the user
/// chose file discovery or filled the fields themselves.
fn default_discovery(
    join: &mut Map<String, Value>,
    facts: &ClusterFacts,
    token: &BootstrapToken,
    ca_cert_hash: &str,
) -> Result<(), KubeadmError> {
    let discovery = object_entry(join, "discovery");
    let has = |key: &str| discovery.get(key).is_some_and(|v| !v.is_null());
    if has("file") && !has("bootstrapToken") {
        return Ok(());
    }
    let bootstrap = object_entry(discovery, "bootstrapToken");
    default_str(bootstrap, "token", Some(&token.to_string()));
    default_str(
        bootstrap,
        "apiServerEndpoint",
        facts.control_plane_endpoint.as_deref(),
    );
    if bootstrap
        .get("apiServerEndpoint")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return Err(KubeadmError::NoEndpoint);
    }
    let hashes = bootstrap.get("caCertHashes").and_then(Value::as_array);
    if hashes.is_none_or(Vec::is_empty) {
        bootstrap.insert("caCertHashes".into(), json!([ca_cert_hash]));
    }
    Ok(())
}

/// The components whose `extraArgs`/`extraEnvs` kubeadm versions shape differently.
const COMPONENTS: [&[&str]; 4] = [
    &["apiServer"],
    &["controllerManager"],
    &["scheduler"],
    &["etcd", "local"],
];

fn convert_cluster_configuration(cluster: &mut Map<String, Value>, api: KubeadmApi) {
    for path in COMPONENTS {
        let Some(component) = object_at_mut(cluster, path) else {
            continue;
        };
        match api {
            KubeadmApi::V1Beta3 => {
                component.remove("extraEnvs");
            }
            KubeadmApi::V1Beta4 => args_to_list(component, "extraArgs"),
        }
    }
    let days = [
        "caCertificateValidityPeriodDays",
        "certificateValidityPeriodDays",
    ];
    match api {
        KubeadmApi::V1Beta3 => {
            cluster.remove("encryptionAlgorithm");
            for key in days {
                cluster.remove(key);
            }
        }
        KubeadmApi::V1Beta4 => {
            for key in days {
                if let Some(n) = cluster.remove(key).and_then(|v| v.as_i64()) {
                    let renamed = key.trim_end_matches("Days");
                    cluster.insert(renamed.into(), json!(format!("{}h0m0s", n * 24)));
                }
            }
        }
    }
}

fn convert_node_registration(config: &mut Map<String, Value>, api: KubeadmApi) {
    let Some(registration) = object_at_mut(config, &["nodeRegistration"]) else {
        return;
    };
    match api {
        KubeadmApi::V1Beta3 => {
            registration.remove("imagePullSerial");
        }
        KubeadmApi::V1Beta4 => args_to_list(registration, "kubeletExtraArgs"),
    }
}

fn object_at_mut<'a>(
    map: &'a mut Map<String, Value>,
    path: &[&str],
) -> Option<&'a mut Map<String, Value>> {
    let (first, rest) = path.split_first()?;
    let next = map.get_mut(*first)?.as_object_mut()?;
    if rest.is_empty() {
        Some(next)
    } else {
        object_at_mut(next, rest)
    }
}

/// kubeadm `v1beta4` takes arguments as `[{name, value}]` (so one flag may repeat) where
/// `v1beta3` and Cluster API take a map.
fn args_to_list(component: &mut Map<String, Value>, key: &str) {
    if let Some(Value::Object(args)) = component.get(key) {
        let mut list: Vec<(String, Value)> =
            args.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        list.sort_by(|a, b| a.0.cmp(&b.0));
        let list: Vec<Value> = list
            .into_iter()
            .map(|(name, value)| json!({"name": name, "value": value}))
            .collect();
        component.insert(key.into(), json!(list));
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::object::at;

    /// The spec of a Cluster written as JSON.
    pub(crate) fn spec_of(cluster: Value) -> ClusterSpec {
        serde_json::from_value(cluster["spec"].clone()).unwrap()
    }

    fn facts(version: &str) -> ClusterFacts {
        ClusterFacts::from_cluster(
            "demo",
            &spec_of(json!({"spec": {
                "controlPlaneEndpoint": {"host": "10.0.0.1", "port": 6443},
                "clusterNetwork": {
                    "pods": {"cidrBlocks": ["192.168.0.0/16", "fd00::/64"]},
                    "services": {"cidrBlocks": ["10.96.0.0/12"]},
                    "serviceDomain": "cluster.example",
                },
            }})),
            Some(version),
        )
    }

    fn token() -> BootstrapToken {
        BootstrapToken::parse("abcdef.0123456789abcdef").unwrap()
    }

    #[test]
    fn api_version_follows_the_kubernetes_version() {
        let check = |version: Option<&str>, expect: KubeadmApi| {
            assert_eq!(
                KubeadmApi::for_kubernetes_version(version),
                expect,
                "{version:?}"
            );
        };
        check(Some("v1.30.2"), KubeadmApi::V1Beta3);
        check(Some("v1.31.0"), KubeadmApi::V1Beta4);
        check(Some("1.32.1"), KubeadmApi::V1Beta4);
        check(Some("v1.31"), KubeadmApi::V1Beta4);
        check(Some("v2.0.0"), KubeadmApi::V1Beta4);
        check(Some("latest"), KubeadmApi::V1Beta3);
        check(None, KubeadmApi::V1Beta3);
    }

    #[test]
    fn cluster_facts_format_the_endpoint() {
        let check = |endpoint: Value, expect: Option<&str>| {
            let facts = ClusterFacts::from_cluster(
                "c",
                &spec_of(json!({"spec": {"controlPlaneEndpoint": endpoint}})),
                None,
            );
            assert_eq!(facts.control_plane_endpoint.as_deref(), expect);
        };
        check(
            json!({"host": "lb.example", "port": 443}),
            Some("lb.example:443"),
        );
        check(json!({"host": "10.0.0.1"}), Some("10.0.0.1:6443"));
        check(
            json!({"host": "fd00::1", "port": 6443}),
            Some("[fd00::1]:6443"),
        );
        check(json!({"host": "", "port": 6443}), None);
        check(Value::Null, None);
    }

    /// (role, spec, Kubernetes version) -> fields of the rendered documents.
    #[test]
    fn documents_complete_the_spec_from_cluster_and_machine() {
        struct Case {
            name: &'static str,
            role: Role,
            version: &'static str,
            spec: Value,
            expect: Vec<(&'static str, &'static [&'static str], Value)>,
        }
        let hash = "sha256:00ff";
        let cases = [
            Case {
                name: "init takes defaults from the cluster and registers the token",
                role: Role::Init,
                version: "v1.30.2",
                spec: json!({"initConfiguration": {"nodeRegistration": {"kubeletExtraArgs": {"v": "2"}}}}),
                expect: vec![
                    (
                        "ClusterConfiguration",
                        &["apiVersion"],
                        json!("kubeadm.k8s.io/v1beta3"),
                    ),
                    ("ClusterConfiguration", &["clusterName"], json!("demo")),
                    (
                        "ClusterConfiguration",
                        &["controlPlaneEndpoint"],
                        json!("10.0.0.1:6443"),
                    ),
                    (
                        "ClusterConfiguration",
                        &["kubernetesVersion"],
                        json!("v1.30.2"),
                    ),
                    (
                        "ClusterConfiguration",
                        &["networking", "podSubnet"],
                        json!("192.168.0.0/16,fd00::/64"),
                    ),
                    (
                        "ClusterConfiguration",
                        &["networking", "serviceSubnet"],
                        json!("10.96.0.0/12"),
                    ),
                    (
                        "ClusterConfiguration",
                        &["networking", "dnsDomain"],
                        json!("cluster.example"),
                    ),
                    (
                        "InitConfiguration",
                        &["bootstrapTokens"],
                        json!([{
                            "token": "abcdef.0123456789abcdef",
                            "description": "lariat: joins nodes to cluster demo",
                            "ttl": "0s",
                            "usages": ["signing", "authentication"],
                            "groups": [NODE_BOOTSTRAP_GROUP],
                        }]),
                    ),
                    (
                        "InitConfiguration",
                        &["nodeRegistration", "kubeletExtraArgs"],
                        json!({"v": "2"}),
                    ),
                ],
            },
            Case {
                name: "the user's values win over the cluster's",
                role: Role::Init,
                version: "v1.30.2",
                spec: json!({"clusterConfiguration": {
                    "apiVersion": "kubeadm.k8s.io/v1beta2",
                    "clusterName": "custom",
                    "kubernetesVersion": "v1.30.9",
                    "networking": {"podSubnet": "10.244.0.0/16"},
                    "encryptionAlgorithm": "RSA-2048",
                }}),
                expect: vec![
                    (
                        "ClusterConfiguration",
                        &["apiVersion"],
                        json!("kubeadm.k8s.io/v1beta3"),
                    ),
                    ("ClusterConfiguration", &["clusterName"], json!("custom")),
                    (
                        "ClusterConfiguration",
                        &["kubernetesVersion"],
                        json!("v1.30.9"),
                    ),
                    (
                        "ClusterConfiguration",
                        &["networking", "podSubnet"],
                        json!("10.244.0.0/16"),
                    ),
                    (
                        "ClusterConfiguration",
                        &["networking", "serviceSubnet"],
                        json!("10.96.0.0/12"),
                    ),
                    // Not a v1beta3 field.
                    (
                        "ClusterConfiguration",
                        &["encryptionAlgorithm"],
                        Value::Null,
                    ),
                ],
            },
            Case {
                name: "v1beta4 reshapes arguments and moves timeouts",
                role: Role::Init,
                version: "v1.31.1",
                spec: json!({
                    "clusterConfiguration": {
                        "apiServer": {"extraArgs": {"b": "2", "a": "1"}, "timeoutForControlPlane": "4m0s"},
                        "caCertificateValidityPeriodDays": 3650,
                    },
                    "initConfiguration": {"nodeRegistration": {"kubeletExtraArgs": {"v": "2"}}},
                }),
                expect: vec![
                    (
                        "ClusterConfiguration",
                        &["apiVersion"],
                        json!("kubeadm.k8s.io/v1beta4"),
                    ),
                    (
                        "ClusterConfiguration",
                        &["apiServer"],
                        json!({"extraArgs": [
                            {"name": "a", "value": "1"}, {"name": "b", "value": "2"},
                        ]}),
                    ),
                    (
                        "ClusterConfiguration",
                        &["caCertificateValidityPeriod"],
                        json!("87600h0m0s"),
                    ),
                    (
                        "InitConfiguration",
                        &["timeouts", "controlPlaneComponentHealthCheck"],
                        json!("4m0s"),
                    ),
                    (
                        "InitConfiguration",
                        &["nodeRegistration", "kubeletExtraArgs"],
                        json!([{"name": "v", "value": "2"}]),
                    ),
                ],
            },
            Case {
                name: "a worker joins by token, pinned to the CA",
                role: Role::JoinWorker,
                version: "v1.30.2",
                spec: json!({"joinConfiguration": {"nodeRegistration": {"name": "n1"}}}),
                expect: vec![
                    (
                        "JoinConfiguration",
                        &["discovery", "bootstrapToken"],
                        json!({
                            "token": "abcdef.0123456789abcdef",
                            "apiServerEndpoint": "10.0.0.1:6443",
                            "caCertHashes": [hash],
                        }),
                    ),
                    ("JoinConfiguration", &["controlPlane"], Value::Null),
                    (
                        "JoinConfiguration",
                        &["nodeRegistration", "name"],
                        json!("n1"),
                    ),
                ],
            },
            Case {
                name: "a control-plane join gets controlPlane, and keeps the user's discovery fields",
                role: Role::JoinControlPlane,
                version: "v1.31.0",
                spec: json!({"joinConfiguration": {"discovery": {
                    "bootstrapToken": {"apiServerEndpoint": "lb:443"},
                    "timeout": "5m0s",
                }}}),
                expect: vec![
                    (
                        "JoinConfiguration",
                        &["apiVersion"],
                        json!("kubeadm.k8s.io/v1beta4"),
                    ),
                    ("JoinConfiguration", &["controlPlane"], json!({})),
                    (
                        "JoinConfiguration",
                        &["discovery", "bootstrapToken", "apiServerEndpoint"],
                        json!("lb:443"),
                    ),
                    ("JoinConfiguration", &["discovery", "timeout"], Value::Null),
                    (
                        "JoinConfiguration",
                        &["timeouts", "discovery"],
                        json!("5m0s"),
                    ),
                ],
            },
            Case {
                name: "file discovery is left alone",
                role: Role::JoinWorker,
                version: "v1.30.2",
                spec: json!({"joinConfiguration": {"discovery": {"file": {"kubeConfigPath": "/etc/k.conf"}}}}),
                expect: vec![(
                    "JoinConfiguration",
                    &["discovery"],
                    json!({"file": {"kubeConfigPath": "/etc/k.conf"}}),
                )],
            },
        ];
        for case in cases {
            let docs = documents(case.role, &case.spec, &facts(case.version), &token(), hash)
                .unwrap_or_else(|e| panic!("{}: {e}", case.name));
            for (kind, path, expect) in case.expect {
                let doc = docs
                    .iter()
                    .find(|d| d["kind"] == kind)
                    .unwrap_or_else(|| panic!("{}: no {kind}", case.name));
                assert_eq!(at(doc, path), &expect, "{}: {kind} {path:?}", case.name);
            }
        }
    }

    #[test]
    fn documents_refuse_what_kubeadm_would_refuse() {
        let worker = documents(
            Role::JoinWorker,
            &json!({"joinConfiguration": {"controlPlane": {}}}),
            &facts("v1.30.0"),
            &token(),
            "sha256:00",
        );
        assert!(matches!(
            worker,
            Err(KubeadmError::WorkerWithControlPlane { .. })
        ));
        let no_endpoint = documents(
            Role::JoinWorker,
            &json!({}),
            &ClusterFacts::default(),
            &token(),
            "sha256:00",
        );
        assert!(matches!(no_endpoint, Err(KubeadmError::NoEndpoint)));
    }

    #[test]
    fn yaml_is_one_file_of_several_documents() {
        let docs = documents(Role::Init, &json!({}), &facts("v1.30.0"), &token(), "").unwrap();
        let yaml = to_yaml(&docs);
        assert!(
            yaml.starts_with(
                "---\napiVersion: kubeadm.k8s.io/v1beta3\nkind: ClusterConfiguration\n"
            )
        );
        let parsed: Vec<Value> = yaml
            .split("---\n")
            .filter(|d| !d.is_empty())
            .map(|d| serde_yaml_ng::from_str(d).unwrap())
            .collect();
        assert_eq!(parsed, docs);
    }
}
