//! A create kept waiting to be paid for in band (the A2A x402 extension, a front's `unpaid`),
//! and started once a request on it brings the payment.

use std::sync::Arc;

use chrono::Utc;

use crate::engine::{Cx, Engine, Translated};
use crate::error::ProxyError;
use crate::payment::x402::accept::Refusal;
use store::Stored;

impl Engine {
    /// Keeps a create that brought no payment as a task waiting to be paid for: stored without
    /// a subject or credits, nothing asked of the agent; the answer carries the requirements
    /// (`payment.required`). A later request on the task that brings a payment starts it
    /// ([`Engine::start_paid`]); the route's `input_timeout` ends it otherwise.
    pub(in crate::engine) async fn keep_unpaid(
        &self,
        t: &Arc<Translated>,
        fop: &mapping::dialect::mapping::Op,
        request: &mapping::dialect::Decoded,
        refusal: &Refusal,
        cx: &mut Cx<'_>,
    ) -> Result<mapping::dialect::Canonical<'static>, ProxyError> {
        let mut task = self.new_task(t, fop, request, cx).await?;
        task.reason = Some(crate::engine::admission::PAYMENT_REQUIRED.to_string());
        task.message = Some(refusal.message.clone());
        self.store.insert(&task).await.map_err(ProxyError::Store)?;
        if let Some(w) = self.watcher.get().and_then(std::sync::Weak::upgrade) {
            w.watch(&task.id, t);
        }
        Ok(mapping::dialect::Canonical::front(task)
            .with_payment_required(refusal.required_doc.clone()))
    }

    /// Starts a task that waited to be paid for, now that a request on it brought a payment
    /// (verified, its payer the caller): the task takes the payer as its subject, holds what
    /// was authorised, and runs as if created now, with the input of its create. Without a
    /// payment (a token holder's request): 409, the task left waiting.
    pub(in crate::engine) async fn start_paid(
        self: &Arc<Self>,
        t: &Arc<Translated>,
        fop: &mapping::dialect::mapping::Op,
        request: mapping::dialect::Decoded,
        stored: Stored,
        cx: &mut Cx<'_>,
    ) -> Result<mapping::dialect::Canonical<'static>, ProxyError> {
        let Some(paid) = cx.paid else {
            return Err(ProxyError::Conflict(format!(
                "task `{}` waits to be paid for with x402: a token does not pay for it",
                stored.task.id
            )));
        };
        let mut task = stored.task.clone();
        task.reason = None;
        task.message = None;
        task.updated_at = Utc::now();
        tracing::debug!(task = %task.id, payer = %paid.payer, "a task waiting to be paid for is paid for");
        self.start(t, fop, request, task, Some(stored.version), cx)
            .await
    }
}
