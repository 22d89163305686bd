//! A revisioned key-value store with watch: the one persistence seam of lariat.
//!
//! Every write gets a new, globally ordered revision (as etcd's `mod_revision`). Readers see
//! whole writes only, a watch delivers every change after a revision in order with no gap and
//! no duplicate, and history older than the compaction point is gone (`Error::Compacted`, which
//! the API turns into `410 Gone`). Values are opaque bytes; the store knows nothing of
//! Kubernetes objects. Three backends implement [`Store`]: [`sqlite::SqliteStore`] (embedded,
//! the default), [`etcd::EtcdStore`] (for several server replicas sharing one etcd) and
//! [`memory::MemoryStore`] (not durable: for simulated workload clusters and fast tests).
//! All must pass [`conformance`], the one suite that defines the contract.
//! [`etcd_process`] starts a throwaway etcd for the tests of any crate.

use async_trait::async_trait;
use futures::stream::BoxStream;

pub mod conformance;
pub mod etcd;
pub mod etcd_process;
pub mod memory;
mod progress;
mod routes;
pub mod sqlite;

/// A global, monotonically increasing write sequence number. `0` means "none" / "latest".
pub type Revision = i64;

/// One stored key with the revisions that created and last modified it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyValue {
    pub key: String,
    pub value: Vec<u8>,
    /// Revision of the write that created this key (unchanged by updates).
    pub create_revision: Revision,
    /// Revision of the last write to this key; for a delete event, the deletion's revision.
    pub mod_revision: Revision,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// A create or an update (`prev` tells which).
    Put,
    Delete,
    /// No change: every change under the watched prefix up to `kv.mod_revision` has been
    /// delivered (only on a watch made with [`Store::watch_with_progress`]; `kv` has no key
    /// and no value). A watch API's bookmarks carry it, so that a client that saw no change
    /// for a while resumes from a revision history still holds (etcd's progress notify).
    Progress,
}

/// One change, as a watch delivers it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub kind: EventKind,
    /// The new value for a put; for a delete, the last value with `mod_revision` set to the
    /// deletion's revision.
    pub kv: KeyValue,
    /// The value before this change, `None` for a create.
    pub prev: Option<KeyValue>,
}

impl Event {
    pub fn revision(&self) -> Revision {
        self.kv.mod_revision
    }

    /// What its values weigh (the new and the previous one): what bounds on pages and queues
    /// of changes count.
    pub(crate) fn value_bytes(&self) -> usize {
        self.kv.value.len() + self.prev.as_ref().map_or(0, |p| p.value.len())
    }
}

#[derive(Clone, Debug, Default)]
pub struct ListOptions {
    /// Only keys strictly greater than this one (the continue point of a paged list).
    pub start_after: Option<String>,
    /// At most this many items; `0` means no limit.
    pub limit: usize,
    /// Read the state as of this revision; `0` means the latest. A revision older than the
    /// compaction point yields `Error::Compacted`.
    pub revision: Revision,
    /// Stop once the items' values hold this many bytes (the page still holds at least one
    /// item); `0` means no limit. A page of large objects then costs what a page of small
    /// ones does.
    pub max_bytes: usize,
}

/// A page being filled in key order, within the options' item and byte limits.
pub(crate) struct Page {
    limit: usize,
    max_bytes: usize,
    items: Vec<KeyValue>,
    bytes: usize,
    more: bool,
}

impl Page {
    pub(crate) fn new(options: &ListOptions) -> Page {
        Page {
            limit: options.limit,
            max_bytes: options.max_bytes,
            items: Vec::new(),
            bytes: 0,
            more: false,
        }
    }

    /// Whether the page takes another item. Asked when one exists, so a full page learns
    /// from it that more remain.
    pub(crate) fn has_room(&mut self) -> bool {
        let full = (self.limit > 0 && self.items.len() >= self.limit)
            || (self.max_bytes > 0 && self.bytes >= self.max_bytes);
        self.more |= full;
        !full
    }

    pub(crate) fn push(&mut self, kv: KeyValue) {
        self.bytes += kv.value.len();
        self.items.push(kv);
    }

