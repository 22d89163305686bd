//! The embedded backend: a revision log in SQLite (WAL), written by one thread with group commit.
//!
//! # Layout
//!
//! * `log` holds one row per write. Its `INTEGER PRIMARY KEY AUTOINCREMENT` is the revision, so
//!   revisions are never reused, even after compaction removed the newest rows. A row records
//!   the key, the value, the key's `create_revision`, the revision of the key's previous live
//!   row (`prev_revision`, `0` for a create) and whether it is a deletion (a tombstone, whose
//!   value is empty: the deleted value is the previous row's).
//! * `current` maps each live key to its latest revision, so that reads of the latest state
//!   (get, count, list at the head) are plain range scans and never group the history.
//! * `meta` keeps the compaction point. Reads at a revision below it fail with
//!   [`Error::Compacted`]; reads at or above it work.
//!
//! # Writes
//!
//! One thread owns the only write connection. Concurrent writes queue to it, and everything
//! queued when it wakes (up to [`SqliteOptions::max_batch`]) commits as one transaction, so
//! many acknowledged writes share one fsync (`synchronous=FULL`: a write is acknowledged only
//! once it is durable). After the commit the thread publishes the batch's events to live
//! watchers.
//!
//! # Watch
//!
//! A watcher subscribes to the live events first and then replays the log after its revision
//! (in pages), dropping live events it already replayed: anything committed after the replay's
//! snapshot is published after the subscription, so nothing falls in between. Live events
//! reach only the watchers whose prefix holds their key (`routes.rs`). A watcher that falls
//! more than [`SqliteOptions::watch_buffer`] changes behind does not fail: its queue is
//! dropped and it catches up from the log again. Only when the history it still needs has
//! been compacted meanwhile does its stream yield [`Error::Compacted`] and end; the caller
//! re-lists.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::progress::Progress;
use crate::routes::{Delivery, Routes, Subscription};
use crate::{
    Error, Event, EventKind, KeyValue, ListOptions, ListResult, Page, Result, Revision, Store,
    WatchStream, prefix_end, range_start,
};

/// Tuning knobs of [`SqliteStore`]; the defaults suit a single API server.
#[derive(Clone, Debug)]
pub struct SqliteOptions {
    /// Connections serving reads concurrently (WAL lets them run beside the writer).
    pub read_connections: usize,
    /// The most writes committed in one transaction.
    pub max_batch: usize,
    /// Changes queued per live watcher before a slow one falls back to the log.
    pub watch_buffer: usize,
    /// How long a connection waits for a lock held by another process before failing.
    pub busy_timeout: std::time::Duration,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            read_connections: 4,
            max_batch: 1024,
            watch_buffer: 4096,
            busy_timeout: std::time::Duration::from_secs(5),
        }
    }
}

/// A [`Store`] in one SQLite database file (plus its `-wal` and `-shm` companions).
///
/// Dropping it finishes the writes already queued and closes the database; watch streams still
/// open then end with [`Error::Unavailable`].
pub struct SqliteStore {
    writes: Option<mpsc::UnboundedSender<Request>>,
    writer: Option<JoinHandle<()>>,
    readers: Arc<ReadPool>,
    routes: Arc<Routes>,
    head: Arc<AtomicI64>,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS log (
    revision INTEGER PRIMARY KEY AUTOINCREMENT,
    key BLOB NOT NULL,
    value BLOB NOT NULL,
    create_revision INTEGER NOT NULL,
    prev_revision INTEGER NOT NULL,
    deleted INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS log_key_revision ON log (key, revision);
CREATE TABLE IF NOT EXISTS current (
    key BLOB PRIMARY KEY,
    revision INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT OR IGNORE INTO meta (name, value) VALUES ('schema_version', 1), ('compact_revision', 0);
";

/// The database holds every object (Secrets encrypted, the rest not): it is created, or
/// narrowed, to mode 0600 before SQLite opens it, and SQLite gives its `-wal` and `-shm`
/// files the database file's mode.
fn restrict_to_owner(path: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let io = |e: std::io::Error| Error::Internal(format!("{}: {e}", path.display()));
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(path)
            .map_err(io)?;
        let with_suffix = |suffix: &str| {
            let mut name = path.as_os_str().to_owned();
            name.push(suffix);
            std::path::PathBuf::from(name)
        };
        for file in [path.to_path_buf(), with_suffix("-wal"), with_suffix("-shm")] {
            match std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(e)),
            }
        }
    }
    Ok(())
}

