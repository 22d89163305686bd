//! The in-memory backend: a store that lives in one process and forgets everything when dropped.
//!
//! It serves the simulated workload clusters of the in-memory infrastructure provider (one
//! store per simulated cluster, thousands of them in a process) and fast tests, with exactly
//! the semantics of the durable backends except durability.
//!
//! # Layout
//!
//! One mutex guards the whole state of a store, so every write is atomic and takes the next
//! revision in the order it is applied:
//!
//! * `current` maps each live key to its latest value.
//! * `log` holds every change after the compaction point, in revision order. A change shares
//!   its values (`Arc`) with `current` and with the change before it, so an update stores its
//!   value once however many places refer to it, and a delete copies nothing.
//! * A list at an older revision starts from `current` and undoes the logged changes after that
//!   revision: the first of them to touch a key carries the key's value at that revision (its
//!   previous value, `None` when it created the key). That is why the log must reach back to
//!   the compaction point, and nothing more is needed; reads below it fail with
//!   [`Error::Compacted`].
//!
//! # Watch
//!
//! No event is sent to a watcher: each one reads the log itself from the revision after the
//! last it delivered, and a `tokio::sync::watch` channel only wakes it after a write. Replaying
//! history and following live writes are therefore one and the same read, so there is no
//! switch-over at which an event could be missed or delivered twice.
//!
//! A slow watcher does not lag behind a buffer: whatever it has not read yet stays in the log,
//! and it reads on (a page at a time, so that it holds the lock briefly) when next polled. As
//! in the SQLite store, only when compaction has dropped history it still needs does its
//! stream yield [`Error::Compacted`] and end; the caller re-lists.
//!
//! # Cost
//!
//! A new store allocates its empty state and one watch channel, a few hundred bytes; it starts
//! no thread and no task and needs no runtime. A watcher is a receiver and a buffer of at most
//! one page (512 changes or 8 MiB of values). As in the other backends, history grows until
//! [`Store::compact`] (the API server compacts periodically), but never beyond the store's
//! history budget ([`DEFAULT_MAX_HISTORY_BYTES`]): past it the oldest changes are compacted at
//! once.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use futures::StreamExt;
use tokio::sync::watch;

use crate::progress::Progress;
use crate::{
    Error, Event, EventKind, KeyValue, ListOptions, ListResult, Page, Result, Revision, Store,
    WatchStream,
};

/// The most log entries a watcher reads under the lock at once, and the most bytes of values
/// such a page copies out.
const REPLAY_PAGE: usize = 512;
const REPLAY_BYTES: usize = 8 * 1024 * 1024;

/// The default history a store keeps, in bytes of values: beyond it the oldest changes are
/// compacted at once, without waiting for the server's periodic compaction, so one tenant's
/// burst of large writes cannot hold memory for a whole compaction interval.
pub const DEFAULT_MAX_HISTORY_BYTES: usize = 64 * 1024 * 1024;

/// A [`Store`] kept entirely in memory; see the module documentation.
///
/// Dropping it ends open watch streams with [`Error::Unavailable`], once they have delivered
/// every write made before the drop.
pub struct MemoryStore {
    state: Arc<Mutex<State>>,
    /// Bumped after every write to wake the watchers, which then read the log.
    written: watch::Sender<()>,
}

struct State {
    /// The revision of the latest write.
    head: Revision,
    /// Reads at a revision below this one fail; the log holds every change after it.
    compacted: Revision,
    current: BTreeMap<String, Arc<KeyValue>>,
    log: VecDeque<Change>,
    /// What the values the log alone keeps weigh (each put's new value).
    log_bytes: usize,
    max_history_bytes: usize,
}

/// One logged write.
enum Change {
    Put {
        kv: Arc<KeyValue>,
        prev: Option<Arc<KeyValue>>,
    },
    Delete {
        revision: Revision,
        prev: Arc<KeyValue>,
    },
}

impl Change {
    fn revision(&self) -> Revision {
        match self {
            Change::Put { kv, .. } => kv.mod_revision,
            Change::Delete { revision, .. } => *revision,
        }
    }

    fn key(&self) -> &str {
        match self {
            Change::Put { kv, .. } => &kv.key,
            Change::Delete { prev, .. } => &prev.key,
        }
    }

    /// The key's value just before this change.
    /// The bytes this change keeps alive in the log.
    fn weight(&self) -> usize {
        match self {
            Change::Put { kv, .. } => kv.value.len(),
            Change::Delete { .. } => 0,
        }
    }

