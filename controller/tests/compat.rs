//! The compatibility rule of `docs/compatibility.md`, against real processes.
//!
//! - A shim of protocol 1, the one under `$STEPSHIM_BIN` (else `stepshim` beside `stepctl`): what
//!   protocol 1 allows works from the current `stepctl` and Rust client (spawn, output read from an
//!   offset, stdin with offsets, signals, files in and out). `tests/compat/previous-shim` runs this
//!   file (with `cp` and `transfer`, which cover grants and pulls) against the previous release's
//!   shim, and sets `STEPSHIM_EXPECT_RELEASE` to the release that shim must report.
//! - A shim announcing another protocol version (a real listener) is refused by `stepctl` with one
//!   line naming both versions and what to upgrade; a missing route reads as an older shim.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use client::local::{Launch, LocalShim};
use client::{ClientError, ShimClient};
use protocol::{FrameType, SpawnRequest, State};

fn stepctl_exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_stepctl"))
}

/// The shim under test.
fn shim_bin() -> PathBuf {
    let bin = std::env::var_os("STEPSHIM_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| stepctl_exe().with_file_name("stepshim"));
    assert!(
        bin.exists(),
        "no stepshim at {} (cargo build -p stepshim)",
        bin.display()
    );
    bin
}

fn start_shim() -> LocalShim {
    Launch::new(shim_bin()).start().expect("the shim starts")
}

/// `stepctl --local --shim-bin SHIM ARGS` with `stdin`: exit code, stdout, stderr.
fn stepctl_local(shim: &PathBuf, args: &[&str], stdin: &[u8]) -> (i32, String, String) {
    let mut child = Command::new(stepctl_exe())
        .arg("--local")
        .arg("--shim-bin")
        .arg(shim)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("stepctl runs");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn stepctl_runs_a_step_and_feeds_its_stdin() {
    let shim = shim_bin();
    let (code, out, err) = stepctl_local(
        &shim,
        &["run", "--", "sh", "-c", "echo out; echo err >&2; exit 3"],
        b"",
    );
    assert_eq!((code, out.as_str()), (3, "out\n"), "stderr: {err}");
    assert!(err.contains("err"), "stderr: {err}");
    let (code, out, err) = stepctl_local(&shim, &["run", "-i", "--", "cat"], b"fed\nlines\n");
    assert_eq!((code, out.as_str()), (0, "fed\nlines\n"), "stderr: {err}");
}

#[test]
fn stepctl_and_stepshim_name_their_release_and_protocol() {
    let want = format!(
        "{} (protocol {})",
        env!("CARGO_PKG_VERSION"),
        protocol::PROTOCOL_VERSION
    );
    let out = Command::new(stepctl_exe())
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("stepctl {want}\n")
    );
    if std::env::var_os("STEPSHIM_EXPECT_RELEASE").is_none() {
        // The shim under test is this release's (an older one may not know --version): it answers
        // before reading any configuration, so no token is needed.
        let out = Command::new(shim_bin()).arg("--version").output().unwrap();
        assert!(out.status.success());
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("stepshim {want}\n")
        );
    }
}

/// The stdout, stderr and exit status of a process's log read from `offset`, without following.
async fn read_log(c: &ShimClient, id: &str, offset: u64) -> (Vec<(FrameType, Bytes)>, u64) {
    let mut stream = c.output(id, offset, false).await.unwrap();
    let mut frames = Vec::new();
    while let Some(f) = stream.next().await.unwrap() {
        frames.push((f.kind, f.payload));
    }
    (frames, stream.offset())
}

