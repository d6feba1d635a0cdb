//! Spawn latency: through the shim (one request: `PUT ?wait=`) against a raw fork/exec/wait of the
//! same binary, alternating so machine noise hits both alike, with a bare `GET /healthz` round trip
//! of the same client beside them (the HTTP floor under the added latency), and the same spawn sent
//! from a plain socket (one write of the whole request, reads until the body is in; the JSON encoded
//! and decoded as the client does): the share of the project's client in the added latency.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use protocol::{Exit, Process, SpawnRequest};
use serde_json::json;

use super::Report;
use crate::stats::{Samples, us};

/// A kept-alive HTTP/1.1 connection written and read by hand.
pub(super) struct RawConn {
    sock: TcpStream,
    auth: String,
    buf: Vec<u8>,
}

impl RawConn {
    pub(super) fn connect(addr: &str, token: &str) -> Result<Self> {
        let sock = TcpStream::connect(addr)?;
        sock.set_nodelay(true)?;
        Ok(RawConn {
            sock,
            auth: format!("Authorization: Bearer {token}\r\n"),
            buf: Vec::with_capacity(4096),
        })
    }

    /// Sends one request in one write and returns the status and body of the answer.
    pub(super) fn call(&mut self, method: &str, path: &str, body: &[u8]) -> Result<(u16, Vec<u8>)> {
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nHost: shim\r\n{}Content-Length: {}\r\n\r\n",
            self.auth,
            body.len()
        )
        .into_bytes();
        req.extend_from_slice(body);
        self.sock.write_all(&req)?;
        self.buf.clear();
        let mut chunk = [0u8; 4096];
        loop {
            let n = self.sock.read(&mut chunk)?;
            if n == 0 {
                bail!("the shim closed the connection");
            }
            self.buf.extend_from_slice(&chunk[..n]);
            let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            let head = std::str::from_utf8(&self.buf[..end])?;
            let status: u16 = head
                .get(9..12)
                .and_then(|s| s.parse().ok())
                .context("status")?;
            let len: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0);
            if self.buf.len() >= end + 4 + len {
                return Ok((status, self.buf[end + 4..end + 4 + len].to_vec()));
            }
        }
    }
}

/// Measures the spawn latencies (see the module header) over `n` iterations.
pub(super) async fn spawn_latency(
    c: &client::ShimClient,
    pid: u32,
    addr: &str,
    token: &str,
    n: usize,
    r: &mut Report,
) -> Result<()> {
    let mut conn = RawConn::connect(addr, token)?;
    let cpu_before = super::cpu_secs(pid)?;
    let mut t = Timings::default();
    for i in 0..n {
        t.iteration(c, &mut conn, i).await?;
    }
    // Less disturbed by other load than the latencies: the shim's own CPU time (its children's not
    // included) per iteration: two spawns, two deletes and three `/healthz`.
    let cpu_per_round = (super::cpu_secs(pid)? - cpu_before) / n.max(1) as f64 * 1e6;
    Latencies::of(t).report(cpu_per_round, r);
    Ok(())
}

/// What one run measures, one sample per iteration each.
#[derive(Default)]
struct Timings {
    raw: Vec<Duration>,
    via: Vec<Duration>,
    health: Vec<Duration>,
    sock: Vec<Duration>,
    cold: Vec<Duration>,
    cold_sock: Vec<Duration>,
}

/// Runs `/bin/true`, timed.
fn raw_true() -> Result<Duration> {
    let t = Instant::now();
    Command::new("/bin/true").status()?;
    Ok(t.elapsed())
}

