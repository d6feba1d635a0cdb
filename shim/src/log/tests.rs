//! Tests of the output log: memory and spill segments, boundaries, budget accounting, failures.

use super::*;
use protocol::Decoder;

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("stepshim-logtest-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// Appends frames of varied sizes; returns the expected bytes and every frame start.
fn fill(log: &OutputLog, frames: usize) -> (Vec<u8>, Vec<u64>) {
    let mut all = Vec::new();
    let mut starts = Vec::new();
    for i in 0..frames {
        let size = (i * 7919) % 70_000;
        let payload: Vec<u8> = (0..size).map(|j| (i + j) as u8).collect();
        let kind = if i % 3 == 0 {
            FrameType::Stderr
        } else {
            FrameType::Stdout
        };
        starts.push(all.len() as u64);
        protocol::Frame::new(kind, payload.clone()).encode_into(&mut all);
        log.append(kind, &payload).expect("append");
    }
    (all, starts)
}

#[test]
fn memory_then_spill_reads_back_every_byte() {
    let dir = temp_dir("spill");
    let budget = Arc::new(Budget::new(1024 * 1024)); // 64 KiB per log: most of this spills
    let log = OutputLog::new(budget.clone(), dir.clone());
    let (all, _) = fill(&log, 60);
    assert_eq!(log.state().end, all.len() as u64);
    assert!(budget.memory_bytes() <= 64 * 1024);
    assert_eq!(
        budget.memory_bytes() + budget.disk_bytes(),
        all.len() as u64
    );
    // Unaligned reads across the memory/disk seam and chunk seams.
    let mut got = Vec::new();
    let mut off = 0u64;
    let mut step = 1usize;
    while off < all.len() as u64 {
        let b = log.read(off, step).expect("read");
        assert!(!b.is_empty());
        got.extend_from_slice(&b);
        off += b.len() as u64;
        step = (step * 3 + 1) % 100_000 + 1;
    }
    assert_eq!(got, all);
    assert!(log.read(all.len() as u64, 10).expect("read").is_empty());
    // The spill file is unlinked: the data dir stays empty.
    assert_eq!(std::fs::read_dir(&dir).expect("ls").count(), 0);
    log.free();
    assert_eq!(budget.memory_bytes(), 0);
    assert_eq!(budget.disk_bytes(), 0);
    assert!(log.state().freed);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn boundaries_match_frame_starts_exactly() {
    let dir = temp_dir("bound");
    let log = OutputLog::new(Arc::new(Budget::new(2 * 1024 * 1024)), dir.clone());
    let (all, starts) = fill(&log, 120);
    let end = all.len() as u64;
    for &s in &starts {
        assert!(log.is_boundary(s).expect("check"), "{s} is a frame start");
        for d in [1u64, 7, 8, 9, 4096] {
            if s + d < end && !starts.contains(&(s + d)) {
                assert!(
                    !log.is_boundary(s + d).expect("check"),
                    "{} is inside a frame",
                    s + d
                );
            }
        }
    }
    assert!(log.is_boundary(end).expect("end"));
    assert!(!log.is_boundary(end + 8).expect("past end"));
    // A decoder started at any boundary sees whole frames to the end.
    let mut d = Decoder::new(starts[50]);
    d.push(&log.read(starts[50], usize::MAX).expect("read"));
    while d.next_frame().expect("frame").is_some() {}
    assert_eq!(d.offset(), end);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn spill_failure_appends_nothing_so_the_caller_can_retry() {
    let missing = std::env::temp_dir().join(format!("stepshim-nodir-{}", std::process::id()));
    let log = OutputLog::new(Arc::new(Budget::new(0)), missing.clone());
    assert!(log.append(FrameType::Stdout, b"hello").is_err());
    assert_eq!(log.state().end, 0);
    std::fs::create_dir_all(&missing).expect("mkdir");
    log.append(FrameType::Stdout, b"hello")
        .expect("retry succeeds");
    assert_eq!(
        log.read(0, 100).expect("read").as_ref(),
        b"\x01\0\0\0\0\0\0\x05hello"
    );
    std::fs::remove_dir_all(missing).ok();
}

#[test]
fn exit_frame_completes_and_later_appends_are_ignored() {
    let log = OutputLog::new(Arc::new(Budget::new(1 << 20)), std::env::temp_dir());
    let mut rx = log.subscribe();
    log.append(FrameType::Stdout, b"x").expect("append");
    log.append(FrameType::Exit, br#"{"code":0}"#).expect("exit");
    log.append(FrameType::Stdout, b"late").expect("ignored");
    let st = *rx.borrow_and_update();
    assert!(st.complete);
    assert_eq!(st.end, 9 + 8 + 10);
}
