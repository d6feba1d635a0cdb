//! The shim's settings as both sides spell them (PROTOCOL.md section 7): every `STEPSHIM_*` variable
//! name, the port and the defaults a controller needs to build a pod or start a local shim. The shim
//! parses them (`shim/src/config.rs`); the controller and the test harness set them.

/// The port a shim serves on in a step pod.
pub const PORT: u16 = 7777;
/// The default listen address.
pub const DEFAULT_LISTEN: &str = "0.0.0.0:7777";

/// Listen address (`host:port`).
pub const LISTEN: &str = "STEPSHIM_LISTEN";
/// Hex SHA-256 of the bearer token.
pub const TOKEN_SHA256: &str = "STEPSHIM_TOKEN_SHA256";
/// A file holding the hex SHA-256 of the bearer token.
pub const TOKEN_SHA256_FILE: &str = "STEPSHIM_TOKEN_SHA256_FILE";
/// `1` to serve without authentication (local trials only).
pub const INSECURE_NO_AUTH: &str = "STEPSHIM_INSECURE_NO_AUTH";
/// Where output logs spill (absolute).
pub const DATA_DIR: &str = "STEPSHIM_DATA_DIR";
/// Seconds between SIGTERM and SIGKILL at shutdown.
pub const GRACE_SECONDS: &str = "STEPSHIM_GRACE_SECONDS";
/// Seconds a reaped process's pipes may still drain.
pub const DRAIN_SECONDS: &str = "STEPSHIM_DRAIN_SECONDS";
/// Output bytes kept in memory across all processes.
pub const MEMORY_BYTES: &str = "STEPSHIM_MEMORY_BYTES";
/// Log level: error, warn, info, debug, trace.
pub const LOG: &str = "STEPSHIM_LOG";
/// A path the shim writes its listen address to (`host:port` and a newline, by an atomic rename)
/// once it serves: the readiness contract of a shim started by a program.
pub const READY_FILE: &str = "STEPSHIM_READY_FILE";

/// The liveness route a pod's probe uses (the only route without authentication).
pub const PROBE_PATH: &str = crate::routes::HEALTHZ;
