//! `protocol/testdata/frames.json`, which the Go client's tests read too: the same maximum payload
//! and the same verdict on every stream, fed to the decoder whole and a byte at a time.
#![allow(clippy::unwrap_used)] // tests fail loudly by design

use protocol::frame::{Decoder, FrameError, FrameType, HEADER_LEN, MAX_PAYLOAD};
use serde_json::Value;

/// A segment's bytes: `{"hex": ...}` or `{"fill": byte, "len": n}`.
fn bytes(seg: &Value) -> Vec<u8> {
    if let Some(hex) = seg["hex"].as_str() {
        return hex::decode(hex).unwrap();
    }
    vec![seg["fill"].as_u64().unwrap() as u8; seg["len"].as_u64().unwrap() as usize]
}

#[test]
fn the_shared_frame_vectors() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../protocol/testdata/frames.json"
    );
    let g: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(g["max_payload"].as_u64(), Some(u64::from(MAX_PAYLOAD)));
    assert_eq!(g["header_len"].as_u64(), Some(HEADER_LEN as u64));
    for case in g["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let input: Vec<u8> = case["input"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(bytes)
            .collect();
        for piece in [input.len().max(1), 1] {
            let mut d = Decoder::new(case["start"].as_u64().unwrap());
            let mut frames = Vec::new();
            let mut end = None;
            'feed: for part in input.chunks(piece) {
                d.push(part);
                loop {
                    let at = d.offset();
                    match d.next_frame() {
                        Ok(Some(f)) if f.kind == FrameType::Keepalive => {}
                        Ok(Some(f)) => frames.push((f.kind.to_u8(), at, f.payload)),
                        Ok(None) => break,
                        Err(FrameError::TooLong { .. }) => {
                            end = Some("too_long");
                            break 'feed;
                        }
                        Err(e) => panic!("{name}: {e}"),
                    }
                }
            }
            let end = end.unwrap_or(match d.finish() {
                Ok(()) => "eof",
                Err(FrameError::Truncated { .. }) => "truncated",
                Err(FrameError::TooLong { .. }) => "too_long",
            });
            let want = case["frames"].as_array().unwrap();
            assert_eq!(frames.len(), want.len(), "{name} in pieces of {piece}");
            for ((kind, at, payload), w) in frames.iter().zip(want) {
                assert_eq!(u64::from(*kind), w["type"].as_u64().unwrap(), "{name}");
                assert_eq!(Some(*at), w["offset"].as_u64(), "{name}");
                assert_eq!(payload.as_ref(), bytes(&w["payload"]).as_slice(), "{name}");
            }
            assert_eq!(
                end,
                case["end"].as_str().unwrap(),
                "{name} in pieces of {piece}"
            );
            assert_eq!(Some(d.offset()), case["offset"].as_u64(), "{name}");
        }
    }
}
