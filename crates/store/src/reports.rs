//! What the operator's console reads from the ledger, on SQLite: the accounts (a page of them,
//! with their balances and last movement), a task's rows, and the credits spent per route and
//! day. Read-only; each a bounded number of statements, whatever the number of accounts or rows.
//! PostgreSQL's are in `postgres::reports`; the parts both use are here.

use rusqlite::{params, Connection, ToSql};

use super::error::{backend, StoreError};
use crate::credits::{AccountQuery, AccountSummary, Balance, DaySpend, LedgerRow};
use crate::ledger::{ledger_row, task_rows_sql};

/// The `WHERE` clause of an accounts list (over `accounts a`) and its text parameters: accounts
/// with at least one ledger row, then only the filters the query has (so that a plan's filter
/// reads the accounts' key). `param` writes the `n`th parameter; `contains` is the backend's
/// substring test with `?` for the text.
pub(crate) fn account_filter<'a>(
    q: &'a AccountQuery,
    param: fn(usize) -> String,
    contains: &str,
) -> (String, Vec<&'a str>) {
    let mut clauses = vec![
        "EXISTS (SELECT 1 FROM ledger l WHERE l.plan = a.plan AND l.subject = a.subject)"
            .to_string(),
    ];
    let mut values = Vec::new();
    for (clause, value) in [
        ("a.plan = ?", q.plan.as_deref()),
        (contains, q.subject_contains.as_deref()),
    ] {
        if let Some(v) = value {
            values.push(v);
            clauses.push(clause.replace('?', &param(values.len())));
        }
    }
    (format!("WHERE {}", clauses.join(" AND ")), values)
}

/// The page size a query asks for, capped.
pub(crate) fn limit_of(q: &AccountQuery) -> i64 {
    i64::from(q.limit.min(AccountQuery::MAX_LIMIT))
}

/// The offset a query asks for, as both backends bind it.
pub(crate) fn offset_of(q: &AccountQuery) -> i64 {
    i64::try_from(q.offset).unwrap_or(i64::MAX)
}

/// A day as `spend_by_day` takes it: exactly `YYYY-MM-DD`, a real date. Anything else is refused
/// rather than compared as text (`2025-1-5` would select from October on).
pub(crate) fn day(since_day: &str) -> Result<String, StoreError> {
    let parsed = chrono::NaiveDate::parse_from_str(since_day, "%Y-%m-%d");
    match parsed {
        Ok(d) if since_day.len() == 10 && d.format("%Y-%m-%d").to_string() == since_day => {
            Ok(since_day.to_string())
        }
        _ => Err(StoreError::Backend(format!(
            "`{since_day}` is not a day (YYYY-MM-DD)"
        ))),
    }
}

/// The accounts list's page: its filter, then `LIMIT` and `OFFSET` as the last two parameters.
/// The page is found in the accounts' key, in order; each account on it costs two lookups in
/// `ledger_by_account` (that it has rows, and its last).
///
/// `EXPLAIN QUERY PLAN` on a v5 store (2,000 accounts, 150,000 ledger rows), by plan and
/// subject:
///
/// ```text
/// SEARCH a USING INDEX sqlite_autoindex_accounts_1 (plan=?)
/// CORRELATED SCALAR SUBQUERY 2
///   SEARCH l USING COVERING INDEX ledger_by_account (plan=? AND subject=?)
/// CORRELATED SCALAR SUBQUERY 1
///   SEARCH l USING INDEX ledger_by_account (plan=? AND subject=?)
/// ```
///
/// Unfiltered, the first line is `SCAN a USING INDEX sqlite_autoindex_accounts_1`; the count is
/// `SCAN a USING COVERING INDEX sqlite_autoindex_accounts_1` with subquery 1. No sort, no scan of
/// the ledger: a list costs what the number of accounts does.
fn accounts_page_sql(filter: &str, params: usize) -> String {
    format!(
        "SELECT a.plan, a.subject, a.granted, a.captured, a.held,
                (SELECT l.at FROM ledger l WHERE l.plan = a.plan AND l.subject = a.subject
                 ORDER BY l.seq DESC LIMIT 1)
         FROM accounts a {filter}
         ORDER BY a.plan, a.subject LIMIT ?{} OFFSET ?{}",
        params + 1,
        params + 2
    )
}

fn sqlite_param(n: usize) -> String {
    format!("?{n}")
}

const SQLITE_CONTAINS: &str = "instr(a.subject, ?) > 0";

