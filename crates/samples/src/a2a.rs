//! A sample A2A agent (docs/dialects.md): JSON-RPC 2.0 at `POST /`, speaking A2A 1.0
//! (`SendMessage`, `SendStreamingMessage`, `GetTask`, `ListTasks`, `CancelTask`,
//! `SubscribeToTask`) and 0.3 (`message/send`, `message/stream`, `tasks/get`, `tasks/cancel`,
//! `tasks/resubscribe`), each answered in its own version's shapes, with the Agent Card (1.0
//! shape) at `GET /.well-known/agent-card.json` (and the old alias `/.well-known/agent.json`).
//!
//! Timeline of a task taking `work`: `submitted` for the first quarter, `working`, then
//! `completed` with an artifact `result` holding the message text upper-cased, or `failed` (mode
//! `fail`, status message "the agent failed on purpose"). With mode `input` the task stops
//! halfway in `input-required` (status message "Please provide more"); a message with that
//! `taskId` provides the input (its text, or a data part's `more` or `text`), and the task
//! completes half a `work` later with `<TEXT> <input>`. A task can be cancelled until it is
//! terminal.
//!
//! The mode: a data part's `mode` field (`"input"`, `"fail"`), else the text containing
//! `mode:input` or `mode:fail`.
//!
//! `SendMessage` blocks until the task is terminal or interrupted (at most a few `work`s) unless
//! `configuration.returnImmediately` is true (1.0) or `configuration.blocking` is false (0.3).
//! Streaming methods answer `text/event-stream`: the task first, then one frame per state change
//! as it happens, closing after a terminal or interrupted state.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, SecondsFormat, Utc};
use hyper::{Method, StatusCode};
use parking_lot::Mutex;
use serde_json::{json, Map, Value};
use tokio::net::TcpListener;

use super::{str_field, Call, Mode, Options, Reply};

/// The prompt of an `input-required` status.
const ASK: &str = "Please provide more";
/// The message of a `failed` status.
const FAILURE: &str = "the agent failed on purpose";

/// The protocol version a request used; the answer uses the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    /// Slash methods, bare results with `kind`, kebab-case states.
    V03,
    /// PascalCase methods, ProtoJSON, `TASK_STATE_*`.
    V10,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Submitted,
    Working,
    InputRequired,
    Completed,
    Failed,
    Canceled,
}

impl State {
    fn name(self, v: Version) -> &'static str {
        match (self, v) {
            (State::Submitted, Version::V10) => "TASK_STATE_SUBMITTED",
            (State::Working, Version::V10) => "TASK_STATE_WORKING",
            (State::InputRequired, Version::V10) => "TASK_STATE_INPUT_REQUIRED",
            (State::Completed, Version::V10) => "TASK_STATE_COMPLETED",
            (State::Failed, Version::V10) => "TASK_STATE_FAILED",
            (State::Canceled, Version::V10) => "TASK_STATE_CANCELED",
            (State::Submitted, Version::V03) => "submitted",
            (State::Working, Version::V03) => "working",
            (State::InputRequired, Version::V03) => "input-required",
            (State::Completed, Version::V03) => "completed",
            (State::Failed, Version::V03) => "failed",
            (State::Canceled, Version::V03) => "canceled",
        }
    }

    fn terminal(self) -> bool {
        matches!(self, State::Completed | State::Failed | State::Canceled)
    }

    /// Terminal or interrupted: where a blocking send returns and a stream closes.
    fn settled(self) -> bool {
        self.terminal() || self == State::InputRequired
    }
}

#[derive(Debug, Clone)]
enum Part {
    Text(String),
    Data(Value),
    /// A file by reference (`url`/`uri`) or inline (`raw`/`bytes`, base64).
    File {
        url: Option<String>,
        raw: Option<String>,
        media_type: Option<String>,
        name: Option<String>,
    },
}

#[derive(Debug, Clone)]
struct Message {
    id: String,
    from_user: bool,
    parts: Vec<Part>,
    task_id: Option<String>,
    context_id: Option<String>,
}

struct Task {
    id: String,
    context_id: String,
    text: String,
    mode: Mode,
    started: Instant,
    created: DateTime<Utc>,
    /// The client's messages, with when they arrived.
    messages: Vec<(Instant, Message)>,
    /// Fixed at creation so that every read shows the same ids.
    ask_id: String,
    artifact_id: String,
    input: Option<(Instant, String)>,
    canceled: Option<Instant>,
    metadata: Option<Value>,
}

impl Task {
    /// The state at `now`, and when it began.
    fn state(&self, o: &Options, now: Instant) -> (State, Instant) {
        if let Some(at) = self.canceled.filter(|at| *at <= now) {
            return (State::Canceled, at);
        }
        let t = now.duration_since(self.started);
        let at = |d: Duration| self.started + d;
        if t < o.work / 4 {
            return (State::Submitted, self.started);
        }
        match (self.mode, &self.input) {
            (Mode::Input, None) if t >= o.work / 2 => (State::InputRequired, at(o.work / 2)),
            (Mode::Input, Some((given, _))) if now.duration_since(*given) >= o.work / 2 => {
                (State::Completed, *given + o.work / 2)
            }
            (Mode::Input, Some((given, _))) => (State::Working, *given),
            (Mode::Fail, _) if t >= o.work => (State::Failed, at(o.work)),
            (Mode::Ok, _) if t >= o.work => (State::Completed, at(o.work)),
            _ => (State::Working, at(o.work / 4)),
        }
    }

