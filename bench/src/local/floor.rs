//! The HTTP floor under the shim's answers: `GET /healthz` from a plain socket to the shim and to a
//! bare responder (tokio's current_thread runtime, `httparse`, one fixed answer of the shim's bytes,
//! nothing else: no routing, no metrics, no connection cap), each right after a raw fork/exec and
//! again warm, alternating. Their difference is the most a hand-written HTTP path in the shim could
//! save per request, since any server on the shim's runtime does at least the responder's work.
//!
//! The responder is this executable started again as a hidden subcommand, so it is a process of its
//! own as the shim is (threads of one process switch more cheaply); it prints its address, serves
//! until its standard input closes (this bench ending, however it ends), and then exits.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::Report;
use super::spawn::RawConn;
use crate::stats::{Samples, us};

/// The shim's `/healthz` answer, byte for byte (its date is the one header that changes).
const ANSWER: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\ndate: Mon, 23 Nov 2026 20:00:00 GMT\r\n\r\nok\n";
/// Bytes of a request's line and headers the responder reads before it gives up on one.
const MAX_HEAD: usize = 8192;

/// Serves the bare responder on loopback (the hidden `floor-server` subcommand): prints its
/// address, then answers `GET /healthz` until standard input closes.
pub async fn serve() -> Result<i32> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("{}", listener.local_addr()?);
    // Whoever started the responder holds its standard input: once that closes, so does it.
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        std::process::exit(0);
    });
    loop {
        let (mut sock, _) = listener.accept().await?;
        sock.set_nodelay(true)?;
        tokio::spawn(async move {
            let mut buf = vec![0u8; MAX_HEAD];
            let mut have = 0;
            loop {
                let n = match sock.read(&mut buf[have..]).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                have += n;
                let mut headers = [httparse::EMPTY_HEADER; 32];
                let mut req = httparse::Request::new(&mut headers);
                match req.parse(&buf[..have]) {
                    Ok(httparse::Status::Complete(len)) => {
                        if req.method != Some("GET") || req.path != Some("/healthz") {
                            return;
                        }
                        buf.copy_within(len..have, 0);
                        have -= len;
                        if sock.write_all(ANSWER).await.is_err() {
                            return;
                        }
                    }
                    Ok(httparse::Status::Partial) if have < MAX_HEAD => {}
                    _ => return,
                }
            }
        });
    }
}

/// Measures `GET /healthz` against the shim at `addr` and against the bare responder, `n` rounds.
pub(super) fn http_floor(addr: &str, token: &str, n: usize, r: &mut Report) -> Result<()> {
    let mut child = Command::new(std::env::current_exe()?)
        .arg("floor-server")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("starting the bare responder")?;
    let mut line = String::new();
    let stdout = child.stdout.take().context("responder stdout")?;
    BufReader::new(stdout).read_line(&mut line)?;
    let floor_addr = line.trim().to_owned();
    let result = measure(addr, token, &floor_addr, n, r);
    // Its standard input closing ends it (that is for a bench that is killed); killed here anyway,
    // so a responder that failed to notice cannot hold the bench.
    drop(child.stdin.take());
    let _ = child.kill();
    let _ = child.wait();
    result
}

fn measure(addr: &str, token: &str, floor_addr: &str, n: usize, r: &mut Report) -> Result<()> {
    if floor_addr.is_empty() {
        bail!("the bare responder printed no address");
    }
    let mut shim = RawConn::connect(addr, token)?;
    // The same request bytes to both (the responder ignores the token).
    let mut floor = RawConn::connect(floor_addr, token)?;
    let (mut shim_cold, mut shim_warm, mut floor_cold, mut floor_warm) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let timed = |c: &mut RawConn| -> Result<std::time::Duration> {
        let t = Instant::now();
        let (status, body) = c.call("GET", "/healthz", b"")?;
        let took = t.elapsed();
        if status != 200 || body != b"ok\n" {
            bail!("/healthz answered {status}");
        }
        Ok(took)
    };
    for _ in 0..n {
        Command::new("/bin/true").status()?;
        shim_cold.push(timed(&mut shim)?);
        shim_warm.push(timed(&mut shim)?);
        Command::new("/bin/true").status()?;
        floor_cold.push(timed(&mut floor)?);
        floor_warm.push(timed(&mut floor)?);
    }
    let p50 = |v: Vec<std::time::Duration>| Samples::new(v).pct(50.0);
    let (sc, sw, fc, fw) = (
        p50(shim_cold),
        p50(shim_warm),
        p50(floor_cold),
        p50(floor_warm),
    );
    eprintln!(
        "bench: /healthz from a plain socket, shim / bare responder: after a raw fork/exec {} / {}, warm {} / {}",
        us(sc),
        us(fc),
        us(sw),
        us(fw)
    );
    r.row(
        "GET /healthz from a plain socket after a raw fork/exec: shim / bare responder (p50)",
        format!("{} / {}", us(sc), us(fc)),
        "",
    );
    r.row(
        "the same warm: shim / bare responder (p50)",
        format!("{} / {}", us(sw), us(fw)),
        "",
    );
    r.row(
        "the most a hand-written HTTP path could save per request (after a fork/exec, p50)",
        us(sc.saturating_sub(fc)),
        "",
    );
    let j = |d: std::time::Duration| json!(d.as_micros() as u64);
    r.set(
        "healthz_floor_us",
        json!({"shim_cold": j(sc), "shim_warm": j(sw), "floor_cold": j(fc), "floor_warm": j(fw), "n": n}),
    );
    Ok(())
}
