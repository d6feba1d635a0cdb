//! One process the shim started: its spec, pid, output log, stdin and terminal, and how it ended.
//!
//! Lifecycle: spawned (running) → reaped by the reaper (exit known, pid no longer ours) → drained by
//! its pump, which appends the exit frame (exited). Clients see `exited` only after the last step, so
//! `exited` always means the log is complete.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use protocol::{Exit, FrameType, SpawnRequest, State};
use tokio::sync::{oneshot, watch};

use crate::clock::rfc3339;
use crate::error::Error;
use crate::output_log::OutputLog;
use crate::stdin::Stdin;

/// What a process reports to its table.
#[derive(Debug)]
pub(crate) struct Links {
    /// The table's change counter, bumped when the exit frame is written.
    pub(crate) events: Arc<watch::Sender<u64>>,
    /// The memory cgroup's OOM kill count when the process started, if readable.
    pub(crate) oom_kills_at_start: Option<u64>,
    /// The shim's copies of the write ends of the process's stdout and stderr pipes, closed when
    /// it is reaped. Without them the pipes would reach end of file as the exiting child closes
    /// its files, which wakes the shim (on a shared CPU, preempting the child before it can
    /// finish exiting) and again for SIGCHLD; with them one wake-up sees both.
    pub(crate) writers: Option<(OwnedFd, OwnedFd)>,
}

/// A started process.
#[derive(Debug)]
pub(crate) struct Proc {
    /// The client's id.
    pub(crate) id: String,
    /// The spec it was spawned with, defaults applied (compared for idempotent spawns).
    pub(crate) spec: SpawnRequest,
    /// Its pid, process group and session id.
    pub(crate) pid: i32,
    /// When it was started.
    pub(crate) started_at: SystemTime,
    /// Its output.
    pub(crate) log: OutputLog,
    /// Its stdin, when spawned with `stdin` or a tty.
    pub(crate) stdin: Option<Stdin>,
    /// A handle on its pty master, for resize.
    pub(crate) tty: Option<OwnedFd>,
    /// Set by the pump with the exit frame.
    exit: Mutex<Option<(Exit, SystemTime)>>,
    /// Hands the reaped status to the pump; taken once.
    reaped_tx: Mutex<Option<oneshot::Sender<Exit>>>,
    /// The reaper has collected the pid: it may belong to another process now, never signal it.
    reaped: AtomicBool,
    /// The table's change counter, bumped when the exit frame is written.
    events: Arc<watch::Sender<u64>>,
    /// The memory cgroup's OOM kill count when the process started, if readable.
    pub(crate) oom_kills_at_start: Option<u64>,
    /// See [`Links::writers`]; taken when reaped.
    writers: Mutex<Option<(OwnedFd, OwnedFd)>>,
}

impl Proc {
    /// A running process; the receiver goes to its pump.
    pub(crate) fn new(
        id: String,
        spec: SpawnRequest,
        pid: i32,
        log: OutputLog,
        stdin: Option<Stdin>,
        tty: Option<OwnedFd>,
        links: Links,
    ) -> (Self, oneshot::Receiver<Exit>) {
        let (tx, rx) = oneshot::channel();
        let proc = Proc {
            id,
            spec,
            pid,
            started_at: SystemTime::now(),
            log,
            stdin,
            tty,
            exit: Mutex::new(None),
            reaped_tx: Mutex::new(Some(tx)),
            reaped: AtomicBool::new(false),
            events: links.events,
            oom_kills_at_start: links.oom_kills_at_start,
            writers: Mutex::new(links.writers),
        };
        (proc, rx)
    }

