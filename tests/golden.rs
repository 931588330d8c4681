//! Golden translations: a rich fixture per dialect and operation form, translated to every dialect
//! that has the operation, the way the engine does it. The snapshots (`tests/snapshots/`) are
//! reviewed like code: a change to a mapping shows up here as a diff of what clients and agents
//! will see.
//!
//! Fixtures (`tests/fixtures/golden/`) are named
//! `<dialect>.<form>[.<variant>].<request|response>.json`, where `<form>` is the key of the
//! operation's section in the mapping (`[operations.send]` is `send`):
//! - a **request** is what a client of the dialect sends: `method`, `path`, and as needed `query`
//!   and `headers` (objects of strings) and `body`. It must match that front form
//!   (`Mapping::match_front`).
//! - a **response** is what an agent of the dialect answers to that back form: `body` (and
//!   `headers`), or for a form made of several calls (`then`) `answers`, one `{"body"}` per call;
//!   `vars` holds what a route would set for that agent.
//! - `canonical.<operation>.response.json` is a document the engine makes itself (the `agent` a
//!   `describe` renders), rendered by every front that has the operation.
//!
//! Each fixture is carried through the engine's own translation steps
//! ([`interlingua::engine::documents`], the functions its operations call between their I/O),
//! in the order the operations call them, so that a snapshot is what a peer really gets:
//! - a request is read with its front form and becomes (or names) a task the engine holds; the
//!   target is sent that task, by its first back form whose `when` holds. A create makes a new
//!   task from the request; any other operation acts on [`held`], a task the back already runs
//!   (and, for provide_input, that waits for input).
//! - a response is read with its back form and folded into the task it answers, as the engine
//!   folds it ([`Task::observe`]); a front renders that task. Which fronts see an answer follows
//!   the engine: a front that waits for the task to settle (`returns = "result"`) renders a poll's
//!   answer once it settles; the answer of a back that answers create only when done reaches the
//!   clients that did not wait through their poll (get_task); a front that answers a failed task
//!   as an error (`failed = "error"`) renders its error.
//! - forms that answer with server-sent events (`stream`) are left out; a translation a mapping
//!   cannot write is recorded as its error.
//!
//! The targets are [`VOICES`]: a dialect with what its route and client set. Snapshots:
//! `<fixture>` is what the fixture reads as (and, for a response, the document fronts render);
//! `<fixture>__to__<voice>.<form>` is what the voice's form sends or answers. Times are fixed;
//! fresh uuids, random purchaser ids and deadlines computed from now are redacted.
//!
//! To accept changed snapshots after reviewing them:
//! `INSTA_UPDATE=always cargo test --test golden`.

use std::path::Path;
use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use http::Method;
use interlingua::engine::answer;
use interlingua::engine::documents::{self as engine, waiting_step};
use interlingua::engine::views::{back_task, front_task, patch_of};
use interlingua::error::ProxyError;
use mapping::dialect::mapping::{Op, Returns};
use mapping::dialect::template::render_query;
use mapping::dialect::{self, Context, Decoded, Doc, Mapping, Message};
use mapping::task::{Operation, Status, StepSource, Task, TaskPatch};
use serde_json::{json, Map, Value};

/// A target of the translations: a dialect with what a route and its client set.
struct Voice {
    /// Names the snapshots.
    label: &'static str,
    dialect: &'static str,
    /// The route's variables, over the mapping's `[vars]`.
    vars: &'static str,
    /// What the front's `[request]` rules read from the client's request.
    request: &'static str,
    /// The forms this voice uses; empty: every form.
    forms: &'static [&'static str],
}

