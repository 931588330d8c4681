//! A mapping file as written: serde structs mirroring `mappings/<dialect>.toml`. Unknown keys are
//! errors. `compile` turns this into the translator the engine runs.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

/// One field rule: where a value sits in the dialect's message, and what it is in the canonical
/// model. Exactly one of `json`, `param`, `query`, `header` says where.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldRule {
    /// A JSONPath into the body (`$.task.task_id`, `$.steps[0]`, `$` for the whole body).
    pub json: Option<Spanned<String>>,
    /// A parameter of the operation's path template (`did` for `/agents/{did}/tasks`).
    pub param: Option<Spanned<String>>,
    /// A query parameter.
    pub query: Option<Spanned<String>>,
    /// A header.
    pub header: Option<Spanned<String>>,
    /// Other places the value is accepted from when reading (older field names), same kind.
    pub aliases: Option<Vec<Spanned<String>>>,
    /// The canonical field (`task.input.text`, `step.status`, `error.message`).
    pub field: Option<Spanned<String>>,
    /// An expression computing the value to write (instead of `field`).
    pub value: Option<Spanned<String>>,
    /// An expression applied to the value read (`$`) before it is stored in `field`.
    pub read: Option<Spanned<String>>,
    /// An expression; the rule is written only when it is truthy.
    pub when: Option<Spanned<String>>,
    /// `"status"`: translate through the status table.
    pub table: Option<Spanned<String>>,
    /// `"task"` or `"step"`: render and read ids through the `[ids]` templates.
    pub id: Option<Spanned<String>>,
    /// `"iso_ms"`, `"unix_ms"`, `"unix_s"`, `"rfc3339"`: the dialect's timestamp format.
    pub time: Option<Spanned<String>>,
    /// The dialect value used when there is none (in either direction).
    pub default: Option<toml::Value>,
    /// Reading: the message must carry the value (400 for a client, 502 for an upstream).
    pub required: Option<bool>,
    /// Reading: the JSON type the value must have.
    #[serde(rename = "type")]
    pub kind: Option<Spanned<String>>,
    /// The value is an object mapped by a shape.
    pub shape: Option<Spanned<String>>,
    /// The value is an array whose elements are mapped by a shape.
    pub each: Option<Spanned<String>>,
    /// `"read"` or `"emit"`: the rule works in one direction only.
    pub only: Option<Spanned<String>>,
    /// Reading a JSONPath: every match, as a list (not only the first).
    pub all: Option<bool>,
    /// Writing: when there is no value, write `null` rather than leave the field out.
    pub nullable: Option<bool>,
}

/// A condition on a front request, for choosing its operation: where to look (exactly one of
/// `json`, `header`, `query`) and what must hold.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Condition {
    pub json: Option<Spanned<String>>,
    pub header: Option<Spanned<String>>,
    pub query: Option<Spanned<String>>,
    /// The value must be one of these.
    pub equals: Option<Vec<toml::Value>>,
    /// The value must not be one of these (an absent value passes).
    pub not: Option<Vec<toml::Value>>,
    /// The value must be there (`true`) or not (`false`).
    pub present: Option<bool>,
}

/// `[tables.NAME]`: a value table, used by rules with `table = "NAME"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableSection {
    /// dialect value → canonical value.
    pub read: Option<BTreeMap<String, toml::Value>>,
    /// canonical value (as text) → dialect value.
    pub emit: Option<Spanned<BTreeMap<String, toml::Value>>>,
    /// The canonical value for a dialect value the table lacks (otherwise an error).
    pub read_default: Option<toml::Value>,
    /// The dialect value for a canonical value the table lacks (otherwise an error).
    pub emit_default: Option<toml::Value>,
    /// Read values ignoring case, `_` and `-`.
    pub ignore_case: Option<bool>,
    /// The table translates statuses (`status/reason` values, every status needed on emit).
    pub status: Option<bool>,
}

