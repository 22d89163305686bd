//! A throwaway etcd on loopback ports, for the tests of any crate: one member
//! ([`EtcdProcess`]), or a cluster of up to three for fault tests ([`EtcdCluster`]).
//!
//! It runs the `etcd` binary of Debian's `etcd-server` package (etcd 3.4), or the one named
//! by `LARIAT_ETCD`, with a fresh data directory, and kills it when dropped. A missing binary
//! is an error that says how to install it: tests that need etcd fail rather than skip.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long etcd may take to elect itself and answer `/health`.
const START_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "the etcd binary was not found ({0}); install it with `apt-get install -y etcd-server` \
         (or point LARIAT_ETCD at one)"
    )]
    NotInstalled(String),
    #[error("cannot prepare etcd's directory {path}")]
    PrepareDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot pick free loopback ports")]
    PickPorts(#[source] std::io::Error),
    #[error("cannot start {binary}")]
    Spawn {
        binary: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("etcd exited while starting ({status}); its log ends with:\n{log}")]
    Exited { status: String, log: String },
    #[error("etcd was not healthy within {timeout:?}; its log ends with:\n{log}")]
    Unhealthy { timeout: Duration, log: String },
}

/// A running etcd, killed (and its data removed) on drop.
pub struct EtcdProcess {
    child: Child,
    endpoint: String,
    dir: PathBuf,
}

impl EtcdProcess {
    /// Starts etcd from `LARIAT_ETCD` or the `PATH` and waits until it is healthy.
    pub fn start() -> Result<EtcdProcess, Error> {
        EtcdProcess::start_binary(&find_binary()?)
    }

    /// Starts the given etcd binary and waits until it is healthy.
    pub fn start_binary(binary: &Path) -> Result<EtcdProcess, Error> {
        if !binary.is_file() {
            return Err(Error::NotInstalled(format!(
                "{} does not exist",
                binary.display()
            )));
        }
        // Ports are picked by binding port 0 and released before etcd binds them, so another
        // process can take one in between; etcd then exits and a retry picks new ones.
        let mut attempt = 0;
        loop {
            attempt += 1;
            match EtcdProcess::try_start(binary) {
                Err(Error::Exited { log, .. })
                    if attempt < 3 && log.contains("address already in use") =>
                {
                    continue;
                }
                result => return result,
            }
        }
    }

    /// The client URL, `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        self.endpoint.clone()
    }

    /// The client URLs, as [`crate::etcd::EtcdStore::connect`] takes them.
    pub fn endpoints(&self) -> Vec<String> {
        vec![self.endpoint.clone()]
    }

    fn try_start(binary: &Path) -> Result<EtcdProcess, Error> {
        let dir = unique_dir()?;
        let [client, peer] = free_ports::<2>()?;
        let member = Member {
            name: "lariat-test".into(),
            client,
            peer,
        };
        let mut child = member.spawn(binary, &dir, &member.initial_cluster_entry())?;
        member.wait_healthy(&mut child, &dir)?;
        Ok(EtcdProcess {
            child,
            endpoint: member.endpoint(),
            dir,
        })
    }
}

/// One member of a test etcd: its name and loopback ports.
struct Member {
    name: String,
    client: u16,
    peer: u16,
}

