//! The one canonical document: what a mapping's rules read ([`Canonical`], built from typed
//! values: a task, an error, a page of a search, …) and what they write ([`Decoded`], read back
//! into typed values by named functions: a draft task, a [`TaskPatch`], a search, …).
//!
//! Rules walk paths (`task.input.text`, `error.code`), so every root has a JSON form. It is made
//! here and nowhere else, under the names [`super::canonical`] lists, and the task's a field at a
//! time, the first time a rule reads it: a back's request reads a few of a task's fields, and
//! turning the whole task into JSON for each call was ≈ 4 % of a get_task's CPU.
//!
//! A task's `id` is the id *in the reading dialect's namespace* ([`Side`]): a front sees
//! interlingua's ids, a back the upstream's (interlingua's until the back has named the task; a
//! step the back has not named has no id), so what a back says of `task.id` is the upstream id.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde::Serialize;
use serde_json::{Map, Value};

use super::canonical;
use super::codec::Doc;
use super::value::walk;
use crate::task::time::serialize_rfc3339;
use crate::task::{Input, Status, Step, Task, TaskPatch};

/// Whose ids a task's document carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// interlingua's: what a client sees.
    Front,
    /// The upstream's: what the agent gave.
    Back,
}

/// A canonical document for rules to read: a task (with the step an operation is about), and
/// any of the other roots, each added by a `with_*` method from a typed value.
pub struct Canonical<'a> {
    task: Option<TaskView<'a>>,
    /// `step.*`: this step of the task, as the task's view shows it.
    step: Option<usize>,
    /// Every root but `task` and `step`, as JSON.
    roots: Map<String, Value>,
}

