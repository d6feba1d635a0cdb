//! The scenarios of the cluster benchmark. Each runs every path into the same pods, rotating which
//! goes first, and records what it cost the apiserver while it ran.

use std::time::{Duration, Instant};

use anyhow::Result;
use futures_util::future::join_all;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use serde::Serialize;

use super::apiserver::{Cost, Probe};
use super::paths::{Digest, Outcome, Path, Pod2, run, run_for_status};
use crate::stats::Samples;

/// Everything a scenario needs.
#[derive(Debug)]
pub struct Env {
    /// Exec API (admin credentials).
    pub pods_api: Api<Pod>,
    /// The step pods with their shims.
    pub pods: Vec<Pod2>,
    /// The apiserver probe.
    pub probe: Probe,
}

/// Percentiles in microseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Dist {
    /// Samples.
    pub n: usize,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Largest.
    pub max: u64,
    /// Every sample, for the chart.
    pub samples: Vec<u64>,
}

impl Dist {
    /// From durations.
    pub fn of(v: Vec<Duration>) -> Self {
        let s = Samples::new(v.clone());
        let us = |d: Duration| d.as_micros() as u64;
        let mut samples: Vec<u64> = v.into_iter().map(us).collect();
        samples.sort_unstable();
        Dist {
            n: s.len(),
            p50: us(s.pct(50.0)),
            p90: us(s.pct(90.0)),
            p99: us(s.pct(99.0)),
            max: us(s.max()),
            samples,
        }
    }
}

/// Runs `f` while sampling the apiserver every 250 ms; returns its result and the cost.
pub async fn measured<T>(probe: &Probe, f: impl std::future::Future<Output = T>) -> (T, Cost) {
    let before = probe.read().await.unwrap_or_default();
    let done = std::sync::atomic::AtomicBool::new(false);
    let sampler = async {
        let mut cost = Cost::default();
        cost.observe(&before);
        while !done.load(std::sync::atomic::Ordering::Relaxed) {
            if let Ok(r) = probe.read().await {
                cost.observe(&r);
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        cost
    };
    let work = async {
        let v = f.await;
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        v
    };
    let (v, mut cost) = tokio::join!(work, sampler);
    let after = probe.read().await.unwrap_or_default();
    cost.observe(&after);
    cost.cpu_secs = (after.cpu_secs - before.cpu_secs).max(0.0);
    (v, cost)
}

/// Latency of one command on one path.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    /// Path.
    pub path: Path,
    /// The command, as a label.
    pub command: String,
    /// Request to exit status.
    pub exit: Dist,
    /// Request to first output byte (commands that print).
    pub first_byte: Option<Dist>,
    /// Runs that failed or exited non-zero.
    pub errors: usize,
    /// Apiserver cost over all runs of this path and command.
    pub apiserver: Cost,
}

/// `GET /healthz` round trips per shim path.
pub type RoundTrips = Vec<(Path, Dist)>;

/// [`latency`] and [`round_trips`] on a `current_thread` runtime in a thread of its own, with every path's clients
/// (exec's kube client, the shim clients direct and through the apiserver) made there, so no
/// request hops between worker threads. `config` is the admin kubeconfig the main clients use.
pub fn latency_own_thread(
    env: &Env,
    config: &kube::Config,
    iterations: usize,
) -> Result<(Vec<Latency>, RoundTrips)> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                rt.block_on(async {
                    let local = env.rebuilt(config)?;
                    let l = latency(&local, iterations).await?;
                    Ok((l, round_trips(&local, iterations).await))
                })
            })
            .join()
            .map_err(|_| anyhow::anyhow!("the latency thread panicked"))?
    })
}

