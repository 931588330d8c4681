//! `interlingua credits`: grant, revoke, read a balance and its ledger, on the store in the
//! config's data directory (the proxy may be running: the store is shared safely).

use std::process::ExitCode;

use serde_json::json;

use super::{report_problems, ConfigArg};
use crate::credits::Account;
use crate::task::{SqliteStore, TaskStore};

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

pub fn run(cmd: &CreditsCommand) -> ExitCode {
    let who = match cmd {
        CreditsCommand::Grant(m) | CreditsCommand::Revoke(m) => &m.who,
        CreditsCommand::Balance(w) | CreditsCommand::History { who: w, .. } => w,
    };
    let setup = match who.config.load() {
        Ok(s) => s,
        Err(problems) => return report_problems(&problems),
    };
    let dir = &setup.config.server.data_dir;
    if let Err(e) = std::fs::create_dir_all(dir) {
        eprintln!("interlingua credits: cannot create {}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    let store = match SqliteStore::open(dir) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("interlingua credits: {e}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("interlingua credits: {e}");
            return ExitCode::FAILURE;
        }
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
