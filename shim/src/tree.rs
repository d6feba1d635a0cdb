//! The process tree as `/proc` shows it: which live processes descend from the shim, and which ones a
//! process left behind after its leader exited (its group, its session, and their descendants,
//! including children that called `setsid`). Shutdown and forced delete signal what this finds.
//!
//! Pid reuse: once a leader is reaped its pid number stays allocated while any process still uses it
//! as a process group or session id, so it cannot name a new process then. A live process whose pid
//! is the reaped leader's therefore means the group is gone and the number was reused: nothing is
//! signalled for it.

/// One process from `/proc/<pid>/stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    /// Its pid.
    pub(crate) pid: i32,
    /// Its parent.
    pub(crate) ppid: i32,
    /// Its process group.
    pub(crate) pgid: i32,
    /// Its session.
    pub(crate) sid: i32,
    /// False for a zombie (exited, not yet reaped by its parent): nothing to signal.
    pub(crate) live: bool,
}

/// Every process visible in `/proc` (the shim's PID namespace), read once.
pub(crate) fn scan() -> Vec<Entry> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let e = e.ok()?;
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
        parse_stat(pid, &stat)
    })
    .collect()
}

/// Parses `/proc/<pid>/stat`: the fields after the command name (which may hold `)` and spaces)
/// are `state ppid pgrp session ...`.
pub(crate) fn parse_stat(pid: i32, stat: &str) -> Option<Entry> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest.split_ascii_whitespace();
    let state = f.next()?;
    let ppid = f.next()?.parse().ok()?;
    let pgid = f.next()?.parse().ok()?;
    let sid = f.next()?.parse().ok()?;
    Some(Entry {
        pid,
        ppid,
        pgid,
        sid,
        live: !matches!(state, "Z" | "X"),
    })
}

/// The live processes among those `root` selects and all their descendants. No hash maps (each
/// key type costs the binary its own copy of the table code): the entries are sorted by parent
/// once, and a process's children are the run of entries with its pid as their parent.
fn with_descendants(all: &[Entry], root: &dyn Fn(&Entry) -> bool) -> Vec<Entry> {
    let by_ppid = crate::order::sort_by(all.to_vec(), |a, b| a.ppid.cmp(&b.ppid));
    let mut seen = vec![false; by_ppid.len()];
    let mut todo: Vec<usize> = (0..by_ppid.len()).filter(|&i| root(&by_ppid[i])).collect();
    let mut out = Vec::new();
    // Each entry is visited once, so the walk ends even if /proc changed under the scan.
    while let Some(i) = todo.pop() {
        if std::mem::replace(&mut seen[i], true) {
            continue;
        }
        let e = by_ppid[i];
        if e.live {
            out.push(e);
        }
        let first = by_ppid.partition_point(|c| c.ppid < e.pid);
        let kids = by_ppid[first..]
            .iter()
            .take_while(|c| c.ppid == e.pid)
            .count();
        todo.extend(first..first + kids);
    }
    out
}

/// Live descendants of `ancestor` (not itself).
pub(crate) fn descendants(all: &[Entry], ancestor: i32) -> Vec<Entry> {
    with_descendants(all, &|e| e.ppid == ancestor)
}

/// What a process whose group and session id is `leader` left behind, as far as `/proc` can tell:
/// the live members of its process group and session, and every live descendant of those. With
/// `leader_reaped`, a live process holding the number `leader` is a newcomer that reused it, and the
/// answer is empty. Processes that left the session and whose parent exited (re-parented to the
/// shim) cannot be attributed and are not included.
pub(crate) fn left_behind(all: &[Entry], leader: i32, leader_reaped: bool) -> Vec<Entry> {
    if leader_reaped && all.iter().any(|e| e.pid == leader && e.live) {
        return Vec::new();
    }
    with_descendants(all, &|e| e.pgid == leader || e.sid == leader)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(pid: i32, ppid: i32, pgid: i32, sid: i32) -> Entry {
        Entry {
            pid,
            ppid,
            pgid,
            sid,
            live: true,
        }
    }

    #[test]
    fn stat_lines_with_odd_names() {
        let s = "42 (a) b (c)) S 1 42 42 0 -1 4194560 0";
        assert_eq!(parse_stat(42, s), Some(e(42, 1, 42, 42)));
        let z = parse_stat(7, "7 (sh) Z 1 7 7 0").unwrap();
        assert!(!z.live);
        assert_eq!(parse_stat(1, "garbage"), None);
    }

    #[test]
    fn group_session_and_setsid_descendants_are_left_behind() {
        // Shim 1; leader 10 reaped. 11 is in its group (re-parented to 1), 12 its child that called
        // setsid, 13 a grandchild; 20 is another process's group; 30 re-parented after setsid.
        let all = vec![
            e(11, 1, 10, 10),
            e(12, 11, 12, 12),
            e(13, 12, 12, 12),
            e(14, 1, 14, 10),
            e(20, 1, 20, 20),
            e(30, 1, 30, 30),
        ];
        let mut got: Vec<i32> = left_behind(&all, 10, true).iter().map(|e| e.pid).collect();
        got.sort();
        assert_eq!(got, vec![11, 12, 13, 14]);
        let mut d: Vec<i32> = descendants(&all, 1).iter().map(|e| e.pid).collect();
        d.sort();
        assert_eq!(d, vec![11, 12, 13, 14, 20, 30]);
        // A newcomer holding the number 10: the old group is gone, nothing is left behind.
        let reused = vec![e(10, 1, 10, 10), e(11, 10, 10, 10)];
        assert!(left_behind(&reused, 10, true).is_empty());
        assert_eq!(left_behind(&reused, 10, false).len(), 2);
    }
}
