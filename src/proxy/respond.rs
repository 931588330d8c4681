//! The one place where an error becomes an HTTP response.
//!
//! Every failure, whether found by interlingua (no route, body too large, a task not found) or
//! reported by pingora (upstream refused, timed out), arrives here through `fail_to_proxy`, is
//! matched exhaustively, and is answered with its status: on a translated route in the front
//! dialect's own error shape (its mapping's `[error]` rules), otherwise as
//! `{"error":{"code":"…","message":"…","request_id":"…"}}`.

use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora::proxy::{FailToProxy, Session};

use super::ctx::RequestCtx;
use super::metadata::Challenge;
use crate::auth::challenge;
use crate::engine::views::error_doc;
use crate::error::ProxyError;
use crate::request_id;
use crate::upstream::UpstreamError;
use mapping::dialect::{self, Canonical, Context, Mapping};

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
    let status = status(&err, ctx.echo.as_ref(), front);
    // The connection carries the next request only when nothing of this one is left unread
    // (interlingua does not read a body nobody wants to find where the next request starts)
    // and pingora keeps it: after a failed exchange with a passthrough route's upstream it
    // closes the client's connection whatever this answer says (its proxy path does not ask
    // for `can_reuse_downstream`). Whichever it is, the answer says so: `Connection: close`.
    let nothing_unread = session.is_body_empty() || session.is_body_done();
    let can_reuse = keeps_connection(&err) && nothing_unread && !ctx.proxied();
    if !can_reuse {
        session.set_keepalive(None);
    }
    // An interim answer (`100 Continue`, passed on from the upstream) does not start the
    // response: the final one can still be this error.
    let already_started = session
        .response_written()
        .is_some_and(|r| !r.status.is_informational());
    let sent = !already_started && write(session, ctx, &err, front, resource).await.is_ok();
    ctx.error = Some(err);
    FailToProxy {
        error_code: status,
        can_reuse_downstream: can_reuse && sent,
    }
}

