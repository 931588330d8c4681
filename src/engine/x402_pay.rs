//! Paying an agent that answers a call with 402 (x402), on a route with `payment.pay.x402`:
//! the same call made once more, paid, and a row in the cost ledger whatever came of it.
//!
//! ```text
//! call_once ─► the agent: 402 + PAYMENT-REQUIRED
//!    └─► pay_and_retry: the task's costs so far ─► Policy::choose ─► refused? row, task fails
//!                       ─► Policy::sign ─► row `sending`, within the task's cap (the store
//!                          checks it in the same transaction) ─► over it? refused row
//!                       ─► the same request + PAYMENT-SIGNATURE ─► the agent
//!                       ─► the row's outcome (paid, or failed) ─► asked again? the task
//!                          fails; else its answer
//! ```
//!
//! A task whose payment is refused, or asked for again once paid, fails with reason `payment`
//! (`views::failed_call`), which releases the client's hold as any failure does: the client's
//! credits move by the route's price only, never by what the agent cost.

use bytes::Bytes;
use chrono::Utc;
use pingora::http::RequestHeader;
use tracing::{Instrument, Span};

use super::{Cx, Engine, Translated};
use crate::error::ProxyError;
use crate::payment::x402::pay::{Asked, Demand};
use crate::payment::x402::wire::PAYMENT_SIGNATURE;
use crate::upstream::Answer;
use store::Cost;

/// The request of a call, kept so that it can be made again, paid, in the call's span.
pub(super) struct Retry {
    pub header: RequestHeader,
    pub body: Option<Bytes>,
    pub span: Span,
}

impl Engine {
    /// `first` is the agent's 402 to a call of task `task_id`'s (`retry` that call's request).
    /// When it demands an x402 payment the route's policy allows, pays it and makes the call
    /// again; the paid call's answer. A 402 that demands no x402 payment is
    /// returned as it came (the back's error, as before). Errors with
    /// [`ProxyError::UpstreamPayment`] when the payment is refused, cannot be made, or is asked
    /// for again: each recorded in the cost ledger.
    pub(super) async fn pay_and_retry(
        &self,
        t: &Translated,
        task_id: Option<&str>,
        first: Answer,
        retry: Retry,
        cx: &mut Cx<'_>,
    ) -> Result<Answer, ProxyError> {
        let (Some(policy), Some(demand)) = (&t.x402_pay, Demand::read(&first.headers, &first.body))
        else {
            return Ok(first);
        };
        cx.spent.upstream += first.took;
        let Some(task_id) = task_id else {
            // Discovery, availability, a schema: calls no task is charged for, and no cost row
            // could be booked against.
            return Err(ProxyError::UpstreamPayment {
                message: "the agent asks to be paid for a call that is not a task's; interlingua pays only for tasks' calls".to_string(),
            });
        };
        let asked = Asked {
            task_id,
            route: &t.route,
            at: Utc::now(),
            required: demand.raw(),
        };
        let doc = match &demand {
            Demand::Payable { doc, .. } => doc,
            Demand::Unpayable { why, .. } => {
                return Err(self.refuse(asked.refused(why, None)).await);
            }
        };
        let spent: u64 = self
            .costs(task_id)
            .await?
            .iter()
            .filter(|c| c.state.signed())
            .filter_map(|c| c.amount)
            .sum();
        let offer = match policy.choose(doc, spent) {
            Ok(offer) => offer,
            Err(refusal) => {
                let row = asked.refused(&refusal.why, refusal.first.as_deref());
                return Err(self.refuse(row).await);
            }
        };
        let now = u64::try_from(asked.at.timestamp()).unwrap_or_default();
        let signature = match policy.sign(doc, &offer, now) {
            Ok(s) => s,
            Err(e) => {
                let why = format!("the agent's offer cannot be signed: {e}");
                return Err(self
                    .refuse(asked.refused(&why, Some(&offer.requirements)))
                    .await);
            }
        };
        let Retry {
            mut header,
            body,
            span,
        } = retry;
        header
            .insert_header(PAYMENT_SIGNATURE, signature)
            .map_err(|e| ProxyError::Internal(format!("adding PAYMENT-SIGNATURE: {e}")))?;
        // Recorded before it leaves, within the task's cap whatever other calls (or instances)
        // pay for the task at once: a stop from here on leaves a `sending` row, not nothing.
        let sending = asked.sending(&offer, policy.payer());
        let seq = match self
            .store
            .begin_cost(&sending, policy.max_per_task())
            .instrument(self.store_span("begin_cost"))
            .await
        {
            Ok(seq) => seq,
            Err(store::StoreError::Insufficient { available, needed }) => {
                let why = format!(
                    "amount {needed} would bring the task's payments above max_per_task ({}): {available} is left",
                    policy.max_per_task()
                );
                return Err(self
                    .refuse(asked.refused(&why, Some(&offer.requirements)))
                    .await);
            }
            Err(e) => return Err(ProxyError::Store(e)),
        };
        let second = self.exchange(t, header, body, span).await;
        let row = match &second {
            Ok(a) => asked.answered(&offer, policy.payer(), a.status, &a.headers),
            Err(e) => {
                let mut row = asked.answered(&offer, policy.payer(), 0, &[]);
                row.detail = Some(format!("the paid call got no answer: {e}"));
                row
            }
        };
        self.store
            .finish_cost(seq, &row)
            .instrument(self.store_span("finish_cost"))
            .await
            .map_err(ProxyError::Store)?;
        tracing::info!(task = %row.task_id, route = %row.route, state = row.state.name(),
            amount = row.amount, transaction = row.transaction.as_deref(), "paid an agent (x402)");
        let second = second?;
        if second.status == 402 {
            return Err(ProxyError::UpstreamPayment {
                message: row
                    .detail
                    .unwrap_or_else(|| "the agent asked to be paid again".to_string()),
            });
        }
        Ok(second)
    }

    /// Records a payment not made; the error that fails the call.
    async fn refuse(&self, row: Cost) -> ProxyError {
        let message = row.detail.clone().unwrap_or_default();
        if let Err(e) = self.save_cost(&row).await {
            return e;
        }
        tracing::warn!(task = %row.task_id, route = %row.route, "an agent's payment was refused (x402): {message}");
        ProxyError::UpstreamPayment { message }
    }

    async fn save_cost(&self, row: &Cost) -> Result<(), ProxyError> {
        self.store
            .save_cost(row)
            .instrument(self.store_span("save_cost"))
            .await
            .map_err(ProxyError::Store)
    }

    async fn costs(&self, task_id: &str) -> Result<Vec<Cost>, ProxyError> {
        self.store
            .costs(task_id)
            .instrument(self.store_span("costs"))
            .await
            .map_err(ProxyError::Store)
    }
}
