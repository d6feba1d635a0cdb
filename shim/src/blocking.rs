//! Blocking work (file-system calls, tar streams) run off the runtime thread, on tokio's blocking
//! pool, through one boxed closure type: each closure type given to `spawn_blocking` costs the
//! binary its own task type (about 1 to 2.5 KiB: poll, output slot, join handle, shutdown); a
//! result comes back through a oneshot channel instead, which costs far less per result type.

use tokio::sync::oneshot;

/// Runs `work` on the blocking pool without waiting for it.
pub(crate) fn detach(work: Box<dyn FnOnce() + Send>) {
    drop(tokio::task::spawn_blocking(work));
}

/// Starts `work` on the blocking pool at once; the future returned gives its result, `None` when
/// it never finished (it panicked, or the runtime is shutting down).
pub(crate) fn run<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> impl Future<Output = Option<T>> {
    let (tx, rx) = oneshot::channel();
    detach(Box::new(move || {
        let _ = tx.send(work());
    }));
    async move { rx.await.ok() }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn runs_off_the_runtime_thread_and_returns() {
        let here = std::thread::current().id();
        let there = super::run(move || std::thread::current().id()).await;
        assert!(there.is_some_and(|t| t != here));
        // Started before it is awaited.
        let (tx, rx) = std::sync::mpsc::channel();
        let pending = super::run(move || tx.send(6 * 7));
        assert_eq!(rx.recv_timeout(std::time::Duration::from_secs(10)), Ok(42));
        assert_eq!(pending.await, Some(Ok(())));
    }
}
