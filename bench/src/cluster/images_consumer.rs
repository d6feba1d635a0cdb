//! The consuming step of the `images` scenario (`images_ways.rs`): its pod spec, the wait until
//! its shim answers, its first line of output, and its image removed from the node afterwards.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use client::ShimClient;
use controller::podspec::{Delivery, StepSpec};
use controller::runtime::Runtime;
use protocol::{FrameType, SpawnRequest};

use crate::args::ClusterArgs;

/// The consuming step: `image`, the shim from the bench's shim image.
pub fn consumer_spec(args: &ClusterArgs, name: &str, image: &str) -> StepSpec {
    let mut spec = StepSpec::new(
        name,
        image,
        Delivery::InitContainer {
            image: args.shim_image.clone(),
        },
    );
    spec.build = Some("bench-images".into());
    spec.cpu_request = args.cpu_request().map(str::to_owned);
    spec.env.extend(args.pod_env.iter().cloned());
    spec
}

/// When the consumer's shim first answered, when its first output came, and what it printed.
pub struct Seen {
    /// When its shim first answered.
    pub answered: Instant,
    /// When its first output arrived.
    pub first: Instant,
    /// What it printed.
    pub line: String,
}

/// Waits until the consumer's shim answers, then runs `cat /etc/marker` in it.
pub async fn first_line(rt: &Runtime, consumer: &str) -> Result<Seen> {
    let shim = answering(rt, consumer).await?;
    let answered = Instant::now();
    let spec = SpawnRequest {
        path: "/bin/cat".into(),
        args: vec!["/etc/marker".into()],
        ..Default::default()
    };
    shim.spawn("marker", &spec)
        .await
        .context("spawn in the consumer")?;
    let (mut first, mut out) = (None, Vec::new());
    shim.attach("marker", 0, 5, |kind, data| {
        if kind == FrameType::Stdout {
            first.get_or_insert_with(Instant::now);
            out.extend_from_slice(&data);
        }
    })
    .await?;
    Ok(Seen {
        answered,
        first: first.context("the consumer printed nothing")?,
        line: String::from_utf8_lossy(&out).trim().to_owned(),
    })
}

/// The consumer's shim once it answers: asked every 50 ms from when the pod has an address (its
/// readiness probe runs once a second), or when the pod is ready, whichever comes first. A pod
/// that fails (ErrImagePull) ends the wait with the kubelet's reason.
async fn answering(rt: &Runtime, name: &str) -> Result<ShimClient> {
    let ready = rt.wait_ready(name, Duration::from_secs(300), |_| {});
    let early = async {
        loop {
            let ip = rt
                .pod(name)
                .and_then(|p| p.status.as_ref().and_then(|s| s.pod_ip.clone()));
            if let Some(ip) = ip
                && let Ok(s) = rt.shim_at(name, &ip)
                && s.healthz().await.is_ok()
            {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::select! {
        r = ready => Ok(rt.shim_at(name, &r?)?),
        s = early => Ok(s),
    }
}

/// Removes `image` from the node's containerd (`ctr images rm`, with `--containerd-sock`), so the
/// trees of a long run do not pile up there; its content goes once its pod's containers are gone.
/// Best effort: the next handoff's tree is new whether or not this worked.
pub async fn forget_image(args: &ClusterArgs, image: &str) {
    let Some(sock) = &args.containerd_sock else {
        return;
    };
    let status = tokio::process::Command::new("ctr")
        .arg("-a")
        .arg(sock)
        .args(["-n", "k8s.io", "images", "rm", image])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .await;
    if !status.as_ref().is_ok_and(|s| s.success()) {
        eprintln!("bench: could not remove {image} from containerd ({status:?})");
    }
}