/// Rows a watcher reads from the log per query while catching up, and the most bytes of
/// values such a page holds (a page of large objects is cut short: a watcher's memory is
/// bounded by bytes, not by rows alone).
const REPLAY_PAGE: usize = 512;
const REPLAY_BYTES: usize = 8 * 1024 * 1024;

/// Copies the database at `path` to `to` (a file that must not exist) while servers may be
/// writing to it: `VACUUM INTO` reads one consistent snapshot in a read transaction (WAL lets
/// the writer go on meanwhile) and writes a compact copy, readable as a database of its own.
pub fn backup(path: &Path, to: &Path) -> Result<()> {
    if !path.exists() {
        return Err(Error::Internal(format!(
            "{}: no such database",
            path.display()
        )));
    }
    if to.metadata().is_ok_and(|m| m.len() > 0) {
        return Err(Error::Internal(format!("{}: already exists", to.display())));
    }
    // Opened read-write only so that SQLite may map the WAL index of a stopped server's
    // database; the copy reads, and never writes, the source.
    let conn = Connection::open(path).map_err(sql)?;
    conn.busy_timeout(std::time::Duration::from_secs(30))
        .map_err(sql)?;
    let target = to
        .to_str()
        .ok_or_else(|| Error::Internal(format!("{}: not a UTF-8 path", to.display())))?;
    // Created empty and private first: the copy holds Secrets (encrypted) and credential
    // records, and is never readable by others, not even while it is written.
    restrict_to_owner(to)?;
    conn.execute("VACUUM INTO ?1", [target]).map_err(sql)?;
    Ok(())
}

impl SqliteStore {
    /// Opens (or creates) the database at `path` with default options.
    pub fn open(path: &Path) -> Result<SqliteStore> {
        SqliteStore::open_with(path, SqliteOptions::default())
    }

    pub fn open_with(path: &Path, options: SqliteOptions) -> Result<SqliteStore> {
        restrict_to_owner(path)?;
        let mut conn = Connection::open(path).map_err(sql)?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
            .map_err(sql)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(Error::Internal(format!(
                "{}: cannot enable WAL (journal_mode is {mode})",
                path.display()
            )));
        }
        // FULL makes every commit fsync the WAL: a write is acknowledged only once durable.
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(sql)?;
        conn.busy_timeout(options.busy_timeout).map_err(sql)?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql)?;
        tx.execute_batch(SCHEMA).map_err(sql)?;
        let head = read_head(&tx).map_err(sql)?;
        tx.commit().map_err(sql)?;

        let head = Arc::new(AtomicI64::new(head));
        let routes = Routes::new(options.watch_buffer);
        let (writes, requests) = mpsc::unbounded_channel();
        let writer = {
            let routes = routes.clone();
            let head = head.clone();
            let max_batch = options.max_batch.max(1);
            std::thread::Builder::new()
                .name("lariat-store-writer".into())
                .spawn(move || run_writer(conn, requests, routes, head, max_batch))
                .map_err(|e| Error::Internal(format!("cannot start the writer thread: {e}")))?
        };
        let readers = Arc::new(ReadPool {
            path: path.to_path_buf(),
            busy_timeout: options.busy_timeout,
            idle: Mutex::new(Vec::new()),
            permits: Semaphore::new(options.read_connections.max(1)),
        });
        Ok(SqliteStore {
            writes: Some(writes),
            writer: Some(writer),
            readers,
            routes,
            head,
        })
    }

    async fn write(&self, op: Op) -> Result<Applied> {
        let (reply, response) = oneshot::channel();
        self.writes
            .as_ref()
            .and_then(|writes| writes.send(Request { op, reply }).ok())
            .ok_or_else(writer_gone)?;
        response.await.map_err(|_| writer_gone())?
    }

    async fn write_kv(&self, op: Op) -> Result<KeyValue> {
        match self.write(op).await? {
            Applied::Write(event) => Ok(event.kv),
            Applied::Compacted => Err(Error::Internal(
                "a write was applied as a compaction".into(),
            )),
        }
    }
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        // Closing the queue lets the writer finish what is queued and close the database, so
        // that reopening the same file right after a drop finds every acknowledged write.
        self.writes.take();
        if let Some(writer) = self.writer.take()
            && writer.join().is_err()
        {
            tracing::error!("the sqlite writer thread panicked");
        }
        // The writer closes them when it finishes; a writer that panicked did not.
        self.routes.close();
    }
}

