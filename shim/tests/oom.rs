//! Out of memory is the step's death, not the shim's: the real shim runs in a small memory cgroup
//! (v1, created for the test under the test's own and removed after), a process allocates past the
//! limit while another keeps streaming. The allocator is reported killed (137) with reason
//! `oom_kill` and `oom_killed`; the shim and the streaming process live on.
#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::{Shim, eventually, follow, sh};
use protocol::{ExitReason, State};

/// The test's own v1 memory cgroup directory.
fn own_memory_cgroup() -> Option<PathBuf> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let rel = own.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, ctl, path) = (f.next()?, f.next()?, f.next()?);
        ctl.split(',')
            .any(|c| c == "memory")
            .then(|| path.to_owned())
    })?;
    let dir = PathBuf::from("/sys/fs/cgroup/memory").join(rel.trim_start_matches('/'));
    dir.join("memory.oom_control").exists().then_some(dir)
}

/// A memory cgroup removed (after its processes are gone) when dropped.
struct Cgroup(PathBuf);

impl Drop for Cgroup {
    fn drop(&mut self) {
        for _ in 0..200 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        eprintln!("could not remove {}", self.0.display());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oom_kill_is_the_steps_death_and_is_reported() {
    let parent = own_memory_cgroup().expect("a cgroup v1 memory hierarchy (run as root)");
    let cg = Cgroup(parent.join(format!("stepshim-oom-{}", common::random_hex(4))));
    std::fs::create_dir(&cg.0).unwrap();
    let limit = (96u64 << 20).to_string();
    std::fs::write(cg.0.join("memory.limit_in_bytes"), &limit).unwrap();
    // With swap, the limit of memory plus swap must be set too, or the allocator swaps instead.
    let _ = std::fs::write(cg.0.join("memory.memsw.limit_in_bytes"), &limit);
    let join = format!("echo $$ > {}/cgroup.procs && exec \"$0\"", cg.0.display());
    let mut shim = Shim::start_with(&[], Some(&["sh", "-c", &join]));

    shim.client
        .spawn(
            "stream",
            &sh("i=0; while [ $i -lt 600 ]; do echo tick $i; i=$((i+1)); sleep 0.05; done"),
        )
        .await
        .unwrap();
    // Doubles a shell string until the kernel kills it.
    shim.client
        .spawn("hog", &sh("x=0123456789abcdef; while :; do x=$x$x; done"))
        .await
        .unwrap();
    let hog = follow(&shim.client, "hog").await;
    let exit = hog.exit.unwrap();
    assert_eq!(exit.status, 137, "{exit:?}");
    assert_eq!(exit.reason, Some(ExitReason::OomKill), "{exit:?}");
    assert!(exit.oom_killed, "{exit:?}");
    let p = shim.client.get("hog").await.unwrap();
    assert_eq!(p.exit.unwrap().reason, Some(ExitReason::OomKill));
    assert!(p.exit.unwrap().oom_killed);

    // The shim serves on and the other process still streams.
    shim.client.healthz().await.unwrap();
    let before = shim.client.get("stream").await.unwrap();
    assert_eq!(before.state, State::Running);
    let client = shim.client.clone();
    let mut last = before.output_end;
    for _ in 0..3 {
        let p = tokio::time::timeout(Duration::from_secs(5), client.get("stream"))
            .await
            .unwrap()
            .unwrap();
        last = last.max(p.output_end);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(last > before.output_end, "the streaming process stalled");
    let killed = shim.client.signal("stream", "KILL").await.unwrap();
    assert_eq!(killed.id, "stream");
    let p = shim.client.wait("stream", 10).await.unwrap();
    let exit = p.exit.unwrap();
    assert_eq!(
        (exit.reason, exit.oom_killed),
        (None, false),
        "a plain SIGKILL is no OOM kill"
    );
    let status = shim.terminate();
    assert!(status.success());
    eventually(Duration::from_secs(5), "the cgroup to empty", || {
        std::fs::read_to_string(cg.0.join("cgroup.procs")).is_ok_and(|s| s.trim().is_empty())
    })
    .await;
}
