//! The reaper: the shim's only caller of `waitpid`. Woken by SIGCHLD, taken from a `signalfd` (and
//! by a slow timer as a safety net), it collects every child that has ended, its own processes and
//! re-parented orphans alike, and hands each exit to the process table by pid.

use std::fs::File;
use std::sync::Arc;
use std::time::Duration;

use crate::{error, warn};
use protocol::Exit;
use tokio::io::unix::AsyncFd;

use crate::sys::{self, Reaped};
use crate::table::Table;

/// SIGCHLD as a pollable fd.
pub(crate) type Sigchld = AsyncFd<File>;

/// Blocks SIGCHLD (see [`crate::boot::process_settings`], which already did so before any thread
/// started) and opens the fd it is read from. Call before the first spawn, so no child's exit goes
/// unnoticed.
pub(crate) fn install() -> Option<Sigchld> {
    match sys::watch_signals(sys::Signals::Child) {
        Ok(fd) => Some(fd),
        Err(e) => {
            // Without it the timer below still reaps, only later.
            error!(cause = %e, "cannot watch SIGCHLD; reaping on a timer only");
            None
        }
    }
}

/// Reaps forever.
pub(crate) async fn run(table: Arc<Table>, sigchld: Option<Sigchld>) {
    loop {
        reap_all(&table);
        let tick = tokio::time::sleep(Duration::from_secs(1));
        match &sigchld {
            Some(fd) => {
                tokio::select! {
                    ready = fd.readable() => if let Ok(ready) = ready {
                        // One read empties the fd; every exit before a later SIGCHLD is reaped
                        // by the `reap_all` that follows.
                        if let Err(e) = sys::take_signals(ready) {
                            warn!(cause = %e, "reading SIGCHLD failed");
                        }
                    },
                    _ = tick => {}
                }
            }
            None => tick.await,
        }
    }
}

/// Collects every child that is waiting to be reaped.
pub(crate) fn reap_all(table: &Table) {
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
