//! The task store and the credit ledger: where interlingua keeps every task and every credit.
//!
//! | module      | what it is |
//! |-------------|------------|
//! | [`store`]   | the interface ([`TaskStore`]) and its SQLite implementation ([`SqliteStore`]) |
//! | `tasks`     | what the interface says of tasks: one as stored ([`Stored`]), a search ([`TaskQuery`]), one not ended ([`Unfinished`]) |
//! | `error`     | why the store could not do what was asked ([`StoreError`]); each backend's errors as it reports them |
//! | [`postgres`] | the PostgreSQL implementation ([`PgStore`]), for several instances on one store |
//! | [`migrations`] | the schema's numbered versions, per backend |
//! | `open`      | [`open`] the configured store ([`Location`]), [`migrate`] it |
//! | [`credits`] | the ledger's vocabulary: accounts, balances, rows, holds, captures, releases, the console's views of them |
//! | `rows`      | the tasks table's SQL; a row that cannot be read is ended, not retried |
//! | `ledger`    | the ledger's SQL: a hold in the transaction that checks the balance, one capture per (task, step) |
//! | `documents` | the JSON documents the purchases, sales and escrow sales tables keep: encoded, decoded, read |
//! | [`purchases`] | payments made on an agent's own rail, on the operator's account |
//! | [`costs`] | the cost ledger: what interlingua paid agents that charge per call (x402), or refused to |
//! | [`sales`] | payments a client made to interlingua on a rail (x402), and the ledger rows they move |
//! | [`escrow_sales`] | jobs interlingua sold on an escrow rail (Masumi), one per task, and the ledger rows they move |
//! | `writer`    | SQLite's one thread every write goes through, committing writes in groups (PostgreSQL's is `postgres::writer`) |
//! | `readers`   | the read connections beside it |
//! | `reports`   | what the operator's console reads: accounts, a task's ledger rows, spend per route and day |
//!
//! Every document is measured before it is written ([`mapping::depth`]), so that what is stored
//! can be read back.

#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod costs;
pub mod credits;
mod documents;
mod error;
pub mod escrow_sales;
mod ledger;
pub mod migrations;
mod open;
pub mod postgres;
pub mod purchases;
mod readers;
mod reports;
mod rows;
pub mod sales;
pub mod store;
mod tasks;
#[cfg(test)]
mod throughput;
mod writer;

pub use costs::{Cost, CostState};
pub use credits::{
    Account, AccountQuery, AccountSummary, Audit, Balance, Capture, DaySpend, HeldTask, Hold,
    LedgerRow, OpenHold, Settled, Settlement, Unstarted,
};
pub use error::StoreError;
pub use escrow_sales::{EscrowMove, EscrowSale, EscrowState};
pub use migrations::{Migrated, Migrations};
pub use open::{migrate, open, Location};
pub use postgres::{PgConfig, PgStore};
pub use purchases::{Purchase, PurchaseState};
pub use sales::{Sale, SaleState};
pub use store::{Leases, PoolStatus, SqliteStore, TaskStore};
pub use tasks::{Stored, TaskQuery, Unfinished};
