//! A sample NEAR AI Hub agent (docs/dialects.md): the threads/runs API, as OpenAI
//! Assistants-style JSON under `/v1`. Any bearer auth object is accepted.
//!
//! | route | answer |
//! |---|---|
//! | `POST /v1/threads` `{messages?, metadata?}` | Thread |
//! | `GET /v1/threads/{thread_id}` | Thread |
//! | `POST /v1/threads/{thread_id}/messages` `{role, content}` | Message |
//! | `GET /v1/threads/{thread_id}/messages?order=&limit=&after=&before=` | list of Messages |
//! | `POST /v1/threads/{thread_id}/runs` `{assistant_id, instructions?, additional_messages?, metadata?, stream?}` | Run, or an event stream with `stream: true` |
//! | `GET /v1/threads/{thread_id}/runs/{run_id}` | Run |
//! | `GET /v1/threads/{thread_id}/stream/{run_id}` | the run's event stream from now |
//!
//! Timeline of a run taking `work`: `queued` for the first quarter, `in_progress`, then
//! `completed`, at which point the thread holds an assistant message whose text is the last user
//! message upper-cased; or `failed` (mode `fail`) with `last_error`
//! `{"code":"server_error","message":"the agent failed on purpose"}` and no message.
//!
//! The mode is in the last user message's text (`mode:input`, `mode:fail`). With `mode:input` the
//! run completes but its message is the draft protocol's `request_data` envelope (as JSON text)
//! asking for a required field `more`; a new user message and a new run then complete with
//! `<ASKING TEXT UPPER-CASED> <new text>`.
//!
//! Streams carry `data: {"event": "thread.run.<status>", "data": Run}` frames (the event name
//! inside the JSON), plus `thread.message.created`/`.completed` before `thread.run.completed`,
//! as the run moves; they close after the terminal event. Errors are FastAPI's `{"detail": …}`:
//! 404 for an unknown thread or run, 400 for a bad role, 422 for a missing field.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use chrono::Utc;
use hyper::{Method, StatusCode};
use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::net::TcpListener;

use super::{str_field, Call, Mode, Options, Reply};

const SCHEMA: &str = "https://docs.near.ai/protocols/v1/agent_protocol.schema.json";
const FAILURE: &str = "the agent failed on purpose";

/// The draft protocol message a run in mode `input` answers.
pub fn request_data() -> Value {
    json!({"type": "json", "$schema": SCHEMA,
           "json": {"request_data": {"schema": SCHEMA,
                    "fields": [{"name": "more", "label": "More", "validation": ["required"]}]}}})
}

fn new_id(prefix: &str) -> String {
    let hex = uuid::Uuid::new_v4().simple().to_string();
    format!("{prefix}_{}", &hex[..24])
}

#[derive(Clone)]
struct Message {
    id: String,
    at: Instant,
    created_at: i64,
    role: String,
    text: String,
    metadata: Value,
}

#[derive(Clone)]
enum Outcome {
    /// Completes with this text.
    Reply(String),
    /// Completes asking for input; keeps the text that asked.
    Ask(String),
    /// Fails with this `last_error`.
    Fail(&'static str, String),
}

struct Run {
    id: String,
    thread_id: String,
    assistant_id: String,
    instructions: Value,
    metadata: Value,
    started: Instant,
    created_at: i64,
    outcome: Outcome,
    /// The id of the message the run posts, fixed at creation.
    message_id: String,
}

impl Run {
    /// The status at `now`, and when it began.
    fn status(&self, o: &Options, now: Instant) -> (&'static str, Instant) {
        let t = now.duration_since(self.started);
        if t < o.work / 4 {
            ("queued", self.started)
        } else if t < o.work {
            ("in_progress", self.started + o.work / 4)
        } else if matches!(self.outcome, Outcome::Fail(..)) {
            ("failed", self.started + o.work)
        } else {
            ("completed", self.started + o.work)
        }
    }

    fn unix(&self, at: Instant) -> i64 {
        self.created_at + i64::try_from(at.duration_since(self.started).as_secs()).unwrap_or(0)
    }

