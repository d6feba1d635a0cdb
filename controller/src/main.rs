//! `stepctl`: parses the command line, sets up logging, connects to the target and runs one command;
//! any error is one line on stderr and exit 1 (the process's own status otherwise).

mod cli;

use clap::{CommandFactory, FromArgMatches};
use cli::args::{Cli, Command};
use cli::{Target, admin, cp, run};

fn main() -> std::process::ExitCode {
    // `--version` names the protocol too: a shim of another protocol version is refused.
    // Built once per run; clap keeps `&'static str`.
    let version: &'static str = Box::leak(
        format!(
            "{} (protocol {})",
            env!("CARGO_PKG_VERSION"),
            protocol::PROTOCOL_VERSION
        )
        .into_boxed_str(),
    );
    let matches = Cli::command().version(version).get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("STEPCTL_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    // One thread is plenty for one command talking to a handful of shims and the apiserver, and
    // it answers faster: no wake-ups handed between worker threads.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("stepctl: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let code = match runtime.block_on(dispatch(cli)) {
        Ok(code) => std::process::ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) => {
            eprintln!("stepctl: {e:#}");
            std::process::ExitCode::FAILURE
        }
    };
    // A stdin pump may sit in a blocking read of a terminal that never closes: do not wait for it.
    runtime.shutdown_background();
    code
}

async fn dispatch(cli: Cli) -> anyhow::Result<i32> {
    let out = cli.output;
    match cli.command {
        Command::Manifests(a) => admin::manifests(&cli.target, a),
        command => {
            if let Command::Run(a) = &command
                && !cli.target.local
            {
                run::images(a)?;
            }
            let target = Target::connect(&cli.target).await?;
            match command {
                Command::Run(a) => run::run(&target, *a).await,
                Command::Hijack(a) => run::hijack(&target, a).await,
                Command::Attach(a) => run::attach(&target, a).await,
                Command::Ps(a) => admin::ps(&target, a, out).await,
                Command::Gc(a) => admin::gc(&target, a, out).await,
                Command::Retire => admin::retire(&target, out).await,
                Command::Check => admin::check(&target, out).await,
                Command::Cp(a) => cp::cp(&target, a, out).await,
                Command::Manifests(_) => unreachable!("handled above"),
            }
        }
    }
}
