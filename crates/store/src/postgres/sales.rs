//! The sales table's SQL on PostgreSQL (see [`crate::sales`]), run in the caller's transaction
//! with the ledger rows a sale moves.

use deadpool_postgres::GenericClient;

use super::{ledger, Fail};
use crate::error::StoreError;
use crate::sales::{self as shared, Sale};

/// Inserts `s` ([`StoreError::Duplicate`] when its reference is known) and grants what it
/// authorises.
pub(super) async fn open(c: &impl GenericClient, s: &Sale) -> Result<(), Fail> {
    let r = shared::Record::new(s)?;
    let stmt = c
        .prepare_cached(
            "INSERT INTO sales (reference, task_id, rail, state, deadline, created_at, updated_at, doc)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (reference) DO NOTHING",
        )
        .await?;
    let n = c
        .execute(
            &stmt,
            &[
                &s.reference,
                &s.task_id,
                &s.rail,
                &s.state.name(),
                &r.deadline,
                &r.created_at,
                &r.updated_at,
                &r.doc,
            ],
        )
        .await?;
    if n == 0 {
        return Err(StoreError::Duplicate(s.reference.clone()).into());
    }
    ledger::grant(
        c,
        &s.account(),
        s.authorised as i64,
        Some(&shared::note(s, "authorised")),
    )
    .await?;
    Ok(())
}

/// Writes `s` over its earlier record if that is still in state `from`, and revokes `revoke`
/// (as far as the balance has it); `false` when the record had moved on.
pub(super) async fn save(
    c: &impl GenericClient,
    s: &Sale,
    from: crate::sales::SaleState,
    revoke: u64,
) -> Result<bool, Fail> {
    let r = shared::Record::new(s)?;
    let stmt = c
        .prepare_cached(
            "UPDATE sales SET state = $2, deadline = $3, updated_at = $4, doc = $5
             WHERE reference = $1 AND state = $6",
        )
        .await?;
    let n = c
        .execute(
            &stmt,
            &[
                &s.reference,
                &s.state.name(),
                &r.deadline,
                &r.updated_at,
                &r.doc,
                &from.name(),
            ],
        )
        .await?;
    if n == 0 {
        return Ok(false);
    }
    if revoke > 0 {
        ledger::revoke(
            c,
            &s.account(),
            revoke as i64,
            &shared::note(s, "not settled"),
        )
        .await?;
    }
    Ok(true)
}

/// The sale with this reference.
pub(super) async fn get(c: &impl GenericClient, reference: &str) -> Result<Option<Sale>, Fail> {
    let stmt = c
        .prepare_cached("SELECT doc FROM sales WHERE reference = $1")
        .await?;
    let row = c.query_opt(&stmt, &[&reference]).await?;
    Ok(row.map(|r| shared::decode(r.get(0))).transpose()?)
}

/// The sales of a task, oldest first.
pub(super) async fn of_task(c: &impl GenericClient, task_id: &str) -> Result<Vec<Sale>, Fail> {
    let stmt = c
        .prepare_cached("SELECT doc FROM sales WHERE task_id = $1 ORDER BY created_at")
        .await?;
    let rows = c.query(&stmt, &[&task_id]).await?;
    Ok(rows
        .iter()
        .map(|r| shared::decode(r.get(0)))
        .collect::<Result<_, _>>()?)
}

/// The sales in one of `states`, oldest first.
pub(super) async fn in_states(
    c: &impl GenericClient,
    states: &[crate::sales::SaleState],
) -> Result<Vec<Sale>, Fail> {
    let stmt = c.prepare_cached(&shared::in_states_sql(states)).await?;
    let rows = c.query(&stmt, &[]).await?;
    Ok(rows
        .iter()
        .map(|r| shared::decode(r.get(0)))
        .collect::<Result<_, _>>()?)
}
