//! CPU time of processes, for the benchmarks' cost columns: another process's from its
//! `/proc/PID/stat` (also as text read elsewhere, e.g. inside a pod), this process's own or its
//! reaped children's from `getrusage`.

/// User plus system CPU seconds in the text of a `/proc/PID/stat`, None if it is malformed.
pub fn stat_cpu_secs(stat: &str) -> Option<f64> {
    // Fields after the ")" that ends the command name (which may hold spaces): state is field 3,
    // utime 14, stime 15.
    let (_, rest) = stat.rsplit_once(") ")?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    // /proc times are in USER_HZ, 100 on every architecture Linux runs on.
    Some(ticks / 100.0)
}

/// User plus system CPU seconds of `pid` (its own threads, not its children), None once gone.
pub fn cpu_secs(pid: u32) -> Option<f64> {
    stat_cpu_secs(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// CPU seconds of this process, or of its reaped children.
pub fn own_cpu_secs(children: bool) -> f64 {
    use nix::sys::resource::{UsageWho, getrusage};
    let who = if children {
        UsageWho::RUSAGE_CHILDREN
    } else {
        UsageWho::RUSAGE_SELF
    };
    getrusage(who)
        .map(|u| {
            let t = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 / 1e6;
            t(u.user_time()) + t(u.system_time())
        })
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_utime_and_stime_past_a_name_with_spaces() {
        let stat = "42 (a b) c) S 1 42 42 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 1 0 5 0 0";
        assert_eq!(stat_cpu_secs(stat), Some(3.25));
        assert_eq!(stat_cpu_secs("42 (x"), None);
    }

    #[test]
    fn this_process_has_a_stat() {
        assert!(cpu_secs(std::process::id()).is_some());
        assert!(own_cpu_secs(false) >= 0.0);
    }
}
