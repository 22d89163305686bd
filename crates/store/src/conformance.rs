//! The contract of [`Store`] as executable checks; every backend's tests run all of them.
//!
//! Each check panics on a violation and writes under a key prefix of its own, so all of them
//! can share one store (and an etcd shared with others). Run them one after another on the
//! same store ([`run_all`]): the compaction checks compact the whole store, which the other
//! checks survive only because each reads history from its own start on. [`CHECKS`] names
//! them for backends that want one test per check.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;

use crate::{
    Error, Event, EventKind, KeyValue, ListOptions, ListResult, Revision, Store, WatchStream,
};

/// One check: takes the store under test and panics if the contract is broken.
pub type Check = for<'a> fn(&'a dyn Store) -> BoxFuture<'a, ()>;

/// Every check, by name, in the order [`run_all`] runs them.
pub const CHECKS: &[(&str, Check)] = &[
    ("create_and_get", |s| Box::pin(create_and_get(s))),
    ("update_requires_current_revision", |s| {
        Box::pin(update_requires_current_revision(s))
    }),
    ("delete_is_conditional", |s| {
        Box::pin(delete_is_conditional(s))
    }),
    ("revisions_are_global_and_increasing", |s| {
        Box::pin(revisions_are_global_and_increasing(s))
    }),
    ("create_revision_survives_updates", |s| {
        Box::pin(create_revision_survives_updates(s))
    }),
    ("delete_then_recreate", |s| {
        Box::pin(delete_then_recreate(s))
    }),
    ("concurrent_updates_have_one_winner", |s| {
        Box::pin(concurrent_updates_have_one_winner(s))
    }),
    ("list_orders_and_isolates_prefixes", |s| {
        Box::pin(list_orders_and_isolates_prefixes(s))
    }),
    ("list_pages_at_a_fixed_revision", |s| {
        Box::pin(list_pages_at_a_fixed_revision(s))
    }),
    ("list_pages_by_bytes", |s| Box::pin(list_pages_by_bytes(s))),
    ("watch_replays_then_follows", |s| {
        Box::pin(watch_replays_then_follows(s))
    }),
    ("watch_has_no_gap_while_starting", |s| {
        Box::pin(watch_has_no_gap_while_starting(s))
    }),
    ("watch_isolates_prefixes", |s| {
        Box::pin(watch_isolates_prefixes(s))
    }),
    ("watch_reports_prev_values", |s| {
        Box::pin(watch_reports_prev_values(s))
    }),
    ("list_at_compacted_revision_fails", |s| {
        Box::pin(list_at_compacted_revision_fails(s))
    }),
    ("watch_after_compaction_fails", |s| {
        Box::pin(watch_after_compaction_fails(s))
    }),
];

/// Runs every check, one after another, on `store`.
pub async fn run_all(store: &dyn Store) {
    for (name, check) in CHECKS {
        tracing::info!(check = name, "conformance");
        check(store).await;
    }
}

/// How long any single store call or awaited event may take before the check fails.
const PATIENCE: Duration = Duration::from_secs(20);

/// A key prefix no other check (or earlier run on a shared etcd) has used.
fn unique(check: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_nanos())
        .unwrap_or(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("/conformance/{check}-{nanos:x}-{n}/")
}

async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(PATIENCE, future).await {
        Ok(value) => value,
        Err(_) => panic!("{what}: no answer within {PATIENCE:?}"),
    }
}

async fn next_event(stream: &mut WatchStream, what: &str) -> Event {
    match within(what, stream.next()).await {
        Some(Ok(event)) => event,
        Some(Err(e)) => panic!("{what}: the watch failed: {e}"),
        None => panic!("{what}: the watch ended"),
    }
}

async fn events(stream: &mut WatchStream, count: usize, what: &str) -> Vec<Event> {
    let mut received = Vec::with_capacity(count);
    for _ in 0..count {
        received.push(next_event(stream, what).await);
    }
    received
}

fn put(kv: &KeyValue, prev: Option<&KeyValue>) -> Event {
    Event {
        kind: EventKind::Put,
        kv: kv.clone(),
        prev: prev.cloned(),
    }
}

fn delete(deleted: &KeyValue, prev: &KeyValue) -> Event {
    Event {
        kind: EventKind::Delete,
        kv: deleted.clone(),
        prev: Some(prev.clone()),
    }
}

