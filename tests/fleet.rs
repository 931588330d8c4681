//! Several instances, one truth: three `interlingua serve` processes on one PostgreSQL (and one
//! Redis for their rate limits), 200 concurrent clients spread over them creating and polling
//! paid tasks (a Nevermined front over a MIP-003 back) against a balance that covers only some,
//! while one instance, then another, is SIGKILLed mid-run and restarted. At the end the money and
//! the tasks must add up exactly: nothing charged twice, nothing lost, nothing overdrawn.

mod common;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::money::{paid_config, paid_route};
use common::process::{interlingua, serve, Served};
use common::secrets::token;
use common::wait::eventually;
use common::{client, sample_agent_on};
use samples::Clock;
use serde_json::{json, Value};
use store::{Account, Leases, Location, Migrations, TaskQuery};
use testkit::postgres::Postgres;
use testkit::redis::Redis;

const DID: &str = "did:nv:0000000000000000000000000000000000000000000000000000000000000003";
const CLIENTS: usize = 200;
/// What the one subject may spend: fewer tasks than the clients ask for.
const BALANCE: i64 = 120;
/// The jobs' length on the agent's clock, which the test moves when it wants them done.
const WORK: Duration = Duration::from_millis(300);

/// The three instances' config: one route (1 credit held and captured per task), PostgreSQL for
/// the store with 2 s leases (a killed instance's tasks are taken over within seconds), and
/// Redis for a per-subject limit too high to refuse anything here (it is shared, not tested).
fn fleet_config(agent: SocketAddr, pg: &str, redis: &str, data_dir: &Path) -> String {
    let route = paid_route(
        "paid",
        "/",
        "mip",
        "nevermined",
        "mip003",
        "rate_limit = { per_subject = \"100000/s\" }",
    );
    paid_config(&format!(
        "[store]\nurl = \"{pg}\"\nlease_ttl = \"2s\"\n\n[limits]\nredis = \"{redis}\"\n\n\
         [[upstreams]]\nname = \"mip\"\naddress = \"{agent}\"\nread_timeout = \"5s\"\n{route}"
    ))
    .replace("{data_dir}", &data_dir.display().to_string())
}

/// The running instances, by slot; a slot is empty while its instance is dead.
struct Fleet {
    config: PathBuf,
    slots: Vec<parking_lot::Mutex<Option<Served>>>,
    proxies: Vec<parking_lot::Mutex<Option<SocketAddr>>>,
}

impl Fleet {
    fn start(config: PathBuf, n: usize) -> Arc<Fleet> {
        let fleet = Fleet {
            config,
            slots: (0..n).map(|_| parking_lot::Mutex::new(None)).collect(),
            proxies: (0..n).map(|_| parking_lot::Mutex::new(None)).collect(),
        };
        for i in 0..n {
            fleet.restart(i);
        }
        Arc::new(fleet)
    }

    fn restart(&self, i: usize) {
        let served = serve(&self.config, Stdio::null());
        *self.proxies[i].lock() = Some(served.proxy);
        *self.slots[i].lock() = Some(served);
    }

    /// SIGKILL: no graceful anything, its leases left to run out.
    fn kill(&self, i: usize) {
        *self.proxies[i].lock() = None;
        if let Some(served) = self.slots[i].lock().take() {
            served.kill();
        }
    }

    /// The live instances' proxy addresses, starting from slot `from`.
    fn live_from(&self, from: usize) -> Vec<SocketAddr> {
        let n = self.proxies.len();
        (0..n)
            .filter_map(|k| *self.proxies[(from + k) % n].lock())
            .collect()
    }

    fn admins(&self) -> Vec<SocketAddr> {
        self.slots
            .iter()
            .filter_map(|s| s.lock().as_ref().map(|s| s.admin))
            .collect()
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for i in 0..self.slots.len() {
            self.kill(i);
        }
    }
}

