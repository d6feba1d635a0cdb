//! JSON bodies of protocol v1: what clients send and what the shim answers.
//!
//! Requests deny unknown fields, so a client written against a newer protocol learns at once that this
//! shim does not understand a field instead of having it silently ignored.

use serde::{Deserialize, Serialize};

use crate::object::object_only;

/// Size of a terminal, in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, remote = "Self")]
pub struct TtySize {
    /// Columns.
    pub cols: u16,
    /// Rows.
    pub rows: u16,
}

/// Body of `PUT /v1/processes/{id}`: what to run. Two spawns with the same id are the same request
/// (idempotent) exactly when their specs are equal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, remote = "Self")]
pub struct SpawnRequest {
    /// The executable. With a `/` it is used as is; without one it is looked up in the `PATH` of the
    /// process's environment. It is also argv[0].
    pub path: String,
    /// Arguments after argv[0].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// `KEY=VALUE` entries overlaid on the shim's own environment (minus `STEPSHIM_*`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Working directory, created (with parents) if missing. Defaults to the shim's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
    /// `uid:gid`, a bare `uid`, or a user name from `/etc/passwd`. Defaults to the shim's own user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Whether the process gets a stdin pipe fed by the stdin route; without it stdin is `/dev/null`.
    #[serde(default)]
    pub stdin: bool,
    /// A controlling terminal of this size instead of pipes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tty: Option<TtySize>,
}

/// Whether a process is still running. A process becomes `exited` only once its exit frame is in the
/// log, so a client that sees `exited` can read the whole output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Not yet reaped, or reaped with its output still draining.
    Running,
    /// Reaped, drained, exit frame written.
    Exited,
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exit {
    /// Exit code, when the process exited normally.
    pub code: Option<i32>,
    /// Signal number, when a signal killed it.
    pub signal: Option<i32>,
    /// The shell's view: `code`, or 128 + `signal`.
    pub status: i32,
    /// Why the process ended, when the shim knows more than the status says (an OOM kill).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<ExitReason>,
    /// Whether the kernel's out-of-memory killer killed it: `reason` is `oom_kill` (PROTOCOL.md 4.3).
    /// Absent from an older shim's answers, which read as `false`.
    #[serde(default)]
    pub oom_killed: bool,
}

/// A cause of death the shim could establish beyond the status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitReason {
    /// The kernel's out-of-memory killer sent the `SIGKILL` (the container's memory cgroup counted an
    /// OOM kill when the process was reaped).
    OomKill,
}

impl Exit {
    /// A normal exit with `code`.
    pub fn code(code: i32) -> Self {
        Exit {
            code: Some(code),
            signal: None,
            status: code,
            reason: None,
            oom_killed: false,
        }
    }

    /// Death by signal number `sig`.
    pub fn signal(sig: i32) -> Self {
        Exit {
            code: None,
            signal: Some(sig),
            status: 128 + sig,
            reason: None,
            oom_killed: false,
        }
    }
}

/// The state of one process, as `GET /v1/processes/{id}` returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Process {
    /// The client's id.
    pub id: String,
    /// Pid in the shim's PID namespace.
    pub pid: i32,
    /// Running or exited.
    pub state: State,
    /// Set once `state` is `exited`.
    pub exit: Option<Exit>,
    /// RFC 3339 UTC time the process was started.
    pub started_at: String,
    /// RFC 3339 UTC time the exit frame was written.
    pub exited_at: Option<String>,
    /// Length of the output log so far: the offset just past its last frame.
    pub output_end: u64,
    /// Bytes of stdin accepted so far: the offset the next stdin request should carry.
    pub stdin_offset: u64,
    /// Whether stdin has been closed (EOF sent).
    pub stdin_closed: bool,
    /// Whether the process has a tty.
    pub tty: bool,
}

/// Body of `GET /v1/processes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessList {
    /// Every process the shim remembers, ordered by id.
    pub processes: Vec<Process>,
}

/// Body of `GET /v1/info`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Info {
    /// Protocol version, 1.
    pub protocol: u32,
    /// The shim's version.
    pub version: String,
    /// Random per start of the shim: a changed value tells a client the shim restarted and forgot
    /// every process.
    pub boot_id: String,
}

/// Answer of `POST /v1/processes/{id}/stdin`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StdinAck {
    /// Bytes of stdin written to the process so far.
    pub stdin_offset: u64,
    /// Whether stdin is now closed.
    pub stdin_closed: bool,
}

/// Body of `POST /v1/processes/{id}/signal`: `"TERM"`, `"SIGTERM"`, `"term"` or `15`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, remote = "Self")]
pub struct SignalRequest {
    /// The signal.
    pub signal: SignalSpec,
}

object_only!(TtySize);
object_only!(SpawnRequest);
object_only!(SignalRequest);

/// A signal by name or number. Any JSON number parses (one out of range, fractional or beyond 64
/// bits becomes [`SignalSpec::OUT_OF_RANGE`]), so a bad number is an unknown signal, not bad JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum SignalSpec {
    /// Number, valid from 1 to 64.
    Number(i64),
    /// Name, with or without `SIG`, any case.
    Name(String),
}

impl SignalSpec {
    /// What a number that is no valid signal (negative, fractional, huge) is read as.
    pub const OUT_OF_RANGE: i64 = i64::MAX;
}

impl<'de> Deserialize<'de> for SignalSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Spec;
        impl serde::de::Visitor<'_> for Spec {
            type Value = SignalSpec;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a signal name or number")
            }

            fn visit_i64<E>(self, n: i64) -> Result<SignalSpec, E> {
                Ok(SignalSpec::Number(n))
            }

            fn visit_u64<E>(self, n: u64) -> Result<SignalSpec, E> {
                Ok(SignalSpec::Number(
                    i64::try_from(n).unwrap_or(SignalSpec::OUT_OF_RANGE),
                ))
            }

            fn visit_f64<E>(self, _: f64) -> Result<SignalSpec, E> {
                Ok(SignalSpec::Number(SignalSpec::OUT_OF_RANGE))
            }

            fn visit_str<E>(self, s: &str) -> Result<SignalSpec, E> {
                Ok(SignalSpec::Name(s.to_owned()))
            }
        }
        d.deserialize_any(Spec)
    }
}

/// Body of `POST /v1/processes/{id}/resize`.
pub type ResizeRequest = TtySize;
