//! stepshim's benchmarks: numbers to print and keep in the README, never pass/fail timing tests.
//! `local` measures the shim's own footprint against a raw fork/exec on this machine; `cluster`
//! measures the shim against apiserver exec on a real cluster, side by side in one run; `scale`
//! measures the control plane's own cost at thousands of step pods.
//!
//! # Layout
//! - [`args`]: the command line, one subcommand per benchmark.
//! - [`local`]: binary size, start to ready, idle RSS, memory per stream and per follower, spawn
//!   latency, one-stream throughput, TLS, serving images, one tree pulled by many steps, many
//!   followers.
//! - [`cluster`]: pods on a cluster, the scenarios on both paths, the apiserver's cost, faults, the
//!   report (markdown, JSON, chart); with `--soak`, steps of every kind for a long time under faults,
//!   the shims and the controller side sampled from `/proc`.
//! - [`scale`]: thousands of pending step pods of one worker, driven by the Rust runtime and the Go
//!   kit's worker: apiserver requests per GC tick, the driver's RSS, deletion to notice, a restart.
//! - [`access`]: the admin configuration and waiting until a fresh namespace can take pods.
//! - [`stats`]: percentiles and units; [`procfs`]: CPU time of processes.

pub mod access;
pub mod args;
pub mod cluster;
pub mod local;
pub mod procfs;
pub mod scale;
pub mod stats;
