//! A quiet watch's progress reports (`Store::watch_with_progress`), as etcd's progress notify:
//! while nothing under the watched prefix changes but the store does, the watcher is told the
//! revision it has seen everything up to, so a watch resumed from it later starts inside the
//! history the store still keeps.

use std::time::{Duration, Instant};

use crate::{Event, EventKind, KeyValue, Revision};

/// A watch's progress reports: at most one every `every`, the last at `sent_at`, of `sent`.
pub(crate) struct Progress {
    every: Duration,
    sent_at: Instant,
    sent: Revision,
}

impl Progress {
    /// Reports of a watch that starts after `after`, the first due `every` from now.
    pub(crate) fn new(every: Duration, after: Revision) -> Progress {
        Progress {
            every,
            sent_at: Instant::now(),
            sent: after,
        }
    }

    /// When the next report is due (a zero interval still looks only every 100 ms: a quiet
    /// watch is not woken by others' changes, and would otherwise spin).
    pub(crate) fn due(&self) -> Instant {
        self.sent_at + self.every.max(Duration::from_millis(100))
    }

    /// The watch's own events carry their revision: no report need repeat it.
    pub(crate) fn delivered(&mut self, through: Revision) {
        self.sent = self.sent.max(through);
    }

    /// The report that every change up to `through` has been delivered, if that is progress;
    /// the next is due `every` from now either way.
    pub(crate) fn report(&mut self, through: Revision) -> Option<Event> {
        self.sent_at = Instant::now();
        if through <= self.sent {
            return None;
        }
        self.sent = through;
        Some(Event {
            kind: EventKind::Progress,
            kv: KeyValue {
                key: String::new(),
                value: Vec::new(),
                create_revision: 0,
                mod_revision: through,
            },
            prev: None,
        })
    }
}
