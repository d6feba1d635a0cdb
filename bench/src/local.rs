//! The local footprint benchmark of the shim: binary size, start to ready, idle RSS, memory per open
//! output stream and per followed process, spawn latency against a raw fork/exec of the same binary
//! (alternating, so machine noise hits both alike) with a `/healthz` round trip as the HTTP floor,
//! one-stream throughput (the median of several runs), what TLS costs against plain HTTP ([`tls`]),
//! serving images ([`images`]), one tree pulled by many steps at once ([`fanout`]), and many
//! processes followed at once with every byte checked. `--only` runs some of these parts.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures_util::future::join_all;
use protocol::{Exit, FrameType, SpawnRequest};
use serde_json::json;

use client::local::{Launch, find_binary};

mod fanout;
pub mod floor;
mod images;
mod spawn;
mod tls;

use crate::args::LocalArgs;
use crate::stats::{Samples, ms};

fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmRSS")
}

/// CPU seconds (user + system) a process has used.
fn cpu_secs(pid: u32) -> Result<f64> {
    crate::procfs::cpu_secs(pid).context("no or odd /proc stat")
}

fn sh(script: &str) -> SpawnRequest {
    SpawnRequest {
        path: "/bin/sh".into(),
        args: vec!["-c".into(), script.into()],
        ..Default::default()
    }
}

