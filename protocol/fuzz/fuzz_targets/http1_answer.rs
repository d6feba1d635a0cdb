//! Fuzzes the HTTP/1.1 answer reader with arbitrary bytes from the server's side: fed in one piece
//! and in pieces of a size the input chooses (with body bytes taken a few at a time), it must never
//! panic, never use more than it was given, never yield a body past its bound, and reach the same
//! outcome either way: the same head, body, reuse and leftover bytes, or the same error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use protocol::http1::{AnswerError, AnswerReader, Event, Limits};

/// What the reader made of one answer.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    status: u16,
    raw: Vec<u8>,
    body: Vec<u8>,
    reusable: bool,
    rest: Vec<u8>,
}

fn feed(
    data: &[u8],
    piece: usize,
    max: usize,
    limits: Limits,
    head: bool,
) -> Result<Outcome, AnswerError> {
    let mut r = AnswerReader::new(limits, head);
    let mut pieces = data.chunks(piece);
    let mut buf = Vec::new();
    let mut seen = None;
    let mut body = Vec::new();
    let mut fed = 0;
    loop {
        let (used, event) = r.read(&buf, max)?;
        assert!(used <= buf.len());
        let need = matches!(event, Event::Need);
        match event {
            Event::Need => {}
            Event::Head(h) => {
                assert!(seen.is_none(), "two final heads");
                assert!(h.raw.len() <= limits.head && h.status >= 200);
                seen = Some((h.status, h.raw.to_vec()));
            }
            Event::Body(b) => {
                assert!(!b.is_empty() && b.len() <= max);
                body.extend_from_slice(b);
                assert!(body.len() as u64 <= limits.body);
            }
            Event::End { reusable } => {
                let (status, raw) = seen.expect("an end without a head");
                let rest = [&buf[used..], &data[fed..]].concat();
                return Ok(Outcome {
                    status,
                    raw,
                    body,
                    reusable,
                    rest,
                });
            }
        }
        buf.drain(..used);
        if need {
            match pieces.next() {
                Some(p) => {
                    buf.extend_from_slice(p);
                    fed += p.len();
                }
                None => {
                    r.eof()?;
                    let (status, raw) = seen.expect("an end without a head");
                    return Ok(Outcome {
                        status,
                        raw,
                        body,
                        reusable: false,
                        rest: buf,
                    });
                }
            }
        }
    }
}

fuzz_target!(|input: &[u8]| {
    let Some((&seed, data)) = input.split_first() else {
        return;
    };
    // Small bounds half the time, so the limits are reached; the defaults otherwise.
    let limits = if seed & 0x40 != 0 {
        Limits {
            head: 128,
            headers: 4,
            line: 8,
            trailers: 2,
            body: 64,
        }
    } else {
        Limits::DEFAULT
    };
    let head = seed & 0x80 != 0;
    let piece = usize::from(seed & 0x1f) + 1;
    let one = feed(data, data.len().max(1), usize::MAX, limits, head);
    let split = feed(data, piece, piece.min(7), limits, head);
    assert_eq!(one, split);
});
