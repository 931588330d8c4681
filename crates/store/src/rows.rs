//! The tasks table's SQL: the row a task is stored as, and the statements over it.
//!
//! A [`Row`] is built on the caller's side (the JSON document, the timestamps as text), so the
//! writer thread, which every write in the process goes through, only binds and steps.

use chrono::{DateTime, Utc};
use rusqlite::{params, Connection, OptionalExtension, ToSql};

use super::error::{backend, StoreError};
use super::tasks::{Stored, TaskQuery, Unfinished};
use mapping::depth::Unwritable;
use mapping::task::model::{Status, Task};
use mapping::task::time::format_rfc3339_offset;

/// A task as the `tasks` table holds it.
pub(super) struct Row {
    pub(super) id: String,
    pub(super) route: String,
    pub(super) subject: Option<String>,
    pub(super) status: &'static str,
    pub(super) name: Option<String>,
    pub(super) conversation: Option<String>,
    pub(super) upstream_id: Option<String>,
    pub(super) terminal: bool,
    pub(super) created_at: String,
    pub(super) updated_at: String,
    pub(super) doc: String,
}

impl Row {
    /// The row for `task`; an error if the task cannot be encoded as JSON, or
    /// ([`StoreError::TooDeep`]) could not be decoded again: nothing is written that cannot be
    /// read back.
    pub(super) fn new(task: &Task) -> Result<Row, StoreError> {
        let doc = mapping::depth::readable_json(task).map_err(|e| match e {
            Unwritable::TooDeep(deep) => deep.into(),
            Unwritable::Json(e) => StoreError::Backend(format!("encoding task: {e}")),
        })?;
        Ok(Row {
            id: task.id.clone(),
            route: task.route.clone(),
            subject: task.subject.clone(),
            status: task.status.name(),
            name: task.name.clone(),
            conversation: task.conversation.clone(),
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

/// Inserts the row at version 1, leased to `lease` (its holder, and until when: milliseconds
/// since the epoch); [`StoreError::Duplicate`] when its id is taken.
pub(super) fn insert(c: &Connection, r: &Row, lease: (&str, i64)) -> Result<(), StoreError> {
    let inserted = c
        .prepare_cached(
            "INSERT INTO tasks (id, route, subject, status, name, conversation, upstream_id, terminal,
                                created_at, updated_at, version, doc, lease_holder, lease_until)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, 1, ?11, ?12, ?13)",
        )
        .and_then(|mut s| {
            s.execute(params![
                r.id,
                r.route,
                r.subject,
                r.status,
                r.name,
                r.conversation,
                r.upstream_id,
                r.terminal,
                r.created_at,
                r.updated_at,
                r.doc,
                lease.0,
                lease.1
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
/// Names the subject of a task stored without one (a task paid for after it was stored), if
/// it has none yet: the rest of the row is [`update`]'s.
pub(super) fn claim_subject(c: &Connection, r: &Row) -> Result<(), StoreError> {
    let n = c
        .prepare_cached("UPDATE tasks SET subject = ?1 WHERE id = ?2 AND subject IS NULL")
        .and_then(|mut s| s.execute(params![r.subject, r.id]))
        .map_err(backend)?;
    if n == 1 {
        Ok(())
    } else {
        Err(StoreError::Conflict)
    }
}

pub(super) fn update(c: &Connection, r: &Row, version: i64) -> Result<(), StoreError> {
    let n = c
        .prepare_cached(
            "UPDATE tasks SET status = ?1, name = ?2, upstream_id = ?3, terminal = ?4, updated_at = ?5,
                    version = version + 1, doc = ?6, conversation = ?9
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
                version,
                r.conversation
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

/// The columns an unreadable task is ended from.
pub(super) struct Columns {
    pub(super) route: String,
    pub(super) subject: Option<String>,
    pub(super) status: String,
    pub(super) name: Option<String>,
    pub(super) upstream_id: Option<String>,
    pub(super) created_at: String,
}

/// The task written in place of an unreadable one (see [`end_unreadable`]).
pub(super) fn ended(
    id: &str,
    c: Columns,
    why: &str,
    plan: Option<String>,
    now: DateTime<Utc>,
) -> Task {
    let created_at = DateTime::parse_from_rfc3339(&c.created_at)
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or(now);
    let mut task = Task::new(&c.route, created_at);
    task.id = id.to_string();
    task.subject = c.subject;
    task.plan = plan;
    task.name = c.name;
    task.upstream_id = c.upstream_id;
    // A task that had ended keeps its end; one that had not can no longer be followed.
    task.status = Status::from_name(&c.status)
        .filter(|s| s.is_terminal())
        .unwrap_or(Status::Failed);
    task.reason = Some("unreadable".to_string());
    task.message = Some(format!(
        "interlingua could not read this task as stored ({why}); it was ended and what it held released"
    ));
    task.updated_at = now;
    task.status_since = Some(now);
    task
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
    let row: Option<(Columns, i64, String)> = c
        .prepare_cached(
            "SELECT route, subject, status, name, upstream_id, created_at, version, doc
             FROM tasks WHERE id = ?1",
        )
        .and_then(|mut s| {
            s.query_row([id], |r| {
                let columns = Columns {
                    route: r.get(0)?,
                    subject: r.get(1)?,
                    status: r.get(2)?,
                    name: r.get(3)?,
                    upstream_id: r.get(4)?,
                    created_at: r.get(5)?,
                };
                Ok((columns, r.get(6)?, r.get(7)?))
            })
            .optional()
        })
        .map_err(backend)?;
    let Some((
        Columns {
            route,
            subject,
            status,
            name,
            upstream_id,
            created_at,
        },
        version,
        old,
    )) = row
    else {
        return Ok(None);
    };
    if let Ok(task) = decode(id, &old) {
        return Ok(Some((Stored { task, version }, false)));
    }
    let now = Utc::now();
    let columns = Columns {
        route,
        subject,
        status,
        name,
        upstream_id,
        created_at,
    };
    let task = ended(id, columns, why, plan, now);
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

/// How a backend writes a query's parameters and a text search.
pub(super) struct Dialect {
    /// The `n`th parameter (1-based): `?n`, `$n`.
    pub(super) param: fn(usize) -> String,
    /// Whether the document contains the text `?`.
    pub(super) contains: &'static str,
}

pub(super) const SQLITE: Dialect = Dialect {
    param: |n| format!("?{n}"),
    contains: "instr(doc, ?) > 0",
};

/// The `WHERE` clause for a query and its parameters (all text). Only the filters the query has
/// are named: neither backend uses an index for `(?1 IS NULL OR route = ?1)`, and a search (or
/// a conversation's lookup) would read every task in the store.
pub(super) fn conditions<'a>(q: &'a TaskQuery, dialect: &Dialect) -> (String, Vec<&'a str>) {
    // Each clause with `?` where its parameter goes.
    let wanted: [(&str, Option<&'a str>); 7] = [
        ("route = ?", q.route.as_deref()),
        ("subject = ?", q.subject.as_deref()),
        ("status = ?", q.status.map(Status::name)),
        ("name = ?", q.name.as_deref()),
        ("conversation = ?", q.conversation.as_deref()),
        ("id = ?", q.id.as_deref()),
        // No index holds step ids (a steps table would): the text of the documents the other
        // filters select is searched, and the caller checks the step's id exactly in the tasks
        // found.
        (dialect.contains, q.holding_step.as_deref()),
    ];
    let mut clauses = Vec::new();
    let mut values = Vec::new();
    for (clause, value) in wanted {
        if let Some(v) = value {
            values.push(v);
            clauses.push(clause.replace('?', &(dialect.param)(values.len())));
        }
    }
    if clauses.is_empty() {
        (String::new(), values)
    } else {
        (format!("WHERE {}", clauses.join(" AND ")), values)
    }
}

/// [`conditions`]' parameters as SQLite binds them.
fn bound<'a>(values: &'a [&'a str]) -> Vec<&'a dyn ToSql> {
    values.iter().map(|v| v as &dyn ToSql).collect()
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
    let (filter, texts) = conditions(q, &SQLITE);
    let values = bound(&texts);
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
            "SELECT id, route, status, upstream_id IS NOT NULL, created_at, NULL FROM tasks
             WHERE terminal = 0 ORDER BY created_at",
        )
        .map_err(backend)?;
    let rows = stmt.query_map([], columns).map_err(backend)?;
    rows.map(|row| unfinished_of(row.map_err(backend)?))
        .collect()
}

/// An [`Unfinished`]'s columns: id, route, status, started, created_at, and the lease's holder
/// before.
pub(super) type UnfinishedColumns = (String, String, String, bool, String, Option<String>);

fn columns(r: &rusqlite::Row<'_>) -> rusqlite::Result<UnfinishedColumns> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
    ))
}

pub(super) fn unfinished_of(
    (id, route, status, started, created_at, taken_from): UnfinishedColumns,
) -> Result<Unfinished, StoreError> {
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
        taken_from,
    })
}

/// Leases up to `limit` unfinished tasks to `holder` until `until` (milliseconds since the
/// epoch), oldest first: those handed back or never leased, those of other holders whose lease
/// ran out by `now`, and, when `every`, those of other holders whatever their lease (see
/// [`SqliteStore`](super::SqliteStore)'s leases). Runs in the writer's transaction: the
/// select and the update are one step for every other write.
pub(super) fn claim(
    c: &Connection,
    holder: &str,
    now: i64,
    until: i64,
    every: bool,
    limit: u32,
) -> Result<Vec<Unfinished>, StoreError> {
    let found = c
        .prepare_cached(
            "SELECT id, route, status, upstream_id IS NOT NULL, created_at, lease_holder FROM tasks
             WHERE terminal = 0 AND (lease_holder IS NULL OR lease_holder <> ?1)
               AND (?2 OR lease_until IS NULL OR lease_until < ?3)
             ORDER BY created_at LIMIT ?4",
        )
        .and_then(|mut s| {
            s.query_map(params![holder, every, now, limit], columns)?
                .collect::<rusqlite::Result<Vec<_>>>()
        })
        .map_err(backend)?;
    let mut lease = c
        .prepare_cached("UPDATE tasks SET lease_holder = ?1, lease_until = ?2 WHERE id = ?3")
        .map_err(backend)?;
    found
        .into_iter()
        .map(|row| {
            lease
                .execute(params![holder, until, row.0])
                .map_err(backend)?;
            unfinished_of(row)
        })
        .collect()
}

/// Extends `holder`'s leases on unfinished tasks to `until`; the ids it holds.
pub(super) fn renew(c: &Connection, holder: &str, until: i64) -> Result<Vec<String>, StoreError> {
    c.prepare_cached(
        "UPDATE tasks SET lease_until = ?2 WHERE terminal = 0 AND lease_holder = ?1 RETURNING id",
    )
    .and_then(|mut s| {
        s.query_map(params![holder, until], |r| r.get(0))?
            .collect::<rusqlite::Result<Vec<String>>>()
    })
    .map_err(backend)
}

/// Hands `holder`'s leases back: claimable at once. How many.
pub(super) fn hand_back(c: &Connection, holder: &str) -> Result<u64, StoreError> {
    c.prepare_cached(
        "UPDATE tasks SET lease_holder = NULL, lease_until = NULL
         WHERE terminal = 0 AND lease_holder = ?1",
    )
    .and_then(|mut s| s.execute([holder]))
    .map(|n| n as u64)
    .map_err(backend)
}

#[cfg(test)]
mod tests {
    use rusqlite::Connection;

    use super::page_sql;
    use crate::TaskQuery;

    /// How SQLite would run the page statement for `q`.
    fn plan(q: &TaskQuery) -> String {
        let c = Connection::open_in_memory().unwrap();
        crate::migrations::sqlite(&c, crate::Migrations::Apply).unwrap();
        let (filter, texts) = super::conditions(q, &super::SQLITE);
        let mut values = super::bound(&texts);
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
        let with = |q: TaskQuery| TaskQuery {
            route: Some("r".into()),
            subject: Some("ann".into()),
            ..q
        };
        let cases = [
            (caller.clone(), "tasks_by_route"),
            // A conversation's task, looked up for each message of it.
            (
                with(TaskQuery {
                    conversation: Some("c-1".into()),
                    ..TaskQuery::default()
                }),
                "tasks_by_route",
            ),
            // By the conversation alone: its own index (the column migration v2 made).
            (
                TaskQuery {
                    conversation: Some("c-1".into()),
                    ..TaskQuery::default()
                },
                "tasks_by_conversation",
            ),
            // A step's holder: the text search reads only the caller's documents.
            (
                with(TaskQuery {
                    holding_step: Some("step-1".into()),
                    ..TaskQuery::default()
                }),
                "tasks_by_route",
            ),
            (
                TaskQuery {
                    route: Some("r".into()),
                    ..TaskQuery::default()
                },
                "tasks_by_route",
            ),
        ];
        for (q, index) in cases {
            let plan = plan(&q);
            assert!(plan.contains(index), "{q:?}: {plan}");
        }
    }
}
