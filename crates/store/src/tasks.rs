//! What the interface and both backends' SQL say of tasks: one as stored, with its version
//! ([`Stored`]); a search ([`TaskQuery`]); one not ended, as a watcher resuming it sees it
//! ([`Unfinished`]). A leaf, below the interface (`store.rs`) and the tables' SQL that both use it.

use mapping::task::{Status, Task};

/// A task as stored, with the version an update must name.
#[derive(Debug, Clone, PartialEq)]
pub struct Stored {
    pub task: Task,
    pub version: i64,
}

/// What to look for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskQuery {
    pub route: Option<String>,
    pub subject: Option<String>,
    pub status: Option<Status>,
    pub name: Option<String>,
    /// The conversation the task belongs to.
    pub conversation: Option<String>,
    /// The task's own id (interlingua's).
    pub id: Option<String>,
    /// A step id the task holds (interlingua's). Matched as text in the task's document,
    /// within what the other filters select: callers name a route and a subject too, so the
    /// route index bounds the scan, and they check the step's id exactly in what comes back.
    pub holding_step: Option<String>,
    /// 1-based.
    pub page: u32,
    pub page_size: u32,
}

/// A task that has not ended, as far as a watcher resuming it needs to know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unfinished {
    pub id: String,
    pub route: String,
    pub status: Status,
    /// Whether the back has given the task its id: a create whose answer never came (the
    /// process stopped while it was in flight) left a task without one.
    pub started: bool,
    pub created_at: chrono::DateTime<chrono::Utc>,
    /// For a task claimed by [`TaskStore::claim_leases`](crate::TaskStore::claim_leases): the instance whose lease ran out
    /// (`None` when it was handed back, or never held).
    pub taken_from: Option<String>,
}
