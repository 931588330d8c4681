//! interlingua pays agents that demand x402: a MIP-003 agent behind the official x402 SDK's
//! payment middleware (`tests/peers/x402_agent.py`, x402 2.25.0), whose `start_job` answers 402
//! until paid, settling through the SDK's own facilitator on a local anvil node in the tests'
//! EIP-3009 token (`tests/common/chain.rs`); and an A2A agent asking in band instead, as the A2A
//! x402 extension says (`tests/peers/x402_a2a_agent.py`: a2a-sdk 1.3.0's server, the SDK's
//! resource server verifying and settling). Clients of MIP-003, Nevermined, A2A and MCP fronts
//! spend credits as on any priced route; interlingua pays the agent from its wallet, within the
//! route's policy. What is asserted is what the chain, the facilitator, the cost ledger (admin
//! API) and the credit ledger say: exact balances, the settlement's transaction, no signature
//! at all for an offer outside the policy.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Once};

use common::chain::{Account, Chain, Facilitator, PaidAgent, NETWORK};
use common::money::{paid_config, paid_route, Admin};
use common::secrets::{token, ADMIN_TOKEN};
use common::wait::eventually;
use common::{client, status_and_json, Proxy};
use serde_json::{json, Value};

/// What one job of the agent costs: 0.01 of a 6-decimal token.
const PRICE: u128 = 10_000;
/// What interlingua's wallet holds before it pays.
const FUNDS: u128 = 1_000_000;
/// The variable holding interlingua's wallet key, as an operator's environment would.
const WALLET_ENV: &str = "INTERLINGUA_TEST_X402_WALLET";
const DID: &str = "did:nv:0000000000000000000000000000000000000000000000000000000000000007";
const PURCHASER: &str = "aabbccddeeff0011";

/// The variable holding the key of a wallet with nothing in it (a test of its own sets it).
const EMPTY_WALLET_ENV: &str = "INTERLINGUA_TEST_X402_EMPTY_WALLET";

/// What a route may pay, from which wallet.
struct Policy {
    key_env: &'static str,
    networks: &'static str,
    max_per_call: u128,
    max_per_task: u128,
}

/// Within the policy: the agent's network, one job per call, two per task.
const PAYS: Policy = Policy {
    key_env: WALLET_ENV,
    networks: NETWORK,
    max_per_call: PRICE,
    max_per_task: 2 * PRICE,
};

/// Within the policy, on the chain x402 version 1 calls `base-sepolia`.
const PAYS_V1: Policy = Policy {
    networks: "eip155:84532",
    ..PAYS
};

/// Outside the policy: one job costs more than a call may.
const CAPPED: Policy = Policy {
    max_per_call: PRICE - 1,
    ..PAYS
};

/// Outside the policy: the agent's network is not the one allowed.
const ELSEWHERE: Policy = Policy {
    networks: "eip155:8453",
    ..PAYS
};

/// The chain, the SDK's facilitator, the paid agent (paid to `pay_to`), and interlingua with
/// each route of `routes` (name, prefix, front, policy) over the agent.
struct Stack {
    proxy: Proxy,
    admin: Admin,
    wallet: Account,
    pay_to: Account,
    agent: PaidAgent,
    facilitator: Facilitator,
    chain: Chain,
}

/// interlingua's wallet: anvil's dev account 2, the same key on every test's chain (anvil's
/// default mnemonic), so the one variable serves every test of this file; it holds no token
/// until a test mints some.
fn wallet(chain: &Chain) -> Account {
    static ENV: Once = Once::new();
    let wallet = chain.dev_account(2).clone();
    let key = wallet.key.clone();
    ENV.call_once(|| std::env::set_var(WALLET_ENV, key));
    assert_eq!(
        std::env::var(WALLET_ENV).ok().as_deref(),
        Some(wallet.key.as_str()),
        "anvil's dev accounts are the same on every chain"
    );
    wallet
}

