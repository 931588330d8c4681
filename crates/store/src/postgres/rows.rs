//! The tasks table's SQL on PostgreSQL: the same statements as SQLite's (`crate::rows`), the
//! leases and the refresh claims, with the database's clock.

use deadpool_postgres::GenericClient;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;

use super::Fail;
use crate::error::StoreError;
use crate::rows::{self as shared, Columns, Dialect, Read, Row, UnfinishedColumns};
use crate::tasks::{Stored, TaskQuery, Unfinished};
use mapping::task::Task;

/// A task as a search reads it: decoded, or why not.
pub(super) type ReadTask = Read<Task>;

const POSTGRES: Dialect = Dialect {
    param: |n| format!("${n}"),
    contains: "strpos(doc, ?) > 0",
};

/// The task's columns, leased to `$12` for `$13` seconds from the database's now.
const TASK: &str =
    "INSERT INTO tasks (id, route, subject, status, name, conversation, upstream_id, terminal,
                       created_at, updated_at, version, doc, lease_holder, lease_until)";
const VALUES: &str =
    "$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 1, $11, $12, now() + make_interval(secs => $13)";

/// A task's insert, at version 1, leased to `$12` for `$13` seconds from the database's now.
pub(super) const INSERT: &str = "INSERT INTO tasks (id, route, subject, status, name, conversation, upstream_id, terminal,
                       created_at, updated_at, version, doc, lease_holder, lease_until)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 1, $11, $12, now() + make_interval(secs => $13))";

/// A create with its hold, as one statement (so one round trip, and the writer can send it
/// without waiting for the statement before): the account's row locked if it covers the amount
/// (`FOR UPDATE` waits for another hold on it, then checks the balance again as that one left
/// it), the task inserted only then, and the hold's ledger row, hold and balance with it. The
/// answer: whether the task was inserted (not: the account could not cover the hold).
pub(super) fn with_hold() -> String {
    format!(
        "WITH account AS (
             SELECT 1 FROM accounts
             WHERE plan = $14 AND subject = $15 AND granted - captured - held >= $16
             FOR UPDATE
         ), task AS (
             {TASK} SELECT {VALUES} FROM account RETURNING id
         ), entry AS (
             INSERT INTO ledger (at, plan, subject, kind, amount, from_hold, task_id)
             SELECT $17, $14, $15, 'hold', $16, 0, id FROM task
             ON CONFLICT DO NOTHING RETURNING task_id
         ), held AS (
             INSERT INTO holds (task_id, plan, subject, amount, remaining, open)
             SELECT task_id, $14, $15, $16, $16, true FROM entry
         ), moved AS (
             UPDATE accounts SET held = held + $16
             WHERE plan = $14 AND subject = $15 AND EXISTS (SELECT 1 FROM entry)
         )
         SELECT EXISTS (SELECT 1 FROM task)"
    )
}

/// The first 13 parameters of [`INSERT`] and [`with_hold`]: the row, its lease's holder and
/// length.
pub(super) fn insert_params<'a>(
    r: &'a Row,
    holder: &'a String,
    ttl: &'a f64,
) -> Vec<&'a (dyn ToSql + Sync)> {
    vec![
        &r.id,
        &r.route,
        &r.subject,
        &r.status,
        &r.name,
        &r.conversation,
        &r.upstream_id,
        &r.terminal,
        &r.created_at,
        &r.updated_at,
        &r.doc,
        holder,
        ttl,
    ]
}

/// Inserts the row at version 1, leased to `holder` for `ttl` seconds from the database's now
/// (without credits: creates with a hold go through the writer); [`StoreError::Duplicate`] when
/// the id is taken.
pub(super) async fn insert(
    c: &impl GenericClient,
    r: &Row,
    holder: &String,
    ttl: f64,
) -> Result<(), Fail> {
    let stmt = c.prepare_cached(INSERT).await?;
    match c.execute(&stmt, &insert_params(r, holder, &ttl)).await {
        Ok(_) => Ok(()),
        Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
            Err(StoreError::Duplicate(r.id.clone()).into())
        }
        Err(e) => Err(e.into()),
    }
}

/// A task's update: the row replaced if it is still at version `$8`.
pub(super) const UPDATE: &str =
    "UPDATE tasks SET status = $1, name = $2, upstream_id = $3, terminal = $4, updated_at = $5,
            version = version + 1, doc = $6, conversation = $9
     WHERE id = $7 AND version = $8";

