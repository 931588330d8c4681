//! The canonical operations, one file each, as the engine carries them out: each reads top to
//! bottom as the operation's story, from the front's canonical document to the one it answers
//! with (`request.rs` chose the operation and renders what it returns).
//!
//! | file | operations |
//! |---|---|
//! | `create.rs` | create_task: the task stored with its hold, started on the back |
//! | `unpaid.rs` | a create kept waiting to be paid for in band, started when paid |
//! | `get.rs` | get_task, list_steps |
//! | `input.rs` | provide_input |
//! | `cancel.rs` | cancel_task; a task cancelled by the operator or expired waiting |
//! | `search.rs` | search_tasks |
//! | `search_steps.rs` | search_steps |
//! | `describe.rs` | availability, input_schema, describe |
//! | `validate.rs` | an input checked against the agent's schema (create, provide_input) |

mod cancel;
mod create;
mod describe;
mod get;
mod input;
mod search;
mod search_steps;
mod unpaid;
mod validate;

pub(in crate::engine) use describe::agent;
pub(in crate::engine) use search::search_query;