    fn before(&self) -> Option<&Arc<KeyValue>> {
        match self {
            Change::Put { prev, .. } => prev.as_ref(),
            Change::Delete { prev, .. } => Some(prev),
        }
    }

    fn event(&self) -> Event {
        match self {
            Change::Put { kv, prev } => Event {
                kind: EventKind::Put,
                kv: KeyValue::clone(kv),
                prev: prev.as_deref().cloned(),
            },
            Change::Delete { revision, prev } => Event {
                kind: EventKind::Delete,
                kv: deleted(prev, *revision),
                prev: Some(KeyValue::clone(prev)),
            },
        }
    }
}

/// What a delete returns and reports: the last value, at the deletion's revision.
fn deleted(last: &KeyValue, revision: Revision) -> KeyValue {
    KeyValue {
        mod_revision: revision,
        ..last.clone()
    }
}

/// The keys under `prefix` after `start_after`, as a range of a map keyed by `String`. Keys
/// under a prefix are contiguous in byte order, so the range ends where they stop matching.
fn lower_bound<'a>(prefix: &'a str, start_after: Option<&'a str>) -> Bound<&'a str> {
    match start_after {
        Some(after) if after >= prefix => Bound::Excluded(after),
        _ => Bound::Included(prefix),
    }
}

impl State {
    /// The position in the log of the first change after `revision`.
    /// Logs a change, then compacts the oldest while the log weighs more than its budget
    /// (watchers still reading them get [`Error::Compacted`] and re-list, as after any
    /// compaction).
    fn record(&mut self, change: Change) {
        self.log_bytes += change.weight();
        self.log.push_back(change);
        while self.log_bytes > self.max_history_bytes {
            let Some(oldest) = self.log.pop_front() else {
                break;
            };
            self.log_bytes -= oldest.weight();
            self.compacted = oldest.revision();
        }
    }

    fn log_after(&self, revision: Revision) -> usize {
        self.log
            .partition_point(|change| change.revision() <= revision)
    }

    fn next_revision(&mut self) -> Revision {
        self.head += 1;
        self.head
    }

    fn list(&self, prefix: &str, options: &ListOptions) -> Result<ListResult> {
        let revision = match options.revision {
            0 => self.head,
            revision => revision,
        };
        if revision < self.compacted {
            return Err(Error::Compacted {
                requested: revision,
                compacted: self.compacted,
            });
        }
        if revision > self.head {
            return Err(Error::Internal(format!(
                "revision {revision} is in the future (the latest is {})",
                self.head
            )));
        }
        let lower = lower_bound(prefix, options.start_after.as_deref());
        let in_range = |key: &str| {
            key.starts_with(prefix)
                && match lower {
                    Bound::Excluded(after) => key > after,
                    _ => true,
                }
        };
        // The value at `revision` of every key in range written since: the first later change
        // to a key knows what it replaced.
        let mut then: BTreeMap<&str, Option<&Arc<KeyValue>>> = BTreeMap::new();
        for change in self.log.range(self.log_after(revision)..) {
            if in_range(change.key()) {
                then.entry(change.key()).or_insert_with(|| change.before());
            }
        }
        let mut unchanged = self
            .current
            .range::<str, _>((lower, Bound::Unbounded))
            .take_while(|(key, _)| key.starts_with(prefix))
            .filter(|(key, _)| !then.contains_key(key.as_str()))
            .map(|(_, kv)| kv)
            .peekable();
        let mut changed = then.values().filter_map(|kv| *kv).peekable();
        let mut page = Page::new(options);
        loop {
            // Both are in key order and share no key; merge them.
            let next = match (unchanged.peek(), changed.peek()) {
                (Some(a), Some(b)) if b.key < a.key => changed.next(),
                (Some(_), _) => unchanged.next(),
                (None, _) => changed.next(),
            };
            match next {
                Some(kv) if page.has_room() => page.push(KeyValue::clone(kv)),
                _ => break,
            }
        }
        Ok(page.finish(revision))
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new()
    }
}

impl MemoryStore {
    /// An empty store at revision 0, keeping [`DEFAULT_MAX_HISTORY_BYTES`] of history.
    pub fn new() -> MemoryStore {
        MemoryStore::with_max_history_bytes(DEFAULT_MAX_HISTORY_BYTES)
    }

