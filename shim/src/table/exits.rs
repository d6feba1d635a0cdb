//! Exit routing of the process table: the pids it knows before (or instead of) a process, and the
//! reaper's exits handed to their process, kept for a spawn still in flight, or dropped (an
//! orphan's, a failed exec's), so a later process that reuses a pid is never handed another's exit.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::debug;
use protocol::{Exit, ExitReason};

use super::Table;
use crate::proc::Proc;
use crate::sys::{Exec, Forked};

/// A pid the table knows before (or instead of) a process.
#[derive(Debug)]
pub(super) enum Pending {
    /// Forked by a spawn that has not recorded its process yet, with its exit if that came first.
    InFlight(Option<Exit>),
    /// A child whose exec failed: reaped and forgotten.
    Discard,
}

impl Table {
    /// Forks under the table's lock and records the pid as in flight before the reaper can route
    /// its exit.
    pub(super) fn fork_registered(&self, exec: &Exec) -> std::io::Result<Forked> {
        let mut inner = self.lock();
        let forked = crate::sys::fork_exec(exec)?;
        inner.pending.insert(forked.pid, Pending::InFlight(None));
        Ok(forked)
    }

    /// After a spawn failed once its child was forked: the child is reaped and ignored.
    pub(super) fn forget_failed(&self, pid: i32) {
        let mut inner = self.lock();
        if !matches!(inner.pending.remove(&pid), Some(Pending::InFlight(Some(_)))) {
            inner.pending.insert(pid, Pending::Discard);
        }
    }

    /// Records a started process by id and, unless the reaper already collected it, by pid; returns
    /// its exit if that came first.
    pub(super) fn record(&self, id: &str, proc: &Arc<Proc>) -> Option<Exit> {
        let mut inner = self.lock();
        let early = match inner.pending.remove(&proc.pid) {
            Some(Pending::InFlight(exit)) => exit,
            _ => None,
        };
        inner.by_id.insert(id.to_owned(), proc.clone());
        if early.is_none() {
            inner.by_pid.insert(proc.pid, proc.clone());
        }
        early
    }

    /// Adds the OOM reason to a killed process's exit when the memory cgroup counted an OOM kill
    /// since the process started that no earlier exit was given.
    pub(super) fn with_reason(&self, proc: &Proc, mut exit: Exit) -> Exit {
        if crate::oom::looks_killed(&exit)
            && let (Some(before), Some(now)) = (proc.oom_kills_at_start, self.oom.read())
            && now > before
            && self.oom_attributed.fetch_max(now, Ordering::AcqRel) < now
        {
            exit.reason = Some(ExitReason::OomKill);
            exit.oom_killed = true;
        }
        exit
    }

    /// Hands a reaped exit to the process with that pid, keeps it for a spawn in flight, or drops
    /// it (an orphan's, or a failed exec's).
    pub(crate) fn route_exit(&self, pid: i32, exit: Exit) {
        let mut inner = self.lock();
        if let Some(p) = inner.by_pid.remove(&pid) {
            drop(inner);
            let exit = self.with_reason(&p, exit);
            debug!(id = %p.id, pid, status = exit.status, reason = ?exit.reason, "reaped");
            p.on_reaped(exit);
        } else if let Some(Pending::InFlight(early)) = inner.pending.get_mut(&pid) {
            *early = Some(exit);
        } else if inner.pending.remove(&pid).is_some() {
            debug!(pid, "reaped a child whose exec failed");
        } else {
            self.orphans.fetch_add(1, Ordering::Relaxed);
            debug!(pid, status = exit.status, "reaped an orphan");
        }
        self.bump();
    }
}