fn spec(path: &str, args: &[&str]) -> SpawnRequest {
    SpawnRequest {
        path: path.into(),
        args: args.iter().map(|a| (*a).to_owned()).collect(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "current_thread")]
async fn protocol_one_operations_through_the_rust_client() {
    let mut shim = start_shim();
    let c = shim.client.clone();
    let info = c.check_protocol().await.unwrap();
    assert_eq!(info.protocol, protocol::PROTOCOL_VERSION);
    if let Ok(release) = std::env::var("STEPSHIM_EXPECT_RELEASE") {
        assert_eq!(
            info.version, release,
            "the shim under test is not that release"
        );
    }

    // Spawn, wait, then the log read whole and again from the offset after its first frame.
    let script = "printf one; sleep 0.1; printf two >&2; sleep 0.1; printf three; exit 4";
    c.spawn("out", &spec("sh", &["-c", script])).await.unwrap();
    let p = c.wait("out", 30).await.unwrap();
    assert_eq!(p.exit.map(|e| e.status), Some(4));
    let (all, end) = read_log(&c, "out", 0).await;
    let kinds: Vec<_> = all.iter().map(|(k, p)| (*k, p.clone())).collect();
    assert_eq!(
        kinds[..3],
        [
            (FrameType::Stdout, Bytes::from("one")),
            (FrameType::Stderr, Bytes::from("two")),
            (FrameType::Stdout, Bytes::from("three")),
        ]
    );
    assert_eq!(kinds[3].0, FrameType::Exit);
    assert_eq!(end, p.output_end);
    let first = 8 + 3;
    let (rest, _) = read_log(&c, "out", first).await;
    assert_eq!(rest, all[1..], "a read resumed at a frame boundary");

    // Stdin with offsets: a repeated chunk is taken once.
    let cat = SpawnRequest {
        stdin: true,
        ..spec("cat", &[])
    };
    c.spawn("cat", &cat).await.unwrap();
    let ack = c.stdin("cat", 0, Bytes::from("ab"), false).await.unwrap();
    assert_eq!(ack.stdin_offset, 2);
    c.stdin("cat", 0, Bytes::from("ab"), false).await.unwrap();
    let ack = c.stdin("cat", 2, Bytes::from("cd"), true).await.unwrap();
    assert!(ack.stdin_closed && ack.stdin_offset == 4, "{ack:?}");
    let p = c.wait("cat", 30).await.unwrap();
    assert_eq!(p.exit.map(|e| e.status), Some(0));
    let (frames, _) = read_log(&c, "cat", 0).await;
    let stdout: Vec<u8> = frames
        .iter()
        .filter(|(k, _)| *k == FrameType::Stdout)
        .flat_map(|(_, p)| p.to_vec())
        .collect();
    assert_eq!(stdout, b"abcd");

    // A signal ends a running process, and its exit says so.
    c.spawn("sleep", &spec("sleep", &["30"])).await.unwrap();
    c.signal("sleep", "TERM").await.unwrap();
    let p = c.wait("sleep", 30).await.unwrap();
    assert_eq!(p.state, State::Exited);
    assert_eq!(p.exit.and_then(|e| e.signal), Some(15));

    // Files in, then out.
    let dir = std::env::temp_dir().join(format!("stepctl-compat-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut tar = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_size(6);
    header.set_mode(0o640);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(0);
    header.set_entry_type(tar::EntryType::Regular);
    header.set_cksum();
    tar.append_data(&mut header, "sub/a.txt", &b"alpha\n"[..])
        .unwrap();
    let tar = tar.into_inner().unwrap();
    c.files_in_bytes(&dir.display().to_string(), Bytes::from(tar))
        .await
        .unwrap();
    assert_eq!(std::fs::read(dir.join("sub/a.txt")).unwrap(), b"alpha\n");
    let body = c
        .files_out(&dir.join("sub").display().to_string())
        .await
        .unwrap();
    let bytes = http_body_util::BodyExt::collect(body)
        .await
        .unwrap()
        .to_bytes();
    let mut archive = tar::Archive::new(&bytes[..]);
    let mut found = None;
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        if entry.path().unwrap().ends_with("a.txt") {
            let mut text = String::new();
            entry.read_to_string(&mut text).unwrap();
            found = Some(text);
        }
    }
    assert_eq!(found.as_deref(), Some("alpha\n"));
    let _ = std::fs::remove_dir_all(&dir);
    shim.terminate(Duration::from_secs(10));
}

/// A real listener that answers every request with `answer(path)`: (status line, JSON body).
fn serve(answer: impl Fn(&str) -> (&'static str, String) + Send + 'static) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && conn.read(&mut byte).unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            let head = String::from_utf8_lossy(&head);
            let path = head.split(' ').nth(1).unwrap_or("").to_owned();
            let (status, body) = answer(&path);
            let _ = write!(
                conn,
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    addr
}

/// A listener that says it is a shim of `protocol`, release 9.1.0 (with a field this client does not
/// know), and has no route but `/v1/info`.
fn shim_of_protocol(protocol: u32) -> String {
    serve(move |path| {
        if path == "/v1/info" {
            let body = format!(
                r#"{{"protocol":{protocol},"version":"9.1.0","boot_id":"00112233445566778899aabbccddeeff","later":1}}"#
            );
            ("200 OK", body)
        } else {
            let body = format!(r#"{{"error":{{"code":"no_route","message":"no route {path}"}}}}"#);
            ("404 Not Found", body)
        }
    })
}

/// A "shim binary" that announces the address of a listener in its ready file and waits, so that
/// `stepctl --local` talks to that listener.
fn fake_shim_binary(addr: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!(
        "stepctl-compat-fake-{}-{}",
        std::process::id(),
        addr.replace([':', '.'], "-")
    ));
    let script = format!(
        "#!/bin/sh\nprintf '%s' '{addr}' > \"$STEPSHIM_READY_FILE.part\" && mv \"$STEPSHIM_READY_FILE.part\" \"$STEPSHIM_READY_FILE\"\nexec sleep 60\n"
    );
    std::fs::write(&path, script).unwrap();
    let mut perms = std::fs::metadata(&path).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&path, perms).unwrap();
    path
}

#[test]
fn stepctl_refuses_a_shim_of_another_protocol_in_one_line() {
    let ours = protocol::PROTOCOL_VERSION;
    let release = env!("CARGO_PKG_VERSION");
    for (theirs, advice) in [
        (
            ours + 1,
            format!(
                "upgrade the controller (stepctl, the Go kit) to a release of protocol {}",
                ours + 1
            ),
        ),
        (
            ours - 1,
            "upgrade the shim (the image of stepctl run --shim-image".to_owned(),
        ),
    ] {
        let fake = fake_shim_binary(&shim_of_protocol(theirs));
        let (code, out, err) = stepctl_local(&fake, &["run", "--", "true"], b"");
        let _ = std::fs::remove_file(&fake);
        let want = format!(
            "stepctl: the shim speaks protocol {theirs} (stepshim 9.1.0) and this client protocol {ours} (stepshim {release}): {advice}"
        );
        assert_eq!(code, 1, "stderr: {err}");
        assert!(out.is_empty(), "stdout: {out}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(
            err.starts_with(&want),
            "got {err:?}, want it to start {want:?}"
        );
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_route_an_older_shim_lacks_reads_as_unsupported() {
    let addr = shim_of_protocol(protocol::PROTOCOL_VERSION);
    let c = ShimClient::new(&format!("http://{addr}"), Some("t".into())).unwrap();
    c.check_protocol()
        .await
        .expect("the same protocol, a newer release, passes");
    let err = c.grants().await.unwrap_err();
    assert!(
        matches!(&err, ClientError::Unsupported { method, route } if method == "GET" && route == "/v1/grants"),
        "{err:?}"
    );
    assert!(
        err.to_string().starts_with(
            "the shim has no GET /v1/grants (404 no_route): it is older than this client"
        ),
        "{err}"
    );
}
