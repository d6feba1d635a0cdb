//! What one run of the cluster benchmark measured, as data: the report (`report.rs`) and the chart
//! (`chart.rs`) both read it.

use serde::Serialize;

use super::apiserver::Cost;
use super::faults::Faults;
use super::paths::Path;
use super::podspawn::PodSpawn;
use super::scenarios::{Concurrency, Dist, Latency, Throughput};

/// Everything one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Results {
    /// When, what machine, which Kubernetes, which command.
    pub context: serde_json::Value,
    /// The apiserver over an idle interval as long as a typical scenario, for comparison.
    pub idle: Cost,
    /// Idle interval length, seconds.
    pub idle_secs: f64,
    /// Sequential latency.
    pub latency: Vec<Latency>,
    /// `GET /healthz` round trips per shim path: the floor under its latency.
    pub round_trips: Vec<(Path, Dist)>,
    /// A spawn timed inside the pod (`--only podspawn`).
    pub pod_spawn: Option<PodSpawn>,
    /// Concurrency levels.
    pub concurrency: Vec<Concurrency>,
    /// One big stream per path.
    pub throughput: Vec<Throughput>,
    /// Fault scenarios.
    pub faults: Option<Faults>,
}