    /// Called by the table when the reaper collected this pid.
    pub(crate) fn on_reaped(&self, exit: Exit) {
        self.reaped.store(true, Ordering::Release);
        drop(
            self.writers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take(),
        );
        if let Some(tx) = self
            .reaped_tx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            let _ = tx.send(exit);
        }
    }

    /// Called by the pump after draining: records the exit and appends the exit frame.
    pub(crate) fn finish(&self, exit: Exit) -> std::io::Result<()> {
        *self.exit.lock().unwrap_or_else(|e| e.into_inner()) = Some((exit, SystemTime::now()));
        let json = serde_json::to_vec(&exit).map_err(std::io::Error::other)?;
        let appended = self.log.append(FrameType::Exit, &json);
        self.events.send_modify(|n| *n = n.wrapping_add(1));
        appended
    }

    /// Whether the exit frame is not yet written.
    pub(crate) fn is_running(&self) -> bool {
        !self.log.state().complete
    }

    /// The protocol view of the process.
    pub(crate) fn snapshot(&self) -> protocol::Process {
        let exit = *self.exit.lock().unwrap_or_else(|e| e.into_inner());
        let state = self.log.state();
        let (exit, exited_at) = match (state.complete, exit) {
            (true, Some((e, at))) => (Some(e), Some(rfc3339(at))),
            _ => (None, None),
        };
        protocol::Process {
            id: self.id.clone(),
            pid: self.pid,
            state: if exit.is_some() {
                State::Exited
            } else {
                State::Running
            },
            exit,
            started_at: rfc3339(self.started_at),
            exited_at,
            output_end: state.end,
            stdin_offset: self.stdin.as_ref().map_or(0, Stdin::offset),
            stdin_closed: self.stdin.as_ref().is_some_and(Stdin::closed),
            tty: self.tty.is_some(),
        }
    }

    /// Waits until the process has exited (exit frame written) or `timeout` passes.
    pub(crate) async fn wait(&self, timeout: Duration) {
        let mut rx = self.log.subscribe();
        let _ = tokio::time::timeout(timeout, rx.wait_for(|s| s.complete || s.freed)).await;
    }

    /// Sends `sig` to the process group. Once the leader is reaped, the signal still goes to the
    /// group while members of it live (`sleep 33 & exit 0`), and answers `not_running` when none
    /// is left (see [`crate::tree`] on why the reaped pid cannot name a newcomer's group then).
    pub(crate) fn signal(&self, sig: i32) -> Result<(), Error> {
        let reaped = self.reaped.load(Ordering::Acquire);
        if reaped {
            let all = crate::tree::scan();
            let group_lives = crate::tree::left_behind(&all, self.pid, true)
                .iter()
                .any(|e| e.pgid == self.pid);
            if !group_lives {
                return Err(Error::NotRunning(self.id.clone()));
            }
        }
        match crate::sys::kill_group(self.pid, sig) {
            Ok(()) => Ok(()),
            // The whole group is gone but the reaper has not routed the exit yet.
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {
                Err(Error::NotRunning(self.id.clone()))
            }
            Err(e) => Err(Error::internal("signalling the process group", e)),
        }
    }

    /// `SIGKILL` to everything the process started that `/proc` can attribute to it: its group
    /// (while the leader lives, or after, as long as members do), its session's other groups, and
    /// their descendants, including children that called `setsid`. Returns how many processes
    /// were signalled one by one beyond the group.
    pub(crate) fn kill_tree(&self) -> usize {
        let reaped = self.reaped.load(Ordering::Acquire);
        if !reaped {
            let _ = crate::sys::kill_group(self.pid, libc::SIGKILL);
        }
        let all = crate::tree::scan();
        let left = crate::tree::left_behind(&all, self.pid, reaped);
        if reaped && left.iter().any(|e| e.pgid == self.pid) {
            let _ = crate::sys::kill_group(self.pid, libc::SIGKILL);
        }
        left.iter()
            .filter(|e| e.pgid != self.pid)
            .filter(|e| crate::sys::kill_pid(e.pid, libc::SIGKILL).is_ok())
            .count()
    }

    /// Resizes the terminal.
    pub(crate) fn resize(&self, cols: u16, rows: u16) -> Result<(), Error> {
        let tty = self.tty.as_ref().ok_or(Error::NoTty)?;
        if !self.is_running() {
            return Err(Error::NotRunning(self.id.clone()));
        }
        crate::sys::set_winsize(tty, cols, rows)
            .map_err(|e| Error::internal("resizing the terminal", e))
    }
}
