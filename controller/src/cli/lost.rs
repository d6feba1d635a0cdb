//! A node lost under a followed process: its kubelet, containerd or network gone while the apiserver
//! still shows the pod Running (until the node controller's grace period, and its pods' tolerations,
//! five minutes by default). While `run` or `attach` follows a process, the pod's shim is asked for
//! `/v1/info` every [`PROBE_EVERY`]; once no probe has been answered for the configured time the
//! follow ends with [`NodeLost`], naming the node.

use std::time::{Duration, Instant};

use client::ShimClient;

/// How often the shim is probed, and how long a probe may take, at most: a quarter of the time it
/// may be silent when that is shorter.
const PROBE_EVERY: Duration = Duration::from_secs(5);
const PROBE_TIMEOUT: Duration = Duration::from_secs(4);

/// What to watch: the pod, its node, and how long the shim may be silent.
#[derive(Debug, Clone)]
pub struct Watch {
    pub pod: String,
    pub node: String,
    pub after: Duration,
}

/// The error of a follow whose pod's node is lost.
#[derive(Debug)]
pub struct NodeLost {
    pub pod: String,
    pub node: String,
    pub silent: Duration,
}

impl std::fmt::Display for NodeLost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "pod {} on node {}: its shim has answered nothing for {} s; the node is lost",
            self.pod,
            self.node,
            self.silent.as_secs()
        )
    }
}

impl std::error::Error for NodeLost {}

impl Watch {
    /// Returns once the shim has answered no probe for `after` (never with `after` zero).
    pub async fn lost(&self, shim: &ShimClient) -> NodeLost {
        if self.after.is_zero() {
            return std::future::pending().await;
        }
        let every = PROBE_EVERY.min(self.after / 4);
        let timeout = PROBE_TIMEOUT.min(self.after / 4);
        let mut answered = Instant::now();
        loop {
            tokio::time::sleep(every).await;
            let probe = tokio::time::timeout(timeout, shim.info()).await;
            if matches!(probe, Ok(Ok(_))) {
                answered = Instant::now();
            } else if answered.elapsed() >= self.after {
                return NodeLost {
                    pod: self.pod.clone(),
                    node: self.node.clone(),
                    silent: answered.elapsed(),
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use test_support::shim::Shim;

    fn watch(after: Duration) -> Watch {
        Watch {
            pod: "step".into(),
            node: "node-b".into(),
            after,
        }
    }

    /// A shim stopped with SIGSTOP (connections accepted by the kernel, answered by nobody) is a
    /// lost node within `after` and a probe; one that answers is not, however long it runs.
    #[tokio::test]
    async fn a_silent_shim_is_a_lost_node_and_an_answering_one_is_not() {
        let shim = Shim::start();
        let answering = tokio::time::timeout(
            Duration::from_secs(4),
            watch(Duration::from_secs(2)).lost(&shim.client),
        )
        .await;
        assert!(
            answering.is_err(),
            "an answering shim taken for lost: {answering:?}"
        );
        let signal = |sig: &str| {
            let ok = std::process::Command::new("kill")
                .args([sig, &shim.pid().to_string()])
                .status()
                .unwrap()
                .success();
            assert!(ok, "kill {sig}");
        };
        signal("-STOP");
        let start = Instant::now();
        let lost = tokio::time::timeout(
            Duration::from_secs(10),
            watch(Duration::from_secs(2)).lost(&shim.client),
        )
        .await;
        signal("-CONT");
        let lost = lost.expect("a stopped shim not taken for lost within 10 s");
        assert!(
            start.elapsed() < Duration::from_secs(4),
            "took {:?}",
            start.elapsed()
        );
        assert!(lost.to_string().contains("on node node-b"), "{lost}");
    }
}
