//! The reaper: the shim's only caller of `waitpid`. Woken by SIGCHLD (and by a slow timer as a safety
//! net), it collects every child that has ended, its own processes and re-parented orphans alike, and
//! hands each exit to the process table by pid.

use std::sync::Arc;
use std::time::Duration;

use crate::{error, warn};
use protocol::Exit;
use tokio::signal::unix::{SignalKind, signal};

use crate::sys::{self, Reaped};
use crate::table::Table;

/// Installs the SIGCHLD handler. Call before the first spawn, so no child's exit goes unnoticed.
pub fn install() -> Option<tokio::signal::unix::Signal> {
    match signal(SignalKind::child()) {
        Ok(s) => Some(s),
        Err(e) => {
            // Without the handler the timer below still reaps, only later.
            error!(cause = %e, "cannot install SIGCHLD handler; reaping on a timer only");
            None
        }
    }
}

/// Reaps forever.
pub async fn run(table: Arc<Table>, mut sigchld: Option<tokio::signal::unix::Signal>) {
    loop {
        reap_all(&table);
        let tick = tokio::time::sleep(Duration::from_secs(1));
        match sigchld.as_mut() {
            Some(s) => {
                tokio::select! {
                    _ = s.recv() => {}
                    _ = tick => {}
                }
            }
            None => tick.await,
        }
    }
}

/// Collects every child that is waiting to be reaped.
pub fn reap_all(table: &Table) {
    loop {
        match sys::reap_one() {
            Ok(Some(Reaped::Exited(pid, code))) => table.route_exit(pid, Exit::code(code)),
            Ok(Some(Reaped::Signaled(pid, sig))) => table.route_exit(pid, Exit::signal(sig)),
            Ok(None) => return,
            Err(e) => {
                warn!(cause = %e, "waitpid failed");
                return;
            }
        }
    }
}
