//! Escrow sales: jobs interlingua sold as the seller on an escrow rail (a Masumi payment request),
//! one record per task, and the `escrow_sales` table's SQL.
//!
//! A record is written before anything is asked of the rail (the payment request is made once,
//! never blind a second time) and outlives its task (the chain's verdict comes hours after the
//! job). Each write names the state it moves the record from, so no move is made twice; the
//! ledger moves in the same transaction ([`EscrowMove`]): when the buyer locks funds, they are
//! granted to the buyer's account and held for the task, as a plan's credits would be; when the
//! chain decides, what the seller withdrew is captured and the rest is revoked.

use chrono::{DateTime, Utc};
use rusqlite::{params, Connection};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::credits::{Account, Capture, Settlement};
use super::documents;
use super::error::{backend, StoreError};
use mapping::task::time::format_rfc3339_offset;
use mapping::task::Task;

/// Where a sale on an escrow rail (a Masumi payment request interlingua made as the seller)
/// stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EscrowState {
    /// Recorded; the payment request is not answered yet.
    Requesting,
    /// The node made the payment request; the buyer has not locked funds yet.
    Requested,
    /// The buyer's funds are locked: the job may run.
    Locked,
    /// The result hash is about to be (or being) submitted; `result_hash` is set.
    Submitting,
    /// The node took the result hash.
    Submitted,
    /// Final: the funds went to the seller.
    Withdrawn,
    /// Final: the funds went back to the buyer.
    Refunded,
    /// Final: a dispute was settled by splitting the funds.
    Split,
    /// Final: the node refused the payment request.
    Refused,
    /// Final: the node never answered the payment request (it is never sent again).
    Unanswered,
    /// Final: no lock by the deadline (or the node judged the lock invalid).
    Expired,
}

impl EscrowState {
    /// The states not final, in the order a sale goes through them.
    pub const OPEN: &'static [EscrowState] = &[
        EscrowState::Requesting,
        EscrowState::Requested,
        EscrowState::Locked,
        EscrowState::Submitting,
        EscrowState::Submitted,
    ];
    /// The states of a sale waiting for its buyer's lock: a start sent again while its sale is
    /// in one of them is the same job (the table's `escrow_sales_retry`).
    pub const WAITING: &'static [EscrowState] = &[EscrowState::Requesting, EscrowState::Requested];

    /// The state's word, as stored and serialized.
    pub fn name(self) -> &'static str {
        match self {
            EscrowState::Requesting => "requesting",
            EscrowState::Requested => "requested",
            EscrowState::Locked => "locked",
            EscrowState::Submitting => "submitting",
            EscrowState::Submitted => "submitted",
            EscrowState::Withdrawn => "withdrawn",
            EscrowState::Refunded => "refunded",
            EscrowState::Split => "split",
            EscrowState::Refused => "refused",
            EscrowState::Unanswered => "unanswered",
            EscrowState::Expired => "expired",
        }
    }

    /// Nothing more will be done about it.
    pub fn is_final(self) -> bool {
        !EscrowState::OPEN.contains(&self)
    }
}

/// One escrow sale, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EscrowSale {
    /// The task sold: one sale per task.
    pub task_id: String,
    pub route: String,
    /// `masumi`.
    pub rail: String,
    /// The rail's key for the payment (a `blockchainIdentifier`), once the node answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// The buyer's identifier for the job (`identifierFromPurchaser`).
    pub client_ref: String,
    pub input_hash: String,
    pub state: EscrowState,
    /// When the sweep should next look at it.
    #[serde(serialize_with = "mapping::task::time::serialize_rfc3339")]
    pub due: DateTime<Utc>,
    /// Why it is in its state, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// What was sent to make the payment request, verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<Value>,
    /// The node's latest view of the payment, verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<Value>,
    /// The buyer's account in the ledger, once the funds are locked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// What the buyer locked, in the rail's smallest unit (granted to the account when locked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amount: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_hash: Option<String>,
    /// The calls made to the node for it, oldest first.
    #[serde(default)]
    pub calls: Vec<Value>,
    #[serde(serialize_with = "mapping::task::time::serialize_rfc3339")]
    pub created_at: DateTime<Utc>,
    #[serde(serialize_with = "mapping::task::time::serialize_rfc3339")]
    pub updated_at: DateTime<Utc>,
}

impl EscrowSale {
    /// The buyer's account, once it is known (both `plan` and `subject`).
    pub fn account(&self) -> Option<Account> {
        Some(Account::new(
            self.plan.as_deref()?,
            self.subject.as_deref()?,
        ))
    }
}

