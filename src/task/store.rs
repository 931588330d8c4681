//! The task store and credit ledger: one interface ([`TaskStore`]) and its embedded implementation
//! on SQLite (WAL), in the data directory. A PostgreSQL implementation for several proxies sharing
//! state will implement the same interface; nothing here relies on being the only process: task
//! updates are conditional on the version read, and every credit movement happens in the same
//! transaction as the task change that causes it, guarded by unique keys (one hold and one release
//! per task, one capture per task and step), so nothing is charged twice and nothing is lost.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;
use rusqlite::{params, Connection, OptionalExtension};

use super::ledger;
use super::model::{Status, Task};
pub use crate::credits::{Account, Balance, Hold, LedgerRow, Settled, Settlement};

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
    /// The conversation the task belongs to.
    pub conversation: Option<String>,
    /// 1-based.
    pub page: u32,
    pub page_size: u32,
}

/// Where tasks and credits live.
#[async_trait]
pub trait TaskStore: Send + Sync {
    /// Stores a new task (version 1) and, in the same transaction, holds credits for it;
    /// [`StoreError::Insufficient`] when the account cannot cover the hold.
    async fn insert_with_hold(&self, task: &Task, hold: Option<&Hold>) -> Result<(), StoreError>;
    /// The task with this id, if any.
    async fn get(&self, id: &str) -> Result<Option<Stored>, StoreError>;
    /// Replaces the task if it is still at `version` and, in the same transaction, captures the
    /// settlement's steps (each at most once, ever) and releases the rest of the hold when asked.
    /// Returns the new version and what moved.
    async fn update_and_settle(
        &self,
        task: &Task,
        version: i64,
        settlement: &Settlement,
    ) -> Result<(i64, Settled), StoreError>;
    /// Stores a new task, without credits.
    async fn insert(&self, task: &Task) -> Result<(), StoreError> {
        self.insert_with_hold(task, None).await
    }
    /// Replaces the task if it is still at `version`; returns the new version.
    async fn update(&self, task: &Task, version: i64) -> Result<i64, StoreError> {
        self.update_and_settle(task, version, &Settlement::default())
            .await
            .map(|(v, _)| v)
    }
    /// Charges one extra capture on a task (an operation fee, a cost the agent reported for a
    /// response); at most once per (task, capture step id).
    async fn charge(
        &self,
        task_id: &str,
        capture: &crate::credits::Capture,
    ) -> Result<Settled, StoreError>;
    /// Adds `amount` credits to an account (a negative amount revokes, never below what is
    /// available); returns the balance after.
    async fn grant(
        &self,
        account: &Account,
        amount: i64,
        note: Option<&str>,
    ) -> Result<Balance, StoreError>;
    /// An account's balance.
    async fn balance(&self, account: &Account) -> Result<Balance, StoreError>;
    /// An account's ledger rows, newest first.
    async fn history(&self, account: &Account, limit: u32) -> Result<Vec<LedgerRow>, StoreError>;
    /// The balance recomputed from the ledger rows alone (it must equal [`TaskStore::balance`]).
    async fn recompute(&self, account: &Account) -> Result<Balance, StoreError>;
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

CREATE TABLE IF NOT EXISTS accounts (
    plan     TEXT NOT NULL,
    subject  TEXT NOT NULL,
    granted  INTEGER NOT NULL DEFAULT 0,
    captured INTEGER NOT NULL DEFAULT 0,
    held     INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (plan, subject)
);
CREATE TABLE IF NOT EXISTS holds (
    task_id   TEXT PRIMARY KEY,
    plan      TEXT NOT NULL,
    subject   TEXT NOT NULL,
    amount    INTEGER NOT NULL,
    remaining INTEGER NOT NULL,
    open      INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS ledger (
    seq       INTEGER PRIMARY KEY AUTOINCREMENT,
    at        TEXT NOT NULL,
    plan      TEXT NOT NULL,
    subject   TEXT NOT NULL,
    kind      TEXT NOT NULL,
    amount    INTEGER NOT NULL,
    from_hold INTEGER NOT NULL DEFAULT 0,
    task_id   TEXT,
    step_id   TEXT,
    note      TEXT
);
CREATE UNIQUE INDEX IF NOT EXISTS ledger_hold_once ON ledger (task_id) WHERE kind = 'hold';
CREATE UNIQUE INDEX IF NOT EXISTS ledger_capture_once ON ledger (task_id, step_id) WHERE kind = 'capture';
CREATE UNIQUE INDEX IF NOT EXISTS ledger_release_once ON ledger (task_id) WHERE kind = 'release';
CREATE INDEX IF NOT EXISTS ledger_by_account ON ledger (plan, subject, seq);
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

pub(crate) fn backend(e: rusqlite::Error) -> StoreError {
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
    async fn insert_with_hold(&self, task: &Task, hold: Option<&Hold>) -> Result<(), StoreError> {
        let t = task.clone();
        let doc = encode(task)?;
        let hold = hold.cloned();
        self.with(move |c| {
            let tx = c
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(backend)?;
            let r = tx.execute(
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
                Ok(_) => {}
                Err(rusqlite::Error::SqliteFailure(e, _)) if e.code == rusqlite::ErrorCode::ConstraintViolation => {
                    return Err(StoreError::Duplicate(t.id.clone()));
                }
                Err(e) => return Err(backend(e)),
            }
            if let Some(h) = hold.filter(|h| h.amount > 0) {
                let account = Account::new(&h.plan, &h.subject);
                let balance = ledger::balance(&tx, &account)?;
                if balance.available() < h.amount as i64 {
                    return Err(StoreError::Insufficient {
                        available: balance.available(),
                        needed: h.amount,
                    });
                }
                ledger::hold(&tx, &t.id, &account, h.amount)?;
            }
            tx.commit().map_err(backend)
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

    async fn update_and_settle(
        &self,
        task: &Task,
        version: i64,
        settlement: &Settlement,
    ) -> Result<(i64, Settled), StoreError> {
        let t = task.clone();
        let doc = encode(task)?;
        let settlement = settlement.clone();
        self.with(move |c| {
            let tx = c
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(backend)?;
            let n = tx
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
            if n != 1 {
                return Err(StoreError::Conflict);
            }
            let settled = ledger::settle(&tx, &t.id, &settlement)?;
            tx.commit().map_err(backend)?;
            Ok((version + 1, settled))
        })
        .await
    }

    async fn charge(
        &self,
        task_id: &str,
        capture: &crate::credits::Capture,
    ) -> Result<Settled, StoreError> {
        let task_id = task_id.to_string();
        let settlement = Settlement {
            captures: vec![capture.clone()],
            release: false,
        };
        self.with(move |c| {
            let tx = c
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(backend)?;
            let settled = ledger::settle(&tx, &task_id, &settlement)?;
            tx.commit().map_err(backend)?;
            Ok(settled)
        })
        .await
    }

    async fn grant(
        &self,
        account: &Account,
        amount: i64,
        note: Option<&str>,
    ) -> Result<Balance, StoreError> {
        let account = account.clone();
        let note = note.map(str::to_string);
        self.with(move |c| {
            let tx = c
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(backend)?;
            let b = ledger::grant(&tx, &account, amount, note.as_deref())?;
            tx.commit().map_err(backend)?;
            Ok(b)
        })
        .await
    }

    async fn balance(&self, account: &Account) -> Result<Balance, StoreError> {
        let account = account.clone();
        self.with(move |c| ledger::balance(c, &account)).await
    }

    async fn history(&self, account: &Account, limit: u32) -> Result<Vec<LedgerRow>, StoreError> {
        let account = account.clone();
        self.with(move |c| ledger::history(c, &account, limit))
            .await
    }

    async fn recompute(&self, account: &Account) -> Result<Balance, StoreError> {
        let account = account.clone();
        self.with(move |c| ledger::recompute(c, &account)).await
    }

    async fn search(&self, q: &TaskQuery) -> Result<(Vec<Task>, u64), StoreError> {
        let q = q.clone();
        self.with(move |c| {
            let filter = "WHERE (?1 IS NULL OR route = ?1) AND (?2 IS NULL OR subject = ?2)
                          AND (?3 IS NULL OR status = ?3) AND (?4 IS NULL OR name = ?4)
                          AND (?5 IS NULL OR json_extract(doc, '$.conversation') = ?5)";
            let status = q.status.map(Status::name);
            let total: i64 = c
                .query_row(
                    &format!("SELECT COUNT(*) FROM tasks {filter}"),
                    params![q.route, q.subject, status, q.name, q.conversation],
                    |r| r.get(0),
                )
                .map_err(backend)?;
            let size = q.page_size.clamp(1, 1000);
            let offset = (q.page.max(1) - 1) as i64 * size as i64;
            let mut stmt = c
                .prepare(&format!(
                    "SELECT doc FROM tasks {filter} ORDER BY created_at DESC, id LIMIT ?6 OFFSET ?7"
                ))
                .map_err(backend)?;
            let docs = stmt
                .query_map(
                    params![
                        q.route,
                        q.subject,
                        status,
                        q.name,
                        q.conversation,
                        size,
                        offset
                    ],
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
