//! Opening the configured store: SQLite in the data directory, or PostgreSQL at a URL; and
//! migrating it alone (`interlingua migrate`).

use std::path::PathBuf;
use std::sync::Arc;

use crate::migrations::{Migrated, Migrations};
use crate::postgres::{PgConfig, PgStore};
use crate::store::{Leases, SqliteStore, StoreError, TaskStore};

/// Where the store is.
#[derive(Clone)]
pub enum Location {
    /// `interlingua.db` in this data directory.
    Sqlite(PathBuf),
    /// A PostgreSQL database.
    Postgres {
        /// `postgres://user@host:port/database`.
        url: String,
        /// The password, if not in the URL (from the environment). Never logged: `Debug` leaves
        /// it out, and the URL's too.
        password: Option<String>,
        /// The most connections this instance opens.
        pool_max: usize,
    },
}

impl std::fmt::Debug for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Sqlite(dir) => f.debug_tuple("Sqlite").field(dir).finish(),
            Location::Postgres {
                url,
                password,
                pool_max,
            } => pg(url, password, *pool_max).fmt(f),
        }
    }
}

fn pg(url: &str, password: &Option<String>, pool_max: usize) -> PgConfig {
    PgConfig {
        url: url.to_string(),
        password: password.clone(),
        pool_max,
    }
}

/// Opens the store, applying the migrations it lacks ([`Migrations::Apply`]) or refusing it when
/// it lacks some ([`Migrations::Require`]); leases held as `leases`.
pub async fn open(
    location: &Location,
    leases: Leases,
    migrations: Migrations,
) -> Result<Arc<dyn TaskStore>, StoreError> {
    Ok(match location {
        Location::Sqlite(dir) => Arc::new(SqliteStore::open_in(dir, leases, migrations)?),
        Location::Postgres {
            url,
            password,
            pool_max,
        } => {
            let config = pg(url, password, *pool_max);
            Arc::new(PgStore::connect(&config, leases, migrations).await?.0)
        }
    })
}

/// Applies the migrations the store lacks, and says from which version to which.
pub async fn migrate(location: &Location) -> Result<Migrated, StoreError> {
    match location {
        Location::Sqlite(dir) => {
            let conn = rusqlite::Connection::open(SqliteStore::file(dir))
                .map_err(crate::store::backend)?;
            conn.busy_timeout(std::time::Duration::from_secs(5))
                .map_err(crate::store::backend)?;
            crate::migrations::sqlite(&conn, Migrations::Apply)
        }
        Location::Postgres {
            url,
            password,
            pool_max,
        } => {
            let config = pg(url, password, *pool_max);
            let (_, migrated) =
                PgStore::connect(&config, Leases::default(), Migrations::Apply).await?;
            Ok(migrated)
        }
    }
}