/// `[request]`: fields read from every front request, whatever its operation, into `request.*`
/// (e.g. a JSON-RPC `id` every answer must echo, a protocol version header).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestSection {
    #[serde(default)]
    pub fields: Vec<Spanned<FieldRule>>,
    /// What every front request must satisfy, checked once `fields` are read; the first that
    /// fails answers with its error.
    pub checks: Option<Vec<Spanned<CheckSection>>>,
}

/// A request guard: an expression over what the request's rules read (`request.*`), the route's
/// agent (`agent.name`, `agent.title`, `agent.description`, `agent.auth`) and the variables;
/// when it is not truthy the request is refused with this error, rendered by `[error]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckSection {
    pub holds: Spanned<String>,
    /// The HTTP status of the refusal (400-599; default 400).
    pub status: Option<Spanned<u16>>,
    /// The error's code (`error.code`, which `[error]` rules may translate through a table);
    /// default `refused`.
    pub code: Option<Spanned<String>>,
    /// The error's message.
    pub message: String,
}

/// `stream`: an operation that answers with server-sent events as the task progresses.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamSection {
    /// A stream of `[streams.NAME]`, used as it is (no other key with it): forms that follow a
    /// task alike say so once.
    #[serde(rename = "use")]
    pub uses: Option<Spanned<String>>,
    /// Each makes one event when its `when` holds, each time the task changes, in this order.
    #[serde(default)]
    pub frames: Vec<FrameSection>,
    /// `"terminal"` (default): the stream ends when the task ends; `"settled"`: also when it
    /// waits for input.
    pub until: Option<Spanned<String>>,
    /// A last `data:` line after the final event (OpenAI's `[DONE]`).
    pub done: Option<String>,
    /// An expression over the task and the request: the stream ends after the event in which it
    /// holds (instead of `until`).
    pub end: Option<Spanned<String>>,
    /// A heartbeat: when the task has not changed for this long ("10s"), the frames run again
    /// with `event.tick` true.
    pub every: Option<Spanned<String>>,
    /// At the route's `sync_timeout`: `"end"` (default) closes the stream as it is; `"frames"`
    /// runs the frames once more with `event.timeout` and `event.last` true (a last answer
    /// saying the task goes on), then closes it.
    pub timeout: Option<Spanned<String>>,
    /// How long the stream may last: `"sync_timeout"` (default, the route's) or `"task"`: until
    /// the task ends (a task waiting for input ends at the route's `input_timeout`), at most an
    /// hour.
    pub lasts: Option<Spanned<String>>,
    /// An SSE comment line written when nothing was written for this long ("15s"), so that
    /// clients and intermediaries with read timeouts keep a quiet stream open.
    pub keepalive: Option<Spanned<String>>,
}

/// `[ids]`: how canonical ids are rendered in this dialect.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdsSection {
    pub task: Option<Spanned<String>>,
    pub step: Option<Spanned<String>>,
}

/// `[status]`: the status table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusSection {
    /// dialect value → canonical status (optionally `status/reason`).
    pub read: BTreeMap<String, Spanned<String>>,
    /// canonical status (or `status/reason`) → dialect value.
    pub emit: Spanned<BTreeMap<String, Spanned<String>>>,
    /// Read values ignoring case, `_` and `-`.
    pub ignore_case: Option<bool>,
}

/// `[error]`: the dialect's error body.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorSection {
    pub fields: Vec<Spanned<FieldRule>>,
    /// An expression for the HTTP status of an error answer (default `error.status`), e.g.
    /// JSON-RPC's 200 for errors after authentication.
    pub status: Option<Spanned<String>>,
}

/// `[shapes.NAME]`: a reusable object mapping.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShapeSection {
    /// The canonical name each element is bound to when the shape maps array elements (`step`).
    pub bind: Option<Spanned<String>>,
    pub fields: Vec<Spanned<FieldRule>>,
}

