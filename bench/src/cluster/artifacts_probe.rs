//! What the artifact scenario (`artifacts.rs`) reads around each copy: a shell line run in a pod
//! through its shim, a digest of a tree's files, the CPU seconds of a pod's shim, of the controller
//! and of its children, and the bytes on the host's side of the pod bridge.

use anyhow::{Context, Result, bail};
use client::ShimClient;
use protocol::{FrameType, SpawnRequest};

/// The host's side of the pod bridge (tests/cluster's CNI configuration).
const BRIDGE: &str = "cni0";

/// A shell line printing one digest over every file's SHA-256 under `dir`, in name order.
pub fn digest_of(dir: &str) -> String {
    format!("cd {dir} && find . -type f | sort | xargs sha256sum | sha256sum | cut -d' ' -f1")
}

/// Runs `sh -c script` in a pod through its shim; its stdout, or an error with its stderr.
pub async fn sh(shim: &ShimClient, script: &str) -> Result<String> {
    let id = format!("art-{:08x}", rand::random::<u32>());
    let spec = SpawnRequest {
        path: "/bin/sh".into(),
        args: vec!["-c".into(), script.into()],
        ..Default::default()
    };
    shim.spawn(&id, &spec).await.context("spawn")?;
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let attached = shim
        .attach(&id, 0, 20, |kind, data| {
            if kind == FrameType::Stdout {
                out.extend_from_slice(&data);
            } else {
                err.extend_from_slice(&data);
            }
        })
        .await?;
    let _ = shim.delete(&id, true).await;
    if attached.exit.status != 0 {
        bail!(
            "`{script}` exited {}: {}",
            attached.exit.status,
            String::from_utf8_lossy(&err)
        );
    }
    Ok(String::from_utf8_lossy(&out).trim().to_owned())
}

/// CPU seconds a pod's shim has used: its PID 1's `/proc/1/stat`, read through the shim itself.
pub async fn shim_cpu(shim: &ShimClient) -> Result<f64> {
    let stat = sh(shim, "cat /proc/1/stat").await?;
    Ok(crate::procfs::stat_cpu_secs(&stat).unwrap_or(0.0))
}

/// Bytes received plus sent by the host on the pod bridge, if there is one.
pub fn bridge_bytes() -> Option<u64> {
    let read = |what: &str| -> Option<u64> {
        std::fs::read_to_string(format!("/sys/class/net/{BRIDGE}/statistics/{what}"))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    Some(read("rx_bytes")? + read("tx_bytes")?)
}
