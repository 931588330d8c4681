//! Tasks in the store: the one a request names (load), refreshed from its back, a patch folded
//! in and stored with optimistic concurrency (apply: the settlement of its finished steps in the
//! same write), followed closely for a client waiting for the end.

use chrono::Utc;
use tracing::Instrument;

use crate::auth::Identity;
use crate::engine::views::patch_of;
use crate::engine::{documents, store_error, Cx, Engine, Translated};
use crate::error::ProxyError;
use crate::upstream::UpstreamError;
use mapping::dialect::doc::TaskRef;
use mapping::dialect::mapping::Op;
use mapping::dialect::Canonical;
use mapping::task::{Operation, Status, Task, TaskPatch};
use store::{StoreError, Stored, TaskQuery};

/// How many times an update that lost a race is redone on the newer version.
const UPDATE_ATTEMPTS: usize = 5;

/// The subject whose tasks a caller may see on this route: theirs, on routes with auth.
pub(in crate::engine) fn cx_subject<'a>(
    t: &Translated,
    identity: Option<&'a Identity>,
) -> Option<&'a str> {
    if t.owned {
        // A route with auth always has an identity here; without one, nothing matches.
        Some(identity.map_or("\u{0}", |i| i.subject.as_str()))
    } else {
        None
    }
}

impl Engine {
    /// The store's search, in a `store.search` span.
    pub(in crate::engine) async fn find(
        &self,
        query: &TaskQuery,
    ) -> Result<(Vec<Task>, u64), ProxyError> {
        self.store
            .search(query)
            .instrument(self.store_span("search"))
            .await
            .map_err(store_error)
    }

    /// The task a request names, if it belongs to this route.
    pub(in crate::engine) async fn load(
        &self,
        t: &Translated,
        named: &TaskRef,
        identity: Option<&Identity>,
    ) -> Result<Stored, ProxyError> {
        let subject = cx_subject(t, identity);
        let id = match (named.id.clone(), named.conversation.clone()) {
            (Some(id), _) => id,
            // A front that names tasks by their conversation: the conversation's latest task.
            (None, Some(conversation)) => {
                let query = TaskQuery {
                    route: Some(t.route.clone()),
                    subject: subject.map(str::to_string),
                    conversation: Some(conversation.clone()),
                    page: 1,
                    page_size: 1,
                    ..TaskQuery::default()
                };
                let (found, _) = self.find(&query).await?;
                found
                    .into_iter()
                    .next()
                    .map(|task| task.id)
                    .ok_or(ProxyError::TaskNotFound(conversation))?
            }
            (None, None) => return Err(ProxyError::InvalidRequest("no task id".to_string())),
        };
        match self
            .store
            .get(&id)
            .instrument(self.store_span("get"))
            .await
            .map_err(store_error)?
        {
            // Another route's task, or another subject's, is not there for this caller.
            // A task waiting to be paid for is no one's yet: whoever pays for it.
            // A sold job is its buyer's, who has no token: its id is the capability (MIP-003
            // has no other); a token holder's tasks are never a buyer's, nor the reverse.
            Some(s) if s.task.route == t.route && t.sell.is_some() && identity.is_none() => {
                if s.task.sale.is_some() {
                    Ok(s)
                } else {
                    Err(ProxyError::TaskNotFound(id))
                }
            }
            Some(s)
                if s.task.route == t.route
                    && (subject.is_none()
                        || s.task.subject.as_deref() == subject
                        || s.task.awaits_first_payment()) =>
            {
                Ok(s)
            }
            _ => Err(ProxyError::TaskNotFound(id)),
        }
    }

    /// Asks the back how the task is doing, and stores what changed. A task that has ended, or
    /// whose back cannot be asked, is returned as stored; so is one refreshed within the route's
    /// `min_refresh` (as the store has it: many clients polling one task make one call).
    pub(in crate::engine) async fn refresh(
        &self,
        t: &Translated,
        stored: Stored,
        cx: &mut Cx<'_>,
    ) -> Result<Stored, ProxyError> {
        self.refresh_within(t, stored, t.settings.min_refresh, cx)
            .await
    }

