//! Spawn latency: through the shim (one request: `PUT ?wait=`) against a raw fork/exec/wait of the
//! same binary, alternating so machine noise hits both alike, with a bare `GET /healthz` round trip
//! of the same client beside them (the HTTP floor under the added latency), and the same spawn sent
//! from a plain socket (one write of the whole request, reads until the body is in; the JSON encoded
//! and decoded as the client does): the share of the project's client in the added latency.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Instant;

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

/// Measures the spawn latencies (see the module header) over `n` rounds.
pub(super) async fn spawn_latency(
    c: &client::ShimClient,
    pid: u32,
    addr: &str,
    token: &str,
    n: usize,
    r: &mut Report,
) -> Result<()> {
    let (mut raw, mut via, mut health, mut sock) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut cold, mut cold_sock) = (Vec::new(), Vec::new());
    let spec = SpawnRequest {
        path: "/bin/true".into(),
        ..Default::default()
    };
    let mut conn = RawConn::connect(addr, token)?;
    let cpu_before = super::cpu_secs(pid)?;
    // Every spawn through the shim follows a raw one, as in the rounds before the plain socket was
    // added: the shim then starts from the same state (idle while the raw child ran) whichever
    // client sends.
    for i in 0..n {
        let t = Instant::now();
        Command::new("/bin/true").status()?;
        raw.push(t.elapsed());
        let id = format!("lat{i}");
        let t = Instant::now();
        let (p, _) = c.spawn_wait(&id, &spec, 10).await?;
        via.push(t.elapsed());
        if p.exit != Some(Exit::code(0)) {
            bail!("latency run {id} ended {:?}", p.exit);
        }
        c.delete(&id, false).await?;
        let t = Instant::now();
        c.healthz().await?;
        health.push(t.elapsed());
        let t = Instant::now();
        Command::new("/bin/true").status()?;
        raw.push(t.elapsed());
        let id = format!("raw{i}");
        // Timed like the client's call: the spec encoded and the answer decoded inside.
        let t = Instant::now();
        let body = serde_json::to_vec(&spec)?;
        let (status, answer) = conn.call("PUT", &format!("/v1/processes/{id}?wait=10"), &body)?;
        let p: Process = serde_json::from_slice(&answer)?;
        sock.push(t.elapsed());
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
        cold.push(t.elapsed());
        Command::new("/bin/true").status()?;
        let t = Instant::now();
        conn.call("GET", "/healthz", b"")?;
        cold_sock.push(t.elapsed());
    }
    // Less disturbed by other load than the latencies: the shim's own CPU time (its children's not
    // included) per round of two spawns, two deletes and three `/healthz`.
    let cpu_per_round = (super::cpu_secs(pid)? - cpu_before) / n.max(1) as f64 * 1e6;
    let (raw, via, health, sock) = (
        Samples::new(raw),
        Samples::new(via),
        Samples::new(health),
        Samples::new(sock),
    );
    let (cold, cold_sock) = (Samples::new(cold), Samples::new(cold_sock));
    let added = via.pct(50.0).saturating_sub(raw.pct(50.0));
    let added_sock = sock.pct(50.0).saturating_sub(raw.pct(50.0));
    eprintln!(
        "bench: spawn-to-exit p50 raw {} shim {} plain socket {} (healthz {}, after a spawn {}, plain socket {}; shim CPU {cpu_per_round:.0} µs a round)",
        us(raw.pct(50.0)),
        us(via.pct(50.0)),
        us(sock.pct(50.0)),
        us(health.pct(50.0)),
        us(cold.pct(50.0)),
        us(cold_sock.pct(50.0))
    );
    let p50_99 = |s: &Samples| format!("{} / {}", us(s.pct(50.0)), us(s.pct(99.0)));
    r.row(
        "spawn to exit, raw fork/exec of /bin/true (p50 / p99)",
        p50_99(&raw),
        "",
    );
    r.row(
        "spawn to exit through the shim, one request (p50 / p99)",
        p50_99(&via),
        "",
    );
    r.row(
        "added latency over raw fork/exec (p50)",
        us(added),
        "< 100 µs",
    );
    r.row(
        "the same spawn from a plain socket (p50 / p99)",
        p50_99(&sock),
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
        p50_99(&health),
        "",
    );
    r.row(
        "the same right after a raw fork/exec (p50 / p99)",
        p50_99(&cold),
        "",
    );
    r.row(
        "that from a plain socket (p50 / p99)",
        p50_99(&cold_sock),
        "",
    );
    let j = |s: &Samples| json!({"p50": s.pct(50.0).as_micros() as u64, "p99": s.pct(99.0).as_micros() as u64, "n": s.len()});
    r.set("spawn_raw_us", j(&raw));
    r.set("spawn_shim_us", j(&via));
    r.set("spawn_socket_us", j(&sock));
    r.set("healthz_us", j(&health));
    r.set("shim_cpu_us_per_round", json!(cpu_per_round));
    r.set("healthz_after_spawn_us", j(&cold));
    r.set("healthz_after_spawn_socket_us", j(&cold_sock));
    Ok(())
}
