//! The audit log (`--audit-log-path`): every mutating request and every refusal (401, 403) is
//! one `audit.k8s.io/v1` Event, a JSON line, as kube-apiserver's log backend writes them. The
//! level is `Metadata`: who asked for what on which object, from where, and what was answered.
//! Request and response bodies are never written, so no Secret's data (nor a token a
//! TokenRequest returns) reaches the log. A line is written before its response goes out
//! (kube-apiserver's blocking mode), and the file is rotated by size, keeping a number of
//! backups named as kube-apiserver names them (`audit-2026-12-03T08-15-00.000.log`).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};

use crate::identity::User;

/// What `lariat server --audit-log-*` says.
#[derive(Clone, Debug)]
pub struct AuditConfig {
    pub path: PathBuf,
    /// `--audit-log-maxsize`: megabytes a file may reach before it is rotated.
    pub max_size_megabytes: u64,
    /// `--audit-log-maxbackup`: rotated files kept (the oldest are deleted).
    pub max_backups: usize,
}

pub struct AuditLog {
    config: AuditConfig,
    file: Mutex<Open>,
}

struct Open {
    /// `None` after a failure: the next write opens the path again.
    file: Option<File>,
    size: u64,
    /// The last write's failure, logged once until it changes.
    failure: Option<String>,
}

/// Events that could not be written since start, for `/metrics`.
static FAILURES: AtomicU64 = AtomicU64::new(0);

/// The audit counters in Prometheus text format.
pub fn metrics() -> String {
    format!(
        "# HELP lariat_audit_write_failures_total Audit events that could not be written.\n# TYPE lariat_audit_write_failures_total counter\nlariat_audit_write_failures_total {}\n",
        FAILURES.load(Ordering::Relaxed)
    )
}

/// One request, as the audit log records it.
pub struct Record<'a> {
    pub id: &'a str,
    pub received: chrono::DateTime<chrono::Utc>,
    /// The Kubernetes verb (`create`, `patch`, ...), or the HTTP method of a non-resource path.
    pub verb: &'a str,
    /// What the request is on, as an `objectRef`; `None` for a non-resource path.
    pub object: Option<Value>,
    pub uri: &'a str,
    /// `None`: the request was refused before anyone was authenticated.
    pub user: Option<&'a User>,
    pub impersonated: Option<&'a User>,
    pub source: Option<std::net::IpAddr>,
    pub user_agent: Option<&'a str>,
    pub code: u16,
    /// The refusal's `Status` reason and message.
    pub failure: Option<(String, String)>,
}

impl AuditLog {
    pub fn open(config: AuditConfig) -> Result<AuditLog, String> {
        if config.max_size_megabytes == 0 {
            return Err("--audit-log-maxsize must be at least 1 (megabytes)".into());
        }
        let (file, size) = open(&config.path)?;
        Ok(AuditLog {
            config,
            file: Mutex::new(Open {
                file: Some(file),
                size,
                failure: None,
            }),
        })
    }

    /// Whether a request is audited: every one that may change something, every refusal.
    pub fn wanted(method: &str, code: u16) -> bool {
        !matches!(method, "GET" | "HEAD" | "OPTIONS") || code == 401 || code == 403
    }

    pub fn write(&self, record: &Record<'_>) {
        let mut line = serde_json::to_vec(&event(record)).expect("JSON serializes");
        line.push(b'\n');
        let mut open = self.file.lock().expect("audit log lock");
        let result = self
            .writable(&mut open, line.len() as u64)
            .and_then(|file| {
                file.write_all(&line)
                    .map_err(|e| format!("{}: {e}", self.config.path.display()))
            });
        match result {
            Ok(()) => {
                open.size += line.len() as u64;
                if open.failure.take().is_some() {
                    tracing::info!(path = %self.config.path.display(), "the audit log is written again");
                }
            }
            Err(e) => {
                FAILURES.fetch_add(1, Ordering::Relaxed);
                open.file = None;
                if open.failure.as_deref() != Some(e.as_str()) {
                    tracing::error!(
                        "cannot write the audit log: {e}; requests go on unrecorded until it can be written (lariat_audit_write_failures_total counts them)"
                    );
                    open.failure = Some(e);
                }
            }
        }
    }

    /// The file to append `adding` bytes to: the one open, unless it was moved or deleted
    /// (then the path is opened again, its directory made again if need be), or it is full
    /// (then it is rotated).
    fn writable<'a>(&self, open: &'a mut Open, adding: u64) -> Result<&'a mut File, String> {
        let path = &self.config.path;
        if open.file.as_ref().is_some_and(|file| !is_at(file, path)) {
            open.file = None;
        }
        let limit = self.config.max_size_megabytes * 1024 * 1024;
        if open.file.is_some() && open.size > 0 && open.size + adding > limit {
            let backup = backup_name(path, chrono::Utc::now());
            std::fs::rename(path, &backup)
                .map_err(|e| format!("rotating {}: {e}", path.display()))?;
            open.file = None;
            // 0 keeps every backup, as kube-apiserver's --audit-log-maxbackup.
            if self.config.max_backups > 0 {
                for old in backups(path)
                    .into_iter()
                    .rev()
                    .skip(self.config.max_backups)
                {
                    let _ = std::fs::remove_file(old);
                }
            }
        }
        if open.file.is_none() {
            let (file, size) = self::open(path)?;
            open.file = Some(file);
            open.size = size;
        }
        Ok(open.file.as_mut().expect("opened above"))
    }
}