fn writer_gone() -> Error {
    Error::Unavailable("the sqlite writer has stopped".into())
}

fn sql(e: impl std::fmt::Display) -> Error {
    Error::Internal(format!("sqlite: {e}"))
}

#[async_trait]
impl Store for SqliteStore {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        let key = key.to_owned();
        self.readers
            .with_point(move |conn| current_kv(conn, &key).map_err(sql))
            .await
    }

    async fn list(&self, prefix: &str, options: ListOptions) -> Result<ListResult> {
        let prefix = prefix.to_owned();
        self.readers
            .with(move |conn| list(conn, &prefix, &options))
            .await
    }

    async fn count(&self, prefix: &str) -> Result<i64> {
        let (lo, hi) = (prefix.as_bytes().to_vec(), prefix_end(prefix.as_bytes()));
        self.readers
            .with(move |conn| {
                conn.prepare_cached("SELECT COUNT(*) FROM current WHERE key >= ?1 AND key < ?2")
                    .and_then(|mut stmt| stmt.query_row(params![lo, hi], |row| row.get(0)))
                    .map_err(sql)
            })
            .await
    }

    async fn create(&self, key: &str, value: Vec<u8>) -> Result<KeyValue> {
        let op = Op::Create {
            key: key.to_owned(),
            value,
        };
        self.write_kv(op).await
    }

    async fn update(&self, key: &str, value: Vec<u8>, expected: Revision) -> Result<KeyValue> {
        let op = Op::Update {
            key: key.to_owned(),
            value,
            expected,
        };
        self.write_kv(op).await
    }

    async fn delete(&self, key: &str, expected: Revision) -> Result<KeyValue> {
        let op = Op::Delete {
            key: key.to_owned(),
            expected,
        };
        self.write_kv(op).await
    }

    async fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream> {
        self.watch_from(prefix, after, None).await
    }

    async fn watch_with_progress(
        &self,
        prefix: &str,
        after: Revision,
        every: Duration,
    ) -> Result<WatchStream> {
        self.watch_from(prefix, after, Some(every)).await
    }

    async fn current_revision(&self) -> Result<Revision> {
        Ok(self.head.load(Ordering::SeqCst))
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.write(Op::Compact { revision }).await.map(drop)
    }
}

impl SqliteStore {
    async fn watch_from(
        &self,
        prefix: &str,
        after: Revision,
        progress_every: Option<Duration>,
    ) -> Result<WatchStream> {
        let mut watcher = Watcher {
            readers: self.readers.clone(),
            lo: prefix.as_bytes().to_vec(),
            hi: prefix_end(prefix.as_bytes()),
            // Subscribing before reading the log is what leaves no gap (see the module doc).
            live: self.routes.subscribe(prefix.as_bytes()),
            last: after,
            pending: VecDeque::new(),
            catching_up: true,
            done: false,
            progress: progress_every.map(|every| Progress::new(every, after)),
        };
        // Reading the first page now reports a compacted start revision as an error of this
        // call rather than of the stream.
        watcher.catch_up().await?;
        Ok(futures::stream::unfold(watcher, |mut watcher| async move {
            let item = watcher.next().await?;
            Some((item, watcher))
        })
        .boxed())
    }
}

