//! The process table: processes by id and by pid, spawn (idempotent by id and spec), delete, and the
//! routing of reaped exits to processes, including exits that arrive before their pid is recorded.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use protocol::{Exit, SpawnRequest};
use tracing::{debug, info, warn};

use crate::error::Error;
use crate::log::{Budget, OutputLog};
use crate::proc::Proc;
use crate::{pump, spawn};

/// How long an exit of an unknown pid is kept for a spawn that has not recorded its pid yet.
const UNCLAIMED_TTL: Duration = Duration::from_secs(30);
const UNCLAIMED_MAX: usize = 4096;

/// Settings the table needs from the configuration.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where output logs spill.
    pub data_dir: PathBuf,
    /// Drain window after a process is reaped.
    pub drain: Duration,
    /// The shim's environment without `STEPSHIM_*`.
    pub base_env: Vec<(String, String)>,
}

#[derive(Debug, Default)]
struct Inner {
    by_id: BTreeMap<String, Arc<Proc>>,
    /// Processes not yet reaped, including deleted ones, so their exit is never misrouted.
    by_pid: HashMap<i32, Arc<Proc>>,
    /// Exits of pids no process claimed yet (a fast child, or an orphan), with when they came.
    unclaimed: HashMap<i32, (Exit, Instant)>,
    /// Children whose exec failed: reaped and forgotten.
    discard: HashSet<i32>,
    closed: bool,
}

/// All processes of the shim.
#[derive(Debug)]
pub struct Table {
    inner: Mutex<Inner>,
    /// Serializes spawns so two requests for one id cannot both start a process.
    spawn_lock: tokio::sync::Mutex<()>,
    settings: Settings,
    /// Output memory accounting shared by every log.
    pub budget: Arc<Budget>,
    /// Processes started since boot.
    pub spawned: AtomicU64,
    /// Orphans reaped since boot.
    pub orphans: AtomicU64,
}

impl Table {
    /// An empty table.
    pub fn new(settings: Settings, budget: Arc<Budget>) -> Self {
        Table {
            inner: Mutex::new(Inner::default()),
            spawn_lock: tokio::sync::Mutex::new(()),
            settings,
            budget,
            spawned: AtomicU64::new(0),
            orphans: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
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
        self.lock().by_id.values().cloned().collect()
    }

    /// Spawns `spec` as `id`, or returns the existing process if the spec is the same. The bool is
    /// true when a process was started.
    pub async fn spawn(&self, id: &str, spec: SpawnRequest) -> Result<(Arc<Proc>, bool), Error> {
        let _one_at_a_time = self.spawn_lock.lock().await;
        {
            let inner = self.lock();
            if let Some(p) = inner.by_id.get(id) {
                return if p.spec == spec {
                    Ok((p.clone(), false))
                } else {
                    Err(Error::SpecConflict(id.to_owned()))
                };
            }
            if inner.closed {
                return Err(Error::Unavailable("the shim is shutting down".into()));
            }
        }
        let started = match spawn::start(&spec, &self.settings.base_env).await {
            Ok(s) => s,
            Err(failed) => {
                if let Some(pid) = failed.pid {
                    let mut inner = self.lock();
                    if inner.unclaimed.remove(&pid).is_none() {
                        inner.discard.insert(pid);
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
        );
        let proc = Arc::new(proc);
        let early_exit = {
            let mut inner = self.lock();
            inner.by_id.insert(id.to_owned(), proc.clone());
            inner.by_pid.insert(started.pid, proc.clone());
            inner.unclaimed.remove(&started.pid).map(|(e, _)| e)
        };
        if let Some(exit) = early_exit {
            self.route_exit(started.pid, exit);
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

    /// Hands a reaped exit to the process with that pid, or keeps it for a spawn in flight.
    pub fn route_exit(&self, pid: i32, exit: Exit) {
        let mut inner = self.lock();
        if let Some(p) = inner.by_pid.remove(&pid) {
            drop(inner);
            debug!(id = %p.id, pid, status = exit.status, "reaped");
            p.on_reaped(exit);
        } else if inner.discard.remove(&pid) {
            debug!(pid, "reaped a child whose exec failed");
        } else {
            self.orphans.fetch_add(1, Ordering::Relaxed);
            debug!(pid, status = exit.status, "reaped an unclaimed child");
            let now = Instant::now();
            inner
                .unclaimed
                .retain(|_, (_, at)| now.duration_since(*at) < UNCLAIMED_TTL);
            if inner.unclaimed.len() < UNCLAIMED_MAX {
                inner.unclaimed.insert(pid, (exit, now));
            }
        }
    }

    /// Forgets a process and frees its output; a running one needs `force` and is killed first.
    pub fn delete(&self, id: &str, force: bool) -> Result<(), Error> {
        let proc = {
            let mut inner = self.lock();
            let p = inner
                .by_id
                .get(id)
                .cloned()
                .ok_or_else(|| Error::ProcessNotFound(id.to_owned()))?;
            if p.is_running() {
                if !force {
                    return Err(Error::StillRunning(id.to_owned()));
                }
                if let Err(e) = p.signal(libc::SIGKILL) {
                    debug!(id, cause = %e, "kill on forced delete");
                }
            }
            inner.by_id.remove(id);
            p
        };
        proc.log.free();
        info!(id, force, "deleted");
        Ok(())
    }

    /// Refuses new spawns from now on.
    pub fn close(&self) {
        self.lock().closed = true;
    }

    /// Signals every running process group; returns how many were signalled.
    pub fn signal_all(&self, sig: i32) -> usize {
        let procs: Vec<_> = self.lock().by_pid.values().cloned().collect();
        procs.iter().filter(|p| p.signal(sig).is_ok()).count()
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

    /// TERM every process, wait up to `grace`, KILL the rest, and wait (bounded) for their exit frames.
    pub async fn shutdown(&self, grace: Duration) {
        self.close();
        let n = self.signal_all(libc::SIGTERM);
        info!(
            processes = n,
            grace_ms = grace.as_millis() as u64,
            "shutting down: sent SIGTERM"
        );
        if !self.wait_idle(grace).await {
            let n = self.signal_all(libc::SIGKILL);
            warn!(processes = n, "grace period over: sent SIGKILL");
            self.wait_idle(self.settings.drain + Duration::from_secs(2))
                .await;
        }
    }

    async fn wait_idle(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while self.any_running() {
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        true
    }
}