    fn render(&self, o: &Options, now: Instant) -> Value {
        let (status, since) = self.status(o, now);
        let started = (status != "queued").then(|| self.unix(self.started + o.work / 4));
        let ended = (status == "completed" || status == "failed").then(|| self.unix(since));
        let last_error = match (&self.outcome, status) {
            (Outcome::Fail(code, message), "failed") => json!({"code": code, "message": message}),
            _ => Value::Null,
        };
        json!({
            "id": self.id, "object": "thread.run", "created_at": self.created_at,
            "assistant_id": self.assistant_id, "thread_id": self.thread_id, "status": status,
            "started_at": started, "expires_at": null, "cancelled_at": null,
            "failed_at": if status == "failed" { ended } else { None },
            "completed_at": if status == "completed" { ended } else { None },
            "last_error": last_error, "model": "sample-upper", "instructions": self.instructions,
            "tools": [], "metadata": self.metadata, "usage": null,
        })
    }

    /// The message the run has posted by `now`, if any.
    fn message(&self, o: &Options, now: Instant) -> Option<Message> {
        let (status, since) = self.status(o, now);
        let text = match (&self.outcome, status) {
            (Outcome::Reply(t), "completed") => t.clone(),
            (Outcome::Ask(_), "completed") => request_data().to_string(),
            _ => return None,
        };
        Some(Message {
            id: self.message_id.clone(),
            at: since,
            created_at: self.unix(since),
            role: "assistant".into(),
            text,
            metadata: json!({}),
        })
    }
}

struct Thread {
    id: String,
    created_at: i64,
    metadata: Value,
    messages: Vec<Message>,
    runs: Vec<String>,
}

impl Thread {
    /// Posts each message of `list` (a JSON array; absent: none) in order, up to the first one
    /// refused; `Err` is that refusal.
    fn post_all(&mut self, list: Option<&Value>, now: Instant) -> Result<(), Reply> {
        for m in list.and_then(Value::as_array).into_iter().flatten() {
            self.messages.push(new_message(m, now)?);
        }
        Ok(())
    }
}

#[derive(Default)]
struct Hub {
    threads: HashMap<String, Thread>,
    runs: HashMap<String, Run>,
}

impl Hub {
    /// The thread `id`; `Err`: the 404 refusal.
    fn thread(&self, id: &str) -> Result<&Thread, Reply> {
        self.threads.get(id).ok_or_else(thread_not_found)
    }

    /// The thread `id`, to change; `Err`: the 404 refusal.
    fn thread_mut(&mut self, id: &str) -> Result<&mut Thread, Reply> {
        self.threads.get_mut(id).ok_or_else(thread_not_found)
    }

    /// The run `run_id` of the thread `thread_id`; `Err`: the 404 refusal naming whichever is
    /// unknown, the thread first.
    fn run(&self, thread_id: &str, run_id: &str) -> Result<&Run, Reply> {
        self.thread(thread_id)?;
        self.runs
            .get(run_id)
            .filter(|r| r.thread_id == thread_id)
            .ok_or_else(|| detail(StatusCode::NOT_FOUND, "Run not found"))
    }

    /// Every message of the thread at `now`, oldest first: those posted, and those its runs
    /// have posted.
    fn messages(&self, o: &Options, thread: &Thread, now: Instant) -> Vec<(Message, Option<&Run>)> {
        let mut all: Vec<(Message, Option<&Run>)> =
            thread.messages.iter().map(|m| (m.clone(), None)).collect();
        for run in thread.runs.iter().filter_map(|r| self.runs.get(r)) {
            if let Some(m) = run.message(o, now) {
                all.push((m, Some(run)));
            }
        }
        all.sort_by_key(|(m, _)| m.at);
        all
    }

