//! The request pipeline: interlingua's implementation of pingora's `ProxyHttp`.
//!
//! ```text
//! client ─► (server::connections)  header within client_header_timeout    (408 request_timeout)
//!                                  connections over max_connections         (503 too_many_connections)
//!                                  bytes that are not HTTP, at once          (400 bad_request)
//!           early_request_filter   request id: keep a sane X-Request-Id or make one
//!                                  traced: the request's span, below the client's traceparent
//!                                  path: dot-segments and `//` removed (routed and sent so)
//!                                  body reads: client_body_timeout           (408 request_timeout)
//!           request_filter
//!             metadata::serve      /.well-known/oauth-protected-resource[/prefix]: a protected
//!                                  route's RFC 9728 document, before routing, without a token
//!                                  (GET and HEAD; other methods 405 method_not_allowed)
//!                                  route: host, longest path prefix, method  (404 no_route)
//!                                  body limit from Content-Length            (413 body_too_large)
//!             access::check        auth: the bearer token (auth::)           (401 unauthorized)
//!                                  plan: may it use this route               (403 forbidden)
//!                                  limits: route, client, subject (limit::)  (429 rate_limited)
//!                                  (in Redis, when shared: one round trip)   (503 limits_unavailable)
//!             operation::serve     translated routes end here: body read whole, the engine
//!                                  decodes the front, holds credits, calls the back through
//!                                  upstream::Client (as often as the operation needs), encodes
//!                                  the answer in the front's dialect          (400/402/404/409/502/504)
//!           upstream_peer          passthrough: the route's upstream, pooled keep-alive connections
//!           upstream_request_filter  the route's credential and caller headers, X-Request-Id;
//!                                  traced: the agent call's span, its traceparent sent
//!           request_body_filter    streamed through; counted against the limit (413)
//!           upstream_response_*    progress and the total deadline           (504 upstream_timeout)
//!           response_filter        X-Request-Id comes back
//!           logging                one access-log event, metrics; the request's span ends
//!   errors: fail_to_proxy → respond::error, the one place errors become responses
//!           (refused / reset → 502 upstream_failed, timeouts → 504 upstream_timeout,
//!           a malformed request body → 400 bad_request; never the upstream's address;
//!           a 401 or 403 names the route's metadata document when it publishes one)
//! ```
//!
//! Passthrough routes never buffer a body: pingora streams each piece as it arrives.

pub mod access;
pub mod ctx;
pub mod metadata;
pub mod operation;
pub mod path;
pub mod respond;

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use pingora::upstreams::peer::HttpPeer;
use tracing::{Instrument, Span};

use crate::error::ProxyError;
use crate::request_id;
use crate::state::State;
use crate::telemetry::{trace, ACCESS_LOG_TARGET};
use crate::upstream::UpstreamError;
use ctx::RequestCtx;

/// How much longer than `client_body_timeout` an upstream waits while a body is on its way.
const BODY_WAIT_MARGIN: Duration = Duration::from_secs(1);

/// The proxy application pingora runs for every request on the proxy listeners.
pub struct Proxy {
    state: Arc<State>,
}

impl Proxy {
    pub fn new(state: Arc<State>) -> Proxy {
        Proxy { state }
    }

    /// Chooses the route and checks what can be checked before any byte goes upstream.
    fn admit(&self, session: &Session, ctx: &mut RequestCtx) -> Result<(), ProxyError> {
        let req = session.req_header();
        let host = host(req);
        let path = req.uri.path();
        let live = &ctx.live;
        let index = live
            .routes
            .find(&live.config.routes, host, path, &req.method)
            .ok_or_else(|| ProxyError::NoRoute {
                method: req.method.to_string(),
                path: path.to_string(),
            })?;
        ctx.route = Some(index);
        let limit = route_limit(ctx);
        let declared = req
            .headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        if declared.is_some_and(|len| len > limit) {
            return Err(ProxyError::BodyTooLarge { limit });
        }
        Ok(())
    }

