//! A minimal `tracing` subscriber: one line per event on stderr, `TIME LEVEL target: message k=v ...`.
//! The shim must fit in a ConfigMap, and a full formatting subscriber costs a tenth of that budget;
//! the shim uses events only (no spans), so this is all it needs.

use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// Writes events at `max` or more severe to stderr.
#[derive(Debug)]
pub struct StderrLogger {
    max: Level,
    next_span: AtomicU64,
}

impl StderrLogger {
    /// A logger for events at `max` or more severe.
    pub fn new(max: Level) -> Self {
        StderrLogger {
            max,
            next_span: AtomicU64::new(1),
        }
    }

    /// Installs it as the global default; false if one was already set.
    pub fn install(self) -> bool {
        tracing::subscriber::set_global_default(self).is_ok()
    }
}

struct Line(String);

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, " {value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            let _ = write!(self.0, " {value}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }
}

/// Formats an event as one line (without the newline).
pub fn format_event(event: &Event<'_>) -> String {
    let meta = event.metadata();
    let mut line = Line(format!(
        "{} {:>5} {}:",
        crate::clock::rfc3339(std::time::SystemTime::now()),
        meta.level().as_str(),
        meta.target()
    ));
    event.record(&mut line);
    line.0
}

impl Subscriber for StderrLogger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= &self.max
    }

    fn new_span(&self, _span: &Attributes<'_>) -> Id {
        Id::from_u64(self.next_span.fetch_add(1, Ordering::Relaxed))
    }

    fn record(&self, _span: &Id, _values: &Record<'_>) {}

    fn record_follows_from(&self, _span: &Id, _follows: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut line = format_event(event);
        line.push('\n');
        // Logging must never take the shim down: a closed stderr is ignored.
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn enter(&self, _span: &Id) {}

    fn exit(&self, _span: &Id) {}

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::from_level(self.max))
    }
}