    /// [`Engine::refresh`], accepting a refresh made within `fresh` instead of asking the back.
    /// Refreshes of one task are made one at a time: a caller that waited for another's finds
    /// it fresh and reads what it stored, and so does one whose wait ended behind a refresh that
    /// began after it arrived, whatever `fresh` is (that answer is as new as the caller's own
    /// would be: concurrent polls of one task cost one call per wave, not one each, even at
    /// `min_refresh = "0s"`). Across instances, one that another instance began within `fresh`
    /// counts too (what it stored is read; its answer may still be on the way).
    pub(in crate::engine) async fn refresh_within(
        &self,
        t: &Translated,
        stored: Stored,
        fresh: std::time::Duration,
        cx: &mut Cx<'_>,
    ) -> Result<Stored, ProxyError> {
        // A synchronous back is never polled: its background execution stores what it says.
        // Nor is a sold job whose agent is done: its result is being submitted (settle/escrow.rs).
        if stored.task.status.is_terminal()
            || stored.task.upstream_id.is_none()
            || stored.task.submits_result()
            || t.sync_task(&stored.task)
            || t.back.op(Operation::GetTask).is_none()
        {
            return Ok(stored);
        }
        let arrived = tokio::time::Instant::now();
        let gate = self.refreshes.gate(&stored.task.id);
        let mut gate = gate.lock().await;
        // Fresh from this instance's own refresh, or from another instance's (several instances
        // on one store: the store records when a refresh began). A store that cannot say lets
        // the refresh go ahead: the task's version keeps the result right either way.
        // (A caller that accepts no freshness at all asks the back whatever the store says, so
        // the store is not asked: that would be a write per poll for nothing.)
        let fresh_elsewhere = || async {
            self.store.shared()
                && !fresh.is_zero()
                && !matches!(
                    self.store
                        .claim_refresh(&stored.task.id, fresh)
                        .instrument(self.store_span("claim_refresh"))
                        .await,
                    Ok(true) | Err(_)
                )
        };
        if crate::engine::follow::is_fresh(gate.last, fresh)
            || crate::engine::follow::began_since(gate.last, arrived)
            || fresh_elsewhere().await
        {
            drop(gate);
            return Ok(
                match self
                    .store
                    .get(&stored.task.id)
                    .instrument(self.store_span("get"))
                    .await
                {
                    Ok(Some(newer)) if newer.version > stored.version => newer,
                    _ => stored,
                },
            );
        }
        let started = tokio::time::Instant::now();
        let back_doc = Canonical::back(&stored.task);
        let answer = match self.back.call(t, Operation::GetTask, &back_doc, cx).await {
            Ok(a) => self.back.in_band(t, &stored.task, a, cx).await,
            Err(e) => Err(e),
        };
        drop(back_doc);
        let patch = match answer {
            Ok(answer) => {
                gate.lost_since = None;
                patch_of(&answer, &t.upstream.config.name, &t.back.name)?
            }
            Err(ProxyError::Upstream(UpstreamError::Rejected {
                status: 404 | 410,
                message,
                ..
            })) => {
                // The agent does not know the task (it restarted and lost it, say). Said once,
                // it may be a moment's confusion: the task stays as it was. Said for
                // `lost_after`, the task will never be heard of again: it fails, its hold
                // released, rather than being polled, and holding credits, for ever.
                let since = *gate.lost_since.get_or_insert(started);
                gate.last = Some(started);
                if since.elapsed() < t.settings.lost_after {
                    return Ok(stored);
                }
                TaskPatch {
                    status: Some(Status::Failed),
                    reason: Some("upstream_lost".to_string()),
                    message: Some(format!(
                        "the agent no longer knows this task ({message}), for {} now",
                        humantime::format_duration(t.settings.lost_after)
                    )),
                    ..TaskPatch::default()
                }
            }
            // An agent asking to be paid for a poll, and not paid: the task ends (its payment
            // was refused, or asked for twice), rather than being polled for ever.
            Err(e @ ProxyError::UpstreamPayment { .. }) => crate::engine::views::failed_call(&e),
            Err(e) => return Err(e),
        };
        let stored = self.apply(t, stored, patch, cx).await?;
        // Boxed, and only for a task bought on a rail: its future is large (see `handle`), and
        // most routes have no rail.
        let stored = if crate::engine::settle::masumi_buy::follows(t, &stored) {
            Box::pin(self.follow_payment(t, stored, cx)).await?
        } else {
            stored
        };
        gate.last = Some(started);
        drop(gate);
        if stored.task.status.is_terminal() {
            self.refreshes.forget(&stored.task.id);
        }
        Ok(stored)
    }

