//! Where a front request becomes a canonical operation: its body read (depth, JSON), the
//! front mapping's `[request]` rules and checks, the operation and its document
//! (`documents::read_front`), who is calling (a token, or an x402 payment), then the operation
//! carried out (`ops/`) and its answer rendered (`answer`).

use std::sync::Arc;

use bytes::Bytes;
use http::Method;
use serde_json::{Map, Value};
use tracing::Span;

use super::admission::Admission;
use super::answer::{self, Body, FrontResponse};
use super::documents::{self, decode};
use super::{ops, stream, Cx, Engine, Spent, Translated};
use crate::auth::Identity;
use crate::error::ProxyError;
use crate::telemetry::trace::{self, ClientTrace};
use mapping::dialect::template::parse_query;
use mapping::dialect::{Canonical, Message};
use mapping::task::Operation;

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

/// What the engine made of one front request.
pub struct Outcome {
    /// The answer to send: the operation's, or the error it ended with, rendered in the
    /// front's dialect (see [`super::answer`]).
    pub response: FrontResponse,
    /// What the request cost: time waiting for agents, credits charged.
    pub spent: Spent,
    /// What it failed with, for the access log and the connection; `None` when it did not.
    pub error: Option<ProxyError>,
}

/// What a request has said and cost so far, kept for its answer whichever way it ends.
#[derive(Default)]
struct Said {
    /// What the front's `[request]` rules read (a JSON-RPC id), and who is calling: an error
    /// answer carries it too.
    echo: Value,
    spent: Spent,
}

impl Engine {
    /// Answers one front request on route `t`: the operation's answer, or the error it met
    /// rendered in the front's dialect, with what the request cost. Never fails: every
    /// failure is an answer.
    pub async fn handle(self: &Arc<Self>, t: &Arc<Translated>, req: FrontRequest<'_>) -> Outcome {
        let request_id = req.request_id;
        let mut said = Said::default();
        match self.carry_out(t, req, &mut said).await {
            Ok(response) => Outcome {
                response,
                spent: said.spent,
                error: None,
            },
            Err(err) => Outcome {
                response: answer::error(&err, request_id, Some(&said.echo), Some(&t.front), None),
                spent: said.spent,
                error: Some(err),
            },
        }
    }

    /// The front request read, its operation carried out and its answer rendered; `said`
    /// keeps what an error answer needs.
    async fn carry_out(
        self: &Arc<Self>,
        t: &Arc<Translated>,
        req: FrontRequest<'_>,
        said: &mut Said,
    ) -> Result<FrontResponse, ProxyError> {
        let echo = &mut said.echo;
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
        if let Some(r) = documents::read_echo(&t.front, &msg, &t.front_ctx())? {
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
            documents::check(&t.front.request_checks, &doc, &t.front_ctx())?;
        }
        let (fop, mut doc) =
            documents::read_front(&t.front, &t.front_ctx(), req.method, req.path, &mut msg)?;
        // Who a request without a token is, on a route that takes x402 (engine/admission.rs).
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
                    Admission::Unpaid(r)
                }
                other => other?,
            }
        } else {
            Admission::Free
        };
        let payer = match &admission {
            Admission::Free | Admission::Unpaid(_) => None,
            Admission::Payer(id) => Some(id.clone()),
            Admission::Paid(v) => Some(v.identity()),
        };
        if let Some(id) = &payer {
            echo_subject(echo, id);
        }
        let mut cx = Cx {
            request_id: req.request_id,
            identity: payer.as_ref().or(req.identity),
            trace: Some(req.trace),
            spent: Spent::default(),
            paid: match &admission {
                Admission::Paid(v) => Some(&**v),
                _ => None,
            },
            receipt: None,
        };
        // Whatever the operation ends in, what it cost is the request's.
        let answered = async {
            let cx = &mut cx;
            // What the operation's own rules read into `request.*` (a bearer token an answer hands
            // back) joins what the `[request]` rules read.
            let request = mapping::dialect::doc::request(echo, cx.request_id, doc.request());
            doc.set_request(request.clone());
            if !fop.checks.is_empty() || fop.reply {
                let agent = ops::agent(t, req.prefix, base_url.clone());
                let view = Canonical::decoded(doc.clone()).with_agent(&agent);
                documents::check(&fop.checks, &view, &t.front_ctx())?;
                if fop.reply {
                    return answer::result(fop, &view, &t.front_ctx());
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
                    Admission::Unpaid(r) => Box::pin(self.keep_unpaid(t, fop, &doc, r, cx)).await?,
                    _ => Box::pin(self.create(t, fop, doc, cx)).await?,
                },
                Operation::GetTask | Operation::ListSteps => {
                    Box::pin(self.get(t, &doc, cx)).await?
                }
                Operation::ProvideInput => {
                    match Box::pin(self.provide_input(t, fop, doc, cx)).await {
                        // The conversation's task has ended, or there is none: a new task.
                        Err(ProxyError::TaskNotFound(_) | ProxyError::TaskEnded(_))
                            if fop.otherwise.is_some() =>
                        {
                            let create = fop
                                .otherwise
                                .as_ref()
                                .and_then(|k| t.front.ops.iter().find(|o| &o.key == k))
                                .ok_or_else(|| {
                                    ProxyError::Internal("no create form".to_string())
                                })?;
                            let mut doc = decode(&create.request, &msg, &t.front_ctx())?;
                            doc.set_request(request.clone());
                            Box::pin(self.create(t, create, doc, cx)).await?
                        }
                        other => other?,
                    }
                }
                Operation::CancelTask => Box::pin(self.cancel(t, &doc, cx)).await?,
                Operation::SearchTasks => Box::pin(self.search(t, &doc, cx)).await?,
                Operation::SearchSteps => Box::pin(self.search_steps(t, &doc, cx)).await?,
                Operation::Availability => Box::pin(self.availability(t, cx)).await?,
                Operation::InputSchema => {
                    Canonical::empty().with_schema(Box::pin(self.back.input_schema(t, cx)).await?)
                }
                Operation::Describe => Box::pin(self.describe(t, req.prefix, base_url, cx)).await?,
            };
            let mut out = out.with_request(request);
            if t.sell.is_some() {
                // A route that sells shows its own payment requests, never its agent's.
                out = out.without_back_payment();
            }
            if let Some(receipt) = &cx.receipt {
                out =
                    out.with_payment_receipt(serde_json::to_value(receipt).unwrap_or(Value::Null));
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
                let mut headers = answer::events_head(fop, &out, &t.front_ctx())?;
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
            let mut answer = answer::result(fop, &out, &t.front_ctx())?;
            answer.headers.extend(receipt(cx));
            Ok(answer)
        }
        .await;
        said.spent = cx.spent;
        answered
    }
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
