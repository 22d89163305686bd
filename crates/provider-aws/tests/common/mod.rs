//! What the AWS provider's tests share: a real lariat API server, in-process, beside the moto
//! server of `lariat_provider_aws::moto`.
#![allow(dead_code)]

pub mod eks_double;

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Client;
use kube::api::{Api, PostParams};
use lariat_controllers::cache::Caches;
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
    pub virtual_clusters: Arc<lariat_apiserver::virtual_clusters::VirtualClusters>,
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
        let server = lariat_apiserver::Server::start(config, store, listener)
            .await
            .unwrap();
        let client = server.local_client();
        let import_manifests =
            Arc::new(server.import_manifests(std::time::Duration::from_secs(600)));
        let virtual_clusters = server.virtual_clusters();
        let ca_checksum = server.ca_checksum();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(server.serve(async move {
            let _ = stopped.await;
        }));
        let lariat = Lariat {
            url,
            ca_checksum,
            import_manifests,
            virtual_clusters,
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
