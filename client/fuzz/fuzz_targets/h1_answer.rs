//! The client's HTTP/1.1 answer reader (`client::h1::exchange`) on arbitrary bytes from the
//! shim's side, delivered in pieces of a size the input chooses: it must return, never panic, and
//! never hand back a body over its bound.
#![no_main]

use std::pin::Pin;
use std::task::{Context, Poll};

use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A connection whose far side sends `data` in `piece`-byte reads, then closes; writes vanish.
struct Scripted<'a> {
    data: &'a [u8],
    piece: usize,
}

impl AsyncRead for Scripted<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let n = self.piece.min(self.data.len()).min(buf.remaining());
        buf.put_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Scripted<'_> {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, b: &[u8]) -> Poll<std::io::Result<usize>> {
        Poll::Ready(Ok(b.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

fuzz_target!(|input: &[u8]| {
    let Some((&first, data)) = input.split_first() else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let request = client::h1::encode(&http::Method::GET, "/", "shim", &http::HeaderMap::new(), b"");
    rt.block_on(async {
        let mut conn = Scripted { data, piece: usize::from(first % 32) + 1 };
        let mut buf = Vec::new();
        // Keep reading answers off the same connection while they say it can carry more.
        for _ in 0..4 {
            match client::h1::exchange(&mut conn, &mut buf, &request, first & 0x80 != 0).await {
                Ok(a) => {
                    assert!(a.body.len() <= client::h1::MAX_BODY);
                    if !a.reusable {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
    });
});