    /// What a run created now on the thread will do.
    fn plan(&self, o: &Options, thread: &Thread, now: Instant) -> Outcome {
        let messages = self.messages(o, thread, now);
        let Some(last) = messages.iter().rposition(|(m, _)| m.role == "user") else {
            return Outcome::Fail("invalid_prompt", "the thread has no user message".into());
        };
        let text = messages[last].0.text.clone();
        let asked = messages[..last]
            .iter()
            .rev()
            .find_map(|(m, run)| match run {
                _ if m.role == "user" => Some(None),
                Some(Run {
                    outcome: Outcome::Ask(first),
                    ..
                }) => Some(Some(first.clone())),
                _ => None,
            });
        if let Some(Some(first)) = asked {
            return Outcome::Reply(format!("{} {text}", first.to_uppercase()));
        }
        match Mode::from_text(&text) {
            Mode::Fail => Outcome::Fail("server_error", FAILURE.into()),
            Mode::Input => Outcome::Ask(text),
            Mode::Ok => Outcome::Reply(text.to_uppercase()),
        }
    }
}

fn render_message(m: &Message, thread_id: &str, run: Option<&Run>) -> Value {
    json!({
        "id": m.id, "object": "thread.message", "created_at": m.created_at, "thread_id": thread_id,
        "status": "completed", "role": m.role,
        "content": [{"type": "text", "text": {"value": m.text, "annotations": []}}],
        "assistant_id": run.map(|r| r.assistant_id.clone()), "run_id": run.map(|r| r.id.clone()),
        "attachments": null, "metadata": m.metadata, "completed_at": m.created_at, "incomplete_at": null,
    })
}

fn render_thread(t: &Thread) -> Value {
    json!({"id": t.id, "object": "thread", "created_at": t.created_at, "metadata": t.metadata})
}

fn detail(status: StatusCode, message: &str) -> Reply {
    Reply::Json(status, json!({"detail": message}))
}

fn thread_not_found() -> Reply {
    detail(StatusCode::NOT_FOUND, "Thread not found")
}

/// A body's `metadata`; `{}` when it has none.
fn metadata(body: &Value) -> Value {
    body.get("metadata").cloned().unwrap_or(json!({}))
}

/// FastAPI's answer to a missing body field.
fn missing(field: &str, body: &Value) -> Reply {
    Reply::Json(
        StatusCode::UNPROCESSABLE_ENTITY,
        json!({"detail": [{"type": "missing", "loc": ["body", field], "msg": "Field required", "input": body}]}),
    )
}

/// A message body's text: a string, or text parts (`text` as a string or `{value}`) joined.
fn content_text(content: &Value) -> Option<String> {
    match content {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => Some(
            parts
                .iter()
                .filter_map(|p| p.get("text"))
                .filter_map(|t| t.as_str().or_else(|| str_field(t, "value")))
                .collect::<Vec<_>>()
                .join(" "),
        ),
        _ => None,
    }
}

/// Reads a message to post; `Err` is the reply refusing it.
fn new_message(body: &Value, at: Instant) -> Result<Message, Reply> {
    let role = match str_field(body, "role") {
        Some(r @ ("user" | "assistant")) => r,
        Some(_) => {
            return Err(detail(
                StatusCode::BAD_REQUEST,
                "Role must be 'user' or 'assistant'",
            ))
        }
        None => return Err(missing("role", body)),
    };
    let text = body
        .get("content")
        .and_then(content_text)
        .ok_or_else(|| missing("content", body))?;
    Ok(Message {
        id: new_id("msg"),
        at,
        created_at: Utc::now().timestamp(),
        role: role.into(),
        text,
        metadata: metadata(body),
    })
}

struct Agent {
    options: Options,
    hub: Mutex<Hub>,
}

/// Serves the agent on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, options: Options) {
    let agent = Arc::new(Agent {
        options,
        hub: Mutex::default(),
    });
    super::serve(listener, move |call| {
        let agent = agent.clone();
        async move { agent.handle(call) }
    })
    .await;
}

impl Agent {
    fn handle(self: Arc<Self>, call: Call) -> Reply {
        match self.route(&call) {
            Ok(reply) | Err(reply) => reply,
        }
    }

