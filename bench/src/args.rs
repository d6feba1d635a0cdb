//! `stepshim-bench`'s command line: one subcommand per benchmark, each with only its own flags.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// stepshim-bench: benchmarks that print numbers (never pass/fail timing tests).
#[derive(Debug, Parser)]
#[command(name = "stepshim-bench", version, about)]
pub struct Cli {
    /// Which benchmark.
    #[command(subcommand)]
    pub command: Command,
}

/// The benchmarks.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// The shim's own footprint against a raw fork/exec on this machine.
    Local(LocalArgs),
    /// The shim against apiserver exec on a real cluster (admin kubeconfig: exec needs it).
    Cluster(ClusterArgs),
}

/// `local`
#[derive(Debug, Args)]
pub struct LocalArgs {
    /// The stepshim binary (default: $STEPSHIM_BIN, beside this executable, then PATH).
    #[arg(long)]
    pub shim_bin: Option<PathBuf>,
    /// Sequential spawns for the latency comparison.
    #[arg(long, default_value_t = 400)]
    pub iterations: usize,
    /// Processes followed at once in the concurrency run.
    #[arg(long, default_value_t = 2000)]
    pub concurrent: usize,
    /// Idle output streams held open at once for the memory-per-stream row. Each is a socket on
    /// both sides, and the shim caps connections at half its open-file limit: 10,000 needs a hard
    /// `RLIMIT_NOFILE` of at least 22,000 (this project's machine allows 20,000).
    #[arg(long, default_value_t = 9000)]
    pub idle_streams: usize,
    /// MiB of stdout streamed in the throughput run.
    #[arg(long, default_value_t = 2048)]
    pub stream_mib: u64,
    /// Directory for local.json and local.md.
    #[arg(long)]
    pub results: Option<PathBuf>,
}

/// `cluster`
#[derive(Debug, Args)]
pub struct ClusterArgs {
    /// Kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Namespace of the bench pods (created if missing).
    #[arg(long, default_value = "stepshim-bench")]
    pub namespace: String,
    /// Step pods to spread processes over.
    #[arg(long, default_value_t = 10)]
    pub pods: usize,
    /// Sequential runs per command and path in the latency scenario.
    #[arg(long, default_value_t = 200)]
    pub iterations: usize,
    /// Processes at once, per level.
    #[arg(long, value_delimiter = ',', default_value = "10,100,500")]
    pub levels: Vec<usize>,
    /// Lines (one a second) each concurrent process prints.
    #[arg(long, default_value_t = 10)]
    pub lines: u32,
    /// MiB of stdout in the throughput and cut-stream runs.
    #[arg(long, default_value_t = 1024)]
    pub stream_mib: u64,
    /// Command that restarts kube-apiserver (the fault scenarios need it).
    #[arg(long)]
    pub restart_cmd: Option<String>,
    /// Skip the fault scenarios.
    #[arg(long)]
    pub no_faults: bool,
    /// kube-apiserver's pid (default: the test cluster's pid file).
    #[arg(long)]
    pub apiserver_pid: Option<u32>,
    /// Image of the step pods.
    #[arg(long, default_value = "stepshim.local/step:dev")]
    pub step_image: String,
    /// Image carrying the shim.
    #[arg(long, default_value = "stepshim.local/stepshim:dev")]
    pub shim_image: String,
    /// Directory for results.json, results.md and the chart.
    #[arg(long)]
    pub results: Option<PathBuf>,
}