impl Timings {
    /// One iteration. Every spawn through the shim follows a raw one: the shim then starts from the
    /// same state (idle while the raw child ran) whichever client sends.
    async fn iteration(
        &mut self,
        c: &client::ShimClient,
        conn: &mut RawConn,
        i: usize,
    ) -> Result<()> {
        let spec = SpawnRequest {
            path: "/bin/true".into(),
            ..Default::default()
        };
        self.raw.push(raw_true()?);
        let id = format!("lat{i}");
        let t = Instant::now();
        let (p, _) = c.spawn_wait(&id, &spec, 10).await?;
        self.via.push(t.elapsed());
        if p.exit != Some(Exit::code(0)) {
            bail!("latency run {id} ended {:?}", p.exit);
        }
        c.delete(&id, false).await?;
        let t = Instant::now();
        c.healthz().await?;
        self.health.push(t.elapsed());
        self.raw.push(raw_true()?);
        let id = format!("raw{i}");
        // Timed like the client's call: the spec encoded and the answer decoded inside.
        let t = Instant::now();
        let body = serde_json::to_vec(&spec)?;
        let (status, answer) = conn.call("PUT", &format!("/v1/processes/{id}?wait=10"), &body)?;
        let p: Process = serde_json::from_slice(&answer)?;
        self.sock.push(t.elapsed());
        if status != 201 || p.exit != Some(Exit::code(0)) {
            bail!("latency run {id} answered {status}, ended {:?}", p.exit);
        }
        let (status, _) = conn.call("DELETE", &format!("/v1/processes/{id}"), b"")?;
        if status != 204 {
            bail!("deleting {id} answered {status}");
        }
        // The HTTP floor as a spawn meets it: right after another process ran, with what the shim
        // and the client touch no longer in the CPU's caches.
        Command::new("/bin/true").status()?;
        let t = Instant::now();
        c.healthz().await?;
        self.cold.push(t.elapsed());
        Command::new("/bin/true").status()?;
        let t = Instant::now();
        conn.call("GET", "/healthz", b"")?;
        self.cold_sock.push(t.elapsed());
        Ok(())
    }
}

/// [`Timings`] as distributions.
struct Latencies {
    raw: Samples,
    via: Samples,
    health: Samples,
    sock: Samples,
    cold: Samples,
    cold_sock: Samples,
}

impl Latencies {
    fn of(t: Timings) -> Self {
        Latencies {
            raw: Samples::new(t.raw),
            via: Samples::new(t.via),
            health: Samples::new(t.health),
            sock: Samples::new(t.sock),
            cold: Samples::new(t.cold),
            cold_sock: Samples::new(t.cold_sock),
        }
    }

    /// One line on stderr, then the report's rows and JSON values.
    fn report(&self, cpu_per_round: f64, r: &mut Report) {
        eprintln!(
            "bench: spawn-to-exit p50 raw {} shim {} plain socket {} (healthz {}, after a spawn {}, plain socket {}; shim CPU {cpu_per_round:.0} µs a round)",
            us(self.raw.pct(50.0)),
            us(self.via.pct(50.0)),
            us(self.sock.pct(50.0)),
            us(self.health.pct(50.0)),
            us(self.cold.pct(50.0)),
            us(self.cold_sock.pct(50.0))
        );
        self.rows(cpu_per_round, r);
        let j = |s: &Samples| json!({"p50": s.pct(50.0).as_micros() as u64, "p99": s.pct(99.0).as_micros() as u64, "n": s.len()});
        r.set("spawn_raw_us", j(&self.raw));
        r.set("spawn_shim_us", j(&self.via));
        r.set("spawn_socket_us", j(&self.sock));
        r.set("healthz_us", j(&self.health));
        r.set("shim_cpu_us_per_round", json!(cpu_per_round));
        r.set("healthz_after_spawn_us", j(&self.cold));
        r.set("healthz_after_spawn_socket_us", j(&self.cold_sock));
    }

    /// The report's table rows.
    fn rows(&self, cpu_per_round: f64, r: &mut Report) {
        let added = self.via.pct(50.0).saturating_sub(self.raw.pct(50.0));
        let added_sock = self.sock.pct(50.0).saturating_sub(self.raw.pct(50.0));
        let p50_99 = |s: &Samples| format!("{} / {}", us(s.pct(50.0)), us(s.pct(99.0)));
        r.row(
            "spawn to exit, raw fork/exec of /bin/true (p50 / p99)",
            p50_99(&self.raw),
            "",
        );
        r.row(
            "spawn to exit through the shim, one request (p50 / p99)",
            p50_99(&self.via),
            "",
        );
        r.row(
            "added latency over raw fork/exec (p50)",
            us(added),
            "< 100 µs",
        );
        r.row(
            "the same spawn from a plain socket (p50 / p99)",
            p50_99(&self.sock),
            "",
        );
        r.row(
            "added latency over raw fork/exec, plain socket (p50)",
            us(added_sock),
            "",
        );
        r.row(
            "shim CPU per round (two spawns, two deletes, three /healthz)",
            format!("{cpu_per_round:.0} µs"),
            "",
        );
        r.row(
            "GET /healthz round trip, the same client (p50 / p99)",
            p50_99(&self.health),
            "",
        );
        r.row(
            "the same right after a raw fork/exec (p50 / p99)",
            p50_99(&self.cold),
            "",
        );
        r.row(
            "that from a plain socket (p50 / p99)",
            p50_99(&self.cold_sock),
            "",
        );
    }
}
