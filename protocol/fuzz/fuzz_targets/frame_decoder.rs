//! Fuzzes the frame decoder with arbitrary bytes fed in arbitrary splits: it must never panic,
//! never allocate past its payload cap, and every frame it yields must re-encode to the exact bytes
//! it consumed, with the resume offset advancing by exactly those bytes (keepalives excepted).
#![no_main]

use libfuzzer_sys::fuzz_target;
use protocol::{Decoder, FrameType, HEADER_LEN};

fuzz_target!(|data: &[u8]| {
    let Some((&split_seed, bytes)) = data.split_first() else { return };
    let mut d = Decoder::new(0);
    let mut consumed = Vec::new();
    let step = usize::from(split_seed) + 1;
    let mut offset = 0u64;
    for chunk in bytes.chunks(step) {
        d.push(chunk);
        loop {
            match d.next_frame() {
                Ok(Some(f)) => {
                    assert!(f.payload.len() <= protocol::frame::MAX_PAYLOAD as usize);
                    let enc = f.encode();
                    assert_eq!(enc.len(), HEADER_LEN + f.payload.len());
                    if f.kind != FrameType::Keepalive {
                        offset += enc.len() as u64;
                    }
                    assert_eq!(d.offset(), offset);
                    consumed.extend_from_slice(&enc);
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
    // Whole frames decoded re-encode to the prefix of the input, except reserved bytes that the
    // encoder writes as zero.
    let mut expect = bytes[..consumed.len()].to_vec();
    let mut i = 0;
    while i + HEADER_LEN <= expect.len() {
        expect[i + 2] = 0;
        expect[i + 3] = 0;
        let len = u32::from_be_bytes([expect[i + 4], expect[i + 5], expect[i + 6], expect[i + 7]]) as usize;
        i += HEADER_LEN + len;
    }
    assert_eq!(consumed, expect);
    let _ = d.finish();
});
