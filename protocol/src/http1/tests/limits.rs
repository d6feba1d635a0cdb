//! The answer reader's bounds: the head in bytes and headers, chunk lines and trailers, the body in
//! every framing, each at and one past its limit, and the words of each refusal.

use super::*;

/// An answer whose head is exactly `len` bytes.
fn head_of(len: usize) -> Vec<u8> {
    let bare = b"HTTP/1.1 200 OK\r\nx: \r\ncontent-length: 0\r\n\r\n".len();
    format!(
        "HTTP/1.1 200 OK\r\nx: {}\r\ncontent-length: 0\r\n\r\n",
        "a".repeat(len - bare)
    )
    .into_bytes()
}

#[test]
fn the_head_is_bounded_in_bytes_and_headers() {
    let limits = Limits {
        head: 200,
        headers: 3,
        ..Limits::default()
    };
    assert_eq!(
        every_split(&head_of(200), limits, false).unwrap().raw.len(),
        200
    );
    assert_eq!(
        refused(&head_of(201), limits),
        AnswerError::HeadTooLarge(200)
    );
    // A head without end is refused once the bound is reached, whatever comes after.
    let endless = [&b"HTTP/1.1 200 OK\r\nx: "[..], &[b'a'; 1000]].concat();
    assert_eq!(refused(&endless, limits), AnswerError::HeadTooLarge(200));
    let three = b"HTTP/1.1 200 OK\r\na: 1\r\nb: 2\r\ncontent-length: 0\r\n\r\n";
    assert_eq!(every_split(three, limits, false).unwrap().status, 200);
    let four = b"HTTP/1.1 200 OK\r\na: 1\r\nb: 2\r\nc: 3\r\ncontent-length: 0\r\n\r\n";
    assert_eq!(refused(four, limits), AnswerError::TooManyHeaders(3));
    // The slots bound the headers a limit can allow.
    let many = Limits {
        headers: 1000,
        ..Limits::default()
    };
    let mut input = b"HTTP/1.1 200 OK\r\n".to_vec();
    input.extend(b"a: 1\r\n".repeat(MAX_HEADERS + 1));
    input.extend(b"\r\n");
    assert!(matches!(
        refused(&input, many),
        AnswerError::TooManyHeaders(_)
    ));
}

fn chunked(after: &str) -> Vec<u8> {
    format!("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n{after}").into_bytes()
}

#[test]
fn chunk_lines_and_trailers_are_bounded() {
    let limits = Limits {
        line: 16,
        trailers: 2,
        ..Limits::default()
    };
    // A size line of exactly 16 bytes, then 17.
    let at = every_split(
        &chunked("1;abcdefghijklmn\r\nx\r\n0\r\n\r\n"),
        limits,
        false,
    )
    .unwrap();
    assert_eq!(at.body, b"x");
    let past = chunked("1;abcdefghijklmno\r\nx\r\n0\r\n\r\n");
    assert_eq!(refused(&past, limits), AnswerError::LineTooLong(16));
    let endless = chunked(&"1".repeat(100));
    assert_eq!(refused(&endless, limits), AnswerError::LineTooLong(16));
    let trailer = chunked("0\r\nt: abcdefghijklmnopq\r\n\r\n");
    assert_eq!(refused(&trailer, limits), AnswerError::LineTooLong(16));
    let two = every_split(&chunked("0\r\na: 1\r\nb: 2\r\n\r\n"), limits, false).unwrap();
    assert!(two.reusable);
    let three = chunked("0\r\na: 1\r\nb: 2\r\nc: 3\r\n\r\n");
    assert_eq!(refused(&three, limits), AnswerError::TooManyTrailers(2));
    // The default allows 64 trailer lines, not 65.
    let at = chunked(&format!("0\r\n{}\r\n", "t: x\r\n".repeat(64)));
    assert!(ok(&at).reusable);
    let past = chunked(&format!("0\r\n{}\r\n", "t: x\r\n".repeat(65)));
    assert_eq!(
        refused(&past, Limits::default()),
        AnswerError::TooManyTrailers(64)
    );
}

#[test]
fn the_body_is_bounded_in_every_framing() {
    let limits = Limits {
        body: 10,
        ..Limits::default()
    };
    let cases = [
        (
            "content-length: 10\r\n\r\n0123456789",
            "content-length: 11\r\n\r\n0123456789a",
        ),
        (
            "transfer-encoding: chunked\r\n\r\n5\r\n01234\r\n5\r\n56789\r\n0\r\n\r\n",
            "transfer-encoding: chunked\r\n\r\n5\r\n01234\r\n6\r\n56789a\r\n0\r\n\r\n",
        ),
        ("\r\n0123456789", "\r\n0123456789a"),
    ];
    for (at, past) in cases {
        let at = format!("HTTP/1.1 200 OK\r\n{at}").into_bytes();
        assert_eq!(every_split(&at, limits, false).unwrap().body, b"0123456789");
        let past = format!("HTTP/1.1 200 OK\r\n{past}").into_bytes();
        assert_eq!(refused(&past, limits), AnswerError::BodyTooLarge(10));
    }
}

#[test]
fn errors_say_what_was_wrong() {
    assert_eq!(
        AnswerError::TooManyTrailers(64).to_string(),
        "more trailer lines than the limit (64)"
    );
    assert_eq!(AnswerError::Cut.to_string(), AnswerError::Cut.reason());
    assert_eq!(
        AnswerError::Malformed(httparse::Error::HeaderName).to_string(),
        "malformed head: invalid header name"
    );
}