fn keys(items: &[KeyValue]) -> Vec<&str> {
    items.iter().map(|kv| kv.key.as_str()).collect()
}

/// A created key reads back as written; creating it again fails.
pub async fn create_and_get(store: &dyn Store) {
    let key = format!("{}a", unique("create_and_get"));
    assert_eq!(store.get(&key).await.unwrap(), None, "a new key is absent");
    let created = store.create(&key, b"one".to_vec()).await.unwrap();
    assert_eq!(created.key, key);
    assert_eq!(created.value, b"one");
    assert!(created.mod_revision > 0, "{created:?}");
    assert_eq!(created.create_revision, created.mod_revision, "{created:?}");
    assert_eq!(store.get(&key).await.unwrap(), Some(created.clone()));
    match store.create(&key, b"two".to_vec()).await {
        Err(Error::AlreadyExists(existing)) => assert_eq!(existing, key),
        other => panic!("a second create must fail with AlreadyExists, got {other:?}"),
    }
    assert_eq!(store.get(&key).await.unwrap(), Some(created), "unchanged");
}

/// An update names the revision it read; a stale one conflicts and reports the current value.
pub async fn update_requires_current_revision(store: &dyn Store) {
    let key = format!("{}a", unique("update_requires_current_revision"));
    let first = store.create(&key, b"1".to_vec()).await.unwrap();
    let second = store
        .update(&key, b"2".to_vec(), first.mod_revision)
        .await
        .unwrap();
    assert_eq!(second.value, b"2");
    assert!(second.mod_revision > first.mod_revision, "{second:?}");
    assert_eq!(second.create_revision, first.create_revision);
    for stale in [first.mod_revision, 0, second.mod_revision + 1000] {
        match store.update(&key, b"3".to_vec(), stale).await {
            Err(Error::Conflict {
                key: conflicted,
                expected,
                current,
            }) => {
                assert_eq!(conflicted, key);
                assert_eq!(expected, stale);
                assert_eq!(
                    current,
                    Some(second.clone()),
                    "the conflict shows the latest"
                );
            }
            other => panic!("an update at revision {stale} must conflict, got {other:?}"),
        }
    }
    assert_eq!(store.get(&key).await.unwrap(), Some(second));
    let missing = format!("{key}-missing");
    match store.update(&missing, b"x".to_vec(), 0).await {
        Err(Error::NotFound(name)) => assert_eq!(name, missing),
        other => panic!("updating a missing key must fail with NotFound, got {other:?}"),
    }
    assert_eq!(store.get(&missing).await.unwrap(), None, "not created");
}

/// A delete with a stale revision conflicts; with the current one (or 0) it deletes.
pub async fn delete_is_conditional(store: &dyn Store) {
    let key = format!("{}a", unique("delete_is_conditional"));
    let first = store.create(&key, b"1".to_vec()).await.unwrap();
    let second = store
        .update(&key, b"2".to_vec(), first.mod_revision)
        .await
        .unwrap();
    match store.delete(&key, first.mod_revision).await {
        Err(Error::Conflict { current, .. }) => assert_eq!(current, Some(second.clone())),
        other => panic!("a stale delete must conflict, got {other:?}"),
    }
    assert_eq!(store.get(&key).await.unwrap(), Some(second.clone()));
    let deleted = store.delete(&key, second.mod_revision).await.unwrap();
    assert_eq!(deleted.key, key);
    assert_eq!(deleted.value, b"2", "a delete returns the last value");
    assert_eq!(deleted.create_revision, first.create_revision);
    assert!(deleted.mod_revision > second.mod_revision, "{deleted:?}");
    assert_eq!(store.get(&key).await.unwrap(), None);
    match store.delete(&key, 0).await {
        Err(Error::NotFound(name)) => assert_eq!(name, key),
        other => panic!("deleting a missing key must fail with NotFound, got {other:?}"),
    }
    let again = store.create(&key, b"3".to_vec()).await.unwrap();
    let unconditional = store.delete(&key, 0).await.unwrap();
    assert_eq!(unconditional.value, b"3");
    assert!(unconditional.mod_revision > again.mod_revision);
    assert_eq!(store.get(&key).await.unwrap(), None);
}

