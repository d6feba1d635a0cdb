//! What a scenario costs the control plane: kube-apiserver's CPU seconds and RSS from its process
//! (`/proc/<pid>`), and its goroutines and long-running requests from its own `/metrics`.

use anyhow::{Context, Result};
use serde::Serialize;

/// One reading of the apiserver.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Reading {
    /// User plus system CPU seconds since it started.
    pub cpu_secs: f64,
    /// Resident memory, KiB.
    pub rss_kib: u64,
    /// `go_goroutines`.
    pub goroutines: f64,
    /// Sum of `apiserver_longrunning_requests` (watches, exec, attach, ...).
    pub longrunning: f64,
}

/// What a scenario cost: differences and peaks between two readings.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Cost {
    /// CPU seconds used during the scenario.
    pub cpu_secs: f64,
    /// Largest RSS seen, KiB.
    pub peak_rss_kib: u64,
    /// Largest goroutine count seen.
    pub peak_goroutines: f64,
    /// Largest number of long-running requests seen.
    pub peak_longrunning: f64,
}

/// Reads the apiserver by pid and through a Kubernetes client allowed to GET `/metrics`.
#[derive(Clone)]
pub struct Probe {
    pid: u32,
    client: kube::Client,
}

impl std::fmt::Debug for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probe").field("pid", &self.pid).finish()
    }
}

/// Finds the apiserver's pid: `explicit`, else the pid file the test cluster writes.
pub fn find_pid(explicit: Option<u32>) -> Result<u32> {
    if let Some(p) = explicit {
        return Ok(p);
    }
    let path = "/var/lib/stepshim-cluster/pids/kube-apiserver.pid";
    std::fs::read_to_string(path)
        .with_context(|| format!("no --apiserver-pid and cannot read {path}"))?
        .trim()
        .parse()
        .context("apiserver pid file")
}

impl Probe {
    /// A probe of the apiserver process `pid`, reading metrics through `client`.
    pub fn new(pid: u32, client: kube::Client) -> Self {
        Probe { pid, client }
    }

    /// The pid probed; it changes when the apiserver restarts.
    pub fn set_pid(&mut self, pid: u32) {
        self.pid = pid;
    }

    /// CPU seconds the apiserver has used, from `/proc` alone (0 if it is gone).
    pub fn cpu_secs(&self) -> f64 {
        crate::procfs::cpu_secs(self.pid).unwrap_or(0.0)
    }

    /// One reading.
    pub async fn read(&self) -> Result<Reading> {
        let cpu_secs = self.cpu_secs();
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid))
            .context("apiserver /proc status")?;
        let rss_kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0);
        let req = http::Request::get("/metrics").body(Vec::new())?;
        let text = self
            .client
            .request_text(req)
            .await
            .context("apiserver /metrics")?;
        let (mut goroutines, mut longrunning) = (0.0, 0.0);
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let value: f64 = value.parse().unwrap_or(0.0);
            if series == "go_goroutines" {
                goroutines = value;
            } else if series.starts_with("apiserver_longrunning_requests") {
                longrunning += value;
            }
        }
        Ok(Reading {
            cpu_secs,
            rss_kib,
            goroutines,
            longrunning,
        })
    }
}

impl Cost {
    /// Folds a reading taken during the scenario into the peaks.
    pub fn observe(&mut self, r: &Reading) {
        self.peak_rss_kib = self.peak_rss_kib.max(r.rss_kib);
        self.peak_goroutines = self.peak_goroutines.max(r.goroutines);
        self.peak_longrunning = self.peak_longrunning.max(r.longrunning);
    }
}
