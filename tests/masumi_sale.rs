//! interlingua sells jobs on the Masumi network: a route whose front is `mip003` names the
//! operator's payment node as its seller (`payment.accept.masumi`), and a Masumi purchaser built
//! on masumi 1.2.0's own purchase client (`tests/peers/masumi_buyer.py`) buys jobs of agents that
//! know nothing of Masumi: the sample Nevermined agent, an a2a-sdk 1.3.0 agent, an MCP server's
//! tool. The payment node is a stand-in (`tests/peers/payment_standin.py`) that plays the
//! seller's node and the buyer's on one escrow and enforces what the real node enforces: the
//! payment request's times and rules, a lock of exactly the requested funds by the seller's key,
//! a result only from `FundsLocked`. Each test checks what the buyer saw, the calls the node
//! received, the sale's record and the ledger.

mod common;

use std::sync::Once;
use std::time::Duration;

use common::money::{paid_config, paid_route, Admin};
use common::peers::{mcp1_python, peers_python, run_script, Peer};
use common::secrets::{token, ADMIN_TOKEN};
use common::wait::eventually;
use common::{client, sample_agent, status_and_json, Proxy};
use serde_json::{json, Value};

/// The variable holding interlingua's key for its own (selling) node, and the buyer's key on
/// the buyer's node (the stand-in plays both).
const SELLER_ENV: &str = "INTERLINGUA_TEST_MASUMI_SELLER_KEY";
/// The variable holding interlingua's key as a purchaser (reselling a Masumi agent).
const BUYER_ENV: &str = "INTERLINGUA_TEST_MASUMI_BUYER_KEY";
const SELLER_KEY: &str = "seller-key";
const BUYER_KEY: &str = "buyer-key";
/// The route's agent in the registry: a policy id (56 hex digits) and an asset name.
const AGENT_ID: &str = "0c2912d4088fbc6a0c725dbe5233735821109bd741acfa9f1390235461636b6d65";
/// The Masumi agent interlingua resells, and its selling wallet's key.
/// The buyer's identifier, where a test names it.
const PURCHASER: &str = "aabbccddeeff0011";
const AGENT_BEHIND: &str = "0c2912d4088fbc6a0c725dbe5233735821109bd741acfa9f1390235461636b6d66";
const AGENT_VKEY: &str = "a9e7c0ffee0123456789abcdef0123456789abcdef0123456789abcd";
const DID: &str = "did:nv:5392e8cdc5addec2b7384072fda166d42a5d4ab96ae6d311f516b6b324f24cec";
/// How long a sample job takes.
const WORK: Duration = Duration::from_millis(300);

/// The agents a job can be sold for.
enum Agent {
    Nevermined,
    A2a,
    McpTool,
    /// The sample agent asked to fail (input `mode = "fail"`).
    Nothing,
    /// masumi 1.2.0's own agent, selling its jobs on the same node: interlingua resells them.
    Masumi,
}

struct World {
    standin: Peer,
    _agent: Option<Peer>,
    proxy: Proxy,
    /// The proxy's config text, to start it again on the same store.
    #[allow(dead_code)]
    text: String,
}

/// A world whose interlingua is stopped, its store kept.
struct Stopped {
    world: (Peer, Option<Peer>, String),
    data: tempfile::TempDir,
}

impl Stopped {
    /// Starts interlingua again on the store (on another port).
    fn start(self) -> World {
        let (standin, _agent, text) = self.world;
        let proxy = Proxy::start_in(&text, self.data);
        World {
            standin,
            _agent,
            proxy,
            text,
        }
    }

    /// The buyer's own node, as masumi's purchase client calls it: `path` with `body`.
    async fn buyer_node(&self, path: &str, body: Value) -> Value {
        let resp = client()
            .post(format!(
                "http://127.0.0.1:{}/api/v1{path}",
                self.world.0.port
            ))
            .header("token", BUYER_KEY)
            .json(&body)
            .send()
            .await
            .unwrap();
        let (status, answer) = status_and_json(resp).await;
        assert_eq!(status, 200, "{path}: {answer}");
        answer
    }
}

/// The selling node's part of a route: the stand-in at `port`, windows as given.
fn sell_table(port: u16, extra: &str) -> String {
    format!(
        r#"[routes.payment.accept.masumi]
url = "http://127.0.0.1:{port}/api/v1"
token_env = "{SELLER_ENV}"
network = "Preprod"
agent_identifier = "{AGENT_ID}"
max_run = "1h"
verdict_every = "200ms"
{extra}
"#
    )
}