impl Env {
    /// The same pods and probe with new clients, made on the calling runtime.
    fn rebuilt(&self, config: &kube::Config) -> Result<Env> {
        let client = kube::Client::try_from(config.clone())?;
        let ns = self.pods_api.namespace().unwrap_or("default").to_owned();
        let transport = std::sync::Arc::new(controller::via::ApiProxy::new(config)?);
        let pods = self
            .pods
            .iter()
            .map(|p| {
                Ok(Pod2 {
                    name: p.name.clone(),
                    shim: match p.shim.pin() {
                        Some(pin) => client::ShimClient::new_pinned(
                            p.shim.base(),
                            Some(p.token.clone()),
                            pin,
                        )?,
                        None => client::ShimClient::new(p.shim.base(), Some(p.token.clone()))?,
                    },
                    proxy: client::ShimClient::with_transport(
                        p.proxy.base(),
                        Some(p.token.clone()),
                        client::TokenHeader::Proxy,
                        transport.clone(),
                    )?,
                    token: p.token.clone(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Env {
            pods_api: Api::namespaced(client, &ns),
            pods,
            probe: self.probe.clone(),
        })
    }
}

/// Sequential runs of short commands, rotating paths run by run. The first run of each path and
/// pod is a warm-up (connections), unmeasured.
pub async fn latency(env: &Env, iterations: usize) -> Result<Vec<Latency>> {
    // The no-op's status is all a client wants (one `PUT ?wait=` on the shim paths); the echo is
    // followed for its output, so its exit comes at the end of the output stream on every path.
    // Busybox's `true` spends about 460 us of this machine on its own start-up and exit; the step
    // image's `/bin/noop` (exit(0) and nothing else) about 130 us, so its run times the paths.
    let commands: [(&str, Vec<String>, bool); 3] = [
        ("/bin/true (static no-op)", vec!["/bin/true".into()], false),
        ("/bin/noop (exit(0) only)", vec!["/bin/noop".into()], false),
        (
            "sh -c 'echo x'",
            vec!["sh".into(), "-c".into(), "echo x".into()],
            true,
        ),
    ];
    for (i, pod) in env.pods.iter().enumerate() {
        for path in Path::ALL {
            let cmd = ["/bin/true".to_owned()];
            let id = format!("lat-warm-{i}");
            let _ = run(path, &env.pods_api, pod, &id, &cmd, Duration::from_secs(60)).await;
        }
    }
    let mut out = Vec::new();
    for (label, cmd, follow) in commands {
        let mut exits: [Vec<Duration>; 3] = Default::default();
        let mut firsts: [Vec<Duration>; 3] = Default::default();
        let mut errors = [0usize; 3];
        let mut costs = [Cost::default(); 3];
        for i in 0..iterations {
            let pod = &env.pods[i % env.pods.len()];
            for path in Path::order(i) {
                let k = path as usize;
                let id = format!("lat-{i}");
                // Per run, only the apiserver's CPU (cheap, from /proc): reading its /metrics
                // around every short run would cost more than the run itself.
                let cpu0 = env.probe.cpu_secs();
                let limit = Duration::from_secs(60);
                let r = if follow {
                    run(path, &env.pods_api, pod, &id, &cmd, limit).await
                } else {
                    run_for_status(path, &env.pods_api, pod, &id, &cmd, limit).await
                };
                costs[k].cpu_secs += (env.probe.cpu_secs() - cpu0).max(0.0);
                match r {
                    Ok(o) if o.status == Some(0) => {
                        exits[k].push(o.total);
                        if let Some(f) = o.first_byte {
                            firsts[k].push(f);
                        }
                    }
                    _ => errors[k] += 1,
                }
            }
        }
        for path in Path::ALL {
            let k = path as usize;
            let first = std::mem::take(&mut firsts[k]);
            out.push(Latency {
                path,
                command: label.to_owned(),
                exit: Dist::of(std::mem::take(&mut exits[k])),
                first_byte: (!first.is_empty()).then(|| Dist::of(first)),
                errors: errors[k],
                apiserver: costs[k],
            });
        }
    }
    Ok(out)
}

/// A round trip with no process: `GET /healthz` on each shim path, `iterations` times, spread
/// over the pods. The floor under that path's latency (network, HTTP, the apiserver's proxy).
pub async fn round_trips(env: &Env, iterations: usize) -> RoundTrips {
    let mut out = Vec::new();
    for path in [Path::Shim, Path::Proxy] {
        let mut v = Vec::with_capacity(iterations);
        for i in 0..iterations {
            let pod = &env.pods[i % env.pods.len()];
            let shim = if path == Path::Shim {
                &pod.shim
            } else {
                &pod.proxy
            };
            let t = Instant::now();
            if shim.healthz().await.is_ok() {
                v.push(t.elapsed());
            }
        }
        out.push((path, Dist::of(v)));
    }
    out
}

/// Many processes at once on one path.
#[derive(Debug, Clone, Serialize)]
pub struct Concurrency {
    /// Path.
    pub path: Path,
    /// Processes at once.
    pub processes: usize,
    /// Processes that failed, exited non-zero, or whose output was not exactly right.
    pub errors: usize,
    /// Time from the request to the exit status of each correct process.
    pub completion: Dist,
    /// Apiserver cost.
    pub apiserver: Cost,
    /// Wall time of the whole level.
    pub wall_secs: f64,
}

/// The script each concurrent process runs: `lines` lines, one a second.
pub fn ticker(lines: u32, tag: &str) -> (Vec<String>, u64) {
    let script = format!(
        "i=0; while [ $i -lt {lines} ]; do echo \"line $i of {tag}\"; i=$((i+1)); sleep 1; done"
    );
    let mut fnv = Digest::new();
    for i in 0..lines {
        fnv.update(format!("line {i} of {tag}\n").as_bytes());
    }
    (vec!["sh".into(), "-c".into(), script], fnv.digest())
}

/// `n` processes at once on `path`, spread over the pods, every byte checked.
pub async fn concurrent(env: &Env, path: Path, n: usize, lines: u32) -> Concurrency {
    let start = Instant::now();
    let work = join_all((0..n).map(|i| {
        let pod = &env.pods[i % env.pods.len()];
        let tag = format!("p{i}");
        async move {
            let (cmd, want) = ticker(lines, &tag);
            let limit = Duration::from_secs(u64::from(lines) + 120);
            let r: Result<Outcome> = run(
                path,
                &env.pods_api,
                pod,
                &format!("conc-{n}-{i}"),
                &cmd,
                limit,
            )
            .await;
            match r {
                Ok(o) if o.status == Some(0) && o.digest == want => Some(o.total),
                _ => None,
            }
        }
    }));
    let (results, cost) = measured(&env.probe, work).await;
    let errors = results.iter().filter(|r| r.is_none()).count();
    Concurrency {
        path,
        processes: n,
        errors,
        completion: Dist::of(results.into_iter().flatten().collect()),
        apiserver: cost,
        wall_secs: start.elapsed().as_secs_f64(),
    }
}

/// One stream of `bytes` of stdout by `cmd` (`writer` names it) on `path`, into the first pod:
/// rate, the client's CPU, the shim's CPU in the pod (shim paths) and the apiserver's.
pub async fn throughput(
    env: &Env,
    path: Path,
    writer: &str,
    cmd: &[String],
    bytes: u64,
) -> Throughput {
    let pod = &env.pods[0];
    let uid = match env.pods_api.get(&pod.name).await {
        Ok(p) => p.metadata.uid,
        Err(_) => None,
    };
    let shim_pid = uid.as_deref().and_then(super::podcpu::find_shim);
    let shim_cpu = || shim_pid.and_then(crate::procfs::cpu_secs);
    let shim0 = shim_cpu();
    let cpu0 = crate::procfs::own_cpu_secs(false);
    let t = Instant::now();
    let limit = Duration::from_secs(900);
    let (r, cost) = measured(
        &env.probe,
        run(path, &env.pods_api, pod, "stream", cmd, limit),
    )
    .await;
    let secs = t.elapsed().as_secs_f64();
    let gib = bytes as f64 / (1u64 << 30) as f64;
    let cpu = crate::procfs::own_cpu_secs(false) - cpu0;
    let (received, ok) = r
        .map(|o| (o.bytes, o.bytes == bytes && o.status == Some(0)))
        .unwrap_or((0, false));
    let shim_cpu_per_gib = match (path.is_shim(), shim0, shim_cpu()) {
        (true, Some(a), Some(b)) => Some((b - a) / gib),
        _ => None,
    };
    Throughput {
        path,
        writer: writer.to_owned(),
        bytes,
        received,
        ok,
        mb_per_s: received as f64 / secs / 1e6,
        client_cpu_per_gib: cpu / gib,
        shim_cpu_per_gib,
        apiserver: cost,
    }
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
