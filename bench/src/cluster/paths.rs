//! The three ways to run a process in a step pod, measured side by side: through the pod's shim over
//! HTTP to the pod IP, through the same shim by the apiserver's `pods/{name}:7777/proxy` (the
//! bench's Kubernetes credentials, the shim token in `X-Stepshim-Token`), and through the
//! apiserver's `exec` (kube-rs over WebSocket, protocol v5, stdout and stderr read concurrently
//! through buffers raised well above the 1 KiB default).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::AttachParams;
use protocol::{FrameType, SpawnRequest};
use tokio::io::AsyncReadExt;

use client::ShimClient;

/// Silence after which an exec stream is taken as broken (every scenario's processes print at
/// least once a second).
const STALL: Duration = Duration::from_secs(20);

/// Which path. The discriminants index per-path arrays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Path {
    /// Through the shim, straight to the pod IP.
    Shim = 0,
    /// Through apiserver exec.
    Exec = 1,
    /// Through the shim by the apiserver's `pods/proxy`.
    Proxy = 2,
}

impl Path {
    /// Every path, in report order.
    pub const ALL: [Path; 3] = [Path::Shim, Path::Proxy, Path::Exec];

    /// All three in the order pass `pass` runs them; passes rotate which goes first.
    pub fn order(pass: usize) -> [Path; 3] {
        let mut o = Self::ALL;
        o.rotate_left(pass % 3);
        o
    }

    /// Whether the run goes through the shim (and so must never lose a byte or an exit).
    pub fn is_shim(self) -> bool {
        self != Path::Exec
    }
}

/// How one run went.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Exit status (code, or 128 + signal).
    pub status: Option<i32>,
    /// stdout and stderr bytes received.
    pub bytes: u64,
    /// A digest of stdout then stderr (FNV-1a), to check content without keeping it.
    pub digest: u64,
    /// Request to first output byte.
    pub first_byte: Option<Duration>,
    /// Request to exit status.
    pub total: Duration,
}

/// A command writing `mib` MiB of zeros to stdout, 1 MiB per write. Not busybox's `head -c`,
/// which moves 4 KiB per read and write: into a pipe on this machine it managed 153 MB/s (1 GiB in
/// 7.0 s, 4.3 CPU s), below every path it was meant to measure, where `dd bs=1M` took 0.53 s.
pub fn zeros(mib: u64) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        format!("dd if=/dev/zero bs=1048576 count={mib} 2>/dev/null"),
    ]
}

/// The same stream by busybox's `head -c` (4 KiB writes), as earlier runs measured it.
pub fn zeros_by_head(mib: u64) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        format!("head -c {} /dev/zero", mib << 20),
    ]
}

/// The digest output is compared by: XXH3-64 over the stream, fast enough not to slow a GiB stream.
pub type Digest = xxhash_rust::xxh3::Xxh3;

/// Where a process runs: a pod and its shim, reached both ways.
#[derive(Debug, Clone)]
pub struct Pod2 {
    /// Pod name.
    pub name: String,
    /// Its shim at the pod IP.
    pub shim: ShimClient,
    /// Its shim through the apiserver's `pods/proxy`.
    pub proxy: ShimClient,
    /// The shim's token (for building clients through other transports).
    pub token: String,
}

/// Runs `cmd` in `pod` by `path`, giving up after `limit`. Only stdout goes into the digest;
/// stderr is counted in `bytes`.
pub async fn run(
    path: Path,
    pods: &Api<Pod>,
    pod: &Pod2,
    id: &str,
    cmd: &[String],
    limit: Duration,
) -> Result<Outcome> {
    run_as(path, pods, pod, id, cmd, limit, false).await
}

/// Runs `cmd`, whose output nobody reads, in `pod` by `path`: on the shim paths spawn and exit
/// status in one `PUT ?wait=` (what a client that only needs the status sends), on exec the same
/// exchange as [`run`] (exec has no cheaper form: the status comes after the output streams end).
pub async fn run_for_status(
    path: Path,
    pods: &Api<Pod>,
    pod: &Pod2,
    id: &str,
    cmd: &[String],
    limit: Duration,
) -> Result<Outcome> {
    run_as(path, pods, pod, id, cmd, limit, true).await
}

/// [`run`], or with `status_only` [`run_for_status`].
async fn run_as(
    path: Path,
    pods: &Api<Pod>,
    pod: &Pod2,
    id: &str,
    cmd: &[String],
    limit: Duration,
    status_only: bool,
) -> Result<Outcome> {
    let via = |shim| async move {
        if status_only {
            via_shim_wait(shim, id, cmd, limit).await
        } else {
            via_shim(shim, id, cmd).await
        }
    };
    let work = async {
        match path {
            Path::Shim => via(&pod.shim).await,
            Path::Proxy => via(&pod.proxy).await,
            Path::Exec => via_exec(pods, &pod.name, cmd).await,
        }
    };
    tokio::time::timeout(limit, work)
        .await
        .map_err(|_| anyhow!("{path:?} run {id} still going after {limit:?}"))?
}

fn spawn_request(cmd: &[String]) -> SpawnRequest {
    SpawnRequest {
        path: cmd[0].clone(),
        args: cmd[1..].to_vec(),
        ..Default::default()
    }
}