    /// An empty store whose log keeps at most `max_history_bytes` of values.
    pub fn with_max_history_bytes(max_history_bytes: usize) -> MemoryStore {
        MemoryStore {
            state: Arc::new(Mutex::new(State {
                head: 0,
                compacted: 0,
                current: BTreeMap::new(),
                log: VecDeque::new(),
                log_bytes: 0,
                max_history_bytes,
            })),
            written: watch::Sender::new(()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Applies a write under the lock, then wakes the watchers.
    fn write<T>(&self, apply: impl FnOnce(&mut State) -> Result<T>) -> Result<T> {
        let result = apply(&mut self.lock());
        if result.is_ok() {
            self.written.send_replace(());
        }
        result
    }
}

/// Every write checks its preconditions before it changes anything, so a panic cannot leave
/// the state half-written and a poisoned lock is safe to keep using.
fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

impl MemoryStore {
    /// A watch of `prefix` after `after`, reporting its progress when `progress` says.
    fn watch_from(
        &self,
        prefix: &str,
        after: Revision,
        progress: Option<Progress>,
    ) -> Result<WatchStream> {
        let mut watcher = Watcher {
            state: self.state.clone(),
            written: self.written.subscribe(),
            prefix: prefix.to_owned(),
            last: after,
            pending: VecDeque::new(),
            closed: false,
            done: false,
            progress,
        };
        // Reading the first page now reports a compacted start revision as an error of this
        // call rather than of the stream.
        watcher.read_log()?;
        Ok(futures::stream::unfold(watcher, |mut watcher| async move {
            let item = watcher.next().await?;
            Some((item, watcher))
        })
        .boxed())
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        Ok(self.lock().current.get(key).map(|kv| KeyValue::clone(kv)))
    }

    async fn list(&self, prefix: &str, options: ListOptions) -> Result<ListResult> {
        self.lock().list(prefix, &options)
    }

    async fn count(&self, prefix: &str) -> Result<i64> {
        let state = self.lock();
        let count = state
            .current
            .range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(|(key, _)| key.starts_with(prefix))
            .count();
        i64::try_from(count).map_err(|e| Error::Internal(format!("count {count}: {e}")))
    }

    async fn create(&self, key: &str, value: Vec<u8>) -> Result<KeyValue> {
        self.write(|state| {
            if state.current.contains_key(key) {
                return Err(Error::AlreadyExists(key.to_owned()));
            }
            let revision = state.next_revision();
            let kv = Arc::new(KeyValue {
                key: key.to_owned(),
                value,
                create_revision: revision,
                mod_revision: revision,
            });
            state.current.insert(key.to_owned(), kv.clone());
            let created = KeyValue::clone(&kv);
            state.record(Change::Put { kv, prev: None });
            Ok(created)
        })
    }

    async fn update(&self, key: &str, value: Vec<u8>, expected: Revision) -> Result<KeyValue> {
        self.write(|state| {
            let Some(current) = state.current.get_mut(key) else {
                return Err(Error::NotFound(key.to_owned()));
            };
            if current.mod_revision != expected {
                return Err(Error::Conflict {
                    key: key.to_owned(),
                    expected,
                    current: Some(KeyValue::clone(current)),
                });
            }
            let kv = Arc::new(KeyValue {
                key: key.to_owned(),
                value,
                create_revision: current.create_revision,
                mod_revision: state.head + 1,
            });
            let prev = std::mem::replace(current, kv.clone());
            state.next_revision();
            let updated = KeyValue::clone(&kv);
            state.record(Change::Put {
                kv,
                prev: Some(prev),
            });
            Ok(updated)
        })
    }

    async fn delete(&self, key: &str, expected: Revision) -> Result<KeyValue> {
        self.write(|state| {
            let Some(current) = state.current.get(key) else {
                return Err(Error::NotFound(key.to_owned()));
            };
            if expected != 0 && current.mod_revision != expected {
                return Err(Error::Conflict {
                    key: key.to_owned(),
                    expected,
                    current: Some(KeyValue::clone(current)),
                });
            }
            let Some(prev) = state.current.remove(key) else {
                return Err(Error::Internal(format!("{key} vanished under the lock")));
            };
            let revision = state.next_revision();
            let gone = deleted(&prev, revision);
            state.record(Change::Delete { revision, prev });
            Ok(gone)
        })
    }

    async fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream> {
        self.watch_from(prefix, after, None)
    }

    async fn watch_with_progress(
        &self,
        prefix: &str,
        after: Revision,
        every: std::time::Duration,
    ) -> Result<WatchStream> {
        self.watch_from(prefix, after, Some(Progress::new(every, after)))
    }

    async fn current_revision(&self) -> Result<Revision> {
        Ok(self.lock().head)
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        let mut state = self.lock();
        if revision > state.head {
            return Err(Error::Internal(format!(
                "cannot compact at revision {revision}: it is in the future (the latest is {})",
                state.head
            )));
        }
        if revision <= state.compacted {
            return Ok(());
        }
        state.compacted = revision;
        let dropped = state.log_after(revision);
        let freed: usize = state.log.drain(..dropped).map(|c| c.weight()).sum();
        state.log_bytes -= freed;
        // A log that once held a burst of writes would otherwise keep its peak capacity, in
        // each of thousands of stores.
        if state.log.capacity() > 4 * state.log.len() + 64 {
            state.log.shrink_to_fit();
        }
        tracing::debug!(revision, dropped, "compacted the memory store's log");
        Ok(())
    }
}

struct Watcher {
    state: Arc<Mutex<State>>,
    written: watch::Receiver<()>,
    prefix: String,
    /// The revision up to which the log has been read; later changes are new.
    last: Revision,
    pending: VecDeque<Event>,
    /// The store was dropped: deliver what the log still has, then end.
    closed: bool,
    done: bool,
    /// When the watch reports its progress (`Store::watch_with_progress`).
    progress: Option<Progress>,
}

impl Watcher {
    async fn next(&mut self) -> Option<Result<Event>> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                if let Some(progress) = &mut self.progress {
                    progress.delivered(event.revision());
                }
                return Some(Ok(event));
            }
            if self.done {
                return None;
            }
            match self.read_log() {
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
                Ok(caught_up) if !caught_up || !self.pending.is_empty() => continue,
                Ok(_) => {}
            }
            if self.closed {
                self.done = true;
                return Some(Err(Error::Unavailable(
                    "the memory store was dropped".into(),
                )));
            }
            // Caught up: every change up to `last` has been read, and none pending matched.
            let due = self.progress.as_ref().map(Progress::due);
            let at = due.unwrap_or_else(std::time::Instant::now).into();
            tokio::select! {
                written = self.written.changed() => if written.is_err() {
                    self.closed = true;
                },
                _ = tokio::time::sleep_until(at), if due.is_some() => {
                    let last = self.last;
                    if let Some(report) = self.progress.as_mut().and_then(|p| p.report(last)) {
                        return Some(Ok(report));
                    }
                }
            }
        }
    }

