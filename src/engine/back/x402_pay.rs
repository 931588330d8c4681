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
//! An A2A agent may ask in band instead (the A2A x402 extension): its answer to a create, a poll
//! or an input waits for input with `payment.required`. `in_band` pays it the same way, in the
//! next message on the task, and that message's answer stands for the call's:
//!
//! ```text
//! an answer, awaiting_input + payment.required ─► in_band: paid before and awaiting its
//!    receipt? the task fails ─► choose, sign ─► row `sending` (AWAITS_RECEIPT), within the cap
//!    ─► provide_input with payment.payload ─► asked again or refused? row failed, task fails
//! an answer with payment.receipt, or ending the task ─► the awaiting row's outcome
//! ```
//!
//! A task whose payment is refused, or asked for again once paid, fails with reason `payment`
//! (`views::failed_call`), which releases the client's hold as any failure does: the client's
//! credits move by the route's price only, never by what the agent cost.

use bytes::Bytes;
use chrono::Utc;
use pingora::http::RequestHeader;
use tracing::{Instrument, Span};

use super::Back;
use crate::engine::{Cx, Translated};
use crate::error::ProxyError;
use crate::payment::x402::pay::{self, Asked, Demand, Offer, Policy};
use crate::payment::x402::wire;
use crate::upstream::Answer;
use mapping::dialect::{Canonical, Decoded, Doc};
use mapping::task::{Operation, Status, Task};
use serde_json::Value;
use store::{Cost, CostState};

/// What a task's signed payments took: what its cap counts.
fn signed_total(costs: &[Cost]) -> u64 {
    costs
        .iter()
        .filter(|c| c.state.signed())
        .filter_map(|c| c.amount)
        .sum()
}

/// A payment sent in band whose receipt has not come yet.
fn awaits_receipt(c: &Cost) -> bool {
    c.state == CostState::Sending && c.detail.as_deref() == Some(store::costs::AWAITS_RECEIPT)
}

/// The requirements of an agent asking to be paid in band: its task waits for input, and says
/// what it asks in `payment.required`.
fn asks_in_band(answer: &Decoded) -> Option<&Value> {
    let required = answer
        .get(&["payment".to_string(), "required".to_string()])
        .filter(|r| !r.is_null())?;
    let waits = answer.task_patch().ok()?.status == Some(Status::AwaitingInput);
    waits.then_some(required)
}

/// The request of a call, kept so that it can be made again, paid, in the call's span.
pub(in crate::engine) struct Retry {
    pub header: RequestHeader,
    pub body: Option<Bytes>,
    pub span: Span,
}

