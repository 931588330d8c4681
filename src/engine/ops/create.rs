//! create_task: the task stored with its hold, started on the back, answered at once or when
//! it is done; a back that answers only when done runs in the background.

use std::sync::Arc;

use chrono::Utc;
use tracing::Instrument;

use crate::auth::Identity;
use crate::engine::views::patch_of;
use crate::engine::{documents, Cx, Engine, Spent, Translated};
use crate::engine::{store_error, Held};
use crate::error::ProxyError;
use crate::telemetry::trace::{self, ClientTrace};
use mapping::dialect::mapping::{Op, Returns};
use mapping::dialect::{Canonical, Decoded};
use mapping::task::{Operation, Status, Task, TaskPatch};
use store::Hold;
use store::{StoreError, Stored};

/// How many calls a turn-based back gets for one input before the task fails (`max_turns`).
const MAX_TURNS: u32 = 10;

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

/// Who a background execution works for: the request that started it.
struct Caller<'a> {
    request_id: &'a str,
    identity: Option<&'a Identity>,
    trace: Option<&'a ClientTrace>,
}

impl Engine {
    /// create_task: store the task, start it on the back, answer at once or when it is done.
    pub(in crate::engine) async fn create(
        self: &Arc<Self>,
        t: &Arc<Translated>,
        fop: &Op,
        request: Decoded,
        cx: &mut Cx<'_>,
    ) -> Result<Canonical<'static>, ProxyError> {
        // Without a token, on a route that sells on Masumi: a buyer's job (engine/settle/masumi_sell.rs).
        if let (Some(seller), None) = (&t.sell, cx.identity) {
            return self.sell(t, seller, fop, &request, cx).await;
        }
        let task = self.new_task(t, fop, &request, cx).await?;
        self.start(t, fop, request, task, None, cx).await
    }

    /// The task a create request asks for, its input checked, not stored yet.
    pub(in crate::engine) async fn new_task(
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
        documents::start_task(&mut task, request, &t.back, now);
        // A task the client put in no conversation is a conversation of its own.
        task.conversation.get_or_insert_with(|| task.id.clone());
        Ok(task)
    }

    /// Starts `task` for the caller: its subject, price and hold (a plan's, or what a payment
    /// authorised, out of the grant its sale makes), then the back's create. `stored`: the
    /// version of a task stored already, waiting to be paid for (`ops/unpaid.rs`), rather
    /// than a new one.
    pub(in crate::engine) async fn start(
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
            Some(paid) => Some(crate::engine::admission::price_of(paid)),
            None => t.price.as_ref().map(crate::config::Price::step_price),
        };
        let back_op = self.back.choose_create(t, &task, cx).await?;
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
    pub(in crate::engine) async fn create_held(
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
            .back
            .call(t, Operation::CreateTask, &back_doc, cx)
            .await
        {
            Ok(a) => self.back.in_band(t, &stored.task, a, cx).await,
            Err(e) => Err(e),
        };
        let answer = match answer {
            Ok(a) => a,
            Err(e) => {
                // Nothing runs upstream: the task ends here, and says why.
                let failed = crate::engine::views::failed_call(&e);
                let _ = self.apply(t, stored, failed, cx).await;
                return Err(e);
            }
        };
        let mut patch = patch_of(&answer, &t.upstream.config.name, &t.back.name)?;
        documents::created_patch(&mut patch, back_op);
        documents::default_upstream_id(&mut patch, &stored.task.id);
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
            documents::failed_as_error(fop, &stored.task)?;
        }
        Ok(Canonical::front(stored.task))
    }

    /// Runs a create on a back that answers only when done, for `caller`, and stores the
    /// outcome.
    async fn execute(&self, t: &Translated, stored: Stored, caller: Caller<'_>) {
        let mut cx = Cx {
            request_id: caller.request_id,
            identity: caller.identity,
            trace: caller.trace,
            spent: Spent::default(),
            paid: None,
            receipt: None,
        };
        let back_doc = Canonical::back(&stored.task);
        let answer = self
            .back
            .call(t, Operation::CreateTask, &back_doc, &mut cx)
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
            let back = documents::turn_doc(&stored.task, stored.task.turn + turns - 1);
            let answer = self.back.call(t, Operation::GetTask, &back, &mut cx).await;
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
                documents::default_upstream_id(&mut p, &task_id);
                p
            }
            Err(e) => {
                tracing::warn!(task = %task_id, route = %t.route, "background execution failed: {e}");
                TaskPatch {
                    message: Some(e.to_string()),
                    ..crate::engine::views::failed_call(&e)
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
}
