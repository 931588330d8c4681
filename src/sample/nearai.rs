//! A sample NEAR AI Hub agent (DIALECTS.md §2.6): the threads/runs API, as OpenAI
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
use std::time::{Duration, Instant};

use chrono::Utc;
use hyper::{Method, StatusCode};
use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::net::TcpListener;

use super::{Call, Mode, Options, Reply};

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

#[derive(Default)]
struct Hub {
    threads: HashMap<String, Thread>,
    runs: HashMap<String, Run>,
}

impl Hub {
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
                .filter_map(|t| {
                    t.as_str()
                        .or_else(|| t.get("value").and_then(Value::as_str))
                })
                .collect::<Vec<_>>()
                .join(" "),
        ),
        _ => None,
    }
}

/// Reads a message to post; `Err` is the reply refusing it.
fn new_message(body: &Value) -> Result<Message, Reply> {
    let role = match body.get("role").and_then(Value::as_str) {
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
        at: Instant::now(),
        created_at: Utc::now().timestamp(),
        role: role.into(),
        text,
        metadata: body.get("metadata").cloned().unwrap_or(json!({})),
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
        let body = match &call.body {
            Some(Ok(v)) => v.clone(),
            Some(Err(e)) => {
                return detail(StatusCode::BAD_REQUEST, &format!("JSON decode error: {e}"))
            }
            None => json!({}),
        };
        let o = &self.options;
        let now = Instant::now();
        let segs: Vec<&str> = call.path.split('/').filter(|s| !s.is_empty()).collect();
        let mut hub = self.hub.lock();
        match (&call.method, segs.as_slice()) {
            (&Method::POST, ["v1", "threads"]) => {
                let mut thread = Thread {
                    id: new_id("thread"),
                    created_at: Utc::now().timestamp(),
                    metadata: body.get("metadata").cloned().unwrap_or(json!({})),
                    messages: Vec::new(),
                    runs: Vec::new(),
                };
                for m in body
                    .get("messages")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    match new_message(m) {
                        Ok(m) => thread.messages.push(m),
                        Err(reply) => return reply,
                    }
                }
                let rendered = render_thread(&thread);
                hub.threads.insert(thread.id.clone(), thread);
                Reply::Json(StatusCode::OK, rendered)
            }
            (&Method::GET, ["v1", "threads", thread_id]) => match hub.threads.get(*thread_id) {
                Some(t) => Reply::Json(StatusCode::OK, render_thread(t)),
                None => detail(StatusCode::NOT_FOUND, "Thread not found"),
            },
            (&Method::POST, ["v1", "threads", thread_id, "messages"]) => {
                let Some(thread) = hub.threads.get_mut(*thread_id) else {
                    return detail(StatusCode::NOT_FOUND, "Thread not found");
                };
                match new_message(&body) {
                    Ok(m) => {
                        let rendered = render_message(&m, thread_id, None);
                        thread.messages.push(m);
                        Reply::Json(StatusCode::OK, rendered)
                    }
                    Err(reply) => reply,
                }
            }
            (&Method::GET, ["v1", "threads", thread_id, "messages"]) => {
                let Some(thread) = hub.threads.get(*thread_id) else {
                    return detail(StatusCode::NOT_FOUND, "Thread not found");
                };
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
                Reply::Json(
                    StatusCode::OK,
                    json!({"object": "list", "data": page, "has_more": has_more,
                           "first_id": first_id, "last_id": last_id}),
                )
            }
            (&Method::POST, ["v1", "threads", thread_id, "runs"]) => {
                let Some(assistant_id) = body.get("assistant_id").and_then(Value::as_str) else {
                    return missing("assistant_id", &body);
                };
                let Some(thread) = hub.threads.get_mut(*thread_id) else {
                    return detail(StatusCode::NOT_FOUND, "Thread not found");
                };
                for m in body
                    .get("additional_messages")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    match new_message(m) {
                        Ok(m) => thread.messages.push(m),
                        Err(reply) => return reply,
                    }
                }
                let thread = &hub.threads[*thread_id];
                let run = Run {
                    id: new_id("run"),
                    thread_id: thread_id.to_string(),
                    assistant_id: assistant_id.to_string(),
                    instructions: body.get("instructions").cloned().unwrap_or(Value::Null),
                    metadata: body.get("metadata").cloned().unwrap_or(json!({})),
                    started: now,
                    created_at: Utc::now().timestamp(),
                    outcome: hub.plan(o, thread, now),
                    message_id: new_id("msg"),
                };
                let run_id = run.id.clone();
                let rendered = run.render(o, now);
                hub.runs.insert(run_id.clone(), run);
                if let Some(t) = hub.threads.get_mut(*thread_id) {
                    t.runs.push(run_id.clone());
                }
                drop(hub);
                if body.get("stream") == Some(&json!(true)) {
                    self.stream(run_id, true)
                } else {
                    Reply::Json(StatusCode::OK, rendered)
                }
            }
            (&Method::GET, ["v1", "threads", thread_id, verb @ ("runs" | "stream"), run_id]) => {
                if !hub.threads.contains_key(*thread_id) {
                    return detail(StatusCode::NOT_FOUND, "Thread not found");
                }
                let Some(run) = hub.runs.get(*run_id).filter(|r| r.thread_id == *thread_id) else {
                    return detail(StatusCode::NOT_FOUND, "Run not found");
                };
                if *verb == "runs" {
                    return Reply::Json(StatusCode::OK, run.render(o, now));
                }
                drop(hub);
                self.stream(run_id.to_string(), false)
            }
            _ => detail(StatusCode::NOT_FOUND, "Not Found"),
        }
    }

    /// The run's events as they happen, from `thread.run.created` when `fresh`, else from its
    /// current status; the stream ends after the terminal event.
    fn stream(self: Arc<Self>, run_id: String, fresh: bool) -> Reply {
        let (tx, reply) = Reply::sse_channel();
        tokio::spawn(async move {
            let o = self.options;
            let step = (o.work / 20).clamp(Duration::from_millis(5), Duration::from_millis(50));
            let deadline = Instant::now() + o.work * 4;
            let mut last: Option<&'static str> = None;
            loop {
                let events = {
                    let hub = self.hub.lock();
                    let Some(run) = hub.runs.get(&run_id) else {
                        return;
                    };
                    let now = Instant::now();
                    let (status, _) = run.status(&o, now);
                    let mut events = Vec::new();
                    if last.is_none() && fresh {
                        events.push(
                            json!({"event": "thread.run.created", "data": run.render(&o, now)}),
                        );
                    }
                    if last != Some(status) {
                        if let Some(m) = run.message(&o, now) {
                            let m = render_message(&m, &run.thread_id, Some(run));
                            events.push(json!({"event": "thread.message.created", "data": m}));
                            events.push(json!({"event": "thread.message.completed", "data": m}));
                        }
                        events.push(json!({"event": format!("thread.run.{status}"), "data": run.render(&o, now)}));
                        last = Some(status);
                    }
                    events
                };
                for e in events {
                    if tx.send(e.to_string()).await.is_err() {
                        return;
                    }
                }
                if matches!(last, Some("completed" | "failed")) || Instant::now() >= deadline {
                    return;
                }
                tokio::time::sleep(step).await;
            }
        });
        reply
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::testing::{eventually, options, start, Events};

    struct Client {
        http: reqwest::Client,
        base: String,
    }

    impl Client {
        async fn new() -> Client {
            Client {
                http: reqwest::Client::new(),
                base: start(|l| serve(l, options())).await,
            }
        }

        async fn post(&self, path: &str, body: Value) -> (u16, Value) {
            let resp = self
                .http
                .post(format!("{}{path}", self.base))
                .json(&body)
                .send()
                .await
                .unwrap();
            (resp.status().as_u16(), resp.json().await.unwrap())
        }

        async fn get(&self, path: &str) -> (u16, Value) {
            let resp = self
                .http
                .get(format!("{}{path}", self.base))
                .send()
                .await
                .unwrap();
            (resp.status().as_u16(), resp.json().await.unwrap())
        }

        /// Posts a user message, starts a run, and waits until the run ends.
        async fn turn(&self, thread: &str, text: &str) -> Value {
            let (s, _) = self
                .post(
                    &format!("/v1/threads/{thread}/messages"),
                    json!({"role": "user", "content": text}),
                )
                .await;
            assert_eq!(s, 200);
            let (s, run) = self
                .post(
                    &format!("/v1/threads/{thread}/runs"),
                    json!({"assistant_id": "near-ai-agents.near/assistant/latest"}),
                )
                .await;
            assert_eq!(s, 200);
            assert_eq!(run["status"], "queued");
            let path = format!("/v1/threads/{thread}/runs/{}", run["id"].as_str().unwrap());
            eventually("the run to end", || async {
                let (_, r) = self.get(&path).await;
                matches!(r["status"].as_str(), Some("completed" | "failed")).then_some(r)
            })
            .await
        }

        async fn newest_text(&self, thread: &str) -> String {
            let (_, list) = self
                .get(&format!("/v1/threads/{thread}/messages?order=desc&limit=1"))
                .await;
            assert_eq!(list["data"][0]["role"], "assistant");
            list["data"][0]["content"][0]["text"]["value"]
                .as_str()
                .unwrap()
                .to_string()
        }
    }

    #[tokio::test]
    async fn a_run_completes_and_posts_the_upper_cased_answer() {
        let c = Client::new().await;
        let (s, thread) = c.post("/v1/threads", json!({})).await;
        assert_eq!(s, 200);
        assert!(thread["id"].as_str().unwrap().starts_with("thread_"));
        let id = thread["id"].as_str().unwrap();
        let run = c.turn(id, "hello near").await;
        assert_eq!(run["status"], "completed", "{run}");
        assert!(run["completed_at"].is_i64() && run["started_at"].is_i64());
        assert_eq!(c.newest_text(id).await, "HELLO NEAR");
        let (_, list) = c.get(&format!("/v1/threads/{id}/messages?order=asc")).await;
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
        let c = Client::new().await;
        let (_, thread) = c
            .post(
                "/v1/threads",
                json!({"messages": [{"role": "user", "content": "ship it mode:input"}]}),
            )
            .await;
        let id = thread["id"].as_str().unwrap();
        let (_, run) = c
            .post(
                &format!("/v1/threads/{id}/runs"),
                json!({"assistant_id": "a"}),
            )
            .await;
        let path = format!("/v1/threads/{id}/runs/{}", run["id"].as_str().unwrap());
        eventually("completed", || async {
            (c.get(&path).await.1["status"] == "completed").then_some(())
        })
        .await;
        let asked: Value = serde_json::from_str(&c.newest_text(id).await).unwrap();
        assert_eq!(asked, request_data());
        assert_eq!(asked["json"]["request_data"]["fields"][0]["name"], "more");
        let run = c.turn(id, "to Berlin").await;
        assert_eq!(run["status"], "completed");
        assert_eq!(c.newest_text(id).await, "SHIP IT MODE:INPUT to Berlin");
    }

    #[tokio::test]
    async fn mode_fail_ends_the_run_failed_with_last_error() {
        let c = Client::new().await;
        let (_, thread) = c.post("/v1/threads", json!({})).await;
        let id = thread["id"].as_str().unwrap();
        let run = c.turn(id, "x mode:fail").await;
        assert_eq!(run["status"], "failed");
        assert_eq!(
            run["last_error"],
            json!({"code": "server_error", "message": FAILURE})
        );
        assert!(run["failed_at"].is_i64());
        let (_, list) = c.get(&format!("/v1/threads/{id}/messages")).await;
        assert_eq!(
            list["data"].as_array().unwrap().len(),
            1,
            "no assistant message"
        );
    }

    #[tokio::test]
    async fn a_streamed_run_sends_events_with_the_name_inside_the_json() {
        let c = Client::new().await;
        let (_, thread) = c
            .post(
                "/v1/threads",
                json!({"messages": [{"role": "user", "content": "stream"}]}),
            )
            .await;
        let id = thread["id"].as_str().unwrap();
        let resp = c
            .http
            .post(format!("{}/v1/threads/{id}/runs", c.base))
            .json(&json!({"assistant_id": "a", "stream": true}))
            .send()
            .await
            .unwrap();
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
        let c = Client::new().await;
        assert_eq!(
            c.get("/v1/threads/thread_x/messages").await,
            (404, json!({"detail": "Thread not found"}))
        );
        let (_, thread) = c.post("/v1/threads", json!({})).await;
        let id = thread["id"].as_str().unwrap();
        assert_eq!(
            c.get(&format!("/v1/threads/{id}/runs/run_x")).await,
            (404, json!({"detail": "Run not found"}))
        );
        let (s, _) = c
            .post(
                &format!("/v1/threads/{id}/messages"),
                json!({"role": "system", "content": "x"}),
            )
            .await;
        assert_eq!(s, 400);
        let (s, v) = c.post(&format!("/v1/threads/{id}/runs"), json!({})).await;
        assert_eq!(s, 422);
        assert_eq!(v["detail"][0]["loc"], json!(["body", "assistant_id"]));
        let (s, run) = c
            .post(
                &format!("/v1/threads/{id}/runs"),
                json!({"assistant_id": "a"}),
            )
            .await;
        assert_eq!(s, 200);
        let path = format!("/v1/threads/{id}/runs/{}", run["id"].as_str().unwrap());
        let failed = eventually("failed", || async {
            let r = c.get(&path).await.1;
            (r["status"] == "failed").then_some(r)
        })
        .await;
        assert_eq!(
            failed["last_error"]["code"], "invalid_prompt",
            "a thread without a user message"
        );
    }
}
