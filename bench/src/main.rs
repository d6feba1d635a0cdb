//! `stepshim-bench`: parses the command line, runs one benchmark, prints its table; exits 1 if the
//! benchmark found lost or wrong data (numbers themselves never fail it).

use bench::args::{Cli, Command};
use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("stepshim-bench: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Local(a) => bench::local::run(&a).await,
            Command::Cluster(a) => bench::cluster::run(&a).await,
        }
    });
    match result {
        Ok(code) => std::process::ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) => {
            eprintln!("stepshim-bench: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
