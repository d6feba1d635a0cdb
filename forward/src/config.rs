//! The forwarder's settings from `STEPSHIM_FORWARD_*` variables (names and defaults in
//! `protocol::forward`, documented in docs/operator-guide.md), read through one function that tests
//! feed directly. Invalid configuration is a [`ConfigError`]; `main` turns it into exit 64.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use protocol::forward as S;

use protocol::forward::Cidr;

/// The forwarder's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Address to serve on.
    pub listen: SocketAddr,
    /// The pod networks a request's source address must lie in (at least one).
    pub allow: Vec<Cidr>,
    /// The port of the source shims.
    pub shim_port: u16,
    /// Client connections open at once. At the cap the oldest connection without a request yet,
    /// else the oldest without one in flight, is closed for the new one; only when every open
    /// connection has a request in flight is the new one answered 503 and closed.
    pub max_connections: usize,
    /// Time to open a connection to a source, TLS handshake included.
    pub connect_timeout: Duration,
    /// Time a connection (a client's with the source's it is streaming from) may go without a
    /// byte moving either way; also the wait for a source's answer head.
    pub idle_timeout: Duration,
    /// Time a new connection has to send its first complete request head: what a connection that
    /// never asks for anything holds a slot for, when the cap does not evict it first.
    pub first_request_timeout: Duration,
    /// Bytes of a request's line and headers together (at least 8 KiB, hyper's floor).
    pub max_header_bytes: usize,
    /// Log level filter.
    pub log_level: tracing::Level,
    /// Where to write the listen address once serving.
    pub ready_file: Option<PathBuf>,
}

/// Why the configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// `STEPSHIM_FORWARD_ALLOW` is missing: the forwarder would reach nothing, or everything.
    #[error(
        "no {var}: set it to the pod network's IPv4 CIDRs, comma-separated (e.g. 10.244.0.0/16)",
        var = S::ALLOW
    )]
    NoAllow,
    /// A setting had an unusable value.
    #[error("invalid {name}: {reason}")]
    Invalid {
        /// The variable's name.
        name: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The forwarder takes no command-line arguments.
    #[error("unexpected argument {0:?}: the forwarder's settings are STEPSHIM_FORWARD_* variables")]
    Argument(String),
}

impl Config {
    /// Reads the configuration from environment pairs (others than `STEPSHIM_FORWARD_*` are
    /// ignored) and the command-line arguments (without `argv[0]`), of which there must be none.
    pub fn from_sources(
        env: impl IntoIterator<Item = (String, String)>,
        args: impl IntoIterator<Item = String>,
    ) -> Result<Config, ConfigError> {
        if let Some(arg) = args.into_iter().next() {
            return Err(ConfigError::Argument(arg));
        }
        let v = Values(
            env.into_iter()
                .filter_map(|(k, v)| S::by_var(&k).map(|s| (s.var, v)))
                .collect(),
        );
        let listen: SocketAddr = parse(v.get(S::LISTEN), S::LISTEN)?;
        // Off loopback, anyone on the node's network could use the node's own address (which a
        // NetworkPolicy admits for the forwarder) to reach pods it would not admit them to.
        if !listen.ip().is_loopback() {
            return Err(ConfigError::Invalid {
                name: S::LISTEN,
                reason: format!("{listen}: must be a loopback address (127.0.0.1 or ::1)"),
            });
        }
        Ok(Config {
            listen,
            allow: v.allow()?,
            shim_port: v.ranged(S::SHIM_PORT, 1, 65535)? as u16,
            max_connections: v.ranged(S::MAX_CONNECTIONS, 1, 1 << 20)? as usize,
            connect_timeout: v.secs(S::CONNECT_TIMEOUT)?,
            idle_timeout: v.secs(S::IDLE_TIMEOUT)?,
            first_request_timeout: v.secs(S::FIRST_REQUEST_TIMEOUT)?,
            max_header_bytes: v.ranged(S::MAX_HEADER_BYTES, 8 << 10, 1 << 20)? as usize,
            log_level: v.log_level()?,
            ready_file: Some(v.get(S::READY_FILE))
                .filter(|p| !p.is_empty())
                .map(PathBuf::from),
        })
    }
}

