//! The CPU a step pod's shim uses, read from the host's `/proc` (the single-node test cluster runs
//! its pods on this machine): the `stepshim` process whose cgroup names the pod's UID.

use std::fs;

/// The host pid of the shim in the pod with UID `uid`, if it runs on this machine.
pub fn find_shim(uid: &str) -> Option<u32> {
    // cgroupfs spells the UID as is, the systemd driver with underscores.
    let alt = uid.replace('-', "_");
    fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let comm = fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        if comm.trim_end() != "stepshim" {
            return None;
        }
        let cg = fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        (cg.contains(uid) || cg.contains(&alt)).then_some(pid)
    })
}

/// User plus system CPU seconds of `pid` (its own threads, not its children), None once gone.
pub fn cpu_secs(pid: u32) -> Option<f64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(") ")?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    // /proc times are in USER_HZ, 100 on every architecture Linux runs on.
    Some(ticks / 100.0)
}
