//! What can go wrong on the way to an agent and back, and what a client is told of it.

use std::time::Duration;

use pingora::{Error as PingoraError, ErrorSource, ErrorType};

/// Why a call to a route's upstream did not give an answer the back mapping could use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpstreamError {
    /// The upstream refused, reset or broke the connection, answered with something that is not
    /// HTTP, or has no address.
    #[error("upstream `{upstream}` failed: {detail}")]
    Failed { upstream: String, detail: String },
    /// The upstream did not answer within its timeouts.
    #[error("upstream `{upstream}` timed out: {detail}")]
    Timeout { upstream: String, detail: String },
    /// The upstream answered, but not in a way the back mapping can read.
    #[error(
        "upstream `{upstream}` answered something the `{dialect}` mapping cannot read: {detail}"
    )]
    Invalid {
        upstream: String,
        dialect: String,
        detail: String,
    },
    /// The upstream refused the request as a client error (its 4xx), with its reason.
    #[error("upstream `{upstream}` refused the request: {message}")]
    Rejected {
        upstream: String,
        status: u16,
        message: String,
    },
}

impl UpstreamError {
    /// What went wrong, without naming the upstream (for a message that names it already).
    pub fn detail(&self) -> &str {
        match self {
            UpstreamError::Failed { detail, .. }
            | UpstreamError::Timeout { detail, .. }
            | UpstreamError::Invalid { detail, .. } => detail,
            UpstreamError::Rejected { message, .. } => message,
        }
    }

    /// Classifies an error pingora reports on an upstream connection; `None` when it is not the
    /// upstream's doing (the caller classifies it).
    pub fn from_pingora(e: &PingoraError, upstream: &str) -> Option<UpstreamError> {
        use ErrorType::*;
        let failed = || UpstreamError::Failed {
            upstream: upstream.to_string(),
            detail: describe(e),
        };
        match (e.esource(), e.etype()) {
            (ErrorSource::Downstream, _) | (_, HTTPStatus(_)) => None,
            (_, ConnectTimedout | ReadTimedout | WriteTimedout | TLSHandshakeTimedout) => {
                Some(UpstreamError::Timeout {
                    upstream: upstream.to_string(),
                    detail: describe(e),
                })
            }
            (ErrorSource::Upstream, _) => Some(failed()),
            (
                _,
                ConnectRefused | ConnectNoRoute | ConnectError | ConnectProxyFailure
                | TLSHandshakeFailure,
            ) => Some(failed()),
            _ => None,
        }
    }
}

/// Why a call to a service other than a route's upstream (a JWKS, a payment service) failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    #[error("cannot resolve `{host}`: {detail}")]
    Resolve { host: String, detail: String },
    #[error("`{0}` resolves to no address")]
    NoAddress(String),
    /// The request could not be built (a header value with a forbidden byte).
    #[error("the request cannot be sent: {0}")]
    Request(String),
    /// No connection could be made: nothing was sent.
    #[error("{0}")]
    Connect(String),
    /// The exchange failed once the request was on its way (pingora's error, as its kind and
    /// context): the service may have acted on it.
    #[error("{0}")]
    Exchange(String),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

impl FetchError {
    /// Whether the service may have received the request (and acted on it) although no answer
    /// came back.
    pub fn may_have_arrived(&self) -> bool {
        matches!(self, FetchError::Exchange(_) | FetchError::Timeout(_))
    }
}

/// What a client is told of a pingora error: its kind (`ConnectRefused`, `InvalidChunk`,
/// `ReadTimedout`), in words where pingora's name says little. Never its context or cause:
/// that holds the upstream's address, which is the operator's business.
pub fn describe(e: &PingoraError) -> String {
    use ErrorType::*;
    match e.etype() {
        ConnectRefused => "the connection was refused".to_string(),
        ConnectTimedout => "no connection within connect_timeout".to_string(),
        ReadTimedout => "no answer within read_timeout".to_string(),
        WriteTimedout => "the request could not be sent within read_timeout".to_string(),
        ConnectionClosed => "the connection was closed".to_string(),
        ReadError | WriteError => "the connection broke".to_string(),
        other => other.as_str().to_string(),
    }
}
