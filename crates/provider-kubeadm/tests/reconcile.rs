//! The kubeadm bootstrap provider against a real lariat API server, in-process: init for the
//! first control-plane Machine, joins once the Cluster is initialized, one init under races.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use lariat_provider_kubeadm::certs::ca_cert_hash;
use lariat_provider_kubeadm::reconcile::{ROLE_LABEL, reconcile};
use lariat_provider_kubeadm::{Context, kubeadm_config_resource};
use serde_json::{Value, json};

const NS: &str = "default";

struct Harness {
    client: Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    _dir: tempfile::TempDir,
}

impl Drop for Harness {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl Harness {
    /// A lariat API server on 127.0.0.1:0 serving in the background (garbage collection
    /// included), reached through its in-process client.
    async fn start() -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let store =
            Arc::new(lariat_store::sqlite::SqliteStore::open(&dir.path().join("db")).unwrap());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut config = lariat_apiserver::Config::new(dir.path());
        config.strategies = lariat_api::capi::admission::strategies();
        config.kinds = lariat_api::builtin_crds();
        let server = lariat_apiserver::Server::start(config, store, listener)
            .await
            .unwrap();
        let client = server.local_client();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(server.serve(async move {
            let _ = stopped.await;
        }));
        ensure_kubeadm_config_served(&client).await;
        Harness {
            client,
            stop: Some(stop),
            _dir: dir,
        }
    }

    fn dynamic(&self, resource: &ApiResource) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), NS, resource)
    }

    fn configs(&self) -> Api<DynamicObject> {
        self.dynamic(&kubeadm_config_resource())
    }

    fn secrets(&self) -> Api<Secret> {
        Api::namespaced(self.client.clone(), NS)
    }

    async fn create(&self, resource: &ApiResource, object: Value) -> DynamicObject {
        let object: DynamicObject = serde_json::from_value(object).unwrap();
        self.dynamic(resource)
            .create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|e| panic!("create {} {}: {e}", resource.kind, object.name_any()))
    }

    /// A Cluster with an endpoint and networks, its infrastructure ready.
    async fn cluster(&self, name: &str) -> DynamicObject {
        self.create(
            &capi("Cluster"),
            json!({
                "apiVersion": "cluster.x-k8s.io/v1beta1",
                "kind": "Cluster",
                "metadata": {"name": name, "namespace": NS},
                "spec": {
                    "controlPlaneEndpoint": {"host": "10.0.0.1", "port": 6443},
                    "clusterNetwork": {
                        "pods": {"cidrBlocks": ["192.168.0.0/16"]},
                        "services": {"cidrBlocks": ["10.96.0.0/12"]},
                        "serviceDomain": "cluster.local",
                    },
                },
            }),
        )
        .await;
        self.patch_cluster_status(name, json!({"infrastructureReady": true}))
            .await
    }

    async fn patch_cluster_status(&self, name: &str, status: Value) -> DynamicObject {
        self.dynamic(&capi("Cluster"))
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await
            .unwrap()
    }

    /// A Machine of `cluster` and the KubeadmConfig it owns (as the Machine controller leaves
    /// them: the Machine as controller owner, the cluster-name label).
    async fn machine(&self, cluster: &str, name: &str, control_plane: bool, spec: Value) {
        let mut labels = json!({"cluster.x-k8s.io/cluster-name": cluster});
        if control_plane {
            labels["cluster.x-k8s.io/control-plane"] = json!("");
        }
        let machine = self
            .create(
                &capi("Machine"),
                json!({
                    "apiVersion": "cluster.x-k8s.io/v1beta1",
                    "kind": "Machine",
                    "metadata": {"name": name, "namespace": NS, "labels": labels},
                    "spec": {
                        "clusterName": cluster,
                        "version": "v1.30.2",
                        "bootstrap": {"configRef": {
                            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1",
                            "kind": "KubeadmConfig",
                            "name": name,
                        }},
                        "infrastructureRef": {
                            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
                            "kind": "InMemoryMachine",
                            "name": name,
                        },
                    },
                }),
            )
            .await;
        self.create(
            &kubeadm_config_resource(),
            json!({
                "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1",
                "kind": "KubeadmConfig",
                "metadata": {
                    "name": name,
                    "namespace": NS,
                    "labels": {"cluster.x-k8s.io/cluster-name": cluster},
                    "ownerReferences": [{
                        "apiVersion": "cluster.x-k8s.io/v1beta1",
                        "kind": "Machine",
                        "name": name,
                        "uid": machine.uid().unwrap(),
                        "controller": true,
                        "blockOwnerDeletion": true,
                    }],
                },
                "spec": spec,
            }),
        )
        .await;
    }

    async fn config(&self, name: &str) -> DynamicObject {
        self.configs().get(name).await.unwrap()
    }

    /// The rendered cloud-config of a config's data Secret, parsed.
    async fn cloud_config(&self, name: &str) -> (Secret, Value) {
        let secret = self.secrets().get(name).await.unwrap();
        let value = String::from_utf8(secret.data.as_ref().unwrap()["value"].0.clone()).unwrap();
        assert!(value.starts_with("#cloud-config\n"), "{value}");
        (secret, serde_yaml_ng::from_str(&value).unwrap())
    }

    /// Reconciles configs directly, as the controller would, concurrently.
    async fn reconcile_all(&self, names: &[&str]) {
        let context = Arc::new(Context::new(self.client.clone()));
        let mut configs = vec![];
        for name in names {
            configs.push(Arc::new(self.config(name).await));
        }
        let results =
            futures::future::join_all(configs.into_iter().map(|c| reconcile(c, context.clone())))
                .await;
        for result in results {
            result.unwrap();
        }
    }
}