const VOICES: &[Voice] = &[
    Voice {
        label: "mip003",
        dialect: "mip003",
        vars: "{}",
        request: "{}",
        forms: &[],
    },
    // The DID of the Nevermined agent interlingua calls.
    Voice {
        label: "nevermined",
        dialect: "nevermined",
        vars: r#"{"agent_did": "did:nv:golden"}"#,
        request: "{}",
        forms: &[],
    },
    // An A2A 1.0 client that asks to be answered at once (`returnImmediately`).
    Voice {
        label: "a2a",
        dialect: "a2a",
        vars: "{}",
        request: r#"{"rpc_id": 1, "v1": true, "blocking": false}"#,
        forms: &[],
    },
    // An A2A 0.3 agent, and a 0.3 client (`blocking: false`).
    Voice {
        label: "a2a_v03",
        dialect: "a2a",
        vars: r#"{"version": "0.3"}"#,
        request: r#"{"rpc_id": "req-7", "v1": false, "blocking": false}"#,
        forms: &["send", "provide_input", "get_task", "cancel_task"],
    },
    // The conversational `chat` action.
    Voice {
        label: "lmos",
        dialect: "lmos",
        vars: "{}",
        request: "{}",
        forms: &["chat", "chat_turn", "availability", "describe"],
    },
    // Any other action, with its input from the agent's description.
    Voice {
        label: "lmos_run",
        dialect: "lmos",
        vars: r#"{"action": "getWeather"}"#,
        request: "{}",
        forms: &["run", "input_schema"],
    },
    Voice {
        label: "multiagent_eval",
        dialect: "multiagent_eval",
        vars: "{}",
        request: "{}",
        forms: &[],
    },
    Voice {
        label: "nearai",
        dialect: "nearai",
        vars: "{}",
        request: "{}",
        forms: &[],
    },
    Voice {
        label: "openai_chat",
        dialect: "openai_chat",
        vars: "{}",
        request: r#"{"model": "gpt-4o-mini"}"#,
        forms: &[],
    },
    // An MCP client of a route's tool (its answers carry the JSON-RPC id); as a back, an MCP
    // server whose tool `search` the route calls.
    Voice {
        label: "mcp",
        dialect: "mcp",
        vars: r#"{"tool": "search"}"#,
        request: r#"{"rpc_id": 4, "jsonrpc": "2.0"}"#,
        forms: &[],
    },
];

impl Voice {
    fn uses(&self, form: &Op) -> bool {
        self.forms.is_empty() || self.forms.contains(&form.key.as_str())
    }

    fn vars(&self, m: &Mapping) -> Map<String, Value> {
        let mut vars = m.vars.clone();
        if let Value::Object(o) = serde_json::from_str(self.vars).unwrap() {
            vars.extend(o);
        }
        vars
    }

    /// `request.*` of a front's answer: what its rules read, and the request id.
    fn request(&self) -> Value {
        let mut r: Value = serde_json::from_str(self.request).unwrap();
        r["id"] = json!(REQUEST_ID);
        r
    }
}

const REQUEST_ID: &str = "golden-request";
/// interlingua's id of the task.
const TASK_ID: &str = "0a11ce00-0000-4000-8000-000000000001";
/// The back's id of the task, once it has named it.
const UPSTREAM_ID: &str = "b0b00000-0000-4000-8000-000000000002";
/// The back's id of its first step (backs with steps of their own).
const UPSTREAM_STEP: &str = "b0b00000-0000-4000-8000-000000000003";
/// The back's reference for the task's current status (a MIP-003 status id, a NEAR AI run).
const STATUS_REF: &str = "run_5a7e00000000000000000001";
/// interlingua's id of its `i`-th step of the task.
fn step_id(i: usize) -> String {
    format!("5e900000-0000-4000-8000-{:012}", i + 1)
}

/// The id the client of [`draft`] chose (a MIP-003 purchaser id).
const CLIENT_REF: &str = "aabbccddeeff0011";

/// When the task was made, and when it last changed.
fn t0() -> DateTime<Utc> {
    "2025-02-12T09:30:46.453Z".parse().unwrap()
}
fn t1() -> DateTime<Utc> {
    "2025-02-12T09:31:02.120Z".parse().unwrap()
}

/// What a client asked for when it made the task a response answers.
fn draft() -> Value {
    json!({"task": {
        "name": "golden task",
        "client_ref": CLIENT_REF,
        "conversation": "c-golden",
        "input": {
            "text": "Book me a flight to Lisbon",
            "params": {"text": "Book me a flight to Lisbon", "passengers": 2},
        },
    }})
}

/// What a client provides to a task that waits for input, when a response answers it.
fn provided() -> Value {
    json!({"text": "From Berlin", "params": {"city": "Berlin"}})
}

/// What the task waiting for input asks for.
fn input_request() -> Value {
    json!({"input_data": [{"id": "city", "type": "text", "name": "Departure city"}]})
}

