//! CPU time of processes, for the benchmarks' cost columns: another process's from its
//! `/proc/PID/stat` (also as text read elsewhere, e.g. inside a pod) in clock ticks, or to the
//! nanosecond from its threads' `/proc/PID/task/TID/sched` where the kernel has them; this process's
//! own or its reaped children's from `getrusage`.

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

/// CPU seconds of `pid`'s live threads to the nanosecond (the scheduler's `se.sum_exec_runtime`,
/// in milliseconds in `/proc/PID/task/TID/sched`), falling back to [`cpu_secs`]'s clock ticks on a
/// kernel without that file. For costs of a few microseconds, which ticks of 10 ms cannot show.
pub fn fine_cpu_secs(pid: u32) -> Option<f64> {
    let fine = || -> Option<f64> {
        // A thread that ends while the directory is read is left out, as it would be a moment
        // later; a kernel without the file leaves them all out.
        let ms: Vec<f64> = std::fs::read_dir(format!("/proc/{pid}/task"))
            .ok()?
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("sched")).ok())
            .filter_map(|sched| sched_runtime_ms(&sched))
            .collect();
        (!ms.is_empty()).then(|| ms.iter().sum::<f64>() / 1e3)
    };
    fine().or_else(|| cpu_secs(pid))
}

/// `se.sum_exec_runtime` in the text of a `/proc/PID/sched`.
fn sched_runtime_ms(sched: &str) -> Option<f64> {
    sched.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == "se.sum_exec_runtime").then(|| v.trim().parse().ok())?
    })
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

    #[test]
    fn a_busy_process_gains_fine_cpu_time() {
        let mut busy = std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let before = fine_cpu_secs(busy.id()).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let after = fine_cpu_secs(busy.id()).unwrap();
        busy.kill().unwrap();
        busy.wait().unwrap();
        assert!(after > before, "{before} then {after}");
    }

    #[test]
    fn reads_the_scheduler_runtime() {
        let sched =
            "x (1, #threads: 1)\n---\nse.exec_start  :  14.5\nse.sum_exec_runtime   :   0.792429\n";
        assert_eq!(sched_runtime_ms(sched), Some(0.792429));
        assert_eq!(sched_runtime_ms("se.vruntime : 1.0"), None);
    }
}
