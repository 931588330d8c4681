//! The engine's translation steps, pure: what a front request reads as, the task a create
//! makes, the documents a back is sent, what its answers say, how they fold into the task, and
//! what a front is answered, each document a [`Canonical`] built from typed values or a
//! [`Decoded`] read by name. No store, no sockets, no clock of their own (the caller says when):
//! the engine's operations (`ops/`, `request.rs`, `back/`) call these between their I/O, and so do the
//! golden tests (`tests/golden.rs`), so that a snapshot is what a peer of the engine gets.

use chrono::{DateTime, Utc};
use http::Method;
use serde_json::Value;

use crate::error::ProxyError;
use crate::upstream::UpstreamError;
use mapping::dialect::doc::text_of;
use mapping::dialect::expr::Expr;
use mapping::dialect::mapping::{Check, Op, Returns, Rules};
use mapping::dialect::template::PathTemplate;
use mapping::dialect::{self, Canonical, CodecError, Context, Decoded, Doc, Mapping, Message};
use mapping::task::{Observation, Status, StepSource, Task, TaskPatch};

/// What the front's `[request]` rules read from a request (`request.*`: a JSON-RPC id, a
/// protocol version), read before the operation is known so that an error answer carries it
/// too; `None` when the mapping has no such rules or they read nothing.
pub fn read_echo(
    front: &Mapping,
    msg: &Message,
    ctx: &Context<'_>,
) -> Result<Option<Value>, ProxyError> {
    let Some(rules) = &front.request else {
        return Ok(None);
    };
    let read = decode(rules, msg, ctx)?;
    Ok(read.request().cloned())
}

/// The first of `checks` that does not hold of `doc`, as the error it answers with.
pub fn check(checks: &[Check], doc: &dyn Doc, ctx: &Context<'_>) -> Result<(), ProxyError> {
    match checks.iter().find(|c| !dialect::holds(&c.holds, doc, ctx)) {
        None => Ok(()),
        Some(c) => Err(ProxyError::Refused {
            status: c.status,
            code: c.code.clone(),
            message: c.message.clone(),
        }),
    }
}

/// The front form that takes a request, and the canonical document its request rules read
/// (path parameters are set on `msg`). A request no form takes is refused as the mapping says,
/// else `NoOperation`; one the form cannot read is an invalid request, field by field.
pub fn read_front<'m>(
    front: &'m Mapping,
    ctx: &Context<'_>,
    method: &Method,
    path: &str,
    msg: &mut Message,
) -> Result<(&'m Op, Decoded), ProxyError> {
    let Some((fop, params)) = front.match_front(method, path, msg) else {
        return Err(match front.refusal(method, path) {
            Some(r) => ProxyError::Refused {
                status: r.status,
                code: "refused".to_string(),
                message: r.message.clone(),
            },
            None => ProxyError::NoOperation {
                method: method.to_string(),
                path: path.to_string(),
            },
        });
    };
    msg.params = params;
    let doc = decode(&fop.request, msg, ctx)?;
    Ok((fop, doc))
}

/// Makes `task` (fresh, with its id) the task a create's document `draft` asks for, on its
/// first turn; a back without steps of its own gets the first synthesized one.
pub fn start_task(task: &mut Task, draft: &Decoded, back: &Mapping, now: DateTime<Utc>) {
    draft.apply_draft(task);
    task.turn = 1;
    if back.steps == StepSource::Synthesized {
        task.start_steps(now);
    }
}

/// What the back's answer to a create (`back_create`) says of the new task: a back that
/// answers only when done (`returns = "result"`) has completed it unless it says otherwise.
pub fn created_patch(patch: &mut TaskPatch, back_create: &Op) {
    if back_create.returns == Returns::Result && patch.status.is_none() {
        patch.status = Some(Status::Completed);
    }
}

/// A back that names no task in its answer to a create (a turn-based agent, one that answers
/// with the result) knows the task by interlingua's id, `task_id`.
pub fn default_upstream_id(patch: &mut TaskPatch, task_id: &str) {
    patch.upstream_id.get_or_insert_with(|| task_id.to_string());
}

/// Folds what `back` said (`patch`) into `task` at `now`. A back that asks for input without
/// saying what is taken to ask for the input its mapping declares.
pub fn fold(
    task: &mut Task,
    mut patch: TaskPatch,
    back: &Mapping,
    now: DateTime<Utc>,
) -> Observation {
    if patch.status == Some(Status::AwaitingInput) && patch.input_request.is_none() {
        patch.input_request = back.input_schema.clone();
    }
    task.observe(patch, back.steps, now)
}

/// The step a provide_input is for: the last one waiting for input, else the last.
pub fn waiting_step(task: &Task) -> Option<usize> {
    task.steps
        .iter()
        .rposition(|s| s.status == Status::AwaitingInput)
        .or(task.steps.len().checked_sub(1))
}

