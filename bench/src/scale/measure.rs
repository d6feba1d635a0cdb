//! One driver measured: its start (the first list of thousands of pods), GC ticks with the apiserver's
//! requests counted around them, deletions timed from the DELETE request to the worker's cache, and
//! an apiserver restart followed by ticks, deletions and a count of the requests since it.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use serde::Serialize;

use super::child::{Driver, Kind, Memory, Spec};
use super::proxy::{self, Seen};
use super::requests::{self, Requests};
use super::setup::Scene;
use crate::args::ScaleArgs;

/// How long a worker may take to notice a deletion before it counts as missed.
const NOTICE_LIMIT_MS: u64 = 30_000;

/// Ticks of one window.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Ticks {
    /// Ticks answered.
    pub done: usize,
    /// Ticks that failed (an `error` reply).
    pub failed: usize,
    /// Pods each tick collected.
    pub collected: Vec<usize>,
    /// Each tick's duration in the driver, ms.
    pub ms: Vec<u64>,
    /// Pods in the cache after the last tick.
    pub pods: u64,
    /// Window length, seconds.
    pub secs: f64,
    /// The worker's requests in the window, as the apiserver counted them.
    pub requests: Requests,
    /// The worker's requests in the window, as it sent them.
    pub seen: Seen,
}

/// Deletions timed.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Notices {
    /// From sending DELETE to the pod leaving the worker's cache, ms, sorted.
    pub ms: Vec<f64>,
    /// How long each DELETE call took, ms.
    pub delete_ms: Vec<f64>,
    /// Deletions not noticed within 30 s.
    pub missed: usize,
}

/// After the apiserver restart.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AfterRestart {
    /// How long the restart command took (kill to `/readyz`), seconds.
    pub restart_secs: f64,
    /// Ticks from the restart on.
    pub ticks: Ticks,
    /// Deletions after those ticks.
    pub notices: Notices,
    /// The worker's requests from the restart to the end, as the apiserver counted them (its
    /// counters restart with it, and its FlowSchemas load only after it starts serving).
    pub requests: Requests,
    /// The worker's requests from just before the restart to the end, as it sent them.
    pub seen: Seen,
}

/// One driver's numbers.
#[derive(Debug, Clone, Serialize)]
pub struct DriverResult {
    /// Which driver.
    pub driver: Kind,
    /// Pods in its cache when ready.
    pub pods_at_start: u64,
    /// From the process start to a filled cache, ms (as the driver measured it).
    pub sync_ms: u64,
    /// Requests from the process start to a filled cache, as the apiserver counted them.
    pub start: Requests,
    /// The same, as the driver sent them.
    pub start_seen: Seen,
    /// Memory when ready.
    pub memory_ready: Memory,
    /// GC ticks.
    pub ticks: Ticks,
    /// Deletions.
    pub notices: Notices,
    /// The restart, when a restart command was given.
    pub restart: Option<AfterRestart>,
    /// Memory at the end (its peak is the run's peak).
    pub memory_end: Memory,
}

fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

async fn ticks(d: &mut Driver, scene: &Scene, n: usize, every: Duration) -> Result<Ticks> {
    let before = requests::read(&scene.client).await?;
    let seen_before = scene.proxy.seen();
    let started = Instant::now();
    let mut t = Ticks::default();
    for i in 0..n {
        let next = started + every * (i as u32 + 1);
        d.send("tick").await?;
        let v = d.next(Duration::from_secs(120)).await?;
        if v["event"] == "tick" {
            t.done += 1;
            t.collected
                .push(v["collected"].as_array().map_or(0, |a| a.len()));
            t.ms.push(v["ms"].as_u64().unwrap_or(0));
            t.pods = v["pods"].as_u64().unwrap_or(0);
        } else {
            t.failed += 1;
            eprintln!("scale: tick {i}: {v}");
        }
        tokio::time::sleep_until(next.into()).await;
    }
    t.secs = started.elapsed().as_secs_f64();
    let after = requests::read(&scene.client).await?;
    t.requests = before.until(&after, &scene.schema_prefix);
    t.seen = proxy::since(&seen_before, &scene.proxy.seen());
    Ok(t)
}

async fn notices(d: &mut Driver, scene: &Scene, names: &[String]) -> Result<Notices> {
    let mut n = Notices::default();
    for name in names {
        d.send(&format!("gone {name} {NOTICE_LIMIT_MS}")).await?;
        d.expect("watching", Duration::from_secs(10)).await?;
        let sent = unix_ns();
        let t = Instant::now();
        scene
            .delete(name)
            .await
            .with_context(|| format!("deleting {name}"))?;
        n.delete_ms.push(t.elapsed().as_secs_f64() * 1e3);
        let v = d
            .expect("gone", Duration::from_millis(NOTICE_LIMIT_MS + 10_000))
            .await?;
        let noticed = v["noticed_unix_ns"].as_u64().unwrap_or(0);
        if v["ok"] == true {
            n.ms.push(noticed.saturating_sub(sent) as f64 / 1e6);
        } else {
            n.missed += 1;
            eprintln!("scale: {name}: deletion not noticed within {NOTICE_LIMIT_MS} ms");
        }
    }
    n.ms.sort_by(f64::total_cmp);
    Ok(n)
}

