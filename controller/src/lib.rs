//! The control-plane side of stepshim.
//!
//! # Layout
//! - [`shim`]: the typed async client of one shim's HTTP API, with resuming output attach.

pub mod shim;
