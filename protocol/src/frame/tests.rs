//! Unit and property tests of the frame codec.

use super::*;
use proptest::prelude::*;

#[test]
fn header_layout_is_big_endian_with_reserved_zero() {
    let h = FrameHeader {
        kind: FrameType::Stderr,
        flags: 0,
        len: 0x0102_0304,
    };
    assert_eq!(h.encode(), [2, 0, 0, 0, 1, 2, 3, 4]);
}

#[test]
fn oversized_length_is_refused() {
    let mut d = Decoder::new(0);
    d.push(&[1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]);
    assert_eq!(d.next_frame(), Err(FrameError::TooLong { len: u32::MAX }));
}

#[test]
fn keepalive_does_not_advance_offset_and_unknown_types_pass_through() {
    let mut bytes = Vec::new();
    Frame::new(FrameType::Keepalive, Vec::new()).encode_into(&mut bytes);
    Frame::new(FrameType::Unknown(9), b"x".to_vec()).encode_into(&mut bytes);
    let mut d = Decoder::new(100);
    d.push(&bytes);
    assert_eq!(d.next_frame().unwrap().unwrap().kind, FrameType::Keepalive);
    assert_eq!(d.offset(), 100);
    assert_eq!(d.next_frame().unwrap().unwrap().kind, FrameType::Unknown(9));
    assert_eq!(d.offset(), 109);
    assert_eq!(d.next_frame(), Ok(None));
    assert_eq!(d.finish(), Ok(()));
}

#[test]
fn truncated_stream_is_reported() {
    let bytes = Frame::new(FrameType::Stdout, b"hello".to_vec()).encode();
    let mut d = Decoder::new(0);
    d.push(&bytes[..10]);
    assert_eq!(d.next_frame(), Ok(None));
    assert_eq!(d.finish(), Err(FrameError::Truncated { missing: 3 }));
    let mut d = Decoder::new(0);
    d.push(&bytes[..3]);
    assert_eq!(d.finish(), Err(FrameError::Truncated { missing: 5 }));
}

fn frame_strategy() -> impl Strategy<Value = Frame> {
    (0u8..6, proptest::collection::vec(any::<u8>(), 0..300)).prop_map(|(t, p)| {
        let kind = FrameType::from_u8(t);
        let payload = if kind == FrameType::Keepalive {
            Vec::new()
        } else {
            p
        };
        Frame::new(kind, payload)
    })
}

/// `frames` encoded one after another, and the sorted points (0 and the end included) that cut
/// the bytes into the chunks a test pushes.
fn encoded_with_cuts(frames: &[Frame], cuts: &[prop::sample::Index]) -> (Vec<u8>, Vec<usize>) {
    let mut bytes = Vec::new();
    for f in frames {
        f.encode_into(&mut bytes);
    }
    let mut points: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
    points.push(0);
    points.push(bytes.len());
    points.sort_unstable();
    (bytes, points)
}