/// What a save moves in the ledger, in the same transaction as the sale's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EscrowMove {
    /// Nothing: any move that neither locks a sale nor closes a locked one.
    None,
    /// The buyer locked funds: `amount` granted to `account` (note `<rail> locked <reference>`)
    /// and held for the sale's task, as a task's credits are held. The move from `requesting`
    /// or `requested` to `locked` makes it (and only it), naming the sale's own account and
    /// amount.
    Lock { account: Account, amount: u64 },
    /// The chain's verdict: `captured` charged to the task (a capture, step `<rail>:withdrawn`,
    /// at most once: from what is left of the task's hold if it is still open, else from the
    /// balance), the rest of the hold released, then what the sale's `amount` exceeds
    /// `captured` by revoked from the account (note `<rail> refunded <reference>`; never below
    /// zero). `captured == 0` is a refund. The move from `locked`, `submitting` or `submitted`
    /// to a final state makes it (and only it), `captured` at most the amount.
    Close { captured: u64 },
}

/// An [`EscrowMove`] in the ledger's terms, checked against the sale and the state it moves
/// from: what each backend writes.
pub(crate) enum Moves {
    None,
    Lock {
        account: Account,
        amount: i64,
        note: String,
    },
    Close {
        account: Account,
        settlement: Settlement,
        revoke: i64,
        note: String,
    },
}

impl Moves {
    /// What `m` writes when `s` moves from `from`; a [`StoreError::Backend`] naming the sale
    /// when `m` is not the move's (see [`Funds`]), or names another account or amount than the
    /// sale's, or more withdrawn than was locked.
    pub(crate) fn of(
        s: &EscrowSale,
        from: EscrowState,
        m: &EscrowMove,
    ) -> Result<Moves, StoreError> {
        let refused = |why: &str| {
            StoreError::Backend(format!(
                "escrow sale of task {}: {why} (from {} to {})",
                s.task_id,
                from.name(),
                s.state.name()
            ))
        };
        let (before, after) = (from.funds(), s.state.funds());
        let fits = match m {
            EscrowMove::None => before == after || (before, after) == (Funds::Waiting, Funds::Done),
            EscrowMove::Lock { .. } => before == Funds::Waiting && s.state == EscrowState::Locked,
            EscrowMove::Close { .. } => (before, after) == (Funds::Locked, Funds::Done),
        };
        if !fits {
            return Err(refused(
                "its funds are locked as it becomes locked, closed as it leaves the locked states, and moved at no other time",
            ));
        }
        let out_of_range = || refused("the amount is beyond the ledger's range");
        match m {
            EscrowMove::None => Ok(Moves::None),
            EscrowMove::Lock { account, amount } => {
                if s.account().as_ref() != Some(account) || s.amount != Some(*amount) {
                    return Err(refused("a lock grants the sale's own account its amount"));
                }
                Ok(Moves::Lock {
                    account: account.clone(),
                    amount: units(*amount).ok_or_else(out_of_range)?,
                    note: note(s, "locked"),
                })
            }
            EscrowMove::Close { captured } => {
                let (Some(account), Some(amount)) = (s.account(), s.amount) else {
                    return Err(refused("a close needs the sale's account and amount"));
                };
                let Some(rest) = amount.checked_sub(*captured) else {
                    return Err(refused("more withdrawn than was locked"));
                };
                units(amount).ok_or_else(out_of_range)?;
                let captures = (*captured > 0)
                    .then(|| Capture {
                        step_id: format!("{}:withdrawn", s.rail),
                        amount: *captured,
                    })
                    .into_iter()
                    .collect();
                Ok(Moves::Close {
                    account,
                    settlement: Settlement {
                        captures,
                        release: true,
                    },
                    revoke: units(rest).ok_or_else(out_of_range)?,
                    note: note(s, "refunded"),
                })
            }
        }
    }
}

/// Where a sale's funds are, by its state: what decides which [`EscrowMove`] a move of it
/// makes. Funds only go forward: a move that crosses from waiting to locked is an
/// [`EscrowMove::Lock`] (to `locked`), one from locked to done an [`EscrowMove::Close`], any
/// other (within one, or from waiting straight to done: nothing was locked) moves nothing, and
/// none goes back. So a sale's funds are granted once and closed once, and none is left
/// granted or held when its sale is final.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Funds {
    /// Not locked yet (`requesting`, `requested`).
    Waiting,
    /// Locked, granted and held (`locked`, `submitting`, `submitted`).
    Locked,
    /// The sale is final: closed, or never locked.
    Done,
}

impl EscrowState {
    fn funds(self) -> Funds {
        if EscrowState::WAITING.contains(&self) {
            Funds::Waiting
        } else if self.is_final() {
            Funds::Done
        } else {
            Funds::Locked
        }
    }
}