/// Whether `file` is still the file at `path` (not moved away or deleted).
fn is_at(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(open), Ok(named)) => open.ino() == named.ino() && open.dev() == named.dev(),
        _ => false,
    }
}

/// Opens `path` for appending (its directory made if missing), readable by its owner only:
/// the log names users and what they did. Returns the file and its size.
fn open(path: &Path) -> Result<(File, u64), String> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("{}: cannot make its directory: {e}", path.display()))?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.create(true).append(true);
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let file = options
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let size = file
        .metadata()
        .map_err(|e| format!("{}: {e}", path.display()))?
        .len();
    Ok((file, size))
}

/// `audit.log` rotated at `at` becomes `audit-2026-12-03T08-15-00.000.log` beside it.
fn backup_name(path: &Path, at: chrono::DateTime<chrono::Utc>) -> PathBuf {
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    let extension = path
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    let stamp = at.format("%Y-%m-%dT%H-%M-%S%.3f");
    path.with_file_name(format!("{stem}-{stamp}{extension}"))
}

/// The rotated files of `path`, oldest first (their names sort by time).
fn backups(path: &Path) -> Vec<PathBuf> {
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    let extension = path
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path())
        .filter(|p| {
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            name.strip_prefix(&format!("{stem}-"))
                .and_then(|rest| rest.strip_suffix(&extension))
                .is_some_and(|stamp| {
                    stamp.len() == 23 && stamp.starts_with(|c: char| c.is_ascii_digit())
                })
        })
        .collect();
    found.sort();
    found
}

fn user_info(user: &User) -> Value {
    json!({"username": user.name, "groups": user.groups})
}

fn micro_time(at: chrono::DateTime<chrono::Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

fn event(record: &Record<'_>) -> Value {
    let mut event = json!({
        "kind": "Event",
        "apiVersion": "audit.k8s.io/v1",
        "level": "Metadata",
        "auditID": record.id,
        "stage": if record.code == 101 { "ResponseStarted" } else { "ResponseComplete" },
        "requestURI": record.uri,
        "verb": record.verb,
        "user": record.user.map(user_info).unwrap_or_else(|| json!({})),
        "sourceIPs": record.source.map(|ip| vec![ip.to_string()]).unwrap_or_default(),
        "responseStatus": {"metadata": {}, "code": record.code},
        "requestReceivedTimestamp": micro_time(record.received),
        "stageTimestamp": micro_time(chrono::Utc::now()),
    });
    if let Some(agent) = record.user_agent {
        event["userAgent"] = json!(agent);
    }
    if let Some(user) = record.impersonated {
        event["impersonatedUser"] = user_info(user);
    }
    if let Some(object) = &record.object {
        event["objectRef"] = object.clone();
    }
    if let Some((reason, message)) = &record.failure {
        event["responseStatus"]["status"] = json!("Failure");
        event["responseStatus"]["reason"] = json!(reason);
        event["responseStatus"]["message"] = json!(message);
    }
    if record.user.is_some() {
        let decision = if record.code == 403 {
            "forbid"
        } else {
            "allow"
        };
        event["annotations"] = json!({"authorization.k8s.io/decision": decision});
    }
    event
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record<'a>(user: &'a User, uri: &'a str, code: u16) -> Record<'a> {
        Record {
            id: "id",
            received: chrono::Utc::now(),
            verb: "update",
            object: None,
            uri,
            user: Some(user),
            impersonated: None,
            source: Some("127.0.0.1".parse().unwrap()),
            user_agent: Some("kubectl/v1.33.0"),
            code,
            failure: None,
        }
    }

    #[test]
    fn a_log_moved_or_deleted_is_made_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit/audit.log");
        let log = AuditLog::open(AuditConfig {
            path: path.clone(),
            max_size_megabytes: 1,
            max_backups: 0,
        })
        .unwrap();
        let user = User {
            name: "alice".into(),
            groups: vec![],
        };
        log.write(&record(&user, "/api/v1/namespaces/a/configmaps/one", 201));
        std::fs::rename(&path, dir.path().join("taken.log")).unwrap();
        log.write(&record(&user, "/api/v1/namespaces/a/configmaps/two", 201));
        assert!(std::fs::read_to_string(&path).unwrap().contains("/two"));
        std::fs::remove_dir_all(dir.path().join("audit")).unwrap();
        log.write(&record(&user, "/api/v1/namespaces/a/configmaps/three", 201));
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("/three") && !text.contains("/two"), "{text}");
    }

    #[test]
    fn the_log_rotates_by_size_and_keeps_its_backups() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let log = AuditLog::open(AuditConfig {
            path: path.clone(),
            max_size_megabytes: 1,
            max_backups: 2,
        })
        .unwrap();
        let user = User {
            name: "alice".into(),
            groups: vec!["devs".into()],
        };
        let long = format!("/api/v1/namespaces/a/configmaps/{}", "x".repeat(2000));
        // About 2.3 KB a line: 4 MB needs three rotations; two backups are kept.
        for _ in 0..1800 {
            log.write(&record(&user, &long, 200));
            std::thread::sleep(std::time::Duration::from_micros(600));
        }
        let kept = backups(&path);
        assert_eq!(kept.len(), 2, "{kept:?}");
        for file in kept.iter().chain([&path]) {
            let text = std::fs::read_to_string(file).unwrap();
            assert!(text.len() as u64 <= 1024 * 1024);
            for line in text.lines() {
                let event: Value = serde_json::from_str(line).unwrap();
                assert_eq!(event["apiVersion"], "audit.k8s.io/v1");
                assert_eq!(event["user"]["username"], "alice");
            }
        }
    }
}
