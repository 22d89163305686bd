//! What the AWS provider's tests share: a real moto server (AWS's APIs, on loopback) and a real
//! lariat API server, in-process.
#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Client;
use kube::api::{Api, PostParams};
use lariat_controllers::cache::Caches;
use serde_json::json;

/// A moto server of this test's own (nextest runs tests in parallel processes, and moto's
/// state, authentication switch included, is global to a server), on a free loopback port.
pub struct Moto {
    child: Child,
    pub endpoint: String,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Moto {
    pub fn start() -> Moto {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new("moto_server")
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect(
                "moto_server is on PATH (scripts/test installs it: pip install 'moto[server]')",
            );
        let moto = Moto {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "moto_server did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        moto
    }

    fn post(&self, path: &str, body: &str) {
        let output = Command::new("curl")
            .args([
                "-sf",
                "-X",
                "POST",
                "-H",
                "Content-Type: text/plain",
                "--data",
                body,
            ])
            .arg(format!("{}{path}", self.endpoint))
            .output()
            .expect("curl");
        assert!(output.status.success(), "POST {path}: {output:?}");
    }

    /// Forgets every resource (`POST /moto-api/reset`).
    pub fn reset(&self) {
        self.post("/moto-api/reset", "");
    }

    /// From now on every request must carry the keys of an IAM user (or of a role session)
    /// whose policies allow it, as AWS checks them.
    pub fn enforce_auth(&self) {
        self.post("/moto-api/reset-auth", "0");
    }

    /// The AWS SDK configuration of moto's administrator (before [`Moto::enforce_auth`]).
    pub async fn admin(&self) -> aws_config::SdkConfig {
        aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::from_static("us-east-1"))
            .endpoint_url(&self.endpoint)
            .http_client(lariat_provider_aws::sdk::https_client())
            .credentials_provider(aws_credential_types::Credentials::for_tests())
            .load()
            .await
    }

    /// An IAM user whose inline policy allows `actions`, and its access key.
    pub async fn user(&self, name: &str, actions: &[&str]) -> (String, String) {
        let iam = aws_sdk_iam::Client::new(&self.admin().await);
        iam.create_user().user_name(name).send().await.unwrap();
        let policy = json!({"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Action": actions, "Resource": "*"}
        ]});
        iam.put_user_policy()
            .user_name(name)
            .policy_name("allow")
            .policy_document(policy.to_string())
            .send()
            .await
            .unwrap();
        let key = iam
            .create_access_key()
            .user_name(name)
            .send()
            .await
            .unwrap()
            .access_key
            .unwrap();
        (key.access_key_id, key.secret_access_key)
    }

    /// A role anyone in the account may assume, allowed `actions`; its ARN.
    pub async fn role(&self, name: &str, actions: &[&str]) -> String {
        let iam = aws_sdk_iam::Client::new(&self.admin().await);
        let trust = json!({"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}
        ]});
        let role = iam
            .create_role()
            .role_name(name)
            .assume_role_policy_document(trust.to_string())
            .send()
            .await
            .unwrap()
            .role
            .unwrap();
        if actions.is_empty() {
            return role.arn;
        }
        let policy = json!({"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Action": actions, "Resource": "*"}
        ]});
        iam.put_role_policy()
            .role_name(name)
            .policy_name("allow")
            .policy_document(policy.to_string())
            .send()
            .await
            .unwrap();
        role.arn
    }
}

/// A lariat API server on 127.0.0.1:0 serving in the background, with the process's caches.
pub struct Lariat {
    pub client: Client,
    pub caches: Arc<Caches>,
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
        let server = lariat_apiserver::Server::start(
            lariat_apiserver::Config::new(dir.path()),
            store,
            listener,
        )
        .await
        .unwrap();
        let client = server.local_client();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(server.serve(async move {
            let _ = stopped.await;
        }));
        let lariat = Lariat {
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

    /// Creates or replaces a cluster-scoped object of Cluster API AWS (an identity).
    pub async fn apply(&self, object: serde_json::Value) {
        let object: kube::api::DynamicObject = serde_json::from_value(object).unwrap();
        let gvk = kube::core::GroupVersionKind::try_from(object.types.as_ref().unwrap()).unwrap();
        let resource = kube::core::ApiResource::from_gvk(&gvk);
        let api: Api<kube::api::DynamicObject> = Api::all_with(self.client.clone(), &resource);
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
