//! The escrow_sales table's SQL on PostgreSQL (see [`crate::escrow_sales`]), run in the caller's
//! transaction with the ledger rows a sale moves.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;

use super::{ledger, Fail};
use crate::error::StoreError;
use crate::escrow_sales::{self as shared, EscrowSale, EscrowState, Moves, Record};
use mapping::task::time::format_rfc3339_offset;

/// Inserts `s` (recorded as `r`); `false`, nothing written, when a twin waits for its lock
/// ([`StoreError::Duplicate`] when its task has a sale already). A twin inserted by a
/// transaction still open is waited for: once it commits, this inserts nothing; if it rolls
/// back, this inserts.
pub(super) async fn insert(
    c: &impl GenericClient,
    s: &EscrowSale,
    r: &Record,
) -> Result<bool, Fail> {
    let stmt = c.prepare_cached(&shared::insert_sql('$')).await?;
    let inserted = c
        .execute(
            &stmt,
            &[
                &s.task_id,
                &s.route,
                &s.rail,
                &s.reference,
                &s.client_ref,
                &s.input_hash,
                &s.state.name(),
                &r.due,
                &r.created_at,
                &r.updated_at,
                &r.doc,
            ],
        )
        .await;
    match inserted {
        Ok(n) => Ok(n == 1),
        Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
            Err(StoreError::Duplicate(s.task_id.clone()).into())
        }
        Err(e) => Err(e.into()),
    }
}

/// The sale waiting for its lock that `s` would repeat.
pub(super) async fn twin(
    c: &impl GenericClient,
    s: &EscrowSale,
) -> Result<Option<EscrowSale>, Fail> {
    one(
        c,
        &shared::twin_sql('$'),
        &[&s.route, &s.client_ref, &s.input_hash],
    )
    .await
}

/// Writes `s` over its record if that is still in state `from` (its row locked), and moves the
/// ledger as `moves` says; `false`, nothing written, when the record had moved on.
pub(super) async fn save(
    c: &impl GenericClient,
    s: &EscrowSale,
    r: &Record,
    from: EscrowState,
    moves: &Moves,
) -> Result<bool, Fail> {
    let stmt = c.prepare_cached(&shared::save_sql('$')).await?;
    let n = c
        .execute(
            &stmt,
            &[
                &s.task_id,
                &s.reference,
                &s.state.name(),
                &r.due,
                &r.updated_at,
                &r.doc,
                &from.name(),
            ],
        )
        .await?;
    if n == 0 {
        return Ok(false);
    }
    match moves {
        Moves::None => {}
        Moves::Lock {
            account,
            amount,
            note,
        } => {
            ledger::grant(c, account, *amount, Some(note)).await?;
            ledger::hold(c, &s.task_id, account, amount.unsigned_abs()).await?;
        }
        Moves::Close {
            account,
            settlement,
            revoke,
            note,
        } => {
            ledger::settle(c, &s.task_id, settlement).await?;
            ledger::revoke(c, account, *revoke, note).await?;
        }
    }
    Ok(true)
}

/// The sale of a task.
pub(super) async fn get(c: &impl GenericClient, task_id: &str) -> Result<Option<EscrowSale>, Fail> {
    one(c, &shared::get_sql('$'), &[&task_id]).await
}

/// The open sales due at `now`, soonest due first, at most `limit`.
pub(super) async fn due(
    c: &impl GenericClient,
    now: DateTime<Utc>,
    limit: u32,
) -> Result<Vec<EscrowSale>, Fail> {
    let now = format_rfc3339_offset(now);
    docs(c, &shared::due_sql('$'), &[&now, &i64::from(limit)]).await
}

/// The latest sales, newest first, at most `limit`; only the open ones when `open`.
pub(super) async fn latest(
    c: &impl GenericClient,
    open: bool,
    limit: u32,
) -> Result<Vec<EscrowSale>, Fail> {
    docs(c, &shared::latest_sql('$', open), &[&i64::from(limit)]).await
}

async fn one(
    c: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Option<EscrowSale>, Fail> {
    let stmt = c.prepare_cached(sql).await?;
    let row = c.query_opt(&stmt, params).await?;
    Ok(row.map(|r| shared::decode(r.get(0))).transpose()?)
}

async fn docs(
    c: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<EscrowSale>, Fail> {
    let stmt = c.prepare_cached(sql).await?;
    let rows = c.query(&stmt, params).await?;
    Ok(rows
        .iter()
        .map(|r| shared::decode(r.get(0)))
        .collect::<Result<_, _>>()?)
}
