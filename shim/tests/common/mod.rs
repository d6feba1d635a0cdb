//! The shim's integration tests run the real binary through the shared harness in `test-support`
//! (a shim child with its log, the cutting proxy, raw HTTP). `test_support::Shim` finds the binary
//! cargo built for these tests beside the test executable.
#![allow(unused_imports)]

pub mod artifacts;
pub mod escape;
pub mod images;

pub use test_support::*;
