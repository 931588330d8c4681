//! Rate limits shared by every instance through Redis (`[limits] redis`).
//!
//! Each request's policies (per subject, per client, per route) are checked in ONE call of a Lua
//! script ([`GCRA`]) that reads the time from Redis itself (`TIME`), so the instances' clocks do
//! not matter, and either counts the request against all of them or refuses it, naming the first
//! policy that refuses and the wait until it would pass. The keys expire on their own once their
//! bucket is full again.
//!
//! The per-instance limiters still count every request, so that when Redis cannot be asked
//! (refused, failed, or slower than `redis_timeout`) they hold recent state and can decide
//! (`on_redis_error = "local"`), or the request is refused with 503 (`"deny"`). Redis is then
//! marked down: requests take the fallback at once without waiting on it, one request per
//! [`PROBE_INTERVAL`] tries it again, and the first success marks it up. Each change is logged
//! once.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::Refusal;
use crate::config::{OnRedisError, Quota, Route, SharedLimits};
use crate::metrics::Metrics;

/// GCRA over several buckets at once. `KEYS[i]` is a bucket; `ARGV[2i-1]` its emission interval
/// and `ARGV[2i]` its burst, both as integers (microseconds, cells). A bucket holds its
/// theoretical arrival time (TAT) in microseconds of Redis's clock. Returns `{0, 0}` when every
/// bucket has room (and then counts the request in each), or `{i, wait}`: bucket `i` refuses,
/// and would take the request in `wait` microseconds. Same arithmetic as `governor`: a request
/// passes when `now >= tat - interval * (burst - 1)`, and moves the TAT to
/// `max(tat, now) + interval`.
pub const GCRA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tats = {}
for i = 1, #KEYS do
  local interval = tonumber(ARGV[2 * i - 1])
  local burst = tonumber(ARGV[2 * i])
  local tat = tonumber(redis.call('GET', KEYS[i])) or now
  if tat < now then tat = now end
  local earliest = tat - interval * (burst - 1)
  if now < earliest then
    return {i, earliest - now}
  end
  tats[i] = tat + interval
end
for i = 1, #KEYS do
  -- The bucket is full again at its TAT: nothing need be kept past it.
  -- Numbers are written with %.0f: Lua's own conversion switches to exponents past 14 digits.
  local ttl_ms = math.floor((tats[i] - now) / 1000) + 1
  redis.call('SET', KEYS[i], string.format('%.0f', tats[i]), 'PX', string.format('%.0f', ttl_ms))
end
return {0, 0}
"#;

/// While Redis is marked down, how often one request tries it again.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(250);

/// A bucket's parameters for the script, and where its keys start.
struct Bucket {
    policy: &'static str,
    quota: Quota,
    /// `interlingua:limit:{route}:{policy}:{interval}x{burst}:`; the quota is part of the key, so
    /// a changed quota starts afresh rather than reading another quota's state.
    prefix: String,
    interval_us: u64,
    burst: u32,
}

impl Bucket {
    fn new(route: &str, policy: &'static str, quota: &Quota) -> Bucket {
        let per_cell = quota.per / quota.count.max(1);
        let interval_us = u64::try_from(per_cell.as_micros())
            .unwrap_or(u64::MAX)
            .max(1);
        let burst = quota.burst.max(1);
        Bucket {
            policy,
            quota: quota.clone(),
            prefix: format!("interlingua:limit:{route}:{policy}:{interval_us}x{burst}:"),
            interval_us,
            burst,
        }
    }
}

/// One route's buckets. They are named by the route's name and quota, so a reloaded config's
/// buckets go on counting where the old ones were whenever both are unchanged.
#[derive(Default)]
pub struct RouteBuckets {
    subject: Option<Bucket>,
    client: Option<Bucket>,
    route: Option<Bucket>,
}

impl RouteBuckets {
    /// The buckets of each route, in config order.
    pub fn of(routes: &[Route]) -> Vec<RouteBuckets> {
        routes
            .iter()
            .map(|r| {
                let l = &r.access.limits;
                RouteBuckets {
                    subject: l
                        .per_subject
                        .as_ref()
                        .map(|q| Bucket::new(&r.name, "subject", q)),
                    client: l
                        .per_client
                        .as_ref()
                        .map(|q| Bucket::new(&r.name, "client", q)),
                    route: l.route.as_ref().map(|q| Bucket::new(&r.name, "route", q)),
                }
            })
            .collect()
    }
}

