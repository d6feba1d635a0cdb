//! Pulls (PROTOCOL.md 4.10): this shim fetches a tar stream from another shim's `GET /v1/files` with
//! a grant token and extracts it through the same extraction as `PUT /v1/files` (into staging,
//! moved into place only when whole). The fetch (`pull/fetch.rs`) is the `Read` the extraction
//! consumes: it resumes a cut connection from the bytes already received, so the extraction reads
//! one continuous stream whatever happens to the connections under it. Both run on one blocking
//! thread per pull: no async task, no channel (the shim's binary stays small).
//!
//! The stream's last 1024 bytes (the end-of-archive marker) are handed to the extraction only once
//! the whole stream arrived and its SHA-256 matches the expected one, if any: a stream that is cut
//! for good, or that does not match, ends the extraction without its marker, which leaves nothing.

mod fetch;
mod http1;

use std::collections::HashMap;
use std::io::Read;
use std::net::{Shutdown, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use protocol::artifacts::{PullSpec, PullState, PullStatus};
use tokio::sync::watch;

use crate::error::Error;
use crate::files::{self, Limits, Options, Resolve};

/// Pulls remembered at once (running or ended, not deleted); the oldest ended one is forgotten to
/// make room for a new one.
pub(crate) const MAX_REMEMBERED: usize = 256;

/// How pulls run (from the configuration).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    /// Pulls running at once (`STEPSHIM_MAX_PULLS`).
    pub(crate) max: usize,
    /// Retries (connection attempts after the first) in a row without a byte of progress before
    /// a pull fails (`STEPSHIM_PULL_RETRIES`).
    pub(crate) retries: u32,
    /// How long a pull waits out a source that answers 503 (`STEPSHIM_PULL_BUSY_SECONDS`).
    pub(crate) busy: Duration,
    /// How long a connection may go without bytes (`STEPSHIM_FILES_IDLE_TIMEOUT`).
    pub(crate) idle: Duration,
    /// The extraction's caps.
    pub(crate) limits: Limits,
    /// Whether extracted files keep their owners.
    pub(crate) same_owner: bool,
}

/// The pulls of this shim, by id.
#[derive(Debug)]
pub(crate) struct Pulls {
    settings: Settings,
    map: Mutex<HashMap<String, Arc<Pull>>>,
    /// Since boot, for `/metrics`.
    pub(crate) counters: Arc<Counters>,
}

/// What pulls did since boot (`/metrics`): each pull adds as it goes.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Pulls started.
    pub(crate) started: AtomicU64,
    /// Pulls done.
    pub(crate) done: AtomicU64,
    /// Pulls failed or cancelled.
    pub(crate) failed: AtomicU64,
    /// Stream bytes received.
    pub(crate) bytes: AtomicU64,
    /// Connections resumed.
    pub(crate) resumes: AtomicU64,
}

/// One pull.
#[derive(Debug)]
pub(crate) struct Pull {
    id: String,
    spec: PullSpec,
    started: Instant,
    progress: Mutex<Progress>,
    state: watch::Sender<PullState>,
    /// Set by `DELETE`: the fetch stops at its next read.
    cancelled: AtomicBool,
    /// The connection being read, to shut down on `DELETE` (a read may block up to the idle timeout).
    socket: Mutex<Option<TcpStream>>,
    /// The shim's pull counters.
    counters: Arc<Counters>,
}

/// What a pull reports as it goes.
#[derive(Debug, Default)]
struct Progress {
    bytes: u64,
    total: Option<u64>,
    resumes: u32,
    reached: bool,
    busy: u32,
    waiting: bool,
    sha256: Option<String>,
    entries: Option<u64>,
    error: Option<String>,
    ended: Option<Instant>,
}

impl Pull {
    fn lock(&self) -> std::sync::MutexGuard<'_, Progress> {
        self.progress.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Its status now.
    pub(crate) fn status(&self) -> PullStatus {
        let p = self.lock();
        let secs = p
            .ended
            .unwrap_or_else(Instant::now)
            .duration_since(self.started)
            .as_secs_f64();
        PullStatus {
            id: self.id.clone(),
            state: *self.state.borrow(),
            source: self.spec.source.clone(),
            path: self.spec.path.clone(),
            target: self.spec.target.clone(),
            bytes: p.bytes,
            total: p.total,
            bytes_per_second: if secs > 0.0 {
                (p.bytes as f64 / secs) as u64
            } else {
                0
            },
            resumes: p.resumes,
            reached: p.reached,
            busy: p.busy,
            waiting: p.waiting,
            sha256: p.sha256.clone(),
            entries: p.entries,
            error: p.error.clone(),
        }
    }

    /// Waits up to `wait` for the pull to end.
    pub(crate) async fn wait(&self, wait: Duration) {
        let mut rx = self.state.subscribe();
        let _ = tokio::time::timeout(wait, rx.wait_for(|s| *s != PullState::Running)).await;
    }

