//! The canonical operations, as the engine carries them out.

use std::sync::Arc;
use std::time::Instant;

use chrono::Utc;
use serde_json::{json, Value};
use tracing::Instrument;

use super::views::patch_of;
use super::{translation, x402, Cx, Engine, Spent, Translated};
use crate::auth::Identity;
use crate::config::Validation;
use crate::credits;
use crate::error::ProxyError;
use crate::telemetry::trace::{self, ClientTrace};
use crate::upstream::UpstreamError;
use mapping::dialect::doc::{Agent, Availability, Page, Search, TaskRef};
use mapping::dialect::mapping::{Op, Returns};
use mapping::dialect::{Canonical, Decoded};
use mapping::task::{Operation, Status, Task, TaskPatch};
use masumi::attachment01::{Mode, Schema};
use store::{Hold, Settlement};
use store::{StoreError, Stored, TaskQuery};

/// How many times an update that lost a race is redone on the newer version.
const UPDATE_ATTEMPTS: usize = 5;

/// How many calls a turn-based back gets for one input before the task fails (`max_turns`).
const MAX_TURNS: u32 = 10;

pub(super) fn store_error(e: StoreError) -> ProxyError {
    ProxyError::Store(e)
}

/// Why a create's task could not be stored with its hold, as the caller is told.
fn not_stored(e: StoreError) -> ProxyError {
    match e {
        StoreError::Insufficient { available, needed } => ProxyError::PaymentRequired {
            available,
            price: needed,
        },
        // The route's max_json_depth let the body through, but the mapping put its input
        // deeper than that: refused as a body too deep is, nothing held or stored.
        StoreError::TooDeep { depth, limit } => ProxyError::NotJson(format!(
            "the input nests too deep to be kept: the task would nest {depth} levels deep, the store reads at most {limit}"
        )),
        other => store_error(other),
    }
}

/// What a create holds, and where its task is: new (`stored` none), or stored already at that
/// version, waiting to be paid for.
pub(super) struct Held {
    hold: Option<Hold>,
    stored: Option<i64>,
}

impl Held {
    /// A task stored at `version` whose credits are held already: a sold job, held by its
    /// sale when the buyer's funds were locked.
    pub(super) fn stored(version: i64) -> Held {
        Held {
            hold: None,
            stored: Some(version),
        }
    }
}

/// Who a background execution works for: the request that started it.
struct Caller<'a> {
    request_id: &'a str,
    identity: Option<&'a Identity>,
    trace: Option<&'a ClientTrace>,
}

