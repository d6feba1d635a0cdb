//! The settings as given: the `STEPSHIM_*` variables of the environment with the flags over them,
//! each read as the type and range it must have (durations, bounded numbers, the token's hash, TLS,
//! the data directory, the log level), an invalid one a [`ConfigError`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use protocol::settings as S;

use super::{ConfigError, TlsServer};

/// The settings given, by variable name: the environment's, with flags over them.
pub(super) struct Values(HashMap<&'static str, String>);

impl Values {
    /// Collects the `STEPSHIM_*` variables of `env`, then the flags of `args` over them.
    pub(super) fn collect(
        env: impl IntoIterator<Item = (String, String)>,
        args: impl IntoIterator<Item = String>,
    ) -> Result<Values, ConfigError> {
        let mut vals: HashMap<&'static str, String> = env
            .into_iter()
            .filter_map(|(k, v)| S::by_var(&k).map(|s| (s.var, v)))
            .collect();
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) => (f.to_owned(), Some(v.to_owned())),
                None => (arg.clone(), None),
            };
            let Some(setting) = S::by_flag(&flag) else {
                return Err(ConfigError::UnknownArgument(arg));
            };
            let var = setting.var;
            let value = match inline {
                Some(v) => v,
                None if var == S::INSECURE_NO_AUTH => "1".to_owned(),
                None => args.next().ok_or(ConfigError::Invalid {
                    name: var,
                    reason: "missing value".into(),
                })?,
            };
            vals.insert(var, value);
        }
        Ok(Values(vals))
    }

    /// A setting's value, else its documented default (`None` if it has none). An empty value
    /// counts as not given.
    pub(super) fn get(&self, name: &str) -> Option<&str> {
        let given = self
            .0
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty());
        given.or_else(|| S::by_var(name).map(|s| s.default).filter(|d| !d.is_empty()))
    }

    /// Seconds within [lo, 3600], decimal fractions allowed.
    pub(super) fn secs(&self, name: &'static str, lo: Duration) -> Result<Duration, ConfigError> {
        let text = self.get(name).unwrap_or_default();
        protocol::query::parse_seconds(text.trim())
            .filter(|d| *d >= lo && d.as_secs() <= 3600)
            .ok_or(ConfigError::Invalid {
                name,
                reason: if lo.is_zero() {
                    format!("{text:?}: must be 0 to 3600 seconds")
                } else {
                    format!("{text:?}: must be more than 0 and at most 3600 seconds")
                },
            })
    }

    /// An integer within [lo, hi].
    pub(super) fn ranged(&self, name: &'static str, lo: i64, hi: i64) -> Result<i64, ConfigError> {
        let v: i64 = parse(self.get(name).unwrap_or_default(), name)?;
        if (lo..=hi).contains(&v) {
            Ok(v)
        } else {
            Err(ConfigError::Invalid {
                name,
                reason: format!("must be {lo} to {hi}"),
            })
        }
    }

    /// The token's SHA-256: given, or read from its file; `None` only with the explicit opt-out.
    pub(super) fn token(&self) -> Result<Option<[u8; 32]>, ConfigError> {
        Ok(
            match (self.get(S::TOKEN_SHA256), self.get(S::TOKEN_SHA256_FILE)) {
                (Some(hex), _) => Some(parse_hex(hex.trim(), S::TOKEN_SHA256)?),
                (None, Some(path)) => Some(hex_file(path, S::TOKEN_SHA256_FILE)?),
                (None, None) => match self.get(S::INSECURE_NO_AUTH) {
                    Some("1") | Some("true") => None,
                    _ => return Err(ConfigError::NoToken),
                },
            },
        )
    }

    /// The TLS configuration of the key whose seed is given, or read from its file; refused by a
    /// build without TLS.
    pub(super) fn tls(&self) -> Result<Option<TlsServer>, ConfigError> {
        let seed = match (self.get(S::TLS_SEED), self.get(S::TLS_SEED_FILE)) {
            (Some(hex), _) => parse_hex(hex.trim(), S::TLS_SEED)?,
            (None, Some(path)) => hex_file(path, S::TLS_SEED_FILE)?,
            (None, None) => return Ok(None),
        };
        #[cfg(feature = "tls")]
        {
            let seed = stepshim_tls::Seed::from_bytes(seed);
            let config = stepshim_tls::server_config(&seed).map_err(|e| ConfigError::Invalid {
                name: S::TLS_SEED,
                reason: e.to_string(),
            })?;
            Ok(Some(TlsServer { config }))
        }
        #[cfg(not(feature = "tls"))]
        {
            let _ = seed;
            Err(ConfigError::NoTls)
        }
    }

    /// The data directory, which must be absolute.
    pub(super) fn data_dir(&self) -> Result<PathBuf, ConfigError> {
        let data_dir = PathBuf::from(self.get(S::DATA_DIR).unwrap_or_default());
        if !data_dir.is_absolute() {
            return Err(ConfigError::Invalid {
                name: S::DATA_DIR,
                reason: "must be absolute".into(),
            });
        }
        Ok(data_dir)
    }

    /// The log level, by name in any case.
    pub(super) fn log_level(&self) -> Result<crate::logging::Level, ConfigError> {
        use crate::logging::Level;
        Ok(
            match self
                .get(S::LOG)
                .unwrap_or_default()
                .to_ascii_lowercase()
                .as_str()
            {
                "error" => Level::Error,
                "warn" => Level::Warn,
                "info" => Level::Info,
                "debug" => Level::Debug,
                "trace" => Level::Trace,
                other => {
                    return Err(ConfigError::Invalid {
                        name: S::LOG,
                        reason: format!("unknown level {other:?}"),
                    });
                }
            },
        )
    }
}

/// Every flag, for the error that names an unknown one.
pub(super) fn flag_list() -> String {
    S::ALL.iter().map(|s| s.flag).collect::<Vec<_>>().join(" ")
}

pub(super) fn parse<T: std::str::FromStr>(s: &str, name: &'static str) -> Result<T, ConfigError>
where
    T::Err: std::fmt::Display,
{
    s.trim().parse().map_err(|e: T::Err| ConfigError::Invalid {
        name,
        reason: format!("{s:?}: {e}"),
    })
}

/// 64 hex digits read from the file `path` names (surrounding white space ignored).
fn hex_file(path: &str, name: &'static str) -> Result<[u8; 32], ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::TokenFile {
        name,
        path: path.to_owned(),
        source,
    })?;
    parse_hex(text.trim(), name)
}

fn parse_hex(s: &str, name: &'static str) -> Result<[u8; 32], ConfigError> {
    protocol::token::parse_sha256_hex(s).ok_or(ConfigError::Invalid {
        name,
        reason: "must be 64 hex digits (a SHA-256)".into(),
    })
}
