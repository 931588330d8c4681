//! `interlingua credits`: grant, revoke, read a balance and its ledger, verify the ledger's
//! invariants, on the store in the config's data directory (the proxy may be running: the store
//! is shared safely).

use std::process::ExitCode;

use serde_json::json;

use super::{report_problems, ConfigArg};
use crate::credits::verify;
use crate::setup::Setup;
use std::sync::Arc;
use store::Account;

use store::TaskStore;

#[derive(Debug, clap::Subcommand)]
pub enum CreditsCommand {
    /// Add credits to a plan and subject's account.
    Grant(Movement),
    /// Take credits back (never more than are available).
    Revoke(Movement),
    /// Print an account's balance: granted, captured, held, available.
    Balance(Who),
    /// Print an account's ledger rows, newest first.
    History {
        #[command(flatten)]
        who: Who,
        /// How many rows.
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// Check that every balance adds up to its rows, that no hold outlives its task, and that
    /// no task is left without an upstream id; print what breaks that as JSON. Exit 1 when
    /// something is found, 2 when the check cannot run.
    Verify(ConfigArg),
}

#[derive(Debug, clap::Args)]
pub struct Who {
    #[arg(long)]
    plan: String,
    #[arg(long)]
    subject: String,
    #[command(flatten)]
    config: ConfigArg,
}

#[derive(Debug, clap::Args)]
pub struct Movement {
    #[command(flatten)]
    who: Who,
    #[arg(long)]
    amount: u64,
    /// Recorded on the ledger row.
    #[arg(long)]
    note: Option<String>,
}

/// The store in the config's data directory, and a runtime to use it on; `Err` is the exit
/// code, the reason printed.
fn open(
    config: &ConfigArg,
    failure: ExitCode,
) -> Result<(Setup, Arc<dyn TaskStore>, tokio::runtime::Runtime), ExitCode> {
    let setup = config
        .load()
        .map_err(|problems| report_problems(&problems))?;
    let dir = &setup.config.server.data_dir;
    let sqlite = setup.config.store.backend == crate::config::StoreBackend::Sqlite;
    if let Err(e) = if sqlite {
        std::fs::create_dir_all(dir)
    } else {
        Ok(())
    } {
        eprintln!("interlingua credits: cannot create {}: {e}", dir.display());
        return Err(failure);
    }
    let fail = |e: &dyn std::fmt::Display| {
        eprintln!("interlingua credits: {e}");
        failure
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| fail(&e))?;
    let store = runtime
        .block_on(crate::state::open_store(&setup.config))
        .map_err(|e| fail(&e))?;
    Ok((setup, store, runtime))
}

/// `credits verify`: the report on stdout; exit 0 when it is clean, 1 when it is not, 2 when
/// it could not be made.
fn verify(config: &ConfigArg) -> ExitCode {
    let (setup, store, runtime) = match open(config, ExitCode::from(2)) {
        Ok(opened) => opened,
        Err(code) => return code,
    };
    let rules = verify::rules(&setup.config);
    match runtime.block_on(verify::verify(&*store, &rules, chrono::Utc::now())) {
        Ok(report) => {
            println!(
                "{}",
                serde_json::to_string_pretty(&report).unwrap_or_default()
            );
            if report.ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("interlingua credits verify: {e}");
            ExitCode::from(2)
        }
    }
}

pub fn run(cmd: &CreditsCommand) -> ExitCode {
    let who = match cmd {
        CreditsCommand::Grant(m) | CreditsCommand::Revoke(m) => &m.who,
        CreditsCommand::Balance(w) | CreditsCommand::History { who: w, .. } => w,
        CreditsCommand::Verify(config) => return verify(config),
    };
    let (_, store, runtime) = match open(&who.config, ExitCode::FAILURE) {
        Ok(opened) => opened,
        Err(code) => return code,
    };
    let account = Account::new(&who.plan, &who.subject);
    let result = runtime.block_on(async {
        match cmd {
            CreditsCommand::Grant(m) | CreditsCommand::Revoke(m) => {
                let sign = if matches!(cmd, CreditsCommand::Revoke(_)) { -1 } else { 1 };
                let amount = i64::try_from(m.amount).unwrap_or(i64::MAX) * sign;
                store
                    .grant(&account, amount, m.note.as_deref())
                    .await
                    .map(|b| json!({"plan": b.plan, "subject": b.subject, "granted": b.granted, "captured": b.captured, "held": b.held, "available": b.available()}))
            }
            CreditsCommand::Balance(_) => store
                .balance(&account)
                .await
                .map(|b| json!({"plan": b.plan, "subject": b.subject, "granted": b.granted, "captured": b.captured, "held": b.held, "available": b.available()})),
            CreditsCommand::History { limit, .. } => store
                .history(&account, *limit)
                .await
                .map(|rows| json!({"plan": who.plan, "subject": who.subject, "rows": rows})),
            // Answered before the account was read.
            CreditsCommand::Verify(_) => Ok(serde_json::Value::Null),
        }
    });
    match result {
        Ok(v) => {
            println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("interlingua credits: {e}");
            ExitCode::FAILURE
        }
    }
}
