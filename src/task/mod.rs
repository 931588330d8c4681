//! Tasks: the canonical model, how observations fold into it, timestamps, and the store.
//!
//! The store ([`store`]) is the interface and its SQLite implementation; beneath it, the tasks
//! table's SQL ([`rows`]), the credit ledger's ([`ledger`]), the one thread every write goes
//! through, committing writes in groups ([`writer`]), and the read connections beside it
//! ([`readers`]). Every document is measured before it is written ([`depth`]), so that what is
//! stored can be read back; a row that cannot be read anyway is ended, not retried forever.

pub mod depth;
mod ledger;
pub mod model;
pub mod observe;
pub mod purchases;
mod readers;
mod rows;
pub mod store;
#[cfg(test)]
mod throughput;
pub mod time;
mod writer;

pub use model::*;
pub use observe::{Observation, StepSource};
pub use purchases::{Purchase, PurchaseState};
pub use store::{SqliteStore, StoreError, Stored, TaskQuery, TaskStore, Unfinished};
