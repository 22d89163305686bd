//! What responses being written may hold, and when a client that stopped reading is cut.
//!
//! A response stays in memory until its client reads it, so a client that asks and never
//! reads holds what it asked for: the first probe of issue 37 held gigabytes with lists and
//! watches it did not read. Four rules bound that:
//! - every response body is handed to the connection in copies of at most [`CHUNK`] bytes,
//!   so a connection holds at most one chunk of a response its client does not read;
//! - a response whose client takes nothing for [`WRITE_STALL`] is cut, and what it held is
//!   dropped (kube-apiserver's watch cache closes unresponsive watchers the same way);
//! - what responses hold while being written (whole bodies, and the store pages a streamed
//!   list reads) is taken from one budget of [`MAX_RESPONSE_BYTES_IN_FLIGHT`]; a request
//!   that finds it spent is answered 429;
//! - each user may hold at most [`MAX_RESPONSE_BYTES_PER_USER`] of it, and users outside
//!   `system:masters` together all but [`RESERVED_FOR_MASTERS`], so one tenant with a few
//!   hundred unread lists or watches can no longer make everyone else's lists wait
//!   (kube-apiserver's priority and fairness: a share per flow, and an exempt level). A
//!   share is the authenticated caller's, not an impersonated user's, so impersonating many
//!   users buys no more. The server's own in-process clients are not counted: what they are
//!   sent never waits on a socket, and its controllers must not wait on what tenants hold.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::identity::User;
use crate::limits::{Limit, refused};
use crate::status::{ApiError, ApiResult};

/// What responses being written may hold together: 1 GiB. Fixed.
pub const MAX_RESPONSE_BYTES_IN_FLIGHT: usize = 1024 * 1024 * 1024;

/// What the responses of one user may hold: 128 MiB, 32 store pages. Fixed.
pub const MAX_RESPONSE_BYTES_PER_USER: usize = 128 * 1024 * 1024;

/// What users outside `system:masters` leave of the budget, together: 256 MiB. Fixed.
pub const RESERVED_FOR_MASTERS: usize = 256 * 1024 * 1024;

/// How long a client may take nothing of a response before it is cut: 60 s, kube-apiserver's
/// request timeout. Fixed.
pub const WRITE_STALL: Duration = Duration::from_secs(60);

/// The largest piece of a body handed to the connection at once.
pub const CHUNK: usize = 64 * 1024;

/// Bodies up to this size go out as they are: the connection caps bound what they hold.
const SMALL: usize = CHUNK;

/// A whole body counts against the budget up to this size. Only a proxied body is larger
/// (this server's own are bounded by the object and list page limits), and a proxied body
/// streams through: the connection holds one chunk of it, not its length.
const COUNTED_AT_MOST: usize = 16 * 1024 * 1024;

/// The server's response budget.
static BUDGET: LazyLock<Budget> = LazyLock::new(|| {
    Budget::new(
        MAX_RESPONSE_BYTES_IN_FLIGHT,
        RESERVED_FOR_MASTERS,
        MAX_RESPONSE_BYTES_PER_USER,
    )
});

/// Bytes responses may hold: all of it for `system:masters`, all but a reserve for everyone
/// else, and a share for each user.
struct Budget {
    capacity: usize,
    total: Arc<Semaphore>,
    /// What users outside `system:masters` draw from (the total less the reserve).
    unreserved: Arc<Semaphore>,
    per_user: usize,
    /// Each user's share while any of its responses holds part of it (or a request of theirs
    /// is being served): a user nobody refers to any more is forgotten.
    users: Mutex<HashMap<String, Weak<Semaphore>>>,
}

/// Whose share a response's bytes are taken from; authentication sets it on each request
/// and its response.
#[derive(Clone)]
pub struct Share {
    name: Arc<str>,
    /// `None` for `system:masters`, who draw from the whole budget and have no share.
    user: Option<Arc<Semaphore>>,
    /// False for the server's own in-process clients: what they are sent never waits on a
    /// socket, and the server's controllers must not wait on what tenants hold.
    counted: bool,
}