/// [`UPDATE`]'s parameters.
pub(super) fn update_params<'a>(r: &'a Row, version: &'a i64) -> [&'a (dyn ToSql + Sync); 9] {
    [
        &r.status,
        &r.name,
        &r.upstream_id,
        &r.terminal,
        &r.updated_at,
        &r.doc,
        &r.id,
        version,
        &r.conversation,
    ]
}

/// Replaces the row of a task stored without a subject if it is still at `version`, naming its
/// subject; [`StoreError::Conflict`] when it moved or has a subject.
pub(super) async fn update_claiming(
    c: &impl GenericClient,
    r: &Row,
    version: i64,
) -> Result<(), Fail> {
    let claim = c
        .prepare_cached("UPDATE tasks SET subject = $1 WHERE id = $2 AND subject IS NULL")
        .await?;
    if c.execute(&claim, &[&r.subject, &r.id]).await? != 1 {
        return Err(StoreError::Conflict.into());
    }
    update(c, r, version).await
}

/// Replaces the row if it is still at `version`; [`StoreError::Conflict`] when it is not (or is
/// gone).
async fn update(c: &impl GenericClient, r: &Row, version: i64) -> Result<(), Fail> {
    let stmt = c.prepare_cached(UPDATE).await?;
    match c.execute(&stmt, &update_params(r, &version)).await? {
        1 => Ok(()),
        _ => Err(StoreError::Conflict.into()),
    }
}

/// The task with this id, if any.
pub(super) async fn get(c: &impl GenericClient, id: &str) -> Result<Option<Read<Stored>>, Fail> {
    let stmt = c
        .prepare_cached("SELECT doc, version FROM tasks WHERE id = $1")
        .await?;
    let row = c.query_opt(&stmt, &[&id]).await?;
    Ok(row.map(|r| {
        let (doc, version): (String, i64) = (r.get(0), r.get(1));
        shared::decode(id, &doc).map(|task| Stored { task, version })
    }))
}

/// Ends a task whose document cannot be decoded (see SQLite's `end_unreadable`), its row
/// locked.
pub(super) async fn end_unreadable(
    c: &impl GenericClient,
    id: &str,
    why: &str,
    plan: Option<String>,
) -> Result<Option<(Stored, bool)>, Fail> {
    let stmt = c
        .prepare_cached(
            "SELECT route, subject, status, name, upstream_id, created_at, version, doc
             FROM tasks WHERE id = $1 FOR UPDATE",
        )
        .await?;
    let Some(r) = c.query_opt(&stmt, &[&id]).await? else {
        return Ok(None);
    };
    let (version, old): (i64, String) = (r.get(6), r.get(7));
    if let Ok(task) = shared::decode(id, &old) {
        return Ok(Some((Stored { task, version }, false)));
    }
    let columns = Columns {
        route: r.get(0),
        subject: r.get(1),
        status: r.get(2),
        name: r.get(3),
        upstream_id: r.get(4),
        created_at: r.get(5),
    };
    let now = chrono::Utc::now();
    let task = shared::ended(id, columns, why, plan, now);
    update(c, &Row::new(&task)?, version).await?;
    let at = mapping::task::time::format_rfc3339_offset(now);
    c.execute(
        "INSERT INTO unreadable_tasks (task_id, at, error, doc) VALUES ($1, $2, $3, $4)
         ON CONFLICT (task_id) DO UPDATE SET at = excluded.at, error = excluded.error, doc = excluded.doc",
        &[&id, &at, &why, &old],
    )
    .await?;
    Ok(Some((
        Stored {
            task,
            version: version + 1,
        },
        true,
    )))
}

/// Tasks matching the query, newest first, and how many match in all (in one snapshot).
pub(super) async fn search(
    c: &impl GenericClient,
    q: &TaskQuery,
) -> Result<(Vec<ReadTask>, u64), Fail> {
    let (filter, texts) = shared::conditions(q, &POSTGRES);
    let mut values: Vec<&(dyn ToSql + Sync)> =
        texts.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
    let count = c
        .prepare_cached(&format!("SELECT COUNT(*) FROM tasks {filter}"))
        .await?;
    let total: i64 = c.query_one(&count, &values).await?.get(0);
    let size = i64::from(q.page_size.clamp(1, 1000));
    let offset = i64::from(q.page.max(1) - 1) * size;
    values.push(&size);
    values.push(&offset);
    let page = c
        .prepare_cached(&format!(
            "SELECT id, doc FROM tasks {filter} ORDER BY created_at DESC, id LIMIT ${} OFFSET ${}",
            texts.len() + 1,
            texts.len() + 2
        ))
        .await?;
    let tasks = c
        .query(&page, &values)
        .await?
        .iter()
        .map(|r| shared::decode(r.get(0), r.get(1)))
        .collect();
    Ok((tasks, total.max(0) as u64))
}

