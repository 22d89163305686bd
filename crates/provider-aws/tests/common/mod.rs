//! What the AWS provider's tests share: a real lariat API server, in-process, beside the moto
//! server of `lariat_provider_aws::moto`.
#![allow(dead_code)]

pub mod eks_double;

use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_ec2::types::Filter;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Client;
use kube::api::{Api, DynamicObject, PostParams};
use lariat_controllers::cache::Caches;
use lariat_provider_aws::moto::Moto;
use lariat_provider_aws::{Aws, Settings};
use serde_json::json;

/// A lariat API server on 127.0.0.1:0 serving in the background, with the process's caches.
pub struct Lariat {
    pub client: Client,
    pub caches: Arc<Caches>,
    /// `https://127.0.0.1:PORT`, also its advertised URL.
    pub url: String,
    pub ca_checksum: String,
    /// What installs agents into the clusters it provisions.
    pub import_manifests: lariat_controllers::agent_install::ImportManifests,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    _dir: tempfile::TempDir,
}

impl Drop for Lariat {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl Lariat {
    pub async fn start() -> Lariat {
        let dir = tempfile::tempdir().unwrap();
        let store =
            Arc::new(lariat_store::sqlite::SqliteStore::open(&dir.path().join("db")).unwrap());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}", listener.local_addr().unwrap());
        let mut config = lariat_apiserver::Config::new(dir.path());
        config.advertise_url = Some(url.clone());
        config.strategies = lariat_api::capi::admission::strategies()
            .and(lariat_provider_aws::admission::strategies());
        config.kinds = lariat_api::builtin_crds();
        let plane = lariat_management::Plane::new(
            lariat_management::DEFAULT_HANDSHAKES_PER_SECOND,
            Default::default(),
        )
        .unwrap();
        config.extensions = vec![Arc::new(plane.clone())];
        let server = lariat_apiserver::Server::start(config, store, listener)
            .await
            .unwrap();
        let client = server.local_client();
        let import_manifests =
            plane.import_manifests(server.handle(), std::time::Duration::from_secs(600));
        let ca_checksum = server.ca_checksum();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(server.serve(async move {
            let _ = stopped.await;
        }));
        let lariat = Lariat {
            url,
            ca_checksum,
            import_manifests,
            caches: Caches::new(client.clone()),
            client,
            stop: Some(stop),
            _dir: dir,
        };
        lariat
            .namespace(lariat_api::clusterctl::NAMESPACE, json!({}))
            .await;
        lariat
    }

    pub async fn namespace(&self, name: &str, labels: serde_json::Value) {
        let namespace: Namespace =
            serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap();
        match Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &namespace)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => panic!("namespace {name}: {e}"),
        }
    }

    /// Creates or updates an object (server-side apply), in its namespace if it names one.
    pub async fn apply(&self, object: serde_json::Value) {
        let object: kube::api::DynamicObject = serde_json::from_value(object).unwrap();
        let gvk = kube::core::GroupVersionKind::try_from(object.types.as_ref().unwrap()).unwrap();
        let resource = kube::core::ApiResource::from_gvk(&gvk);
        let api: Api<kube::api::DynamicObject> = match &object.metadata.namespace {
            Some(namespace) => Api::namespaced_with(self.client.clone(), namespace, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        };
        api.patch(
            &object.metadata.name.clone().unwrap(),
            &kube::api::PatchParams::apply("test").force(),
            &kube::api::Patch::Apply(&object),
        )
        .await
        .unwrap();
    }

    /// Writes a static identity's Secret in `lariat-system`.
    pub async fn secret(&self, name: &str, data: &[(&str, &str)]) {
        let data: serde_json::Map<String, serde_json::Value> = data
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": lariat_api::clusterctl::NAMESPACE},
            "stringData": data,
        }))
        .unwrap();
        Api::<Secret>::namespaced(self.client.clone(), lariat_api::clusterctl::NAMESPACE)
            .patch(
                name,
                &kube::api::PatchParams::apply("test").force(),
                &kube::api::Patch::Apply(&secret),
            )
            .await
            .unwrap();
    }
}

/// A Cluster `name` on an AWSCluster in us-east-1, through the static identity `capa`.
pub fn aws_cluster(name: &str) -> Vec<serde_json::Value> {
    vec![
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1",
            "kind": "Cluster",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "clusterNetwork": {"pods": {"cidrBlocks": ["192.168.0.0/16"]}},
                "infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "AWSCluster", "name": name},
            },
        }),
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
            "kind": "AWSCluster",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "region": "us-east-1",
                "sshKeyName": "default",
                "identityRef": {"kind": "AWSClusterStaticIdentity", "name": "capa"},
            },
        }),
    ]
}