impl Share {
    /// The server's own in-process callers (its controllers): not counted.
    pub fn in_process() -> Share {
        // Made once: every request of the server's own controllers asks for it.
        static IN_PROCESS: LazyLock<Share> = LazyLock::new(|| Share {
            name: "in-process".into(),
            user: None,
            counted: false,
        });
        IN_PROCESS.clone()
    }

    /// The share of the authenticated caller `user`.
    pub fn of(user: &User) -> Share {
        BUDGET.share(user)
    }

    /// The share all unauthenticated callers have together, as `system:anonymous`.
    pub fn anonymous() -> Share {
        static ANONYMOUS: LazyLock<Share> = LazyLock::new(|| {
            BUDGET.share(&User {
                name: "system:anonymous".into(),
                groups: vec!["system:unauthenticated".into()],
            })
        });
        ANONYMOUS.clone()
    }
}

/// Part of the budget, given back when dropped.
pub struct Permit {
    user: Option<OwnedSemaphorePermit>,
    unreserved: Option<OwnedSemaphorePermit>,
    total: Option<OwnedSemaphorePermit>,
}

impl Permit {
    fn none() -> Permit {
        Permit {
            user: None,
            unreserved: None,
            total: None,
        }
    }

    /// Gives back all but `bytes` of what this permit holds.
    pub fn keep(&mut self, bytes: usize) {
        let give_back = |permit: &mut OwnedSemaphorePermit| {
            let extra = permit.num_permits().saturating_sub(bytes);
            drop(permit.split(extra));
        };
        self.user.as_mut().map(give_back);
        self.unreserved.as_mut().map(give_back);
        self.total.as_mut().map(give_back);
    }
}

impl Budget {
    fn new(total: usize, reserved: usize, per_user: usize) -> Budget {
        Budget {
            capacity: total,
            total: Arc::new(Semaphore::new(total)),
            unreserved: Arc::new(Semaphore::new(total.saturating_sub(reserved))),
            per_user,
            users: Mutex::new(HashMap::new()),
        }
    }

    fn share(&self, user: &User) -> Share {
        if user.groups.iter().any(|g| g == "system:masters") {
            return Share {
                name: user.name.as_str().into(),
                user: None,
                counted: true,
            };
        }
        let mut users = self.users.lock().unwrap_or_else(PoisonError::into_inner);
        let semaphore = match users.get(&user.name).and_then(Weak::upgrade) {
            Some(semaphore) => semaphore,
            None => {
                // Forget users nobody refers to once they are as many as those still held,
                // so the map grows with the users being served, not with every user seen.
                if users.len() >= 64 && users.len().is_multiple_of(64) {
                    users.retain(|_, share| share.strong_count() > 0);
                }
                let semaphore = Arc::new(Semaphore::new(self.per_user));
                users.insert(user.name.clone(), Arc::downgrade(&semaphore));
                semaphore
            }
        };
        Share {
            name: user.name.as_str().into(),
            user: Some(semaphore),
            counted: true,
        }
    }

    fn try_hold(&self, share: &Share, bytes: usize) -> ApiResult<Permit> {
        if !share.counted {
            return Ok(Permit::none());
        }
        let count = |limit: usize| u32::try_from(bytes.min(limit)).unwrap_or(u32::MAX);
        let spent = |limit: Limit, message: String| {
            refused(limit);
            ApiError::TooManyRequests {
                message,
                retry_after_seconds: 1,
            }
        };
        let (user, unreserved) = match &share.user {
            None => (None, None),
            Some(semaphore) => {
                let user = semaphore
                    .clone()
                    .try_acquire_many_owned(count(self.per_user))
                    .map_err(|_| {
                        spent(
                            Limit::ResponsesPerUser,
                            format!(
                                "responses being written to {} hold {} bytes, what one user may hold; read or close the responses already open, or retry shortly",
                                share.name, self.per_user
                            ),
                        )
                    })?;
                let unreserved = self
                    .unreserved
                    .clone()
                    .try_acquire_many_owned(count(self.per_user))
                    .map_err(|_| {
                        spent(
                            Limit::ResponsesInFlight,
                            "responses being written hold what the server allows users outside system:masters; retry shortly".into(),
                        )
                    })?;
                (Some(user), Some(unreserved))
            }
        };
        let total = self
            .total
            .clone()
            .try_acquire_many_owned(count(self.capacity))
            .map_err(|_| {
                spent(
                    Limit::ResponsesInFlight,
                    "responses being written hold what the server allows; retry shortly".into(),
                )
            })?;
        Ok(Permit {
            user,
            unreserved,
            total: Some(total),
        })
    }

