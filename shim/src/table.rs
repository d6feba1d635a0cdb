//! The process table: processes by id and by pid, spawn (idempotent by id and spec) and delete. The
//! routing of reaped exits to processes is in [`exits`], shutdown's signalling and waiting in
//! [`shutdown`].

mod exits;
mod shutdown;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::info;
use protocol::SpawnRequest;
use tokio::sync::watch;

use crate::error::Error;
use crate::oom::OomCounter;
use crate::output_log::{Budget, OutputLog};
use crate::proc::Proc;
use crate::{pump, spawn};

/// Settings the table needs from the configuration.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// Where output logs spill.
    pub(crate) data_dir: PathBuf,
    /// Drain window after a process is reaped.
    pub(crate) drain: Duration,
    /// The shim's environment without `STEPSHIM_*`.
    pub(crate) base_env: Vec<(String, String)>,
    /// Processes remembered at once, including spawns under way.
    pub(crate) max_processes: usize,
    /// Bytes of a spec's strings.
    pub(crate) max_spec_bytes: usize,
    /// `oom_score_adj` of every spawned process.
    pub(crate) oom_score_adj: i32,
}

#[derive(Debug, Default)]
struct Inner {
    /// Processes by id (a hash map: a B-tree of its own type costs the binary a few KiB; the list
    /// is sorted when asked for).
    by_id: HashMap<String, Arc<Proc>>,
    /// Processes not yet reaped, including deleted ones, so their exit is never misrouted.
    by_pid: HashMap<i32, Arc<Proc>>,
    /// Pids forked by a spawn that has not yet recorded its process, and children whose exec
    /// failed (see [`exits::Pending`]). An exit of any other unknown pid is an orphan's and is dropped, so
    /// a later process that reuses the pid can never be handed it. One map for both (each key and
    /// value type of a hash map costs the binary its own copy of the table code).
    pending: HashMap<i32, exits::Pending>,
    /// Ids with a spawn under way. A second spawn of the same id waits until the receiver sees
    /// the sender dropped, then answers from the table (idempotent or conflict).
    reserved: HashMap<String, watch::Receiver<()>>,
}

/// All processes of the shim.
#[derive(Debug)]
pub(crate) struct Table {
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
    pub(crate) budget: Arc<Budget>,
    /// Processes started since boot.
    pub(crate) spawned: AtomicU64,
    /// Orphans reaped since boot.
    pub(crate) orphans: AtomicU64,
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
    pub(crate) fn new(settings: Settings, budget: Arc<Budget>, oom: OomCounter) -> Self {
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
    pub(crate) fn get(&self, id: &str) -> Result<Arc<Proc>, Error> {
        self.lock()
            .by_id
            .get(id)
            .cloned()
            .ok_or_else(|| Error::ProcessNotFound(id.to_owned()))
    }

    /// Every process, ordered by id.
    pub(crate) fn list(&self) -> Vec<Arc<Proc>> {
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

    /// Spawns `spec` as `id`, or returns the existing process if the spec is the same. The bool is
    /// true when a process was started. Spawns of different ids proceed concurrently; of one id,
    /// the first starts the process and the others answer as a retry would. From the fork until
    /// the process is recorded and its pump runs nothing awaits, so a request whose client hangs up
    /// (its future dropped) never leaves a child unrecorded: no task of its own is needed.
    pub(crate) async fn spawn(
        &self,
        id: &str,
        spec: SpawnRequest,
    ) -> Result<(Arc<Proc>, bool), Error> {
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
        let plan = spawn::plan(&spec, &self.settings.base_env).await?;
        let adj = self.settings.oom_score_adj;
        let oom_kills_at_start = self.oom.read();
        let started = match spawn::start(plan, &spec, adj, |exec| self.fork_registered(exec)) {
            Ok(s) => s,
            Err(failed) => {
                if let Some(pid) = failed.pid {
                    self.forget_failed(pid);
                }
                return Err(failed.error);
            }
        };
        let (pid, oom_pending) = (started.pid, started.oom_pending);
        let log = OutputLog::new(self.budget.clone(), self.settings.data_dir.clone());
        let (proc, reaped_rx) = Proc::new(
            id.to_owned(),
            spec,
            pid,
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
        if let Some(exit) = self.record(id, &proc) {
            proc.on_reaped(self.with_reason(&proc, exit));
        }
        self.spawned.fetch_add(1, Ordering::Relaxed);
        info!(id, pid, path = %proc.spec.path, "spawned");
        tokio::spawn(pump::run(
            proc.clone(),
            started.sources,
            reaped_rx,
            self.settings.drain,
        ));
        if oom_pending {
            // Its own task: the process is recorded, and a client that hangs up must not leave it
            // at the shim's score.
            let _ = tokio::spawn(spawn::set_oom_later(pid, adj)).await;
        }
        Ok((proc, true))
    }

    /// Forgets a process and frees its output; a running one needs `force`. With `force`, what the
    /// process left behind is killed too (see [`Proc::kill_tree`]), running or not.
    pub(crate) fn delete(&self, id: &str, force: bool) -> Result<(), Error> {
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
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// Whether shutdown has begun.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}
