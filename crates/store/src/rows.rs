//! The tasks table's SQL: the row a task is stored as, and the statements over it.
//!
//! A [`Row`] is built on the caller's side (the JSON document, the timestamps as text), so the
//! writer thread, which every write in the process goes through, only binds and steps.

use chrono::{DateTime, Utc};
use rusqlite::{params, Connection, OptionalExtension, ToSql};

use super::store::{backend, StoreError, Stored, TaskQuery, Unfinished};
use mapping::task::model::{Status, Task};
use mapping::task::time::format_rfc3339_offset;

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
    /// The row for `task`; an error if the task cannot be encoded as JSON, or
    /// ([`StoreError::TooDeep`]) could not be decoded again: nothing is written that cannot be
    /// read back.
    pub(super) fn new(task: &Task) -> Result<Row, StoreError> {
        let doc = serde_json::to_string(task)
            .map_err(|e| StoreError::Backend(format!("encoding task: {e}")))?;
        mapping::depth::readable(&doc)?;
        Ok(Row {
            id: task.id.clone(),
            route: task.route.clone(),
            subject: task.subject.clone(),
            status: task.status.name(),
            name: task.name.clone(),
            upstream_id: task.upstream_id.clone(),
            terminal: task.status.is_terminal(),
            created_at: format_rfc3339_offset(task.created_at),
            updated_at: format_rfc3339_offset(task.updated_at),
            doc,
        })
    }

    pub(super) fn id(&self) -> &str {
        &self.id
    }
}

/// A stored task whose document cannot be decoded (written by an older version, or damaged).
#[derive(Debug)]
pub(super) struct Unreadable {
    pub(super) id: String,
    /// The decoder's words.
    pub(super) why: String,
}

/// A task as read: decoded, or why not.
pub(super) type Read<T> = Result<T, Unreadable>;

