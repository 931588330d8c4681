//! Selling a route's jobs on the operator's Masumi node (`payment.accept.masumi`): a create
//! without a token is a buyer's, answered with a payment request the node made for it; nothing
//! is asked of the agent until the buyer's funds are locked ([`super::escrow`] follows the sale
//! from there).
//!
//! ```text
//! start_job ─ input valid? identifier 14-26 hex? ─ input hash (the front's `sale.input_hash`)
//!   ├─ the same job asked again (route, identifier, hash) while it waits: that job, nothing sent
//!   ├─ task (pending, awaiting_payment) + sale `requesting`, one transaction
//!   ├─ S1 once, on a task of its own (a client hanging up does not cut it short)
//!   │    2xx: sale `requested`, task.sale = the node's fields ─► the answer shows them
//!   │    4xx: `refused`, task failed (payment) ─► 502 payment_node_refused, the node's words
//!   │    none, 5xx: `unanswered`, task failed ─► 503 payment_node_unavailable
//! ```

use std::sync::Arc;

use chrono::Utc;
use serde_json::Value;

use crate::config::MasumiSeller;
use crate::engine::{Cx, Engine, Translated};
use crate::error::ProxyError;
use crate::payment::masumi::sell::{self, Answer};
use mapping::dialect::mapping::Op;
use mapping::dialect::{self, Canonical, Decoded};
use mapping::task::{Status, Task, TaskPatch, AWAITING_PAYMENT};
use store::{EscrowMove, EscrowSale, EscrowState, Stored};

/// The rail's name in sale records.
pub(in crate::engine) const RAIL: &str = "masumi";

/// Why a task failed for its sale.
pub(in crate::engine) const PAYMENT: &str = "payment";

/// How long a payment request may be under way before it is taken for cut short (S1 is waited
/// for 10 s): the sweep then records it unanswered, and never sends it again.
pub(in crate::engine) const REQUEST_OVERDUE: std::time::Duration =
    std::time::Duration::from_secs(30);

/// A sold task's end for its sale: failed, reason `payment`, `why` its message.
pub(in crate::engine) fn failed_for_payment(why: String) -> TaskPatch {
    TaskPatch {
        status: Some(Status::Failed),
        reason: Some(PAYMENT.to_string()),
        message: Some(why),
        ..TaskPatch::default()
    }
}