impl Member {
    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client)
    }

    fn initial_cluster_entry(&self) -> String {
        format!("{}=http://127.0.0.1:{}", self.name, self.peer)
    }

    /// Starts the member on its data directory under `dir` (kept across restarts), logging
    /// to `dir/<name>.log`.
    fn spawn(&self, binary: &Path, dir: &Path, initial_cluster: &str) -> Result<Child, Error> {
        let endpoint = self.endpoint();
        let peer_url = format!("http://127.0.0.1:{}", self.peer);
        let log_path = self.log_path(dir);
        let log = File::options()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|source| Error::PrepareDir {
                path: log_path.clone(),
                source,
            })?;
        let log_err = log.try_clone().map_err(|source| Error::PrepareDir {
            path: log_path.clone(),
            source,
        })?;
        let data_dir = dir.join(format!("{}.data", self.name));
        Command::new(binary)
            .args(["--name", &self.name])
            .arg("--data-dir")
            .arg(&data_dir)
            .args(["--listen-client-urls", &endpoint])
            .args(["--advertise-client-urls", &endpoint])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", initial_cluster])
            .args(["--initial-cluster-state", "new"])
            .args([
                "--logger",
                "zap",
                "--log-outputs",
                "stderr",
                "--log-level",
                "warn",
            ])
            // etcd 3.4 refuses to run on architectures other than amd64 and ppc64le unless
            // this names the architecture (arm64 on a Raspberry Pi or a Graviton, say).
            .env("ETCD_UNSUPPORTED_ARCH", go_arch())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .map_err(|source| Error::Spawn {
                binary: binary.to_path_buf(),
                source,
            })
    }

    fn log_path(&self, dir: &Path) -> PathBuf {
        dir.join(format!("{}.log", self.name))
    }

    fn wait_healthy(&self, child: &mut Child, dir: &Path) -> Result<(), Error> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(Error::Exited {
                    status: status.to_string(),
                    log: log_tail(&self.log_path(dir)),
                });
            }
            if healthy(self.client) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Error::Unhealthy {
                    timeout: START_TIMEOUT,
                    log: log_tail(&self.log_path(dir)),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A throwaway etcd cluster of several members on loopback ports, for fault tests: members
/// can be killed (SIGKILL) and started again on their data.
pub struct EtcdCluster {
    binary: PathBuf,
    dir: PathBuf,
    members: Vec<(Member, Option<Child>)>,
}

impl EtcdCluster {
    /// Starts `size` members (up to 3) from `LARIAT_ETCD` or the `PATH` and waits until all
    /// are healthy.
    pub fn start(size: usize) -> Result<EtcdCluster, Error> {
        assert!(
            (1..=3).contains(&size),
            "a test etcd cluster has 1 to 3 members"
        );
        let binary = find_binary()?;
        let dir = unique_dir()?;
        let ports = free_ports::<6>()?;
        let members: Vec<Member> = (0..size)
            .map(|i| Member {
                name: format!("member-{i}"),
                client: ports[2 * i],
                peer: ports[2 * i + 1],
            })
            .collect();
        let initial_cluster = members
            .iter()
            .map(Member::initial_cluster_entry)
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = EtcdCluster {
            binary,
            dir,
            members: Vec::new(),
        };
        // All at once: a member is healthy only once a quorum of its peers has elected a leader.
        for member in members {
            let child = member.spawn(&cluster.binary, &cluster.dir, &initial_cluster)?;
            cluster.members.push((member, Some(child)));
        }
        for i in 0..cluster.members.len() {
            cluster.wait_healthy(i)?;
        }
        Ok(cluster)
    }

    /// Every member's client URL, comma-separated, as `--datastore-endpoint` takes them.
    pub fn endpoints(&self) -> String {
        self.members
            .iter()
            .map(|(member, _)| member.endpoint())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Kills member `i` with SIGKILL (it keeps its data).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].1.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts member `i` again on its data; it is healthy once it has a quorum (see
    /// [`EtcdCluster::wait_healthy`]).
    pub fn restart(&mut self, i: usize) -> Result<(), Error> {
        self.kill(i);
        let initial_cluster = self
            .members
            .iter()
            .map(|(member, _)| member.initial_cluster_entry())
            .collect::<Vec<_>>()
            .join(",");
        let child = self.members[i]
            .0
            .spawn(&self.binary, &self.dir, &initial_cluster)?;
        self.members[i].1 = Some(child);
        Ok(())
    }

    /// Replaces member `i`'s data with a snapshot (`etcdctl snapshot save`) and starts it on
    /// that, as an operator restores one: `etcdctl snapshot restore` into a new data
    /// directory, under the member's own name and peer URL. For a one-member cluster.
    pub fn restore(&mut self, i: usize, snapshot: &Path) -> Result<(), Error> {
        self.kill(i);
        let (member, _) = &self.members[i];
        let data_dir = self.dir.join(format!("{}.data", member.name));
        std::fs::remove_dir_all(&data_dir).map_err(|source| Error::PrepareDir {
            path: data_dir.clone(),
            source,
        })?;
        let etcdctl = self.binary.with_file_name("etcdctl");
        let restored = Command::new(&etcdctl)
            .env("ETCDCTL_API", "3")
            .env("ETCD_UNSUPPORTED_ARCH", go_arch())
            .args(["snapshot", "restore"])
            .arg(snapshot)
            .arg("--data-dir")
            .arg(&data_dir)
            .args(["--name", &member.name])
            .args(["--initial-cluster", &member.initial_cluster_entry()])
            .args([
                "--initial-advertise-peer-urls",
                &format!("http://127.0.0.1:{}", member.peer),
            ])
            .output()
            .map_err(|source| Error::Spawn {
                binary: etcdctl.clone(),
                source,
            })?;
        if !restored.status.success() {
            return Err(Error::Exited {
                status: restored.status.to_string(),
                log: String::from_utf8_lossy(&restored.stderr).into_owned(),
            });
        }
        self.restart(i)?;
        self.wait_healthy(i)
    }

    /// Waits until member `i` answers `/health` as part of a cluster with a leader.
    pub fn wait_healthy(&mut self, i: usize) -> Result<(), Error> {
        let (member, child) = &mut self.members[i];
        match child {
            Some(child) => member.wait_healthy(child, &self.dir),
            None => Err(Error::Exited {
                status: "killed".into(),
                log: log_tail(&member.log_path(&self.dir)),
            }),
        }
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for EtcdProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn find_binary() -> Result<PathBuf, Error> {
    if let Some(binary) = std::env::var_os("LARIAT_ETCD") {
        return Ok(PathBuf::from(binary));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("etcd"))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| Error::NotInstalled("no `etcd` on the PATH".into()))
}

fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "powerpc64" => "ppc64le",
        "s390x" => "s390x",
        other => other,
    }
}

fn unique_dir() -> Result<PathBuf, Error> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.subsec_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!(
        "lariat-etcd-{}-{}-{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).map_err(|source| Error::PrepareDir {
        path: dir.clone(),
        source,
    })?;
    Ok(dir)
}

fn free_ports<const N: usize>() -> Result<[u16; N], Error> {
    // The listeners are all held at once so the ports differ.
    let listeners = (0..N)
        .map(|_| TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))))
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(Error::PickPorts)?;
    let mut ports = [0; N];
    for (port, listener) in ports.iter_mut().zip(&listeners) {
        *port = listener.local_addr().map_err(Error::PickPorts)?.port();
    }
    Ok(ports)
}

/// etcd answers `/health` with `"health":"true"` once it has a leader and serves requests.
fn healthy(port: u16) -> bool {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let Ok(mut stream) = TcpStream::connect_timeout(&address, Duration::from_millis(500)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response.contains("\"health\":\"true\"")
}

fn log_tail(path: &Path) -> String {
    let log = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_binary_says_how_to_install_etcd() {
        let error = EtcdProcess::start_binary(Path::new("/nonexistent/etcd"))
            .err()
            .expect("a missing binary cannot start");
        assert!(
            error.to_string().contains("apt-get install -y etcd-server"),
            "{error}"
        );
    }
}