/// `[operations.NAME]`: one canonical operation as this dialect carries it. NAME is the canonical
/// operation, or any name when `operation` says which (a dialect with several forms of one
/// operation: JSON-RPC methods of two protocol versions, a streaming variant).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperationSection {
    /// The canonical operation, when NAME is not one.
    pub operation: Option<Spanned<String>>,
    pub method: Spanned<String>,
    /// A path template relative to the route (front) or the upstream (back): `/tasks/{task_id}`.
    pub path: Spanned<String>,
    /// Front: what else the request must satisfy to be this operation (all of them).
    #[serde(rename = "match")]
    pub conditions: Option<Vec<Spanned<Condition>>>,
    /// Back: of several forms of one operation, the first whose `when` holds is used.
    pub when: Option<Spanned<String>>,
    /// `"front"` or `"back"`: the form serves clients only, or calls agents only (default both).
    pub side: Option<Spanned<String>>,
    /// Back: further calls after this one, each a `[calls.NAME]`; what each answer says is
    /// merged into the task before the next call is written.
    pub then: Option<Vec<Spanned<String>>>,
    /// Back: an expression giving the path (or absolute URL: its path and query only) that
    /// `path` is appended to, instead of the upstream's `base_path`; when it has no value, the
    /// upstream's `base_path` as usual.
    pub target: Option<Spanned<String>>,
    /// Front: answer with server-sent events.
    pub stream: Option<StreamSection>,
    /// Other path templates a front request may use for the operation (older paths); only `path`
    /// is ever sent.
    pub also: Option<Vec<Spanned<String>>>,
    /// The success status (default 200).
    pub status: Option<Spanned<u16>>,
    /// create_task: `"task"` (answers at once with a task to poll) or `"result"` (answers when done).
    pub returns: Option<Spanned<String>>,
    /// Front, provide_input: when the task it names has ended (or there is none), the request
    /// starts a new task instead, read by the create form named here (a chat's next turn).
    pub otherwise: Option<Spanned<String>>,
    /// Front: an expression over the request deciding per request whether to answer with the
    /// result (truthy) or at once; overrides `returns` (A2A's `returnImmediately`).
    pub wait: Option<Spanned<String>>,
    /// Front, create_task: an expression over the request deciding whether a create that brings
    /// no payment, on a route that takes x402, is kept as a task waiting to be paid for
    /// (answered as that task, `payment.required` set) rather than refused with 402: a payment
    /// carried in band by a later request on the task (the A2A x402 extension).
    pub unpaid: Option<Spanned<String>>,
    /// Front: `"error"` answers a task that failed with the dialect's error (502, the agent's
    /// words as the message) instead of the task; default `"task"`.
    pub failed: Option<Spanned<String>>,
    /// Front, for a request that waits for the result: what the client gets when the route's
    /// `sync_timeout` passes first. `"task"` answers the task as it is (it goes on, and the
    /// client can poll it); default `"error"`: 504, naming the task.
    pub timeout: Option<Spanned<String>>,
    /// Front: validate this canonical field against the input schema before anything else.
    pub validate: Option<Spanned<String>>,
    /// Front: whether it is answered without a token on routes with auth. Default: `describe`
    /// forms are (discovery documents), others are not.
    pub public: Option<bool>,
    /// Front: what the request must also satisfy once it is read (see `[request] checks`).
    pub checks: Option<Vec<Spanned<CheckSection>>>,
    /// Back, create_task: what must hold of the task, once the agent's answer is in it, before
    /// the route's payment rail pays for the job; a check that fails fails the task (reason
    /// `payment`, its message saying why) and nothing is paid.
    pub before_payment: Option<Vec<Spanned<PaymentCheck>>>,
    /// Front, create_task: how a job sold on an escrow rail is hashed (a Masumi payment
    /// request names its input's hash; the result's hash goes on chain), so that the engine
    /// hashes exactly what this dialect shows without knowing the dialect.
    pub sale: Option<Spanned<SaleSection>>,
    pub request: Option<Vec<Spanned<FieldRule>>>,
    pub response: Option<Vec<Spanned<FieldRule>>>,
}

/// One check of `before_payment`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaymentCheck {
    /// An expression over the task (as the back's mapping sees it) that must be truthy.
    pub holds: Spanned<String>,
    /// Why the task failed, when it does not hold.
    pub message: String,
}

