//! The cluster benchmark's results: a markdown table, the raw numbers as JSON, and an SVG chart of
//! the latency distributions and the apiserver CPU per path (direct shim, shim through the
//! apiserver's proxy, exec), written to a results directory.

use std::fmt::Write as _;
use std::path::Path as FsPath;

use anyhow::Result;
use serde::Serialize;

use super::apiserver::Cost;
use super::faults::Faults;
use super::paths::Path;
use super::podspawn::PodSpawn;
use super::scenarios::{Concurrency, Dist, Latency};

/// Everything one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Results {
    /// When, what machine, which Kubernetes, which command.
    pub context: serde_json::Value,
    /// The apiserver over an idle interval as long as a typical scenario, for comparison.
    pub idle: Cost,
    /// Idle interval length, seconds.
    pub idle_secs: f64,
    /// Sequential latency.
    pub latency: Vec<Latency>,
    /// `GET /healthz` round trips per shim path: the floor under its latency.
    pub round_trips: Vec<(Path, Dist)>,
    /// A spawn timed inside the pod (`--only podspawn`).
    pub pod_spawn: Option<PodSpawn>,
    /// Concurrency levels.
    pub concurrency: Vec<Concurrency>,
    /// One big stream per path.
    pub throughput: Vec<Throughput>,
    /// Fault scenarios.
    pub faults: Option<Faults>,
}

/// One big stream.
#[derive(Debug, Clone, Serialize)]
pub struct Throughput {
    /// Path.
    pub path: Path,
    /// What wrote the stream in the pod.
    pub writer: String,
    /// Bytes expected.
    pub bytes: u64,
    /// Bytes that arrived.
    pub received: u64,
    /// Whether the content and exit status were right.
    pub ok: bool,
    /// MB/s (10^6 bytes per second).
    pub mb_per_s: f64,
    /// Client CPU seconds per GiB.
    pub client_cpu_per_gib: f64,
    /// The shim's CPU seconds per GiB in the pod (shim paths, when it runs on this host).
    pub shim_cpu_per_gib: Option<f64>,
    /// Apiserver cost.
    pub apiserver: Cost,
}

fn ms(us: u64) -> String {
    format!("{:.2} ms", us as f64 / 1000.0)
}

/// The markdown report.
pub fn markdown(r: &Results) -> String {
    let mut s = String::new();
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
    if let Some(p) = &r.pod_spawn {
        s.push_str(&pod_spawn_split(r, p));
    }
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
    if let Some(f) = &r.faults {
        let _ = writeln!(s, "\n{}", f.markdown());
    }
    s
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

/// An SVG with two panels: exit-latency distributions (CDF, log time axis) per path and command,
/// and apiserver CPU seconds per scenario and path.
pub fn svg(r: &Results) -> String {
    let (w, h) = (900.0, 420.0);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    // Panel 1: CDFs on a log axis from 0.1 ms to 10 s.
    let (x0, y0, pw, ph) = (50.0, 40.0, 380.0, 320.0);
    let _ = writeln!(
        s,
        "<text x=\"{x0}\" y=\"25\" font-weight=\"bold\">Request to exit status (CDF)</text>"
    );
    let _ = writeln!(
        s,
        "<rect x=\"{x0}\" y=\"{y0}\" width=\"{pw}\" height=\"{ph}\" fill=\"none\" stroke=\"#999\"/>"
    );
    let lx = |us: f64| x0 + pw * ((us.max(100.0).log10() - 2.0) / 5.0).clamp(0.0, 1.0);
    for (i, label) in ["0.1 ms", "1 ms", "10 ms", "100 ms", "1 s", "10 s"]
        .iter()
        .enumerate()
    {
        let x = x0 + pw * i as f64 / 5.0;
        let _ = writeln!(
            s,
            "<line x1=\"{x}\" y1=\"{y0}\" x2=\"{x}\" y2=\"{}\" stroke=\"#eee\"/><text x=\"{x}\" y=\"{}\" text-anchor=\"middle\">{label}</text>",
            y0 + ph,
            y0 + ph + 15.0
        );
    }
    // Two shades per path (one per command), indexed by the path's discriminant.
    let colors = [
        "#1b7837", "#5aae61", "#c51b7d", "#e9a3c9", "#2166ac", "#92c5de",
    ];
    for (i, l) in r.latency.iter().enumerate() {
        let n = l.exit.samples.len().max(1) as f64;
        let pts: Vec<String> = l
            .exit
            .samples
            .iter()
            .enumerate()
            .map(|(k, us)| {
                format!(
                    "{:.1},{:.1}",
                    lx(*us as f64),
                    y0 + ph - ph * (k as f64 + 1.0) / n
                )
            })
            .collect();
        let color = colors[(l.path as usize) * 2 + (i / Path::ALL.len()) % 2];
        let _ = writeln!(
            s,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"/>",
            pts.join(" ")
        );
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{}\" fill=\"{color}\">{:?}: {}</text>",
            x0 + 5.0,
            y0 + 15.0 + 15.0 * i as f64,
            l.path,
            xml(&l.command)
        );
    }
    // Panel 2: apiserver CPU per scenario and path.
    let (bx, by, bw, bh) = (500.0, 40.0, 370.0, 320.0);
    let _ = writeln!(
        s,
        "<text x=\"{bx}\" y=\"25\" font-weight=\"bold\">kube-apiserver CPU seconds during each scenario</text>"
    );
    let mut bars: Vec<(String, Path, f64)> = Vec::new();
    bars.push(("idle".into(), Path::Shim, r.idle.cpu_secs));
    for c in &r.concurrency {
        bars.push((
            format!("{} procs", c.processes),
            c.path,
            c.apiserver.cpu_secs,
        ));
    }
    for t in &r.throughput {
        bars.push((
            format!(
                "{} MiB {}",
                t.bytes >> 20,
                if t.writer.contains("head") {
                    "head"
                } else {
                    "dd"
                }
            ),
            t.path,
            t.apiserver.cpu_secs,
        ));
    }
    let max = bars.iter().map(|b| b.2).fold(0.1, f64::max);
    let slot = bh / bars.len().max(1) as f64;
    for (i, (label, path, v)) in bars.iter().enumerate() {
        let y = by + slot * i as f64;
        let len = (bw - 120.0) * v / max;
        let color = if label == "idle" {
            "#999"
        } else {
            colors[(*path as usize) * 2]
        };
        let tag = if label == "idle" {
            String::new()
        } else {
            format!(" {path:?}")
        };
        let _ = writeln!(
            s,
            "<text x=\"{bx}\" y=\"{:.1}\">{label}{tag}</text><rect x=\"{}\" y=\"{:.1}\" width=\"{len:.1}\" height=\"{:.1}\" fill=\"{color}\"/><text x=\"{:.1}\" y=\"{:.1}\">{v:.2}</text>",
            y + slot * 0.6,
            bx + 110.0,
            y + slot * 0.15,
            slot * 0.7,
            bx + 114.0 + len,
            y + slot * 0.6
        );
    }
    s.push_str("</svg>\n");
    s
}

fn xml(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('\'', "&apos;")
}

/// Writes `results.json`, `results.md` and `chart.svg` into `dir`.
pub fn write(dir: &FsPath, r: &Results) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("results.json"), serde_json::to_string_pretty(r)?)?;
    std::fs::write(dir.join("results.md"), markdown(r))?;
    std::fs::write(dir.join("chart.svg"), svg(r))?;
    Ok(())
}