pub(super) fn decode(id: &str, doc: &str) -> Read<Task> {
    serde_json::from_str(doc).map_err(|e| Unreadable {
        id: id.to_string(),
        why: e.to_string(),
    })
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
pub(super) fn get(c: &Connection, id: &str) -> Result<Option<Read<Stored>>, StoreError> {
    let row: Option<(String, i64)> = c
        .prepare_cached("SELECT doc, version FROM tasks WHERE id = ?1")
        .and_then(|mut s| s.query_row([id], |r| Ok((r.get(0)?, r.get(1)?))).optional())
        .map_err(backend)?;
    Ok(row.map(|(doc, version)| decode(id, &doc).map(|task| Stored { task, version })))
}

/// Ends a task whose document cannot be decoded, from its columns alone: a readable document
/// is written in its place (its status `failed`, unless the row says it had already ended;
/// reason `unreadable`; `plan` the one its hold names), and the old one is kept in the
/// `unreadable_tasks` table. `None` when there is no such task; `false` beside the task when
/// its document could be read after all (written again in the meantime) and nothing changed.
pub(super) fn end_unreadable(
    c: &Connection,
    id: &str,
    why: &str,
    plan: Option<String>,
) -> Result<Option<(Stored, bool)>, StoreError> {
    type Columns = (
        String,
        Option<String>,
        String,
        Option<String>,
        Option<String>,
        String,
    );
    let row: Option<(Columns, i64, String)> = c
        .prepare_cached(
            "SELECT route, subject, status, name, upstream_id, created_at, version, doc
             FROM tasks WHERE id = ?1",
        )
        .and_then(|mut s| {
            s.query_row([id], |r| {
                let columns = (
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                );
                Ok((columns, r.get(6)?, r.get(7)?))
            })
            .optional()
        })
        .map_err(backend)?;
    let Some(((route, subject, status, name, upstream_id, created_at), version, old)) = row else {
        return Ok(None);
    };
    if let Ok(task) = decode(id, &old) {
        return Ok(Some((Stored { task, version }, false)));
    }
    let now = Utc::now();
    let created_at = DateTime::parse_from_rfc3339(&created_at)
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or(now);
    let mut task = Task::new(&route, created_at);
    task.id = id.to_string();
    task.subject = subject;
    task.plan = plan;
    task.name = name;
    task.upstream_id = upstream_id;
    // A task that had ended keeps its end; one that had not can no longer be followed.
    task.status = Status::from_name(&status)
        .filter(|s| s.is_terminal())
        .unwrap_or(Status::Failed);
    task.reason = Some("unreadable".to_string());
    task.message = Some(format!(
        "interlingua could not read this task as stored ({why}); it was ended and what it held released"
    ));
    task.updated_at = now;
    task.status_since = Some(now);
    update(c, &Row::new(&task)?, version)?;
    c.prepare_cached(
        "INSERT OR REPLACE INTO unreadable_tasks (task_id, at, error, doc) VALUES (?1, ?2, ?3, ?4)",
    )
    .and_then(|mut s| s.execute(params![id, format_rfc3339_offset(now), why, old]))
    .map_err(backend)?;
    Ok(Some((
        Stored {
            task,
            version: version + 1,
        },
        true,
    )))
}

/// The `WHERE` clause for a query and its parameters. Only the filters the query has are named:
/// SQLite cannot use an index for `(?1 IS NULL OR route = ?1)`, and a search (or a conversation's
/// lookup) would read every task in the store.
fn filter<'a>(q: &'a TaskQuery, status: &'a Option<&'static str>) -> (String, Vec<&'a dyn ToSql>) {
    // Each clause with `?` where its parameter goes.
    let wanted: [(&str, Option<&'a dyn ToSql>); 7] = [
        ("route = ?", q.route.as_ref().map(|v| v as &dyn ToSql)),
        ("subject = ?", q.subject.as_ref().map(|v| v as &dyn ToSql)),
        ("status = ?", status.as_ref().map(|v| v as &dyn ToSql)),
        ("name = ?", q.name.as_ref().map(|v| v as &dyn ToSql)),
        (
            "json_extract(doc, '$.conversation') = ?",
            q.conversation.as_ref().map(|v| v as &dyn ToSql),
        ),
        ("id = ?", q.id.as_ref().map(|v| v as &dyn ToSql)),
        // No index holds step ids (a steps table is the schema migrations' job, issue 18): the
        // text of the documents the other filters select is searched, and the caller checks the
        // step's id exactly in the tasks found.
        (
            "instr(doc, ?) > 0",
            q.holding_step.as_ref().map(|v| v as &dyn ToSql),
        ),
    ];
    let mut clauses = Vec::new();
    let mut values = Vec::new();
    for (clause, value) in wanted {
        if let Some(v) = value {
            values.push(v);
            clauses.push(clause.replace('?', &format!("?{}", values.len())));
        }
    }
    if clauses.is_empty() {
        (String::new(), values)
    } else {
        (format!("WHERE {}", clauses.join(" AND ")), values)
    }
}

/// The statement listing a query's page: its filter, then `LIMIT` and `OFFSET` as the last two
/// parameters.
fn page_sql(filter: &str, params: usize) -> String {
    format!(
        "SELECT id, doc FROM tasks {filter} ORDER BY created_at DESC, id LIMIT ?{} OFFSET ?{}",
        params + 1,
        params + 2
    )
}

/// Tasks matching the query, newest first, and how many match in all (run it in one snapshot, so
/// the two agree).
pub(super) fn search(c: &Connection, q: &TaskQuery) -> Result<(Vec<Read<Task>>, u64), StoreError> {
    let status = q.status.map(Status::name);
    let (filter, values) = filter(q, &status);
    let total: i64 = c
        .prepare_cached(&format!("SELECT COUNT(*) FROM tasks {filter}"))
        .and_then(|mut s| s.query_row(values.as_slice(), |r| r.get(0)))
        .map_err(backend)?;
    let size = i64::from(q.page_size.clamp(1, 1000));
    let offset = i64::from(q.page.max(1) - 1) * size;
    let mut page: Vec<&dyn ToSql> = values.clone();
    page.push(&size);
    page.push(&offset);
    let mut stmt = c
        .prepare_cached(&page_sql(&filter, values.len()))
        .map_err(backend)?;
    let docs = stmt
        .query_map(page.as_slice(), |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
        })
        .map_err(backend)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(backend)?;
    let tasks = docs.iter().map(|(id, doc)| decode(id, doc)).collect();
    Ok((tasks, total.max(0) as u64))
}