fn standin() -> Peer {
    static ENV: Once = Once::new();
    ENV.call_once(|| {
        std::env::set_var(SELLER_ENV, SELLER_KEY);
        std::env::set_var(BUYER_ENV, BUYER_KEY);
    });
    Peer::start(
        &peers_python(),
        "payment_standin.py",
        &[],
        &[
            // A seller's payment locks only when a buyer's purchase locks it.
            ("STANDIN_LOCK_ON_POLL", "0".to_string()),
            ("STANDIN_API_KEY", SELLER_KEY.to_string()),
            ("STANDIN_PURCHASER_API_KEY", BUYER_KEY.to_string()),
        ],
    )
}

impl World {
    /// The stand-in and interlingua selling jobs of `agent` at `/`; `sell`: more of the
    /// selling table.
    async fn start(agent: Agent, sell: &str) -> World {
        World::start_on(agent, sell, "").await
    }

    /// [`World::start`] with `store` (a `[store]` table; empty: the default SQLite store).
    async fn start_on(agent: Agent, sell: &str, store: &str) -> World {
        let sell = sell.to_string();
        let standin = tokio::task::spawn_blocking(standin).await.unwrap();
        let node = format!("http://127.0.0.1:{}/api/v1", standin.port);
        let (upstream, back, vars, peer) = match agent {
            Agent::Nevermined | Agent::Nothing => {
                let nvm = sample_agent(samples::nevermined::serve, WORK).await;
                (
                    nvm.to_string(),
                    "nevermined",
                    format!("vars.nevermined = {{ agent_did = \"{DID}\" }}"),
                    None,
                )
            }
            Agent::A2a => {
                let peer = tokio::task::spawn_blocking(|| {
                    Peer::start(
                        &peers_python(),
                        "a2a_agent.py",
                        &["--work", "0.3", "--port", "0"],
                        &[],
                    )
                })
                .await
                .unwrap();
                (
                    format!("127.0.0.1:{}", peer.port),
                    "a2a",
                    String::new(),
                    Some(peer),
                )
            }
            Agent::Masumi => {
                let url = node.clone();
                let peer = tokio::task::spawn_blocking(move || {
                    Peer::start(
                        &peers_python(),
                        "masumi_agent.py",
                        &[],
                        &[
                            ("PAYMENT_SERVICE_URL", url),
                            ("PAYMENT_API_KEY", SELLER_KEY.to_string()),
                            ("SELLER_VKEY", AGENT_VKEY.to_string()),
                            ("AGENT_IDENTIFIER", AGENT_BEHIND.to_string()),
                            ("NETWORK", "Preprod".to_string()),
                            ("PEER_PAYMENT_POLL_SECONDS", "0.2".to_string()),
                            ("AGENT_WORK_SECONDS", "0.3".to_string()),
                        ],
                    )
                })
                .await
                .unwrap();
                // interlingua buys the agent's job on the same node, with its purchaser key.
                let pay = format!(
                    "[routes.payment.masumi]\nurl = \"{node}\"\ntoken_env = \"{BUYER_ENV}\"\nnetwork = \"Preprod\"\n"
                );
                (
                    format!("127.0.0.1:{}", peer.port),
                    "mip003",
                    pay,
                    Some(peer),
                )
            }
            Agent::McpTool => {
                let peer = tokio::task::spawn_blocking(|| {
                    Peer::start(&mcp1_python(), "mcp_server1.py", &["--work", "0.3"], &[])
                })
                .await
                .unwrap();
                (
                    format!("127.0.0.1:{}", peer.port),
                    "mcp",
                    // The SDK's Starlette mount serves at /mcp/; `slow` runs as an MCP task.
                    "vars.mcp = { tool = \"slow\", endpoint = \"/mcp/\" }".to_string(),
                    Some(peer),
                )
            }
        };
        let text = paid_config(&format!(
            r#"{store}
[[upstreams]]
name = "agent"
address = "{upstream}"
read_timeout = "10s"

[[routes]]
name = "sold"
match = {{ path_prefix = "/" }}
upstream = "agent"
front = "mip003"
back = "{back}"
poll_interval = "50ms"
poll_max_interval = "200ms"
min_refresh = "50ms"
sync_timeout = "10s"
{vars}
{}"#,
            sell_table(standin.port, &sell)
        ));
        let proxy = Proxy::start(&text);
        World {
            standin,
            _agent: peer,
            proxy,
            text,
        }
    }

    /// Stops interlingua and starts it again on the same store (on another port).
    async fn restart(self) -> World {
        self.stop().await.start()
    }

    /// Stops interlingua, keeping its store.
    async fn stop(self) -> Stopped {
        let World {
            standin,
            _agent,
            proxy,
            text,
        } = self;
        let data = proxy.stop_keeping_data().await;
        Stopped {
            world: (standin, _agent, text),
            data,
        }
    }

