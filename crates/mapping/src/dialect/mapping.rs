//! A compiled mapping: everything `mappings/<dialect>.toml` says, checked and ready to run.

use super::syntax::SyntaxError;
use std::collections::BTreeMap;
use std::sync::Arc;

use http::Method;
use serde_json::{Map, Value};

use super::expr::Expr;
use super::location::Location;
use super::template::PathTemplate;
use crate::task::time::TimeFormat;
use crate::task::{Operation, StepSource};

/// One dialect, compiled.
#[derive(Debug)]
pub struct Mapping {
    pub name: String,
    pub title: String,
    /// Where it was loaded from, for messages.
    pub origin: String,
    /// Whether the dialect reports steps itself.
    pub steps: StepSource,
    /// Default variables (`[vars]`); a route may override them.
    pub vars: Map<String, Value>,
    pub ids: Ids,
    /// Value tables by name; `status` is the `[status]` table.
    pub tables: BTreeMap<String, Arc<Table>>,
    /// The input this dialect's agents take, when nothing more specific is declared.
    pub input_schema: Option<Value>,
    pub error: Option<Rules>,
    /// The HTTP status of an error answer, when not the error's own.
    pub error_status: Option<Expr>,
    /// Fields read from every front request into `request.*`.
    pub request: Option<Rules>,
    /// What every front request must satisfy once `request` has read it (`[request] checks`).
    pub request_checks: Vec<Check>,
    /// Back: the call that learns `discovered.*` (`[discover]`).
    pub discover: Option<Discover>,
    /// Operations in file order.
    pub ops: Vec<Op>,
    /// Requests the dialect knows and interlingua refuses (`[refuse.NAME]`).
    pub refused: Vec<Refusal>,
    /// Requests interlingua answers itself (`[answer.NAME]`): front forms with `reply` set.
    pub answers: Vec<Op>,
}

/// A request guard (`checks`): when `holds` is not truthy, the request is refused with this
/// error.
#[derive(Debug)]
pub struct Check {
    pub holds: Expr,
    pub status: u16,
    pub code: String,
    pub message: String,
}

/// A front request that is always refused, with the error it gets.
#[derive(Debug)]
pub struct Refusal {
    pub name: String,
    pub method: Method,
    pub path: PathTemplate,
    pub status: u16,
    pub message: String,
}

impl Mapping {
    /// The first form of a canonical operation that calls agents: what the engine uses when
    /// this dialect is a route's back.
    pub fn op(&self, op: Operation) -> Option<&Op> {
        self.forms(op).next()
    }

    /// Every form of a canonical operation that calls agents, in file order.
    pub fn forms(&self, op: Operation) -> impl Iterator<Item = &Op> {
        self.ops.iter().filter(move |o| o.op == op && o.back)
    }

    /// The refusal a front request meets, when no operation takes it.
    pub fn refusal(&self, method: &Method, path: &str) -> Option<&Refusal> {
        self.refused
            .iter()
            .find(|r| r.method == *method && r.path.matches(path).is_some())
    }

    /// Whether this dialect, as a back, can carry a payment request: its create_task answer is
    /// read into `task.payment`.
    pub fn carries_payment(&self) -> bool {
        self.forms(Operation::CreateTask).any(|o| {
            o.response.0.iter().any(|r| {
                r.direction != Direction::Emit
                    && r.field
                        .as_ref()
                        .is_some_and(|f| f.len() >= 2 && f[0] == "task" && f[1] == "payment")
            })
        })
    }

    /// How a job sold through this front is hashed: its create form's `sale`, if it has one.
    pub fn sale(&self) -> Option<&SaleHashes> {
        self.forms(Operation::CreateTask)
            .find_map(|o| o.sale.as_ref())
    }

    /// The `[status]` table.
    pub fn status_table(&self) -> Option<&Table> {
        self.tables.get("status").map(|t| &**t)
    }
}

/// A condition on a front request.
#[derive(Debug, Clone)]
pub struct Condition {
    pub location: Location,
    pub equals: Option<Vec<Value>>,
    pub not: Vec<Value>,
    pub present: Option<bool>,
}

/// A value as table keys and comparisons see it: strings as they are, the rest as JSON text.
pub fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// How ids are rendered (`task-{id}`).
#[derive(Debug, Clone, Default)]
pub struct Ids {
    pub task: Option<IdTemplate>,
    pub step: Option<IdTemplate>,
}

/// An id template: a prefix and a suffix around the canonical id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdTemplate {
    pub prefix: String,
    pub suffix: String,
}

impl IdTemplate {
    pub fn parse(text: &str) -> Result<IdTemplate, SyntaxError> {
        Self::parse_text(text).map_err(SyntaxError::from)
    }

    fn parse_text(text: &str) -> Result<IdTemplate, String> {
        let (prefix, suffix) = text
            .split_once("{id}")
            .ok_or_else(|| format!("id template `{text}` must contain `{{id}}`"))?;
        if suffix.contains("{id}") {
            return Err(format!("id template `{text}` has `{{id}}` twice"));
        }
        Ok(IdTemplate {
            prefix: prefix.to_string(),
            suffix: suffix.to_string(),
        })
    }

