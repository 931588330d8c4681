//! Why the store could not do what was asked ([`StoreError`]), and each backend's errors as the
//! store reports them: SQLite's (`backend`) and PostgreSQL's (`pg`). The leaf every other
//! module of the store reads: the interface, both backends, the migrations and each table's SQL.

/// Why the store could not do what was asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The task changed since it was read; read it again and retry.
    #[error("the task was changed by someone else")]
    Conflict,
    /// The account cannot cover the amount.
    #[error("the balance ({available}) cannot cover {needed} credits")]
    Insufficient { available: i64, needed: u64 },
    #[error("a task with id `{0}` already exists")]
    Duplicate(String),
    /// The document nests deeper than the store can read back (see [`mapping::depth`]); nothing
    /// was written.
    #[error("the document nests {depth} levels deep; the store reads at most {limit}")]
    TooDeep { depth: usize, limit: usize },
    #[error("task store: {0}")]
    Backend(String),
    /// The store's server cannot be reached (or did not answer in time); worth retrying later.
    #[error("task store: {0}")]
    Unavailable(String),
    /// The store was written by a newer interlingua (its schema is at a version this build does
    /// not know).
    #[error("the store's schema is at version {found}, newer than this build of interlingua knows ({supported}): upgrade interlingua to use it")]
    Schema { found: u32, supported: u32 },
    /// The store lacks migrations and was opened without applying them.
    #[error("the store's schema is at version {found}, this build needs {supported}: run `interlingua migrate`")]
    Outdated { found: u32, supported: u32 },
}

impl From<mapping::depth::TooDeep> for StoreError {
    fn from(e: mapping::depth::TooDeep) -> StoreError {
        StoreError::TooDeep {
            depth: e.depth,
            limit: e.limit,
        }
    }
}

/// An SQLite error as the store reports it.
pub(crate) fn backend(e: rusqlite::Error) -> StoreError {
    StoreError::Backend(e.to_string())
}

/// A PostgreSQL error as the store reports it: the server's words for a database error; for a
/// connection that failed or closed, `PostgreSQL unreachable`.
pub(crate) fn pg(e: tokio_postgres::Error) -> StoreError {
    match e.as_db_error() {
        Some(db) => StoreError::Backend(format!("PostgreSQL: {}", db.message())),
        None if e.is_closed()
            || std::error::Error::source(&e).is_some_and(|s| s.is::<std::io::Error>()) =>
        {
            StoreError::Unavailable(format!("PostgreSQL unreachable: {e}"))
        }
        None => StoreError::Backend(format!("PostgreSQL: {e}")),
    }
}
