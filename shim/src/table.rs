//! The process table: processes by id and by pid, spawn (idempotent by id and spec), delete, and the
//! routing of reaped exits to processes, including exits that arrive before their pid is recorded.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::{debug, info, warn};
use protocol::{Exit, ExitReason, SpawnRequest};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::Error;
use crate::log::{Budget, OutputLog};
use crate::oom::OomCounter;
use crate::proc::Proc;
use crate::sys::{Exec, Forked};
use crate::{pump, spawn, tree};

/// Settings the table needs from the configuration.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where output logs spill.
    pub data_dir: PathBuf,
    /// Drain window after a process is reaped.
    pub drain: Duration,
    /// The shim's environment without `STEPSHIM_*`.
    pub base_env: Vec<(String, String)>,
    /// Processes remembered at once, including spawns under way.
    pub max_processes: usize,
    /// Bytes of a spec's strings.
    pub max_spec_bytes: usize,
    /// `oom_score_adj` of every spawned process.
    pub oom_score_adj: i32,
}

#[derive(Debug, Default)]
struct Inner {
    /// Processes by id (a hash map: a B-tree of its own type costs the binary a few KiB; the list
    /// is sorted when asked for).
    by_id: HashMap<String, Arc<Proc>>,
    /// Processes not yet reaped, including deleted ones, so their exit is never misrouted.
    by_pid: HashMap<i32, Arc<Proc>>,
    /// Pids forked by a spawn that has not yet recorded its process, and children whose exec
    /// failed (see [`Pending`]). An exit of any other unknown pid is an orphan's and is dropped, so
    /// a later process that reuses the pid can never be handed it. One map for both (each key and
    /// value type of a hash map costs the binary its own copy of the table code).
    pending: HashMap<i32, Pending>,
    /// Ids with a spawn under way. A second spawn of the same id waits until the receiver sees
    /// the sender dropped, then answers from the table (idempotent or conflict).
    reserved: HashMap<String, watch::Receiver<()>>,
}

/// A pid the table knows before (or instead of) a process.
#[derive(Debug)]
enum Pending {
    /// Forked by a spawn that has not recorded its process yet, with its exit if that came first.
    InFlight(Option<Exit>),
    /// A child whose exec failed: reaped and forgotten.
    Discard,
}

/// All processes of the shim.
#[derive(Debug)]
pub struct Table {
    inner: Mutex<Inner>,
    /// Set once at shutdown: spawns are refused and `/healthz` answers 503 from then on.
    closed: AtomicBool,
    /// Bumped whenever a process is reaped, finishes or is deleted, and when an orphan is reaped:
    /// what waiting for the table (and the process tree) to go idle watches.
    events: Arc<watch::Sender<u64>>,
    settings: Settings,
    oom: OomCounter,
    /// The OOM kill count already attributed to a process: each kill explains one death only.
    oom_attributed: AtomicU64,
    /// Output memory accounting shared by every log.
    pub budget: Arc<Budget>,
    /// Processes started since boot.
    pub spawned: AtomicU64,
    /// Orphans reaped since boot.
    pub orphans: AtomicU64,
}

/// A spawn's claim on its id; dropping it wakes the spawns of the same id that wait.
struct Reservation<'a> {
    table: &'a Table,
    id: String,
    _done: watch::Sender<()>,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.table.lock().reserved.remove(&self.id);
    }
}

