//! Protected resource metadata (RFC 9728) in the pipeline: the documents, answered in
//! `request_filter` before any route is chosen (they live at the host root, not below a route's
//! prefix, so no route would take them), and the URL a route's `WWW-Authenticate` points at.
//! The documents themselves are built once, at load ([`crate::auth::metadata`]).

use crate::auth::Challenge;
use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;

use super::ctx::RequestCtx;
use crate::error::ProxyError;
use crate::request_id;
use crate::state::Live;

/// The methods a document is answered to.
const ALLOW: &str = "GET, HEAD";

/// Answers a request for a metadata document. `Ok(true)`: answered (or the client is gone);
/// `Ok(false)`: the path is no document's, and the request goes on to routing. A method other
/// than GET or HEAD is [`ProxyError::MethodNotAllowed`]; a request naming no usable host when no
/// `resource_base` is configured, [`ProxyError::BadRequest`].
pub async fn serve(session: &mut Session, ctx: &RequestCtx) -> Result<bool, ProxyError> {
    let state = &*ctx.live;
    let req = session.req_header();
    let Some(resource) = state.resources.find(super::host(req), req.uri.path()) else {
        return Ok(false);
    };
    let head = req.method == http::Method::HEAD;
    if !head && req.method != http::Method::GET {
        return Err(ProxyError::MethodNotAllowed {
            method: req.method.to_string(),
            allow: ALLOW,
        });
    }
    let base = base(state, session).ok_or_else(|| {
        ProxyError::BadRequest("the request names no host to name the resource under".to_string())
    })?;
    let body = resource.document(&base);
    let internal = |e: Box<pingora::Error>| ProxyError::Internal(e.to_string());
    let mut header = ResponseHeader::build(200, Some(4)).map_err(internal)?;
    header
        .insert_header(http::header::CONTENT_TYPE, "application/json")
        .map_err(internal)?;
    header
        .insert_header(http::header::CONTENT_LENGTH, body.len().to_string())
        .map_err(internal)?;
    header
        .insert_header(request_id::HEADER, ctx.request_id.as_str())
        .map_err(internal)?;
    if !session.is_body_empty() && !session.is_body_done() {
        // A body nobody reads: the connection ends with this answer (as `respond` does).
        header
            .insert_header(http::header::CONNECTION, "close")
            .map_err(internal)?;
        session.set_keepalive(None);
    }
    // Once the answer starts, a failure can only cut the connection; nothing to render.
    if session
        .write_response_header(Box::new(header), head)
        .await
        .is_ok()
        && !head
    {
        let _ = session
            .write_response_body(Some(Bytes::from(body)), true)
            .await;
    }
    Ok(true)
}

/// The challenge parameters of the route at `index`, when it publishes metadata and the
/// request names a usable host (or `resource_base` is configured).
pub fn challenge(state: &Live, session: &Session, index: usize) -> Option<Challenge> {
    let resource = state.resources.for_route(index)?;
    let base = base(state, session)?;
    Some(Challenge {
        metadata_url: resource.metadata_url(&base),
        scope: resource.scope().map(str::to_string),
    })
}

/// The origin resources are named under: `resource_base`, else the request's scheme and host.
fn base(state: &Live, session: &Session) -> Option<String> {
    if let Some(base) = state.resources.base() {
        return Some(base.to_string());
    }
    let host = super::host(session.req_header())?;
    // The host is echoed in a document and a header: only a plain `host[:port]` is.
    let authority = host
        .parse::<http::uri::Authority>()
        .ok()
        .filter(|a| !a.as_str().contains('@'))?;
    Some(format!("{}://{authority}", super::scheme(session)))
}
