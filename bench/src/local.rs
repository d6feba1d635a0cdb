//! The local footprint benchmark of the shim: binary size, start to ready, idle RSS, memory per open
//! output stream and per followed process, spawn latency against a raw fork/exec of the same binary
//! (alternating, so machine noise hits both alike), one-stream throughput, and many processes
//! followed at once with every byte checked.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures_util::future::join_all;
use protocol::{Exit, FrameType, SpawnRequest};
use serde_json::json;

use client::local::{Launch, find_binary};

use crate::args::LocalArgs;
use crate::stats::{Samples, ms, us};

fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmRSS")
}

/// CPU seconds (user + system) a process has used, from `/proc/PID/stat` (clock ticks of 10 ms).
fn cpu_secs(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name, which may hold spaces but ends with the last ')'.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("odd /proc stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> Result<f64> {
        Ok(fields.get(i).context("short /proc stat")?.parse::<f64>()?)
    };
    // utime and stime are fields 14 and 15 of stat; `rest` starts at field 3.
    Ok((ticks(11)? + ticks(12)?) / 100.0)
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

/// Runs the local benchmark and prints the table.
pub async fn run(args: &LocalArgs) -> Result<i32> {
    let (_, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)?;
    nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard)?;
    let bin = find_binary(args.shim_bin.clone())
        .context("no stepshim binary: pass --shim-bin or STEPSHIM_BIN")?;
    let size = std::fs::metadata(&bin)?.len();
    let file = Command::new("file")
        .arg("-b")
        .arg(&bin)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    let is_static = file
        .as_deref()
        .is_ok_and(|f| f.contains("statically linked"));
    eprintln!("bench: shim {} ({size} bytes)", bin.display());

    let (ready, idle_rss) = start_to_ready(&bin, 30)?;
    eprintln!("bench: start to ready p50 {}", ms(ready.pct(50.0)));

    // Thousands of followers: lift the connection cap above them (the shim raises its own open-file
    // limit to the hard one; the cap may be at most half of it).
    let shim = Launch::new(&bin)
        .env(protocol::settings::LOG, "error")
        .env(
            protocol::settings::MAX_CONNECTIONS,
            (args.idle_streams.max(args.concurrent) + 1000).to_string(),
        )
        .stderr(Stdio::null())
        .start()?;
    let pid = shim.pid();
    let c = shim.client.clone();

    // Spawn latency: through the shim (one request: PUT ?wait=) vs a raw fork/exec/wait, alternating.
    let (mut raw, mut via) = (Vec::new(), Vec::new());
    for i in 0..args.iterations {
        let t = Instant::now();
        Command::new("/bin/true").status()?;
        raw.push(t.elapsed());
        let id = format!("lat{i}");
        let t = Instant::now();
        let (p, _) = c
            .spawn_wait(
                &id,
                &SpawnRequest {
                    path: "/bin/true".into(),
                    ..Default::default()
                },
                10,
            )
            .await?;
        via.push(t.elapsed());
        if p.exit != Some(Exit::code(0)) {
            bail!("latency run {id} ended {:?}", p.exit);
        }
        c.delete(&id, false).await?;
    }
    let (raw, via) = (Samples::new(raw), Samples::new(via));
    let added = via.pct(50.0).saturating_sub(raw.pct(50.0));
    eprintln!(
        "bench: spawn-to-exit p50 raw {} shim {}",
        us(raw.pct(50.0)),
        us(via.pct(50.0))
    );

    // Memory per open output stream: idle follows of one quiet process.
    c.spawn("quiet", &sh("echo hi; exec sleep 600")).await?;
    let streams = args.idle_streams;
    let before = rss_kib(pid)?;
    let mut open = Vec::new();
    for _ in 0..streams {
        open.push(c.output("quiet", 0, true).await?);
    }
    settle(&c, "stepshim_output_streams", streams).await?;
    let per_stream = (rss_kib(pid)?.saturating_sub(before)) as f64 / streams as f64;
    drop(open);
    c.delete("quiet", true).await?;

    // Throughput of one stream, client parsing included, and the shim's CPU time for it.
    let bytes = args.stream_mib << 20;
    c.spawn("stream", &sh(&format!("head -c {bytes} /dev/zero")))
        .await?;
    let cpu_before = cpu_secs(pid)?;
    let t = Instant::now();
    let mut got = 0u64;
    let end = c
        .attach("stream", 0, 3, |k, d| {
            if k == FrameType::Stdout {
                got += d.len() as u64
            }
        })
        .await?;
    let secs = t.elapsed().as_secs_f64();
    let cpu_per_gib = (cpu_secs(pid)? - cpu_before) / (bytes as f64 / f64::from(1u32 << 30));
    if got != bytes || end.exit != Exit::code(0) {
        bail!(
            "throughput run got {got} of {bytes} bytes, exit {:?}",
            end.exit
        );
    }
    let mbps = bytes as f64 / secs / 1e6;
    c.delete("stream", false).await?;
    eprintln!("bench: one stream {mbps:.0} MB/s");

    // Many processes followed at once, every byte checked.
    let n = args.concurrent;
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
    let many_secs = t.elapsed().as_secs_f64();
    let bad = results.iter().filter(|ok| !**ok).count() + spawn_errors;
    let per_process = (peak_rss
        .load(std::sync::atomic::Ordering::Relaxed)
        .saturating_sub(before)) as f64
        / n as f64;

    let rows = vec![
        (
            "binary size (stripped, static)",
            format!(
                "{} KiB{}",
                size / 1024,
                if is_static { "" } else { " (NOT static)" }
            ),
            "< 900 KiB",
        ),
        ("start to ready (p50 of 30)", ms(ready.pct(50.0)), "< 2 ms"),
        ("idle RSS", format!("{idle_rss} KiB"), "< 1 MiB"),
        (
            &*Box::leak(
                format!("memory per open output stream ({streams} idle follows)").into_boxed_str(),
            ),
            format!("{per_stream:.1} KiB"),
            "< 32 KiB",
        ),
        (
            "spawn to exit, raw fork/exec of /bin/true (p50 / p99)",
            format!("{} / {}", us(raw.pct(50.0)), us(raw.pct(99.0))),
            "",
        ),
        (
            "spawn to exit through the shim, one request (p50 / p99)",
            format!("{} / {}", us(via.pct(50.0)), us(via.pct(99.0))),
            "",
        ),
        (
            "added latency over raw fork/exec (p50)",
            us(added),
            "< 100 µs",
        ),
        (
            &*Box::leak(format!("one stream of stdout ({} MiB)", args.stream_mib).into_boxed_str()),
            format!("{mbps:.0} MB/s"),
            ">= 1000 MB/s",
        ),
        (
            "shim CPU per GiB of that stream (utime + stime)",
            format!("{cpu_per_gib:.2} s"),
            "",
        ),
        (
            &*Box::leak(format!("{n} processes followed at once").into_boxed_str()),
            format!("{bad} errors, {many_secs:.1} s, {per_process:.1} KiB RSS per process"),
            "no errors",
        ),
    ];
    println!("| measure | result | target |\n|---|---|---|");
    for (m, r, t) in &rows {
        println!("| {m} | {r} | {t} |");
    }
    if let Some(dir) = &args.results {
        std::fs::create_dir_all(dir)?;
        let raw_json = json!({
            "binary_bytes": size, "static": is_static,
            "start_to_ready_us": {"p50": ready.pct(50.0).as_micros() as u64, "p90": ready.pct(90.0).as_micros() as u64, "max": ready.max().as_micros() as u64},
            "idle_rss_kib": idle_rss, "per_stream_kib": per_stream, "per_process_kib": per_process,
            "spawn_raw_us": {"p50": raw.pct(50.0).as_micros() as u64, "p99": raw.pct(99.0).as_micros() as u64, "n": raw.len()},
            "spawn_shim_us": {"p50": via.pct(50.0).as_micros() as u64, "p99": via.pct(99.0).as_micros() as u64, "n": via.len()},
            "stream_mb_per_s": mbps, "shim_cpu_s_per_gib": cpu_per_gib, "idle_streams": streams, "concurrent": n, "concurrent_errors": bad, "concurrent_secs": many_secs,
        });
        std::fs::write(
            dir.join("local.json"),
            serde_json::to_string_pretty(&raw_json)?,
        )?;
    }
    Ok(if bad == 0 { 0 } else { 1 })
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
