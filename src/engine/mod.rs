//! The engine: a front request, translated through the canonical model to the back and back.
//!
//! ```text
//! front request ─ decode (front mapping) ─► canonical ─► operation ─► store / back calls
//!                                                            │
//! front answer ◄─ encode (front mapping) ◄─ canonical ◄──────┘
//!
//! a back call:  canonical ─ encode (back mapping) ─► HTTP ─► upstream ─► decode (back mapping) ─► canonical
//! ```
//!
//! "canonical" is one typed document ([`mapping::dialect::doc`]): the engine builds what rules
//! read (`Canonical::front(task)`, `Canonical::back(&task).with_turn(n)`, `.with_request(..)`,
//! `.with_charge(..)`) and takes what they wrote by name (`Decoded::task_patch`, `task_ref`,
//! `search`, …), never by indexing a JSON document.
//!
//! The engine supplies what the back lacks: ids for the front (the store maps them to upstream
//! ids), steps (synthesized, one per status), polling for a front that wants the result, background
//! execution for a back that only answers with the result, `availability`, `input_schema` and
//! `search_tasks` from config, the mappings and the store. It knows no dialect by name.
//!
//! The steps that shape messages, between the store and the calls, are pure functions in
//! [`translation`] (a request read, a task started, a back's documents written and its answers
//! read and folded, an answer rendered): the operations here and the golden tests call the same.

mod discover;
mod escrow;
mod follow;
mod ops;
mod pay;
mod sell;
mod steps;
mod stream;
pub mod translation;
pub mod views;
pub mod watch;
mod x402;
mod x402_pay;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Method;
use parking_lot::Mutex;
use pingora::http::RequestHeader;
use serde_json::{Map, Value};
use tracing::{Instrument, Span};

use crate::auth::Identity;
use crate::config::{Access, Price, Route, Translation};
use crate::error::ProxyError;
use crate::metrics::Metrics;
use crate::telemetry::trace::{self, ClientTrace};
use crate::upstream::Client;
use crate::upstream::UpstreamError;
use crate::upstream::UpstreamState;
use mapping::dialect::doc::text_of;
use mapping::dialect::mapping::{Op, Rules};
use mapping::dialect::template::{parse_query, render_query};
use mapping::dialect::{self, Canonical, CodecError, Context, Decoded, Doc, Mapping, Message};
use mapping::task::{Operation, Task};
use store::TaskStore;

/// The back variable interlingua sets, on a route with `payment.pay.x402`, to its paying
/// address (a mapping that declares it can tell an agent it pays in band); a route's own value
/// is replaced.
pub const X402_PAYER_VAR: &str = "x402_payer";

/// A translated route, ready to run.
pub struct Translated {
    pub route: String,
    pub front: Arc<Mapping>,
    pub back: Arc<Mapping>,
    /// Each mapping's `[vars]` with the route's values over them.
    pub front_vars: Map<String, Value>,
    pub back_vars: Map<String, Value>,
    pub settings: Translation,
    pub upstream: Arc<UpstreamState>,
    /// What its tasks cost; `None`: free.
    pub price: Option<Price>,
    /// Whether tasks belong to the verified subject (routes with auth).
    pub owned: bool,
    /// Headers every call to the back carries: the route's credential, the caller's identity.
    pub access: Access,
    /// The service interlingua pays the agent through, when the route names one.
    pub payment: Option<crate::config::PaymentService>,
    /// What a client may pay with x402 instead of presenting a token.
    pub x402: Option<crate::config::X402Accept>,
    /// What interlingua may pay an agent that answers a call with 402, and its wallet.
    pub x402_pay: Option<Arc<crate::payment::x402::pay::Policy>>,
    /// The Masumi node the route's jobs are sold on, to buyers without a token.
    pub sell: Option<Arc<crate::config::MasumiSeller>>,
    /// The key the mappings' `seal`/`unseal` use (`[server] seal_key_env`, or one per process).
    pub seal_key: Arc<[u8]>,
}

impl Translated {
    /// Binds a route to its mappings; `seal_key` is what their `seal`/`unseal` use.
    pub fn new(
        route: &Route,
        front: Arc<Mapping>,
        back: Arc<Mapping>,
        upstream: Arc<UpstreamState>,
        seal_key: Arc<[u8]>,
    ) -> Translated {
        let vars = |m: &Mapping| {
            let mut v = m.vars.clone();
            if let Some(over) = route.translation.vars.get(&m.name) {
                v.extend(over.clone());
            }
            v
        };
        let x402_pay = route.x402_pay.as_ref().and_then(|c| {
            crate::payment::x402::pay::Policy::new(c)
                .inspect_err(|e| {
                    // The config's check takes the keys this refuses: not reached.
                    tracing::error!(route = %route.name, "payment.pay.x402: {e}");
                })
                .ok()
                .map(Arc::new)
        });
        let mut back_vars = vars(&back);
        // A back that can carry a payment in band is told who pays (a2a.toml's var.x402_payer).
        if let (Some(policy), Some(payer)) = (&x402_pay, back_vars.get_mut(X402_PAYER_VAR)) {
            *payer = Value::String(policy.payer());
        }
        Translated {
            route: route.name.clone(),
            front_vars: vars(&front),
            back_vars,
            front,
            back,
            settings: route.translation.clone(),
            upstream,
            price: route.price.clone(),
            // A payer's tasks are theirs as a token holder's are.
            owned: route.access.auth || route.x402.is_some(),
            access: route.access.clone(),
            payment: route.payment.clone(),
            x402: route.x402.clone(),
            x402_pay,
            sell: route.sell.clone().map(Arc::new),
            seal_key,
        }
    }

