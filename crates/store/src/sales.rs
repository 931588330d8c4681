//! Sales: what a client paid interlingua on a rail of its own (an x402 authorisation), one
//! record per payment beside the task it paid for, and the `sales` table's SQL.
//!
//! A sale moves the ledger twice, each time in the transaction that writes its record: when it
//! is opened, the authorised amount is granted to the payer's account (the task's hold then
//! comes out of it, as a plan's would); when it is closed, what was authorised but not settled
//! is revoked. A record is written before a settlement is sent and after its answer, so that a
//! crash between the two is found and resolved, never sent blind a second time.

use chrono::{DateTime, Utc};
use rusqlite::{params, Connection};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::credits::{Account, Balance};
use super::documents;
use super::error::{backend, StoreError};
use mapping::task::time::format_rfc3339_offset;

/// Where a sale stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SaleState {
    /// Verified and held; nothing settled yet.
    Authorised,
    /// A settlement is being sent (recorded before it is): after a crash, whether it reached
    /// the chain is found out before anything is sent again.
    Settling,
    /// Settled: `settled` moved on chain (`transaction`).
    Settled,
    /// The settlement was refused or failed; nothing moved.
    Failed,
    /// Never to be settled: the request it paid for failed first, or nothing was owed.
    Void,
    /// A settlement whose outcome could not be found out after a crash: the operator decides.
    Unknown,
}

impl SaleState {
    pub fn name(self) -> &'static str {
        match self {
            SaleState::Authorised => "authorised",
            SaleState::Settling => "settling",
            SaleState::Settled => "settled",
            SaleState::Failed => "failed",
            SaleState::Void => "void",
            SaleState::Unknown => "unknown",
        }
    }

    /// Nothing more will be done about it.
    pub fn is_final(self) -> bool {
        !matches!(self, SaleState::Authorised | SaleState::Settling)
    }
}

/// One sale, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sale {
    /// The rail's own key for the payment, unique across sales (x402: network, payer and the
    /// authorisation's nonce): a payment presented twice is one sale.
    pub reference: String,
    /// `x402`.
    pub rail: String,
    pub task_id: String,
    /// The payer's account in the ledger.
    pub plan: String,
    pub subject: String,
    pub state: SaleState,
    /// `exact` or `upto`.
    pub scheme: String,
    pub network: String,
    pub asset: String,
    pub payer: String,
    /// The atomic units the payer authorised (granted to the account when opened).
    pub authorised: u64,
    /// What was settled, once it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settled: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transaction: Option<String>,
    /// When the authorisation can no longer be settled.
    #[serde(serialize_with = "mapping::task::time::serialize_rfc3339")]
    pub deadline: DateTime<Utc>,
    /// Why it is in its state, in words (the facilitator's reason).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// What the settlement sends: the client's payload and the requirements it was verified
    /// against, verbatim.
    pub payload: Value,
    pub requirements: Value,
    /// The calls made to the facilitator for it, oldest first.
    #[serde(default)]
    pub calls: Vec<Value>,
    #[serde(serialize_with = "mapping::task::time::serialize_rfc3339")]
    pub created_at: DateTime<Utc>,
    #[serde(serialize_with = "mapping::task::time::serialize_rfc3339")]
    pub updated_at: DateTime<Utc>,
}

impl Sale {
    pub fn account(&self) -> Account {
        Account::new(&self.plan, &self.subject)
    }
}

/// A sale as the `sales` table holds it (beside the columns `Sale` has itself).
pub(crate) struct Record {
    pub(crate) deadline: String,
    pub(crate) created_at: String,
    pub(crate) updated_at: String,
    pub(crate) doc: String,
}

impl Record {
    /// The record of `s`; [`StoreError::TooDeep`] if it could not be read back.
    pub(crate) fn new(s: &Sale) -> Result<Record, StoreError> {
        Ok(Record {
            doc: documents::encode(s, "sale")?,
            deadline: format_rfc3339_offset(s.deadline),
            created_at: format_rfc3339_offset(s.created_at),
            updated_at: format_rfc3339_offset(s.updated_at),
        })
    }
}

