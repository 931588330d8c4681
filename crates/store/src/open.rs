//! TEMPORARY (lead's stand-in until the pg branch lands): opening a store by location.
use std::path::PathBuf;
use std::sync::Arc;

use crate::{Leases, SqliteStore, StoreError, TaskStore};

pub enum Location {
    Sqlite(PathBuf),
    Postgres {
        url: String,
        password: Option<String>,
        pool_max: usize,
    },
}

pub enum Migrations {
    Apply,
    Require,
}

pub async fn open(
    location: &Location,
    _leases: Leases,
    _migrations: Migrations,
) -> Result<Arc<dyn TaskStore>, StoreError> {
    match location {
        Location::Sqlite(dir) => Ok(Arc::new(SqliteStore::open(dir)?)),
        Location::Postgres { .. } => Err(StoreError::Backend("not yet".into())),
    }
}

pub struct Migrated {
    pub from: u32,
    pub to: u32,
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Sqlite(dir) => write!(f, "SQLite {}", dir.join("interlingua.db").display()),
            Location::Postgres { url, .. } => write!(f, "PostgreSQL {url}"),
        }
    }
}

pub async fn migrate(_l: &Location) -> Result<Migrated, StoreError> {
    Ok(Migrated { from: 1, to: 1 })
}
pub async fn schema_version(_l: &Location) -> Result<Migrated, StoreError> {
    Ok(Migrated { from: 1, to: 1 })
}