/// A page of the accounts with ledger rows, by plan then subject (bytewise), and how many match
/// in all (run it in one snapshot, so that the two agree).
pub(super) fn accounts(
    c: &Connection,
    q: &AccountQuery,
) -> Result<(Vec<AccountSummary>, u64), StoreError> {
    let (filter, texts) = account_filter(q, sqlite_param, SQLITE_CONTAINS);
    let mut values: Vec<&dyn ToSql> = texts.iter().map(|v| v as &dyn ToSql).collect();
    let total: i64 = c
        .prepare_cached(&format!("SELECT COUNT(*) FROM accounts a {filter}"))
        .and_then(|mut s| s.query_row(values.as_slice(), |r| r.get(0)))
        .map_err(backend)?;
    let (limit, offset) = (limit_of(q), offset_of(q));
    values.push(&limit);
    values.push(&offset);
    let page = c
        .prepare_cached(&accounts_page_sql(&filter, texts.len()))
        .and_then(|mut s| {
            s.query_map(values.as_slice(), |r| {
                Ok(AccountSummary {
                    balance: Balance {
                        plan: r.get(0)?,
                        subject: r.get(1)?,
                        granted: r.get(2)?,
                        captured: r.get(3)?,
                        held: r.get(4)?,
                    },
                    last_at: r.get(5)?,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()
        })
        .map_err(backend)?;
    Ok((page, u64::try_from(total).unwrap_or(0)))
}

/// A task's ledger rows, in the order they were written.
///
/// `EXPLAIN QUERY PLAN` on a v6 store: one `SEARCH ledger USING INDEX ledger_<kind>_once
/// (task_id=?)` per kind a task's rows have, then a sort of those few rows by `seq`.
pub(super) fn of_task(c: &Connection, task_id: &str) -> Result<Vec<LedgerRow>, StoreError> {
    c.prepare_cached(&task_rows_sql("?1"))
        .and_then(|mut s| {
            s.query_map([task_id], ledger_row)?
                .collect::<rusqlite::Result<Vec<_>>>()
        })
        .map_err(backend)
}

/// The spend per route and day, from `?1` on.
///
/// `EXPLAIN QUERY PLAN` on a v6 store (the same on v5's index by kind and time, measured with
/// 150,000 ledger rows and 50,000 tasks, and after `ANALYZE`):
///
/// ```text
/// SEARCH l USING INDEX ledger_captures_by_time (at>?)
/// SEARCH t USING INDEX sqlite_autoindex_tasks_1 (id=?)
/// USE TEMP B-TREE FOR GROUP BY
/// ```
///
/// Only the range's captures are read (each with its task by key); the grouping's sort is over
/// those rows.
const SPEND_SQLITE: &str = "
    SELECT t.route, substr(l.at, 1, 10) AS day, SUM(l.amount)
    FROM ledger l JOIN tasks t ON t.id = l.task_id
    WHERE l.kind = 'capture' AND l.at >= ?1
    GROUP BY day, t.route
    ORDER BY day, t.route";

/// Credits captured per route and UTC day from `since` (a checked day) on, by day then route.
/// The day is the first 10 characters of `at` (ISO 8601 in UTC, as every row is written), and
/// `at >= since` selects whole days: `2025-03-01T…` sorts after `2025-03-01`.
pub(super) fn spend_by_day(c: &Connection, since: &str) -> Result<Vec<DaySpend>, StoreError> {
    c.prepare_cached(SPEND_SQLITE)
        .and_then(|mut s| {
            s.query_map(params![since], |r| {
                Ok(DaySpend {
                    route: r.get(0)?,
                    day: r.get(1)?,
                    credits: r.get(2)?,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()
        })
        .map_err(backend)
}

#[cfg(test)]
mod tests {
    use rusqlite::Connection;

    use crate::credits::AccountQuery;

    /// How SQLite would run `sql` on an empty store at the newest version.
    fn plan(sql: &str, values: &[&dyn rusqlite::ToSql]) -> String {
        let c = Connection::open_in_memory().unwrap();
        crate::migrations::sqlite(&c, crate::Migrations::Apply).unwrap();
        let mut stmt = c.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let rows = stmt.query_map(values, |r| r.get::<_, String>(3)).unwrap();
        rows.map(Result::unwrap).collect::<Vec<_>>().join("; ")
    }

    #[test]
    fn spend_reads_the_ranges_captures_by_the_captures_index() {
        let plan = plan(super::SPEND_SQLITE, &[&"2025-03-01"]);
        assert!(
            plan.contains("USING INDEX ledger_captures_by_time (at>?)"),
            "{plan}"
        );
        assert!(!plan.contains("SCAN"), "{plan}");
    }

    #[test]
    fn a_tasks_rows_are_read_by_each_kinds_unique_key() {
        let plan = plan(&crate::ledger::task_rows_sql("?1"), &[&"t"]);
        for kind in crate::ledger::TASK_KINDS {
            assert!(
                plan.contains(&format!("USING INDEX ledger_{kind}_once (task_id=?)")),
                "{kind}: {plan}"
            );
        }
        assert!(!plan.contains("SCAN"), "{plan}");
    }

    #[test]
    fn an_accounts_page_reads_the_accounts_key_and_never_scans_the_ledger() {
        let q = AccountQuery {
            plan: Some("gold".into()),
            subject_contains: Some("an".into()),
            limit: 50,
            offset: 0,
        };
        let (filter, texts) =
            super::account_filter(&q, super::sqlite_param, super::SQLITE_CONTAINS);
        let sql = super::accounts_page_sql(&filter, texts.len());
        let plan = plan(&sql, &[&texts[0], &texts[1], &50i64, &0i64]);
        assert!(
            plan.contains("SEARCH a USING INDEX sqlite_autoindex_accounts_1 (plan=?)"),
            "{plan}"
        );
        assert!(!plan.contains("SCAN l"), "{plan}");
        assert!(!plan.contains("TEMP B-TREE"), "{plan}");
    }
}