impl<'a> Canonical<'a> {
    /// A document with nothing in it (a back asked for its availability).
    pub fn empty() -> Canonical<'a> {
        Canonical {
            task: None,
            step: None,
            roots: Map::new(),
        }
    }

    /// The task as a front sees it.
    pub fn front(task: Task) -> Canonical<'a> {
        Canonical::task(Cow::Owned(task), Side::Front)
    }

    /// [`Canonical::front`] of a task the caller keeps.
    pub fn front_of(task: &'a Task) -> Canonical<'a> {
        Canonical::task(Cow::Borrowed(task), Side::Front)
    }

    /// The task as its back sees it.
    pub fn back(task: &'a Task) -> Canonical<'a> {
        Canonical::task(Cow::Borrowed(task), Side::Back)
    }

    fn task(task: Cow<'a, Task>, side: Side) -> Canonical<'a> {
        Canonical {
            task: Some(TaskView::new(task, side)),
            ..Canonical::empty()
        }
    }

    /// What a back's rules read, as they wrote it (an agent's own availability answer).
    pub fn decoded(d: Decoded) -> Canonical<'a> {
        let roots = match d.0 {
            Value::Object(o) => o,
            _ => Map::new(),
        };
        Canonical {
            roots,
            ..Canonical::empty()
        }
    }

    /// The task without the payment request its back sent (`task.payment`): a front must not
    /// show a buyer an agent's request that interlingua pays itself (a route that resells).
    pub fn without_back_payment(mut self) -> Self {
        if let Some(view) = self.task.take() {
            self.task = Some(if view.task.payment.is_some() {
                let mut task = view.task;
                task.to_mut().payment = None;
                TaskView {
                    turn: view.turn,
                    ..TaskView::new(task, view.side)
                }
            } else {
                view
            });
        }
        self
    }

    /// `task.turn` is `turn` (a back called for a turn the task has not stored yet).
    pub fn with_turn(mut self, turn: u32) -> Self {
        if let Some(t) = &mut self.task {
            t.turn = Some(turn);
        }
        self
    }

    /// `step` is the task's step at this index (none: no `step`).
    pub fn with_step(mut self, index: Option<usize>) -> Self {
        self.step = index;
        self
    }

    /// `input`: what a client gave a waiting task (`text`, `params`, `artifacts`).
    pub fn with_input(self, input: Value) -> Self {
        self.with_root("input", input)
    }

    /// `request`: the request id and what the front's `[request]` rules read (see [`request`]).
    pub fn with_request(self, request: Value) -> Self {
        self.with_root("request", request)
    }

    /// `charge.credits`: what this request charged.
    pub fn with_charge(self, credits: u64) -> Self {
        let mut charge = Map::new();
        charge.insert("credits".to_string(), Value::from(credits));
        self.with_root("charge", Value::Object(charge))
    }

    /// `event`: where a stream's frame is in the stream.
    pub fn with_event(self, event: Event) -> Self {
        self.with_root("event", json(&event))
    }

    /// `error`: an error being rendered.
    pub fn with_error(self, error: &ErrorFields<'_>) -> Self {
        self.with_root("error", json(error))
    }

    /// `payment.receipt`: the outcome of a settlement this request made (an x402
    /// `SettleResponse`), for fronts that carry it in their answer.
    pub fn with_payment_receipt(self, receipt: Value) -> Self {
        self.with_root("payment", serde_json::json!({ "receipt": receipt }))
    }

    /// `payment.required`: what a task waiting to be paid for asks (an x402 `PaymentRequired`),
    /// for fronts that carry it in band.
    pub fn with_payment_required(self, required: Value) -> Self {
        self.with_root("payment", serde_json::json!({ "required": required }))
    }

    /// `payment.payload`: a payment interlingua makes in band (an x402 `PaymentPayload`), for
    /// backs that carry it in the message to the agent that asked for it.
    pub fn with_payment_payload(self, payload: Value) -> Self {
        self.with_root("payment", serde_json::json!({ "payload": payload }))
    }

    /// `availability`: whether the agent is up.
    pub fn with_availability(self, a: &Availability) -> Self {
        self.with_root("availability", json(a))
    }

    /// `schema`: an input schema (MIP-003 Attachment 01 form).
    pub fn with_schema(self, schema: Value) -> Self {
        self.with_root("schema", schema)
    }

    /// `agent`: what `describe` says.
    pub fn with_agent(self, agent: &Agent<'_>) -> Self {
        self.with_root("agent", json(agent))
    }

    /// `tasks` and `search`: a page of the tasks a search found, as fronts see them.
    pub fn with_tasks(self, tasks: &[Task], page: Page) -> Self {
        let tasks = tasks.iter().map(|t| task_json(t, Side::Front)).collect();
        self.with_root("tasks", Value::Array(tasks))
            .with_root("search", page.json())
    }

    /// `steps` and `search`: a page of the steps a step search found (each from
    /// [`standalone_step`]).
    pub fn with_steps(self, steps: Vec<Value>, page: Page) -> Self {
        self.with_root("steps", Value::Array(steps))
            .with_root("search", page.json())
    }

    fn with_root(mut self, name: &str, value: Value) -> Self {
        if !value.is_null() {
            self.roots.insert(name.to_string(), value);
        }
        self
    }

    /// `task.id`, when there is a task.
    pub fn task_id(&self) -> Option<String> {
        scalar_text(self.get(&["task".to_string(), "id".to_string()])?)
    }

    /// `request`, when there is one.
    pub fn request(&self) -> Option<&Value> {
        self.roots.get("request")
    }

    /// `step.id`, when the document has a step.
    pub fn step_id(&self) -> Option<String> {
        scalar_text(self.step_value()?.get("id")?)
    }

    fn step_value(&self) -> Option<&Value> {
        let t = self.task.as_ref()?;
        t.field("steps")?.as_array()?.get(self.step?)
    }
}

impl Doc for Canonical<'_> {
    fn get(&self, path: &[String]) -> Option<&Value> {
        let (root, rest) = path.split_first()?;
        match root.as_str() {
            "task" => self.task.as_ref()?.get(rest),
            "step" => walk(self.step_value()?, rest),
            _ => walk(self.roots.get(root)?, rest),
        }
    }

    fn to_value(&self) -> Value {
        let mut m = self.roots.clone();
        if let Some(t) = &self.task {
            let whole = t.whole.get().cloned();
            m.insert("task".to_string(), whole.unwrap_or_else(|| t.make_whole()));
        }
        if let Some(s) = self.step_value() {
            m.insert("step".to_string(), s.clone());
        }
        Value::Object(m)
    }

    fn stored_task_id(&self) -> Option<&str> {
        self.task.as_ref().map(|t| t.task.id.as_str())
    }
}

/// A document with `discovered.*` (what a back's `[discover]` call read) beside its own roots.
pub struct WithDiscovered<'a> {
    pub doc: &'a dyn Doc,
    pub discovered: &'a Value,
}

impl Doc for WithDiscovered<'_> {
    fn get(&self, path: &[String]) -> Option<&Value> {
        match path.split_first() {
            Some((root, rest)) if root == "discovered" => walk(self.discovered, rest),
            _ => self.doc.get(path),
        }
    }

    fn to_value(&self) -> Value {
        let mut v = self.doc.to_value();
        if let Value::Object(m) = &mut v {
            m.insert("discovered".to_string(), self.discovered.clone());
        }
        v
    }

    fn stored_task_id(&self) -> Option<&str> {
        self.doc.stored_task_id()
    }
}

