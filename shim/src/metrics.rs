//! Counters and gauges of the shim, rendered as Prometheus text for `GET /metrics`.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use crate::grants::Grants;
use crate::pull::Pulls;
use crate::table::Table;

/// Request and stream counters; process and byte figures come from the table at render time.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    requests: Mutex<BTreeMap<(&'static str, u16), u64>>,
    streams: AtomicI64,
    /// Woken when the last open stream closes.
    streams_closed: tokio::sync::Notify,
    /// Output requests that started past offset 0.
    pub(crate) resumes: AtomicU64,
    /// Connections that failed or timed out in their TLS handshake.
    #[cfg(feature = "tls")]
    pub(crate) tls_handshake_failures: AtomicU64,
}

/// Counts an open output stream until dropped.
#[derive(Debug)]
pub(crate) struct StreamGuard<'a>(&'a Metrics);

impl Drop for StreamGuard<'_> {
    fn drop(&mut self) {
        if self.0.streams.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.streams_closed.notify_waiters();
        }
    }
}

impl Metrics {
    /// Records one answered request.
    pub(crate) fn request(&self, route: &'static str, status: u16) {
        *self
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry((route, status))
            .or_default() += 1;
    }

    /// Marks an output stream open for the guard's lifetime.
    pub(crate) fn stream(&self) -> StreamGuard<'_> {
        self.streams.fetch_add(1, Ordering::AcqRel);
        StreamGuard(self)
    }

    /// Output streams open now.
    pub(crate) fn open_streams(&self) -> i64 {
        self.streams.load(Ordering::Acquire)
    }

    /// Waits until no output stream is open, or `deadline`.
    pub(crate) async fn streams_closed(&self, deadline: tokio::time::Instant) {
        loop {
            let closed = self.streams_closed.notified();
            tokio::pin!(closed);
            closed.as_mut().enable();
            if self.open_streams() <= 0 {
                return;
            }
            if tokio::time::timeout_at(deadline, closed).await.is_err() {
                return;
            }
        }
    }

    /// The Prometheus text exposition.
    pub(crate) fn render(&self, table: &Table, grants: &Grants, pulls: &Pulls) -> String {
        let mut out = String::with_capacity(2048);
        self.render_processes(&mut out, table);
        self.render_requests(&mut out);
        render_artifacts(&mut out, grants, pulls);
        #[cfg(feature = "tls")]
        metric(
            &mut out,
            "stepshim_tls_handshake_failures_total",
            "counter",
            "Connections that failed or timed out in their TLS handshake.",
            &[(
                "",
                self.tls_handshake_failures
                    .load(Ordering::Relaxed)
                    .to_string(),
            )],
        );
        out
    }

    /// Processes, orphans, output bytes, streams and resumes.
    fn render_processes(&self, out: &mut String, table: &Table) {
        let (running, exited) = table.counts();
        metric(
            out,
            "stepshim_processes",
            "gauge",
            "Processes remembered, by state.",
            &[
                ("{state=\"running\"}", running.to_string()),
                ("{state=\"exited\"}", exited.to_string()),
            ],
        );
        metric(
            out,
            "stepshim_processes_spawned_total",
            "counter",
            "Processes started since boot.",
            &[("", table.spawned.load(Ordering::Relaxed).to_string())],
        );
        metric(
            out,
            "stepshim_orphans_reaped_total",
            "counter",
            "Children reaped that no process claimed.",
            &[("", table.orphans.load(Ordering::Relaxed).to_string())],
        );
        metric(
            out,
            "stepshim_output_bytes",
            "gauge",
            "Bytes of output logs kept, by where.",
            &[
                (
                    "{where=\"memory\"}",
                    table.budget.memory_bytes().to_string(),
                ),
                ("{where=\"disk\"}", table.budget.disk_bytes().to_string()),
            ],
        );
        metric(
            out,
            "stepshim_output_streams",
            "gauge",
            "Output responses open now.",
            &[("", self.open_streams().to_string())],
        );
        metric(
            out,
            "stepshim_output_resumes_total",
            "counter",
            "Output requests with a non-zero offset.",
            &[("", self.resumes.load(Ordering::Relaxed).to_string())],
        );
    }

    /// Requests answered, by route and status.
    fn render_requests(&self, out: &mut String) {
        let requests = self
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let samples: Vec<(String, String)> = requests
            .iter()
            .map(|((route, status), n)| {
                (
                    format!("{{route=\"{route}\",status=\"{status}\"}}"),
                    n.to_string(),
                )
            })
            .collect();
        let refs: Vec<(&str, String)> = samples
            .iter()
            .map(|(l, v)| (l.as_str(), v.clone()))
            .collect();
        metric(
            out,
            "stepshim_http_requests_total",
            "counter",
            "Requests answered, by route and status.",
            &refs,
        );
    }
}

/// One metric: its help and type lines, then a line per (labels, value) sample.
fn metric(out: &mut String, name: &str, kind: &str, help: &str, samples: &[(&str, String)]) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for (labels, value) in samples {
        let _ = writeln!(out, "{name}{labels} {value}");
    }
}

/// Grants and pulls, in one write: one format string costs the binary least.
fn render_artifacts(out: &mut String, grants: &Grants, pulls: &Pulls) {
    let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let c = &pulls.counters;
    let _ = write!(
        out,
        "# HELP stepshim_grants Grants neither expired, used up nor revoked.\n\
         # TYPE stepshim_grants gauge\nstepshim_grants {}\n\
         # HELP stepshim_grant_refused_total Requests with a grant's token refused.\n\
         # TYPE stepshim_grant_refused_total counter\nstepshim_grant_refused_total {}\n\
         # HELP stepshim_pulls_total Pulls started, done and failed.\n\
         # TYPE stepshim_pulls_total counter\n\
         stepshim_pulls_total{{state=\"started\"}} {}\n\
         stepshim_pulls_total{{state=\"done\"}} {}\n\
         stepshim_pulls_total{{state=\"failed\"}} {}\n\
         # HELP stepshim_pull_bytes_total Stream bytes received by pulls.\n\
         # TYPE stepshim_pull_bytes_total counter\nstepshim_pull_bytes_total {}\n\
         # HELP stepshim_pull_resumes_total Pull connections resumed after a cut.\n\
         # TYPE stepshim_pull_resumes_total counter\nstepshim_pull_resumes_total {}\n",
        grants.live(),
        n(&grants.refused),
        n(&c.started),
        n(&c.done),
        n(&c.failed),
        n(&c.bytes),
        n(&c.resumes),
    );
}
