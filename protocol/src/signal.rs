//! Signal names and numbers accepted by `POST /v1/processes/{id}/signal` (Linux numbering).

use crate::types::SignalSpec;

/// Linux signal names without the `SIG` prefix, with their numbers.
pub const SIGNALS: &[(&str, i32)] = &[
    ("HUP", 1),
    ("INT", 2),
    ("QUIT", 3),
    ("ILL", 4),
    ("TRAP", 5),
    ("ABRT", 6),
    ("IOT", 6),
    ("BUS", 7),
    ("FPE", 8),
    ("KILL", 9),
    ("USR1", 10),
    ("SEGV", 11),
    ("USR2", 12),
    ("PIPE", 13),
    ("ALRM", 14),
    ("TERM", 15),
    ("STKFLT", 16),
    ("CHLD", 17),
    ("CONT", 18),
    ("STOP", 19),
    ("TSTP", 20),
    ("TTIN", 21),
    ("TTOU", 22),
    ("URG", 23),
    ("XCPU", 24),
    ("XFSZ", 25),
    ("VTALRM", 26),
    ("PROF", 27),
    ("WINCH", 28),
    ("IO", 29),
    ("POLL", 29),
    ("PWR", 30),
    ("SYS", 31),
];

/// Highest signal number accepted (the last real-time signal on Linux).
pub const MAX_SIGNAL: i32 = 64;

/// The signal number for a name (`TERM`, `SIGTERM`, `term`) or number (1..=64), or `None`.
pub fn parse(spec: &SignalSpec) -> Option<i32> {
    match spec {
        SignalSpec::Number(n) => (1..=i64::from(MAX_SIGNAL)).contains(n).then_some(*n as i32),
        SignalSpec::Name(name) => {
            let upper = name.trim().to_ascii_uppercase();
            let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
            if let Ok(n) = bare.parse::<i32>() {
                return (1..=MAX_SIGNAL).contains(&n).then_some(n);
            }
            SIGNALS.iter().find(|(n, _)| *n == bare).map(|(_, v)| *v)
        }
    }
}

/// The name of a signal number without `SIG`, if it has one.
pub fn name(sig: i32) -> Option<&'static str> {
    SIGNALS.iter().find(|(_, v)| *v == sig).map(|(n, _)| *n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_numbers_and_junk() {
        assert_eq!(parse(&SignalSpec::Name("TERM".into())), Some(15));
        assert_eq!(parse(&SignalSpec::Name("sigkill".into())), Some(9));
        assert_eq!(parse(&SignalSpec::Name("SIGWINCH".into())), Some(28));
        assert_eq!(parse(&SignalSpec::Name("12".into())), Some(12));
        assert_eq!(parse(&SignalSpec::Number(34)), Some(34));
        assert_eq!(parse(&SignalSpec::Number(0)), None);
        assert_eq!(parse(&SignalSpec::Number(65)), None);
        assert_eq!(parse(&SignalSpec::Name("NOPE".into())), None);
        assert_eq!(parse(&SignalSpec::Name("".into())), None);
        assert_eq!(name(15), Some("TERM"));
    }
}