fn to_key(bytes: Vec<u8>) -> rusqlite::Result<String> {
    String::from_utf8(bytes).map_err(|e| rusqlite::Error::Utf8Error(e.utf8_error()))
}

/// The highest revision ever assigned: `sqlite_sequence` remembers it even when compaction
/// removed that row, which is what keeps revisions from being reused.
fn read_head(conn: &Connection) -> rusqlite::Result<Revision> {
    conn.prepare_cached(
        "SELECT MAX(COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'log'), 0),
                    COALESCE((SELECT MAX(revision) FROM log), 0))",
    )?
    .query_row([], |row| row.get(0))
}

fn read_compacted(conn: &Connection) -> rusqlite::Result<Revision> {
    conn.prepare_cached("SELECT value FROM meta WHERE name = 'compact_revision'")?
        .query_row([], |row| row.get(0))
}

fn current_kv(conn: &Connection, key: &str) -> rusqlite::Result<Option<KeyValue>> {
    conn.prepare_cached(
        "SELECT l.value, l.create_revision, l.revision
         FROM current c JOIN log l ON l.revision = c.revision WHERE c.key = ?1",
    )?
    .query_row([key.as_bytes()], |row| {
        Ok(KeyValue {
            key: key.to_owned(),
            value: row.get(0)?,
            create_revision: row.get(1)?,
            mod_revision: row.get(2)?,
        })
    })
    .optional()
}

fn list(conn: &mut Connection, prefix: &str, options: &ListOptions) -> Result<ListResult> {
    // One read transaction is one WAL snapshot: the head, the compaction point and the rows
    // all describe the same moment.
    let tx = conn.transaction().map_err(sql)?;
    let head = read_head(&tx).map_err(sql)?;
    let compacted = read_compacted(&tx).map_err(sql)?;
    let revision = if options.revision == 0 {
        head
    } else {
        options.revision
    };
    if revision < compacted {
        return Err(Error::Compacted {
            requested: revision,
            compacted,
        });
    }
    if revision > head {
        return Err(Error::Internal(format!(
            "revision {revision} is in the future (the latest is {head})"
        )));
    }
    let lo = range_start(
        prefix.as_bytes(),
        options.start_after.as_deref().map(str::as_bytes),
    );
    let hi = prefix_end(prefix.as_bytes());
    // One item beyond the page tells whether there are more.
    let wanted = match options.limit {
        0 => -1,
        limit => i64::try_from(limit.saturating_add(1)).unwrap_or(-1),
    };
    let mut page = Page::new(options);
    if revision == head {
        let mut stmt = tx
            .prepare_cached(
                "SELECT c.key, l.value, l.create_revision, l.revision
                 FROM current c JOIN log l ON l.revision = c.revision
                 WHERE c.key >= ?1 AND c.key < ?2 ORDER BY c.key LIMIT ?3",
            )
            .map_err(sql)?;
        let rows = stmt
            .query_map(params![lo, hi, wanted], |row| {
                Ok(KeyValue {
                    key: to_key(row.get(0)?)?,
                    value: row.get(1)?,
                    create_revision: row.get(2)?,
                    mod_revision: row.get(3)?,
                })
            })
            .map_err(sql)?;
        for row in rows {
            let kv = row.map_err(sql)?;
            if !page.has_room() {
                break;
            }
            page.push(kv);
        }
    } else {
        // An older revision: each key's latest row at or below it, skipping tombstones. The
        // grouping walks the (key, revision) index in key order, so the limit stops it early.
        let mut keys = tx
            .prepare_cached(
                "SELECT MAX(revision) FROM log
                 WHERE key >= ?1 AND key < ?2 AND revision <= ?3 GROUP BY key ORDER BY key",
            )
            .map_err(sql)?;
        let mut row_at = tx
            .prepare_cached(
                "SELECT key, value, create_revision, deleted FROM log WHERE revision = ?1",
            )
            .map_err(sql)?;
        let mut latest = keys.query(params![lo, hi, revision]).map_err(sql)?;
        while let Some(row) = latest.next().map_err(sql)? {
            let at: Revision = row.get(0).map_err(sql)?;
            let (kv, deleted) = row_at
                .query_row([at], |row| {
                    let kv = KeyValue {
                        key: to_key(row.get(0)?)?,
                        value: row.get(1)?,
                        create_revision: row.get(2)?,
                        mod_revision: at,
                    };
                    Ok((kv, row.get::<_, bool>(3)?))
                })
                .map_err(sql)?;
            if deleted {
                continue;
            }
            if !page.has_room() {
                break;
            }
            page.push(kv);
        }
    }
    Ok(page.finish(revision))
}

