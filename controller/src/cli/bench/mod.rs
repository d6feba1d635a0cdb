//! `stepctl bench`: benchmarks that print numbers (never pass/fail timing tests). `--local` measures
//! the shim's own footprint against a raw fork/exec on this machine.

mod local;
mod stats;

use anyhow::{Result, bail};
use clap::Args;

use super::args::TargetArgs;

/// `bench`
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Measure a local shim (footprint, latency, throughput, concurrency).
    #[arg(long, required = true)]
    pub local: bool,
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
    if !args.local {
        bail!("pass --local");
    }
    local::run(target, &args).await
}