/// The fleet-wide limiter: Redis, the script, and whether Redis is up.
pub struct Shared {
    config: SharedLimits,
    script: redis::Script,
    /// Made on first use, inside the server's runtime (the manager spawns its tasks there).
    connection: OnceLock<Result<ConnectionManager, String>>,
    down: AtomicBool,
    /// While down: when the next probe may go, in microseconds since `epoch`.
    next_probe: AtomicU64,
    epoch: Instant,
    fallbacks: IntCounterVec,
    errors: IntCounter,
    up: IntGauge,
}

/// What a check decided, when Redis could not decide it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Redis (or, with `local`, this instance) says the request passes or is refused.
    Limit(Result<(), Refusal>),
    /// `deny` and Redis cannot be asked: 503.
    Unavailable,
}

impl Shared {
    /// The limiter, its metrics registered in `metrics`. Connects on first use.
    pub fn new(config: &SharedLimits, metrics: &Metrics) -> Arc<Shared> {
        let fallbacks = IntCounterVec::new(
            Opts::new(
                "interlingua_limit_redis_fallbacks_total",
                "Requests whose rate limits Redis could not check, by what was done \
                 (local: this instance's limits decided; deny: refused with 503).",
            ),
            &["mode"],
        )
        .expect("static metric definition");
        let errors = IntCounter::new(
            "interlingua_limit_redis_errors_total",
            "Calls to Redis for rate limits that failed or timed out.",
        )
        .expect("static metric definition");
        let up = IntGauge::new(
            "interlingua_limit_redis_up",
            "1 while Redis answers the rate-limit checks, 0 while it is marked down.",
        )
        .expect("static metric definition");
        up.set(1);
        for c in [
            Box::new(fallbacks.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(errors.clone()),
            Box::new(up.clone()),
        ] {
            metrics.register(c);
        }
        Arc::new(Shared {
            config: config.clone(),
            script: redis::Script::new(GCRA),
            connection: OnceLock::new(),
            down: AtomicBool::new(false),
            next_probe: AtomicU64::new(0),
            epoch: Instant::now(),
            fallbacks,
            errors,
            up,
        })
    }

    /// Checks a request of a route with `buckets` against Redis; `local` is what this
    /// instance's own limiters decided (they count every request, so they are ready to take
    /// over).
    pub async fn check<'a>(
        &'a self,
        buckets: Option<&'a RouteBuckets>,
        subject: Option<&str>,
        client: Option<IpAddr>,
        local: Result<(), Refusal>,
    ) -> Decision {
        let Some(buckets) = buckets else {
            return Decision::Limit(local);
        };
        let mut used: [Option<&Bucket>; 3] = [None; 3];
        let mut invocation = self.script.prepare_invoke();
        let mut n = 0;
        let mut push = |bucket: &'a Bucket, key: &str| {
            invocation
                .key(format!("{}{key}", bucket.prefix))
                .arg(bucket.interval_us)
                .arg(bucket.burst);
            used[n] = Some(bucket);
            n += 1;
        };
        if let (Some(b), Some(s)) = (&buckets.subject, subject) {
            push(b, s);
        }
        if let (Some(b), None, Some(ip)) = (&buckets.client, subject, client) {
            push(b, &ip.to_string());
        }
        if let Some(b) = &buckets.route {
            push(b, "");
        }
        if n == 0 {
            return Decision::Limit(local);
        }
        if self.down.load(Ordering::Relaxed) && !self.claim_probe() {
            return self.fall_back(local);
        }
        let answer = match self.connection() {
            Ok(mut conn) => {
                match tokio::time::timeout(
                    self.config.timeout,
                    invocation.invoke_async::<(usize, u64)>(&mut conn),
                )
                .await
                {
                    Ok(Ok(a)) => Ok(a),
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(_) => Err(format!(
                        "no answer within {:?} (limits.redis_timeout)",
                        self.config.timeout
                    )),
                }
            }
            Err(e) => Err(e),
        };
        match answer {
            Ok((0, _)) => {
                self.mark_up();
                Decision::Limit(Ok(()))
            }
            Ok((i, wait_us)) => {
                self.mark_up();
                match used.get(i.wrapping_sub(1)).copied().flatten() {
                    Some(b) => Decision::Limit(Err(Refusal {
                        policy: b.policy,
                        quota: b.quota.clone(),
                        retry_after: Duration::from_micros(wait_us),
                    })),
                    None => {
                        self.mark_down(&format!("the script answered bucket {i} of {n}"));
                        self.fall_back(local)
                    }
                }
            }
            Err(e) => {
                self.mark_down(&e);
                self.fall_back(local)
            }
        }
    }

    /// Asks Redis for a `PONG` now, within `redis_timeout` (for `/readyz`).
    pub async fn ping(&self) -> Result<(), String> {
        let mut conn = self.connection()?;
        let cmd = redis::cmd("PING");
        let pong = cmd.query_async::<String>(&mut conn);
        match tokio::time::timeout(self.config.timeout, pong).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {:?}", self.config.timeout)),
        }
    }

    /// Whether Redis is marked up (its last call answered).
    pub fn is_up(&self) -> bool {
        !self.down.load(Ordering::Relaxed)
    }

    /// The configured fallback.
    pub fn mode(&self) -> OnRedisError {
        self.config.on_error
    }

    /// The server, without its password.
    pub fn display(&self) -> &str {
        &self.config.display
    }

    fn connection(&self) -> Result<ConnectionManager, String> {
        let made = self.connection.get_or_init(|| {
            let client =
                redis::Client::open(self.config.redis.clone()).map_err(|e| e.to_string())?;
            // Each attempt is bounded by our timeout; reconnecting is left to later requests (and
            // the probes), never to a request's own wait.
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(self.config.timeout))
                .set_response_timeout(Some(self.config.timeout))
                .set_number_of_retries(1)
                .set_max_delay(self.config.timeout);
            ConnectionManager::new_lazy_with_config(client, config).map_err(|e| e.to_string())
        });
        made.clone()
    }

    fn now_us(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// Whether this request is the one that tries Redis again now.
    fn claim_probe(&self) -> bool {
        let now = self.now_us();
        let next = self.next_probe.load(Ordering::Relaxed);
        now >= next
            && self
                .next_probe
                .compare_exchange(
                    next,
                    now + PROBE_INTERVAL.as_micros() as u64,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
    }

    fn mark_down(&self, why: &str) {
        self.errors.inc();
        self.next_probe.store(
            self.now_us() + PROBE_INTERVAL.as_micros() as u64,
            Ordering::Relaxed,
        );
        if !self.down.swap(true, Ordering::Relaxed) {
            self.up.set(0);
            let what = match self.config.on_error {
                OnRedisError::Local => "each instance applies its own rate limits until it is back",
                OnRedisError::Deny => {
                    "requests to rate-limited routes are refused (503) until it is back"
                }
            };
            tracing::error!(redis = %self.config.display, error = %why, "Redis is unreachable: {what}");
        }
    }

    fn mark_up(&self) {
        if self.down.swap(false, Ordering::Relaxed) {
            self.up.set(1);
            tracing::warn!(redis = %self.config.display, "Redis is reachable again: rate limits are shared again");
        }
    }

    fn fall_back(&self, local: Result<(), Refusal>) -> Decision {
        let mode = self.config.on_error;
        self.fallbacks.with_label_values(&[mode.as_str()]).inc();
        match mode {
            OnRedisError::Local => Decision::Limit(local),
            OnRedisError::Deny => Decision::Unavailable,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Bucket;
    use crate::config::parse_quota;

    #[test]
    fn a_buckets_key_names_its_route_policy_and_quota() {
        let q = |text: &str| parse_quota(text).expect("a quota");
        let b = Bucket::new("main", "subject", &q("10/s, burst 5"));
        assert_eq!(b.prefix, "interlingua:limit:main:subject:100000x5:");
        assert_eq!((b.interval_us, b.burst), (100_000, 5));
        // Another quota, another key: its state is never read as this one's.
        let b = Bucket::new("main", "subject", &q("10/s, burst 6"));
        assert_eq!(b.prefix, "interlingua:limit:main:subject:100000x6:");
        let b = Bucket::new("main", "route", &q("1/h"));
        assert_eq!(b.prefix, "interlingua:limit:main:route:3600000000x1:");
    }
}
