//! `interlingua-bench`: the harness behind `bench/run` (`run`), the canned upstream every
//! contender proxies to (`upstream`), and the store seeder (`seed`).

#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use interlingua_bench::{canned, run, seed, stack};

#[derive(Parser)]
#[command(
    version,
    about = "interlingua side by side with nginx and the direct upstream"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs the benchmark (what `bench/run` calls once everything is built and installed).
    Run(Box<run::RunArgs>),
    /// Serves the canned MIP-003 / Nevermined / echo upstream.
    Upstream {
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        #[arg(long, default_value_t = 1)]
        threads: usize,
    },
    /// Fills a task store with finished tasks (until it holds `count` of them).
    Seed {
        #[arg(long)]
        data_dir: PathBuf,
        #[arg(long)]
        count: u64,
        #[arg(long, default_value = stack::NV_ROUTE)]
        route: String,
        /// One `TaskStore::insert` per task (one durable transaction each), for comparison.
        #[arg(long)]
        through_store: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run::run(*args),
        Command::Upstream { listen, threads } => {
            canned::main(listen, threads).map_err(|e| e.to_string())
        }
        Command::Seed {
            data_dir,
            count,
            route,
            through_store,
        } => {
            let how = if through_store {
                seed::seed_through_store
            } else {
                seed::seed
            };
            how(&data_dir, &route, stack::SUBJECT, stack::PLAN, count).map(|(added, secs)| {
                println!(
                    "added {added} tasks in {secs:.1} s ({:.0}/s); the store holds {count}",
                    added as f64 / secs.max(1e-9)
                );
            })
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("interlingua-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