    fn result(&self) -> String {
        match &self.input {
            Some((_, more)) => format!("{} {more}", self.text.to_uppercase()),
            None => self.text.to_uppercase(),
        }
    }

    fn timestamp(&self, at: Instant) -> String {
        let offset =
            chrono::Duration::from_std(at.duration_since(self.started)).unwrap_or_default();
        (self.created + offset).to_rfc3339_opts(SecondsFormat::Millis, true)
    }

    fn agent_message(&self, text: &str) -> Message {
        Message {
            id: self.ask_id.clone(),
            from_user: false,
            parts: vec![Part::Text(text.to_string())],
            task_id: Some(self.id.clone()),
            context_id: Some(self.context_id.clone()),
        }
    }

    fn status(&self, v: Version, state: State, since: Instant) -> Value {
        let mut status = json!({"state": state.name(v), "timestamp": self.timestamp(since)});
        let message = match state {
            State::InputRequired => Some(self.agent_message(ASK)),
            State::Failed => Some(self.agent_message(FAILURE)),
            _ => None,
        };
        if let Some(m) = message {
            status["message"] = render_message(v, &m, &self.id, &self.context_id);
        }
        status
    }

    fn artifact(&self, v: Version) -> Value {
        json!({"artifactId": self.artifact_id, "name": "result",
               "parts": [render_part(v, &Part::Text(self.result()))]})
    }

    /// The task as a `Task` object at `now`. `history`: how many of the latest messages to
    /// include (`None`: all).
    fn render(&self, o: &Options, v: Version, now: Instant, history: Option<usize>) -> Value {
        let (state, since) = self.state(o, now);
        let mut messages: Vec<(Instant, Message)> = self.messages.clone();
        let asked = self.started + o.work / 2;
        if self.mode == Mode::Input && (self.input.is_some() || state == State::InputRequired) {
            messages.push((asked, self.agent_message(ASK)));
            messages.sort_by_key(|(at, _)| *at);
        }
        let skip = history.map_or(0, |n| messages.len().saturating_sub(n));
        let history: Vec<Value> = messages[skip..]
            .iter()
            .map(|(_, m)| render_message(v, m, &self.id, &self.context_id))
            .collect();
        let mut task = Map::new();
        if v == Version::V03 {
            task.insert("kind".into(), json!("task"));
        }
        task.insert("id".into(), json!(self.id));
        task.insert("contextId".into(), json!(self.context_id));
        task.insert("status".into(), self.status(v, state, since));
        if state == State::Completed {
            task.insert("artifacts".into(), json!([self.artifact(v)]));
        }
        // ProtoJSON (1.0) omits an empty list; 0.3 servers send `history: []`.
        if v == Version::V03 || !history.is_empty() {
            task.insert("history".into(), Value::Array(history));
        }
        if let Some(m) = &self.metadata {
            task.insert("metadata".into(), m.clone());
        }
        Value::Object(task)
    }
}

fn render_part(v: Version, part: &Part) -> Value {
    match (v, part) {
        (Version::V10, Part::Text(t)) => json!({"text": t}),
        (Version::V10, Part::Data(d)) => json!({"data": d}),
        (Version::V03, Part::Text(t)) => json!({"kind": "text", "text": t}),
        (Version::V03, Part::Data(d)) => json!({"kind": "data", "data": d}),
        (
            v,
            Part::File {
                url,
                raw,
                media_type,
                name,
            },
        ) => {
            let mut file = Map::new();
            let keys = match v {
                Version::V10 => ["url", "raw", "mediaType", "filename"],
                Version::V03 => ["uri", "bytes", "mimeType", "name"],
            };
            for (key, value) in keys.into_iter().zip([url, raw, media_type, name]) {
                if let Some(value) = value {
                    file.insert(key.into(), json!(value));
                }
            }
            match v {
                Version::V10 => Value::Object(file),
                Version::V03 => json!({"kind": "file", "file": file}),
            }
        }
    }
}

fn render_message(v: Version, m: &Message, task_id: &str, context_id: &str) -> Value {
    let parts: Vec<Value> = m.parts.iter().map(|p| render_part(v, p)).collect();
    match v {
        Version::V10 => json!({
            "messageId": m.id, "role": if m.from_user { "ROLE_USER" } else { "ROLE_AGENT" },
            "parts": parts, "taskId": task_id, "contextId": context_id,
        }),
        Version::V03 => json!({
            "kind": "message", "messageId": m.id, "role": if m.from_user { "user" } else { "agent" },
            "parts": parts, "taskId": task_id, "contextId": context_id,
        }),
    }
}

/// A JSON-RPC error, with the `google.rpc.ErrorInfo` reason 1.0 puts in `data`.
struct RpcError {
    code: i64,
    message: String,
    info: Option<(&'static str, Value)>,
}

impl RpcError {
    fn new(code: i64, message: &str) -> RpcError {
        RpcError {
            code,
            message: message.to_string(),
            info: None,
        }
    }

