//! The stepshim wire contract, protocol version 1, as plain data: no I/O, no async runtime, no HTTP
//! stack. `protocol/PROTOCOL.md` is the normative text; this crate is its Rust form, shared by the shim
//! (server) and the controller (client) so both sides agree by construction.
//!
//! # Layout
//! - [`frame`]: the 8-byte-header frame format of a process's output log, an encoder and an incremental
//!   decoder that tracks the resume offset.
//! - [`types`]: JSON request and response bodies (spawn spec, process status, exit, info).
//! - [`artifacts`]: grants, pulls and the resumable files stream (artifacts between shims).
//! - [`error`]: error bodies and the error codes with their HTTP statuses.
//! - [`http1`]: the HTTP/1.1 answer reader (status, headers, then the body by length, chunks or
//!   until the close), fed bytes by the client, the shim's pulls and the tests.
//! - [`owner`]: the owner an upload or a pull gives what it writes (`UID:GID`).
//! - [`routes`]: route paths, query string parsing and the process id syntax.
//! - [`query`]: query parameter names.
//! - [`settings`]: `STEPSHIM_*` names, the port and the probe path.
//! - [`forward`]: the node-local forwarder's port, pull credentials and `STEPSHIM_FORWARD_*` names.
//! - [`registry`]: the image routes under `/v2/` (4.12): paths, names, references, digests, Basic
//!   credentials, and the image documents the shim reads and writes.
//! - [`token`]: the token hash a shim is configured with.
//! - [`signal`]: signal names and numbers accepted by the signal route.
//! - `object`: request bodies deserialize from JSON objects only, never arrays.

pub mod artifacts;
pub mod error;
pub mod forward;
pub mod frame;
pub mod http1;
mod object;
pub mod owner;
pub mod query;
pub mod registry;
pub mod routes;
pub mod settings;
pub mod signal;
pub mod token;
pub mod types;

/// The protocol version this crate implements, reported by `GET /v1/info`.
pub const PROTOCOL_VERSION: u32 = 1;

pub use error::{ErrorBody, ErrorCode, ErrorDetail};
pub use frame::{Decoder, Frame, FrameError, FrameHeader, FrameType, HEADER_LEN};
pub use types::*;
