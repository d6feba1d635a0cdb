//! What the controller's tests against real local shims share: starting one.
#![allow(dead_code)] // each test crate uses its own part

use std::path::PathBuf;

use client::local::{Launch, LocalShim};

/// A real shim: the `stepshim` binary beside `stepctl` (`cargo build -p stepshim`) or
/// `$STEPSHIM_BIN`.
pub fn shim() -> LocalShim {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_stepctl"));
    let bin = std::env::var_os("STEPSHIM_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| exe.with_file_name("stepshim"));
    assert!(
        bin.exists(),
        "no stepshim at {} (cargo build -p stepshim)",
        bin.display()
    );
    Launch::new(bin).start().expect("the shim starts")
}