/// Every write, whatever its key, gets a revision above all earlier ones.
pub async fn revisions_are_global_and_increasing(store: &dyn Store) {
    let prefix = unique("revisions_are_global_and_increasing");
    let mut last = store.current_revision().await.unwrap();
    let mut check = |kv: &KeyValue| {
        assert!(
            kv.mod_revision > last,
            "revision {} after {last}",
            kv.mod_revision
        );
        last = kv.mod_revision;
    };
    // Creates, then updates, then deletes, each round across all the keys.
    let mut latest = Vec::new();
    for name in ["a", "b", "c", "d"] {
        let kv = store
            .create(&format!("{prefix}{name}"), Vec::new())
            .await
            .unwrap();
        check(&kv);
        latest.push(kv);
    }
    for kv in &mut latest {
        *kv = store
            .update(&kv.key, b"updated".to_vec(), kv.mod_revision)
            .await
            .unwrap();
        check(kv);
    }
    for kv in &latest {
        check(&store.delete(&kv.key, kv.mod_revision).await.unwrap());
    }
    let current = store.current_revision().await.unwrap();
    assert!(
        current >= last,
        "current revision {current} is behind the last write {last}"
    );
}

/// Updates keep the revision a key was created at.
pub async fn create_revision_survives_updates(store: &dyn Store) {
    let prefix = unique("create_revision_survives_updates");
    let key = format!("{prefix}a");
    let created = store.create(&key, b"0".to_vec()).await.unwrap();
    let mut latest = created.clone();
    for i in 1..=3u8 {
        latest = store
            .update(&key, vec![i], latest.mod_revision)
            .await
            .unwrap();
        assert_eq!(latest.create_revision, created.create_revision);
    }
    assert_eq!(store.get(&key).await.unwrap(), Some(latest.clone()));
    let listed = store.list(&prefix, ListOptions::default()).await.unwrap();
    assert_eq!(listed.items, vec![latest]);
}

/// A key deleted and created again is a new key: a new create revision, and a watch sees a
/// create (no previous value) after the delete.
pub async fn delete_then_recreate(store: &dyn Store) {
    let prefix = unique("delete_then_recreate");
    let key = format!("{prefix}a");
    let start = store.current_revision().await.unwrap();
    let first = store.create(&key, b"1".to_vec()).await.unwrap();
    let deleted = store.delete(&key, first.mod_revision).await.unwrap();
    let second = store.create(&key, b"2".to_vec()).await.unwrap();
    assert_eq!(second.create_revision, second.mod_revision);
    assert!(second.create_revision > deleted.mod_revision);
    assert_eq!(store.get(&key).await.unwrap(), Some(second.clone()));
    let mut watch = store.watch(&prefix, start).await.unwrap();
    let seen = events(&mut watch, 3, "delete_then_recreate").await;
    assert_eq!(
        seen,
        vec![
            put(&first, None),
            delete(&deleted, &first),
            put(&second, None)
        ]
    );
}