    /// The back's create form `task` was started with (recorded on it when the back has
    /// several), else its first.
    pub fn create_form(&self, task: &Task) -> Option<&Op> {
        task.back_form
            .as_ref()
            .and_then(|key| {
                self.back
                    .forms(Operation::CreateTask)
                    .find(|o| o.key == *key)
            })
            .or_else(|| self.back.op(Operation::CreateTask))
    }

    /// Whether the back answers `task` only when done (one synchronous call): such a task is
    /// never polled; the answer is stored when it comes.
    pub fn sync_task(&self, task: &Task) -> bool {
        self.create_form(task)
            .is_some_and(|o| o.returns == mapping::dialect::mapping::Returns::Result)
    }

    fn front_ctx(&self) -> Context<'_> {
        Context {
            mapping: &self.front,
            vars: &self.front_vars,
            seal_key: &self.seal_key,
        }
    }

    fn back_ctx(&self) -> Context<'_> {
        Context {
            mapping: &self.back,
            vars: &self.back_vars,
            seal_key: &self.seal_key,
        }
    }
}

/// A request to a translated route.
pub struct FrontRequest<'a> {
    pub method: &'a Method,
    /// The path below the route's prefix.
    pub path: &'a str,
    /// The route's prefix (where the front's paths are mounted).
    pub prefix: &'a str,
    /// `http` or `https`, as the client connected.
    pub scheme: &'static str,
    pub query: Option<&'a str>,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    pub request_id: &'a str,
    /// Who is calling, on routes with auth.
    pub identity: Option<&'a Identity>,
    /// The client's trace context, passed on to the agent when traces are off.
    pub trace: &'a ClientTrace,
}

/// The answer to a front request.
pub struct FrontResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Body,
}

/// An answer's body: whole, or server-sent events as the task progresses.
pub enum Body {
    Full(Vec<u8>),
    /// Each item is one event, already framed (`data: …\n\n`); the stream ends with the channel.
    Events(tokio::sync::mpsc::Receiver<Bytes>),
}

/// One request, as the engine carries it out.
pub struct Cx<'a> {
    pub request_id: &'a str,
    /// Who is calling, on routes with auth.
    pub identity: Option<&'a Identity>,
    /// The client's trace context (requests; none for the watcher's calls).
    pub trace: Option<&'a ClientTrace>,
    pub spent: &'a mut Spent,
    /// The x402 payment this request brought, verified, when it creates a task with it.
    pub paid: Option<&'a crate::payment::x402::accept::Verified>,
    /// The settlement made for this request (an x402 `SettleResponse`): the answer carries it
    /// as `PAYMENT-RESPONSE`, and as `payment.receipt` for fronts that carry it in band.
    pub receipt: Option<crate::payment::x402::wire::SettleResponse>,
}

impl<'a> Cx<'a> {
    /// The context of work interlingua does on its own (the watcher, a sweep, the console),
    /// for no client: `request_id` names it in logs.
    pub fn background(request_id: &'a str, spent: &'a mut Spent) -> Cx<'a> {
        Cx {
            request_id,
            identity: None,
            trace: None,
            spent,
            paid: None,
            receipt: None,
        }
    }
}

/// What one request cost: time waiting for upstreams, credits charged.
#[derive(Debug, Default, Clone, Copy)]
pub struct Spent {
    pub upstream: Duration,
    pub charged: u64,
}

/// The translation engine, shared by every request.
pub struct Engine {
    pub store: Arc<dyn TaskStore>,
    pub client: Arc<Client>,
    pub metrics: Arc<Metrics>,
    /// Follows the tasks this engine starts (set once the watcher exists).
    pub watcher: std::sync::OnceLock<std::sync::Weak<watch::Watcher>>,
    /// Input schemas fetched from backs, per route, with when they were fetched.
    schemas: Mutex<HashMap<String, (Instant, Value)>>,
    /// When each task was last refreshed from its back (polls coalesce).
    refreshes: follow::Refreshes,
    /// What backs' `[discover]` calls said, per route.
    discovery: discover::Cache,
    /// The x402 sales this process is settling right now, and the escrow sales it is moving.
    settling: x402::UnderWay,
    /// Wakes the escrow sweep: a sold job's result is ready to submit.
    escrow_wake: tokio::sync::Notify,
}

/// How long a schema fetched from a back is reused.
const SCHEMA_TTL: Duration = Duration::from_secs(60);

