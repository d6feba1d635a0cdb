//! What TLS costs: two local shims from the same binary, one serving plain HTTP and one TLS 1.3
//! (PROTOCOL.md 1.1, a pinned client), each with a second shim of its kind as a pull's
//! destination, measured alternately so machine noise hits both alike: spawn to exit of
//! `/bin/true` over a kept-alive connection, the first request on a new connection (connect,
//! handshake, `GET /v1/info`), one stream of stdout, and a pull between two shims (in
//! [`flow`]); with the shims' CPU time per spawn, per connection and per GiB moved.
//!
//! The binary must be built with TLS (`images/build-shim-binary --tls`, or `cargo build --release
//! -p stepshim --features tls`); in the default set the part is skipped for one without.

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use client::ShimClient;
use client::local::{Launch, LaunchError, LocalShim};
use protocol::{Exit, SpawnRequest};
use serde_json::{Value, json};

mod flow;

use super::Report;
use crate::args::LocalArgs;
use crate::procfs::{cpu_secs, fine_cpu_secs, own_cpu_secs};
use crate::stats::Samples;

/// The two sides' names, in the order of every `[_; 2]` here.
const SIDES: [&str; 2] = ["plain", "tls"];

/// One side: the shim measured, and a second of its kind a pull lands on.
struct Side {
    shim: LocalShim,
    dst: LocalShim,
}

impl Side {
    fn start(bin: &std::path::Path, tls: bool) -> Result<Side, LaunchError> {
        let one = || {
            Launch::new(bin)
                .tls(tls)
                .stop_with_starter()
                .env(protocol::settings::LOG, "error")
                .stderr(Stdio::null())
                .start()
        };
        Ok(Side {
            shim: one()?,
            dst: one()?,
        })
    }

    /// A client of its own, so its first request opens a new connection.
    fn fresh_client(&self) -> Result<ShimClient> {
        let token = Some(self.shim.token.clone());
        Ok(match self.shim.pin {
            Some(pin) => ShimClient::new_pinned(&self.shim.url(), token, pin)?,
            None => ShimClient::new(&self.shim.url(), token)?,
        })
    }

    /// The shim's utime + stime, in clock ticks: for costs per GiB.
    fn cpu(&self) -> Result<f64> {
        cpu_secs(self.shim.pid()).context("the shim's /proc stat")
    }

    /// The shim's time on a CPU to the nanosecond: for costs per spawn or connection.
    fn fine_cpu(&self) -> Result<f64> {
        fine_cpu_secs(self.shim.pid()).context("the shim's /proc sched")
    }
}

/// Which side goes first in iteration `i`: each in turn.
fn order(i: usize) -> [usize; 2] {
    if i.is_multiple_of(2) { [0, 1] } else { [1, 0] }
}

/// One measure on both sides: what a table row shows and the JSON keeps.
struct Pair {
    measure: String,
    sides: [Summary; 2],
}

/// One side's figure: a distribution's p50 and p90, or the median of runs and their range.
enum Summary {
    Latency(Samples),
    Runs { runs: Vec<f64>, unit: &'static str },
}

impl Summary {
    /// The figure the ratio compares: p50, or the median run.
    fn mid(&self) -> f64 {
        match self {
            Summary::Latency(s) => s.pct(50.0).as_secs_f64() * 1e6,
            Summary::Runs { runs, .. } => med(runs).0,
        }
    }

    fn text(&self) -> String {
        match self {
            Summary::Latency(s) => format!(
                "{:.0} / {:.0} µs",
                s.pct(50.0).as_secs_f64() * 1e6,
                s.pct(90.0).as_secs_f64() * 1e6
            ),
            Summary::Runs { runs, unit } => {
                let (m, lo, hi) = med(runs);
                let places = if *unit == "s" { 2 } else { 0 };
                match runs.len() {
                    1 => format!("{m:.places$} {unit}"),
                    _ => format!("{m:.places$} {unit} ({lo:.places$}–{hi:.places$})"),
                }
            }
        }
    }

