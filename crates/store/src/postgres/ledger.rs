//! The credit ledger's SQL on PostgreSQL (a create's hold is written with its task: see
//! `rows::with_hold`; settlements are the functions of `settle.sql`, run by the writer). What SQLite gets from its one writer, this gets from row locks: a hold locks
//! its account's row before checking the balance, a settlement locks the
//! hold's row and then the account's, a revoke the account's; the unique keys make a repeated
//! hold, capture or release a no-op, as on SQLite.

use deadpool_postgres::GenericClient;

use super::Fail;
use crate::credits::{Account, Balance, LedgerRow, Settled, Settlement};
use crate::error::StoreError;
use crate::ledger::{balance_of, compare, Planned, FROM_ROWS, LEDGER_COLUMNS};

fn now() -> String {
    mapping::task::time::format_iso_ms(chrono::Utc::now())
}

/// Writes a ledger row; `false` when it exists already (a unique key).
async fn row(
    c: &impl GenericClient,
    account: &Account,
    task: Option<&str>,
    p: &Planned,
) -> Result<bool, Fail> {
    let stmt = c
        .prepare_cached(
            "INSERT INTO ledger (at, plan, subject, kind, amount, from_hold, task_id, step_id, note)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT DO NOTHING",
        )
        .await?;
    let n = c
        .execute(
            &stmt,
            &[
                &now(),
                &account.plan,
                &account.subject,
                &p.kind,
                &p.amount,
                &p.from_hold,
                &task,
                &p.step,
                &p.note,
            ],
        )
        .await?;
    Ok(n == 1)
}

/// The account's balance (zero for an account never seen); `lock`: its row stays locked until
/// the transaction ends.
pub(super) async fn balance(
    c: &impl GenericClient,
    a: &Account,
    lock: bool,
) -> Result<Balance, Fail> {
    let stmt = c
        .prepare_cached(if lock {
            "SELECT granted, captured, held FROM accounts WHERE plan = $1 AND subject = $2 FOR UPDATE"
        } else {
            "SELECT granted, captured, held FROM accounts WHERE plan = $1 AND subject = $2"
        })
        .await?;
    let found = c.query_opt(&stmt, &[&a.plan, &a.subject]).await?;
    let totals = found.map_or((0, 0, 0), |r| (r.get(0), r.get(1), r.get(2)));
    Ok(balance_of(a, totals))
}

async fn adjust(
    c: &impl GenericClient,
    a: &Account,
    granted: i64,
    captured: i64,
    held: i64,
) -> Result<(), Fail> {
    let stmt = c
        .prepare_cached(
            "INSERT INTO accounts (plan, subject, granted, captured, held) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (plan, subject) DO UPDATE SET granted = accounts.granted + $3,
                 captured = accounts.captured + $4, held = accounts.held + $5",
        )
        .await?;
    c.execute(&stmt, &[&a.plan, &a.subject, &granted, &captured, &held])
        .await?;
    Ok(())
}

/// Grants (or, negative, revokes, never below what is available) credits.
pub(super) async fn grant(
    c: &impl GenericClient,
    a: &Account,
    amount: i64,
    note: Option<&str>,
) -> Result<Balance, Fail> {
    if amount < 0 {
        let b = balance(c, a, true).await?;
        if b.available() < -amount {
            return Err(StoreError::Insufficient {
                available: b.available(),
                needed: amount.unsigned_abs(),
            }
            .into());
        }
    }
    let entry = Planned {
        kind: if amount < 0 { "revoke" } else { "grant" },
        amount: amount.abs(),
        from_hold: 0,
        step: None,
        note: note.map(str::to_string),
    };
    row(c, a, None, &entry).await?;
    adjust(c, a, amount, 0, 0).await?;
    balance(c, a, false).await
}

/// Holds `amount` for a task stored without credits (one paid for after it was stored): the
/// account's row locked, its balance checked, then the hold's rows, as `rows::with_hold` writes
/// them for a new task. [`StoreError::Insufficient`] when the account cannot cover it.
pub(super) async fn hold(
    c: &impl GenericClient,
    task: &str,
    a: &Account,
    amount: u64,
) -> Result<(), Fail> {
    let b = balance(c, a, true).await?;
    let amount = amount as i64;
    if b.available() < amount {
        return Err(StoreError::Insufficient {
            available: b.available(),
            needed: amount.unsigned_abs(),
        }
        .into());
    }
    let entry = Planned {
        kind: "hold",
        amount,
        from_hold: 0,
        step: None,
        note: None,
    };
    if !row(c, a, Some(task), &entry).await? {
        return Ok(());
    }
    let stmt = c
        .prepare_cached(
            "INSERT INTO holds (task_id, plan, subject, amount, remaining, open)
             VALUES ($1, $2, $3, $4, $4, true)",
        )
        .await?;
    c.execute(&stmt, &[&task, &a.plan, &a.subject, &amount])
        .await?;
    adjust(c, a, 0, 0, amount).await
}

/// The plan of the account a task's hold was taken from, if it holds credits.
pub(super) async fn plan_of_hold(
    c: &impl GenericClient,
    task: &str,
) -> Result<Option<String>, Fail> {
    let stmt = c
        .prepare_cached("SELECT plan FROM holds WHERE task_id = $1")
        .await?;
    Ok(c.query_opt(&stmt, &[&task]).await?.map(|r| r.get(0)))
}

