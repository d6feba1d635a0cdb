//! The idle deadline of a client connection: a byte moving either way, on the client's connection
//! or on the source connection streaming to it, moves the deadline on; when it passes, the
//! connection is closed (mid-body: the client sees a cut, never a clean end). One clock covers a
//! client that stops reading, a source that stops sending, and a keep-alive connection left open.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// When a byte last moved, shared by the client connection and its source connections.
#[derive(Debug, Clone)]
pub struct Activity {
    start: Instant,
    /// Milliseconds since `start` at the last movement.
    last: Arc<AtomicU64>,
}

impl Activity {
    /// A clock started now.
    pub fn new() -> Self {
        Activity {
            start: Instant::now(),
            last: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Records a movement now.
    pub fn touch(&self) {
        let ms = self.start.elapsed().as_millis() as u64;
        self.last.fetch_max(ms, Ordering::Relaxed);
    }

    /// Completes once nothing has moved for `idle`.
    pub async fn expired(&self, idle: Duration) {
        loop {
            let last = self.start + Duration::from_millis(self.last.load(Ordering::Relaxed));
            let deadline = last + idle;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

impl Default for Activity {
    fn default() -> Self {
        Self::new()
    }
}

/// An I/O stream whose reads and writes of at least one byte touch an [`Activity`].
#[derive(Debug)]
pub struct Marked<T> {
    inner: T,
    activity: Activity,
}

impl<T> Marked<T> {
    /// `inner`, touching `activity`.
    pub fn new(inner: T, activity: Activity) -> Self {
        Marked { inner, activity }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Marked<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Marked<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_deadline_moves_with_each_touch() {
        let a = Activity::new();
        let t0 = Instant::now();
        tokio::time::sleep(Duration::from_secs(3)).await;
        a.touch();
        a.expired(Duration::from_secs(5)).await;
        assert_eq!(
            t0.elapsed().as_secs(),
            8,
            "five seconds after the touch at 3"
        );
    }
}
