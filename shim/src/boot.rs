//! Starting the shim as a process: process-wide settings (subreaper, non-dumpable, open-file limit
//! and the connection cap it allows), the listener, the ready file, the shutdown signals (the
//! starter's end among them), and the `install` verb an init container runs. `main.rs` only
//! sequences these.

use std::io;
use std::net::SocketAddr;
use std::path::Path;

use crate::{error, warn};

use crate::{Config, sys};

/// Listen backlog: room for a burst of connections beyond the connection cap, so a health probe
/// arriving during a flood waits in the queue instead of having its SYN dropped (a 1 s retransmit).
/// The kernel caps it at `net.core.somaxconn`.
const BACKLOG: u32 = 8192;

/// Process-wide settings, before the runtime starts. Each failure is logged and survived: the shim
/// still serves, with the protection named in the warning missing.
pub fn process_settings(config: &mut Config) {
    // Before any thread starts, so every thread inherits the mask: SIGCHLD and the shutdown signals
    // are read from fds (`reaper::install`, `shutdown_signal`), and a thread with one unblocked
    // would take it and drop it (or, for SIGTERM outside a PID namespace, die of it).
    if let Err(e) = sys::block_signals(sys::Signals::Child) {
        warn!(cause = %e, "cannot block SIGCHLD; exits may be noticed only by the reaper's timer");
    }
    if let Err(e) = sys::block_signals(sys::Signals::Shutdown) {
        warn!(cause = %e, "cannot block the shutdown signals; a thread may take them unseen");
    }
    if let Err(e) = sys::set_child_subreaper() {
        warn!(cause = %e, "cannot become a child subreaper; orphans outside PID 1 go elsewhere");
    }
    if let Err(e) = sys::set_non_dumpable() {
        warn!(cause = %e, "cannot mark the shim non-dumpable; a step of the same user could ptrace it");
    }
    match sys::raise_nofile_limit() {
        Ok(limit) => {
            let most = connection_cap(limit, config.fd_reserve);
            if config.max_connections > most {
                warn!(
                    configured = config.max_connections,
                    used = most,
                    limit,
                    reserve = config.fd_reserve,
                    "STEPSHIM_MAX_CONNECTIONS lowered to the open-file limit less STEPSHIM_FD_RESERVE"
                );
                config.max_connections = most;
            }
        }
        Err(e) => warn!(cause = %e, "cannot raise the open-file limit"),
    }
}

/// The most connections an open-file `limit` allows: the limit less `reserve` descriptors kept for
/// processes' pipes, spill files, transfers and pulls (so a connection flood cannot starve a
/// spawn), the reserve being at most half the limit (a small limit is shared half and half).
pub(crate) fn connection_cap(limit: u64, reserve: u64) -> usize {
    let most = limit - reserve.min(limit / 2);
    usize::try_from(most).unwrap_or(usize::MAX).max(4)
}

/// The listening socket, with `BACKLOG`.
pub fn listen(addr: SocketAddr) -> io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

/// Writes `addr` and a newline to `path` through a temporary file and a rename, so a reader sees the
/// whole address or nothing (`STEPSHIM_READY_FILE`).
pub fn announce(path: &Path, addr: &str) -> io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, format!("{addr}\n"))?;
    std::fs::rename(&tmp, path)
}

/// `STEPSHIM_PARENT_PID`: a SIGTERM when the starter ends, taken like any other (see
/// [`shutdown_signal`]; SIGTERM is already blocked, so one that comes before the runtime waits).
/// An error, one line, when the starter is already gone or the kernel refuses.
pub fn stop_with_parent(parent: i32) -> Result<(), String> {
    match sys::stop_with_parent(parent) {
        Ok(true) => Ok(()),
        Ok(false) => Err(format!(
            "the starting process {parent} is gone (STEPSHIM_PARENT_PID)"
        )),
        Err(e) => Err(format!("cannot ask to stop with the starting process: {e}")),
    }
}

/// Resolves on the first shutdown signal (SIGTERM, SIGINT, SIGHUP or SIGQUIT), taken from a
/// `signalfd` (see `sys/signals.rs`).
pub fn shutdown_signal() -> io::Result<impl Future<Output = ()>> {
    let fd = sys::watch_signals(sys::Signals::Shutdown)?;
    Ok(async move {
        loop {
            let ready = match fd.readable().await {
                Ok(ready) => ready,
                Err(e) => {
                    // Never a reason to end every step: the pod's own SIGKILL still ends the shim.
                    error!(cause = %e, "cannot watch the shutdown signals any more");
                    return std::future::pending().await;
                }
            };
            match sys::take_signals(ready) {
                Ok(0) => {}
                Ok(_) => return,
                Err(e) => warn!(cause = %e, "reading a shutdown signal failed"),
            }
        }
    })
}

/// `stepshim install DEST`: copies this binary to DEST, executable. An init container runs it from
/// the shim image (which has nothing else, not even `cp`) to put the shim into a volume the step's
/// container shares.
pub fn install(dest: &str) -> io::Result<()> {
    let bytes = std::fs::read("/proc/self/exe")?;
    let tmp = format!("{dest}.tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    std::fs::rename(&tmp, dest)
}

#[cfg(test)]
mod tests {
    #[test]
    fn connections_leave_the_reserve_or_half_a_small_limit() {
        use super::connection_cap;
        assert_eq!(connection_cap(20_000, 1024), 18_976);
        assert_eq!(connection_cap(1 << 20, 1024), (1 << 20) - 1024);
        assert_eq!(connection_cap(1024, 1024), 512);
        assert_eq!(connection_cap(48, 1024), 24);
        assert_eq!(connection_cap(2, 1024), 4);
        assert_eq!(connection_cap(20_000, 0), 20_000);
    }
}