/// Nothing, when `s` is the sale of `task` (its id and route); else a [`StoreError::Backend`].
pub(crate) fn belongs_to(task: &Task, s: &EscrowSale) -> Result<(), StoreError> {
    if s.task_id != task.id || s.route != task.route {
        return Err(StoreError::Backend(format!(
            "the escrow sale of task {} on route {} is not task {}'s on route {}",
            s.task_id, s.route, task.id, task.route
        )));
    }
    Ok(())
}

/// `amount` as the ledger keeps it, if it can.
fn units(amount: u64) -> Option<i64> {
    i64::try_from(amount).ok()
}

/// The ledger note of a sale's grant and revoke rows: `<rail> <what> <reference>` (the task's
/// id while the rail has given none).
fn note(s: &EscrowSale, what: &str) -> String {
    let reference = s.reference.as_deref().unwrap_or(&s.task_id);
    format!("{} {what} {reference}", s.rail)
}

/// A sale as the `escrow_sales` table holds it (beside the columns `EscrowSale` has itself).
pub(crate) struct Record {
    /// Formatted so that the text order is the time order (see [`format_rfc3339_offset`]).
    pub(crate) due: String,
    pub(crate) created_at: String,
    pub(crate) updated_at: String,
    pub(crate) doc: String,
}

impl Record {
    /// The record of `s`; [`StoreError::TooDeep`] if it could not be read back.
    pub(crate) fn new(s: &EscrowSale) -> Result<Record, StoreError> {
        Ok(Record {
            doc: documents::encode(s, "escrow sale")?,
            due: format_rfc3339_offset(s.due),
            created_at: format_rfc3339_offset(s.created_at),
            updated_at: format_rfc3339_offset(s.updated_at),
        })
    }
}

/// A stored sale's document, decoded.
pub(crate) fn decode(doc: &str) -> Result<EscrowSale, StoreError> {
    documents::decode(doc, "escrow sale")
}

/// `'requesting', 'requested'`: states as SQL text (the names are the enum's own, never input).
fn states_sql(states: &[EscrowState]) -> String {
    let names: Vec<String> = states.iter().map(|s| format!("'{}'", s.name())).collect();
    names.join(", ")
}

// The statements both backends run, with the backend's parameter sign `p` (`?` or `$`).

/// Inserts a sale (`{p}1`…`{p}11`: the columns) unless a twin waits for its lock: nothing is
/// inserted then (the partial unique index `escrow_sales_retry`).
pub(crate) fn insert_sql(p: char) -> String {
    format!(
        "INSERT INTO escrow_sales (task_id, route, rail, reference, client_ref, input_hash, state,
                                   due, created_at, updated_at, doc)
         VALUES ({p}1, {p}2, {p}3, {p}4, {p}5, {p}6, {p}7, {p}8, {p}9, {p}10, {p}11)
         ON CONFLICT (route, client_ref, input_hash) WHERE state IN ({}) DO NOTHING",
        states_sql(EscrowState::WAITING)
    )
}

/// The sale waiting for its lock with a route, client reference and input hash (`{p}1`…`{p}3`).
pub(crate) fn twin_sql(p: char) -> String {
    format!(
        "SELECT doc FROM escrow_sales
         WHERE route = {p}1 AND client_ref = {p}2 AND input_hash = {p}3 AND state IN ({})",
        states_sql(EscrowState::WAITING)
    )
}

/// Writes a sale over its record (`{p}1`: the task) if that is still in state `{p}7`.
pub(crate) fn save_sql(p: char) -> String {
    format!(
        "UPDATE escrow_sales SET reference = {p}2, state = {p}3, due = {p}4, updated_at = {p}5,
                                 doc = {p}6
         WHERE task_id = {p}1 AND state = {p}7"
    )
}

/// A task's sale (`{p}1`).
pub(crate) fn get_sql(p: char) -> String {
    format!("SELECT doc FROM escrow_sales WHERE task_id = {p}1")
}

/// The open sales due at `{p}1`, soonest due first, at most `{p}2` (through `escrow_sales_due`,
/// whose condition this repeats).
pub(crate) fn due_sql(p: char) -> String {
    format!(
        "SELECT doc FROM escrow_sales WHERE state IN ({}) AND due <= {p}1
         ORDER BY due, task_id LIMIT {p}2",
        states_sql(EscrowState::OPEN)
    )
}