    pub fn render(&self, id: &str) -> String {
        if id.starts_with(&self.prefix) && id.ends_with(&self.suffix) && !self.prefix.is_empty() {
            // Already rendered (an upstream id that kept its prefix).
            return id.to_string();
        }
        format!("{}{id}{}", self.prefix, self.suffix)
    }

    /// The canonical id inside a rendered one; an id that does not fit is returned as is (it
    /// will simply not be found).
    pub fn strip<'a>(&self, rendered: &'a str) -> &'a str {
        rendered
            .strip_prefix(self.prefix.as_str())
            .and_then(|r| r.strip_suffix(self.suffix.as_str()))
            .unwrap_or(rendered)
    }
}

/// Dialect values ↔ canonical values. A status table reads into statuses with an optional
/// reason (`pending/awaiting_payment`) and emits by `status/reason`, then by status.
#[derive(Debug, Clone)]
pub struct Table {
    pub name: String,
    /// Keyed by the dialect value's text (folded when `ignore_case`): the canonical value, and
    /// for a status table the reason.
    pub read: BTreeMap<String, (Value, Option<String>)>,
    /// Keyed by the canonical value's text (`status` or `status/reason` for statuses).
    pub emit: BTreeMap<String, Value>,
    pub read_default: Option<Value>,
    pub emit_default: Option<Value>,
    pub ignore_case: bool,
    pub status: bool,
}

impl Table {
    pub fn fold(&self, value: &str) -> String {
        if self.ignore_case {
            fold(value)
        } else {
            value.to_string()
        }
    }

    /// The canonical value (and reason) for a dialect value.
    pub fn read(&self, value: &Value) -> Option<(Value, Option<String>)> {
        self.read
            .get(&self.fold(&value_text(value)))
            .cloned()
            .or_else(|| self.read_default.clone().map(|d| (d, None)))
    }

    /// The dialect value for a canonical value (and reason).
    pub fn emit(&self, value: &Value, reason: Option<&str>) -> Option<Value> {
        let key = value_text(value);
        reason
            .and_then(|r| self.emit.get(&format!("{key}/{r}")))
            .or_else(|| self.emit.get(&key))
            .cloned()
            .or_else(|| self.emit_default.clone())
    }
}

/// Case, `_`, `-` and the `AgentExecutionStatus.` prefix Python SDKs leak do not matter.
pub fn fold(value: &str) -> String {
    let v = value.rsplit('.').next().unwrap_or(value);
    v.chars()
        .filter(|c| !matches!(c, '_' | '-' | ' '))
        .flat_map(char::to_lowercase)
        .collect()
}

/// How a create_task answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Returns {
    /// At once, with a task the client polls.
    Task,
    /// Only when the task is done, with its result.
    Result,
}

/// One operation of a dialect.
#[derive(Debug)]
pub struct Op {
    /// The name of its section (`create_task`, `send_v03`).
    pub key: String,
    pub op: Operation,
    /// Front: what the request must also satisfy.
    pub conditions: Vec<Condition>,
    /// Back: when this form is the one used.
    pub when: Option<Expr>,
    /// Whether the form serves clients, calls agents, or both.
    pub front: bool,
    pub back: bool,
    /// Back: further calls, in order.
    pub then: Vec<Arc<Call>>,
    /// Back: where `path` is appended, when it has a value (else the upstream's `base_path`).
    pub target: Option<Expr>,
    /// Front: the answer is a stream of events.
    pub stream: Option<Arc<Stream>>,
    pub method: Method,
    pub path: PathTemplate,
    /// Older paths a front request may use.
    pub also: Vec<PathTemplate>,
    pub status: u16,
    pub returns: Returns,
    /// Decides `returns` per request, when given.
    pub wait: Option<Expr>,
    /// Front, create_task: decides per request whether a create without a payment is kept as
    /// a task waiting to be paid for (see [`Op::keeps_unpaid`]).
    pub unpaid: Option<Expr>,
    /// A failed task is answered as an error.
    pub failed_as_error: bool,
    /// Front: at `sync_timeout`, answer the task as it is rather than 504.
    pub timeout_answers_task: bool,
    /// provide_input: the create form that takes the request when its task has ended.
    pub otherwise: Option<String>,
    /// Front: the canonical field validated against the input schema.
    pub validate: Option<Vec<String>>,
    /// Front: answered without a token on routes with auth.
    pub public: bool,
    /// Front: an `[answer.NAME]`, which interlingua answers itself (no task, no agent call);
    /// `op` is then `describe`, the operation whose cheap part (`agent.*`) it may read.
    pub reply: bool,
    /// Front: what the request must also satisfy once read.
    pub checks: Vec<Check>,
    /// Back, create_task: what must hold before the route's payment rail pays for the job.
    pub before_payment: Vec<PaymentCheck>,
    /// Front, create_task: how a job sold on an escrow rail is hashed.
    pub sale: Option<SaleHashes>,
    pub request: Rules,
    pub response: Rules,
}

/// A condition the task must meet before a job is paid for, and what to say when it does not.
#[derive(Debug, Clone)]
pub struct PaymentCheck {
    pub holds: Expr,
    pub message: String,
}

