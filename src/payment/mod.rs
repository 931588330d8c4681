//! Paying agents on their own rail: interlingua as the purchaser, on the operator's account; and
//! being paid on a rail of its own (x402, a Masumi payment request).
//!
//! A route with a payment service (`payment = { masumi = { … } }`) pays for each job whose back
//! answer carried a payment request (`task.payment`). The engine calls this module at two
//! points only: after the back's create answer ([`Payer::buy`]) and on every refresh of the task
//! ([`Payer::follow`], [`Payer::refund`]); each returns the purchase record to store, and the
//! engine decides from its state what the task becomes. The rail's own protocol lives in one
//! module per rail ([`masumi`]: its purchaser side, and its seller side, [`masumi::sell`], with
//! which the engine sells a route's jobs on the operator's node); [`x402`] holds the x402 rail: its wire and offers, being paid by
//! clients, and paying agents that answer a call with 402 (`payment.pay.x402`: [`x402::pay`],
//! which the engine calls when a back call is answered 402, outside [`Payer`]: such an agent
//! asks per call, not once per job).

pub mod masumi;
pub mod x402;

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::config::PaymentService;
use crate::upstream::Client;
use mapping::task::Task;
pub use store::{Purchase, PurchaseState};

/// One payment service, ready to call.
pub struct Payer<'a> {
    pub client: &'a Client,
    pub service: &'a PaymentService,
}

impl Payer<'_> {
    /// The rail's name, as purchase records carry it.
    pub fn rail(&self) -> &'static str {
        match self.service {
            PaymentService::Masumi(_) => "masumi",
        }
    }

    /// The rail's key for the purchase the task's payment request asks for; `None` when there
    /// is nothing to buy (no request, or an agent that says it is free).
    pub fn reference(&self, task: &Task) -> Option<String> {
        match self.service {
            PaymentService::Masumi(_) => masumi::reference(task.payment.as_ref()?),
        }
    }

    /// A record of a purchase that was not made, and why.
    pub fn not_made(
        &self,
        task: &Task,
        reference: String,
        why: &str,
        now: DateTime<Utc>,
    ) -> Purchase {
        Purchase {
            task_id: task.id.clone(),
            rail: self.rail().to_string(),
            reference,
            state: PurchaseState::Refused,
            detail: Some(why.to_string()),
            request: None,
            service: None,
            calls: Vec::new(),
            created_at: now,
            updated_at: now,
        }
    }

    /// Buys the job: `Requested` when the service took the purchase (or already had it),
    /// `Refused` when it said no, `Pending` when it could not be asked (tried again later).
    pub async fn buy(&self, task: &Task, reference: String, earlier: Option<Purchase>) -> Purchase {
        match self.service {
            PaymentService::Masumi(s) => {
                masumi::buy(self.client, s, task, reference, earlier).await
            }
        }
    }

    /// Follows a purchase: `Locked` once the funds are, `Expired` when they never will be.
    pub async fn follow(&self, task: &Task, purchase: Purchase) -> Purchase {
        match self.service {
            PaymentService::Masumi(s) => masumi::follow(self.client, s, task, purchase).await,
        }
    }

    /// Asks for the funds back (the agent failed, or did not deliver in time).
    pub async fn refund(&self, purchase: Purchase, why: &str) -> Purchase {
        match self.service {
            PaymentService::Masumi(s) => masumi::refund(self.client, s, purchase, why).await,
        }
    }

    /// Whether the agent's time to deliver has passed.
    pub fn delivery_overdue(&self, task: &Task, now: DateTime<Utc>) -> bool {
        match self.service {
            PaymentService::Masumi(_) => task
                .payment
                .as_ref()
                .and_then(|p| masumi::millis(p.get("submitResultTime")?))
                .is_some_and(|due| now.timestamp_millis() > due),
        }
    }
}

/// One call to a payment service, as a purchase record lists it.
pub(crate) fn call_record(
    what: &str,
    status: Option<u16>,
    at: DateTime<Utc>,
    error: Option<&str>,
) -> Value {
    let mut v =
        serde_json::json!({ "call": what, "at": mapping::task::time::format_rfc3339_offset(at) });
    if let Some(s) = status {
        v["status"] = s.into();
    }
    if let Some(e) = error {
        v["error"] = e.into();
    }
    v
}
