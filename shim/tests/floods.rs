//! Connection floods without a token, against the real binary on loopback: thousands of
//! connections sending header lines slowly, and thousands of idle connections beyond the cap.
//! Throughout, every `/healthz` and every authenticated spawn must answer (within 5 s each) and
//! the median of each within a second, the shim's RSS (from `/proc/<pid>/status`) must stay under
//! 64 MiB and its descriptors under the cap. A starved shim fails most probes; the median rather
//! than the worst keeps one scheduling stall of a loaded machine from failing the test.
#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{Shim, sh};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The default connection cap.
const CAP: usize = 1024;

fn status_kib(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
        .unwrap()
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// `GET /healthz` on a new connection, with a deadline: the time it took.
async fn healthz(addr: &str) -> Duration {
    let started = Instant::now();
    let answer = tokio::time::timeout(Duration::from_secs(5), async {
        let mut s = TcpStream::connect(addr).await?;
        let connected = started.elapsed();
        if connected > Duration::from_millis(200) {
            eprintln!("slow connect: {connected:?}");
        }
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: shim\r\nConnection: close\r\n\r\n")
            .await?;
        let mut resp = Vec::new();
        s.read_to_end(&mut resp).await?;
        Ok::<_, std::io::Error>(resp)
    })
    .await;
    let resp = answer.expect("healthz timed out").expect("healthz failed");
    assert!(
        resp.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&resp)
    );
    started.elapsed()
}

/// What the probes saw: every probe's `/healthz` and spawn times, peak RSS and descriptors.
#[derive(Debug, Default)]
struct Probes {
    healthz: Vec<Duration>,
    spawn: Vec<Duration>,
    rss_kib: u64,
    fds: usize,
}

/// Probes the shim every 200 ms until `until`.
async fn probe(shim: &Shim, until: Instant, tag: &str) -> Probes {
    let pid = shim.pid();
    let mut seen = Probes::default();
    let mut i = 0;
    while Instant::now() < until {
        seen.healthz.push(healthz(&shim.addr).await);
        let started = Instant::now();
        tokio::time::timeout(
            Duration::from_secs(5),
            shim.client.spawn(&format!("{tag}{i}"), &sh("exit 0")),
        )
        .await
        .expect("spawn timed out")
        .expect("spawn failed");
        seen.spawn.push(started.elapsed());
        seen.rss_kib = seen.rss_kib.max(status_kib(pid, "VmRSS:"));
        seen.fds = seen.fds.max(open_fds(pid));
        i += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    seen
}

/// Raises the test's soft open-file limit to its hard limit, which must leave room for the flood.
fn raise_own_nofile() {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    let hard: u64 = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(4))
        .and_then(|v| v.parse().ok())
        .unwrap_or(u64::MAX);
    let hard = hard.min(1 << 20);
    assert!(
        hard >= 8192,
        "the open-file hard limit {hard} is too low for the flood"
    );
    let ok = std::process::Command::new("prlimit")
        .args(["--pid", &std::process::id().to_string()])
        .arg(format!("--nofile={hard}:{hard}"))
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "cannot raise the test's open-file limit");
}

/// The median and the worst of `v` (not empty).
fn median_and_worst(v: &[Duration]) -> (Duration, Duration) {
    let mut v = v.to_vec();
    v.sort();
    (v[v.len() / 2], v[v.len() - 1])
}

fn check(what: &str, seen: &Probes) {
    let probes = seen.healthz.len();
    assert!(probes >= 5, "{what}: too few probes");
    let (healthz, healthz_worst) = median_and_worst(&seen.healthz);
    let (spawn, spawn_worst) = median_and_worst(&seen.spawn);
    eprintln!(
        "{what}: healthz median {healthz:?} worst {:?}, spawn median {spawn:?} worst {:?}, peak RSS {} KiB, peak fds {}, {} probes",
        healthz_worst, spawn_worst, seen.rss_kib, seen.fds, probes
    );
    assert!(healthz < Duration::from_secs(1), "{what}: {seen:?}");
    assert!(spawn < Duration::from_secs(1), "{what}: {seen:?}");
    assert!(seen.rss_kib < 64 * 1024, "{what}: {seen:?}");
    assert!(seen.fds < CAP + 200, "{what}: {seen:?}");
    // The flood reached the shim: it held connections up to its cap at some point.
    assert!(
        seen.fds > CAP * 3 / 4,
        "{what}: the flood never filled the cap: {seen:?}"
    );
}

/// One attacker connection at a time per task, reconnecting when the shim closes it, until `stop`.
async fn slow_headers(addr: String, stop: Arc<AtomicBool>, sent: Arc<AtomicU64>) {
    let line = format!("X-Pad: {}\r\n", "a".repeat(3800));
    for _ in 0..50 {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let Ok(mut s) = TcpStream::connect(&addr).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        if s.write_all(b"GET /v1/info HTTP/1.1\r\nHost: shim\r\n")
            .await
            .is_err()
        {
            continue;
        }
        // Up to 100 lines of 3.8 KB, one a second: 380 KB of header, never finished.
        for _ in 0..100 {
            if stop.load(Ordering::Relaxed) || s.write_all(line.as_bytes()).await.is_err() {
                break;
            }
            sent.fetch_add(line.len() as u64, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(1000)).await;
        }
    }
}

/// Holds idle connections, opening a new one when the shim closes one (at most 20 times).
async fn idle(addr: String, stop: Arc<AtomicBool>, open: Arc<AtomicU64>) {
    for _ in 0..20 {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let Ok(mut s) = TcpStream::connect(&addr).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        open.fetch_add(1, Ordering::Relaxed);
        let mut b = [0u8; 1];
        // Ends when the shim closes the connection, or at the stop.
        let _ = tokio::time::timeout(Duration::from_secs(15), s.read(&mut b)).await;
        open.fetch_sub(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The attackers' own runtime on its own thread, so that their load does not delay the probes'
/// side of the measurement.
fn attacker_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floods_of_slow_and_idle_connections_leave_the_shim_serving() {
    raise_own_nofile();
    let attackers = attacker_runtime();

    // 3,000 connections, each sending header lines slowly and never finishing.
    let shim = Shim::start_with(&[("STEPSHIM_LOG", "info")], None);
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..3000)
        .map(|_| attackers.spawn(slow_headers(shim.addr.clone(), stop.clone(), sent.clone())))
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let seen = probe(&shim, Instant::now() + Duration::from_secs(6), "slow").await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let sent = sent.load(Ordering::Relaxed);
    eprintln!("slow headers: {} MiB sent", sent >> 20);
    // At least one header line from each of the 3,000 on average.
    assert!(
        sent >= 3000 * 3800,
        "the slow headers were not sent: {sent} bytes"
    );
    check("3,000 slow-header connections", &seen);
    drop(shim);

    // 4,100 idle connections, beyond the cap.
    let shim = Shim::start_with(&[("STEPSHIM_LOG", "info")], None);
    let stop = Arc::new(AtomicBool::new(false));
    let open = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..4100)
        .map(|_| attackers.spawn(idle(shim.addr.clone(), stop.clone(), open.clone())))
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let held = open.load(Ordering::Relaxed);
    eprintln!("idle: {held} connections open");
    assert!(
        held as usize > CAP,
        "only {held} idle connections were open"
    );
    let seen = probe(&shim, Instant::now() + Duration::from_secs(6), "idle").await;
    stop.store(true, Ordering::Relaxed);
    check("4,100 idle connections", &seen);
    drop(shim);
    for t in tasks {
        t.await.unwrap();
    }
    attackers.shutdown_background();
}