impl Engine {
    /// create_task: store the task, start it on the back, answer at once or when it is done.
    pub(super) async fn create(
        self: &Arc<Self>,
        t: &Arc<Translated>,
        fop: &Op,
        request: Decoded,
        cx: &mut Cx<'_>,
    ) -> Result<Canonical<'static>, ProxyError> {
        // Without a token, on a route that sells on Masumi: a buyer's job (engine/sell.rs).
        if let (Some(seller), None) = (&t.sell, cx.identity) {
            return self.sell(t, seller, fop, &request, cx).await;
        }
        let task = self.new_task(t, fop, &request, cx).await?;
        self.start(t, fop, request, task, None, cx).await
    }

    /// The task a create request asks for, its input checked, not stored yet.
    pub(super) async fn new_task(
        &self,
        t: &Translated,
        fop: &Op,
        request: &Decoded,
        cx: &mut Cx<'_>,
    ) -> Result<Task, ProxyError> {
        if t.back.op(Operation::CreateTask).is_none() {
            return Err(ProxyError::Unsupported {
                operation: "create_task".to_string(),
            });
        }
        if let Some(field) = &fop.validate {
            let value = request.at(field).cloned();
            self.validate(t, value, cx).await?;
        }
        let now = Utc::now();
        let mut task = mapping::task::Task::new(&t.route, now);
        translation::start_task(&mut task, request, &t.back, now);
        // A task the client put in no conversation is a conversation of its own.
        task.conversation.get_or_insert_with(|| task.id.clone());
        Ok(task)
    }

    /// Starts `task` for the caller: its subject, price and hold (a plan's, or what a payment
    /// authorised, out of the grant its sale makes), then the back's create. `stored`: the
    /// version of a task stored already, waiting to be paid for (`engine/x402.rs`), rather
    /// than a new one.
    pub(super) async fn start(
        self: &Arc<Self>,
        t: &Arc<Translated>,
        fop: &Op,
        request: Decoded,
        mut task: Task,
        stored: Option<i64>,
        cx: &mut Cx<'_>,
    ) -> Result<Canonical<'static>, ProxyError> {
        let now = Utc::now();
        if let Some(id) = cx.identity {
            task.subject = Some(id.subject.clone());
            task.plan = id.plan.clone();
        }
        task.price = match cx.paid {
            Some(paid) => Some(x402::price_of(paid)),
            None => t.price.as_ref().map(crate::config::Price::step_price),
        };
        let back_op = self.choose_create(t, &task, cx).await?;
        if t.back.forms(Operation::CreateTask).nth(1).is_some() {
            task.back_form = Some(back_op.key.clone());
        }
        // The task row, and the credits it holds, exist before anything happens upstream: nothing
        // is started that interlingua does not know about, or that the plan cannot pay for. A
        // payment holds what it authorised, out of the grant its sale made.
        let hold = match (cx.paid, &t.price, cx.identity) {
            (Some(paid), _, Some(id)) => Some(Hold {
                plan: id.plan.clone().unwrap_or_default(),
                subject: id.subject.clone(),
                amount: paid.offer.amount,
            }),
            (None, Some(price), Some(id)) => Some(Hold {
                plan: id.plan.clone().unwrap_or_default(),
                subject: id.subject.clone(),
                amount: price.hold,
            }),
            _ => None,
        };
        let held = Held { hold, stored };
        let Some(paid) = cx.paid else {
            return self
                .create_held(t, fop, request, task, held, back_op, None, cx)
                .await;
        };
        let sale = paid.sale(&task.id, now);
        self.open_sale(t, &sale, &paid.resource).await?;
        let reference = sale.reference.clone();
        let created = self
            .create_held(t, fop, request, task, held, back_op, Some(sale), cx)
            .await;
        if created.is_err() {
            // Nothing was settled: what the sale granted goes back (as far as the task's hold
            // was released; a hold still open is released to the payer when its task ends).
            self.void_sale(&reference, "the create failed before it was paid")
                .await;
        }
        created
    }

    /// The rest of a create, from storing the task with its hold on.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn create_held(
        self: &Arc<Self>,
        t: &Arc<Translated>,
        fop: &Op,
        request: Decoded,
        task: mapping::task::Task,
        held: Held,
        back_op: &Op,
        sale: Option<store::Sale>,
        cx: &mut Cx<'_>,
    ) -> Result<Canonical<'static>, ProxyError> {
        let Held { hold, stored } = held;
        let version = match (stored, &hold) {
            (None, hold) => {
                self.store
                    .insert_with_hold(&task, hold.as_ref())
                    .instrument(self.store_span("insert_with_hold"))
                    .await
                    .map_err(not_stored)?;
                1
            }
            (Some(version), Some(hold)) => self
                .store
                .update_with_hold(&task, version, hold)
                .instrument(self.store_span("update_with_hold"))
                .await
                .map_err(|e| match e {
                    StoreError::Conflict => ProxyError::Conflict(format!(
                        "task `{}` has been paid for already",
                        task.id
                    )),
                    other => not_stored(other),
                })?,
            // A sold job: its sale took the hold; the task leaves its wait at the version read.
            (Some(version), None) if task.sale.is_some() => self
                .store
                .update(&task, version)
                .instrument(self.store_span("update"))
                .await
                .map_err(|e| match e {
                    StoreError::Conflict => {
                        ProxyError::Conflict(format!("task `{}` has been started already", task.id))
                    }
                    other => store_error(other),
                })?,
            (Some(_), None) => {
                return Err(ProxyError::Internal(
                    "a stored task started without a hold".to_string(),
                ))
            }
        };
        if let Some(h) = &hold {
            self.metrics.credits("held", h.amount);
        }
        let stored = Stored { task, version };
        let waits = fop.waits(&request, &t.front_ctx()) && fop.stream.is_none();

        if back_op.returns == Returns::Result && !waits {
            // The back answers only when done: run it in the background, answer with the task now
            // (paid for first: the answer is the create's 2xx).
            let stored = match sale {
                Some(sale) => self.collect(t, stored, sale, cx).await?,
                None => stored,
            };
            let engine = self.clone();
            let t2 = t.clone();
            let task = stored.task.clone();
            let rid = cx.request_id.to_string();
            let identity = cx.identity.cloned();
            let client_trace = cx.trace.cloned();
            tokio::spawn(
                async move {
                    let caller = Caller {
                        request_id: &rid,
                        identity: identity.as_ref(),
                        trace: client_trace.as_ref(),
                    };
                    engine.execute(&t2, stored, caller).await
                }
                .instrument(trace::background("execute")),
            );
            return Ok(Canonical::front(task));
        }

        let back_doc = Canonical::back(&stored.task);
        let answer = match self
            .call_back(t, Operation::CreateTask, &back_doc, cx)
            .await
        {
            Ok(a) => self.in_band(t, &stored.task, a, cx).await,
            Err(e) => Err(e),
        };
        let answer = match answer {
            Ok(a) => a,
            Err(e) => {
                // Nothing runs upstream: the task ends here, and says why.
                let failed = super::views::failed_call(&e);
                let _ = self.apply(t, stored, failed, cx).await;
                return Err(e);
            }
        };
        let mut patch = patch_of(&answer, &t.upstream.config.name, &t.back.name)?;
        translation::created_patch(&mut patch, back_op);
        translation::default_upstream_id(&mut patch, &stored.task.id);
        let mut stored = self.apply(t, stored, patch, cx).await?;
        if t.payment.is_some() {
            // Boxed, and only where a rail is: its future is large (see `handle`).
            stored = Box::pin(self.pay_for(t, stored, cx)).await?;
        }
        if let Some(sale) = sale {
            stored = Box::pin(self.collect(t, stored, sale, cx)).await?;
        }
        if !stored.task.status.is_terminal() {
            if let Some(w) = self.watcher.get().and_then(std::sync::Weak::upgrade) {
                w.watch(&stored.task.id, t);
            }
        }
        if waits {
            stored = self.wait_until_settled(t, fop, stored, None, cx).await?;
            translation::failed_as_error(fop, &stored.task)?;
        }
        Ok(Canonical::front(stored.task))
    }

    /// Runs a create on a back that answers only when done, for `caller`, and stores the
    /// outcome.
    async fn execute(&self, t: &Translated, stored: Stored, caller: Caller<'_>) {
        let mut spent = Spent::default();
        let mut cx = Cx {
            request_id: caller.request_id,
            identity: caller.identity,
            trace: caller.trace,
            spent: &mut spent,
            paid: None,
            receipt: None,
        };
        let back_doc = Canonical::back(&stored.task);
        let answer = self
            .call_back(t, Operation::CreateTask, &back_doc, &mut cx)
            .await;
        let Some(mut stored) = self.settle_sync(t, stored, answer, &mut cx).await else {
            return;
        };
        // A turn-based back that says it is still working is called again (its `get_task`
        // form), as its harness would, up to MAX_TURNS calls.
        let mut turns = 1;
        while stored.task.status == Status::Running && t.back.op(Operation::GetTask).is_some() {
            if turns >= MAX_TURNS {
                let patch = TaskPatch {
                    status: Some(Status::Failed),
                    reason: Some("max_turns".to_string()),
                    message: Some(format!(
                        "the agent was still working after {MAX_TURNS} turns"
                    )),
                    ..TaskPatch::default()
                };
                if let Err(e) = self.apply(t, stored, patch, &mut cx).await {
                    tracing::error!(route = %t.route, "storing a background result failed: {e}");
                }
                return;
            }
            turns += 1;
            let back = translation::turn_doc(&stored.task, stored.task.turn + turns - 1);
            let answer = self.call_back(t, Operation::GetTask, &back, &mut cx).await;
            match self.settle_sync(t, stored, answer, &mut cx).await {
                Some(s) => stored = s,
                None => return,
            }
        }
    }

    /// Stores what a synchronous back answered (its result, or its failure); `None` when
    /// nothing could be stored.
    async fn settle_sync(
        &self,
        t: &Translated,
        stored: Stored,
        answer: Result<Decoded, ProxyError>,
        cx: &mut Cx<'_>,
    ) -> Option<Stored> {
        let task_id = stored.task.id.clone();
        let patch = match answer.and_then(|a| patch_of(&a, &t.upstream.config.name, &t.back.name)) {
            Ok(mut p) => {
                p.status.get_or_insert(Status::Completed);
                translation::default_upstream_id(&mut p, &task_id);
                p
            }
            Err(e) => {
                tracing::warn!(task = %task_id, route = %t.route, "background execution failed: {e}");
                TaskPatch {
                    message: Some(e.to_string()),
                    ..super::views::failed_call(&e)
                }
            }
        };
        match self.apply(t, stored, patch, cx).await {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::error!(route = %t.route, "storing a background result failed: {e}");
                None
            }
        }
    }

    /// get_task and list_steps: the stored task, refreshed from the back while it runs.
    pub(super) async fn get(
        &self,
        t: &Translated,
        request: &Decoded,
        cx: &mut Cx<'_>,
    ) -> Result<Canonical<'static>, ProxyError> {
        let stored = self.load(t, &request.task_ref(), cx.identity).await?;
        let stored = self.refresh(t, stored, cx).await?;
        Ok(Canonical::front(stored.task))
    }

    /// provide_input: the input goes to the back; the task runs again.
    pub(super) async fn provide_input(
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
        let waiting = translation::waiting_step(task);
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
        let back_doc = translation::provide_input_doc(task, waiting, input.clone());
        // No refresh of this task runs between the input reaching the back and the task being
        // stored as running again: one that did could see the agent already done and store the
        // end first, and the step the input started would never be recorded (payments-py's
        // lifecycle flaked so on a loaded host, one run in three).
        let gate = self.refreshes.gate(&stored.task.id);
        let last_refresh = gate.lock().await;
        let answer = self
            .call_back(t, Operation::ProvideInput, &back_doc, cx)
            .await?;
        let answer = self.in_band(t, &stored.task, answer, cx).await?;
        // What the back said in answer (a synchronous back: its next state), else running
        // again, as far as interlingua knows; the next poll of the back says more.
        drop(back_doc);
        let mut patch = patch_of(&answer, &t.upstream.config.name, &t.back.name)?;
        translation::input_patch(&mut patch, &stored.task, waiting, &request);
        let answered = waiting.map(|i| stored.task.steps[i].id.clone());
        let mut stored = self.apply(t, stored, patch, cx).await?;
        drop(last_refresh);
        if fop.waits(&request, &t.front_ctx()) {
            stored = self
                .wait_until_settled(t, fop, stored, answered.as_deref(), cx)
                .await?;
            translation::failed_as_error(fop, &stored.task)?;
        }
        Ok(Canonical::front(stored.task)
            .with_step(waiting)
            .with_input(input))
    }

    /// cancel_task: ask the back when it can; the task ends here either way.
    pub(super) async fn cancel(
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
        let mut spent = Spent::default();
        let request_id = format!("console-cancel-{}", stored.task.id);
        let mut cx = Cx::background(&request_id, &mut spent);
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
            .call_back(t, Operation::CancelTask, &Canonical::back(task), cx)
            .await
        {
            Ok(_) | Err(ProxyError::Unsupported { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Ends a task that has waited for input (or payment) longer than the route's
    /// `input_timeout`: cancelled, reason `expired`, its hold released; the back is told to
    /// cancel where it can be (a failure to is logged: the task ends here either way).
    pub(super) async fn expire(
        &self,
        t: &Translated,
        stored: Stored,
    ) -> Result<Stored, ProxyError> {
        let mut spent = Spent::default();
        let request_id = format!("expire-{}", stored.task.id);
        let mut cx = Cx::background(&request_id, &mut spent);
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

    /// The store's search, in a `store.search` span.
    pub(super) async fn find(&self, query: &TaskQuery) -> Result<(Vec<Task>, u64), ProxyError> {
        self.store
            .search(query)
            .instrument(self.store_span("search"))
            .await
            .map_err(store_error)
    }

    /// search_tasks: from the store, this route's tasks only.
    pub(super) async fn search(
        &self,
        t: &Translated,
        request: &Decoded,
        cx: &mut Cx<'_>,
    ) -> Result<Canonical<'static>, ProxyError> {
        let (query, page, page_size) = search_query(t, request, cx.identity);
        let (tasks, total) = self.find(&query).await?;
        let page = Page {
            total,
            page,
            page_size,
        };
        Ok(Canonical::empty().with_tasks(&tasks, page))
    }

    /// availability: the back's own answer, or whether its upstream can be reached.
    pub(super) async fn availability(
        &self,
        t: &Translated,
        cx: &mut Cx<'_>,
    ) -> Result<Canonical<'static>, ProxyError> {
        let unavailable = |message| Availability {
            available: false,
            message,
        };
        if t.back.op(Operation::Availability).is_some() {
            return Ok(
                match self
                    .call_back(t, Operation::Availability, &Canonical::empty(), cx)
                    .await
                {
                    Ok(answer) => Canonical::decoded(answer),
                    Err(e) => Canonical::empty().with_availability(&unavailable(e.to_string())),
                },
            );
        }
        let availability = match t.upstream.probe().await {
            Ok(()) => Availability {
                available: true,
                message: "the agent's server is reachable".to_string(),
            },
            Err(why) => unavailable(why.detail().to_string()),
        };
        Ok(Canonical::empty().with_availability(&availability))
    }

    /// describe: what the route's agent is, from the route, the mappings and the input schema.
    /// `base_url` (from the request's scheme and Host) is the absolute address discovery
    /// documents point clients at.
    pub(super) async fn describe(
        &self,
        t: &Translated,
        prefix: &str,
        base_url: Option<String>,
        cx: &mut Cx<'_>,
    ) -> Result<Canonical<'static>, ProxyError> {
        let schema = match self.schema_for(t, cx).await {
            Ok(s) => Some(s),
            Err(ProxyError::Unsupported { .. }) => None,
            Err(e) => return Err(e),
        };
        let mut agent = agent(t, prefix, base_url);
        agent.input_schema = schema;
        // What the agent says of itself in its discovery document (an A2A card's name and
        // description), over the back dialect's title; the route's own description comes first.
        let found = self.discovered(t, cx, false).await;
        let said = |key: &str| {
            found
                .as_deref()
                .and_then(|d| d.get(key))
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        };
        if let Some(name) = said("name") {
            agent.title = name;
        }
        if let (None, Some(description)) = (&t.settings.description, said("description")) {
            agent.description = description.to_string();
        }
        Ok(Canonical::empty().with_agent(&agent))
    }

    /// The input schema of the route's agent: declared on the route, else the back's own
    /// (fetched, kept for a minute), else the back mapping's.
    pub(super) async fn schema_for(
        &self,
        t: &Translated,
        cx: &mut Cx<'_>,
    ) -> Result<Value, ProxyError> {
        if let Some(s) = &t.settings.input_schema {
            return Ok(s.clone());
        }
        if t.back.op(Operation::InputSchema).is_some() {
            if let Some((at_time, s)) = self.schemas.lock().get(&t.route) {
                if at_time.elapsed() < super::SCHEMA_TTL {
                    return Ok(s.clone());
                }
            }
            let schema = match self
                .call_back(t, Operation::InputSchema, &Canonical::empty(), cx)
                .await
            {
                Ok(answer) => answer.schema(),
                // No form of it applies to this route's settings: the mapping's own.
                Err(ProxyError::Unsupported { .. }) if t.back.input_schema.is_some() => {
                    t.back.input_schema.clone()
                }
                Err(e) => return Err(e),
            };
            let schema = schema.ok_or_else(|| {
                ProxyError::Upstream(UpstreamError::Invalid {
                    upstream: t.upstream.config.name.clone(),
                    dialect: t.back.name.clone(),
                    detail: "no input schema in the answer".to_string(),
                })
            })?;
            self.schemas
                .lock()
                .insert(t.route.clone(), (Instant::now(), schema.clone()));
            return Ok(schema);
        }
        t.back
            .input_schema
            .clone()
            .ok_or_else(|| ProxyError::Unsupported {
                operation: "input_schema".to_string(),
            })
    }

    /// Validates a create's input against the agent's schema (400 with per-field errors).
    async fn validate(
        &self,
        t: &Translated,
        value: Option<Value>,
        cx: &mut Cx<'_>,
    ) -> Result<(), ProxyError> {
        let schema = match self.schema_for(t, cx).await {
            Ok(s) => s,
            // No schema anywhere: nothing to validate against.
            Err(ProxyError::Unsupported { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        validate_against(&schema, value, t.settings.validation).map_err(|e| match e {
            SchemaProblem::Input(e) => e,
            SchemaProblem::Schema(msg) => ProxyError::Upstream(UpstreamError::Invalid {
                upstream: t.upstream.config.name.clone(),
                dialect: t.back.name.clone(),
                detail: format!("its input schema is not valid: {msg}"),
            }),
        })
    }

    /// The task a request names, if it belongs to this route.
    pub(super) async fn load(
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
    pub(super) async fn refresh(
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
    pub(super) async fn refresh_within(
        &self,
        t: &Translated,
        stored: Stored,
        fresh: std::time::Duration,
        cx: &mut Cx<'_>,
    ) -> Result<Stored, ProxyError> {
        // A synchronous back is never polled: its background execution stores what it says.
        // Nor is a sold job whose agent is done: its result is being submitted (engine/escrow.rs).
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
        if super::follow::is_fresh(gate.last, fresh)
            || super::follow::began_since(gate.last, arrived)
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
        let answer = match self.call_back(t, Operation::GetTask, &back_doc, cx).await {
            Ok(a) => self.in_band(t, &stored.task, a, cx).await,
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
            Err(e @ ProxyError::UpstreamPayment { .. }) => super::views::failed_call(&e),
            Err(e) => return Err(e),
        };
        let stored = self.apply(t, stored, patch, cx).await?;
        // Boxed, and only for a task bought on a rail: its future is large (see `handle`), and
        // most routes have no rail.
        let stored = if super::pay::follows(t, &stored) {
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
    pub(super) async fn apply(
        &self,
        t: &Translated,
        mut stored: Stored,
        mut patch: TaskPatch,
        cx: &mut Cx<'_>,
    ) -> Result<Stored, ProxyError> {
        // A sold job completes only once its result is with the payment node: until then its
        // agent's result is kept, the task running while the sale submits it (engine/escrow.rs).
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
            patch.reason = Some(super::pay::PAYING_AGENT.to_string());
        }
        // Set when the patch could not be stored: the task then fails instead, and the caller
        // hears why.
        let mut unstorable: Option<ProxyError> = None;
        for _ in 0..UPDATE_ATTEMPTS {
            let mut task = stored.task.clone();
            let seen = translation::fold(&mut task, patch.clone(), &t.back, Utc::now());
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
                        && x402::paid_task(&task)
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
    pub(super) async fn interrupted(
        &self,
        t: &Translated,
        stored: Stored,
        message: &str,
    ) -> Result<Stored, ProxyError> {
        let mut spent = Spent::default();
        let request_id = format!("restart-{}", stored.task.id);
        let mut cx = Cx::background(&request_id, &mut spent);
        let patch = TaskPatch {
            status: Some(Status::Failed),
            reason: Some("interrupted".to_string()),
            message: Some(message.to_string()),
            ..TaskPatch::default()
        };
        self.apply(t, stored, patch, &mut cx).await
    }

    /// Charges one extra capture on a task.
    pub(super) async fn charge(
        &self,
        task_id: &str,
        capture: &store::Capture,
        cx: &mut Cx<'_>,
    ) -> Result<(), ProxyError> {
        let settled = self
            .store
            .charge(task_id, capture)
            .instrument(self.store_span("charge"))
            .await
            .map_err(store_error)?;
        cx.spent.charged += settled.captured;
        self.metrics.credits("captured", settled.captured);
        Ok(())
    }

    /// What the steps that just finished cost (written onto the steps, so every front sees the
    /// price), and whether the task's hold is to be released.
    fn settlement(
        &self,
        t: &Translated,
        task: &mut mapping::task::Task,
        finished: &[String],
    ) -> Settlement {
        // The price the task was created under; a task stored before prices were kept, the
        // route's.
        let price = task
            .price
            .or_else(|| t.price.as_ref().map(crate::config::Price::step_price));
        let Some(price) = price else {
            return Settlement {
                captures: Vec::new(),
                release: task.status.is_terminal(),
            };
        };
        let captures = credits::captures(&price, t.back.steps, &task.steps, finished);
        for c in &captures {
            if let Some(step) = task.steps.iter_mut().find(|s| s.id == c.step_id) {
                step.cost = c.amount;
            }
        }
        task.cost = task.steps.iter().map(|s| s.cost).sum();
        Settlement {
            captures,
            release: task.status.is_terminal(),
        }
    }

    /// For a front that answers with the result: follows the task closely (see
    /// [`super::follow`]) until it ends or waits for input. At the route's `sync_timeout` the
    /// task goes on (the watcher follows it); the client gets it as it is when its form says
    /// `timeout = "task"`, else 504 naming it.
    ///
    /// `answered` is the step the client's input just went to: an agent may still show that step
    /// waiting for a moment after it took the input (it picks the input up in its own time), and
    /// that is not a new question. Only a wait on another step (one the agent asks anew) settles
    /// the call before the task ends.
    async fn wait_until_settled(
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
            if stored.task.status.is_terminal() || translation::asks_anew(&stored.task, answered) {
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
                super::follow::follow_interval(now - start, t.settings.poll_max_interval);
            tokio::time::sleep_until((now + interval).min(deadline)).await;
            stored = self.refresh_within(t, stored, interval, cx).await?;
        }
    }
}

/// The page a search asks for (from 1) and its size (1 to 1000; 10 unless said).
/// What a search_tasks request asks the store for: this route's tasks (the caller's, on routes
/// with auth) that match it; with the page and page size it asked for.
pub(super) fn search_query(
    t: &Translated,
    request: &Decoded,
    identity: Option<&Identity>,
) -> (TaskQuery, u64, u64) {
    let search = request.search();
    let (page, page_size) = paging(&search);
    let query = TaskQuery {
        route: Some(t.route.clone()),
        subject: cx_subject(t, identity).map(str::to_string),
        status: search.status.and_then(|s| Status::from_name(&s)),
        name: search.name,
        conversation: None,
        id: search.task_id,
        holding_step: None,
        page: page as u32,
        page_size: page_size as u32,
    };
    (query, page, page_size)
}

pub(super) fn paging(search: &Search) -> (u64, u64) {
    let page = search.page.unwrap_or(1).max(1);
    let page_size = search.page_size.unwrap_or(10).clamp(1, 1000);
    (page, page_size)
}

/// The subject whose tasks a caller may see on this route: theirs, on routes with auth.
pub(super) fn cx_subject<'a>(t: &Translated, identity: Option<&'a Identity>) -> Option<&'a str> {
    if t.owned {
        // A route with auth always has an identity here; without one, nothing matches.
        Some(identity.map_or("\u{0}", |i| i.subject.as_str()))
    } else {
        None
    }
}

enum SchemaProblem {
    Input(ProxyError),
    Schema(String),
}

/// Validates `value` (absent: an empty object) against an Attachment 01 schema.
fn validate_against(
    schema: &Value,
    value: Option<Value>,
    mode: Validation,
) -> Result<(), SchemaProblem> {
    let mode = match mode {
        Validation::Reference => Mode::Reference,
        Validation::Strict => Mode::Strict,
    };
    let schema = Schema::from_json(schema, mode).map_err(|e| SchemaProblem::Schema(e.message))?;
    schema
        .validate(&value.unwrap_or_else(|| json!({})))
        .map_err(|f| {
            SchemaProblem::Input(ProxyError::InvalidInput {
                message: f.message,
                field_errors: f.field_errors,
            })
        })
}

/// What `describe` says of the route's agent without asking anyone: all but its input schema
/// (what `[answer.NAME]` forms and request checks read as `agent.*`).
pub(super) fn agent<'t>(t: &'t Translated, prefix: &'t str, base_url: Option<String>) -> Agent<'t> {
    let mut operations: Vec<&str> = Vec::new();
    for o in t.front.ops.iter().filter(|o| o.front) {
        if !operations.contains(&o.op.name()) {
            operations.push(o.op.name());
        }
    }
    let prefix = prefix.trim_end_matches('/');
    Agent {
        name: &t.route,
        title: &t.back.title,
        description: t.settings.description.clone().unwrap_or_else(|| {
            format!(
                "{} (route `{}`), through interlingua",
                t.back.title, t.route
            )
        }),
        dialect: &t.front.name,
        url: if prefix.is_empty() { "/" } else { prefix },
        base_url,
        operations,
        input_schema: None,
        auth: t.owned,
        streaming: t.front.ops.iter().any(|o| o.front && o.stream.is_some()),
        x402: t.x402.is_some(),
    }
}