    fn json(&self) -> Value {
        match self {
            Summary::Latency(s) => json!({
                "p50_us": s.pct(50.0).as_micros() as u64,
                "p90_us": s.pct(90.0).as_micros() as u64,
                "n": s.len(),
            }),
            Summary::Runs { runs, unit } => {
                let (m, lo, hi) = med(runs);
                json!({"median": m, "range": [lo, hi], "runs": runs, "unit": unit})
            }
        }
    }
}

/// The median of `v` and its range.
fn med(v: &[f64]) -> (f64, f64, f64) {
    let mut v = v.to_vec();
    super::median(&mut v)
}

/// Runs the part. `required`: `--only tls` asked for it, so a binary without TLS is an error
/// rather than a skip.
pub(super) async fn run(
    bin: &std::path::Path,
    a: &LocalArgs,
    required: bool,
    r: &mut Report,
) -> Result<()> {
    let tls = match Side::start(bin, true) {
        Ok(s) => s,
        Err(LaunchError::Exited(st)) if st.code() == Some(64) && !required => {
            eprintln!(
                "bench: tls skipped: {} refuses a TLS seed (built without TLS)",
                bin.display()
            );
            return Ok(());
        }
        Err(e) => {
            return Err(e).context(
                "starting a TLS shim (pass a binary built with TLS: images/build-shim-binary --tls)",
            );
        }
    };
    let sides = [Side::start(bin, false)?, tls];
    let load_before = loadavg();
    let mut pairs = Vec::new();
    pairs.extend(exec(&sides, a.iterations).await?);
    pairs.extend(first_request(&sides, a.iterations).await?);
    pairs.extend(flow::stream(&sides, a).await?);
    pairs.extend(flow::pull(&sides, a).await?);
    report(&pairs, [load_before, loadavg()], r);
    Ok(())
}

/// The load average of the last minute, 5 and 15, as `/proc/loadavg` says.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Spawn to exit of `/bin/true`, one `PUT ?wait=` on a kept-alive connection, and the shim's CPU
/// per spawn (its children's not included).
async fn exec(sides: &[Side; 2], n: usize) -> Result<Vec<Pair>> {
    let spec = SpawnRequest {
        path: "/bin/true".into(),
        ..Default::default()
    };
    // The connection opened (and, for TLS, its handshake made) before the clock runs.
    for s in sides {
        s.shim.client.info().await?;
    }
    let cpu0 = [sides[0].fine_cpu()?, sides[1].fine_cpu()?];
    let mut t = [Vec::with_capacity(n), Vec::with_capacity(n)];
    for i in 0..n {
        for k in order(i) {
            let c = &sides[k].shim.client;
            let id = format!("true{i}");
            let started = Instant::now();
            let (p, _) = c.spawn_wait(&id, &spec, 10).await?;
            t[k].push(started.elapsed());
            if p.exit != Some(Exit::code(0)) {
                bail!("{} spawn {id} ended {:?}", SIDES[k], p.exit);
            }
            c.delete(&id, false).await?;
        }
    }
    let cpu = |k: usize| -> Result<Vec<f64>> {
        Ok(vec![
            (sides[k].fine_cpu()? - cpu0[k]) / n.max(1) as f64 * 1e6,
        ])
    };
    let [plain, tls] = t.map(|v| Summary::Latency(Samples::new(v)));
    Ok(vec![
        Pair {
            measure: format!(
                "spawn to exit of /bin/true, kept-alive connection (p50 / p90 of {n})"
            ),
            sides: [plain, tls],
        },
        Pair {
            measure: "shim CPU per spawn and delete (its time on a CPU, /proc sched)".into(),
            sides: [cpu_runs(cpu(0)?, "µs"), cpu_runs(cpu(1)?, "µs")],
        },
    ])
}

fn cpu_runs(runs: Vec<f64>, unit: &'static str) -> Summary {
    Summary::Runs { runs, unit }
}

/// The first request of a new client: TCP connect, for TLS the handshake, `GET /v1/info`; the
/// client's setup (its TLS configuration) is made before the clock runs. With the shim's and the
/// client's CPU per connection.
async fn first_request(sides: &[Side; 2], n: usize) -> Result<Vec<Pair>> {
    let cpu0 = [sides[0].fine_cpu()?, sides[1].fine_cpu()?];
    let mut own = [0.0f64; 2];
    let mut t = [Vec::with_capacity(n), Vec::with_capacity(n)];
    for i in 0..n {
        for k in order(i) {
            let c = sides[k].fresh_client()?;
            let (started, own0) = (Instant::now(), own_cpu_secs(false));
            c.info().await?;
            t[k].push(started.elapsed());
            own[k] += own_cpu_secs(false) - own0;
            drop(c);
        }
    }
    // Let the shims see the last connections close before their CPU is read.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let per = |secs: f64| secs / n.max(1) as f64 * 1e6;
    let shim = |k: usize| -> Result<Summary> {
        Ok(cpu_runs(vec![per(sides[k].fine_cpu()? - cpu0[k])], "µs"))
    };
    let [plain, tls] = t.map(|v| Summary::Latency(Samples::new(v)));
    Ok(vec![
        Pair {
            measure: format!(
                "first request on a new connection: connect, handshake, GET /v1/info (p50 / p90 of {n})"
            ),
            sides: [plain, tls],
        },
        Pair {
            measure: "shim CPU per new connection and its request".into(),
            sides: [shim(0)?, shim(1)?],
        },
        Pair {
            measure: "client CPU per new connection and its request".into(),
            sides: [
                cpu_runs(vec![per(own[0])], "µs"),
                cpu_runs(vec![per(own[1])], "µs"),
            ],
        },
    ])
}

/// The rows in the main table, the JSON under `tls`, and a table of its own (printed and kept
/// for local.md).
fn report(pairs: &[Pair], load: [String; 2], r: &mut Report) {
    let mut md = String::from("\n| TLS: measure | plain | tls | tls/plain |\n|---|---|---|---|\n");
    let mut rows = serde_json::Map::new();
    for p in pairs {
        let [plain, tls] = &p.sides;
        let ratio = (plain.mid() > 0.0).then(|| tls.mid() / plain.mid());
        let shown = ratio.map_or("–".to_owned(), |x| format!("{x:.2}"));
        md.push_str(&format!(
            "| {} | {} | {} | {shown} |\n",
            p.measure,
            plain.text(),
            tls.text()
        ));
        r.row(
            format!("TLS: {}", p.measure),
            format!(
                "plain {} · tls {} · tls/plain {shown}",
                plain.text(),
                tls.text()
            ),
            "",
        );
        rows.insert(
            p.measure.clone(),
            json!({"plain": plain.json(), "tls": tls.json(), "ratio": ratio}),
        );
    }
    md.push_str(&format!(
        "\nload average (1, 5, 15 min): {} before, {} after\n",
        load[0], load[1]
    ));
    eprintln!("bench: tls part done, load {} → {}", load[0], load[1]);
    r.set(
        "tls",
        json!({"measures": rows, "load_before": load[0], "load_after": load[1]}),
    );
    r.extra.push_str(&md);
}
