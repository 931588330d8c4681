//! The store's read connections: a small pool, so reads never queue behind the writer.
//!
//! In WAL mode a reader sees the last committed state and neither waits for the writer nor holds
//! it up; only reads sharing the writer's connection would have to wait for its batch (and its
//! fsync). Connections are opened when first needed, at most [`MAX_READERS`] of them, and reused.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rusqlite::{Connection, OpenFlags};
use tokio::sync::Semaphore;

use super::error::{backend, StoreError};

/// More readers than cores buys nothing; a few let a slow search not hold up a `get`.
const MAX_READERS: usize = 4;

/// The pool of read connections to one database file.
pub(super) struct Readers {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
    /// One permit per connection that may exist: a caller waits (asynchronously) for a permit,
    /// never for a connection.
    permits: Arc<Semaphore>,
}

impl Readers {
    /// A pool for the database at `path`, which the writer has already created.
    pub(super) fn new(path: PathBuf) -> Arc<Readers> {
        Arc::new(Readers {
            path,
            idle: Mutex::new(Vec::with_capacity(MAX_READERS)),
            permits: Arc::new(Semaphore::new(MAX_READERS)),
        })
    }

    /// Runs `read` on a read connection, off the async threads. Each statement sees the state
    /// of the last commit before it started; `snapshot` makes all of `read`'s statements see the
    /// same one (a count and the page it counts, sums that must agree).
    pub(super) async fn run<T, F>(
        self: &Arc<Self>,
        snapshot: bool,
        read: F,
    ) -> Result<T, StoreError>
    where
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| StoreError::Backend(format!("store readers: {e}")))?;
        let pool = self.clone();
        tokio::task::spawn_blocking(move || {
            // The permit goes with the work, so a cancelled caller cannot let a fifth connection
            // open while this one is still in use.
            let _permit = permit;
            let popped = pool.idle.lock().pop();
            let conn = match popped {
                Some(c) => c,
                None => pool.open()?,
            };
            let result = if snapshot {
                conn.unchecked_transaction()
                    .map_err(backend)
                    .and_then(|tx| read(&tx))
            } else {
                read(&conn)
            };
            pool.idle.lock().push(conn);
            result
        })
        .await
        .map_err(|e| StoreError::Backend(format!("store reader: {e}")))?
    }

    /// Runs a point read (one row by its key) on this thread when a connection is free, else as
    /// [`Readers::run`] does. A lookup by primary key takes microseconds and, in WAL mode, never
    /// waits for the writer: handing it to another thread and back would cost more than the read.
    pub(super) async fn run_point<T, F>(self: &Arc<Self>, read: F) -> Result<T, StoreError>
    where
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        let Ok(permit) = self.permits.clone().try_acquire_owned() else {
            return self.run(false, read).await;
        };
        let popped = self.idle.lock().pop();
        let conn = match popped {
            Some(c) => c,
            // Opening a connection reads the schema: not on this thread.
            None => {
                drop(permit);
                return self.run(false, read).await;
            }
        };
        let result = read(&conn);
        self.idle.lock().push(conn);
        drop(permit);
        result
    }

    fn open(&self) -> Result<Connection, StoreError> {
        let conn = Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(backend)?;
        // Readers never write: a bug that tries fails loudly instead of racing the writer.
        conn.pragma_update(None, "query_only", true)
            .map_err(backend)?;
        // A reader waits only while SQLite recovers or resets the WAL index, which is brief.
        conn.busy_timeout(Duration::from_secs(5)).map_err(backend)?;
        Ok(conn)
    }
}
