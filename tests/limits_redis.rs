//! Rate limits shared through Redis (`[limits] redis`), with a real `redis-server` and real
//! interlingua processes: the GCRA script's arithmetic, one limit held by three instances
//! together, the same headers as the per-instance limiter, and what happens when Redis goes away
//! (`on_redis_error = "local"` or `"deny"`) and comes back.
//!
//! The fleet tests measure real time: a limit of 10/s across instances is what is under test,
//! and Redis's clock (`TIME`) is the one the script reads, so neither a paused nor an injected
//! clock can stand in for it. They run for a few seconds and allow 10 %.

mod common;

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::process::{serve, Served};
use common::secrets::{auth_table, token};
use common::wait::eventually;
use common::{client, Upstream};
use interlingua::limit::shared::GCRA;
use serde_json::Value;
use testkit::redis::Redis;

/// How long the fleet tests send requests.
const RUN: Duration = Duration::from_secs(3);

async fn redis_conn(redis: &Redis) -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis.url())
        .expect("a Redis URL")
        .get_multiplexed_async_connection()
        .await
        .expect("connect to the test's Redis")
}

/// One call of the script over `buckets` (`key`, interval µs, burst): `(refusing bucket, wait µs)`.
async fn gcra(
    conn: &mut redis::aio::MultiplexedConnection,
    buckets: &[(&str, u64, u32)],
) -> (usize, u64) {
    let script = redis::Script::new(GCRA);
    let mut call = script.prepare_invoke();
    for (key, interval, burst) in buckets {
        call.key(*key).arg(*interval).arg(*burst);
    }
    call.invoke_async(conn).await.expect("the script runs")
}

const HOUR_US: u64 = 3_600_000_000;

#[tokio::test]
async fn the_script_allows_the_burst_then_refuses_with_the_wait_for_one_interval() {
    let redis = Redis::start().expect("redis-server starts");
    let mut conn = redis_conn(&redis).await;
    // One request an hour, burst 3: the wait is an hour less the moments the calls took.
    for _ in 0..3 {
        assert_eq!(gcra(&mut conn, &[("k", HOUR_US, 3)]).await, (0, 0));
    }
    let (refusing, wait) = gcra(&mut conn, &[("k", HOUR_US, 3)]).await;
    assert_eq!(refusing, 1);
    assert!(
        wait <= HOUR_US && HOUR_US - wait < 1_000_000,
        "wait {wait} µs, not about an hour"
    );
    // A refusal takes nothing: the wait is the same a moment later.
    let (_, again) = gcra(&mut conn, &[("k", HOUR_US, 3)]).await;
    assert!(again <= wait && wait - again < 1_000_000);
    // The key lasts until its bucket is full again (three intervals from the first call), no longer.
    let pttl: i64 = redis::cmd("PTTL")
        .arg("k")
        .query_async(&mut conn)
        .await
        .unwrap();
    let three_hours_ms = 3 * HOUR_US as i64 / 1000;
    assert!(
        pttl <= three_hours_ms + 1 && three_hours_ms - pttl < 2_000,
        "{pttl} ms"
    );
}