/// A task made a field at a time as rules read it.
struct TaskView<'a> {
    task: Cow<'a, Task>,
    side: Side,
    /// `turn`, when it is not the task's own.
    turn: Option<u32>,
    /// One per name of [`canonical::TASK`] (the task's serde names, and a few patterns a mapping
    /// may name, which no path reads as one segment).
    fields: [OnceLock<Value>; canonical::TASK.len()],
    whole: OnceLock<Value>,
}

impl<'a> TaskView<'a> {
    fn new(task: Cow<'a, Task>, side: Side) -> TaskView<'a> {
        TaskView {
            task,
            side,
            turn: None,
            fields: std::array::from_fn(|_| OnceLock::new()),
            whole: OnceLock::new(),
        }
    }

    fn get(&self, path: &[String]) -> Option<&Value> {
        match path.split_first() {
            None => Some(self.whole()),
            Some((name, rest)) => walk(self.field(name)?, rest),
        }
    }

    fn field(&self, name: &str) -> Option<&Value> {
        let i = canonical::TASK.iter().position(|f| *f == name)?;
        Some(self.fields[i].get_or_init(|| self.make_field(name)))
    }

    fn whole(&self) -> &Value {
        self.whole.get_or_init(|| self.make_whole())
    }

    fn make_whole(&self) -> Value {
        let mut v = task_json(&self.task, self.side);
        if let (Value::Object(o), Some(turn)) = (&mut v, self.turn) {
            o.insert("turn".to_string(), Value::from(turn));
        }
        v
    }

    /// One field of the task's JSON (null for one it leaves out).
    fn make_field(&self, name: &str) -> Value {
        let task = &*self.task;
        let time = |t| serialize_rfc3339(t, serde_json::value::Serializer).unwrap_or(Value::Null);
        match name {
            "id" => Value::String(id_for(task, self.side).to_string()),
            "upstream_id" => json(&task.upstream_id),
            "agent" => json(&task.agent),
            "route" => json(&task.route),
            "subject" => json(&task.subject),
            "plan" => json(&task.plan),
            "status" => json(&task.status),
            "reason" => json(&task.reason),
            "name" => json(&task.name),
            "input" => json(&task.input),
            "output" => json(&task.output),
            "input_request" => json(&task.input_request),
            "status_ref" => json(&task.status_ref),
            "message" => json(&task.message),
            "conversation" => json(&task.conversation),
            "steps" => {
                let mut steps = json(&task.steps);
                if self.side == Side::Back {
                    back_step_ids(&mut steps, task);
                }
                steps
            }
            "cost" => json(&task.cost),
            "created_at" => time(&task.created_at),
            "updated_at" => time(&task.updated_at),
            "client_ref" => json(&task.client_ref),
            "turn" => json(&self.turn.unwrap_or(task.turn)),
            "status_since" => task.status_since.as_ref().map_or(Value::Null, time),
            "payment" => json(&task.payment),
            "sale" => json(&task.sale),
            "back_form" => json(&task.back_form),
            "price" => json(&task.price),
            _ => Value::Null,
        }
    }
}

/// The whole JSON of a task as `side` sees it.
pub fn task_json(task: &Task, side: Side) -> Value {
    let mut v = json(task);
    if side == Side::Back {
        if let Value::Object(o) = &mut v {
            o.insert("id".into(), Value::String(id_for(task, side).to_string()));
            if let Some(steps) = o.get_mut("steps") {
                back_step_ids(steps, task);
            }
        }
    }
    v
}

/// The task's id on `side`: before the back has named the task, interlingua's.
fn id_for(task: &Task, side: Side) -> &str {
    match (side, &task.upstream_id) {
        (Side::Back, Some(up)) => up,
        _ => &task.id,
    }
}

/// Each step's id as the back knows it (none, until the back has named the step).
fn back_step_ids(steps: &mut Value, task: &Task) {
    let Value::Array(steps) = steps else { return };
    for (step, s) in steps.iter_mut().zip(&task.steps) {
        if let Value::Object(so) = step {
            match &s.upstream_id {
                Some(id) => so.insert("id".into(), Value::String(id.clone())),
                None => so.remove("id"),
            };
        }
    }
}

/// A step of `task` standing alone, as a step search finds it (with its task's `agent`): a
/// step waiting for input (or that failed) says what its task says of it (the question, the
/// input request), which a front otherwise reads from the task beside it.
pub fn standalone_step(task: &Task, step: &Step) -> Value {
    let waits = step.status == Status::AwaitingInput && task.status == Status::AwaitingInput;
    let mut step = Cow::Borrowed(step);
    if waits || step.status == Status::Failed {
        if step.output.text.as_deref().is_none_or(str::is_empty) {
            if let Some(m) = &task.message {
                step.to_mut().output.text = Some(m.clone());
            }
        }
        if let (true, Some(schema)) = (waits, &task.input_request) {
            let additional = &mut step.to_mut().output.additional;
            if !additional.as_ref().is_some_and(Value::is_object) {
                *additional = Some(Value::Object(Map::new()));
            }
            if let Some(Value::Object(a)) = additional {
                a.entry("input_schema").or_insert_with(|| schema.clone());
            }
        }
    }
    let mut v = json(&*step);
    if let Value::Object(o) = &mut v {
        o.insert("agent".to_string(), json(&task.agent));
    }
    v
}

/// The `request` root: what the front's `[request]` rules read (`echo`, when an object), the
/// request's `id`, and what the operation's own rules read into `request.*` (`own`) over them.
pub fn request(echo: &Value, id: &str, own: Option<&Value>) -> Value {
    let mut request = match echo {
        Value::Object(o) => o.clone(),
        _ => Map::new(),
    };
    request.insert("id".to_string(), Value::String(id.to_string()));
    let mut request = Value::Object(request);
    if let Some(own) = own {
        merge_into(&mut request, own);
    }
    request
}

/// Where a stream's frame is: the first, the last (the stream ends after it), its number.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Event {
    pub first: bool,
    pub last: bool,
    pub seq: u64,
    /// A heartbeat: the task has not changed since the last event.
    pub tick: bool,
    /// The stream's time (`sync_timeout`) is up; the task goes on.
    pub timeout: bool,
}

