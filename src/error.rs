//! The errors a request can end in, and how each one is classified. Rendering them as HTTP
//! responses happens in exactly one place: `engine::answer`.

use pingora::{Error as PingoraError, ErrorSource, ErrorType};
use store::StoreError;

use crate::upstream::error::describe;
use crate::upstream::UpstreamError;

/// Why a request did not get the upstream's answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProxyError {
    /// No route takes this host, path and method.
    #[error("no route for {method} {path}")]
    NoRoute { method: String, path: String },
    /// A path interlingua answers itself (a protected resource's metadata) asked with a method
    /// it does not answer; `allow` lists those it does.
    #[error("{method} is not allowed here (allowed: {allow})")]
    MethodNotAllowed { method: String, allow: &'static str },
    /// The request body is larger than the route allows.
    #[error("the request body is larger than this route's limit of {limit} bytes")]
    BodyTooLarge { limit: u64 },
    /// The request could not be understood.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// The client was too slow to send its request.
    #[error("the request was not received in time")]
    ClientTimeout,
    /// The listener already holds its `max_connections`.
    #[error("too many connections; retry later")]
    TooManyConnections,
    /// The route's upstream failed, timed out, or answered what the back mapping cannot use.
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// A translated route has no operation for this method and path.
    #[error("no operation for {method} {path} on this route")]
    NoOperation { method: String, path: String },
    /// The request body is not JSON.
    #[error("{0}")]
    NotJson(String),
    /// The request does not fit the front dialect (a missing or mistyped field).
    #[error("{0}")]
    InvalidRequest(String),
    /// One field of the request is missing or of the wrong type (a `required` or `type` rule of
    /// the front mapping); the front's `[error]` rules may say so field by field.
    #[error("{message}")]
    InvalidField { message: String, field: BadField },
    /// The input does not satisfy the agent's input schema.
    #[error("{message}")]
    InvalidInput {
        message: String,
        field_errors: std::collections::BTreeMap<String, Vec<String>>,
    },
    /// No task with this id on this route.
    #[error("task `{0}` not found")]
    TaskNotFound(String),
    /// The task is not in a state that allows the request.
    #[error("{0}")]
    Conflict(String),
    /// The task has ended, and the request needs one that has not (same answer as `Conflict`).
    #[error("{0}")]
    TaskEnded(String),
    /// A request the front dialect knows that interlingua always refuses (a mapping's
    /// `[refuse.NAME]`), with the status and message the mapping gives.
    #[error("{message}")]
    /// `code` is `refused`, or what the mapping's check names (`unsupported_version`).
    Refused {
        status: u16,
        code: String,
        message: String,
    },
    /// Neither the back dialect nor interlingua can do this operation.
    #[error("`{operation}` is not supported by this route's agent")]
    Unsupported { operation: String },
    /// The agent failed the task, on a front that answers a failure as an error.
    #[error("the agent failed the task: {message}")]
    TaskFailed { message: String },
    /// The agent asked to be paid for a call (x402) and interlingua did not pay, or paid and was
    /// asked again: why, in words (the task fails, reason `payment`).
    #[error("the agent's payment was not made: {message}")]
    UpstreamPayment { message: String },
    /// No valid bearer token.
    #[error("{}", unauthorized_message(.0))]
    Unauthorized(crate::auth::AuthError),
    /// A valid token, but its plan may not use this route.
    #[error("plan `{}` may not use this route (allowed: {})", .plan.as_deref().unwrap_or("(none)"), .allowed.join(", "))]
    Forbidden {
        plan: Option<String>,
        allowed: Vec<String>,
    },
    /// The plan's balance cannot cover the task's hold.
    #[error("insufficient credits: the task needs {price}, the balance has {available}")]
    PaymentRequired { available: i64, price: u64 },
    /// A route that takes x402 payments got none, or one it could not take (why, and the
    /// `PAYMENT-REQUIRED` to answer with).
    #[error("{}", .0.message)]
    PaymentRefused(Box<crate::payment::x402::accept::Refusal>),
    /// Over a rate limit.
    #[error("rate limit `{}` exceeded; retry after {} s", .0.policy, .0.retry_after_secs())]
    RateLimited(crate::limit::Refusal),
    /// The route's rate limits are kept in Redis, Redis cannot be asked, and the config says to
    /// refuse rather than count per instance (`on_redis_error = "deny"`).
    #[error("rate limits cannot be checked right now; retry later")]
    LimitsUnavailable,
    /// The task store failed.
    #[error("task store: {0}")]
    Store(#[from] StoreError),
    /// A fault of the proxy itself.
    #[error("internal error: {0}")]
    Internal(String),
}

/// Which field of a request did not fit, and how: `error.location`, `error.field`,
/// `error.problem` and `error.expected` in the error document a front mapping renders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadField {
    /// `body`, `query`, `path` or `header`.
    pub location: &'static str,
    /// The field's name there (a body path's keys joined with dots).
    pub name: String,
    /// `missing` or `wrong_type`.
    pub problem: &'static str,
    /// For `wrong_type`: the JSON type wanted (`string`, `integer`, …).
    pub expected: Option<&'static str>,
}