/// Every task that has not ended, oldest first.
pub(super) fn unfinished(c: &Connection) -> Result<Vec<Unfinished>, StoreError> {
    // The columns only, not the documents: a store can hold many unfinished tasks at a restart,
    // and the watcher reads each one when it comes due.
    let mut stmt = c
        .prepare(
            "SELECT id, route, status, upstream_id IS NOT NULL, created_at FROM tasks
             WHERE terminal = 0 ORDER BY created_at",
        )
        .map_err(backend)?;
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, bool>(3)?,
                r.get::<_, String>(4)?,
            ))
        })
        .map_err(backend)?;
    rows.map(|row| {
        let (id, route, status, started, created_at) = row.map_err(backend)?;
        let status = Status::from_name(&status).ok_or_else(|| {
            StoreError::Backend(format!("task {id} has an unknown status `{status}`"))
        })?;
        Ok(Unfinished {
            id,
            route,
            status,
            started,
            // A time that cannot be read counts as long ago.
            created_at: DateTime::parse_from_rfc3339(&created_at)
                .map_or(DateTime::UNIX_EPOCH, |t| t.with_timezone(&Utc)),
            taken_from: None,
        })
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use rusqlite::Connection;

    use super::{filter, page_sql};
    use crate::{SqliteStore, TaskQuery, TaskStore};
    use mapping::task::{Status, Task};

    /// How SQLite would run the page statement for `q`.
    fn plan(q: &TaskQuery) -> String {
        let c = Connection::open_in_memory().unwrap();
        c.execute_batch(super::super::store::SCHEMA).unwrap();
        let status = q.status.map(Status::name);
        let (filter, mut values) = filter(q, &status);
        let (size, offset) = (20i64, 0i64);
        let n = values.len();
        values.push(&size);
        values.push(&offset);
        let sql = format!("EXPLAIN QUERY PLAN {}", page_sql(&filter, n));
        let mut stmt = c.prepare(&sql).unwrap();
        let rows = stmt
            .query_map(values.as_slice(), |r| r.get::<_, String>(3))
            .unwrap();
        rows.map(Result::unwrap).collect::<Vec<_>>().join("; ")
    }

    #[test]
    fn a_search_of_a_routes_tasks_reads_the_route_index_not_every_task() {
        let caller = TaskQuery {
            route: Some("r".into()),
            subject: Some("ann".into()),
            ..TaskQuery::default()
        };
        assert!(
            plan(&caller).contains("tasks_by_route"),
            "{}",
            plan(&caller)
        );
        // A conversation's task, looked up for each message of it.
        let conversation = TaskQuery {
            conversation: Some("c-1".into()),
            ..caller.clone()
        };
        assert!(
            plan(&conversation).contains("tasks_by_route"),
            "{}",
            plan(&conversation)
        );
        let route_only = TaskQuery {
            route: Some("r".into()),
            ..TaskQuery::default()
        };
        assert!(plan(&route_only).contains("tasks_by_route"));
    }

    #[tokio::test]
    async fn the_task_holding_a_step_is_found_by_the_steps_id_on_its_route_only() {
        let store = SqliteStore::in_memory().unwrap();
        let now = Utc::now();
        let mut holder = Task::new("a", now);
        holder.subject = Some("ann".into());
        holder.start_steps(now);
        let step_id = holder.steps[0].id.clone();
        store.insert(&holder).await.unwrap();
        let mut other = Task::new("a", now);
        other.subject = Some("ann".into());
        other.start_steps(now);
        store.insert(&other).await.unwrap();
        let query = |route: &str, subject: &str, step: &str| TaskQuery {
            route: Some(route.into()),
            subject: Some(subject.into()),
            holding_step: Some(step.into()),
            page: 1,
            page_size: 10,
            ..TaskQuery::default()
        };
        let (found, total) = store.search(&query("a", "ann", &step_id)).await.unwrap();
        assert_eq!(total, 1);
        assert_eq!(found[0].id, holder.id);
        // Another subject's, another route's: not there.
        assert_eq!(
            store.search(&query("a", "bob", &step_id)).await.unwrap().1,
            0
        );
        assert_eq!(
            store.search(&query("b", "ann", &step_id)).await.unwrap().1,
            0
        );
        assert_eq!(
            store
                .search(&query("a", "ann", "step-none"))
                .await
                .unwrap()
                .1,
            0
        );
        // Still on the route index: the text search reads only the caller's documents.
        assert!(plan(&query("a", "ann", &step_id)).contains("tasks_by_route"));
    }

    #[tokio::test]
    async fn every_filter_narrows_the_search_and_the_total_counts_all_pages() {
        let store = SqliteStore::in_memory().unwrap();
        for i in 0..12u32 {
            let mut t = Task::new(if i % 2 == 0 { "a" } else { "b" }, Utc::now());
            t.subject = Some(if i % 3 == 0 { "ann" } else { "bob" }.into());
            t.status = if i < 4 {
                Status::Completed
            } else {
                Status::Running
            };
            t.name = Some(format!("n{}", i % 4));
            t.conversation = Some(format!("c{}", i % 5));
            store.insert(&t).await.unwrap();
        }
        let count = |q: TaskQuery| {
            let store = &store;
            async move {
                let (page, total) = store.search(&q).await.unwrap();
                (page.len(), total)
            }
        };
        let q = |route: Option<&str>, subject: Option<&str>| TaskQuery {
            route: route.map(str::to_string),
            subject: subject.map(str::to_string),
            page: 1,
            page_size: 3,
            ..TaskQuery::default()
        };
        assert_eq!(count(q(None, None)).await, (3, 12));
        assert_eq!(count(q(Some("a"), None)).await, (3, 6));
        // Route a: i = 0, 2, 4, 6, 8, 10; of those ann's: 0, 6.
        assert_eq!(count(q(Some("a"), Some("ann"))).await, (2, 2));
        let running = TaskQuery {
            status: Some(Status::Running),
            ..q(Some("a"), None)
        };
        assert_eq!(count(running).await, (3, 4));
        let named = TaskQuery {
            name: Some("n2".into()),
            ..q(Some("a"), None)
        };
        // n2: i = 2, 6, 10.
        assert_eq!(count(named).await, (3, 3));
        let conversation = TaskQuery {
            conversation: Some("c1".into()),
            ..q(None, None)
        };
        // c1: i = 1, 6, 11.
        assert_eq!(count(conversation).await, (3, 3));
        let (all, _) = store.search(&q(Some("a"), None)).await.unwrap();
        let one = TaskQuery {
            id: Some(all[1].id.clone()),
            ..q(Some("a"), None)
        };
        assert_eq!(count(one).await, (1, 1));
        let elsewhere = TaskQuery {
            id: Some(all[1].id.clone()),
            ..q(Some("b"), None)
        };
        assert_eq!(count(elsewhere).await, (0, 0));
        let second_page = TaskQuery {
            page: 2,
            ..q(Some("a"), None)
        };
        assert_eq!(count(second_page).await, (3, 6));
    }
}