impl Engine {
    /// `idle_pool`: idle upstream connections the engine keeps for its own calls to backs.
    pub fn new(store: Arc<dyn TaskStore>, metrics: Arc<Metrics>, idle_pool: usize) -> Engine {
        Engine {
            store,
            metrics,
            watcher: std::sync::OnceLock::new(),
            client: Arc::new(Client::new(idle_pool)),
            schemas: Mutex::new(HashMap::new()),
            refreshes: follow::Refreshes::default(),
            discovery: discover::Cache::default(),
            settling: x402::UnderWay::default(),
            escrow_wake: tokio::sync::Notify::new(),
        }
    }

    /// The span of one call to the store (`op`, the `TaskStore` method), below the current
    /// span when that is a traced request's or the watcher's; `Span::none()` otherwise.
    pub(super) fn store_span(&self, op: &'static str) -> Span {
        if !trace::enabled() {
            return Span::none();
        }
        trace::store(op, self.store.backend())
    }

    /// Forgets what route `name`'s back said about itself (its input schema, its discovery): a
    /// reload pointed the route at another agent, or removed it.
    pub fn forget_route(&self, name: &str) {
        self.schemas.lock().remove(name);
        self.discovery.forget(name);
    }

    /// Answers one front request. `echo` receives what the front's `[request]` rules read, so
    /// that an error answer can carry it too (a JSON-RPC id).
    pub async fn handle(
        self: &Arc<Self>,
        t: &Arc<Translated>,
        req: FrontRequest<'_>,
        spent: &mut Spent,
        echo: &mut Value,
    ) -> Result<FrontResponse, ProxyError> {
        let body = if req.body.iter().all(u8::is_ascii_whitespace) {
            None
        } else {
            // Measured before it is parsed: the answer names the depth and the limit, also for
            // a body deeper than the parser would read at all.
            let depth = mapping::depth::nesting(&req.body);
            if depth > t.settings.max_json_depth {
                return Err(ProxyError::NotJson(format!(
                    "the body nests {depth} levels deep; this route takes at most {} (max_json_depth)",
                    t.settings.max_json_depth
                )));
            }
            Some(
                serde_json::from_slice::<Value>(&req.body)
                    .map_err(|e| ProxyError::NotJson(format!("the body is not JSON: {e}")))?,
            )
        };
        let mut msg = Message {
            params: Default::default(),
            query: req.query.map(parse_query).unwrap_or_default(),
            headers: req.headers,
            body,
        };
        if let Some(r) = translation::read_echo(&t.front, &msg, &t.front_ctx())? {
            *echo = r;
        }
        if let Some(identity) = req.identity {
            echo_subject(echo, identity);
        }
        let base_url = msg
            .header("host")
            .map(|h| format!("{}://{h}{}", req.scheme, req.prefix.trim_end_matches('/')));
        if !t.front.request_checks.is_empty() {
            let request = mapping::dialect::doc::request(echo, req.request_id, None);
            let agent = ops::agent(t, req.prefix, base_url.clone());
            let doc = Canonical::empty().with_request(request).with_agent(&agent);
            translation::check(&t.front.request_checks, &doc, &t.front_ctx())?;
        }
        let (fop, mut doc) =
            translation::read_front(&t.front, &t.front_ctx(), req.method, req.path, &mut msg)?;
        // Who a request without a token is, on a route that takes x402 (engine/x402.rs).
        // Only routes that take x402 pay for the resource's URL and the look-up (the hot path).
        let admission = if t.x402.is_some() {
            let resource = format!("{}{}", base_url.as_deref().unwrap_or(""), req.path);
            let admitted = self
                .admit_payment(
                    t,
                    fop.op,
                    &msg,
                    doc.request()
                        .and_then(|r| r.get("payment"))
                        .or_else(|| echo.get("payment")),
                    req.identity,
                    &resource,
                )
                .await;
            match admitted {
                // A front that takes the payment in band later keeps the create as a task
                // waiting to be paid for (its op's `unpaid`).
                Err(ProxyError::PaymentRefused(r))
                    if r.reason == "payment_required"
                        && fop.unpaid.is_some()
                        && fop.keeps_unpaid(
                            &Canonical::decoded(doc.clone()).with_request(
                                mapping::dialect::doc::request(echo, req.request_id, doc.request()),
                            ),
                            &t.front_ctx(),
                        ) =>
                {
                    x402::Admission::Unpaid(r)
                }
                other => other?,
            }
        } else {
            x402::Admission::Free
        };
        let payer = match &admission {
            x402::Admission::Free | x402::Admission::Unpaid(_) => None,
            x402::Admission::Payer(id) => Some(id.clone()),
            x402::Admission::Paid(v) => Some(v.identity()),
        };
        if let Some(id) = &payer {
            echo_subject(echo, id);
        }
        let mut cx = Cx {
            request_id: req.request_id,
            identity: payer.as_ref().or(req.identity),
            trace: Some(req.trace),
            spent,
            paid: match &admission {
                x402::Admission::Paid(v) => Some(&**v),
                _ => None,
            },
            receipt: None,
        };
        let cx = &mut cx;
        // What the operation's own rules read into `request.*` (a bearer token an answer hands
        // back) joins what the `[request]` rules read.
        let request = mapping::dialect::doc::request(echo, cx.request_id, doc.request());
        doc.set_request(request.clone());
        if !fop.checks.is_empty() || fop.reply {
            let agent = ops::agent(t, req.prefix, base_url.clone());
            let view = Canonical::decoded(doc.clone()).with_agent(&agent);
            translation::check(&fop.checks, &view, &t.front_ctx())?;
            if fop.reply {
                return full_answer(fop, &view, &t.front_ctx());
            }
        }
        // A search's stream follows what the search found.
        let feed = (fop.stream.is_some() && fop.op == Operation::SearchTasks)
            .then(|| ops::search_query(t, &doc, cx.identity).0);
        // Each operation's future is boxed. Held inline, the largest (a create: the task, its
        // documents, the back call, the payment rail) sized this future and every one awaiting
        // it — tens of KiB, copied whole each time a future moves (into its parent, a `Box`, a
        // span) — whichever operation a request was (bench/README.md, "Where the CPU went").
        let out = match fop.op {
            Operation::CreateTask => match &admission {
                x402::Admission::Unpaid(r) => {
                    Box::pin(self.keep_unpaid(t, fop, &doc, r, cx)).await?
                }
                _ => Box::pin(self.create(t, fop, doc, cx)).await?,
            },
            Operation::GetTask | Operation::ListSteps => Box::pin(self.get(t, &doc, cx)).await?,
            Operation::ProvideInput => match Box::pin(self.provide_input(t, fop, doc, cx)).await {
                // The conversation's task has ended, or there is none: a new task.
                Err(ProxyError::TaskNotFound(_) | ProxyError::TaskEnded(_))
                    if fop.otherwise.is_some() =>
                {
                    let create = fop
                        .otherwise
                        .as_ref()
                        .and_then(|k| t.front.ops.iter().find(|o| &o.key == k))
                        .ok_or_else(|| ProxyError::Internal("no create form".to_string()))?;
                    let mut doc = decode(&create.request, &msg, &t.front_ctx())?;
                    doc.set_request(request.clone());
                    Box::pin(self.create(t, create, doc, cx)).await?
                }
                other => other?,
            },
            Operation::CancelTask => Box::pin(self.cancel(t, &doc, cx)).await?,
            Operation::SearchTasks => Box::pin(self.search(t, &doc, cx)).await?,
            Operation::SearchSteps => Box::pin(self.search_steps(t, &doc, cx)).await?,
            Operation::Availability => Box::pin(self.availability(t, cx)).await?,
            Operation::InputSchema => {
                Canonical::empty().with_schema(Box::pin(self.schema_for(t, cx)).await?)
            }
            Operation::Describe => Box::pin(self.describe(t, req.prefix, base_url, cx)).await?,
        };
        let mut out = out.with_request(request);
        if t.sell.is_some() {
            // A route that sells shows its own payment requests, never its agent's.
            out = out.without_back_payment();
        }
        if let Some(receipt) = &cx.receipt {
            out = out.with_payment_receipt(serde_json::to_value(receipt).unwrap_or(Value::Null));
        }
        if let (Some(price), Some(task_id)) = (&t.price, out.task_id()) {
            if let Some(fee) = price.operations.get(&fop.op).copied().filter(|f| *f > 0) {
                // A fee per call, once per request id: a client retrying with the same
                // X-Request-Id is not charged twice.
                let capture = store::Capture {
                    step_id: format!("{}:{}", fop.op.name(), cx.request_id),
                    amount: fee,
                };
                self.charge(&task_id, &capture, cx).await?;
            }
        }
        if trace::enabled() {
            // `handle` runs in the request's span.
            let task_id = out.task_id();
            trace::request_task(&Span::current(), task_id.as_deref(), cx.spent.charged);
        }
        if t.price.is_some() {
            // What this request charged, for fronts that report it (Nevermined's NVMCreditsConsumed).
            out = out.with_charge(cx.spent.charged);
        }
        if fop.stream.is_some() {
            // The form's header rules apply to the stream's answer (`X-Accel-Buffering: no`).
            let mut headers = translation::render_answer(fop, &out, &t.front_ctx())?.headers;
            headers.retain(|(k, _)| !k.eq_ignore_ascii_case("content-type"));
            headers.push(("content-type".to_string(), "text/event-stream".to_string()));
            let target = match feed {
                Some(query) => stream::Target::Search(query),
                None => stream::Target::Task {
                    id: out.task_id().ok_or_else(|| {
                        ProxyError::Internal(format!("the `{}` stream has no task", fop.key))
                    })?,
                    // A stream after input follows the task past the step the input answered.
                    answered: (fop.op == Operation::ProvideInput)
                        .then(|| out.step_id())
                        .flatten(),
                },
            };
            headers.extend(receipt(cx));
            let events = stream::start(self.clone(), t.clone(), fop, target, out, cx);
            return Ok(FrontResponse {
                status: fop.status,
                headers,
                body: Body::Events(events),
            });
        }
        let mut answer = full_answer(fop, &out, &t.front_ctx())?;
        answer.headers.extend(receipt(cx));
        Ok(answer)
    }

