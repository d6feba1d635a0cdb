//! How the soak drives one step through a shim, as a controller would: requests retried (the same
//! process id, so never a second process) while the shim or the apiserver in front of it is briefly
//! away, the output followed to its exit frame and resumed by offset after every cut, and the pod's
//! own end raced against it, so a step whose pod is deleted or fails ends with the pod's reason
//! instead of waiting.

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use bytes::Bytes;
use client::{ClientError, ShimClient};
use controller::progress::{Progress, progress};
use controller::runtime::Runtime;
use protocol::{FrameType, SpawnRequest};

use crate::cluster::paths::Digest;

/// How long a single request is retried while its peer is away: a `restart-apiserver --kill` takes
/// about 4 s, a graceful one about 64 s.
const RETRY_FOR: Duration = Duration::from_secs(90);

/// Broken connections in a row, without progress, after which an attach gives up: with the
/// client's backoff (at most 1.28 s) about 75 s, longer than a graceful apiserver restart.
const ATTACH_RETRIES: u32 = 60;

/// How long a step may still take to end once its pod is ending: the shim's grace (10 s) before it
/// kills what is left and ends its streams, and room for the pod to go.
const POD_END_GRACE: Duration = Duration::from_secs(45);

/// Connections resumed by offset in all follows so far.
pub static RESUMES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Calls `f` until it succeeds, a non-transient error comes, or [`RETRY_FOR`] has passed.
pub async fn retry<T, F, Fut>(what: &str, mut f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ClientError>>,
{
    let start = Instant::now();
    let mut wait = Duration::from_millis(100);
    loop {
        match f().await {
            Ok(v) => return Ok(v),
            Err(e) if (e.is_transient() || e.is_proxy_refusal()) && start.elapsed() < RETRY_FOR => {
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(2));
            }
            Err(e) => return Err(anyhow!("{what}: {e}")),
        }
    }
}

/// `sh -c script` as a spawn request.
pub fn sh(script: &str, stdin: bool) -> SpawnRequest {
    SpawnRequest {
        path: "/bin/sh".into(),
        args: vec!["-c".into(), script.into()],
        stdin,
        ..Default::default()
    }
}

/// Starts `spec` as `id`, retried while the shim is away.
pub async fn spawn(shim: &ShimClient, id: &str, spec: &SpawnRequest) -> Result<()> {
    retry("spawn", || shim.spawn(id, spec)).await.map(|_| ())
}

/// Forgets process `id` in the shim (its output and spill file with it), retried while it is away.
pub async fn forget(shim: &ShimClient, id: &str) -> Result<()> {
    retry("delete", || shim.delete(id, true)).await
}

/// What a followed step produced.
#[derive(Default)]
pub struct Collected {
    /// Digest of stdout.
    pub digest: Digest,
    /// Bytes of stdout.
    pub out_bytes: u64,
    /// Bytes of stderr.
    pub err_bytes: u64,
    /// stdout itself, when asked for (small outputs only).
    pub text: Option<Vec<u8>>,
}

impl Collected {
    fn add(&mut self, kind: FrameType, data: &Bytes) {
        if kind == FrameType::Stdout {
            self.digest.update(data);
            self.out_bytes += data.len() as u64;
            if let Some(t) = &mut self.text {
                t.extend_from_slice(data);
            }
        } else {
            self.err_bytes += data.len() as u64;
        }
    }
}

/// How a followed step ended.
pub struct Step {
    /// Its output.
    pub out: Collected,
    /// The exit status, or why none came.
    pub status: Result<i32, String>,
    /// Why the pod ended, when it did while the step ran.
    pub pod_end: Option<String>,
    /// Seconds from the start of the follow to its end.
    pub secs: f64,
}

/// Follows `id` in `pod` (name, for its end) from offset 0 to its exit, up to `limit`; keeps the
/// stdout text when `keep_text`. A pod that ends meanwhile gives the step [`POD_END_GRACE`] more.
pub async fn follow(
    rt: &Runtime,
    pod: &str,
    shim: &ShimClient,
    id: &str,
    keep_text: bool,
    limit: Duration,
) -> Step {
    let started = Instant::now();
    let mut out = Collected {
        text: keep_text.then(Vec::new),
        ..Default::default()
    };
    let (result, mut pod_end) = {
        let attach = shim.attach(id, 0, ATTACH_RETRIES, |k, d| out.add(k, &d));
        tokio::pin!(attach);
        tokio::select! {
            r = &mut attach => (r.map_err(|e| e.to_string()), None),
            reason = wait_pod_end(rt, pod) => {
                let r = match tokio::time::timeout(POD_END_GRACE, &mut attach).await {
                    Ok(r) => r.map_err(|e| e.to_string()),
                    Err(_) => Err(format!("no exit {POD_END_GRACE:?} after the pod ended")),
                };
                (r, Some(reason))
            }
            _ = tokio::time::sleep(limit) => (Err(format!("no exit after {limit:?}")), None),
        }
    };
    if pod_end.is_none() {
        pod_end = ended(rt, pod);
    }
    let resumes = result.as_ref().map_or(0, |a| a.resumes);
    RESUMES.fetch_add(u64::from(resumes), std::sync::atomic::Ordering::Relaxed);
    Step {
        out,
        status: result.map(|a| a.exit.status),
        pod_end,
        secs: started.elapsed().as_secs_f64(),
    }
}

/// Resolves with the pod's reason once pod `name` is ending (checked every 250 ms in the cache).
async fn wait_pod_end(rt: &Runtime, name: &str) -> String {
    loop {
        if let Some(r) = ended(rt, name) {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Why pod `name` ended, if it has: gone from the runtime's cache, being deleted, or failed.
pub fn ended(rt: &Runtime, name: &str) -> Option<String> {
    let pods = rt.pods();
    let Some(pod) = pods
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(name))
    else {
        return Some("pod deleted (gone)".into());
    };
    if let Some(ts) = &pod.metadata.deletion_timestamp {
        return Some(format!("pod deleted (deletionTimestamp {})", ts.0));
    }
    match progress(Some(pod)) {
        Progress::Failed { reason, message } => Some(format!("pod failed: {reason} ({message})")),
        _ => None,
    }
}

/// The digest of `bytes` bytes of `word` and a newline repeated, as `yes WORD | head -c BYTES`
/// writes them.
pub fn pattern_digest(word: &str, bytes: u64) -> u64 {
    let line = format!("{word}\n");
    let chunk = line.repeat((65536 / line.len()).max(1));
    let mut d = Digest::new();
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        d.update(&chunk.as_bytes()[..n]);
        left -= n as u64;
    }
    d.digest()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pattern_digest_matches_the_bytes_themselves() {
        let word = "soak-7";
        let text: Vec<u8> = format!("{word}\n")
            .repeat(100_000)
            .into_bytes()
            .into_iter()
            .take(300_001)
            .collect();
        let mut d = Digest::new();
        d.update(&text);
        assert_eq!(pattern_digest(word, 300_001), d.digest());
        assert_ne!(pattern_digest(word, 300_000), d.digest());
    }
}
