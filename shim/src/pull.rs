//! Pulls (PROTOCOL.md 4.10): this shim fetches a tar stream from another shim's `GET /v1/files` with
//! a grant token and extracts it through the same extraction as `PUT /v1/files` (into staging,
//! moved into place only when whole). The fetch (`pull/fetch.rs`) resumes a cut connection from the
//! bytes already received, so the extraction reads one continuous stream whatever happens to the
//! connections under it.
//!
//! The stream's last 1024 bytes (the end-of-archive marker) are handed to the extraction only once
//! the whole stream arrived and its SHA-256 matches the expected one, if any: a stream that is cut
//! for good, or that does not match, ends the extraction without its marker, which leaves nothing.

mod fetch;
mod http1;

use std::collections::HashMap;
use std::io::{self, Read};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use protocol::artifacts::{PullSpec, PullState, PullStatus};
use tokio::sync::{mpsc, watch};

use crate::error::Error;
use crate::files::{self, Limits, Options, Resolve};

/// How pulls run (from the configuration).
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Pulls running at once (`STEPSHIM_MAX_PULLS`).
    pub max: usize,
    /// Connection attempts in a row without a byte of progress before a pull fails
    /// (`STEPSHIM_PULL_RETRIES`).
    pub retries: u32,
    /// How long a connection may go without bytes (`STEPSHIM_FILES_IDLE_TIMEOUT`).
    pub idle: Duration,
    /// The extraction's caps.
    pub limits: Limits,
    /// Whether extracted files keep their owners.
    pub same_owner: bool,
}

/// The pulls of this shim, by id.
#[derive(Debug)]
pub struct Pulls {
    settings: Settings,
    map: Mutex<HashMap<String, Arc<Pull>>>,
}

/// One pull.
#[derive(Debug)]
pub struct Pull {
    id: String,
    spec: PullSpec,
    started: Instant,
    progress: Mutex<Progress>,
    state: watch::Sender<PullState>,
    task: Mutex<Option<tokio::task::AbortHandle>>,
}

/// What a pull reports as it goes.
#[derive(Debug, Default)]
struct Progress {
    bytes: u64,
    total: Option<u64>,
    resumes: u32,
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
    pub fn status(&self) -> PullStatus {
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
            sha256: p.sha256.clone(),
            entries: p.entries,
            error: p.error.clone(),
        }
    }

    /// Waits up to `wait` for the pull to end.
    pub async fn wait(&self, wait: Duration) {
        let mut rx = self.state.subscribe();
        let _ = tokio::time::timeout(wait, rx.wait_for(|s| *s != PullState::Running)).await;
    }

    fn end(&self, result: Result<u64, String>) {
        let mut p = self.lock();
        p.ended = Some(Instant::now());
        let state = match result {
            Ok(entries) => {
                p.entries = Some(entries);
                PullState::Done
            }
            Err(why) => {
                tracing::warn!(pull = %self.id, cause = %why, "pull failed");
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
    pub fn new(settings: Settings) -> Self {
        Pulls {
            settings,
            map: Mutex::new(HashMap::new()),
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Pull>>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts pull `id`, or returns the one already there with the same spec (`false`: not new).
    pub fn start(&self, id: &str, spec: PullSpec) -> Result<(Arc<Pull>, bool), Error> {
        let source = fetch::Source::parse(&spec)?;
        if !spec.target.starts_with('/') {
            return Err(Error::BadRequest(format!(
                "target {:?} is not absolute",
                spec.target
            )));
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
            task: Mutex::new(None),
        });
        let task = tokio::spawn(run(pull.clone(), source, self.settings));
        *pull.task.lock().unwrap_or_else(|e| e.into_inner()) = Some(task.abort_handle());
        map.insert(id.to_owned(), pull.clone());
        Ok((pull, true))
    }

    /// Pull `id`.
    pub fn get(&self, id: &str) -> Result<Arc<Pull>, Error> {
        self.map()
            .get(id)
            .cloned()
            .ok_or_else(|| Error::NotFound(format!("no pull with id {id:?}")))
    }

    /// Every pull.
    pub fn list(&self) -> Vec<PullStatus> {
        let mut all: Vec<_> = self.map().values().map(|p| p.status()).collect();
        all.sort_by(|a, b| a.id.cmp(&b.id));
        all
    }

    /// Forgets pull `id`, cancelling it first if it runs (nothing is moved into place then).
    pub async fn delete(&self, id: &str) -> Result<(), Error> {
        let pull = self
            .map()
            .remove(id)
            .ok_or_else(|| Error::NotFound(format!("no pull with id {id:?}")))?;
        let task = pull.task.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(task) = task {
            task.abort();
        }
        // The extraction sees its stream end without the marker and removes its staging.
        pull.wait(Duration::from_secs(30)).await;
        Ok(())
    }
}

/// Fetches and extracts; records how it ended.
async fn run(pull: Arc<Pull>, source: fetch::Source, s: Settings) {
    let (tx, rx) = mpsc::channel::<io::Result<Bytes>>(8);
    let target = PathBuf::from(&pull.spec.target);
    let opts = Options {
        same_owner: s.same_owner,
        limits: s.limits,
        resolve: Resolve::Auto,
    };
    let extract = tokio::task::spawn_blocking(move || {
        let mut reader = StreamReader {
            rx,
            current: Bytes::new(),
        };
        // `dyn`: the same copy of the extraction as `PUT /v1/files` (binary size).
        files::extract_with(&mut reader as &mut dyn Read, &target, &opts)
    });
    // A pull cancelled while its task is aborted still ends: the guard drops with the task.
    let guard = EndOnDrop(pull.clone());
    let fetched = fetch::run(&pull, &source, &s, &tx).await;
    if let Err(why) = &fetched {
        let _ = tx.send(Err(io::Error::other(why.clone()))).await;
    }
    drop(tx);
    let extracted = extract.await;
    std::mem::forget(guard);
    let result = match (fetched, extracted) {
        (Err(why), Ok(Err(e))) if why == fetch::EXTRACTION_STOPPED => {
            Err(format!("extracting: {e}; nothing was extracted"))
        }
        (Err(why), _) => Err(format!("{why}; nothing was extracted")),
        (Ok(()), Ok(Ok(stats))) => Ok(stats.entries),
        (Ok(()), Ok(Err(e))) => Err(format!("extracting: {e}")),
        (Ok(()), Err(e)) => Err(format!("extracting: {e}")),
    };
    pull.end(result);
}

/// Marks a pull failed if its task goes away before it ended (cancelled).
struct EndOnDrop(Arc<Pull>);

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        self.0.end(Err("cancelled".into()));
    }
}

/// Blocking `Read` over the chunks the fetch sends; an `Err` item fails the extraction.
struct StreamReader {
    rx: mpsc::Receiver<io::Result<Bytes>>,
    current: Bytes,
}

impl Read for StreamReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(b)) => self.current = b,
                Some(Err(e)) => return Err(e),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}