/// A small pool of read connections, each used by one blocking task at a time.
struct ReadPool {
    path: PathBuf,
    busy_timeout: std::time::Duration,
    idle: Mutex<Vec<Connection>>,
    permits: Semaphore,
}

impl ReadPool {
    async fn with<T, F>(self: &Arc<Self>, read: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| Error::Unavailable("the sqlite store is closed".into()))?;
        let pool = self.clone();
        tokio::task::spawn_blocking(move || {
            let mut conn = match pool.take_idle() {
                Some(conn) => conn,
                None => pool.open().map_err(sql)?,
            };
            let result = read(&mut conn);
            pool.put_idle(conn);
            result
        })
        .await
        .map_err(|e| Error::Internal(format!("sqlite read task failed: {e}")))?
    }

    /// A read of one key by its primary key: a few microseconds from SQLite's page cache, less
    /// than handing it to a blocking thread and back costs (two thread wake-ups; a profile of
    /// `bench api` found them a fifth of the server's CPU). It runs on the calling thread when
    /// a connection is idle, else as [`ReadPool::with`] does. In WAL mode a reader does not
    /// wait for the writer.
    async fn with_point<T, F>(self: &Arc<Self>, read: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    {
        if let Ok(_permit) = self.permits.try_acquire()
            && let Some(mut conn) = self.take_idle()
        {
            let result = read(&mut conn);
            self.put_idle(conn);
            return result;
        }
        self.with(read).await
    }

    fn take_idle(&self) -> Option<Connection> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop()
    }

    fn put_idle(&self, conn: Connection) {
        self.idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(conn);
    }

    fn open(&self) -> rusqlite::Result<Connection> {
        let conn = Connection::open(&self.path)?;
        conn.busy_timeout(self.busy_timeout)?;
        conn.pragma_update(None, "query_only", true)?;
        Ok(conn)
    }
}

struct Watcher {
    readers: Arc<ReadPool>,
    lo: Vec<u8>,
    hi: Vec<u8>,
    live: Subscription,
    /// The revision of the last event queued (replayed or live); later ones are new.
    last: Revision,
    pending: VecDeque<Event>,
    catching_up: bool,
    done: bool,
    /// When the watch reports its progress (`Store::watch_with_progress`).
    progress: Option<Progress>,
}

