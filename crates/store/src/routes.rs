//! Live changes, handed only to the watchers whose prefix holds their key.
//!
//! A broadcast of every commit to every watcher made each watcher wake for each commit to look
//! at keys it does not watch: with a thousand agents (two watches each) that was a thousand
//! wake-ups per commit, and most of a busy server's CPU. Here the writer looks a key's
//! prefixes up among those watched (one lookup per distinct prefix length) and queues the
//! change, shared, for those watchers only.
//!
//! Each watcher's queue is bounded (by count and by bytes, and all queues together by bytes):
//! a watcher that falls behind is told it lagged, its queue is dropped, and it reads what it
//! missed from the log, as it does at its start.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::{Event, Revision};

/// What one watcher may have queued, in bytes (values, previous values and keys); a change
/// heavier than this alone is read from the log.
const MAILBOX_BYTES: usize = 4 * 1024 * 1024;
/// What all watchers' queues may hold together (a change queued for several counts for each).
const ALL_MAILBOXES_BYTES: usize = 256 * 1024 * 1024;

pub(crate) struct Routes {
    table: Mutex<Table>,
    /// Changes one watcher may have queued.
    max_events: usize,
    /// The highest revision routed: every change up to it is queued for its watchers (or
    /// they were told they lagged).
    routed: AtomicI64,
    /// Bytes queued in all mailboxes.
    queued: AtomicUsize,
}

#[derive(Default)]
struct Table {
    by_prefix: HashMap<Vec<u8>, Vec<Arc<Mailbox>>>,
    /// The lengths of the prefixes watched, with how many prefixes have each.
    lengths: BTreeMap<usize, usize>,
    closed: bool,
}

#[derive(Default)]
struct Mailbox {
    queue: Mutex<Queue>,
    notify: Notify,
}

#[derive(Default)]
struct Queue {
    events: VecDeque<Arc<Event>>,
    bytes: usize,
    lagged: bool,
    closed: bool,
}

/// What a watcher receives.
pub(crate) enum Delivery {
    /// Changes in revision order.
    Events(VecDeque<Arc<Event>>),
    /// Changes were dropped: read the log from the last one delivered.
    Lagged,
    /// The store is closed.
    Closed,
}

/// One watcher's place in the routes, left when dropped.
pub(crate) struct Subscription {
    routes: Arc<Routes>,
    prefix: Vec<u8>,
    mailbox: Arc<Mailbox>,
}

fn weight(event: &Event) -> usize {
    event.kv.key.len() + event.value_bytes()
}

impl Routes {
    pub(crate) fn new(max_events: usize) -> Arc<Routes> {
        Arc::new(Routes {
            table: Mutex::default(),
            max_events: max_events.max(1),
            routed: AtomicI64::new(0),
            queued: AtomicUsize::new(0),
        })
    }

    /// Changes of keys starting with `prefix` from now on.
    pub(crate) fn subscribe(self: &Arc<Self>, prefix: &[u8]) -> Subscription {
        let mailbox = Arc::new(Mailbox::default());
        let mut table = self.table.lock().expect("lock");
        mailbox.queue.lock().expect("lock").closed = table.closed;
        let watchers = table.by_prefix.entry(prefix.to_vec()).or_default();
        watchers.push(mailbox.clone());
        if watchers.len() == 1 {
            *table.lengths.entry(prefix.len()).or_default() += 1;
        }
        Subscription {
            routes: self.clone(),
            prefix: prefix.to_vec(),
            mailbox,
        }
    }

    /// Whether anyone watches.
    pub(crate) fn is_empty(&self) -> bool {
        self.table.lock().expect("lock").by_prefix.is_empty()
    }

    /// The highest revision routed so far.
    pub(crate) fn routed(&self) -> Revision {
        self.routed.load(Ordering::SeqCst)
    }

    /// Queues each change for the watchers of its key (committed changes, in revision order).
    pub(crate) fn publish(&self, events: Vec<Event>) {
        let mut through = 0;
        {
            let table = self.table.lock().expect("lock");
            for event in events {
                through = through.max(event.revision());
                let event = Arc::new(event);
                let weight = weight(&event);
                let key = event.kv.key.as_bytes();
                for &length in table.lengths.range(..=key.len()).map(|(length, _)| length) {
                    for mailbox in table.by_prefix.get(&key[..length]).into_iter().flatten() {
                        self.offer(mailbox, &event, weight);
                    }
                }
            }
        }
        // After the changes are queued: a watcher that reads this revision finds every change
        // up to it in its queue, or was told it lagged.
        self.routed.fetch_max(through, Ordering::SeqCst);
    }

    fn offer(&self, mailbox: &Mailbox, event: &Arc<Event>, weight: usize) {
        let mut queue = mailbox.queue.lock().expect("lock");
        if queue.lagged || queue.closed {
            // It reads the log anyway, which has this change.
            return;
        }
        let full = queue.events.len() >= self.max_events
            || queue.bytes + weight > MAILBOX_BYTES
            // (A change queued for many watchers counts for each: the total is checked only
            // for a watcher that already has something queued, so one change shared by a
            // thousand idle watchers is not refused to the last of them.)
            || (!queue.events.is_empty()
                && self.queued.load(Ordering::Relaxed) + weight > ALL_MAILBOXES_BYTES);
        if full {
            queue.lagged = true;
            queue.events.clear();
            self.queued.fetch_sub(queue.bytes, Ordering::Relaxed);
            queue.bytes = 0;
            mailbox.notify.notify_one();
            return;
        }
        let was_empty = queue.events.is_empty();
        queue.events.push_back(event.clone());
        queue.bytes += weight;
        self.queued.fetch_add(weight, Ordering::Relaxed);
        if was_empty {
            mailbox.notify.notify_one();
        }
    }