fn capi(kind: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta1", kind),
        &format!("{}s", kind.to_lowercase()),
    )
}

/// KubeadmConfig comes from `lariat_api::builtin_crds()`; while that is not served (the kind
/// is being added in parallel), an equivalent CRD stands in. The server refuses to redefine a
/// built-in kind, so the built-in is tried first.
async fn ensure_kubeadm_config_served(client: &Client) {
    let gvk = GroupVersionKind::gvk("bootstrap.cluster.x-k8s.io", "v1beta1", "KubeadmConfig");
    if kube::discovery::pinned_kind(client, &gvk).await.is_ok() {
        return;
    }
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "kubeadmconfigs.bootstrap.cluster.x-k8s.io"},
        "spec": {
            "group": "bootstrap.cluster.x-k8s.io",
            "scope": "Namespaced",
            "names": {"plural": "kubeadmconfigs", "singular": "kubeadmconfig", "kind": "KubeadmConfig", "listKind": "KubeadmConfigList"},
            "versions": [{
                "name": "v1beta1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                "subresources": {"status": {}},
            }],
        },
    }))
    .unwrap();
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &crd)
        .await
        .unwrap();
    eventually("the KubeadmConfig CRD is served", || async {
        kube::discovery::pinned_kind(client, &gvk).await.ok()
    })
    .await;
}

/// Polls `check` until it returns `Some`, failing after 30 seconds.
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn condition<'a>(config: &'a DynamicObject, type_: &str) -> &'a Value {
    config.data["status"]["conditions"]
        .as_array()
        .and_then(|list| list.iter().find(|c| c["type"] == type_))
        .unwrap_or(&Value::Null)
}

fn write_file<'a>(doc: &'a Value, path: &str) -> Option<&'a Value> {
    doc["write_files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == path)
}

fn kubeadm_documents(doc: &Value) -> Vec<Value> {
    write_file(doc, "/run/kubeadm/kubeadm.yaml").unwrap()["content"]
        .as_str()
        .unwrap()
        .split("---\n")
        .filter(|d| !d.is_empty())
        .map(|d| serde_yaml_ng::from_str(d).unwrap())
        .collect()
}