impl ProxyError {
    /// The HTTP status this error is answered with.
    pub fn status(&self) -> u16 {
        match self {
            ProxyError::NoRoute { .. } => 404,
            ProxyError::MethodNotAllowed { .. } => 405,
            ProxyError::BodyTooLarge { .. } => 413,
            ProxyError::BadRequest(_) => 400,
            ProxyError::ClientTimeout => 408,
            ProxyError::TooManyConnections => 503,
            ProxyError::Upstream(UpstreamError::Failed { .. }) => 502,
            ProxyError::Upstream(UpstreamError::Timeout { .. }) => 504,
            ProxyError::NoOperation { .. } => 404,
            ProxyError::NotJson(_)
            | ProxyError::InvalidRequest(_)
            | ProxyError::InvalidField { .. } => 400,
            ProxyError::InvalidInput { .. } => 400,
            ProxyError::TaskNotFound(_) => 404,
            ProxyError::Conflict(_) | ProxyError::TaskEnded(_) => 409,
            ProxyError::Refused { status, .. } => *status,
            ProxyError::Unsupported { .. } => 501,
            ProxyError::Upstream(UpstreamError::Invalid { .. }) => 502,
            // A client error upstream is the client's error here too; anything odd is ours.
            ProxyError::Upstream(UpstreamError::Rejected { status, .. }) => match status {
                400 | 404 | 409 | 413 => *status,
                _ => 400,
            },
            ProxyError::TaskFailed { .. } => 502,
            // The client did nothing wrong: the agent behind the route could not be paid.
            ProxyError::UpstreamPayment { .. } => 502,
            ProxyError::Unauthorized(_) => 401,
            ProxyError::Forbidden { .. } => 403,
            ProxyError::PaymentRequired { .. } => 402,
            ProxyError::PaymentRefused(r) => r.status,
            ProxyError::RateLimited(_) => 429,
            ProxyError::LimitsUnavailable => 503,
            ProxyError::Store(StoreError::Unavailable(_)) => 503,
            ProxyError::Store(_) => 500,
            ProxyError::Internal(_) => 500,
        }
    }

    /// A stable, machine-readable name for the error, the `code` of the JSON body.
    pub fn code(&self) -> &str {
        match self {
            ProxyError::NoRoute { .. } => "no_route",
            ProxyError::MethodNotAllowed { .. } => "method_not_allowed",
            ProxyError::BodyTooLarge { .. } => "body_too_large",
            ProxyError::BadRequest(_) => "bad_request",
            ProxyError::ClientTimeout => "request_timeout",
            ProxyError::TooManyConnections => "too_many_connections",
            ProxyError::Upstream(UpstreamError::Failed { .. }) => "upstream_failed",
            ProxyError::Upstream(UpstreamError::Timeout { .. }) => "upstream_timeout",
            ProxyError::NoOperation { .. } => "no_operation",
            ProxyError::NotJson(_) => "invalid_json",
            ProxyError::InvalidRequest(_) | ProxyError::InvalidField { .. } => "invalid_request",
            ProxyError::InvalidInput { .. } => "invalid_input",
            ProxyError::TaskNotFound(_) => "task_not_found",
            ProxyError::Conflict(_) | ProxyError::TaskEnded(_) => "conflict",
            ProxyError::Refused { code, .. } => code,
            ProxyError::Unsupported { .. } => "unsupported",
            ProxyError::Upstream(UpstreamError::Invalid { .. }) => "upstream_invalid_response",
            ProxyError::Upstream(UpstreamError::Rejected { .. }) => "upstream_rejected",
            ProxyError::TaskFailed { .. } => "task_failed",
            ProxyError::UpstreamPayment { .. } => "upstream_payment",
            ProxyError::Unauthorized(_) => "unauthorized",
            ProxyError::Forbidden { .. } => "forbidden",
            ProxyError::PaymentRequired { .. } => "insufficient_credits",
            ProxyError::PaymentRefused(_) => "payment_required",
            ProxyError::RateLimited(_) => "rate_limited",
            ProxyError::LimitsUnavailable => "limits_unavailable",
            ProxyError::Store(StoreError::Unavailable(_)) => "store_unavailable",
            ProxyError::Store(_) => "store_error",
            ProxyError::Internal(_) => "internal_error",
        }
    }

