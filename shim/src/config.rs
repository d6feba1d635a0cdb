//! Shim configuration from `STEPSHIM_*` variables and the equivalent flags, read through one function
//! that tests feed directly. Invalid configuration is a [`ConfigError`]; `main` turns it into exit 64.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use protocol::settings as S;
use thiserror::Error;

use values::{Values, flag_list, parse};

/// The shim's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Address to serve on.
    pub listen: SocketAddr,
    /// SHA-256 of the bearer token; `None` only with `insecure_no_auth`.
    pub token_sha256: Option<[u8; 32]>,
    /// The TLS configuration of `STEPSHIM_TLS_SEED`'s key: serve TLS 1.3 only; `None`: plain HTTP.
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    pub(crate) tls: Option<TlsServer>,
    /// Where output logs spill.
    pub(crate) data_dir: PathBuf,
    /// Shutdown grace before SIGKILL.
    pub(crate) grace: Duration,
    /// Drain window after a process is reaped.
    pub(crate) drain: Duration,
    /// Output bytes kept in memory across all processes.
    pub(crate) memory_bytes: u64,
    /// Log level filter.
    pub log_level: crate::logging::Level,
    /// How long info and finer log lines may wait to be written together (`STEPSHIM_LOG_FLUSH_MS`).
    pub(crate) log_flush: Duration,
    /// Where to write the listen address once serving (`STEPSHIM_READY_FILE`).
    pub ready_file: Option<PathBuf>,
    /// The starter whose end stops the shim (`STEPSHIM_PARENT_PID`).
    pub parent_pid: Option<i32>,
    /// Processes remembered at once (running or exited and not deleted); spawns beyond answer 503.
    pub(crate) max_processes: usize,
    /// Bytes of a spawn spec's path, args, env, dir and user together; larger specs answer 413.
    pub(crate) max_spec_bytes: usize,
    /// Open connections at once; beyond it the oldest connection without a valid token is closed,
    /// or, if every connection has presented one, the new connection is.
    pub(crate) max_connections: usize,
    /// Descriptors of the open-file limit kept out of `max_connections` (see `boot`).
    pub(crate) fd_reserve: u64,
    /// Bytes of a request's line and headers together.
    pub(crate) max_header_bytes: usize,
    /// How long a connection may stay open without presenting a valid token.
    pub(crate) auth_timeout: Duration,
    /// `oom_score_adj` given to every process spawned (-1000 to 1000).
    pub(crate) oom_score_adj: i32,
    /// Caps of `PUT`/`GET /v1/files`.
    pub(crate) files: FilesSettings,
    /// Caps of grants and pulls.
    pub(crate) artifacts: ArtifactsSettings,
    /// Caps of the properties store (`STEPSHIM_PROPERTIES_*`, PROTOCOL.md 4.13).
    pub(crate) properties: crate::properties::Limits,
}

/// Caps of grants and pulls (PROTOCOL.md 4.9, 4.10 and 7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ArtifactsSettings {
    /// Grants registered at once (`STEPSHIM_MAX_GRANTS`).
    pub(crate) max_grants: usize,
    /// Pulls running at once (`STEPSHIM_MAX_PULLS`).
    pub(crate) max_pulls: usize,
    /// Retries (attempts after the first) in a row without progress before a pull fails
    /// (`STEPSHIM_PULL_RETRIES`).
    pub(crate) pull_retries: u32,
    /// Connections authenticated by grant tokens (and not the pod's) at once, all grants together
    /// (`STEPSHIM_GRANT_MAX_CONNECTIONS`; a `u32` fills the padding after `pull_retries`).
    pub(crate) max_connections: u32,
    /// Seconds a pull waits out a busy source (`STEPSHIM_PULL_BUSY_SECONDS`).
    pub(crate) pull_busy_secs: u32,
}