    /// Queues the matching changes of the next page of the log after `last`; returns whether
    /// that reached the end of the log.
    fn read_log(&mut self) -> Result<bool> {
        // Wake-ups are marked seen before the read, so a write the read misses still wakes the
        // watcher while one it caught does not wake it for nothing.
        self.written.mark_unchanged();
        let state = lock(&self.state);
        if self.last < state.compacted {
            return Err(Error::Compacted {
                requested: self.last,
                compacted: state.compacted,
            });
        }
        let start = state.log_after(self.last);
        let (mut read, mut bytes) = (0, 0);
        for change in state.log.range(start..) {
            if read == REPLAY_PAGE || bytes >= REPLAY_BYTES {
                return Ok(false);
            }
            read += 1;
            self.last = change.revision();
            if change.key().starts_with(&self.prefix) {
                let event = change.event();
                bytes += event.value_bytes();
                self.pending.push_back(event);
            }
        }
        // Everything up to the head has been read (a watch may start beyond it).
        self.last = self.last.max(state.head);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A quiet watch hears how far the store has moved, so that a watch resumed from what it
    /// heard starts inside the history that compaction keeps; a watch asking for none hears
    /// nothing but its own changes.
    #[tokio::test]
    async fn a_quiet_watch_reports_its_progress() {
        let store = MemoryStore::new();
        let mut quiet = store
            .watch_with_progress("/a/", 0, std::time::Duration::from_millis(50))
            .await
            .unwrap();
        let mut plain = store.watch("/a/", 0).await.unwrap();
        let elsewhere = store.create("/b/x", b"1".to_vec()).await.unwrap();
        let heard = tokio::time::timeout(std::time::Duration::from_secs(5), quiet.next())
            .await
            .expect("a progress report")
            .unwrap()
            .unwrap();
        assert_eq!(heard.kind, EventKind::Progress);
        assert_eq!(heard.revision(), elsewhere.mod_revision);
        let mine = store.create("/a/y", b"2".to_vec()).await.unwrap();
        let next = quiet.next().await.unwrap().unwrap();
        assert_eq!(
            (next.kind, next.revision()),
            (EventKind::Put, mine.mod_revision)
        );
        let plain_first = plain.next().await.unwrap().unwrap();
        assert_eq!(
            plain_first.kind,
            EventKind::Put,
            "no progress without asking"
        );
    }

    /// Bounded cost: a burst of large writes is compacted as it exceeds the history budget,
    /// instead of staying in memory until the next periodic compaction.
    #[tokio::test]
    async fn history_beyond_its_budget_is_compacted_at_once() {
        let store = MemoryStore::with_max_history_bytes(10_000);
        let first = store.create("/k/a", vec![0; 3_000]).await.unwrap();
        let watch_from_start = store.watch("/k/", 0).await.unwrap();
        let mut revision = first.mod_revision;
        for _ in 0..10 {
            revision = store
                .update("/k/a", vec![1; 3_000], revision)
                .await
                .unwrap()
                .mod_revision;
        }
        {
            let state = store.lock();
            assert!(state.log_bytes <= 10_000, "{}", state.log_bytes);
            assert_eq!(state.log.len(), 3, "the newest three changes fit");
            assert!(state.compacted >= revision - 3);
        }
        // The latest state is whole; a watcher far behind is told to re-list.
        assert_eq!(
            store.get("/k/a").await.unwrap().unwrap().value,
            vec![1; 3_000]
        );
        let events: Vec<_> = watch_from_start.collect().await;
        assert!(
            events
                .iter()
                .any(|e| matches!(e, Err(Error::Compacted { .. }))),
            "a watcher whose history was compacted away re-lists"
        );
        assert!(matches!(
            store.watch("/k/", first.mod_revision).await,
            Err(Error::Compacted { .. })
        ));
    }

    /// The undo-the-log list against the state recorded after every write: creates, updates,
    /// deletes and re-creates of a few keys, read back at each revision, whole and in pages,
    /// before and after a compaction half-way.
    #[tokio::test]
    async fn lists_at_every_revision_match_the_state_then() {
        let store = MemoryStore::new();
        let mut model: BTreeMap<String, KeyValue> = BTreeMap::new();
        let mut snapshots = vec![(0, Vec::new())];
        // A small linear congruential generator: varied, but the same on every run.
        let mut seed = 7u64;
        let mut next = move |n: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
            (seed >> 33) % n
        };
        for i in 0..300u32 {
            let key = format!("/k/{}", next(12));
            let kv = match model.get(&key).cloned() {
                None => store.create(&key, i.to_be_bytes().to_vec()).await.unwrap(),
                Some(old) if next(3) == 0 => {
                    store.delete(&key, old.mod_revision).await.unwrap();
                    model.remove(&key);
                    snapshots.push((
                        store.current_revision().await.unwrap(),
                        model.values().cloned().collect(),
                    ));
                    continue;
                }
                Some(old) => store
                    .update(&key, i.to_be_bytes().to_vec(), old.mod_revision)
                    .await
                    .unwrap(),
            };
            // A write outside the prefix, which no list below may show.
            store
                .create(&format!("/other/{i}"), Vec::new())
                .await
                .unwrap();
            model.insert(key, kv.clone());
            snapshots.push((kv.mod_revision, model.values().cloned().collect()));
        }
        let check = |snapshots: &[(Revision, Vec<KeyValue>)]| {
            let store = &store;
            let snapshots = snapshots.to_vec();
            async move {
                for (revision, expected) in snapshots {
                    let at = ListOptions {
                        revision,
                        ..ListOptions::default()
                    };
                    let listed = store.list("/k/", at.clone()).await.unwrap();
                    assert_eq!(listed.items, expected, "at revision {revision}");
                    let mut paged = Vec::new();
                    let mut options = ListOptions { limit: 5, ..at };
                    loop {
                        let page = store.list("/k/", options.clone()).await.unwrap();
                        paged.extend(page.items.iter().cloned());
                        if !page.more {
                            break;
                        }
                        options.start_after = page.items.last().map(|kv| kv.key.clone());
                    }
                    assert_eq!(paged, expected, "paged at revision {revision}");
                }
            }
        };
        // Revision 0 means the latest; skip it.
        check(&snapshots[1..]).await;
        let half = snapshots.len() / 2;
        let compacted = snapshots[half].0;
        store.compact(compacted).await.unwrap();
        check(&snapshots[half..]).await;
        let below = ListOptions {
            revision: compacted - 1,
            ..ListOptions::default()
        };
        assert!(matches!(
            store.list("/k/", below).await,
            Err(Error::Compacted { .. })
        ));
    }
}
