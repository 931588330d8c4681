//! The engine's side of paying agents on their own rail (see [`crate::payment`]): when a job is
//! bought, and what the purchase's state makes of the task. Two entry points: [`Engine::pay_for`]
//! right after the back's create answer, [`Engine::follow_payment`] on every refresh.

use chrono::Utc;
use tracing::Instrument;

use crate::engine::{Cx, Engine, Translated};
use crate::error::ProxyError;
use crate::payment::{Payer, Purchase, PurchaseState};
use mapping::dialect::{self, Canonical};
use mapping::task::{Operation, Status, TaskPatch};
use store::Stored;

/// Why a task waits while its purchase is not locked (the reason MIP-003's `awaiting_payment`
/// reads as, so that every front shows it alike).
const AWAITING_PAYMENT: &str = "awaiting_payment";

/// Why a task failed for its payment.
const PAYMENT: &str = "payment";

/// Why a sold job waits while interlingua's own purchase from its agent is not locked: its
/// buyer has paid, and sees it running (settle/masumi_sell.rs resells a Masumi agent so).
pub(in crate::engine) const PAYING_AGENT: &str = "paying_agent";

/// Whether a refresh of `stored` has a payment to follow: its route has a payment service and
/// the task a job to pay for.
pub(in crate::engine) fn follows(t: &Translated, stored: &Stored) -> bool {
    t.payment.is_some() && stored.task.payment.is_some()
}

impl Engine {
    /// After the back's create answer: on a route with a payment service, buys the job the
    /// answer asks to be paid for, unless the back mapping's `before_payment` checks fail. The
    /// task then waits (pending, `awaiting_payment`) or fails (reason `payment`).
    pub(in crate::engine) async fn pay_for(
        &self,
        t: &Translated,
        stored: Stored,
        cx: &mut Cx<'_>,
    ) -> Result<Stored, ProxyError> {
        let Some(service) = &t.payment else {
            return Ok(stored);
        };
        let payer = Payer {
            client: &self.client,
            service,
        };
        let Some(reference) = payer.reference(&stored.task) else {
            return Ok(stored);
        };
        if stored.task.status.is_terminal() {
            return Ok(stored);
        }
        let doc = Canonical::back(&stored.task);
        let failed_check = t.back.op(Operation::CreateTask).and_then(|op| {
            op.before_payment
                .iter()
                .find(|c| !dialect::holds(&c.holds, &doc, &t.back_ctx()))
        });
        let purchase = match failed_check {
            Some(check) => payer.not_made(&stored.task, reference, &check.message, Utc::now()),
            None => payer.buy(&stored.task, reference, None).await,
        };
        self.settle_purchase(t, stored, purchase, cx).await
    }

    /// On a refresh of a task whose job was bought (or is to be: a payment request with no
    /// purchase yet is bought now): a purchase the service has not taken yet is offered again, one
    /// not locked yet is followed (and given up at its deadline), and a locked one is refunded when
    /// the agent failed or did not deliver by its deadline. Called by a refresh, which holds the
    /// task's refresh gate: one follow-up of a task at a time, so that a refund is asked once and
    /// a later answer never overwrites an earlier one.
    pub(in crate::engine) async fn follow_payment(
        &self,
        t: &Translated,
        stored: Stored,
        cx: &mut Cx<'_>,
    ) -> Result<Stored, ProxyError> {
        let (Some(service), true) = (&t.payment, follows(t, &stored)) else {
            return Ok(stored);
        };
        let payer = Payer {
            client: &self.client,
            service,
        };
        let found = self
            .store
            .purchases(&stored.task.id)
            .instrument(self.store_span("purchases"))
            .await
            .map_err(ProxyError::Store)?;
        let Some(purchase) = found.into_iter().next() else {
            // The payment request was stored but nothing bought: interlingua stopped between the
            // agent's answer and the purchase. Buy it now (a purchase that did reach the service
            // comes back as 409, the same purchase).
            return self.pay_for(t, stored, cx).await;
        };
        let ended = stored.task.status.is_terminal();
        let purchase = match purchase.state {
            PurchaseState::Pending if !ended => {
                let reference = purchase.reference.clone();
                payer.buy(&stored.task, reference, Some(purchase)).await
            }
            PurchaseState::Requested if !ended => payer.follow(&stored.task, purchase).await,
            PurchaseState::Locked if stored.task.status == Status::Failed => {
                payer.refund(purchase, "the agent failed").await
            }
            PurchaseState::Locked if !ended && payer.delivery_overdue(&stored.task, Utc::now()) => {
                payer
                    .refund(purchase, "the agent did not deliver by submitResultTime")
                    .await
            }
            _ => return Ok(stored),
        };
        self.settle_purchase(t, stored, purchase, cx).await
    }

    /// Stores the purchase, and what its state makes of the task: waiting for the payment,
    /// or failed for it (which releases the client's hold, as any end does).
    async fn settle_purchase(
        &self,
        t: &Translated,
        stored: Stored,
        purchase: Purchase,
        cx: &mut Cx<'_>,
    ) -> Result<Stored, ProxyError> {
        self.store
            .save_purchase(&purchase)
            .instrument(self.store_span("save_purchase"))
            .await
            .map_err(ProxyError::Store)?;
        if stored.task.status.is_terminal() {
            return Ok(stored);
        }
        let patch = match purchase.state {
            PurchaseState::Refused
            | PurchaseState::Expired
            | PurchaseState::RefundRequested
            | PurchaseState::RefundFailed => TaskPatch {
                status: Some(Status::Failed),
                reason: Some(PAYMENT.to_string()),
                message: purchase.detail.clone(),
                ..TaskPatch::default()
            },
            PurchaseState::Pending | PurchaseState::Requested
                if stored.task.status == Status::Pending =>
            {
                TaskPatch {
                    status: Some(Status::Pending),
                    reason: Some(
                        if stored.task.sale.is_some() {
                            PAYING_AGENT
                        } else {
                            AWAITING_PAYMENT
                        }
                        .to_string(),
                    ),
                    ..TaskPatch::default()
                }
            }
            _ => return Ok(stored),
        };
        self.apply(t, stored, patch, cx).await
    }
}
