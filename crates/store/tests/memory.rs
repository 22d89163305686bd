//! The in-memory backend against the conformance suite, plus what only it promises: stores
//! cheap enough to keep thousands of, and watchers that fall behind reading on from the log.

use futures::StreamExt;
use lariat_store::memory::MemoryStore;
use lariat_store::{Error, Store, conformance};

/// One test per check, each on a fresh store, so a failure names its check.
macro_rules! conformance {
    ($($check:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $check() {
                conformance::$check(&MemoryStore::new()).await;
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
    let tested = include_str!("memory.rs");
    for (name, _) in conformance::CHECKS {
        assert!(
            tested.contains(&format!("    {name},\n")),
            "{name} has no test here"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_checks_share_one_store() {
    conformance::run_all(&MemoryStore::new()).await;
}

#[tokio::test]
async fn a_watcher_that_was_not_polled_reads_every_write_from_the_log() {
    let store = MemoryStore::new();
    let mut watch = store.watch("/lag/", 0).await.unwrap();
    // Far more writes than a page of the log, none of them read until all are done.
    let mut revisions = Vec::new();
    for i in 0..2000 {
        store
            .create(&format!("/other/{i}"), Vec::new())
            .await
            .unwrap();
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
    let store = MemoryStore::new();
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
async fn dropping_the_store_ends_open_watches_after_their_events() {
    let store = MemoryStore::new();
    let mut watch = store.watch("/", 0).await.unwrap();
    let written = store.create("/a", Vec::new()).await.unwrap();
    drop(store);
    assert_eq!(watch.next().await.unwrap().unwrap().kv, written);
    match watch.next().await {
        Some(Err(Error::Unavailable(_))) => {}
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(watch.next().await.is_none());
}

/// The number of OS threads of this process, from `/proc/self/status`.
#[cfg(target_os = "linux")]
fn os_threads() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("Threads:"))
        .and_then(|count| count.trim().parse().ok())
        .expect("/proc/self/status has a Threads line")
}

/// The child half of `a_thousand_stores_start_no_thread_and_no_task`, alone in its process so
/// that no other test's threads come and go while it counts.
#[cfg(target_os = "linux")]
#[test]
#[ignore = "run as a child process by a_thousand_stores_start_no_thread_and_no_task"]
fn child_creates_a_thousand_stores() {
    if std::env::var_os("LARIAT_STORE_CHILD_STORES").is_none() {
        return;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let before = os_threads();
    // Creating a store needs no runtime at all.
    let stores: Vec<MemoryStore> = (0..1000).map(|_| MemoryStore::new()).collect();
    let watches = runtime.block_on(async {
        let mut watches = Vec::new();
        for store in &stores {
            let mut watch = store.watch("/", 0).await.unwrap();
            let kv = store.create("/a", b"x".to_vec()).await.unwrap();
            assert_eq!(watch.next().await.unwrap().unwrap().kv, kv);
            watches.push(watch);
        }
        watches
    });
    assert_eq!(
        os_threads(),
        before,
        "1000 stores and watches started threads"
    );
    assert_eq!(
        runtime.metrics().num_alive_tasks(),
        0,
        "1000 stores and watches spawned tasks"
    );
    drop((watches, stores));
}

#[cfg(target_os = "linux")]
#[test]
fn a_thousand_stores_start_no_thread_and_no_task() {
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_creates_a_thousand_stores",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("LARIAT_STORE_CHILD_STORES", "1")
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{report}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // A filter that matched nothing would pass vacuously.
    assert!(report.contains("1 passed"), "{report}");
}
