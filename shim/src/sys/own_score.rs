//! A child's `oom_score_adj` by inheritance, where that is free: when the shim's own score already
//! is the children's (a BestEffort pod, whose processes the kubelet starts at 1000, the default of
//! `STEPSHIM_OOM_SCORE_ADJ`), the child keeps the score it inherits and does not write
//! `/proc/self/oom_score_adj` itself. That write cost the child about 14 µs here (most of it
//! instantiating the new pid's `/proc` entries) while the shim waited suspended.
//!
//! The shim never moves its own score to lend it to a child: raising it around the `clone` saved
//! the same 14 µs everywhere (measured), but a memory cgroup's OOM is most likely right then (the
//! `clone` itself charges the cgroup) and would find PID 1 at the step's score.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::OnceLock;

/// Whether a child inherits `adj` from the shim: its own score, read from a file kept open (the
/// runtime or an operator may change it while the shim runs), is `adj`.
pub(crate) fn inherits(adj: i32) -> bool {
    static OWN: OnceLock<Option<File>> = OnceLock::new();
    let Some(file) = OWN
        .get_or_init(|| File::open("/proc/self/oom_score_adj").ok())
        .as_ref()
    else {
        return false;
    };
    let mut buf = [0u8; 16];
    let Ok(n) = file.read_at(&mut buf, 0) else {
        return false;
    };
    std::str::from_utf8(&buf[..n])
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok())
        == Some(adj)
}