    pub(crate) fn finish(self, revision: Revision) -> ListResult {
        ListResult {
            items: self.items,
            revision,
            more: self.more,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListResult {
    /// Items in key order.
    pub items: Vec<KeyValue>,
    /// The revision the list was read at (pass it back to read the next page consistently).
    pub revision: Revision,
    /// Whether more items remain after the last one returned.
    pub more: bool,
}

pub type WatchStream = BoxStream<'static, Result<Event, Error>>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("key {0} not found")]
    NotFound(String),
    #[error("key {0} already exists")]
    AlreadyExists(String),
    /// An update or delete named a `mod_revision` that is no longer current.
    #[error("key {key} was modified: expected revision {expected}, found {}", current.as_ref().map_or(0, |kv| kv.mod_revision))]
    Conflict {
        key: String,
        expected: Revision,
        current: Option<KeyValue>,
    },
    #[error("revision {requested} is compacted (oldest available is {compacted})")]
    Compacted {
        requested: Revision,
        compacted: Revision,
    },
    /// The backend cannot be reached or refused the request; the caller may retry.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    #[error("store error: {0}")]
    Internal(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The contract every backend meets (checked by [`conformance`]).
///
/// Writes are acknowledged only once durable (in [`memory::MemoryStore`], which keeps nothing
/// beyond the process, once applied). Conditional writes compare against a key's
/// `mod_revision`, which is how the API server implements optimistic concurrency.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>>;

    /// Keys starting with `prefix`, in key order.
    async fn list(&self, prefix: &str, options: ListOptions) -> Result<ListResult>;

    /// Number of live keys starting with `prefix`.
    async fn count(&self, prefix: &str) -> Result<i64>;

    /// Creates `key`; `Error::AlreadyExists` if it is live.
    async fn create(&self, key: &str, value: Vec<u8>) -> Result<KeyValue>;

    /// Replaces `key` if its `mod_revision` is still `expected`, else `Error::Conflict`
    /// (or `Error::NotFound` when the key is gone).
    async fn update(&self, key: &str, value: Vec<u8>, expected: Revision) -> Result<KeyValue>;

    /// Deletes `key` if its `mod_revision` is still `expected` (`0`: unconditionally).
    /// Returns the deleted value with `mod_revision` set to the deletion's revision.
    async fn delete(&self, key: &str, expected: Revision) -> Result<KeyValue>;

    /// Every change under `prefix` with a revision greater than `after`, in revision order,
    /// then live changes as they happen. `Error::Compacted` (immediately, or as a stream item
    /// if the watcher falls too far behind) when history is gone; the caller re-lists.
    async fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream>;

    /// As [`Store::watch`], and, while nothing under `prefix` changes but the store does, an
    /// [`EventKind::Progress`] event at most every `every`. A backend that cannot tell its
    /// progress sends none.
    async fn watch_with_progress(
        &self,
        prefix: &str,
        after: Revision,
        every: std::time::Duration,
    ) -> Result<WatchStream> {
        let _ = every;
        self.watch(prefix, after).await
    }

    /// The revision of the latest write.
    async fn current_revision(&self) -> Result<Revision>;

    /// Drops history older than `revision` (live keys always remain).
    async fn compact(&self, revision: Revision) -> Result<()>;
}

/// The smallest key greater than every key starting with `prefix`. UTF-8 never contains the
/// byte 0xFF, so incrementing the last byte cannot overflow, and `[0xFF]` bounds every key.
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    match prefix.split_last() {
        Some((last, init)) => {
            let mut end = init.to_vec();
            end.push(last + 1);
            end
        }
        None => vec![0xFF],
    }
}

/// The first key of a list page under `prefix`: the keys after `start_after` are exactly those
/// at or above `start_after` followed by a zero byte.
pub(crate) fn range_start(prefix: &[u8], start_after: Option<&[u8]>) -> Vec<u8> {
    match start_after {
        Some(after) if after >= prefix => {
            let mut start = after.to_vec();
            start.push(0);
            start
        }
        _ => prefix.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_bounds_exactly_the_prefix() {
        let check = |prefix: &str, inside: &str, outside: Option<&str>| {
            let end = prefix_end(prefix.as_bytes());
            assert!(
                inside.as_bytes() < &end[..],
                "{inside:?} should be under {prefix:?}"
            );
            if let Some(outside) = outside {
                assert!(
                    outside.as_bytes() >= &end[..],
                    "{outside:?} is not under {prefix:?}"
                );
            }
        };
        check("a/b/", "a/b/zzz", Some("a/b0"));
        check("a/b", "a/b\u{10ffff}", Some("a/c"));
        check("é", "éz", Some("ê"));
        // Every key is under the empty prefix, even one of the highest code points.
        check("", "\u{10ffff}\u{10ffff}", None);
    }

    #[test]
    fn range_start_skips_start_after_only() {
        let check = |prefix: &str, after: Option<&str>, expect: &[u8]| {
            assert_eq!(
                range_start(prefix.as_bytes(), after.map(str::as_bytes)),
                expect
            );
        };
        check("a/", None, b"a/");
        check("a/", Some("a/x"), b"a/x\0");
        // A continue point below the prefix cannot widen the range.
        check("a/", Some("0"), b"a/");
    }
}