    /// Notes upstream progress, and fails the exchange once it has run past its total deadline.
    fn upstream_progress(&self, ctx: &mut RequestCtx) -> Result<(), ProxyError> {
        let now = Instant::now();
        ctx.upstream_last = Some(now);
        match ctx.upstream_deadline {
            Some(deadline) if now > deadline => Err(ProxyError::Upstream(UpstreamError::Timeout {
                upstream: upstream_name(ctx).to_string(),
                detail: "the exchange ran past total_timeout".to_string(),
            })),
            _ => Ok(()),
        }
    }
}

#[async_trait]
impl ProxyHttp for Proxy {
    type CTX = RequestCtx;

    fn new_ctx(&self) -> RequestCtx {
        RequestCtx::new(self.state.live(), self.state.metrics.start_request())
    }

    async fn early_request_filter(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
    ) -> pingora::Result<()> {
        let req = session.req_header();
        let incoming = req.headers.get(request_id::HEADER);
        ctx.request_id = request_id::choose(incoming.map(|v| v.as_bytes()));
        ctx.span = trace::request(&req.method, req.uri.path(), &req.headers, &ctx.request_id);
        // pingora's wait for each piece of the body (60 s by default) would otherwise outlast
        // the upstream's wait for the same body, and the client's silence be blamed on it (504).
        session.set_read_timeout(Some(ctx.live.config.server.client_body_timeout));
        normalize_path(session).map_err(ProxyError::into_pingora)
    }

