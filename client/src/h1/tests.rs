//! The HTTP/1.1 exchange against a scripted server on loopback: framings, reuse, interim answers,
//! refusals of what the reader does not understand, and arbitrary bytes never panicking.

use std::time::Duration;

use proptest::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::*;

/// A server that, per request it reads (up to its blank line and `content-length` body), writes
/// the next answer in pieces of `piece` bytes; closes after the last answer, or at once when there
/// is none.
async fn scripted(answers: Vec<Vec<u8>>, piece: usize) -> TcpStream {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut got = Vec::new();
        for answer in answers {
            // Read one request: head, then its content-length body.
            loop {
                if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&got[..end]).to_lowercase();
                    let len: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length: "))
                        .map_or(0, |v| v.trim().parse().unwrap());
                    if got.len() >= end + 4 + len {
                        got.drain(..end + 4 + len);
                        break;
                    }
                }
                let mut chunk = [0u8; 4096];
                let n = s.read(&mut chunk).await.unwrap();
                if n == 0 {
                    return;
                }
                got.extend_from_slice(&chunk[..n]);
            }
            for part in answer.chunks(piece.max(1)) {
                if s.write_all(part).await.is_err() {
                    return;
                }
                s.flush().await.unwrap();
                tokio::time::sleep(Duration::from_micros(50)).await;
            }
        }
    });
    TcpStream::connect(addr).await.unwrap()
}

fn get() -> Vec<u8> {
    encode(&Method::GET, "/healthz", "shim", &HeaderMap::new(), b"")
}

#[test]
fn a_request_is_one_buffer_with_host_headers_and_length() {
    let mut h = HeaderMap::new();
    h.insert("authorization", "Bearer t".parse().unwrap());
    let r = encode(
        &Method::PUT,
        "/v1/processes/a?wait=1",
        "10.0.0.1:7777",
        &h,
        b"{}",
    );
    assert_eq!(
        r,
        b"PUT /v1/processes/a?wait=1 HTTP/1.1\r\nhost: 10.0.0.1:7777\r\nauthorization: Bearer t\r\ncontent-length: 2\r\n\r\n{}"
    );
}

#[tokio::test]
async fn length_chunked_and_empty_bodies_on_one_kept_connection() {
    let answers = vec![
        b"HTTP/1.1 201 Created\r\ncontent-type: application/json\r\ncontent-length: 5\r\n\r\nhello"
            .to_vec(),
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0a\r\n0123456789\r\n0\r\ntrailer: t\r\n\r\n"
            .to_vec(),
        b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n".to_vec(),
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 Not Found\r\ncontent-length: 2\r\n\r\n{}"
            .to_vec(),
    ];
    for piece in [1, 7, 4096] {
        let mut conn = scripted(answers.clone(), piece).await;
        let mut buf = Vec::new();
        let expected: [(u16, &[u8]); 4] = [
            (201, b"hello"),
            (200, b"abc0123456789"),
            (204, b""),
            (404, b"{}"),
        ];
        for (status, body) in expected {
            let a = exchange(&mut conn, &mut buf, &get(), false).await.unwrap();
            assert_eq!(
                (a.status.as_u16(), a.body.as_ref(), a.reusable),
                (status, body, true)
            );
        }
    }
}

#[tokio::test]
async fn a_closing_answer_is_not_reused() {
    let answers = vec![b"HTTP/1.1 200 OK\r\n\r\nuntil the end".to_vec()];
    let mut conn = scripted(answers, 3).await;
    let a = exchange(&mut conn, &mut Vec::new(), &get(), false)
        .await
        .unwrap();
    assert_eq!(
        (a.body.as_ref(), a.reusable),
        (&b"until the end"[..], false)
    );
    let answers = vec![
        b"HTTP/1.1 200 OK\r\nconnection: keep-alive, close\r\ncontent-length: 0\r\n\r\n".to_vec(),
    ];
    let mut conn = scripted(answers, 4096).await;
    let a = exchange(&mut conn, &mut Vec::new(), &get(), false)
        .await
        .unwrap();
    assert!(!a.reusable);
}

