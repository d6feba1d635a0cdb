//! Answers no shim gives, from a raw listener on loopback: endless or huge JSON bodies, endless
//! error bodies, a huge frame length. Each call returns a clear error having read at most its bound
//! plus a buffer, through the direct pool and through a transport that only implements `send` (as
//! the controller's apiserver proxy does).
#![allow(clippy::unwrap_used)] // tests fail loudly by design

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use client::{ClientError, Direct, SendFuture, ShimClient, TokenHeader, Transport};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// What may be taken past a bound: the reader's buffers and both sockets' kernel buffers, which
/// loopback grows to several MiB.
const SLACK: u64 = 16 << 20;

/// What a hostile listener saw: bytes the client took (written into the socket: an upper bound on
/// what it read) and connections the client closed.
#[derive(Default)]
struct Seen {
    written: AtomicU64,
    closed: AtomicU64,
}

impl Seen {
    /// Waits (10 s at most) until `n` connections were closed by the client, then returns the bytes
    /// taken on them: a client that keeps reading never gets here.
    async fn after_close(&self, n: u64) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.closed.load(Ordering::SeqCst) < n {
            assert!(Instant::now() < deadline, "the client kept reading");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.written.load(Ordering::SeqCst)
    }
}

/// Serves each connection: reads one request head, writes `head`, then `body` over and over until
/// the client closes it.
async fn hostile(head: &'static [u8], body: Vec<u8>) -> (String, Arc<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let count = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let (count, body) = (count.clone(), body.clone());
            tokio::spawn(async move {
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    let mut chunk = [0u8; 4096];
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&chunk[..n]),
                    }
                }
                if s.write_all(head).await.is_ok() {
                    while s.write_all(&body).await.is_ok() {
                        count.written.fetch_add(body.len() as u64, Ordering::SeqCst);
                    }
                }
                count.closed.fetch_add(1, Ordering::SeqCst);
            });
        }
    });
    (format!("http://{addr}"), seen)
}

/// A transport with only `send`: JSON calls take [`Transport::exchange`]'s default, bounded read.
#[derive(Debug)]
struct SendOnly(Direct);

impl Transport for SendOnly {
    fn send(&self, req: http::Request<client::ReqBody>) -> SendFuture<'_> {
        self.0.send(req)
    }
}

fn clients(base: &str) -> Vec<(&'static str, ShimClient)> {
    let direct = ShimClient::new(base, Some("t".into())).unwrap();
    let send_only = Arc::new(SendOnly(Direct::new(Duration::from_secs(5))));
    let via =
        ShimClient::with_transport(base, Some("t".into()), TokenHeader::Bearer, send_only).unwrap();
    vec![("direct", direct), ("send only", via)]
}

/// The call's result, which must come within 20 s.
async fn returns<T>(call: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), call)
        .await
        .expect("the call returned within 20 s")
}

fn chunk(data: &[u8]) -> Vec<u8> {
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    out
}

const CHUNKED: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n5\r\n[1,2,\r\n";

#[tokio::test]
async fn an_endless_json_answer_stops_at_the_bound() {
    let (base, seen) = hostile(CHUNKED, chunk(&b"1,".repeat(32 << 10))).await;
    for (i, (name, c)) in (1..).zip(clients(&base)) {
        let started = Instant::now();
        let err = returns(c.list()).await.unwrap_err();
        assert!(
            matches!(err, ClientError::TooLarge { limit, .. } if limit == client::h1::MAX_BODY as u64),
            "{name}: {err}"
        );
        assert!(!err.is_transient(), "{name}: a too large answer is final");
        let took = seen.after_close(i).await;
        seen.written.store(0, Ordering::SeqCst);
        assert!(
            took <= client::h1::MAX_BODY as u64 + SLACK,
            "{name}: {took} bytes taken under a bound of {}",
            client::h1::MAX_BODY
        );
        eprintln!("{name}: {err} after {:?}", started.elapsed());
    }
}

#[tokio::test]
async fn a_huge_announced_json_answer_is_refused_unread() {
    let head = b"HTTP/1.1 200 OK\r\ncontent-length: 104857600\r\n\r\n";
    let (base, seen) = hostile(head, b" ".repeat(64 << 10)).await;
    for (i, (name, c)) in (1..).zip(clients(&base)) {
        let err = returns(c.info()).await.unwrap_err();
        assert!(matches!(err, ClientError::TooLarge { .. }), "{name}: {err}");
        let took = seen.after_close(i).await;
        seen.written.store(0, Ordering::SeqCst);
        assert!(
            took <= SLACK,
            "{name}: {took} bytes taken of a refused answer"
        );
    }
}

#[tokio::test]
async fn an_endless_error_body_is_cut() {
    let head = b"HTTP/1.1 500 Internal Server Error\r\ntransfer-encoding: chunked\r\n\r\n";
    let (base, seen) = hostile(head, chunk(&b"x".repeat(4096))).await;
    for (i, (name, c)) in (1..).zip(clients(&base)) {
        // A JSON call, and a streamed route whose error body is read apart.
        let json = returns(c.info()).await.unwrap_err();
        let stream = returns(c.output("p", 0, true)).await.unwrap_err();
        for err in [json, stream] {
            let ClientError::Api {
                status: 500,
                message,
                ..
            } = &err
            else {
                panic!("{name}: {err}, want the 500");
            };
            assert!(
                message.len() <= 512,
                "{name}: a message of {}",
                message.len()
            );
        }
        let took = seen.after_close(2 * i).await;
        seen.written.store(0, Ordering::SeqCst);
        assert!(
            took <= 2 * (client::h1::MAX_ERROR_BODY as u64 + SLACK),
            "{name}: {took} bytes taken of two error bodies"
        );
    }
}

#[tokio::test]
async fn a_huge_frame_length_is_refused() {
    let head = b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\n\r\n\x01\x00\x00\x00\xff\xff\xff\xff";
    let (base, _) = hostile(head, b"y".repeat(4096)).await;
    for (name, c) in clients(&base) {
        let mut s = c.output("p", 0, true).await.unwrap();
        let err = returns(s.next()).await.unwrap_err();
        assert!(
            matches!(
                err,
                ClientError::Frame(protocol::FrameError::TooLong { len: u32::MAX })
            ),
            "{name}: {err}"
        );
    }
}
