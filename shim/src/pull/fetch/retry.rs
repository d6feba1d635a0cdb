//! When a fetch asks its source again: after a failed attempt, with a pause doubling from 200 ms
//! to 5 s, up to `connect_retries` or `STEPSHIM_PULL_RETRIES` failures in a row; after a busy
//! source's 503, with a short spread pause, up to `STEPSHIM_PULL_BUSY_SECONDS` of them.

use std::io;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{Attempt, Fetch};

/// Longest pause between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

impl Fetch<'_> {
    /// Opens a connection from `got` on, retrying (with a growing pause) what may pass.
    pub(super) fn connect(&mut self) -> io::Result<()> {
        loop {
            if self.pull.cancelled.load(Ordering::Acquire) {
                return Err(self.fail("cancelled".into()));
            }
            let why = match self.attempt() {
                Attempt::Connected => {
                    self.busy_since = None;
                    self.pull.lock().waiting = false;
                    return Ok(());
                }
                Attempt::GiveUp(fatal) => return Err(self.fail(fatal)),
                Attempt::Busy(why) => {
                    self.wait_busy(why)?;
                    continue;
                }
                Attempt::Retry(why) => why,
            };
            self.busy_since = None;
            self.pull.lock().waiting = false;
            self.failures += 1;
            let (retries, setting) = self.retries();
            if self.failures > retries {
                let n = self.failures;
                return Err(self.fail(format!(
                    "{why} (gave up after {n} attempts without progress, {setting} {retries})"
                )));
            }
            crate::debug!(pull = %self.pull.id, got = self.got, cause = %why, "pull resumes");
            let pause = Duration::from_millis(100 << self.failures.min(6)).min(MAX_BACKOFF);
            std::thread::sleep(pause);
        }
    }

    /// Waits a moment before asking a busy source again, or gives up once it has been busy for
    /// `STEPSHIM_PULL_BUSY_SECONDS`. The pause is 50 ms plus the time the source has been busy, at
    /// most 1 s, taken at 50 to 100% (spread by the pull's id and count): a slot that frees soon is
    /// taken soon, and many waiting pulls do not ask in step.
    fn wait_busy(&mut self, why: String) -> io::Result<()> {
        let since = *self.busy_since.get_or_insert_with(std::time::Instant::now);
        if since.elapsed() >= self.s.busy {
            let secs = self.s.busy.as_secs();
            let setting = protocol::settings::PULL_BUSY_SECONDS;
            return Err(self.fail(format!("{why} (still busy after {secs} s, {setting})")));
        }
        let n = {
            let mut p = self.pull.lock();
            p.busy += 1;
            p.waiting = true;
            p.busy
        };
        let spread = self
            .pull
            .id
            .bytes()
            .fold(n, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
        let doubled = since.elapsed().as_millis().min(1000) as u64;
        let full = (50 + doubled).min(1000);
        crate::debug!(pull = %self.pull.id, cause = %why, "the source is busy: waiting");
        std::thread::sleep(Duration::from_millis(
            full / 2 + u64::from(spread) % (full / 2 + 1),
        ));
        Ok(())
    }

    /// Retries (failed attempts in a row after the first) allowed, and the setting that says so:
    /// the spec's `connect_retries` until the source answered, then `STEPSHIM_PULL_RETRIES`.
    fn retries(&self) -> (u32, &'static str) {
        let limit = self.s.retries;
        match self.pull.spec.connect_retries {
            Some(r) if !self.pull.lock().reached && r < limit => (r, "connect_retries"),
            _ => (limit, protocol::settings::PULL_RETRIES),
        }
    }
}