impl Watcher {
    async fn next(&mut self) -> Option<Result<Event>> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(Ok(event));
            }
            if self.done {
                return None;
            }
            if self.catching_up {
                if let Err(e) = self.catch_up().await {
                    self.done = true;
                    return Some(Err(e));
                }
                continue;
            }
            // A quiet watch reports its progress once it is due, whether or not more comes.
            let delivery = match self.progress.as_ref().map(Progress::due) {
                Some(at) => tokio::select! {
                    biased;
                    delivery = self.live.recv() => delivery,
                    _ = tokio::time::sleep_until(at.into()) => {
                        // Read before looking at the queue: every change up to it is queued
                        // for this watcher or already delivered (or it was told it lagged).
                        let routed = self.live.routed();
                        if self.live.has_pending() {
                            continue;
                        }
                        // A replay may have read past what is routed yet: every change of the
                        // prefix up to `last` has been delivered then.
                        let report = self.progress.as_mut().and_then(|p| p.report(routed.max(self.last)));
                        if let Some(event) = report {
                            return Some(Ok(event));
                        }
                        continue;
                    }
                },
                None => self.live.recv().await,
            };
            match delivery {
                Delivery::Events(events) => {
                    for event in events {
                        if event.revision() > self.last {
                            self.last = event.revision();
                            self.pending.push_back(Event::clone(&event));
                        }
                    }
                    // Its own events carry the revision; progress is for quiet.
                    if let Some(progress) = &mut self.progress
                        && !self.pending.is_empty()
                    {
                        progress.delivered(self.last);
                    }
                }
                Delivery::Lagged => {
                    tracing::debug!(last = self.last, "watcher lagged, replaying the log");
                    self.catching_up = true;
                }
                Delivery::Closed => {
                    self.done = true;
                    return Some(Err(Error::Unavailable("the sqlite store is closed".into())));
                }
            }
        }
    }

    /// Queues the next page of logged events after `last`; a short page means caught up.
    async fn catch_up(&mut self) -> Result<()> {
        let (after, lo, hi) = (self.last, self.lo.clone(), self.hi.clone());
        let page = self
            .readers
            .with(move |conn| replay(conn, after, &lo, &hi))
            .await?;
        self.catching_up = page.len() == REPLAY_PAGE || page_bytes(&page) >= REPLAY_BYTES;
        if let Some(event) = page.last() {
            self.last = event.revision();
        }
        self.pending.extend(page);
        Ok(())
    }
}

fn replay(conn: &mut Connection, after: Revision, lo: &[u8], hi: &[u8]) -> Result<Vec<Event>> {
    let tx = conn.transaction().map_err(sql)?;
    let compacted = read_compacted(&tx).map_err(sql)?;
    if after < compacted {
        return Err(Error::Compacted {
            requested: after,
            compacted,
        });
    }
    // The unary `+` keeps SQLite off the key index: walking the log in revision order from
    // `after` is what a watcher that is nearly caught up needs.
    let mut stmt = tx
        .prepare_cached(
            "SELECT l.revision, l.key, l.value, l.create_revision, l.deleted,
                    p.revision, p.value, p.create_revision
             FROM log l LEFT JOIN log p ON p.revision = l.prev_revision AND l.prev_revision > 0
             WHERE l.revision > ?1 AND +l.key >= ?2 AND +l.key < ?3
             ORDER BY l.revision LIMIT ?4",
        )
        .map_err(sql)?;
    let rows = stmt
        .query_map(params![after, lo, hi, REPLAY_PAGE as i64], |row| {
            let key = to_key(row.get(1)?)?;
            let prev = match row.get::<_, Option<Revision>>(5)? {
                Some(revision) => Some(KeyValue {
                    key: key.clone(),
                    value: row.get(6)?,
                    create_revision: row.get(7)?,
                    mod_revision: revision,
                }),
                None => None,
            };
            let deleted: bool = row.get(4)?;
            let value = match (&prev, deleted) {
                (Some(prev), true) => prev.value.clone(),
                _ => row.get(2)?,
            };
            Ok(Event {
                kind: if deleted {
                    EventKind::Delete
                } else {
                    EventKind::Put
                },
                kv: KeyValue {
                    key,
                    value,
                    create_revision: row.get(3)?,
                    mod_revision: row.get(0)?,
                },
                prev,
            })
        })
        .map_err(sql)?;
    let mut page = Vec::new();
    let mut bytes = 0;
    for row in rows {
        let event = row.map_err(sql)?;
        bytes += event.value_bytes();
        page.push(event);
        if bytes >= REPLAY_BYTES {
            break;
        }
    }
    Ok(page)
}

fn page_bytes(page: &[Event]) -> usize {
    page.iter().map(Event::value_bytes).sum()
}

enum Op {
    Create {
        key: String,
        value: Vec<u8>,
    },
    Update {
        key: String,
        value: Vec<u8>,
        expected: Revision,
    },
    Delete {
        key: String,
        expected: Revision,
    },
    Compact {
        revision: Revision,
    },
}

