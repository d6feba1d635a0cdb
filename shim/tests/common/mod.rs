//! Test harness: runs the real `stepshim` binary as a child on a free loopback port with a fresh token,
//! and gives tests a client, helpers to run processes to completion, and a connection-cutting proxy.
#![allow(dead_code, clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use controller::shim::ShimClient;
use protocol::{Exit, FrameType, SpawnRequest};

/// A running shim child process.
pub struct Shim {
    pub child: Child,
    pub addr: String,
    pub token: String,
    pub client: ShimClient,
    pub log: Arc<Mutex<String>>,
}

pub fn random_hex(n: usize) -> String {
    (0..n)
        .map(|_| format!("{:02x}", rand::random::<u8>()))
        .collect()
}

impl Shim {
    pub fn start() -> Shim {
        Self::start_with(&[], None)
    }

    /// Starts the shim with extra environment, optionally under a wrapper command (e.g. `unshare`).
    pub fn start_with(env: &[(&str, &str)], wrapper: Option<&[&str]>) -> Shim {
        let token = random_hex(16);
        let bin = env!("CARGO_BIN_EXE_stepshim");
        let mut cmd = match wrapper {
            Some(w) => {
                let mut c = Command::new(w[0]);
                c.args(&w[1..]).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        cmd.env("STEPSHIM_LISTEN", "127.0.0.1:0")
            .env(
                "STEPSHIM_TOKEN_SHA256",
                stepshim::auth::token_sha256_hex(&token),
            )
            .env("STEPSHIM_GRACE_SECONDS", "2")
            .env("STEPSHIM_LOG", "debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("start stepshim");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let log2 = log.clone();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("stepshim listening")
                    && let (Some(t), Some(i)) = (tx.take(), line.find("addr=\""))
                {
                    let rest = &line[i + 6..];
                    let _ = t.send(rest[..rest.find('"').unwrap_or(rest.len())].to_owned());
                }
                log2.lock().unwrap().push_str(&(line + "\n"));
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("shim did not report its address");
        let client =
            ShimClient::new(&format!("http://{addr}"), Some(token.clone())).expect("client");
        Shim {
            child,
            addr,
            token,
            client,
            log,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Sends SIGTERM and waits for the exit status, with a deadline.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(s) = self.child.try_wait().expect("wait") {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "shim did not stop after SIGTERM:\n{}",
                self.log.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Shim {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

pub fn sh(script: &str) -> SpawnRequest {
    SpawnRequest {
        path: "/bin/sh".into(),
        args: vec!["-c".into(), script.into()],
        ..Default::default()
    }
}

/// Output of a finished process.
#[derive(Debug, Default)]
pub struct Ran {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// (type, payload) in log order.
    pub frames: Vec<(FrameType, Bytes)>,
    pub exit: Option<Exit>,
}

/// Spawns and follows a process to its exit.
pub async fn run(client: &ShimClient, id: &str, spec: &SpawnRequest) -> Ran {
    client.spawn(id, spec).await.expect("spawn");
    follow(client, id).await
}

pub async fn follow(client: &ShimClient, id: &str) -> Ran {
    let mut ran = Ran::default();
    let attached = client
        .attach(id, 0, 5, |kind, data| {
            match kind {
                FrameType::Stdout => ran.stdout.extend_from_slice(&data),
                FrameType::Stderr => ran.stderr.extend_from_slice(&data),
                _ => {}
            }
            ran.frames.push((kind, data));
        })
        .await
        .expect("attach");
    ran.exit = Some(attached.exit);
    ran
}

/// Polls `cond` until it holds or `limit` passes.
pub async fn eventually<F: FnMut() -> bool>(limit: Duration, what: &str, mut cond: F) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A loopback TCP proxy to `target` that cuts each connection after a random number of response
/// bytes in `[min, max)`, mid-frame or not: the test of resume-after-disconnect.
pub async fn cutting_proxy(
    target: String,
    min: usize,
    max: usize,
) -> (String, Arc<std::sync::atomic::AtomicU64>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let cuts = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let cuts2 = cuts.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let target = target.clone();
            let cuts = cuts2.clone();
            tokio::spawn(async move {
                let Ok(server) = tokio::net::TcpStream::connect(&target).await else {
                    return;
                };
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                let up = tokio::spawn(async move { tokio::io::copy(&mut cr, &mut sw).await });
                let budget = min + rand::random::<u64>() as usize % (max - min);
                let mut sent = 0usize;
                let mut buf = vec![0u8; 16 * 1024];
                loop {
                    let n = match sr.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    let take = n.min(budget - sent);
                    if cw.write_all(&buf[..take]).await.is_err() {
                        break;
                    }
                    sent += take;
                    if sent >= budget {
                        cuts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        break;
                    }
                }
                up.abort();
                // Dropping both halves resets the connections.
            });
        }
    });
    (addr, cuts)
}

/// Sends one raw HTTP/1.1 request (with `Connection: close`) and returns (status, headers, body).
pub async fn raw(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &[u8],
) -> (u16, String, Vec<u8>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
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
