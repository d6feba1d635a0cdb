//! The order of a full cluster run on its pods: a warm-up of every path, the idle yardstick,
//! latency, the in-pod spawn, concurrency, throughput and the faults, each a step of its own
//! (skipped unless `--only` names it), then the run's context for the report.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::json;

use super::apiserver::{self, Cost};
use super::faults::{self, Faults};
use super::paths::{self, Path};
use super::podspawn::{self, PodSpawn};
use super::results::Results;
use super::scenarios::Throughput;
use super::scenarios::{self, Concurrency, Env, Latency, RoundTrips, measured};
use super::{ADMIN_CONFIG, controller_now};
use crate::args::{ClusterArgs, LatencyRuntime};
use controller::runtime::Runtime;

/// Every scenario `args` asks for, in order, into the report's results.
pub(super) async fn scenarios_all(
    rt: &Runtime,
    env: &mut Env,
    args: &ClusterArgs,
) -> Result<Results> {
    warm_up(env).await?;
    let (idle, idle_secs) = idle(env, args).await;
    let (latency, round_trips) = latency(env, args).await?;
    eprintln!("bench: latency done");
    let pod_spawn = pod_spawn(env, args).await?;
    let concurrency = concurrency(env, args).await;
    let throughput = throughput(env, args).await;
    let faults = faults(env, args).await?;
    Ok(Results {
        context: context(rt, env, args).await,
        idle,
        idle_secs,
        latency,
        round_trips,
        pod_spawn,
        concurrency,
        throughput,
        faults,
    })
}

/// Every path once per pod (images, connections, caches), unmeasured.
async fn warm_up(env: &Env) -> Result<()> {
    for (i, pod) in env.pods.iter().enumerate() {
        for path in Path::ALL {
            let o = paths::run(
                path,
                &env.pods_api,
                pod,
                &format!("warm-{i}"),
                &["/bin/true".to_owned()],
                Duration::from_secs(60),
            )
            .await?;
            if o.status != Some(0) {
                bail!("warm-up on {path:?} in {} exited {:?}", pod.name, o.status);
            }
        }
    }
    Ok(())
}

/// The apiserver's cost while nothing runs: the yardstick of the concurrency rows; runs without
/// them skip it (0 s).
async fn idle(env: &Env, args: &ClusterArgs) -> (Cost, f64) {
    let idle_secs = if args.runs("concurrency") { 10.0 } else { 0.0 };
    let ((), idle) = measured(
        &env.probe,
        tokio::time::sleep(Duration::from_secs_f64(idle_secs)),
    )
    .await;
    eprintln!(
        "bench: idle apiserver {:.2} CPU s in {idle_secs} s",
        idle.cpu_secs
    );
    (idle, idle_secs)
}

/// Latency per path and the requests' round trips, on the runtime `--latency-runtime` names.
async fn latency(env: &Env, args: &ClusterArgs) -> Result<(Vec<Latency>, RoundTrips)> {
    Ok(match args.latency_runtime {
        _ if !args.runs("latency") => (Vec::new(), Vec::new()),
        LatencyRuntime::MultiThread => (
            scenarios::latency(env, args.iterations).await?,
            scenarios::round_trips(env, args.iterations).await,
        ),
        LatencyRuntime::CurrentThread => {
            let config = ADMIN_CONFIG.get().context("admin config")?;
            tokio::task::block_in_place(|| {
                scenarios::latency_own_thread(env, config, args.iterations)
            })?
        }
    })
}

/// The spawn as the shim sees it inside the pod.
async fn pod_spawn(env: &Env, args: &ClusterArgs) -> Result<Option<PodSpawn>> {
    if !args.runs("podspawn") {
        return Ok(None);
    }
    let p = podspawn::measure(env, 500, 6).await?;
    eprintln!(
        "bench: in-pod spawn {:.0} us (loop alone {:.1} us)",
        p.spawn_p50_us(),
        podspawn::median(&p.us_per_loop)
    );
    Ok(Some(p))
}

/// Each level of `--levels` at once on every path, rotating which path goes first.
async fn concurrency(env: &Env, args: &ClusterArgs) -> Vec<Concurrency> {
    let mut concurrency = Vec::new();
    let levels = if args.runs("concurrency") {
        &args.levels[..]
    } else {
        &[]
    };
    for (k, level) in levels.iter().enumerate() {
        for path in Path::order(k) {
            let c = scenarios::concurrent(env, path, *level, args.lines).await;
            eprintln!(
                "bench: {level} at once on {path:?}: {} errors in {:.1} s",
                c.errors, c.wall_secs
            );
            concurrency.push(c);
        }
    }
    concurrency
}

/// `--stream-mib` of output by two writers on every path.
async fn throughput(env: &Env, args: &ClusterArgs) -> Vec<Throughput> {
    let mut throughput = Vec::new();
    let bytes = args.stream_mib << 20;
    let writers = [
        ("dd bs=1M", paths::zeros(args.stream_mib)),
        ("busybox head -c", paths::zeros_by_head(args.stream_mib)),
    ];
    let writers = if args.runs("throughput") {
        &writers[..]
    } else {
        &[]
    };
    for (w, (writer, cmd)) in writers.iter().enumerate() {
        for path in Path::order(1 + w) {
            let t = scenarios::throughput(env, path, writer, cmd, bytes).await;
            eprintln!(
                "bench: {} MiB by {writer} on {path:?}: {:.0} MB/s",
                bytes >> 20,
                t.mb_per_s
            );
            throughput.push(t);
        }
    }
    throughput
}

/// An apiserver restart during streams, then a cut stream on every path (needs `--restart-cmd`).
async fn faults(env: &mut Env, args: &ClusterArgs) -> Result<Option<Faults>> {
    let Some(cmd) = args
        .restart_cmd
        .as_ref()
        .filter(|_| !args.no_faults && args.runs("faults"))
    else {
        return Ok(None);
    };
    let bytes = args.stream_mib << 20;
    let n = 20;
    let (whole, restart_secs) = faults::restart_during_streams(env, n, cmd).await?;
    env.probe.set_pid(apiserver::find_pid(None)?);
    eprintln!("bench: restart during streams: {whole:?} of {n}");
    let mut cuts = Vec::new();
    let pod = &env.pods[1 % env.pods.len()];
    let source = faults::cut_source(&env.pods_api, pod, bytes).await?;
    for path in Path::order(0) {
        let cut = faults::cut_stream(path, &env.pods_api, pod, bytes, &source, "cut").await;
        cuts.push(cut);
    }
    Ok(Some(Faults {
        restart_processes: n,
        restart_whole: whole,
        restart_secs,
        cuts,
    }))
}

/// Where and how the run happened, for the report.
async fn context(rt: &Runtime, env: &Env, args: &ClusterArgs) -> serde_json::Value {
    let version = rt
        .client
        .apiserver_version()
        .await
        .map(|v| v.git_version)
        .unwrap_or_default();
    json!({
        "date": controller_now(),
        "kubernetes": version,
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "pods": env.pods.len(),
        "latency_runtime": format!("{:?}", args.latency_runtime),
        "cpu_request": args.cpu_request(),
        "load": std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim(),
    })
}
