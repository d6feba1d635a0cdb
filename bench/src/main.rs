//! `stepshim-bench`: parses the command line, runs one benchmark, prints its table; exits 1 if the
//! benchmark found lost or wrong data (numbers themselves never fail it).

use bench::args::{Cli, Command};
use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // The local benchmark measures the shim, so its client runs on one thread (on this machine a
    // /healthz round trip took 110-120 µs from the multi-thread runtime, 36-54 µs from
    // current_thread, as profiled); the cluster benchmark
    // drives hundreds of streams on both paths and gets every core.
    let runtime = match &cli.command {
        // The Rust scale driver runs as stepctl does, on one thread, so its RSS is stepctl's.
        Command::Local(_) | Command::ScaleWorker(_) | Command::FloorServer => {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
        }
        Command::Cluster(_) | Command::Scale(_) => tokio::runtime::Runtime::new(),
    };
    let runtime = match runtime {
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
            Command::Scale(a) => bench::scale::run(&a).await,
            Command::ScaleWorker(a) => bench::scale::worker::run(&a).await,
            Command::FloorServer => bench::local::floor::serve().await,
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
