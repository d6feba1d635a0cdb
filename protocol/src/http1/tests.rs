//! The answer reader fed as a connection would feed it: every framing, split at every byte, the
//! limits at and one past their bound, malformed answers refused with their reason, and arbitrary
//! bytes in arbitrary splits giving the same outcome as in one piece.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;

use super::*;

mod limits;

/// What a caller saw of one answer.
#[derive(Debug, PartialEq, Eq)]
struct Answer {
    status: u16,
    raw: Vec<u8>,
    framing: Framing,
    body: Vec<u8>,
    reusable: bool,
    /// Bytes after the answer.
    rest: Vec<u8>,
}

/// Feeds `pieces` in order to a reader through a buffer that drops what was used, the connection
/// ending after the last piece.
fn feed(
    pieces: &[&[u8]],
    limits: Limits,
    head_request: bool,
    max: usize,
) -> Result<Answer, AnswerError> {
    let mut r = AnswerReader::new(limits, head_request);
    let mut buf = Vec::new();
    let mut pieces = pieces.iter();
    let mut head = None;
    let mut body = Vec::new();
    loop {
        let (used, event) = r.read(&buf, max)?;
        assert!(used <= buf.len());
        let need = matches!(event, Event::Need);
        match event {
            Event::Need => {}
            Event::Head(h) => {
                assert!(head.is_none(), "two final heads");
                assert!(buf[..used].ends_with(h.raw), "after its interim heads");
                head = Some((h.status, h.raw.to_vec(), h.framing));
            }
            Event::Body(b) => {
                assert!(!b.is_empty() && b.len() <= max);
                assert_eq!(b, &buf[used - b.len()..used]);
                body.extend_from_slice(b);
            }
            Event::End { reusable } => {
                let (status, raw, framing) = head.unwrap();
                let rest = [&buf[used..], &pieces.as_slice().concat()].concat();
                // Whole: asked again, it says so again and uses nothing.
                assert!(matches!(
                    r.read(&buf[used..], max),
                    Ok((0, Event::End { .. }))
                ));
                return Ok(Answer {
                    status,
                    raw,
                    framing,
                    body,
                    reusable,
                    rest,
                });
            }
        }
        buf.drain(..used);
        if need {
            match pieces.next() {
                Some(p) => buf.extend_from_slice(p),
                None => {
                    r.eof()?;
                    let (status, raw, framing) = head.unwrap();
                    return Ok(Answer {
                        status,
                        raw,
                        framing,
                        body,
                        reusable: false,
                        rest: buf,
                    });
                }
            }
        }
    }
}

/// The outcome of `input` in one piece, after checking it is the same split at every byte, byte
/// by byte, and with bodies taken a few bytes at a time.
fn every_split(input: &[u8], limits: Limits, head_request: bool) -> Result<Answer, AnswerError> {
    let one = feed(&[input], limits, head_request, usize::MAX);
    for at in 0..=input.len() {
        let (a, b) = input.split_at(at);
        assert_eq!(
            feed(&[a, b], limits, head_request, usize::MAX),
            one,
            "split at {at}"
        );
    }
    let bytes: Vec<&[u8]> = input.chunks(1).collect();
    assert_eq!(
        feed(&bytes, limits, head_request, usize::MAX),
        one,
        "byte by byte"
    );
    assert_eq!(
        feed(&[input], limits, head_request, 3),
        one,
        "3 bytes of body at a time"
    );
    one
}

fn ok(input: &[u8]) -> Answer {
    every_split(input, Limits::default(), false).unwrap()
}

fn refused(input: &[u8], limits: Limits) -> AnswerError {
    every_split(input, limits, false).unwrap_err()
}