/// A front create form's `sale`: two expressions over the task (as the front sees it).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SaleSection {
    /// The hash of the job's input, as the buyer computes it from what it sent.
    pub input_hash: Spanned<String>,
    /// The hash of the job's result, as the buyer computes it from what it reads.
    pub result_hash: Spanned<String>,
}

/// One kind of event of a stream.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FrameSection {
    /// Whether this event is written for the task's current state (`event.first`, `event.last`,
    /// `task.status`…); always when absent.
    pub when: Option<Spanned<String>>,
    /// The event's body.
    pub fields: Vec<Spanned<FieldRule>>,
}

/// `[answer.NAME]`: a request of the dialect answered by interlingua itself, with no task and no
/// call to the agent (a protocol handshake, a ping, an acknowledged notification): chosen like an
/// operation's front form, its `response` rules written over `request.*`, the route's agent
/// (`agent.name`, `agent.title`, `agent.description`, `agent.auth`, `agent.url`,
/// `agent.base_url`) and the variables.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnswerSection {
    pub method: Spanned<String>,
    pub path: Spanned<String>,
    #[serde(rename = "match")]
    pub conditions: Option<Vec<Spanned<Condition>>>,
    pub also: Option<Vec<Spanned<String>>>,
    /// The answer's status (default 200); an answer with no body rules has an empty body.
    pub status: Option<Spanned<u16>>,
    /// Answered without a token on routes with auth (default false).
    pub public: Option<bool>,
    pub checks: Option<Vec<Spanned<CheckSection>>>,
    /// Rules reading the request into `request.*` for the response rules.
    pub request: Option<Vec<Spanned<FieldRule>>>,
    pub response: Option<Vec<Spanned<FieldRule>>>,
}

/// `[refuse.NAME]`: a request of the dialect that interlingua knows and always refuses (a call
/// that makes no sense through a proxy), answered with this error in the dialect's shape rather
/// than as an unknown path.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RefuseSection {
    pub method: Spanned<String>,
    /// A path template relative to the route, as an operation's.
    pub path: Spanned<String>,
    /// The HTTP status of the answer (400-599).
    pub status: Spanned<u16>,
    /// The error's message: why, and what to do instead.
    pub message: String,
}

/// `[calls.NAME]`: a back call that is part of an operation (`then`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallSection {
    pub method: Spanned<String>,
    pub path: Spanned<String>,
    /// As an operation's `target`.
    pub target: Option<Spanned<String>>,
    /// Made only when this holds on the document as the calls before it left it (a result
    /// fetched only once a polled task has completed); otherwise skipped.
    pub when: Option<Spanned<String>>,
    pub request: Option<Vec<Spanned<FieldRule>>>,
    pub response: Option<Vec<Spanned<FieldRule>>>,
}

/// `[discover]`: a call the engine makes before a back's first call (and again when one fails)
/// to learn where and how to call it (an A2A agent card); its response rules read into
/// `discovered.*`, which back forms' `when`, `target` and rules then read.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiscoverSection {
    /// Default `GET`.
    pub method: Option<Spanned<String>>,
    /// Default `/.well-known/agent-card.json`, at the upstream's root (not below `base_path`).
    pub path: Option<Spanned<String>>,
    /// An expression giving the path or absolute URL to read instead (only its path and query
    /// are used: the call goes to the route's upstream whatever host it names).
    pub target: Option<Spanned<String>>,
    /// How long what was discovered is kept (default "5m").
    pub ttl: Option<Spanned<String>>,
    /// Calls (`[calls.NAME]`) made after the discovery call, in order, with what it discovered
    /// in view (`discovered.*`): the rest of a handshake. Each goes below the upstream's
    /// `base_path` unless it names a `target`, as a form's calls do.
    pub then: Option<Vec<Spanned<String>>>,
    pub request: Option<Vec<Spanned<FieldRule>>>,
    pub response: Option<Vec<Spanned<FieldRule>>>,
}
