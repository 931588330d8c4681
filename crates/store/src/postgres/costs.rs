//! The costs table's SQL on PostgreSQL (see [`crate::costs`]).

use deadpool_postgres::GenericClient;

use super::Fail;
use crate::costs::{self as shared, Columns, Cost, CostState, COLUMNS};
use crate::error::{pg, StoreError};
use mapping::task::time::format_rfc3339_offset;

impl Columns for tokio_postgres::Row {
    fn text(&self, i: usize) -> Result<Option<String>, StoreError> {
        self.try_get(i).map_err(pg)
    }

    fn int(&self, i: usize) -> Result<Option<i64>, StoreError> {
        self.try_get(i).map_err(pg)
    }
}

/// Appends `cost` to the ledger.
pub(super) async fn save(c: &impl GenericClient, cost: &Cost) -> Result<(), Fail> {
    insert(c, cost).await.map(|_| ())
}

/// Appends `cost`; its row's number.
async fn insert(c: &impl GenericClient, cost: &Cost) -> Result<i64, Fail> {
    let amount = shared::amount_column(cost)?;
    let stmt = c
        .prepare_cached(&format!(
            "INSERT INTO costs ({COLUMNS})
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
             RETURNING seq"
        ))
        .await?;
    let row = c
        .query_one(
            &stmt,
            &[
                &cost.task_id,
                &cost.route,
                &format_rfc3339_offset(cost.at),
                &cost.rail,
                &cost.state.name(),
                &cost.scheme,
                &cost.network,
                &cost.asset,
                &cost.pay_to,
                &amount,
                &cost.payer,
                &cost.transaction,
                &cost.detail,
                &cost.required,
                &cost.response,
            ],
        )
        .await?;
    Ok(row.try_get(0)?)
}

/// Records `cost`, a payment about to leave (`sending`), if the task's signed payments and its
/// amount stay within `cap`; its row's number. The task's payments are locked for the
/// transaction (an advisory lock on its id), so two instances cannot both pass the cap.
pub(super) async fn begin(c: &impl GenericClient, cost: &Cost, cap: u64) -> Result<i64, Fail> {
    let lock = c
        .prepare_cached("SELECT pg_advisory_xact_lock(hashtext('costs:' || $1))")
        .await?;
    c.execute(&lock, &[&cost.task_id]).await?;
    let sum = c.prepare_cached(shared::SIGNED_SUM).await?;
    let spent: i64 = c.query_one(&sum, &[&cost.task_id]).await?.try_get(0)?;
    shared::within_cap(spent, cost.amount.unwrap_or(0), cap)?;
    insert(c, cost).await
}

/// Records what came of the payment on row `seq` (still `sending`).
pub(super) async fn finish(c: &impl GenericClient, seq: i64, cost: &Cost) -> Result<(), Fail> {
    let amount = shared::amount_column(cost)?;
    let stmt = c.prepare_cached(&shared::finish_sql('$')).await?;
    let n = c
        .execute(
            &stmt,
            &[
                &seq,
                &cost.state.name(),
                &amount,
                &cost.transaction,
                &cost.detail,
                &cost.response,
            ],
        )
        .await?;
    if n == 0 {
        return Err(
            StoreError::Backend(format!("cost row {seq} is not a payment on its way")).into(),
        );
    }
    Ok(())
}

/// Records what came of task `task_id`'s oldest payment awaiting its receipt; whether there was
/// one.
pub(super) async fn finish_of_task(
    c: &impl GenericClient,
    task_id: &str,
    cost: &Cost,
) -> Result<bool, Fail> {
    let amount = shared::amount_column(cost)?;
    let stmt = c.prepare_cached(&shared::finish_of_task_sql('$')).await?;
    let n = c
        .execute(
            &stmt,
            &[
                &task_id,
                &cost.state.name(),
                &amount,
                &cost.transaction,
                &cost.detail,
                &cost.response,
                &shared::AWAITS_RECEIPT,
            ],
        )
        .await?;
    Ok(n > 0)
}

/// The costs of a task, in the order written.
pub(super) async fn of_task(c: &impl GenericClient, task_id: &str) -> Result<Vec<Cost>, Fail> {
    matching(c, "task_id", task_id).await
}

/// The costs in `state`, in the order written.
pub(super) async fn in_state(c: &impl GenericClient, state: CostState) -> Result<Vec<Cost>, Fail> {
    matching(c, "state", state.name()).await
}

async fn matching(c: &impl GenericClient, column: &str, value: &str) -> Result<Vec<Cost>, Fail> {
    let stmt = c
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM costs WHERE {column} = $1 ORDER BY seq"
        ))
        .await?;
    let rows = c.query(&stmt, &[&value]).await?;
    Ok(rows.iter().map(shared::read).collect::<Result<_, _>>()?)
}