proptest! {
    /// Any sequence of frames, cut into any chunks, decodes to the same frames, and the resume offset
    /// after each frame is the sum of the log frames before it.
    #[test]
    fn roundtrip_under_any_split(frames in proptest::collection::vec(frame_strategy(), 0..40),
                                 cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..20),
                                 start in 0u64..1_000_000) {
        let (bytes, points) = encoded_with_cuts(&frames, &cuts);
        let mut d = Decoder::new(start);
        let mut got = Vec::new();
        let mut expect_offset = start;
        let mut offsets = Vec::new();
        for w in points.windows(2) {
            d.push(&bytes[w[0]..w[1]]);
            while let Some(f) = d.next_frame().unwrap() {
                got.push(f);
                offsets.push(d.offset());
            }
        }
        prop_assert_eq!(d.finish(), Ok(()));
        for (f, off) in frames.iter().zip(&offsets) {
            if f.kind != FrameType::Keepalive { expect_offset += f.header().frame_len(); }
            prop_assert_eq!(*off, expect_offset);
        }
        prop_assert_eq!(got, frames);
    }

    /// The same under any split through `next_frame_parts`: the parts of each payload join to it,
    /// the offset moves past whole frames only, and every part is a slice of a received chunk.
    #[test]
    fn parts_roundtrip_under_any_split(frames in proptest::collection::vec(frame_strategy(), 0..40),
                                       cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..20)) {
        let (bytes, points) = encoded_with_cuts(&frames, &cuts);
        let mut d = Decoder::new(0);
        let mut got = Vec::new();
        let mut chunks = Vec::new();
        for w in points.windows(2) {
            let chunk = Bytes::copy_from_slice(&bytes[w[0]..w[1]]);
            chunks.push(chunk.clone());
            d.push_bytes(chunk);
            let mut parts = Vec::new();
            while let Some(h) = d.next_frame_parts(&mut parts).unwrap() {
                for p in &parts {
                    let within = chunks.iter().any(|c| {
                        let r = c.as_ptr() as usize..=c.as_ptr() as usize + c.len();
                        r.contains(&(p.as_ptr() as usize)) && r.contains(&(p.as_ptr() as usize + p.len()))
                    });
                    prop_assert!(within, "a part is a slice of a received chunk");
                }
                got.push(Frame { kind: h.kind, flags: h.flags, payload: concat(std::mem::take(&mut parts)) });
            }
            prop_assert!(parts.is_empty(), "no parts of a frame that is not whole");
        }
        prop_assert_eq!(d.finish(), Ok(()));
        prop_assert_eq!(d.offset(), bytes.len() as u64 - frames.iter().filter(|f| f.kind == FrameType::Keepalive).count() as u64 * HEADER_LEN as u64);
        prop_assert_eq!(got, frames);
    }

    /// Arbitrary bytes never panic the decoder; it either yields frames, asks for more, or errors.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2000)) {
        let mut d = Decoder::new(0);
        d.push(&bytes);
        while let Ok(Some(_)) = d.next_frame() {}
        let _ = d.finish();
    }
}

#[test]
fn the_keepalive_constant_is_an_encoded_empty_keepalive_frame() {
    assert_eq!(
        Frame::new(FrameType::Keepalive, Vec::new()).encode(),
        KEEPALIVE_FRAME.to_vec()
    );
}

#[test]
fn a_payload_within_one_chunk_is_a_slice_of_it_and_a_split_one_is_gathered() {
    let mut bytes = Vec::new();
    Frame::new(FrameType::Stdout, vec![7u8; 1000]).encode_into(&mut bytes);
    Frame::new(FrameType::Stderr, vec![9u8; 1000]).encode_into(&mut bytes);
    let chunk = Bytes::from(bytes);
    let mut d = Decoder::new(0);
    // The first frame and half of the second arrive in one chunk, the rest in another.
    d.push_bytes(chunk.slice(..1500));
    d.push_bytes(chunk.slice(1500..));
    let first = d.next_frame().unwrap().unwrap();
    let inside = chunk.as_ptr() as usize..chunk.as_ptr() as usize + chunk.len();
    assert!(
        inside.contains(&(first.payload.as_ptr() as usize)),
        "not copied"
    );
    let second = d.next_frame().unwrap().unwrap();
    assert_eq!(second.payload, vec![9u8; 1000]);
    assert!(!inside.contains(&(second.payload.as_ptr() as usize)));
    assert_eq!(d.pending(), 0);
    assert_eq!(d.offset(), 2016);
}

#[test]
fn a_split_payload_comes_as_parts_without_a_copy() {
    let mut bytes = Vec::new();
    Frame::new(FrameType::Stdout, vec![7u8; 1000]).encode_into(&mut bytes);
    let chunk = Bytes::from(bytes);
    let mut d = Decoder::new(0);
    d.push_bytes(chunk.slice(..100));
    d.push_bytes(chunk.slice(100..700));
    let mut parts = Vec::new();
    assert_eq!(d.next_frame_parts(&mut parts).unwrap(), None);
    assert!(parts.is_empty());
    d.push_bytes(chunk.slice(700..));
    let header = d.next_frame_parts(&mut parts).unwrap().unwrap();
    assert_eq!((header.kind, header.len), (FrameType::Stdout, 1000));
    let lens: Vec<usize> = parts.iter().map(Bytes::len).collect();
    assert_eq!(lens, [92, 600, 308]);
    assert_eq!(
        parts[0].as_ptr(),
        chunk[8..].as_ptr(),
        "a slice, not a copy"
    );
    assert_eq!(d.offset(), 1008);
}
