//! Rate limits, with `governor` (GCRA): per subject per route, per route overall, and per client
//! address. A refused request gets the wait until it would be allowed, and the policy that refused
//! it, for the `Retry-After`, `RateLimit-Policy` and `RateLimit` headers.
//!
//! A reload keeps a route's limiter (and what it has counted) when the route keeps its name and
//! the policy its quota ([`RouteLimits::carried`]); a changed quota starts afresh.
//!
//! These limiters count per instance. With `[limits] redis`, [`shared`] makes the same checks
//! against Redis for the whole fleet, and these decide only when Redis cannot be asked.

pub mod shared;

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::state::{InMemoryState, NotKeyed};
use governor::RateLimiter;

use crate::config::{Quota, RateLimits};

/// Which limit refused a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// `subject`, `route` or `client`.
    pub policy: &'static str,
    pub quota: Quota,
    /// How long until the request would be allowed.
    pub retry_after: Duration,
}

type Keyed<K, C> =
    RateLimiter<K, DefaultKeyedStateStore<K>, C, NoOpMiddleware<<C as Clock>::Instant>>;
type Direct<C> = RateLimiter<NotKeyed, InMemoryState, C, NoOpMiddleware<<C as Clock>::Instant>>;

/// One policy's quota and its limiter; the limiter is shared with the same policy of a reloaded
/// config when the quota did not change.
type Policy<L> = Option<(Quota, Arc<L>)>;

/// The limits of one route.
pub struct RouteLimits<C: Clock = DefaultClock> {
    clock: C,
    per_subject: Policy<Keyed<String, C>>,
    route: Policy<Direct<C>>,
    per_client: Policy<Keyed<IpAddr, C>>,
}

/// The policy for `quota`: `prev`'s limiter when it counted the same quota, else a new one.
fn policy<L>(
    quota: Option<&Quota>,
    prev: Option<&Policy<L>>,
    new: impl FnOnce(governor::Quota) -> L,
) -> Policy<L> {
    let quota = quota?;
    if let Some(Some((q, limiter))) = prev {
        if q == quota {
            return Some((q.clone(), limiter.clone()));
        }
    }
    Some((quota.clone(), Arc::new(new(governor_quota(quota)))))
}

fn governor_quota(q: &Quota) -> governor::Quota {
    let per_cell = q.per / q.count.max(1);
    let burst = NonZeroU32::new(q.burst.max(1)).unwrap_or(NonZeroU32::MIN);
    governor::Quota::with_period(per_cell.max(Duration::from_nanos(1)))
        .unwrap_or_else(|| governor::Quota::per_second(NonZeroU32::MIN))
        .allow_burst(burst)
}

impl RouteLimits<DefaultClock> {
    pub fn new(limits: &RateLimits) -> RouteLimits<DefaultClock> {
        RouteLimits::with_clock(limits, DefaultClock::default())
    }

    /// The limits of a reloaded route: each policy whose quota `prev` (the same route before the
    /// reload) also had keeps counting where it was.
    pub fn carried(limits: &RateLimits, prev: Option<&RouteLimits>) -> RouteLimits<DefaultClock> {
        RouteLimits::carried_with_clock(limits, prev, DefaultClock::default())
    }
}

impl<C: Clock + Clone> RouteLimits<C> {
    /// The limits, on a given clock (tests use a fake one).
    pub fn with_clock(limits: &RateLimits, clock: C) -> RouteLimits<C> {
        RouteLimits::carried_with_clock(limits, None, clock)
    }

    fn carried_with_clock(
        limits: &RateLimits,
        prev: Option<&RouteLimits<C>>,
        clock: C,
    ) -> RouteLimits<C> {
        RouteLimits {
            per_subject: policy(
                limits.per_subject.as_ref(),
                prev.map(|p| &p.per_subject),
                |q| RateLimiter::dashmap_with_clock(q, clock.clone()),
            ),
            per_client: policy(
                limits.per_client.as_ref(),
                prev.map(|p| &p.per_client),
                |q| RateLimiter::dashmap_with_clock(q, clock.clone()),
            ),
            route: policy(limits.route.as_ref(), prev.map(|p| &p.route), |q| {
                RateLimiter::direct_with_clock(q, clock.clone())
            }),
            clock,
        }
    }

    /// Counts one request; `Err` when a limit refuses it. The per-client limit applies only to
    /// requests without a subject (routes without auth).
    pub fn check(
        &self,
        subject: Option<&str>,
        client: impl FnOnce() -> Option<IpAddr>,
    ) -> Result<(), Refusal> {
        let now = self.clock.now();
        let refuse = |policy, quota: &Quota, wait: Duration| Refusal {
            policy,
            quota: quota.clone(),
            retry_after: wait,
        };
        if let (Some((q, limiter)), Some(s)) = (&self.per_subject, subject) {
            limiter
                .check_key(&s.to_string())
                .map_err(|n| refuse("subject", q, n.wait_time_from(now)))?;
        }
        if let (Some((q, limiter)), None) = (&self.per_client, subject) {
            if let Some(ip) = client() {
                limiter
                    .check_key(&ip)
                    .map_err(|n| refuse("client", q, n.wait_time_from(now)))?;
            }
        }
        if let Some((q, limiter)) = &self.route {
            limiter
                .check()
                .map_err(|n| refuse("route", q, n.wait_time_from(now)))?;
        }
        Ok(())
    }