/// An error as a front's `[error]` rules read it. `None`s are left out.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ErrorFields<'a> {
    pub status: u16,
    pub code: &'a str,
    pub message: String,
    /// The status's reason phrase.
    pub reason: &'a str,
    pub request_id: &'a str,
    /// Per field of the input, what is wrong with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field_errors: Option<&'a BTreeMap<String, Vec<String>>>,
    /// For a missing or mistyped request field: `body`, `query`, `path` or `header`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<&'a str>,
    /// `missing` or `wrong_type`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected: Option<&'a str>,
    /// For a payment refused: the balance and the price.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub price: Option<u64>,
    /// For a rate limit: seconds until a retry may pass.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<u64>,
    /// For a route that takes payments on the wire (x402) and got none it could take: what it
    /// asks (an x402 `PaymentRequired`), for fronts that carry it in their answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payment_required: Option<&'a Value>,
}

/// Whether the agent is up, and what is known about it.
#[derive(Debug, Clone, Serialize)]
pub struct Availability {
    pub available: bool,
    pub message: String,
}

/// What `describe` says of a route's agent (every field written, absent ones as null).
#[derive(Debug, Clone, Serialize)]
pub struct Agent<'a> {
    pub name: &'a str,
    pub title: &'a str,
    pub description: String,
    pub dialect: &'a str,
    pub url: &'a str,
    pub base_url: Option<String>,
    pub operations: Vec<&'a str>,
    pub input_schema: Option<Value>,
    pub auth: bool,
    pub streaming: bool,
    /// The route takes x402 payments (a card declares the payment extension).
    pub x402: bool,
}

/// A page of a search's results: `total` found, page `page` (from 1) of `page_size`.
#[derive(Debug, Clone, Copy)]
pub struct Page {
    pub total: u64,
    pub page: u64,
    pub page_size: u64,
}

impl Page {
    fn json(self) -> Value {
        #[derive(Serialize)]
        struct Search {
            total: u64,
            page: u64,
            page_size: u64,
            // The page after this one, when there is one (a page token for some fronts).
            next_page: Option<u64>,
        }
        json(&Search {
            total: self.total,
            page: self.page,
            page_size: self.page_size,
            next_page: (self.page * self.page_size < self.total).then_some(self.page + 1),
        })
    }
}

/// What rules read from a message (decode's document), and the typed values the engine takes
/// from it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Decoded(Value);

impl From<Value> for Decoded {
    fn from(v: Value) -> Decoded {
        Decoded(v)
    }
}

/// Which task a request names: by id, or by its conversation (the conversation's latest task).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskRef {
    pub id: Option<String>,
    pub conversation: Option<String>,
}

impl TaskRef {
    pub fn id(id: String) -> TaskRef {
        TaskRef {
            id: Some(id),
            conversation: None,
        }
    }
}

/// A task or step search, as a front asked for it (`search.*`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Search {
    pub page: Option<u64>,
    pub page_size: Option<u64>,
    pub status: Option<String>,
    pub name: Option<String>,
    pub task_id: Option<String>,
    pub step_id: Option<String>,
    pub agents: Option<Vec<String>>,
}

