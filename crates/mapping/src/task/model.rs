//! The canonical task model, the interlingua every dialect is translated through.
//!
//! Mappings see it as a JSON document (`task.input.text`, `step.status`, …); the engine and the
//! store use these types. [`TaskPatch`] is what a decoded upstream answer says about a task: every
//! field optional, merged into the stored task by [`Task::observe`].

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A canonical operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Operation {
    /// Start a task.
    CreateTask,
    /// Read a task, with its steps.
    GetTask,
    /// Read a task's steps.
    ListSteps,
    /// Answer a task that waits for input.
    ProvideInput,
    /// Stop a task.
    CancelTask,
    /// Find tasks.
    SearchTasks,
    /// Find steps (of one task, or of the caller's tasks on the route).
    SearchSteps,
    /// Is the agent up?
    Availability,
    /// What input does the agent take?
    InputSchema,
    /// What is the agent?
    Describe,
}

impl Operation {
    pub const ALL: [Operation; 10] = [
        Operation::CreateTask,
        Operation::GetTask,
        Operation::ListSteps,
        Operation::ProvideInput,
        Operation::CancelTask,
        Operation::SearchTasks,
        Operation::SearchSteps,
        Operation::Availability,
        Operation::InputSchema,
        Operation::Describe,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Operation::CreateTask => "create_task",
            Operation::GetTask => "get_task",
            Operation::ListSteps => "list_steps",
            Operation::ProvideInput => "provide_input",
            Operation::CancelTask => "cancel_task",
            Operation::SearchTasks => "search_tasks",
            Operation::SearchSteps => "search_steps",
            Operation::Availability => "availability",
            Operation::InputSchema => "input_schema",
            Operation::Describe => "describe",
        }
    }

    pub fn from_name(name: &str) -> Option<Operation> {
        Operation::ALL.into_iter().find(|o| o.name() == name)
    }
}

/// A task's (or step's) state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Accepted, not started (waiting for payment, a worker, a predecessor).
    #[default]
    Pending,
    /// Being worked on.
    Running,
    /// Waiting for the client to provide input (`input_request` says what).
    AwaitingInput,
    /// Finished with a result.
    Completed,
    /// Finished without one.
    Failed,
    /// Stopped on request.
    Cancelled,
}

impl Status {
    pub const ALL: [Status; 6] = [
        Status::Pending,
        Status::Running,
        Status::AwaitingInput,
        Status::Completed,
        Status::Failed,
        Status::Cancelled,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Running => "running",
            Status::AwaitingInput => "awaiting_input",
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
        }
    }

    pub fn from_name(name: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Completed, failed and cancelled tasks change no more.
    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Completed | Status::Failed | Status::Cancelled)
    }
}

/// What a task (or step) was given.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Input {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Structured input (an object), e.g. MIP-003 `input_data`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Value>,
    /// Opaque artifact descriptions (an array).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifacts: Option<Value>,
}

/// What a task (or step) produced.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Output {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Structured output (an object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifacts: Option<Value>,
}

/// One unit of a task's work.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub id: String,
    pub task_id: String,
    /// The back's own id for the step, when it has steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_id: Option<String>,
    /// 1-based position.
    pub order: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub status: Status,
    /// The id of the step before this one, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predecessor: Option<String>,
    #[serde(default)]
    pub is_last: bool,
    #[serde(default)]
    pub input: Input,
    #[serde(default)]
    pub output: Output,
    /// Credits this step costs.
    #[serde(default)]
    pub cost: u64,
    #[serde(serialize_with = "super::time::serialize_rfc3339")]
    pub created_at: DateTime<Utc>,
    #[serde(serialize_with = "super::time::serialize_rfc3339")]
    pub updated_at: DateTime<Utc>,
}

