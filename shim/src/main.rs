//! The `stepshim` binary: answers `--version` (before any configuration is read), reads configuration
//! (exit 64 if it is bad), sets up logging and process-wide settings, binds the listener and runs
//! the shim until a shutdown signal. A start-up that fails writes exactly one line on stderr (the
//! log lines of the start-up are held back until the shim serves) and exits 64, 69, 70 or 73.
//! Every step lives in the library (its start-up steps and `run`); this file only sequences them
//! and picks exit statuses.

use std::process::ExitCode;

use stepshim::Config;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--version") {
        return version();
    }
    if args.first().map(String::as_str) == Some("install") {
        let Some(dest) = args.get(1) else {
            return fail(64, "usage: stepshim install DEST");
        };
        return match stepshim::install(dest) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(1, &format!("cannot install to {dest}: {e}")),
        };
    }
    let mut config = match Config::from_sources(std::env::vars(), args) {
        Ok(c) => c,
        Err(e) => return fail(64, &e.to_string()),
    };
    stepshim::logging::install(config.log_level);
    // Until the shim serves, its log lines wait: a failed start writes one line and nothing else.
    stepshim::logging::hold();
    stepshim::process_settings(&mut config);
    if let Some(parent) = config.parent_pid
        && let Err(why) = stepshim::stop_with_parent(parent)
    {
        return fail(69, &why);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return fail(70, &format!("cannot start the runtime: {e}")),
    };
    runtime.block_on(async move {
        let listener = match stepshim::listen(config.listen) {
            Ok(l) => l,
            Err(e) => return fail(64, &format!("cannot listen on {}: {e}", config.listen)),
        };
        let addr = listener
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        if let Some(path) = &config.ready_file
            && let Err(e) = stepshim::announce(path, &addr)
        {
            let why = format!("cannot write the ready file {}: {e}", path.display());
            return fail(73, &why);
        }
        let Ok(shutdown) = stepshim::shutdown_signal() else {
            return fail(70, "cannot watch the shutdown signals (signalfd)");
        };
        let (auth, tls) = (config.token_sha256.is_some(), config.serves_tls());
        stepshim::info!(addr, auth, tls, "stepshim listening");
        stepshim::logging::release();
        stepshim::run(config, listener, shutdown).await;
        ExitCode::SUCCESS
    })
}

/// `stepshim --version`: the release and the protocol version on stdout, exit 0 (74 if stdout cannot
/// be written). Written through a duplicate of fd 1 as a `File`, which the shim links anyway: the
/// stable image binary grows 1,152 bytes; `println!` links `Stdout`'s line writer, 3,200 bytes.
fn version() -> ExitCode {
    use std::io::Write;
    use std::os::fd::AsFd;
    let line = format!(
        "stepshim {} (protocol {})\n",
        env!("CARGO_PKG_VERSION"),
        protocol::PROTOCOL_VERSION
    );
    let written = std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .and_then(|fd| std::fs::File::from(fd).write_all(line.as_bytes()));
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::from(74),
    }
}

/// One line on stderr, the only one (log lines held back since start-up are dropped), and the
/// exit status.
fn fail(status: u8, why: &str) -> ExitCode {
    stepshim::logging::discard();
    eprintln!("stepshim: {why}");
    ExitCode::from(status)
}