    /// Waits for the bytes, in one order (the user's share, the unreserved part, the total) so
    /// that waiters never hold what another waits for before it.
    async fn hold_waiting(&self, share: &Share, bytes: usize) -> Permit {
        if !share.counted {
            return Permit::none();
        }
        let count = |limit: usize| u32::try_from(bytes.min(limit)).unwrap_or(u32::MAX);
        let closed = "the response budget is never closed";
        let (user, unreserved) = match &share.user {
            None => (None, None),
            Some(semaphore) => {
                let user = semaphore
                    .clone()
                    .acquire_many_owned(count(self.per_user))
                    .await
                    .expect(closed);
                let unreserved = self
                    .unreserved
                    .clone()
                    .acquire_many_owned(count(self.per_user))
                    .await
                    .expect(closed);
                (Some(user), Some(unreserved))
            }
        };
        let total = self
            .total
            .clone()
            .acquire_many_owned(count(self.capacity))
            .await
            .expect(closed);
        Permit {
            user,
            unreserved,
            total: Some(total),
        }
    }
}

/// Takes `bytes` of what responses being written may hold, from `share`, until the permit is
/// dropped; a 429 when the user's share or the budget is spent.
pub fn hold(share: &Share, bytes: usize) -> ApiResult<Permit> {
    BUDGET.try_hold(share, bytes)
}

/// Takes `bytes` of the budget, waiting for it: for the next page of a response already
/// under way, which the clients holding the budget give back as they read or are cut.
pub async fn hold_waiting(share: &Share, bytes: usize) -> Permit {
    BUDGET.hold_waiting(share, bytes).await
}

/// `bytes`, holding their size of `share` until the last of them (or of a slice of them) is
/// dropped; a 429 when the share or the budget is spent.
pub fn counted<B: AsRef<[u8]> + Send + 'static>(share: &Share, bytes: B) -> ApiResult<Bytes> {
    let permit = hold(share, bytes.as_ref().len())?;
    Ok(Bytes::from_owner(Counted {
        bytes,
        _permit: permit,
    }))
}

/// Bytes and the part of the budget they hold.
struct Counted<B> {
    bytes: B,
    _permit: Permit,
}

impl<B: AsRef<[u8]>> AsRef<[u8]> for Counted<B> {
    fn as_ref(&self) -> &[u8] {
        self.bytes.as_ref()
    }
}

/// Middleware: every response larger than [`SMALL`] is paced. A whole body takes its size
/// from the budget (429 when spent) and is handed out in chunks; a streamed body is handed
/// out in chunks. Both are cut when their client stops reading.
pub async fn pace(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let (parts, body) = response.into_parts();
    let permit = match body.size_hint().exact() {
        Some(size) if size <= SMALL as u64 => return Response::from_parts(parts, body),
        Some(size) => {
            let share = parts
                .extensions
                .get::<Share>()
                .cloned()
                .unwrap_or_else(Share::anonymous);
            let size = usize::try_from(size).map_or(COUNTED_AT_MOST, |s| s.min(COUNTED_AT_MOST));
            match hold(&share, size) {
                Ok(permit) => Some(permit),
                Err(refusal) => return refusal.into_response(),
            }
        }
        None => None,
    };
    let body = body
        .into_data_stream()
        .map(|frame| frame.map_err(std::io::Error::other));
    Response::from_parts(parts, paced(body, permit))
}

/// A body handed out in chunks of at most [`CHUNK`] bytes, cut when its client takes
/// nothing for [`WRITE_STALL`]; `permit` is given back when it ends or is cut.
pub fn paced(
    body: impl Stream<Item = std::io::Result<Bytes>> + Send + 'static,
    permit: Option<Permit>,
) -> Body {
    paced_within(body, permit, WRITE_STALL)
}

