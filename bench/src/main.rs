//! `interlingua-bench`: the harness behind `bench/run` (`run`), the canned upstream every
//! contender proxies to (`upstream`), the stand-in x402 facilitator of the paid contender
//! (`facilitator`), the store seeder (`seed`), and measurements alone (`blocking`, `idle`,
//! `instructions`).

#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use interlingua_bench::{
    blocking, canned, facilitator, idle, instructions, procs, run, seed, stack,
};

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
    /// Serves the stand-in x402 facilitator: every payment valid, every settlement a success,
    /// each call counted (`GET /counts`).
    Facilitator {
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
    /// Counts the instructions interlingua executes per request (passthrough, full get_task, full
    /// create) under valgrind's callgrind, and with `--baseline FILE` fails when one is more than
    /// `--margin` over the file's figure: the regression guard `.ci/run` runs (bench/README.md).
    Instructions {
        /// The `interlingua` binary (a release build).
        #[arg(long)]
        interlingua: PathBuf,
        /// The repository (for `mappings/`).
        #[arg(long, default_value = ".")]
        repo: PathBuf,
        /// Requests sent before the count starts.
        #[arg(long, default_value_t = 50)]
        warmup: usize,
        /// Requests counted, per kind.
        #[arg(long, default_value_t = 300)]
        requests: usize,
        /// The committed baseline to compare with (`NAME INSTRUCTIONS` lines).
        #[arg(long)]
        baseline: Option<PathBuf>,
        /// How far over its baseline a figure may be (0.15: 15 %).
        #[arg(long, default_value_t = 0.15)]
        margin: f64,
        /// Keep the callgrind dumps here (`callgrind.<kind>.out`), to read where the
        /// instructions go with `callgrind_annotate`.
        #[arg(long)]
        dumps: Option<PathBuf>,
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

/// `instructions`: counts, prints the line, and compares with the baseline when one is given.
fn instructions_alone(
    interlingua: PathBuf,
    repo: PathBuf,
    sizes: instructions::Sizes,
    baseline: Option<PathBuf>,
    margin: f64,
) -> Result<(), String> {
    let baseline = match baseline {
        Some(path) => {
            let text =
                std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            Some(
                instructions::read_baseline(&text)
                    .map_err(|e| format!("{}: {e}", path.display()))?,
            )
        }
        None => None,
    };
    alone("instructions", interlingua, repo, |env| {
        let figures = instructions::measure(env, &sizes)?;
        if let Some(base) = &baseline {
            let report = instructions::check(&figures, base, margin);
            eprint!("{}", report.as_ref().unwrap_or_else(|e| e));
            report?;
        }
        println!("{}", instructions::line(&figures));
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
        Command::Facilitator { listen, threads } => {
            facilitator::main(listen, threads).map_err(|e| e.to_string())
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
        Command::Instructions {
            interlingua,
            repo,
            warmup,
            requests,
            baseline,
            margin,
            dumps,
        } => instructions_alone(
            interlingua,
            repo,
            instructions::Sizes {
                warmup,
                requests,
                dumps,
            },
            baseline,
            margin,
        ),
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
