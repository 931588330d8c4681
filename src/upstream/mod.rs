//! Everything that talks to agents and services: each upstream's resolved address and peer
//! ([`peers`]), the client the engine and the key and payment fetches call through ([`client`]),
//! what a route adds to every upstream request, and what can go wrong ([`error`]).
//!
//! It sits below `auth`, `payment`, `engine` and `proxy`, which all call out through it, and
//! depends on none of them: its errors are its own ([`UpstreamError`], [`FetchError`]), composed
//! into the request's error by `crate::error`.

pub mod client;
pub mod error;
pub mod peers;

pub use client::{Answer, Client, Resend};
pub use error::{FetchError, UpstreamError};
pub use peers::{UpstreamState, Upstreams, RESOLVE_EVERY};

/// The verified caller a route names to its agent (from the token: `auth::Identity`).
#[derive(Debug, Clone, Copy)]
pub struct Caller<'a> {
    pub subject: &'a str,
    pub plan: Option<&'a str>,
}

/// Adds what a route sends every upstream request: its own credential for the agent, and the
/// caller's verified subject and plan under the route's header names.
pub fn add_route_headers(
    h: &mut pingora::http::RequestHeader,
    access: &crate::config::Access,
    caller: Option<Caller<'_>>,
) -> pingora::Result<()> {
    if let Some(cred) = &access.upstream_auth {
        h.insert_header(cred.header.clone(), cred.value.as_str())?;
    }
    if let (Some(names), Some(id)) = (&access.identity_headers, caller) {
        h.insert_header(names.subject.clone(), id.subject)?;
        match id.plan {
            Some(plan) => h.insert_header(names.plan.clone(), plan)?,
            None => {
                h.remove_header(names.plan.as_str());
            }
        }
    }
    Ok(())
}