    /// Folds `patch` into the task and stores it; a lost race is redone on the newer version.
    pub(in crate::engine) async fn apply(
        &self,
        t: &Translated,
        mut stored: Stored,
        mut patch: TaskPatch,
        cx: &mut Cx<'_>,
    ) -> Result<Stored, ProxyError> {
        // A sold job completes only once its result is with the payment node: until then its
        // agent's result is kept, the task running while the sale submits it (settle/escrow.rs).
        let holds_back = patch.status == Some(Status::Completed)
            && stored.task.sale.is_some()
            && !self.result_submitted(&stored.task.id).await?;
        if holds_back {
            patch.status = Some(Status::Running);
            patch.reason = Some(mapping::task::SUBMITTING_RESULT.to_string());
        }
        // A sold job's agent waiting for its own payment waits for interlingua's (a resold
        // Masumi agent): its buyer has paid, and is never shown `awaiting_payment` again.
        if stored.task.sale.is_some()
            && patch.reason.as_deref() == Some(mapping::task::AWAITING_PAYMENT)
        {
            patch.reason = Some(crate::engine::settle::masumi_buy::PAYING_AGENT.to_string());
        }
        // Set when the patch could not be stored: the task then fails instead, and the caller
        // hears why.
        let mut unstorable: Option<ProxyError> = None;
        for _ in 0..UPDATE_ATTEMPTS {
            let mut task = stored.task.clone();
            let seen = documents::fold(&mut task, patch.clone(), &t.back, Utc::now());
            if !seen.changed {
                return match unstorable {
                    Some(e) => Err(e),
                    None => Ok(Stored {
                        task,
                        version: stored.version,
                    }),
                };
            }
            let settlement = self.settlement(t, &mut task, &seen.finished_steps);
            match self
                .store
                .update_and_settle(&task, stored.version, &settlement)
                .instrument(self.store_span("update_and_settle"))
                .await
            {
                Ok((version, settled)) => {
                    cx.spent.charged += settled.captured;
                    self.metrics.credits("captured", settled.captured);
                    self.metrics.credits("released", settled.released);
                    if task.status.is_terminal()
                        && !stored.task.status.is_terminal()
                        && crate::engine::admission::paid_task(&task)
                    {
                        // Its hold released: what it owes is settled now, once.
                        Box::pin(self.close_sales(t, &task)).await;
                    }
                    if holds_back {
                        self.wake_escrow();
                    }
                    return match unstorable {
                        Some(e) => Err(e),
                        None => Ok(Stored { task, version }),
                    };
                }
                // What the agent said would make the task too deep to read back: kept, the task
                // could never be read again, so it is not kept, and the task fails (its hold
                // released) rather than being asked the same forever.
                Err(StoreError::TooDeep { depth, limit }) if unstorable.is_none() => {
                    let detail = format!(
                        "its answer would make the task nest {depth} levels deep; the store reads at most {limit}"
                    );
                    patch = TaskPatch {
                        status: Some(Status::Failed),
                        reason: Some("upstream_invalid_response".to_string()),
                        message: Some(format!("the agent's answer nests too deep: {detail}")),
                        ..TaskPatch::default()
                    };
                    unstorable = Some(ProxyError::Upstream(UpstreamError::Invalid {
                        upstream: t.upstream.config.name.clone(),
                        dialect: t.back.name.clone(),
                        detail,
                    }));
                }
                Err(StoreError::Conflict) => {
                    stored = self
                        .store
                        .get(&task.id)
                        .instrument(self.store_span("get"))
                        .await
                        .map_err(store_error)?
                        .ok_or_else(|| ProxyError::TaskNotFound(task.id.clone()))?;
                }
                Err(e) => return Err(store_error(e)),
            }
        }
        // Lost every race: the last conflict stands.
        Err(ProxyError::Store(StoreError::Conflict))
    }

    /// A task whose call to the back was in flight when interlingua stopped (a synchronous
    /// back working on it, or a create whose answer never came, so that the task has no
    /// upstream id to follow): the call is lost with the process, so the task fails (reason
    /// `interrupted`, `message` saying which) and its hold is released.
    pub(in crate::engine) async fn interrupted(
        &self,
        t: &Translated,
        stored: Stored,
        message: &str,
    ) -> Result<Stored, ProxyError> {
        let request_id = format!("restart-{}", stored.task.id);
        let mut cx = Cx::background(&request_id);
        let patch = TaskPatch {
            status: Some(Status::Failed),
            reason: Some("interrupted".to_string()),
            message: Some(message.to_string()),
            ..TaskPatch::default()
        };
        self.apply(t, stored, patch, &mut cx).await
    }

    /// For a front that answers with the result: follows the task closely (see
    /// [`crate::engine::follow`]) until it ends or waits for input. At the route's `sync_timeout` the
    /// task goes on (the watcher follows it); the client gets it as it is when its form says
    /// `timeout = "task"`, else 504 naming it.
    ///
    /// `answered` is the step the client's input just went to: an agent may still show that step
    /// waiting for a moment after it took the input (it picks the input up in its own time), and
    /// that is not a new question. Only a wait on another step (one the agent asks anew) settles
    /// the call before the task ends.
    pub(in crate::engine) async fn wait_until_settled(
        &self,
        t: &Translated,
        fop: &Op,
        mut stored: Stored,
        answered: Option<&str>,
        cx: &mut Cx<'_>,
    ) -> Result<Stored, ProxyError> {
        let start = tokio::time::Instant::now();
        let deadline = start + t.settings.sync_timeout;
        loop {
            if stored.task.status.is_terminal() || documents::asks_anew(&stored.task, answered) {
                return Ok(stored);
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                if fop.timeout_answers_task {
                    return Ok(stored);
                }
                return Err(ProxyError::Upstream(UpstreamError::Timeout {
                    upstream: t.upstream.config.name.clone(),
                    detail: format!(
                        "task `{}` did not finish within sync_timeout ({}); it goes on, and its credits settle when it ends",
                        stored.task.id,
                        humantime::format_duration(t.settings.sync_timeout)
                    ),
                }));
            }
            let interval =
                crate::engine::follow::follow_interval(now - start, t.settings.poll_max_interval);
            tokio::time::sleep_until((now + interval).min(deadline)).await;
            stored = self.refresh_within(t, stored, interval, cx).await?;
        }
    }
}