/// An error an agent's answer reports in its body (a JSON-RPC error in a 200).
#[derive(Debug, Clone, PartialEq)]
pub struct ReportedError {
    /// `error.status`, when it is a status.
    pub status: Option<u16>,
    /// `error.message`, as it is.
    pub message: Option<Value>,
}

impl Decoded {
    /// The document as one JSON value.
    pub fn into_value(self) -> Value {
        self.0
    }

    /// The non-null value at `path`.
    pub fn at(&self, path: &[String]) -> Option<&Value> {
        walk(&self.0, path).filter(|v| !v.is_null())
    }

    fn at_str(&self, path: &[&str]) -> Option<&Value> {
        path.iter()
            .try_fold(&self.0, |v, key| v.get(*key))
            .filter(|v| !v.is_null())
    }

    fn text(&self, path: &[&str]) -> Option<String> {
        self.at_str(path).and_then(scalar_text)
    }

    /// `request`: what `[request]` rules (or an operation's own) read.
    pub fn request(&self) -> Option<&Value> {
        self.0.get("request")
    }

    /// Sets `request` (see [`request`]).
    pub fn set_request(&mut self, request: Value) {
        if !self.0.is_object() {
            self.0 = Value::Object(Map::new());
        }
        if let Value::Object(o) = &mut self.0 {
            o.insert("request".to_string(), request);
        }
    }

    /// What a front's create request says about the task to create.
    pub fn apply_draft(&self, task: &mut Task) {
        task.name = self.text(&["task", "name"]);
        task.agent = self.text(&["task", "agent"]).filter(|s| !s.is_empty());
        task.client_ref = self.text(&["task", "client_ref"]);
        task.conversation = self.text(&["task", "conversation"]);
        task.input = Input {
            text: self.text(&["task", "input", "text"]),
            params: self.at_str(&["task", "input", "params"]).cloned(),
            artifacts: self.at_str(&["task", "input", "artifacts"]).cloned(),
        };
    }

    /// What a back's answer says about a task (its `task.id` is the upstream id); an empty
    /// patch when it says nothing. An error says why the answer does not fit the task.
    pub fn task_patch(&self) -> Result<TaskPatch, serde_json::Error> {
        let Some(Value::Object(task)) = self.0.get("task") else {
            return Ok(TaskPatch::default());
        };
        let mut task = task.clone();
        if let Some(id) = task.remove("id") {
            task.insert("upstream_id".into(), id);
        }
        serde_json::from_value(Value::Object(task))
    }

    /// The task a request names.
    pub fn task_ref(&self) -> TaskRef {
        TaskRef {
            id: self.text(&["task", "id"]),
            conversation: self.text(&["task", "conversation"]),
        }
    }

    /// `step.id`: the step a request names.
    pub fn step_id(&self) -> Option<String> {
        self.text(&["step", "id"])
    }

    /// `input`: what a client gives a waiting task (an empty object when nothing).
    pub fn input(&self) -> Value {
        self.at_str(&["input"])
            .cloned()
            .unwrap_or_else(|| Value::Object(Map::new()))
    }

    /// The text and parameters of `input`, as a step keeps them.
    pub fn given_input(&self) -> Input {
        Input {
            text: self.text(&["input", "text"]),
            params: self.at_str(&["input", "params"]).cloned(),
            artifacts: None,
        }
    }

    /// `search.*`. A list of agents may also be given as one.
    pub fn search(&self) -> Search {
        let u64_at = |name| self.at_str(&["search", name]).and_then(Value::as_u64);
        Search {
            page: u64_at("page"),
            page_size: u64_at("page_size"),
            status: self.text(&["search", "status"]),
            name: self.text(&["search", "name"]),
            task_id: self.text(&["search", "task_id"]),
            step_id: self.text(&["search", "step_id"]),
            agents: self.at_str(&["search", "agents"]).map(|v| match v {
                Value::Array(a) => a
                    .iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect(),
                other => vec![text_of(other)],
            }),
        }
    }

    /// `error`, when the rules found one (an object).
    pub fn error(&self) -> Option<ReportedError> {
        let Some(Value::Object(e)) = self.0.get("error") else {
            return None;
        };
        Some(ReportedError {
            status: e
                .get("status")
                .and_then(Value::as_u64)
                .and_then(|s| u16::try_from(s).ok()),
            message: e.get("message").cloned(),
        })
    }

    /// `schema`.
    pub fn schema(&self) -> Option<Value> {
        self.0.get("schema").cloned()
    }

    /// `discovered` (an empty object when the rules kept nothing).
    pub fn discovered(&self) -> Value {
        self.0
            .get("discovered")
            .cloned()
            .unwrap_or_else(|| Value::Object(Map::new()))
    }