    /// Calls operation `op` of the back with the canonical document `doc`; returns what the
    /// back's answer says, as a canonical document. A back with `[discover]` is called with what
    /// it discovered in view (`discovered.*`); when the call fails as if the agent had moved (no
    /// connection, 404, 405, 5xx), discovery is made afresh and, if it now says something else,
    /// the call is made once more. Nothing is retried when discovery says the same: the failure
    /// is then the agent's answer, and a second create could start a second task.
    async fn call_back(
        &self,
        t: &Translated,
        op: Operation,
        doc: &dyn Doc,
        cx: &mut Cx<'_>,
    ) -> Result<Decoded, ProxyError> {
        let Some(known) = self.discovered(t, cx, false).await else {
            return self.call_form(t, op, doc, cx, &mut false).await;
        };
        let view = discover::WithDiscovered {
            doc,
            discovered: &known,
        };
        let mut moved = false;
        match self.call_form(t, op, &view, cx, &mut moved).await {
            Err(e) if moved => {
                let Some(fresh) = self.discovered(t, cx, true).await else {
                    return Err(e);
                };
                if fresh == known {
                    return Err(e);
                }
                let view = discover::WithDiscovered {
                    doc,
                    discovered: &fresh,
                };
                self.call_form(t, op, &view, cx, &mut false).await
            }
            other => other,
        }
    }

