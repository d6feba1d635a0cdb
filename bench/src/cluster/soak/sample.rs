//! The soak's samples over time, all from the host's `/proc` (the test cluster's pods run on this
//! machine): each long-lived pod's shim (RSS, open descriptors, threads, and its spill files: the
//! descriptors it holds on files in `STEPSHIM_DATA_DIR`, unnamed or unlinked, with the disk they
//! take), the controller side (this process: it drives the pods through the `controller` library
//! as `stepctl` does), kube-apiserver's RSS and the machine's load.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

/// One series: `(seconds since the start, value)` points.
#[derive(Debug, Clone, Serialize)]
pub struct Series {
    /// What it measures.
    pub name: String,
    /// Its unit.
    pub unit: &'static str,
    /// The points.
    pub points: Vec<(f64, f64)>,
}

/// A process sampled: a label and its host pid; shims also their data directory.
#[derive(Debug, Clone)]
pub struct Target {
    /// `shim <pod>` or `controller`.
    pub label: String,
    /// Host pid.
    pub pid: u32,
    /// The shim's `STEPSHIM_DATA_DIR`, as the shim sees it.
    pub data_dir: Option<String>,
}

/// RSS (KiB), open descriptors and threads of `pid`, None once it is gone.
pub fn proc_stats(pid: u32) -> Option<(f64, f64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |k: &str| -> Option<f64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count();
    Some((field("VmRSS:")?, fds as f64, field("Threads:")?))
}

/// Spill files `pid` holds open under `dir`: how many, and the bytes of disk they take.
pub fn spill(pid: u32, dir: &str) -> (u64, u64) {
    let prefix = format!("{}/", dir.trim_end_matches('/'));
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return (0, 0);
    };
    let (mut files, mut bytes) = (0, 0);
    for fd in fds.flatten() {
        let Ok(link) = std::fs::read_link(fd.path()) else {
            continue;
        };
        let link = link.to_string_lossy();
        // Read from the host, a container's path may carry its root's path in front.
        if (link.starts_with(&prefix) || link.contains(&format!("/rootfs{prefix}")))
            && link.ends_with(" (deleted)")
        {
            files += 1;
            // The magic link opens the file itself, name or not.
            bytes += std::fs::metadata(fd.path()).map_or(0, |m| m.blocks() * 512);
        }
    }
    (files, bytes)
}

/// Every series, by name.
#[derive(Debug, Default)]
pub struct Samples {
    series: BTreeMap<String, Series>,
}

impl Samples {
    fn push(&mut self, name: String, unit: &'static str, t: f64, v: f64) {
        self.series
            .entry(name.clone())
            .or_insert_with(|| Series {
                name,
                unit,
                points: Vec::new(),
            })
            .points
            .push((t, v));
    }

    /// One sample of every target, the apiserver and the load, at `t` seconds.
    pub fn take(&mut self, targets: &[Target], t: f64) {
        for target in targets {
            let Some((rss, fds, threads)) = proc_stats(target.pid) else {
                continue;
            };
            let l = &target.label;
            self.push(format!("{l} RSS"), "KiB", t, rss);
            self.push(format!("{l} descriptors"), "fds", t, fds);
            self.push(format!("{l} threads"), "threads", t, threads);
            if let Some(dir) = &target.data_dir {
                let (files, bytes) = spill(target.pid, dir);
                self.push(format!("{l} spill files"), "files", t, files as f64);
                self.push(format!("{l} spill disk"), "KiB", t, (bytes / 1024) as f64);
            }
        }
        if let Ok(pid) = crate::cluster::apiserver::find_pid(None)
            && let Some((rss, _, _)) = proc_stats(pid)
        {
            self.push("kube-apiserver RSS".into(), "KiB", t, rss);
        }
        if let Some(load) = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|l| l.split_whitespace().next()?.parse().ok())
        {
            self.push("machine load (1 min)".into(), "load", t, load);
        }
    }

    /// Samples every `every` until `stop` is set, timed from `start`.
    pub async fn run(
        &mut self,
        targets: &[Target],
        start: Instant,
        every: Duration,
        stop: &AtomicBool,
    ) {
        while !stop.load(Ordering::Relaxed) {
            self.take(targets, start.elapsed().as_secs_f64());
            let next = Instant::now() + every;
            while Instant::now() < next && !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        self.take(targets, start.elapsed().as_secs_f64());
    }

    /// The series, by name.
    pub fn into_series(self) -> Vec<Series> {
        self.series.into_values().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_memory_descriptors_and_threads() {
        let (rss, fds, threads) = proc_stats(std::process::id()).unwrap();
        assert!(rss > 0.0 && fds >= 3.0 && threads >= 1.0);
    }

    #[test]
    fn an_unlinked_file_held_open_counts_as_spill() {
        let dir = std::env::temp_dir().join(format!("soak-spill-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("log");
        let mut f = std::fs::File::create(&path).unwrap();
        std::io::Write::write_all(&mut f, &vec![1u8; 64 << 10]).unwrap();
        f.sync_all().unwrap();
        let d = dir.to_string_lossy().into_owned();
        assert_eq!(
            spill(std::process::id(), &d).0,
            0,
            "a named file is not counted"
        );
        std::fs::remove_file(&path).unwrap();
        let (files, bytes) = spill(std::process::id(), &d);
        assert_eq!(files, 1);
        assert!(bytes >= 64 << 10, "{bytes}");
        drop(f);
        assert_eq!(spill(std::process::id(), &d), (0, 0));
        std::fs::remove_dir(&dir).unwrap();
    }
}