fn unfinished_of(r: &tokio_postgres::Row) -> Result<Unfinished, StoreError> {
    let columns: UnfinishedColumns = (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5));
    shared::unfinished_of(columns)
}

/// Every task that has not ended, oldest first.
pub(super) async fn unfinished(c: &impl GenericClient) -> Result<Vec<Unfinished>, Fail> {
    let stmt = c
        .prepare_cached(
            "SELECT id, route, status, upstream_id IS NOT NULL, created_at, NULL::text FROM tasks
             WHERE NOT terminal ORDER BY created_at",
        )
        .await?;
    let rows = c.query(&stmt, &[]).await?;
    Ok(rows.iter().map(unfinished_of).collect::<Result<_, _>>()?)
}

/// Leases up to `limit` unfinished tasks whose lease ran out (or was handed back, or never
/// taken) to `holder` for `ttl` seconds, oldest first. `SKIP LOCKED`: two instances claiming at
/// once take different tasks, neither waits for the other. The previous holder comes back as
/// `taken_from`.
pub(super) async fn claim(
    c: &impl GenericClient,
    holder: &str,
    ttl: f64,
    limit: u32,
) -> Result<Vec<Unfinished>, Fail> {
    let stmt = c
        .prepare_cached(
            "WITH lapsed AS (
                 SELECT id, lease_holder FROM tasks
                 WHERE NOT terminal AND (lease_until IS NULL OR lease_until < now())
                 ORDER BY created_at LIMIT $3
                 FOR UPDATE SKIP LOCKED
             )
             UPDATE tasks t SET lease_holder = $1, lease_until = now() + make_interval(secs => $2)
             FROM lapsed
             WHERE t.id = lapsed.id
             RETURNING t.id, t.route, t.status, t.upstream_id IS NOT NULL, t.created_at,
                       lapsed.lease_holder",
        )
        .await?;
    let limit = i64::from(limit);
    let mut rows = c
        .query(&stmt, &[&holder, &ttl, &limit])
        .await?
        .iter()
        .map(unfinished_of)
        .collect::<Result<Vec<_>, _>>()?;
    rows.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
    Ok(rows)
}

/// Extends `holder`'s leases on unfinished tasks by `ttl` seconds; the ids it holds.
///
/// A row that a batch of the writer has locked (it is updating the task) is skipped, not waited
/// for: the batch may be waiting in turn for a row this statement locked before (a batch holds
/// an account, then a task; this statement takes tasks one after another), and that deadlock
/// would stall both for PostgreSQL's `deadlock_timeout`. A skipped lease is still held (it runs
/// for two more renewals) and is extended at the next one.
pub(super) async fn renew(
    c: &impl GenericClient,
    holder: &str,
    ttl: f64,
) -> Result<Vec<String>, Fail> {
    let stmt = c
        .prepare_cached(
            "WITH renewed AS (
                 UPDATE tasks SET lease_until = now() + make_interval(secs => $2)
                 WHERE id IN (SELECT id FROM tasks WHERE NOT terminal AND lease_holder = $1
                              FOR UPDATE SKIP LOCKED)
             )
             SELECT id FROM tasks WHERE NOT terminal AND lease_holder = $1",
        )
        .await?;
    let rows = c.query(&stmt, &[&holder, &ttl]).await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Hands `holder`'s leases back: claimable at once. How many.
pub(super) async fn hand_back(c: &impl GenericClient, holder: &str) -> Result<u64, Fail> {
    let stmt = c
        .prepare_cached(
            "UPDATE tasks SET lease_holder = NULL, lease_until = NULL
             WHERE NOT terminal AND lease_holder = $1",
        )
        .await?;
    Ok(c.execute(&stmt, &[&holder]).await?)
}

/// Records a refresh of the task beginning now unless one began within `fresh` seconds; whether
/// it was recorded.
pub(super) async fn claim_refresh(
    c: &impl GenericClient,
    id: &str,
    fresh: f64,
) -> Result<bool, Fail> {
    let stmt = c
        .prepare_cached(
            "UPDATE tasks SET refreshed_at = now()
             WHERE id = $1 AND (refreshed_at IS NULL OR refreshed_at < now() - make_interval(secs => $2))
             RETURNING 1",
        )
        .await?;
    Ok(c.query_opt(&stmt, &[&id, &fresh]).await?.is_some())
}
