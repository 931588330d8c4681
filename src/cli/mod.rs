//! The command line: `serve`, `check`, `demo`, `translate`, `dialects`, `credits`, `migrate`,
//! `token`.

mod check;
mod credits;
mod demo;
mod dialects;
mod migrate;
mod serve;
pub mod token;
mod translate;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config::{self, Problems};
use crate::setup::{self, Setup};

/// interlingua: a reverse proxy for AI agents. Clients reach agents in the protocol dialect they
/// already speak; interlingua checks who is calling, meters paid plans and enforces rate limits.
#[derive(Debug, Parser)]
#[command(name = "interlingua", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the proxy. Stops gracefully on SIGTERM or SIGINT (a second signal stops at once).
    /// Reloads the config, without dropping a request, on SIGHUP, when the config file or a
    /// mapping file changes ([server] watch_config), or on POST /config/reload (admin listener);
    /// a config with problems changes nothing. The admin listener also serves the console at
    /// /console.
    Serve(ConfigArg),
    /// Validate a config file and print every problem with file:line:col; exit 1 if any.
    /// --allow-missing-env: secrets named by environment variables that are not set here are
    /// warnings, and the rest of the file is checked as if they were.
    Check(check::CheckArgs),
    /// Run the proxy on the default config together with the sample agents its routes point at,
    /// and print curl commands to try.
    Demo(ConfigArg),
    /// Translate one message offline: read a JSON document in dialect --from as operation --op's
    /// request (or --response), print it in dialect --to. For developing mappings without an agent.
    Translate(translate::TranslateArgs),
    /// List the dialects (mapping files) and the operations each carries as a front and as a
    /// back; --markdown prints the README's table.
    Dialects(dialects::DialectsArgs),
    /// Grant and revoke credits, read balances and ledger rows (on the config's data directory).
    #[command(subcommand)]
    Credits(credits::CreditsCommand),
    /// Bring the store's schema (SQLite in the data directory, or `[store] url`) to this
    /// build's version; --check only reports. `serve` does the same at start-up unless
    /// `store.migrate_on_start = false`; a store newer than this build is refused.
    Migrate(migrate::MigrateArgs),
    /// Development tokens.
    #[command(subcommand)]
    Token(token::TokenCommand),
}

#[derive(Debug, clap::Args)]
struct ConfigArg {
    /// The config file. Default: config/interlingua.toml if it exists, otherwise the default
    /// config compiled into the binary.
    #[arg(short = 'c', long = "config", value_name = "FILE")]
    config: Option<PathBuf>,
}

impl ConfigArg {
    /// Loads the named file, the default file, or the embedded default, in that order, with
    /// the dialects its routes name.
    fn load(&self) -> Result<Setup, Problems> {
        match &self.config {
            Some(path) => setup::load(path),
            None if Path::new(config::DEFAULT_CONFIG_PATH).is_file() => {
                setup::load(Path::new(config::DEFAULT_CONFIG_PATH))
            }
            None => setup::parse(config::DEFAULT_CONFIG, config::EMBEDDED_ORIGIN),
        }
    }
}

/// Runs the command line; the process exit code is the result.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(arg) => serve::run(&arg),
        Command::Check(arg) => check::run(&arg),
        Command::Demo(arg) => demo::run(&arg),
        Command::Translate(args) => translate::run(&args),
        Command::Dialects(args) => dialects::run(&args),
        Command::Credits(cmd) => credits::run(&cmd),
        Command::Migrate(args) => migrate::run(&args),
        Command::Token(cmd) => token::run(&cmd),
    }
}

/// Prints config problems to stderr, for commands that cannot go on without a valid config.
fn report_problems(problems: &Problems) -> ExitCode {
    for p in problems.iter() {
        eprintln!("{p}");
    }
    eprintln!(
        "interlingua: the configuration has {} problem(s); nothing was started",
        problems.len()
    );
    ExitCode::FAILURE
}
