//! The grant holders' share of the connection cap, against the real shim on loopback: with the cap
//! at 16, grant holders keep keep-alive connections that each made one request with a grant (an
//! image manifest, as containerd fetches it, or a `GET /v1/files`). At most half the cap may hold
//! a grant; the rest are refused, and the pod's token still gets new connections and answers.
#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod common;

use std::time::{Duration, Instant};

use common::artifacts::scratch;
use common::images::{basic, granted, oci_code, rootfs_image};
use common::{Shim, error_code, sh};
use protocol::http1::{AnswerReader, Event, Limits};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The connection cap of these tests; grant connections get half of it.
const CAP: usize = 16;

/// Sends one request on the kept-alive `s` and reads its whole answer: (status, body), or `None`
/// when the shim closed the connection instead of answering.
async fn ask(
    s: &mut TcpStream,
    method: &str,
    path: &str,
    auth: &str,
    body: &[u8],
) -> Option<(u16, Vec<u8>)> {
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: shim\r\nAuthorization: {auth}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.ok()?;
    s.write_all(body).await.ok()?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut reader = AnswerReader::new(Limits::DEFAULT, false);
    let (mut buf, mut at, mut status, mut answer) = (Vec::new(), 0, None, Vec::new());
    loop {
        let (used, event) = reader
            .read(&buf[at..], usize::MAX)
            .expect("an HTTP/1.1 answer");
        at += used;
        match event {
            Event::Head(h) => status = Some(h.status),
            Event::Body(b) => answer.extend_from_slice(b),
            Event::End { .. } => return Some((status.unwrap(), answer)),
            Event::Need => {
                let mut chunk = [0u8; 16 << 10];
                let read = tokio::time::timeout_at(deadline, s.read(&mut chunk));
                match read.await.expect("an answer or a close within 10 s") {
                    Ok(0) | Err(_) => return None,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
        }
    }
}

/// One request with `auth` on a new connection, kept open: the connection and what it answered.
async fn connect_and_ask(
    shim: &Shim,
    path: &str,
    auth: &str,
) -> (TcpStream, Option<(u16, Vec<u8>)>) {
    let mut s = TcpStream::connect(&shim.addr).await.unwrap();
    let answer = ask(&mut s, "GET", path, auth, b"").await;
    (s, answer)
}

/// Spawns `id` with the pod's token on a new connection: the status, or `None` if it was closed.
async fn pod_spawn(shim: &Shim, id: &str) -> Option<u16> {
    let mut s = TcpStream::connect(&shim.addr).await.unwrap();
    let spec = serde_json::to_vec(&sh("exit 0")).unwrap();
    let bearer = format!("Bearer {}", shim.token);
    let path = format!("/v1/processes/{id}");
    ask(&mut s, "PUT", &path, &bearer, &spec).await.map(|a| a.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grant_holders_cannot_fill_the_connection_cap() {
    let shim = Shim::start_with(&[("STEPSHIM_MAX_CONNECTIONS", "16")], None);
    let dir = scratch("conns").join("app");
    rootfs_image(&dir);
    let token = granted(&shim, &dir, 600).await;
    let (manifest, files) = (
        "/v2/app/manifests/latest".to_owned(),
        format!("/v1/files?path={}/rootfs/etc/", dir.display()),
    );
    let (as_registry, as_files) = (basic(&token), format!("Bearer {token}"));

    // As many grant connections as the cap, half fetching a manifest, half listing files.
    let (mut kept, mut refused, mut closed) = (Vec::new(), 0, 0);
    for i in 0..CAP {
        let (path, auth) = match i % 2 {
            0 => (&manifest, &as_registry),
            _ => (&files, &as_files),
        };
        let (s, answer) = connect_and_ask(&shim, path, auth).await;
        match answer {
            Some((200, _)) => kept.push(s),
            Some((429, body)) => {
                assert_eq!(oci_code(&body), "TOOMANYREQUESTS");
                refused += 1;
            }
            Some((503, body)) => {
                assert_eq!(error_code(&body), "unavailable");
                refused += 1;
            }
            None => closed += 1,
            Some((status, _)) => panic!("grant connection {i}: {status}"),
        }
    }

    // The pod's token gets connections and answers, each on a new connection.
    for i in 0..5 {
        let status = pod_spawn(&shim, &format!("p{i}")).await;
        assert_eq!(
            status,
            Some(201),
            "spawn {i} with the pod's token, {} grant connections open",
            kept.len()
        );
    }
    assert_eq!(
        (kept.len(), refused, closed),
        (CAP / 2, CAP / 2, 0),
        "half the cap holds grants, the rest are refused"
    );
    // No grant connection was closed to make room: each still answers.
    for s in &mut kept {
        let answer = ask(s, "GET", &manifest, &as_registry, b"").await;
        assert_eq!(answer.map(|a| a.0), Some(200));
    }

    // A grant connection that ends gives its place back.
    drop(kept.pop());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (s, answer) = connect_and_ask(&shim, &manifest, &as_registry).await;
        match answer.map(|a| a.0) {
            Some(200) => break kept.push(s),
            Some(429) => assert!(Instant::now() < deadline, "the place was not given back"),
            other => panic!("{other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