    fn end(&self, result: Result<u64, String>) {
        let mut p = self.lock();
        p.ended = Some(Instant::now());
        let state = match result {
            Ok(entries) => {
                p.entries = Some(entries);
                self.counters.done.fetch_add(1, Ordering::Relaxed);
                PullState::Done
            }
            Err(why) => {
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
                crate::warn!(pull = %self.id, cause = %why, "pull failed");
                p.error = Some(why);
                p.sha256 = None;
                PullState::Failed
            }
        };
        drop(p);
        self.state.send_replace(state);
    }
}

impl Pulls {
    /// No pulls yet.
    pub(crate) fn new(settings: Settings) -> Self {
        Pulls {
            settings,
            map: Mutex::new(HashMap::new()),
            counters: Arc::default(),
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Pull>>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts pull `id`, or returns the one already there with the same spec (`false`: not new).
    pub(crate) fn start(&self, id: &str, spec: PullSpec) -> Result<(Arc<Pull>, bool), Error> {
        let source = fetch::Source::parse(&spec)?;
        if !spec.target.starts_with('/') {
            return Err(Error::BadRequest(format!(
                "target {:?} is not absolute",
                spec.target
            )));
        }
        if let Some(owner) = spec.owner {
            crate::owners::permit(owner)?;
        }
        if let Some(d) = &spec.sha256
            && protocol::token::parse_sha256_hex(d).is_none()
        {
            return Err(Error::BadRequest("sha256 must be 64 hex digits".into()));
        }
        let mut map = self.map();
        if let Some(p) = map.get(id) {
            return if p.spec == spec {
                Ok((p.clone(), false))
            } else {
                Err(Error::PullConflict(id.to_owned()))
            };
        }
        if map.len() >= MAX_REMEMBERED {
            // Room for one more: forget the oldest pull that ended.
            let oldest = map
                .values()
                .filter(|p| *p.state.borrow() != PullState::Running)
                .min_by_key(|p| p.started)
                .map(|p| p.id.clone());
            if let Some(old) = oldest {
                map.remove(&old);
            }
        }
        let running = map
            .values()
            .filter(|p| *p.state.borrow() == PullState::Running)
            .count();
        if running >= self.settings.max {
            return Err(Error::Unavailable(format!(
                "{running} pulls are already running (STEPSHIM_MAX_PULLS); retry later"
            )));
        }
        let pull = Arc::new(Pull {
            id: id.to_owned(),
            spec,
            started: Instant::now(),
            progress: Mutex::default(),
            state: watch::Sender::new(PullState::Running),
            cancelled: AtomicBool::new(false),
            socket: Mutex::new(None),
            counters: self.counters.clone(),
        });
        self.counters.started.fetch_add(1, Ordering::Relaxed);
        let (p, settings) = (pull.clone(), self.settings);
        tokio::task::spawn_blocking(move || run(&p, &source, &settings));
        map.insert(id.to_owned(), pull.clone());
        Ok((pull, true))
    }

    /// Pull `id`.
    pub(crate) fn get(&self, id: &str) -> Result<Arc<Pull>, Error> {
        self.map()
            .get(id)
            .cloned()
            .ok_or_else(|| Error::NotFound(format!("no pull with id {id:?}")))
    }

    /// Every pull.
    pub(crate) fn list(&self) -> Vec<PullStatus> {
        let all: Vec<_> = self.map().values().map(|p| p.status()).collect();
        crate::order::sort_by(all, |a, b| a.id.cmp(&b.id))
    }

    /// Forgets pull `id`, cancelling it first if it runs (nothing is moved into place then).
    pub(crate) async fn delete(&self, id: &str) -> Result<(), Error> {
        let pull = self
            .map()
            .remove(id)
            .ok_or_else(|| Error::NotFound(format!("no pull with id {id:?}")))?;
        pull.cancelled.store(true, Ordering::Release);
        if let Some(s) = pull.socket.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = s.shutdown(Shutdown::Both);
        }
        // The extraction fails at its next read and removes its staging.
        pull.wait(Duration::from_secs(30)).await;
        Ok(())
    }
}

/// Fetches and extracts on this (blocking) thread; records how it ended.
fn run(pull: &Pull, source: &fetch::Source, s: &Settings) {
    let opts = Options {
        same_owner: s.same_owner,
        owner: pull.spec.owner,
        limits: s.limits,
        resolve: Resolve::Auto,
    };
    let target = PathBuf::from(&pull.spec.target);
    let mut reader = fetch::Fetch::new(pull, source, s);
    // `dyn`: the same copy of the extraction as `PUT /v1/files` (binary size).
    let extracted = files::extract_with(&mut reader as &mut dyn Read, &target, &opts);
    let result = match (extracted, reader.failure.take()) {
        (_, Some(why)) => Err(format!("{why}; nothing was extracted")),
        (Ok(stats), None) => Ok(stats.entries),
        (Err(e), None) => Err(format!("extracting: {e}; nothing was extracted")),
    };
    *pull.socket.lock().unwrap_or_else(|e| e.into_inner()) = None;
    pull.end(result);
}
