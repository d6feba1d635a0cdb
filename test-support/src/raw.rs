//! Raw HTTP/1.1 for what a typed client will not send (wrong methods, broken bodies, no token), and
//! readers for error bodies and metrics.
#![allow(clippy::unwrap_used)]

use protocol::http1::{AnswerReader, Event, Limits};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Sends one raw HTTP/1.1 request (with `Connection: close`) and returns (status, head, body), the
/// answer read by the project's answer reader.
pub async fn raw(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &[u8],
) -> (u16, String, Vec<u8>) {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: shim\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.expect("write head");
    let _ = s.write_all(body).await; // the shim may answer and close before reading a huge body
    let mut resp = Vec::new();
    let _ = s.read_to_end(&mut resp).await;
    answer(&resp, method == "HEAD")
}

/// Sends one bodiless request with the given extra headers (and `Connection: close`) and returns
/// (status, head, body) like [`raw`].
pub async fn raw_with(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, String, Vec<u8>) {
    let resp = raw_bytes(addr, method, path, headers).await;
    answer(&resp, method == "HEAD")
}

/// Sends one bodiless request like [`raw_with`] and returns every byte the connection gave until
/// it closed, unparsed: for answers that are meant to be cut short.
pub async fn raw_bytes(addr: &str, method: &str, path: &str, headers: &[(&str, &str)]) -> Vec<u8> {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: shim\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("Connection: close\r\n\r\n");
    s.write_all(head.as_bytes()).await.expect("write head");
    let mut resp = Vec::new();
    let _ = s.read_to_end(&mut resp).await;
    resp
}

/// The one answer in `resp`, a connection's bytes to its close: (status, head without its blank
/// line, body decoded from its framing). Panics if it is not one whole answer.
fn answer(resp: &[u8], head_request: bool) -> (u16, String, Vec<u8>) {
    let mut reader = AnswerReader::new(Limits::DEFAULT, head_request);
    let (mut at, mut head, mut body) = (0, None, Vec::new());
    loop {
        let (used, event) = reader
            .read(&resp[at..], usize::MAX)
            .expect("an HTTP/1.1 answer");
        at += used;
        match event {
            Event::Head(h) => {
                let text = String::from_utf8_lossy(h.raw).trim_end().to_owned();
                head = Some((h.status, text));
            }
            Event::Body(b) => body.extend_from_slice(b),
            Event::End { .. } => break,
            Event::Need => {
                reader.eof().expect("a whole answer before the close");
                break;
            }
        }
    }
    let (status, head) = head.expect("response head");
    (status, head, body)
}

/// The `error.code` of a JSON error body.
pub fn error_code(body: &[u8]) -> String {
    let v: serde_json::Value = serde_json::from_slice(body).expect("JSON error body");
    v["error"]["code"].as_str().expect("error.code").to_owned()
}

/// The value of the sample `series` (name and labels, exactly as exposed) in Prometheus text.
pub fn metric(text: &str, series: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

#[cfg(test)]
mod tests {
    use super::answer;

    #[test]
    fn an_answer_is_read_by_its_framing() {
        let chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n";
        let (status, head, body) = answer(chunked, false);
        assert_eq!((status, body.as_slice()), (200, &b"{}"[..]));
        assert_eq!(head, "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked");
        let to_head = b"HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 9\r\n\r\n";
        assert_eq!(answer(to_head, true).0, 405);
        let closing = b"HTTP/1.1 200 OK\r\n\r\nto the end";
        assert_eq!(answer(closing, false).2, b"to the end");
    }

    #[test]
    #[should_panic(expected = "a whole answer before the close")]
    fn a_cut_answer_is_refused() {
        answer(b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nshort", false);
    }
}