/// Caps of file transfers (PROTOCOL.md 4.8 and 7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FilesSettings {
    /// Bytes of one upload's tar stream, and the largest apparent size of one file in it.
    pub(crate) max_bytes: u64,
    /// Bytes of one extension header (GNU long name or link, pax header) of an upload.
    pub(crate) max_header_bytes: u64,
    /// Files at least this large are written with direct I/O (0: never).
    pub(crate) direct_min: u64,
    /// File transfers (either direction) running at once; more are answered 503.
    pub(crate) max_concurrent: usize,
    /// How long a transfer may go without its body moving before it is abandoned.
    pub(crate) idle_timeout: Duration,
    /// Transfers by grant tokens running at once, all grants together, in a pool apart from
    /// `max_concurrent`: a grant holder can fill its own pool, never the pod token's.
    pub(crate) grant_max_concurrent: usize,
    /// Bytes a transfer must move per `min_rate_interval` spent waiting on its peer (0: none).
    pub(crate) min_rate_bytes: u64,
    /// The interval of waiting over which `min_rate_bytes` is judged.
    pub(crate) min_rate_interval: Duration,
}

impl FilesSettings {
    /// The caps one upload or pull is extracted under.
    pub(crate) fn limits(&self) -> crate::files::Limits {
        crate::files::Limits {
            max_bytes: self.max_bytes,
            max_header_bytes: self.max_header_bytes,
            direct_min: self.direct_min,
        }
    }
}

/// The shim's TLS configuration, made once from the seed when the configuration is read (a build
/// without TLS never makes one); its `Debug` never shows the key.
#[derive(Clone)]
pub(crate) struct TlsServer {
    #[cfg(feature = "tls")]
    pub(crate) config: std::sync::Arc<stepshim_tls::rustls::ServerConfig>,
}

impl std::fmt::Debug for TlsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsServer(<secret>)")
    }
}

