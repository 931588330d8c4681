//! Who may call a route, and how often: the bearer token, the plan, the rate limits. All of it is
//! checked in `request_filter`, before any byte goes upstream.

use pingora::proxy::Session;

use super::ctx::RequestCtx;
use crate::config::Route;
use crate::error::ProxyError;
use crate::limit::shared::Decision;
use crate::state::{Live, State};

/// Authenticates the caller (routes with auth, unless the request is `public`), checks the plan,
/// and counts the request against the route's rate limits.
pub async fn check(
    state: &State,
    live: &Live,
    index: usize,
    route: &Route,
    session: &Session,
    ctx: &mut RequestCtx,
    public: bool,
) -> Result<(), ProxyError> {
    if route.access.auth && !public {
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
        ctx.identity = Some(identity);
    }
    if let Some(limits) = live.limits.get(index) {
        let subject = ctx.identity.as_ref().map(|i| i.subject.as_str());
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
                .map_err(ProxyError::RateLimited)?,
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
                    Decision::Limit(decided) => decided.map_err(ProxyError::RateLimited)?,
                    Decision::Unavailable => return Err(ProxyError::LimitsUnavailable),
                }
            }
        }
    }
    Ok(())
}