/// Takes back up to `amount` granted to `a` that it was never owed, as far as the available
/// balance has it (the account's row locked): a revoke never takes a balance below zero.
/// Returns what was taken.
pub(super) async fn revoke(
    c: &impl GenericClient,
    a: &Account,
    amount: i64,
    note: &str,
) -> Result<i64, Fail> {
    let taken = amount.min(balance(c, a, true).await?.available()).max(0);
    if taken > 0 {
        grant(c, a, -taken, Some(note)).await?;
    }
    Ok(taken)
}

/// A settlement as one statement (the settlement function of `settle.sql`): the task, its
/// captures' steps and amounts ([`Captures`]), whether to release, the rows' time.
pub(super) const SETTLE: &str = "SELECT * FROM interlingua_settle($1, $2, $3, $4, $5)";

/// A settlement's captures as the functions of `settle.sql` take them: the steps and the
/// amounts, side by side.
pub(super) struct Captures {
    pub(super) steps: Vec<String>,
    pub(super) amounts: Vec<i64>,
}

impl Captures {
    pub(super) fn of(s: &Settlement) -> Captures {
        Captures {
            steps: s.captures.iter().map(|c| c.step_id.clone()).collect(),
            amounts: s.captures.iter().map(|c| c.amount as i64).collect(),
        }
    }
}

/// What a settlement function answered.
pub(super) fn settled(captured: i64, released: i64) -> Settled {
    Settled {
        captured: captured.max(0) as u64,
        released: released.max(0) as u64,
    }
}

/// Captures and releases for one task, in the caller's transaction (with no update of the task:
/// those go through the writer).
pub(super) async fn settle(
    c: &impl GenericClient,
    task: &str,
    s: &Settlement,
) -> Result<Settled, Fail> {
    let stmt = c.prepare_cached(SETTLE).await?;
    let captures = Captures::of(s);
    let r = c
        .query_one(
            &stmt,
            &[
                &task,
                &captures.steps,
                &captures.amounts,
                &s.release,
                &now(),
            ],
        )
        .await?;
    Ok(settled(r.get(0), r.get(1)))
}

/// Releases what is left of the task's hold; how much.
pub(super) async fn release(c: &impl GenericClient, task: &str) -> Result<u64, Fail> {
    let release = Settlement {
        captures: Vec::new(),
        release: true,
    };
    Ok(settle(c, task, &release).await?.released)
}

/// An account's rows, newest first.
pub(super) async fn history(
    c: &impl GenericClient,
    a: &Account,
    limit: u32,
) -> Result<Vec<LedgerRow>, Fail> {
    let stmt = c
        .prepare_cached(&format!(
            "SELECT {LEDGER_COLUMNS} FROM ledger
             WHERE plan = $1 AND subject = $2 ORDER BY seq DESC LIMIT $3"
        ))
        .await?;
    let limit = i64::from(limit.clamp(1, 10_000));
    let rows = c.query(&stmt, &[&a.plan, &a.subject, &limit]).await?;
    Ok(rows.iter().map(ledger_row).collect::<Result<_, _>>()?)
}

/// A row of [`LEDGER_COLUMNS`] (a column of another type is an error, not a panic).
pub(super) fn ledger_row(r: &tokio_postgres::Row) -> Result<LedgerRow, tokio_postgres::Error> {
    Ok(LedgerRow {
        seq: r.try_get(0)?,
        at: r.try_get(1)?,
        plan: r.try_get(2)?,
        subject: r.try_get(3)?,
        kind: r.try_get(4)?,
        amount: r.try_get(5)?,
        from_hold: r.try_get(6)?,
        task_id: r.try_get(7)?,
        step_id: r.try_get(8)?,
        note: r.try_get(9)?,
    })
}

/// PostgreSQL's `SUM` of `bigint` is `numeric`: the totals are cast back.
fn from_rows() -> String {
    FROM_ROWS
        .replace("COALESCE(SUM(", "CAST(COALESCE(SUM(")
        .replace("END), 0)", "END), 0) AS BIGINT)")
}

/// The balance from the rows alone.
pub(super) async fn recompute(c: &impl GenericClient, a: &Account) -> Result<Balance, Fail> {
    let r = c
        .query_one(
            &format!("SELECT {} WHERE plan = $1 AND subject = $2", from_rows()),
            &[&a.plan, &a.subject],
        )
        .await?;
    Ok(balance_of(a, (r.get(0), r.get(1), r.get(2))))
}

/// Every account whose balance differs from its rows.
pub(super) async fn drifts(c: &impl GenericClient) -> Result<Vec<(Balance, Balance)>, Fail> {
    let totals = |rows: Vec<tokio_postgres::Row>| -> Vec<Balance> {
        rows.iter()
            .map(|r| Balance {
                plan: r.get(0),
                subject: r.get(1),
                granted: r.get(2),
                captured: r.get(3),
                held: r.get(4),
            })
            .collect()
    };
    let kept = c
        .query(
            "SELECT plan, subject, granted, captured, held FROM accounts",
            &[],
        )
        .await?;
    let added = c
        .query(
            &format!(
                "SELECT plan, subject, {} GROUP BY plan, subject",
                from_rows()
            ),
            &[],
        )
        .await?;
    Ok(compare(totals(kept), totals(added)))
}

/// Every hold not yet released, with its task's document.
#[allow(clippy::type_complexity)]
pub(super) async fn open_holds(
    c: &impl GenericClient,
) -> Result<Vec<(String, Account, i64, Option<String>)>, Fail> {
    let rows = c
        .query(
            "SELECT h.task_id, h.plan, h.subject, h.remaining, t.doc
             FROM holds h LEFT JOIN tasks t ON t.id = h.task_id WHERE h.open",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| {
            let account = Account::new(r.get(1), r.get(2));
            (r.get(0), account, r.get(3), r.get(4))
        })
        .collect())
}
