//! A downstream cluster's answers, read within bounds. A long-lived read through an agent's
//! tunnel (the Node watch) is paid for by the management plane as it decodes, so what one
//! cluster sends must not take memory or CPU from the others: no line (one page of a list, one
//! watch event, as kube-apiserver writes them) longer than [`Limits::line_bytes`], none slower
//! than [`Limits::line_time`] once its first byte came, and no more than
//! [`Limits::bytes_per_second`] on average, beyond a burst of one line's worth. A cluster that
//! sends more is read more slowly (the tunnel's flow control holds it back); one that sends a
//! line too long or too slow has its answer cut with an error that says which.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use hyper::body::{Body, Bytes, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

/// What a downstream answer may cost.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub(crate) line_bytes: usize,
    pub(crate) line_time: Duration,
    pub(crate) bytes_per_second: u64,
}

/// Why an answer was cut.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Exceeded {
    #[error(
        "the cluster's API sent a line of more than {0} bytes (one page of a list or one watch event)"
    )]
    LineBytes(usize),
    #[error(
        "the cluster's API took more than {0:?} to send one line (one page of a list or one watch event)"
    )]
    LineTime(Duration),
    #[error(transparent)]
    Inner(Box<dyn std::error::Error + Send + Sync>),
}

/// What one reader (every answer of one cluster's watch, one after another) may still read
/// at once: the rate is shared by its answers, so that a cluster cannot reset it by answering
/// in many short responses.
#[derive(Clone)]
pub(crate) struct Allowance {
    limits: Limits,
    /// Bytes that may arrive now (below zero: owed), as of `refilled`.
    bytes: Arc<Mutex<(f64, Instant)>>,
}

impl Allowance {
    pub(crate) fn new(limits: Limits) -> Allowance {
        Allowance {
            limits,
            bytes: Arc::new(Mutex::new((limits.line_bytes as f64, Instant::now()))),
        }
    }

    /// Takes `n` bytes; how long to wait before reading more.
    fn take(&self, n: usize) -> Option<Duration> {
        let rate = self.limits.bytes_per_second as f64;
        let mut bytes = self.bytes.lock().expect("lock");
        let (left, refilled) = &mut *bytes;
        let now = Instant::now();
        *left = (*left + now.duration_since(*refilled).as_secs_f64() * rate)
            .min(self.limits.line_bytes as f64)
            - n as f64;
        *refilled = now;
        (*left < 0.0).then(|| Duration::from_secs_f64(-*left / rate))
    }
}

/// `inner`, read within its reader's allowance.
pub(crate) struct BoundedBody<B> {
    inner: B,
    allowance: Allowance,
    limits: Limits,
    /// Bytes of the line being read, and when it must be complete.
    line: usize,
    line_due: Option<Pin<Box<Sleep>>>,
    /// Until when reading waits for the rate.
    pause: Option<Pin<Box<Sleep>>>,
}

impl<B> BoundedBody<B> {
    pub(crate) fn new(inner: B, allowance: &Allowance) -> BoundedBody<B> {
        BoundedBody {
            inner,
            allowance: allowance.clone(),
            limits: allowance.limits,
            line: 0,
            line_due: None,
            pause: None,
        }
    }

    /// Counts `data` against the limits.
    fn take(&mut self, data: &[u8]) -> Result<(), Exceeded> {
        if let Some(wait) = self.allowance.take(data.len()) {
            self.pause = Some(Box::pin(tokio::time::sleep(wait)));
        }
        // Each newline closes a line; the bytes after the last one open the next.
        let mut lines = data.split(|&b| b == b'\n');
        self.line += lines.next().map_or(0, <[u8]>::len);
        for line in lines {
            if self.line > self.limits.line_bytes {
                break;
            }
            self.line = line.len();
            self.line_due = None;
        }
        if self.line > self.limits.line_bytes {
            return Err(Exceeded::LineBytes(self.limits.line_bytes));
        }
        if self.line > 0 && self.line_due.is_none() {
            self.line_due = Some(Box::pin(tokio::time::sleep(self.limits.line_time)));
        }
        Ok(())
    }
}

