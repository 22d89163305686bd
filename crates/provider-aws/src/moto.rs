//! A throwaway moto server (AWS's APIs, simulated, on loopback) for the tests and benchmarks of
//! any crate, as `lariat_store::etcd_process` is for etcd.
//!
//! It runs `moto_server` (`pip install 'moto[server]'`; `scripts/test` installs it) on a free
//! port and kills it when dropped. Each test starts its own: nextest runs tests in parallel
//! processes, and moto's state, its authentication switch included, is global to a server.
//! A missing binary fails the test with how to install it, rather than skipping it.

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

/// A running moto server.
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
            // AWS's managed policies (AmazonEKSClusterPolicy, ...), which real accounts have.
            .env("MOTO_IAM_LOAD_MANAGED_POLICIES", "true")
            // As AWS: an unknown instance type or AMI is refused at launch.
            .env("MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION", "true")
            .env("MOTO_ENABLE_AMI_VALIDATION", "true")
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

    /// POSTs `body` to moto's own API (plain HTTP on loopback).
    fn post(&self, path: &str, body: &str) {
        let address = self.endpoint.trim_start_matches("http://");
        let mut stream = std::net::TcpStream::connect(address).expect("connect to moto");
        write!(
            stream,
            "POST {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .expect("write to moto");
        let mut response = String::new();
        stream
            .read_to_string(&mut response)
            .expect("read from moto");
        assert!(
            response.starts_with("HTTP/1.1 200"),
            "POST {path}: {response}"
        );
    }

    /// The CPU time moto has used, from `/proc` (Linux): a benchmark whose moto is busy all the
    /// time measures moto.
    pub fn cpu_time(&self) -> Option<Duration> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).ok()?;
        // Fields after the command's closing parenthesis; utime and stime are the 14th and
        // 15th of the line, in clock ticks (100 per second on Linux).
        let rest = stat.rsplit_once(')')?.1;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 =
            fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        Some(Duration::from_millis(ticks * 10))
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
            .http_client(crate::sdk::https_client())
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
