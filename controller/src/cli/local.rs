//! `--local`: a `stepshim` started as a child process on a loopback port with a fresh token (see
//! `client::local`), so every command works as against a pod, without a cluster. The shim's warnings
//! and errors reach stepctl's stderr; its info lines do not.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::Stdio;

use anyhow::{Result, anyhow};
use client::local::{Launch, LocalShim};

/// The shim binary (see `client::local::find_binary`), or a one-line error saying how to get one.
pub fn find_binary(explicit: Option<PathBuf>) -> Result<PathBuf> {
    client::local::find_binary(explicit).ok_or_else(|| {
        anyhow!(
            "no stepshim binary: build it (cargo build -p stepshim), or pass --shim-bin or STEPSHIM_BIN"
        )
    })
}

/// Starts the shim binary at `bin` and forwards its warnings.
pub fn start(bin: &std::path::Path) -> Result<LocalShim> {
    // Started from the main thread (the runtime is single-threaded), which lives as long as stepctl.
    let mut shim = Launch::new(bin)
        .stop_with_starter()
        .env(protocol::settings::LOG, "warn")
        .stderr(Stdio::piped())
        .start()?;
    if let Some(stderr) = shim.child.stderr.take() {
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("stepshim: {line}");
            }
        });
    }
    Ok(shim)
}
