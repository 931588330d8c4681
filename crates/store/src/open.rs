//! Opening the configured store: SQLite in the data directory, or PostgreSQL at a URL; and
//! migrating it alone (`interlingua migrate`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{backend, StoreError};
use crate::migrations::{Migrated, Migrations};
use crate::postgres::{PgConfig, PgStore};
use crate::store::{Leases, SqliteStore, TaskStore};

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
        match self.resolve() {
            Resolved::Sqlite(dir) => f.debug_tuple("Sqlite").field(&dir).finish(),
            Resolved::Postgres(config) => config.fmt(f),
        }
    }
}

/// What logs and the command line print: the backend and where, never a password.
impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Sqlite(dir) => write!(f, "SQLite {}", SqliteStore::file(dir).display()),
            Location::Postgres { url, .. } => {
                write!(f, "PostgreSQL {}", crate::postgres::redacted(url))
            }
        }
    }
}

/// A location as each backend takes it.
enum Resolved<'a> {
    Sqlite(&'a Path),
    Postgres(PgConfig),
}

impl Location {
    fn resolve(&self) -> Resolved<'_> {
        match self {
            Location::Sqlite(dir) => Resolved::Sqlite(dir),
            Location::Postgres {
                url,
                password,
                pool_max,
            } => Resolved::Postgres(PgConfig {
                url: url.clone(),
                password: password.clone(),
                pool_max: *pool_max,
            }),
        }
    }
}

/// Opens the store, applying the migrations it lacks ([`Migrations::Apply`]) or refusing it when
/// it lacks some ([`Migrations::Require`]); leases held as `leases`.
pub async fn open(
    location: &Location,
    leases: Leases,
    migrations: Migrations,
) -> Result<Arc<dyn TaskStore>, StoreError> {
    Ok(match location.resolve() {
        Resolved::Sqlite(dir) => Arc::new(SqliteStore::open_in(dir, leases, migrations)?),
        Resolved::Postgres(config) => {
            Arc::new(PgStore::connect(&config, leases, migrations).await?.0)
        }
    })
}

/// Applies the migrations the store lacks, and says from which version to which.
pub async fn migrate(location: &Location) -> Result<Migrated, StoreError> {
    match location.resolve() {
        Resolved::Sqlite(dir) => {
            let conn = rusqlite::Connection::open(SqliteStore::file(dir)).map_err(backend)?;
            conn.busy_timeout(std::time::Duration::from_secs(5))
                .map_err(backend)?;
            crate::migrations::sqlite(&conn, Migrations::Apply)
        }
        Resolved::Postgres(config) => {
            let (_, migrated) =
                PgStore::connect(&config, Leases::default(), Migrations::Apply).await?;
            Ok(migrated)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Location;

    #[test]
    fn a_location_is_logged_without_its_passwords() {
        let location = Location::Postgres {
            url: "postgres://ann:in-url@db:5432/tasks".into(),
            password: Some("from-env".into()),
            pool_max: 8,
        };
        let logged = format!("{location:?}");
        assert_eq!(
            logged,
            r#"PgConfig { url: "postgres://ann:…@db:5432/tasks", password: Some("…"), pool_max: 8 }"#
        );
        assert_eq!(
            location.to_string(),
            "PostgreSQL postgres://ann:…@db:5432/tasks"
        );
    }
}
