//! What the engine adds to the one canonical document ([`mapping::dialect::doc`]): the error
//! document for a [`ProxyError`], a back's answer made a [`TaskPatch`] with the error that names
//! the back (and a failed call's patch), and the task's JSON in either namespace for `tests/golden.rs`. Documents are built
//! there, from typed values; nothing here indexes a document by key.

use serde_json::Value;

use crate::error::ProxyError;
use crate::upstream::UpstreamError;
use mapping::dialect::doc::{self, ErrorFields, Side};
use mapping::dialect::{Canonical, Decoded};
use mapping::task::{Task, TaskPatch};

pub use mapping::dialect::doc::text_of;

/// The JSON a front mapping sees for a task.
pub fn front_task(task: &Task) -> Value {
    doc::task_json(task, Side::Front)
}

/// The JSON a back mapping sees for a task: ids are the upstream's (interlingua's until the
/// back has given its own).
pub fn back_task(task: &Task) -> Value {
    doc::task_json(task, Side::Back)
}

/// What a back's answer (a decoded document) says about a task. `upstream` and `dialect` name
/// it in errors.
pub fn patch_of(answer: &Decoded, upstream: &str, dialect: &str) -> Result<TaskPatch, ProxyError> {
    answer.task_patch().map_err(|e| {
        ProxyError::Upstream(UpstreamError::Invalid {
            upstream: upstream.to_string(),
            dialect: dialect.to_string(),
            detail: format!("it does not fit the canonical task: {e}"),
        })
    })
}

/// What a task becomes when a call of its back fails with `err`: failed, reason `payment` when
/// the agent asked to be paid and was not (the message says why), else `upstream_error`.
pub fn failed_call(err: &ProxyError) -> TaskPatch {
    let (reason, message) = match err {
        ProxyError::UpstreamPayment { message } => ("payment", Some(message.clone())),
        _ => ("upstream_error", None),
    };
    TaskPatch {
        status: Some(mapping::task::Status::Failed),
        reason: Some(reason.to_string()),
        message,
        ..TaskPatch::default()
    }
}

/// The canonical error document for `err`.
pub fn error_doc(err: &ProxyError, request_id: &str) -> Canonical<'static> {
    let status = err.status();
    let reason = http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Error");
    let mut e = ErrorFields {
        status,
        code: err.code(),
        message: err.to_string(),
        reason,
        request_id,
        ..ErrorFields::default()
    };
    match err {
        ProxyError::InvalidInput { field_errors, .. } => e.field_errors = Some(field_errors),
        ProxyError::InvalidField { field, .. } => {
            e.location = Some(field.location);
            e.field = Some(&field.name);
            e.problem = Some(field.problem);
            e.expected = field.expected;
        }
        ProxyError::PaymentRequired { available, price } => {
            e.available = Some(*available);
            e.price = Some(*price);
        }
        ProxyError::RateLimited(r) => e.retry_after = Some(r.retry_after_secs()),
        ProxyError::PaymentRefused(r) => e.payment_required = Some(&r.required_doc),
        // As its `Retry-After` header (see `engine::answer`).
        ProxyError::LimitsUnavailable => e.retry_after = Some(1),
        _ => {}
    }
    Canonical::empty().with_error(&e)
}