impl<B> Body for BoundedBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = Exceeded;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Exceeded>>> {
        let this = &mut *self;
        if let Some(pause) = &mut this.pause {
            ready!(pause.as_mut().poll(cx));
            this.pause = None;
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.take(data)?;
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(error))) => Poll::Ready(Some(Err(Exceeded::Inner(error.into())))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                let late =
                    (this.line_due.as_mut()).is_some_and(|due| due.as_mut().poll(cx).is_ready());
                if late {
                    Poll::Ready(Some(Err(Exceeded::LineTime(this.limits.line_time))))
                } else {
                    Poll::Pending
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use http_body_util::{BodyExt, StreamBody};

    // Real time, not tokio's paused clock: its `test-util` feature in a dev-dependency would
    // give the tests another tokio, and with it a second build of everything above tokio (the
    // AWS SDK's crates included) in CI. Each bound below holds in one direction whatever the
    // machine's load: a rate can only make reading slower, a drip only later.
    const LIMITS: Limits = Limits {
        line_bytes: 1_000,
        line_time: Duration::from_millis(300),
        bytes_per_second: 10_000,
    };

    /// A body of `chunks`, each after `gap`.
    fn body(
        chunks: Vec<&'static str>,
        gap: Duration,
    ) -> BoundedBody<impl Body<Data = Bytes, Error = std::convert::Infallible> + Unpin> {
        let stream = futures::stream::iter(chunks).then(move |chunk| async move {
            tokio::time::sleep(gap).await;
            Ok(Frame::data(Bytes::from_static(chunk.as_bytes())))
        });
        BoundedBody::new(StreamBody::new(Box::pin(stream)), &Allowance::new(LIMITS))
    }

    #[tokio::test]
    async fn lines_within_bounds_pass_unchanged() {
        let chunks = vec!["{\"a\":", "1}\n{\"b\"", ":2}\n"];
        let read = body(chunks, Duration::ZERO).collect().await.unwrap();
        assert_eq!(read.to_bytes(), "{\"a\":1}\n{\"b\":2}\n");
    }

    #[tokio::test]
    async fn a_line_too_long_is_cut_though_it_comes_in_pieces() {
        let long = "x".repeat(600).leak();
        let error = body(vec!["ok\n", long, long], Duration::ZERO)
            .collect()
            .await
            .unwrap_err();
        assert!(matches!(error, Exceeded::LineBytes(1_000)), "{error}");
        // Within one chunk, between two newlines.
        let inside = format!("a\n{}\nb", "y".repeat(1_001)).leak();
        let error = body(vec![inside], Duration::ZERO)
            .collect()
            .await
            .unwrap_err();
        assert!(matches!(error, Exceeded::LineBytes(1_000)), "{error}");
    }

    #[tokio::test]
    async fn a_line_dripped_too_slowly_is_cut_but_quiet_between_lines_is_not() {
        // Quiet between whole lines (each gap longer than a line may take) is a watch with
        // nothing to say.
        let quiet = body(vec!["a\n", "b\n", "c\n"], Duration::from_millis(400));
        assert!(quiet.collect().await.is_ok());
        // One line in pieces 100 ms apart: 400 ms at least from its first byte to its end.
        let drip = body(
            vec!["{", "\"a\"", ":1", "}", "\n"],
            Duration::from_millis(100),
        );
        let error = drip.collect().await.unwrap_err();
        assert!(matches!(error, Exceeded::LineTime(_)), "{error}");
    }

    #[tokio::test]
    async fn a_flood_is_read_at_the_rate() {
        // 1,000 bytes of burst, then 10,000 a second: 4,000 bytes take 300 ms at least.
        let line = format!("{}\n", "z".repeat(499)).leak();
        let start = Instant::now();
        let read = body(vec![line; 8], Duration::ZERO).collect().await.unwrap();
        assert_eq!(read.to_bytes().len(), 4_000);
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(290), "{took:?}");
    }

    #[tokio::test]
    async fn answers_one_after_another_share_the_rate() {
        let allowance = Allowance::new(LIMITS);
        let line = format!("{}\n", "z".repeat(999)).leak();
        let start = Instant::now();
        for _ in 0..4 {
            let stream = futures::stream::iter([Ok::<_, std::convert::Infallible>(Frame::data(
                Bytes::from_static(line.as_bytes()),
            ))]);
            let body = BoundedBody::new(StreamBody::new(stream), &allowance);
            body.collect().await.unwrap();
        }
        // The first answer is the burst; each later one waits 100 ms for its 1,000 bytes (had
        // each answer its own allowance, all four would be read at once).
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(290), "{took:?}");
    }
}
