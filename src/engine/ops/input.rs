//! provide_input: the input goes to the back, and the task runs again.

use std::sync::Arc;

use super::validate::{validate_against, SchemaProblem};
use crate::engine::views::patch_of;
use crate::engine::{documents, Cx, Engine, Translated};
use crate::error::ProxyError;
use crate::upstream::UpstreamError;
use mapping::dialect::mapping::Op;
use mapping::dialect::{Canonical, Decoded};
use mapping::task::{Operation, Status};

impl Engine {
    /// provide_input: the input goes to the back; the task runs again.
    pub(in crate::engine) async fn provide_input(
        self: &Arc<Self>,
        t: &Arc<Translated>,
        fop: &Op,
        request: Decoded,
        cx: &mut Cx<'_>,
    ) -> Result<Canonical<'static>, ProxyError> {
        let stored = self.load(t, &request.task_ref(), cx.identity).await?;
        if stored.task.awaits_first_payment() {
            // What the request brings is the payment: the task starts with its create's input.
            return Box::pin(self.start_paid(t, fop, request, stored, cx)).await;
        }
        // The client may have seen the request for input before interlingua did.
        let stored = self.refresh(t, stored, cx).await?;
        let task = &stored.task;
        if task.status.is_terminal() {
            return Err(ProxyError::TaskEnded(format!(
                "task `{}` is not waiting for input: it has ended ({})",
                task.id,
                task.status.name()
            )));
        }
        if task.status != Status::AwaitingInput {
            return Err(ProxyError::Conflict(format!(
                "task `{}` is not waiting for input (it is {})",
                task.id,
                task.status.name()
            )));
        }
        let waiting = documents::waiting_step(task);
        if let (Some(wanted), Some(i)) = (request.step_id(), waiting) {
            if task.steps[i].id != wanted {
                return Err(ProxyError::Conflict(format!(
                    "step `{wanted}` is not the step waiting for input"
                )));
            }
        }
        let input = request.input();
        if fop.validate.is_some() {
            if let Some(schema) = &task.input_request {
                let value = request.given_input().params;
                validate_against(schema, value, t.settings.validation).map_err(|e| match e {
                    SchemaProblem::Input(e) => e,
                    SchemaProblem::Schema(msg) => ProxyError::Upstream(UpstreamError::Invalid {
                        upstream: t.upstream.config.name.clone(),
                        dialect: t.back.name.clone(),
                        detail: format!("its input request is not a valid schema: {msg}"),
                    }),
                })?;
            }
        }
        let back_doc = documents::provide_input_doc(task, waiting, input.clone());
        // No refresh of this task runs between the input reaching the back and the task being
        // stored as running again: one that did could see the agent already done and store the
        // end first, and the step the input started would never be recorded (payments-py's
        // lifecycle flaked so on a loaded host, one run in three).
        let gate = self.refreshes.gate(&stored.task.id);
        let last_refresh = gate.lock().await;
        let answer = self
            .back
            .call(t, Operation::ProvideInput, &back_doc, cx)
            .await?;
        let answer = self.back.in_band(t, &stored.task, answer, cx).await?;
        // What the back said in answer (a synchronous back: its next state), else running
        // again, as far as interlingua knows; the next poll of the back says more.
        drop(back_doc);
        let mut patch = patch_of(&answer, &t.upstream.config.name, &t.back.name)?;
        documents::input_patch(&mut patch, &stored.task, waiting, &request);
        let answered = waiting.map(|i| stored.task.steps[i].id.clone());
        let mut stored = self.apply(t, stored, patch, cx).await?;
        drop(last_refresh);
        if fop.waits(&request, &t.front_ctx()) {
            stored = self
                .wait_until_settled(t, fop, stored, answered.as_deref(), cx)
                .await?;
            documents::failed_as_error(fop, &stored.task)?;
        }
        Ok(Canonical::front(stored.task)
            .with_step(waiting)
            .with_input(input))
    }
}
