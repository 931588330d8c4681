//! What the operator's console reads from the ledger, on PostgreSQL: the same statements as
//! SQLite's (`crate::reports`, which explains them), with PostgreSQL's parameters, its `SUM`
//! cast back to `bigint`, and text ordered bytewise (`COLLATE "C"`) as SQLite orders it, whatever
//! the database's collation.

use deadpool_postgres::GenericClient;
use tokio_postgres::types::ToSql;

use super::ledger::ledger_row;
use super::Fail;
use crate::credits::{AccountQuery, AccountSummary, Balance, DaySpend, LedgerRow};
use crate::ledger::task_rows_sql;
use crate::reports::{account_filter, limit_of, offset_of};

/// A page of the accounts with ledger rows, by plan then subject, and how many match in all
/// (run it in one snapshot, so that the two agree).
pub(super) async fn accounts(
    c: &impl GenericClient,
    q: &AccountQuery,
) -> Result<(Vec<AccountSummary>, u64), Fail> {
    let (filter, texts) = account_filter(q, |n| format!("${n}"), "strpos(a.subject, ?) > 0");
    let mut values: Vec<&(dyn ToSql + Sync)> =
        texts.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
    let count = c
        .prepare_cached(&format!("SELECT COUNT(*) FROM accounts a {filter}"))
        .await?;
    let total: i64 = c.query_one(&count, &values).await?.try_get(0)?;
    let (limit, offset) = (limit_of(q), offset_of(q));
    values.push(&limit);
    values.push(&offset);
    let page = c
        .prepare_cached(&format!(
            "SELECT a.plan, a.subject, a.granted, a.captured, a.held,
                    (SELECT l.at FROM ledger l WHERE l.plan = a.plan AND l.subject = a.subject
                     ORDER BY l.seq DESC LIMIT 1)
             FROM accounts a {filter}
             ORDER BY a.plan COLLATE \"C\", a.subject COLLATE \"C\" LIMIT ${} OFFSET ${}",
            texts.len() + 1,
            texts.len() + 2
        ))
        .await?;
    let accounts = c
        .query(&page, &values)
        .await?
        .iter()
        .map(|r| {
            Ok(AccountSummary {
                balance: Balance {
                    plan: r.try_get(0)?,
                    subject: r.try_get(1)?,
                    granted: r.try_get(2)?,
                    captured: r.try_get(3)?,
                    held: r.try_get(4)?,
                },
                last_at: r.try_get(5)?,
            })
        })
        .collect::<Result<Vec<_>, tokio_postgres::Error>>()?;
    Ok((accounts, u64::try_from(total).unwrap_or(0)))
}

/// A task's ledger rows, in the order they were written.
pub(super) async fn of_task(c: &impl GenericClient, task_id: &str) -> Result<Vec<LedgerRow>, Fail> {
    let stmt = c.prepare_cached(&task_rows_sql("$1")).await?;
    let rows = c.query(&stmt, &[&task_id]).await?;
    Ok(rows.iter().map(ledger_row).collect::<Result<_, _>>()?)
}

/// Credits captured per route and UTC day from `since` (a checked day) on, by day then route.
/// `at` is text here too (ISO 8601 in UTC, written by the instance), so the day is its first 10
/// characters, as on SQLite.
pub(super) async fn spend_by_day(
    c: &impl GenericClient,
    since: &str,
) -> Result<Vec<DaySpend>, Fail> {
    let stmt = c
        .prepare_cached(
            "SELECT t.route, substr(l.at, 1, 10) AS day, CAST(SUM(l.amount) AS BIGINT)
             FROM ledger l JOIN tasks t ON t.id = l.task_id
             WHERE l.kind = 'capture' AND l.at >= $1
             GROUP BY day, t.route
             ORDER BY day, t.route COLLATE \"C\"",
        )
        .await?;
    let rows = c.query(&stmt, &[&since]).await?;
    Ok(rows
        .iter()
        .map(|r| {
            Ok(DaySpend {
                route: r.try_get(0)?,
                day: r.try_get(1)?,
                credits: r.try_get(2)?,
            })
        })
        .collect::<Result<Vec<_>, tokio_postgres::Error>>()?)
}
