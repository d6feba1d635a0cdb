//! Waiting for a step pod to be ready. The pod's Ready condition comes from the kubelet's readiness
//! probe, which runs once a second (its shortest period) and reaches the controller only after the
//! kubelet has written the pod's status and the watch has delivered it: 1 to 2 s after the shim
//! first answers. So once the pod has an IP the wait also asks the shim's `/healthz` itself (TLS
//! pinned to the pod's key when the pod serves TLS) every [`PROBE_INTERVAL`], and the first answer
//! makes the pod ready. The watch still ends the wait too: a pod that fails, or becomes Ready
//! while its IP cannot be reached from here, is seen as before. A runtime that reaches shims only
//! through the apiserver ([`Via::Proxy`]) waits for the condition alone.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use super::{Runtime, RuntimeError};
use crate::progress::{Progress, failing_container, progress};
use crate::via::Via;
use client::ShimClient;

/// How often the wait asks the shim of a pod with an IP whether it serves.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(50);

/// How long one of those attempts may take.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

impl Runtime {
    /// Waits until pod `name` is ready and returns its IP, reporting each change of progress:
    /// its Ready condition is true, or its shim answered `/healthz` at the pod IP.
    pub async fn wait_ready(
        &self,
        name: &str,
        timeout: Duration,
        mut report: impl FnMut(&Progress),
    ) -> Result<String, RuntimeError> {
        let answered = {
            let watched = self.wait_condition(name, timeout, &mut report);
            tokio::select! {
                result = watched => return result,
                ip = self.shim_answers(name) => ip,
            }
        };
        report(&Progress::Ready(answered.clone()));
        Ok(answered)
    }

    /// The wait on the pod's status alone: its Ready condition, or the reason it never will be.
    async fn wait_condition(
        &self,
        name: &str,
        timeout: Duration,
        report: &mut impl FnMut(&Progress),
    ) -> Result<String, RuntimeError> {
        let mut last = Progress::Unknown;
        let result = self
            .watch
            .wait_for(name, timeout, |pod| {
                let p = progress(pod);
                if p != last {
                    report(&p);
                    last = p.clone();
                }
                match p {
                    Progress::Ready(ip) => Some(Ok(ip)),
                    Progress::Failed { reason, message } => Some(Err(RuntimeError::PodFailed {
                        name: name.to_owned(),
                        reason,
                        container: pod.and_then(failing_container),
                        // One line: a kubelet message may carry a runtime's multi-line error.
                        message: message.split_whitespace().collect::<Vec<_>>().join(" "),
                    })),
                    _ => None,
                }
            })
            .await;
        result.unwrap_or_else(|| {
            Err(RuntimeError::Timeout {
                name: name.to_owned(),
                waited: timeout,
                last: last.to_string(),
            })
        })
    }

    /// The IP of pod `name` once its shim answers there; never, for a proxy-only runtime.
    async fn shim_answers(&self, name: &str) -> String {
        if self.via == Via::Proxy {
            return std::future::pending().await;
        }
        let mut client: Option<(String, ShimClient)> = None;
        loop {
            if let Some(ip) = self.watch.get(name).as_deref().and_then(probeable_ip) {
                if client.as_ref().is_none_or(|(at, _)| *at != ip) {
                    client = self.shim_at(name, &ip).ok().map(|c| (ip.clone(), c));
                }
                if let Some((_, shim)) = &client
                    && let Ok(Ok(())) = tokio::time::timeout(PROBE_TIMEOUT, shim.healthz()).await
                {
                    return ip;
                }
            }
            tokio::time::sleep(PROBE_INTERVAL).await;
        }
    }
}

/// The IP of a pod that has one and is not ending: its shim may answer. The kubelet writes the
/// status with the IP while init containers still run, and next with the Ready condition; that the
/// step's container runs is not seen in between, so the shim is asked from the first.
fn probeable_ip(pod: &Pod) -> Option<String> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    pod.status
        .as_ref()?
        .pod_ip
        .clone()
        .filter(|ip| !ip.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn pod(ip: Option<&str>, deleting: bool) -> Pod {
        let mut p = Pod {
            status: Some(PodStatus {
                pod_ip: ip.map(str::to_owned),
                phase: Some("Pending".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        if deleting {
            p.metadata.deletion_timestamp = Some(Time(Default::default()));
        }
        p
    }

    #[test]
    fn a_pod_with_an_ip_is_asked_unless_it_is_ending() {
        assert_eq!(
            probeable_ip(&pod(Some("10.0.0.7"), false)).as_deref(),
            Some("10.0.0.7")
        );
        assert_eq!(probeable_ip(&pod(Some("10.0.0.7"), true)), None);
        assert_eq!(probeable_ip(&pod(Some(""), false)), None);
        assert_eq!(probeable_ip(&pod(None, false)), None);
        assert_eq!(probeable_ip(&Pod::default()), None);
    }
}