    /// Whether a check with this subject asks for the client's address (the per-client limit
    /// applies only to requests without one).
    pub fn uses_client(&self, subject: Option<&str>) -> bool {
        subject.is_none() && self.per_client.is_some()
    }

    /// Forgets keys that are back to a full bucket, so the maps do not grow without bound.
    pub fn forget_idle(&self) {
        if let Some((_, l)) = &self.per_subject {
            l.retain_recent();
        }
        if let Some((_, l)) = &self.per_client {
            l.retain_recent();
        }
    }
}

impl Refusal {
    /// `Retry-After`: whole seconds, rounded up (a client told 0 would retry at once).
    pub fn retry_after_secs(&self) -> u64 {
        let s = self.retry_after.as_secs();
        if self.retry_after.subsec_nanos() > 0 || s == 0 {
            s + 1
        } else {
            s
        }
    }

    /// The `RateLimit-Policy` value (draft-ietf-httpapi-ratelimit-headers):
    /// `"subject";q=10;w=1`, and the burst when it differs.
    pub fn policy_header(&self) -> String {
        format!(
            "\"{}\";q={};w={}",
            self.policy,
            self.quota.count,
            self.quota.per.as_secs().max(1)
        )
    }

    /// The `RateLimit` value: nothing remains, and when the next request would pass.
    pub fn limit_header(&self) -> String {
        format!("\"{}\";r=0;t={}", self.policy, self.retry_after_secs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use governor::clock::FakeRelativeClock;

    fn limits(subject: &str) -> RateLimits {
        RateLimits {
            per_subject: Some(crate::config::parse_quota(subject).unwrap()),
            route: None,
            per_client: None,
        }
    }

    #[test]
    fn a_burst_over_the_limit_waits_for_the_next_cell() {
        let clock = FakeRelativeClock::default();
        let l = RouteLimits::with_clock(&limits("1/m, burst 2"), clock.clone());
        assert!(l.check(Some("alice"), || None).is_ok());
        assert!(l.check(Some("alice"), || None).is_ok());
        let refused = l.check(Some("alice"), || None).unwrap_err();
        assert_eq!(refused.policy, "subject");
        assert_eq!(refused.retry_after, Duration::from_secs(60));
        assert_eq!(refused.retry_after_secs(), 60);
        assert_eq!(refused.policy_header(), "\"subject\";q=1;w=60");
        assert_eq!(refused.limit_header(), "\"subject\";r=0;t=60");
        // Another subject has its own bucket.
        assert!(l.check(Some("bob"), || None).is_ok());
        // A minute later one more is allowed, and only one.
        clock.advance(Duration::from_secs(60));
        assert!(l.check(Some("alice"), || None).is_ok());
        assert!(l.check(Some("alice"), || None).is_err());
    }

    #[test]
    fn clients_without_a_subject_are_limited_by_address_and_all_by_route() {
        let clock = FakeRelativeClock::default();
        let cfg = RateLimits {
            per_subject: None,
            route: Some(crate::config::parse_quota("3/s").unwrap()),
            per_client: Some(crate::config::parse_quota("1/s").unwrap()),
        };
        let l = RouteLimits::with_clock(&cfg, clock);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        assert!(l.check(None, || Some(a)).is_ok());
        assert_eq!(l.check(None, || Some(a)).unwrap_err().policy, "client");
        assert!(l.check(None, || Some(b)).is_ok());
        assert!(l.check(Some("s"), || Some(b)).is_ok());
        assert_eq!(l.check(Some("t"), || Some(b)).unwrap_err().policy, "route");
    }

    #[test]
    fn a_reload_keeps_the_count_of_an_unchanged_quota_and_restarts_a_changed_one() {
        let clock = FakeRelativeClock::default();
        let before = RouteLimits::with_clock(&limits("2/h"), clock.clone());
        assert!(before.check(Some("alice"), || None).is_ok());
        assert!(before.check(Some("alice"), || None).is_ok());
        let same = RouteLimits::carried_with_clock(&limits("2/h"), Some(&before), clock.clone());
        assert_eq!(
            same.check(Some("alice"), || None).unwrap_err().policy,
            "subject"
        );
        let changed = RouteLimits::carried_with_clock(&limits("3/h"), Some(&same), clock.clone());
        assert!(changed.check(Some("alice"), || None).is_ok());
        // A policy the new config drops is gone.
        let none = RouteLimits::carried_with_clock(&RateLimits::default(), Some(&changed), clock);
        assert!(none.check(Some("alice"), || None).is_ok());
        assert!(none.check(Some("alice"), || None).is_ok());
    }
}