static DIALECTS: LazyLock<dialect::Dialects> = LazyLock::new(|| {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let names: Vec<&str> = VOICES.iter().map(|v| v.dialect).collect();
    dialect::load(&root.join("mappings"), &names).expect("built-in mappings load")
});

#[test]
fn every_fixture_translates_to_every_dialect() {
    let mut translated = 0;
    for fx in fixtures() {
        let source = DIALECTS.get(&fx.dialect).map(|m| &**m);
        let (form, read) = match read(&fx, source) {
            Ok(r) => r,
            // A fixture its own mapping cannot read is recorded, and goes no further.
            Err(e) => {
                fx.snapshot(&fx.name, json!({"form": fx.form, "error": e}));
                continue;
            }
        };
        let op = form.map_or_else(|| operation(&fx.form), |f| f.op);
        let fronts_see = fx.response.then(|| to_front(op, form, &read, source));
        fx.snapshot(
            &fx.name,
            json!({"form": fx.form, "read": read, "fronts_see": fronts_see}),
        );
        for voice in VOICES {
            let target = &*DIALECTS[voice.dialect];
            let vars = voice.vars(target);
            let ctx = Context {
                mapping: target,
                vars: &vars,
                seal_key: &[],
            };
            let outputs: Vec<(&Op, Value)> = match &fronts_see {
                Some(doc) => {
                    let mut doc = doc.clone();
                    doc["request"] = voice.request();
                    let sync = form.is_some_and(|f| f.returns == Returns::Result);
                    fronts(target, voice, op, sync, &doc, &ctx)
                        .into_iter()
                        .map(|front| (front, answer(front, &doc, &ctx)))
                        .collect()
                }
                None => {
                    let doc = to_back(op, &read, target);
                    target
                        .forms(op)
                        .find(|o| {
                            o.when
                                .as_ref()
                                .is_none_or(|w| dialect::holds(w, &doc, &ctx))
                        })
                        .filter(|back| voice.uses(back))
                        .map(|back| (back, call(back, &doc, &ctx)))
                        .into_iter()
                        .collect()
                }
            };
            for (form, out) in outputs {
                fx.snapshot(
                    &format!("{}__to__{}.{}", fx.name, voice.label, form.key),
                    out,
                );
                translated += 1;
            }
        }
    }
    assert!(translated >= 250, "only {translated} translations");
}

/// A fixture file.
struct Fixture {
    /// The file's stem: the snapshots' prefix.
    name: String,
    dialect: String,
    form: String,
    response: bool,
    /// The file's text: what is not fresh in a snapshot.
    text: String,
    method: Method,
    path: String,
    /// The request, or the one answer.
    msg: Message,
    /// The answers of a form made of several calls.
    answers: Vec<Message>,
    vars: Map<String, Value>,
}

fn fixtures() -> Vec<Fixture> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/golden");
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|path| {
            let name = path.file_stem().unwrap().to_str().unwrap().to_string();
            let parts: Vec<&str> = name.split('.').collect();
            let (&[dialect, form, ..], Some(&direction)) = (&parts[..], parts.last()) else {
                panic!("{name}: expected <dialect>.<form>[.<variant>].<request|response>.json");
            };
            assert!(
                matches!(direction, "request" | "response"),
                "{name}: expected a request or a response"
            );
            let text = std::fs::read_to_string(path).unwrap();
            let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
            let str_of = |key: &str| v.get(key).and_then(Value::as_str).unwrap_or_default();
            Fixture {
                dialect: dialect.to_string(),
                form: form.to_string(),
                response: direction == "response",
                method: str_of("method").parse().unwrap_or(Method::GET),
                path: str_of("path").to_string(),
                msg: message(&v),
                answers: v
                    .get("answers")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().map(message).collect())
                    .unwrap_or_default(),
                vars: v
                    .get("vars")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default(),
                name,
                text,
            }
        })
        .collect()
}

/// A message from a fixture's (or an answer's) `query`, `headers` and `body`.
fn message(v: &Value) -> Message {
    let pairs = |key: &str| -> Vec<(String, String)> {
        v.get(key)
            .and_then(Value::as_object)
            .map(|o| {
                o.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                    .collect()
            })
            .unwrap_or_default()
    };
    Message {
        params: Default::default(),
        query: pairs("query"),
        headers: pairs("headers"),
        body: v.get("body").cloned(),
    }
}