    fn invalid(detail: &str) -> RpcError {
        RpcError::new(-32602, &format!("Invalid params: {detail}"))
    }

    fn task_not_found(id: &str) -> RpcError {
        RpcError {
            info: Some(("TASK_NOT_FOUND", json!({"taskId": id}))),
            ..RpcError::new(-32001, "Task not found")
        }
    }

    /// The error response to request `id`, in version `v`'s shape (`None`: the request was too
    /// broken to tell). HTTP 200, as every JSON-RPC answer.
    fn reply(&self, id: &Value, v: Option<Version>) -> Reply {
        let mut error = json!({"code": self.code, "message": self.message});
        if let (Some(Version::V10), Some((reason, metadata))) = (v, &self.info) {
            error["data"] = json!([{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                                    "reason": reason, "domain": "a2a-protocol.org", "metadata": metadata}]);
        }
        Reply::Json(
            StatusCode::OK,
            json!({"jsonrpc": "2.0", "id": id, "error": error}),
        )
    }
}

/// The success response to request `id`, as sent whole or as one event of a stream.
fn rpc_result(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// [`rpc_result`] as an HTTP 200 answer.
fn rpc_reply(id: &Value, result: Value) -> Reply {
    Reply::Json(StatusCode::OK, rpc_result(id, result))
}

/// A result as version `v` frames it: 1.0 wraps it in an object whose one key names its kind
/// (`task`, `statusUpdate`, `artifactUpdate`); 0.3 sends it bare, its own `kind` field telling.
fn framed(v: Version, kind: &str, result: Value) -> Value {
    match v {
        Version::V10 => json!({ kind: result }),
        Version::V03 => result,
    }
}

fn parse_part(p: &Value) -> Result<Part, RpcError> {
    let s = |k| str_field(p, k).map(str::to_string);
    if let Some(t) = str_field(p, "text") {
        return Ok(Part::Text(t.to_string()));
    }
    if let Some(d) = p.get("data") {
        return Ok(Part::Data(d.clone()));
    }
    if let Some(f) = p.get("file") {
        let fs = |k| str_field(f, k).map(str::to_string);
        return Ok(Part::File {
            url: fs("uri"),
            raw: fs("bytes"),
            media_type: fs("mimeType"),
            name: fs("name"),
        });
    }
    if p.get("url").is_some() || p.get("raw").is_some() {
        return Ok(Part::File {
            url: s("url"),
            raw: s("raw"),
            media_type: s("mediaType"),
            name: s("filename"),
        });
    }
    Err(RpcError::invalid(
        "a part needs text, data, url, raw or file",
    ))
}

/// Reads a `Message` in either version's form.
fn parse_message(m: &Value) -> Result<Message, RpcError> {
    if !m.is_object() {
        return Err(RpcError::invalid("message is required"));
    }
    let id = str_field(m, "messageId")
        .ok_or_else(|| RpcError::invalid("message.messageId is required"))?;
    let from_user = match str_field(m, "role") {
        Some("ROLE_USER" | "user") => true,
        Some("ROLE_AGENT" | "agent") => false,
        _ => {
            return Err(RpcError::invalid(
                "message.role must be ROLE_USER or ROLE_AGENT (0.3: user or agent)",
            ))
        }
    };
    let parts = m
        .get("parts")
        .and_then(Value::as_array)
        .filter(|p| !p.is_empty())
        .ok_or_else(|| RpcError::invalid("message.parts must be a non-empty list"))?;
    Ok(Message {
        id: id.to_string(),
        from_user,
        parts: parts.iter().map(parse_part).collect::<Result<_, _>>()?,
        task_id: str_field(m, "taskId").map(str::to_string),
        context_id: str_field(m, "contextId").map(str::to_string),
    })
}

/// The message's text: its text parts joined, else a data part's `field`.
fn text_of(m: &Message, field: &str) -> String {
    let texts: Vec<&str> = m
        .parts
        .iter()
        .filter_map(|p| match p {
            Part::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    if !texts.is_empty() {
        return texts.join(" ");
    }
    m.parts
        .iter()
        .find_map(|p| match p {
            Part::Data(d) => str_field(d, field),
            _ => None,
        })
        .unwrap_or_default()
        .to_string()
}

fn mode_of(m: &Message, text: &str) -> Mode {
    let structured = m.parts.iter().find_map(|p| match p {
        Part::Data(d) => d.get("mode"),
        _ => None,
    });
    match structured {
        Some(mode) => Mode::from_value(Some(mode)),
        None => Mode::from_text(text),
    }
}

fn history_length(v: Option<&Value>) -> Result<Option<usize>, RpcError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(n) => n
            .as_u64()
            .map(|n| Some(usize::try_from(n).unwrap_or(usize::MAX)))
            .ok_or_else(|| RpcError::invalid("historyLength must be a non-negative integer")),
    }
}

struct Agent {
    options: Options,
    tasks: Mutex<HashMap<String, Task>>,
}

/// Serves the agent on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, options: Options) {
    let agent = Arc::new(Agent {
        options,
        tasks: Mutex::default(),
    });
    super::serve(listener, move |call| {
        let agent = agent.clone();
        async move { agent.handle(call).await }
    })
    .await;
}

impl Agent {
    async fn handle(self: Arc<Self>, call: Call) -> Reply {
        match (&call.method, call.path.as_str()) {
            (&Method::GET, "/.well-known/agent-card.json" | "/.well-known/agent.json") => {
                Reply::Json(StatusCode::OK, card(&call.base_url()))
            }
            (&Method::POST, "/") => self.rpc(call).await,
            _ => Reply::Text(StatusCode::NOT_FOUND, "Not Found".into()),
        }
    }

