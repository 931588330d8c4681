//! The costs table's SQL on PostgreSQL (see [`crate::costs`]).

use deadpool_postgres::GenericClient;

use super::{pg, Fail};
use crate::costs::{self as shared, Columns, Cost, COLUMNS};
use crate::store::StoreError;
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
    let amount = shared::amount_column(cost)?;
    let stmt = c
        .prepare_cached(&format!(
            "INSERT INTO costs ({COLUMNS})
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)"
        ))
        .await?;
    c.execute(
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
    Ok(())
}

/// The costs of a task, in the order written.
pub(super) async fn of_task(c: &impl GenericClient, task_id: &str) -> Result<Vec<Cost>, Fail> {
    let stmt = c
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM costs WHERE task_id = $1 ORDER BY seq"
        ))
        .await?;
    let rows = c.query(&stmt, &[&task_id]).await?;
    Ok(rows.iter().map(shared::read).collect::<Result<_, _>>()?)
}