#[test]
fn a_content_length_body_ends_the_answer_and_keeps_the_connection() {
    let a = ok(b"HTTP/1.1 201 Created\r\ncontent-type: application/json\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1");
    assert_eq!((a.status, a.framing), (201, Framing::Length(5)));
    assert_eq!((a.body.as_slice(), a.reusable), (&b"hello"[..], true));
    assert_eq!(a.rest, b"HTTP/1.1", "what follows the answer is left");
    assert!(a.raw.ends_with(b"Content-Length: 5\r\n\r\n"));
}

#[test]
fn a_chunked_body_is_decoded_and_its_trailers_dropped() {
    let a = ok(b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\ncontent-length: 99\r\n\r\n3;x=y\r\nabc\r\n0A \r\n0123456789\r\n0\r\ntrailer: t\r\nother: u\r\n\r\nnext");
    assert_eq!(a.framing, Framing::Chunked);
    assert_eq!(a.body, b"abc0123456789");
    assert_eq!((a.reusable, a.rest.as_slice()), (true, &b"next"[..]));
}

#[test]
fn a_body_without_length_ends_with_the_connection() {
    for input in [
        &b"HTTP/1.1 200 OK\r\n\r\nuntil the end"[..],
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked, gzip\r\n\r\nuntil the end",
    ] {
        let a = ok(input);
        assert_eq!(a.framing, Framing::Close);
        assert_eq!(
            (a.body.as_slice(), a.reusable),
            (&b"until the end"[..], false)
        );
    }
}

#[test]
fn connection_close_makes_an_answer_the_last() {
    let a = ok(b"HTTP/1.1 200 OK\r\nConnection: keep-alive, Close\r\ncontent-length: 0\r\n\r\n");
    assert_eq!((a.body.len(), a.reusable), (0, false));
    let a =
        ok(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n0\r\n\r\n");
    assert!(!a.reusable);
}

#[test]
fn interim_answers_are_skipped() {
    let a = ok(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: x\r\n\r\nHTTP/1.1 404 Not Found\r\ncontent-length: 2\r\n\r\n{}");
    assert_eq!(
        (a.status, a.body.as_slice(), a.reusable),
        (404, &b"{}"[..], true)
    );
    assert!(a.raw.starts_with(b"HTTP/1.1 404"));
}

#[test]
fn head_204_and_304_answers_have_no_body() {
    for input in [
        &b"HTTP/1.1 204 No Content\r\ncontent-length: 7\r\n\r\nHTTP/1.1"[..],
        b"HTTP/1.1 304 Not Modified\r\ntransfer-encoding: chunked\r\n\r\nHTTP/1.1",
    ] {
        let a = ok(input);
        assert_eq!(
            (a.framing, a.reusable, a.rest.as_slice()),
            (Framing::None, true, &b"HTTP/1.1"[..])
        );
    }
    let head = b"HTTP/1.1 200 OK\r\ncontent-length: 70000000\r\n\r\nHTTP/1.1";
    let limits = Limits {
        body: 10,
        ..Limits::default()
    };
    let a = every_split(head, limits, true).unwrap();
    assert_eq!(
        (a.framing, a.body.len(), a.reusable),
        (Framing::None, 0, true)
    );
    // The same answer to a GET promises a body over the bound.
    assert_eq!(refused(head, limits), AnswerError::BodyTooLarge(10));
}

#[test]
fn headers_are_found_by_any_case_and_trimmed() {
    let input = b"HTTP/1.1 200 OK\r\nETag: \"v1\" \r\nX-Stepshim-Stream-Length: 42\r\ncontent-length: 0\r\n\r\n";
    let (used, Event::Head(h)) = reader().read(input, usize::MAX).unwrap() else {
        panic!("no head");
    };
    assert_eq!(used, input.len());
    assert_eq!(h.header("etag"), Some(&b"\"v1\""[..]));
    assert_eq!(h.header("x-stepshim-stream-length"), Some(&b"42"[..]));
    assert_eq!(h.header("location"), None);
    assert_eq!(h.headers().count(), 3);
    // Empty lines before the status line are skipped, and not taken for headers.
    let input = b"\r\n\nHTTP/1.1 200 OK: fine\r\nx: 1\r\ncontent-length: 0\r\n\r\n";
    let (used, Event::Head(h)) = reader().read(input, usize::MAX).unwrap() else {
        panic!("no head");
    };
    assert_eq!(used, input.len());
    assert!(h.raw.starts_with(b"HTTP/1.1 200"));
    let names: Vec<_> = h.headers().map(|(n, _)| n).collect();
    assert_eq!(names, ["x", "content-length"]);
}

fn reader() -> AnswerReader {
    AnswerReader::new(Limits::default(), false)
}

#[test]
fn a_connection_that_ends_early_cuts_the_answer() {
    for input in [
        &b""[..],
        b"HTTP/1.1 200 OK\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nabc",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0\r\nt: x\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\n",
    ] {
        assert_eq!(
            refused(input, Limits::default()),
            AnswerError::Cut,
            "{}",
            input.escape_ascii()
        );
    }
}

#[test]
fn malformed_answers_are_refused_with_their_reason() {
    let cases: [(&[u8], AnswerError); 13] = [
        (
            b"HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n",
            AnswerError::Version,
        ),
        (
            b"SPDY/9 200 OK\r\n\r\n",
            AnswerError::Malformed(httparse::Error::Version),
        ),
        (
            b"HTTP/1.1 2000 OK\r\n\r\n",
            AnswerError::Malformed(httparse::Error::Status),
        ),
        (b"HTTP/1.1 099 Low\r\n\r\n", AnswerError::Status(99)),
        (
            b"HTTP/1.1 200 OK\r\nbad header\r\n\r\n",
            AnswerError::Malformed(httparse::Error::HeaderName),
        ),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nab",
            AnswerError::ContentLength,
        ),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n",
            AnswerError::ContentLength,
        ),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: +1\r\n\r\nx",
            AnswerError::ContentLength,
        ),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 99999999999999999999\r\n\r\n",
            AnswerError::ContentLength,
        ),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
            AnswerError::ChunkSize,
        ),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n10000000000000000\r\n",
            AnswerError::ChunkSize,
        ),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nabX\r\n",
            AnswerError::Crlf,
        ),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\nab\r\n",
            AnswerError::Crlf,
        ),
    ];
    for (input, want) in cases {
        assert_eq!(
            refused(input, Limits::default()),
            want,
            "{}",
            input.escape_ascii()
        );
    }
}