/// Sends `request` to the live instances from slot `from` on until one answers: a client of a
/// load balancer that retries a refused connection elsewhere. `None` when none answered.
async fn to_any(
    fleet: &Fleet,
    from: usize,
    request: impl Fn(SocketAddr) -> reqwest::RequestBuilder,
) -> Option<reqwest::Response> {
    for _ in 0..50 {
        for addr in fleet.live_from(from) {
            if let Ok(resp) = request(addr).send().await {
                return Some(resp);
            }
        }
        // Every instance was down for a moment (between a kill and its restart).
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// One PostgreSQL database, one Redis, a MIP-003 agent on a clock the test moves, and the
/// instances' config file (leases of `lease_ttl`), with `balance` credits granted to the subject.
struct Scene {
    _pg: Postgres,
    pg_url: String,
    _redis: Redis,
    clock: Clock,
    _dir: tempfile::TempDir,
    file: PathBuf,
}

impl Scene {
    async fn new(database: &str, lease_ttl: &str, balance: i64) -> Scene {
        let pg = Postgres::start();
        let pg_url = pg.database(database);
        let redis = Redis::start().expect("Redis starts");
        let clock = Clock::manual();
        let agent = sample_agent_on(samples::mip003::serve, WORK, &clock).await;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("interlingua.toml");
        let text = fleet_config(agent, &pg_url, &redis.url(), &dir.path().join("data")).replace(
            "lease_ttl = \"2s\"",
            &format!("lease_ttl = \"{lease_ttl}\""),
        );
        std::fs::write(&file, text).unwrap();
        let granted = interlingua()
            .args(["credits", "grant", "--plan", "gold", "--subject", "fleet"])
            .args([
                "--amount",
                &balance.to_string(),
                "-c",
                file.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        assert!(
            granted.status.success(),
            "{}",
            String::from_utf8_lossy(&granted.stderr)
        );
        Scene {
            _pg: pg,
            pg_url,
            _redis: redis,
            clock,
            _dir: dir,
            file,
        }
    }

    /// The test's own view of the store, read beside the instances.
    async fn observer(&self) -> Arc<dyn store::TaskStore> {
        let location = Location::Postgres {
            url: self.pg_url.clone(),
            password: None,
            pool_max: 4,
        };
        store::open(&location, Leases::default(), Migrations::Require)
            .await
            .unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_instances_two_killed_one_truth() {
    let scene = Scene::new("fleet", "2s", BALANCE).await;
    let observer = scene.observer().await;
    let account = Account::new("gold", "fleet");

    let fleet = Fleet::start(scene.file.clone(), 3);
    // No overdraft at any moment: sampled while everything runs.
    let running = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (observer, account, running) = (observer.clone(), account.clone(), running.clone());
        tokio::spawn(async move {
            let mut samples = 0;
            while running.load(Ordering::Relaxed) {
                let b = observer.balance(&account).await.unwrap();
                assert!(b.available() >= 0 && b.held >= 0, "overdrawn: {b:?}");
                assert_eq!(b.granted, BALANCE, "{b:?}");
                samples += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            samples
        })
    };

    // Phase 1: 200 clients create at once, spread over the three; instance 1 is killed once a
    // third of them have been answered, and restarted.
    let answered = Arc::new(AtomicUsize::new(0));
    let bearer = token("fleet");
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let (fleet, answered, bearer) = (fleet.clone(), answered.clone(), bearer.clone());
            tokio::spawn(async move {
                let resp = to_any(&fleet, i % 3, |addr| {
                    client()
                        .post(format!("http://{addr}/api/v1/agents/{DID}/tasks"))
                        .bearer_auth(&bearer)
                        .json(&json!({"input_query": format!("client {i}")}))
                })
                .await
                .expect("some instance answers");
                let status = resp.status().as_u16();
                let body: Value = resp.json().await.unwrap_or(Value::Null);
                answered.fetch_add(1, Ordering::SeqCst);
                (status, body)
            })
        })
        .collect();
    eventually("a third of the creates answered", || async {
        let n = answered.load(Ordering::SeqCst);
        if n >= CLIENTS / 3 {
            Ok(())
        } else {
            Err(n)
        }
    })
    .await;
    fleet.kill(1);
    fleet.restart(1);
    let mut accepted = Vec::new();
    let mut refused = 0;
    for c in clients {
        match c.await.unwrap() {
            (201, body) => accepted.push(
                body["task"]["task_id"]
                    .as_str()
                    .expect("a created task's id")
                    .to_string(),
            ),
            (402, _) => refused += 1,
            (status, body) => panic!("unexpected {status}: {body}"),
        }
    }
    assert!(
        accepted.len() as i64 <= BALANCE,
        "{} accepted",
        accepted.len()
    );
    assert!(refused > 0, "the balance covers only some");

    // Phase 2: every accepted task polled through the instances; instance 2 killed mid-polls and
    // restarted. The jobs still stand still on the agent's clock.
    let polls: Vec<_> = accepted
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let (fleet, bearer, id) = (fleet.clone(), bearer.clone(), id.clone());
            tokio::spawn(async move {
                for round in 0..3 {
                    let resp = to_any(&fleet, i + round, |addr| {
                        client()
                            .get(format!("http://{addr}/api/v1/agents/{DID}/tasks/{id}"))
                            .bearer_auth(&bearer)
                    })
                    .await
                    .expect("some instance answers");
                    assert_eq!(resp.status(), 200, "task {id}");
                }
            })
        })
        .collect();
    fleet.kill(2);
    fleet.restart(2);
    for p in polls {
        p.await.unwrap();
    }
    // Every accepted task holds its credit; so may a task whose create reached the agent through
    // the killed instance but whose answer never reached its client (until it ends).
    let held = observer.balance(&account).await.unwrap().held;
    assert!(
        (accepted.len() as i64..=BALANCE).contains(&held),
        "{held} held for {} accepted tasks",
        accepted.len()
    );

    // Phase 3: the jobs finish. No client polls any more: the instances' watchers (among them the
    // ones that took over the killed instances' leases) end every task.
    scene.clock.advance(WORK);
    let settled = eventually("every task to end", || async {
        let unfinished = observer.unfinished().await.unwrap();
        let b = observer.balance(&account).await.unwrap();
        if unfinished.is_empty() && b.held == 0 {
            Ok(b)
        } else {
            Err(format!("{} unfinished, {b:?}", unfinished.len()))
        }
    })
    .await;
    running.store(false, Ordering::Relaxed);
    let samples = sampler.await.unwrap();
    assert!(samples > 0);

    // granted = captured + available, held = 0, and the ledger agrees with itself.
    assert_eq!(settled.granted, BALANCE);
    assert_eq!(settled.held, 0);
    assert_eq!(
        settled.captured + settled.available(),
        BALANCE,
        "{settled:?}"
    );
    assert_eq!(observer.recompute(&account).await.unwrap(), settled);

    // Every accepted create is durable and completed, captured once.
    let (tasks, total) = observer
        .search(&TaskQuery {
            page: 1,
            page_size: 1000,
            ..TaskQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(tasks.len() as u64, total);
    let by_id: HashMap<&str, &mapping::task::Task> =
        tasks.iter().map(|t| (t.id.as_str(), t)).collect();
    for id in &accepted {
        // Nevermined shows interlingua's id as `task-<id>`.
        let own = id.strip_prefix("task-").unwrap_or(id);
        let task = by_id.get(own).unwrap_or_else(|| panic!("{id} lost"));
        assert_eq!(task.status.name(), "completed", "{id}: {:?}", task.reason);
    }
    let rows = observer.history(&account, 100_000).await.unwrap();
    let mut captured = HashSet::new();
    for r in rows.iter().filter(|r| r.kind == "capture") {
        assert!(
            captured.insert((r.task_id.clone(), r.step_id.clone())),
            "step captured twice: {r:?}"
        );
    }
    let completed = tasks
        .iter()
        .filter(|t| t.status.name() == "completed")
        .count();
    assert_eq!(captured.len(), completed);
    assert_eq!(settled.captured, completed as i64);
    // Tasks no client heard of (a create cut off by a kill) either completed or failed as
    // interrupted, their holds released; none is left between.
    for t in &tasks {
        assert!(
            t.status.is_terminal(),
            "{} is still {}",
            t.id,
            t.status.name()
        );
    }

    // The killed instances' tasks were taken over by live ones (their leases ran out).
    let mut takeovers = 0;
    for admin in fleet.admins() {
        takeovers += metric(admin, "interlingua_lease_takeovers_total").await;
    }
    assert!(takeovers > 0, "no instance took over a killed one's tasks");
    eprintln!(
        "fleet: {} accepted, {refused} refused, {} tasks stored ({completed} completed), \
         {takeovers} taken over, {samples} balance samples, balance {settled:?}",
        accepted.len(),
        tasks.len()
    );
}

/// The metric's value in an instance's `/metrics` (0 when absent).
async fn metric(admin: SocketAddr, name: &str) -> u64 {
    let text = client()
        .get(format!("http://{admin}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_instance_hands_its_tasks_to_another() {
    // Leases of 6 s, claimed every 2 s: a hand-back is claimed as such, not taken over.
    let scene = Scene::new("handover", "6s", 10).await;
    let first = serve(&scene.file, Stdio::null());
    let second = serve(&scene.file, Stdio::null());
    let bearer = token("fleet");
    for i in 0..4 {
        let resp = client()
            .post(format!("http://{}/api/v1/agents/{DID}/tasks", first.proxy))
            .bearer_auth(&bearer)
            .json(&json!({"input_query": format!("handed over {i}")}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 201);
    }
    // SIGTERM: a graceful stop, which hands the four leases back.
    let mut first = first;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(first.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(first.child.wait().unwrap().success());
    scene.clock.advance(WORK);
    let observer = scene.observer().await;
    let account = Account::new("gold", "fleet");
    let settled = eventually("the second instance to end the tasks", || async {
        let b = observer.balance(&account).await.unwrap();
        if b.held == 0 && observer.unfinished().await.unwrap().is_empty() {
            Ok(b)
        } else {
            Err(format!("{b:?}"))
        }
    })
    .await;
    assert_eq!((settled.captured, settled.available()), (4, 6));
    // Claimed as handed back, not taken over from a lease that ran out.
    assert_eq!(
        metric(second.admin, "interlingua_lease_takeovers_total").await,
        0
    );
    second.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polls_of_one_task_through_two_instances_make_one_call_to_the_agent() {
    let pg = Postgres::start();
    let pg_url = pg.database("coalesce");
    let agent = common::forever_running_agent().await;
    // The watchers' first look is an hour away: every call the agent sees is a client's poll.
    let text = common::config(
        "",
        &format!(
            "[store]\nurl = \"{pg_url}\"\n\n\
             [[upstreams]]\nname = \"up\"\naddress = \"{}\"\n\n\
             [[routes]]\nname = \"coalesced\"\nmatch = {{ path_prefix = \"/c\" }}\nupstream = \"up\"\n\
             front = \"mip003\"\nback = \"mip003\"\nmin_refresh = \"1h\"\n\
             poll_interval = \"1h\"\npoll_max_interval = \"1h\"\n",
            agent.addr
        ),
    );
    let (one, two) = (common::Proxy::start(&text), common::Proxy::start(&text));
    let http = client();
    let resp = http
        .post(one.url("/c/start_job"))
        .json(
            &json!({"identifier_from_purchaser": "aabbccddeeff0011", "input_data": {"text": "x"}}),
        )
        .send()
        .await
        .unwrap();
    let (status, body) = common::status_and_json(resp).await;
    assert_eq!(status, 200, "{body}");
    let job = body["job_id"].as_str().expect("a job id").to_string();
    let polls = (0..20).map(|i| {
        let url = [&one, &two][i % 2].url(&format!("/c/status?job_id={job}"));
        let http = http.clone();
        async move {
            let (status, body) = common::status_and_json(http.get(url).send().await.unwrap()).await;
            assert_eq!(
                (status, body["status"].as_str()),
                (200, Some("running")),
                "{body}"
            );
        }
    });
    futures_util::future::join_all(polls).await;
    let status_calls = agent
        .seen()
        .iter()
        .filter(|s| s.target.starts_with("/status"))
        .count();
    // Each instance alone would make one call: two here without the store's record.
    assert_eq!(
        status_calls, 1,
        "twenty polls through two instances: one call"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_postgresql_the_store_s_requests_get_503_and_passthrough_goes_on() {
    let pg = Postgres::start();
    let pg_url = pg.database("gone");
    let agent = common::forever_running_agent().await;
    let proxy = common::Proxy::start(&common::config(
        "",
        &format!(
            "[store]\nurl = \"{pg_url}\"\n\n\
             [[upstreams]]\nname = \"up\"\naddress = \"{}\"\n\n\
             [[routes]]\nname = \"translated\"\nmatch = {{ path_prefix = \"/m\" }}\nupstream = \"up\"\n\
             front = \"mip003\"\nback = \"mip003\"\n\n\
             [[routes]]\nname = \"pass\"\nmatch = {{ path_prefix = \"/p\" }}\nupstream = \"up\"\n",
            agent.addr
        ),
    ));
    let http = client();
    let start = || {
        http.post(proxy.url("/m/start_job")).json(
            &json!({"identifier_from_purchaser": "aabbccddeeff0011", "input_data": {"text": "x"}}),
        )
    };
    assert_eq!(start().send().await.unwrap().status(), 200);

    pg.stop();
    let resp = start().send().await.unwrap();
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["retry-after"], "1");
    let body = resp.text().await.unwrap();
    assert!(body.contains("PostgreSQL unreachable"), "{body}");
    let ready = http.get(proxy.admin_url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 503);
    let ready: Value = ready.json().await.unwrap();
    assert_eq!(
        ready["store"],
        json!({"backend": "postgres", "status": "unreachable"})
    );
    assert_eq!(ready["status"], "not_ready");
    // What needs no store is not held back by it.
    let passed = http.get(proxy.url("/p/anything")).send().await.unwrap();
    assert_eq!(passed.status(), 200);
}
