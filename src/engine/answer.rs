//! The one place an answer is rendered in the front's dialect: an operation's result (its
//! form's status, header rules and body, or the head of its event stream) and every error, with
//! its status, its headers (`WWW-Authenticate`, `Retry-After`, `RateLimit`, `Allow`, x402's) and
//! its body in the front's `[error]` shape — or interlingua's own
//! `{"error":{"code":"…","message":"…","request_id":"…"}}` where there is no front. The proxy
//! writes what this returns; it renders nothing itself.

use bytes::Bytes;
use serde_json::Value;

use crate::auth::{challenge, Challenge};
use crate::error::ProxyError;
use crate::upstream::UpstreamError;
use mapping::dialect::mapping::Op;
use mapping::dialect::{self, Canonical, Context, Doc, Mapping};

use super::documents;

/// The answer to a front request.
pub struct FrontResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Body,
}

/// An answer's body: whole, or server-sent events as the task progresses.
pub enum Body {
    Full(Vec<u8>),
    /// Each item is one event, already framed (`data: …\n\n`); the stream ends with the channel.
    Events(tokio::sync::mpsc::Receiver<Bytes>),
}

/// `fop`'s answer written whole from `doc` (an operation's result, or an `[answer.NAME]` form's
/// rules over the request and the route's agent): its status, its header rules, and its body as
/// JSON (`application/json` unless a rule names another JSON media type: A2A's HTTP+JSON answers
/// `application/a2a+json`). A form that writes no body answers none, and no content type (a
/// 202 to an MCP notification or a POSTed response).
pub fn result(fop: &Op, doc: &dyn Doc, ctx: &Context<'_>) -> Result<FrontResponse, ProxyError> {
    let rendered = documents::render_answer(fop, doc, ctx)?;
    let mut headers = rendered.headers;
    let body = match rendered.body {
        Some(b) => {
            if !headers
                .iter()
                .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
            {
                headers.push(("content-type".to_string(), "application/json".to_string()));
            }
            serde_json::to_vec(&b).map_err(|e| ProxyError::Internal(e.to_string()))?
        }
        None => Vec::new(),
    };
    Ok(FrontResponse {
        status: fop.status,
        headers,
        body: Body::Full(body),
    })
}

/// The head of `fop`'s answer as an event stream: its form's header rules
/// (`X-Accel-Buffering: no`), with `text/event-stream` for content type.
pub fn events_head(
    fop: &Op,
    doc: &dyn Doc,
    ctx: &Context<'_>,
) -> Result<Vec<(String, String)>, ProxyError> {
    let mut headers = documents::render_answer(fop, doc, ctx)?.headers;
    headers.retain(|(k, _)| !k.eq_ignore_ascii_case("content-type"));
    headers.push(("content-type".to_string(), "text/event-stream".to_string()));
    Ok(headers)
}

/// The whole answer for `err`: on a route with a `front`, in its `[error]` shape and with its
/// `[error] status` (read with `echo`, what its `[request]` rules read: a JSON-RPC id), else
/// interlingua's JSON; with the error's own headers; `resource` is what a 401 or 403 challenge
/// adds when the route publishes metadata (RFC 9728).
pub fn error(
    err: &ProxyError,
    request_id: &str,
    echo: Option<&Value>,
    front: Option<&Mapping>,
    resource: Option<&Challenge>,
) -> FrontResponse {
    let body = error_body(err, request_id, front, echo);
    let mut headers = vec![("content-type".to_string(), "application/json".to_string())];
    headers.extend(
        error_headers(err, resource)
            .into_iter()
            .map(|(k, v)| (k.to_string(), v)),
    );
    FrontResponse {
        status: error_status(err, echo, front),
        headers,
        body: Body::Full(body),
    }
}

/// The realm of every route's bearer challenge.
const REALM: &str = "interlingua";

/// The headers an error carries besides its body (RFC 6750 for auth, with RFC 9728's
/// `resource_metadata` when the route publishes metadata; RFC 9110 `Retry-After` and `Allow`;
/// draft-ietf-httpapi-ratelimit-headers for limits).
pub fn error_headers(
    err: &ProxyError,
    resource: Option<&Challenge>,
) -> Vec<(&'static str, String)> {
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
fn error_doc(
    err: &ProxyError,
    request_id: &str,
    echo: Option<&serde_json::Value>,
) -> Canonical<'static> {
    let doc = crate::engine::views::error_doc(err, request_id);
    match echo.filter(|e| e.is_object()) {
        Some(echo) => doc.with_request(echo.clone()),
        None => doc,
    }
}

/// The HTTP status of an error answer: the front's `[error] status` when it says one (JSON-RPC
/// answers most errors with 200), else the error's own.
pub fn error_status(
    err: &ProxyError,
    echo: Option<&serde_json::Value>,
    front: Option<&Mapping>,
) -> u16 {
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
    dialect::evaluate(expr, &error_doc(err, "", echo), &ctx)
        .and_then(|v| {
            v.as_u64()
                .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        })
        .and_then(|s| u16::try_from(s).ok())
        .filter(|s| (200..=599).contains(s))
        .unwrap_or(own)
}

/// The JSON error body: the front dialect's shape when there is one, interlingua's otherwise.
pub fn error_body(
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
        if let Ok(msg) = dialect::encode(rules, &error_doc(err, request_id, echo), &ctx) {
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