    async fn rpc(self: Arc<Self>, call: Call) -> Reply {
        let req = match &call.body {
            Some(Ok(v)) => v,
            _ => return RpcError::new(-32700, "Parse error").reply(&Value::Null, None),
        };
        let id = req.get("id").cloned().unwrap_or(Value::Null);
        let method = str_field(req, "method");
        if req.get("jsonrpc") != Some(&json!("2.0"))
            || method.is_none()
            || !(id.is_string() || id.is_number() || id.is_null())
        {
            return RpcError::new(-32600, "Invalid Request").reply(&id, None);
        }
        let method = method.unwrap_or_default();
        let version = if method.contains('/') {
            Version::V03
        } else {
            Version::V10
        };
        // A missing header means 0.3; the method name already tells the two apart.
        if let Some(asked) = call.header("a2a-version").filter(|h| !h.is_empty()) {
            if !["0.3", "0.3.0", "1.0", "1.0.0"].contains(&asked) {
                let e = RpcError {
                    info: Some(("VERSION_NOT_SUPPORTED", json!({"version": asked}))),
                    ..RpcError::new(-32009, "Version not supported")
                };
                return e.reply(&id, Some(Version::V10));
            }
        }
        let params = req.get("params").cloned().unwrap_or(json!({}));
        let outcome = match method {
            "SendMessage" | "message/send" => self.send(version, &id, &params, false).await,
            "SendStreamingMessage" | "message/stream" => {
                self.send(version, &id, &params, true).await
            }
            "GetTask" | "tasks/get" => self.get(version, &params).map(|t| rpc_reply(&id, t)),
            "CancelTask" | "tasks/cancel" => {
                self.cancel(version, &params).map(|t| rpc_reply(&id, t))
            }
            "ListTasks" => self.list(&params).map(|r| rpc_reply(&id, r)),
            "SubscribeToTask" | "tasks/resubscribe" => self.subscribe(version, &id, &params),
            m if m.contains("PushNotificationConfig")
                || m.starts_with("tasks/pushNotificationConfig/") =>
            {
                Err(RpcError::new(
                    -32003,
                    "Push notifications are not supported",
                ))
            }
            "GetExtendedAgentCard" | "agent/getAuthenticatedExtendedCard" => Err(RpcError::new(
                -32007,
                "The extended agent card is not configured",
            )),
            _ => Err(RpcError::new(-32601, "Method not found")),
        };
        outcome.unwrap_or_else(|e| e.reply(&id, Some(version)))
    }

    async fn send(
        self: &Arc<Self>,
        v: Version,
        id: &Value,
        params: &Value,
        stream: bool,
    ) -> Result<Reply, RpcError> {
        let message = parse_message(params.get("message").unwrap_or(&Value::Null))?;
        let config = params.get("configuration").cloned().unwrap_or(json!({}));
        let history = history_length(config.get("historyLength"))?;
        let immediate = match v {
            Version::V10 => config.get("returnImmediately") == Some(&json!(true)),
            Version::V03 => config.get("blocking") == Some(&json!(false)),
        };
        let task_id = match message.task_id.clone() {
            Some(task_id) => self.provide_input(&task_id, message)?,
            None => self.create(message, params.get("metadata"))?,
        };
        if stream {
            return Ok(self.stream(v, id.clone(), task_id));
        }
        if !immediate {
            self.wait_settled(&task_id).await;
        }
        let tasks = self.tasks.lock();
        let task = tasks
            .get(&task_id)
            .map(|t| t.render(&self.options, v, self.options.clock.now(), history))
            .ok_or_else(|| RpcError::task_not_found(&task_id))?;
        Ok(rpc_reply(id, framed(v, "task", task)))
    }

    fn create(&self, message: Message, metadata: Option<&Value>) -> Result<String, RpcError> {
        let text = text_of(&message, "text");
        if text.trim().is_empty() {
            return Err(RpcError::invalid("the message carries no text"));
        }
        let id = uuid::Uuid::new_v4().to_string();
        let task = Task {
            id: id.clone(),
            context_id: message
                .context_id
                .clone()
                .unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
            mode: mode_of(&message, &text),
            text,
            started: self.options.clock.now(),
            created: Utc::now(),
            messages: vec![(self.options.clock.now(), message)],
            ask_id: uuid::Uuid::new_v4().to_string(),
            artifact_id: uuid::Uuid::new_v4().to_string(),
            input: None,
            canceled: None,
            metadata: metadata
                .filter(|m| m.as_object().is_some_and(|m| !m.is_empty()))
                .cloned(),
        };
        self.tasks.lock().insert(id.clone(), task);
        Ok(id)
    }