fn text(secret: &Secret, key: &str) -> String {
    String::from_utf8(secret.data.as_ref().unwrap()[key].0.clone()).unwrap()
}

#[tokio::test]
async fn first_control_plane_inits_and_the_others_join_once_initialized() {
    let h = Harness::start().await;
    h.cluster("demo").await;
    // A file whose content comes from a Secret, resolved at render time.
    h.secrets()
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "extra", "namespace": NS},
                "stringData": {"motd": "welcome\n"},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    // One spec for every control-plane Machine, as a KubeadmConfigTemplate would give.
    let control_plane_spec = json!({
        "clusterConfiguration": {"apiServer": {"certSANs": ["api.example"]}},
        "initConfiguration": {"nodeRegistration": {"kubeletExtraArgs": {"v": "2"}}},
        "joinConfiguration": {"nodeRegistration": {"kubeletExtraArgs": {"v": "2"}}},
        "files": [{"path": "/etc/motd", "contentFrom": {"secret": {"name": "extra", "key": "motd"}}}],
        "preKubeadmCommands": ["echo pre"],
        "postKubeadmCommands": ["echo post"],
        "users": [{"name": "ops", "sshAuthorizedKeys": ["ssh-ed25519 AAAA"]}],
        "ntp": {"enabled": true, "servers": ["time.example"]},
    });
    h.machine("demo", "cp-0", true, control_plane_spec.clone())
        .await;

    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let controller = tokio::spawn(lariat_provider_kubeadm::run_bootstrap(
        lariat_controllers::cache::Caches::new(h.client.clone()),
        async move {
            let _ = stopped.await;
        },
    ));

    // Init.
    let config = eventually("cp-0 is ready", || async {
        Some(h.config("cp-0").await).filter(|c| c.data["status"]["ready"] == true)
    })
    .await;
    assert_eq!(config.data["status"]["dataSecretName"], "cp-0");
    assert_eq!(condition(&config, "DataSecretAvailable")["status"], "True");
    assert_eq!(
        condition(&config, "CertificatesAvailable")["status"],
        "True"
    );
    assert_eq!(condition(&config, "Ready")["status"], "True");
    assert_eq!(
        config.data["status"]["observedGeneration"],
        json!(config.metadata.generation.unwrap())
    );
    let (secret, doc) = h.cloud_config("cp-0").await;
    assert_eq!(secret.type_.as_deref(), Some("cluster.x-k8s.io/secret"));
    assert_eq!(text(&secret, "format"), "cloud-config");
    assert_eq!(secret.labels()["cluster.x-k8s.io/cluster-name"], "demo");
    assert_eq!(secret.labels()[ROLE_LABEL], "init");
    let owner = &secret.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
        ("KubeadmConfig", config.uid().unwrap().as_str(), Some(true))
    );
    let docs = kubeadm_documents(&doc);
    assert_eq!(docs[0]["kind"], "ClusterConfiguration");
    assert_eq!(docs[0]["controlPlaneEndpoint"], "10.0.0.1:6443");
    assert_eq!(docs[0]["kubernetesVersion"], "v1.30.2");
    assert_eq!(docs[0]["networking"]["podSubnet"], "192.168.0.0/16");
    assert_eq!(docs[0]["apiServer"]["certSANs"], json!(["api.example"]));
    assert_eq!(docs[1]["kind"], "InitConfiguration");
    assert!(
        doc["runcmd"][1]
            .as_str()
            .unwrap()
            .starts_with("kubeadm init --config /run/kubeadm/kubeadm.yaml")
    );
    assert_eq!(
        write_file(&doc, "/etc/motd").unwrap()["content"],
        "welcome\n"
    );
    assert!(write_file(&doc, "/etc/kubernetes/pki/ca.key").is_some());

    // The cluster Secrets exist, owned by the Cluster, and are what the node got.
    let ca = h.secrets().get("demo-ca").await.unwrap();
    for suffix in ["ca", "etcd", "sa", "proxy"] {
        let s = h.secrets().get(&format!("demo-{suffix}")).await.unwrap();
        assert_eq!(
            s.type_.as_deref(),
            Some("cluster.x-k8s.io/secret"),
            "{suffix}"
        );
        assert_eq!(
            s.labels()["cluster.x-k8s.io/cluster-name"],
            "demo",
            "{suffix}"
        );
        assert_eq!(s.owner_references()[0].kind, "Cluster", "{suffix}");
    }
    assert_eq!(
        write_file(&doc, "/etc/kubernetes/pki/ca.crt").unwrap()["content"],
        text(&ca, "tls.crt").as_str()
    );
    let token_secret = h.secrets().get("demo-bootstrap-token").await.unwrap();
    let token = format!(
        "{}.{}",
        text(&token_secret, "token-id"),
        text(&token_secret, "token-secret")
    );
    assert_eq!(docs[1]["bootstrapTokens"][0]["token"], token.as_str());
    let lock = Api::<ConfigMap>::namespaced(h.client.clone(), NS)
        .get("demo-lock")
        .await
        .unwrap();
    assert!(lock.data.unwrap()["lock-information"].contains("\"machineName\":\"cp-0\""));

    // Before the control plane is initialized, the others wait.
    h.machine("demo", "cp-1", true, control_plane_spec.clone())
        .await;
    h.machine(
        "demo",
        "worker-0",
        false,
        json!({"joinConfiguration": {"nodeRegistration": {"name": "worker-0"}}}),
    )
    .await;
    for name in ["cp-1", "worker-0"] {
        let config = eventually("the joins wait for the control plane", || async {
            Some(h.config(name).await)
                .filter(|c| condition(c, "DataSecretAvailable")["status"] == "False")
        })
        .await;
        assert_eq!(
            condition(&config, "DataSecretAvailable")["reason"],
            "WaitingForControlPlaneAvailable",
            "{name}"
        );
        assert_eq!(condition(&config, "Ready")["status"], "False", "{name}");
        assert!(h.secrets().get_opt(name).await.unwrap().is_none(), "{name}");
    }

    // Initialized: both join, pinned to the cluster CA, with the cluster's token.
    h.patch_cluster_status(
        "demo",
        json!({"conditions": [{
            "type": "ControlPlaneInitialized",
            "status": "True",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }]}),
    )
    .await;
    let hash = ca_cert_hash(&text(&ca, "tls.crt")).unwrap();
    for (name, control_plane) in [("cp-1", true), ("worker-0", false)] {
        eventually("the joins are ready", || async {
            Some(h.config(name).await).filter(|c| c.data["status"]["ready"] == true)
        })
        .await;
        let (secret, doc) = h.cloud_config(name).await;
        let expect_role = if control_plane {
            "join-control-plane"
        } else {
            "join"
        };
        assert_eq!(secret.labels()[ROLE_LABEL], expect_role);
        let docs = kubeadm_documents(&doc);
        assert_eq!(docs.len(), 1, "{name}");
        let join = &docs[0];
        assert_eq!(join["kind"], "JoinConfiguration", "{name}");
        assert_eq!(join["controlPlane"].is_object(), control_plane, "{name}");
        let discovery = &join["discovery"]["bootstrapToken"];
        assert_eq!(discovery["token"], token.as_str(), "{name}");
        assert_eq!(discovery["apiServerEndpoint"], "10.0.0.1:6443", "{name}");
        assert_eq!(discovery["caCertHashes"], json!([hash]), "{name}");
        assert_eq!(
            write_file(&doc, "/etc/kubernetes/pki/ca.key").is_some(),
            control_plane,
            "CA keys only on control-plane nodes ({name})"
        );
        assert!(
            doc["runcmd"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c.as_str().unwrap().starts_with("kubeadm join --config")),
            "{name}"
        );
    }
    // The lock has done its job once the cluster is initialized.
    eventually("the init lock is released", || async {
        Api::<ConfigMap>::namespaced(h.client.clone(), NS)
            .get_opt("demo-lock")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    let _ = stop.send(());
    controller.await.unwrap();

    // Idempotent: another reconcile of converged configs writes nothing.
    let names = ["cp-0", "cp-1", "worker-0"];
    let mut before = vec![];
    for name in names {
        before.push((
            h.config(name).await.resource_version(),
            h.secrets().get(name).await.unwrap().resource_version(),
        ));
    }
    let cluster_secrets = h.secrets().get("demo-ca").await.unwrap().resource_version();
    h.reconcile_all(&names).await;
    h.reconcile_all(&names).await;
    for (name, before) in names.iter().zip(before) {
        let after = (
            h.config(name).await.resource_version(),
            h.secrets().get(name).await.unwrap().resource_version(),
        );
        assert_eq!(after, before, "{name} changed on a no-op reconcile");
    }
    assert_eq!(
        h.secrets().get("demo-ca").await.unwrap().resource_version(),
        cluster_secrets
    );
}

/// Regression: a KubeadmConfig a MachinePool owns was read through the reference cache, which
/// refuses Cluster API's own kinds, so it never got data. Its pool's Machines are workers:
/// they join.
#[tokio::test]
async fn a_machine_pools_config_joins_as_a_worker() {
    let h = Harness::start().await;
    h.cluster("pooled").await;
    h.machine(
        "pooled",
        "cp-0",
        true,
        json!({"initConfiguration": {}, "clusterConfiguration": {}}),
    )
    .await;
    h.reconcile_all(&["cp-0"]).await;
    assert_eq!(h.config("cp-0").await.data["status"]["ready"], true);
    h.patch_cluster_status(
        "pooled",
        json!({"conditions": [{
            "type": "ControlPlaneInitialized",
            "status": "True",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }]}),
    )
    .await;
    let pool = h
        .create(
            &capi("MachinePool"),
            json!({
                "apiVersion": "cluster.x-k8s.io/v1beta1",
                "kind": "MachinePool",
                "metadata": {"name": "workers", "namespace": NS},
                "spec": {
                    "clusterName": "pooled",
                    "replicas": 2,
                    "template": {"spec": {
                        "clusterName": "pooled",
                        "version": "v1.30.2",
                        "bootstrap": {"configRef": {
                            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1",
                            "kind": "KubeadmConfig",
                            "name": "workers",
                        }},
                        "infrastructureRef": {
                            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
                            "kind": "InMemoryMachinePool",
                            "name": "workers",
                        },
                    }},
                },
            }),
        )
        .await;
    h.create(
        &kubeadm_config_resource(),
        json!({
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1",
            "kind": "KubeadmConfig",
            "metadata": {
                "name": "workers",
                "namespace": NS,
                "ownerReferences": [{
                    "apiVersion": "cluster.x-k8s.io/v1beta1",
                    "kind": "MachinePool",
                    "name": "workers",
                    "uid": pool.uid().unwrap(),
                    "controller": true,
                }],
            },
            "spec": {"joinConfiguration": {}},
        }),
    )
    .await;
    h.reconcile_all(&["workers"]).await;
    let config = h.config("workers").await;
    assert_eq!(config.data["status"]["ready"], true, "{:?}", config.data);
    let (secret, doc) = h.cloud_config("workers").await;
    assert_eq!(secret.labels()[ROLE_LABEL], "join");
    assert_eq!(secret.labels()["cluster.x-k8s.io/cluster-name"], "pooled");
    let docs = kubeadm_documents(&doc);
    assert_eq!(docs[0]["kind"], "JoinConfiguration");
    assert!(
        docs[0]["controlPlane"].is_null(),
        "a pool's node is a worker"
    );
}

#[tokio::test]
async fn exactly_one_control_plane_machine_inits_under_races() {
    let h = Harness::start().await;
    h.cluster("race").await;
    let names = ["a", "b", "c"];
    for name in names {
        h.machine("race", name, true, json!({"initConfiguration": {}}))
            .await;
    }
    // All three reconcile at once, twice (the second round is what a requeue does).
    h.reconcile_all(&names).await;
    h.reconcile_all(&names).await;
    let mut inits = vec![];
    for name in names {
        if h.config(name).await.data["status"]["ready"] == true {
            inits.push(name);
        }
    }
    assert_eq!(inits.len(), 1, "exactly one init, got {inits:?}");
    let winner = inits[0];
    assert_eq!(
        h.secrets().get(winner).await.unwrap().labels()[ROLE_LABEL],
        "init"
    );
    for name in names.iter().filter(|n| **n != winner) {
        let config = h.config(name).await;
        assert_eq!(
            condition(&config, "DataSecretAvailable")["reason"],
            "WaitingForControlPlaneAvailable"
        );
        assert!(
            condition(&config, "DataSecretAvailable")["message"]
                .as_str()
                .unwrap()
                .contains(winner),
            "the message names who is initializing: {}",
            condition(&config, "DataSecretAvailable")["message"]
        );
    }

    // The winner's Machine goes away before the cluster initializes (say it never booted):
    // its config and data are collected, its lock is stale, and another Machine inits.
    h.dynamic(&capi("Machine"))
        .delete(winner, &Default::default())
        .await
        .unwrap();
    eventually("the winner's data is collected", || async {
        h.secrets()
            .get_opt(winner)
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    let rest: Vec<&str> = names.iter().copied().filter(|n| *n != winner).collect();
    h.reconcile_all(&rest).await;
    h.reconcile_all(&rest).await;
    let mut inits = vec![];
    for name in &rest {
        if h.config(name).await.data["status"]["ready"] == true {
            inits.push(*name);
        }
    }
    assert_eq!(inits.len(), 1, "one new init, got {inits:?}");
}

#[tokio::test]
async fn ignition_is_reported_not_rendered() {
    let h = Harness::start().await;
    h.cluster("ign").await;
    let machine = h
        .create(
            &capi("Machine"),
            json!({
                "apiVersion": "cluster.x-k8s.io/v1beta1",
                "kind": "Machine",
                "metadata": {"name": "m", "namespace": NS, "labels": {"cluster.x-k8s.io/cluster-name": "ign"}},
                "spec": {"clusterName": "ign", "bootstrap": {"configRef": {
                    "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1", "kind": "KubeadmConfig", "name": "m"}},
                    "infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "InMemoryMachine", "name": "m"}},
            }),
        )
        .await;
    let config: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1",
        "kind": "KubeadmConfig",
        "metadata": {"name": "m", "namespace": NS, "labels": {"cluster.x-k8s.io/cluster-name": "ign"},
            "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine", "name": "m",
                "uid": machine.uid().unwrap(), "controller": true}]},
        "spec": {"format": "ignition"},
    }))
    .unwrap();
    // The contract lets admission refuse Ignition up front; then there is nothing to reconcile.
    if let Err(e) = h.configs().create(&PostParams::default(), &config).await {
        assert!(
            matches!(e, kube::Error::Api(ref s) if s.code == 422 || s.code == 400),
            "{e}"
        );
        return;
    }
    h.reconcile_all(&["m"]).await;
    let config = h.config("m").await;
    let available = condition(&config, "DataSecretAvailable");
    assert_eq!(available["status"], "False");
    assert_eq!(available["reason"], "UnsupportedFormat");
    assert!(available["message"].as_str().unwrap().contains("ignition"));
    assert_eq!(
        config.data["status"]["failureReason"],
        "InvalidConfiguration"
    );
    assert_ne!(config.data["status"]["ready"], true);
    assert!(h.secrets().get_opt("m").await.unwrap().is_none());
}
