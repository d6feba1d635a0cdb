//! The terminal side of a process: its output to our stdout and stderr, our stdin to it with
//! offset-idempotent retries, raw mode, and window-size changes sent as resizes.

use std::io::Write;
use std::time::Duration;

use anyhow::{Context, Result};
use bytes::Bytes;
use client::{Attached, ShimClient};
use protocol::{Exit, FrameType, TtySize};
use tokio::io::AsyncReadExt;

/// Follows `id` from `offset` to its exit, writing stdout and stderr frames to ours.
pub async fn stream(client: &ShimClient, id: &str, offset: u64) -> Result<Attached> {
    let mut out = std::io::stdout();
    let mut err = std::io::stderr();
    let attached = client
        .attach(id, offset, 30, |kind, data| {
            // A closed terminal must not stop the process; its output stays in the shim.
            let _ = match kind {
                FrameType::Stderr => err.write_all(&data).and_then(|_| err.flush()),
                _ => out.write_all(&data).and_then(|_| out.flush()),
            };
        })
        .await
        .with_context(|| format!("following the output of {id}"))?;
    Ok(attached)
}

/// The exit code stepctl ends with for a process's exit.
pub fn exit_code(exit: &Exit) -> i32 {
    exit.status.clamp(0, 255)
}

/// Sends our stdin to the process until EOF, then closes its stdin. Retries broken connections at
/// the same offset: the shim skips bytes it already has.
pub async fn pump_stdin(client: ShimClient, id: String) -> Result<()> {
    let mut stdin = tokio::io::stdin();
    let mut offset = 0u64;
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        let n = stdin.read(&mut buf).await.context("reading stdin")?;
        let data = Bytes::copy_from_slice(&buf[..n]);
        let eof = n == 0;
        let mut tries = 0;
        loop {
            match client.stdin(&id, offset, data.clone(), eof).await {
                Ok(ack) => {
                    offset = ack.stdin_offset;
                    break;
                }
                Err(e) if e.is_transient() && tries < 10 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(50 << tries.min(5))).await;
                }
                // The process ended or closed its stdin: nothing more to send.
                Err(e)
                    if matches!(
                        e.code(),
                        Some(protocol::ErrorCode::NotRunning | protocol::ErrorCode::StdinClosed)
                    ) =>
                {
                    return Ok(());
                }
                Err(e) => return Err(e).context("sending stdin"),
            }
        }
        if eof {
            return Ok(());
        }
    }
}

/// The terminal's size, if stdout is a terminal.
pub fn size() -> Option<TtySize> {
    crossterm::terminal::size()
        .ok()
        .map(|(cols, rows)| TtySize { cols, rows })
}

/// Raw mode for the life of the guard.
#[derive(Debug)]
pub struct RawMode;

impl RawMode {
    /// Enters raw mode (keys go to the process as typed, Ctrl-C included).
    pub fn enter() -> Result<RawMode> {
        crossterm::terminal::enable_raw_mode().context("terminal raw mode")?;
        Ok(RawMode)
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = crossterm::terminal::disable_raw_mode();
    }
}

/// Sends a resize on every SIGWINCH until the task is dropped.
pub async fn follow_resizes(client: ShimClient, id: String) {
    let Ok(mut winch) =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change())
    else {
        return;
    };
    while winch.recv().await.is_some() {
        if let Some(sz) = size() {
            let _ = client.resize(&id, sz).await;
        }
    }
}