    /// Calls the back's form of `op` for `doc`: of several forms the first whose `when` holds;
    /// an operation made of several calls (`then`) makes them in order, each written from the
    /// document as the answers so far have updated it. `moved` is set when a call failed as if
    /// the agent were no longer where it was called.
    async fn call_form(
        &self,
        t: &Translated,
        op: Operation,
        doc: &dyn Doc,
        cx: &mut Cx<'_>,
        moved: &mut bool,
    ) -> Result<Decoded, ProxyError> {
        let bop = self.back_form(t, op, doc)?;
        let mut calls = translation::calls(bop);
        let Some(first) = calls.next() else {
            return Err(ProxyError::Internal(format!("`{}` has no call", bop.key)));
        };
        // The calls after the first read a document made of answers: the task is named here.
        let task = doc.stored_task_id();
        let mut answer = self
            .call_once(t, first, (doc, task), Decoded::default(), cx, moved)
            .await?;
        if bop.then.is_empty() {
            return Ok(answer);
        }
        let mut running = Decoded::from(doc.to_value());
        let ctx = t.back_ctx();
        for next in calls {
            running.merge(&answer);
            if next
                .when
                .is_some_and(|w| !dialect::holds(w, &running, &ctx))
            {
                continue;
            }
            // Each answer is read onto the ones before, so its rules can see them.
            answer = self
                .call_once(t, next, (&running, task), answer, cx, moved)
                .await?;
        }
        Ok(answer)
    }

