//! `cargo bench -p lariat --bench image`: what shipping lariat costs. The release binary's
//! size, the image's (compressed layers as a registry stores them, and unpacked), and the
//! agent run from the unpacked image as a pod runs it: time from start to its tunnel being
//! up, and its resident memory once connected and after idling. Needs `scripts/release` first,
//! and root (the image runs in a private mount namespace, as `tests/distribution.rs` runs it).

#[path = "../tests/common/mod.rs"]
mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::container::{Container, dist, image_reference, output_of, version};
use common::{TestServer, import_cluster};
use serde_json::Value;

const RUNS: usize = 5;

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// The VmRSS of a process, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmRSS")
        * 1024
}

fn unpacked_bytes(path: &std::path::Path) -> u64 {
    let metadata = std::fs::symlink_metadata(path).expect("metadata");
    if metadata.is_dir() {
        std::fs::read_dir(path)
            .expect("read dir")
            .map(|e| unpacked_bytes(&e.expect("entry").path()))
            .sum()
    } else {
        metadata.len()
    }
}

fn main() {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "lariat bench image: {}, load average {}",
        version(),
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    let binary = dist().join(format!("lariat-{}-linux-amd64", version()));
    println!(
        "release binary: {}",
        mib(std::fs::metadata(&binary).expect("binary").len())
    );
    let manifest: Value = serde_json::from_str(&output_of(Command::new("skopeo").args([
        "inspect",
        "--raw",
        &image_reference(),
    ])))
    .expect("manifest");
    let compressed: u64 = manifest["layers"]
        .as_array()
        .expect("layers")
        .iter()
        .chain([&manifest["config"]])
        .map(|d| d["size"].as_u64().expect("size"))
        .sum();
    let container = Container::unpack();
    println!(
        "image: {} compressed (layers and config, as pushed), {} unpacked",
        mib(compressed),
        mib(unpacked_bytes(&container.rootfs()))
    );

    let management = TestServer::start();
    let downstream = TestServer::start();
    let service_account = container.give_service_account(&downstream, "lariat-system");
    let logs = tempfile::tempdir().unwrap();
    let mut to_tunnel = Vec::new();
    let mut connected_rss = Vec::new();
    let mut idle_rss = Vec::new();
    for run in 0..RUNS {
        let name = format!("bench-{run}");
        let (token, checksum) = import_cluster(&management, &name, "1h");
        // Each run registers anew: the previous agent's credential belongs to another Cluster.
        let _ = downstream.kubectl(&[
            "delete",
            "secret",
            "lariat-agent-credential",
            "-n",
            "lariat-system",
        ]);
        let env: Vec<(String, String)> = [
            ("LARIAT_SERVER", format!("https://{}", management.address)),
            ("LARIAT_TOKEN", token),
            ("LARIAT_CA_CHECKSUM", checksum),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .chain(service_account.iter().cloned())
        .collect();
        let log_path = logs.path().join(format!("{name}.log"));
        let started = Instant::now();
        let mut agent = container
            .command(&["agent"], &env, &[])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log_path).unwrap())
            .spawn()
            .expect("start the agent");
        loop {
            if std::fs::read_to_string(&log_path)
                .unwrap_or_default()
                .contains("tunnel up")
            {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the agent did not connect:\n{}",
                std::fs::read_to_string(&log_path).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        to_tunnel.push(started.elapsed());
        connected_rss.push(rss(agent.id()));
        std::thread::sleep(Duration::from_secs(10));
        idle_rss.push(rss(agent.id()));
        let _ = agent.kill();
        let _ = agent.wait();
    }
    to_tunnel.sort();
    connected_rss.sort();
    idle_rss.sort();
    println!(
        "agent from the image, {RUNS} runs: start to tunnel up median {:.0} ms (min {:.0}, max {:.0}); RSS connected median {}, after 10 s idle median {} (max {})",
        to_tunnel[RUNS / 2].as_secs_f64() * 1e3,
        to_tunnel[0].as_secs_f64() * 1e3,
        to_tunnel[RUNS - 1].as_secs_f64() * 1e3,
        mib(connected_rss[RUNS / 2]),
        mib(idle_rss[RUNS / 2]),
        mib(idle_rss[RUNS - 1]),
    );
}
