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
    if args.check {
        let opened = runtime.block_on(store::open(
            &location,
            store::Leases::default(),
            store::Migrations::Require,
        ));
        return match opened {
            Ok(_) => {
                println!(
                    "{location}: the schema is at version {} (up to date)",
                    store::migrations::SUPPORTED
                );
                ExitCode::SUCCESS
            }
            Err(store::StoreError::Outdated { found, supported }) => {
                println!(
                    "{location}: the schema is at version {found}; this build needs {supported}: run `interlingua migrate`"
                );
                ExitCode::FAILURE
            }
            Err(e) => {
                eprintln!("interlingua migrate: {location}: {e}");
                ExitCode::from(2)
            }
        };
    }
    match runtime.block_on(store::migrate(&location)) {
        Ok(m) if m.from == m.to => {
            println!("{location}: the schema is at version {} (up to date)", m.to);
            ExitCode::SUCCESS
        }
        Ok(m) => {
            println!(
                "{location}: migrated the schema from version {} to {}",
                m.from, m.to
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("interlingua migrate: {location}: {e}");
            ExitCode::from(2)
        }
    }
}