    /// The create form for `task`: of several, the first whose `when` holds with what the
    /// back's discovery says in view. Chosen before the task is stored, since it decides how
    /// the task is followed; `create` records it on the task.
    async fn choose_create<'m>(
        &self,
        t: &'m Translated,
        task: &Task,
        cx: &mut Cx<'_>,
    ) -> Result<&'m Op, ProxyError> {
        let unsupported = || ProxyError::Unsupported {
            operation: Operation::CreateTask.name().to_string(),
        };
        if t.back.forms(Operation::CreateTask).nth(1).is_none() {
            return t.back.op(Operation::CreateTask).ok_or_else(unsupported);
        }
        let doc = Canonical::back(task);
        match self.discovered(t, cx, false).await {
            Some(known) => {
                let view = discover::WithDiscovered {
                    doc: &doc,
                    discovered: &known,
                };
                self.back_form(t, Operation::CreateTask, &view)
            }
            None => self.back_form(t, Operation::CreateTask, &doc),
        }
    }

    /// The form of `op` the back uses for `doc`.
    fn back_form<'m>(
        &self,
        t: &'m Translated,
        op: Operation,
        doc: &dyn Doc,
    ) -> Result<&'m Op, ProxyError> {
        // A task is created with the form chosen for it when it was stored (see `create`), even
        // if discovery made afresh on the way would now choose another.
        if op == Operation::CreateTask {
            if let Some(Value::String(key)) =
                doc.get(&["task".to_string(), "back_form".to_string()])
            {
                if let Some(o) = t.back.forms(op).find(|o| o.key == *key) {
                    return Ok(o);
                }
            }
        }
        let ctx = t.back_ctx();
        t.back
            .forms(op)
            .find(|o| o.when.as_ref().is_none_or(|w| dialect::holds(w, doc, &ctx)))
            .ok_or_else(|| ProxyError::Unsupported {
                operation: op.name().to_string(),
            })
    }

    /// One HTTP call to the back: `doc` written with the call's request rules, the answer read
    /// onto `seed` with its response rules. An answer whose rules find an `error` (a JSON-RPC
    /// error in a 200) is the back's error. `task` is the stored task the call is for, if any:
    /// on a route that pays agents, a 402 is paid and the call made again, booked against it
    /// (see `x402_pay`).
    async fn call_once(
        &self,
        t: &Translated,
        call: translation::Call<'_>,
        (doc, task): (&dyn Doc, Option<&str>),
        seed: Decoded,
        cx: &mut Cx<'_>,
        moved: &mut bool,
    ) -> Result<Decoded, ProxyError> {
        let (msg, path) = translation::write_call(call, doc, &t.back_ctx())?;
        // A target (e.g. the URL an agent's card names) replaces the upstream's base_path; the
        // call still goes to the route's upstream, whatever host the target names.
        let to = call
            .target
            .and_then(|e| dialect::evaluate(e, doc, &t.back_ctx()))
            .map(|v| text_of(&v))
            .filter(|v| !v.is_empty());
        let target = match to {
            Some(to) => {
                let (prefix, query) = discover::path_of(&to).ok_or_else(|| {
                    ProxyError::Upstream(UpstreamError::Invalid {
                        upstream: t.upstream.config.name.clone(),
                        dialect: t.back.name.clone(),
                        detail: format!("`{to}` is not a URL or path to call"),
                    })
                })?;
                discover::join(&prefix, &query, &path, &msg)
            }
            None => {
                let mut target = format!("{}{path}", t.upstream.config.base_path);
                if !msg.query.is_empty() {
                    target.push('?');
                    target.push_str(&render_query(&msg.query));
                }
                target
            }
        };
        let body = match &msg.body {
            Some(b) => Some(Bytes::from(
                serde_json::to_vec(b).map_err(|e| ProxyError::Internal(e.to_string()))?,
            )),
            None => None,
        };
        let span = trace::agent_call(
            &t.upstream.config,
            &t.back.name,
            Some(call.name),
            call.method,
        );
        if !span.is_none() {
            if let Some(c) = doc.get(&["task".to_string(), "conversation".to_string()]) {
                span.record("gen_ai.conversation.id", text_of(c));
            }
        }
        let header = request_header(call.method, &target, t, &msg, body.as_ref(), cx, &span)?;
        // Kept only where an agent may be paid: the same request is sent again, paid.
        let retry = t.x402_pay.as_ref().map(|_| x402_pay::Retry {
            header: header.clone(),
            body: body.clone(),
            span: span.clone(),
        });
        let answer = match self.exchange(t, header, body, span).await {
            Ok(a) => a,
            Err(e) => {
                *moved = matches!(e, UpstreamError::Failed { .. });
                return Err(e.into());
            }
        };
        let answer = match retry {
            // Boxed, as every large future the engine awaits deep down: see `handle`.
            Some(retry) if answer.status == 402 => {
                Box::pin(self.pay_and_retry(t, task, answer, retry, cx)).await?
            }
            _ => answer,
        };
        cx.spent.upstream += answer.took;
        let parsed = parse_answer(&answer.body);
        *moved = matches!(answer.status, 404 | 405) || answer.status >= 500;
        if answer.status >= 400 {
            return Err(self.back_error(t, answer.status, parsed, &answer.body));
        }
        if !(200..300).contains(&answer.status) {
            return Err(ProxyError::Upstream(UpstreamError::Failed {
                upstream: t.upstream.config.name.clone(),
                detail: format!("unexpected status {}", answer.status),
            }));
        }
        let reply = Message {
            headers: answer.headers,
            body: parsed,
            ..Message::default()
        };
        translation::read_answer(call, &reply, &t.back_ctx(), seed, &t.upstream.config.name)
    }

    /// Sends one request to the back in `span`, the call's `invoke_agent` span (see
    /// [`trace::agent_call`]), which records the answer's status or why there is none.
    async fn exchange(
        &self,
        t: &Translated,
        header: RequestHeader,
        body: Option<Bytes>,
        span: Span,
    ) -> Result<crate::upstream::Answer, UpstreamError> {
        // Boxed, as every large future the engine awaits deep down: see `handle`.
        let answer = Box::pin(self.client.call(&t.upstream, header, body))
            .instrument(span.clone())
            .await;
        match &answer {
            Ok(a) => trace::agent_answered(&span, Ok(a.status)),
            Err(e) => trace::agent_answered(&span, Err(ProxyError::from(e.clone()).code())),
        }
        answer
    }

    /// An error answer from the back: its message, read with the back's error rules.
    fn back_error(
        &self,
        t: &Translated,
        status: u16,
        body: Option<Value>,
        raw: &[u8],
    ) -> ProxyError {
        let from_rules = body.as_ref().and_then(|b| {
            let rules = t.back.error.as_ref()?;
            let msg = Message::with_body(b.clone());
            let doc = Decoded::from(dialect::decode(rules, &msg, &t.back_ctx()).ok()?);
            doc.error()?
                .message
                .as_ref()
                .and_then(mapping::dialect::doc::scalar_text)
        });
        let message = from_rules.unwrap_or_else(|| {
            let text = String::from_utf8_lossy(raw);
            let text: String = text.chars().take(200).collect();
            if text.trim().is_empty() {
                format!("status {status}")
            } else {
                text
            }
        });
        translation::back_error(&t.upstream.config.name, status, message)
    }
}

