//! Shutdown of the process table: every descendant's process group signalled, and the wait until
//! every process has finished and no descendant lives.

use std::time::Duration;

use crate::{info, warn};
use tokio::time::Instant;

use super::Table;
use crate::tree;

impl Table {
    /// Signals every process group of the shim's descendants (the table's processes and whatever
    /// they left behind, found through `/proc`), and every descendant alone; returns how many
    /// groups were signalled.
    pub(crate) fn signal_all(&self, sig: i32) -> usize {
        let me = std::process::id() as i32;
        let all = tree::scan();
        let own_group = all.iter().find(|e| e.pid == me).map_or(me, |e| e.pgid);
        let descendants = tree::descendants(&all, me);
        let candidates = self.lock().by_pid.keys().copied().collect::<Vec<_>>();
        // Each group once; a linear check (a few thousand groups at most at shutdown) is less code
        // than a set or a sort.
        let mut groups: Vec<i32> = Vec::new();
        for g in candidates
            .into_iter()
            .chain(descendants.iter().map(|e| e.pgid))
        {
            if g != own_group && !groups.contains(&g) {
                groups.push(g);
            }
        }
        let n = groups
            .iter()
            .filter(|&&g| crate::sys::kill_group(g, sig).is_ok())
            .count();
        for e in descendants.iter().filter(|e| e.pgid == own_group) {
            let _ = crate::sys::kill_pid(e.pid, sig);
        }
        n
    }

    /// Whether any process is not yet reaped or drained.
    pub(crate) fn any_running(&self) -> bool {
        let inner = self.lock();
        !inner.by_pid.is_empty() || inner.by_id.values().any(|p| p.is_running())
    }

    /// Counts of (running, exited) processes.
    pub(crate) fn counts(&self) -> (usize, usize) {
        let inner = self.lock();
        let running = inner.by_id.values().filter(|p| p.is_running()).count();
        (running, inner.by_id.len() - running)
    }

    /// TERM every descendant process group, wait up to `grace`, KILL what is left, and wait
    /// (bounded) for the exit frames.
    pub(crate) async fn shutdown(&self, grace: Duration) {
        self.close();
        let n = self.signal_all(libc::SIGTERM);
        info!(
            groups = n,
            grace_ms = grace.as_millis() as u64,
            "shutting down: sent SIGTERM"
        );
        if !self.wait_idle(Instant::now() + grace).await {
            let n = self.signal_all(libc::SIGKILL);
            warn!(groups = n, "grace period over: sent SIGKILL");
            self.wait_idle(Instant::now() + self.settings.drain + Duration::from_secs(2))
                .await;
        }
    }

    /// Waits until every process has finished and no descendant lives, or `deadline`. Woken by
    /// the table's events (every reap, including orphans', and every exit frame): the last live
    /// descendant to go is always a child of the shim or of a live descendant, so its end is
    /// always followed by a reap here.
    async fn wait_idle(&self, deadline: Instant) -> bool {
        let mut events = self.events.subscribe();
        loop {
            let me = std::process::id() as i32;
            if !self.any_running() && tree::descendants(&tree::scan(), me).is_empty() {
                return true;
            }
            match tokio::time::timeout_at(deadline, events.changed()).await {
                Ok(Ok(())) => {}
                _ => return false,
            }
        }
    }
}