    /// Asks for a job with plain HTTP, no token: the start_job answer.
    async fn start_job(&self, input: &Value) -> Value {
        let body = json!({"identifier_from_purchaser": PURCHASER, "input_data": input});
        let (status, answer) = self.ask(&body).await;
        assert_eq!(status, 200, "{answer}");
        answer
    }

    /// `POST /start_job` with `body`, no token: the status and the answer.
    async fn ask(&self, body: &Value) -> (u16, Value) {
        let resp = client()
            .post(self.proxy.url("/start_job"))
            .json(body)
            .send()
            .await
            .unwrap();
        status_and_json(resp).await
    }

    /// masumi's purchase client pays for a job asked for before (`job`, its start_job answer)
    /// and follows it for at most `timeout` seconds.
    async fn pay_for(&self, job: &Value, input: Value, timeout: &str) -> Value {
        let job = job.to_string();
        self.buy_with(
            input,
            &[
                "--job",
                &job,
                "--identifier",
                PURCHASER,
                "--timeout",
                timeout,
            ],
        )
        .await
    }

    /// A sold job's status, as its buyer reads it (no token), once it is `status`.
    async fn status_is(&self, job: &str, status: &str) -> Value {
        let url = self.proxy.url(&format!("/status?job_id={job}"));
        eventually(&format!("the job to be {status}"), || async {
            let resp = client().get(&url).send().await.unwrap();
            let (code, body) = status_and_json(resp).await;
            if code == 200 && body["status"] == status {
                Ok(body)
            } else {
                Err(body)
            }
        })
        .await
    }

    fn node(&self) -> String {
        format!("http://127.0.0.1:{}/api/v1", self.standin.port)
    }

