//! `stepctl bench`: benchmarks that print numbers (never pass/fail timing tests). `--local` measures
//! the shim's own footprint against a raw fork/exec on this machine; `--cluster` measures the shim
//! against apiserver exec on a real cluster.

mod cluster;
mod local;
mod stats;

use anyhow::Result;
use clap::Args;

use super::args::TargetArgs;

/// `bench`
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("mode").required(true).args(["local", "cluster"]))]
pub struct BenchArgs {
    /// Measure a local shim (footprint, latency, throughput, concurrency).
    #[arg(long)]
    pub local: bool,
    /// Measure the shim against apiserver exec on a cluster (admin kubeconfig: exec needs it).
    #[arg(long)]
    pub cluster: bool,
    /// Cluster: namespace of the bench pods (created if missing).
    #[arg(long, default_value = "stepshim-bench")]
    pub namespace: String,
    /// Cluster: step pods to spread processes over.
    #[arg(long, default_value_t = 10)]
    pub pods: usize,
    /// Cluster: sequential runs per command and path in the latency scenario.
    #[arg(long, default_value_t = 200)]
    pub latency_iterations: usize,
    /// Cluster: processes at once, per level.
    #[arg(long, value_delimiter = ',', default_value = "10,100,500")]
    pub levels: Vec<usize>,
    /// Cluster: lines (one a second) each concurrent process prints.
    #[arg(long, default_value_t = 10)]
    pub lines: u32,
    /// Cluster: MiB of stdout in the throughput and cut-stream runs.
    #[arg(long, default_value_t = 1024)]
    pub throughput_mib: u64,
    /// Cluster: command that restarts kube-apiserver (the fault scenarios need it).
    #[arg(long)]
    pub restart_cmd: Option<String>,
    /// Cluster: skip the fault scenarios.
    #[arg(long)]
    pub no_faults: bool,
    /// Cluster: kube-apiserver's pid (default: the test cluster's pid file).
    #[arg(long)]
    pub apiserver_pid: Option<u32>,
    /// Cluster: image of the step pods.
    #[arg(long, default_value = "stepshim.local/step:dev")]
    pub step_image: String,
    /// Cluster: image carrying the shim.
    #[arg(long, default_value = "stepshim.local/stepshim:dev")]
    pub shim_image: String,
    /// Sequential spawns for the latency comparison.
    #[arg(long, default_value_t = 400)]
    pub iterations: usize,
    /// Processes followed at once in the concurrency run.
    #[arg(long, default_value_t = 2000)]
    pub concurrent: usize,
    /// MiB of stdout streamed in the throughput run.
    #[arg(long, default_value_t = 2048)]
    pub stream_mib: u64,
    /// Directory for results.json and results.md.
    #[arg(long)]
    pub results: Option<std::path::PathBuf>,
}

/// Runs the benchmark the arguments select.
pub async fn run(target: &TargetArgs, args: BenchArgs) -> Result<i32> {
    if args.cluster {
        return cluster::run(target, &args).await;
    }
    local::run(target, &args).await
}