    async fn request_filter(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
    ) -> pingora::Result<bool> {
        if metadata::serve(session, ctx)
            .await
            .map_err(ProxyError::into_pingora)?
        {
            return Ok(true);
        }
        self.admit(session, ctx).map_err(ProxyError::into_pingora)?;
        let Some(index) = ctx.route else {
            return Ok(false);
        };
        let live = ctx.live.clone();
        if let Some(route) = live.route(index) {
            // Discovery documents (an agent card) say how to authenticate: anyone may read them.
            let public = live
                .translated(index)
                .is_some_and(|t| operation::is_discovery(t, session, &route.matcher.path_prefix));
            access::check(&self.state, &live, index, route, session, ctx, public)
                .await
                .map_err(ProxyError::into_pingora)?;
        }
        let (Some(t), Some(route)) = (live.translated(index), live.route(index)) else {
            return Ok(false);
        };
        let (t, prefix, limit) = (t.clone(), route.matcher.path_prefix.clone(), route.max_body);
        // The engine's spans (store, agent calls) find the request's as the current span. Boxed:
        // this phase's future would otherwise hold the engine's inline, and every request,
        // passthrough too, pay for allocating and copying it (bench/README.md, "Where the CPU
        // went").
        let span = ctx.span.clone();
        Box::pin(operation::serve(
            &self.state,
            &t,
            session,
            ctx,
            &prefix,
            limit,
        ))
        .instrument(span)
        .await
        .map_err(ProxyError::into_pingora)?;
        Ok(true)
    }

    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        _end_of_stream: bool,
        ctx: &mut RequestCtx,
    ) -> pingora::Result<()> {
        if let Some(chunk) = body {
            ctx.body_bytes += chunk.len() as u64;
            let limit = route_limit(ctx);
            if ctx.body_bytes > limit {
                return Err(ProxyError::BodyTooLarge { limit }.into_pingora());
            }
        }
        Ok(())
    }

    async fn upstream_peer(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
    ) -> pingora::Result<Box<HttpPeer>> {
        let upstream = ctx
            .route
            .and_then(|i| ctx.live.route(i))
            .and_then(|r| ctx.live.upstreams.get(r.upstream))
            .cloned()
            .ok_or_else(|| {
                ProxyError::Internal("route without an upstream".to_string()).into_pingora()
            })?;
        let now = Instant::now();
        // Retries (a pooled connection the upstream had closed) keep the first start and deadline.
        ctx.upstream_started.get_or_insert(now);
        ctx.upstream_deadline
            .get_or_insert(now + upstream.config.total_timeout);
        let mut peer = upstream
            .peer()
            .await
            .map_err(|e| ProxyError::Upstream(e).into_pingora())?;
        // While the client's body is still coming, the upstream is waiting for it: its silence
        // is the client's, which `client_body_timeout` bounds (408). pingora keeps one read
        // timeout for the whole exchange, so a request with a body to come gives the upstream
        // longer than that, and a stalled client is not reported as the upstream's 504. A
        // second longer: pingora restarts both waits on every event of the exchange, the
        // client's a moment after the upstream's when an interim answer (`100 Continue`) passes.
        if !(session.is_body_empty() || session.is_body_done()) {
            let body_wait = ctx.live.config.server.client_body_timeout + BODY_WAIT_MARGIN;
            let read = &mut peer.options.read_timeout;
            *read = read.map(|wait| wait.max(body_wait));
        }
        Ok(peer)
    }

    async fn upstream_request_filter(
        &self,
        _session: &mut Session,
        upstream_request: &mut RequestHeader,
        ctx: &mut RequestCtx,
    ) -> pingora::Result<()> {
        if let Some(route) = ctx.route.and_then(|i| ctx.live.route(i)) {
            // The client's token is for interlingua; the agent gets the route's own credential.
            if route.access.auth {
                upstream_request.remove_header(&http::header::AUTHORIZATION);
            }
            crate::upstream::add_route_headers(
                upstream_request,
                &route.access,
                ctx.identity.as_ref().map(|i| i.caller()),
            )?;
            // Traced, the agent's parent is this call's span; untraced, the client's headers
            // (its traceparent among them) go on unchanged.
            let upstream = ctx.live.upstreams.get(route.upstream);
            if let Some(upstream) = upstream.filter(|_| !ctx.span.is_none()) {
                let method = &upstream_request.method;
                ctx.agent_span = ctx
                    .span
                    .in_scope(|| trace::agent_call(&upstream.config, "passthrough", None, method));
                trace::propagate(&ctx.agent_span, None, upstream_request)?;
            }
        }
        upstream_request.insert_header(request_id::HEADER, ctx.request_id.as_str())
    }

    async fn upstream_response_filter(
        &self,
        _session: &mut Session,
        upstream_response: &mut ResponseHeader,
        ctx: &mut RequestCtx,
    ) -> pingora::Result<()> {
        trace::agent_answered(&ctx.agent_span, Ok(upstream_response.status.as_u16()));
        self.upstream_progress(ctx)
            .map_err(ProxyError::into_pingora)
    }

    fn upstream_response_body_filter(
        &self,
        _session: &mut Session,
        _body: &mut Option<Bytes>,
        _end_of_stream: bool,
        ctx: &mut RequestCtx,
    ) -> pingora::Result<Option<Duration>> {
        self.upstream_progress(ctx)
            .map_err(ProxyError::into_pingora)?;
        Ok(None)
    }

    async fn response_filter(
        &self,
        _session: &mut Session,
        upstream_response: &mut ResponseHeader,
        ctx: &mut RequestCtx,
    ) -> pingora::Result<()> {
        upstream_response.insert_header(request_id::HEADER, ctx.request_id.as_str())
    }

    async fn fail_to_proxy(
        &self,
        session: &mut Session,
        e: &pingora::Error,
        ctx: &mut RequestCtx,
    ) -> FailToProxy {
        let err = ProxyError::from_pingora(e, upstream_name(ctx));
        if let Some(e @ ProxyError::Upstream(_)) = &err {
            trace::agent_answered(&ctx.agent_span, Err(e.code()));
        }
        let front = ctx
            .route
            .and_then(|i| ctx.live.translated(i))
            .map(|t| t.front.clone());
        // Only a refused token's challenge names the metadata; other errors need not build it.
        let challenge = match (&err, ctx.route) {
            (Some(ProxyError::Unauthorized(_) | ProxyError::Forbidden { .. }), Some(i)) => {
                metadata::challenge(&ctx.live, session, i)
            }
            _ => None,
        };
        respond::error(session, ctx, err, front.as_deref(), challenge.as_ref()).await
    }

    fn suppress_error_log(
        &self,
        _session: &Session,
        _ctx: &RequestCtx,
        _error: &pingora::Error,
    ) -> bool {
        // The access log records every failure with its request id; pingora's own line would
        // only repeat it without one.
        true
    }

    async fn logging(
        &self,
        session: &mut Session,
        e: Option<&pingora::Error>,
        ctx: &mut RequestCtx,
    ) {
        if matches!(ctx.error, Some(ProxyError::ClientTimeout)) {
            self.state.metrics.client_timeout("body");
        }
        // 499, as nginx has it: the client went away before an answer could be sent.
        let status = session
            .response_written()
            .filter(|r| !r.status.is_informational())
            .map_or(499, |r| r.status.as_u16());
        let routed = ctx.route.and_then(|i| ctx.live.route(i));
        let route = routed.map_or("-", |r| r.name.as_str());
        if !ctx.span.is_none() {
            trace::request_done(
                &ctx.span,
                &session.req_header().method,
                routed.map(|r| (r.name.as_str(), r.matcher.path_prefix.as_str())),
                status,
                ctx.error.as_ref().map(ProxyError::code),
            );
            // Ended: the agent call's span, then the request's (spans a request left running
            // keep it open until they end).
            ctx.agent_span = Span::none();
            ctx.span = Span::none();
        }
        let total = ctx.started.elapsed();
        let upstream = ctx.upstream_time();
        self.state.metrics.record(route, status, total, upstream);
        if let Some(
            e @ (ProxyError::Unauthorized(_)
            | ProxyError::Forbidden { .. }
            | ProxyError::PaymentRequired { .. }
            | ProxyError::RateLimited(_)),
        ) = &ctx.error
        {
            self.state.metrics.rejection(e.status());
        }
        if !ctx.live.config.log.access_log {
            return;
        }
        let req = session.req_header();
        let error_code = ctx.error.as_ref().map(ProxyError::code);
        // pingora's own error has what a client is not told (the upstream's address, the cause).
        let from_pingora = e.filter(|e| e.root_cause().downcast_ref::<ProxyError>().is_none());
        let detail = match (&ctx.error, e) {
            (Some(err), _) if from_pingora.is_some() => {
                from_pingora.map(|e| format!("{err} ({e})"))
            }
            (Some(err), _) => Some(err.to_string()),
            (None, Some(e)) => Some(e.to_string()),
            (None, None) => None,
        };
        tracing::info!(
            target: ACCESS_LOG_TARGET,
            request_id = %ctx.request_id,
            route,
            method = %req.method,
            path = req.uri.path(),
            status,
            bytes_in = session.body_bytes_read(),
            bytes_out = session.body_bytes_sent(),
            upstream_ms = upstream.map(|d| d.as_secs_f64() * 1000.0),
            total_ms = total.as_secs_f64() * 1000.0,
            error = error_code,
            detail,
            "request"
        );
    }
}

