//! Who a request without a token is, on a route that takes x402: the gate before an operation
//! runs (no payment: 402 with the requirements; a payment: verified, its payer the caller; a
//! known sale's payer: for their own tasks), and what a paid task costs.

use crate::auth::Identity;
use crate::engine::{Engine, Translated};
use crate::error::ProxyError;
use crate::payment::x402::accept::{self, Presented, Refusal, Verified, PLAN_PREFIX};
use crate::payment::x402::offer::Scheme;
use crate::payment::x402::wire::PAYMENT_SIGNATURE;
use mapping::dialect::Message;
use mapping::task::{Operation, StepPrice, Task};

/// What the gate decided for a request on a route that takes x402.
pub(in crate::engine) enum Admission {
    /// Nothing to do: no x402 here, a token holder, or an operation anyone may call.
    Free,
    /// The payer of a known sale, for their own tasks.
    Payer(Identity),
    /// A new payment, verified: it pays for the task this request creates.
    Paid(Box<Verified>),
    /// A create without a payment whose front keeps it as a task waiting to be paid for in
    /// band (its op's `unpaid`): what it would have been refused with, the requirements.
    Unpaid(Box<Refusal>),
}

/// Why a task waits for its client to pay for it in band (the A2A x402 extension): stored
/// without a subject, credits or an upstream id until a payment names it
/// (`Task::awaits_first_payment`).
pub(in crate::engine) const PAYMENT_REQUIRED: &str = "payment_required";

pub(in crate::engine) fn refused(r: Box<Refusal>) -> ProxyError {
    ProxyError::PaymentRefused(r)
}

impl Engine {
    /// Decides who a request without a token is, on a route that takes x402. Operations that
    /// describe the agent are free; a create needs a new payment; the rest need the payment
    /// that created the caller's task (its `PAYMENT-SIGNATURE` again), as a token holder
    /// presents their token again. A payment comes in the header, or where the front carries
    /// it (`in_band`: what its mapping read into `request.payment`).
    pub(in crate::engine) async fn admit_payment(
        &self,
        t: &Translated,
        op: Operation,
        msg: &Message,
        in_band: Option<&serde_json::Value>,
        identity: Option<&Identity>,
        url: &str,
    ) -> Result<Admission, ProxyError> {
        let Some(accept) = &t.x402 else {
            return Ok(Admission::Free);
        };
        if identity.is_some()
            || matches!(
                op,
                Operation::Describe | Operation::Availability | Operation::InputSchema
            )
        {
            return Ok(Admission::Free);
        }
        let presented = match (
            msg.header(PAYMENT_SIGNATURE),
            in_band.filter(|v| !v.is_null()),
        ) {
            (Some(h), _) => Some(Presented::Header(h)),
            (None, Some(v)) => Some(Presented::InBand(v)),
            (None, None) => None,
        };
        let Some(presented) = presented else {
            return Err(refused(accept::refusal(
                accept,
                url,
                402,
                "payment_required",
                "this route takes x402 payments: pay one of the offers in PAYMENT-REQUIRED and send it as PAYMENT-SIGNATURE".to_string(),
            )));
        };
        let (payload, offer) = accept::read(accept, url, presented).map_err(refused)?;
        let known = match accept::reference(&payload) {
            Some(r) => self.store.sale(&r).await.map_err(ProxyError::Store)?,
            None => None,
        };
        match (op, known) {
            (Operation::CreateTask, Some(_)) => Err(refused(accept::refusal(
                accept,
                url,
                402,
                "payment_already_used",
                "this payment has paid for a task already: sign a new one".to_string(),
            ))),
            (_, Some(sale)) => Ok(Admission::Payer(accept::identity(
                &sale.network,
                &sale.payer,
                &sale.asset,
            ))),
            (Operation::CreateTask | Operation::ProvideInput, None) => {
                let verified = accept::verify(&self.client, accept, url, payload, offer)
                    .await
                    .map_err(refused)?;
                Ok(Admission::Paid(Box::new(verified)))
            }
            (_, None) => Err(refused(accept::refusal(
                accept,
                url,
                402,
                "payment_unknown",
                "this payment paid for no task here: present the payment that created your task, or pay to create one".to_string(),
            ))),
        }
    }
}

/// What a task paid with `v` costs: `exact` the call's price once, for the task as a whole;
/// `upto` each completed step, up to the signed maximum (the hold).
pub(in crate::engine) fn price_of(v: &Verified) -> StepPrice {
    match v.offer.scheme {
        Scheme::Exact => StepPrice {
            step: v.offer.amount,
            from_agent: false,
            min: 0,
            max: u64::MAX,
            failed: 0,
            per_task: true,
        },
        Scheme::Upto => StepPrice {
            step: v.offer.per_step,
            from_agent: false,
            min: 0,
            max: u64::MAX,
            failed: 0,
            per_task: false,
        },
    }
}

/// Whether `task` was paid for with x402 (its account is a payer's).
pub(in crate::engine) fn paid_task(task: &Task) -> bool {
    task.plan
        .as_deref()
        .is_some_and(|p| p.starts_with(PLAN_PREFIX))
}