async fn write(
    session: &mut Session,
    ctx: &RequestCtx,
    err: &ProxyError,
    front: Option<&Mapping>,
    resource: Option<&Challenge>,
) -> pingora::Result<()> {
    let echo = ctx.echo.as_ref();
    let body = Bytes::from(body(err, &ctx.request_id, front, echo));
    let mut header = ResponseHeader::build(status(err, echo, front), Some(4))?;
    header.insert_header(http::header::CONTENT_TYPE, "application/json")?;
    header.insert_header(http::header::CONTENT_LENGTH, body.len().to_string())?;
    header.insert_header(request_id::HEADER, ctx.request_id.as_str())?;
    for (name, value) in error_headers(err, resource) {
        header.insert_header(name, value)?;
    }
    session
        .write_response_header(Box::new(header), false)
        .await?;
    session.write_response_body(Some(body), true).await?;
    Ok(())
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

/// The realm of every route's bearer challenge.
const REALM: &str = "interlingua";

/// The whole HTTP/1.1 answer for a connection that interlingua ends before pingora has read a
/// request on it (its header not received in time, one connection over the listener's limit):
/// interlingua's JSON error with a new request id, and `Connection: close`.
pub fn connection_answer(err: &ProxyError) -> Vec<u8> {
    let request_id = request_id::generate();
    let body = body(err, &request_id, None, None);
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
    for (name, value) in error_headers(err, None) {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(&body);
    out
}

/// The headers an error carries besides its body (RFC 6750 for auth, with RFC 9728's
/// `resource_metadata` when the route publishes metadata; RFC 9110 `Retry-After` and `Allow`;
/// draft-ietf-httpapi-ratelimit-headers for limits).
fn error_headers(err: &ProxyError, resource: Option<&Challenge>) -> Vec<(&'static str, String)> {
    let metadata = resource.map(|r| ("resource_metadata", r.metadata_url.as_str()));
    match err {
        // RFC 6750 §3.1: no error code for a request without credentials; the scope it needs
        // is said instead (MCP's authorization spec asks for both parameters).
        ProxyError::Unauthorized(e) if e.is_missing() => {
            let scope = resource.and_then(|r| r.scope.as_deref().map(|s| ("scope", s)));
            let params: Vec<_> = metadata.into_iter().chain(scope).collect();
            vec![("www-authenticate", challenge(REALM, &params))]
        }
        ProxyError::Unauthorized(e) => {
            let reason = e.description();
            let params: Vec<_> = [("error", "invalid_token"), ("error_description", &reason)]
                .into_iter()
                .chain(metadata)
                .collect();
            vec![("www-authenticate", challenge(REALM, &params))]
        }
        ProxyError::Forbidden { .. } => {
            let params: Vec<_> = [
                ("error", "insufficient_scope"),
                (
                    "error_description",
                    "the token's plan may not use this route",
                ),
            ]
            .into_iter()
            .chain(metadata)
            .collect();
            vec![("www-authenticate", challenge(REALM, &params))]
        }
        ProxyError::MethodNotAllowed { allow, .. } => vec![("allow", allow.to_string())],
        // x402 v2 HTTP transport (`specs/transports-v2/http.md`): what to pay, and, after a
        // failed settlement, its outcome.
        ProxyError::PaymentRefused(r) => std::iter::once((
            crate::payment::x402::wire::PAYMENT_REQUIRED,
            r.required.clone(),
        ))
        .chain(
            r.response
                .clone()
                .map(|v| (crate::payment::x402::wire::PAYMENT_RESPONSE, v)),
        )
        .collect(),
        ProxyError::RateLimited(r) => vec![
            ("retry-after", r.retry_after_secs().to_string()),
            ("ratelimit-policy", r.policy_header()),
            ("ratelimit", r.limit_header()),
        ],
        // Most clients that meet the limit are about to be gone again.
        ProxyError::TooManyConnections => vec![("retry-after", "1".to_string())],
        // Redis is probed again within a second (`limit::shared::PROBE_INTERVAL`).
        ProxyError::LimitsUnavailable => vec![("retry-after", "1".to_string())],
        // The store's pool tries a new connection for the next request.
        ProxyError::Store(store::StoreError::Unavailable(_)) => {
            vec![("retry-after", "1".to_string())]
        }
        ProxyError::NoRoute { .. }
        | ProxyError::BodyTooLarge { .. }
        | ProxyError::BadRequest(_)
        | ProxyError::ClientTimeout
        | ProxyError::Upstream(UpstreamError::Failed { .. })
        | ProxyError::Upstream(UpstreamError::Timeout { .. })
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
        | ProxyError::Upstream(UpstreamError::Invalid { .. })
        | ProxyError::Upstream(UpstreamError::Rejected { .. })
        | ProxyError::PaymentRequired { .. }
        | ProxyError::TaskFailed { .. }
        | ProxyError::UpstreamPayment { .. }
        | ProxyError::Store(_)
        | ProxyError::Internal(_) => Vec::new(),
    }
}

/// The canonical document an error is rendered from: the error, and what the front's
/// `[request]` rules read from the request.
fn doc(err: &ProxyError, request_id: &str, echo: Option<&serde_json::Value>) -> Canonical<'static> {
    let doc = error_doc(err, request_id);
    match echo.filter(|e| e.is_object()) {
        Some(echo) => doc.with_request(echo.clone()),
        None => doc,
    }
}

/// The HTTP status of an error answer: the front's `[error] status` when it says one (JSON-RPC
/// answers most errors with 200), else the error's own.
pub fn status(err: &ProxyError, echo: Option<&serde_json::Value>, front: Option<&Mapping>) -> u16 {
    let own = err.status();
    let Some((mapping, expr)) = front.and_then(|m| m.error_status.as_ref().map(|e| (m, e))) else {
        return own;
    };
    let ctx = Context {
        mapping,
        vars: &mapping.vars,
        // An error answer seals nothing and reads no sealed token.
        seal_key: &[],
    };
    dialect::evaluate(expr, &doc(err, "", echo), &ctx)
        .and_then(|v| {
            v.as_u64()
                .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        })
        .and_then(|s| u16::try_from(s).ok())
        .filter(|s| (200..=599).contains(s))
        .unwrap_or(own)
}

/// The JSON error body: the front dialect's shape when there is one, interlingua's otherwise.
pub fn body(
    err: &ProxyError,
    request_id: &str,
    front: Option<&Mapping>,
    echo: Option<&serde_json::Value>,
) -> Vec<u8> {
    if let Some(rules) = front.and_then(|m| m.error.as_ref().map(|r| (m, r))) {
        let (mapping, rules) = rules;
        let ctx = Context {
            mapping,
            vars: &mapping.vars,
            // As in `status`: an error answer seals nothing.
            seal_key: &[],
        };
        if let Ok(msg) = dialect::encode(rules, &doc(err, request_id, echo), &ctx) {
            if let Some(b) = msg.body {
                return serde_json::to_vec(&b).unwrap_or_default();
            }
        }
    }
    serde_json::to_vec(&serde_json::json!({
        "error": {
            "code": err.code(),
            "message": err.to_string(),
            "request_id": request_id,
        }
    }))
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::AuthError;

    fn www(err: &ProxyError, resource: Option<&Challenge>) -> Vec<String> {
        error_headers(err, resource)
            .into_iter()
            .filter(|(name, _)| *name == "www-authenticate")
            .map(|(_, value)| value)
            .collect()
    }

    fn published(scope: Option<&str>) -> Challenge {
        Challenge {
            metadata_url: "https://gw.example.com/.well-known/oauth-protected-resource/mcp"
                .to_string(),
            scope: scope.map(str::to_string),
        }
    }

    const URL: &str =
        "resource_metadata=\"https://gw.example.com/.well-known/oauth-protected-resource/mcp\"";

    #[test]
    fn a_missing_token_gets_the_metadata_and_scope_and_no_error_code() {
        let missing = ProxyError::Unauthorized(AuthError::Missing);
        assert_eq!(
            www(&missing, Some(&published(Some("a b")))),
            [format!(
                "Bearer realm=\"interlingua\", {URL}, scope=\"a b\""
            )]
        );
        assert_eq!(
            www(&missing, Some(&published(None))),
            [format!("Bearer realm=\"interlingua\", {URL}")]
        );
    }

    #[test]
    fn refusals_append_the_metadata_after_their_own_parameters() {
        let bad = ProxyError::Unauthorized(AuthError::Expired);
        assert_eq!(
            www(&bad, Some(&published(Some("a")))),
            [format!("Bearer realm=\"interlingua\", error=\"invalid_token\", error_description=\"the token has expired\", {URL}")]
        );
        let forbidden = ProxyError::Forbidden {
            plan: None,
            allowed: vec!["gold".into()],
        };
        assert_eq!(
            www(&forbidden, Some(&published(Some("a")))),
            [format!("Bearer realm=\"interlingua\", error=\"insufficient_scope\", error_description=\"the token's plan may not use this route\", {URL}")]
        );
    }

    #[test]
    fn without_metadata_the_challenges_are_as_before() {
        assert_eq!(
            www(&ProxyError::Unauthorized(AuthError::Scheme), None),
            ["Bearer realm=\"interlingua\""]
        );
        assert_eq!(
            www(&ProxyError::Unauthorized(AuthError::Expired), None),
            ["Bearer realm=\"interlingua\", error=\"invalid_token\", error_description=\"the token has expired\""]
        );
    }

    #[test]
    fn a_metadata_url_from_a_strange_host_stays_one_parameter() {
        let odd = Challenge {
            metadata_url: "http://a\", error=\"x/.well-known/oauth-protected-resource".to_string(),
            scope: None,
        };
        assert_eq!(
            www(&ProxyError::Unauthorized(AuthError::Missing), Some(&odd)),
            ["Bearer realm=\"interlingua\", resource_metadata=\"http://a\\\", error=\\\"x/.well-known/oauth-protected-resource\""]
        );
    }

    #[test]
    fn a_method_not_allowed_says_which_are() {
        let err = ProxyError::MethodNotAllowed {
            method: "POST".into(),
            allow: "GET, HEAD",
        };
        assert_eq!(
            error_headers(&err, None),
            [("allow", "GET, HEAD".to_string())]
        );
    }
}
