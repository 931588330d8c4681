//! The purchases table's SQL on PostgreSQL (see [`crate::purchases`]).

use deadpool_postgres::GenericClient;

use super::Fail;
use crate::purchases::{self as shared, Purchase};

/// Writes `p` (inserting it, or replacing the task's earlier record).
pub(super) async fn save(c: &impl GenericClient, p: &Purchase) -> Result<(), Fail> {
    let r = shared::Record::new(p)?;
    let stmt = c
        .prepare_cached(
            "INSERT INTO purchases (task_id, rail, reference, state, created_at, updated_at, doc)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (task_id) DO UPDATE SET
                 reference = excluded.reference, state = excluded.state,
                 updated_at = excluded.updated_at, doc = excluded.doc",
        )
        .await?;
    c.execute(
        &stmt,
        &[
            &p.task_id,
            &p.rail,
            &p.reference,
            &p.state.name(),
            &r.created_at,
            &r.updated_at,
            &r.doc,
        ],
    )
    .await?;
    Ok(())
}

/// The purchases made for a task (none, or one).
pub(super) async fn of_task(c: &impl GenericClient, task_id: &str) -> Result<Vec<Purchase>, Fail> {
    let stmt = c
        .prepare_cached("SELECT doc FROM purchases WHERE task_id = $1")
        .await?;
    let rows = c.query(&stmt, &[&task_id]).await?;
    Ok(rows
        .iter()
        .map(|r| shared::decode(r.get(0)))
        .collect::<Result<_, _>>()?)
}
