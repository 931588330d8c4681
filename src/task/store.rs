//! The task store: one interface ([`TaskStore`]) and its embedded implementation on SQLite (WAL),
//! in the data directory. A PostgreSQL implementation for several proxies sharing state will
//! implement the same interface; nothing here relies on being the only process (updates are
//! conditional on the version read, so concurrent writers never lose each other's changes).

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;
use rusqlite::{params, Connection, OptionalExtension};

use super::model::{Status, Task};

/// Why the store could not do what was asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The task changed since it was read; read it again and retry.
    #[error("the task was changed by someone else")]
    Conflict,
    #[error("a task with id `{0}` already exists")]
    Duplicate(String),
    #[error("task store: {0}")]
    Backend(String),
}

/// A task as stored, with the version an update must name.
#[derive(Debug, Clone, PartialEq)]
pub struct Stored {
    pub task: Task,
    pub version: i64,
}

/// What to look for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskQuery {
    pub route: Option<String>,
    pub subject: Option<String>,
    pub status: Option<Status>,
    pub name: Option<String>,
    /// 1-based.
    pub page: u32,
    pub page_size: u32,
}

/// Where tasks live.
#[async_trait]
pub trait TaskStore: Send + Sync {
    /// Stores a new task (version 1).
    async fn insert(&self, task: &Task) -> Result<(), StoreError>;
    /// The task with this id, if any.
    async fn get(&self, id: &str) -> Result<Option<Stored>, StoreError>;
    /// Replaces the task if it is still at `version`; returns the new version.
    async fn update(&self, task: &Task, version: i64) -> Result<i64, StoreError>;
    /// Tasks matching the query, newest first, and how many match in all.
    async fn search(&self, query: &TaskQuery) -> Result<(Vec<Task>, u64), StoreError>;
    /// Every task that has not ended, oldest first (for watchers resuming after a restart).
    async fn unfinished(&self) -> Result<Vec<Task>, StoreError>;
}