    /// The answer to `call`; `Err` is a refusal (an unknown thread or run, a bad body).
    fn route(self: Arc<Self>, call: &Call) -> Result<Reply, Reply> {
        let body = match &call.body {
            Some(Ok(v)) => v.clone(),
            Some(Err(e)) => {
                return Err(detail(
                    StatusCode::BAD_REQUEST,
                    &format!("JSON decode error: {e}"),
                ))
            }
            None => json!({}),
        };
        let o = &self.options;
        let now = o.clock.now();
        let segs: Vec<&str> = call.path.split('/').filter(|s| !s.is_empty()).collect();
        let mut hub = self.hub.lock();
        match (&call.method, segs.as_slice()) {
            (&Method::POST, ["v1", "threads"]) => {
                let mut thread = Thread {
                    id: new_id("thread"),
                    created_at: Utc::now().timestamp(),
                    metadata: metadata(&body),
                    messages: Vec::new(),
                    runs: Vec::new(),
                };
                thread.post_all(body.get("messages"), now)?;
                let rendered = render_thread(&thread);
                hub.threads.insert(thread.id.clone(), thread);
                Ok(Reply::Json(StatusCode::OK, rendered))
            }
            (&Method::GET, ["v1", "threads", thread_id]) => Ok(Reply::Json(
                StatusCode::OK,
                render_thread(hub.thread(thread_id)?),
            )),
            (&Method::POST, ["v1", "threads", thread_id, "messages"]) => {
                let thread = hub.thread_mut(thread_id)?;
                let m = new_message(&body, now)?;
                let rendered = render_message(&m, thread_id, None);
                thread.messages.push(m);
                Ok(Reply::Json(StatusCode::OK, rendered))
            }
            (&Method::GET, ["v1", "threads", thread_id, "messages"]) => {
                let thread = hub.thread(thread_id)?;
                let mut all: Vec<Value> = hub
                    .messages(o, thread, now)
                    .iter()
                    .map(|(m, run)| render_message(m, thread_id, *run))
                    .collect();
                if call.query("order") != Some("asc") {
                    all.reverse();
                }
                let position =
                    |id: Option<&str>| id.and_then(|id| all.iter().position(|m| m["id"] == id));
                let start = position(call.query("after")).map_or(0, |i| i + 1);
                let end = position(call.query("before"))
                    .unwrap_or(all.len())
                    .max(start);
                let limit = call
                    .query("limit")
                    .and_then(|l| l.parse::<usize>().ok())
                    .unwrap_or(20)
                    .clamp(1, 100);
                let page: Vec<Value> = all[start..end].iter().take(limit).cloned().collect();
                let has_more = end - start > page.len();
                let first_id = page.first().map(|m| m["id"].clone());
                let last_id = page.last().map(|m| m["id"].clone());
                Ok(Reply::Json(
                    StatusCode::OK,
                    json!({"object": "list", "data": page, "has_more": has_more,
                           "first_id": first_id, "last_id": last_id}),
                ))
            }
            (&Method::POST, ["v1", "threads", thread_id, "runs"]) => {
                let assistant_id = str_field(&body, "assistant_id")
                    .ok_or_else(|| missing("assistant_id", &body))?;
                hub.thread_mut(thread_id)?
                    .post_all(body.get("additional_messages"), now)?;
                let run = Run {
                    id: new_id("run"),
                    thread_id: thread_id.to_string(),
                    assistant_id: assistant_id.to_string(),
                    instructions: body.get("instructions").cloned().unwrap_or(Value::Null),
                    metadata: metadata(&body),
                    started: now,
                    created_at: Utc::now().timestamp(),
                    outcome: hub.plan(o, hub.thread(thread_id)?, now),
                    message_id: new_id("msg"),
                };
                let run_id = run.id.clone();
                let rendered = run.render(o, now);
                hub.runs.insert(run_id.clone(), run);
                hub.thread_mut(thread_id)?.runs.push(run_id.clone());
                drop(hub);
                if body.get("stream") == Some(&json!(true)) {
                    Ok(self.stream(run_id, true))
                } else {
                    Ok(Reply::Json(StatusCode::OK, rendered))
                }
            }
            (&Method::GET, ["v1", "threads", thread_id, verb @ ("runs" | "stream"), run_id]) => {
                let run = hub.run(thread_id, run_id)?;
                if *verb == "runs" {
                    return Ok(Reply::Json(StatusCode::OK, run.render(o, now)));
                }
                drop(hub);
                Ok(self.stream(run_id.to_string(), false))
            }
            _ => Err(detail(StatusCode::NOT_FOUND, "Not Found")),
        }
    }

