//! Costs: what interlingua paid agents (or refused to pay them) on the agents' own rails, one
//! row per payment asked for, against the task it was asked for, and the `costs` table's SQL.
//!
//! The cost ledger is kept apart from the credit ledger on purpose: what a client is charged is
//! the route's price, whatever the agent cost; the two are booked against the same task, so an
//! operator sees the margin per task. A payment signed is written `sending` before it leaves,
//! within the task's cap in the same transaction (so that two instances paying for one task at
//! once cannot both pass it), and takes its outcome once the agent answers; a stop in between
//! leaves it `sending`, counted against the cap, for the operator. A payment made in band (an
//! A2A agent's, whose receipt comes with its task's final message) stays `sending`, saying so
//! ([`AWAITS_RECEIPT`]), until then. A row that has its outcome is never changed again.

use chrono::{DateTime, Utc};
use rusqlite::{params, Connection};
use serde::{Deserialize, Serialize};

use super::error::{backend, StoreError};
use mapping::task::time::format_rfc3339_offset;

/// The detail of a payment `sending` in band: the agent took the message that carried it, and
/// says what came of it with its task's end. Not an outcome unknown while the task runs.
pub const AWAITS_RECEIPT: &str =
    "sent in band: the agent's receipt comes with its task's final message";

/// What came of a payment an agent asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CostState {
    /// Signed and on its way to the agent: what came of it is not recorded (yet). A row a stop
    /// left so may have been paid: it counts against the task's cap.
    Sending,
    /// Signed, sent, and the agent's receipt says it was settled.
    Paid,
    /// Signed and sent, but not settled as far as the agent said (a second demand for payment,
    /// a failed settlement, an error answer). The authorization may still be valid until it
    /// expires, so it counts against the task's cap.
    Failed,
    /// Never signed: outside the route's policy, or not a payment interlingua can make.
    Refused,
}

impl CostState {
    pub fn name(self) -> &'static str {
        match self {
            CostState::Sending => "sending",
            CostState::Paid => "paid",
            CostState::Failed => "failed",
            CostState::Refused => "refused",
        }
    }

    fn parse(s: &str) -> Option<CostState> {
        match s {
            "sending" => Some(CostState::Sending),
            "paid" => Some(CostState::Paid),
            "failed" => Some(CostState::Failed),
            "refused" => Some(CostState::Refused),
            _ => None,
        }
    }

    /// Whether an authorization left interlingua: what a task's cap counts.
    pub fn signed(self) -> bool {
        !matches!(self, CostState::Refused)
    }
}

/// One row of the cost ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cost {
    pub task_id: String,
    pub route: String,
    #[serde(serialize_with = "mapping::task::time::serialize_rfc3339")]
    pub at: DateTime<Utc>,
    /// `x402`.
    pub rail: String,
    pub state: CostState,
    /// The offer chosen (or, refused, the first one offered): `exact`, `upto`, …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,
    /// CAIP-2, e.g. `eip155:8453`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    /// The token contract.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asset: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pay_to: Option<String>,
    /// Atomic units of `asset`: what was authorized (or settled, when the receipt says less);
    /// none when the offer's amount is not one the ledger keeps (beyond `i64`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amount: Option<u64>,
    /// interlingua's paying address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payer: Option<String>,
    /// The settlement's transaction hash, as the agent's receipt names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transaction: Option<String>,
    /// Why it is in its state, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The agent's demand (`PAYMENT-REQUIRED`) and receipt (`PAYMENT-RESPONSE`), verbatim as
    /// the headers carried them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<String>,
}

/// The columns a cost is read from, in [`Cost`]'s order.
pub(crate) const COLUMNS: &str = "task_id, route, at, rail, state, scheme, network, asset, \
     pay_to, amount, payer, transaction_hash, detail, required, response";

