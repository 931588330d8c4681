//! Translated routes inside the pipeline: the whole request is read (within the route's limit),
//! the engine answers it (calling the back as often as the operation needs), and the answer is
//! written with its exact length.
//!
//! This is where interlingua departs from proxying one request to one upstream request: an
//! operation may need no upstream call (search, a finished task), one, or several (create then
//! poll). The engine makes those calls through pingora's connector, with the same pooled
//! connections, TLS and timeouts as passthrough routes.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use pingora::http::ResponseHeader;
use pingora::proxy::Session;

use super::ctx::RequestCtx;
use crate::engine::{Body, FrontRequest, Spent, Translated};
use crate::error::ProxyError;
use crate::request_id;
use crate::state::State;
use crate::telemetry::trace::ClientTrace;

/// Answers a request on a translated route.
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
    let mut spent = Spent::default();
    let mut echo = serde_json::Value::Null;
    let result = state
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
            &mut spent,
            &mut echo,
        )
        .await;
    ctx.upstream_spent = Some(spent.upstream);
    ctx.echo = Some(echo);
    let answer = result?;
    let internal = |e: Box<pingora::Error>| ProxyError::Internal(e.to_string());
    let mut header = ResponseHeader::build(answer.status, Some(4)).map_err(internal)?;
    header
        .insert_header(request_id::HEADER, ctx.request_id.as_str())
        .map_err(internal)?;
    for (name, value) in answer.headers {
        header.insert_header(name, value).map_err(internal)?;
    }
    // Once the answer starts, a failure can only cut the connection; nothing to render.
    match answer.body {
        Body::Full(body) => {
            header
                .insert_header(http::header::CONTENT_LENGTH, body.len().to_string())
                .map_err(internal)?;
            let _ = session.write_response_header(Box::new(header), false).await;
            let _ = session
                .write_response_body(Some(Bytes::from(body)), true)
                .await;
        }
        Body::Events(mut events) => {
            header
                .insert_header(http::header::CACHE_CONTROL, "no-cache")
                .map_err(internal)?;
            if !session.is_http2() {
                header
                    .insert_header(http::header::TRANSFER_ENCODING, "chunked")
                    .map_err(internal)?;
            }
            if session
                .write_response_header(Box::new(header), false)
                .await
                .is_err()
            {
                return Ok(());
            }
            while let Some(event) = events.recv().await {
                if session
                    .write_response_body(Some(event), false)
                    .await
                    .is_err()
                {
                    // The client left: dropping `events` stops the stream's producer.
                    return Ok(());
                }
            }
            let _ = session.write_response_body(None, true).await;
        }
    }
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
