//! Where a step pod is on its way to ready, read from its status alone (no API calls): the phases a
//! person waiting for a step wants to see, and the waiting reasons that mean it will never start
//! (image pull errors, config errors, crash loops), with Kubernetes' own words.

use k8s_openapi::api::core::v1::Pod;

/// Where a pod is on its way to ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Not yet in the cache.
    Unknown,
    /// Waiting for a node (with the scheduler's message, if any).
    Scheduling(String),
    /// Pulling or waiting for an image.
    Pulling(String),
    /// Containers starting, or the shim not yet answering its readiness probe.
    Starting(String),
    /// Running, ready, with this pod IP.
    Ready(String),
    /// Will never be ready.
    Failed {
        /// Kubernetes' reason.
        reason: String,
        /// Kubernetes' message.
        message: String,
    },
}

impl std::fmt::Display for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Progress::Unknown => write!(f, "creating"),
            Progress::Scheduling(m) => write!(f, "scheduling{}", suffix(m)),
            Progress::Pulling(m) => {
                write!(f, "pulling images and creating containers{}", suffix(m))
            }
            Progress::Starting(m) => write!(f, "starting{}", suffix(m)),
            Progress::Ready(ip) => write!(f, "ready at {ip}"),
            Progress::Failed { reason, message } => {
                write!(f, "failed: {reason}{}", suffix(message))
            }
        }
    }
}

fn suffix(m: &str) -> String {
    if m.is_empty() {
        String::new()
    } else {
        format!(" ({m})")
    }
}

/// Reasons of a waiting container that mean the pod will not start without a change.
const FATAL_WAITING: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "ErrImageNeverPull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
    "CrashLoopBackOff",
];

/// The container that keeps a failed pod from starting and the image its spec names: the first
/// (init containers before the others) waiting for a fatal reason or exited non-zero. `None` when
/// the failure is the pod's own (evicted, deleted, its phase ended) rather than one container's.
pub fn failing_container(pod: &Pod) -> Option<(String, String)> {
    let status = pod.status.as_ref()?;
    let failing = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
        .find(|cs| {
            let state = cs.state.as_ref();
            let waiting = state.and_then(|s| s.waiting.as_ref());
            let exited = state.and_then(|s| s.terminated.as_ref());
            waiting
                .is_some_and(|w| FATAL_WAITING.contains(&w.reason.as_deref().unwrap_or_default()))
                || exited.is_some_and(|t| t.exit_code != 0)
        })?;
    // The spec's image is what the user asked for; the status may hold a resolved name.
    let spec = pod.spec.as_ref();
    let image = spec
        .into_iter()
        .flat_map(|s| s.init_containers.iter().flatten().chain(&s.containers))
        .find(|c| c.name == failing.name)
        .and_then(|c| c.image.clone())
        .unwrap_or_else(|| failing.image.clone());
    Some((failing.name.clone(), image))
}

/// Reads a pod's progress from its status.
pub fn progress(pod: Option<&Pod>) -> Progress {
    let Some(pod) = pod else {
        return Progress::Unknown;
    };
    let Some(status) = &pod.status else {
        return Progress::Scheduling(String::new());
    };
    let phase = status.phase.as_deref().unwrap_or("Pending");
    if phase == "Failed" || phase == "Succeeded" {
        return Progress::Failed {
            reason: status
                .reason
                .clone()
                .unwrap_or_else(|| format!("pod {}", phase.to_lowercase())),
            message: status
                .message
                .clone()
                .unwrap_or_else(|| "the shim exited".into()),
        };
    }
    let conditions = status.conditions.clone().unwrap_or_default();
    let cond = |t: &str| conditions.iter().find(|c| c.type_ == t);
    let statuses = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten());
    for cs in statuses.clone() {
        if let Some(w) = cs.state.as_ref().and_then(|s| s.waiting.as_ref()) {
            let reason = w.reason.clone().unwrap_or_default();
            if FATAL_WAITING.contains(&reason.as_str()) {
                return Progress::Failed {
                    reason,
                    message: w.message.clone().unwrap_or_default(),
                };
            }
        }
        if let Some(t) = cs.state.as_ref().and_then(|s| s.terminated.as_ref())
            && t.exit_code != 0
        {
            return Progress::Failed {
                reason: format!("container {} exited {}", cs.name, t.exit_code),
                message: t.message.clone().or(t.reason.clone()).unwrap_or_default(),
            };
        }
    }
    match cond("PodScheduled") {
        Some(c) if c.status == "True" => {}
        Some(c) => return Progress::Scheduling(c.message.clone().unwrap_or_default()),
        None => return Progress::Scheduling(String::new()),
    }
    for cs in statuses {
        if let Some(w) = cs.state.as_ref().and_then(|s| s.waiting.as_ref()) {
            let reason = w.reason.clone().unwrap_or_default();
            if reason == "ContainerCreating" || reason == "PodInitializing" {
                return Progress::Pulling(format!("{}: {reason}", cs.name));
            }
            if reason == "ImagePullBackOff" || reason == "ErrImagePull" {
                return Progress::Pulling(format!("{}: {reason}", cs.name));
            }
            return Progress::Starting(format!("{}: {reason}", cs.name));
        }
    }
    if status
        .container_statuses
        .as_ref()
        .is_none_or(|v| v.is_empty())
        && phase == "Pending"
    {
        return Progress::Pulling("creating containers".into());
    }
    let ready = cond("Ready").is_some_and(|c| c.status == "True");
    match (&status.pod_ip, ready, phase) {
        (Some(ip), true, "Running") => Progress::Ready(ip.clone()),
        _ => Progress::Starting("waiting for the shim's readiness".into()),
    }
}

#[cfg(test)]
mod tests;
