//! The image `scripts/release` packed, unpacked with umoci and run as a container runtime runs
//! it: the entrypoint, environment and user from the runtime configuration umoci derives from
//! the image, a read-only root in a private mount namespace, and volumes bound into it.
//!
//! No container runtime runs on these machines; `unshare`, `mount` and `chroot` (as root) do
//! what runc would for these tests: everything but cgroups, seccomp and the network namespace.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use super::TestServer;

/// The repository's root.
pub fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// Where `scripts/release` left its artifacts (`LARIAT_DIST`, default target/dist).
pub fn dist() -> PathBuf {
    let dir = std::env::var_os("LARIAT_DIST")
        .map(PathBuf::from)
        .unwrap_or_else(|| repository().join("target/dist"));
    assert!(
        dir.join("oci/index.json").is_file(),
        "no release artifacts in {}: run scripts/release first (scripts/test does)",
        dir.display()
    );
    dir
}

/// The release tag, `v` and the workspace's version.
pub fn version() -> String {
    format!("v{}", env!("CARGO_PKG_VERSION"))
}

/// `oci:<layout>:<tag>`, as skopeo names the packed image.
pub fn image_reference() -> String {
    format!("oci:{}:{}", dist().join("oci").display(), version())
}

/// Runs a command and returns its stdout; panics with its stderr if it fails.
pub fn output_of(command: &mut Command) -> String {
    let output = command.output().expect("run command");
    assert!(
        output.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("utf-8 output")
}

/// An unpacked image: its root file system and the runtime configuration umoci wrote for it.
pub struct Container {
    bundle: tempfile::TempDir,
    pub spec: Value,
}

impl Container {
    pub fn unpack() -> Container {
        assert_eq!(
            effective_uid(),
            0,
            "the image tests unpack and chroot as root, as CI runs them"
        );
        let bundle = tempfile::tempdir().expect("bundle dir");
        let target = bundle.path().join("bundle");
        output_of(
            Command::new("umoci")
                .args(["unpack", "--image"])
                .arg(format!("{}:{}", dist().join("oci").display(), version()))
                .arg(&target),
        );
        let spec = serde_json::from_slice(
            &std::fs::read(target.join("config.json")).expect("runtime config"),
        )
        .expect("runtime config is JSON");
        Container { bundle, spec }
    }

    pub fn rootfs(&self) -> PathBuf {
        self.bundle.path().join("bundle/rootfs")
    }

    /// The image's environment, `NAME=value` pairs.
    pub fn env(&self) -> Vec<(String, String)> {
        env_pairs(&self.spec["process"]["env"])
    }

    /// What a pod's service account gives its containers, for the API server `api`: the
    /// token, CA and namespace files, and the environment naming the server
    /// (`KUBERNETES_SERVICE_HOST`/`PORT`), returned to add to the container's.
    pub fn give_service_account(&self, api: &TestServer, namespace: &str) -> Vec<(String, String)> {
        let files = self
            .rootfs()
            .join("var/run/secrets/kubernetes.io/serviceaccount");
        std::fs::create_dir_all(&files).expect("service account directory");
        std::fs::write(files.join("token"), api.admin_token()).expect("token");
        std::fs::copy(api.data_dir().join("tls/ca.crt"), files.join("ca.crt")).expect("ca.crt");
        std::fs::write(files.join("namespace"), namespace).expect("namespace");
        let (host, port) = api.address.rsplit_once(':').expect("host:port");
        vec![
            ("KUBERNETES_SERVICE_HOST".to_string(), host.to_string()),
            ("KUBERNETES_SERVICE_PORT".to_string(), port.to_string()),
        ]
    }

    /// `uid:gid` the image runs as.
    pub fn user(&self) -> String {
        let user = &self.spec["process"]["user"];
        format!("{}:{}", user["uid"], user["gid"])
    }

    /// The entrypoint with `args` after it (as a pod's `args` replace the image's command), run
    /// as the image's user with only the image's environment and `env`, the root read-only and
    /// each `(host directory, path in the image)` volume bound writable.
    pub fn command(
        &self,
        args: &[&str],
        env: &[(String, String)],
        volumes: &[(&Path, &str)],
    ) -> Command {
        let entrypoint: Vec<String> = self.spec["process"]["args"]
            .as_array()
            .expect("args")
            .iter()
            .map(|a| a.as_str().expect("string arg").to_string())
            .collect();
        // The image's PATH is the process's; the host's tools are found with the host's.
        let mut script = format!(
            r#"set -e; image_path=$PATH; PATH={}; chroot=$(command -v chroot); root=$1; user=$2; shift 2; mount --bind "$root" "$root"; "#,
            std::env::var("PATH").expect("PATH")
        );
        script.push_str(DEVICES);
        for (host, path) in volumes {
            script.push_str(&format!(
                "mount --bind '{}' \"$root\"'{}'; ",
                host.display(),
                path
            ));
        }
        script.push_str(r#"mount -o remount,bind,ro "$root"; PATH=$image_path; exec "$chroot" --userspec="$user" "$root" "$@""#);
        let mut command = Command::new(host_tool("unshare"));
        command
            .args(["--mount", "--propagation", "private", "--"])
            .arg(host_tool("sh"))
            .args(["-c", &script, "sh"])
            .arg(self.rootfs())
            .arg(self.user())
            .args(&entrypoint)
            .args(args)
            .env_clear()
            .envs(self.env())
            .envs(env.iter().map(|(k, v)| (k, v)));
        command
    }
}

/// `["NAME=value", ...]`, as image and runtime configurations list an environment.
pub fn env_pairs(list: &Value) -> Vec<(String, String)> {
    list.as_array()
        .expect("an environment list")
        .iter()
        .filter_map(|e| e.as_str()?.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The effective user id, from /proc (no libc call needed).
fn effective_uid() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    uid_of(&status)
}

/// The effective uid in a /proc/PID/status text.
pub fn uid_of(status: &str) -> u32 {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        .and_then(|uid| uid.parse().ok())
        .expect("a Uid line")
}

/// What every runtime gives a container beside its image: a /dev with the basic devices
/// (a static binary's random numbers come from /dev/urandom) and /proc.
const DEVICES: &str = r#"mkdir -p "$root/dev" "$root/proc"; mount -t tmpfs -o nosuid,mode=755 tmpfs "$root/dev"; for device in null zero full random urandom tty; do touch "$root/dev/$device"; mount --bind "/dev/$device" "$root/dev/$device"; done; mount -t proc proc "$root/proc"; "#;

/// A program on this process's PATH (the container's environment replaces it in the child).
fn host_tool(name: &str) -> PathBuf {
    std::env::split_paths(&std::env::var_os("PATH").expect("PATH"))
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
        .unwrap_or_else(|| panic!("{name} is not on PATH"))
}
