//! A translated route's request, as one canonical operation: the whole request is read (within
//! the route's limit), the engine carries it out (calling the back as often as the operation
//! needs) and returns its outcome, and the answer is written with its exact length.
//!
//! This is where interlingua departs from proxying one request to one upstream request: an
//! operation may need no upstream call (search, a finished task), one, or several (create then
//! poll). The engine makes those calls through pingora's connector, with the same pooled
//! connections, TLS and timeouts as passthrough routes.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use pingora::proxy::Session;

use super::ctx::RequestCtx;
use super::respond;
use crate::engine::{FrontRequest, Translated};
use crate::error::ProxyError;
use crate::state::State;
use crate::telemetry::trace::ClientTrace;

/// Answers a request on a translated route: the engine's outcome (a result, or an error it
/// rendered in the front's dialect) written as it is. `Err` only for a body that could not be
/// read (too large, malformed, too slow), which the pipeline answers as it answers any error
/// found before the engine.
pub async fn serve(
    state: &State,
    t: &Arc<Translated>,
    session: &mut Session,
    ctx: &mut RequestCtx,
    prefix: &str,
    limit: u64,
) -> Result<(), ProxyError> {
    let body = read_body(session, limit).await?;
    let req = session.req_header();
    let path = relative(req.uri.path(), prefix);
    let headers = req
        .headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let client_trace = ClientTrace::of(&req.headers);
    let outcome = state
        .engine
        .handle(
            t,
            FrontRequest {
                method: &req.method,
                path: &path,
                prefix,
                scheme: super::scheme(session),
                query: req.uri.query(),
                headers,
                body,
                request_id: &ctx.request_id,
                identity: ctx.identity.as_ref(),
                trace: &client_trace,
            },
        )
        .await;
    ctx.upstream_spent = Some(outcome.spent.upstream);
    if let Some(err) = outcome.error {
        respond::keeps_connection_after(session, ctx, &err);
        ctx.error = Some(err);
    }
    respond::write(session, &ctx.request_id, outcome.response).await;
    Ok(())
}

/// Whether the request asks for a public form of the front (its `describe`, e.g. an A2A agent
/// card, unless the form says `public = false`).
pub fn is_discovery(t: &Translated, session: &Session, prefix: &str) -> bool {
    let req = session.req_header();
    // Most requests are not for the document: no full match for a method it is not served on.
    let served = t
        .front
        .ops
        .iter()
        .any(|o| o.front && o.public && o.method == req.method);
    if !served {
        return false;
    }
    let path = relative(req.uri.path(), prefix);
    t.front
        .match_front(&req.method, &path, &mapping::dialect::Message::default())
        .is_some_and(|(op, _)| op.public)
}

/// The whole request body, refused past `limit`.
async fn read_body(session: &mut Session, limit: u64) -> Result<Bytes, ProxyError> {
    let mut body = BytesMut::new();
    loop {
        let chunk = session.read_request_body().await.map_err(|mut e| {
            // Reading the client's body: whatever went wrong is the client's (pingora leaves
            // the source unset), and a timeout is its silence, not an upstream's.
            e.as_down();
            ProxyError::from_pingora(&e, "")
                .unwrap_or_else(|| ProxyError::BadRequest("malformed request body".to_string()))
        })?;
        let Some(chunk) = chunk else { break };
        if (body.len() + chunk.len()) as u64 > limit {
            return Err(ProxyError::BodyTooLarge { limit });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// The request path below the route's prefix, always starting with `/`.
fn relative(path: &str, prefix: &str) -> String {
    let rest = if prefix == "/" {
        path
    } else {
        path.strip_prefix(prefix).unwrap_or(path)
    };
    if rest.starts_with('/') {
        rest.to_string()
    } else {
        format!("/{rest}")
    }
}

#[cfg(test)]
mod tests {
    use super::relative;

    #[test]
    fn paths_are_relative_to_the_route_prefix() {
        assert_eq!(relative("/masumi/start_job", "/masumi"), "/start_job");
        assert_eq!(relative("/masumi", "/masumi"), "/");
        assert_eq!(
            relative("/api/v1/agents/x/tasks", "/"),
            "/api/v1/agents/x/tasks"
        );
    }
}
