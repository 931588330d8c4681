//! Purchases: what interlingua bought from an agent on the agent's own payment rail, one record
//! beside the task it paid for, and the `purchases` table's SQL.

use chrono::{DateTime, Utc};
use rusqlite::{params, Connection};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::documents;
use super::error::{backend, StoreError};
use mapping::task::time::format_rfc3339_offset;

/// Where a purchase stands, as interlingua follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PurchaseState {
    /// Decided, not yet accepted by the payment service (it did not answer: tried again).
    Pending,
    /// Accepted by the payment service; the funds are not locked yet.
    Requested,
    /// The funds are locked: the agent may work.
    Locked,
    /// Not made: the payment service refused it, or the agent's payment request did not pass
    /// the mapping's `before_payment` checks.
    Refused,
    /// Not locked in time (`payByTime` and the node's grace passed, or the node gave up).
    Expired,
    /// The agent failed or did not deliver in time: a refund was requested.
    RefundRequested,
    /// A refund was due but the payment service did not take the request.
    RefundFailed,
}

impl PurchaseState {
    pub fn name(self) -> &'static str {
        match self {
            PurchaseState::Pending => "pending",
            PurchaseState::Requested => "requested",
            PurchaseState::Locked => "locked",
            PurchaseState::Refused => "refused",
            PurchaseState::Expired => "expired",
            PurchaseState::RefundRequested => "refund_requested",
            PurchaseState::RefundFailed => "refund_failed",
        }
    }

    /// Nothing more will be done about it.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            PurchaseState::Refused
                | PurchaseState::Expired
                | PurchaseState::RefundRequested
                | PurchaseState::RefundFailed
        )
    }
}

/// One purchase, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Purchase {
    pub task_id: String,
    /// The payment service's kind (`masumi`).
    pub rail: String,
    /// The rail's own key for the purchase (a Masumi `blockchainIdentifier`).
    pub reference: String,
    pub state: PurchaseState,
    /// Why it is in its state, in words (the service's error, the deadline that passed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// What was sent to buy it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<Value>,
    /// The payment service's latest view of it (a Masumi Purchase object), verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<Value>,
    /// The calls made to the payment service for it, oldest first (`purchase`, `status`,
    /// `request_refund`), each with the HTTP status it got.
    #[serde(default)]
    pub calls: Vec<Value>,
    #[serde(serialize_with = "mapping::task::time::serialize_rfc3339")]
    pub created_at: DateTime<Utc>,
    #[serde(serialize_with = "mapping::task::time::serialize_rfc3339")]
    pub updated_at: DateTime<Utc>,
}

/// A purchase as the `purchases` table holds it (beside the columns `Purchase` has itself).
pub(crate) struct Record {
    pub(crate) created_at: String,
    pub(crate) updated_at: String,
    pub(crate) doc: String,
}

impl Record {
    /// The record of `p`; [`StoreError::TooDeep`] if it could not be read back.
    pub(crate) fn new(p: &Purchase) -> Result<Record, StoreError> {
        let doc = documents::encode(p, "purchase")?;
        Ok(Record {
            created_at: format_rfc3339_offset(p.created_at),
            updated_at: format_rfc3339_offset(p.updated_at),
            doc,
        })
    }
}

/// A stored purchase's document, decoded.
pub(crate) fn decode(doc: &str) -> Result<Purchase, StoreError> {
    documents::decode(doc, "purchase")
}

/// Writes `p` (inserting it, or replacing the task's earlier record).
pub(super) fn save(c: &Connection, p: &Purchase) -> Result<(), StoreError> {
    let r = Record::new(p)?;
    c.prepare_cached(
        "INSERT INTO purchases (task_id, rail, reference, state, created_at, updated_at, doc)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT (task_id) DO UPDATE SET
             reference = excluded.reference, state = excluded.state,
             updated_at = excluded.updated_at, doc = excluded.doc",
    )
    .and_then(|mut s| {
        s.execute(params![
            p.task_id,
            p.rail,
            p.reference,
            p.state.name(),
            r.created_at,
            r.updated_at,
            r.doc
        ])
    })
    .map_err(backend)?;
    Ok(())
}

/// The purchases made for a task (none, or one).
pub(super) fn of_task(c: &Connection, task_id: &str) -> Result<Vec<Purchase>, StoreError> {
    documents::all(
        c,
        "SELECT doc FROM purchases WHERE task_id = ?1",
        [task_id],
        decode,
    )
}
