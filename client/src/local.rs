//! A `stepshim` started as a child process on a free loopback port with a fresh token: what
//! `stepctl --local`, the local benchmark and the shim's tests run against. The shim is ready once it
//! has written its address to its ready file (`STEPSHIM_READY_FILE`, PROTOCOL.md section 7), so no
//! log line is parsed. Dropping a [`LocalShim`] stops it: SIGTERM, then SIGKILL after two seconds.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use protocol::settings;

use crate::{ClientError, ShimClient};

/// How to start a local shim.
#[derive(Debug)]
pub struct Launch {
    bin: PathBuf,
    env: Vec<(OsString, OsString)>,
    wrapper: Vec<OsString>,
    stderr: Option<Stdio>,
    ready_timeout: Duration,
    tls: bool,
}

/// Why a local shim did not start.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The binary (or its wrapper) could not be started.
    #[error("cannot start {bin}: {source}")]
    Spawn {
        /// What was started.
        bin: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// The shim exited before it was ready.
    #[error("the local shim exited before it was ready: {0}")]
    Exited(ExitStatus),
    /// The shim wrote no ready file in time.
    #[error("the local shim was not ready within {0:?}")]
    NotReady(Duration),
    /// The ready file's directory could not be made or read.
    #[error("ready file: {0}")]
    ReadyFile(#[source] std::io::Error),
    /// The address it wrote is unusable.
    #[error(transparent)]
    Client(#[from] ClientError),
}

/// A running local shim. Its `Debug` never shows the token.
pub struct LocalShim {
    /// The child process (or its wrapper).
    pub child: Child,
    /// `host:port` it serves on.
    pub addr: String,
    /// Its bearer token.
    pub token: String,
    /// A client for it.
    pub client: ShimClient,
    /// Its TLS key's pin when it serves TLS ([`Launch::tls`]).
    pub pin: Option<crate::Pin>,
    dir: PathBuf,
}

/// Finds the shim binary: `explicit`, `$STEPSHIM_BIN`, `stepshim` beside the running executable, then
/// on `PATH`.
pub fn find_binary(explicit: Option<PathBuf>) -> Option<PathBuf> {
    if let Some(p) = explicit.or_else(|| std::env::var_os("STEPSHIM_BIN").map(PathBuf::from)) {
        return Some(p);
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("stepshim")))
        .filter(|p| p.is_file());
    beside.or_else(|| {
        std::env::var_os("PATH")
            .iter()
            .flat_map(std::env::split_paths)
            .map(|d| d.join("stepshim"))
            .find(|p| p.is_file())
    })
}

impl std::fmt::Debug for LocalShim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalShim")
            .field("pid", &self.child.id())
            .field("addr", &self.addr)
            .field("token", &"<redacted>")
            .finish_non_exhaustive()
    }
}

/// A fresh random token: 16 bytes as hex.
pub fn random_token() -> String {
    hex::encode(rand::random::<[u8; 16]>())
}

impl Launch {
    /// A shim from `bin`, on `127.0.0.1:0`, with a fresh token and its log on our stderr.
    pub fn new(bin: impl Into<PathBuf>) -> Launch {
        Launch {
            bin: bin.into(),
            env: Vec::new(),
            wrapper: Vec::new(),
            stderr: None,
            ready_timeout: Duration::from_secs(20),
            tls: false,
        }
    }

    /// Serves TLS (PROTOCOL.md 1.1) with the seed derived from the fresh token, as a controller
    /// would, and a client that pins its key (the binary must be built with TLS).
    pub fn tls(mut self, on: bool) -> Launch {
        self.tls = on;
        self
    }