/// The latest sales, newest first, at most `{p}1`; only the open ones when `open`.
pub(crate) fn latest_sql(p: char, open: bool) -> String {
    let only = if open {
        format!("WHERE state IN ({})", states_sql(EscrowState::OPEN))
    } else {
        String::new()
    };
    format!("SELECT doc FROM escrow_sales {only} ORDER BY created_at DESC, task_id DESC LIMIT {p}1")
}

// SQLite.

/// Inserts `s` (recorded as `r`); `false`, nothing written, when a twin waits for its lock;
/// [`StoreError::Duplicate`] when its task has a sale already.
pub(super) fn insert(c: &Connection, s: &EscrowSale, r: &Record) -> Result<bool, StoreError> {
    let inserted = c.prepare_cached(&insert_sql('?')).and_then(|mut st| {
        st.execute(params![
            s.task_id,
            s.route,
            s.rail,
            s.reference,
            s.client_ref,
            s.input_hash,
            s.state.name(),
            r.due,
            r.created_at,
            r.updated_at,
            r.doc
        ])
    });
    match inserted {
        Ok(n) => Ok(n == 1),
        // The only constraint left to break (the twins' is `DO NOTHING`): the task's id.
        Err(rusqlite::Error::SqliteFailure(e, _))
            if e.code == rusqlite::ErrorCode::ConstraintViolation =>
        {
            Err(StoreError::Duplicate(s.task_id.clone()))
        }
        Err(e) => Err(backend(e)),
    }
}

/// The sale waiting for its lock that `s` would repeat.
pub(super) fn twin(c: &Connection, s: &EscrowSale) -> Result<Option<EscrowSale>, StoreError> {
    documents::one(
        c,
        &twin_sql('?'),
        params![s.route, s.client_ref, s.input_hash],
        decode,
    )
}

/// Writes `s` over its record if that is still in state `from`, and moves the ledger as `moves`
/// says; `false`, nothing written, when the record had moved on.
pub(super) fn save(
    c: &Connection,
    s: &EscrowSale,
    r: &Record,
    from: EscrowState,
    moves: &Moves,
) -> Result<bool, StoreError> {
    let n = c
        .prepare_cached(&save_sql('?'))
        .and_then(|mut st| {
            st.execute(params![
                s.task_id,
                s.reference,
                s.state.name(),
                r.due,
                r.updated_at,
                r.doc,
                from.name()
            ])
        })
        .map_err(backend)?;
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
            super::ledger::grant(c, account, *amount, Some(note))?;
            // Just granted, in this transaction: the balance covers the hold.
            super::ledger::hold(c, &s.task_id, account, amount.unsigned_abs())?;
        }
        Moves::Close {
            account,
            settlement,
            revoke,
            note,
        } => {
            super::ledger::settle(c, &s.task_id, settlement)?;
            super::ledger::revoke(c, account, *revoke, note)?;
        }
    }
    Ok(true)
}

/// The sale of a task.
pub(super) fn get(c: &Connection, task_id: &str) -> Result<Option<EscrowSale>, StoreError> {
    documents::one(c, &get_sql('?'), [task_id], decode)
}

/// The open sales due at `now`, soonest due first, at most `limit`.
pub(super) fn due(
    c: &Connection,
    now: DateTime<Utc>,
    limit: u32,
) -> Result<Vec<EscrowSale>, StoreError> {
    documents::all(
        c,
        &due_sql('?'),
        params![format_rfc3339_offset(now), limit],
        decode,
    )
}

/// The latest sales, newest first, at most `limit`; only the open ones when `open`.
pub(super) fn latest(
    c: &Connection,
    open: bool,
    limit: u32,
) -> Result<Vec<EscrowSale>, StoreError> {
    documents::all(c, &latest_sql('?', open), [limit], decode)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queries_name_the_states_of_the_indexes_they_go_through() {
        // A partial index serves a query whose condition repeats the index's own.
        let v9 = crate::migrations::V9;
        assert!(v9.contains(&format!(
            "WHERE state IN ({});",
            states_sql(EscrowState::WAITING)
        )));
        assert!(v9.contains(&format!(
            "WHERE state IN ({});",
            states_sql(EscrowState::OPEN)
        )));
    }

    #[test]
    fn states_serialize_as_their_names_and_the_open_ones_are_not_final() {
        for state in EscrowState::OPEN {
            assert!(!state.is_final());
        }
        let finals = [
            EscrowState::Withdrawn,
            EscrowState::Refunded,
            EscrowState::Split,
            EscrowState::Refused,
            EscrowState::Unanswered,
            EscrowState::Expired,
        ];
        for state in EscrowState::OPEN.iter().chain(&finals) {
            assert_eq!(serde_json::to_value(state).unwrap(), state.name());
        }
        assert!(finals.iter().all(|s| s.is_final()));
    }
}