/// `c`'s amount as the table keeps it.
pub(crate) fn amount_column(c: &Cost) -> Result<Option<i64>, StoreError> {
    c.amount
        .map(|a| {
            i64::try_from(a).map_err(|_| {
                StoreError::Backend(format!("a cost of {a} is beyond what the ledger keeps"))
            })
        })
        .transpose()
}

/// A row of the `costs` table, whichever backend read it: column `i` of [`COLUMNS`] as text or
/// as an integer, `None` for NULL.
pub(crate) trait Columns {
    fn text(&self, i: usize) -> Result<Option<String>, StoreError>;
    fn int(&self, i: usize) -> Result<Option<i64>, StoreError>;
}

impl Columns for rusqlite::Row<'_> {
    fn text(&self, i: usize) -> Result<Option<String>, StoreError> {
        self.get(i).map_err(backend)
    }

    fn int(&self, i: usize) -> Result<Option<i64>, StoreError> {
        self.get(i).map_err(backend)
    }
}

/// The cost a row of [`COLUMNS`] holds.
pub(crate) fn read(r: &impl Columns) -> Result<Cost, StoreError> {
    let required = |i: usize| {
        r.text(i)?
            .ok_or_else(|| StoreError::Backend(format!("a cost's column {i} is NULL")))
    };
    let at = required(2)?;
    let at = DateTime::parse_from_rfc3339(&at)
        .map_err(|e| StoreError::Backend(format!("a cost's time {at:?}: {e}")))?
        .with_timezone(&Utc);
    let state = required(4)?;
    let state = CostState::parse(&state)
        .ok_or_else(|| StoreError::Backend(format!("a cost's state {state:?} is unknown")))?;
    Ok(Cost {
        task_id: required(0)?,
        route: required(1)?,
        at,
        rail: required(3)?,
        state,
        scheme: r.text(5)?,
        network: r.text(6)?,
        asset: r.text(7)?,
        pay_to: r.text(8)?,
        amount: r.int(9)?.and_then(|a| u64::try_from(a).ok()),
        payer: r.text(10)?,
        transaction: r.text(11)?,
        detail: r.text(12)?,
        required: r.text(13)?,
        response: r.text(14)?,
    })
}

/// Appends `cost` to the ledger.
pub(super) fn save(c: &Connection, cost: &Cost) -> Result<(), StoreError> {
    let amount = amount_column(cost)?;
    c.prepare_cached(&format!(
        "INSERT INTO costs ({COLUMNS})
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)"
    ))
    .and_then(|mut st| {
        st.execute(params![
            cost.task_id,
            cost.route,
            format_rfc3339_offset(cost.at),
            cost.rail,
            cost.state.name(),
            cost.scheme,
            cost.network,
            cost.asset,
            cost.pay_to,
            amount,
            cost.payer,
            cost.transaction,
            cost.detail,
            cost.required,
            cost.response,
        ])
    })
    .map_err(backend)?;
    Ok(())
}

/// The SQL that sums what a task's signed payments took (`?1`/`$1`: the task).
pub(crate) const SIGNED_SUM: &str =
    "SELECT CAST(COALESCE(SUM(amount), 0) AS BIGINT) FROM costs WHERE task_id = $1 AND state <> 'refused'";

/// Whether `amount` more keeps a task that has `spent` within `cap`; the refusal otherwise.
pub(crate) fn within_cap(spent: i64, amount: u64, cap: u64) -> Result<(), StoreError> {
    let spent = u64::try_from(spent).unwrap_or(0);
    if spent.saturating_add(amount) > cap {
        return Err(StoreError::Insufficient {
            available: i64::try_from(cap.saturating_sub(spent)).unwrap_or(i64::MAX),
            needed: amount,
        });
    }
    Ok(())
}

/// The SQL that records a payment's outcome on its `sending` row (`{p}N`: the row, then state,
/// amount, transaction, detail, response), with the backend's parameter sign.
pub(crate) fn finish_sql(p: char) -> String {
    format!(
        "UPDATE costs SET state = {p}2, amount = {p}3, transaction_hash = {p}4, detail = {p}5,
         response = {p}6 WHERE seq = {p}1 AND state = 'sending'"
    )
}