    fn provide_input(&self, task_id: &str, message: Message) -> Result<String, RpcError> {
        let mut tasks = self.tasks.lock();
        let task = tasks
            .get_mut(task_id)
            .ok_or_else(|| RpcError::task_not_found(task_id))?;
        let now = self.options.clock.now();
        match task.state(&self.options, now).0 {
            State::InputRequired => {}
            s if s.terminal() => {
                return Err(RpcError::invalid(&format!(
                    "Task {task_id} is in terminal state: {}",
                    s.name(Version::V03)
                )))
            }
            _ => {
                return Err(RpcError::invalid(&format!(
                    "Task {task_id} is not waiting for input"
                )))
            }
        }
        let more = text_of(&message, "more");
        if more.trim().is_empty() {
            return Err(RpcError::invalid("the message carries no text"));
        }
        task.input = Some((now, more));
        task.messages.push((now, message));
        Ok(task_id.to_string())
    }

    /// Waits until the task is terminal or interrupted, or until patience runs out.
    async fn wait_settled(&self, task_id: &str) {
        let clock = &self.options.clock;
        let deadline = clock.now() + self.options.patience();
        while clock.now() < deadline {
            let settled = self
                .tasks
                .lock()
                .get(task_id)
                .is_none_or(|t| t.state(&self.options, clock.now()).0.settled());
            if settled {
                return;
            }
            tokio::time::sleep(self.options.poll_step()).await;
        }
    }

    fn get(&self, v: Version, params: &Value) -> Result<Value, RpcError> {
        let id = str_field(params, "id").ok_or_else(|| RpcError::invalid("id is required"))?;
        let history = history_length(params.get("historyLength"))?;
        let tasks = self.tasks.lock();
        let task = tasks.get(id).ok_or_else(|| RpcError::task_not_found(id))?;
        Ok(task.render(&self.options, v, self.options.clock.now(), history))
    }

    fn cancel(&self, v: Version, params: &Value) -> Result<Value, RpcError> {
        let id = str_field(params, "id").ok_or_else(|| RpcError::invalid("id is required"))?;
        let mut tasks = self.tasks.lock();
        let task = tasks
            .get_mut(id)
            .ok_or_else(|| RpcError::task_not_found(id))?;
        let now = self.options.clock.now();
        if task.state(&self.options, now).0.terminal() {
            return Err(RpcError {
                info: Some(("TASK_NOT_CANCELABLE", json!({"taskId": id}))),
                ..RpcError::new(-32002, "Task cannot be canceled")
            });
        }
        task.canceled = Some(now);
        Ok(task.render(&self.options, v, now, None))
    }

