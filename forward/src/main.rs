//! `stepshim-forward`: reads its settings, starts logging, binds the listener and serves until
//! SIGTERM or SIGINT. Bad settings or a listen address it cannot bind: one line on stderr, exit 64.

use std::process::ExitCode;

use anyhow::Context as _;
use forward::Config;

fn main() -> ExitCode {
    let config = match Config::from_sources(std::env::vars(), std::env::args().skip(1)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("stepshim-forward: {e}");
            return ExitCode::from(64);
        }
    };
    tracing_subscriber::fmt()
        .with_max_level(config.log_level)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    match serve(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("stepshim-forward: {e:#}");
            ExitCode::from(64)
        }
    }
}

/// Two worker threads: enough to keep a node's pulls (TLS decryption the heaviest part) moving
/// while one connection's work stalls.
fn serve(config: Config) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("cannot listen on {}", config.listen))?;
        let addr = listener.local_addr().context("listen address")?;
        if let Some(path) = &config.ready_file {
            forward::write_ready(path, addr)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        let nets: Vec<String> = config.allow.iter().map(ToString::to_string).collect();
        tracing::info!(%addr, allow = nets.join(","), shim_port = config.shim_port, "serving");
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .context("cannot watch SIGTERM")?;
        let shutdown = async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            tracing::info!("stopping: draining connections");
        };
        forward::run(listener, config, shutdown)
            .await
            .context("serving")
    })
}