/// The SQLite task store.
pub struct SqliteStore {
    conn: Arc<Mutex<Connection>>,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS tasks (
    id          TEXT PRIMARY KEY,
    route       TEXT NOT NULL,
    subject     TEXT,
    status      TEXT NOT NULL,
    name        TEXT,
    upstream_id TEXT,
    terminal    INTEGER NOT NULL,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    version     INTEGER NOT NULL,
    doc         TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS tasks_unfinished ON tasks (created_at) WHERE terminal = 0;
CREATE INDEX IF NOT EXISTS tasks_by_route ON tasks (route, subject, created_at);
";

impl SqliteStore {
    /// Opens (creating if needed) `<dir>/interlingua.db`.
    pub fn open(dir: &Path) -> Result<SqliteStore, StoreError> {
        let conn = Connection::open(dir.join("interlingua.db")).map_err(backend)?;
        SqliteStore::init(conn)
    }

    /// A store in memory, for tests and `translate`.
    pub fn in_memory() -> Result<SqliteStore, StoreError> {
        SqliteStore::init(Connection::open_in_memory().map_err(backend)?)
    }

    fn init(conn: Connection) -> Result<SqliteStore, StoreError> {
        // WAL: readers never wait for the writer; FULL: a committed task survives power loss.
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(backend)?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(backend)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(backend)?;
        conn.execute_batch(SCHEMA).map_err(backend)?;
        Ok(SqliteStore {
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    /// Runs `f` on the connection off the async threads.
    async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let conn = self.conn.clone();
        tokio::task::spawn_blocking(move || f(&mut conn.lock()))
            .await
            .map_err(|e| StoreError::Backend(format!("store worker: {e}")))?
    }
}

fn backend(e: rusqlite::Error) -> StoreError {
    StoreError::Backend(e.to_string())
}

fn encode(task: &Task) -> Result<String, StoreError> {
    serde_json::to_string(task).map_err(|e| StoreError::Backend(format!("encoding task: {e}")))
}

fn decode(doc: &str) -> Result<Task, StoreError> {
    serde_json::from_str(doc).map_err(|e| StoreError::Backend(format!("decoding stored task: {e}")))
}

#[async_trait]
impl TaskStore for SqliteStore {
    async fn insert(&self, task: &Task) -> Result<(), StoreError> {
        let t = task.clone();
        let doc = encode(task)?;
        self.with(move |c| {
            let r = c.execute(
                "INSERT INTO tasks (id, route, subject, status, name, upstream_id, terminal, created_at, updated_at, version, doc)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 1, ?10)",
                params![
                    t.id,
                    t.route,
                    t.subject,
                    t.status.name(),
                    t.name,
                    t.upstream_id,
                    t.status.is_terminal(),
                    t.created_at.to_rfc3339(),
                    t.updated_at.to_rfc3339(),
                    doc
                ],
            );
            match r {
                Ok(_) => Ok(()),
                Err(rusqlite::Error::SqliteFailure(e, _)) if e.code == rusqlite::ErrorCode::ConstraintViolation => {
                    Err(StoreError::Duplicate(t.id.clone()))
                }
                Err(e) => Err(backend(e)),
            }
        })
        .await
    }

    async fn get(&self, id: &str) -> Result<Option<Stored>, StoreError> {
        let id = id.to_string();
        self.with(move |c| {
            let row: Option<(String, i64)> = c
                .query_row("SELECT doc, version FROM tasks WHERE id = ?1", [&id], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
                .optional()
                .map_err(backend)?;
            row.map(|(doc, version)| {
                Ok(Stored {
                    task: decode(&doc)?,
                    version,
                })
            })
            .transpose()
        })
        .await
    }

    async fn update(&self, task: &Task, version: i64) -> Result<i64, StoreError> {
        let t = task.clone();
        let doc = encode(task)?;
        self.with(move |c| {
            let n = c
                .execute(
                    "UPDATE tasks SET status = ?1, name = ?2, upstream_id = ?3, terminal = ?4, updated_at = ?5,
                            version = version + 1, doc = ?6
                     WHERE id = ?7 AND version = ?8",
                    params![
                        t.status.name(),
                        t.name,
                        t.upstream_id,
                        t.status.is_terminal(),
                        t.updated_at.to_rfc3339(),
                        doc,
                        t.id,
                        version
                    ],
                )
                .map_err(backend)?;
            if n == 1 {
                Ok(version + 1)
            } else {
                Err(StoreError::Conflict)
            }
        })
        .await
    }

    async fn search(&self, q: &TaskQuery) -> Result<(Vec<Task>, u64), StoreError> {
        let q = q.clone();
        self.with(move |c| {
            let filter = "WHERE (?1 IS NULL OR route = ?1) AND (?2 IS NULL OR subject = ?2)
                          AND (?3 IS NULL OR status = ?3) AND (?4 IS NULL OR name = ?4)";
            let status = q.status.map(Status::name);
            let total: i64 = c
                .query_row(
                    &format!("SELECT COUNT(*) FROM tasks {filter}"),
                    params![q.route, q.subject, status, q.name],
                    |r| r.get(0),
                )
                .map_err(backend)?;
            let size = q.page_size.clamp(1, 1000);
            let offset = (q.page.max(1) - 1) as i64 * size as i64;
            let mut stmt = c
                .prepare(&format!(
                    "SELECT doc FROM tasks {filter} ORDER BY created_at DESC, id LIMIT ?5 OFFSET ?6"
                ))
                .map_err(backend)?;
            let docs = stmt
                .query_map(
                    params![q.route, q.subject, status, q.name, size, offset],
                    |r| r.get::<_, String>(0),
                )
                .map_err(backend)?
                .collect::<Result<Vec<_>, _>>()
                .map_err(backend)?;
            let tasks = docs
                .iter()
                .map(|d| decode(d))
                .collect::<Result<Vec<_>, _>>()?;
            Ok((tasks, total.max(0) as u64))
        })
        .await
    }

    async fn unfinished(&self) -> Result<Vec<Task>, StoreError> {
        self.with(|c| {
            let mut stmt = c
                .prepare("SELECT doc FROM tasks WHERE terminal = 0 ORDER BY created_at")
                .map_err(backend)?;
            let docs = stmt
                .query_map([], |r| r.get::<_, String>(0))
                .map_err(backend)?
                .collect::<Result<Vec<_>, _>>()
                .map_err(backend)?;
            docs.iter().map(|d| decode(d)).collect()
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    #[tokio::test]
    async fn insert_get_update_with_versions() {
        let store = SqliteStore::in_memory().unwrap();
        let mut t = Task::new("r", Utc::now());
        store.insert(&t).await.unwrap();
        assert_eq!(
            store.insert(&t).await,
            Err(StoreError::Duplicate(t.id.clone()))
        );
        let stored = store.get(&t.id).await.unwrap().unwrap();
        assert_eq!(stored.version, 1);
        assert_eq!(stored.task, t);
        t.status = Status::Running;
        assert_eq!(store.update(&t, 1).await, Ok(2));
        // A writer still holding version 1 has lost the race.
        assert_eq!(store.update(&t, 1).await, Err(StoreError::Conflict));
        assert!(store.get("nope").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn search_and_unfinished() {
        let store = SqliteStore::in_memory().unwrap();
        for i in 0..5 {
            let mut t = Task::new(if i < 3 { "a" } else { "b" }, Utc::now());
            if i == 0 {
                t.status = Status::Completed;
            }
            store.insert(&t).await.unwrap();
        }
        let (found, total) = store
            .search(&TaskQuery {
                route: Some("a".into()),
                page: 1,
                page_size: 2,
                ..TaskQuery::default()
            })
            .await
            .unwrap();
        assert_eq!((found.len(), total), (2, 3));
        assert_eq!(store.unfinished().await.unwrap().len(), 4);
    }

    #[tokio::test]
    async fn tasks_survive_reopening_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let t = Task::new("r", Utc::now());
        SqliteStore::open(dir.path())
            .unwrap()
            .insert(&t)
            .await
            .unwrap();
        let again = SqliteStore::open(dir.path()).unwrap();
        assert_eq!(again.get(&t.id).await.unwrap().unwrap().task, t);
    }
}
