//! The SQLite backend against the conformance suite, plus what only it promises: durability
//! across reopening, revisions never reused, and watchers that fall behind catching up.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use lariat_store::sqlite::{SqliteOptions, SqliteStore};
use lariat_store::{Error, EventKind, ListOptions, Store, conformance};

fn fresh() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("store.db")).unwrap();
    (dir, store)
}

/// One test per check, each on a fresh store, so a failure names its check.
macro_rules! conformance {
    ($($check:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $check() {
                let (_dir, store) = fresh();
                conformance::$check(&store).await;
            }
        )*
    };
}

conformance!(
    create_and_get,
    update_requires_current_revision,
    delete_is_conditional,
    revisions_are_global_and_increasing,
    create_revision_survives_updates,
    delete_then_recreate,
    concurrent_updates_have_one_winner,
    list_orders_and_isolates_prefixes,
    list_pages_at_a_fixed_revision,
    list_pages_by_bytes,
    watch_replays_then_follows,
    watch_has_no_gap_while_starting,
    watch_isolates_prefixes,
    watch_reports_prev_values,
    list_at_compacted_revision_fails,
    watch_after_compaction_fails,
);

#[test]
fn every_check_has_a_test() {
    let tested = include_str!("sqlite.rs");
    for (name, _) in conformance::CHECKS {
        assert!(
            tested.contains(&format!("    {name},\n")),
            "{name} has no test here"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_checks_share_one_store() {
    let (_dir, store) = fresh();
    conformance::run_all(&store).await;
}

#[tokio::test]
async fn reopening_keeps_every_write_and_continues_revisions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    let store = SqliteStore::open(&path).unwrap();
    let mut written = Vec::new();
    for i in 0..50 {
        written.push(store.create(&format!("/k/{i:02}"), vec![i]).await.unwrap());
    }
    let updated = store
        .update("/k/07", b"seven".to_vec(), written[7].mod_revision)
        .await
        .unwrap();
    written[7] = updated;
    let deleted = store.delete("/k/49", 0).await.unwrap();
    written.pop();
    let last = store.current_revision().await.unwrap();
    assert_eq!(last, deleted.mod_revision);
    drop(store);

    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.current_revision().await.unwrap(), last);
    let listed = store.list("/k/", ListOptions::default()).await.unwrap();
    assert_eq!(listed.items, written);
    assert_eq!(listed.revision, last);
    let next = store.create("/k/new", Vec::new()).await.unwrap();
    assert_eq!(next.mod_revision, last + 1);
    // History from before the restart is still there for watchers.
    let mut watch = store.watch("/k/", last - 1).await.unwrap();
    let event = watch.next().await.unwrap().unwrap();
    assert_eq!(event.revision(), last);
    assert_eq!(event.kv.key, "/k/49");
}

/// Regression guard: compaction may delete the newest rows (a key deleted at the compaction
/// point leaves no row at all), and the next write must still not reuse their revisions.
#[tokio::test]
async fn revisions_are_not_reused_after_compacting_the_newest_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    let store = SqliteStore::open(&path).unwrap();
    let created = store.create("/k", Vec::new()).await.unwrap();
    let deleted = store.delete("/k", created.mod_revision).await.unwrap();
    store.compact(deleted.mod_revision).await.unwrap();
    assert!(
        store
            .list("", ListOptions::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    drop(store);

    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(
        store.current_revision().await.unwrap(),
        deleted.mod_revision
    );
    let again = store.create("/k", Vec::new()).await.unwrap();
    assert_eq!(again.mod_revision, deleted.mod_revision + 1);
    match store.watch("", created.mod_revision).await {
        Err(Error::Compacted { compacted, .. }) => assert_eq!(compacted, deleted.mod_revision),
        other => panic!("expected Compacted, got {:?}", other.map(|_| "a watch")),
    }
}

fn tiny_watch_buffer() -> SqliteOptions {
    SqliteOptions {
        watch_buffer: 2,
        ..SqliteOptions::default()
    }
}

#[tokio::test]
async fn a_lagging_watcher_catches_up_from_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open_with(&dir.path().join("store.db"), tiny_watch_buffer()).unwrap();
    let start = store.current_revision().await.unwrap();
    let mut watch = store.watch("/lag/", start).await.unwrap();
    // Sequential writes commit one batch each, far more than the watcher's buffer holds.
    let mut revisions = Vec::new();
    for i in 0..1500 {
        let kv = store
            .create(&format!("/lag/{i}"), Vec::new())
            .await
            .unwrap();
        revisions.push(kv.mod_revision);
    }
    let mut seen = Vec::new();
    while seen.len() < revisions.len() {
        seen.push(watch.next().await.unwrap().unwrap().revision());
    }
    assert_eq!(seen, revisions);
    let live = store.create("/lag/live", Vec::new()).await.unwrap();
    assert_eq!(watch.next().await.unwrap().unwrap().kv, live);
}

#[tokio::test]
async fn a_lagging_watcher_whose_history_was_compacted_gets_compacted() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open_with(&dir.path().join("store.db"), tiny_watch_buffer()).unwrap();
    let start = store.current_revision().await.unwrap();
    let mut watch = store.watch("/lag/", start).await.unwrap();
    for i in 0..10 {
        store
            .create(&format!("/lag/{i}"), Vec::new())
            .await
            .unwrap();
    }
    store
        .compact(store.current_revision().await.unwrap())
        .await
        .unwrap();
    match watch.next().await {
        Some(Err(Error::Compacted { requested, .. })) => assert_eq!(requested, start),
        other => panic!("expected Compacted, got {other:?}"),
    }
    assert!(
        watch.next().await.is_none(),
        "the stream ends after Compacted"
    );
}