impl Fixture {
    /// Snapshots `v` as `name`, with what is made fresh on every run redacted.
    fn snapshot(&self, name: &str, mut v: Value) {
        redact(&mut v, &self.text);
        insta::assert_json_snapshot!(name, v);
    }
}

fn operation(name: &str) -> Operation {
    Operation::from_name(name).unwrap_or_else(|| panic!("unknown operation `{name}`"))
}

/// What a fixture reads as, with the form it was read by: a request by the front form it
/// matches (with what the dialect's `[request]` rules read), an answer by its back form (each
/// call's answer read onto the ones before). A canonical fixture is its body.
fn read<'m>(fx: &Fixture, m: Option<&'m Mapping>) -> Result<(Option<&'m Op>, Value), String> {
    let Some(m) = m else {
        return Ok((None, fx.msg.body.clone().unwrap_or_default()));
    };
    let mut vars = m.vars.clone();
    vars.extend(fx.vars.clone());
    let ctx = Context {
        mapping: m,
        vars: &vars,
        seal_key: &[],
    };
    if !fx.response {
        let mut msg = fx.msg.clone();
        let (form, mut doc) = match engine::read_front(m, &ctx, &fx.method, &fx.path, &mut msg) {
            Ok(read) => read,
            Err(e @ (ProxyError::NoOperation { .. } | ProxyError::Refused { .. })) => {
                panic!("{}: no front form takes it: {e}", fx.name)
            }
            Err(e) => return Err(e.to_string()),
        };
        assert_eq!(form.key, fx.form, "{}: taken by another form", fx.name);
        // Shown: what the `[request]` rules read, in place of the form's own `request.*` (the
        // engine merges the two, and adds the request's id).
        if let Some(r) = engine::read_echo(m, &msg, &ctx).map_err(|e| e.to_string())? {
            doc.set_request(r);
        }
        return Ok((Some(form), doc.into_value()));
    }
    let form = m
        .ops
        .iter()
        .find(|o| o.back && o.key == fx.form)
        .unwrap_or_else(|| panic!("{}: `{}` has no back form `{}`", fx.name, m.name, fx.form));
    let answers = if fx.answers.is_empty() {
        vec![fx.msg.clone()]
    } else {
        fx.answers.clone()
    };
    // One answer per call made: as the engine does, a further call whose `when` does not hold on
    // what the answers before it read is not made.
    let mut answers = answers.iter();
    let mut doc = Decoded::default();
    for call in engine::calls(form) {
        if call.when.is_some_and(|w| !dialect::holds(w, &doc, &ctx)) {
            continue;
        }
        let answer = answers
            .next()
            .unwrap_or_else(|| panic!("{}: one answer per call made", fx.name));
        doc = engine::read_answer(call, answer, &ctx, doc, "golden").map_err(|e| e.to_string())?;
    }
    assert!(
        answers.next().is_none(),
        "{}: more answers than calls made",
        fx.name
    );
    Ok((Some(form), doc.into_value()))
}

/// A new task, made from what a client asked (`draft`), as the engine makes it for `back`.
fn created(draft: &Value, back: &Mapping) -> Task {
    let mut task = Task::new("golden", t0());
    task.id = TASK_ID.to_string();
    engine::start_task(&mut task, &Decoded::from(draft.clone()), back, t0());
    fix_ids(&mut task);
    task
}

/// The task `back` runs for the client of [`draft`], now in `status` (waiting for input: for
/// [`input_request`], with the agent's question, on a step of the back's own if it has steps).
fn held(status: Status, back: &Mapping) -> Task {
    let mut task = created(&draft(), back);
    let waiting = status == Status::AwaitingInput;
    let mut patch =
        json!({"task": {"id": UPSTREAM_ID, "status": status, "status_ref": STATUS_REF}});
    // A back with steps of its own has reported the one that waits (the rest its answers bring).
    if back.steps == StepSource::Native && waiting {
        patch["task"]["steps"] =
            json!([{"id": UPSTREAM_STEP, "order": 1, "name": "init", "status": status}]);
    }
    if waiting {
        patch["task"]["input_request"] = input_request();
        patch["task"]["message"] = json!("Where do you fly from?");
    }
    observe(
        &mut task,
        patch_of(&Decoded::from(patch), "golden", "golden").unwrap(),
        back,
    );
    task
}

