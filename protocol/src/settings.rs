//! The shim's settings as both sides spell them (PROTOCOL.md section 7): every `STEPSHIM_*` variable,
//! its flag and its default, the port and the probe path. The shim parses them from this table
//! (`shim/src/config.rs`) and writes no default of its own: every cap it uses, in its tests too,
//! is parsed from here. The controller and the test harness set them by these names. A test holds
//! the table and PROTOCOL.md's table to each other.

/// The port a shim serves on in a step pod.
pub const PORT: u16 = 7777;
/// The liveness route a pod's probe uses (the only route without authentication).
pub const PROBE_PATH: &str = crate::routes::HEALTHZ;

/// One setting: its environment variable, its flag and its default as text (empty: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    /// The environment variable.
    pub var: &'static str,
    /// The equivalent command-line flag.
    pub flag: &'static str,
    /// The default, as the shim parses it; empty when there is none.
    pub default: &'static str,
}

macro_rules! settings {
    ($($(#[$doc:meta])* $name:ident = $var:literal, $flag:literal, $default:literal;)*) => {
        $($(#[$doc])* pub const $name: &str = $var;)*
        /// Every setting, in PROTOCOL.md's order.
        pub const ALL: &[Setting] = &[$(Setting { var: $var, flag: $flag, default: $default }),*];
    };
}

settings! {
    /// Listen address (`host:port`).
    LISTEN = "STEPSHIM_LISTEN", "--listen", "0.0.0.0:7777";
    /// Hex SHA-256 of the bearer token.
    TOKEN_SHA256 = "STEPSHIM_TOKEN_SHA256", "--token-sha256", "";
    /// A file holding the hex SHA-256 of the bearer token.
    TOKEN_SHA256_FILE = "STEPSHIM_TOKEN_SHA256_FILE", "--token-sha256-file", "";
    /// `1` to serve without authentication (local trials only).
    INSECURE_NO_AUTH = "STEPSHIM_INSECURE_NO_AUTH", "--insecure-no-auth", "";
    /// Hex seed of the TLS key: serve TLS 1.3 only (PROTOCOL.md 1.1).
    TLS_SEED = "STEPSHIM_TLS_SEED", "--tls-seed", "";
    /// A file holding the hex seed of the TLS key.
    TLS_SEED_FILE = "STEPSHIM_TLS_SEED_FILE", "--tls-seed-file", "";
    /// Where output logs spill (absolute).
    DATA_DIR = "STEPSHIM_DATA_DIR", "--data-dir", "/tmp";
    /// Seconds between SIGTERM and SIGKILL at shutdown.
    GRACE_SECONDS = "STEPSHIM_GRACE_SECONDS", "--grace-seconds", "10";
    /// Seconds a reaped process's pipes may still drain.
    DRAIN_SECONDS = "STEPSHIM_DRAIN_SECONDS", "--drain-seconds", "2";
    /// Output bytes kept in memory across all processes.
    MEMORY_BYTES = "STEPSHIM_MEMORY_BYTES", "--memory-bytes", "67108864";
    /// Log level: error, warn, info, debug, trace.
    LOG = "STEPSHIM_LOG", "--log", "info";
    /// Milliseconds info and finer log lines may wait to be written together (0: each at once).
    LOG_FLUSH_MS = "STEPSHIM_LOG_FLUSH_MS", "--log-flush-ms", "100";
    /// Processes remembered at once.
    MAX_PROCESSES = "STEPSHIM_MAX_PROCESSES", "--max-processes", "4096";
    /// Bytes of one spawn spec.
    MAX_SPEC_BYTES = "STEPSHIM_MAX_SPEC_BYTES", "--max-spec-bytes", "262144";
    /// Connections open at once.
    MAX_CONNECTIONS = "STEPSHIM_MAX_CONNECTIONS", "--max-connections", "1024";
    /// Connections authenticated by grant tokens, all grants together (at most half of
    /// `MAX_CONNECTIONS`): a share of the cap apart from the pod token's.
    GRANT_MAX_CONNECTIONS = "STEPSHIM_GRANT_MAX_CONNECTIONS", "--grant-max-connections", "256";
    /// Descriptors of the open-file limit kept out of the connection cap (at most half the limit).
    FD_RESERVE = "STEPSHIM_FD_RESERVE", "--fd-reserve", "1024";
    /// Bytes of a request line and its headers.
    MAX_HEADER_BYTES = "STEPSHIM_MAX_HEADER_BYTES", "--max-header-bytes", "16384";
    /// Seconds a connection may stay open without presenting a valid token.
    AUTH_TIMEOUT_SECONDS = "STEPSHIM_AUTH_TIMEOUT_SECONDS", "--auth-timeout-seconds", "5";
    /// `oom_score_adj` of every spawned process.
    OOM_SCORE_ADJ = "STEPSHIM_OOM_SCORE_ADJ", "--oom-score-adj", "1000";
    /// A path the shim writes its listen address to (`host:port` and a newline, by an atomic
    /// rename) once it serves: the readiness contract of a shim started by a program.
    READY_FILE = "STEPSHIM_READY_FILE", "--ready-file", "";
    /// The pid of the process that started the shim: when it ends, the shim stops as on SIGTERM
    /// (its processes are ended too), so a starter that is killed leaves nothing running.
    PARENT_PID = "STEPSHIM_PARENT_PID", "--parent-pid", "";
    /// Bytes of one upload, and the largest apparent size of one file in it.
    FILES_MAX_BYTES = "STEPSHIM_FILES_MAX_BYTES", "--files-max-bytes", "8589934592";
    /// Bytes of one extension header (long name or link, pax header, sparse map) of an upload.
    FILES_MAX_HEADER_BYTES = "STEPSHIM_FILES_MAX_HEADER_BYTES", "--files-max-header-bytes", "65536";
    /// Files at least this large are written to the disk without the page cache (0: never).
    FILES_DIRECT_MIN_BYTES = "STEPSHIM_FILES_DIRECT_MIN_BYTES", "--files-direct-min-bytes", "8388608";
    /// File transfers running at once.
    FILES_MAX_CONCURRENT = "STEPSHIM_FILES_MAX_CONCURRENT", "--files-max-concurrent", "8";
    /// Seconds a file transfer's body may stand still.
    FILES_IDLE_TIMEOUT = "STEPSHIM_FILES_IDLE_TIMEOUT", "--files-idle-timeout", "60";
    /// File transfers by grant tokens running at once, all grants together: a pool apart from the
    /// pod token's, so grant holders never take the pod's own slots.
    FILES_GRANT_MAX_CONCURRENT = "STEPSHIM_FILES_GRANT_MAX_CONCURRENT", "--files-grant-max-concurrent", "4";
    /// Bytes a file transfer must move per interval of waiting on its peer (0: no minimum).
    FILES_MIN_RATE_BYTES = "STEPSHIM_FILES_MIN_RATE_BYTES", "--files-min-rate-bytes", "65536";
    /// Seconds of waiting on its peer over which a file transfer's bytes are judged.
    FILES_MIN_RATE_INTERVAL = "STEPSHIM_FILES_MIN_RATE_INTERVAL", "--files-min-rate-interval", "30";
    /// Live read grants at once.
    MAX_GRANTS = "STEPSHIM_MAX_GRANTS", "--max-grants", "64";
    /// Pulls running at once.
    MAX_PULLS = "STEPSHIM_MAX_PULLS", "--max-pulls", "8";
    /// Retries (connection attempts after the first) in a row without progress before a pull
    /// fails.
    PULL_RETRIES = "STEPSHIM_PULL_RETRIES", "--pull-retries", "8";
    /// Seconds a pull keeps asking a source whose transfer slots are all taken (503) before it
    /// fails; those answers are waited out, not counted as retries.
    PULL_BUSY_SECONDS = "STEPSHIM_PULL_BUSY_SECONDS", "--pull-busy-seconds", "600";
    /// Properties kept at once (PROTOCOL.md 4.13).
    PROPERTIES_MAX_COUNT = "STEPSHIM_PROPERTIES_MAX_COUNT", "--properties-max-count", "256";
    /// Bytes of one property name.
    PROPERTIES_MAX_NAME_BYTES = "STEPSHIM_PROPERTIES_MAX_NAME_BYTES", "--properties-max-name-bytes", "255";
    /// Bytes of one property value.
    PROPERTIES_MAX_VALUE_BYTES = "STEPSHIM_PROPERTIES_MAX_VALUE_BYTES", "--properties-max-value-bytes", "1048576";
    /// Bytes of every property's name and value together.
    PROPERTIES_MAX_BYTES = "STEPSHIM_PROPERTIES_MAX_BYTES", "--properties-max-bytes", "4194304";
}

/// The setting of a variable name.
pub fn by_var(var: &str) -> Option<&'static Setting> {
    ALL.iter().find(|s| s.var == var)
}

/// The setting of a flag.
pub fn by_flag(flag: &str) -> Option<&'static Setting> {
    ALL.iter().find(|s| s.flag == flag)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// PROTOCOL.md section 7's table, row by row: variable, flag, default.
    fn documented() -> Vec<(String, String, String)> {
        let text = include_str!("../PROTOCOL.md");
        text.lines()
            .filter(|l| l.starts_with("| `STEPSHIM_"))
            .map(|l| {
                let cells: Vec<String> = l
                    .split('|')
                    .map(|c| c.trim().trim_matches('`').to_owned())
                    .collect();
                (cells[1].clone(), cells[2].clone(), cells[3].clone())
            })
            .collect()
    }

    #[test]
    fn the_table_is_the_documented_one() {
        let doc = documented();
        let ours: Vec<_> = ALL
            .iter()
            .map(|s| (s.var.to_owned(), s.flag.to_owned(), s.default.to_owned()))
            .collect();
        assert_eq!(
            ours, doc,
            "protocol/src/settings.rs and PROTOCOL.md section 7 differ"
        );
        assert_eq!(by_flag("--listen").map(|s| s.var), Some(LISTEN));
        assert_eq!(by_var(LOG).map(|s| s.default), Some("info"));
    }
}
