//! The tasks table's SQL: the row a task is stored as, and the statements over it.
//!
//! A [`Row`] is built on the caller's side (the JSON document, the timestamps as text), so the
//! writer thread, which every write in the process goes through, only binds and steps.

use rusqlite::{params, Connection, OptionalExtension};

use super::model::{Status, Task};
use super::store::{backend, StoreError, Stored, TaskQuery, Unfinished};

/// A task as the `tasks` table holds it.
pub(super) struct Row {
    id: String,
    route: String,
    subject: Option<String>,
    status: &'static str,
    name: Option<String>,
    upstream_id: Option<String>,
    terminal: bool,
    created_at: String,
    updated_at: String,
    doc: String,
}

impl Row {
    /// The row for `task`; an error only if the task cannot be encoded as JSON.
    pub(super) fn new(task: &Task) -> Result<Row, StoreError> {
        Ok(Row {
            id: task.id.clone(),
            route: task.route.clone(),
            subject: task.subject.clone(),
            status: task.status.name(),
            name: task.name.clone(),
            upstream_id: task.upstream_id.clone(),
            terminal: task.status.is_terminal(),
            created_at: task.created_at.to_rfc3339(),
            updated_at: task.updated_at.to_rfc3339(),
            doc: serde_json::to_string(task)
                .map_err(|e| StoreError::Backend(format!("encoding task: {e}")))?,
        })
    }

    pub(super) fn id(&self) -> &str {
        &self.id
    }
}

fn decode(doc: &str) -> Result<Task, StoreError> {
    serde_json::from_str(doc).map_err(|e| StoreError::Backend(format!("decoding stored task: {e}")))
}

/// Inserts the row at version 1; [`StoreError::Duplicate`] when its id is taken.
pub(super) fn insert(c: &Connection, r: &Row) -> Result<(), StoreError> {
    let inserted = c
        .prepare_cached(
            "INSERT INTO tasks (id, route, subject, status, name, upstream_id, terminal, created_at, updated_at, version, doc)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 1, ?10)",
        )
        .and_then(|mut s| {
            s.execute(params![
                r.id,
                r.route,
                r.subject,
                r.status,
                r.name,
                r.upstream_id,
                r.terminal,
                r.created_at,
                r.updated_at,
                r.doc
            ])
        });
    match inserted {
        Ok(_) => Ok(()),
        Err(rusqlite::Error::SqliteFailure(e, _))
            if e.code == rusqlite::ErrorCode::ConstraintViolation =>
        {
            Err(StoreError::Duplicate(r.id.clone()))
        }
        Err(e) => Err(backend(e)),
    }
}

/// Replaces the row if it is still at `version`; [`StoreError::Conflict`] when it is not (or is
/// gone).
pub(super) fn update(c: &Connection, r: &Row, version: i64) -> Result<(), StoreError> {
    let n = c
        .prepare_cached(
            "UPDATE tasks SET status = ?1, name = ?2, upstream_id = ?3, terminal = ?4, updated_at = ?5,
                    version = version + 1, doc = ?6
             WHERE id = ?7 AND version = ?8",
        )
        .and_then(|mut s| {
            s.execute(params![
                r.status,
                r.name,
                r.upstream_id,
                r.terminal,
                r.updated_at,
                r.doc,
                r.id,
                version
            ])
        })
        .map_err(backend)?;
    if n == 1 {
        Ok(())
    } else {
        Err(StoreError::Conflict)
    }
}

/// The task with this id, if any.
pub(super) fn get(c: &Connection, id: &str) -> Result<Option<Stored>, StoreError> {
    let row: Option<(String, i64)> = c
        .prepare_cached("SELECT doc, version FROM tasks WHERE id = ?1")
        .and_then(|mut s| s.query_row([id], |r| Ok((r.get(0)?, r.get(1)?))).optional())
        .map_err(backend)?;
    row.map(|(doc, version)| {
        Ok(Stored {
            task: decode(&doc)?,
            version,
        })
    })
    .transpose()
}

/// Tasks matching the query, newest first, and how many match in all (run it in one snapshot, so
/// the two agree).
pub(super) fn search(c: &Connection, q: &TaskQuery) -> Result<(Vec<Task>, u64), StoreError> {
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
}

/// Every task that has not ended, oldest first.
pub(super) fn unfinished(c: &Connection) -> Result<Vec<Unfinished>, StoreError> {
    // The columns only, not the documents: a store can hold many unfinished tasks at a restart,
    // and the watcher reads each one when it comes due.
    let mut stmt = c
        .prepare("SELECT id, route, status FROM tasks WHERE terminal = 0 ORDER BY created_at")
        .map_err(backend)?;
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
            ))
        })
        .map_err(backend)?;
    rows.map(|row| {
        let (id, route, status) = row.map_err(backend)?;
        let status = Status::from_name(&status).ok_or_else(|| {
            StoreError::Backend(format!("task {id} has an unknown status `{status}`"))
        })?;
        Ok(Unfinished { id, route, status })
    })
    .collect()
}