    /// `ListTasks` (1.0 only): newest status first, paged by an offset token.
    fn list(&self, params: &Value) -> Result<Value, RpcError> {
        let page_size = match params.get("pageSize").map(Value::as_u64) {
            None => 50,
            Some(Some(n @ 1..=100)) => n as usize,
            Some(_) => return Err(RpcError::invalid("pageSize must be between 1 and 100")),
        };
        let offset = match str_field(params, "pageToken").filter(|t| !t.is_empty()) {
            None => 0,
            Some(t) => t
                .parse::<usize>()
                .map_err(|_| RpcError::invalid("pageToken is not one this server issued"))?,
        };
        let after = match str_field(params, "statusTimestampAfter") {
            None => None,
            Some(t) => Some(
                DateTime::parse_from_rfc3339(t)
                    .map_err(|_| RpcError::invalid("statusTimestampAfter must be RFC 3339"))?
                    .with_timezone(&Utc),
            ),
        };
        let history = history_length(params.get("historyLength"))?;
        let artifacts = params.get("includeArtifacts") == Some(&json!(true));
        let now = self.options.clock.now();
        let tasks = self.tasks.lock();
        let mut found: Vec<(String, Value)> = tasks
            .values()
            .filter(|t| str_field(params, "contextId").is_none_or(|c| c == t.context_id))
            .map(|t| {
                let mut v = t.render(&self.options, Version::V10, now, history);
                if !artifacts {
                    v.as_object_mut().map(|o| o.remove("artifacts"));
                }
                let ts = v["status"]["timestamp"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                (ts, v)
            })
            .filter(|(_, v)| str_field(params, "status").is_none_or(|s| v["status"]["state"] == s))
            .filter(|(ts, _)| {
                after.is_none_or(|a| DateTime::parse_from_rfc3339(ts).is_ok_and(|t| t > a))
            })
            .collect();
        found.sort_by(|a, b| b.0.cmp(&a.0));
        let total = found.len();
        let page: Vec<Value> = found
            .into_iter()
            .skip(offset)
            .take(page_size)
            .map(|(_, v)| v)
            .collect();
        let next = if offset + page_size < total {
            (offset + page_size).to_string()
        } else {
            String::new()
        };
        Ok(json!({"tasks": page, "nextPageToken": next, "pageSize": page_size, "totalSize": total}))
    }

    fn subscribe(
        self: &Arc<Self>,
        v: Version,
        id: &Value,
        params: &Value,
    ) -> Result<Reply, RpcError> {
        let task_id = str_field(params, "id").ok_or_else(|| RpcError::invalid("id is required"))?;
        let tasks = self.tasks.lock();
        let task = tasks
            .get(task_id)
            .ok_or_else(|| RpcError::task_not_found(task_id))?;
        if task
            .state(&self.options, self.options.clock.now())
            .0
            .terminal()
        {
            return Err(RpcError::new(-32004, "The task is in a terminal state"));
        }
        Ok(self.stream(v, id.clone(), task_id.to_string()))
    }

    /// An event stream of the task: the task as it is now, then a frame per change (the
    /// artifact before the completed status), closing once the task is settled.
    fn stream(self: &Arc<Self>, v: Version, rpc_id: Value, task_id: String) -> Reply {
        let agent = self.clone();
        let mut last = None;
        Reply::polled(self.options.clone(), move || {
            let tasks = agent.tasks.lock();
            let task = tasks.get(&task_id)?;
            let now = agent.options.clock.now();
            let (state, since) = task.state(&agent.options, now);
            let frames = if last == Some(state) {
                Vec::new()
            } else {
                agent.frames(task, v, last.is_none(), state, since, now)
            };
            last = Some(state);
            let responses = frames.into_iter().map(|f| rpc_result(&rpc_id, f));
            Some((responses.collect(), state.settled()))
        })
    }

    fn frames(
        &self,
        task: &Task,
        v: Version,
        first: bool,
        state: State,
        since: Instant,
        now: Instant,
    ) -> Vec<Value> {
        if first {
            return vec![framed(v, "task", task.render(&self.options, v, now, None))];
        }
        let ids = |kind: &str| match v {
            Version::V10 => json!({"taskId": task.id, "contextId": task.context_id}),
            Version::V03 => json!({"kind": kind, "taskId": task.id, "contextId": task.context_id}),
        };
        let mut frames = Vec::new();
        if state == State::Completed {
            let mut update = ids("artifact-update");
            update["artifact"] = task.artifact(v);
            update["lastChunk"] = json!(true);
            frames.push(framed(v, "artifactUpdate", update));
        }
        let mut update = ids("status-update");
        update["status"] = task.status(v, state, since);
        // Only 0.3 has `final`; a 1.0 client learns the end from the state.
        if v == Version::V03 {
            update["final"] = json!(state.settled());
        }
        frames.push(framed(v, "statusUpdate", update));
        frames
    }
}

/// The Agent Card, 1.0 shape, naming `base` (the server as the client reached it).
fn card(base: &str) -> Value {
    let url = format!("{base}/");
    json!({
        "name": "Sample A2A Agent",
        "description": "Answers with the text upper-cased. `mode:input` in the text makes it ask for more first; `mode:fail` makes it fail.",
        "version": "1.0.0",
        "supportedInterfaces": [
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"}
        ],
        "capabilities": {"streaming": true, "pushNotifications": false},
        "defaultInputModes": ["text/plain", "application/json"],
        "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "upper", "name": "Upper-case", "description": "Repeats the text upper-cased.",
                    "tags": ["sample"], "examples": ["hello", "hello mode:input"]}]
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{eventually, Agent, Events};

    /// Posts a JSON-RPC request with `id`; every answer, errors too, is HTTP 200.
    async fn post_rpc(agent: &Agent, id: Value, method: &str, params: Value) -> reqwest::Response {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let resp = agent.post("/", body).await;
        assert_eq!(resp.status(), 200);
        resp
    }

    /// Calls `method`; the JSON-RPC response.
    async fn rpc(agent: &Agent, method: &str, params: Value) -> Value {
        let v: Value = post_rpc(agent, json!(7), method, params)
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(v["id"], 7, "{v}");
        v
    }

    /// Calls a streaming `method`; its events.
    async fn stream(agent: &Agent, method: &str, params: Value) -> Events {
        Events::new(post_rpc(agent, json!("s"), method, params).await)
    }

    /// Calls a streaming `method` and reads it to the end; the `result` of each event, every event
    /// being a JSON-RPC response to the request.
    async fn stream_results(agent: &Agent, method: &str, params: Value) -> Vec<Value> {
        let frames = stream(agent, method, params).await.rest_json().await;
        assert!(
            frames
                .iter()
                .all(|f| f["jsonrpc"] == "2.0" && f["id"] == "s"),
            "{frames:?}"
        );
        frames.into_iter().map(|mut f| f["result"].take()).collect()
    }

    fn msg10(text: &str) -> Value {
        json!({"messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER", "parts": [{"text": text}]})
    }

    fn msg03(text: &str) -> Value {
        json!({"kind": "message", "messageId": uuid::Uuid::new_v4().to_string(), "role": "user",
               "parts": [{"kind": "text", "text": text}]})
    }

    #[tokio::test]
    async fn blocking_send_message_returns_the_completed_task_in_1_0_shape() {
        let agent = Agent::start(serve).await;
        let v = rpc(
            &agent,
            "SendMessage",
            json!({"message": msg10("hello there")}),
        )
        .await;
        let task = &v["result"]["task"];
        assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{v}");
        assert!(task.get("kind").is_none());
        assert_eq!(
            task["artifacts"][0]["parts"],
            json!([{"text": "HELLO THERE"}])
        );
        assert_eq!(task["history"][0]["role"], "ROLE_USER");
        assert_eq!(
            task["history"][0]["parts"],
            json!([{"text": "hello there"}])
        );
        let got = rpc(&agent, "GetTask", json!({"id": task["id"]})).await;
        assert_eq!(
            got["result"]["id"], task["id"],
            "GetTask answers the bare task"
        );
        assert_eq!(got["result"]["status"]["state"], "TASK_STATE_COMPLETED");
    }

    #[tokio::test]
    async fn return_immediately_then_input_required_then_input_completes_the_task() {
        let agent = Agent::start(serve).await;
        let v = rpc(
            &agent,
            "SendMessage",
            json!({"message": msg10("book it mode:input"),
                   "configuration": {"returnImmediately": true}}),
        )
        .await;
        let task = &v["result"]["task"];
        assert_eq!(task["status"]["state"], "TASK_STATE_SUBMITTED", "{v}");
        let id = task["id"].as_str().unwrap().to_string();
        let asked = eventually("input-required", || async {
            let t = rpc(&agent, "GetTask", json!({"id": id})).await["result"].clone();
            (t["status"]["state"] == "TASK_STATE_INPUT_REQUIRED").then_some(t)
        })
        .await;
        assert_eq!(asked["status"]["message"]["role"], "ROLE_AGENT");
        assert_eq!(asked["status"]["message"]["parts"][0]["text"], ASK);
        let mut more = msg10("from SFO");
        more["taskId"] = json!(id);
        let done = rpc(&agent, "SendMessage", json!({"message": more})).await;
        let task = &done["result"]["task"];
        assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{done}");
        assert_eq!(
            task["artifacts"][0]["parts"][0]["text"],
            "BOOK IT MODE:INPUT from SFO"
        );
        let roles: Vec<&Value> = task["history"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| &m["role"])
            .collect();
        assert_eq!(
            roles,
            [
                &json!("ROLE_USER"),
                &json!("ROLE_AGENT"),
                &json!("ROLE_USER")
            ]
        );
        let again = rpc(&agent, "SendMessage", json!({"message": more})).await;
        assert_eq!(
            again["error"]["code"], -32602,
            "a terminal task takes no input: {again}"
        );
    }

    #[tokio::test]
    async fn mode_fail_in_a_data_part_fails_the_task_and_it_cannot_be_cancelled() {
        let agent = Agent::start(serve).await;
        let mut m = msg10("x");
        m["parts"] = json!([{"data": {"text": "crash", "mode": "fail"}}]);
        let v = rpc(&agent, "SendMessage", json!({"message": m})).await;
        let task = &v["result"]["task"];
        assert_eq!(task["status"]["state"], "TASK_STATE_FAILED", "{v}");
        assert_eq!(task["status"]["message"]["parts"][0]["text"], FAILURE);
        let cancel = rpc(&agent, "CancelTask", json!({"id": task["id"]})).await;
        assert_eq!(cancel["error"]["code"], -32002, "{cancel}");
        assert_eq!(cancel["error"]["data"][0]["reason"], "TASK_NOT_CANCELABLE");
    }

    #[tokio::test]
    async fn a_0_3_client_gets_bare_tasks_with_kind_and_kebab_states() {
        let agent = Agent::start(serve).await;
        let v = rpc(
            &agent,
            "message/send",
            json!({"message": msg03("joke mode:input"), "metadata": {},
                   "configuration": {"blocking": false}}),
        )
        .await;
        let task = v["result"].clone();
        assert_eq!(task["kind"], "task", "{v}");
        assert_eq!(task["status"]["state"], "submitted");
        let id = task["id"].as_str().unwrap().to_string();
        let asked = eventually("input-required", || async {
            let t = rpc(&agent, "tasks/get", json!({"id": id, "historyLength": 1})).await["result"]
                .clone();
            (t["status"]["state"] == "input-required").then_some(t)
        })
        .await;
        assert_eq!(asked["history"].as_array().unwrap().len(), 1);
        assert_eq!(asked["history"][0]["role"], "agent");
        assert_eq!(asked["status"]["message"]["parts"][0]["kind"], "text");
        let mut more = msg03("please");
        more["taskId"] = json!(id);
        let done = rpc(&agent, "message/send", json!({"message": more})).await["result"].clone();
        assert_eq!(done["status"]["state"], "completed", "{done}");
        assert_eq!(
            done["artifacts"][0]["parts"],
            json!([{"kind": "text", "text": "JOKE MODE:INPUT please"}])
        );
    }

    #[tokio::test]
    async fn streaming_1_0_sends_the_task_then_status_and_artifact_updates_until_completed() {
        let agent = Agent::start(serve).await;
        let results = stream_results(
            &agent,
            "SendStreamingMessage",
            json!({"message": msg10("stream me")}),
        )
        .await;
        assert_eq!(
            results[0]["task"]["status"]["state"],
            "TASK_STATE_SUBMITTED"
        );
        let states: Vec<&Value> = results[1..]
            .iter()
            .filter_map(|r| r.get("statusUpdate"))
            .map(|u| &u["status"]["state"])
            .collect();
        assert_eq!(
            states,
            [&json!("TASK_STATE_WORKING"), &json!("TASK_STATE_COMPLETED")]
        );
        let artifact = results
            .iter()
            .position(|r| r.get("artifactUpdate").is_some())
            .unwrap();
        assert_eq!(
            artifact,
            results.len() - 2,
            "the artifact comes just before the completed status"
        );
        assert_eq!(
            results[artifact]["artifactUpdate"]["artifact"]["parts"][0]["text"],
            "STREAM ME"
        );
    }

    #[tokio::test]
    async fn streaming_0_3_marks_the_input_required_frame_final_and_closes() {
        let agent = Agent::start(serve).await;
        let results = stream_results(
            &agent,
            "message/stream",
            json!({"message": msg03("q mode:input")}),
        )
        .await;
        assert_eq!(results[0]["kind"], "task");
        let last = results.last().unwrap();
        assert_eq!(last["kind"], "status-update");
        assert_eq!(last["status"]["state"], "input-required");
        assert_eq!(last["final"], true);
        assert!(results[1..results.len() - 1]
            .iter()
            .all(|r| r["final"] == false));
    }

    #[tokio::test]
    async fn a_stream_reports_a_cancel_made_while_it_is_open() {
        let agent = Agent::start(serve).await;
        let mut events = stream(
            &agent,
            "SendStreamingMessage",
            json!({"message": msg10("slow")}),
        )
        .await;
        let first = events.next_json().await.unwrap();
        let id = first["result"]["task"]["id"].clone();
        let cancel = rpc(&agent, "CancelTask", json!({"id": id})).await;
        // Either the cancel won, or the task finished first and is not cancelable.
        let cancelled = cancel["result"]["status"]["state"] == "TASK_STATE_CANCELED";
        assert!(cancelled || cancel["error"]["code"] == -32002, "{cancel}");
        let rest = events.rest_json().await;
        let last = &rest.last().unwrap()["result"]["statusUpdate"]["status"]["state"];
        let expected = if cancelled {
            "TASK_STATE_CANCELED"
        } else {
            "TASK_STATE_COMPLETED"
        };
        assert_eq!(last, expected);
    }

    #[tokio::test]
    async fn list_tasks_pages_and_filters_by_state() {
        let agent = Agent::start(serve).await;
        for text in ["a", "b", "c mode:fail"] {
            rpc(&agent, "SendMessage", json!({"message": msg10(text)})).await;
        }
        let page = rpc(&agent, "ListTasks", json!({"pageSize": 2})).await["result"].clone();
        assert_eq!(page["totalSize"], 3, "{page}");
        assert_eq!(page["tasks"].as_array().unwrap().len(), 2);
        assert!(
            page["tasks"][0].get("artifacts").is_none(),
            "artifacts only on request"
        );
        let next = rpc(
            &agent,
            "ListTasks",
            json!({"pageSize": 2, "pageToken": page["nextPageToken"]}),
        )
        .await["result"]
            .clone();
        assert_eq!(next["tasks"].as_array().unwrap().len(), 1);
        assert_eq!(next["nextPageToken"], "");
        let failed = rpc(&agent, "ListTasks", json!({"status": "TASK_STATE_FAILED"})).await
            ["result"]
            .clone();
        assert_eq!(failed["totalSize"], 1);
        let bad = rpc(&agent, "ListTasks", json!({"pageSize": 0})).await;
        assert_eq!(bad["error"]["code"], -32602);
    }

    #[tokio::test]
    async fn errors_are_json_rpc_errors_with_the_spec_codes() {
        let agent = Agent::start(serve).await;
        let missing = rpc(&agent, "GetTask", json!({"id": "nope"})).await;
        assert_eq!(missing["error"]["code"], -32001);
        assert_eq!(missing["error"]["data"][0]["reason"], "TASK_NOT_FOUND");
        let missing03 = rpc(&agent, "tasks/get", json!({"id": "nope"})).await;
        assert_eq!(missing03["error"]["code"], -32001);
        assert!(missing03["error"].get("data").is_none());
        assert_eq!(
            rpc(&agent, "tasks/list", json!({})).await["error"]["code"],
            -32601
        );
        assert_eq!(
            rpc(
                &agent,
                "SendMessage",
                json!({"message": {"role": "ROLE_USER"}})
            )
            .await["error"]["code"],
            -32602
        );
        let resp = agent
            .http
            .post(agent.url("/"))
            .body("{not json")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["error"]["code"], -32700);
        assert_eq!(v["id"], Value::Null);
    }

    #[tokio::test]
    async fn the_agent_card_names_the_address_the_client_used() {
        let agent = Agent::start(serve).await;
        let (_, card) = agent.get_json("/.well-known/agent-card.json").await;
        assert_eq!(card["supportedInterfaces"][0]["url"], agent.url("/"));
        assert_eq!(card["supportedInterfaces"][0]["protocolVersion"], "1.0");
        assert_eq!(card["capabilities"]["streaming"], true);
    }
}
