//! The cluster benchmark's results: a markdown table, the raw numbers as JSON, and an SVG chart of
//! the latency distributions and the apiserver CPU per path (direct shim, shim through the
//! apiserver's proxy, exec), written to a results directory.

use std::fmt::Write as _;
use std::path::Path as FsPath;

use anyhow::Result;

use super::paths::Path;
use super::podspawn::PodSpawn;
pub use super::results::Results;

fn ms(us: u64) -> String {
    format!("{:.2} ms", us as f64 / 1000.0)
}

/// The markdown report.
pub fn markdown(r: &Results) -> String {
    let mut s = String::new();
    header(r, &mut s);
    latency(r, &mut s);
    if let Some(p) = &r.pod_spawn {
        s.push_str(&pod_spawn_split(r, p));
    }
    concurrency(r, &mut s);
    throughput(r, &mut s);
    if let Some(f) = &r.faults {
        let _ = writeln!(s, "\n{}", f.markdown());
    }
    s
}

/// The pods' CPU request and the apiserver at idle.
fn header(r: &Results, s: &mut String) {
    if let Some(c) = r.context.get("cpu_request").and_then(|c| c.as_str()) {
        let _ = writeln!(s, "Step pods request {c} CPU each (Burstable, no limit).\n");
    } else {
        let _ = writeln!(s, "Step pods request no CPU (BestEffort).\n");
    }
    if r.idle_secs > 0.0 {
        let _ = writeln!(
            s,
            "Apiserver while idle for {:.0} s: {:.2} CPU s, {} MiB RSS, {:.0} goroutines.\n",
            r.idle_secs,
            r.idle.cpu_secs,
            r.idle.peak_rss_kib / 1024,
            r.idle.peak_goroutines
        );
    }
}

/// The latency table, each shim path's p50 against exec's, and the `/healthz` round trips.
fn latency(r: &Results, s: &mut String) {
    let _ = writeln!(
        s,
        "| latency | path | n | exit p50 | p90 | p99 | max | first byte p50 | errors | apiserver CPU s |\n|---|---|---|---|---|---|---|---|---|---|"
    );
    for l in &r.latency {
        let fb = l.first_byte.as_ref().map_or("-".into(), |d| ms(d.p50));
        let _ = writeln!(
            s,
            "| {} | {:?} | {} | {} | {} | {} | {} | {} | {} | {:.2} |",
            l.command,
            l.path,
            l.exit.n,
            ms(l.exit.p50),
            ms(l.exit.p90),
            ms(l.exit.p99),
            ms(l.exit.max),
            fb,
            l.errors,
            l.apiserver.cpu_secs
        );
    }
    for cmd in r
        .latency
        .iter()
        .map(|l| l.command.clone())
        .collect::<std::collections::BTreeSet<_>>()
    {
        let p50 = |p: Path| {
            r.latency
                .iter()
                .find(|l| l.command == cmd && l.path == p)
                .map(|l| l.exit.p50 as f64)
        };
        for (p, name) in [(Path::Shim, "shim"), (Path::Proxy, "proxy")] {
            if let (Some(a), Some(b)) = (p50(Path::Exec), p50(p)) {
                let _ = writeln!(
                    s,
                    "\n{cmd}: {name} p50 is **{:.1}x** lower than exec p50.",
                    a / b.max(1.0)
                );
            }
        }
    }
    for (p, d) in &r.round_trips {
        let _ = writeln!(
            s,
            "\nGET /healthz round trip on {p:?} (no process), {} runs: p50 {}, p90 {}.",
            d.n,
            ms(d.p50),
            ms(d.p90)
        );
    }
}

/// The concurrency table, with the apiserver's CPU per second against idle.
fn concurrency(r: &Results, s: &mut String) {
    let _ = writeln!(
        s,
        "\n| concurrency | path | errors | completion p50 | p99 | wall s | apiserver CPU s | CPU s per s (idle {:.3}) | peak goroutines | peak long-running |\n|---|---|---|---|---|---|---|---|---|---|",
        r.idle.cpu_secs / r.idle_secs.max(1.0)
    );
    for c in &r.concurrency {
        let _ = writeln!(
            s,
            "| {} | {:?} | {} | {} | {} | {:.1} | {:.2} | {:.3} | {:.0} | {:.0} |",
            c.processes,
            c.path,
            c.errors,
            ms(c.completion.p50),
            ms(c.completion.p99),
            c.wall_secs,
            c.apiserver.cpu_secs,
            c.apiserver.cpu_secs / c.wall_secs.max(0.001),
            c.apiserver.peak_goroutines,
            c.apiserver.peak_longrunning
        );
    }
}