struct Request {
    op: Op,
    reply: oneshot::Sender<Result<Applied>>,
}

/// What one write did.
enum Applied {
    Write(Event),
    Compacted,
}

fn run_writer(
    mut conn: Connection,
    mut requests: mpsc::UnboundedReceiver<Request>,
    routes: Arc<Routes>,
    head: Arc<AtomicI64>,
    max_batch: usize,
) {
    let mut batch = Vec::with_capacity(max_batch);
    while let Some(first) = requests.blocking_recv() {
        batch.push(first);
        while batch.len() < max_batch {
            match requests.try_recv() {
                Ok(request) => batch.push(request),
                Err(_) => break,
            }
        }
        let (ops, replies): (Vec<Op>, Vec<_>) = batch
            .drain(..)
            .map(|request| (request.op, request.reply))
            .unzip();
        match apply_batch(&mut conn, ops, head.load(Ordering::SeqCst)) {
            Ok((results, new_head)) => {
                head.store(new_head, Ordering::SeqCst);
                // Publishing after the commit, and only when someone listens: a watcher that
                // subscribes after this check reads the log after it, which has the batch.
                let published: Vec<Event> = if !routes.is_empty() {
                    results
                        .iter()
                        .filter_map(|result| match result {
                            Ok(Applied::Write(event)) => Some(event.clone()),
                            _ => None,
                        })
                        .collect()
                } else {
                    Vec::new()
                };
                for (reply, result) in replies.into_iter().zip(results) {
                    // A caller that stopped waiting does not undo its write.
                    let _ = reply.send(result);
                }
                if !published.is_empty() {
                    routes.publish(published);
                }
            }
            Err(e) => {
                tracing::error!(error = %e, writes = replies.len(), "sqlite write batch failed");
                for reply in replies {
                    let _ = reply.send(Err(sql(&e)));
                }
            }
        }
    }
    // The store was dropped: what was queued is written, and open watches end.
    routes.close();
}

type BatchResult = (Vec<Result<Applied>>, Revision);

/// Applies a batch in one transaction. A write refused by its own precondition fails alone;
/// an SQLite error fails (and rolls back) the whole batch.
fn apply_batch(
    conn: &mut Connection,
    ops: Vec<Op>,
    mut head: Revision,
) -> rusqlite::Result<BatchResult> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut results = Vec::with_capacity(ops.len());
    for op in ops {
        results.push(apply(&tx, op, &mut head)?);
    }
    tx.commit()?;
    Ok((results, head))
}

fn apply(tx: &Connection, op: Op, head: &mut Revision) -> rusqlite::Result<Result<Applied>> {
    match op {
        Op::Create { key, value } => {
            if current_kv(tx, &key)?.is_some() {
                return Ok(Err(Error::AlreadyExists(key)));
            }
            let revision = *head + 1;
            insert_row(tx, revision, &key, &value, revision, 0, false)?;
            set_current(tx, &key, revision)?;
            *head = revision;
            Ok(Ok(put(key, value, revision, revision, None)))
        }
        Op::Update {
            key,
            value,
            expected,
        } => {
            let Some(current) = current_kv(tx, &key)? else {
                return Ok(Err(Error::NotFound(key)));
            };
            if current.mod_revision != expected {
                return Ok(Err(Error::Conflict {
                    key,
                    expected,
                    current: Some(current),
                }));
            }
            let revision = *head + 1;
            let created = current.create_revision;
            insert_row(
                tx,
                revision,
                &key,
                &value,
                created,
                current.mod_revision,
                false,
            )?;
            set_current(tx, &key, revision)?;
            *head = revision;
            Ok(Ok(put(key, value, created, revision, Some(current))))
        }
        Op::Delete { key, expected } => {
            let Some(current) = current_kv(tx, &key)? else {
                return Ok(Err(Error::NotFound(key)));
            };
            if expected != 0 && current.mod_revision != expected {
                return Ok(Err(Error::Conflict {
                    key,
                    expected,
                    current: Some(current),
                }));
            }
            let revision = *head + 1;
            insert_row(
                tx,
                revision,
                &key,
                &[],
                current.create_revision,
                current.mod_revision,
                true,
            )?;
            tx.prepare_cached("DELETE FROM current WHERE key = ?1")?
                .execute([key.as_bytes()])?;
            *head = revision;
            let kv = KeyValue {
                key,
                value: current.value.clone(),
                create_revision: current.create_revision,
                mod_revision: revision,
            };
            Ok(Ok(Applied::Write(Event {
                kind: EventKind::Delete,
                kv,
                prev: Some(current),
            })))
        }
        Op::Compact { revision } => {
            if revision > *head {
                return Ok(Err(Error::Internal(format!(
                    "cannot compact at revision {revision}: it is in the future (the latest is {})",
                    *head
                ))));
            }
            if revision > read_compacted(tx)? {
                compact(tx, revision)?;
            }
            Ok(Ok(Applied::Compacted))
        }
    }
}

