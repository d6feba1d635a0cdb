//! `stepshim`: PID 1 of a CI step pod's main container. It starts no process of its own accord; it
//! serves the HTTP API of `protocol/PROTOCOL.md` to spawn processes, keep every byte of their output
//! for re-attachment, feed their stdin, signal and resize them, reap everything, and move files.
//!
//! # Layout
//! - [`config`]: `STEPSHIM_*` variables and flags (named in `protocol::settings`), validated once.
//! - [`boot`]: process-wide settings, the listener, the ready file, signals, `stepshim install`.
//! - [`sys`]: the only `unsafe` code: fork/exec, waitpid, pty, signals, limits.
//! - [`reaper`]: the single `waitpid` loop, routing exits by pid to the table.
//! - [`table`]: processes by id and pid; spawn, delete, shutdown.
//! - [`tree`]: the process tree from `/proc`: descendants, and what an exited leader left behind.
//! - [`oom`]: children's `oom_score_adj` and the memory cgroup's OOM kill counter.
//! - [`spawn`]: a spawn request turned into a child (path, env, user, dir, pipes or pty).
//! - [`proc`]: one process: spec, log, stdin, tty, exit.
//! - [`pump`]: copies a process's output into its log, drains, writes the exit frame.
//! - [`output_log`]: a process's output log, memory then spill file, with boundary checks.
//! - [`stdin`]: offset-idempotent stdin writes.
//! - [`files`]: tar extraction (hostile input) and archiving.
//! - [`grants`], [`pull`]: artifacts between shims: read grants on a source, pulls on a destination.
//! - [`http`]: connections, auth, routing and handlers; [`auth`], [`metrics`], [`error`] serve it.
//! - [`order`]: the shim's sorts, through one instantiation; [`blocking`]: work off the runtime
//!   thread, through one task type.
//! - [`user`], [`clock`], [`logging`]: `/etc/passwd` lookups, RFC 3339 times, the log line writer.

pub mod auth;
pub mod blocking;
pub mod boot;
pub mod clock;
pub mod config;
pub mod error;
pub mod files;
pub mod grants;
pub mod http;
pub mod output_log;
pub mod logging;
pub mod metrics;
pub mod oom;
pub mod order;
pub mod proc;
pub mod pull;
pub mod pump;
pub mod reaper;
pub mod spawn;
pub mod stdin;
pub mod sys;
pub mod table;
pub mod tree;
pub mod user;

use std::sync::Arc;

use tokio::net::TcpListener;

pub use config::Config;

/// A random id for this start of the shim.
pub fn new_boot_id() -> String {
    let random = || sys::fs::random_u64().ok();
    let (a, b) = match (random(), random()) {
        (Some(a), Some(b)) => (a, b),
        // No getrandom (a very old kernel or a seccomp filter): time and pid still tell restarts
        // apart, which is all a boot id is for.
        _ => {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            (t.as_nanos() as u64, u64::from(std::process::id()))
        }
    };
    format!("{a:016x}{b:016x}")
}

/// The shim's environment minus `STEPSHIM_*`: the base of every process's environment.
pub fn base_env() -> Vec<(String, String)> {
    std::env::vars()
        .filter(|(k, _)| !k.starts_with("STEPSHIM_"))
        .collect()
}

/// Serves until `shutdown` resolves, then TERMs every process, waits up to the grace period, KILLs
/// the rest and returns. Must run inside a tokio runtime with I/O, time and signals enabled.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let sigchld = reaper::install();
    let flusher = tokio::spawn(logging::flusher(config.log_flush));
    let budget = Arc::new(output_log::Budget::new(config.memory_bytes));
    let settings = table::Settings {
        data_dir: config.data_dir.clone(),
        drain: config.drain,
        base_env: base_env(),
        max_processes: config.max_processes,
        max_spec_bytes: config.max_spec_bytes,
        oom_score_adj: config.oom_score_adj,
    };
    let oom = oom::OomCounter::locate(std::path::Path::new("/sys/fs/cgroup"));
    info!(counter = ?oom.file(), "OOM kills counted from");
    let table = Arc::new(table::Table::new(settings, budget, oom));
    let reaper = tokio::spawn(reaper::run(table.clone(), sigchld));
    let same_owner = sys::geteuid() == 0;
    let app = Arc::new(
        http::App::new(
            table.clone(),
            config.token_sha256,
            new_boot_id(),
            same_owner,
            http::Limits::from(&config),
        )
        .with_files(config.files)
        .with_artifacts(config.artifacts),
    );
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(http::serve(listener, app.clone(), async {
        let _ = stop_rx.await;
    }));
    shutdown.await;
    info!("shutdown requested");
    table.shutdown(config.grace).await;
    // Give open output streams a moment to send their last frames.
    app.metrics
        .streams_closed(tokio::time::Instant::now() + std::time::Duration::from_secs(1))
        .await;
    let _ = stop_tx.send(());
    let _ = server.await;
    reaper.abort();
    info!("stopped");
    flusher.abort();
    logging::stop();
}
