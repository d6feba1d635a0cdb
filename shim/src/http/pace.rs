//! How long a file transfer may wait on its peer (PROTOCOL.md 4.8): no single wait longer than
//! `STEPSHIM_FILES_IDLE_TIMEOUT`, and at least `STEPSHIM_FILES_MIN_RATE_BYTES` moved per
//! `STEPSHIM_FILES_MIN_RATE_INTERVAL` of waiting, so a peer that takes (or sends) one byte now and
//! then cannot hold a transfer slot for the pod's life.
//!
//! Only the time spent waiting on the peer (a download's chunk not taken, an upload's bytes not
//! arriving) fills an interval: time the shim spends on its own disk between waits is not the
//! peer's fault and never counts against it.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::time::Instant;

/// Why a transfer was cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cut {
    /// One wait lasted the idle timeout.
    Idle,
    /// An interval of waiting moved less than the minimum.
    Slow,
}

impl Cut {
    /// The reason as the log line and an upload's 400 give it.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Cut::Idle => "the peer moved nothing for STEPSHIM_FILES_IDLE_TIMEOUT",
            Cut::Slow => {
                "the peer moved less than STEPSHIM_FILES_MIN_RATE_BYTES in STEPSHIM_FILES_MIN_RATE_INTERVAL"
            }
        }
    }
}

/// One transfer's waits on its peer, judged interval by interval.
#[derive(Debug)]
pub(crate) struct Pace {
    idle: Duration,
    /// Bytes one interval must move; 0 judges nothing.
    min: u64,
    interval: Duration,
    /// Waiting in the current interval, and the bytes it moved.
    waited: Duration,
    moved: u64,
}

impl Pace {
    /// The caps of the configuration, with a fresh interval.
    pub(crate) fn new(f: &crate::config::FilesSettings) -> Pace {
        Pace {
            idle: f.idle_timeout,
            min: f.min_rate_bytes,
            interval: f.min_rate_interval,
            waited: Duration::ZERO,
            moved: 0,
        }
    }

    /// Waits on the peer for `fut` (which keeps its own result: one copy of this for both
    /// directions): cut when this one wait reaches the idle timeout, or when the current interval
    /// fills up with less than the minimum. What it moved is told to [`moved`].
    ///
    /// [`moved`]: Pace::moved
    pub(crate) async fn wait(
        &mut self,
        mut fut: Pin<&mut dyn Future<Output = ()>>,
    ) -> Result<(), Cut> {
        let idle_at = Instant::now() + self.idle;
        loop {
            let start = Instant::now();
            let until = match self.min {
                0 => idle_at,
                _ => idle_at.min(start + self.interval.saturating_sub(self.waited)),
            };
            let done = tokio::time::timeout_at(until, fut.as_mut()).await;
            self.waited += start.elapsed();
            match done {
                Ok(()) => return Ok(()),
                Err(_) if until == idle_at => return Err(cut(Cut::Idle)),
                Err(_) => self.judge()?,
            }
        }
    }

    /// Counts the bytes the last wait moved, then judges the interval.
    pub(crate) fn moved(&mut self, n: u64) -> Result<(), Cut> {
        self.moved += n;
        self.judge()
    }

    /// Closes the interval once it is full: cut when it moved less than the minimum.
    fn judge(&mut self) -> Result<(), Cut> {
        if self.min == 0 || self.waited < self.interval {
            return Ok(());
        }
        if self.moved < self.min {
            return Err(cut(Cut::Slow));
        }
        self.waited = Duration::ZERO;
        self.moved = 0;
        Ok(())
    }
}

/// Logs a cut, once for both directions.
fn cut(c: Cut) -> Cut {
    crate::warn!(cause = c.reason(), "file transfer cut off");
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pace(min: u64) -> Pace {
        Pace {
            idle: Duration::from_secs(60),
            min,
            interval: Duration::from_secs(30),
            waited: Duration::ZERO,
            moved: 0,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_trickle_is_cut_after_one_interval_of_waiting() {
        let mut p = pace(1000);
        let t = Instant::now();
        let mut cut = None;
        for _ in 0..100 {
            let slow = std::pin::pin!(tokio::time::sleep(Duration::from_secs(1)));
            if let Err(c) = p.wait(slow).await.and_then(|()| p.moved(1)) {
                cut = Some(c);
                break;
            }
        }
        assert_eq!(cut, Some(Cut::Slow));
        assert_eq!(t.elapsed(), Duration::from_secs(30));
    }

    #[tokio::test(start_paused = true)]
    async fn enough_bytes_per_interval_and_time_off_the_peer_are_not_cut() {
        let mut p = pace(1000);
        for _ in 0..100 {
            // 500 bytes per second of waiting, far above the minimum.
            p.wait(std::pin::pin!(tokio::time::sleep(Duration::from_secs(1))))
                .await
                .unwrap();
            p.moved(500).unwrap();
        }
        // Time between waits (the shim's own disk) is not counted.
        let mut p = pace(1000);
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_secs(100)).await;
            p.wait(std::pin::pin!(std::future::ready(())))
                .await
                .unwrap();
            p.moved(1).unwrap();
        }
    }

    #[tokio::test(start_paused = true)]
    async fn one_long_wait_is_idle_and_zero_disables_the_rate() {
        let mut p = pace(0);
        let never = std::pin::pin!(std::future::pending::<()>());
        assert_eq!(p.wait(never).await, Err(Cut::Idle));
        let mut p = pace(0);
        for _ in 0..100 {
            p.wait(std::pin::pin!(tokio::time::sleep(Duration::from_secs(59))))
                .await
                .unwrap();
            p.moved(0).unwrap();
        }
    }
}
