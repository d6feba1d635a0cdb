//! Output log behaviour through the real shim: 100 MiB checksummed, resume under repeated forced
//! disconnects (cut mid-frame by a proxy), reads from random frame offsets, spill to disk, offsets
//! that are not frame boundaries, and keepalive-free completion.
#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod common;

use client::ShimClient;
use common::{Shim, cutting_proxy, run, sh};
use protocol::{Decoder, Exit, FrameType};
use sha2::{Digest, Sha256};

/// Deterministic output: 1..=n, one per line, written by the process itself.
fn seq_bytes(n: u32) -> Vec<u8> {
    (1..=n)
        .flat_map(|i| format!("{i}\n").into_bytes())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_mib_streams_whole_and_checksummed() {
    // 1 MiB per log: most of it spills, through the write-behind tail (the 1 MiB shims below
    // have no room for one and write straight through).
    let shim = Shim::start_with(&[("STEPSHIM_MEMORY_BYTES", "16777216")], None);
    let spec = sh("f=$(mktemp); head -c 104857600 /dev/urandom | tee $f; sha256sum <$f >&2; rm $f");
    shim.client.spawn("big", &spec).await.unwrap();
    let mut out = Sha256::new();
    let mut err = Vec::new();
    let attached = shim
        .client
        .attach("big", 0, 3, |kind, data| match kind {
            FrameType::Stdout => out.update(&data),
            _ => err.extend_from_slice(&data),
        })
        .await
        .unwrap();
    assert_eq!(attached.exit, Exit::code(0));
    // stderr carries sha256sum's line for the bytes the process wrote.
    let reported = String::from_utf8_lossy(&err);
    let ours: String = out.finalize().iter().map(|b| format!("{b:02x}")).collect();
    assert!(
        reported.starts_with(&ours),
        "stdout digest {ours} vs sha256sum {reported}"
    );
    assert_eq!(
        attached.end,
        shim.client.get("big").await.unwrap().output_end
    );
    let metrics = shim.client.metrics().await.unwrap();
    let disk = common::metric(&metrics, "stepshim_output_bytes{where=\"disk\"}").unwrap();
    assert!(
        disk > 90 << 20,
        "most of 100 MiB must have spilled past an 8 MiB budget, got {disk}"
    );
    shim.client.delete("big", false).await.unwrap();
    let metrics = shim.client.metrics().await.unwrap();
    assert!(
        metrics.contains("stepshim_output_bytes{where=\"disk\"} 0"),
        "delete frees the spill"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_through_repeated_mid_frame_cuts_loses_and_repeats_nothing() {
    let shim = Shim::start_with(&[("STEPSHIM_MEMORY_BYTES", "1048576")], None);
    let (proxy, cuts) = cutting_proxy(shim.addr.clone(), 300, 200_000)
        .await
        .unwrap();
    let cut_client = ShimClient::new(&format!("http://{proxy}"), Some(shim.token.clone())).unwrap();
    // Output keeps coming while the client is being cut off, in many small frames and some big ones.
    let n = 300_000;
    shim.client
        .spawn("seq", &sh(&format!("seq 1 {n}; sleep 0.3; seq 1 {n} >&2")))
        .await
        .unwrap();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let attached = cut_client
        .attach("seq", 0, 50, |kind, data| match kind {
            FrameType::Stdout => out.extend_from_slice(&data),
            _ => err.extend_from_slice(&data),
        })
        .await
        .unwrap();
    let want = seq_bytes(n);
    assert_eq!(attached.exit, Exit::code(0));
    assert!(
        out == want,
        "stdout differs: {} vs {} bytes",
        out.len(),
        want.len()
    );
    assert!(
        err == want,
        "stderr differs: {} vs {} bytes",
        err.len(),
        want.len()
    );
    let cuts = cuts.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        cuts >= 10 && attached.resumes as u64 >= cuts - 1,
        "cuts {cuts}, resumes {}",
        attached.resumes
    );
    assert!(
        shim.client
            .metrics()
            .await
            .unwrap()
            .contains("stepshim_output_resumes_total")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_frame_offset_resumes_to_the_same_suffix_and_others_are_400() {
    let shim = Shim::start_with(&[("STEPSHIM_MEMORY_BYTES", "1048576")], None);
    run(
        &shim.client,
        "frames",
        &sh("for i in $(seq 1 2000); do echo line $i; echo e$i >&2; done; seq 1 100000"),
    )
    .await;
    // The whole log, once.
    let mut whole = Vec::new();
    let mut s = shim.client.output("frames", 0, false).await.unwrap();
    let mut boundaries = vec![0u64];
    while let Some(f) = s.next().await.unwrap() {
        f.encode_into(&mut whole);
        boundaries.push(s.offset());
    }
    let end = *boundaries.last().unwrap();
    assert_eq!(end, whole.len() as u64);
    for _ in 0..40 {
        let b = boundaries[rand::random::<u64>() as usize % boundaries.len()];
        let mut s = shim.client.output("frames", b, true).await.unwrap();
        let mut got = Vec::new();
        while let Some(f) = s.next().await.unwrap() {
            f.encode_into(&mut got);
        }
        assert_eq!(got, whole[b as usize..], "suffix from offset {b}");
        // Inside a frame: refused, with the protocol's code.
        let inside = b + 3;
        if inside < end {
            let err = shim
                .client
                .output("frames", inside, false)
                .await
                .unwrap_err();
            assert_eq!(err.code(), Some(protocol::ErrorCode::InvalidOffset));
        }
    }
    let err = shim
        .client
        .output("frames", end + 8, false)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(protocol::ErrorCode::InvalidOffset));
    let mut d = Decoder::new(0);
    d.push(&whole);
    let mut last = None;
    while let Some(f) = d.next_frame().unwrap() {
        last = Some(f.kind);
    }
    assert_eq!(last, Some(FrameType::Exit), "the exit frame is always last");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_stops_reading_does_not_slow_the_process() {
    let shim = Shim::start();
    shim.client
        .spawn("fast", &sh("head -c 33554432 /dev/zero"))
        .await
        .unwrap();
    // Open a follow and never read it: the process must still finish.
    let _stalled = shim.client.output("fast", 0, true).await.unwrap();
    let p = shim.client.wait("fast", 60).await.unwrap();
    assert_eq!(p.exit, Some(Exit::code(0)));
    assert!(p.output_end > 32 << 20);
}
