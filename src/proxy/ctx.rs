//! What one request carries from phase to phase.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::Span;

use crate::auth::Identity;
use crate::error::ProxyError;
use crate::metrics::InFlight;
use crate::state::Live;

/// Per-request state, created by pingora for each request and dropped when it ends (which also
/// ends its in-flight count).
pub struct RequestCtx {
    /// The config the request was received under; it is read to the end of the request, whatever
    /// a reload does meanwhile.
    pub live: Arc<Live>,
    /// Kept from `X-Request-Id` or generated; sent upstream and back.
    pub request_id: String,
    /// Index of the chosen route, once chosen.
    pub route: Option<usize>,
    /// Who is calling, once their token is verified (routes with auth).
    pub identity: Option<Identity>,
    pub started: Instant,
    /// When the upstream was chosen and when its response last made progress.
    pub upstream_started: Option<Instant>,
    pub upstream_last: Option<Instant>,
    /// The whole upstream exchange must end by then (the upstream's `total_timeout`).
    pub upstream_deadline: Option<Instant>,
    /// Time the engine spent waiting for upstreams (translated routes).
    pub upstream_spent: Option<Duration>,
    /// Request body bytes seen so far, against the route's limit.
    pub body_bytes: u64,
    /// What the request ended with, if it failed; for the access log.
    pub error: Option<ProxyError>,
    /// The request's span (`Span::none()` without traces); see [`crate::telemetry::trace`].
    pub span: Span,
    /// A passthrough route's call to its agent, from the request sent to the answer's end.
    pub agent_span: Span,
    // Last: the request stops counting as in flight only once its spans are closed, so a
    // shutdown that waits for it exports them.
    _in_flight: InFlight,
}

impl RequestCtx {
    pub fn new(live: Arc<Live>, in_flight: InFlight) -> RequestCtx {
        RequestCtx {
            live,
            request_id: String::new(),
            route: None,
            identity: None,
            started: Instant::now(),
            upstream_started: None,
            upstream_last: None,
            upstream_deadline: None,
            upstream_spent: None,
            body_bytes: 0,
            error: None,
            span: Span::none(),
            agent_span: Span::none(),
            _in_flight: in_flight,
        }
    }

    /// Whether pingora took the request to a passthrough route's upstream (`upstream_peer` ran):
    /// a failure from then on ends the client's connection, whatever the error answer says.
    pub fn proxied(&self) -> bool {
        self.upstream_started.is_some()
    }

    /// Time spent on the upstream, from choosing it to its last response event.
    pub fn upstream_time(&self) -> Option<Duration> {
        if let Some(spent) = self.upstream_spent {
            return Some(spent);
        }
        let start = self.upstream_started?;
        Some(
            self.upstream_last
                .unwrap_or_else(Instant::now)
                .saturating_duration_since(start),
        )
    }
}