/// Whether `task` waits for input on a step other than `answered`, the step the client's input
/// just went to (`None`: no input was given). An agent may show the answered step waiting for a
/// moment after it took the input (it picks the input up in its own time): that is not a new
/// question, and a client following the task after its input waits on for one, or the end.
pub fn asks_anew(task: &Task, answered: Option<&str>) -> bool {
    task.status == Status::AwaitingInput
        && waiting_step(task).is_none_or(|i| Some(task.steps[i].id.as_str()) != answered)
}

/// The back's document for the task's turn `turn` (a turn-based back is called again with it).
pub fn turn_doc(task: &Task, turn: u32) -> Canonical<'_> {
    Canonical::back(task).with_turn(turn)
}

/// The back's document for a provide_input: the task on its next turn, the step that waits
/// (`waiting`, from [`waiting_step`]) as the back knows it, and the client's `input`.
pub fn provide_input_doc(task: &Task, waiting: Option<usize>, input: Value) -> Canonical<'_> {
    Canonical::back(task)
        .with_turn(task.turn + 1)
        .with_step(waiting)
        .with_input(input)
}

/// What the back's answer to a provide_input says (`patch`), made the task's next turn: running
/// again unless the back said more, under the id it already has, with the `input` of the
/// client's `request` given to the waiting step (`waiting`, from [`waiting_step`]).
pub fn input_patch(patch: &mut TaskPatch, task: &Task, waiting: Option<usize>, request: &Decoded) {
    patch.status.get_or_insert(Status::Running);
    patch.upstream_id = None;
    patch.next_turn = true;
    if let Some(i) = waiting {
        patch.answered = Some((task.steps[i].id.clone(), request.given_input()));
    }
}

/// One HTTP call of a back form: its method, path and rules.
#[derive(Clone, Copy)]
pub struct Call<'a> {
    /// The form's or the call's name (`create_task`, `send_v03`), for traces.
    pub name: &'a str,
    pub method: &'a Method,
    pub path: &'a PathTemplate,
    /// Where to send it instead of the upstream's base path (an agent card's URL).
    pub target: Option<&'a Expr>,
    /// Made only when this holds (a `then` call's condition).
    pub when: Option<&'a Expr>,
    pub request: &'a Rules,
    pub response: &'a Rules,
}

/// The calls a back form makes, in order: its own, then each of `then`.
pub fn calls(op: &Op) -> impl Iterator<Item = Call<'_>> {
    let first = Call {
        name: &op.key,
        method: &op.method,
        path: &op.path,
        target: op.target.as_ref(),
        when: None,
        request: &op.request,
        response: &op.response,
    };
    std::iter::once(first).chain(op.then.iter().map(|c| call_of(c)))
}

/// A `[calls.NAME]` section as one call to make.
pub fn call_of(c: &mapping::dialect::mapping::Call) -> Call<'_> {
    Call {
        name: &c.name,
        method: &c.method,
        path: &c.path,
        target: c.target.as_ref(),
        when: c.when.as_ref(),
        request: &c.request,
        response: &c.response,
    }
}

/// A call written from `doc` with the back's rules: the message (headers, query, body) and
/// the path. A field the back needs and the document lacks is the request's fault.
pub fn write_call(
    call: Call<'_>,
    doc: &dyn Doc,
    ctx: &Context<'_>,
) -> Result<(Message, String), ProxyError> {
    let back = &ctx.mapping.name;
    let msg = dialect::encode(call.request, doc, ctx).map_err(|e| match e {
        CodecError::Missing { field } => ProxyError::InvalidRequest(format!(
            "the agent (`{back}`) needs `{field}`, which this request does not provide"
        )),
        other => ProxyError::Internal(format!("writing the `{back}` request: {other}")),
    })?;
    let path = call
        .path
        .render(&msg.params)
        .map_err(|e| ProxyError::Internal(format!("the `{back}` path: {e}")))?;
    Ok((msg, path))
}

/// A back's 2xx answer read with the call's response rules onto `seed` (the answers before it
/// in a form of several calls). An answer whose rules find an `error` (a JSON-RPC error in a
/// 200) is the back's error; `upstream` names the back in errors.
pub fn read_answer(
    call: Call<'_>,
    reply: &Message,
    ctx: &Context<'_>,
    seed: Decoded,
    upstream: &str,
) -> Result<Decoded, ProxyError> {
    let mut decoded = seed.into_value();
    dialect::decode_onto(call.response, reply, ctx, &mut decoded).map_err(|e| {
        ProxyError::Upstream(UpstreamError::Invalid {
            upstream: upstream.to_string(),
            dialect: ctx.mapping.name.clone(),
            detail: e.to_string(),
        })
    })?;
    let decoded = Decoded::from(decoded);
    if let Some(error) = decoded.error() {
        let message = error
            .message
            .as_ref()
            .map(text_of)
            .unwrap_or_else(|| "an error".to_string());
        return Err(back_error(upstream, error.status.unwrap_or(502), message));
    }
    Ok(decoded)
}

