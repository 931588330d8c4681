//! The canonical fields a mapping may name. `check` reports any other name as unknown, so a typo
//! in a mapping is caught when it is loaded rather than when a message arrives.
//!
//! A document seen by a mapping has these roots (made from typed values in [`super::doc`]):
//!
//! | root | what |
//! |---|---|
//! | `task` | the task (see `task::Task`) |
//! | `step` | one step (in a shape bound to `step`, or the step an operation targets) |
//! | `input` | input provided to a waiting task (`input.params`, `input.text`) |
//! | `error` | an error being rendered or read (`status`, `code`, `message`, `reason`, `request_id`, `field_errors`; for a missing or mistyped request field `location`, `field`, `problem`, `expected`) |
//! | `availability` | `available` (bool), `message` |
//! | `schema` | an input schema (MIP-003 Attachment 01 form) |
//! | `search` | a task or step search: `status`, `name`, `task_id`, `step_id`, `agents`, `page`, `page_size`, `total`, `next_page` |
//! | `tasks` | the tasks a search found |
//! | `steps` | the steps a step search found (each also with `agent`, its task's) |
//! | `request` | `request.id`: the request id; anything else a front's `[request]` rules read (`request.rpc_id`), echoed into its answers and errors |
//! | `event` | in stream frames: `first`, `last` (the stream ends after it), `seq`, `tick` (a heartbeat: nothing changed), `timeout` (the stream's time is up) |
//! | `charge` | `charge.credits`: what this request charged, on priced routes |
//! | `agent` | what `describe` says: `name`, `title`, `dialect`, `url`, `operations`, `input_schema`; in `[answer.NAME]` forms and `checks`, its cheap part (`name`, `title`, `description`, `dialect`, `url`, `base_url`, `auth`, `streaming`) |
//! | `var` | the dialect's variables (`[vars]`, overridden per route) |
//! | `discovered` | what a back's `[discover]` call read (open: its rules name what they keep) |

const IO: &[&str] = &["text", "params", "params.*", "artifacts", "artifacts.*"];
const OUT: &[&str] = &[
    "text",
    "additional",
    "additional.*",
    "artifacts",
    "artifacts.*",
];

/// The task's fields (its top-level ones are `Task`'s serde names, which [`super::doc`]'s task
/// view relies on; a test there holds them to it).
pub const TASK: &[&str] = &[
    "id",
    "upstream_id",
    "agent",
    "route",
    "subject",
    "plan",
    "status",
    "reason",
    "name",
    "input",
    "output",
    "input_request",
    "input_request.*",
    "status_ref",
    "steps",
    "cost",
    "created_at",
    "updated_at",
    "client_ref",
    "turn",
    "message",
    "conversation",
    "status_since",
    "payment",
    "payment.*",
    "sale",
    "sale.*",
    "back_form",
    "price",
    "price.*",
];

const STEP: &[&str] = &[
    "id",
    "task_id",
    // The agent of the step's task: set on the steps a step search finds, which stand alone.
    "agent",
    "upstream_id",
    "order",
    "name",
    "status",
    "reason",
    "predecessor",
    "is_last",
    "input",
    "output",
    "cost",
    "created_at",
    "updated_at",
];

const ERROR: &[&str] = &[
    "available",
    "price",
    "retry_after",
    "status",
    "code",
    "message",
    "reason",
    "request_id",
    "field_errors",
    "field_errors.*",
    "location",
    "field",
    "problem",
    "expected",
    "payment_required",
];

/// Whether `path` (split on dots) names a canonical field. `var.*` names are checked elsewhere,
/// against the dialect's variables.
pub fn is_known(path: &[String]) -> bool {
    let Some((root, rest)) = path.split_first() else {
        return false;
    };
    let rest: Vec<&str> = rest.iter().map(String::as_str).collect();
    match root.as_str() {
        "task" => rest.is_empty() || matches_object(TASK, &rest, true),
        "step" => rest.is_empty() || matches_object(STEP, &rest, true),
        "input" => rest.is_empty() || matches_list(IO, &rest),
        "error" => matches_list(ERROR, &rest),
        "availability" => matches!(rest.as_slice(), ["available"] | ["message"]),
        // A settlement this request made (an x402 SettleResponse, whole); what a task waiting
        // to be paid for asks (an x402 PaymentRequired, whole); a payment interlingua makes in
        // band, on a call to an agent that asked for it (an x402 PaymentPayload, whole).
        "payment" => matches!(
            rest.as_slice(),
            ["receipt", ..] | ["required", ..] | ["payload", ..]
        ),
        "schema" | "tasks" | "steps" => true,
        "search" => matches!(
            rest.as_slice(),
            ["status"]
                | ["name"]
                | ["task_id"]
                | ["step_id"]
                | ["agents"]
                | ["page"]
                | ["page_size"]
                | ["total"]
                | ["next_page"]
        ),
        // Open: a front's [request] rules, a back's [discover] rules, name what they keep.
        "request" | "discovered" => !rest.is_empty(),
        "event" => matches!(
            rest.as_slice(),
            ["first"] | ["last"] | ["seq"] | ["tick"] | ["timeout"]
        ),
        "charge" => matches!(rest.as_slice(), ["credits"]),
        "agent" => matches!(
            rest.as_slice(),
            [] | ["name"]
                | ["title"]
                | ["description"]
                | ["dialect"]
                | ["url"]
                | ["base_url"]
                | ["operations"]
                | ["auth"]
                | ["streaming"]
                | ["x402"]
                | ["input_schema", ..]
        ),
        _ => false,
    }
}

/// Task and step fields, where `input.*` and `output.*` continue into their own lists.
fn matches_object(list: &[&str], rest: &[&str], nested_io: bool) -> bool {
    if nested_io {
        match rest {
            ["input", tail @ ..] if !tail.is_empty() => return matches_list(IO, tail),
            ["output", tail @ ..] if !tail.is_empty() => return matches_list(OUT, tail),
            _ => {}
        }
    }
    matches_list(list, rest)
}

/// `rest` matches an entry exactly, or falls under an entry ending in `.*`.
fn matches_list(list: &[&str], rest: &[&str]) -> bool {
    let joined = rest.join(".");
    list.iter().any(|entry| match entry.strip_suffix(".*") {
        Some(prefix) => {
            joined.starts_with(prefix) && joined.as_bytes().get(prefix.len()) == Some(&b'.')
        }
        None => *entry == joined,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(p: &str) -> bool {
        is_known(&p.split('.').map(str::to_string).collect::<Vec<_>>())
    }

    #[test]
    fn known_and_unknown_fields() {
        for ok in [
            "task.input.text",
            "task.output.additional.input_schema",
            "task.steps",
            "step.status",
            "error.field_errors.text",
            "input.params",
            "availability.available",
            "schema",
            "tasks",
            "steps",
            "step.agent",
            "search.step_id",
            "request.id",
        ] {
            assert!(known(ok), "{ok}");
        }
        for bad in [
            "task.inptu.text",
            "task.input.txt",
            "search.steps",
            "error",
            "foo.bar",
            "task.output.result",
        ] {
            assert!(!known(bad), "{bad}");
        }
    }
}
