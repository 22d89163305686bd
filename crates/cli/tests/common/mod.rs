//! A real `lariat server` process on an ephemeral port, driven by the real kubectl binary and
//! by kube-rs, as users drive it.
#![allow(dead_code)]

pub mod container;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub struct TestServer {
    child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub home: tempfile::TempDir,
    extra_args: Vec<String>,
    env: Vec<(String, String)>,
    pub address: String,
}

impl TestServer {
    pub fn start() -> TestServer {
        TestServer::start_with(&[])
    }

    pub fn start_with(extra_args: &[&str]) -> TestServer {
        TestServer::start_with_env(extra_args, &[])
    }

    /// A server with these environment variables. It never sees the test's own AWS
    /// configuration: no `AWS_*` variable is inherited, and the AWS SDK finds no profile
    /// files and asks no instance metadata service.
    pub fn start_with_env(extra_args: &[&str], env: &[(&str, &str)]) -> TestServer {
        let mut server = TestServer {
            child: None,
            dir: tempfile::tempdir().expect("temp dir"),
            home: tempfile::tempdir().expect("temp home"),
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            address: String::new(),
        };
        server.launch();
        server
    }

    /// A server on an existing data directory (a restored backup, say).
    pub fn start_in(dir: tempfile::TempDir) -> TestServer {
        let mut server = TestServer {
            child: None,
            dir,
            home: tempfile::tempdir().expect("temp home"),
            extra_args: vec![],
            env: vec![],
            address: String::new(),
        };
        server.launch();
        server
    }