/// Folds what `back` answered into the task, as the engine's `apply` does.
fn observe(task: &mut Task, patch: TaskPatch, back: &Mapping) {
    engine::fold(task, patch, back, t1());
    fix_ids(task);
}

/// Steps get fresh ids; these stand for them, in order.
fn fix_ids(task: &mut Task) {
    let ids: Vec<String> = task.steps.iter().map(|s| s.id.clone()).collect();
    for (i, step) in task.steps.iter_mut().enumerate() {
        step.id = step_id(i);
        step.predecessor = step
            .predecessor
            .as_ref()
            .map(|p| ids.iter().position(|id| id == p).map_or(p.clone(), step_id));
    }
}

/// The document `back` is sent for a request that read as `read`.
fn to_back(op: Operation, read: &Value, back: &Mapping) -> Value {
    match op {
        Operation::CreateTask => json!({"task": back_task(&created(read, back))}),
        Operation::GetTask | Operation::ListSteps | Operation::CancelTask => {
            let task = held(Status::Running, back);
            // A back that answers only when done is asked again by the engine's turn loop (its
            // get_task form), one turn on.
            if back
                .op(Operation::CreateTask)
                .is_some_and(|o| o.returns == Returns::Result)
            {
                engine::turn_doc(&task, task.turn + 1).to_value()
            } else {
                json!({"task": back_task(&task)})
            }
        }
        Operation::ProvideInput => {
            let task = held(Status::AwaitingInput, back);
            let input = read.get("input").cloned().unwrap_or(json!({}));
            engine::provide_input_doc(&task, waiting_step(&task), input).to_value()
        }
        // Asked of the back with nothing.
        Operation::Availability | Operation::InputSchema => json!({}),
        // The engine answers these itself (from its store, from the route); were it to ask a
        // back, this is what it would say.
        Operation::SearchTasks | Operation::SearchSteps | Operation::Describe => {
            let mut doc = read.clone();
            if let Value::Object(o) = &mut doc {
                o.remove("request");
            }
            doc
        }
    }
}

/// The document fronts render for an answer `source` gave with `form`: the task the answer is
/// folded into, or what the answer says when it is not about a task.
fn to_front(op: Operation, form: Option<&Op>, read: &Value, source: Option<&Mapping>) -> Value {
    let (Some(form), Some(source)) = (form, source) else {
        return read.clone();
    };
    // The engine answers these from what the back said, not from a task.
    if matches!(
        op,
        Operation::Availability | Operation::InputSchema | Operation::SearchTasks
    ) {
        return read.clone();
    }
    let mut patch = patch_of(&Decoded::from(read.clone()), "golden", &source.name).unwrap();
    let (mut task, step) = match op {
        Operation::CreateTask => {
            let task = created(&draft(), source);
            engine::created_patch(&mut patch, form);
            // Snapshots from before the engine's steps were called here leave a back's create
            // answer without a task id as it is, unless the back answers with the result; the
            // engine gives each such task interlingua's id, which no front renders.
            if form.returns == Returns::Result {
                engine::default_upstream_id(&mut patch, &task.id);
            }
            (task, None)
        }
        Operation::ProvideInput => {
            let task = held(Status::AwaitingInput, source);
            let i = waiting_step(&task);
            let request = Decoded::from(json!({"input": provided()}));
            engine::input_patch(&mut patch, &task, i, &request);
            (task, i)
        }
        // The task ends here whatever the back says.
        Operation::CancelTask => {
            patch = TaskPatch::status(Status::Cancelled);
            (held(Status::Running, source), None)
        }
        _ => (held(Status::Running, source), None),
    };
    observe(&mut task, patch, source);
    let task = front_task(&task);
    match step {
        Some(i) => json!({"step": task["steps"][i].clone(), "task": task, "input": provided()}),
        None => json!({"task": task}),
    }
}

