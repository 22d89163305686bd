//! What responses being written may hold, and when a client that stopped reading is cut.
//!
//! A response stays in memory until its client reads it, so a client that asks and never
//! reads holds what it asked for: the first probe of issue 37 held gigabytes with lists and
//! watches it did not read. Three rules bound that:
//! - every response body is handed to the connection in copies of at most [`CHUNK`] bytes,
//!   so a connection holds at most one chunk of a response its client does not read;
//! - a response whose client takes nothing for [`WRITE_STALL`] is cut, and what it held is
//!   dropped (kube-apiserver's watch cache closes unresponsive watchers the same way);
//! - what responses hold while being written (whole bodies, and the store pages a streamed
//!   list reads) is taken from one budget of [`MAX_RESPONSE_BYTES_IN_FLIGHT`]; a request
//!   that finds it spent is answered 429.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::limits::{Limit, refused};
use crate::status::{ApiError, ApiResult};

/// What responses being written may hold together: 1 GiB. Fixed.
pub const MAX_RESPONSE_BYTES_IN_FLIGHT: usize = 1024 * 1024 * 1024;

/// How long a client may take nothing of a response before it is cut: 60 s, kube-apiserver's
/// request timeout. Fixed.
pub const WRITE_STALL: Duration = Duration::from_secs(60);

/// The largest piece of a body handed to the connection at once.
const CHUNK: usize = 64 * 1024;

/// Bodies up to this size go out as they are: the connection caps bound what they hold.
const SMALL: usize = CHUNK;

/// A whole body counts against the budget up to this size. Only a proxied body is larger
/// (this server's own are bounded by the object and list page limits), and a proxied body
/// streams through: the connection holds one chunk of it, not its length.
const COUNTED_AT_MOST: usize = 16 * 1024 * 1024;

static RESPONSE_BYTES: LazyLock<Arc<Semaphore>> =
    LazyLock::new(|| Arc::new(Semaphore::new(MAX_RESPONSE_BYTES_IN_FLIGHT)));

fn permits(bytes: usize) -> u32 {
    u32::try_from(bytes.min(MAX_RESPONSE_BYTES_IN_FLIGHT)).unwrap_or(u32::MAX)
}

/// Takes `bytes` of what responses being written may hold, until the permit is dropped;
/// a 429 when it is spent.
pub fn hold(bytes: usize) -> ApiResult<OwnedSemaphorePermit> {
    RESPONSE_BYTES
        .clone()
        .try_acquire_many_owned(permits(bytes))
        .map_err(|_| {
            refused(Limit::ResponsesInFlight);
            ApiError::TooManyRequests {
                message: format!(
                    "responses being written hold {MAX_RESPONSE_BYTES_IN_FLIGHT} bytes, the server's limit; retry shortly"
                ),
                retry_after_seconds: 1,
            }
        })
}

/// Takes `bytes` of the budget, waiting for it: for the next page of a response already
/// under way, which the clients holding the budget give back as they read or are cut.
pub async fn hold_waiting(bytes: usize) -> OwnedSemaphorePermit {
    RESPONSE_BYTES
        .clone()
        .acquire_many_owned(permits(bytes))
        .await
        .expect("the response budget is never closed")
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
            match hold(usize::try_from(size).map_or(COUNTED_AT_MOST, |s| s.min(COUNTED_AT_MOST))) {
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
    permit: Option<OwnedSemaphorePermit>,
) -> Body {
    paced_within(body, permit, WRITE_STALL)
}

fn paced_within(
    body: impl Stream<Item = std::io::Result<Bytes>> + Send + 'static,
    permit: Option<OwnedSemaphorePermit>,
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
    _permit: Option<OwnedSemaphorePermit>,
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
