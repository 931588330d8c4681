//! The back as one component: every call to a route's agent (its form chosen, written with
//! the back mapping, sent through `upstream::Client`, its answer read), what the agent's
//! discovery said (`discover`), its input schema kept for a minute, and an agent's 402 paid
//! (`x402_pay`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Method;
use parking_lot::Mutex;
use pingora::http::RequestHeader;
use serde_json::Value;
use tracing::{Instrument, Span};

use crate::engine::{documents, Cx, Translated};
use crate::error::ProxyError;
use crate::telemetry::trace::{self};
use crate::upstream::Client;
use crate::upstream::UpstreamError;
use mapping::dialect::doc::text_of;
use mapping::dialect::mapping::Op;
use mapping::dialect::template::render_query;
use mapping::dialect::{self, Canonical, Decoded, Doc, Message};
use mapping::task::{Operation, Task};
use store::TaskStore;

mod discover;
mod x402_pay;

/// The routes' agents, as the operations reach them: every call (`call`), what each agent's
/// discovery said, the input schemas fetched from them. One per engine; the caches are keyed
/// by route.
pub(in crate::engine) struct Back {
    client: Arc<Client>,
    /// Where an agent's 402, paid, is booked (the cost ledger).
    store: Arc<dyn TaskStore>,
    /// What backs' `[discover]` calls said, per route.
    discovery: discover::Cache,
    /// Input schemas fetched from backs, per route, with when they were fetched.
    schemas: Mutex<HashMap<String, (Instant, Value)>>,
}

/// How long a schema fetched from a back is reused.
const SCHEMA_TTL: Duration = Duration::from_secs(60);

impl Back {
    pub(in crate::engine) fn new(client: Arc<Client>, store: Arc<dyn TaskStore>) -> Back {
        Back {
            client,
            store,
            discovery: discover::Cache::default(),
            schemas: Mutex::new(HashMap::new()),
        }
    }

    /// Forgets what route `name`'s back said about itself (its input schema, its discovery).
    pub(in crate::engine) fn forget_route(&self, name: &str) {
        self.schemas.lock().remove(name);
        self.discovery.forget(name);
    }

    /// The input schema of the route's agent: declared on the route, else the back's own
    /// (fetched, kept for a minute), else the back mapping's.
    pub(in crate::engine) async fn input_schema(
        &self,
        t: &Translated,
        cx: &mut Cx<'_>,
    ) -> Result<Value, ProxyError> {
        if let Some(s) = &t.settings.input_schema {
            return Ok(s.clone());
        }
        if t.back.op(Operation::InputSchema).is_some() {
            if let Some((at_time, s)) = self.schemas.lock().get(&t.route) {
                if at_time.elapsed() < SCHEMA_TTL {
                    return Ok(s.clone());
                }
            }
            let schema = match self
                .call(t, Operation::InputSchema, &Canonical::empty(), cx)
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

    /// The span of one call to the store; see [`crate::engine::store_span`].
    fn store_span(&self, op: &'static str) -> Span {
        crate::engine::store_span(&*self.store, op)
    }

    /// Calls operation `op` of the back with the canonical document `doc`; returns what the
    /// back's answer says, as a canonical document. A back with `[discover]` is called with what
    /// it discovered in view (`discovered.*`); when the call fails as if the agent had moved (no
    /// connection, 404, 405, 5xx), discovery is made afresh and, if it now says something else,
    /// the call is made once more. Nothing is retried when discovery says the same: the failure
    /// is then the agent's answer, and a second create could start a second task.
    pub(in crate::engine) async fn call(
        &self,
        t: &Translated,
        op: Operation,
        doc: &dyn Doc,
        cx: &mut Cx<'_>,
    ) -> Result<Decoded, ProxyError> {
        let Some(known) = self.discovered(t, cx, false).await else {
            return self.call_form(t, op, doc, cx, &mut false).await;
        };
        let view = mapping::dialect::doc::WithDiscovered {
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
                let view = mapping::dialect::doc::WithDiscovered {
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
        let mut calls = documents::calls(bop);
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
    pub(in crate::engine) async fn choose_create<'m>(
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
                let view = mapping::dialect::doc::WithDiscovered {
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
        call: documents::Call<'_>,
        (doc, task): (&dyn Doc, Option<&str>),
        seed: Decoded,
        cx: &mut Cx<'_>,
        moved: &mut bool,
    ) -> Result<Decoded, ProxyError> {
        let (msg, path) = documents::write_call(call, doc, &t.back_ctx())?;
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
        documents::read_answer(call, &reply, &t.back_ctx(), seed, &t.upstream.config.name)
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
        documents::back_error(&t.upstream.config.name, status, message)
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
        let (msg, path) = documents::write_call(
            documents::calls(op).next().expect("a call"),
            &Canonical::empty(),
            &t.back_ctx(),
        )
        .expect("written");
        let cx = Cx {
            request_id: "r-1",
            identity: None,
            trace: None,
            spent: crate::engine::Spent::default(),
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
}