/// The agent a stack puts behind interlingua: the MIP-003 agent paid by HTTP 402, or the A2A
/// agent paid in band.
#[derive(Clone, Copy, PartialEq)]
enum Paid {
    By402,
    /// The MIP-003 agent as an x402 version 1 server (`X-PAYMENT`), on chain id 84532.
    Version1,
    InBand,
}

async fn stack(routes: &'static [(&'static str, &'static str, &'static str, Policy)]) -> Stack {
    stack_over(Paid::By402, routes).await
}

async fn stack_over(
    paid: Paid,
    routes: &'static [(&'static str, &'static str, &'static str, Policy)],
) -> Stack {
    let s = tokio::task::spawn_blocking(move || {
        let chain = match paid {
            Paid::Version1 => Chain::start_on(84532),
            _ => Chain::start(),
        };
        let facilitator = Facilitator::start(&chain, None);
        let pay_to = chain.new_account();
        let (agent, back) = match paid {
            Paid::By402 => (
                PaidAgent::start(&chain, &facilitator, PRICE, &pay_to.address),
                "mip003",
            ),
            Paid::Version1 => (
                PaidAgent::version_1(&chain, &facilitator, PRICE, &pay_to.address),
                "mip003",
            ),
            Paid::InBand => (
                PaidAgent::in_band(&chain, &facilitator, PRICE, &pay_to.address),
                "a2a",
            ),
        };
        let wallet = wallet(&chain);
        chain.mint(&wallet.address, FUNDS);
        if routes.iter().any(|r| r.3.key_env == EMPTY_WALLET_ENV) {
            // One test uses it: set once, before its proxy reads it.
            let empty = chain.new_account();
            std::env::set_var(EMPTY_WALLET_ENV, empty.key);
        }
        let agent_addr: SocketAddr = agent
            .url("")
            .trim_start_matches("http://")
            .parse()
            .expect("the agent's address");
        let mut text = format!(
            "[[upstreams]]\nname = \"agent\"\naddress = \"{agent_addr}\"\nread_timeout = \"10s\"\n"
        );
        for (name, prefix, front, policy) in routes {
            let pay = format!(
                "payment = {{ pay = {{ x402 = {{ key_env = \"{}\", networks = [\"{}\"], assets = [\"{}\"], max_per_call = {}, max_per_task = {} }} }} }}",
                policy.key_env,
                policy.networks,
                chain.token(),
                policy.max_per_call,
                policy.max_per_task
            );
            text.push_str(&paid_route(name, prefix, "agent", front, back, &pay));
        }
        let proxy = Proxy::start(&paid_config(&text));
        (proxy, wallet, pay_to, agent, facilitator, chain)
    })
    .await
    .expect("the stack starts");
    let (proxy, wallet, pay_to, agent, facilitator, chain) = s;
    Stack {
        admin: Admin::new(&proxy),
        proxy,
        wallet,
        pay_to,
        agent,
        facilitator,
        chain,
    }
}

impl Stack {
    /// (interlingua's wallet, the agent's pay_to), on chain.
    fn balances(&self) -> (u128, u128) {
        (
            self.chain.balance_of(&self.wallet.address),
            self.chain.balance_of(&self.pay_to.address),
        )
    }

    /// The task's cost ledger, as the admin API shows it (and `GET /tasks/{id}` beside it).
    async fn costs(&self, task: &str) -> Vec<Value> {
        let get = |path: String| async move {
            let resp = client()
                .get(self.proxy.admin_url(&path))
                .bearer_auth(ADMIN_TOKEN)
                .send()
                .await
                .expect("the admin API answers");
            status_and_json(resp).await
        };
        let (status, costs) = get(format!("/tasks/{task}/costs")).await;
        assert_eq!(status, 200, "{costs}");
        let (status, whole) = get(format!("/tasks/{task}")).await;
        assert_eq!(status, 200, "{whole}");
        assert_eq!(whole["costs"], costs["costs"], "both views agree");
        costs["costs"].as_array().expect("costs").clone()
    }

