//! `interlingua-bench`: the harness behind `bench/run` (`run`), the canned upstream every
//! contender proxies to (`upstream`), the store seeder (`seed`), and two measurements alone
//! (`blocking` and `idle`, also part of `run`).

#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use interlingua_bench::{blocking, canned, idle, procs, run, seed, stack};

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
    /// Measures only what a client blocking on a 2 s task waits beyond the task (A2A over
    /// MIP-003), e.g. to compare two builds: `interlingua-bench blocking --interlingua BIN`.
    Blocking {
        /// The `interlingua` binary.
        #[arg(long)]
        interlingua: PathBuf,
        /// The repository (for `mappings/`).
        #[arg(long, default_value = ".")]
        repo: PathBuf,
        #[arg(long, default_value_t = 5)]
        rounds: usize,
    },
    /// Measures only interlingua's memory with idle connections held and after they close,
    /// e.g. to compare two builds: `interlingua-bench idle --interlingua BIN`.
    Idle {
        /// The `interlingua` binary.
        #[arg(long)]
        interlingua: PathBuf,
        /// The repository (for `mappings/`).
        #[arg(long, default_value = ".")]
        repo: PathBuf,
        #[arg(long, default_value_t = 2000)]
        connections: usize,
        #[arg(long, default_value_t = 2)]
        rounds: usize,
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

/// `blocking` on its own: unpinned, in a scratch directory removed afterwards.
fn blocking_alone(interlingua: PathBuf, repo: PathBuf, rounds: usize) -> Result<(), String> {
    alone("blocking", interlingua, repo, |env| {
        println!("{}", blocking::measure(env, rounds)?.line());
        Ok(())
    })
}

/// `idle` on its own, as `blocking` is.
fn idle_alone(
    interlingua: PathBuf,
    repo: PathBuf,
    connections: usize,
    rounds: usize,
) -> Result<(), String> {
    alone("idle", interlingua, repo, |env| {
        for point in idle::alone(env, connections, rounds)? {
            println!("{}", point.line());
        }
        Ok(())
    })
}

/// Runs `measure` unpinned, in a scratch directory removed afterwards.
fn alone(
    name: &str,
    interlingua: PathBuf,
    repo: PathBuf,
    measure: impl FnOnce(&stack::Env) -> Result<(), String>,
) -> Result<(), String> {
    let scratch = std::env::temp_dir().join(format!("interlingua-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).map_err(|e| e.to_string())?;
    let procs = procs::Procs::new(&scratch.join("pids"), false).map_err(|e| e.to_string())?;
    // The configs name an HMAC key; this route needs no token, but the key must load.
    if std::env::var_os(stack::SECRET_ENV).is_none() {
        std::env::set_var(
            stack::SECRET_ENV,
            format!("blocking-{}", std::process::id()),
        );
    }
    let env = stack::Env {
        procs: procs.clone(),
        dir: scratch.clone(),
        repo,
        interlingua,
        nginx: PathBuf::from("nginx"),
        me: std::env::current_exe().map_err(|e| e.to_string())?,
        sut_cpus: "0".into(),
        threads: 1,
        store_url: None,
    };
    let result = measure(&env);
    procs.stop_all();
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run::run(*args),
        Command::Upstream { listen, threads } => {
            canned::main(listen, threads).map_err(|e| e.to_string())
        }
        Command::Blocking {
            interlingua,
            repo,
            rounds,
        } => blocking_alone(interlingua, repo, rounds),
        Command::Idle {
            interlingua,
            repo,
            connections,
            rounds,
        } => idle_alone(interlingua, repo, connections, rounds),
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
