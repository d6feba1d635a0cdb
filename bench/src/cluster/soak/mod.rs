//! `stepshim-bench cluster --soak DURATION`: steps of every kind started and finished continuously
//! on long-lived step pods for DURATION, every byte and exit status checked, while faults come in
//! turn (connections killed, cut streams, apiserver restarts, pods deleted mid-step) and the shims,
//! the controller side (this process, driving the pods through the `controller` library as
//! `stepctl` does) and the apiserver are sampled from `/proc`. At the end no step may be left in a
//! shim, no spill file open and no pod of the soak's worker in the namespace. Writes `soak.json`
//! and `soak.md`; exits 1 when anything was lost, wrong or left over. Every loop ends by itself at
//! the deadline; each step has its own time limit.

mod faults;
mod follow;
mod report;
mod sample;
mod steps;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;
use controller::runtime::Runtime;

use super::paths::{Path, Pod2};
use super::scenarios::Env;
use crate::args::ClusterArgs;
use report::{KindRow, Leftovers, Report, Summary};
use sample::{Samples, Target};

/// The shims' memory budget for output unless `--pod-env` sets one: small, so streams spill.
const MEMORY_BYTES: &str = "4194304";

/// The most any one step may take, whatever it waits for.
const STEP_LIMIT: Duration = Duration::from_secs(900);

/// Everything the steps and faults share.
pub struct Soak {
    rt: Runtime,
    env: Env,
    args: ClusterArgs,
    start: Instant,
    deadline: Instant,
    stream_mib: u64,
    run_id: String,
    /// The cutting proxies' pods: straight to the shim, and through the apiserver.
    cut: Vec<(Path, Pod2, Arc<AtomicU64>)>,
    tally: Mutex<BTreeMap<String, KindRow>>,
    /// Per pod, the stream step whose process (and spilled log) is kept until the next one.
    held: Mutex<Vec<Option<u64>>>,
}

impl Soak {
    /// Records a step of `kind` and how it went.
    fn record(&self, kind: &str, verdict: &steps::Verdict, secs: f64) {
        let mut t = self.tally.lock().unwrap_or_else(|e| e.into_inner());
        let row = t.entry(kind.to_owned()).or_insert_with(|| KindRow {
            kind: kind.to_owned(),
            ..Default::default()
        });
        row.runs += 1;
        row.max_secs = row.max_secs.max(secs);
        match verdict {
            Ok(b) => {
                row.ok += 1;
                row.bytes += b;
            }
            Err(e) => {
                row.wrong += 1;
                eprintln!("soak: {kind} WRONG: {e}");
                if row.failures.len() < 10 {
                    row.failures.push(format!("{kind}: {e}"));
                }
            }
        }
    }

    /// Records a fault's step that went right with `bytes` checked.
    fn record_bytes(&self, kind: &str, bytes: u64) {
        self.record(kind, &Ok(bytes), 0.0);
    }
}

/// Runs the soak for `duration`.
pub async fn run(args: &ClusterArgs, duration: Duration) -> Result<i32> {
    let soak = start(args, duration).await?;
    let targets = targets(&soak.env, &soak.args).await;
    eprintln!(
        "soak: {} pods, {} workers, {duration:?}; sampling {} processes",
        soak.env.pods.len(),
        soak.args.soak_workers,
        targets.len()
    );
    let every = sample_every(&soak.args, duration);
    let stop = AtomicBool::new(false);
    let mut samples = Samples::default();
    let work = async {
        let fault_every = (duration / 24).clamp(Duration::from_secs(20), Duration::from_secs(150));
        let next = AtomicU64::new(0);
        let workers = futures_util::future::join_all(
            (0..soak.args.soak_workers.max(1)).map(|_| worker(&soak, &next)),
        );
        let (_, faults) = tokio::join!(workers, faults::run(&soak, fault_every));
        let leftovers = finish(&soak).await;
        stop.store(true, Ordering::Relaxed);
        (faults, leftovers)
    };
    let sampler = samples.run(&targets, soak.start, every, &stop);
    let ((faults, leftovers), ()) = tokio::join!(work, sampler);
    let report = Report {
        context: context(&soak, duration, every),
        steps: soak
            .tally
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect(),
        faults,
        leftovers,
        series: samples.into_series().into_iter().map(Summary::of).collect(),
    };
    let dir = soak
        .args
        .results
        .clone()
        .unwrap_or_else(|| "results/soak".into());
    report::write(&dir, &report)?;
    print!("{}", report::markdown(&report));
    eprintln!("soak: results in {}", dir.display());
    let wrong = report.wrong();
    if wrong > 0 || report.leftovers.any() {
        eprintln!(
            "soak: FAIL: {wrong} steps or faults wrong; left over: {:?}",
            report.leftovers
        );
        return Ok(1);
    }
    Ok(0)
}

