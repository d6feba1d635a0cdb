//! What a step's own processes must not be able to do to the shim, and what they must not inherit
//! from it, through the real binary: a step that pre-creates the spill files' names in the shared
//! data directory cannot stall output, and children get the open-files limit the shim was started
//! with, not the one it raised for itself.
#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod common;

use std::time::Duration;

use common::{Shim, run, sh};
use protocol::Exit;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn precreated_spill_names_cannot_stall_output() {
    let dir = std::env::temp_dir().join(format!("stepshim-isolation-{}", common::random_hex(8)));
    std::fs::create_dir_all(&dir).unwrap();
    let dir_s = dir.to_str().unwrap();
    // 1 MiB of memory: one log keeps 64 KiB, so 2 MiB of output must spill.
    let shim = Shim::start_with(
        &[
            ("STEPSHIM_MEMORY_BYTES", "1048576"),
            ("STEPSHIM_DATA_DIR", dir_s),
        ],
        None,
    );
    // The step takes every name a shim that numbers its spill files would use (its parent is the
    // shim), as files and as symlinks, before it writes the output that must spill.
    let script = format!(
        "for i in $(seq 0 255); do : > {dir_s}/stepshim-$PPID-$i.log; \
         ln -s /dev/full {dir_s}/stepshim-spill-$i 2>/dev/null; done; \
         head -c 2097152 /dev/zero"
    );
    let ran = tokio::time::timeout(
        Duration::from_secs(60),
        run(&shim.client, "spill", &sh(&script)),
    )
    .await
    .unwrap_or_else(|_| {
        panic!(
            "output stalled behind pre-created spill names:\n{}",
            shim.log.lock().unwrap()
        )
    });
    assert_eq!(ran.exit, Some(Exit::code(0)));
    assert_eq!(
        ran.stdout.len(),
        2 << 20,
        "every byte of the spilled output"
    );
    assert!(ran.stdout.iter().all(|&b| b == 0));
    // The shim added no name of its own to the shared directory.
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with("stepshim-spill-") && !n.ends_with(".log"))
        .collect();
    assert!(names.is_empty(), "left in the data dir: {names:?}");
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_get_the_open_files_limit_the_shim_started_with() {
    // Start the shim with a low soft limit under a hard limit above it.
    let shim = Shim::start_with(
        &[],
        Some(&["/bin/sh", "-c", "ulimit -Sn 512 && exec \"$0\""]),
    );
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", shim.pid())).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let fields: Vec<&str> = line.split_whitespace().collect();
    let (soft, hard) = (fields[3], fields[4]);
    assert_ne!(
        hard, "512",
        "the hard limit must be above 512 for this test: {line}"
    );
    assert_eq!(soft, hard, "the shim raises its own soft limit: {line}");
    let ran = run(&shim.client, "ulimit", &sh("ulimit -Sn; ulimit -Hn")).await;
    assert_eq!(ran.exit, Some(Exit::code(0)));
    assert_eq!(
        String::from_utf8_lossy(&ran.stdout),
        format!("512\n{hard}\n"),
        "a step sees the limit the shim was started with"
    );
}