/// The request header for a back call: the mapping's headers, the route's credential for the
/// agent, the caller's verified identity when the route passes it on, and the trace context
/// (`span`'s, the call's own, when traced; else the client's). The client's own `Authorization`
/// never gets here: the engine builds upstream requests from scratch.
fn request_header(
    method: &Method,
    target: &str,
    t: &Translated,
    msg: &Message,
    body: Option<&Bytes>,
    cx: &Cx<'_>,
    span: &Span,
) -> Result<RequestHeader, ProxyError> {
    let internal = |e: Box<pingora::Error>| {
        ProxyError::Internal(format!("building the upstream request: {e}"))
    };
    let mut h = RequestHeader::build(method.clone(), target.as_bytes(), None).map_err(internal)?;
    let c = &t.upstream.config;
    let host = if c.tls { c.sni.clone() } else { c.authority() };
    h.insert_header(http::header::HOST, host)
        .map_err(internal)?;
    h.insert_header(http::header::ACCEPT, "application/json")
        .map_err(internal)?;
    h.insert_header(crate::request_id::HEADER, cx.request_id)
        .map_err(internal)?;
    if let Some(b) = body {
        h.insert_header(http::header::CONTENT_TYPE, "application/json")
            .map_err(internal)?;
        h.insert_header(http::header::CONTENT_LENGTH, b.len().to_string())
            .map_err(internal)?;
    } else if *method != Method::GET && *method != Method::HEAD {
        h.insert_header(http::header::CONTENT_LENGTH, "0")
            .map_err(internal)?;
    }
    for (k, v) in &msg.headers {
        h.insert_header(k.clone(), v.as_str()).map_err(internal)?;
    }
    crate::upstream::add_route_headers(&mut h, &t.access, cx.identity.map(|i| i.caller()))
        .map_err(internal)?;
    trace::propagate(span, cx.trace, &mut h).map_err(internal)?;
    Ok(h)
}

/// An answer's body as the back mapping reads it: JSON when it is JSON; server-sent events
/// (`data:` lines) as the list of their JSON payloads; other text as a string; nothing as
/// nothing.
fn parse_answer(raw: &[u8]) -> Option<Value> {
    if raw.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    if let Ok(v) = serde_json::from_slice::<Value>(raw) {
        return Some(v);
    }
    let text = String::from_utf8_lossy(raw);
    let events: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .filter(|d| !d.is_empty() && *d != "[DONE]")
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect();
    if !events.is_empty() {
        return Some(Value::Array(events));
    }
    Some(Value::String(text.into_owned()))
}

/// Reads `msg` with `rules` (a front's request: an error is the request's, see
/// [`invalid_request`]).
fn decode(rules: &Rules, msg: &Message, ctx: &Context<'_>) -> Result<Decoded, ProxyError> {
    dialect::decode(rules, msg, ctx)
        .map(Decoded::from)
        .map_err(invalid_request)
}

/// A front request the mapping cannot read. A missing or mistyped field says which, so that the
/// front's error rules can answer field by field (FastAPI's 422 `detail` list, for one).
fn invalid_request(e: CodecError) -> ProxyError {
    let (problem, expected) = match &e {
        CodecError::Missing { .. } => ("missing", None),
        CodecError::WrongType { expected, .. } => (
            "wrong_type",
            Some(expected.trim_start_matches("an ").trim_start_matches("a ")),
        ),
        _ => return ProxyError::InvalidRequest(e.to_string()),
    };
    let (location, name) = field_place(e.field());
    ProxyError::InvalidField {
        message: e.to_string(),
        field: crate::error::BadField {
            location,
            name,
            problem,
            expected,
        },
    }
}

/// Where a rule's label (`$.a.b`, `query job_id`, `param did`, `header X`) points: the part of
/// the request, and the field's name in it.
fn field_place(label: &str) -> (&'static str, String) {
    for (prefix, location) in [
        ("query ", "query"),
        ("param ", "path"),
        ("header ", "header"),
    ] {
        if let Some(name) = label.strip_prefix(prefix) {
            return (location, name.to_string());
        }
    }
    let name = label.trim_start_matches('$').trim_start_matches('.');
    ("body", name.to_string())
}

/// `fop`'s answer written whole from `doc` (an operation's result, or an `[answer.NAME]` form's
/// rules over the request and the route's agent): its status, its header rules, and its body as
/// JSON (`application/json` unless a rule names another JSON media type: A2A's HTTP+JSON answers
/// `application/a2a+json`). A form that writes no body answers none, and no content type (a
/// 202 to an MCP notification or a POSTed response).
fn full_answer(fop: &Op, doc: &dyn Doc, ctx: &Context<'_>) -> Result<FrontResponse, ProxyError> {
    let rendered = translation::render_answer(fop, doc, ctx)?;
    let mut headers = rendered.headers;
    let body = match rendered.body {
        Some(b) => {
            if !headers
                .iter()
                .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
            {
                headers.push(("content-type".to_string(), "application/json".to_string()));
            }
            serde_json::to_vec(&b).map_err(|e| ProxyError::Internal(e.to_string()))?
        }
        None => Vec::new(),
    };
    Ok(FrontResponse {
        status: fop.status,
        headers,
        body: Body::Full(body),
    })
}

