//! Raw HTTP/1.1 for what a typed client will not send (wrong methods, broken bodies, no token), and
//! readers for error bodies and metrics.
#![allow(clippy::unwrap_used)]

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Sends one raw HTTP/1.1 request (with `Connection: close`) and returns (status, headers, body).
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
    let split = resp
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("response head");
    let head = String::from_utf8_lossy(&resp[..split]).into_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status");
    (status, head, resp[split + 4..].to_vec())
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
