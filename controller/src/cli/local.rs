//! A `stepshim` started as a local child process on a loopback port with a fresh token: the same
//! commands as against a pod, without a cluster.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use controller::shim::ShimClient;
use controller::token::token_sha256;

/// A running local shim; killed (SIGTERM, then SIGKILL) when dropped.
#[derive(Debug)]
pub struct LocalShim {
    child: Child,
    /// A client for it.
    pub client: ShimClient,
}

/// Finds the shim binary: `explicit`, `$STEPSHIM_BIN`, beside this executable, then `PATH`.
pub fn find_binary(explicit: Option<PathBuf>) -> Result<PathBuf> {
    if let Some(p) = explicit.or_else(|| std::env::var_os("STEPSHIM_BIN").map(PathBuf::from)) {
        return Ok(p);
    }
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(PathBuf::from))
    {
        let beside = dir.join("stepshim");
        if beside.is_file() {
            return Ok(beside);
        }
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join("stepshim"))
        .find(|p| p.is_file())
        .ok_or_else(|| anyhow!("no stepshim binary: build it (cargo build -p stepshim), or pass --shim-bin or STEPSHIM_BIN"))
}

impl LocalShim {
    /// Starts the shim binary at `bin`.
    pub fn start(bin: &std::path::Path) -> Result<LocalShim> {
        let mut raw = [0u8; 16];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut raw))?;
        let token: String = raw.iter().map(|b| format!("{b:02x}")).collect();
        let mut child = Command::new(bin)
            .env("STEPSHIM_LISTEN", "127.0.0.1:0")
            .env("STEPSHIM_TOKEN_SHA256", token_sha256(&token))
            .env("STEPSHIM_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let stderr = child.stderr.take().context("shim stderr")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let (Some(i), true) = (line.find("addr=\""), tx.is_some()) {
                    let rest = &line[i + 6..];
                    if let Some(t) = tx.take() {
                        let _ = t.send(rest[..rest.find('"').unwrap_or(rest.len())].to_owned());
                    }
                } else if !line.contains("INFO") {
                    eprintln!("stepshim: {line}");
                }
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(10))
            .map_err(|_| anyhow!("the local shim did not start"))?;
        let client = ShimClient::new(&format!("http://{addr}"), Some(token))?;
        Ok(LocalShim { child, client })
    }
}

impl LocalShim {
    /// The shim's pid.
    pub fn pid(&self) -> Option<u32> {
        Some(self.child.id())
    }
}

impl Drop for LocalShim {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        for _ in 0..200 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
