//! The `stepshim` binary: reads configuration (exit 64 with one line if it is bad), sets up logging and
//! process-wide settings, binds the listener and runs the shim until SIGTERM or SIGINT.

use std::process::ExitCode;

use stepshim::{Config, sys};
use tokio::signal::unix::{SignalKind, signal};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("install") {
        return install(args.get(1).map(String::as_str));
    }
    let mut config = match Config::from_sources(std::env::vars(), std::env::args().skip(1)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("stepshim: {e}");
            return ExitCode::from(64);
        }
    };
    stepshim::logging::StderrLogger::new(config.log_level).install();
    if let Err(e) = sys::set_child_subreaper() {
        tracing::warn!(cause = %e, "cannot become a child subreaper; orphans outside PID 1 go elsewhere");
    }
    if let Err(e) = sys::set_non_dumpable() {
        tracing::warn!(cause = %e, "cannot mark the shim non-dumpable; a step of the same user could ptrace it");
    }
    match sys::raise_nofile_limit() {
        // Connections may take at most half the descriptors; processes, pipes and spill files
        // keep the rest, so a connection flood cannot starve a spawn.
        Ok(limit) => {
            let most = usize::try_from(limit / 2).unwrap_or(usize::MAX).max(4);
            if config.max_connections > most {
                tracing::warn!(
                    configured = config.max_connections,
                    used = most,
                    "STEPSHIM_MAX_CONNECTIONS lowered to half the open-file limit"
                );
                config.max_connections = most;
            }
        }
        Err(e) => tracing::warn!(cause = %e, "cannot raise the open-file limit"),
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("stepshim: cannot start the runtime: {e}");
            return ExitCode::from(70);
        }
    };
    runtime.block_on(async move {
        let listener = match listen(config.listen) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("stepshim: cannot listen on {}: {e}", config.listen);
                return ExitCode::from(64);
            }
        };
        let addr = listener
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        tracing::info!(
            addr,
            auth = config.token_sha256.is_some(),
            "stepshim listening"
        );
        if let Some(path) = &config.ready_file
            && let Err(e) = announce(path, &addr)
        {
            eprintln!(
                "stepshim: cannot write the ready file {}: {e}",
                path.display()
            );
            return ExitCode::from(73);
        }
        let (mut term, mut int) = match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(t), Ok(i)) => (t, i),
            _ => {
                eprintln!("stepshim: cannot install signal handlers");
                return ExitCode::from(70);
            }
        };
        let shutdown = async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        };
        stepshim::run(config, listener, shutdown).await;
        ExitCode::SUCCESS
    })
}

/// Writes `addr` and a newline to `path` through a temporary file and a rename, so a reader sees the
/// whole address or nothing.
fn announce(path: &std::path::Path, addr: &str) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, format!("{addr}\n"))?;
    std::fs::rename(&tmp, path)
}

/// Listen backlog: room for a burst of connections beyond the connection cap, so a health probe
/// arriving during a flood waits in the queue instead of having its SYN dropped (a 1 s retransmit).
/// The kernel caps it at `net.core.somaxconn`.
const BACKLOG: u32 = 8192;

fn listen(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

/// `stepshim install DEST`: copies this binary to DEST, executable. An init container runs it from the
/// shim image (which has nothing else, not even `cp`) to put the shim into a volume the step's
/// container shares.
fn install(dest: Option<&str>) -> ExitCode {
    let Some(dest) = dest else {
        eprintln!("stepshim: usage: stepshim install DEST");
        return ExitCode::from(64);
    };
    let result = std::fs::read("/proc/self/exe").and_then(|bytes| {
        let tmp = format!("{dest}.tmp");
        std::fs::write(&tmp, bytes)?;
        std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
        std::fs::rename(&tmp, dest)
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("stepshim: cannot install to {dest}: {e}");
            ExitCode::FAILURE
        }
    }
}
