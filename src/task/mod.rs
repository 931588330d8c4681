//! Tasks: the canonical model, how observations fold into it, timestamps, and the store.

mod ledger;
pub mod model;
pub mod observe;
pub mod store;
pub mod time;

pub use model::*;
pub use observe::{Observation, StepSource};
pub use store::{SqliteStore, StoreError, Stored, TaskQuery, TaskStore};