impl Engine {
    /// A create without a token on a route that sells: the job, answered with the payment
    /// request the node made for it (see the module's opening comment).
    pub(in crate::engine) async fn sell(
        self: &Arc<Self>,
        t: &Arc<Translated>,
        seller: &Arc<MasumiSeller>,
        fop: &Op,
        request: &Decoded,
        cx: &mut Cx<'_>,
    ) -> Result<Canonical<'static>, ProxyError> {
        let hashes = t.front.sale().ok_or_else(|| {
            ProxyError::Internal("a selling route's front declares no `sale`".to_string())
        })?;
        let mut task = self.new_task(t, fop, request, cx).await?;
        let client_ref = task.client_ref.clone().unwrap_or_default();
        if !sell::valid_identifier(&client_ref) {
            return Err(ProxyError::InvalidRequest(format!(
                "identifier_from_purchaser `{client_ref}` is not 14 to 26 hex digits, an even number of them: the payment node takes no other"
            )));
        }
        let input_hash = dialect::evaluate(
            &hashes.input_hash,
            &Canonical::front_of(&task),
            &t.front_ctx(),
        )
        .and_then(|v| v.as_str().map(str::to_string))
        .ok_or_else(|| {
            ProxyError::Internal("the front's `sale.input_hash` gave no text".to_string())
        })?;
        task.reason = Some(AWAITING_PAYMENT.to_string());
        let now = Utc::now();
        let body = sell::request_body(seller, &client_ref, &input_hash, &task.id, now);
        let sale = EscrowSale {
            task_id: task.id.clone(),
            route: t.route.clone(),
            rail: RAIL.to_string(),
            reference: None,
            client_ref,
            input_hash,
            state: EscrowState::Requesting,
            due: now + chrono::Duration::from_std(REQUEST_OVERDUE).unwrap_or_default(),
            detail: None,
            request: Some(body),
            service: None,
            plan: None,
            subject: None,
            amount: None,
            result_hash: None,
            calls: Vec::new(),
            created_at: now,
            updated_at: now,
        };
        if let Some(twin) = self
            .store
            .open_escrow_sale(&task, &sale)
            .await
            .map_err(ProxyError::Store)?
        {
            return self.same_job(twin).await;
        }
        let engine = self.clone();
        let (t2, seller2) = (t.clone(), seller.clone());
        let stored = super::x402::detached(async move {
            engine.request_payment(&t2, &seller2, task, sale).await
        })
        .await?;
        Ok(Canonical::front(stored.task))
    }

    /// A `start_job` asked again while its job waits for its buyer (a retry: MIP-003 has no
    /// idempotency key): that job, as it was answered. One whose payment request is still
    /// being made is 409: its answer is on its way to the first request.
    async fn same_job(&self, twin: EscrowSale) -> Result<Canonical<'static>, ProxyError> {
        if twin.state == EscrowState::Requesting {
            return Err(ProxyError::Conflict(format!(
                "this job (identifier_from_purchaser `{}`, the same input) is being asked of the payment node already: ask its status with job_id `{}`",
                twin.client_ref, twin.task_id
            )));
        }
        let stored = self
            .store
            .get(&twin.task_id)
            .await
            .map_err(ProxyError::Store)?
            .ok_or_else(|| ProxyError::TaskNotFound(twin.task_id.clone()))?;
        tracing::debug!(task = %stored.task.id, "start_job asked again: the same job");
        Ok(Canonical::front(stored.task))
    }

    /// S1 for a job stored with its sale `requesting`, and what came of it, recorded.
    async fn request_payment(
        &self,
        t: &Translated,
        seller: &MasumiSeller,
        task: Task,
        mut sale: EscrowSale,
    ) -> Result<Stored, ProxyError> {
        let body = sale.request.clone().unwrap_or(Value::Null);
        let answer = sell::request(&self.client, seller, &body, &mut sale.calls).await;
        let now = Utc::now();
        sale.updated_at = now;
        let refusal = match answer {
            Answer::Data(data) => {
                match sell::sale_fields(seller, &data, &sale.client_ref, &sale.input_hash)
                    .and_then(|fields| Ok((fields, sell::funds(&data)?)))
                {
                    Ok((fields, (amount, unit))) => {
                        sale.reference = fields
                            .get("blockchainIdentifier")
                            .and_then(Value::as_str)
                            .map(str::to_string);
                        sale.amount = Some(amount);
                        sale.plan = Some(sell::plan_of(&unit));
                        sale.service = Some(data);
                        sale.state = EscrowState::Requested;
                        sale.due = now
                            + chrono::Duration::from_std(t.settings.poll_interval)
                                .unwrap_or_default();
                        return self.requested(task, sale, fields).await;
                    }
                    Err(why) => ProxyError::Refused {
                        status: 502,
                        code: "payment_node_invalid".to_string(),
                        message: format!(
                            "the payment node's payment request cannot be shown to a buyer: {why}"
                        ),
                    },
                }
            }
            Answer::Refused(status, message) => ProxyError::Refused {
                status: 502,
                code: "payment_node_refused".to_string(),
                message: format!(
                    "the payment node refused the payment request ({status}): {message}"
                ),
            },
            Answer::Failed(_, message) => ProxyError::Refused {
                status: 503,
                code: "payment_node_unavailable".to_string(),
                message: format!("the payment node could not make the payment request: {message}"),
            },
        };
        sale.state = match refusal.status() {
            503 => EscrowState::Unanswered,
            _ => EscrowState::Refused,
        };
        sale.detail = Some(refusal.to_string());
        tracing::warn!(task = %task.id, route = %t.route, "{refusal}");
        self.store
            .save_escrow_sale(&sale, EscrowState::Requesting, &EscrowMove::None)
            .await
            .map_err(ProxyError::Store)?;
        let stored = Stored { task, version: 1 };
        self.apply_quietly(t, stored, failed_for_payment(refusal.to_string()))
            .await;
        Err(refusal)
    }

    /// Records a payment request the node made: the sale first (a request the node knows of is
    /// never lost), then the fields the buyer is shown on the task.
    async fn requested(
        &self,
        mut task: Task,
        sale: EscrowSale,
        fields: Value,
    ) -> Result<Stored, ProxyError> {
        self.store
            .save_escrow_sale(&sale, EscrowState::Requesting, &EscrowMove::None)
            .await
            .map_err(ProxyError::Store)?;
        task.sale = Some(fields);
        task.updated_at = Utc::now();
        let version = self
            .store
            .update(&task, 1)
            .await
            .map_err(ProxyError::Store)?;
        tracing::info!(task = %task.id, sale = sale.reference.as_deref().unwrap_or(""), "a job is offered for sale on the Masumi node");
        self.escrow_wake.notify_one();
        Ok(Stored { task, version })
    }

    /// Stores `patch` on a task outside any request; a failure is logged.
    pub(in crate::engine) async fn apply_quietly(
        &self,
        t: &Translated,
        stored: Stored,
        patch: TaskPatch,
    ) {
        let request_id = format!("sale-{}", stored.task.id);
        let mut cx = Cx::background(&request_id);
        let id = stored.task.id.clone();
        if let Err(e) = self.apply(t, stored, patch, &mut cx).await {
            tracing::error!(task = %id, "storing a sold task's change failed: {e}");
        }
    }
}