    /// Wraps this error for pingora, so that it travels through pingora's error path to
    /// `fail_to_proxy` and comes back out of [`ProxyError::from_pingora`] unchanged.
    pub fn into_pingora(self) -> Box<PingoraError> {
        let status = self.status();
        PingoraError::because(ErrorType::HTTPStatus(status), "interlingua", self)
    }

    /// Classifies any error pingora hands back. `None` means the client is gone and there is
    /// nobody to answer.
    ///
    /// The message a client sees names only the kind of failure, never pingora's context: that
    /// holds the upstream's address (`Peer: 10.0.0.7:8000`, `Fail to connect to …`), which is
    /// the operator's business. The access log has the whole error.
    pub fn from_pingora(e: &PingoraError, upstream: &str) -> Option<ProxyError> {
        if let Some(ours) = e.root_cause().downcast_ref::<ProxyError>() {
            return Some(ours.clone());
        }
        if let Some(upstream) = UpstreamError::from_pingora(e, upstream) {
            return Some(ProxyError::Upstream(upstream));
        }
        use ErrorType::*;
        match (e.esource(), e.etype()) {
            (_, HTTPStatus(code)) => Some(from_status(*code, describe(e))),
            (ErrorSource::Downstream, ReadTimedout) => Some(ProxyError::ClientTimeout),
            (
                ErrorSource::Downstream,
                ReadError | WriteError | ConnectionClosed | WriteTimedout,
            ) => None,
            // Anything else the client's bytes caused (a malformed chunk size, a header pingora
            // cannot parse, a broken HTTP/2 frame) is the client's error.
            (ErrorSource::Downstream, kind) => Some(ProxyError::BadRequest(format!(
                "malformed request ({})",
                kind.as_str()
            ))),
            _ => Some(ProxyError::Internal(describe(e))),
        }
    }
}

fn unauthorized_message(e: &crate::auth::AuthError) -> String {
    if e.is_missing() {
        format!("authentication required: {e}")
    } else {
        format!("invalid bearer token: {e}")
    }
}

fn from_status(code: u16, detail: String) -> ProxyError {
    match code {
        408 => ProxyError::ClientTimeout,
        413 => ProxyError::BodyTooLarge { limit: 0 },
        400..=499 => ProxyError::BadRequest(detail),
        504 => ProxyError::Upstream(UpstreamError::Timeout {
            upstream: String::new(),
            detail,
        }),
        502 | 503 => ProxyError::Upstream(UpstreamError::Failed {
            upstream: String::new(),
            detail,
        }),
        _ => ProxyError::Internal(detail),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_errors_survive_the_trip_through_pingora() {
        let e = ProxyError::BodyTooLarge { limit: 10 };
        let wrapped = e.clone().into_pingora();
        assert_eq!(ProxyError::from_pingora(&wrapped, "u"), Some(e));
    }

    #[test]
    fn upstream_errors_are_classified_by_kind() {
        let refused = PingoraError::explain(ErrorType::ConnectRefused, "refused");
        assert_eq!(
            ProxyError::from_pingora(&refused, "a").map(|e| e.status()),
            Some(502)
        );
        let mut timeout = PingoraError::explain(ErrorType::ReadTimedout, "slow");
        timeout.as_up();
        assert_eq!(
            ProxyError::from_pingora(&timeout, "a").map(|e| e.status()),
            Some(504)
        );
        let mut gone = PingoraError::explain(ErrorType::ConnectionClosed, "bye");
        gone.as_down();
        assert_eq!(ProxyError::from_pingora(&gone, "a"), None);
    }
}
