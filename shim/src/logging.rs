//! The shim's log: one line per event on stderr, `TIME LEVEL target: message k=v ...`, written by the
//! `error!`, `warn!`, `info!` and `debug!` macros exported here (fields as in `tracing`: `k = v` and
//! `k` for Debug, `k = %v` and `%k` for Display, `?v` for Debug; the message literal last). The shim
//! must fit in a ConfigMap: every event goes through one non-generic [`emit`] with its fields as trait
//! objects: `tracing`'s callsites, registry and dispatch cost the binary about 34 KiB.

use std::fmt::{self, Write as _};
use std::sync::atomic::{AtomicU8, Ordering};

mod behind;

pub(crate) use behind::flusher;
pub use behind::{discard, hold, release, stop};

/// Severity of an event; a logger at one level writes it and every more severe one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Failures the shim survives but an operator must hear of.
    Error = 1,
    /// A protection or resource missing; serving goes on.
    Warn,
    /// Lifecycle: listening, spawns, deletes, shutdown.
    Info,
    /// Per-connection and per-process detail.
    Debug,
    /// Everything.
    Trace,
}

impl Level {
    /// The name in upper case, as written in a line.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Level::Error => "ERROR",
            Level::Warn => "WARN",
            Level::Info => "INFO",
            Level::Debug => "DEBUG",
            Level::Trace => "TRACE",
        }
    }
}

/// The most verbose level written; 0 (nothing) until [`install`].
static MAX: AtomicU8 = AtomicU8::new(0);

/// Starts writing events at `max` or more severe to stderr.
pub fn install(max: Level) {
    MAX.store(max as u8, Ordering::Relaxed);
}

/// Whether events at `level` are written.
pub fn enabled(level: Level) -> bool {
    level as u8 <= MAX.load(Ordering::Relaxed)
}

/// A field's value, formatted with Display or Debug.
#[derive(Clone, Copy)]
pub enum Value<'a> {
    /// Written with `{}`.
    Display(&'a dyn fmt::Display),
    /// Written with `{:?}`.
    Debug(&'a dyn fmt::Debug),
}

impl fmt::Debug for Value<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Display(v) => v.fmt(f),
            Value::Debug(v) => v.fmt(f),
        }
    }
}

/// One line (without the newline): time, level, target, message, then each field as ` k=v`.
pub(crate) fn format_line(
    level: Level,
    target: &str,
    message: &dyn fmt::Display,
    fields: &[(&str, Value<'_>)],
) -> String {
    let mut line = format!(
        "{} {:>5} {target}: {message}",
        crate::clock::rfc3339(std::time::SystemTime::now()),
        level.as_str(),
    );
    for (name, value) in fields {
        let _ = write!(line, " {name}={value:?}");
    }
    line
}

/// Writes one event if its level is enabled: errors and warnings at once, finer lines behind while a
/// `flusher` runs (see `behind`). Logging never takes the shim down: a closed stderr is ignored.
pub fn emit(level: Level, target: &str, message: &dyn fmt::Display, fields: &[(&str, Value<'_>)]) {
    if !enabled(level) {
        return;
    }
    let mut line = format_line(level, target, message, fields);
    line.push('\n');
    behind::write(line.as_bytes(), level <= Level::Warn);
}

/// Logs an event at [`Level::Error`]: `error!(k = %v, "message")`.
#[macro_export]
macro_rules! error {
    ($($t:tt)+) => { $crate::__log!($crate::logging::Level::Error, [] $($t)+) };
}

/// Logs an event at [`Level::Warn`]: `warn!(k = %v, "message")`.
#[macro_export]
macro_rules! warn {
    ($($t:tt)+) => { $crate::__log!($crate::logging::Level::Warn, [] $($t)+) };
}

/// Logs an event at [`Level::Info`]: `info!(k = %v, "message")`.
#[macro_export]
macro_rules! info {
    ($($t:tt)+) => { $crate::__log!($crate::logging::Level::Info, [] $($t)+) };
}

/// Logs an event at [`Level::Debug`]: `debug!(k = %v, "message")`.
#[macro_export]
macro_rules! debug {
    ($($t:tt)+) => { $crate::__log!($crate::logging::Level::Debug, [] $($t)+) };
}

/// Collects the fields of an event, then calls [`emit`] if its level is enabled.
#[doc(hidden)]
#[macro_export]
macro_rules! __log {
    ($lvl:expr, [$($f:tt)*] $k:ident = %$v:expr, $($rest:tt)+) => {
        $crate::__log!($lvl, [$($f)* (stringify!($k), $crate::logging::Value::Display(&$v)),] $($rest)+)
    };
    ($lvl:expr, [$($f:tt)*] $k:ident = ?$v:expr, $($rest:tt)+) => {
        $crate::__log!($lvl, [$($f)* (stringify!($k), $crate::logging::Value::Debug(&$v)),] $($rest)+)
    };
    ($lvl:expr, [$($f:tt)*] $k:ident = $v:expr, $($rest:tt)+) => {
        $crate::__log!($lvl, [$($f)* (stringify!($k), $crate::logging::Value::Debug(&$v)),] $($rest)+)
    };
    ($lvl:expr, [$($f:tt)*] %$k:ident, $($rest:tt)+) => {
        $crate::__log!($lvl, [$($f)* (stringify!($k), $crate::logging::Value::Display(&$k)),] $($rest)+)
    };
    ($lvl:expr, [$($f:tt)*] ?$k:ident, $($rest:tt)+) => {
        $crate::__log!($lvl, [$($f)* (stringify!($k), $crate::logging::Value::Debug(&$k)),] $($rest)+)
    };
    ($lvl:expr, [$($f:tt)*] $k:ident, $($rest:tt)+) => {
        $crate::__log!($lvl, [$($f)* (stringify!($k), $crate::logging::Value::Debug(&$k)),] $($rest)+)
    };
    ($lvl:expr, [$($f:tt)*] $msg:literal) => {
        if $crate::logging::enabled($lvl) {
            $crate::logging::emit($lvl, module_path!(), &$msg, &[$($f)*])
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_has_time_level_target_message_and_fields() {
        let e = std::io::Error::other("gone");
        let id = "p1";
        let line = format_line(
            Level::Warn,
            "stepshim::pump",
            &"reading failed",
            &[("id", Value::Debug(&id)), ("cause", Value::Display(&e))],
        );
        let (time, rest) = line.split_once(' ').unwrap();
        assert!(time.ends_with('Z') && time.len() == 24, "{time}");
        assert_eq!(
            rest,
            " WARN stepshim::pump: reading failed id=\"p1\" cause=gone"
        );
    }

    #[test]
    fn levels_filter_the_less_severe() {
        assert!(Level::Error < Level::Warn && Level::Info < Level::Debug);
        let before = MAX.swap(Level::Info as u8, Ordering::Relaxed);
        let seen = (
            enabled(Level::Warn),
            enabled(Level::Info),
            enabled(Level::Debug),
        );
        MAX.store(before, Ordering::Relaxed);
        assert_eq!(seen, (true, true, false));
    }
}
