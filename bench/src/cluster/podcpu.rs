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