/// Of many updates racing on one revision, exactly one wins.
pub async fn concurrent_updates_have_one_winner(store: &dyn Store) {
    let key = format!("{}a", unique("concurrent_updates_have_one_winner"));
    let created = store.create(&key, b"start".to_vec()).await.unwrap();
    let attempts = (0..16u8).map(|i| store.update(&key, vec![i], created.mod_revision));
    let results = within("racing updates", futures::future::join_all(attempts)).await;
    let mut winners = Vec::new();
    for result in results {
        match result {
            Ok(kv) => winners.push(kv),
            Err(Error::Conflict { .. }) => {}
            Err(e) => panic!("a losing update must conflict, got {e}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one update wins: {winners:?}");
    assert_eq!(store.get(&key).await.unwrap(), winners.pop());
}

/// A list returns exactly the keys under the prefix, in key order; `count` agrees.
pub async fn list_orders_and_isolates_prefixes(store: &dyn Store) {
    let base = unique("list_orders_and_isolates_prefixes");
    let prefix = format!("{base}items/");
    // Written out of order, with neighbours that share the prefix's text but not the prefix.
    for name in ["b", "a", "c/d", "c", "é", "aa", "Z"] {
        store
            .create(&format!("{prefix}{name}"), name.as_bytes().to_vec())
            .await
            .unwrap();
    }
    for neighbour in ["items", "items0", "item", "itemsa/x", "itemz/x"] {
        store
            .create(&format!("{base}{neighbour}"), Vec::new())
            .await
            .unwrap();
    }
    let expected: Vec<String> = ["Z", "a", "aa", "b", "c", "c/d", "é"]
        .iter()
        .map(|name| format!("{prefix}{name}"))
        .collect();
    let listed = store.list(&prefix, ListOptions::default()).await.unwrap();
    assert_eq!(keys(&listed.items), expected);
    assert!(!listed.more);
    assert!(listed.revision >= listed.items.iter().map(|kv| kv.mod_revision).max().unwrap());
    for kv in &listed.items {
        assert_eq!(kv.value, &kv.key.as_bytes()[prefix.len()..], "{kv:?}");
    }
    assert_eq!(store.count(&prefix).await.unwrap(), 7);
    assert_eq!(store.count(&base).await.unwrap(), 12);
    let all_under_base = store.list(&base, ListOptions::default()).await.unwrap();
    assert_eq!(all_under_base.items.len(), 12);
    let mut sorted = keys(&all_under_base.items);
    sorted.sort_unstable();
    assert_eq!(keys(&all_under_base.items), sorted, "key order");

    // The limit: exactly all items is not "more"; one fewer is.
    let exact = ListOptions {
        limit: 7,
        ..ListOptions::default()
    };
    let listed = store.list(&prefix, exact).await.unwrap();
    assert_eq!((listed.items.len(), listed.more), (7, false));
    let short = ListOptions {
        limit: 6,
        ..ListOptions::default()
    };
    let listed = store.list(&prefix, short).await.unwrap();
    assert_eq!((listed.items.len(), listed.more), (6, true));

    // A continue point past the last key, and an empty prefix below the base, list nothing.
    let past = ListOptions {
        start_after: Some(format!("{prefix}é")),
        ..ListOptions::default()
    };
    let listed = store.list(&prefix, past).await.unwrap();
    assert_eq!((listed.items.len(), listed.more), (0, false));
    let nothing = format!("{base}nothing/");
    assert!(
        store
            .list(&nothing, ListOptions::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    assert_eq!(store.count(&nothing).await.unwrap(), 0);
}

/// Pages read at the first page's revision see that moment, whatever is written in between.
pub async fn list_pages_at_a_fixed_revision(store: &dyn Store) {
    let base = unique("list_pages_at_a_fixed_revision");
    let prefix = format!("{base}items/");
    let mut created = BTreeMap::new();
    for i in 0..9 {
        let key = format!("{prefix}{i:02}");
        let kv = store.create(&key, vec![i]).await.unwrap();
        created.insert(key, kv);
    }
    let snapshot: Vec<KeyValue> = created.values().cloned().collect();
    let mut pages = Vec::new();
    let mut options = ListOptions {
        limit: 2,
        ..ListOptions::default()
    };
    let mut revision = 0;
    for page in 0.. {
        let listed = store.list(&prefix, options.clone()).await.unwrap();
        if page == 0 {
            revision = listed.revision;
        }
        assert_eq!(
            listed.revision, revision,
            "every page reads at the first one's revision"
        );
        assert!(listed.items.len() <= 2);
        pages.extend(listed.items.iter().cloned());
        // Writes between pages: a new key that sorts into a later page, a delete and an update
        // of keys not yet listed, and a write under a sibling prefix.
        let i = page as u8;
        store
            .create(&format!("{prefix}{:02}a", 2 * i + 3), vec![100])
            .await
            .unwrap();
        let later = format!("{prefix}{:02}", (2 * i + 4).min(8));
        if let Some(current) = store.get(&later).await.unwrap() {
            if page % 2 == 0 {
                store.delete(&later, current.mod_revision).await.unwrap();
            } else {
                store
                    .update(&later, vec![200], current.mod_revision)
                    .await
                    .unwrap();
            }
        }
        store
            .create(&format!("{base}other/{page}"), Vec::new())
            .await
            .unwrap();
        if !listed.more {
            break;
        }
        options = ListOptions {
            start_after: listed.items.last().map(|kv| kv.key.clone()),
            limit: 2,
            revision,
            ..ListOptions::default()
        };
    }
    assert_eq!(
        pages, snapshot,
        "the pages add up to the state at the first page"
    );
    let whole = store
        .list(
            &prefix,
            ListOptions {
                revision,
                ..ListOptions::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        whole.items, snapshot,
        "an unpaged list at that revision agrees"
    );
    let latest = store.list(&prefix, ListOptions::default()).await.unwrap();
    assert!(latest.revision > revision);
    assert_ne!(latest.items, snapshot, "the latest state moved on");
}

/// A page stops once its values hold `max_bytes`, with at least one item, at the latest
/// revision and at an older one alike; pages by bytes add up to the whole list.
pub async fn list_pages_by_bytes(store: &dyn Store) {
    let base = unique("list_pages_by_bytes");
    let prefix = format!("{base}items/");
    let mut snapshot = Vec::new();
    for i in 0..5 {
        let kv = store
            .create(&format!("{prefix}{i}"), vec![i; 100])
            .await
            .unwrap();
        snapshot.push(kv);
    }
    let page = |max_bytes, limit, revision| ListOptions {
        max_bytes,
        limit,
        revision,
        ..ListOptions::default()
    };
    let sizes = |listed: &ListResult| (listed.items.len(), listed.more);
    for revision in [0, snapshot[4].mod_revision] {
        let listed = store.list(&prefix, page(250, 0, revision)).await.unwrap();
        assert_eq!(
            sizes(&listed),
            (3, true),
            "the item that reaches 250 bytes ends the page"
        );
        let listed = store.list(&prefix, page(1, 0, revision)).await.unwrap();
        assert_eq!(
            sizes(&listed),
            (1, true),
            "a page holds one item however large"
        );
        let listed = store.list(&prefix, page(500, 0, revision)).await.unwrap();
        assert_eq!(sizes(&listed), (5, false), "the whole list fits exactly");
        let listed = store.list(&prefix, page(250, 2, revision)).await.unwrap();
        assert_eq!(sizes(&listed), (2, true), "the item limit comes first");
        if revision == 0 {
            // Rewrite one item so the older revision reads history, not the current rows.
            store
                .update(&snapshot[1].key, vec![9; 1000], snapshot[1].mod_revision)
                .await
                .unwrap();
        }
    }
    let mut pages = Vec::new();
    let mut start_after = None;
    loop {
        let options = ListOptions {
            start_after,
            ..page(150, 0, snapshot[4].mod_revision)
        };
        let listed = store.list(&prefix, options).await.unwrap();
        assert!(listed.items.len() <= 2);
        start_after = listed.items.last().map(|kv| kv.key.clone());
        pages.extend(listed.items);
        if !listed.more {
            break;
        }
    }
    assert_eq!(
        pages, snapshot,
        "pages by bytes add up to the state they were read at"
    );
}

/// A watch from a revision first replays every later change, then follows live ones.
pub async fn watch_replays_then_follows(store: &dyn Store) {
    let prefix = unique("watch_replays_then_follows");
    let (a, b) = (format!("{prefix}a"), format!("{prefix}b"));
    let start = store.current_revision().await.unwrap();
    let mut expected = Vec::new();
    let a1 = store.create(&a, b"a1".to_vec()).await.unwrap();
    expected.push(put(&a1, None));
    let a2 = store
        .update(&a, b"a2".to_vec(), a1.mod_revision)
        .await
        .unwrap();
    expected.push(put(&a2, Some(&a1)));
    let b1 = store.create(&b, b"b1".to_vec()).await.unwrap();
    expected.push(put(&b1, None));
    let a_gone = store.delete(&a, a2.mod_revision).await.unwrap();
    expected.push(delete(&a_gone, &a2));
    let a3 = store.create(&a, b"a3".to_vec()).await.unwrap();
    expected.push(put(&a3, None));

    let mut watch = store.watch(&prefix, start).await.unwrap();
    let replayed = events(&mut watch, expected.len(), "replay").await;
    assert_eq!(replayed, expected);

    let b2 = store
        .update(&b, b"b2".to_vec(), b1.mod_revision)
        .await
        .unwrap();
    let live = next_event(&mut watch, "live update").await;
    assert_eq!(live, put(&b2, Some(&b1)));
    let b_gone = store.delete(&b, 0).await.unwrap();
    let live = next_event(&mut watch, "live delete").await;
    assert_eq!(live, delete(&b_gone, &b2));

    // From the middle of the history, only what follows.
    let mut watch = store.watch(&prefix, a2.mod_revision).await.unwrap();
    let tail = events(&mut watch, 5, "replay from the middle").await;
    let revisions: Vec<Revision> = tail.iter().map(Event::revision).collect();
    assert_eq!(
        revisions,
        vec![
            b1.mod_revision,
            a_gone.mod_revision,
            a3.mod_revision,
            b2.mod_revision,
            b_gone.mod_revision
        ]
    );
    // From the latest revision, only new writes.
    let now = store.current_revision().await.unwrap();
    let mut watch = store.watch(&prefix, now).await.unwrap();
    let c = store
        .create(&format!("{prefix}c"), Vec::new())
        .await
        .unwrap();
    assert_eq!(next_event(&mut watch, "from now").await, put(&c, None));
}

/// Writes racing with the start of a watch are all delivered, once each, in revision order.
pub async fn watch_has_no_gap_while_starting(store: &dyn Store) {
    let prefix = unique("watch_has_no_gap_while_starting");
    let prefix = prefix.as_str();
    let start = store.current_revision().await.unwrap();
    const WRITERS: usize = 8;
    const WRITES: usize = 12;
    let writers = (0..WRITERS).map(|w| async move {
        let key = format!("{prefix}{w}");
        let mut revisions = Vec::new();
        let mut latest = store.create(&key, vec![0]).await.unwrap();
        revisions.push(latest.mod_revision);
        for i in 1..WRITES {
            latest = store
                .update(&key, vec![i as u8], latest.mod_revision)
                .await
                .unwrap();
            revisions.push(latest.mod_revision);
            tokio::task::yield_now().await;
        }
        revisions
    });
    // Several watches start at different points while the writes go on.
    let watchers = (0..3).map(|i| async move {
        for _ in 0..i * 5 {
            tokio::task::yield_now().await;
        }
        store.watch(prefix, start).await.unwrap()
    });
    let (written, watches) = within(
        "writes racing with watches",
        futures::future::join(
            futures::future::join_all(writers),
            futures::future::join_all(watchers),
        ),
    )
    .await;
    let mut acknowledged: Vec<Revision> = written.into_iter().flatten().collect();
    acknowledged.sort_unstable();
    for (i, mut watch) in watches.into_iter().enumerate() {
        let seen = events(&mut watch, acknowledged.len(), "racing watch").await;
        let revisions: Vec<Revision> = seen.iter().map(Event::revision).collect();
        assert_eq!(
            revisions, acknowledged,
            "watch {i}: every write once, in order"
        );
    }
}

/// A watch sees only keys under its prefix, not keys that merely share its text.
pub async fn watch_isolates_prefixes(store: &dyn Store) {
    let base = unique("watch_isolates_prefixes");
    let prefix = format!("{base}a/");
    let start = store.current_revision().await.unwrap();
    let mut watch = store.watch(&prefix, start).await.unwrap();
    for outside in ["a", "a0", "ab/x", "b/x", "A/x"] {
        store
            .create(&format!("{base}{outside}"), Vec::new())
            .await
            .unwrap();
    }
    // A write inside comes next: had anything outside leaked, it would have come first.
    let inside = store
        .create(&format!("{prefix}x"), Vec::new())
        .await
        .unwrap();
    assert_eq!(
        next_event(&mut watch, "isolation").await,
        put(&inside, None)
    );
    // The same holds for a watch that replays those writes from the log.
    let mut replay = store.watch(&prefix, start).await.unwrap();
    assert_eq!(
        next_event(&mut replay, "isolation on replay").await,
        put(&inside, None)
    );
}

/// Events carry the previous value: none for a create, the replaced one for an update, and
/// for a delete the last value (at the deletion's revision) as well as the previous one.
pub async fn watch_reports_prev_values(store: &dyn Store) {
    let prefix = unique("watch_reports_prev_values");
    let key = format!("{prefix}a");
    let start = store.current_revision().await.unwrap();
    let mut live = store.watch(&prefix, start).await.unwrap();
    let v1 = store.create(&key, b"v1".to_vec()).await.unwrap();
    let v2 = store
        .update(&key, b"v2".to_vec(), v1.mod_revision)
        .await
        .unwrap();
    let gone = store.delete(&key, v2.mod_revision).await.unwrap();
    let expected = vec![put(&v1, None), put(&v2, Some(&v1)), delete(&gone, &v2)];
    assert_eq!(gone.value, b"v2");
    assert_eq!(gone.create_revision, v1.create_revision);
    assert_eq!(events(&mut live, 3, "live prev values").await, expected);
    let mut replay = store.watch(&prefix, start).await.unwrap();
    assert_eq!(
        events(&mut replay, 3, "replayed prev values").await,
        expected
    );
}

/// Lists below the compaction point fail with `Compacted`; at or above it they work.
pub async fn list_at_compacted_revision_fails(store: &dyn Store) {
    let prefix = unique("list_at_compacted_revision_fails");
    let key = format!("{prefix}a");
    let v1 = store.create(&key, b"v1".to_vec()).await.unwrap();
    let v2 = store
        .update(&key, b"v2".to_vec(), v1.mod_revision)
        .await
        .unwrap();
    let gone = store.delete(&key, v2.mod_revision).await.unwrap();
    let v3 = store.create(&key, b"v3".to_vec()).await.unwrap();
    let kept = store
        .create(&format!("{prefix}b"), b"b".to_vec())
        .await
        .unwrap();
    store.compact(v2.mod_revision).await.unwrap();
    let at = |revision| ListOptions {
        revision,
        ..ListOptions::default()
    };
    match store.list(&prefix, at(v1.mod_revision)).await {
        Err(Error::Compacted {
            requested,
            compacted,
        }) => {
            assert_eq!(requested, v1.mod_revision);
            assert!(compacted > v1.mod_revision, "compacted at {compacted}");
        }
        other => panic!("a list below the compaction point must fail, got {other:?}"),
    }
    // The compaction point itself and everything after it stay readable.
    let listed = store.list(&prefix, at(v2.mod_revision)).await.unwrap();
    assert_eq!(listed.items, vec![v2.clone()]);
    let listed = store.list(&prefix, at(gone.mod_revision)).await.unwrap();
    assert_eq!(listed.items, vec![]);
    let listed = store.list(&prefix, at(v3.mod_revision)).await.unwrap();
    assert_eq!(listed.items, vec![v3.clone()]);
    let listed = store.list(&prefix, ListOptions::default()).await.unwrap();
    assert_eq!(listed.items, vec![v3.clone(), kept]);
    // Compacting again at or below the point is a no-op; live keys always remain.
    store.compact(v1.mod_revision).await.unwrap();
    store.compact(v2.mod_revision).await.unwrap();
    let latest = store.current_revision().await.unwrap();
    store.compact(latest).await.unwrap();
    assert_eq!(store.get(&key).await.unwrap(), Some(v3));
    assert_eq!(store.count(&prefix).await.unwrap(), 2);
}

/// A watch from below the compaction point fails with `Compacted` (from the call or as the
/// first item); from the compaction point on it replays normally.
pub async fn watch_after_compaction_fails(store: &dyn Store) {
    let prefix = unique("watch_after_compaction_fails");
    let key = format!("{prefix}a");
    let start = store.current_revision().await.unwrap();
    let v1 = store.create(&key, b"v1".to_vec()).await.unwrap();
    let v2 = store
        .update(&key, b"v2".to_vec(), v1.mod_revision)
        .await
        .unwrap();
    let v3 = store
        .update(&key, b"v3".to_vec(), v2.mod_revision)
        .await
        .unwrap();
    let v4 = store
        .update(&key, b"v4".to_vec(), v3.mod_revision)
        .await
        .unwrap();
    store.compact(v3.mod_revision).await.unwrap();
    for from in [start, v1.mod_revision] {
        let first = match store.watch(&prefix, from).await {
            Err(e) => Err(e),
            Ok(mut watch) => within("a compacted watch", watch.next())
                .await
                .expect("a compacted watch must not end silently"),
        };
        match first {
            Err(Error::Compacted { compacted, .. }) => {
                assert!(
                    compacted > from,
                    "compacted at {compacted}, watched from {from}"
                )
            }
            other => panic!("a watch from {from} must fail with Compacted, got {other:?}"),
        }
    }
    let mut watch = store.watch(&prefix, v3.mod_revision).await.unwrap();
    assert_eq!(
        next_event(&mut watch, "watch from the compaction point").await,
        put(&v4, Some(&v3))
    );
    let v5 = store
        .update(&key, b"v5".to_vec(), v4.mod_revision)
        .await
        .unwrap();
    assert_eq!(
        next_event(&mut watch, "then live").await,
        put(&v5, Some(&v4))
    );
}
