//! Fault scenarios: kube-apiserver restarted while processes stream on every path, and a big stream
//! whose client connections are cut again and again (through a loopback proxy placed in front of
//! the shim for the direct path and in front of the apiserver for the proxy and exec paths).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use std::time::{Duration, Instant};
use test_support::cutting_proxy;

use anyhow::{Context, Result};
use futures_util::future::join_all;
use serde::Serialize;

use super::paths::{Path, Pod2, run};
use super::scenarios::{Env, ticker};

/// What the fault scenarios found.
#[derive(Debug, Clone, Serialize)]
pub struct Faults {
    /// Processes streaming on each path while the apiserver restarted.
    pub restart_processes: usize,
    /// Of those, how many arrived whole with exit 0, by path.
    pub restart_whole: Vec<(Path, usize)>,
    /// Seconds the restart took (stop to ready).
    pub restart_secs: f64,
    /// The cut stream, by path.
    pub cuts: Vec<CutStream>,
}

/// One stream through a cutting proxy.
#[derive(Debug, Clone, Serialize)]
pub struct CutStream {
    /// Path.
    pub path: Path,
    /// Bytes the process wrote to stdout.
    pub expected: u64,
    /// Bytes the client received.
    pub received: u64,
    /// Bytes lost (expected but not received).
    pub lost: u64,
    /// Bytes received more than once.
    pub repeated: u64,
    /// Connections the proxy cut.
    pub cuts: u64,
    /// Whether the client saw the exit status.
    pub exit_seen: bool,
    /// Whether what arrived is the stream itself, byte for byte (its digest matches an uncut read
    /// of the same random bytes): a skip and a repeat of equal size do not cancel out here.
    pub intact: bool,
}

/// The stream every cut run sends: `bytes` random bytes written once to a file in `pod`, read
/// whole by `cat` on the direct path without a proxy for the digest the cut runs must match.
pub async fn cut_source(
    pods_api: &kube::Api<k8s_openapi::api::core::v1::Pod>,
    pod: &Pod2,
    bytes: u64,
) -> Result<(Vec<String>, u64)> {
    let file = "/tmp/stepshim-bench-cut.bin";
    let make = vec![
        "sh".to_owned(),
        "-c".to_owned(),
        format!("head -c {bytes} /dev/urandom > {file}"),
    ];
    let limit = Duration::from_secs(300);
    let made = run(Path::Shim, pods_api, pod, "cut-make", &make, limit).await?;
    anyhow::ensure!(made.status == Some(0), "writing {file} in the pod failed");
    let cmd = vec!["cat".to_owned(), file.to_owned()];
    let read = run(Path::Shim, pods_api, pod, "cut-reference", &cmd, limit).await?;
    anyhow::ensure!(
        read.status == Some(0) && read.bytes == bytes,
        "reading {file} back gave {} of {bytes} bytes",
        read.bytes
    );
    Ok((cmd, read.digest))
}

impl CutStream {
    /// Whether the stream proves nothing or came out wrong: never cut, or a byte lost, repeated or
    /// changed, or the exit status lost.
    pub fn failed(&self) -> bool {
        self.cuts == 0 || self.lost + self.repeated > 0 || !self.exit_seen || !self.intact
    }
}

impl Faults {
    /// The markdown part of the report.
    pub fn markdown(&self) -> String {
        let mut s = "| fault | path | result |\n|---|---|---|\n".to_string();
        for (p, whole) in &self.restart_whole {
            s += &format!(
                "| apiserver restart ({:.1} s) during {} streams | {p:?} | {whole} of {} whole with exit 0 |\n",
                self.restart_secs, self.restart_processes, self.restart_processes
            );
        }
        for c in &self.cuts {
            s += &format!(
                "| {} cuts during a {} MiB stream | {:?} | {} bytes lost, {} repeated, content {}, exit status {} |\n",
                c.cuts,
                c.expected >> 20,
                c.path,
                c.lost,
                c.repeated,
                if c.intact { "intact" } else { "changed" },
                if c.exit_seen { "seen" } else { "lost" }
            );
        }
        s
    }
}

/// Restarts the apiserver (with `restart`, a command) while `n` processes stream on each path.
/// Returns how many arrived whole per path, and how long the restart command took.
pub async fn restart_during_streams(
    env: &Env,
    n: usize,
    restart: &str,
) -> Result<(Vec<(Path, usize)>, f64)> {
    let lines = 15;
    let work = join_all((0..3 * n).map(|i| {
        let path = Path::ALL[i % 3];
        let pod = &env.pods[i % env.pods.len()];
        async move {
            let (cmd, want) = ticker(lines, &format!("r{i}"));
            let limit = Duration::from_secs(u64::from(lines) + 120);
            let ok = matches!(run(path, &env.pods_api, pod, &format!("restart-{i}"), &cmd, limit).await,
                Ok(o) if o.status == Some(0) && o.digest == want);
            (path, ok)
        }
    }));
    let restarter = async {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let t = Instant::now();
        // Its output goes to stderr: stdout carries the report.
        let status = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(format!("{restart} >&2"))
            .status()
            .await;
        (status, t.elapsed().as_secs_f64())
    };
    let (results, (status, secs)) = tokio::join!(work, restarter);
    status
        .context("running the restart command")?
        .success()
        .then_some(())
        .context("the restart command failed")?;
    let count = |p: Path| results.iter().filter(|(q, ok)| *q == p && *ok).count();
    Ok((Path::ALL.iter().map(|p| (*p, count(*p))).collect(), secs))
}