#[tokio::test]
async fn a_close_before_and_during_the_answer_says_which() {
    let mut conn = scripted(vec![], 1).await;
    match exchange(&mut conn, &mut Vec::new(), &get(), false).await {
        Err(H1Error::Io { answered, .. }) => assert!(!answered),
        other => panic!("{other:?}"),
    }
    let answers = vec![b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort".to_vec()];
    let mut conn = scripted(answers, 4096).await;
    match exchange(&mut conn, &mut Vec::new(), &get(), false).await {
        Err(H1Error::Io { answered, .. }) => assert!(answered),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn what_it_does_not_understand_is_refused() {
    let huge = format!("HTTP/1.1 200 OK\r\nx: {}\r\n\r\n", "a".repeat(MAX_HEAD));
    let trailers = format!(
        "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0\r\n{}\r\n",
        "t: x\r\n".repeat(LIMITS.trailers + 1)
    );
    let cases: Vec<Vec<u8>> = vec![
        b"HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n".to_vec(),
        b"SPDY/9 200 OK\r\n\r\n".to_vec(),
        b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nab".to_vec(),
        b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n".to_vec(),
        format!(
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n",
            MAX_BODY + 1
        )
        .into_bytes(),
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n".to_vec(),
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nabX\r\n".to_vec(),
        huge.into_bytes(),
        trailers.into_bytes(),
    ];
    for answer in cases {
        let shown = String::from_utf8_lossy(&answer[..answer.len().min(60)]).into_owned();
        let mut conn = scripted(vec![answer], 4096).await;
        let r = exchange(&mut conn, &mut Vec::new(), &get(), false).await;
        assert!(matches!(r, Err(H1Error::Bad(_))), "{shown}: {r:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn arbitrary_answers_never_panic(
        answer in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..512),
            (proptest::collection::vec(any::<u8>(), 0..256)).prop_map(|tail| {
                let mut a = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
                a.extend(tail);
                a
            }),
        ],
        piece in 1usize..64,
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let mut conn = scripted(vec![answer], piece).await;
            let _ = exchange(&mut conn, &mut Vec::new(), &get(), false).await;
        });
    }
}

/// A server that answers one request per connection (then closes without saying so), counting
/// connections.
async fn one_per_connection() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                let mut got = Vec::new();
                let mut chunk = [0u8; 4096];
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&chunk[..n]),
                    }
                }
                let _ = s
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
                    .await;
            });
        }
    });
    (addr, accepted)
}

#[tokio::test]
async fn a_kept_connection_the_server_closed_is_replaced() {
    use crate::Transport;
    let (addr, accepted) = one_per_connection().await;
    let direct = crate::Direct::new(Duration::from_secs(5));
    for method in [Method::GET, Method::POST, Method::PUT] {
        let req = http::Request::builder()
            .method(method)
            .uri(format!("http://{addr}/v1/info"))
            .body(Bytes::from_static(b"{}"))
            .unwrap();
        let (status, body) = direct.exchange(req).await.unwrap();
        assert_eq!((status.as_u16(), body.as_ref()), (200, &b"{}"[..]));
        // Let the close reach this side before the next request looks at the kept connection.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_request_is_flushed_through_a_buffering_stream() {
    // A writer that holds what it is given until flushed, as a TLS stream may hold its last
    // records when the socket would block: the request must reach the server all the same.
    let answers = vec![b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_vec()];
    let conn = scripted(answers, 4096).await;
    let mut buffered = tokio::io::BufStream::with_capacity(1 << 16, 1 << 16, conn);
    let mut buf = Vec::new();
    let answer = tokio::time::timeout(
        Duration::from_secs(10),
        exchange(&mut buffered, &mut buf, &get(), false),
    )
    .await
    .expect("the request was never sent: it stayed in the writer's buffer")
    .unwrap();
    assert_eq!(
        (answer.status.as_u16(), answer.body.as_ref()),
        (200, &b"ok"[..])
    );
}