fn paced_within(
    body: impl Stream<Item = std::io::Result<Bytes>> + Send + 'static,
    permit: Option<Permit>,
    stall: Duration,
) -> Body {
    let shared = Arc::new(Shared {
        pacing: Mutex::new(Pacing {
            held: Some(Held {
                body: body.boxed(),
                pending: Bytes::new(),
                _permit: permit,
            }),
            cut: false,
        }),
        epoch: Instant::now(),
        ready_since: AtomicU64::new(0),
    });
    tokio::spawn(cut_when_stalled(Arc::downgrade(&shared), stall));
    Body::from_stream(Paced { shared })
}

/// What a response holds until it is written or cut.
struct Held {
    body: BoxStream<'static, std::io::Result<Bytes>>,
    /// The rest of the body's last item, still to be handed out.
    pending: Bytes,
    _permit: Option<Permit>,
}

struct Pacing {
    /// `None` once the body ended or was cut.
    held: Option<Held>,
    /// Cut, and the connection not yet told: it is told with an error, so that it aborts
    /// the response rather than end it as if whole.
    cut: bool,
}

/// A paced body's state, shared with its watchdog.
struct Shared {
    pacing: Mutex<Pacing>,
    epoch: Instant,
    /// Since when the body has had something for the connection that the connection has not
    /// asked for: a chunk handed out, or its source waking it with more. Nanoseconds after
    /// `epoch`, plus one; 0 while the connection waits on the body (a quiet watch).
    ready_since: AtomicU64,
}

impl Shared {
    fn mark_ready(&self) {
        let now = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX - 1) + 1;
        let _ = self
            .ready_since
            .compare_exchange(0, now, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// How long the body has had something the connection has not asked for.
    fn waiting_for_connection(&self) -> Option<Duration> {
        match self.ready_since.load(Ordering::SeqCst) {
            0 => None,
            since => Some(
                self.epoch
                    .elapsed()
                    .saturating_sub(Duration::from_nanos(since - 1)),
            ),
        }
    }
}

/// The waker a body's source is polled with: it wakes the connection, and notes that the
/// body has something to give from then on, so a connection that does not come for it is
/// seen to stall. (A weak reference: the source holds this waker, and the state holds the
/// source.)
struct Nudge {
    shared: std::sync::Weak<Shared>,
    connection: std::task::Waker,
}

impl std::task::Wake for Nudge {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if let Some(shared) = self.shared.upgrade() {
            shared.mark_ready();
        }
        self.connection.wake_by_ref();
    }
}

struct Paced {
    shared: Arc<Shared>,
}

impl Stream for Paced {
    type Item = std::io::Result<Bytes>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let shared = &self.shared;
        shared.ready_since.store(0, Ordering::SeqCst);
        let mut pacing = shared.pacing.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(held) = pacing.held.as_mut() else {
            if std::mem::take(&mut pacing.cut) {
                return Poll::Ready(Some(Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the client took nothing of its response for too long",
                ))));
            }
            return Poll::Ready(None);
        };
        if held.pending.is_empty() {
            let nudge = std::task::Waker::from(Arc::new(Nudge {
                shared: Arc::downgrade(shared),
                connection: cx.waker().clone(),
            }));
            match held.body.poll_next_unpin(&mut Context::from_waker(&nudge)) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(item))) => held.pending = item,
                Poll::Ready(Some(Err(e))) => {
                    pacing.held = None;
                    return Poll::Ready(Some(Err(e)));
                }
                Poll::Ready(None) => {
                    pacing.held = None;
                    return Poll::Ready(None);
                }
            }
        }
        // A copy, so that the connection holding this chunk does not keep the whole item.
        let take = held.pending.len().min(CHUNK);
        let chunk = Bytes::copy_from_slice(&held.pending[..take]);
        held.pending = held.pending.slice(take..);
        shared.mark_ready();
        Poll::Ready(Some(Ok(chunk)))
    }
}

/// Drops what a response holds once its connection has not come for what the body had for
/// it for `stall`; ends with the response.
async fn cut_when_stalled(shared: std::sync::Weak<Shared>, stall: Duration) {
    loop {
        let Some(strong) = shared.upgrade() else {
            return;
        };
        let Some(wait) = cut_if_stalled(&strong, stall) else {
            return;
        };
        drop(strong);
        tokio::time::sleep(wait).await;
    }
}

