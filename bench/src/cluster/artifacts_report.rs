//! The artifact scenario's results (`artifacts.rs`): a markdown table with the artifact targets
//! judged, and the raw numbers as JSON, written as `artifacts.md` and `artifacts.json` beside (never
//! into) the other cluster results.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;
use serde::Serialize;

use super::apiserver::Cost;

/// How an artifact moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// A grant on the source, a pull by the destination's shim.
    Direct,
    /// Streamed through the controller (`controller::transfer`).
    Controller,
    /// `kubectl exec tar c | kubectl exec -i tar x`.
    Exec,
    /// Nothing moving, as long as the direct pull: the noise floor.
    Idle,
}

impl Method {
    /// The destination directory's name.
    pub fn dir(self) -> &'static str {
        match self {
            Method::Direct => "direct",
            Method::Controller => "controller",
            Method::Exec => "exec",
            Method::Idle => "idle",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Method::Direct => "direct pull (pod to pod)",
            Method::Controller => "through the controller",
            Method::Exec => "`kubectl exec tar c \\| kubectl exec -i tar x`",
            Method::Idle => "idle, as long as the direct pull",
        }
    }
}

/// One copy of the artifact.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// How.
    pub method: Method,
    /// Bytes of the tar stream.
    pub bytes: u64,
    /// Wall time, seconds.
    pub secs: f64,
    /// MB/s (10^6 bytes per second).
    pub mb_per_s: f64,
    /// CPU seconds of the controller (this process; the kubectl children for `exec`).
    pub controller_cpu_secs: f64,
    /// CPU seconds of the source's and the destination's shim (their PID 1; for `exec`, the
    /// shims only idle: the tar processes run beside them).
    pub shims_cpu_secs: [f64; 2],
    /// Bytes the host received and sent on the pod bridge meanwhile.
    pub bridge_bytes: Option<u64>,
    /// kube-apiserver's cost.
    pub apiserver: Cost,
    /// Whether the copy's files equal the source's.
    pub ok: bool,
}

/// Four inputs pulled into one pod at once.
#[derive(Debug, Clone, Serialize)]
pub struct Parallel {
    /// Sizes of the inputs, MiB.
    pub inputs_mib: Vec<u64>,
    /// Stream bytes of all four.
    pub bytes: u64,
    /// Until the last one ended, seconds.
    pub secs: f64,
    /// When each ended, seconds from the start.
    pub each_secs: Vec<f64>,
    /// The largest input pulled alone (the direct row), seconds.
    pub largest_alone_secs: f64,
    /// The four pulled one after another, seconds.
    pub sequential_secs: f64,
    /// The destination shim's CPU seconds: one after another, at once.
    pub dst_cpu_secs: [f64; 2],
    /// Whether all four went directly and equal their sources.
    pub ok: bool,
}

/// Everything the scenario measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// When, where, which command.
    pub context: serde_json::Value,
    /// Size of the artifact, MiB.
    pub mib: u64,
    /// Direct, controller, exec, idle.
    pub rows: Vec<Row>,
    /// Four inputs at once.
    pub parallel: Parallel,
}

fn row(r: &Report, m: Method) -> Option<&Row> {
    r.rows.iter().find(|x| x.method == m)
}

fn mib(b: Option<u64>) -> String {
    b.map_or("-".into(), |b| {
        format!("{:.1} MiB", b as f64 / f64::from(1u32 << 20))
    })
}

/// The markdown report.
pub fn markdown(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Artifact of {} MiB (one large file, {} small files of {} bytes), pod to pod:\n",
        r.mib, r.context["small_files"], r.context["small_file_bytes"]
    );
    let _ = writeln!(
        s,
        "| path | MB/s | seconds | controller CPU s | source / destination shim CPU s | host bytes on the pod bridge | apiserver CPU s | content |\n|---|---|---|---|---|---|---|---|"
    );
    for x in &r.rows {
        let _ = writeln!(
            s,
            "| {} | {} | {:.1} | {:.2} | {:.2} / {:.2} | {} | {:.2} | {} |",
            x.method.label(),
            if x.method == Method::Idle {
                "-".into()
            } else {
                format!("{:.0}", x.mb_per_s)
            },
            x.secs,
            x.controller_cpu_secs,
            x.shims_cpu_secs[0],
            x.shims_cpu_secs[1],
            mib(x.bridge_bytes),
            x.apiserver.cpu_secs,
            if x.method == Method::Idle {
                "-"
            } else if x.ok {
                "equal"
            } else {
                "DIFFERS"
            }
        );
    }
    let p = &r.parallel;
    let ends: Vec<String> = p.each_secs.iter().map(|e| format!("{e:.1}")).collect();
    let _ = writeln!(
        s,
        "\nFour inputs of {:?} MiB pulled into one pod at once: {:.1} s (each ended at {} s; the \
         destination shim {:.2} CPU s), one after another {:.1} s ({:.2} CPU s), the largest alone \
         {:.1} s: at once {:.2}x the largest alone{}.",
        p.inputs_mib,
        p.secs,
        ends.join(", "),
        p.dst_cpu_secs[1],
        p.sequential_secs,
        p.dst_cpu_secs[0],
        p.largest_alone_secs,
        p.secs / p.largest_alone_secs,
        if p.ok { "" } else { " (CONTENT DIFFERS)" }
    );
    if let (Some(d), Some(e), Some(c), Some(i)) = (
        row(r, Method::Direct),
        row(r, Method::Exec),
        row(r, Method::Controller),
        row(r, Method::Idle),
    ) {
        let judge = |ok: bool| if ok { "met" } else { "MISSED" };
        let ratio = d.mb_per_s / e.mb_per_s;
        let par = p.secs / p.largest_alone_secs;
        let _ = writeln!(
            s,
            "\nTargets: direct >= 3x the exec pipeline: {ratio:.1}x, {}; direct vs through the \
             controller: {:.1}x; the controller on the direct path: {:.2} CPU s and {} on the \
             bridge, idle {:.2} CPU s and {}; four at once <= 1.5x the largest alone: {par:.2}x, {}.",
            judge(ratio >= 3.0),
            d.mb_per_s / c.mb_per_s,
            d.controller_cpu_secs,
            mib(d.bridge_bytes),
            i.controller_cpu_secs,
            mib(i.bridge_bytes),
            judge(par <= 1.5),
        );
    }
    s
}

/// Writes `artifacts.md` and `artifacts.json` into `dir`.
pub fn write(dir: &Path, r: &Report) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("artifacts.md"), markdown(r))?;
    std::fs::write(dir.join("artifacts.json"), serde_json::to_string_pretty(r)?)?;
    Ok(())
}
