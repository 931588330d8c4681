//! The ledger's vocabulary: accounts, balances, the rows, and the movements a task update
//! settles (a hold, captures, a release); and what the credits check reads from the store
//! ([`Audit`]). The rules that decide amounts live with the proxy's pricing, not here.

use chrono::{DateTime, Utc};
use serde::Serialize;

use mapping::task::{Status, Task};

/// Whose credits: a plan and a subject.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Account {
    pub plan: String,
    pub subject: String,
}

impl Account {
    pub fn new(plan: &str, subject: &str) -> Account {
        Account {
            plan: plan.to_string(),
            subject: subject.to_string(),
        }
    }
}

/// An account's standing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Balance {
    pub plan: String,
    pub subject: String,
    /// Granted, net of revocations.
    pub granted: i64,
    /// Charged for completed steps.
    pub captured: i64,
    /// Reserved by tasks still running.
    pub held: i64,
}

impl Balance {
    /// What new tasks may still hold.
    pub fn available(&self) -> i64 {
        self.granted - self.captured - self.held
    }
}

/// One movement of credits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LedgerRow {
    pub seq: i64,
    pub at: String,
    pub plan: String,
    pub subject: String,
    /// `grant`, `revoke`, `hold`, `capture` or `release`.
    pub kind: String,
    pub amount: i64,
    /// For a capture: how much of it came out of the task's hold.
    pub from_hold: i64,
    pub task_id: Option<String>,
    pub step_id: Option<String>,
    pub note: Option<String>,
}

/// Which accounts to list ([`TaskStore::accounts`](crate::TaskStore::accounts)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccountQuery {
    /// Only this plan's accounts.
    pub plan: Option<String>,
    /// Only accounts whose subject contains this text (as it is: case matters).
    pub subject_contains: Option<String>,
    /// At most this many accounts (more than [`AccountQuery::MAX_LIMIT`] reads as that; 0 lists
    /// none, and the total still counts them all).
    pub limit: u32,
    /// How many matching accounts to skip first.
    pub offset: u64,
}

impl AccountQuery {
    /// The most accounts one call lists.
    pub const MAX_LIMIT: u32 = 1000;
}

/// An account as the operator's list shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AccountSummary {
    /// Its balance, as [`TaskStore::balance`](crate::TaskStore::balance) reads it (available is
    /// [`Balance::available`]).
    pub balance: Balance,
    /// When its last ledger row (the last written) was written: ISO 8601, UTC, milliseconds.
    pub last_at: String,
}

/// Credits spent on one route on one day ([`TaskStore::spend_by_day`](crate::TaskStore::spend_by_day)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DaySpend {
    pub route: String,
    /// The UTC day, `YYYY-MM-DD`.
    pub day: String,
    pub credits: i64,
}

/// Credits to reserve for a new task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    pub plan: String,
    pub subject: String,
    pub amount: u64,
}

/// One step to charge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capture {
    pub step_id: String,
    pub amount: u64,
}

/// What a task update settles.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settlement {
    pub captures: Vec<Capture>,
    /// The task has ended: release what is left of its hold.
    pub release: bool,
}

impl Settlement {
    pub fn is_empty(&self) -> bool {
        self.captures.is_empty() && !self.release
    }

    /// This settlement for an update that leaves its task `terminal`: a task stored as ended
    /// always releases what is left of its hold, whatever its caller asked, so that no way of
    /// ending a task (now or added later) can leave its credits held for ever.
    pub(crate) fn ending(&self, terminal: bool) -> Settlement {
        Settlement {
            captures: self.captures.clone(),
            release: self.release || terminal,
        }
    }
}

/// What a settlement moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Settled {
    /// Credits charged now (0 for steps already charged before).
    pub captured: u64,
    pub released: u64,
}

/// What the store holds that the check judges (see [`TaskStore::audit`]).
#[derive(Debug, Clone, Default)]
pub struct Audit {
    /// Accounts whose balance differs from their rows: the balance, and what the rows say.
    pub drifts: Vec<(Balance, Balance)>,
    pub open_holds: Vec<OpenHold>,
    /// Tasks that have not ended and have no upstream id.
    pub unstarted: Vec<Unstarted>,
}

/// A hold not yet released, and its task as stored.
#[derive(Debug, Clone)]
pub struct OpenHold {
    pub task_id: String,
    pub plan: String,
    pub subject: String,
    pub remaining: i64,
    pub task: HeldTask,
}

/// The task an open hold is for, as the store finds it.
#[derive(Debug, Clone)]
pub enum HeldTask {
    /// No such task.
    Missing,
    /// Its document cannot be read (why).
    Unreadable(String),
    Stored(Box<Task>),
}

/// A task that has not ended and has no upstream id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unstarted {
    pub task_id: String,
    pub route: String,
    pub status: Status,
    pub created_at: DateTime<Utc>,
}