    /// The run's events as they happen, from `thread.run.created` when `fresh`, else from its
    /// current status; the stream ends after the terminal event.
    fn stream(self: Arc<Self>, run_id: String, fresh: bool) -> Reply {
        let o = self.options.clone();
        let mut last: Option<&'static str> = None;
        Reply::polled(o.clone(), move || {
            let hub = self.hub.lock();
            let run = hub.runs.get(&run_id)?;
            let now = o.clock.now();
            let (status, _) = run.status(&o, now);
            let mut events = Vec::new();
            if last.is_none() && fresh {
                events.push(json!({"event": "thread.run.created", "data": run.render(&o, now)}));
            }
            if last != Some(status) {
                if let Some(m) = run.message(&o, now) {
                    let m = render_message(&m, &run.thread_id, Some(run));
                    events.push(json!({"event": "thread.message.created", "data": m}));
                    events.push(json!({"event": "thread.message.completed", "data": m}));
                }
                events.push(
                    json!({"event": format!("thread.run.{status}"), "data": run.render(&o, now)}),
                );
                last = Some(status);
            }
            Some((events, matches!(status, "completed" | "failed")))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{eventually, Agent, Events};

    /// Creates a thread from `body`; its id.
    async fn new_thread(agent: &Agent, body: Value) -> String {
        let (s, thread) = agent.post_json("/v1/threads", body).await;
        assert_eq!(s, 200, "{thread}");
        let id = thread["id"].as_str().unwrap();
        assert!(id.starts_with("thread_"), "{id}");
        id.to_string()
    }

    /// Starts a run on the thread and waits until it ends; the run, `completed` or `failed`.
    async fn run_to_end(agent: &Agent, thread: &str) -> Value {
        let (s, run) = agent
            .post_json(
                &format!("/v1/threads/{thread}/runs"),
                json!({"assistant_id": "near-ai-agents.near/assistant/latest"}),
            )
            .await;
        assert_eq!(s, 200, "{run}");
        assert_eq!(run["status"], "queued");
        let path = format!("/v1/threads/{thread}/runs/{}", run["id"].as_str().unwrap());
        eventually("the run to end", || async {
            let (_, r) = agent.get_json(&path).await;
            matches!(r["status"].as_str(), Some("completed" | "failed")).then_some(r)
        })
        .await
    }

    /// Posts a user message, then runs the thread to its end; the run.
    async fn turn(agent: &Agent, thread: &str, text: &str) -> Value {
        let (s, _) = agent
            .post_json(
                &format!("/v1/threads/{thread}/messages"),
                json!({"role": "user", "content": text}),
            )
            .await;
        assert_eq!(s, 200);
        run_to_end(agent, thread).await
    }

    /// The text of the thread's newest message, which must be the assistant's.
    async fn newest_text(agent: &Agent, thread: &str) -> String {
        let (_, list) = agent
            .get_json(&format!("/v1/threads/{thread}/messages?order=desc&limit=1"))
            .await;
        assert_eq!(list["data"][0]["role"], "assistant");
        list["data"][0]["content"][0]["text"]["value"]
            .as_str()
            .unwrap()
            .to_string()
    }

    #[tokio::test]
    async fn a_run_completes_and_posts_the_upper_cased_answer() {
        let agent = Agent::start(serve).await;
        let id = new_thread(&agent, json!({})).await;
        let run = turn(&agent, &id, "hello near").await;
        assert_eq!(run["status"], "completed", "{run}");
        assert!(run["completed_at"].is_i64() && run["started_at"].is_i64());
        assert_eq!(newest_text(&agent, &id).await, "HELLO NEAR");
        let (_, list) = agent
            .get_json(&format!("/v1/threads/{id}/messages?order=asc"))
            .await;
        let roles: Vec<&Value> = list["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| &m["role"])
            .collect();
        assert_eq!(roles, [&json!("user"), &json!("assistant")]);
        assert_eq!(list["data"][1]["run_id"], run["id"]);
        assert_eq!(list["first_id"], list["data"][0]["id"]);
        assert_eq!(list["has_more"], false);
    }

    #[tokio::test]
    async fn mode_input_asks_with_request_data_and_a_new_run_finishes() {
        let agent = Agent::start(serve).await;
        let id = new_thread(
            &agent,
            json!({"messages": [{"role": "user", "content": "ship it mode:input"}]}),
        )
        .await;
        let run = run_to_end(&agent, &id).await;
        assert_eq!(run["status"], "completed", "{run}");
        let asked: Value = serde_json::from_str(&newest_text(&agent, &id).await).unwrap();
        assert_eq!(asked, request_data());
        assert_eq!(asked["json"]["request_data"]["fields"][0]["name"], "more");
        let run = turn(&agent, &id, "to Berlin").await;
        assert_eq!(run["status"], "completed");
        assert_eq!(
            newest_text(&agent, &id).await,
            "SHIP IT MODE:INPUT to Berlin"
        );
    }

    #[tokio::test]
    async fn mode_fail_ends_the_run_failed_with_last_error() {
        let agent = Agent::start(serve).await;
        let id = new_thread(&agent, json!({})).await;
        let run = turn(&agent, &id, "x mode:fail").await;
        assert_eq!(run["status"], "failed");
        assert_eq!(
            run["last_error"],
            json!({"code": "server_error", "message": FAILURE})
        );
        assert!(run["failed_at"].is_i64());
        let (_, list) = agent.get_json(&format!("/v1/threads/{id}/messages")).await;
        assert_eq!(
            list["data"].as_array().unwrap().len(),
            1,
            "no assistant message"
        );
    }

    #[tokio::test]
    async fn a_streamed_run_sends_events_with_the_name_inside_the_json() {
        let agent = Agent::start(serve).await;
        let id = new_thread(
            &agent,
            json!({"messages": [{"role": "user", "content": "stream"}]}),
        )
        .await;
        let resp = agent
            .post(
                &format!("/v1/threads/{id}/runs"),
                json!({"assistant_id": "a", "stream": true}),
            )
            .await;
        let events = Events::new(resp).rest_json().await;
        let names: Vec<&str> = events
            .iter()
            .map(|e| e["event"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "thread.run.created",
                "thread.run.queued",
                "thread.run.in_progress",
                "thread.message.created",
                "thread.message.completed",
                "thread.run.completed"
            ]
        );
        assert_eq!(events[3]["data"]["content"][0]["text"]["value"], "STREAM");
    }

    #[tokio::test]
    async fn unknown_threads_and_runs_are_404_and_bad_bodies_are_refused() {
        let agent = Agent::start(serve).await;
        assert_eq!(
            agent.get_json("/v1/threads/thread_x/messages").await,
            (404, json!({"detail": "Thread not found"}))
        );
        let id = new_thread(&agent, json!({})).await;
        assert_eq!(
            agent
                .get_json(&format!("/v1/threads/{id}/runs/run_x"))
                .await,
            (404, json!({"detail": "Run not found"}))
        );
        let (s, _) = agent
            .post_json(
                &format!("/v1/threads/{id}/messages"),
                json!({"role": "system", "content": "x"}),
            )
            .await;
        assert_eq!(s, 400);
        let (s, v) = agent
            .post_json(&format!("/v1/threads/{id}/runs"), json!({}))
            .await;
        assert_eq!(s, 422);
        assert_eq!(v["detail"][0]["loc"], json!(["body", "assistant_id"]));
        let failed = run_to_end(&agent, &id).await;
        assert_eq!(failed["status"], "failed", "{failed}");
        assert_eq!(
            failed["last_error"]["code"], "invalid_prompt",
            "a thread without a user message"
        );
    }
}