async fn via_shim_wait(
    shim: &ShimClient,
    id: &str,
    cmd: &[String],
    limit: Duration,
) -> Result<Outcome> {
    let start = Instant::now();
    let secs = u32::try_from(limit.as_secs()).unwrap_or(u32::MAX);
    let (p, _) = shim
        .spawn_wait(id, &spawn_request(cmd), secs)
        .await
        .context("spawn and wait")?;
    let out = Outcome {
        status: p.exit.map(|e| e.status),
        total: start.elapsed(),
        ..Outcome::default()
    };
    let _ = shim.delete(id, true).await;
    Ok(out)
}

async fn via_shim(shim: &ShimClient, id: &str, cmd: &[String]) -> Result<Outcome> {
    let start = Instant::now();
    shim.spawn(id, &spawn_request(cmd)).await.context("spawn")?;
    let mut out = Outcome::default();
    let mut fnv = Digest::new();
    let attached = shim
        .attach(id, 0, 20, |kind, data| {
            out.first_byte.get_or_insert_with(|| start.elapsed());
            out.bytes += data.len() as u64;
            if kind == FrameType::Stdout {
                fnv.update(&data);
            }
        })
        .await
        .context("attach")?;
    out.total = start.elapsed();
    out.status = Some(attached.exit.status);
    out.digest = fnv.digest();
    // Free the shim's copy of the output; the measurement is done.
    let _ = shim.delete(id, true).await;
    Ok(out)
}

async fn via_exec(pods: &Api<Pod>, pod: &str, cmd: &[String]) -> Result<Outcome> {
    let start = Instant::now();
    let params = AttachParams::default()
        .container("step")
        .stdin(false)
        .stdout(true)
        .stderr(true)
        .max_stdout_buf_size(1 << 20)
        .max_stderr_buf_size(1 << 20);
    let mut proc = pods
        .exec(pod, cmd.to_vec(), &params)
        .await
        .context("exec")?;
    let stdout = proc
        .stdout()
        .ok_or_else(|| anyhow!("exec without stdout"))?;
    let stderr = proc
        .stderr()
        .ok_or_else(|| anyhow!("exec without stderr"))?;
    let status = proc
        .take_status()
        .ok_or_else(|| anyhow!("exec without status"))?;
    let first = std::sync::Mutex::new(None::<Duration>);
    let read_out = async {
        let mut fnv = Digest::new();
        let n = drain(stdout, 256 * 1024, start, &first, |b| fnv.update(b)).await;
        (n, fnv.digest())
    };
    let read_err = drain(stderr, 64 * 1024, start, &first, |_| {});
    let ((out_n, digest), err_n) = tokio::join!(read_out, read_err);
    // No status when the connection broke: the exit is unknown to this client.
    // When the connection broke, kube-rs may never resolve the status: the exit is then unknown
    // to this client, which is the exec path's failure being measured.
    let status = tokio::time::timeout(Duration::from_secs(5), status)
        .await
        .ok()
        .flatten();
    let joined = tokio::time::timeout(Duration::from_secs(5), proc.join()).await;
    let status = status
        .filter(|_| matches!(joined, Ok(Ok(()))))
        .map(|s| exit_code(&s));
    Ok(Outcome {
        status,
        bytes: out_n + err_n,
        digest,
        first_byte: *first.lock().unwrap_or_else(|e| e.into_inner()),
        total: start.elapsed(),
    })
}

/// Reads `r` in chunks of `buf_len` until it ends, handing each chunk to `each` and noting in
/// `first` when the first byte (of either stream) came; returns the bytes read. A broken
/// connection ends the stream like EOF: what arrived is what counts. kube-rs does not always end
/// the streams when the connection dies, so silence (`STALL`) ends them too.
async fn drain(
    mut r: impl tokio::io::AsyncRead + Unpin,
    buf_len: usize,
    start: Instant,
    first: &std::sync::Mutex<Option<Duration>>,
    mut each: impl FnMut(&[u8]),
) -> u64 {
    let mut n = 0u64;
    let mut buf = vec![0u8; buf_len];
    loop {
        let k = tokio::time::timeout(STALL, r.read(&mut buf))
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or(0);
        if k == 0 {
            return n;
        }
        first
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert_with(|| start.elapsed());
        each(&buf[..k]);
        n += k as u64;
    }
}

/// The exit code in an exec's final Status: 0 on Success, else the `ExitCode` cause.
fn exit_code(s: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Status) -> i32 {
    if s.status.as_deref() == Some("Success") {
        return 0;
    }
    s.details
        .as_ref()
        .and_then(|d| d.causes.as_ref())
        .and_then(|c| c.iter().find(|c| c.reason.as_deref() == Some("ExitCode")))
        .and_then(|c| c.message.as_deref()?.parse().ok())
        .unwrap_or(-1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_round_runs_all_three_paths_and_each_leads_in_turn() {
        let firsts: Vec<Path> = (0..3).map(|r| Path::order(r)[0]).collect();
        assert_eq!(firsts, [Path::Shim, Path::Proxy, Path::Exec]);
        for r in 0..6 {
            let mut o = Path::order(r).map(|p| p as usize);
            o.sort_unstable();
            assert_eq!(o, [0, 1, 2], "pass {r}");
        }
        assert!(Path::Shim.is_shim() && Path::Proxy.is_shim() && !Path::Exec.is_shim());
    }
}