/// `request.subject`: who is calling, for what a front binds to its caller (a sealed session, a
/// continuation).
fn echo_subject(echo: &mut Value, identity: &Identity) {
    if !echo.is_object() {
        *echo = Value::Object(Map::new());
    }
    if let Value::Object(o) = echo {
        o.insert(
            "subject".to_string(),
            Value::String(identity.subject.clone()),
        );
    }
}

/// The `PAYMENT-RESPONSE` header of a settlement this request made (x402).
fn receipt(cx: &Cx<'_>) -> Option<(String, String)> {
    cx.receipt.as_ref().map(|r| {
        (
            crate::payment::x402::wire::PAYMENT_RESPONSE.to_string(),
            crate::payment::x402::wire::encode_header(r),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A route `r` to the back `back_text` (its front, too), on an upstream never called.
    fn translated(back_text: &str) -> Translated {
        let text = "[[listeners]]\naddress = \"127.0.0.1:0\"\n\n\
            [[upstreams]]\nname = \"up\"\naddress = \"127.0.0.1:9\"\n\n\
            [[routes]]\nname = \"r\"\nmatch = { path_prefix = \"/\" }\nupstream = \"up\"\n\
            front = \"mip003\"\nback = \"d\"\n";
        let config = crate::config::parse(text, "t.toml").unwrap_or_else(|p| panic!("{p}"));
        let compiled =
            || mapping::dialect::compile::parse(back_text, "d").unwrap_or_else(|p| panic!("{p}"));
        let upstreams = crate::upstream::Upstreams::new(&config.upstreams);
        Translated::new(
            &config.routes[0],
            Arc::new(compiled()),
            Arc::new(compiled()),
            upstreams.get(0).expect("the upstream").clone(),
            Arc::from(&[0u8; 32][..]),
        )
    }

    /// The `Accept` a back call is sent with, its form written from an empty document.
    fn accept_sent(back_text: &str) -> Vec<String> {
        let t = translated(back_text);
        let op = t.back.op(Operation::CreateTask).expect("a create form");
        let (msg, path) = translation::write_call(
            translation::calls(op).next().expect("a call"),
            &Canonical::empty(),
            &t.back_ctx(),
        )
        .expect("written");
        let mut spent = Spent::default();
        let cx = Cx {
            request_id: "r-1",
            identity: None,
            trace: None,
            spent: &mut spent,
            paid: None,
            receipt: None,
        };
        let h = request_header(&op.method, &path, &t, &msg, None, &cx, &Span::none())
            .expect("a header");
        h.headers
            .get_all(http::header::ACCEPT)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect()
    }

    #[test]
    fn back_calls_accept_json_unless_the_mapping_names_its_own_accept() {
        let plain = "dialect = \"d\"\n[operations.create_task]\nmethod = \"POST\"\npath = \"/\"\n";
        assert_eq!(accept_sent(plain), ["application/json"]);
        // MCP's Streamable HTTP asks clients to accept both (MCP 2025-11-25, basic/transports),
        // and the SDK's servers answer 406 otherwise: the mapping's rule replaces the default
        // rather than adding a second header.
        let both = format!(
            "{plain}request = [{{ header = \"Accept\", value = \"'application/json, text/event-stream'\" }}]\n"
        );
        assert_eq!(accept_sent(&both), ["application/json, text/event-stream"]);
    }

    #[test]
    fn a_missing_or_mistyped_field_says_where_it_is_and_what_was_wanted() {
        let missing = invalid_request(CodecError::Missing {
            field: "$.identifier_from_purchaser".to_string(),
        });
        let ProxyError::InvalidField { field, message } = &missing else {
            panic!("{missing:?}");
        };
        assert_eq!(
            (
                field.location,
                field.name.as_str(),
                field.problem,
                field.expected
            ),
            ("body", "identifier_from_purchaser", "missing", None)
        );
        assert_eq!(message, "`$.identifier_from_purchaser` is missing");
        assert_eq!(missing.status(), 400);
        let typed = invalid_request(CodecError::WrongType {
            field: "query job_id".to_string(),
            expected: "a string",
        });
        let ProxyError::InvalidField { field, .. } = &typed else {
            panic!("{typed:?}");
        };
        assert_eq!(
            (
                field.location,
                field.name.as_str(),
                field.problem,
                field.expected
            ),
            ("query", "job_id", "wrong_type", Some("string"))
        );
        let doc = views::error_doc(&typed, "r-1").to_value();
        assert_eq!(doc["error"]["location"], "query");
        assert_eq!(doc["error"]["expected"], "string");
        // Anything else stays a plain invalid request.
        let other = invalid_request(CodecError::Invalid {
            field: "$.x".to_string(),
            message: "odd".to_string(),
        });
        assert!(matches!(other, ProxyError::InvalidRequest(_)));
    }
}
