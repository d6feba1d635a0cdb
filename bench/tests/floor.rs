//! The HTTP floor part of `stepshim-bench local`: its bare responder (the hidden `floor-server`
//! subcommand) answers `GET /healthz` with the shim's bytes, closes on anything else, and ends with
//! its standard input; the part itself runs against the real shim binary.
#![allow(clippy::unwrap_used)] // test helpers fail loudly by design

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BENCH: &str = env!("CARGO_BIN_EXE_stepshim-bench");

/// One test at a time: the second looks for responders left running.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn healthz(sock: &mut TcpStream) -> Vec<u8> {
    sock.write_all(b"GET /healthz HTTP/1.1\r\nHost: shim\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    let mut chunk = [0u8; 512];
    while !got.ends_with(b"\r\n\r\nok\n") {
        let n = sock.read(&mut chunk).unwrap();
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&chunk[..n]);
    }
    got
}

/// Kills the responder if a test fails before it ended (so no process outlives the test).
struct Reap(std::process::Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn responder_answers_healthz_closes_on_anything_else_and_ends_with_its_stdin() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut child = Reap(
        Command::new(BENCH)
            .arg("floor-server")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut addr = String::new();
    BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut addr)
        .unwrap();
    let mut sock = TcpStream::connect(addr.trim()).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // Kept alive: two answers on one connection, each the shim's status line and body.
    for _ in 0..2 {
        let answer = String::from_utf8(healthz(&mut sock)).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(answer.contains("content-length: 3\r\n"), "{answer}");
    }
    let mut other = TcpStream::connect(addr.trim()).unwrap();
    other
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    other.write_all(b"GET /v1/info HTTP/1.1\r\n\r\n").unwrap();
    let mut buf = [0u8; 64];
    assert_eq!(other.read(&mut buf).unwrap(), 0, "closed, nothing answered");

    drop(child.0.stdin.take());
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "still serving after its stdin closed"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
}

#[test]
fn floor_part_runs_against_the_real_shim_and_leaves_no_responder() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let out = Command::new(BENCH)
        .args([
            "local",
            "--only",
            "floor",
            "--iterations",
            "20",
            "--shim-bin",
        ])
        .arg(test_support::shim::binary())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row = stdout
        .lines()
        .find(|l| l.contains("shim / bare responder (p50)") && l.contains("after a raw fork/exec"))
        .unwrap_or_else(|| panic!("no floor row in {stdout}"));
    // Two timings, each a positive number of microseconds.
    let cells: Vec<&str> = row.split('|').collect();
    let timings: Vec<f64> = cells[2]
        .split('/')
        .map(|t| t.trim().trim_end_matches(" µs").parse().unwrap())
        .collect();
    assert_eq!(timings.len(), 2, "{row}");
    assert!(timings.iter().all(|t| *t > 0.0), "{row}");
    // The responder ended with the bench: no process of it is left.
    let left = Command::new("pgrep")
        .args(["-f", &format!("{BENCH} floor-server")])
        .output()
        .unwrap();
    assert!(
        left.stdout.is_empty(),
        "responder left running: {}",
        String::from_utf8_lossy(&left.stdout)
    );
}