/// Spawn to healthy, over fresh shims, with an idle RSS reading of each.
fn start_to_ready(bin: &std::path::Path, n: usize) -> Result<(Samples, u64)> {
    let mut times = Vec::new();
    let mut rss = Vec::new();
    for _ in 0..n {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let started = Instant::now();
        let mut child = Command::new(bin)
            .env("STEPSHIM_LISTEN", format!("127.0.0.1:{port}"))
            .env("STEPSHIM_INSECURE_NO_AUTH", "1")
            .env("STEPSHIM_LOG", "error")
            // Unauthenticated: it must not outlive a bench killed in this loop.
            .env(
                protocol::settings::PARENT_PID,
                std::process::id().to_string(),
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let deadline = started + Duration::from_secs(5);
        loop {
            if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
                use std::io::{Read, Write};
                s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")?;
                let mut r = String::new();
                let _ = s.read_to_string(&mut r);
                if r.starts_with("HTTP/1.1 200") {
                    break;
                }
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                bail!("shim not ready within 5 s");
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        times.push(started.elapsed());
        std::thread::sleep(Duration::from_millis(50));
        rss.push(rss_kib(child.id())?);
        let _ = child.kill();
        let _ = child.wait();
    }
    rss.sort_unstable();
    Ok((Samples::new(times), rss[rss.len() / 2]))
}

/// One measured part: its table rows and its JSON fields.
#[derive(Default)]
struct Report {
    rows: Vec<(String, String, &'static str)>,
    json: serde_json::Map<String, serde_json::Value>,
    bad: usize,
    /// Markdown after the main table (a part's table of its own).
    extra: String,
}

impl Report {
    fn row(&mut self, measure: impl Into<String>, result: String, target: &'static str) {
        self.rows.push((measure.into(), result, target));
    }
    fn set(&mut self, key: &str, v: serde_json::Value) {
        self.json.insert(key.to_owned(), v);
    }
}

/// The median of `v` (sorted in place) and its range.
fn median(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    match v {
        [] => (0.0, 0.0, 0.0),
        _ => (v[v.len() / 2], v[0], v[v.len() - 1]),
    }
}

/// The parts `--only` knows.
const PARTS: [&str; 9] = [
    "ready", "spawn", "floor", "streams", "stream", "tls", "images", "fanout", "many",
];

/// Runs the local benchmark and prints the table.
pub async fn run(args: &LocalArgs) -> Result<i32> {
    let (_, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)?;
    nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard)?;
    if let Some(p) = args.only.iter().find(|p| !PARTS.contains(&p.as_str())) {
        bail!("no part {p:?} (parts: {})", PARTS.join(", "));
    }
    let part = |name: &str| args.only.is_empty() || args.only.iter().any(|p| p == name);
    let bin = find_binary(args.shim_bin.clone())
        .context("no stepshim binary: pass --shim-bin or STEPSHIM_BIN")?;
    let mut r = Report::default();
    binary(&bin, &mut r)?;

    if part("ready") {
        let (ready, idle_rss) = start_to_ready(&bin, 30)?;
        eprintln!("bench: start to ready p50 {}", ms(ready.pct(50.0)));
        r.row("start to ready (p50 of 30)", ms(ready.pct(50.0)), "< 2 ms");
        r.row("idle RSS", format!("{idle_rss} KiB"), "< 1 MiB");
        r.set("start_to_ready_us", json!({"p50": ready.pct(50.0).as_micros() as u64, "p90": ready.pct(90.0).as_micros() as u64, "max": ready.max().as_micros() as u64}));
        r.set("idle_rss_kib", json!(idle_rss));
    }

    // Thousands of followers: lift the connection cap above them (the shim raises its own open-file
    // limit to the hard one and keeps STEPSHIM_FD_RESERVE of it out of the cap).
    // Started from the main thread (a current_thread runtime): a bench that is killed takes it along.
    let shim = Launch::new(&bin)
        .stop_with_starter()
        .env(protocol::settings::LOG, "error")
        .env(
            protocol::settings::MAX_CONNECTIONS,
            (args.idle_streams.max(args.concurrent) + 100).to_string(),
        )
        .stderr(Stdio::null())
        .start()?;
    let pid = shim.pid();
    let c = shim.client.clone();
    if part("spawn") {
        spawn::spawn_latency(&c, pid, &shim.addr, &shim.token, args.iterations, &mut r).await?;
    }
    if part("floor") {
        floor::http_floor(&shim.addr, &shim.token, args.iterations, &mut r)?;
    }
    if part("streams") {
        idle_streams(&c, pid, args.idle_streams, &mut r).await?;
    }
    if part("stream") {
        stream_runs(&c, pid, args, &mut r).await?;
    }
    if part("tls") {
        tls::run(&bin, args, !args.only.is_empty(), &mut r).await?;
    }
    if part("images") {
        images::run(&shim, args.image_mib, args.stream_runs, &mut r).await?;
    }
    if part("fanout") {
        fanout::run(
            &bin,
            args.fanout_mib,
            &args.fanout,
            args.stream_runs,
            &mut r,
        )
        .await?;
    }
    if part("many") {
        many(&c, pid, args.concurrent, &mut r).await?;
    }

    write(&r, args.results.as_deref())?;
    Ok(if r.bad == 0 { 0 } else { 1 })
}

/// The binary's size and whether it is static, into `r`.
fn binary(bin: &std::path::Path, r: &mut Report) -> Result<()> {
    let size = std::fs::metadata(bin)?.len();
    let file = Command::new("file")
        .arg("-b")
        .arg(bin)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    let is_static = file
        .as_deref()
        .is_ok_and(|f| f.contains("statically linked"));
    eprintln!("bench: shim {} ({size} bytes)", bin.display());
    let not_static = if is_static { "" } else { " (NOT static)" };
    r.row(
        "binary size (stripped, static)",
        format!("{} KiB{not_static}", size / 1024),
        "< 1,000 KiB",
    );
    r.set("binary_bytes", json!(size));
    r.set("static", json!(is_static));
    Ok(())
}

/// Prints the report as a markdown table and writes it, with the raw numbers, into `dir`.
fn write(r: &Report, dir: Option<&std::path::Path>) -> Result<()> {
    let mut md = String::from("| measure | result | target |\n|---|---|---|\n");
    for (m, res, t) in &r.rows {
        md.push_str(&format!("| {m} | {res} | {t} |\n"));
    }
    md.push_str(&r.extra);
    print!("{md}");
    if let Some(dir) = dir {
        std::fs::create_dir_all(dir)?;
        std::fs::write(
            dir.join("local.json"),
            serde_json::to_string_pretty(&r.json)?,
        )?;
        std::fs::write(dir.join("local.md"), md)?;
    }
    Ok(())
}

/// Memory per open output stream: idle follows of one quiet process.
async fn idle_streams(c: &client::ShimClient, pid: u32, n: usize, r: &mut Report) -> Result<()> {
    c.spawn("quiet", &sh("echo hi; exec sleep 600")).await?;
    let before = rss_kib(pid)?;
    let mut open = Vec::new();
    for _ in 0..n {
        open.push(c.output("quiet", 0, true).await?);
    }
    settle(c, "stepshim_output_streams", n).await?;
    let per_stream = (rss_kib(pid)?.saturating_sub(before)) as f64 / n as f64;
    drop(open);
    c.delete("quiet", true).await?;
    r.row(
        format!("memory per open output stream ({n} idle follows)"),
        format!("{per_stream:.1} KiB"),
        "< 32 KiB",
    );
    r.set("per_stream_kib", json!(per_stream));
    r.set("idle_streams", json!(n));
    Ok(())
}

/// Throughput of one stream, client parsing included, and the shim's CPU time for it: the median
/// of several runs, each a fresh process.
async fn stream_runs(
    c: &client::ShimClient,
    pid: u32,
    a: &LocalArgs,
    r: &mut Report,
) -> Result<()> {
    let bytes = a.stream_mib << 20;
    let (mut mbps, mut cpu) = (Vec::new(), Vec::new());
    for run in 0..a.stream_runs.max(1) {
        let id = format!("stream{run}");
        c.spawn(&id, &sh(&format!("head -c {bytes} /dev/zero")))
            .await?;
        let cpu_before = cpu_secs(pid)?;
        let t = Instant::now();
        let mut got = 0u64;
        let end = c
            .attach(&id, 0, 3, |k, d| {
                if k == FrameType::Stdout {
                    got += d.len() as u64
                }
            })
            .await?;
        let secs = t.elapsed().as_secs_f64();
        cpu.push((cpu_secs(pid)? - cpu_before) / (bytes as f64 / f64::from(1u32 << 30)));
        if got != bytes || end.exit != Exit::code(0) {
            bail!(
                "throughput run got {got} of {bytes} bytes, exit {:?}",
                end.exit
            );
        }
        mbps.push(bytes as f64 / secs / 1e6);
        c.delete(&id, false).await?;
        eprintln!("bench: one stream {:.0} MB/s", mbps[run]);
    }
    let runs = mbps.clone();
    let (m, lo, hi) = median(&mut mbps);
    let (cm, clo, chi) = median(&mut cpu);
    r.row(
        format!(
            "one stream of stdout ({} MiB, median of {})",
            a.stream_mib,
            runs.len()
        ),
        format!("{m:.0} MB/s ({lo:.0}–{hi:.0})"),
        ">= 1000 MB/s",
    );
    r.row(
        "shim CPU per GiB of that stream (utime + stime)",
        format!("{cm:.2} s ({clo:.2}–{chi:.2})"),
        "",
    );
    r.set("stream_mb_per_s", json!(m));
    r.set("stream_mb_per_s_range", json!([lo, hi]));
    r.set("stream_mb_per_s_runs", json!(runs));
    r.set("shim_cpu_s_per_gib", json!(cm));
    r.set("shim_cpu_s_per_gib_range", json!([clo, chi]));
    Ok(())
}

/// Many processes followed at once, every byte checked.
async fn many(c: &client::ShimClient, pid: u32, n: usize, r: &mut Report) -> Result<()> {
    let before = rss_kib(pid)?;
    let t = Instant::now();
    let script = "for i in 1 2 3; do echo line $i; sleep 1; done";
    let spawns = join_all((0..n).map(|i| {
        let c = c.clone();
        async move { c.spawn(&format!("many{i}"), &sh(script)).await }
    }))
    .await;
    let spawn_errors = spawns.iter().filter(|r| r.is_err()).count();
    let peak_rss = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let results = join_all((0..n).map(|i| {
        let c = c.clone();
        let peak = peak_rss.clone();
        async move {
            let mut out = Vec::new();
            let r = c
                .attach(&format!("many{i}"), 0, 5, |_, d| out.extend_from_slice(&d))
                .await;
            if let Ok(rss) = rss_kib(pid) {
                peak.fetch_max(rss, std::sync::atomic::Ordering::Relaxed);
            }
            matches!(r, Ok(a) if a.exit == Exit::code(0)) && out == b"line 1\nline 2\nline 3\n"
        }
    }))
    .await;
    let secs = t.elapsed().as_secs_f64();
    let bad = results.iter().filter(|ok| !**ok).count() + spawn_errors;
    let peak = peak_rss.load(std::sync::atomic::Ordering::Relaxed);
    let per_process = peak.saturating_sub(before) as f64 / n as f64;
    r.row(
        format!("{n} processes followed at once"),
        format!("{bad} errors, {secs:.1} s, {per_process:.1} KiB RSS per process"),
        "no errors",
    );
    r.set("per_process_kib", json!(per_process));
    r.set("concurrent", json!(n));
    r.set("concurrent_errors", json!(bad));
    r.set("concurrent_secs", json!(secs));
    r.bad += bad;
    Ok(())
}

/// Waits until the gauge `metric` reaches `want` (the shim has registered every stream).
async fn settle(c: &client::ShimClient, metric: &str, want: usize) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let m = c.metrics().await?;
        let v: usize = m
            .lines()
            .find(|l| l.starts_with(&format!("{metric} ")))
            .and_then(|l| l.split(' ').nth(1)?.parse().ok())
            .unwrap_or(0);
        if v >= want {
            // Let the allocations of the last streams settle before reading RSS.
            tokio::time::sleep(Duration::from_millis(200)).await;
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{metric} reached only {v} of {want}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