/// A task, as interlingua keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    /// The id the front sees (a UUID v7, see [`Task::new`]; each dialect renders it, e.g.
    /// `task-<uuid>`).
    pub id: String,
    /// The id the back gave (a job id, a task id), never shown to a client of another dialect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_id: Option<String>,
    /// The agent the front addressed (e.g. a Nevermined DID), echoed back to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    pub route: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    pub status: Status,
    /// Why the task is in its status, when a dialect says more (`awaiting_payment`, `rejected`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default)]
    pub input: Input,
    #[serde(default)]
    pub output: Output,
    /// The input schema the agent waits on, while `awaiting_input`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_request: Option<Value>,
    /// The back's reference for its current status (MIP-003 `status_id`, a NEAR AI run id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_ref: Option<String>,
    /// What the agent last said about the task in words (A2A's status message, the question of a
    /// task waiting for input).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The conversation the task belongs to (A2A `contextId`, an LMOS conversation id, a
    /// MultiAgentEval `run_id`); a front may name its task by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<String>,
    #[serde(default)]
    pub steps: Vec<Step>,
    #[serde(default)]
    pub cost: u64,
    #[serde(serialize_with = "super::time::serialize_rfc3339")]
    pub created_at: DateTime<Utc>,
    #[serde(serialize_with = "super::time::serialize_rfc3339")]
    pub updated_at: DateTime<Utc>,
    /// An id the client chose (MIP-003 `identifier_from_purchaser`, an LMOS conversation id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_ref: Option<String>,
    /// How many times the back has been given input: 1 after the create, one more per
    /// provide_input (a turn-based back's `turn`).
    #[serde(default)]
    pub turn: u32,
    /// When the task entered its current status (and reason); absent: since it was created.
    /// A task waiting for input or payment ends once it has waited the route's `input_timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_since: Option<DateTime<Utc>>,
    /// The payment request the back's answer carried (a Masumi agent's `blockchainIdentifier`,
    /// times, seller key, …), verbatim: the route's payment rail buys the job with it, and a front
    /// of the same dialect shows it as the agent sent it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payment: Option<Value>,
    /// The payment request interlingua made as the seller of this job, on the route's escrow
    /// rail (a Masumi payment request: its `blockchainIdentifier`, times, the selling wallet's
    /// key, the input hash), in the names the front shows them by: set on a task a buyer pays
    /// for on that rail, never on a token holder's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sale: Option<Value>,
    /// The key of the back's create form the task was started with, where the back has several
    /// (an MCP server's task-augmented call or its blocking one, chosen by their `when`): how the
    /// task is followed (polled, or stored when its one call answers) and which of the back's
    /// other forms apply to it are decided by it, not by what the back says later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub back_form: Option<String>,
    /// What the task's steps cost, as its route said when the task was created: the task keeps
    /// it whatever the route says later (after a restart or a reload with other prices). Absent
    /// on a free route's tasks, and on tasks stored before prices were kept (those are charged
    /// at the route's current price).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<StepPrice>,
}

/// The part of a route's price that settles a task's steps (the hold is taken at create; fees
/// per call are charged when called).
///
/// Stored with every priced task, so a field at its default is left out: a create's row is
/// written twice and read on every poll, and the defaults were 64 of a typical task's 1 256
/// bytes (bench/README.md, "Under 64 connections").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepPrice {
    /// Per completed step (per task, for backs without steps of their own).
    pub step: u64,
    /// A step's cost is the agent's own, clamped to [`min`, `max`], instead of `step`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub from_agent: bool,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub min: u64,
    /// No cap is `u64::MAX` (written by every build since prices were kept, so a document
    /// without it has none).
    #[serde(default = "no_cap", skip_serializing_if = "is_no_cap")]
    pub max: u64,
    /// What a failed step costs.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed: u64,
    /// `step` is the price of the task as a whole, charged once, for its final step, whatever
    /// steps the back reports (a payment of one price per call).
    #[serde(default, skip_serializing_if = "is_false")]
    pub per_task: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn no_cap() -> u64 {
    u64::MAX
}

fn is_no_cap(n: &u64) -> bool {
    *n == u64::MAX
}

/// What an upstream answer says about a task: only the fields it carried.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct TaskPatch {
    pub upstream_id: Option<String>,
    pub status: Option<Status>,
    pub reason: Option<String>,
    pub name: Option<String>,
    pub output: Option<OutputPatch>,
    pub input_request: Option<Value>,
    pub status_ref: Option<String>,
    pub message: Option<String>,
    pub steps: Option<Vec<StepPatch>>,
    pub cost: Option<u64>,
    pub payment: Option<Value>,
    /// Input the client gave the step that waited for it (by the step's id): part of the patch,
    /// not set on a copy of the task beforehand, so that an update redone on a newer version
    /// (a watcher's write came first) keeps it. Set by the engine, never read from an answer.
    #[serde(skip)]
    pub answered: Option<(String, Input)>,
    /// The back has been given input once more (a turn-based back's next turn).
    #[serde(skip)]
    pub next_turn: bool,
}

/// Output fields an answer carried.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct OutputPatch {
    pub text: Option<String>,
    pub additional: Option<Value>,
    pub artifacts: Option<Value>,
}

/// A step as an upstream with native steps reports it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct StepPatch {
    /// The back's id for the step (`id` in the decoded document).
    #[serde(alias = "id")]
    pub upstream_id: Option<String>,
    pub order: Option<u32>,
    pub name: Option<String>,
    pub status: Option<Status>,
    pub is_last: Option<bool>,
    pub input: Option<Input>,
    pub output: Option<OutputPatch>,
    pub cost: Option<u64>,
}

impl TaskPatch {
    /// A patch that only says the task is now in `status`.
    pub fn status(status: Status) -> TaskPatch {
        TaskPatch {
            status: Some(status),
            ..TaskPatch::default()
        }
    }
}

/// Why a task waits for a payment (a purchase, or a buyer's lock) before anything more happens.
pub const AWAITING_PAYMENT: &str = "awaiting_payment";

/// Why a sold job is still running once its agent is done: its result is being submitted.
pub const SUBMITTING_RESULT: &str = "submitting_result";

impl Task {
    /// When the task entered its current status.
    pub fn in_status_since(&self) -> DateTime<Utc> {
        self.status_since.unwrap_or(self.created_at)
    }