/// The back refused (a 4xx) or failed (anything else) with `message`.
pub fn back_error(upstream: &str, status: u16, message: String) -> ProxyError {
    let upstream = upstream.to_string();
    if (400..500).contains(&status) {
        ProxyError::Upstream(UpstreamError::Rejected {
            upstream,
            status,
            message,
        })
    } else {
        ProxyError::Upstream(UpstreamError::Failed {
            upstream,
            detail: format!("status {status}: {message}"),
        })
    }
}

/// A front that answers a failed task as an error (`failed = "error"`): the agent's words, or
/// why interlingua gave up, as the message.
pub fn failed_as_error(fop: &Op, task: &Task) -> Result<(), ProxyError> {
    if fop.failed_as_error && task.status == Status::Failed {
        let message = task
            .message
            .clone()
            .or_else(|| task.output.text.clone())
            .unwrap_or_else(|| format!("task `{}` failed", task.id));
        return Err(ProxyError::TaskFailed { message });
    }
    Ok(())
}

/// The front's answer to `fop` written from the canonical document `out`.
pub fn render_answer(fop: &Op, out: &dyn Doc, ctx: &Context<'_>) -> Result<Message, ProxyError> {
    dialect::encode(&fop.response, out, ctx).map_err(|e| {
        ProxyError::Internal(format!(
            "rendering the `{}` answer for {}: {e}",
            ctx.mapping.name,
            fop.op.name()
        ))
    })
}

/// Reads `msg` with `rules` (a front's request: an error is the request's, see
/// [`invalid_request`]).
pub fn decode(rules: &Rules, msg: &Message, ctx: &Context<'_>) -> Result<Decoded, ProxyError> {
    dialect::decode(rules, msg, ctx)
        .map(Decoded::from)
        .map_err(invalid_request)
}

/// A front request the mapping cannot read. A missing or mistyped field says which, so that the
/// front's error rules can answer field by field (FastAPI's 422 `detail` list, for one).
pub fn invalid_request(e: CodecError) -> ProxyError {
    let (problem, expected) = match &e {
        CodecError::Missing { .. } => ("missing", None),
        CodecError::WrongType { expected, .. } => (
            "wrong_type",
            Some(expected.trim_start_matches("an ").trim_start_matches("a ")),
        ),
        _ => return ProxyError::InvalidRequest(e.to_string()),
    };
    let (location, name) = field_place(e.field());
    ProxyError::InvalidField {
        message: e.to_string(),
        field: crate::error::BadField {
            location,
            name,
            problem,
            expected,
        },
    }
}

/// Where a rule's label (`$.a.b`, `query job_id`, `param did`, `header X`) points: the part of
/// the request, and the field's name in it.
fn field_place(label: &str) -> (&'static str, String) {
    for (prefix, location) in [
        ("query ", "query"),
        ("param ", "path"),
        ("header ", "header"),
    ] {
        if let Some(name) = label.strip_prefix(prefix) {
            return (location, name.to_string());
        }
    }
    let name = label.trim_start_matches('$').trim_start_matches('.');
    ("body", name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_mistyped_field_says_where_it_is_and_what_was_wanted() {
        let missing = invalid_request(CodecError::Missing {
            field: "$.identifier_from_purchaser".to_string(),
        });
        let ProxyError::InvalidField { field, message } = &missing else {
            panic!("{missing:?}");
        };
        assert_eq!(
            (
                field.location,
                field.name.as_str(),
                field.problem,
                field.expected
            ),
            ("body", "identifier_from_purchaser", "missing", None)
        );
        assert_eq!(message, "`$.identifier_from_purchaser` is missing");
        assert_eq!(missing.status(), 400);
        let typed = invalid_request(CodecError::WrongType {
            field: "query job_id".to_string(),
            expected: "a string",
        });
        let ProxyError::InvalidField { field, .. } = &typed else {
            panic!("{typed:?}");
        };
        assert_eq!(
            (
                field.location,
                field.name.as_str(),
                field.problem,
                field.expected
            ),
            ("query", "job_id", "wrong_type", Some("string"))
        );
        let doc = crate::engine::views::error_doc(&typed, "r-1").to_value();
        assert_eq!(doc["error"]["location"], "query");
        assert_eq!(doc["error"]["expected"], "string");
        // Anything else stays a plain invalid request.
        let other = invalid_request(CodecError::Invalid {
            field: "$.x".to_string(),
            message: "odd".to_string(),
        });
        assert!(matches!(other, ProxyError::InvalidRequest(_)));
    }
}
