//! Tests of the output log: memory and spill segments, boundaries, budget accounting, failures.

use super::*;
use protocol::Decoder;
use std::os::unix::fs::FileExt;

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
fn the_write_behind_tail_serves_readers_and_is_freed_at_exit() {
    let dir = temp_dir("tail");
    // 1 MiB per log: room for memory chunks and a tail.
    let budget = Arc::new(Budget::new(16 * 1024 * 1024));
    assert!(budget.tails());
    let log = OutputLog::new(budget.clone(), dir.clone());
    let mut all = Vec::new();
    let mut read_to = 0u64;
    for i in 0..200usize {
        let size = (i * 7919) % (IO_CHUNK + 1);
        let payload: Vec<u8> = (0..size).map(|j| (i * 31 + j) as u8).collect();
        protocol::Frame::new(FrameType::Stdout, payload.clone()).encode_into(&mut all);
        log.append(FrameType::Stdout, &payload).expect("append");
        // A follower that keeps up, reading across the memory, file and tail parts.
        while read_to < all.len() as u64 {
            let b = log.read(read_to, usize::MAX).expect("read");
            assert_eq!(&b[..], &all[read_to as usize..read_to as usize + b.len()]);
            read_to += b.len() as u64;
        }
        assert!(budget.memory_bytes() <= 1024 * 1024);
    }
    let spilled = log
        .lock()
        .spill
        .as_ref()
        .map(|s| (s.has_tail(), s.written()));
    let (tail, written) = spilled.expect("spilled");
    assert!(tail, "a spilling log with room takes a tail");
    assert_eq!(written % 4096, 0, "the file is written in whole pages");
    assert_eq!(budget.disk_bytes(), written);
    protocol::Frame::new(FrameType::Exit, &b"{}"[..]).encode_into(&mut all);
    log.append(FrameType::Exit, b"{}").expect("exit");
    // The exit frame wrote the tail out and gave its memory back.
    assert!(!log.lock().spill.as_ref().expect("spilled").has_tail());
    assert_eq!(
        budget.memory_bytes() + budget.disk_bytes(),
        all.len() as u64
    );
    // Every byte reads back from any offset once the tail is gone.
    let mut got = Vec::new();
    let mut off = 0u64;
    while off < all.len() as u64 {
        let b = log.read(off, 50_000).expect("read");
        got.extend_from_slice(&b);
        off += b.len() as u64;
    }
    assert_eq!(got, all);
    log.free();
    assert_eq!(budget.memory_bytes(), 0);
    assert_eq!(budget.disk_bytes(), 0);
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
    let mut at = starts[50];
    while at < end {
        let chunk = log.read(at, usize::MAX).expect("read");
        assert!(!chunk.is_empty() && chunk.len() <= pool::STREAM_READ);
        at += chunk.len() as u64;
        d.push(&chunk);
        while d.next_frame().expect("frame").is_some() {}
    }
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

#[test]
fn chunk_reads_reuse_pooled_buffers_and_small_reads_do_not_pin_them() {
    let dir = temp_dir("pool");
    let log = OutputLog::new(Arc::new(Budget::new(1024 * 1024)), dir.clone());
    let (all, _) = fill(&log, 40);
    let first = log.read(0, IO_CHUNK).expect("read");
    assert_eq!(first.len(), IO_CHUNK);
    let ptr = first.as_ptr();
    drop(first);
    assert!(pool::idle().0 >= 1, "a dropped chunk returns its buffer");
    // Another chunk-sized read, from the spill file this time, lands in a buffer from the pool.
    let at = all.len() as u64 - IO_CHUNK as u64;
    let second = log.read(at, IO_CHUNK).expect("read");
    assert_eq!(&second[..], &all[at as usize..]);
    let reused = second.as_ptr() == ptr;
    drop(second);
    // Other tests share the pool; only a pool emptied by them can hand out another buffer.
    assert!(reused || pool::idle().0 > 1);
    // A follower's larger read takes a stream-sized buffer, which returns to its own pool.
    let big = log.read(0, usize::MAX).expect("read");
    assert_eq!(big.len(), pool::STREAM_READ.min(all.len()));
    assert_eq!(&big[..], &all[..big.len()]);
    drop(big);
    assert!(
        pool::idle().1 >= 1,
        "a dropped stream-sized chunk returns its buffer"
    );
    // A small read takes an exact allocation, never a chunk-sized buffer.
    let small = log.read(3, 100).expect("read");
    assert_eq!(&small[..], &all[3..103]);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn spill_files_have_no_name_in_the_data_dir() {
    let dir = temp_dir("tmpfile");
    for file in [spill::open(&dir), spill::open_named(&dir)] {
        let file = file.expect("spill file");
        file.write_all_at(b"spilled", 4096).expect("write");
        let mut back = [0u8; 7];
        file.read_exact_at(&mut back, 4096).expect("read");
        assert_eq!(&back, b"spilled");
        assert_eq!(std::fs::read_dir(&dir).expect("ls").count(), 0);
    }
    // A data directory that is not one fails cleanly, with no fallback that could write elsewhere.
    assert!(spill::open(&dir.join("missing")).is_err());
    std::fs::remove_dir_all(dir).ok();
}