    /// Whether the task waits on the client (input) or on a payment, rather than on the agent:
    /// such a wait is bounded by the route's `input_timeout`.
    pub fn waits_on_client(&self) -> bool {
        self.status == Status::AwaitingInput
            || (self.status == Status::Pending
                && matches!(
                    self.reason.as_deref(),
                    Some("awaiting_payment" | "payment_required")
                )
                && !self.waits_for_buyer())
    }

    /// Whether the task is a job sold on an escrow rail whose buyer has not locked the funds
    /// yet: pending, `awaiting_payment`, a `sale`, nothing asked of the agent. Its wait is
    /// bounded by the payment request's own deadline, not by `input_timeout`.
    pub fn waits_for_buyer(&self) -> bool {
        self.status == Status::Pending
            && self.reason.as_deref() == Some(AWAITING_PAYMENT)
            && self.sale.is_some()
            && self.upstream_id.is_none()
    }

    /// Whether the task is a sold job whose agent is done and whose result is being submitted
    /// to the escrow rail (running, `submitting_result`): the agent is not asked again, and
    /// the task completes once the rail has taken the result.
    pub fn submits_result(&self) -> bool {
        self.status == Status::Running
            && self.reason.as_deref() == Some(SUBMITTING_RESULT)
            && self.sale.is_some()
    }

    /// Whether the task waits for its client to pay for it before anything is asked of the
    /// agent (a create a front kept unpaid, to be paid for in band): pending, `payment_required`,
    /// with no subject and no upstream id yet. (`awaiting_payment` is a task whose own purchase
    /// from its agent is not locked yet.)
    pub fn awaits_first_payment(&self) -> bool {
        self.status == Status::Pending
            && self.reason.as_deref() == Some("payment_required")
            && self.subject.is_none()
            && self.upstream_id.is_none()
    }

    /// A new pending task with a fresh id: a UUID v7 (RFC 9562), its first 48 bits `now` in
    /// milliseconds, the rest random (74 bits, as unguessable as ids need to be).
    ///
    /// Time-ordered on purpose: the task id keys five of the store's indexes (the tasks, their
    /// holds, the ledger's one-hold, one-capture and one-release rules). Random ids land each new
    /// task on a random leaf of each index, so every create rewrites ≈ 10 scattered pages, more
    /// as the store grows; ids in time order land on the last leaves, which a batch of creates
    /// shares. Measured on the store alone, one core: 13 400 creates/s, flat as the store grows,
    /// against 7 800 falling to 6 500 in 10 s with UUID v4.
    pub fn new(route: &str, now: DateTime<Utc>) -> Task {
        let random = uuid::Uuid::new_v4().into_bytes();
        let mut tail = [0u8; 10];
        tail.copy_from_slice(&random[..10]);
        let millis = u64::try_from(now.timestamp_millis()).unwrap_or(0);
        Task {
            id: uuid::Builder::from_unix_timestamp_millis(millis, &tail)
                .into_uuid()
                .to_string(),
            upstream_id: None,
            agent: None,
            route: route.to_string(),
            subject: None,
            plan: None,
            status: Status::Pending,
            reason: None,
            name: None,
            input: Input::default(),
            output: Output::default(),
            input_request: None,
            status_ref: None,
            message: None,
            conversation: None,
            steps: Vec::new(),
            cost: 0,
            created_at: now,
            updated_at: now,
            client_ref: None,
            turn: 0,
            status_since: None,
            payment: None,
            sale: None,
            back_form: None,
            price: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_price_is_stored_without_its_defaults_and_read_back_whole() {
        let plain = StepPrice {
            step: 1,
            from_agent: false,
            min: 0,
            max: u64::MAX,
            failed: 0,
            per_task: false,
        };
        let text = serde_json::to_string(&plain).unwrap();
        assert_eq!(text, r#"{"step":1}"#);
        assert_eq!(serde_json::from_str::<StepPrice>(&text).unwrap(), plain);
        // As every build before wrote it.
        let written_before =
            r#"{"step":1,"from_agent":false,"min":0,"max":18446744073709551615,"failed":0}"#;
        assert_eq!(
            serde_json::from_str::<StepPrice>(written_before).unwrap(),
            plain
        );
        let agents = StepPrice {
            step: 0,
            from_agent: true,
            min: 1,
            max: 5,
            failed: 2,
            per_task: false,
        };
        let text = serde_json::to_string(&agents).unwrap();
        assert_eq!(
            text,
            r#"{"step":0,"from_agent":true,"min":1,"max":5,"failed":2}"#
        );
        assert_eq!(serde_json::from_str::<StepPrice>(&text).unwrap(), agents);
    }

    #[test]
    fn task_ids_are_unique_uuids_in_time_order() {
        let start = Utc::now();
        let earlier = Task::new("r", start);
        let later = Task::new("r", start + chrono::Duration::milliseconds(1));
        let twin = Task::new("r", start);
        let parsed = uuid::Uuid::parse_str(&earlier.id).unwrap();
        assert_eq!(parsed.get_version_num(), 7);
        assert!(earlier.id < later.id, "{} {}", earlier.id, later.id);
        assert_ne!(earlier.id, twin.id);
    }
}
