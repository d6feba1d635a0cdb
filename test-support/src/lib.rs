//! What stepshim's tests and benchmarks share, written once: the real `stepshim` binary started as a
//! child with its log kept, a loopback proxy that cuts connections mid-stream, raw HTTP requests, and
//! small helpers to run processes to completion. A dev-dependency of the shim and the controller and
//! a dependency of the benchmark, never of a binary that ships.
//!
//! # Layout
//! - [`shim`]: [`Shim`], a shim child on loopback with a client and its captured log.
//! - [`proxy`]: [`cutting_proxy`] (and [`cutting_proxy_on`]), the resume-after-disconnect fault;
//!   [`gated_proxy`], answers held until the test lets them go.
//! - [`raw`]: one raw HTTP/1.1 request, for what a typed client cannot send; error codes and metrics.
//! - [`process`]: spawn-and-follow helpers, polling with a deadline, and whether a pid runs.

pub mod process;
pub mod proxy;
pub mod raw;
pub mod shim;

pub use process::{Ran, alive, eventually, follow, run, sh};
pub use proxy::{cutting_proxy, cutting_proxy_on, gated_proxy};
pub use raw::{error_code, metric, raw, raw_bytes, raw_with};
pub use shim::Shim;

/// `len` bytes of deterministic noise (xorshift from `seed`): contents in which a misplaced or
/// repeated block shows, the same on every run.
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// `n` random bytes as hex.
pub fn random_hex(n: usize) -> String {
    let bytes: Vec<u8> = (0..n).map(|_| rand::random::<u8>()).collect();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