/// The namespace the tests' clusters live in.
pub const NS: &str = "team-a";

pub async fn eventually<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub fn tagged(key: &str, value: &str) -> Filter {
    Filter::builder()
        .name(format!("tag:{key}"))
        .values(value)
        .build()
}

/// moto, a lariat server running core's controllers and the AWS provider (its SDK pointed at
/// `endpoint`: moto, or a double in front of it), and the static identity `capa` in it.
pub struct Setup {
    pub moto: Moto,
    pub lariat: Lariat,
    pub aws: Arc<Aws>,
    /// The identity's secret key.
    pub secret: String,
    pub stop: tokio::sync::watch::Sender<bool>,
}

impl Setup {
    pub async fn start(moto: Moto, endpoint: &str) -> Setup {
        Setup::start_with(moto, endpoint, Settings::default().sync_period).await
    }

    /// The same, settled objects looked at again every `sync_period`.
    pub async fn start_with(moto: Moto, endpoint: &str, sync_period: Duration) -> Setup {
        let (key, secret) = moto.user("capa", &["*"]).await;
        let lariat = Lariat::start().await;
        lariat.namespace(NS, json!({})).await;
        lariat
            .secret(
                "capa",
                &[("AccessKeyID", &key), ("SecretAccessKey", &secret)],
            )
            .await;
        lariat
            .apply(json!({
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
                "kind": "AWSClusterStaticIdentity",
                "metadata": {"name": "capa"},
                "spec": {"secretRef": "capa", "allowedNamespaces": {}},
            }))
            .await;
        let aws = Aws::new(Settings {
            endpoint_url: Some(endpoint.to_owned()),
            // moto makes and deletes at once; AWS takes minutes.
            poll_while_changing: Duration::from_secs(1),
            sync_period,
            ..Settings::default()
        });
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let until_stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        tokio::spawn(lariat_controllers::run(
            lariat.caches.clone(),
            until_stopped(stopped.clone()),
        ));
        tokio::spawn(lariat_provider_aws::run(
            lariat.caches.clone(),
            aws.clone(),
            until_stopped(stopped.clone()),
        ));
        Setup {
            moto,
            lariat,
            aws,
            secret,
            stop,
        }
    }

    pub fn api(&self, resource: &kube::core::ApiResource) -> Api<DynamicObject> {
        Api::namespaced_with(self.lariat.client.clone(), NS, resource)
    }

    /// Waits until the control plane is ready and the pool runs 3 nodes.
    pub async fn provisioned(&self) {
        let control_planes = self.api(&lariat_provider_aws::control_plane::resource());
        eventually(
            "the control plane is ready",
            Duration::from_secs(60),
            || {
                let api = control_planes.clone();
                async move {
                    api.get("prod-control-plane")
                        .await
                        .is_ok_and(|cp| cp.data["status"]["ready"] == true)
                }
            },
        )
        .await;
        let pools: Api<lariat_api::capi::MachinePool> =
            Api::namespaced(self.lariat.client.clone(), NS);
        eventually(
            "the MachinePool runs 3 nodes",
            Duration::from_secs(60),
            || {
                let api = pools.clone();
                async move {
                    api.get("prod-pool-0").await.is_ok_and(|p| {
                        let status = p.status.unwrap_or_default();
                        status.replicas == Some(3)
                            && status.phase
                                == Some(lariat_api::capi::machine_pool::MachinePoolPhase::Running)
                    })
                }
            },
        )
        .await;
    }
}

/// The `reason` of condition `type_` in an object's status, or `True`.
pub fn condition(object: &DynamicObject, type_: &str) -> Option<String> {
    object.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .map(|c| {
            if c["status"] == "True" {
                "True".to_owned()
            } else {
                c["reason"].as_str().unwrap_or_default().to_owned()
            }
        })
}

/// A workload cluster's API standing in for an EKS cluster's (moto serves none): an embedded
/// instance of lariat's generic server, as the in-memory provider's simulated clusters are.
/// Its client works for as long as it is kept.
pub async fn stand_in_cluster() -> (lariat_apiserver::embedded::Embedded, kube::Client) {
    let ca = lariat_apiserver::pki::Pki::in_memory_ca("eks-stand-in-ca").unwrap();
    let config = lariat_apiserver::embedded::EmbeddedConfig {
        kinds: lariat_apiserver::builtin::core_kinds(),
        namespaces: vec!["default".into(), "kube-system".into()],
        server_address: "127.0.0.1:443".into(),
        identity: "eks-stand-in".into(),
        metrics_label: "workload",
        version: None,
        extensions: Vec::new(),
    };
    let api = lariat_apiserver::embedded::Embedded::start(config, &ca)
        .await
        .unwrap();
    let client = api.client();
    (api, client)
}