#[tokio::test]
async fn the_script_lets_one_request_through_per_interval_once_the_burst_is_spent() {
    let redis = Redis::start().expect("redis-server starts");
    let mut conn = redis_conn(&redis).await;
    let time = |conn: &mut redis::aio::MultiplexedConnection| {
        let mut conn = conn.clone();
        async move {
            let (s, us): (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
            s * 1_000_000 + us
        }
    };
    // Burst 1, one an hour. The stored arrival time is moved back by hand to stand for time
    // passing on Redis's clock.
    assert_eq!(gcra(&mut conn, &[("s", HOUR_US, 1)]).await, (0, 0));
    assert_eq!(gcra(&mut conn, &[("s", HOUR_US, 1)]).await.0, 1);
    // Half an interval later: still refused, with half an interval to wait.
    let now = time(&mut conn).await;
    let _: () = redis::cmd("SET")
        .arg("s")
        .arg(now + HOUR_US / 2)
        .query_async(&mut conn)
        .await
        .unwrap();
    let (refusing, wait) = gcra(&mut conn, &[("s", HOUR_US, 1)]).await;
    assert_eq!(refusing, 1);
    assert!(
        wait <= HOUR_US / 2 && HOUR_US / 2 - wait < 1_000_000,
        "{wait}"
    );
    // A whole interval later: exactly one passes.
    let now = time(&mut conn).await;
    let _: () = redis::cmd("SET")
        .arg("s")
        .arg(now)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(gcra(&mut conn, &[("s", HOUR_US, 1)]).await, (0, 0));
    assert_eq!(gcra(&mut conn, &[("s", HOUR_US, 1)]).await.0, 1);
}

#[tokio::test]
async fn the_script_counts_a_request_in_every_bucket_or_in_none() {
    let redis = Redis::start().expect("redis-server starts");
    let mut conn = redis_conn(&redis).await;
    // `route` allows one; `subject` allows two. The second request is refused by `route` (the
    // second bucket) and must not have used `subject`'s second cell.
    let buckets = [("subject", HOUR_US, 2), ("route", HOUR_US, 1)];
    assert_eq!(gcra(&mut conn, &buckets).await, (0, 0));
    assert_eq!(gcra(&mut conn, &buckets).await.0, 2);
    assert_eq!(gcra(&mut conn, &[("subject", HOUR_US, 2)]).await, (0, 0));
    assert_eq!(gcra(&mut conn, &[("subject", HOUR_US, 2)]).await.0, 1);
}

/// An interlingua process, killed when dropped (a failing test leaves nothing running).
struct Instance {
    served: Option<Served>,
    log: PathBuf,
}

impl Instance {
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.served().proxy)
    }

    fn admin_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.served().admin)
    }

    fn served(&self) -> &Served {
        self.served.as_ref().expect("running")
    }

    /// `GET /` with a token for `subject`.
    async fn get_as(&self, subject: &str) -> reqwest::Result<reqwest::Response> {
        client()
            .get(self.url("/"))
            .bearer_auth(token(subject))
            .send()
            .await
    }

    /// `/readyz`: its status and body.
    async fn readyz(&self) -> (u16, Value) {
        let r = client()
            .get(self.admin_url("/readyz"))
            .send()
            .await
            .expect("readyz answers");
        let status = r.status().as_u16();
        (status, r.json().await.expect("readyz is JSON"))
    }

    async fn metrics(&self) -> String {
        let r = client().get(self.admin_url("/metrics")).send().await;
        match r {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(e) => e.to_string(),
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its stderr once it holds `text` (the log is written off the request's thread).
    async fn log_showing(&self, text: &str) -> String {
        eventually(&format!("a log line with `{text}`"), || async {
            let log = self.log();
            if log.contains(text) {
                Ok(log)
            } else {
                Err(log)
            }
        })
        .await
    }

    /// `/metrics` once it has a line starting with `prefix` and ending with `value`.
    async fn metric(&self, prefix: &str, value: &str) {
        eventually(&format!("{prefix} {value}"), || async {
            let text = self.metrics().await;
            let line = text.lines().find(|l| l.starts_with(prefix));
            match line {
                Some(l) if l.ends_with(&format!(" {value}")) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if let Some(s) = self.served.take() {
            s.kill();
        }
    }
}

/// `n` interlingua processes on one config (each with its own data directory), whose one route
/// `main` takes `/` to `upstream` with `route_settings`, and `[limits]` holding `limits`.
fn fleet(
    n: usize,
    dir: &tempfile::TempDir,
    upstream: &Upstream,
    route: &str,
    limits: &str,
) -> Vec<Instance> {
    (0..n)
        .map(|i| {
            let own = dir.path().join(format!("instance{i}"));
            std::fs::create_dir_all(&own).expect("instance dir");
            let text = format!(
                "[server]\ndata_dir = \"{}\"\nthreads = 2\n\n\
                 [admin]\naddress = \"127.0.0.1:0\"\n\n\
                 [[listeners]]\naddress = \"127.0.0.1:0\"\n\n\
                 [limits]\n{limits}\n\n{}\n\
                 [[upstreams]]\nname = \"up\"\naddress = \"{}\"\n\n\
                 [[routes]]\nname = \"main\"\nmatch = {{ path_prefix = \"/\" }}\nupstream = \"up\"\n{route}\n",
                own.join("data").display(),
                auth_table(),
                upstream.addr,
            );
            let config = own.join("interlingua.toml");
            std::fs::write(&config, text).expect("write the config");
            let log = own.join("stderr.log");
            let file = std::fs::File::create(&log).expect("log file");
            Instance {
                served: Some(serve(&config, Stdio::from(file))),
                log,
            }
        })
        .collect()
}

/// A Redis, an upstream, and `n` instances sharing the Redis with `[limits]` holding `extra`
/// too; the directory holds their files.
struct Setup {
    fleet: Vec<Instance>,
    upstream: Upstream,
    redis: Redis,
    _dir: tempfile::TempDir,
}

async fn setup(n: usize, route: &str, extra: &str) -> Setup {
    let redis = Redis::start().expect("redis-server starts");
    let upstream = Upstream::ok().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let limits = format!("redis = \"{}\"\n{extra}", redis.url());
    Setup {
        fleet: fleet(n, &dir, &upstream, route, &limits),
        upstream,
        redis,
        _dir: dir,
    }
}

/// One instance limiting each subject to 10/s, waiting 50 ms at most on Redis.
async fn one_instance(extra: &str) -> Setup {
    let limits = format!("redis_timeout = \"50ms\"\n{extra}");
    setup(
        1,
        "auth = true\nrate_limit = { per_subject = \"10/s\" }",
        &limits,
    )
    .await
}

/// Sends requests as fast as `clients` loops can, each loop on instance `i % n`, for [`RUN`];
/// returns how many were answered 200 and the time from the first send to the last answer.
/// Anything but 200 and 429 fails the test.
async fn hammer(instances: &[Instance], clients: usize, bearer: Option<&str>) -> (usize, Duration) {
    let allowed = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut loops = Vec::new();
    for c in 0..clients {
        let url = instances[c % instances.len()].url("/");
        let allowed = allowed.clone();
        let auth = bearer.map(token);
        loops.push(tokio::spawn(async move {
            let http = client();
            while started.elapsed() < RUN {
                let mut req = http.get(&url);
                if let Some(t) = &auth {
                    req = req.bearer_auth(t);
                }
                let status = req.send().await.expect("an answer").status().as_u16();
                match status {
                    200 => {
                        allowed.fetch_add(1, Ordering::Relaxed);
                    }
                    429 => {}
                    other => panic!("status {other}"),
                }
            }
        }));
    }
    for l in loops {
        l.await.expect("a client loop");
    }
    (allowed.load(Ordering::Relaxed), started.elapsed())
}

/// Whether `allowed` is within 10 % of `rate`/s over `elapsed` plus `burst`.
fn assert_near(allowed: usize, rate: f64, burst: f64, elapsed: Duration, what: &str) {
    let expected = rate * elapsed.as_secs_f64() + burst;
    let off = (allowed as f64 - expected).abs() / expected;
    println!("{what}: {allowed} allowed, expected {expected:.1}");
    assert!(
        off <= 0.10,
        "{what}: {allowed} allowed, expected {expected:.1} (10/s × {:.2} s + burst): {:.1} % off",
        elapsed.as_secs_f64(),
        off * 100.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_subject_limit_holds_across_three_instances_sharing_redis() {
    let s = setup(
        3,
        "auth = true\nrate_limit = { per_subject = \"10/s, burst 5\" }",
        "",
    )
    .await;
    let (allowed, elapsed) = hammer(&s.fleet, 6, Some("alice")).await;
    assert_near(allowed, 10.0, 5.0, elapsed, "alice over three instances");
    assert_eq!(
        s.upstream.seen().len(),
        allowed,
        "only allowed requests went upstream"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_route_limit_holds_across_three_instances_sharing_redis() {
    let s = setup(3, "rate_limit = { route = \"10/s, burst 5\" }", "").await;
    let (allowed, elapsed) = hammer(&s.fleet, 6, None).await;
    assert_near(
        allowed,
        10.0,
        5.0,
        elapsed,
        "the route over three instances",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_redis_local_fallback_limits_each_instance_alone_and_says_so() {
    let mut s = setup(
        3,
        "auth = true\nrate_limit = { per_subject = \"10/s, burst 5\" }",
        "on_redis_error = \"local\"",
    )
    .await;
    let (status, ready) = s.fleet[0].readyz().await;
    assert_eq!(
        (status, &ready["status"], &ready["redis"]["status"]),
        (200, &"ready".into(), &"ok".into()),
        "{ready}"
    );

    s.redis.stop();
    let (allowed, elapsed) = hammer(&s.fleet, 6, Some("bob")).await;
    // Each instance allows 10/s and its own burst: three times the fleet's limit.
    assert_near(allowed, 30.0, 15.0, elapsed, "bob, each instance alone");
    for i in &s.fleet {
        i.metric("interlingua_limit_redis_up ", "0").await;
        let log = i
            .log_showing("Redis is unreachable: each instance applies its own rate limits")
            .await;
        assert_eq!(
            log.matches("Redis is unreachable").count(),
            1,
            "one line per outage, not per request:\n{log}"
        );
    }
    let metrics = s.fleet[0].metrics().await;
    let fallbacks: usize = metrics
        .lines()
        .find_map(|l| l.strip_prefix("interlingua_limit_redis_fallbacks_total{mode=\"local\"} "))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no local fallbacks counted:\n{metrics}"));
    assert!(fallbacks > 0);
    let (status, ready) = s.fleet[0].readyz().await;
    assert_eq!(status, 200, "{ready}");
    assert_eq!(ready["status"], "degraded");
    assert_eq!(ready["redis"]["status"], "unreachable");
    assert_eq!(ready["redis"]["on_redis_error"], "local");

    // Back: the limit is the fleet's again, and each instance says so once.
    s.redis.restart().expect("redis-server restarts");
    let http = client();
    for i in &s.fleet {
        // A request makes the instance try Redis again (at most one probe per 250 ms).
        eventually("Redis back", || async {
            let _ = http
                .get(i.url("/"))
                .bearer_auth(token("carol"))
                .send()
                .await;
            if i.log().contains("Redis is reachable again") {
                Ok(())
            } else {
                Err("not yet")
            }
        })
        .await;
        i.metric("interlingua_limit_redis_up ", "1").await;
    }
    let (allowed, elapsed) = hammer(&s.fleet, 6, Some("dave")).await;
    assert_near(allowed, 10.0, 5.0, elapsed, "dave, shared again");
    for i in &s.fleet {
        let log = i.log();
        assert_eq!(log.matches("Redis is reachable again").count(), 1, "{log}");
        assert_eq!(log.matches("Redis is unreachable").count(), 1, "{log}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_redis_deny_refuses_with_503_and_the_instance_is_not_ready() {
    let mut s = one_instance("on_redis_error = \"deny\"").await;
    let one = &s.fleet[0];
    let get = || one.get_as("erin");
    assert_eq!(get().await.unwrap().status(), 200);

    s.redis.stop();
    let refused = get().await.unwrap();
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["retry-after"], "1");
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "limits_unavailable", "{body}");
    let keys: Vec<&str> = body["error"]
        .as_object()
        .map(|o| o.keys().map(String::as_str).collect())
        .unwrap_or_default();
    assert_eq!(keys, ["code", "message", "request_id"], "{body}");
    assert_eq!(
        body["error"]["message"],
        "rate limits cannot be checked right now; retry later"
    );
    one.metric(
        "interlingua_limit_redis_fallbacks_total{mode=\"deny\"}",
        "1",
    )
    .await;
    one.log_showing("Redis is unreachable: requests to rate-limited routes are refused (503)")
        .await;
    let (status, ready) = one.readyz().await;
    assert_eq!(status, 503, "{ready}");
    assert_eq!(ready["status"], "not_ready");
    assert_eq!(ready["redis"]["status"], "unreachable");
    assert_eq!(ready["redis"]["on_redis_error"], "deny");

    s.redis.restart().expect("redis-server restarts");
    eventually("requests allowed again", || async {
        match get().await {
            Ok(r) if r.status() == 200 => Ok(()),
            Ok(r) => Err(r.status().to_string()),
            Err(e) => Err(e.to_string()),
        }
    })
    .await;
    assert_eq!(one.readyz().await.0, 200);
    assert_eq!(
        s.upstream.seen().len(),
        2,
        "the refused requests never went upstream"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_hangs_never_hangs_a_request() {
    let s = one_instance("").await;
    let one = &s.fleet[0];
    let get = || one.get_as("gina");
    assert_eq!(get().await.unwrap().status(), 200);
    s.redis.pause();
    // The client's own timeout is 20 s: a request waiting on the frozen Redis would fail here.
    for _ in 0..3 {
        let started = Instant::now();
        assert_eq!(get().await.unwrap().status(), 200);
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }
    one.log_showing("Redis is unreachable: each instance applies its own rate limits")
        .await;
    let (status, ready) = one.readyz().await;
    assert_eq!(
        (status, &ready["status"]),
        (200, &"degraded".into()),
        "{ready}"
    );
    s.redis.resume();
    eventually("Redis answering again", || async {
        let _ = get().await;
        match one.readyz().await {
            (200, r) if r["status"] == "ready" => Ok(()),
            (_, r) => Err(r.to_string()),
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_through_redis_has_the_same_headers_as_a_local_one() {
    let route = "auth = true\nrate_limit = { per_subject = \"1/m, burst 2\" }";
    let shared = setup(1, route, "").await;
    let local_dir = tempfile::tempdir().unwrap();
    // `[limits]` without `redis`: the per-instance limiter alone.
    let local = fleet(1, &local_dir, &shared.upstream, route, "");
    let http = client();
    let mut heads = Vec::new();
    for i in [&shared.fleet[0], &local[0]] {
        let get = || http.get(i.url("/")).bearer_auth(token("frank")).send();
        assert_eq!(get().await.unwrap().status(), 200);
        assert_eq!(get().await.unwrap().status(), 200);
        let refused = get().await.unwrap();
        assert_eq!(refused.status(), 429);
        let h = refused.headers();
        heads.push(
            ["retry-after", "ratelimit-policy", "ratelimit"]
                .map(|name| h[name].to_str().unwrap().to_string()),
        );
        let body: Value = refused.json().await.unwrap();
        assert_eq!(body["error"]["code"], "rate_limited");
    }
    assert_eq!(heads[0], heads[1]);
    assert_eq!(
        heads[0],
        ["60", "\"subject\";q=1;w=60", "\"subject\";r=0;t=60"].map(String::from)
    );
}
