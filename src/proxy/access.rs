//! Who may call a route, and how often: the bearer token, the plan, the rate limits. All of it is
//! checked in `request_filter`, before any byte goes upstream; a payment (x402, a Masumi
//! purchase) instead of a token is the engine's to check, once the request is read.

use pingora::proxy::Session;
use tracing::{Instrument, Span};

use super::ctx::RequestCtx;
use crate::auth::Identity;
use crate::config::Route;
use crate::error::ProxyError;
use crate::limit::shared::Decision;
use crate::limit::RouteLimits;
use crate::state::{Live, State};
use crate::telemetry::trace;

/// Authenticates the caller (routes with auth, unless the request is `public`), checks the plan,
/// and counts the request against the route's rate limits: each in a span of the request's
/// trace (`auth`, `limits`).
pub async fn check(
    state: &State,
    live: &Live,
    index: usize,
    route: &Route,
    session: &Session,
    ctx: &mut RequestCtx,
    public: bool,
) -> Result<(), ProxyError> {
    // On a route that also takes x402, a request without a token may be a payment: the engine
    // decides once it knows the operation (`engine/admission.rs`). On a route that sells on Masumi,
    // it is a buyer's: a create is sold, and a sold job's id is its buyer's capability
    // (`engine/settle/masumi_sell.rs`).
    let payable = (route.x402.is_some() || route.sell.is_some())
        && !session
            .req_header()
            .headers
            .contains_key(http::header::AUTHORIZATION);
    if route.access.auth && !public && !payable {
        let span = trace::auth(&ctx.span);
        let identity = authenticate(live, route, session)
            .instrument(span.clone())
            .await;
        match &identity {
            Ok(id) => {
                span.record("interlingua.plan", id.plan.as_deref());
            }
            Err(e) => trace::failed(&span, e.code()),
        }
        ctx.identity = Some(identity?);
    }
    if let Some(limits) = live.limits.get(index) {
        let backend = if state.shared_limits.is_some() {
            "redis"
        } else {
            "local"
        };
        // A route without limits counts nothing worth a span.
        let span = if route.access.limits.is_empty() {
            Span::none()
        } else {
            trace::limits(&ctx.span, backend)
        };
        let subject = ctx.identity.as_ref().map(|i| i.subject.as_str());
        let counted = count(state, live, index, limits, session, subject)
            .instrument(span.clone())
            .await;
        if let Err(e) = &counted {
            if let ProxyError::RateLimited(refusal) = e {
                span.record("interlingua.limit.policy", refusal.policy);
            }
            trace::failed(&span, e.code());
        }
        counted?;
    }
    Ok(())
}

/// The caller, from the bearer token, if their plan may use `route`.
async fn authenticate(
    live: &Live,
    route: &Route,
    session: &Session,
) -> Result<Identity, ProxyError> {
    let auth = live.auth.as_ref().ok_or_else(|| {
        ProxyError::Internal("the route requires auth, but none is configured".to_string())
    })?;
    let header = session
        .req_header()
        .headers
        .get(http::header::AUTHORIZATION)
        .map(|v| v.as_bytes());
    let identity = auth
        .verify(header)
        .await
        .map_err(ProxyError::Unauthorized)?;
    let plans = &route.access.plans;
    if !plans.is_empty() && !identity.plan.as_ref().is_some_and(|p| plans.contains(p)) {
        return Err(ProxyError::Forbidden {
            plan: identity.plan,
            allowed: plans.clone(),
        });
    }
    Ok(identity)
}

/// Counts the request against the route's `limits` (and the fleet's, in Redis, when shared).
async fn count(
    state: &State,
    live: &Live,
    index: usize,
    limits: &RouteLimits,
    session: &Session,
    subject: Option<&str>,
) -> Result<(), ProxyError> {
    // Asked only when a per-client limit needs it: each ask is a system call.
    let client = || {
        session
            .client_addr()
            .and_then(|a| a.as_inet())
            .map(|a| a.ip())
    };
    match &state.shared_limits {
        None => limits
            .check(subject, client)
            .map_err(ProxyError::RateLimited),
        Some(shared) => {
            let ip = if limits.uses_client(subject) {
                client()
            } else {
                None
            };
            // The local limiters count every request, so they hold state to fall back on.
            let local = limits.check(subject, || ip);
            match shared
                .check(live.buckets.get(index), subject, ip, local)
                .await
            {
                Decision::Limit(decided) => decided.map_err(ProxyError::RateLimited),
                Decision::Unavailable => Err(ProxyError::LimitsUnavailable),
            }
        }
    }
}
