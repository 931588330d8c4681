//! `interlingua migrate`: brings the configured store's schema to this build's version (the
//! same migrations `serve` applies at start-up unless `store.migrate_on_start = false`), or with
//! `--check` only says whether it is.

use std::process::ExitCode;

use super::{report_problems, ConfigArg};
use crate::state::location;

#[derive(Debug, clap::Args)]
pub struct MigrateArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Only report the schema's version and what is pending; change nothing. Exit 0 when up to
    /// date, 1 when migrations are pending.
    #[arg(long)]
    check: bool,
}

pub fn run(args: &MigrateArgs) -> ExitCode {
    let setup = match args.config.load() {
        Ok(s) => s,
        Err(problems) => return report_problems(&problems),
    };
    let location = location(&setup.config);
    if let store::Location::Sqlite(dir) = &location {
        if let Err(e) = std::fs::create_dir_all(dir) {
            eprintln!("interlingua migrate: cannot create {}: {e}", dir.display());
            return ExitCode::from(2);
        }
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("interlingua migrate: {e}");
            return ExitCode::from(2);
        }
    };
    let result = if args.check {
        runtime.block_on(store::schema_version(&location))
    } else {
        runtime.block_on(store::migrate(&location))
    };
    match result {
        Ok(m) if args.check && m.from < m.to => {
            println!(
                "{}: the schema is at version {}; this build needs {}: run `interlingua migrate`",
                location, m.from, m.to
            );
            ExitCode::FAILURE
        }
        Ok(m) if m.from == m.to => {
            println!(
                "{}: the schema is at version {} (up to date)",
                location, m.to
            );
            ExitCode::SUCCESS
        }
        Ok(m) => {
            println!(
                "{}: migrated the schema from version {} to {}",
                location, m.from, m.to
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("interlingua migrate: {location}: {e}");
            ExitCode::from(2)
        }
    }
}