/// Streams `bytes` of stdout (`source`: the command and its stream's digest, [`cut_source`]) on
/// `path` through a proxy that cuts each connection after a sixteenth to a quarter of them, so a
/// stream meets several cuts.
pub async fn cut_stream(
    path: Path,
    pods_api: &kube::Api<k8s_openapi::api::core::v1::Pod>,
    pod: &Pod2,
    bytes: u64,
    source: &(Vec<String>, u64),
    id: &str,
) -> CutStream {
    let (cmd, want) = source;
    let (received, exit_seen, intact, cuts) = match through_proxy(path, pods_api, pod, bytes).await
    {
        Ok((api, pod, cuts)) => {
            let r = run(path, &api, &pod, id, cmd, Duration::from_secs(900)).await;
            let (rec, seen, same) = r
                .map(|o| (o.bytes, o.status == Some(0), o.digest == *want))
                .unwrap_or((0, false, false));
            (rec, seen, same, cuts.load(Ordering::Relaxed))
        }
        Err(e) => {
            eprintln!("bench: no cutting proxy for {path:?}: {e:#}");
            (0, false, false, 0)
        }
    };
    CutStream {
        path,
        expected: bytes,
        received,
        lost: bytes.saturating_sub(received),
        repeated: received.saturating_sub(bytes),
        cuts,
        exit_seen,
        intact,
    }
}

/// The exec API and the pod, aimed through a cutting proxy: in front of the pod's shim for the
/// direct path, in front of the apiserver (the client's connection) for the proxy and exec paths.
pub(super) async fn through_proxy(
    path: Path,
    pods_api: &kube::Api<k8s_openapi::api::core::v1::Pod>,
    pod: &Pod2,
    bytes: u64,
) -> Result<(
    kube::Api<k8s_openapi::api::core::v1::Pod>,
    Pod2,
    Arc<AtomicU64>,
)> {
    match path {
        Path::Shim => {
            // The proxy forwards bytes, TLS or not: the client keeps its scheme and pin.
            let (scheme, target) = pod.shim.base().split_once("://").unwrap_or(("http", ""));
            let (proxy, cuts) = cutting_proxy(target.to_owned(), bytes / 16, bytes / 4).await?;
            let shim = pod.shim.with_base(&format!("{scheme}://{proxy}"));
            let pod = Pod2 {
                shim,
                ..pod.clone()
            };
            Ok((pods_api.clone(), pod, cuts))
        }
        Path::Proxy | Path::Exec => {
            let mut config = super::ADMIN_CONFIG.get().context("admin config")?.clone();
            let server = config
                .cluster_url
                .authority()
                .context("apiserver address")?
                .to_string();
            let (proxy, cuts) = cutting_proxy(server, bytes / 16, bytes / 4).await?;
            config.cluster_url = format!("https://{proxy}").parse()?;
            // The proxy listens on loopback like the apiserver, so the certificate's 127.0.0.1
            // still fits.
            let transport = Arc::new(controller::via::ApiProxy::new(&config)?);
            let proxy = client::ShimClient::with_transport(
                pod.proxy.base(),
                Some(pod.token.clone()),
                client::TokenHeader::Proxy,
                transport,
            )?;
            let client = kube::Client::try_from(config)?;
            let api = kube::Api::namespaced(client, pods_api.namespace().unwrap_or("default"));
            Ok((
                api,
                Pod2 {
                    proxy,
                    ..pod.clone()
                },
                cuts,
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_stream_fails_uncut_changed_short_or_without_its_status() {
        let whole = CutStream {
            path: Path::Shim,
            expected: 64 << 20,
            received: 64 << 20,
            lost: 0,
            repeated: 0,
            cuts: 5,
            exit_seen: true,
            intact: true,
        };
        assert!(!whole.failed());
        let variants = [
            CutStream {
                cuts: 0,
                ..whole.clone()
            },
            CutStream {
                intact: false,
                ..whole.clone()
            },
            CutStream {
                lost: 1,
                ..whole.clone()
            },
            CutStream {
                repeated: 1,
                ..whole.clone()
            },
            CutStream {
                exit_seen: false,
                ..whole.clone()
            },
        ];
        for v in variants {
            assert!(v.failed(), "{v:?}");
        }
    }
}