/// A stored sale's document, decoded.
pub(crate) fn decode(doc: &str) -> Result<Sale, StoreError> {
    documents::decode(doc, "sale")
}

/// The ledger note of a sale's grant and revoke rows, by which `credits verify` finds them.
pub fn note(s: &Sale, what: &str) -> String {
    format!("{} {what} {}", s.rail, s.reference)
}

/// Opens `s`: inserts it ([`StoreError::Duplicate`] when its reference was seen before: a
/// payment presented again) and grants what it authorises to the payer's account.
pub(super) fn open(c: &Connection, s: &Sale) -> Result<Balance, StoreError> {
    let r = Record::new(s)?;
    let n = c
        .prepare_cached(
            "INSERT INTO sales (reference, task_id, rail, state, deadline, created_at, updated_at, doc)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT (reference) DO NOTHING",
        )
        .and_then(|mut st| {
            st.execute(params![
                s.reference,
                s.task_id,
                s.rail,
                s.state.name(),
                r.deadline,
                r.created_at,
                r.updated_at,
                r.doc
            ])
        })
        .map_err(backend)?;
    if n == 0 {
        return Err(StoreError::Duplicate(s.reference.clone()));
    }
    super::ledger::grant(
        c,
        &s.account(),
        s.authorised as i64,
        Some(&note(s, "authorised")),
    )
}

/// Writes `s` over its earlier record if that is still in state `from` and, when `revoke` is
/// above 0, takes that much back from the payer's account (what was authorised and granted, but
/// not settled). `false`: the record had moved on, nothing was written.
pub(super) fn save(
    c: &Connection,
    s: &Sale,
    from: SaleState,
    revoke: u64,
) -> Result<bool, StoreError> {
    let r = Record::new(s)?;
    let n = c
        .prepare_cached(
            "UPDATE sales SET state = ?2, deadline = ?3, updated_at = ?4, doc = ?5
             WHERE reference = ?1 AND state = ?6",
        )
        .and_then(|mut st| {
            st.execute(params![
                s.reference,
                s.state.name(),
                r.deadline,
                r.updated_at,
                r.doc,
                from.name()
            ])
        })
        .map_err(backend)?;
    if n == 0 {
        return Ok(false);
    }
    if revoke > 0 {
        super::ledger::revoke(c, &s.account(), revoke as i64, &note(s, "not settled"))?;
    }
    Ok(true)
}

/// The sale with this reference.
pub(super) fn get(c: &Connection, reference: &str) -> Result<Option<Sale>, StoreError> {
    documents::one(
        c,
        "SELECT doc FROM sales WHERE reference = ?1",
        [reference],
        decode,
    )
}

/// The sales of a task, oldest first.
pub(super) fn of_task(c: &Connection, task_id: &str) -> Result<Vec<Sale>, StoreError> {
    documents::all(
        c,
        "SELECT doc FROM sales WHERE task_id = ?1 ORDER BY created_at",
        [task_id],
        decode,
    )
}

/// The states of a sale not yet final.
pub(crate) const OPEN: &[SaleState] = &[SaleState::Authorised, SaleState::Settling];
/// The states of a sale neither settled nor void.
pub(crate) const UNSETTLED: &[SaleState] = &[
    SaleState::Authorised,
    SaleState::Settling,
    SaleState::Failed,
    SaleState::Unknown,
];

/// `SELECT doc FROM sales WHERE state IN (…states…) ORDER BY created_at` (the names are the
/// enum's own, never input).
pub(crate) fn in_states_sql(states: &[SaleState]) -> String {
    let names: Vec<String> = states.iter().map(|s| format!("'{}'", s.name())).collect();
    format!(
        "SELECT doc FROM sales WHERE state IN ({}) ORDER BY created_at",
        names.join(", ")
    )
}

/// The sales in one of `states`, oldest first.
pub(super) fn in_states(c: &Connection, states: &[SaleState]) -> Result<Vec<Sale>, StoreError> {
    documents::all(c, &in_states_sql(states), [], decode)
}
