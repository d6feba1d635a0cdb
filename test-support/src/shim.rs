//! A real `stepshim` child for tests: loopback port, fresh token, a two-second grace, debug log kept
//! in memory for assertions and failure messages. Panics on failure, as a test helper should.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use client::ShimClient;
use client::local::{Launch, LocalShim};

/// A running shim child process. Its `Debug` never shows the token.
pub struct Shim {
    /// The shim (stopped when dropped).
    pub local: LocalShim,
    /// `host:port`.
    pub addr: String,
    /// Its bearer token.
    pub token: String,
    /// A client for it.
    pub client: ShimClient,
    /// Everything it logged so far.
    pub log: Arc<Mutex<String>>,
}

impl std::fmt::Debug for Shim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shim")
            .field("local", &self.local)
            .finish_non_exhaustive()
    }
}

/// The shim binary under test: `$STEPSHIM_BIN`, else `stepshim` in the target directory of the test
/// executable (`target/<profile>/deps/test-…` → `target/<profile>/stepshim`), which cargo builds
/// before the shim's integration tests.
pub fn binary() -> PathBuf {
    if let Some(p) = std::env::var_os("STEPSHIM_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir");
    profile_dir.join("stepshim")
}

impl Shim {
    /// Starts the shim with defaults.
    pub fn start() -> Shim {
        Self::start_with(&[], None)
    }

    /// Starts the shim with extra environment, optionally under a wrapper command (e.g. `unshare`).
    pub fn start_with(env: &[(&str, &str)], wrapper: Option<&[&str]>) -> Shim {
        Self::launch(env, wrapper, false)
    }

    /// Starts the shim as uid and gid 65534 with no supplementary groups (through `setpriv`): no
    /// capabilities left, its data in /tmp (writable by anyone).
    pub fn start_as_nobody() -> Shim {
        Self::start_with(
            &[("STEPSHIM_DATA_DIR", "/tmp")],
            Some(&[
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--",
            ]),
        )
    }

    /// Starts the shim serving TLS (PROTOCOL.md 1.1), its client pinning the key; the binary must
    /// be built with TLS.
    pub fn start_tls(env: &[(&str, &str)]) -> Shim {
        Self::launch(env, None, true)
    }

    fn launch(env: &[(&str, &str)], wrapper: Option<&[&str]>, tls: bool) -> Shim {
        let mut launch = Launch::new(binary())
            .tls(tls)
            .env(protocol::settings::GRACE_SECONDS, "2")
            .env(protocol::settings::LOG, "debug")
            .stderr(Stdio::piped());
        for (k, v) in env {
            launch = launch.env(k, v);
        }
        if let Some(w) = wrapper {
            launch = launch.wrapper(w.iter().copied());
        }
        let log = Arc::new(Mutex::new(String::new()));
        let mut local = match launch.start() {
            Ok(l) => l,
            Err(e) => panic!("stepshim did not start: {e}"),
        };
        let stderr = local.child.stderr.take().expect("stderr");
        let log2 = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                log2.lock().unwrap().push_str(&(line + "\n"));
            }
        });
        Shim {
            addr: local.addr.clone(),
            token: local.token.clone(),
            client: local.client.clone(),
            local,
            log,
        }
    }

    /// `http://host:port` (`https://` when it serves TLS)
    pub fn url(&self) -> String {
        self.local.url()
    }

    /// The shim's pid (its wrapper's, when started under one).
    pub fn pid(&self) -> u32 {
        self.local.pid()
    }

    /// The child process.
    pub fn child(&mut self) -> &mut Child {
        &mut self.local.child
    }

    /// Sends SIGTERM and waits for the exit status, with a deadline.
    pub fn terminate(&mut self) -> ExitStatus {
        match self.local.terminate(Duration::from_secs(30)) {
            Some(s) => s,
            None => panic!(
                "shim did not stop after SIGTERM:\n{}",
                self.log.lock().unwrap()
            ),
        }
    }
}