/// The front forms of `voice` that render an answer to `op` (`sync`: given by a back that
/// answers only when done): the forms of `op`, except one that waits while the task has not
/// settled, and a create that does not wait when the back is sync (its client was answered at
/// once, and sees the answer when it polls); a create that waits, for a poll that settles the
/// task; a poll, for a sync back's answer to create.
fn fronts<'m>(
    m: &'m Mapping,
    voice: &Voice,
    op: Operation,
    sync: bool,
    doc: &Value,
    ctx: &Context<'_>,
) -> Vec<&'m Op> {
    let status = doc.pointer("/task/status").and_then(Value::as_str);
    let settled = status.is_none_or(|s| {
        Status::from_name(s).is_some_and(|s| s.is_terminal() || s == Status::AwaitingInput)
    });
    m.ops
        .iter()
        .filter(|o| o.front && o.stream.is_none() && voice.uses(o))
        .filter(|o| {
            let waits = o.waits(doc, ctx);
            match (op, o.op) {
                (a, b) if a == b && waits => settled,
                (a, b) if a == b => !(op == Operation::CreateTask && sync),
                (Operation::GetTask, Operation::CreateTask) => waits && settled && status.is_some(),
                (Operation::CreateTask, Operation::GetTask) => sync,
                _ => false,
            }
        })
        .collect()
}

/// What `front` answers from `doc`: its response, or its error for a failed task when it answers
/// those as errors (`failed = "error"`).
fn answer(front: &Op, doc: &Value, ctx: &Context<'_>) -> Value {
    let task: Option<Task> = doc
        .get("task")
        .map(|t| serde_json::from_value(t.clone()).unwrap());
    if let Some(Err(err)) = task.map(|t| engine::failed_as_error(front, &t)) {
        let echo = doc.get("request");
        let body = answer::error_body(&err, REQUEST_ID, Some(ctx.mapping), echo);
        return json!({
            "failed_as_error": true,
            "status": answer::error_status(&err, echo, Some(ctx.mapping)),
            "body": serde_json::from_slice::<Value>(&body).unwrap(),
        });
    }
    match engine::render_answer(front, doc, ctx) {
        Ok(m) => {
            let mut out = json!({"status": front.status, "body": m.body});
            if !m.headers.is_empty() {
                out["headers"] = json!(m.headers);
            }
            out
        }
        // What a dialect cannot say from this document is part of the record too.
        Err(e) => json!({"error": e.to_string()}),
    }
}

/// The calls `back` makes for `doc`: its request, then its further calls (written here from the
/// same document; the engine first folds in each answer, so ids the back gives show as
/// interlingua's; a call with a `when` is shown as it is written when that holds).
fn call(back: &Op, doc: &Value, ctx: &Context<'_>) -> Value {
    let calls: Vec<Value> = engine::calls(back)
        .map(|call| match engine::write_call(call, doc, ctx) {
            Ok((m, path)) => {
                let mut target = path;
                if !m.query.is_empty() {
                    target = format!("{target}?{}", render_query(&m.query));
                }
                let mut out = json!({"method": call.method.as_str(), "path": target});
                if !m.headers.is_empty() {
                    out["headers"] = json!(m.headers);
                }
                if let Some(body) = m.body {
                    out["body"] = body;
                }
                out
            }
            Err(e) => json!({"error": e.to_string()}),
        })
        .collect();
    match <[Value; 1]>::try_from(calls) {
        Ok([one]) => one,
        Err(calls) => Value::Array(calls),
    }
}

/// Replaces what is made fresh on every run: uuids and 16-hex-digit ids the fixture does not
/// hold, and deadlines counted from now.
fn redact(v: &mut Value, fixture: &str) {
    const FROM_NOW: &[&str] = &[
        "payByTime",
        "submitResultTime",
        "unlockTime",
        "externalDisputeUnlockTime",
    ];
    let fresh = |s: &str| {
        !fixture.contains(s)
            && ![TASK_ID, UPSTREAM_ID, UPSTREAM_STEP, CLIENT_REF].contains(&s)
            && !s.starts_with("5e900000-")
            && (is_uuid(s) || (s.len() == 16 && s.bytes().all(|b| b.is_ascii_hexdigit())))
    };
    match v {
        Value::String(s) if fresh(s) => *s = "[fresh id]".to_string(),
        Value::Array(items) => items.iter_mut().for_each(|i| redact(i, fixture)),
        Value::Object(o) => {
            for (k, x) in o.iter_mut() {
                if FROM_NOW.contains(&k.as_str()) && x.is_number() {
                    *x = json!("[now + deadline]");
                } else {
                    redact(x, fixture);
                }
            }
        }
        _ => {}
    }
}

fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.char_indices().all(|(i, c)| {
            if matches!(i, 8 | 13 | 18 | 23) {
                c == '-'
            } else {
                c.is_ascii_hexdigit()
            }
        })
}
