//! The `images` scenario's results (`images.rs`): per way the median and range of the handoff,
//! their ratio, and what the shim way cost the controller and the source shim; a markdown table
//! and the raw numbers as JSON, written as `cluster.md` and `cluster.json`.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;
use serde::Serialize;

use super::images_ways::{Handoff, Way};

/// Everything the scenario measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// When, where, which command, the load.
    pub context: serde_json::Value,
    /// MiB of the template's files.
    pub mib: u64,
    /// Files of the template.
    pub files: u64,
    /// Which forwarder served the pulls.
    pub forwarder: String,
    /// Every handoff, in the order run.
    pub handoffs: Vec<Handoff>,
    /// The medians and ranges the table shows.
    pub summary: Summary,
}

/// Median, smallest and largest of some samples.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Spread {
    /// Samples.
    pub n: usize,
    /// Median (the mean of the middle two for an even count).
    pub median: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
}

impl Spread {
    /// Of `v` (zeros for none).
    pub fn of(mut v: Vec<f64>) -> Spread {
        if v.is_empty() {
            return Spread::default();
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Spread {
            n,
            median,
            min: v[0],
            max: v[n - 1],
        }
    }

    fn secs(&self) -> (String, String) {
        (
            format!("{:.2} s", self.median),
            format!("{:.2}-{:.2} s", self.min, self.max),
        )
    }
}

/// One way's times.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct WaySummary {
    /// The producer's exit to the consumer's first line.
    pub handoff_secs: Spread,
    /// Grant and digest, or the push.
    pub prepare_secs: Spread,
    /// The consuming pod created until its shim answered.
    pub pull_secs: Spread,
    /// Handoffs whose consumer printed the right marker.
    pub ok: usize,
}

/// The table's numbers.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Summary {
    /// Through the shim.
    pub shim: WaySummary,
    /// Pushed to the registry, pulled from it.
    pub registry: WaySummary,
    /// The registry way's median handoff over the shim way's.
    pub ratio: f64,
    /// Bytes the controller read per shim handoff.
    pub controller_rchar: Spread,
    /// Bytes the controller wrote per shim handoff.
    pub controller_wchar: Spread,
    /// Bytes of the layer.
    pub layer_bytes: u64,
    /// The source shim's CPU seconds per GiB served for the pull.
    pub pull_cpu_per_gib: Spread,
    /// The same for a plain `GET /v1/files` of the tree.
    pub files_get_cpu_per_gib: Spread,
    /// The two medians' ratio.
    pub pull_over_files_get: f64,
    /// The source shim's CPU seconds for the grant and the digest, once per tree.
    pub digest_cpu_secs: Spread,
    /// The registry's CPU seconds per handoff.
    pub registry_cpu_secs: Spread,
    /// MB/s of the plain files GET.
    pub files_get_mb_per_s: Spread,
    /// containerd's CPU seconds during the pull, shim way and registry way.
    pub containerd_cpu_secs: [Spread; 2],
    /// The forwarder's CPU seconds during the pull, shim way.
    pub forwarder_cpu_secs: Spread,
}

impl Summary {
    /// From the handoffs.
    pub fn of(h: &[Handoff]) -> Summary {
        let way = |w: Way| {
            let of = |f: fn(&Handoff) -> f64| {
                Spread::of(h.iter().filter(|x| x.way == w).map(f).collect())
            };
            WaySummary {
                handoff_secs: of(|x| x.handoff_secs),
                prepare_secs: of(|x| x.prepare_secs),
                pull_secs: of(|x| x.pull_secs),
                ok: h.iter().filter(|x| x.way == w && x.ok).count(),
            }
        };
        let opt = |f: fn(&Handoff) -> Option<f64>| Spread::of(h.iter().filter_map(f).collect());
        let (shim, registry) = (way(Way::Shim), way(Way::Registry));
        let pull_cpu_per_gib = opt(|x| x.cpu_per_gib().map(|c| c.0));
        let files_get_cpu_per_gib = opt(|x| x.cpu_per_gib().map(|c| c.1));
        Summary {
            shim,
            registry,
            ratio: registry.handoff_secs.median / shim.handoff_secs.median,
            controller_rchar: opt(|x| x.controller_rchar.map(|b| b as f64)),
            controller_wchar: opt(|x| x.controller_wchar.map(|b| b as f64)),
            layer_bytes: h.iter().find_map(|x| x.layer_bytes).unwrap_or(0),
            pull_cpu_per_gib,
            files_get_cpu_per_gib,
            pull_over_files_get: pull_cpu_per_gib.median / files_get_cpu_per_gib.median,
            digest_cpu_secs: opt(|x| x.digest_cpu_secs),
            registry_cpu_secs: opt(|x| x.registry_cpu_secs),
            files_get_mb_per_s: opt(|x| x.files_get_mb_per_s),
            containerd_cpu_secs: [Way::Shim, Way::Registry].map(|w| {
                Spread::of(
                    h.iter()
                        .filter(|x| x.way == w)
                        .map(|x| x.containerd_cpu_secs)
                        .collect(),
                )
            }),
            forwarder_cpu_secs: Spread::of(
                h.iter()
                    .filter(|x| x.way == Way::Shim)
                    .map(|x| x.forwarder_cpu_secs)
                    .collect(),
            ),
        }
    }
}

/// Writes `cluster.json` and `cluster.md` into `dir`.
pub fn write(dir: &Path, r: &Report) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("cluster.json"), serde_json::to_vec_pretty(r)?)?;
    std::fs::write(dir.join("cluster.md"), markdown(r))?;
    Ok(())
}