    /// One more environment entry (later entries win).
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Launch {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Stops the shim with this process: its pid goes in `STEPSHIM_PARENT_PID`, so if this process
    /// is killed before it can stop the shim, the shim stops as on SIGTERM and ends its processes.
    /// Linux signals the end of the thread that starts the shim: call [`Launch::start`] from one
    /// that lives as long as the shim should (the main thread), and with no wrapper that forks.
    pub fn stop_with_starter(self) -> Launch {
        self.env(settings::PARENT_PID, std::process::id().to_string())
    }

    /// Runs the shim as the last argument of `wrapper` (e.g. `unshare --pid --fork`).
    pub fn wrapper<S: Into<OsString>>(mut self, wrapper: impl IntoIterator<Item = S>) -> Launch {
        self.wrapper = wrapper.into_iter().map(Into::into).collect();
        self
    }

    /// Where the shim's log goes (default: inherited).
    pub fn stderr(mut self, stderr: Stdio) -> Launch {
        self.stderr = Some(stderr);
        self
    }

    /// How long to wait for the ready file.
    pub fn ready_timeout(mut self, limit: Duration) -> Launch {
        self.ready_timeout = limit;
        self
    }

    /// Starts the shim and waits until it is ready.
    pub fn start(self) -> Result<LocalShim, LaunchError> {
        let token = random_token();
        let dir = std::env::temp_dir().join(format!("stepshim-local-{}", random_token()));
        std::fs::create_dir(&dir).map_err(LaunchError::ReadyFile)?;
        if !self.wrapper.is_empty() {
            // A wrapper may drop privileges (setpriv, su): the shim must still write its ready
            // file. Without one, only this user can create it, so nobody else can plant a fake.
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))
                .map_err(LaunchError::ReadyFile)?;
        }
        let ready = dir.join("ready");
        let mut cmd = match self.wrapper.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(&self.bin);
                c
            }
            None => Command::new(&self.bin),
        };
        let seed = self.tls.then(|| crate::Seed::for_token(&token));
        if let Some(seed) = &seed {
            cmd.env(settings::TLS_SEED, seed.to_hex());
        }
        cmd.env(settings::LISTEN, "127.0.0.1:0")
            .env(settings::TOKEN_SHA256, protocol::token::sha256_hex(&token))
            .env(settings::READY_FILE, &ready)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(self.stderr.unwrap_or_else(Stdio::inherit));
        let child = cmd.spawn().map_err(|source| LaunchError::Spawn {
            bin: self.bin.display().to_string(),
            source,
        });
        let child = match child {
            Ok(c) => c,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        // From here on, dropping `shim` stops the child and removes the directory.
        let mut shim = LocalShim {
            child,
            addr: String::new(),
            client: ShimClient::new("http://127.0.0.1:0", None)?,
            token,
            pin: seed.map(|s| s.pin()),
            dir,
        };
        shim.addr = wait_ready(&mut shim.child, &ready, self.ready_timeout)?;
        // Read: nothing is left behind for a starter that is killed later.
        let _ = std::fs::remove_dir_all(&shim.dir);
        let token = Some(shim.token.clone());
        shim.client = match shim.pin {
            Some(pin) => ShimClient::new_pinned(&shim.url(), token, pin)?,
            None => ShimClient::new(&shim.url(), token)?,
        };
        Ok(shim)
    }
}

/// Waits for the ready file (written whole by a rename, so never seen half-written).
fn wait_ready(child: &mut Child, ready: &Path, limit: Duration) -> Result<String, LaunchError> {
    let deadline = Instant::now() + limit;
    loop {
        match std::fs::read_to_string(ready) {
            Ok(text) => return Ok(text.trim().to_owned()),
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(LaunchError::ReadyFile(e));
            }
            Err(_) => {}
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(LaunchError::Exited(status));
        }
        if Instant::now() > deadline {
            return Err(LaunchError::NotReady(limit));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

impl LocalShim {
    /// `http://host:port`, or `https://host:port` when it serves TLS.
    pub fn url(&self) -> String {
        let scheme = if self.pin.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// The child's pid (the wrapper's, if there is one).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM and waits up to `limit` for the exit status; `None` if it did not stop.
    pub fn terminate(&mut self, limit: Duration) -> Option<ExitStatus> {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + limit;
        loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for LocalShim {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None))
            && self.terminate(Duration::from_secs(2)).is_none()
        {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