/// How a front hashes a sold job's input and result (its create form's `sale`), each an
/// expression over the task as the front sees it.
#[derive(Debug, Clone)]
pub struct SaleHashes {
    pub input_hash: Expr,
    pub result_hash: Expr,
}

/// A back call that is part of an operation.
#[derive(Debug)]
pub struct Call {
    pub name: String,
    pub method: Method,
    pub path: PathTemplate,
    /// Where `path` is appended, when it has a value (else the upstream's `base_path`).
    pub target: Option<Expr>,
    /// A call in a `then` list is made only when this holds on the document as the calls
    /// before it left it.
    pub when: Option<Expr>,
    pub request: Rules,
    pub response: Rules,
}

/// `[discover]`: the call that tells the engine where and how to call a back (`discovered.*`).
#[derive(Debug)]
pub struct Discover {
    /// Its method, path (at the upstream's root) and rules; `target` replaces the path.
    pub call: Call,
    /// How long what it read is kept.
    pub ttl: std::time::Duration,
    /// Calls made after it, in order, with `discovered.*` in view (a handshake's second step);
    /// what their response rules read into `discovered.*` joins what it read.
    pub then: Vec<Arc<Call>>,
}

/// When a stream of events ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// The task has ended.
    Terminal,
    /// The task has ended or waits for input.
    Settled,
}

/// An operation answered with server-sent events.
#[derive(Debug)]
pub struct Stream {
    /// Each makes one event when its condition holds, every time the task changes.
    pub frames: Vec<Frame>,
    pub until: Until,
    /// Ends the stream after the event in which it holds, instead of `until`.
    pub end: Option<Expr>,
    pub done: Option<String>,
    /// A heartbeat: the frames run again (`event.tick`) when the task has not changed for this
    /// long.
    pub every: Option<std::time::Duration>,
    /// At `sync_timeout`, the frames run once more (`event.timeout`, `event.last`) before the
    /// stream closes; otherwise it just closes.
    pub timeout_frames: bool,
    /// Whether the stream lasts until the task ends rather than the route's `sync_timeout`.
    pub lasts_task: bool,
    /// An SSE comment after this long without a write.
    pub keepalive: Option<std::time::Duration>,
}

/// One kind of event of a stream: when it is written, and its body.
#[derive(Debug)]
pub struct Frame {
    pub when: Option<Expr>,
    pub rules: Rules,
}

/// An ordered list of field rules.
#[derive(Debug, Clone, Default)]
pub struct Rules(pub Vec<Rule>);

/// Which way a rule works.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Both,
    Read,
    Emit,
}

/// A value conversion applied in both directions.
#[derive(Debug, Clone)]
pub enum Conversion {
    Table(Arc<Table>),
    TaskId,
    StepId,
    Time(TimeFormat),
}

/// A JSON type a read value must have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonType {
    String,
    Number,
    Integer,
    Boolean,
    Object,
    Array,
}

impl JsonType {
    pub fn from_name(name: &str) -> Option<JsonType> {
        Some(match name {
            "string" => JsonType::String,
            "number" => JsonType::Number,
            "integer" => JsonType::Integer,
            "boolean" => JsonType::Boolean,
            "object" => JsonType::Object,
            "array" => JsonType::Array,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            JsonType::String => "a string",
            JsonType::Number => "a number",
            JsonType::Integer => "an integer",
            JsonType::Boolean => "a boolean",
            JsonType::Object => "an object",
            JsonType::Array => "an array",
        }
    }

    pub fn accepts(self, v: &Value) -> bool {
        match self {
            JsonType::String => v.is_string(),
            JsonType::Number => v.is_number(),
            JsonType::Integer => v.is_i64() || v.is_u64(),
            JsonType::Boolean => v.is_boolean(),
            JsonType::Object => v.is_object(),
            JsonType::Array => v.is_array(),
        }
    }
}

/// A shape: rules for an object, used by `shape` (one object) and `each` (array elements).
#[derive(Debug)]
pub struct Shape {
    pub name: String,
    /// The canonical name each element is bound to (`step`), for `each`.
    pub bind: Option<String>,
    pub rules: Rules,
}

/// A rule's nested mapping.
#[derive(Debug, Clone)]
pub enum Nested {
    Shape(Arc<Shape>),
    Each(Arc<Shape>),
}

/// One compiled field rule.
#[derive(Debug, Clone)]
pub struct Rule {
    pub location: Location,
    pub aliases: Vec<Location>,
    /// How the location reads in messages (`$.input_query`, `query job_id`).
    pub label: String,
    pub field: Option<Vec<String>>,
    pub value: Option<Expr>,
    pub read: Option<Expr>,
    pub when: Option<Expr>,
    pub conversion: Option<Conversion>,
    pub default: Option<Value>,
    pub required: bool,
    pub kind: Option<JsonType>,
    pub nested: Option<Nested>,
    pub direction: Direction,
    /// Reading: every JSONPath match, as a list.
    pub all: bool,
    /// Writing: `null` when there is no value.
    pub nullable: bool,
}