    /// `subject`'s newest task, once it has failed: asserts it failed for its payment, saying
    /// `why`; its id and its cost ledger.
    async fn failed_for_payment(&self, subject: &str, why: &str) -> (String, Vec<Value>) {
        let task = self.task_of(subject, |t| t["status"] == "failed").await;
        assert_eq!(
            (&task["reason"], &task["message"]),
            (&json!("payment"), &json!(why)),
            "{task}"
        );
        let id = task["id"].as_str().expect("an id").to_string();
        let costs = self.costs(&id).await;
        (id, costs)
    }

    /// The newest task of `subject`, once `holds` holds of it.
    async fn task_of(&self, subject: &str, holds: impl Fn(&Value) -> bool) -> Value {
        eventually(&format!("{subject}'s task"), || {
            let store = store::SqliteStore::open(&self.proxy.data_dir()).expect("the store");
            let query = store::TaskQuery {
                subject: Some(subject.to_string()),
                page: 1,
                page_size: 1,
                ..store::TaskQuery::default()
            };
            let holds = &holds;
            async move {
                use store::TaskStore;
                let found = store.search(&query).await.map_err(|e| e.to_string())?.0;
                let task = found
                    .first()
                    .map(|t| serde_json::to_value(t).expect("a task's JSON"));
                match task {
                    Some(t) if holds(&t) => Ok(t),
                    other => Err(format!("{other:?}")),
                }
            }
        })
        .await
    }
}

/// Runs blocking work (the chain, the facilitator's log) off the runtime.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("blocking work")
}

/// The front's create for `subject`: its status and body.
async fn create(s: &Stack, front: &str, prefix: &str, subject: &str) -> (u16, Value) {
    let request = match front {
        "mip003" => client()
            .post(s.proxy.url(&format!("{prefix}/start_job")))
            .json(
                &json!({"identifier_from_purchaser": PURCHASER, "input_data": {"text": "hello"}}),
            ),
        // A2A 0.3 over JSON-RPC, not waiting for the task to end.
        "a2a" => client().post(s.proxy.url(prefix)).json(&json!({
            "jsonrpc": "2.0", "id": 1, "method": "message/send",
            "params": {"message": {"kind": "message", "messageId": "m-1", "role": "user",
                                   "parts": [{"kind": "text", "text": "hello"}]},
                       "configuration": {"blocking": false}},
        })),
        _ => client()
            .post(s.proxy.url(&format!("{prefix}/api/v1/agents/{DID}/tasks")))
            .json(&json!({"input_query": "hello"})),
    };
    let resp = request
        .bearer_auth(token(subject))
        .send()
        .await
        .expect("the create is answered");
    status_and_json(resp).await
}

/// Polls the front until its task says completed; the last answer.
async fn completed(s: &Stack, front: &str, prefix: &str, subject: &str, task: &str) -> Value {
    let url = match front {
        "mip003" => s.proxy.url(&format!("{prefix}/status?job_id={task}")),
        "a2a" => s.proxy.url(prefix),
        _ => s
            .proxy
            .url(&format!("{prefix}/api/v1/agents/{DID}/tasks/{task}")),
    };
    eventually(&format!("{front}: the job to complete"), || {
        let url = url.clone();
        async move {
            let request = match front {
                "a2a" => client().post(url).json(
                    &json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": task}}),
                ),
                _ => client().get(url),
            };
            let resp = request
                .bearer_auth(token(subject))
                .send()
                .await
                .map_err(|e| e.to_string())?;
            let (status, body) = status_and_json(resp).await;
            let done = match front {
                "mip003" => body["status"] == "completed",
                "a2a" => body["result"]["status"]["state"] == "completed",
                _ => body["task"]["task_status"] == "Completed",
            };
            if status == 200 && done {
                Ok(body)
            } else {
                Err(format!("{status} {body}"))
            }
        }
    })
    .await
}

