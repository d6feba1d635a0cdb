//! One driver of the scale benchmark as a child process: starts it (the Rust `scale-worker`
//! subcommand of this binary, or the Go program), writes its commands, reads its JSON replies with a
//! deadline, and reads its memory from `/proc/<pid>/status`. The child's stderr passes through.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// Which implementation drives the worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Kind {
    /// `controller::runtime::Runtime` and `controller::gc`, stepctl's library.
    Rust,
    /// `k8s.Worker` of the Go kit (`go/k8s`).
    Go,
    /// Memory analysis only: the Rust runtime's reflector with `managedFields` dropped before the
    /// store (`scale-worker --strip-managed-fields`); measured up to its filled cache.
    RustStripped,
}

impl Kind {
    /// Parses a `--drivers` entry.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "rust" => Ok(Kind::Rust),
            "go" => Ok(Kind::Go),
            "rust-stripped" => Ok(Kind::RustStripped),
            _ => bail!("unknown driver {s:?} (rust, go, rust-stripped)"),
        }
    }
}

/// What the child needs to know.
#[derive(Debug, Clone)]
pub struct Spec {
    /// The worker's kubeconfig (its service account's token).
    pub kubeconfig: PathBuf,
    /// Namespace.
    pub namespace: String,
    /// Worker name.
    pub worker: String,
    /// Key file.
    pub key: PathBuf,
    /// Desired set prefix.
    pub prefix: String,
    /// Desired set size.
    pub count: usize,
}

/// A running driver.
#[derive(Debug)]
pub struct Driver {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    pid: u32,
}

/// Resident memory of a process, KiB: now (`VmRSS`) and its peak (`VmHWM`).
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Memory {
    /// Resident now.
    pub rss_kib: u64,
    /// Highest resident so far.
    pub peak_kib: u64,
}

impl Driver {
    /// Starts `kind` with `spec`; `go_bin` is the Go program.
    pub fn start(kind: Kind, spec: &Spec, go_bin: &Path) -> Result<Self> {
        let mut cmd = match kind {
            Kind::Rust | Kind::RustStripped => {
                let mut c = Command::new(std::env::current_exe().context("own executable")?);
                c.arg("scale-worker");
                if kind == Kind::RustStripped {
                    c.arg("--strip-managed-fields");
                }
                c
            }
            Kind::Go => Command::new(go_bin),
        };
        let count = spec.count.to_string();
        for (flag, value) in [
            ("--kubeconfig", spec.kubeconfig.as_os_str()),
            ("--namespace", spec.namespace.as_ref()),
            ("--worker", spec.worker.as_ref()),
            ("--key", spec.key.as_os_str()),
            ("--prefix", spec.prefix.as_ref()),
            ("--count", count.as_ref()),
        ] {
            cmd.arg(flag).arg(value);
        }
        // Nothing inherited steers either client elsewhere: only the kubeconfig file counts.
        cmd.env_remove("KUBECONFIG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {kind:?} driver"))?;
        let pid = child.id().context("driver pid")?;
        let stdin = child.stdin.take().context("driver stdin")?;
        let stdout = child.stdout.take().context("driver stdout")?;
        Ok(Driver {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
            pid,
        })
    }

    /// Sends one command line.
    pub async fn send(&mut self, line: &str) -> Result<()> {
        self.stdin.write_all(format!("{line}\n").as_bytes()).await?;
        self.stdin.flush().await?;
        Ok(())
    }

    /// The next reply, whatever it is.
    pub async fn next(&mut self, within: Duration) -> Result<Value> {
        let line = tokio::time::timeout(within, self.lines.next_line())
            .await
            .with_context(|| format!("no reply from the driver within {within:?}"))??
            .context("the driver exited")?;
        serde_json::from_str(&line).with_context(|| format!("driver reply is not JSON: {line:?}"))
    }

    /// The next reply, which must be `event` (an `error` reply or another event fails).
    pub async fn expect(&mut self, event: &str, within: Duration) -> Result<Value> {
        let v = self
            .next(within)
            .await
            .with_context(|| format!("waiting for {event:?}"))?;
        if v["event"] != event {
            bail!("expected {event:?} from the driver, got {v}");
        }
        Ok(v)
    }

    /// The driver's memory now.
    pub fn memory(&self) -> Memory {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid)).unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap_or(0)
        };
        Memory {
            rss_kib: field("VmRSS:"),
            peak_kib: field("VmHWM:"),
        }
    }

    /// Asks the driver to quit and waits for it (killing it after 10 s).
    pub async fn quit(mut self) -> Result<()> {
        let _ = self.send("quit").await;
        match tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await {
            Ok(status) => {
                let status = status?;
                if !status.success() {
                    bail!("driver exited with {status}");
                }
                Ok(())
            }
            Err(_) => {
                let _ = self.child.kill().await;
                bail!("driver did not quit within 10 s")
            }
        }
    }
}
