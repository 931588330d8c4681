//! Writing an error answer on the client's connection.
//!
//! Every failure the pipeline meets before a translated route's engine answers (no route, a
//! body too large, a refused token, a limit), and every failure pingora reports (an upstream
//! refused or timed out on a passthrough route), arrives here through `fail_to_proxy`. The
//! answer itself (status, headers, body in the front's shape) is rendered by
//! [`crate::engine::answer::error`], the one place answers are rendered; this module decides
//! what happens to the connection and writes the answer. A translated route's own errors are
//! rendered by the engine and written by [`super::operation`] like any answer.

use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora::proxy::{FailToProxy, Session};

use super::ctx::RequestCtx;
use crate::auth::Challenge;
use crate::engine::answer::{self, Body, FrontResponse};
use crate::error::ProxyError;
use crate::request_id;
use mapping::dialect::Mapping;

/// Answers the client with `err`, or does nothing when `err` is `None` (the client is gone) or
/// the response has already started (the connection is then cut). `resource` is what a 401 or
/// 403 challenge adds when the route publishes metadata (RFC 9728).
pub async fn error(
    session: &mut Session,
    ctx: &mut RequestCtx,
    err: Option<ProxyError>,
    front: Option<&Mapping>,
    resource: Option<&Challenge>,
) -> FailToProxy {
    let Some(err) = err else {
        return FailToProxy {
            error_code: 0,
            can_reuse_downstream: false,
        };
    };
    // Before the engine read the request: no `[request]` rules have read anything yet.
    let answer = answer::error(&err, &ctx.request_id, None, front, resource);
    let status = answer.status;
    let can_reuse = keeps_connection_after(session, ctx, &err);
    // An interim answer (`100 Continue`, passed on from the upstream) does not start the
    // response: the final one can still be this error.
    let already_started = session
        .response_written()
        .is_some_and(|r| !r.status.is_informational());
    let sent = !already_started && write(session, &ctx.request_id, answer).await;
    ctx.error = Some(err);
    FailToProxy {
        error_code: status,
        can_reuse_downstream: can_reuse && sent,
    }
}

/// Whether the connection may carry the next request after `err`; when it may not, pingora is
/// told so (the answer then says `Connection: close`).
pub fn keeps_connection_after(session: &mut Session, ctx: &RequestCtx, err: &ProxyError) -> bool {
    // The connection carries the next request only when nothing of this one is left unread
    // (interlingua does not read a body nobody wants to find where the next request starts)
    // and pingora keeps it: after a failed exchange with a passthrough route's upstream it
    // closes the client's connection whatever this answer says (its proxy path does not ask
    // for `can_reuse_downstream`). Whichever it is, the answer says so: `Connection: close`.
    let nothing_unread = session.is_body_empty() || session.is_body_done();
    let can_reuse = keeps_connection(err) && nothing_unread && !ctx.proxied();
    if !can_reuse {
        session.set_keepalive(None);
    }
    can_reuse
}

/// Writes `answer` with `X-Request-Id`: a whole body with its exact length, or its events as
/// they come (`Cache-Control: no-cache`; chunked on HTTP/1.1). Whether the answer went out
/// whole: once it starts, a failure can only cut the connection.
pub async fn write(session: &mut Session, request_id: &str, answer: FrontResponse) -> bool {
    let Ok(mut header) = head(answer.status, request_id, answer.headers) else {
        return false;
    };
    match answer.body {
        Body::Full(body) => {
            if header
                .insert_header(http::header::CONTENT_LENGTH, body.len().to_string())
                .is_err()
            {
                return false;
            }
            session
                .write_response_header(Box::new(header), false)
                .await
                .is_ok()
                && session
                    .write_response_body(Some(Bytes::from(body)), true)
                    .await
                    .is_ok()
        }
        Body::Events(mut events) => {
            let framed = header
                .insert_header(http::header::CACHE_CONTROL, "no-cache")
                .is_ok()
                && (session.is_http2()
                    || header
                        .insert_header(http::header::TRANSFER_ENCODING, "chunked")
                        .is_ok());
            if !framed
                || session
                    .write_response_header(Box::new(header), false)
                    .await
                    .is_err()
            {
                return false;
            }
            while let Some(event) = events.recv().await {
                if session
                    .write_response_body(Some(event), false)
                    .await
                    .is_err()
                {
                    // The client left: dropping `events` stops the stream's producer.
                    return false;
                }
            }
            session.write_response_body(None, true).await.is_ok()
        }
    }
}

/// The response header: `status`, `X-Request-Id`, then the answer's own headers.
fn head(
    status: u16,
    request_id: &str,
    headers: Vec<(String, String)>,
) -> pingora::Result<ResponseHeader> {
    let mut header = ResponseHeader::build(status, Some(4))?;
    header.insert_header(request_id::HEADER, request_id)?;
    for (name, value) in headers {
        header.insert_header(name, value)?;
    }
    Ok(header)
}

/// Whether the connection can carry another request after `err`, as far as the error goes: not
/// after a malformed or stalled request (where the next one would start is unknown), nor after
/// a fault of interlingua's own.
fn keeps_connection(err: &ProxyError) -> bool {
    match err {
        ProxyError::NoRoute { .. }
        | ProxyError::Upstream(_)
        | ProxyError::NoOperation { .. }
        | ProxyError::NotJson(_)
        | ProxyError::InvalidRequest(_)
        | ProxyError::InvalidField { .. }
        | ProxyError::InvalidInput { .. }
        | ProxyError::TaskNotFound(_)
        | ProxyError::Conflict(_)
        | ProxyError::TaskEnded(_)
        | ProxyError::Refused { .. }
        | ProxyError::Unsupported { .. }
        | ProxyError::PaymentRequired { .. }
        | ProxyError::PaymentRefused(_)
        | ProxyError::TaskFailed { .. }
        | ProxyError::UpstreamPayment { .. }
        | ProxyError::Store(_)
        | ProxyError::Unauthorized(_)
        | ProxyError::Forbidden { .. }
        | ProxyError::MethodNotAllowed { .. }
        | ProxyError::RateLimited(_)
        | ProxyError::LimitsUnavailable => true,
        ProxyError::BodyTooLarge { .. }
        | ProxyError::BadRequest(_)
        | ProxyError::ClientTimeout
        | ProxyError::TooManyConnections
        | ProxyError::Internal(_) => false,
    }
}

/// The whole HTTP/1.1 answer for a connection that interlingua ends before pingora has read a
/// request on it (its header not received in time, one connection over the listener's limit):
/// interlingua's JSON error with a new request id, and `Connection: close`.
pub fn connection_answer(err: &ProxyError) -> Vec<u8> {
    let request_id = request_id::generate();
    let body = answer::error_body(err, &request_id, None, None);
    let status = err.status();
    let reason = http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("");
    let mut head = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{}: {request_id}\r\nconnection: close\r\n",
        body.len(),
        request_id::HEADER,
    );
    for (name, value) in answer::error_headers(err, None) {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(&body);
    out
}