/// Sets the pods up (shims with a small memory budget for output, so streams spill) and the
/// cutting proxies; the deadline counts from the end of this.
async fn start(args: &ClusterArgs, duration: Duration) -> Result<Soak> {
    let mut args = args.clone();
    if !args
        .pod_env
        .iter()
        .any(|(k, _)| k == "STEPSHIM_MEMORY_BYTES")
    {
        args.pod_env
            .push(("STEPSHIM_MEMORY_BYTES".into(), MEMORY_BYTES.into()));
    }
    let (rt, env) = super::setup(&args).await?;
    let stream_mib = args.stream_mib.clamp(1, 64);
    let mut cut = Vec::new();
    for path in [Path::Shim, Path::Proxy] {
        let through =
            super::faults::through_proxy(path, &env.pods_api, &env.pods[0], stream_mib << 20);
        match through.await {
            Ok((_, pod, cuts)) => cut.push((path, pod, cuts)),
            Err(e) => {
                for p in &env.pods {
                    let _ = rt.delete(&p.name).await;
                }
                return Err(e.context("a cutting proxy"));
            }
        }
    }
    let start = Instant::now();
    let pods = env.pods.len();
    Ok(Soak {
        rt,
        env,
        stream_mib,
        run_id: format!("{:06x}", rand::random::<u32>() >> 8),
        cut,
        tally: Mutex::default(),
        held: Mutex::new(vec![None; pods]),
        start,
        deadline: start + duration,
        args,
    })
}

/// Takes steps in turn until the deadline.
async fn worker(s: &Soak, next: &AtomicU64) {
    while Instant::now() < s.deadline {
        let n = next.fetch_add(1, Ordering::Relaxed);
        let kind = steps::ROTATION[(n as usize) % steps::ROTATION.len()];
        let t = Instant::now();
        let verdict = tokio::time::timeout(STEP_LIMIT, steps::run(s, kind, n))
            .await
            .unwrap_or_else(|_| Err(format!("step {n} still going after {STEP_LIMIT:?}")));
        s.record(kind.name(), &verdict, t.elapsed().as_secs_f64());
    }
}

/// Seconds between samples: `--soak-sample-secs`, else the duration / 120 within 5 to 60.
fn sample_every(args: &ClusterArgs, duration: Duration) -> Duration {
    let secs = args
        .soak_sample_secs
        .unwrap_or_else(|| (duration.as_secs() / 120).clamp(5, 60));
    Duration::from_secs(secs.max(1))
}

/// The processes to sample: each pod's shim (found by its pod's UID) and this process.
async fn targets(env: &Env, args: &ClusterArgs) -> Vec<Target> {
    let data_dir = args
        .pod_env
        .iter()
        .find(|(k, _)| k == "STEPSHIM_DATA_DIR")
        .map_or("/tmp".to_owned(), |(_, v)| v.clone());
    let mut out = Vec::new();
    for (i, p) in env.pods.iter().enumerate() {
        let uid = env
            .pods_api
            .get(&p.name)
            .await
            .ok()
            .and_then(|p| p.metadata.uid);
        match uid.as_deref().and_then(super::podcpu::find_shim) {
            Some(pid) => out.push(Target {
                label: format!("shim {i}"),
                pid,
                data_dir: Some(data_dir.clone()),
            }),
            None => eprintln!("soak: no shim process of {} on this machine", p.name),
        }
    }
    out.push(Target {
        label: "controller (stepshim-bench)".into(),
        pid: std::process::id(),
        data_dir: None,
    });
    out
}

/// After the last step: what the shims still hold, then every pod deleted and waited for.
async fn finish(s: &Soak) -> Leftovers {
    let mut left = Leftovers::default();
    let targets = targets(&s.env, &s.args).await;
    let held: Vec<Option<u64>> = s.held.lock().unwrap_or_else(|e| e.into_inner()).clone();
    for (pod, n) in s.env.pods.iter().zip(held) {
        if let Some(n) = n {
            let again = steps::read_again(s, pod, n).await;
            s.record("stream read again", &again, 0.0);
        }
    }
    for p in &s.env.pods {
        left.processes += follow::retry("list", || p.shim.list())
            .await
            .map_or(0, |l| l.len());
        left.grants += follow::retry("grants", || p.shim.grants())
            .await
            .map_or(0, |g| g.len());
    }
    // Deleted processes close their spill files at once; a moment for the last ones.
    for _ in 0..20 {
        left.spill_files = targets
            .iter()
            .filter_map(|t| Some(sample::spill(t.pid, t.data_dir.as_deref()?).0))
            .sum();
        if left.spill_files == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for p in &s.env.pods {
        let _ = s.rt.delete(&p.name).await;
    }
    for p in &s.env.pods {
        s.rt.wait_gone(&p.name, Duration::from_secs(180)).await;
    }
    left.pods = remaining_pods(s).await;
    left
}

/// Pods of the soak's worker the apiserver still lists (not the cache: the source of truth).
async fn remaining_pods(s: &Soak) -> Vec<String> {
    let lp = kube::api::ListParams::default().labels(&format!(
        "{}=stepctl-bench",
        controller::podspec::WORKER_LABEL
    ));
    match s.env.pods_api.list(&lp).await {
        Ok(l) => l
            .items
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .collect(),
        Err(e) => vec![format!("(cannot list pods: {e})")],
    }
}

/// Where and how the soak ran, for the report.
fn context(s: &Soak, duration: Duration, every: Duration) -> serde_json::Value {
    serde_json::json!({
        "date": super::controller_now(),
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "duration_secs": duration.as_secs(),
        "ran_secs": s.start.elapsed().as_secs(),
        "sample_secs": every.as_secs(),
        "pods": s.env.pods.len(),
        "workers": s.args.soak_workers,
        "stream_mib": s.stream_mib,
        "attach_resumes": follow::RESUMES.load(Ordering::Relaxed),
        "pod_env": s.args.pod_env,
        "controller_side": "this process (stepshim-bench): it drives the pods through the controller library, as stepctl does",
        "load_at_end": std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim(),
    })
}