#[tokio::test]
async fn dropping_the_store_ends_open_watches() {
    let (_dir, store) = fresh();
    let mut watch = store.watch("/", 0).await.unwrap();
    drop(store);
    match watch.next().await {
        Some(Err(Error::Unavailable(_))) => {}
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

/// Create throughput with many concurrent writers (group commit). Not a regression gate:
/// `cargo test -p lariat-store --release --test sqlite -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark, run by hand"]
async fn create_throughput_with_64_writers() {
    const WRITERS: usize = 64;
    const OBJECTS: usize = 100_000;
    let (_dir, store) = fresh();
    let store = Arc::new(store);
    let value = vec![b'x'; 1024];
    let started = Instant::now();
    let tasks: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (store, value) = (store.clone(), value.clone());
            tokio::spawn(async move {
                for i in (w..OBJECTS).step_by(WRITERS) {
                    store
                        .create(&format!("/bench/objects/{i:06}"), value.clone())
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let elapsed = started.elapsed();
    println!(
        "{OBJECTS} creates of 1 KiB by {WRITERS} writers in {elapsed:.2?}: {:.0} creates/s",
        OBJECTS as f64 / elapsed.as_secs_f64()
    );
    let started = Instant::now();
    let listed = store
        .list("/bench/objects/", ListOptions::default())
        .await
        .unwrap();
    println!(
        "list of {} in {:.2?}",
        listed.items.len(),
        started.elapsed()
    );
    assert_eq!(listed.items.len(), OBJECTS);
    let started = Instant::now();
    let mut options = ListOptions {
        limit: 500,
        revision: listed.revision - 1,
        ..ListOptions::default()
    };
    let mut pages = 0;
    loop {
        let page = store
            .list("/bench/objects/", options.clone())
            .await
            .unwrap();
        pages += 1;
        if !page.more {
            break;
        }
        options.start_after = page.items.last().map(|kv| kv.key.clone());
    }
    println!(
        "{pages} pages of 500 at an older revision in {:.2?}",
        started.elapsed()
    );
}

/// The child half of `acknowledged_writes_survive_kill_9`: creates keys until killed and
/// prints each acknowledged one.
#[tokio::test]
#[ignore = "run as a child process by acknowledged_writes_survive_kill_9"]
async fn child_writer_until_killed() {
    let Some(path) = std::env::var_os("LARIAT_STORE_CHILD_DB") else {
        return;
    };
    let store = Arc::new(SqliteStore::open(std::path::Path::new(&path)).unwrap());
    // Several writers, so that acknowledged writes share group commits when the kill lands.
    let tasks: Vec<_> = (0..8)
        .map(|w| {
            let store = store.clone();
            tokio::spawn(async move {
                for i in 0.. {
                    let key = format!("/kill/{w}/{i:06}");
                    let kv = store.create(&key, vec![w]).await.unwrap();
                    println!("acked {key} {}", kv.mod_revision);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
}

#[tokio::test]
async fn acknowledged_writes_survive_kill_9() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_writer_until_killed",
            "--ignored",
            "--nocapture",
        ])
        .env("LARIAT_STORE_CHILD_DB", &path)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut acked = Vec::new();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    while acked.len() < 500 {
        let line = lines
            .next()
            .expect("the child writer stopped early")
            .unwrap();
        if let Some(rest) = line.strip_prefix("acked ") {
            let (key, revision) = rest.split_once(' ').unwrap();
            acked.push((key.to_owned(), revision.parse::<i64>().unwrap()));
        }
    }
    // SIGKILL: no destructor, no checkpoint, writes in flight are cut off.
    child.kill().unwrap();
    child.wait().unwrap();

    let store = SqliteStore::open(&path).unwrap();
    for (key, revision) in &acked {
        let kv = store.get(key).await.unwrap();
        assert_eq!(
            kv.map(|kv| kv.mod_revision),
            Some(*revision),
            "{key} was acknowledged"
        );
    }
    let head = store.current_revision().await.unwrap();
    let next = store.create("/after-restart", Vec::new()).await.unwrap();
    assert_eq!(next.mod_revision, head + 1);
}

/// A watch made with progress says how far the store has gone while its prefix is quiet, so
/// a client resumes from a revision history still holds; the events of its own prefix still
/// come in order, and one is never skipped by a progress report.
#[tokio::test]
async fn a_quiet_watch_reports_the_stores_progress() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("store.db")).unwrap();
    let start = store
        .create("/mine/a", Vec::new())
        .await
        .unwrap()
        .mod_revision;
    let mut watch = store
        .watch_with_progress("/mine/", start, Duration::ZERO)
        .await
        .unwrap();
    let elsewhere = store.create("/theirs/x", Vec::new()).await.unwrap();
    let progress = watch.next().await.unwrap().unwrap();
    assert_eq!(progress.kind, EventKind::Progress);
    assert_eq!(progress.revision(), elsewhere.mod_revision);
    assert!(progress.kv.key.is_empty() && progress.prev.is_none());
    // A change of its own comes as itself, not as progress.
    let mine = store.create("/mine/b", Vec::new()).await.unwrap();
    let event = watch.next().await.unwrap().unwrap();
    assert_eq!(
        (event.kind, event.revision()),
        (EventKind::Put, mine.mod_revision)
    );
    // History compacted up to the progress: resuming from it works, where resuming from the
    // watch's start is gone.
    store.create("/theirs/y", Vec::new()).await.unwrap();
    let later = watch.next().await.unwrap().unwrap();
    assert_eq!(later.kind, EventKind::Progress);
    store.compact(later.revision()).await.unwrap();
    assert!(store.watch("/mine/", start).await.is_err());
    assert!(store.watch("/mine/", later.revision()).await.is_ok());
    // A plain watch never reports progress.
    let mut plain = store.watch("/mine/", later.revision()).await.unwrap();
    store.create("/theirs/z", Vec::new()).await.unwrap();
    let last = store.create("/mine/c", Vec::new()).await.unwrap();
    let event = plain.next().await.unwrap().unwrap();
    assert_eq!(
        (event.kind, event.revision()),
        (EventKind::Put, last.mod_revision)
    );
}