/// The body limit of the request's route.
fn route_limit(ctx: &RequestCtx) -> u64 {
    ctx.route
        .and_then(|i| ctx.live.route(i))
        .map_or(0, |r| r.max_body)
}

/// The name of the request's upstream, for messages.
fn upstream_name(ctx: &RequestCtx) -> &str {
    ctx.route
        .and_then(|i| ctx.live.route(i))
        .and_then(|r| ctx.live.upstreams.get(r.upstream))
        .map_or("", |u| u.config.name.as_str())
}

/// The host a request names: the URI's authority (HTTP/2, absolute-form), else `Host`.
fn host(req: &RequestHeader) -> Option<&str> {
    req.uri.authority().map(|a| a.as_str()).or_else(|| {
        req.headers
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok())
    })
}

/// `https` when the client's connection is TLS, else `http`.
fn scheme(session: &Session) -> &'static str {
    if session
        .digest()
        .and_then(|d| d.ssl_digest.as_ref())
        .is_some()
    {
        "https"
    } else {
        "http"
    }
}

/// Sends the request on with its path normalised (see [`path`]), the query unchanged.
fn normalize_path(session: &mut Session) -> Result<(), ProxyError> {
    let uri = &session.req_header().uri;
    let Some(normal) = path::normalize(uri.path()) else {
        return Ok(());
    };
    let target = match uri.query() {
        Some(q) => format!("{normal}?{q}"),
        None => normal,
    };
    let mut parts = uri.clone().into_parts();
    let rebuilt = http::uri::PathAndQuery::try_from(target)
        .ok()
        .and_then(|pq| {
            parts.path_and_query = Some(pq);
            http::Uri::from_parts(parts).ok()
        })
        .ok_or_else(|| ProxyError::BadRequest("the request path cannot be read".to_string()))?;
    session.req_header_mut().set_uri(rebuilt);
    Ok(())
}