/// The throughput table, then each writer's shim paths against exec.
fn throughput(r: &Results, s: &mut String) {
    let _ = writeln!(
        s,
        "\n| throughput | path | received | ok | MB/s | client CPU s/GiB | shim CPU s/GiB | apiserver CPU s |\n|---|---|---|---|---|---|---|---|"
    );
    for t in &r.throughput {
        let shim = t.shim_cpu_per_gib.map_or("-".into(), |c| format!("{c:.2}"));
        let _ = writeln!(
            s,
            "| {} MiB by {} | {:?} | {} | {} | {:.0} | {:.2} | {shim} | {:.2} |",
            t.bytes >> 20,
            t.writer,
            t.path,
            t.received,
            t.ok,
            t.mb_per_s,
            t.client_cpu_per_gib,
            t.apiserver.cpu_secs
        );
    }
    let writers: Vec<&str> = r.throughput.iter().map(|t| t.writer.as_str()).collect();
    for (i, w) in writers.iter().enumerate() {
        if writers[..i].contains(w) {
            continue;
        }
        let rate = |p: Path| {
            r.throughput
                .iter()
                .find(|t| t.path == p && t.writer == *w)
                .map(|t| t.mb_per_s)
        };
        let Some(exec) = rate(Path::Exec) else {
            continue;
        };
        for (p, name) in [(Path::Shim, "shim"), (Path::Proxy, "proxy")] {
            if let Some(v) = rate(p) {
                let _ = writeln!(
                    s,
                    "\nOne stream by {w}: {name} **{:.1}x** exec's throughput.",
                    v / exec.max(0.001)
                );
            }
        }
    }
}

/// The in-pod spawn loop, and the direct path's no-op exit p50 split into the `/healthz` round
/// trip, the pod's own spawn, and the rest (the shim).
fn pod_spawn_split(r: &Results, p: &PodSpawn) -> String {
    let spawn = p.spawn_p50_us();
    let mut s = format!(
        "\nIn the pod, busybox `sh` runs `/bin/true` {} times a run, timed by the pod ({} runs): \
         p50 {:.0} us per spawn (runs {:.0}-{:.0}), of which fork, exit and wait without the exec \
         (a subshell) {:.0} us; the loop alone {:.1} us.\n",
        p.spawns,
        p.us_per_spawn.len(),
        spawn,
        p.us_per_spawn.iter().copied().fold(f64::INFINITY, f64::min),
        p.us_per_spawn.iter().copied().fold(0.0, f64::max),
        super::podspawn::median(&p.us_per_fork) - super::podspawn::median(&p.us_per_loop),
        super::podspawn::median(&p.us_per_loop)
    );
    let exit = r
        .latency
        .iter()
        .find(|l| l.path == Path::Shim && l.command.starts_with("/bin/true"))
        .map(|l| l.exit.p50 as f64);
    let rt = r
        .round_trips
        .iter()
        .find(|(path, _)| *path == Path::Shim)
        .map(|(_, d)| d.p50 as f64);
    if let (Some(exit), Some(rt)) = (exit, rt) {
        let _ = writeln!(
            s,
            "\nShim no-op exit p50 {:.0} us = round trip {rt:.0} us + spawn in the pod {spawn:.0} us \
             + the shim's own {:.0} us.",
            exit,
            exit - rt - spawn
        );
    }
    s
}

/// Writes `results.json`, `results.md` and `chart.svg` into `dir`.
pub fn write(dir: &FsPath, r: &Results) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("results.json"), serde_json::to_string_pretty(r)?)?;
    std::fs::write(dir.join("results.md"), markdown(r))?;
    std::fs::write(dir.join("chart.svg"), super::chart::svg(r))?;
    Ok(())
}