impl Back {
    /// `first` is the agent's 402 to a call of task `task_id`'s (`retry` that call's request).
    /// When it demands an x402 payment the route's policy allows, pays it and makes the call
    /// again; the paid call's answer. A 402 that demands no x402 payment is
    /// returned as it came (the back's error, as before). Errors with
    /// [`ProxyError::UpstreamPayment`] when the payment is refused, cannot be made, or is asked
    /// for again: each recorded in the cost ledger.
    pub(in crate::engine) async fn pay_and_retry(
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
        let spent = signed_total(&self.costs(task_id).await?);
        let (offer, payload) = self.sign_within(policy, &asked, doc, spent).await??;
        let Retry {
            mut header,
            body,
            span,
        } = retry;
        header
            .insert_header(demand.signature_header(), wire::encode_header(&payload))
            .map_err(|e| ProxyError::Internal(format!("adding PAYMENT-SIGNATURE: {e}")))?;
        // Recorded before it leaves, within the task's cap whatever other calls (or instances)
        // pay for the task at once: a stop from here on leaves a `sending` row, not nothing.
        let sending = asked.sending(&offer, policy.payer());
        let seq = self.begin(&sending, policy, &asked, &offer).await??;
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

    /// What the back answered to a call for `task`, on a route that pays agents (else `answer`
    /// as it is; see [`Back::paid_in_band`]). An A2A agent may ask to be paid in band (the A2A x402 extension, v0.2,
    /// https://github.com/google-agentic-commerce/a2a-x402/blob/main/spec/v0.2/spec.md): its
    /// task waits for input and its status message carries the requirements
    /// (`payment.required`). That is paid here, within the route's policy, in the next message
    /// on the task (`payment.payload`), and the answer to that message is the call's answer:
    /// the client never sees a question it could not answer. The payment's row stays `sending`
    /// until an answer carries the agent's receipt (`payment.receipt`, with the task's final
    /// message) or the task ends without one.
    pub(in crate::engine) async fn in_band(
        &self,
        t: &Translated,
        task: &Task,
        answer: Decoded,
        cx: &mut Cx<'_>,
    ) -> Result<Decoded, ProxyError> {
        let Some(policy) = &t.x402_pay else {
            return Ok(answer);
        };
        // Boxed, and only where a route pays: its future is large (see `handle`).
        Box::pin(self.paid_in_band(t, policy, task, answer, cx)).await
    }

    async fn paid_in_band(
        &self,
        t: &Translated,
        policy: &Policy,
        task: &Task,
        answer: Decoded,
        cx: &mut Cx<'_>,
    ) -> Result<Decoded, ProxyError> {
        let Some(required) = asks_in_band(&answer) else {
            self.settled_in_band(t, task, &answer).await?;
            return Ok(answer);
        };
        let demand = Demand::in_band(required);
        let asked = Asked {
            task_id: &task.id,
            route: &t.route,
            at: Utc::now(),
            required: demand.raw(),
        };
        let costs = self.costs(&task.id).await?;
        if costs.iter().any(awaits_receipt) {
            // Paid already, and the agent took the message; asking again, it did not take the
            // payment: not paid twice, the task fails.
            let row = asked.asked_again_later(required);
            let message = row.detail.clone().unwrap_or_default();
            self.store
                .finish_task_cost(&task.id, &row)
                .instrument(self.store_span("finish_task_cost"))
                .await
                .map_err(ProxyError::Store)?;
            tracing::warn!(task = %task.id, route = %t.route, "an agent did not take its payment (x402 in band): {message}");
            return Err(ProxyError::UpstreamPayment { message });
        }
        let doc = match &demand {
            Demand::Payable { doc, .. } => doc,
            Demand::Unpayable { why, .. } => {
                return Err(self.refuse(asked.refused(why, None)).await);
            }
        };
        let (offer, payload) = self
            .sign_within(policy, &asked, doc, signed_total(&costs))
            .await??;
        let sending = asked.sending_in_band(&offer, policy.payer());
        let seq = self.begin(&sending, policy, &asked, &offer).await??;
        // The message carrying the payment goes to the task the agent named (a create's answer
        // names it before interlingua has stored it).
        let mut on = task.clone();
        if on.upstream_id.is_none() {
            on.upstream_id = answer.task_patch().ok().and_then(|p| p.upstream_id);
        }
        let doc = Canonical::back(&on).with_payment_payload(payload);
        let paid = self.call(t, Operation::ProvideInput, &doc, cx).await;
        let paid = match paid {
            Ok(paid) => paid,
            Err(e) => {
                let row = asked.rejected_in_band(&offer, policy.payer(), &e.to_string());
                return Err(self.finished(seq, row).await);
            }
        };
        if let Some(again) = asks_in_band(&paid) {
            let row = asked.asked_again_in_band(&offer, policy.payer(), again);
            return Err(self.finished(seq, row).await);
        }
        tracing::info!(task = %task.id, route = %t.route, amount = offer.amount,
            "paid an agent in band (x402): its receipt comes with the task's end");
        self.settled_in_band(t, task, &paid).await?;
        Ok(paid)
    }

    /// The offer of `doc` the policy allows, with what the task `spent` so far, signed; `Err`
    /// inside when refused (the row written).
    async fn sign_within(
        &self,
        policy: &Policy,
        asked: &Asked<'_>,
        doc: &Value,
        spent: u64,
    ) -> Result<Result<(Offer, Value), ProxyError>, ProxyError> {
        let offer = match policy.choose(doc, spent) {
            Ok(offer) => offer,
            Err(refusal) => {
                let row = asked.refused(&refusal.why, refusal.first.as_deref());
                return Ok(Err(self.refuse(row).await));
            }
        };
        let now = u64::try_from(asked.at.timestamp()).unwrap_or_default();
        match policy.payload(doc, &offer, now) {
            Ok(payload) => Ok(Ok((offer, payload))),
            Err(e) => {
                let why = format!("the agent's offer cannot be signed: {e}");
                let row = asked.refused(&why, Some(&offer.requirements));
                Ok(Err(self.refuse(row).await))
            }
        }
    }

    /// `sending` recorded within the task's cap: its row's number; `Err` inside when the cap
    /// refuses it (the refusal written).
    async fn begin(
        &self,
        sending: &Cost,
        policy: &Policy,
        asked: &Asked<'_>,
        offer: &Offer,
    ) -> Result<Result<i64, ProxyError>, ProxyError> {
        match self
            .store
            .begin_cost(sending, policy.max_per_task())
            .instrument(self.store_span("begin_cost"))
            .await
        {
            Ok(seq) => Ok(Ok(seq)),
            Err(store::StoreError::Insufficient { available, needed }) => {
                let why = format!(
                    "amount {needed} would bring the task's payments above max_per_task ({}): {available} is left",
                    policy.max_per_task()
                );
                Ok(Err(self
                    .refuse(asked.refused(&why, Some(&offer.requirements)))
                    .await))
            }
            Err(e) => Err(ProxyError::Store(e)),
        }
    }

    /// Row `seq` finished as `row` says (a payment made and not taken); the error that fails
    /// the call.
    async fn finished(&self, seq: i64, row: Cost) -> ProxyError {
        let message = row.detail.clone().unwrap_or_default();
        if let Err(e) = self
            .store
            .finish_cost(seq, &row)
            .instrument(self.store_span("finish_cost"))
            .await
        {
            return ProxyError::Store(e);
        }
        tracing::warn!(task = %row.task_id, route = %row.route, "an agent did not take its payment (x402 in band): {message}");
        ProxyError::UpstreamPayment { message }
    }

    /// The outcome of `task`'s payment in band still on its way, when `answer` carries the
    /// agent's receipt or ends the task without one. Nothing when there is none.
    async fn settled_in_band(
        &self,
        t: &Translated,
        task: &Task,
        answer: &Decoded,
    ) -> Result<(), ProxyError> {
        let receipt = answer.get(&["payment".to_string(), "receipt".to_string()]);
        let ends = answer
            .task_patch()
            .ok()
            .and_then(|p| p.status)
            .is_some_and(Status::is_terminal);
        if receipt.is_none() && !ends {
            return Ok(());
        }
        let row = pay::settled_in_band(&task.id, &t.route, receipt);
        let finished = self
            .store
            .finish_task_cost(&task.id, &row)
            .instrument(self.store_span("finish_task_cost"))
            .await
            .map_err(ProxyError::Store)?;
        if finished {
            tracing::info!(task = %row.task_id, route = %row.route, state = row.state.name(),
                transaction = row.transaction.as_deref(), "an agent's receipt (x402 in band)");
        }
        Ok(())
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