    /// kubectl against this server with another server's kubeconfig (its credential and
    /// CA), which must work: a restored backup keeps the lost server's CA and records.
    pub fn kubectl_with_kubeconfig_of(&self, kubeconfig: &Path, args: &[&str]) {
        let output = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--server", &format!("https://{}", self.address)])
            .args(args)
            .output()
            .expect("run kubectl");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig.yaml")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    /// Starts the server process and waits until it serves.
    pub fn launch(&mut self) {
        let log = std::fs::File::create(self.log_path()).expect("log file");
        let mut command = Command::new(env!("CARGO_BIN_EXE_lariat"));
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("AWS_") {
                command.env_remove(name);
            }
        }
        let nowhere = self.dir.path().join("no-aws-profile");
        command
            .env("AWS_CONFIG_FILE", &nowhere)
            .env("AWS_SHARED_CREDENTIALS_FILE", &nowhere)
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        let child = command
            .arg("server")
            .arg("--data-dir")
            .arg(self.dir.path())
            .args(["--listen", "127.0.0.1:0"])
            .args(&self.extra_args)
            .env("LARIAT_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start lariat server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let text = std::fs::read_to_string(self.log_path()).unwrap_or_default();
            // The whole address, up to the `;` after it: the log may be read mid-line.
            if let Some((address, _)) = text
                .split("listening on https://")
                .nth(1)
                .and_then(|rest| rest.split_once(';'))
            {
                self.address = address.to_string();
                return;
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("lariat server exited with {status}:\n{text}");
            }
            assert!(
                Instant::now() < deadline,
                "lariat server did not start:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The server process's id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Whether the process has exited (and is reaped).
    pub fn exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_none_or(|child| child.try_wait().ok().flatten().is_some())
    }

    /// `kill -9`: no shutdown path runs.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, and waits for the process to exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status()
            .expect("kill");
        child.wait().expect("wait")
    }

    /// Runs `lariat ARGS --kubeconfig <this server>`.
    pub fn lariat(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_lariat"))
            .args(args)
            .arg("--kubeconfig")
            .arg(self.kubeconfig())
            .output()
            .expect("run lariat")
    }

    /// `lariat init --infrastructure inmemory`, as a user does before creating clusters.
    pub fn init_inmemory(&self) {
        let output = self.lariat(&["init", "--infrastructure", "inmemory"]);
        assert!(
            output.status.success(),
            "lariat init failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    pub fn kubectl_command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("kubectl");
        command
            .args(args)
            .env("KUBECONFIG", self.kubeconfig())
            .env("HOME", self.home.path())
            .env_remove("KUBECTL_EXTERNAL_DIFF");
        command
    }

    /// kubectl with another kubeconfig (a workload cluster's, a proxied one).
    pub fn kubectl_as(&self, kubeconfig: &Path, args: &[&str]) -> Output {
        Command::new("kubectl")
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .env("HOME", self.home.path())
            .output()
            .expect("run kubectl (is it on PATH?)")
    }

    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_command(args)
            .output()
            .expect("run kubectl (is it on PATH?)")
    }

    pub fn kubectl_stdin(&self, args: &[&str], input: &str) -> Output {
        let mut child = self
            .kubectl_command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run kubectl");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input.as_bytes())
            .expect("write stdin");
        child.wait_with_output().expect("kubectl output")
    }

    /// Runs kubectl and returns stdout, failing the test with kubectl's stderr otherwise.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let output = self.kubectl(args);
        assert!(
            output.status.success(),
            "kubectl {args:?} failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).expect("utf-8")
    }

    pub fn apply_ok(&self, args: &[&str], manifest: &str) -> String {
        let output = self.kubectl_stdin(args, manifest);
        assert!(
            output.status.success(),
            "kubectl {args:?} failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).expect("utf-8")
    }

    pub fn kubectl_err(&self, args: &[&str]) -> String {
        let output = self.kubectl(args);
        assert!(
            !output.status.success(),
            "kubectl {args:?} unexpectedly succeeded"
        );
        String::from_utf8(output.stderr).expect("utf-8")
    }

    pub async fn client(&self) -> kube::Client {
        let text = std::fs::read_to_string(self.kubeconfig()).expect("kubeconfig");
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&text).expect("parse kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .expect("client config");
        kube::Client::try_from(config).expect("client")
    }

    /// A bearer token from `kubeconfig-token.yaml`.
    pub fn admin_token(&self) -> String {
        let text = std::fs::read_to_string(self.dir.path().join("kubeconfig-token.yaml"))
            .expect("token kubeconfig");
        text.lines()
            .find_map(|l| l.trim().strip_prefix("token: ").map(String::from))
            .expect("token line")
    }

    /// A raw HTTPS request with curl (for status codes and bodies kubectl hides).
    pub fn curl(
        &self,
        method: &str,
        path: &str,
        auth: Option<&str>,
        content_type: Option<&str>,
        body: Option<&[u8]>,
    ) -> (u16, String) {
        let mut args = vec!["-X".to_string(), method.to_string()];
        if let Some(token) = auth {
            args.extend(["-H".into(), format!("Authorization: Bearer {token}")]);
        }
        if let Some(ct) = content_type {
            args.extend(["-H".into(), format!("Content-Type: {ct}")]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.curl_with(&args, &format!("https://{}{path}", self.address), body)
    }

    /// curl with any extra arguments (a client certificate, a source address, HTTP/2), the
    /// server's CA trusted; returns the status code and the body.
    pub fn curl_with(&self, args: &[&str], url: &str, body: Option<&[u8]>) -> (u16, String) {
        let ca = self.dir.path().join("tls/ca.crt");
        let mut command = Command::new("curl");
        command
            .args(["-s", "-o", "-", "-w", "\n%{http_code}", "--cacert"])
            .arg(&ca)
            .args(args)
            .arg(url);
        if body.is_some() {
            command.args(["--data-binary", "@-"]);
        }
        command.stdin(Stdio::piped()).stdout(Stdio::piped());
        let mut child = command.spawn().expect("curl");
        if let Some(body) = body {
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(body)
                .expect("write body");
        } else {
            drop(child.stdin.take());
        }
        let output = child.wait_with_output().expect("curl output");
        let text = String::from_utf8_lossy(&output.stdout).to_string();
        let (body, code) = text.rsplit_once('\n').expect("status line");
        (code.trim().parse().expect("status code"), body.to_string())
    }

    /// Writes a simulated workload cluster's kubeconfig from `<cluster>-kubeconfig` to a file.
    pub fn workload_kubeconfig(&self, cluster: &str) -> PathBuf {
        self.workload_kubeconfig_in("default", cluster)
    }

    /// The same, for a Cluster in `namespace`.
    pub fn workload_kubeconfig_in(&self, namespace: &str, cluster: &str) -> PathBuf {
        let path = self.data_dir().join(format!("{cluster}.kubeconfig"));
        let decoded = self.kubectl_ok(&[
            "get",
            "secret",
            &format!("{cluster}-kubeconfig"),
            "-n",
            namespace,
            "-o",
            "go-template={{.data.value | base64decode}}",
        ]);
        std::fs::write(&path, decoded).unwrap();
        path
    }

    /// `lariat kubeconfig CLUSTER`: a kubeconfig that reaches the cluster through the proxy.
    pub fn proxied_kubeconfig(&self, cluster: &str) -> PathBuf {
        let output = self.lariat(&["kubeconfig", cluster]);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let path = self
            .data_dir()
            .join(format!("{cluster}-proxied.kubeconfig"));
        std::fs::write(&path, output.stdout).unwrap();
        path
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// The seed's Cluster manifest (seed 003).
pub const SEED_CLUSTER: &str = r#"apiVersion: cluster.x-k8s.io/v1beta1
kind: Cluster
metadata:
  name: prod-us-east
spec:
  clusterNetwork:
    pods:
      cidrBlocks: ["192.168.0.0/16"]
  infrastructureRef:
    apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
    kind: AWSCluster
    name: prod-us-east
"#;

/// `lariat cluster import NAME`'s token and CA checksum.
pub fn import_cluster(server: &TestServer, name: &str, ttl: &str) -> (String, String) {
    import_cluster_with(server, &[name, "--ttl", ttl])
}

/// `lariat cluster import ARGS`' token and CA checksum.
pub fn import_cluster_with(server: &TestServer, args: &[&str]) -> (String, String) {
    let mut command = vec!["cluster", "import"];
    command.extend_from_slice(args);
    let output = server.lariat(&command);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).unwrap();
    let after = |flag: &str| {
        stdout
            .split(flag)
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("{flag} in\n{stdout}"))
            .to_string()
    };
    (after("--token "), after("--ca-checksum "))
}

/// The status of a Cluster's condition of this type ("" when it has none).
pub fn cluster_condition(server: &TestServer, cluster: &str, type_: &str) -> String {
    server.kubectl_ok(&[
        "get",
        "cluster",
        cluster,
        "-o",
        &format!("jsonpath={{.status.conditions[?(@.type==\"{type_}\")].status}}"),
    ])
}

/// `lariat generate cluster ARGS`: the manifests a user pipes into kubectl.
pub fn generate_cluster(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_lariat"))
        .args(["generate", "cluster"])
        .args(args)
        .output()
        .expect("run lariat generate cluster");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("utf-8")
}

/// `lariat generate cluster NAME` for the in-memory provider at v1.30.2 with one control-plane
/// machine and one worker: the smallest whole cluster.
pub fn small_inmemory_cluster(name: &str) -> String {
    small_inmemory_cluster_with(name, &[])
}

/// The same, with more `lariat generate cluster` arguments (`-n NAMESPACE`).
pub fn small_inmemory_cluster_with(name: &str, more: &[&str]) -> String {
    let mut args = vec![
        name,
        "--infrastructure",
        "inmemory",
        "--kubernetes-version",
        "v1.30.2",
        "--control-plane-machine-count",
        "1",
        "--worker-machine-count",
        "1",
    ];
    args.extend_from_slice(more);
    generate_cluster(&args)
}

/// The first ```sh block after `anchor` (a heading, or words just before the block) in the
/// README: the tests that run the README's blocks as written read them here.
pub fn readme_block(anchor: &str) -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("README.md");
    let section = readme
        .split(anchor)
        .nth(1)
        .unwrap_or_else(|| panic!("README has no {anchor:?}"));
    section
        .split("```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a sh block")
        .to_string()
}

/// `PATH` with the built `lariat` first.
pub fn path_with_lariat() -> String {
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_lariat"))
        .parent()
        .unwrap()
        .to_path_buf();
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// Waits until `check` holds, polling.
pub fn eventually(what: &str, check: impl FnMut() -> bool) {
    eventually_within(Duration::from_secs(20), what, check)
}

pub fn eventually_within(timeout: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A `lariat agent` process; killed when dropped.
pub struct Agent {
    child: Child,
    log: PathBuf,
}

impl Agent {
    pub fn start_with_env(
        dir: &std::path::Path,
        name: &str,
        server: &str,
        token: &str,
        checksum: &str,
        downstream: &TestServer,
        env: &[(&str, &str)],
    ) -> Agent {
        let log = dir.join(format!("agent-{name}.log"));
        let child = Command::new(env!("CARGO_BIN_EXE_lariat"))
            .args([
                "agent",
                "--server",
                server,
                "--token",
                token,
                "--ca-checksum",
                checksum,
                "--kubeconfig",
            ])
            .arg(downstream.kubeconfig())
            .env("LARIAT_LOG", "info")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Agent { child, log }
    }

    pub fn start(
        dir: &std::path::Path,
        name: &str,
        server: &str,
        token: &str,
        checksum: &str,
        downstream: &TestServer,
    ) -> Agent {
        Agent::start_with_env(dir, name, server, token, checksum, downstream, &[])
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The credential an agent keeps in its cluster (`downstream`).
pub fn agent_credential(downstream: &TestServer) -> String {
    agent_kept(downstream, "credential")
}

/// What an agent keeps under `key` in its cluster's Secret.
pub fn agent_kept(downstream: &TestServer, key: &str) -> String {
    downstream.kubectl_ok(&[
        "get",
        "secret",
        "lariat-agent-credential",
        "-n",
        "lariat-system",
        "-o",
        &format!("go-template={{{{.data.{key} | base64decode}}}}"),
    ])
}