/// Input cut at the given positions (any order, out of range ignored).
fn pieces(input: &[u8], mut cuts: Vec<usize>) -> Vec<&[u8]> {
    cuts.retain(|&c| c <= input.len());
    cuts.sort_unstable();
    let mut out = Vec::new();
    let mut from = 0;
    for c in cuts {
        out.push(&input[from..c]);
        from = c;
    }
    out.push(&input[from..]);
    out
}

fn answer_like() -> impl Strategy<Value = Vec<u8>> {
    let head = prop_oneof![
        Just(&b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"[..]),
        Just(&b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n"[..]),
        Just(&b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n"[..]),
        Just(&b""[..]),
    ];
    let tail = proptest::collection::vec(
        prop_oneof![
            any::<u8>(),
            Just(b'\r'),
            Just(b'\n'),
            Just(b'0'),
            Just(b';')
        ],
        0..200,
    );
    (head, tail).prop_map(|(h, t)| [h, &t].concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn any_split_gives_the_outcome_of_one_piece(
        input in answer_like(),
        cuts in proptest::collection::vec(0usize..256, 0..8),
        max in 1usize..16,
        head_request in any::<bool>(),
    ) {
        let limits = Limits { head: 96, headers: 4, line: 8, trailers: 2, body: 64 };
        let one = feed(&[&input], limits, head_request, usize::MAX);
        let split = feed(&pieces(&input, cuts), limits, head_request, max);
        prop_assert_eq!(split, one);
    }
}