    /// Ends every watch: each receives [`Delivery::Closed`] once its queue is taken.
    pub(crate) fn close(&self) {
        let mut table = self.table.lock().expect("lock");
        table.closed = true;
        for mailbox in table.by_prefix.values().flatten() {
            mailbox.queue.lock().expect("lock").closed = true;
            mailbox.notify.notify_one();
        }
    }
}

impl Subscription {
    /// The next delivery, waiting for one.
    pub(crate) async fn recv(&self) -> Delivery {
        loop {
            {
                let mut queue = self.mailbox.queue.lock().expect("lock");
                if queue.lagged {
                    queue.lagged = false;
                    return Delivery::Lagged;
                }
                if !queue.events.is_empty() {
                    self.routes.queued.fetch_sub(queue.bytes, Ordering::Relaxed);
                    queue.bytes = 0;
                    return Delivery::Events(std::mem::take(&mut queue.events));
                }
                if queue.closed {
                    return Delivery::Closed;
                }
            }
            self.mailbox.notify.notified().await;
        }
    }

    /// The highest revision routed so far: read before [`Subscription::has_pending`], every
    /// change of this watcher's prefix up to it is queued, or was delivered, or it lagged.
    pub(crate) fn routed(&self) -> Revision {
        self.routes.routed()
    }

    /// Whether a delivery is waiting (changes, a lag or the end).
    pub(crate) fn has_pending(&self) -> bool {
        let queue = self.mailbox.queue.lock().expect("lock");
        queue.lagged || queue.closed || !queue.events.is_empty()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut table = self.routes.table.lock().expect("lock");
        let Some(watchers) = table.by_prefix.get_mut(&self.prefix) else {
            return;
        };
        watchers.retain(|mailbox| !Arc::ptr_eq(mailbox, &self.mailbox));
        if watchers.is_empty() {
            table.by_prefix.remove(&self.prefix);
            let length = self.prefix.len();
            if let Some(count) = table.lengths.get_mut(&length) {
                *count -= 1;
                if *count == 0 {
                    table.lengths.remove(&length);
                }
            }
        }
        drop(table);
        let queue = self.mailbox.queue.lock().expect("lock");
        self.routes.queued.fetch_sub(queue.bytes, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EventKind, KeyValue};

    fn put(key: &str, revision: Revision) -> Event {
        Event {
            kind: EventKind::Put,
            kv: KeyValue {
                key: key.into(),
                value: vec![0; 10],
                create_revision: revision,
                mod_revision: revision,
            },
            prev: None,
        }
    }

    fn keys(delivery: Delivery) -> Vec<String> {
        match delivery {
            Delivery::Events(events) => events.iter().map(|e| e.kv.key.clone()).collect(),
            Delivery::Lagged => vec!["lagged".into()],
            Delivery::Closed => vec!["closed".into()],
        }
    }

    #[tokio::test]
    async fn a_change_reaches_only_the_watchers_of_its_prefixes() {
        let routes = Routes::new(100);
        let all = routes.subscribe(b"");
        let apps = routes.subscribe(b"/registry/apps/");
        let team_a = routes.subscribe(b"/registry/apps/team-a/");
        let team_b = routes.subscribe(b"/registry/apps/team-b/");
        let team_a_too = routes.subscribe(b"/registry/apps/team-a/");
        routes.publish(vec![
            put("/registry/apps/team-a/web", 1),
            put("/registry/core/x", 2),
        ]);
        assert_eq!(routes.routed(), 2);
        assert_eq!(
            keys(all.recv().await),
            ["/registry/apps/team-a/web", "/registry/core/x"]
        );
        assert_eq!(keys(apps.recv().await), ["/registry/apps/team-a/web"]);
        assert_eq!(keys(team_a.recv().await), ["/registry/apps/team-a/web"]);
        assert_eq!(keys(team_a_too.recv().await), ["/registry/apps/team-a/web"]);
        assert!(!team_b.has_pending(), "team-b's watcher is not woken");
        drop(team_a);
        routes.publish(vec![put("/registry/apps/team-a/db", 3)]);
        assert_eq!(keys(team_a_too.recv().await), ["/registry/apps/team-a/db"]);
        drop((all, apps, team_a_too, team_b));
        assert!(routes.is_empty());
        assert!(routes.table.lock().unwrap().lengths.is_empty());
        assert_eq!(routes.queued.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn a_full_queue_is_dropped_and_its_watcher_told_it_lagged() {
        let routes = Routes::new(2);
        let slow = routes.subscribe(b"/a/");
        routes.publish(vec![put("/a/1", 1), put("/a/2", 2), put("/a/3", 3)]);
        assert_eq!(
            routes.queued.load(Ordering::Relaxed),
            0,
            "the queue is freed"
        );
        assert_eq!(keys(slow.recv().await), ["lagged"]);
        routes.publish(vec![put("/a/4", 4)]);
        assert_eq!(keys(slow.recv().await), ["/a/4"]);
        routes.close();
        assert_eq!(keys(slow.recv().await), ["closed"]);
        assert_eq!(keys(routes.subscribe(b"/b/").recv().await), ["closed"]);
    }
}