/// The front's create of a task for `subject` on route (name, prefix, front), followed until it
/// completes with "HELLO" (an MCP call waits for it).
async fn runs_to_hello(s: &Stack, (route, prefix, front): (&str, &str, &str), subject: &str) {
    if front == "mcp" {
        assert_eq!(mcp_call(s, prefix, route, subject).await, "HELLO");
        return;
    }
    let (status, body) = create(s, front, prefix, subject).await;
    let (created, task) = match front {
        "mip003" => (200, body["job_id"].as_str()),
        "a2a" => (200, body["result"]["id"].as_str()),
        _ => (201, body["task"]["task_id"].as_str()),
    };
    assert_eq!(status, created, "{front}: {body}");
    let task = task.expect("the task's id").to_string();
    let done = completed(s, front, prefix, subject, &task).await;
    let result = match front {
        "mip003" => &done["result"],
        "a2a" => &done["result"]["artifacts"][0]["parts"][0]["text"],
        _ => &done["task"]["output"],
    };
    assert_eq!(result, "HELLO", "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interlingua_pays_the_agent_per_job_from_its_wallet_through_each_front() {
    static ROUTES: [(&str, &str, &str, Policy); 4] = [
        ("mip", "/mip", "mip003", PAYS),
        ("nv", "/nv", "nevermined", PAYS),
        ("a2a", "/a2a", "a2a", PAYS),
        ("upper", "/mcp", "mcp", PAYS),
    ];
    let s = Arc::new(stack(&ROUTES).await);
    let mut jobs = 0;
    for (route, prefix, front, _) in &ROUTES {
        let subject = format!("payer-{front}");
        s.admin.grant(&subject, 10).await;
        let before = s.balances();
        runs_to_hello(&s, (route, prefix, front), &subject).await;

        // The agent ran the job once, paid by interlingua's wallet; the chain moved the price.
        jobs += 1;
        let started = s.agent.jobs();
        assert_eq!(started.len(), jobs, "{started:?}");
        let payer = started[jobs - 1]["payer"].as_str().expect("a payer");
        assert!(payer.eq_ignore_ascii_case(&s.wallet.address), "{payer}");
        assert_eq!(
            s.balances(),
            (before.0 - PRICE, before.1 + PRICE),
            "{front}: the wallet paid the price, once, to the agent"
        );

        // The cost ledger: one row, paid, with the settlement's transaction, mined. Booked
        // against the task as the store keeps it (a front may show its id in its own form).
        let stored = s.task_of(&subject, |t| t["status"] == "completed").await;
        let task = stored["id"].as_str().expect("an id").to_string();
        let costs = s.costs(&task).await;
        assert_eq!(costs.len(), 1, "{front}: {costs:?}");
        let row = &costs[0];
        let tx = row["transaction"]
            .as_str()
            .expect("a transaction")
            .to_string();
        // anvil names its accounts in lower case; interlingua, as the SDK, checksummed.
        assert!(
            row["payer"]
                .as_str()
                .is_some_and(|p| p != s.wallet.address && p.eq_ignore_ascii_case(&s.wallet.address)),
            "{row}"
        );
        assert_eq!(
            row,
            &json!({
                "task_id": task, "route": row["route"], "at": row["at"], "rail": "x402",
                "state": "paid", "scheme": "exact", "network": NETWORK, "asset": s.chain.token(),
                "pay_to": s.pay_to.address, "amount": PRICE as u64, "payer": row["payer"],
                "transaction": tx, "required": row["required"], "response": row["response"],
            }),
            "{front}"
        );
        assert_eq!(row["route"], ROUTES[jobs - 1].0);
        let receipt = {
            let (s, tx) = (s.clone(), tx.clone());
            blocking(move || s.chain.receipt(&tx)).await
        };
        assert_eq!(receipt["status"], "0x1", "{receipt}");
        // The demand and the receipt, verbatim: what the agent's headers said.
        let decoded = |v: &Value| -> Value {
            use base64::Engine as _;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(v.as_str().expect("a header's text"))
                .expect("base64");
            serde_json::from_slice(&bytes).expect("JSON")
        };
        let required = decoded(&row["required"]);
        assert_eq!(required["x402Version"], 2);
        assert_eq!(required["accepts"][0]["amount"], PRICE.to_string());
        let response = decoded(&row["response"]);
        assert_eq!(
            (&response["success"], &response["transaction"]),
            (&json!(true), &json!(tx))
        );

        // The console's page of the task shows the payment made, with its transaction.
        let (status, page) = s.admin.console_page(&format!("tasks/{task}")).await;
        assert_eq!(status, 200, "{page}");
        assert!(
            page.contains("Payments made to the agent") && page.contains(&tx),
            "{front}: {page}"
        );

        // The client paid the route's price in credits, whatever the agent cost.
        s.admin.charged(&subject, 10, 1).await;
    }
    let calls = s.facilitator.calls();
    assert_eq!(
        calls,
        ["/verify", "/settle"].repeat(ROUTES.len()),
        "one verification and one settlement per job"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offers_outside_the_policy_are_never_signed_and_fail_the_task_for_payment() {
    static ROUTES: [(&str, &str, &str, Policy); 2] = [
        ("cap", "/cap", "mip003", CAPPED),
        ("net", "/net", "nevermined", ELSEWHERE),
    ];
    let s = Arc::new(stack(&ROUTES).await);
    let before = s.balances();
    let cases = [
        (
            "cap",
            "/cap",
            "mip003",
            format!("the agent's offer is outside the route's policy: amount {PRICE} is above max_per_call ({})", PRICE - 1),
        ),
        (
            "net",
            "/net",
            "nevermined",
            format!("the agent's offer is outside the route's policy: network `{NETWORK}` is not among payment.pay.x402.networks"),
        ),
    ];
    for (route, prefix, front, why) in cases {
        let subject = format!("refused-{route}");
        s.admin.grant(&subject, 10).await;
        let (status, body) = create(&s, front, prefix, &subject).await;
        // The agent, not the client, is the problem: 502 in the front's own error shape,
        // naming why.
        assert_eq!(status, 502, "{front}: {body}");
        let message = format!("the agent's payment was not made: {why}");
        let expected = match front {
            "mip003" => json!({"detail": message}),
            _ => json!({"error": "Bad Gateway", "message": message, "statusCode": 502}),
        };
        assert_eq!(body, expected, "{front}");
        let (id, costs) = s.failed_for_payment(&subject, &why).await;
        let id = id.as_str();
        assert_eq!(
            costs,
            [json!({
                "task_id": id, "route": route, "at": costs[0]["at"], "rail": "x402",
                "state": "refused", "scheme": "exact", "network": NETWORK,
                "asset": s.chain.token(), "pay_to": s.pay_to.address, "amount": PRICE as u64,
                "detail": why, "required": costs[0]["required"],
            })],
            "{front}"
        );
        // The client's hold went back: nothing charged.
        s.admin.charged(&subject, 10, 0).await;
    }
    // Nothing was signed: the facilitator saw no payment, the agent ran no job, and nothing
    // moved on chain.
    assert_eq!(s.facilitator.calls(), Vec::<String>::new());
    assert_eq!(s.agent.jobs(), Vec::<Value>::new());
    let after = {
        let s = s.clone();
        blocking(move || s.balances()).await
    };
    assert_eq!(after, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payment_the_agent_refuses_is_not_made_twice_and_fails_the_task_for_payment() {
    static ROUTES: [(&str, &str, &str, Policy); 1] = [(
        "empty",
        "/empty",
        "mip003",
        Policy {
            key_env: EMPTY_WALLET_ENV,
            ..PAYS
        },
    )];
    let s = Arc::new(stack(&ROUTES).await);
    let subject = "payer-with-an-empty-wallet";
    s.admin.grant(subject, 10).await;
    let before = s.balances();
    let (status, body) = create(&s, "mip003", "/empty", subject).await;
    // Signed and sent once; the agent's facilitator found nothing to pay with, and the agent
    // asked again: not paid a second time.
    let why = "the agent asked to be paid again after the payment was sent: invalid_exact_evm_insufficient_balance";
    assert_eq!(status, 502, "{body}");
    assert_eq!(
        body,
        json!({"detail": format!("the agent's payment was not made: {why}")})
    );
    let (id, costs) = s.failed_for_payment(subject, why).await;
    let id = id.as_str();
    assert_eq!(costs.len(), 1, "{costs:?}");
    let row = &costs[0];
    assert_eq!(
        row,
        &json!({
            "task_id": id, "route": "empty", "at": row["at"], "rail": "x402", "state": "failed",
            "scheme": "exact", "network": NETWORK, "asset": s.chain.token(),
            "pay_to": s.pay_to.address, "amount": PRICE as u64, "payer": row["payer"],
            "detail": why, "required": row["required"],
        })
    );
    assert!(
        row["payer"]
            .as_str()
            .is_some_and(|p| !p.eq_ignore_ascii_case(&s.wallet.address)),
        "{row}"
    );
    s.admin.charged(subject, 10, 0).await;
    // Verified once, never settled; nothing moved; the agent ran nothing.
    assert_eq!(s.facilitator.calls(), ["/verify"]);
    assert_eq!(s.agent.jobs(), Vec::<Value>::new());
    assert_eq!(s.balances(), before);
}

/// An MCP client's call of route `tool` for `subject`, blocking until the task ends: the
/// result's text.
async fn mcp_call(s: &Stack, prefix: &str, tool: &str, subject: &str) -> String {
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": tool, "arguments": {"text": "hello"}}});
    let resp = client()
        .post(s.proxy.url(prefix))
        .bearer_auth(token(subject))
        .header("accept", "application/json, text/event-stream")
        .json(&body)
        .send()
        .await
        .expect("the call is answered");
    assert_eq!(resp.status(), 200);
    let raw = resp.text().await.expect("a body");
    // JSON, or events whose last is the result.
    let last = raw
        .split("\n\n")
        .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
        .last()
        .unwrap_or(&raw)
        .to_string();
    let answer: Value = serde_json::from_str(&last).expect("a JSON-RPC answer");
    assert_eq!(answer["result"]["isError"], false, "{raw}");
    answer["result"]["content"][0]["text"]
        .as_str()
        .expect("a text result")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interlingua_pays_an_a2a_agent_that_asks_in_band_through_each_front() {
    static ROUTES: [(&str, &str, &str, Policy); 4] = [
        ("mip", "/mip", "mip003", PAYS),
        ("nv", "/nv", "nevermined", PAYS),
        ("a2a", "/a2a", "a2a", PAYS),
        ("upper", "/mcp", "mcp", PAYS),
    ];
    let s = Arc::new(stack_over(Paid::InBand, &ROUTES).await);
    let mut jobs = 0;
    for (route, prefix, front, _) in &ROUTES {
        let subject = format!("payer-{front}");
        s.admin.grant(&subject, 10).await;
        let before = s.balances();
        runs_to_hello(&s, (route, prefix, front), &subject).await;

        // The agent was asked with the extension activated, paid by interlingua's wallet, once;
        // the chain moved the price.
        jobs += 1;
        let paid = s.agent.jobs();
        assert_eq!(paid.len(), jobs, "{paid:?}");
        let job = &paid[jobs - 1];
        assert_eq!(job["text"], "hello", "{job}");
        assert_eq!(
            job["extensions"],
            json!(["https://github.com/google-agentic-commerce/a2a-x402/blob/main/spec/v0.2"]),
            "{job}"
        );
        let payer = job["payer"].as_str().expect("a payer");
        assert!(payer.eq_ignore_ascii_case(&s.wallet.address), "{payer}");
        assert_eq!(
            s.balances(),
            (before.0 - PRICE, before.1 + PRICE),
            "{front}: the wallet paid the price, once, to the agent"
        );

        // The cost ledger: one row, paid, with the transaction of the receipt the agent's final
        // message carried; the demand and the receipt as the agent's metadata had them.
        let stored = s.task_of(&subject, |t| t["status"] == "completed").await;
        let task = stored["id"].as_str().expect("an id").to_string();
        let costs = eventually("the receipt recorded", || {
            let (s, task) = (s.clone(), task.clone());
            async move {
                let costs = s.costs(&task).await;
                match costs.first() {
                    Some(row) if row["state"] != "sending" => Ok(costs),
                    _ => Err(format!("{costs:?}")),
                }
            }
        })
        .await;
        assert_eq!(costs.len(), 1, "{front}: {costs:?}");
        let row = &costs[0];
        let tx = row["transaction"].as_str().expect("a transaction");
        assert_eq!(
            row,
            &json!({
                "task_id": task, "route": route, "at": row["at"], "rail": "x402",
                "state": "paid", "scheme": "exact", "network": NETWORK, "asset": s.chain.token(),
                "pay_to": s.pay_to.address, "amount": PRICE as u64, "payer": row["payer"],
                "transaction": tx, "required": row["required"], "response": row["response"],
            }),
            "{front}"
        );
        let receipt = {
            let (s, tx) = (s.clone(), tx.to_string());
            blocking(move || s.chain.receipt(&tx)).await
        };
        assert_eq!(receipt["status"], "0x1", "{receipt}");
        let required: Value =
            serde_json::from_str(row["required"].as_str().expect("the demand")).expect("JSON");
        assert_eq!(
            (&required["x402Version"], &required["accepts"][0]["amount"]),
            (&json!(2), &json!(PRICE.to_string())),
            "{required}"
        );
        let response: Value =
            serde_json::from_str(row["response"].as_str().expect("the receipt")).expect("JSON");
        assert_eq!(
            (&response["success"], &response["transaction"]),
            (&json!(true), &json!(tx))
        );

        // The client paid the route's price in credits, whatever the agent cost.
        s.admin.charged(&subject, 10, 1).await;
    }
    let calls = s.facilitator.calls();
    assert_eq!(
        calls,
        ["/verify", "/settle"].repeat(ROUTES.len()),
        "one verification and one settlement per task"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_band_demand_outside_the_policy_or_refused_by_the_agent_fails_the_task_for_payment() {
    static ROUTES: [(&str, &str, &str, Policy); 3] = [
        ("cap", "/cap", "mip003", CAPPED),
        ("net", "/net", "a2a", ELSEWHERE),
        (
            "empty",
            "/empty",
            "nevermined",
            Policy {
                key_env: EMPTY_WALLET_ENV,
                ..PAYS
            },
        ),
    ];
    let s = Arc::new(stack_over(Paid::InBand, &ROUTES).await);
    let before = s.balances();
    let outside = "the agent's offer is outside the route's policy";
    let cases = [
        (
            "cap",
            "/cap",
            "mip003",
            "refused",
            format!(
                "{outside}: amount {PRICE} is above max_per_call ({})",
                PRICE - 1
            ),
        ),
        (
            "net",
            "/net",
            "a2a",
            "refused",
            format!("{outside}: network `{NETWORK}` is not among payment.pay.x402.networks"),
        ),
        (
            "empty",
            "/empty",
            "nevermined",
            "failed",
            "the agent asked to be paid again after the payment was sent: invalid_exact_evm_insufficient_balance".to_string(),
        ),
    ];
    for (route, prefix, front, state, why) in cases {
        let subject = format!("refused-{route}");
        s.admin.grant(&subject, 10).await;
        let (status, body) = create(&s, front, prefix, &subject).await;
        // The agent asks in its create's answer, or in a poll's just after: the create fails
        // (the agent, not the client, is the problem: 502 naming why), or the task does.
        let created = match front {
            "nevermined" => 201,
            _ => 200,
        };
        assert!(
            status == created || status == 502,
            "{front}: {status} {body}"
        );
        if status == 502 {
            assert!(
                body.to_string()
                    .contains(&format!("the agent's payment was not made: {why}")),
                "{front}: {body}"
            );
        }
        let (id, costs) = s.failed_for_payment(&subject, &why).await;
        assert_eq!(costs.len(), 1, "{front}: {costs:?}");
        let row = &costs[0];
        let mut expected = json!({
            "task_id": id, "route": route, "at": row["at"], "rail": "x402", "state": state,
            "scheme": "exact", "network": NETWORK, "asset": s.chain.token(),
            "pay_to": s.pay_to.address, "amount": PRICE as u64, "detail": why,
            "required": row["required"],
        });
        if state == "failed" {
            // Signed (by the empty wallet) and sent once; the agent asked again.
            expected["payer"] = row["payer"].clone();
        }
        assert_eq!(row, &expected, "{front}");
        // The client's hold went back: nothing charged.
        s.admin.charged(&subject, 10, 0).await;
    }
    // Only the empty wallet's payment was signed: verified once, never settled. The agent ran
    // nothing, and nothing moved on chain.
    assert_eq!(s.facilitator.calls(), ["/verify"]);
    assert_eq!(s.agent.jobs(), Vec::<Value>::new());
    let after = {
        let s = s.clone();
        blocking(move || s.balances()).await
    };
    assert_eq!(after, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interlingua_pays_an_x402_version_1_agent_with_x_payment() {
    static ROUTES: [(&str, &str, &str, Policy); 1] = [("v1", "/v1", "mip003", PAYS_V1)];
    let s = Arc::new(stack_over(Paid::Version1, &ROUTES).await);
    let subject = "payer-v1";
    s.admin.grant(subject, 10).await;
    let before = s.balances();
    runs_to_hello(&s, ("v1", "/v1", "mip003"), subject).await;
    let started = s.agent.jobs();
    assert_eq!(started.len(), 1, "{started:?}");
    let payer = started[0]["payer"].as_str().expect("a payer");
    assert!(payer.eq_ignore_ascii_case(&s.wallet.address), "{payer}");
    assert_eq!(
        s.balances(),
        (before.0 - PRICE, before.1 + PRICE),
        "the wallet paid the price, once, to the agent"
    );
    // The row names the network by CAIP-2; the demand is the 402's body, the receipt the
    // X-PAYMENT-RESPONSE header, verbatim.
    let stored = s.task_of(subject, |t| t["status"] == "completed").await;
    let task = stored["id"].as_str().expect("an id").to_string();
    let costs = s.costs(&task).await;
    assert_eq!(costs.len(), 1, "{costs:?}");
    let row = &costs[0];
    let tx = row["transaction"].as_str().expect("a transaction");
    assert_eq!(
        row,
        &json!({
            "task_id": task, "route": "v1", "at": row["at"], "rail": "x402", "state": "paid",
            "scheme": "exact", "network": "eip155:84532", "asset": s.chain.token(),
            "pay_to": s.pay_to.address, "amount": PRICE as u64, "payer": row["payer"],
            "transaction": tx, "required": row["required"], "response": row["response"],
        })
    );
    let required: Value =
        serde_json::from_str(row["required"].as_str().expect("the demand")).expect("JSON");
    assert_eq!(
        (&required["x402Version"], &required["accepts"][0]["network"]),
        (&json!(1), &json!("base-sepolia")),
        "{required}"
    );
    let response: Value = {
        use base64::Engine as _;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(row["response"].as_str().expect("the receipt"))
            .expect("base64");
        serde_json::from_slice(&bytes).expect("JSON")
    };
    assert_eq!(
        (&response["success"], &response["transaction"]),
        (&json!(true), &json!(tx))
    );
    s.admin.charged(subject, 10, 1).await;
    assert_eq!(s.facilitator.calls(), ["/verify", "/settle"]);
}