fn put(
    key: String,
    value: Vec<u8>,
    create_revision: Revision,
    mod_revision: Revision,
    prev: Option<KeyValue>,
) -> Applied {
    Applied::Write(Event {
        kind: EventKind::Put,
        kv: KeyValue {
            key,
            value,
            create_revision,
            mod_revision,
        },
        prev,
    })
}

fn insert_row(
    tx: &Connection,
    revision: Revision,
    key: &str,
    value: &[u8],
    create_revision: Revision,
    prev_revision: Revision,
    deleted: bool,
) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT INTO log (revision, key, value, create_revision, prev_revision, deleted)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![
        revision,
        key.as_bytes(),
        value,
        create_revision,
        prev_revision,
        deleted
    ])?;
    Ok(())
}

fn set_current(tx: &Connection, key: &str, revision: Revision) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT INTO current (key, revision) VALUES (?1, ?2)
         ON CONFLICT (key) DO UPDATE SET revision = excluded.revision",
    )?
    .execute(params![key.as_bytes(), revision])?;
    Ok(())
}

/// Keeps what reads at `revision` or later need: every row from `revision` on, and each key's
/// latest row before it unless that row is a tombstone. The superseded rows must go before the
/// tombstones, or a key's older live row would become its latest and resurrect it.
fn compact(tx: &Connection, revision: Revision) -> rusqlite::Result<()> {
    let superseded = tx.execute(
        "DELETE FROM log WHERE revision < ?1 AND revision <
             (SELECT MAX(m.revision) FROM log m WHERE m.key = log.key AND m.revision <= ?1)",
        [revision],
    )?;
    let tombstones = tx.execute(
        "DELETE FROM log WHERE revision <= ?1 AND deleted = 1",
        [revision],
    )?;
    tx.execute(
        "UPDATE meta SET value = ?1 WHERE name = 'compact_revision'",
        [revision],
    )?;
    tracing::debug!(revision, superseded, tombstones, "compacted the sqlite log");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pins the switch from replay to live events: writes committed after a watcher subscribed
    /// but before it read the log arrive both ways, and must be delivered once.
    #[tokio::test]
    async fn a_write_between_subscribing_and_replaying_is_delivered_once() {
        let dir = tempfile::tempdir().unwrap();
        let options = SqliteOptions {
            read_connections: 1,
            ..SqliteOptions::default()
        };
        let store = SqliteStore::open_with(&dir.path().join("store.db"), options).unwrap();
        // Holding the only read permit stops the watch between subscribing and replaying.
        let reads_blocked = store.readers.permits.acquire().await.unwrap();
        let mut starting = store.watch("/k/", 0);
        assert!(futures::poll!(&mut starting).is_pending());
        let a = store.create("/k/a", Vec::new()).await.unwrap();
        let b = store.create("/k/b", Vec::new()).await.unwrap();
        drop(reads_blocked);
        let mut watch = starting.await.unwrap();
        let c = store.create("/k/c", Vec::new()).await.unwrap();
        for expected in [a, b, c] {
            assert_eq!(watch.next().await.unwrap().unwrap().kv, expected);
        }
    }
}
