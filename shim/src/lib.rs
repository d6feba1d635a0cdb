//! `stepshim`: PID 1 of a CI step pod's main container. It starts no process of its own accord; it
//! serves the HTTP API of `protocol/PROTOCOL.md` to spawn processes, keep every byte of their output
//! for re-attachment, feed their stdin, signal and resize them, reap everything, and move files.
//!
//! # Layout
//! Every module is private to the crate except `logging` (see "Public surface" below).
//! - `config`: `STEPSHIM_*` variables and flags (names and defaults in `protocol::settings`),
//!   validated once.
//! - `boot`: process-wide settings, the listener, the ready file, signals, `stepshim install`.
//! - `sys`: the only `unsafe` code: fork/exec, waitpid, pty, signals, limits, credentials.
//! - `reaper`: the single `waitpid` loop, routing exits by pid to the table.
//! - `table`: processes by id and pid; spawn, delete, shutdown.
//! - `tree`: the process tree from `/proc`: descendants, and what an exited leader left behind.
//! - `oom`: children's `oom_score_adj` and the memory cgroup's OOM kill counter.
//! - `spawn`: a spawn request turned into a child (path, env, user, dir, pipes or pty).
//! - `proc`: one process: spec, output log, stdin, tty, exit.
//! - `pump`: copies a process's output into its output log, drains, writes the exit frame.
//! - `output_log`: a process's output, memory then spill file, with frame boundary checks.
//! - `stdin`: offset-idempotent stdin writes.
//! - `files`: tar extraction (hostile input), archiving and removal, every tree walked by
//!   directory descriptor.
//! - `image`: images from a step's directories (`/v2/`): an OCI layout as it is, `rootfs/` as one
//!   layer.
//! - `grants`, `pull`: artifacts between shims: read grants on a source, pulls on a destination.
//! - `owners`: which owners an upload or a pull may give (`CAP_CHOWN`, or the shim's own ids).
//! - `properties`: the pod's name to value store, in memory only.
//! - `http`: connections, routing and handlers; `auth` (who a request is: credentials parsed
//!   once), `metrics`, `error` serve it.
//! - `order`: the shim's sorts, through one instantiation; `blocking`: work off the runtime
//!   thread, through one task type.
//! - `user`, `clock`: `/etc/passwd` lookups, RFC 3339 times.
//! - [`logging`]: the shim's own diagnostics (not a process's output): the log line writer and its
//!   `error!`/`warn!`/`info!`/`debug!` macros.
//!
//! # Public surface
//! What `main.rs`, the fuzz target (`fuzz/`) and the integration tests (`tests/`) use, and
//! nothing else, so the compiler reports whatever the shim itself no longer calls:
//! [`run`] and the start-up steps `main.rs` sequences around it ([`process_settings`],
//! [`listen`], [`announce`], [`stop_with_parent`], [`shutdown_signal`], [`install`]);
//! [`Config`]; [`logging`]; [`extract`] (tar extraction, fuzzed); [`rename`] (`renameat2`, for
//! the tests that race an extraction).

mod auth;
mod blocking;
mod boot;
mod clock;
mod config;
mod error;
mod files;
mod grants;
mod http;
mod image;
pub mod logging;
mod metrics;
mod oom;
mod order;
mod output_log;
mod owners;
mod proc;
mod properties;
mod pull;
mod pump;
mod reaper;
mod spawn;
mod stdin;
mod sys;
mod table;
mod tree;
mod user;

use std::sync::Arc;

use tokio::net::TcpListener;

// The steps `main.rs` sequences around `run`: process-wide settings, the listener, the ready
// file, the starter's end and the shutdown signals, and the `stepshim install DEST` verb.
pub use boot::{announce, install, listen, process_settings, shutdown_signal, stop_with_parent};
pub use config::{Config, ConfigError};

/// Extraction of an untrusted tar stream, as an upload runs it: public for the fuzz target, which
/// checks that nothing lands outside the target directory.
pub mod extract {
    pub use crate::files::{ExtractStats, FilesError, Limits, Options, Resolve, extract_with};
    pub use protocol::owner::Owner;
}

/// `renameat2(2)` on directory fds: public for the tests that swap a directory and a symlink under
/// a running extraction (the workspace allows `unsafe` only in the shim's `sys`).
pub mod rename {
    pub use crate::sys::fs::{Rename, rename_at};
}

/// A random id for this start of the shim.
fn new_boot_id() -> String {
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
fn base_env() -> Vec<(String, String)> {
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
    let app = Arc::new(http::App::new(
        table.clone(),
        &config,
        new_boot_id(),
        same_owner,
    ));
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