    /// Merges `from` into this document: objects key by key, recursively; anything else
    /// replaced (the answers of a back operation made of several calls, in turn).
    pub fn merge(&mut self, from: &Decoded) {
        merge_into(&mut self.0, &from.0);
    }
}

impl Doc for Decoded {
    fn get(&self, path: &[String]) -> Option<&Value> {
        walk(&self.0, path)
    }

    fn to_value(&self) -> Value {
        self.0.clone()
    }
}

fn merge_into(into: &mut Value, from: &Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                match a.get_mut(k) {
                    Some(existing) if existing.is_object() && v.is_object() => {
                        merge_into(existing, v)
                    }
                    _ => {
                        a.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (into, from) => *into = from.clone(),
    }
}

/// A value as text: strings as they are, anything else as JSON.
pub fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A string or a number as text; anything else is not text.
pub fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn json<T: Serialize + ?Sized>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};
    use serde_json::json;

    use super::*;
    use crate::task::Output;

    /// Every field set, so that each one's JSON is compared (a field added to `Task` must be
    /// added here, and then to `canonical::TASK` and `TaskView::make_field`, or this test fails).
    fn full_task() -> Task {
        let at = Utc.with_ymd_and_hms(2026, 11, 23, 12, 0, 0).unwrap();
        let step = |id: &str, upstream: Option<&str>, order: u32| Step {
            id: id.to_string(),
            task_id: "t-1".to_string(),
            upstream_id: upstream.map(str::to_string),
            order,
            name: Some(format!("step {order}")),
            status: Status::Completed,
            predecessor: None,
            is_last: order == 2,
            input: Input {
                text: Some("in".to_string()),
                params: None,
                artifacts: None,
            },
            output: Output {
                text: Some("out".to_string()),
                additional: Some(json!({"k": [1, 2]})),
                artifacts: None,
            },
            cost: 1,
            created_at: at,
            updated_at: at + chrono::Duration::milliseconds(1500),
        };
        Task {
            id: "t-1".to_string(),
            upstream_id: Some("job-9".to_string()),
            agent: Some("did:nv:a".to_string()),
            route: "r".to_string(),
            subject: Some("alice".to_string()),
            plan: Some("gold".to_string()),
            status: Status::AwaitingInput,
            reason: Some("rejected".to_string()),
            name: Some("a task".to_string()),
            input: Input {
                text: Some("question".to_string()),
                params: Some(json!({"a": 1, "b": {"c": [true, null]}})),
                artifacts: Some(json!([{"uri": "x"}])),
            },
            output: Output {
                text: Some("answer".to_string()),
                additional: Some(json!({"score": 0.5})),
                artifacts: Some(json!([])),
            },
            input_request: Some(json!({"type": "object"})),
            status_ref: Some("s-3".to_string()),
            message: Some("what next?".to_string()),
            conversation: Some("c-7".to_string()),
            steps: vec![step("st-1", Some("up-1"), 1), step("st-2", None, 2)],
            cost: 5,
            created_at: at,
            updated_at: at + chrono::Duration::seconds(3),
            client_ref: Some("mine".to_string()),
            turn: 2,
            status_since: Some(at + chrono::Duration::seconds(2)),
            payment: Some(json!({"blockchainIdentifier": "b-1", "payByTime": 1795398344446_u64})),
            sale: Some(json!({"blockchainIdentifier": "s-1", "sellerVKey": "vk"})),
            back_form: Some("call".to_string()),
            price: Some(crate::task::StepPrice {
                step: 2,
                from_agent: false,
                min: 0,
                max: 0,
                failed: 0,
                per_task: false,
            }),
        }
    }

    fn paths(v: &Value, at: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        out.push(at.clone());
        let children: Vec<(String, &Value)> = match v {
            Value::Object(o) => o.iter().map(|(k, v)| (k.clone(), v)).collect(),
            Value::Array(a) => a
                .iter()
                .enumerate()
                .map(|(i, v)| (i.to_string(), v))
                .collect(),
            _ => Vec::new(),
        };
        for (key, child) in children {
            at.push(key);
            paths(child, at, out);
            at.pop();
        }
    }

    fn present(v: Option<&Value>) -> Option<&Value> {
        v.filter(|v| !v.is_null())
    }

    fn path(p: &str) -> Vec<String> {
        p.split('.').map(str::to_string).collect()
    }

    /// Every path of `whole` reads the same in `lazy`, and so does every task field by name.
    fn reads_alike(lazy: &Canonical<'_>, whole: &Value) {
        if let Some(Value::Object(fields)) = whole.get("task") {
            for name in fields.keys() {
                assert!(
                    canonical::TASK.contains(&name.as_str()),
                    "`{name}` is not in canonical::TASK"
                );
            }
        }
        let mut all = Vec::new();
        paths(whole, &mut Vec::new(), &mut all);
        for name in canonical::TASK {
            all.push(vec!["task".to_string(), name.to_string()]);
        }
        all.push(path("task.no_such_field"));
        all.push(path("step"));
        for p in all.iter().filter(|p| !p.is_empty()) {
            assert_eq!(
                present(Doc::get(lazy, p)),
                present(Doc::get(whole, p)),
                "at {p:?}"
            );
        }
        assert_eq!(&Doc::to_value(lazy), whole);
    }

    #[test]
    fn a_task_read_field_by_field_reads_as_the_whole_task_does() {
        let now = Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap();
        for task in [full_task(), Task::new("r", now)] {
            for side in [Side::Front, Side::Back] {
                let whole = json!({"task": task_json(&task, side)});
                let lazy = Canonical::task(Cow::Borrowed(&task), side);
                reads_alike(&lazy, &whole);
            }
        }
    }

    #[test]
    fn the_front_has_interlingua_ids_and_the_back_the_upstream_ones() {
        let task = full_task();
        let back = Canonical::back(&task);
        let at = |d: &Canonical<'_>, p: &str| Doc::get(d, &path(p)).cloned();
        assert_eq!(at(&back, "task.id"), Some(json!("job-9")));
        // What a call is booked against stays interlingua's id, whatever the side shows.
        assert_eq!(Doc::stored_task_id(&back), Some("t-1"));
        assert_eq!(Doc::stored_task_id(&Canonical::empty()), None);
        assert_eq!(at(&back, "task.steps.0.id"), Some(json!("up-1")));
        assert_eq!(at(&back, "task.steps.1.id"), None);
        assert_eq!(at(&back, "task.steps.1.order"), Some(json!(2)));
        let front = Canonical::front_of(&task);
        assert_eq!(at(&front, "task.id"), Some(json!("t-1")));
        assert_eq!(at(&front, "task.steps.1.id"), Some(json!("st-2")));
        assert_eq!(front.task_id().as_deref(), Some("t-1"));
        let mut fresh = Task::new("r", Utc::now());
        fresh.upstream_id = None;
        let back = Canonical::back(&fresh);
        assert_eq!(back.task_id(), Some(fresh.id.clone()));
    }

    #[test]
    fn a_turn_and_a_step_read_as_the_back_sees_them() {
        let task = full_task();
        let doc = Canonical::back(&task)
            .with_turn(3)
            .with_step(Some(0))
            .with_input(json!({"text": "Berlin"}));
        let mut back = task_json(&task, Side::Back);
        back["turn"] = json!(3);
        let whole = json!({"task": back, "step": back["steps"][0], "input": {"text": "Berlin"}});
        reads_alike(&doc, &whole);
        assert_eq!(
            Doc::get(&doc, &path("step.id")),
            Some(&json!("up-1")),
            "the step has the back's id"
        );
        let none = Canonical::back(&task).with_step(Some(7));
        assert_eq!(Doc::get(&none, &path("step")), None);
        assert_eq!(Doc::to_value(&none).get("step"), None);
    }

    #[test]
    fn each_root_is_written_under_its_canonical_name() {
        let task = full_task();
        let doc = Canonical::front_of(&task)
            .with_request(json!({"id": "r-1", "rpc_id": 7}))
            .with_charge(4)
            .with_event(Event {
                first: true,
                last: false,
                seq: 0,
                tick: false,
                timeout: false,
            });
        let v = Doc::to_value(&doc);
        assert_eq!(v["charge"], json!({"credits": 4}));
        assert_eq!(
            v["event"],
            json!({"first": true, "last": false, "seq": 0, "tick": false, "timeout": false})
        );
        assert_eq!(doc.request(), Some(&json!({"id": "r-1", "rpc_id": 7})));
        for p in ["charge.credits", "event.seq", "request.rpc_id", "task.id"] {
            assert!(canonical::is_known(&path(p)), "{p}");
            assert!(Doc::get(&doc, &path(p)).is_some(), "{p}");
        }
        let errors = BTreeMap::from([("text".to_string(), vec!["required".to_string()])]);
        let error = Canonical::empty().with_error(&ErrorFields {
            status: 400,
            code: "invalid_input",
            message: "bad".to_string(),
            reason: "Bad Request",
            request_id: "r-2",
            field_errors: Some(&errors),
            ..ErrorFields::default()
        });
        assert_eq!(
            Doc::to_value(&error),
            json!({"error": {"status": 400, "code": "invalid_input", "message": "bad",
                "reason": "Bad Request", "request_id": "r-2", "field_errors": {"text": ["required"]}}})
        );
        let page = Page {
            total: 25,
            page: 2,
            page_size: 10,
        };
        let found = Canonical::empty().with_tasks(std::slice::from_ref(&task), page);
        assert_eq!(
            Doc::to_value(&found)["search"],
            json!({"total": 25, "page": 2, "page_size": 10, "next_page": 3})
        );
        assert_eq!(Doc::to_value(&found)["tasks"][0]["id"], "t-1");
        let last = Page { page: 3, ..page };
        let found = Canonical::empty().with_steps(Vec::new(), last);
        assert_eq!(Doc::to_value(&found)["search"]["next_page"], Value::Null);
    }

    #[test]
    fn the_request_root_is_the_echo_with_the_id_and_what_the_operation_read() {
        let echo = json!({"rpc_id": 1, "v1": true});
        let own = json!({"token": "t"});
        assert_eq!(
            request(&echo, "r-1", Some(&own)),
            json!({"rpc_id": 1, "v1": true, "id": "r-1", "token": "t"})
        );
        assert_eq!(request(&Value::Null, "r-2", None), json!({"id": "r-2"}));
    }

    #[test]
    fn a_decoded_document_gives_its_parts_by_name() {
        let d = Decoded::from(json!({
            "task": {"id": "job-1", "status": "running", "name": "n", "agent": "",
                     "input": {"text": "hi", "params": {"a": 1}}, "conversation": "c"},
            "step": {"id": 5},
            "input": {"text": "more", "params": {"b": 2}},
            "search": {"page": 2, "page_size": 50, "status": "completed", "agents": "did:a"},
            "error": {"status": 404, "message": "gone"},
        }));
        let patch = d.task_patch().unwrap();
        assert_eq!(patch.upstream_id.as_deref(), Some("job-1"));
        assert_eq!(patch.status, Some(Status::Running));
        let mut task = Task::new("r", Utc::now());
        d.apply_draft(&mut task);
        assert_eq!(task.name.as_deref(), Some("n"));
        assert_eq!(task.agent, None, "an empty agent is no agent");
        assert_eq!(task.input.text.as_deref(), Some("hi"));
        assert_eq!(task.input.params, Some(json!({"a": 1})));
        assert_eq!(
            d.task_ref(),
            TaskRef {
                id: Some("job-1".to_string()),
                conversation: Some("c".to_string())
            }
        );
        assert_eq!(d.step_id().as_deref(), Some("5"));
        assert_eq!(d.given_input().params, Some(json!({"b": 2})));
        let s = d.search();
        assert_eq!((s.page, s.page_size), (Some(2), Some(50)));
        assert_eq!(s.agents, Some(vec!["did:a".to_string()]));
        assert_eq!(s.status.as_deref(), Some("completed"));
        assert_eq!(
            d.error(),
            Some(ReportedError {
                status: Some(404),
                message: Some(json!("gone"))
            })
        );
        let empty = Decoded::default();
        assert_eq!(empty.task_patch().unwrap(), TaskPatch::default());
        assert_eq!(empty.input(), json!({}));
        assert_eq!(empty.discovered(), json!({}));
        assert_eq!(empty.error(), None);
        let wrong = Decoded::from(json!({"task": {"status": "no such status"}}));
        assert!(wrong.task_patch().is_err());
    }

    #[test]
    fn decoded_answers_merge_object_by_object() {
        let mut running = Decoded::from(json!({"task": {"id": "a", "output": {"text": "x"}}}));
        running.merge(&Decoded::from(
            json!({"task": {"output": {"additional": {"k": 1}}, "status": "completed"}}),
        ));
        assert_eq!(
            running.into_value(),
            json!({"task": {"id": "a", "status": "completed",
                "output": {"text": "x", "additional": {"k": 1}}}})
        );
    }

    #[test]
    fn a_step_standing_alone_says_what_its_task_asks() {
        let mut task = full_task();
        task.steps[1].status = Status::AwaitingInput;
        task.steps[1].output = Output::default();
        let alone = standalone_step(&task, &task.steps[1]);
        assert_eq!(alone["output"]["text"], "what next?");
        assert_eq!(
            alone["output"]["additional"]["input_schema"],
            json!({"type": "object"})
        );
        assert_eq!(alone["agent"], "did:nv:a");
        let done = standalone_step(&task, &task.steps[0]);
        assert_eq!(done["output"]["text"], "out");
        assert_eq!(done["output"].get("input_schema"), None);
        task.agent = None;
        assert_eq!(standalone_step(&task, &task.steps[0])["agent"], Value::Null);
    }
}