/// [`finish_sql`] for the oldest payment of a task sent in band and awaiting its receipt (`{p}1`:
/// the task; `{p}7`: [`AWAITS_RECEIPT`]): its outcome comes later than the answer to the call
/// that carried it (an A2A agent's receipt comes with the task's final message). `amount`
/// replaces the signed amount only when it is less (an `upto` settles what was owed); NULL
/// keeps it.
pub(crate) fn finish_of_task_sql(p: char) -> String {
    format!(
        "UPDATE costs SET state = {p}2,
         amount = CASE WHEN CAST({p}3 AS BIGINT) <= amount THEN CAST({p}3 AS BIGINT) ELSE amount END,
         transaction_hash = {p}4, detail = {p}5, response = {p}6
         WHERE seq = (SELECT MIN(seq) FROM costs
                      WHERE task_id = {p}1 AND state = 'sending' AND detail = {p}7)"
    )
}

/// Records `cost`, a payment about to leave (`sending`), if the task's signed payments and its
/// amount stay within `cap`; its row's number.
pub(super) fn begin(c: &Connection, cost: &Cost, cap: u64) -> Result<i64, StoreError> {
    let spent: i64 = c
        .prepare_cached(SIGNED_SUM)
        .and_then(|mut st| st.query_row([&cost.task_id], |r| r.get(0)))
        .map_err(backend)?;
    within_cap(spent, cost.amount.unwrap_or(0), cap)?;
    save(c, cost)?;
    Ok(c.last_insert_rowid())
}

/// Records what came of the payment on row `seq` (still `sending`): `cost`'s state, amount,
/// transaction, detail and the agent's receipt.
pub(super) fn finish(c: &Connection, seq: i64, cost: &Cost) -> Result<(), StoreError> {
    let amount = amount_column(cost)?;
    let n = c
        .prepare_cached(&finish_sql('?'))
        .and_then(|mut st| {
            st.execute(params![
                seq,
                cost.state.name(),
                amount,
                cost.transaction,
                cost.detail,
                cost.response
            ])
        })
        .map_err(backend)?;
    if n == 0 {
        return Err(StoreError::Backend(format!(
            "cost row {seq} is not a payment on its way"
        )));
    }
    Ok(())
}

/// Records what came of task `task_id`'s oldest payment awaiting its receipt (see
/// [`finish_of_task_sql`]); whether there was one.
pub(super) fn finish_of_task(
    c: &Connection,
    task_id: &str,
    cost: &Cost,
) -> Result<bool, StoreError> {
    let amount = amount_column(cost)?;
    c.prepare_cached(&finish_of_task_sql('?'))
        .and_then(|mut st| {
            st.execute(params![
                task_id,
                cost.state.name(),
                amount,
                cost.transaction,
                cost.detail,
                cost.response,
                AWAITS_RECEIPT
            ])
        })
        .map(|n| n > 0)
        .map_err(backend)
}

/// The costs of a task, in the order written.
pub(super) fn of_task(c: &Connection, task_id: &str) -> Result<Vec<Cost>, StoreError> {
    matching(c, "task_id", task_id)
}

/// The costs in `state`, in the order written.
pub(super) fn in_state(c: &Connection, state: CostState) -> Result<Vec<Cost>, StoreError> {
    matching(c, "state", state.name())
}

fn matching(c: &Connection, column: &str, value: &str) -> Result<Vec<Cost>, StoreError> {
    let mut st = c
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM costs WHERE {column} = ?1 ORDER BY seq"
        ))
        .map_err(backend)?;
    let mut rows = st.query([value]).map_err(backend)?;
    let mut costs = Vec::new();
    while let Some(r) = rows.next().map_err(backend)? {
        costs.push(read(r)?);
    }
    Ok(costs)
}