/// Measures one driver on the scene; `victims` are pods it may delete (some before, some after the
/// restart).
pub async fn driver(
    kind: Kind,
    spec: &Spec,
    go_bin: &std::path::Path,
    scene: &Scene,
    args: &ScaleArgs,
    victims: &[String],
) -> Result<DriverResult> {
    let before = requests::read(&scene.client).await?;
    let seen_before = scene.proxy.seen();
    let mut d = Driver::start(kind, spec, go_bin)?;
    let ready = d.expect("ready", Duration::from_secs(180)).await?;
    let start = before.until(&requests::read(&scene.client).await?, &scene.schema_prefix);
    let start_seen = proxy::since(&seen_before, &scene.proxy.seen());
    let memory_ready = d.memory();
    eprintln!(
        "scale: {kind:?} ready with {} pods in {} ms, sent {:?}, RSS {} MiB",
        ready["pods"],
        ready["sync_ms"],
        start_seen,
        memory_ready.rss_kib / 1024
    );
    // The stripped variant is measured for its memory when ready only.
    let (ticks_result, notices_result, restart) = if kind == Kind::RustStripped {
        (Ticks::default(), Notices::default(), None)
    } else {
        phases(kind, &mut d, scene, args, victims).await?
    };
    let memory_end = d.memory();
    d.quit().await?;
    Ok(DriverResult {
        driver: kind,
        pods_at_start: ready["pods"].as_u64().unwrap_or(0),
        sync_ms: ready["sync_ms"].as_u64().unwrap_or(0),
        start,
        start_seen,
        memory_ready,
        ticks: ticks_result,
        notices: notices_result,
        restart,
        memory_end,
    })
}

/// The phases after the cache is ready: GC ticks, deletions noticed, and the restart if asked for.
async fn phases(
    kind: Kind,
    d: &mut Driver,
    scene: &Scene,
    args: &ScaleArgs,
    victims: &[String],
) -> Result<(Ticks, Notices, Option<AfterRestart>)> {
    let every = Duration::from_millis(args.tick_ms);
    let ticks_result = ticks(d, scene, args.ticks, every).await?;
    eprintln!(
        "scale: {kind:?} {} ticks: sent {:?}; collected {:?}",
        ticks_result.done,
        ticks_result.seen,
        ticks_result.collected.iter().sum::<usize>()
    );
    let split = if args.restart_cmd.is_some() {
        victims.len() - victims.len() / 4
    } else {
        victims.len()
    };
    let notices_result = notices(d, scene, &victims[..split]).await?;
    eprintln!(
        "scale: {kind:?} noticed {} deletions (missed {}), max {:.1} ms",
        notices_result.ms.len(),
        notices_result.missed,
        notices_result.ms.last().copied().unwrap_or(0.0)
    );
    let restart = match &args.restart_cmd {
        Some(cmd) => Some(restart(d, scene, cmd, args, &victims[split..]).await?),
        None => None,
    };
    Ok((ticks_result, notices_result, restart))
}

async fn restart(
    d: &mut Driver,
    scene: &Scene,
    cmd: &str,
    args: &ScaleArgs,
    victims: &[String],
) -> Result<AfterRestart> {
    let before = requests::read(&scene.client).await?;
    let seen_before = scene.proxy.seen();
    let t = Instant::now();
    let status = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .stdout(std::process::Stdio::null())
        .status()
        .await
        .context("restart command")?;
    anyhow::ensure!(status.success(), "restart command failed: {status}");
    let restart_secs = t.elapsed().as_secs_f64();
    // The admin client reconnects by itself; give it the same 30 s as everyone else.
    let deadline = Instant::now() + Duration::from_secs(30);
    while requests::read(&scene.client).await.is_err() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let every = Duration::from_millis(args.tick_ms);
    let n = (args.after_restart_secs * 1000 / args.tick_ms.max(1)).max(1) as usize;
    let ticks_result = ticks(d, scene, n, every).await?;
    let notices_result = notices(d, scene, victims).await?;
    let after = requests::read(&scene.client).await?;
    let requests = before.until(&after, &scene.schema_prefix);
    let seen = proxy::since(&seen_before, &scene.proxy.seen());
    eprintln!(
        "scale: after the restart ({restart_secs:.1} s): sent {seen:?}; noticed {} deletions (missed {})",
        notices_result.ms.len(),
        notices_result.missed
    );
    Ok(AfterRestart {
        restart_secs,
        ticks: ticks_result,
        notices: notices_result,
        requests,
        seen,
    })
}
