//! cancel_task, and the ends interlingua gives a task itself: cancelled for the operator,
//! expired waiting for input or payment.

use crate::engine::{Cx, Engine, Translated};
use crate::error::ProxyError;
use mapping::dialect::{Canonical, Decoded};
use mapping::task::{Operation, Status, Task, TaskPatch};
use store::Stored;

impl Engine {
    /// cancel_task: ask the back when it can; the task ends here either way.
    pub(in crate::engine) async fn cancel(
        &self,
        t: &Translated,
        request: &Decoded,
        cx: &mut Cx<'_>,
    ) -> Result<Canonical<'static>, ProxyError> {
        let stored = self.load(t, &request.task_ref(), cx.identity).await?;
        Ok(Canonical::front(self.cancel_stored(t, stored, cx).await?))
    }

    /// Cancels a task for the operator (the console), whoever it belongs to: as a client's
    /// cancel, the back asked where it can be, the hold released.
    pub async fn cancel_for_operator(
        &self,
        t: &Translated,
        stored: Stored,
    ) -> Result<Task, ProxyError> {
        let request_id = format!("console-cancel-{}", stored.task.id);
        let mut cx = Cx::background(&request_id);
        self.cancel_stored(t, stored, &mut cx).await
    }

    async fn cancel_stored(
        &self,
        t: &Translated,
        stored: Stored,
        cx: &mut Cx<'_>,
    ) -> Result<Task, ProxyError> {
        if stored.task.status.is_terminal() {
            return Err(ProxyError::Conflict(format!(
                "task `{}` has already ended ({})",
                stored.task.id,
                stored.task.status.name()
            )));
        }
        self.cancel_on_back(t, &stored.task, cx).await?;
        let stored = self
            .apply(t, stored, TaskPatch::status(Status::Cancelled), cx)
            .await?;
        Ok(stored.task)
    }

    /// Asks the back to cancel `task`, where it has a cancel form that applies to the task (an
    /// MCP server's tasks/cancel, for a task started as one): a task the back knows nothing of
    /// yet, or whose form has no cancel, ends in interlingua only.
    async fn cancel_on_back(
        &self,
        t: &Translated,
        task: &Task,
        cx: &mut Cx<'_>,
    ) -> Result<(), ProxyError> {
        if t.back.op(Operation::CancelTask).is_none() || task.upstream_id.is_none() {
            return Ok(());
        }
        match self
            .back
            .call(t, Operation::CancelTask, &Canonical::back(task), cx)
            .await
        {
            Ok(_) | Err(ProxyError::Unsupported { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Ends a task that has waited for input (or payment) longer than the route's
    /// `input_timeout`: cancelled, reason `expired`, its hold released; the back is told to
    /// cancel where it can be (a failure to is logged: the task ends here either way).
    pub(in crate::engine) async fn expire(
        &self,
        t: &Translated,
        stored: Stored,
    ) -> Result<Stored, ProxyError> {
        let request_id = format!("expire-{}", stored.task.id);
        let mut cx = Cx::background(&request_id);
        if let Err(e) = self.cancel_on_back(t, &stored.task, &mut cx).await {
            tracing::warn!(task = %stored.task.id, route = %t.route, "cancelling an expired task on the agent failed: {e}");
        }
        let waited = if stored.task.status == Status::AwaitingInput {
            "input"
        } else {
            "payment"
        };
        let patch = TaskPatch {
            status: Some(Status::Cancelled),
            reason: Some("expired".to_string()),
            message: Some(format!(
                "the task waited for {waited} longer than input_timeout ({})",
                humantime::format_duration(t.settings.input_timeout)
            )),
            ..TaskPatch::default()
        };
        let stored = self.apply(t, stored, patch, &mut cx).await?;
        tracing::info!(task = %stored.task.id, route = %t.route, "task expired waiting for {waited}");
        Ok(stored)
    }
}
