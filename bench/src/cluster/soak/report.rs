//! The soak's report: every series with its least-squares slope per hour and its start and end
//! values, the steps by kind with the bytes checked and what went wrong, the faults, and what was
//! left at the end; as `soak.json` and `soak.md`. Flatness is reported, never judged here.

use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;

use super::sample::Series;

/// A series with its summary.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Name.
    pub name: String,
    /// Unit.
    pub unit: &'static str,
    /// Samples.
    pub n: usize,
    /// Least-squares slope, units per hour.
    pub slope_per_hour: f64,
    /// The same over the second half of the run only (past the warm-up).
    pub slope_second_half: f64,
    /// First value.
    pub start: f64,
    /// Last value.
    pub end: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// The points, `(seconds, value)`.
    pub points: Vec<(f64, f64)>,
}

/// The least-squares slope of `points` (`(seconds, value)`), per hour; 0 with fewer than two times.
pub fn slope_per_hour(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if points.len() < 2 {
        return 0.0;
    }
    let mt = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mv = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mt).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mt) * (p.1 - mv)).sum();
    if sxx == 0.0 { 0.0 } else { sxy / sxx * 3600.0 }
}

impl Summary {
    /// The summary of a series.
    pub fn of(s: Series) -> Self {
        let vals = || s.points.iter().map(|p| p.1);
        Summary {
            n: s.points.len(),
            slope_per_hour: slope_per_hour(&s.points),
            slope_second_half: slope_per_hour(&s.points[s.points.len() / 2..]),
            start: s.points.first().map_or(0.0, |p| p.1),
            end: s.points.last().map_or(0.0, |p| p.1),
            min: vals().fold(f64::INFINITY, f64::min),
            max: vals().fold(f64::NEG_INFINITY, f64::max),
            name: s.name.clone(),
            unit: s.unit,
            points: s.points,
        }
    }
}

/// One kind of step.
#[derive(Debug, Clone, Default, Serialize)]
pub struct KindRow {
    /// Kind.
    pub kind: String,
    /// Steps run.
    pub runs: u64,
    /// Steps whose every byte and exit status (or, for deleted pods, failure with the pod's
    /// reason) was right.
    pub ok: u64,
    /// Steps that were wrong.
    pub wrong: u64,
    /// Bytes checked.
    pub bytes: u64,
    /// Longest step, seconds.
    pub max_secs: f64,
    /// The first few things that were wrong.
    pub failures: Vec<String>,
}

/// A fault the soak caused.
#[derive(Debug, Clone, Serialize)]
pub struct FaultRow {
    /// Seconds since the start.
    pub at_secs: f64,
    /// Which fault.
    pub fault: String,
    /// What happened.
    pub detail: String,
    /// Whether what followed was right.
    pub ok: bool,
}

/// What was left at the end.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Leftovers {
    /// Processes the long-lived shims still knew after every step was forgotten.
    pub processes: usize,
    /// Spill files the shims still held open then.
    pub spill_files: u64,
    /// Grants the shims still held.
    pub grants: usize,
    /// Pods of the soak's worker still in the namespace after the deletions.
    pub pods: Vec<String>,
}

impl Leftovers {
    /// Whether anything was left.
    pub fn any(&self) -> bool {
        self.processes + self.grants + self.pods.len() > 0 || self.spill_files > 0
    }
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Where and how it ran.
    pub context: serde_json::Value,
    /// Steps by kind.
    pub steps: Vec<KindRow>,
    /// Faults in order.
    pub faults: Vec<FaultRow>,
    /// What was left.
    pub leftovers: Leftovers,
    /// The series.
    pub series: Vec<Summary>,
}

impl Report {
    /// Steps or faults that went wrong.
    pub fn wrong(&self) -> u64 {
        self.steps.iter().map(|k| k.wrong).sum::<u64>()
            + self.faults.iter().filter(|f| !f.ok).count() as u64
    }
}

/// Writes `soak.json` and `soak.md` into `dir`.
pub fn write(dir: &Path, r: &Report) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::write(dir.join("soak.json"), serde_json::to_vec(r)?)?;
    std::fs::write(dir.join("soak.md"), markdown(r))?;
    Ok(())
}

/// The markdown report.
pub fn markdown(r: &Report) -> String {
    let mut s = format!(
        "# Soak\n\n```json\n{}\n```\n\n## Steps\n\n| kind | runs | right | wrong | bytes checked | longest |\n|---|---:|---:|---:|---:|---:|\n",
        serde_json::to_string_pretty(&r.context).unwrap_or_default()
    );
    for k in &r.steps {
        s += &format!(
            "| {} | {} | {} | {} | {} | {:.1} s |\n",
            k.kind, k.runs, k.ok, k.wrong, k.bytes, k.max_secs
        );
    }
    for f in r.steps.iter().flat_map(|k| &k.failures) {
        s += &format!("\n- wrong: {f}");
    }
    s += "\n\n## Faults\n\n| at | fault | right | what happened |\n|---:|---|---|---|\n";
    for f in &r.faults {
        s += &format!(
            "| {:.0} s | {} | {} | {} |\n",
            f.at_secs,
            f.fault,
            if f.ok { "yes" } else { "**no**" },
            f.detail.replace('|', "/")
        );
    }
    let l = &r.leftovers;
    s += &format!(
        "\n## Left at the end\n\nprocesses in the shims: {}, spill files: {}, grants: {}, pods: {}\n",
        l.processes,
        l.spill_files,
        l.grants,
        if l.pods.is_empty() {
            "none".to_owned()
        } else {
            l.pods.join(", ")
        }
    );
    s += "\n## Series\n\n| series | unit | samples | start | end | min | max | slope per hour | second half |\n\
          |---|---|---:|---:|---:|---:|---:|---:|---:|\n";
    for x in &r.series {
        s += &format!(
            "| {} | {} | {} | {} | {} | {} | {} | {:+.1} | {:+.1} |\n",
            x.name,
            x.unit,
            x.n,
            num(x.start),
            num(x.end),
            num(x.min),
            num(x.max),
            x.slope_per_hour,
            x.slope_second_half
        );
    }
    s
}

/// Whole numbers without decimals, others with two.
fn num(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slope_of_a_line_is_its_rise_per_hour() {
        let line: Vec<(f64, f64)> = (0..10)
            .map(|i| (i as f64 * 60.0, 100.0 + i as f64))
            .collect();
        assert!((slope_per_hour(&line) - 60.0).abs() < 1e-9);
        let flat: Vec<(f64, f64)> = (0..10).map(|i| (i as f64, 7.0)).collect();
        assert_eq!(slope_per_hour(&flat), 0.0);
        assert_eq!(slope_per_hour(&[(1.0, 5.0)]), 0.0);
    }

    #[test]
    fn a_summary_keeps_start_end_and_extremes() {
        let s = Summary::of(Series {
            name: "x".into(),
            unit: "KiB",
            points: vec![(0.0, 3.0), (10.0, 1.0), (20.0, 5.0), (30.0, 2.0)],
        });
        assert_eq!((s.start, s.end, s.min, s.max, s.n), (3.0, 2.0, 1.0, 5.0, 4));
    }
}