/// Cuts the response if its connection has not come for what the body had for `stall`; how
/// long to wait before looking again, or `None` once the response is over. Looks again at
/// least four times per `stall`, so a cut comes between `stall` and a quarter more.
fn cut_if_stalled(shared: &Shared, stall: Duration) -> Option<Duration> {
    let waited = shared.waiting_for_connection();
    // Never wait for the lock: whoever holds it is polling the body, so its client is
    // reading, and a worker thread blocked here would hold up other requests.
    let mut pacing = match shared.pacing.try_lock() {
        Ok(pacing) => pacing,
        Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return Some(stall / 4),
    };
    pacing.held.as_ref()?;
    match waited {
        Some(waited) if waited >= stall => {
            pacing.held = None;
            pacing.cut = true;
            refused(Limit::StalledReaders);
            tracing::debug!("a client took nothing of its response for {stall:?}; it was cut");
            None
        }
        Some(waited) => Some((stall - waited).min(stall / 4)),
        None => Some(stall / 4),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use futures::stream;

    use super::*;

    /// Sets its flag when dropped: tells whether what a body held was let go.
    struct Dropped(Arc<AtomicBool>);

    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    /// A body of one 200,000-byte item and then nothing, as a watch with no more changes,
    /// and a flag set once the body's source is dropped.
    fn source() -> (Body, Arc<AtomicBool>) {
        let dropped = Arc::new(AtomicBool::new(false));
        let guard = Dropped(dropped.clone());
        let items = stream::iter([Ok(Bytes::from(vec![b'x'; 200_000]))])
            .chain(stream::pending())
            .map(move |item| {
                let _held = &guard;
                item
            });
        (paced_within(items, None, STALL), dropped)
    }

    fn user(name: &str, groups: &[&str]) -> User {
        User {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }

    #[test]
    fn one_user_holds_at_most_its_share_and_others_are_still_served() {
        let budget = Budget::new(100, 20, 30);
        let mallory = budget.share(&user("mallory", &["system:authenticated"]));
        let mut held = vec![];
        for _ in 0..3 {
            held.push(budget.try_hold(&mallory, 10).expect("within the share"));
        }
        let refused = budget
            .try_hold(&mallory, 10)
            .err()
            .expect("beyond the share");
        assert!(
            refused.to_string().contains("what one user may hold"),
            "{refused}"
        );
        // The same user through a second request: the same share.
        let again = budget.share(&user("mallory", &[]));
        assert!(budget.try_hold(&again, 1).is_err());
        let bob = budget.share(&user("bob", &[]));
        let _bob = budget
            .try_hold(&bob, 30)
            .expect("another user has its own share");
        // Bob and mallory hold 60; the unreserved 80 has 20 left, so a third user is held
        // to that, and the reserve is for system:masters.
        let carol = budget.share(&user("carol", &[]));
        let _carol = budget
            .try_hold(&carol, 20)
            .expect("what is left unreserved");
        assert!(
            budget.try_hold(&carol, 1).is_err(),
            "the reserve is not carol's"
        );
        let admin = budget.share(&user("admin", &["system:masters"]));
        let _admin = budget
            .try_hold(&admin, 20)
            .expect("system:masters take the reserve");
        assert!(
            budget.try_hold(&admin, 1).is_err(),
            "the total is the total"
        );
        // What mallory gives back is hers to take again.
        held.pop();
        budget.try_hold(&mallory, 10).expect("given back");
    }

    #[tokio::test]
    async fn a_permit_kept_to_its_page_gives_back_the_rest_everywhere() {
        let budget = Budget::new(100, 20, 40);
        let mallory = budget.share(&user("mallory", &[]));
        let mut page = budget.hold_waiting(&mallory, 40).await;
        assert!(budget.try_hold(&mallory, 1).is_err());
        page.keep(10);
        let _rest = budget
            .try_hold(&mallory, 30)
            .expect("the user's share given back");
        assert_eq!(budget.unreserved.available_permits(), 40);
        assert_eq!(budget.total.available_permits(), 60);
    }

    #[test]
    fn counted_bytes_hold_their_size_until_the_last_slice_goes() {
        let mallory = Share::of(&user("counted-bytes-test", &["system:authenticated"]));
        let bytes = counted(&mallory, vec![b'x'; MAX_RESPONSE_BYTES_PER_USER / 2]).unwrap();
        let rest = bytes.slice(10..);
        assert!(counted(&mallory, vec![b'x'; MAX_RESPONSE_BYTES_PER_USER / 2 + 1]).is_err());
        drop(bytes);
        assert!(
            counted(&mallory, vec![b'x'; MAX_RESPONSE_BYTES_PER_USER / 2 + 1]).is_err(),
            "a slice still holds the bytes"
        );
        drop(rest);
        counted(&mallory, vec![b'x'; MAX_RESPONSE_BYTES_PER_USER / 2 + 1]).expect("given back");
        let in_process = Share::in_process();
        counted(&in_process, vec![b'x'; MAX_RESPONSE_BYTES_PER_USER + 1])
            .expect("the server's own callers are not counted");
    }

    #[test]
    fn users_nobody_refers_to_are_forgotten() {
        let budget = Budget::new(100, 20, 30);
        let kept = budget.share(&user("kept", &[]));
        for n in 0..1000 {
            drop(budget.share(&user(&format!("user-{n}"), &[])));
        }
        let users = budget.users.lock().unwrap().len();
        assert!(users <= 128, "{users} users remembered");
        assert!(Arc::ptr_eq(
            kept.user.as_ref().unwrap(),
            budget.share(&user("kept", &[])).user.as_ref().unwrap()
        ));
    }

    /// The tests' stall deadline, short so they run in real time.
    const STALL: Duration = Duration::from_millis(300);

    #[tokio::test]
    async fn a_client_that_stops_reading_is_cut_and_what_it_held_is_dropped() {
        let (body, dropped) = source();
        let mut frames = body.into_data_stream();
        let first = frames.next().await.unwrap().unwrap();
        assert_eq!(first.len(), CHUNK, "bodies go out in chunks");
        tokio::time::sleep(STALL / 3).await;
        assert!(!dropped.load(Ordering::SeqCst), "cut before the deadline");
        tokio::time::sleep(STALL * 2).await;
        assert!(
            dropped.load(Ordering::SeqCst),
            "a stalled body keeps its source"
        );
        assert!(
            frames.next().await.unwrap().is_err(),
            "the connection is told with an error, not a clean end"
        );
        assert!(frames.next().await.is_none());
    }

    /// A source that has nothing at first and has its next item later, when the connection
    /// no longer asks (its socket full): the wake marks the body as waiting on the
    /// connection, and it is cut.
    #[tokio::test]
    async fn a_client_that_stops_reading_while_the_body_waits_for_more_is_cut() {
        let dropped = Arc::new(AtomicBool::new(false));
        let guard = Dropped(dropped.clone());
        let (sender, receiver) = futures::channel::mpsc::unbounded::<std::io::Result<Bytes>>();
        let items = receiver.map(move |item| {
            let _held = &guard;
            item
        });
        let mut frames = paced_within(items, None, STALL).into_data_stream();
        // The connection asks; the body has nothing yet.
        assert!(
            tokio::time::timeout(STALL / 10, frames.next())
                .await
                .is_err(),
            "nothing to give yet"
        );
        // More arrives, and the connection does not come for it.
        sender
            .unbounded_send(Ok(Bytes::from_static(b"more")))
            .unwrap();
        tokio::time::sleep(STALL * 2).await;
        assert!(
            dropped.load(Ordering::SeqCst),
            "a stalled body keeps its source"
        );
        assert!(frames.next().await.unwrap().is_err());
    }

    #[tokio::test]
    async fn a_client_that_reads_everything_and_waits_is_not_cut() {
        let (body, dropped) = source();
        let reader = tokio::spawn(async move {
            let mut frames = body.into_data_stream();
            let mut read = 0;
            while let Some(frame) = frames.next().await {
                read += frame.unwrap().len();
            }
            read
        });
        tokio::time::sleep(STALL * 4).await;
        assert!(
            !dropped.load(Ordering::SeqCst),
            "a client waiting for more is not stalled"
        );
        assert!(!reader.is_finished());
        reader.abort();
    }
}