/// The markdown report.
pub fn markdown(r: &Report) -> String {
    let s = &r.summary;
    let c = &r.context;
    let mut m = String::new();
    let _ = writeln!(
        m,
        "## Images: a step's output as a later step's image\n\n\
         A `rootfs/` of {} MiB in {} files, written by a step, then a later step runs in it; timed \
         from the producing process's exit to the consuming step's first line of output. {} \
         rounds, each a new tree handed over both ways, alternating which goes first.\n\n\
         `{}`\n\n{}, Kubernetes {}, {} CPUs, load average before {} and after {}; forwarder: {}.\n",
        r.mib,
        r.files,
        s.shim.handoff_secs.n,
        c["command"].as_str().unwrap_or_default(),
        c["date"].as_str().unwrap_or_default(),
        c["kubernetes"].as_str().unwrap_or_default(),
        c["cpus"],
        c["load_before"].as_str().unwrap_or_default(),
        c["load_after"].as_str().unwrap_or_default(),
        r.forwarder,
    );
    m.push_str(
        "| way | handoff, median | range | grant + digest, or push | pod created to its shim answering (the pull) | right image |\n\
         |---|---|---|---|---|---|\n",
    );
    for (label, w) in [
        (
            "through the shim (kubelet -> forwarder -> producing pod)",
            &s.shim,
        ),
        ("push to a registry on the node, then pull", &s.registry),
    ] {
        let (med, range) = w.handoff_secs.secs();
        let _ = writeln!(
            m,
            "| {label} | {med} | {range} | {:.2} s | {:.2} s | {}/{} |",
            w.prepare_secs.median, w.pull_secs.median, w.ok, w.handoff_secs.n
        );
    }
    let _ = writeln!(
        m,
        "\nPush-then-pull over the shim: **{:.2}x** (target: at least 2x).\n",
        s.ratio
    );
    costs(s, &mut m);
    rounds(r, &mut m);
    m
}

fn costs(s: &Summary, m: &mut String) {
    let kib = |v: f64| format!("{:.0} KiB", v / 1024.0);
    let range = |x: &Spread, f: &dyn Fn(f64) -> String| format!("{}-{}", f(x.min), f(x.max));
    let image = s.layer_bytes as f64;
    m.push_str("| the shim way's cost | median | range | target |\n|---|---|---|---|\n");
    for (what, x) in [
        (
            "controller bytes read per handoff (`rchar`)",
            &s.controller_rchar,
        ),
        (
            "controller bytes written per handoff (`wchar`)",
            &s.controller_wchar,
        ),
    ] {
        let _ = writeln!(
            m,
            "| {what} | {} ({:.3}% of the image) | {} | ~0 of the image |",
            kib(x.median),
            x.median / image * 100.0,
            range(x, &kib)
        );
    }
    let cpu = |v: f64| format!("{v:.2}");
    let _ = writeln!(
        m,
        "| source shim CPU s per GiB served to the pull | {} | {} | <= 1.5x the files GET |\n\
         | source shim CPU s per GiB, `GET /v1/files` of the same tree by the bench | {} | {} | |\n\
         | pull over files GET | {:.2}x | | <= 1.5x |\n\
         | source shim CPU s for the grant and the digest (once per tree) | {} | {} | |\n\
         | the registry's CPU s per handoff (its two processes) | {} | {} | |\n\
         | the files GET's rate, MB/s | {:.0} | {:.0}-{:.0} | |\n\
         | the forwarder's CPU s per pull | {} | {} | |\n\
         | containerd's CPU s per pull, shim way | {} | {} | |\n\
         | containerd's CPU s per pull, registry way | {} | {} | |\n",
        cpu(s.pull_cpu_per_gib.median),
        range(&s.pull_cpu_per_gib, &cpu),
        cpu(s.files_get_cpu_per_gib.median),
        range(&s.files_get_cpu_per_gib, &cpu),
        s.pull_over_files_get,
        cpu(s.digest_cpu_secs.median),
        range(&s.digest_cpu_secs, &cpu),
        cpu(s.registry_cpu_secs.median),
        range(&s.registry_cpu_secs, &cpu),
        s.files_get_mb_per_s.median,
        s.files_get_mb_per_s.min,
        s.files_get_mb_per_s.max,
        cpu(s.forwarder_cpu_secs.median),
        range(&s.forwarder_cpu_secs, &cpu),
        cpu(s.containerd_cpu_secs[0].median),
        range(&s.containerd_cpu_secs[0], &cpu),
        cpu(s.containerd_cpu_secs[1].median),
        range(&s.containerd_cpu_secs[1], &cpu),
    );
}

fn rounds(r: &Report, m: &mut String) {
    m.push_str(
        "| round | way | tree written | handoff | grant + digest, or push | the pull | right image |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for h in &r.handoffs {
        let _ = writeln!(
            m,
            "| {} | {:?} | {:.2} s | {:.2} s | {:.2} s | {:.2} s | {} |",
            h.round,
            h.way,
            h.make_secs,
            h.handoff_secs,
            h.prepare_secs,
            h.pull_secs,
            if h.ok { "yes" } else { "NO" }
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_ranges() {
        let s = Spread::of(vec![3.0, 1.0, 2.0]);
        assert_eq!((s.n, s.median, s.min, s.max), (3, 2.0, 1.0, 3.0));
        assert_eq!(Spread::of(vec![4.0, 1.0, 2.0, 3.0]).median, 2.5);
        assert_eq!(Spread::of(Vec::new()).n, 0);
    }
}