/// The settings given, by variable name.
struct Values(HashMap<&'static str, String>);

impl Values {
    /// A setting's value, else its documented default (empty if it has none). An empty value
    /// counts as not given.
    fn get(&self, name: &'static str) -> &str {
        match self.0.get(name).map(|v| v.trim()).filter(|v| !v.is_empty()) {
            Some(v) => v,
            None => S::by_var(name).map(|s| s.default).unwrap_or_default(),
        }
    }

    /// Seconds, more than 0 and at most 3600, decimal fractions allowed.
    fn secs(&self, name: &'static str) -> Result<Duration, ConfigError> {
        let text = self.get(name);
        protocol::query::parse_seconds(text)
            .filter(|d| !d.is_zero() && d.as_secs() <= 3600)
            .ok_or(ConfigError::Invalid {
                name,
                reason: format!("{text:?}: must be more than 0 and at most 3600 seconds"),
            })
    }

    /// An integer within [lo, hi].
    fn ranged(&self, name: &'static str, lo: u64, hi: u64) -> Result<u64, ConfigError> {
        let v: u64 = parse(self.get(name), name)?;
        if (lo..=hi).contains(&v) {
            Ok(v)
        } else {
            Err(ConfigError::Invalid {
                name,
                reason: format!("must be {lo} to {hi}"),
            })
        }
    }

    /// The allowed networks: at least one IPv4 CIDR.
    fn allow(&self) -> Result<Vec<Cidr>, ConfigError> {
        let text = self.get(S::ALLOW);
        if text.is_empty() {
            return Err(ConfigError::NoAllow);
        }
        text.split(',')
            .map(|c| {
                c.trim().parse().map_err(|e| ConfigError::Invalid {
                    name: S::ALLOW,
                    reason: format!("{:?}: {e}", c.trim()),
                })
            })
            .collect()
    }

    /// The log level, by name in any case.
    fn log_level(&self) -> Result<tracing::Level, ConfigError> {
        self.get(S::LOG).parse().map_err(|_| ConfigError::Invalid {
            name: S::LOG,
            reason: format!(
                "{:?}: want error, warn, info, debug or trace",
                self.get(S::LOG)
            ),
        })
    }
}

fn parse<T: std::str::FromStr>(s: &str, name: &'static str) -> Result<T, ConfigError>
where
    T::Err: std::fmt::Display,
{
    s.parse().map_err(|e: T::Err| ConfigError::Invalid {
        name,
        reason: format!("{s:?}: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        Config::from_sources(env, [])
    }

    #[test]
    fn defaults_apply_and_the_allowed_networks_are_required() {
        let c = config(&[(S::ALLOW, "10.244.0.0/16, 10.96.0.0/12")]).unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:7779");
        assert_eq!(c.allow.len(), 2);
        assert_eq!(c.shim_port, protocol::settings::PORT);
        assert_eq!(c.idle_timeout, Duration::from_secs(60));
        assert_eq!(c.first_request_timeout, Duration::from_secs(10));
        assert_eq!(c.max_header_bytes, 16384);
        assert!(c.ready_file.is_none());
        let err = config(&[]).unwrap_err().to_string();
        assert!(err.starts_with("no STEPSHIM_FORWARD_ALLOW"), "{err}");
    }

    #[test]
    fn the_settings_are_the_documented_ones() {
        let guide = include_str!("../../docs/operator-guide.md");
        let documented: Vec<(String, String)> = guide
            .lines()
            .filter(|l| l.starts_with("| `STEPSHIM_FORWARD_"))
            .map(|l| {
                let cells: Vec<&str> = l.split('|').map(|c| c.trim().trim_matches('`')).collect();
                (cells[1].to_owned(), cells[2].to_owned())
            })
            .collect();
        let ours: Vec<(String, String)> = S::ALL
            .iter()
            .map(|s| (s.var.to_owned(), s.default.to_owned()))
            .collect();
        assert_eq!(
            ours, documented,
            "protocol::forward and docs/operator-guide.md differ"
        );
    }

    #[test]
    fn bad_values_are_refused_by_name() {
        for (var, value) in [
            (S::ALLOW, "10.0.0.0/33"),
            (S::ALLOW, "fd00::/8"),
            (S::LISTEN, "nope"),
            (S::LISTEN, "0.0.0.0:7779"),
            (S::LISTEN, "10.0.0.1:7779"),
            (S::SHIM_PORT, "0"),
            (S::IDLE_TIMEOUT, "0"),
            (S::FIRST_REQUEST_TIMEOUT, "0"),
            (S::FIRST_REQUEST_TIMEOUT, "3601"),
            (S::CONNECT_TIMEOUT, "4000"),
            (S::MAX_HEADER_BYTES, "100"),
            (S::LOG, "loud"),
        ] {
            let mut env = vec![(S::ALLOW, "10.0.0.0/8")];
            env.push((var, value));
            let err = config(&env).unwrap_err().to_string();
            assert!(
                err.starts_with(&format!("invalid {var}: ")),
                "{var}={value}: {err}"
            );
        }
        let err = Config::from_sources([], ["--listen".to_owned()]).unwrap_err();
        assert!(matches!(err, ConfigError::Argument(_)));
    }
}
