//! Out of memory is the step's death, not the shim's: every child gets a raised `oom_score_adj` so
//! the kernel picks it before the shim, and the container's memory cgroup's OOM kill counter (cgroup
//! v2 `memory.events`, v1 `memory.oom_control`) tells whether a process that died of `SIGKILL` (or
//! exited 137, as a shell does when its child was killed) was an OOM kill.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Where the shim's memory cgroup counts OOM kills, if anywhere readable. The file is opened once
/// and read with one `pread` at offset 0 (the kernel renders a cgroup file anew for a read from
/// the start): every spawn reads the count as its baseline.
#[derive(Debug, Default)]
pub(crate) struct OomCounter {
    file: Option<(PathBuf, File)>,
}

impl OomCounter {
    /// Finds the counter of the cgroup the shim is in (from `/proc/self/cgroup`), under `root`
    /// (normally `/sys/fs/cgroup`); in a container with its own cgroup namespace the path is `/`.
    pub(crate) fn locate(root: &Path) -> Self {
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let mut candidates = Vec::new();
        for line in own.lines() {
            let mut f = line.splitn(3, ':');
            let (Some(_), Some(controllers), Some(path)) = (f.next(), f.next(), f.next()) else {
                continue;
            };
            let rel = path.trim_start_matches('/');
            if controllers.is_empty() {
                candidates.push(root.join(rel).join("memory.events"));
            } else if controllers.split(',').any(|c| c == "memory") {
                candidates.push(root.join("memory").join(rel).join("memory.oom_control"));
            }
        }
        candidates.push(root.join("memory.events"));
        candidates.push(root.join("memory/memory.oom_control"));
        let file = candidates.into_iter().find_map(|p| {
            let f = File::open(&p).ok()?;
            read_count(&f).map(|_| (p, f))
        });
        OomCounter { file }
    }

    /// OOM kills counted so far, if the counter is readable.
    pub(crate) fn read(&self) -> Option<u64> {
        self.file.as_ref().and_then(|(_, f)| read_count(f))
    }

    /// The file read, for the log.
    pub(crate) fn file(&self) -> Option<&Path> {
        self.file.as_ref().map(|(p, _)| p.as_path())
    }
}

/// The `oom_kill N` line of a `memory.events` or `memory.oom_control` file (a few lines).
fn read_count(f: &File) -> Option<u64> {
    let mut buf = [0u8; 512];
    let n = f.read_at(&mut buf, 0).ok()?;
    std::str::from_utf8(&buf[..n])
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
}

/// Sets a process's `oom_score_adj` (-1000 to 1000). Raising it needs no privilege for a process of
/// the same user.
pub(crate) fn set_score_adj(pid: i32, adj: i32) -> std::io::Result<()> {
    std::fs::write(format!("/proc/{pid}/oom_score_adj"), adj.to_string())
}

/// Whether an exit looks like an OOM kill: `SIGKILL`, or status 137 from a shell whose child was
/// killed.
pub(crate) fn looks_killed(exit: &protocol::Exit) -> bool {
    exit.signal == Some(libc::SIGKILL) || exit.code == Some(128 + libc::SIGKILL)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_of_both_cgroup_versions() {
        let dir = std::env::temp_dir().join(format!("stepshim-oom-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("memory")).unwrap();
        std::fs::write(
            dir.join("memory/memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n",
        )
        .unwrap();
        let c = OomCounter::locate(&dir);
        assert_eq!(c.read(), Some(3));
        // The open file is read anew: a later kill is seen without reopening.
        std::fs::write(
            dir.join("memory/memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 4\n",
        )
        .unwrap();
        assert_eq!(c.read(), Some(4));
        std::fs::write(
            dir.join("memory.events"),
            "low 0\nhigh 0\nmax 4\noom 2\noom_kill 2\noom_group_kill 0\n",
        )
        .unwrap();
        assert_eq!(OomCounter::locate(&dir).read(), Some(2));
        assert_eq!(OomCounter::locate(&dir.join("none")).read(), None);
        std::fs::remove_dir_all(dir).ok();
        set_score_adj(std::process::id() as i32, 1000).unwrap();
        let adj = std::fs::read_to_string("/proc/self/oom_score_adj").unwrap();
        assert_eq!(adj.trim(), "1000");
    }
}