/// Why the configuration was refused.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// Neither a token hash nor the explicit opt-out was given.
    #[error(
        "no token: set STEPSHIM_TOKEN_SHA256 or STEPSHIM_TOKEN_SHA256_FILE (or STEPSHIM_INSECURE_NO_AUTH=1 for local trials)"
    )]
    NoToken,
    /// A setting had an unusable value.
    #[error("invalid {name}: {reason}")]
    Invalid {
        /// The variable's name.
        name: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A flag the shim does not know.
    #[error("unknown argument {0:?} (flags: {flags})", flags = flag_list())]
    UnknownArgument(String),
    /// A TLS seed was given to a build without TLS.
    #[error(
        "this stepshim was built without TLS: unset STEPSHIM_TLS_SEED and STEPSHIM_TLS_SEED_FILE, or run the image's stepshim-tls"
    )]
    NoTls,
    /// The token file could not be read.
    #[error("cannot read {name} {path}: {source}")]
    TokenFile {
        /// The variable naming the file.
        name: &'static str,
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl Config {
    /// Whether the shim serves TLS (it was given a seed).
    pub fn serves_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Reads the configuration from environment pairs and command-line arguments (without
    /// `argv[0]`). Flags (`--name value` or `--name=value`) override variables. Names, flags and
    /// defaults come from `protocol::settings`, the table PROTOCOL.md section 7 documents.
    pub fn from_sources(
        env: impl IntoIterator<Item = (String, String)>,
        args: impl IntoIterator<Item = String>,
    ) -> Result<Config, ConfigError> {
        let v = Values::collect(env, args)?;
        let listen = parse(v.get(S::LISTEN).unwrap_or_default(), S::LISTEN)?;
        let token_sha256 = v.token()?;
        let tls = v.tls()?;
        let data_dir = v.data_dir()?;
        let log_level = v.log_level()?;
        let tiny = Duration::from_nanos(1);
        Ok(Config {
            max_processes: v.ranged(S::MAX_PROCESSES, 1, 1 << 20)? as usize,
            max_spec_bytes: v.ranged(S::MAX_SPEC_BYTES, 1024, 1 << 20)? as usize,
            max_connections: v.ranged(S::MAX_CONNECTIONS, 4, 1 << 20)? as usize,
            fd_reserve: v.ranged(S::FD_RESERVE, 0, 1 << 30)? as u64,
            max_header_bytes: v.ranged(S::MAX_HEADER_BYTES, 8 << 10, 1 << 20)? as usize,
            auth_timeout: v.secs(S::AUTH_TIMEOUT_SECONDS, tiny)?,
            oom_score_adj: v.ranged(S::OOM_SCORE_ADJ, -1000, 1000)? as i32,
            listen,
            token_sha256,
            tls,
            data_dir,
            grace: v.secs(S::GRACE_SECONDS, Duration::ZERO)?,
            drain: v.secs(S::DRAIN_SECONDS, Duration::ZERO)?,
            memory_bytes: parse(v.get(S::MEMORY_BYTES).unwrap_or_default(), S::MEMORY_BYTES)?,
            log_level,
            log_flush: Duration::from_millis(v.ranged(S::LOG_FLUSH_MS, 0, 10_000)? as u64),
            ready_file: v.get(S::READY_FILE).map(PathBuf::from),
            parent_pid: match v.get(S::PARENT_PID) {
                Some(_) => Some(v.ranged(S::PARENT_PID, 1, i64::from(i32::MAX))? as i32),
                None => None,
            },
            files: FilesSettings {
                max_bytes: v.ranged(S::FILES_MAX_BYTES, 1, i64::MAX)? as u64,
                max_header_bytes: v.ranged(S::FILES_MAX_HEADER_BYTES, 1, i64::MAX)? as u64,
                direct_min: v.ranged(S::FILES_DIRECT_MIN_BYTES, 0, i64::MAX)? as u64,
                max_concurrent: v.ranged(S::FILES_MAX_CONCURRENT, 1, 1 << 20)? as usize,
                idle_timeout: v.secs(S::FILES_IDLE_TIMEOUT, tiny)?,
                grant_max_concurrent: v.ranged(S::FILES_GRANT_MAX_CONCURRENT, 1, 1 << 20)? as usize,
                min_rate_bytes: v.ranged(S::FILES_MIN_RATE_BYTES, 0, i64::MAX)? as u64,
                min_rate_interval: v.secs(S::FILES_MIN_RATE_INTERVAL, tiny)?,
            },
            artifacts: ArtifactsSettings {
                max_grants: v.ranged(S::MAX_GRANTS, 1, 1 << 16)? as usize,
                max_pulls: v.ranged(S::MAX_PULLS, 1, 1024)? as usize,
                pull_retries: v.ranged(S::PULL_RETRIES, 0, 1000)? as u32,
                max_connections: v.ranged(S::GRANT_MAX_CONNECTIONS, 1, 1 << 20)? as u32,
                pull_busy_secs: v.ranged(S::PULL_BUSY_SECONDS, 0, 86_400)? as u32,
            },
            properties: crate::properties::Limits {
                max_count: v.ranged(S::PROPERTIES_MAX_COUNT, 1, 1 << 16)? as usize,
                max_name_bytes: v.ranged(S::PROPERTIES_MAX_NAME_BYTES, 1, 4096)? as usize,
                max_value_bytes: v.ranged(S::PROPERTIES_MAX_VALUE_BYTES, 1, 1 << 30)? as usize,
                max_bytes: v.ranged(S::PROPERTIES_MAX_BYTES, 1, 1 << 32)? as usize,
            },
        })
    }
}

#[cfg(test)]
impl Config {
    /// The configuration from the documented defaults alone (and no token), for tests that need
    /// the shim's usual caps.
    pub(crate) fn defaults() -> Config {
        let env = [(S::INSECURE_NO_AUTH.to_owned(), "1".to_owned())];
        Config::from_sources(env, []).expect("the documented defaults parse")
    }
}

mod values;

#[cfg(test)]
mod tests;