    fn standin_url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.standin.port)
    }

    async fn script(&self, script: Value) {
        let resp = client()
            .post(self.standin_url("/_config"))
            .json(&script)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
    }

    async fn standin_post(&self, path: &str, body: Value) -> Value {
        let resp = client()
            .post(self.standin_url(path))
            .json(&body)
            .send()
            .await
            .unwrap();
        let (status, body) = status_and_json(resp).await;
        assert_eq!(status, 200, "{path}: {body}");
        body
    }

    /// Every request the node received on `path` (below `/api/v1`, with or without a
    /// trailing slash), in order.
    async fn calls(&self, path: &str) -> Vec<Value> {
        let log: Value = client()
            .get(self.standin_url("/_log"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let want = format!("/api/v1{path}");
        log["requests"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["path"] == want || r["path"] == format!("{want}/"))
            .cloned()
            .collect()
    }

    /// The node's payment object for `reference`.
    async fn payment(&self, reference: &str) -> Value {
        let all: Value = client()
            .get(self.standin_url("/_payments"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        all["payments"][reference].clone()
    }

    /// masumi 1.2.0's purchase client buys a job of `input` (or only asks for it: `pay`
    /// false) and follows it to its end; what it printed.
    async fn buy(&self, input: Value, pay: bool) -> Value {
        self.buy_with(input, if pay { &[] } else { &["--no-pay"] })
            .await
    }

    /// [`World::buy`] with more of the buyer's arguments (`--job`, `--identifier`).
    async fn buy_with(&self, input: Value, extra: &[&str]) -> Value {
        let mut args = vec![
            "--agent".to_string(),
            self.proxy.url(""),
            "--node".to_string(),
            self.node(),
            "--token".to_string(),
            BUYER_KEY.to_string(),
            "--input".to_string(),
            input.to_string(),
            "--timeout".to_string(),
            "60".to_string(),
            "--poll".to_string(),
            "0.1".to_string(),
        ];
        args.extend(extra.iter().map(|a| a.to_string()));
        let ran = tokio::task::spawn_blocking(move || {
            run_script(
                &peers_python(),
                "masumi_buyer.py",
                &args,
                Duration::from_secs(90),
            )
        })
        .await
        .unwrap();
        let line = ran.stdout.lines().last().unwrap_or_default().to_string();
        serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("the buyer printed no JSON ({e}): {ran:?}"))
    }

    /// The admin API's GET `path`.
    async fn admin(&self, path: &str) -> Value {
        let resp = client()
            .get(self.proxy.admin_url(path))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap();
        let (status, body) = status_and_json(resp).await;
        assert_eq!(status, 200, "{path}: {body}");
        body
    }

    /// The task's Masumi sale, once it is in `state`.
    async fn sale_in(&self, task: &str, state: &str) -> Value {
        eventually(&format!("the sale to be {state}"), || async {
            let sales = self.admin(&format!("/tasks/{task}/sales")).await;
            let sale = sales["sales"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["rail"] == "masumi")
                .cloned()
                .unwrap_or(Value::Null);
            if sale["state"] == state {
                Ok(sale)
            } else {
                Err(sale)
            }
        })
        .await
    }

    /// The buyer account's ledger rows, oldest first: (kind, amount).
    async fn ledger(&self, subject: &str) -> Vec<(String, i64)> {
        let rows = self
            .admin(&format!(
                "/credits/history?plan=masumi:lovelace&subject={subject}"
            ))
            .await;
        rows["rows"]
            .as_array()
            .unwrap()
            .iter()
            .rev()
            .map(|r| {
                (
                    r["kind"].as_str().unwrap().to_string(),
                    r["amount"].as_i64().unwrap(),
                )
            })
            .collect()
    }
}

impl World {
    /// The node behaves as `script` says; masumi's client buys a job of `input`, which fails
    /// for its payment with `words` in its message: the job's id.
    async fn fails_for_payment(&self, script: Value, input: Value, words: &str) -> String {
        self.script(script).await;
        let bought = self.buy(input, true).await;
        assert_eq!(bought["final"]["status"], "failed", "{bought}");
        let job = bought["job_id"].as_str().unwrap().to_string();
        let task = self.admin(&format!("/tasks/{job}")).await;
        assert_eq!(task["task"]["reason"], "payment", "{task}");
        assert!(
            task["task"]["message"]
                .as_str()
                .is_some_and(|m| m.contains(words)),
            "{task}"
        );
        job
    }
}

impl World {
    /// The chain decides a sale whose job ended (the stand-in's `hook`: `/_withdraw`,
    /// `/_refund`): the sale reaches `state`, and the buyer's account has the rows of a lock,
    /// the task's end, and `last` (a capture, a revoke) of the whole amount.
    async fn decided(&self, job: &str, sale: &Value, hook: &str, state: &str, last: &str) {
        let amount = sale["amount"].as_i64().unwrap();
        let subject = sale["subject"].as_str().unwrap().to_string();
        let reference = sale["reference"].as_str().unwrap().to_string();
        let locked = [("grant", amount), ("hold", amount), ("release", amount)];
        assert_eq!(self.ledger(&subject).await, kinds(&locked));
        self.standin_post(hook, json!({"blockchainIdentifier": reference}))
            .await;
        self.sale_in(job, state).await;
        let mut rows = locked.to_vec();
        rows.push((last, amount));
        assert_eq!(self.ledger(&subject).await, kinds(&rows));
    }
}

/// A client polling a sold job's `/status` (`url`, no token) until it completes: its last
/// answer. Any other answer than 200, or a failure, fails the test.
fn poller(url: String) -> tokio::task::JoinHandle<Value> {
    tokio::spawn(async move {
        let http = client();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let (code, body) = status_and_json(http.get(&url).send().await.unwrap()).await;
            assert_eq!(code, 200, "{url} {body}");
            if body["status"] == "completed" {
                return body;
            }
            assert_ne!(body["status"], "failed", "{body}");
            assert!(tokio::time::Instant::now() < deadline, "{body}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
}

/// The statuses the buyer saw, in order.
fn statuses(bought: &Value) -> Vec<&str> {
    bought["statuses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect()
}

fn kinds(rows: &[(&str, i64)]) -> Vec<(String, i64)> {
    rows.iter().map(|(k, a)| (k.to_string(), *a)).collect()
}

/// A whole sale of `agent`'s job to masumi's purchase client: the buyer sees the job wait for
/// its lock, run and complete; the node made one payment request and took one result, whose
/// hash is the buyer's own hash of the result it read; the money: granted and held at the lock,
/// released at the end, captured when the node withdraws it.
async fn sold_to_a_masumi_buyer(agent: Agent, input: Value, result: &str) {
    let w = World::start(agent, "").await;
    let bought = w.buy(input.clone(), true).await;
    let start = &bought["start"];
    let job = bought["job_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no job: {bought}"))
        .to_string();
    let statuses = statuses(&bought);
    assert_eq!(statuses.last(), Some(&"completed"), "{bought}");
    let running = statuses.iter().position(|s| *s == "running");
    assert!(running.is_some(), "{bought}");
    assert!(
        !statuses[running.unwrap_or(0)..].contains(&"awaiting_payment"),
        "{bought}"
    );
    assert!(!statuses.contains(&"failed"), "{bought}");
    // What start_job answered is the node's payment request: its identifier, the selling
    // wallet's key, the input hash the buyer computes itself.
    let reference = start["blockchainIdentifier"].as_str().unwrap().to_string();
    let payment = w.payment(&reference).await;
    assert!(payment.is_object(), "{reference} on the node");
    assert_eq!(
        start["sellerVKey"],
        payment["SmartContractWallet"]["walletVkey"]
    );
    assert_eq!(start["agentIdentifier"], AGENT_ID);
    assert_eq!(start["input_hash"], bought["input_hash"]);
    assert_eq!(
        start["payByTime"].as_i64().unwrap().to_string(),
        payment["payByTime"].as_str().unwrap()
    );
    // One payment request, one result; its hash the buyer's.
    assert_eq!(w.calls("/payment").await.len(), 1);
    let submits = w.calls("/payment/submit-result").await;
    assert_eq!(submits.len(), 1);
    assert_eq!(
        submits[0]["body"]["submitResultHash"],
        bought["output_hash"]
    );
    assert!(
        bought["final"]["result"]
            .as_str()
            .is_some_and(|r| r.contains(result)),
        "{bought}"
    );
    let sale = w.sale_in(&job, "submitted").await;
    assert_eq!(sale["reference"], reference);
    assert_eq!(sale["result_hash"], bought["output_hash"]);
    assert_eq!(sale["input_hash"], bought["input_hash"]);
    assert!(
        sale["subject"].as_str().unwrap().starts_with("Preprod:"),
        "{sale}"
    );
    // The node withdraws the funds to the seller after unlockTime: captured on the task.
    w.decided(&job, &sale, "/_withdraw", "withdrawn", "capture")
        .await;
    let task = w.admin(&format!("/tasks/{job}")).await;
    assert_eq!(task["task"]["status"], "completed");
    // The operator sees the sale: the console's task page, the list of sales, a clean ledger.
    let (status, page) = Admin::new(&w.proxy)
        .console_page(&format!("tasks/{job}"))
        .await;
    assert_eq!(status, 200);
    for shown in [
        "Sold on Masumi",
        "data-state=\"withdrawn\"",
        &reference,
        "payByTime",
    ] {
        assert!(page.contains(shown), "{shown} in {page}");
    }
    let (status, list) = Admin::new(&w.proxy).console_page("sales").await;
    assert_eq!(status, 200);
    assert!(
        list.contains(&reference) && list.contains("withdrawn"),
        "{list}"
    );
    let all = w.admin("/sales").await;
    assert_eq!(all["sales"][0]["task_id"], job.as_str());
    assert_eq!(
        all["sales"][0]["times"]["payByTime"]["ms"],
        start["payByTime"]
    );
    assert_eq!(w.admin("/sales?open=true").await["sales"], json!([]));
    let verify = w.admin("/credits/verify").await;
    assert_eq!(verify["ok"], true, "{verify}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_masumi_buyer_pays_for_a_nevermined_agents_job() {
    sold_to_a_masumi_buyer(
        Agent::Nevermined,
        json!({"text": "hello masumi"}),
        "HELLO MASUMI",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_masumi_buyer_pays_for_an_a2a_sdk_agents_job() {
    sold_to_a_masumi_buyer(Agent::A2a, json!({"text": "hello a2a"}), "HELLO A2A").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_masumi_buyer_pays_for_an_mcp_tools_job() {
    sold_to_a_masumi_buyer(Agent::McpTool, json!({"n": 3}), "done 3").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_never_paid_fails_at_its_deadline_and_nothing_reaches_the_agent() {
    let w = World::start(
        Agent::Nothing,
        "pay_by = \"2s\"\nlock_grace = \"1s\"\nsubmit_result_by = \"2h\"",
    )
    .await;
    let bought = w.buy(json!({"text": "never paid"}), false).await;
    let job = bought["job_id"].as_str().unwrap().to_string();
    let statuses = statuses(&bought);
    assert_eq!(statuses, ["awaiting_payment", "failed"], "{bought}");
    let sale = w.sale_in(&job, "expired").await;
    assert!(
        sale["detail"]
            .as_str()
            .unwrap()
            .contains("did not lock the funds by payByTime"),
        "{sale}"
    );
    let task = w.admin(&format!("/tasks/{job}")).await;
    assert_eq!(task["task"]["reason"], "payment");
    assert!(task["task"]["upstream_id"].is_null(), "{task}");
    assert!(w.calls("/payment/submit-result").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_failing_after_payment_fails_the_job_and_submits_nothing() {
    let w = World::start(Agent::Nothing, "").await;
    let bought = w
        .buy(json!({"text": "will fail", "mode": "fail"}), true)
        .await;
    let job = bought["job_id"].as_str().unwrap().to_string();
    assert_eq!(bought["final"]["status"], "failed", "{bought}");
    assert!(w.calls("/payment/submit-result").await.is_empty());
    let sale = w.sale_in(&job, "locked").await;
    // The buyer's node takes the funds back after submitResultTime: revoked.
    w.decided(&job, &sale, "/_refund", "refunded", "revoke")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submit_refused_for_a_while_is_retried_then_made() {
    let w = World::start(Agent::Nevermined, "").await;
    w.script(json!({"submit_failures": 2})).await;
    let bought = w.buy(json!({"text": "retry the result"}), true).await;
    assert_eq!(bought["final"]["status"], "completed", "{bought}");
    let submits = w.calls("/payment/submit-result").await;
    assert_eq!(submits.len(), 3, "two 500s, then taken");
    assert!(submits
        .iter()
        .all(|s| s["body"]["submitResultHash"] == bought["output_hash"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_the_node_refuses_fails_the_job() {
    let w = World::start(Agent::Nevermined, "").await;
    w.fails_for_payment(
        json!({"submit_refusals": 1}),
        json!({"text": "refused result"}),
        "refused the result's hash",
    )
    .await;
    assert_eq!(w.calls("/payment/submit-result").await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_start_job_is_the_same_job_and_one_payment_request() {
    let w = World::start(Agent::Nevermined, "").await;
    let body =
        json!({"identifier_from_purchaser": "aabbccddeeff0011", "input_data": {"text": "once"}});
    let mut answers = Vec::new();
    for _ in 0..2 {
        let (status, answer) = w.ask(&body).await;
        assert_eq!(status, 200, "{answer}");
        answers.push(answer);
    }
    assert_eq!(answers[0]["job_id"], answers[1]["job_id"]);
    assert_eq!(
        answers[0]["blockchainIdentifier"],
        answers[1]["blockchainIdentifier"]
    );
    assert_eq!(w.calls("/payment").await.len(), 1);
    // Another identifier is another job.
    let other =
        json!({"identifier_from_purchaser": "aabbccddeeff0022", "input_data": {"text": "once"}});
    let (status, answer) = w.ask(&other).await;
    assert_eq!(status, 200, "{answer}");
    assert_ne!(answer["job_id"], answers[0]["job_id"]);
    assert_eq!(w.calls("/payment").await.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_job_the_node_cannot_serve_is_answered_with_the_nodes_reason() {
    let w = World::start(Agent::Nevermined, "").await;
    let body = |id: &str| json!({"identifier_from_purchaser": id, "input_data": {"text": "x"}});
    // Not hex: refused before the node is asked.
    let (status, answer) = w.ask(&body("not-a-hex-identifier")).await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer["detail"]
        .as_str()
        .unwrap()
        .contains("identifier_from_purchaser"));
    assert!(w.calls("/payment").await.is_empty());
    // The node refuses: its words, in MIP-003's error shape.
    w.script(json!({"refuse_payment_create": "Selling wallet not found"}))
        .await;
    let (status, answer) = w.ask(&body("aabbccddeeff0011")).await;
    assert_eq!(status, 502, "{answer}");
    assert!(
        answer["detail"]
            .as_str()
            .unwrap()
            .contains("Selling wallet not found"),
        "{answer}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_holder_on_a_selling_route_pays_credits_and_no_payment_request_is_made() {
    let standin = tokio::task::spawn_blocking(standin).await.unwrap();
    let nvm = sample_agent(samples::nevermined::serve, WORK).await;
    let vars = format!(
        "vars.nevermined = {{ agent_did = \"{DID}\" }}\n{}",
        sell_table(standin.port, "")
    );
    let rest = format!(
        "[[upstreams]]\nname = \"nvm\"\naddress = \"{nvm}\"\n{}",
        paid_route("sold", "/", "nvm", "mip003", "nevermined", &vars)
    );
    let proxy = Proxy::start(&paid_config(&rest));
    let admin = Admin::new(&proxy);
    admin.grant("alice", 10).await;
    let resp = client()
        .post(proxy.url("/start_job"))
        .bearer_auth(token("alice"))
        .json(&json!({"identifier_from_purchaser": "aabbccddeeff0011", "input_data": {"text": "credits"}}))
        .send()
        .await
        .unwrap();
    let (status, job) = status_and_json(resp).await;
    assert_eq!(status, 200, "{job}");
    // interlingua's placeholders, not a payment request.
    assert!(job["blockchainIdentifier"]
        .as_str()
        .unwrap()
        .starts_with("interlingua:"));
    let id = job["job_id"].as_str().unwrap().to_string();
    eventually("the job to complete", || async {
        let resp = client()
            .get(proxy.url(&format!("/status?job_id={id}")))
            .bearer_auth(token("alice"))
            .send()
            .await
            .unwrap();
        let (_, body) = status_and_json(resp).await;
        if body["status"] == "completed" {
            Ok(())
        } else {
            Err(body)
        }
    })
    .await;
    // The sample agent's two steps, at the route's price.
    admin.charged("alice", 10, 2).await;
    let log: Value = client()
        .get(format!("http://127.0.0.1:{}/_log", standin.port))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(log["requests"].as_array().unwrap().is_empty(), "{log}");
    // A buyer without a token does not read a token holder's job.
    let resp = client()
        .get(proxy.url(&format!("/status?job_id={id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_while_a_job_waits_for_its_lock_loses_nothing() {
    let w = World::start(Agent::Nevermined, "").await;
    let input = json!({"text": "wait for me"});
    let job = w.start_job(&input).await;
    let id = job["job_id"].as_str().unwrap().to_string();
    let w = w.restart().await;
    w.status_is(&id, "awaiting_payment").await;
    let bought = w.pay_for(&job, input, "60").await;
    assert_eq!(bought["final"]["status"], "completed", "{bought}");
    assert_eq!(w.calls("/payment").await.len(), 1);
    assert_eq!(w.calls("/payment/submit-result").await.len(), 1);
    w.sale_in(&id, "submitted").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_while_the_result_is_being_submitted_submits_it_once() {
    let w = World::start(Agent::Nevermined, "").await;
    // The node takes the result's hash, and its answer is held: interlingua stops meanwhile.
    w.script(json!({"submit_hold_ms": 3000})).await;
    let input = json!({"text": "submit once"});
    let job = w.start_job(&input).await;
    let id = job["job_id"].as_str().unwrap().to_string();
    let bought = w.pay_for(&job, input, "0.5").await;
    assert!(bought["job_id"].is_string(), "{bought}");
    eventually("the result's hash to reach the node", || async {
        match w.calls("/payment/submit-result").await.len() {
            1 => Ok(()),
            n => Err(n),
        }
    })
    .await;
    let sale = w.sale_in(&id, "submitting").await;
    let w = w.restart().await;
    w.script(json!({"submit_hold_ms": 0})).await;
    // The node shows the hash queued: the job completes, and nothing is submitted again.
    let done = w.status_is(&id, "completed").await;
    assert!(done["result"].is_string(), "{done}");
    let after = w.sale_in(&id, "submitted").await;
    assert_eq!(after["result_hash"], sale["result_hash"]);
    assert_eq!(w.calls("/payment/submit-result").await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_the_node_never_takes_fails_the_job_before_submit_result_time() {
    let w = World::start(Agent::Nevermined, "").await;
    // The node's submitResultTime 5 min 4 s after start_job: results are taken until 4 s from
    // now, and none is.
    let job = w
        .fails_for_payment(
            json!({"submit_result_ms": 304_000, "submit_failures": 1000}),
            json!({"text": "never taken"}),
            "submitResultTime",
        )
        .await;
    assert!(
        w.calls("/payment/submit-result").await.len() >= 2,
        "retried"
    );
    w.sale_in(&job, "locked").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reselling_route_is_one_purchase_at_each_end() {
    let w = World::start(Agent::Masumi, "").await;
    let bought = w.buy(json!({"text": "resold"}), true).await;
    assert_eq!(bought["final"]["status"], "completed", "{bought}");
    let statuses = statuses(&bought);
    let running = statuses.iter().position(|s| *s == "running").unwrap();
    assert!(
        !statuses[running..].contains(&"awaiting_payment"),
        "{bought}"
    );
    // The buyer bought interlingua's job: its payment request, never the agent's.
    let start = &bought["start"];
    assert_eq!(start["agentIdentifier"], AGENT_ID);
    assert_ne!(start["sellerVKey"], AGENT_VKEY);
    let ours = start["blockchainIdentifier"].as_str().unwrap().to_string();
    let job = bought["job_id"].as_str().unwrap().to_string();
    // interlingua bought the agent's job with the agent's own payment request.
    let task = w.admin(&format!("/tasks/{job}")).await;
    let purchase = &task["purchases"][0];
    assert_eq!(purchase["state"], "locked", "{task}");
    let theirs = purchase["reference"].as_str().unwrap().to_string();
    assert_ne!(theirs, ours);
    assert_eq!(task["task"]["payment"]["agentIdentifier"], AGENT_BEHIND);
    // Two payment requests on the node, each locked by its own purchase for its own funds.
    let all: Value = client()
        .get(w.standin_url("/_purchases"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let purchases = all["purchases"].as_object().unwrap();
    assert_eq!(purchases.len(), 2, "{all}");
    for reference in [&ours, &theirs] {
        let payment = w.payment(reference).await;
        assert!(payment["BuyerWallet"].is_object(), "{payment}");
        assert_eq!(
            purchases[reference.as_str()]["PaidFunds"],
            payment["RequestedFunds"],
            "{all}"
        );
    }
    assert_eq!(w.calls("/purchase").await.len(), 2);
    w.sale_in(&job, "submitted").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sold_job_polled_by_a_hundred_clients_at_once_is_submitted_and_booked_once() {
    let w = World::start(Agent::Nevermined, "").await;
    let input = json!({"text": "many eyes"});
    let job = w.start_job(&input).await;
    let id = job["job_id"].as_str().unwrap().to_string();
    let url = w.proxy.url(&format!("/status?job_id={id}"));
    // A hundred clients poll the job until it completes, while its buyer pays for it.
    let pollers: Vec<_> = (0..100).map(|_| poller(url.clone())).collect();
    let bought = w.pay_for(&job, input, "60").await;
    assert_eq!(bought["final"]["status"], "completed", "{bought}");
    for p in pollers {
        let seen = p.await.unwrap();
        assert_eq!(seen["result"], bought["final"]["result"]);
    }
    assert_eq!(w.calls("/payment").await.len(), 1);
    assert_eq!(w.calls("/payment/submit-result").await.len(), 1);
    let sale = w.sale_in(&id, "submitted").await;
    let amount = sale["amount"].as_i64().unwrap();
    let subject = sale["subject"].as_str().unwrap().to_string();
    assert_eq!(
        w.ledger(&subject).await,
        kinds(&[("grant", amount), ("hold", amount), ("release", amount)])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buyer_asking_for_a_refund_before_the_job_ran_fails_it_and_nothing_reaches_the_agent() {
    let w = World::start(Agent::Nothing, "").await;
    let input = json!({"text": "changed my mind"});
    let job = w.start_job(&input).await;
    let id = job["job_id"].as_str().unwrap().to_string();
    // While interlingua is away, the buyer locks the funds and asks for them back.
    let stopped = w.stop().await;
    let ms = |k: &str| Value::String(job[k].as_i64().unwrap().to_string());
    let reference = job["blockchainIdentifier"].clone();
    stopped
        .buyer_node(
            "/purchase",
            json!({
                "blockchainIdentifier": reference, "network": "Preprod",
                "sellerVkey": job["sellerVKey"], "agentIdentifier": job["agentIdentifier"],
                "identifierFromPurchaser": PURCHASER, "inputHash": job["input_hash"],
                "payByTime": ms("payByTime"), "submitResultTime": ms("submitResultTime"),
                "unlockTime": ms("unlockTime"),
                "externalDisputeUnlockTime": ms("externalDisputeUnlockTime"),
                "paymentType": "Web3CardanoV1",
            }),
        )
        .await;
    let resolve =
        json!({"blockchainIdentifier": reference, "network": "Preprod", "includeHistory": "false"});
    let locked = stopped
        .buyer_node("/purchase/resolve-blockchain-identifier", resolve)
        .await;
    assert_eq!(locked["data"]["onChainState"], "FundsLocked", "{locked}");
    stopped
        .buyer_node(
            "/purchase/request-refund",
            json!({"blockchainIdentifier": reference, "network": "Preprod"}),
        )
        .await;
    let w = stopped.start();
    let failed = w.status_is(&id, "failed").await;
    assert_eq!(failed["job_id"], id.as_str());
    let task = w.admin(&format!("/tasks/{id}")).await;
    assert_eq!(task["task"]["reason"], "payment", "{task}");
    assert_eq!(
        task["task"]["message"],
        "the buyer asked for a refund before the job ran"
    );
    assert!(task["task"]["upstream_id"].is_null(), "nothing ran: {task}");
    // The funds were locked, then the task ended: held and released, to be revoked when the
    // buyer's node takes them back.
    let sale = w.sale_in(&id, "locked").await;
    w.decided(&id, &sale, "/_refund", "refunded", "revoke")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_postgresql_sell_a_job_once() {
    let pg = testkit::postgres::Postgres::start();
    let store = format!("[store]\nurl = \"{}\"\n", pg.database("sold"));
    let w = World::start_on(Agent::Nevermined, "", &store).await;
    // A second instance on the same store: both sweep the sales, both answer the buyer.
    let other = Proxy::start(&w.text);
    let input = json!({"text": "two sellers"});
    let job = w.start_job(&input).await;
    let id = job["job_id"].as_str().unwrap().to_string();
    let pollers: Vec<_> = (0..40)
        .map(|i| poller([&w.proxy, &other][i % 2].url(&format!("/status?job_id={id}"))))
        .collect();
    let bought = w.pay_for(&job, input, "60").await;
    assert_eq!(bought["final"]["status"], "completed", "{bought}");
    for p in pollers {
        assert_eq!(p.await.unwrap()["result"], bought["final"]["result"]);
    }
    assert_eq!(w.calls("/payment").await.len(), 1);
    assert_eq!(w.calls("/payment/submit-result").await.len(), 1);
    let sale = w.sale_in(&id, "submitted").await;
    w.decided(&id, &sale, "/_withdraw", "withdrawn", "capture")
        .await;
}
