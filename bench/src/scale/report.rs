//! The scale benchmark's results: a markdown table per phase (start and ticks, after the restart),
//! the raw numbers as JSON, written to a results directory; and the verdict (a LIST per tick after
//! start, or a deletion never noticed, fails the run; numbers themselves never do).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;
use serde::Serialize;

use super::child::Kind;
use super::measure::{DriverResult, Notices};
use super::proxy::Seen;

/// Everything one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Results {
    /// When, what machine, which Kubernetes, which command, how many pods.
    pub context: serde_json::Value,
    /// Seconds to create the pods.
    pub create_secs: f64,
    /// One entry per driver, in the order run.
    pub drivers: Vec<DriverResult>,
}

fn pct(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

fn notice(n: &Notices) -> String {
    format!(
        "{:.1} / {:.1} / {:.1} ms",
        pct(&n.ms, 50.0),
        pct(&n.ms, 90.0),
        n.ms.last().copied().unwrap_or(0.0)
    )
}

fn n(s: &Seen, class: &str) -> u64 {
    s.get(class).map_or(0, |c| c.requests)
}

/// `LIST / WATCH / WATCH-list (MiB received by all three)`, as the driver sent them.
fn sent(s: &Seen) -> String {
    let bytes: u64 = ["list", "watch", "watch-list"]
        .iter()
        .filter_map(|c| s.get(*c))
        .map(|c| c.bytes)
        .sum();
    format!(
        "{} / {} / {} ({:.1} MiB)",
        n(s, "list"),
        n(s, "watch"),
        n(s, "watch-list"),
        bytes as f64 / 1048576.0
    )
}

/// The highest of the readings: Linux updates a process's RSS counters lazily, so a `VmHWM` read
/// later can be a little below a `VmRSS` read earlier.
fn peak(d: &DriverResult) -> u64 {
    d.memory_end
        .peak_kib
        .max(d.memory_ready.rss_kib)
        .max(d.memory_ready.peak_kib)
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// The markdown report.
pub fn markdown(r: &Results) -> String {
    let mut s = String::new();
    intro(r, &mut s);
    drivers(r, &mut s);
    stripped(r, &mut s);
    if r.drivers.iter().any(|d| d.restart.is_some()) {
        restarts(r, &mut s);
    }
    s
}

/// The run in one line: pods, Kubernetes, CPUs, the command.
fn intro(r: &Results, s: &mut String) {
    let c = &r.context;
    let _ = writeln!(
        s,
        "{} pending step pods of one worker, created in {:.0} s; Kubernetes {}, {} CPUs; `{}`.\n",
        c["pods"],
        r.create_secs,
        c["kubernetes"].as_str().unwrap_or("?"),
        c["cpus"],
        c["command"].as_str().unwrap_or("")
    );
}

/// The drivers' table (the memory variant apart) and what its columns count.
fn drivers(r: &Results, s: &mut String) {
    let _ = writeln!(
        s,
        "| driver | pods cached | first sync | start: LIST / WATCH / WATCH-list sent | ticks | per tick: LIST + WATCH-list sent | WATCH sent | other sent in all ticks | LIST, WATCH counted by the apiserver | tick p50 | RSS ready | RSS peak | deletion to notice p50 / p90 / max | missed |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for d in r.drivers.iter().filter(|d| d.driver != Kind::RustStripped) {
        let t = &d.ticks;
        let per = |x: f64| x / t.done.max(1) as f64;
        let mut ms = t.ms.clone();
        ms.sort_unstable();
        let _ = writeln!(
            s,
            "| {:?} | {} | {} ms | {} | {} | {:.2} | {:.2} | {} | {}, {} | {} ms | {} | {} | {} | {} |",
            d.driver,
            d.pods_at_start,
            d.sync_ms,
            sent(&d.start_seen),
            t.done,
            per((n(&t.seen, "list") + n(&t.seen, "watch-list")) as f64),
            per(n(&t.seen, "watch") as f64),
            n(&t.seen, "other"),
            t.requests.list,
            t.requests.watch,
            ms.get(ms.len() / 2).copied().unwrap_or(0),
            mib(d.memory_ready.rss_kib),
            mib(peak(d)),
            notice(&d.notices),
            d.notices.missed
        );
    }
    let _ = writeln!(
        s,
        "\nSent: as the driver sent them through the counting proxy; WATCH-list is a WATCH with `sendInitialEvents=true`, a relist by another verb. Counted: the apiserver's own `/metrics`, through FlowSchemas matching only the worker's service account. The first tick of each driver collected its orphans ({}); \"other\" is those DELETEs. Pod LISTs by every tenant of the cluster during the ticks: {}.",
        r.drivers
            .iter()
            .filter(|d| d.driver != Kind::RustStripped)
            .map(|d| format!("{:?} {}", d.driver, d.ticks.collected.first().unwrap_or(&0)))
            .collect::<Vec<_>>()
            .join(", "),
        r.drivers
            .iter()
            .filter(|d| d.driver != Kind::RustStripped)
            .map(|d| format!("{:?} window {}", d.driver, d.ticks.requests.all_pod_lists))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

/// The memory variant, a sentence each.
fn stripped(r: &Results, s: &mut String) {
    for d in r.drivers.iter().filter(|d| d.driver == Kind::RustStripped) {
        let _ = writeln!(
            s,
            "\nMemory variant, the Rust runtime's reflector with `managedFields` dropped before the store: {} pods cached in {} ms, RSS {} when ready, peak {}.",
            d.pods_at_start,
            d.sync_ms,
            mib(d.memory_ready.rss_kib),
            mib(peak(d))
        );
    }
}

/// After the apiserver was killed: the table and what it counts.
fn restarts(r: &Results, s: &mut String) {
    let _ = writeln!(
        s,
        "\n| after `restart-apiserver --kill` | restart | LIST / WATCH / WATCH-list sent | of which answered 2xx | other sent | LIST, WATCH counted by the new apiserver | ticks ok / failed | pods cached | deletion to notice p50 / p90 / max | missed |\n|---|---|---|---|---|---|---|---|---|---|"
    );
    for d in &r.drivers {
        let Some(a) = &d.restart else { continue };
        let ok = |c: &str| a.seen.get(c).map_or(0, |x| x.ok);
        let _ = writeln!(
            s,
            "| {:?} | {:.1} s | {} | {} / {} / {} | {} | {}, {} | {} / {} | {} | {} | {} |",
            d.driver,
            a.restart_secs,
            sent(&a.seen),
            ok("list"),
            ok("watch"),
            ok("watch-list"),
            n(&a.seen, "other"),
            a.requests.list,
            a.requests.watch,
            a.ticks.done,
            a.ticks.failed,
            a.ticks.pods,
            notice(&a.notices),
            a.notices.missed
        );
    }
    let _ = writeln!(
        s,
        "\nSent: from just before the kill over {} s of ticks and the deletions after them; counted by the new apiserver: from its start (its FlowSchemas load after it starts serving, so its first seconds may be missing).",
        r.drivers
            .iter()
            .filter_map(|d| d.restart.as_ref())
            .map(|a| format!("{:.0}", a.ticks.secs))
            .next()
            .unwrap_or_default()
    );
}

/// What fails the run: a pod LIST (or a WATCH streaming the whole collection, a relist by another
/// verb) during the ticks after start, unless someone else restarted the apiserver meanwhile; or a
/// deletion the worker never noticed.
pub fn failures(r: &Results) -> Vec<String> {
    let mut out = Vec::new();
    for d in &r.drivers {
        let t = &d.ticks;
        let relists = n(&t.seen, "list") + n(&t.seen, "watch-list");
        if t.requests.restarted {
            eprintln!(
                "scale: {:?}: the apiserver restarted during the ticks (not ours); LISTs not judged",
                d.driver
            );
        } else if relists > 0 || t.requests.list > 0.0 {
            out.push(format!(
                "{:?}: pod LISTs during {} ticks: {relists} sent, {} counted by the apiserver",
                d.driver, t.done, t.requests.list
            ));
        }
        if t.failed > 0 || t.done == 0 {
            out.push(format!(
                "{:?}: {} of {} GC ticks failed",
                d.driver,
                t.failed,
                t.failed + t.done
            ));
        }
        if let Some(a) = &d.restart
            && a.ticks.done == 0
        {
            out.push(format!(
                "{:?}: no GC tick succeeded after the restart ({} failed)",
                d.driver, a.ticks.failed
            ));
        }
        // Every tick keeps the desired pods, so all it may collect is the driver's orphans.
        let collected: usize = t.collected.iter().sum();
        if let Some(orphans) = r.context["orphans"].as_u64()
            && collected as u64 != orphans
        {
            out.push(format!(
                "{:?}: the ticks collected {collected} pods, not its {orphans} orphans",
                d.driver
            ));
        }
        let missed = d.notices.missed + d.restart.as_ref().map_or(0, |a| a.notices.missed);
        if missed > 0 {
            out.push(format!("{:?}: {missed} deletions never noticed", d.driver));
        }
    }
    out
}

/// Writes `scale.json` and `scale.md` into `dir`.
pub fn write(dir: &Path, r: &Results) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("scale.json"), serde_json::to_string_pretty(r)?)?;
    std::fs::write(dir.join("scale.md"), markdown(r))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scale::child::Memory;
    use crate::scale::measure::Ticks;
    use crate::scale::proxy::Class;
    use crate::scale::requests::Requests;

    fn driver(ticks_seen: &[(&str, u64)], restarted: bool, missed: usize) -> DriverResult {
        let seen: Seen = ticks_seen
            .iter()
            .map(|(c, n)| {
                let class = Class {
                    requests: *n,
                    ok: *n,
                    bytes: 0,
                };
                ((*c).to_owned(), class)
            })
            .collect();
        DriverResult {
            driver: Kind::Go,
            pods_at_start: 5000,
            sync_ms: 1,
            start: Requests::default(),
            start_seen: Seen::new(),
            memory_ready: Memory::default(),
            ticks: Ticks {
                done: 10,
                seen,
                requests: Requests {
                    restarted,
                    ..Default::default()
                },
                ..Default::default()
            },
            notices: Notices {
                missed,
                ..Default::default()
            },
            restart: None,
            memory_end: Memory::default(),
        }
    }

    #[test]
    fn a_relist_during_ticks_or_a_missed_deletion_fails_the_run() {
        let results = |d| Results {
            context: serde_json::Value::Null,
            create_secs: 1.0,
            drivers: vec![d],
        };
        let quiet = driver(&[("other", 10), ("watch", 1)], false, 0);
        assert!(failures(&results(quiet)).is_empty());
        assert_eq!(
            failures(&results(driver(&[("list", 1)], false, 0))).len(),
            1
        );
        let by_watch = driver(&[("watch-list", 1)], false, 0);
        assert_eq!(failures(&results(by_watch)).len(), 1, "a relist by WATCH");
        let foreign_restart = driver(&[("list", 1)], true, 0);
        assert!(failures(&results(foreign_restart)).is_empty());
        assert_eq!(failures(&results(driver(&[], false, 1))).len(), 1);
    }

    #[test]
    fn failed_ticks_or_orphans_left_fail_the_run() {
        let mut failing = driver(&[], false, 0);
        failing.ticks.failed = 10;
        failing.ticks.done = 0;
        let with = |d, orphans: u64| Results {
            context: serde_json::json!({ "orphans": orphans }),
            create_secs: 1.0,
            drivers: vec![d],
        };
        assert_eq!(failures(&with(failing, 0)).len(), 1, "every tick failed");
        let mut kept = driver(&[], false, 0);
        kept.ticks.collected = vec![0; 10];
        assert_eq!(failures(&with(kept.clone(), 10)).len(), 1, "orphans left");
        kept.ticks.collected[0] = 10;
        assert!(failures(&with(kept, 10)).is_empty());
    }
}