impl Table {
    /// An empty table.
    pub fn new(settings: Settings, budget: Arc<Budget>, oom: OomCounter) -> Self {
        Table {
            inner: Mutex::new(Inner::default()),
            closed: AtomicBool::new(false),
            events: Arc::new(watch::channel(0).0),
            settings,
            oom,
            oom_attributed: AtomicU64::new(0),
            budget,
            spawned: AtomicU64::new(0),
            orphans: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn bump(&self) {
        self.events.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// The process with this id.
    pub fn get(&self, id: &str) -> Result<Arc<Proc>, Error> {
        self.lock()
            .by_id
            .get(id)
            .cloned()
            .ok_or_else(|| Error::ProcessNotFound(id.to_owned()))
    }

    /// Every process, ordered by id.
    pub fn list(&self) -> Vec<Arc<Proc>> {
        let all: Vec<_> = self.lock().by_id.values().cloned().collect();
        crate::order::sort_by(all, |a, b| a.id.cmp(&b.id))
    }

    /// Waits for the id to be free of other spawns and reserves it; `Ok(Err(p))` when a process
    /// with the same spec already has it.
    async fn reserve(
        &self,
        id: &str,
        spec: &SpawnRequest,
    ) -> Result<Result<Reservation<'_>, Arc<Proc>>, Error> {
        loop {
            let mut busy = {
                let mut inner = self.lock();
                if let Some(p) = inner.by_id.get(id) {
                    return if p.spec == *spec {
                        Ok(Err(p.clone()))
                    } else {
                        Err(Error::SpecConflict(id.to_owned()))
                    };
                }
                if self.is_closed() {
                    return Err(Error::Unavailable("the shim is shutting down".into()));
                }
                match inner.reserved.get(id) {
                    Some(rx) => rx.clone(),
                    None => {
                        let remembered = inner.by_id.len() + inner.reserved.len();
                        if remembered >= self.settings.max_processes {
                            return Err(Error::Unavailable(format!(
                                "{remembered} processes remembered (STEPSHIM_MAX_PROCESSES); delete exited ones"
                            )));
                        }
                        let (done, rx) = watch::channel(());
                        inner.reserved.insert(id.to_owned(), rx);
                        return Ok(Ok(Reservation {
                            table: self,
                            id: id.to_owned(),
                            _done: done,
                        }));
                    }
                }
            };
            // Errs once the other spawn's reservation is dropped: look again.
            let _ = busy.changed().await;
        }
    }

    /// Forks under the table's lock and records the pid as in flight before the reaper can route
    /// its exit.
    fn fork_registered(&self, exec: &Exec) -> std::io::Result<Forked> {
        let mut inner = self.lock();
        let forked = crate::sys::fork_exec(exec)?;
        inner.pending.insert(forked.pid, Pending::InFlight(None));
        Ok(forked)
    }

    /// Spawns `spec` as `id`, or returns the existing process if the spec is the same. The bool is
    /// true when a process was started. Spawns of different ids proceed concurrently; of one id,
    /// the first starts the process and the others answer as a retry would.
    pub async fn spawn(&self, id: &str, spec: SpawnRequest) -> Result<(Arc<Proc>, bool), Error> {
        let size = spawn::spec_bytes(&spec);
        if size > self.settings.max_spec_bytes {
            return Err(Error::SpecTooLarge {
                size,
                limit: self.settings.max_spec_bytes,
            });
        }
        let _reservation = match self.reserve(id, &spec).await? {
            Ok(r) => r,
            Err(existing) => return Ok((existing, false)),
        };
        let oom_kills_at_start = self.oom.read();
        let started = spawn::start(
            &spec,
            &self.settings.base_env,
            self.settings.oom_score_adj,
            |exec| self.fork_registered(exec),
        )
        .await;
        let started = match started {
            Ok(s) => s,
            Err(failed) => {
                if let Some(pid) = failed.pid {
                    let mut inner = self.lock();
                    if !matches!(inner.pending.remove(&pid), Some(Pending::InFlight(Some(_)))) {
                        inner.pending.insert(pid, Pending::Discard);
                    }
                }
                return Err(failed.error);
            }
        };
        let log = OutputLog::new(self.budget.clone(), self.settings.data_dir.clone());
        let (proc, reaped_rx) = Proc::new(
            id.to_owned(),
            spec,
            started.pid,
            log,
            started.stdin,
            started.tty,
            crate::proc::Links {
                events: self.events.clone(),
                oom_kills_at_start,
                writers: started.writers,
            },
        );
        let proc = Arc::new(proc);
        let early_exit = {
            let mut inner = self.lock();
            let early = match inner.pending.remove(&started.pid) {
                Some(Pending::InFlight(exit)) => exit,
                _ => None,
            };
            inner.by_id.insert(id.to_owned(), proc.clone());
            if early.is_none() {
                inner.by_pid.insert(started.pid, proc.clone());
            }
            early
        };
        if let Some(exit) = early_exit {
            proc.on_reaped(self.with_reason(&proc, exit));
        }
        self.spawned.fetch_add(1, Ordering::Relaxed);
        info!(id, pid = started.pid, path = %proc.spec.path, "spawned");
        tokio::spawn(pump::run(
            proc.clone(),
            started.sources,
            reaped_rx,
            self.settings.drain,
        ));
        Ok((proc, true))
    }

    /// Adds the OOM reason to a killed process's exit when the memory cgroup counted an OOM kill
    /// since the process started that no earlier exit was given.
    fn with_reason(&self, proc: &Proc, mut exit: Exit) -> Exit {
        if crate::oom::looks_killed(&exit)
            && let (Some(before), Some(now)) = (proc.oom_kills_at_start, self.oom.read())
            && now > before
            && self.oom_attributed.fetch_max(now, Ordering::AcqRel) < now
        {
            exit.reason = Some(ExitReason::OomKill);
        }
        exit
    }

    /// Hands a reaped exit to the process with that pid, keeps it for a spawn in flight, or drops
    /// it (an orphan's, or a failed exec's).
    pub fn route_exit(&self, pid: i32, exit: Exit) {
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

    /// Forgets a process and frees its output; a running one needs `force`. With `force`, what the
    /// process left behind is killed too (see [`Proc::kill_tree`]), running or not.
    pub fn delete(&self, id: &str, force: bool) -> Result<(), Error> {
        let proc = {
            let mut inner = self.lock();
            let p = inner
                .by_id
                .get(id)
                .cloned()
                .ok_or_else(|| Error::ProcessNotFound(id.to_owned()))?;
            if p.is_running() && !force {
                return Err(Error::StillRunning(id.to_owned()));
            }
            inner.by_id.remove(id);
            p
        };
        let killed = if force { proc.kill_tree() } else { 0 };
        proc.log.free();
        self.bump();
        info!(id, force, killed, "deleted");
        Ok(())
    }

    /// Refuses new spawns from now on; `/healthz` answers 503.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// Whether shutdown has begun.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Signals every process group of the shim's descendants (the table's processes and whatever
    /// they left behind, found through `/proc`), and every descendant alone; returns how many
    /// groups were signalled.
    pub fn signal_all(&self, sig: i32) -> usize {
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
    pub fn any_running(&self) -> bool {
        let inner = self.lock();
        !inner.by_pid.is_empty() || inner.by_id.values().any(|p| p.is_running())
    }

    /// Counts of (running, exited) processes.
    pub fn counts(&self) -> (usize, usize) {
        let inner = self.lock();
        let running = inner.by_id.values().filter(|p| p.is_running()).count();
        (running, inner.by_id.len() - running)
    }

    /// TERM every descendant process group, wait up to `grace`, KILL what is left, and wait
    /// (bounded) for the exit frames.
    pub async fn shutdown(&self, grace: Duration) {
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
