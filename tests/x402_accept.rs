//! Being paid with x402 through the real proxy: a client with a wallet pays a route instead of
//! holding a plan. The client is the official x402 SDK's (Python, x402 2.25.0, its httpx
//! transport), the facilitator the SDK's own on a local anvil node, the money the tests' EIP-3009
//! token (`tests/common/chain.rs`); the agent behind interlingua is the sample MIP-003 agent.
//! What is asserted is what the chain and the ledger say: exact balances, the settlement's
//! transaction, the sale and the payer's ledger rows.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use base64::Engine as _;
use common::chain::{Account, Call, Chain, Facilitator, NETWORK, TOKEN_NAME, TOKEN_VERSION};
use common::wait::eventually;
use common::{client, sample_agent, sample_agent_on, Proxy};
use samples::Clock;
use serde_json::{json, Value};
use store::{Account as Ledger, SaleState, SqliteStore, TaskStore};

/// What one call costs: 0.01 of a 6-decimal token.
const PRICE: u128 = 10_000;
/// What a funded payer holds before paying.
const FUNDS: u128 = 5_000_000;
const DID: &str = "did:nv:0000000000000000000000000000000000000000000000000000000000000003";

/// A chain with the SDK's facilitator, a sample MIP-003 agent, and interlingua in front of it
/// with one route per front, each taking an `exact` payment of [`PRICE`] to `pay_to`.
struct Stack {
    proxy: Proxy,
    /// The clock of the agent behind `/soon`: its tasks stand still until the test moves it.
    clock: Clock,
    pay_to: Account,
    facilitator: Facilitator,
    chain: Chain,
}

/// The price of a step of an `upto` task, and the most one task may cost.
const STEP: u128 = 1_000;
/// How long a task of the agent behind `/soon` takes, by its manual clock.
const SLOW_WORK: Duration = Duration::from_secs(60);
const MAX: u128 = 10_000;

/// The routes: MIP-003 at `/mip`, Nevermined at `/nv`, OpenAI chat at `/chat`, all over the
/// sample MIP-003 agent, taking `exact`; Nevermined at `/upto` over the sample Nevermined agent
/// (two steps a task, one when it fails), taking `upto`; Nevermined at `/soon` and A2A at `/stop`
/// over the agent on a manual clock, taking `upto`.
fn routes(
    agents: (SocketAddr, SocketAddr, SocketAddr),
    chain: &Chain,
    facilitator: &Facilitator,
    pay_to: &str,
) -> String {
    let (agent, nevermined, slow) = agents;
    // A port nobody listens on: bound, read, and let go.
    let gone = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    let upto = |name: &str, upstream: &str, max_timeout: &str, front: &str| {
        format!(
            r#"[[routes]]
name = "{name}"
match = {{ path_prefix = "/{name}" }}
upstream = "{upstream}"
front = "{front}"
back = "nevermined"
vars.nevermined = {{ agent_did = "{DID}" }}
poll_interval = "50ms"
poll_max_interval = "100ms"
min_refresh = "0s"
[routes.payment.accept.x402]
facilitator = "{}"
offers = [{{ scheme = "upto", network = "{NETWORK}", asset = "{}", asset_name = "{TOKEN_NAME}", asset_version = "{TOKEN_VERSION}", pay_to = "{pay_to}", per_step = {STEP}, max = {MAX}, facilitator_address = "{}", max_timeout = "{max_timeout}" }}]
"#,
            facilitator.url(),
            chain.token(),
            facilitator.address()
        )
    };
    let upto = format!(
        "{}\n[[upstreams]]\nname = \"slow\"\naddress = \"{slow}\"\nread_timeout = \"10s\"\n\n{}{}",
        upto("upto", "nvm", "300s", "nevermined"),
        upto("soon", "slow", "15s", "nevermined"),
        upto("stop", "slow", "300s", "a2a")
    );
    let accept = format!(
        r#"[routes.payment.accept.x402]
facilitator = "{}"
offers = [{{ scheme = "exact", network = "{NETWORK}", asset = "{}", asset_name = "{TOKEN_NAME}", asset_version = "{TOKEN_VERSION}", pay_to = "{pay_to}", per_call = {PRICE} }}]
"#,
        facilitator.url(),
        chain.token()
    );
    let route = |name: &str, prefix: &str, front: &str, extra: &str| {
        format!(
            "[[routes]]\nname = \"{name}\"\nmatch = {{ path_prefix = \"{prefix}\" }}\nupstream = \"mip\"\n\
             front = \"{front}\"\nback = \"mip003\"\npoll_interval = \"50ms\"\npoll_max_interval = \"100ms\"\n\
             min_refresh = \"0s\"\n{extra}\n{accept}\n"
        )
    };
    // With the admin API (and a token issuer no route here uses): the credits check is read.
    common::money::paid_config(
        &format!(
            "[[upstreams]]\nname = \"mip\"\naddress = \"{agent}\"\nread_timeout = \"10s\"\n\n\
             [[upstreams]]\nname = \"nvm\"\naddress = \"{nevermined}\"\nread_timeout = \"10s\"\n\n\
             [[upstreams]]\nname = \"gone\"\naddress = \"127.0.0.1:{gone}\"\nconnect_timeout = \"1s\"\n\n{}{}{}{}{}{}{upto}",
            route("mip", "/mip", "mip003", ""),
            route("nv", "/nv", "nevermined", ""),
            route("chat", "/chat", "openai_chat", "sync_timeout = \"20s\""),
            route("tool", "/tool", "mcp", "sync_timeout = \"20s\""),
            route("a2a", "/a2a", "a2a", ""),
            route(
                "down",
                "/down",
                "mip003",
                // Declared here, so that the input is checked without asking the agent.
                "input_schema = { input_data = [{ id = \"text\", type = \"text\", name = \"Text\" }] }",
            )
            .replace("upstream = \"mip\"", "upstream = \"gone\""),
        ),
    )
}

async fn stack() -> Stack {
    let agent = sample_agent(samples::mip003::serve, Duration::from_millis(100)).await;
    let nevermined = sample_agent(samples::nevermined::serve, Duration::from_millis(200)).await;
    let clock = Clock::manual();
    let slow = sample_agent_on(samples::nevermined::serve, SLOW_WORK, &clock).await;
    tokio::task::spawn_blocking(move || {
        let chain = Chain::start();
        chain.enable_upto();
        let facilitator = Facilitator::start(&chain, None);
        let pay_to = chain.new_account();
        let proxy = Proxy::start(&routes(
            (agent, nevermined, slow),
            &chain,
            &facilitator,
            &pay_to.address,
        ));
        Stack {
            proxy,
            clock,
            pay_to,
            facilitator,
            chain,
        }
    })
    .await
    .expect("the stack starts")
}

/// Runs blocking work (the SDK's client, the chain) off the runtime.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("blocking work")
}

impl Stack {
    fn payer(&self, amount: u128) -> Account {
        self.chain.funded_account(amount)
    }

    fn balances(&self, payer: &Account) -> (u128, u128) {
        (
            self.chain.balance_of(&payer.address),
            self.chain.balance_of(&self.pay_to.address),
        )
    }

    /// Each front's create, as its clients send it.
    fn creates(&self) -> Vec<(&'static str, Call)> {
        vec![
            (
                "mip003",
                Call::post(
                    &self.proxy.url("/mip/start_job"),
                    json!({"identifier_from_purchaser": "aabbccddeeff0011", "input_data": {"text": "hello"}}),
                ),
            ),
            (
                "nevermined",
                Call::post(
                    &self.proxy.url(&format!("/nv/api/v1/agents/{DID}/tasks")),
                    json!({"input_query": "hello"}),
                ),
            ),
            (
                "openai_chat",
                Call::post(
                    &self.proxy.url("/chat/v1/chat/completions"),
                    json!({"model": "m", "messages": [{"role": "user", "content": "hello"}]}),
                ),
            ),
            // A2A over HTTP: the payment in the header, as on any HTTP resource (the A2A x402
            // extension's in-band payment is not built yet).
            (
                "a2a",
                Call::post(
                    &self.proxy.url("/a2a"),
                    json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
                        "message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hello"}]},
                        "configuration": {"returnImmediately": true}}}),
                )
                .header("A2A-Version", "1.0"),
            ),
        ]
    }

    fn store(&self) -> SqliteStore {
        SqliteStore::open(&self.proxy.data_dir()).expect("the store opens")
    }
}

/// The payer's ledger account: CAIP-10 subject, one plan per token.
fn account_of(chain: &Chain, payer: &Account) -> Ledger {
    Ledger::new(
        &format!("x402:{}", chain.token().to_ascii_lowercase()),
        &format!("{NETWORK}:{}", payer.address.to_ascii_lowercase()),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unpaid_create_gets_402_with_the_offer_in_each_fronts_error_shape() {
    let s = stack().await;
    let s = std::sync::Arc::new(s);
    for (front, call) in s.creates() {
        let answer = blocking(move || call.send()).await;
        assert_eq!(answer.status, 402, "{front}: {answer:?}");
        let required = answer.payment_required.clone().expect("PAYMENT-REQUIRED");
        assert_eq!(required["x402Version"], 2, "{front}: {required}");
        assert_eq!(required["error"], "payment_required", "{front}: {required}");
        assert_eq!(
            required["accepts"],
            json!([{
                "scheme": "exact", "network": NETWORK, "amount": PRICE.to_string(),
                "asset": s.chain.token(), "payTo": s.pay_to.address, "maxTimeoutSeconds": 300,
                "extra": {"name": TOKEN_NAME, "version": TOKEN_VERSION},
            }]),
            "{front}"
        );
        assert!(
            required["resource"]["url"]
                .as_str()
                .is_some_and(|u| u.starts_with("http://127.0.0.1:")),
            "{front}: {required}"
        );
        // The body is the front's own error document, naming what to do.
        let text = answer.body.to_string();
        assert!(text.contains("x402"), "{front}: {text}");
        match front {
            "openai_chat" => assert_eq!(answer.body["error"]["code"], "payment_required", "{text}"),
            "mip003" => assert!(
                answer.body["detail"].is_string() || answer.body["error"].is_object(),
                "{text}"
            ),
            // A JSON-RPC error answering the request (HTTP 402, as for a missing token).
            "a2a" => assert_eq!(
                (&answer.body["jsonrpc"], &answer.body["id"]),
                (&json!("2.0"), &json!(1)),
                "{text}"
            ),
            _ => assert!(answer.body.is_object(), "{text}"),
        }
    }
    assert_eq!(
        s.facilitator.calls(),
        Vec::<String>::new(),
        "nothing verified, nothing settled"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_pays_exact_through_each_front_and_the_chain_moves_the_price() {
    let s = std::sync::Arc::new(stack().await);
    for (front, call) in s.creates() {
        let payer = s.payer(FUNDS);
        let before = s.balances(&payer);
        let paid = {
            let (s, payer, call) = (s.clone(), payer.clone(), call.clone());
            blocking(move || call.pay(&s.chain, &payer)).await
        };
        let created = if front == "nevermined" { 201 } else { 200 };
        assert_eq!(paid.status, created, "{front}: {paid:?}");
        assert_eq!(paid.sent, 2, "{front}: a 402, then the paid retry");
        let receipt = paid.payment_response.clone().expect("PAYMENT-RESPONSE");
        assert_eq!(receipt["success"], true, "{front}: {receipt}");
        assert_eq!(receipt["network"], NETWORK);
        assert!(
            receipt["payer"]
                .as_str()
                .is_some_and(|p| p.eq_ignore_ascii_case(&payer.address)),
            "{front}: {receipt}"
        );
        let tx = receipt["transaction"]
            .as_str()
            .expect("a transaction")
            .to_string();
        let on_chain = s.chain.receipt(&tx);
        assert_eq!(on_chain["status"], "0x1", "{front}: {on_chain}");
        assert_eq!(
            s.balances(&payer),
            (before.0 - PRICE, before.1 + PRICE),
            "{front}: the payer paid the price, once, to the operator"
        );
        // The sale, and the ledger: the price granted and held, the task's own.
        let store = s.store();
        let account = account_of(&s.chain, &payer);
        let history = store.history(&account, 20).await.expect("history");
        let kinds: Vec<&str> = history.iter().rev().map(|r| r.kind.as_str()).collect();
        assert_eq!(&kinds[..2], ["grant", "hold"], "{front}: {history:?}");
        assert_eq!(history.last().map(|r| r.amount), Some(PRICE as i64));
        let task_id = history
            .iter()
            .find(|r| r.kind == "hold")
            .and_then(|r| r.task_id.clone())
            .expect("the hold names its task");
        let sales = store.sales(&task_id).await.expect("sales");
        assert_eq!(sales.len(), 1, "{front}: {sales:?}");
        assert_eq!(sales[0].state, SaleState::Settled, "{front}: {sales:?}");
        assert_eq!(sales[0].settled, Some(PRICE as u64));
        assert_eq!(sales[0].transaction.as_deref(), Some(tx.as_str()));
        // The operator sees it on the admin API, its payer as the task's subject.
        let admin = client()
            .get(s.proxy.admin_url(&format!("/tasks/{task_id}/sales")))
            .bearer_auth(common::secrets::ADMIN_TOKEN)
            .send()
            .await
            .expect("the admin API answers");
        let (status, listed) = common::status_and_json(admin).await;
        assert_eq!(status, 200, "{listed}");
        assert_eq!(listed["sales"][0]["state"], "settled", "{listed}");
        assert_eq!(listed["sales"][0]["transaction"], tx.as_str(), "{listed}");
        assert_eq!(
            listed["sales"][0]["subject"],
            account.subject.as_str(),
            "{listed}"
        );
        // When the task completes, its price is captured from the hold; nothing stays held.
        let balance = eventually(&format!("{front}: the task to settle"), || {
            let store = s.store();
            let account = account.clone();
            let proxy_poll = poll_as_payer(&s, front, &paid, &task_id);
            async move {
                proxy_poll.await;
                let b = store.balance(&account).await.map_err(|e| e.to_string())?;
                if b.held == 0 && b.captured == PRICE as i64 {
                    Ok(b)
                } else {
                    Err(format!("{b:?}"))
                }
            }
        })
        .await;
        assert_eq!(balance.granted, PRICE as i64, "{front}");
        assert_eq!(balance.available(), 0, "{front}");
    }
    assert_verified(&s).await;
}

/// One poll of the payer's task, presenting the payment that created it, as a token holder
/// presents their token again (the sample agent's jobs end by themselves; a poll refreshes).
async fn poll_as_payer(s: &Stack, front: &str, paid: &common::chain::Paid, task_id: &str) {
    let signature = paid
        .payment_signature
        .clone()
        .expect("the paid request's signature");
    let url = match front {
        "mip003" => s.proxy.url(&format!("/mip/status?job_id={task_id}")),
        "nevermined" => s
            .proxy
            .url(&format!("/nv/api/v1/agents/{DID}/tasks/{task_id}")),
        // A chat completion waits for its task: nothing to poll.
        _ => return,
    };
    let resp = client()
        .get(url)
        .header("payment-signature", signature)
        .send()
        .await
        .expect("the poll is answered");
    assert_eq!(resp.status(), 200, "{front}: {:?}", resp.text().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_a_changed_amount_or_a_poor_payer_is_refused_and_moves_nothing() {
    let s = std::sync::Arc::new(stack().await);
    let (_, call) = s.creates().remove(0);
    let payer = s.payer(FUNDS);
    let paid = {
        let (s, payer, call) = (s.clone(), payer.clone(), call.clone());
        blocking(move || call.pay(&s.chain, &payer)).await
    };
    assert_eq!(paid.status, 200, "{paid:?}");
    let after_one = s.balances(&payer);
    let signature = paid.payment_signature.clone().expect("signature");

    // The same payment again: refused before anything is asked of the facilitator.
    let replayed = {
        let (call, sig) = (call.clone(), signature.clone());
        blocking(move || call.replay(&sig)).await
    };
    assert_eq!(replayed.status, 402, "{replayed:?}");
    let required = replayed.payment_required.clone().expect("PAYMENT-REQUIRED");
    assert_eq!(required["error"], "payment_already_used", "{required}");
    assert!(replayed.payment_response.is_none());

    // The same authorisation with the price changed: not one of the offers.
    let mut doc: Value = serde_json::from_slice(
        &base64::engine::general_purpose::STANDARD
            .decode(&signature)
            .expect("base64"),
    )
    .expect("JSON");
    doc["accepted"]["amount"] = json!("1");
    let changed = base64::engine::general_purpose::STANDARD.encode(doc.to_string());
    let cheaper = {
        let call = call.clone();
        blocking(move || call.replay(&changed)).await
    };
    assert_eq!(cheaper.status, 402, "{cheaper:?}");
    let required = cheaper.payment_required.clone().expect("PAYMENT-REQUIRED");
    assert_eq!(
        required["error"], "invalid_payment_requirements",
        "{required}"
    );
    assert!(
        cheaper.body.to_string().contains("amount"),
        "{:?}",
        cheaper.body
    );

    // A payer without the funds: the facilitator's reason, nothing held.
    let poor = s.payer(0);
    let refused = {
        let (s, poor, call) = (s.clone(), poor.clone(), call.clone());
        blocking(move || call.pay(&s.chain, &poor)).await
    };
    assert_eq!(refused.status, 402, "{refused:?}");
    let required = refused.payment_required.clone().expect("PAYMENT-REQUIRED");
    assert_eq!(
        required["error"], "invalid_exact_evm_insufficient_balance",
        "{required}"
    );
    assert_eq!(
        s.balances(&payer),
        after_one,
        "nothing moved after the first payment"
    );
    let store = s.store();
    let poor_rows = store
        .history(&account_of(&s.chain, &poor), 10)
        .await
        .expect("history");
    assert!(
        poor_rows.is_empty(),
        "nothing held for a refused payment: {poor_rows:?}"
    );
    let calls = s.facilitator.calls();
    assert_eq!(
        calls.iter().filter(|c| *c == "/settle").count(),
        1,
        "one settlement in all: {calls:?}"
    );
}

/// `GET /credits/verify`: the ledger adds up, and no sale was left unsettled.
async fn assert_verified(s: &Stack) {
    let verify = client()
        .get(s.proxy.admin_url("/credits/verify"))
        .bearer_auth(common::secrets::ADMIN_TOKEN)
        .send()
        .await
        .expect("the admin API answers");
    let (status, report) = common::status_and_json(verify).await;
    assert_eq!(
        (status, report["ok"].as_bool(), report["sales"].clone()),
        (200, Some(true), json!([])),
        "{report}"
    );
}

/// The task whose hold the payer's account has (its first).
async fn held_task(s: &Stack, account: &Ledger) -> String {
    s.store()
        .history(account, 10)
        .await
        .expect("history")
        .iter()
        .find_map(|r| r.task_id.clone())
        .expect("the hold names its task")
}

/// The task's sale once it is final, the payer polling the task (as `front`) meanwhile.
async fn sale_closed(
    s: &Stack,
    front: &str,
    paid: &common::chain::Paid,
    front_id: &str,
    task_id: &str,
) -> store::Sale {
    eventually(&format!("{front}: the sale to close"), || {
        let poll = poll_as_payer(s, front, paid, front_id);
        let store = s.store();
        async move {
            poll.await;
            let sales = store.sales(task_id).await.map_err(|e| e.to_string())?;
            match sales.first() {
                Some(sale) if sale.state.is_final() => Ok(sale.clone()),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await
}

/// A new payer, funded, that has approved Permit2 (what `upto` pays through); its balances.
async fn upto_payer(s: &std::sync::Arc<Stack>) -> (Account, (u128, u128)) {
    let payer = s.payer(FUNDS);
    {
        let (s, payer) = (s.clone(), payer.clone());
        blocking(move || s.chain.approve_permit2(&payer)).await;
    }
    let before = s.balances(&payer);
    (payer, before)
}

/// An `upto` task through the Nevermined front: the payer authorises [`MAX`]; the steps that
/// complete are captured at [`STEP`] each; when the task ends, their sum is settled once, and
/// what was authorised beyond it is taken back from the payer's account.
async fn upto_task(s: &std::sync::Arc<Stack>, query: &str, steps: u128) {
    let (payer, before) = upto_payer(s).await;
    let call = Call::post(
        &s.proxy.url(&format!("/upto/api/v1/agents/{DID}/tasks")),
        json!({"input_query": query}),
    );
    let paid = {
        let (s, payer) = (s.clone(), payer.clone());
        blocking(move || call.pay(&s.chain, &payer)).await
    };
    assert_eq!(paid.status, 201, "{query}: {paid:?}");
    assert!(
        paid.payment_response.is_none(),
        "{query}: nothing is settled before the task ends: {paid:?}"
    );
    let front_id = paid.body["task"]["task_id"]
        .as_str()
        .expect("the task's id")
        .to_string();
    let account = account_of(&s.chain, &payer);
    let task_id = held_task(s, &account).await;
    let sale = sale_closed(s, "upto", &paid, &front_id, &task_id).await;
    let balance = s.store().balance(&account).await.expect("balance");
    assert_eq!(
        (balance.granted, balance.captured, balance.held),
        ((steps * STEP) as i64, (steps * STEP) as i64, 0),
        "{query}: {balance:?}"
    );
    if steps == 0 {
        assert_eq!(sale.state, SaleState::Void, "{query}: {sale:?}");
        assert_eq!(s.balances(&payer), before, "{query}: nothing settled");
        return;
    }
    assert_eq!(sale.state, SaleState::Settled, "{query}: {sale:?}");
    assert_eq!(sale.settled, Some((steps * STEP) as u64), "{query}");
    let tx = sale
        .transaction
        .clone()
        .expect("the settlement's transaction");
    assert_eq!(s.chain.receipt(&tx)["status"], "0x1", "{query}");
    assert_eq!(
        s.balances(&payer),
        (before.0 - steps * STEP, before.1 + steps * STEP),
        "{query}: the steps' price, settled once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upto_settles_the_completed_steps_once_when_the_task_ends() {
    let s = std::sync::Arc::new(stack().await);
    // The sample Nevermined agent's task completes two steps (`init`, `work`); one that fails
    // completes one.
    upto_task(&s, "hello", 2).await;
    upto_task(&s, "mode:fail", 1).await;
    let settles = s
        .facilitator
        .log()
        .iter()
        .filter(|r| r["path"] == "/settle")
        .map(|r| r["body"]["paymentRequirements"]["amount"].clone())
        .collect::<Vec<_>>();
    assert_eq!(
        settles,
        [json!((2 * STEP).to_string()), json!(STEP.to_string())],
        "one settlement a task, of what its steps cost"
    );
    assert_verified(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upto_settles_nothing_for_a_task_cancelled_before_any_step() {
    let s = std::sync::Arc::new(stack().await);
    let (payer, before) = upto_payer(&s).await;
    // A2A, not waiting for the task; the agent's clock stands still: no step completes.
    let call = Call::post(
        &s.proxy.url("/stop"),
        json!({"jsonrpc": "2.0", "id": 1, "method": "message/send",
            "params": {"message": {"kind": "message", "messageId": "m-1", "role": "user",
                "parts": [{"kind": "text", "text": "slow"}]},
                "configuration": {"blocking": false}}}),
    );
    let paid = {
        let (s, payer) = (s.clone(), payer.clone());
        blocking(move || call.pay(&s.chain, &payer)).await
    };
    assert_eq!(paid.status, 200, "{paid:?}");
    let front_id = paid.body["result"]["id"]
        .as_str()
        .expect("the task's id")
        .to_string();
    // The payer cancels it, known by its payment.
    let signature = paid.payment_signature.clone().expect("the signature");
    let resp = client()
        .post(s.proxy.url("/stop"))
        .header("payment-signature", signature)
        .json(&json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/cancel",
            "params": {"id": front_id}}))
        .send()
        .await
        .expect("the cancel is answered");
    let (status, body) = common::status_and_json(resp).await;
    assert_eq!(
        (status, &body["result"]["status"]["state"]),
        (200, &json!("canceled")),
        "{body}"
    );
    let account = account_of(&s.chain, &payer);
    let task_id = held_task(&s, &account).await;
    let sale = sale_closed(&s, "a2a", &paid, &front_id, &task_id).await;
    assert_eq!(
        (sale.state, sale.settled),
        (SaleState::Void, None),
        "{sale:?}"
    );
    let balance = s.store().balance(&account).await.expect("balance");
    assert_eq!(
        (balance.granted, balance.captured, balance.held),
        (0, 0, 0),
        "{balance:?}"
    );
    // Verified, never settled: nothing moved on chain.
    let paths: Vec<_> = s
        .facilitator
        .log()
        .iter()
        .map(|r| r["path"].clone())
        .collect();
    assert_eq!(paths, [json!("/verify")]);
    assert_eq!(s.balances(&payer), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upto_settles_what_is_done_when_the_authorisation_is_about_to_expire() {
    let s = std::sync::Arc::new(stack().await);
    let (payer, before) = upto_payer(&s).await;
    let call = Call::post(
        &s.proxy.url(&format!("/soon/api/v1/agents/{DID}/tasks")),
        json!({"input_query": "slow"}),
    );
    let paid = {
        let (s, payer) = (s.clone(), payer.clone());
        blocking(move || call.pay(&s.chain, &payer)).await
    };
    assert_eq!(paid.status, 201, "{paid:?}");
    // The first step completes; the task then works on, past the authorisation's 15 s.
    s.clock.advance(SLOW_WORK / 3);
    let front_id = paid.body["task"]["task_id"]
        .as_str()
        .expect("id")
        .to_string();
    let account = account_of(&s.chain, &payer);
    let task_id = held_task(&s, &account).await;
    let sale = sale_closed(&s, "soon", &paid, &front_id, &task_id).await;
    assert_eq!(sale.state, SaleState::Settled, "{sale:?}");
    assert_eq!(
        sale.settled,
        Some(STEP as u64),
        "one step was done: {sale:?}"
    );
    assert!(
        chrono::Utc::now() < sale.deadline,
        "settled before the deadline: {sale:?}"
    );
    assert_eq!(
        s.balances(&payer),
        (before.0 - STEP, before.1 + STEP),
        "what was done by the deadline, settled once"
    );
    let task = s
        .store()
        .get(&task_id)
        .await
        .expect("get")
        .expect("the task");
    assert!(
        !task.task.status.is_terminal(),
        "the task works on: {:?}",
        task.task.status
    );
    // The rest of the task is not paid for: nothing more is settled when it ends.
    s.clock.advance(SLOW_WORK);
    eventually("the task to end", || {
        let poll = poll_as_payer(&s, "soon", &paid, &front_id);
        let store = s.store();
        let task_id = task_id.clone();
        async move {
            poll.await;
            match store.get(&task_id).await {
                Ok(Some(t)) if t.task.status.is_terminal() => Ok(()),
                other => Err(format!("{:?}", other.map(|t| t.map(|t| t.task.status)))),
            }
        }
    })
    .await;
    let sales = s.store().sales(&task_id).await.expect("sales");
    assert_eq!(sales.len(), 1);
    assert_eq!(sales[0].settled, Some(STEP as u64), "{sales:?}");
    assert_eq!(s.balances(&payer), (before.0 - STEP, before.1 + STEP));
    let balance = s.store().balance(&account).await.expect("balance");
    assert_eq!(balance.held, 0, "{balance:?}");
    assert!(balance.available() >= 0, "{balance:?}");
    assert_verified(&s).await;
}

/// One call of the route `tool` by an MCP host: the MCP SDK's session wrapped by the x402 SDK's
/// (`tests/peers/x402_mcp_client.py`), paying as `payer` (or not at all).
fn mcp_call(s: &Stack, payer: Option<&Account>) -> Value {
    let args = [
        "--url".to_string(),
        s.proxy.url("/tool"),
        "--tool".into(),
        "tool".into(),
        "--arguments".into(),
        json!({"text": "hello"}).to_string(),
    ];
    paying_peer(s, "x402_mcp_client.py", &args, payer)
}

/// Runs one of the x402 virtualenv's peers with `args`, and `--key`/`--asset` to pay as `payer`
/// when there is one; the JSON line it prints.
fn paying_peer(s: &Stack, script: &str, args: &[String], payer: Option<&Account>) -> Value {
    let mut args = args.to_vec();
    if let Some(payer) = payer {
        args.extend([
            "--key".into(),
            payer.key.clone(),
            "--asset".into(),
            s.chain.token().to_string(),
        ]);
    }
    common::peers::run_json(
        &common::peers::x402_python(),
        script,
        &args,
        common::DEADLINE,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_host_pays_a_tool_call_in_band_as_x402s_mcp_transport_says() {
    let s = std::sync::Arc::new(stack().await);
    // Unpaid: a tool error carrying what to pay, not a JSON-RPC error.
    let unpaid = {
        let s = s.clone();
        blocking(move || mcp_call(&s, None)).await
    };
    assert_eq!(unpaid["is_error"], true, "{unpaid}");
    assert_eq!(unpaid["payment_made"], false, "{unpaid}");
    let required = &unpaid["structured"];
    assert_eq!(required["x402Version"], 2, "{unpaid}");
    assert_eq!(
        required["accepts"][0]["amount"],
        PRICE.to_string(),
        "{unpaid}"
    );
    let text: Value = serde_json::from_str(unpaid["text"].as_str().expect("text")).expect("JSON");
    assert_eq!(&text, required, "the text is the same document");

    let payer = s.payer(FUNDS);
    let before = s.balances(&payer);
    let paid = {
        let (s, payer) = (s.clone(), payer.clone());
        blocking(move || mcp_call(&s, Some(&payer))).await
    };
    assert_eq!(paid["is_error"], false, "{paid}");
    assert_eq!(paid["payment_made"], true, "{paid}");
    assert!(
        paid["text"].as_str().is_some_and(|t| t.contains("HELLO")),
        "the agent's answer: {paid}"
    );
    let receipt = &paid["payment_response"];
    assert_eq!(receipt["success"], true, "{paid}");
    let tx = receipt["transaction"].as_str().expect("a transaction");
    assert_eq!(s.chain.receipt(tx)["status"], "0x1");
    assert_eq!(s.balances(&payer), (before.0 - PRICE, before.1 + PRICE));
    assert_verified(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paid_create_the_agent_never_gets_is_not_settled_and_gives_the_payment_back() {
    let s = std::sync::Arc::new(stack().await);
    let payer = s.payer(FUNDS);
    let before = s.balances(&payer);
    let call = Call::post(
        &s.proxy.url("/down/start_job"),
        json!({"identifier_from_purchaser": "aabbccddeeff0011", "input_data": {"text": "hello"}}),
    );
    let paid = {
        let (s, payer) = (s.clone(), payer.clone());
        blocking(move || call.pay(&s.chain, &payer)).await
    };
    assert_eq!((paid.status, paid.sent), (502, 2), "{paid:?}");
    assert!(paid.payment_response.is_none(), "nothing settled: {paid:?}");
    assert_eq!(s.balances(&payer), before, "nothing moved on chain");
    let account = account_of(&s.chain, &payer);
    let task_id = held_task(&s, &account).await;
    let sales = s.store().sales(&task_id).await.expect("sales");
    assert_eq!(sales.len(), 1, "{sales:?}");
    assert_eq!(sales[0].state, SaleState::Void, "{sales:?}");
    let rows: Vec<(String, i64)> = s
        .store()
        .history(&account, 10)
        .await
        .expect("history")
        .into_iter()
        .rev()
        .map(|r| (r.kind, r.amount))
        .collect();
    let price = PRICE as i64;
    assert_eq!(
        rows,
        [
            ("grant".to_string(), price),
            ("hold".to_string(), price),
            ("release".to_string(), price),
            ("revoke".to_string(), price)
        ],
        "granted when verified, taken back when the create failed"
    );
    let balance = s.store().balance(&account).await.expect("balance");
    assert_eq!((balance.granted, balance.captured, balance.held), (0, 0, 0));
    assert_verified(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_payment_sent_ten_times_at_once_pays_for_one_task() {
    use interlingua::payment::x402::sign::{build_payment_payload, Nonce, Wallet};
    let s = std::sync::Arc::new(stack().await);
    let payer = s.payer(FUNDS);
    let before = s.balances(&payer);
    // The offer as the route's 402 names it, signed once (interlingua's own signer, which makes
    // what the SDK's client makes: src/payment/x402/sign.rs).
    let unpaid = {
        let s = s.clone();
        blocking(move || s.creates().remove(0).1.send()).await
    };
    let required = unpaid.payment_required.expect("PAYMENT-REQUIRED");
    let wallet = Wallet::from_hex(&payer.key).expect("the payer's key");
    let now = chrono::Utc::now().timestamp() as u64;
    let payload = build_payment_payload(
        &wallet,
        &required["accepts"][0],
        Some(&required["resource"]),
        None,
        now,
        Nonce::random().expect("a nonce"),
    )
    .expect("a payment");
    let header = base64::engine::general_purpose::STANDARD.encode(payload.to_string());
    let sends = (0..10).map(|_| {
        client()
            .post(s.proxy.url("/mip/start_job"))
            .header("payment-signature", &header)
            .json(&json!({"identifier_from_purchaser": "aabbccddeeff0011", "input_data": {"text": "once"}}))
            .send()
    });
    let statuses: Vec<u16> = futures_util::future::join_all(sends)
        .await
        .into_iter()
        .map(|r| r.expect("answered").status().as_u16())
        .collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        1,
        "one task: {statuses:?}"
    );
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 402),
        "{statuses:?}"
    );
    assert_eq!(
        s.balances(&payer),
        (before.0 - PRICE, before.1 + PRICE),
        "paid once"
    );
    let account = account_of(&s.chain, &payer);
    let holds = s
        .store()
        .history(&account, 50)
        .await
        .expect("history")
        .iter()
        .filter(|r| r.kind == "hold")
        .count();
    assert_eq!(holds, 1, "one task held");
    assert_verified(&s).await;
}

/// One A2A client's purchase on the route at `/a2a`, in band (the A2A x402 extension): the
/// a2a-sdk client with the x402 SDK's signer (`tests/peers/x402_a2a_client.py`), paying as
/// `payer` (or only asking, without one).
fn a2a_in_band(s: &Stack, payer: Option<&Account>) -> Value {
    let args = [
        "--url".to_string(),
        s.proxy.url("/a2a"),
        "--text".into(),
        "hello".into(),
    ];
    paying_peer(s, "x402_a2a_client.py", &args, payer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_a2a_client_pays_in_band_as_the_a2a_x402_extension_says() {
    let s = std::sync::Arc::new(stack().await);
    let payer = s.payer(FUNDS);
    let before = s.balances(&payer);
    let out = {
        let (s, payer) = (s.clone(), payer.clone());
        blocking(move || a2a_in_band(&s, Some(&payer))).await
    };
    // The card declares the extension.
    let extensions = out["card_extensions"].as_array().expect("extensions");
    assert!(
        extensions.iter().any(|e| e["uri"]
            == "https://github.com/google-agentic-commerce/a2a-x402/blob/main/spec/v0.2"
            && e["required"] == true),
        "{out}"
    );
    // Unpaid: a task waiting for input, the requirements in its status message.
    let first = &out["first"];
    assert_eq!(first["state"], "TASK_STATE_INPUT_REQUIRED", "{out}");
    let metadata = &first["metadata"];
    assert_eq!(metadata["x402.payment.status"], "payment-required", "{out}");
    let required = &metadata["x402.payment.required"];
    assert_eq!(required["x402Version"], 2, "{out}");
    assert_eq!(required["accepts"][0]["amount"], PRICE.to_string(), "{out}");
    assert_eq!(required["accepts"][0]["payTo"], s.pay_to.address, "{out}");
    // Paid on the same task: it ran to its end, the receipt in its final status message.
    let second = &out["second"];
    assert_eq!(second["state"], "TASK_STATE_COMPLETED", "{out}");
    assert_eq!(second["artifact_text"], "HELLO", "{out}");
    let metadata = &second["metadata"];
    assert_eq!(
        metadata["x402.payment.status"], "payment-completed",
        "{out}"
    );
    let receipts = metadata["x402.payment.receipts"]
        .as_array()
        .expect("receipts");
    assert_eq!(receipts.len(), 1, "{out}");
    assert_eq!(receipts[0]["success"], true, "{out}");
    let tx = receipts[0]["transaction"].as_str().expect("a transaction");
    assert_eq!(s.chain.receipt(tx)["status"], "0x1");
    assert_eq!(s.balances(&payer), (before.0 - PRICE, before.1 + PRICE));
    // The task is the payer's now, with its sale settled; the ledger holds, captures, releases.
    let task_id = out["task_id"].as_str().expect("a task id");
    let stored = s
        .store()
        .get(task_id)
        .await
        .expect("the store")
        .expect("the task");
    let account = account_of(&s.chain, &payer);
    assert_eq!(
        stored.task.subject.as_deref(),
        Some(account.subject.as_str())
    );
    let sales = s.store().sales(task_id).await.expect("sales");
    assert_eq!(sales.len(), 1, "{sales:?}");
    assert_eq!(sales[0].transaction.as_deref(), Some(tx));
    assert_verified(&s).await;

    // An unpaid ask that is never paid for: nothing held, nothing asked of the agent.
    let unpaid = {
        let s = s.clone();
        blocking(move || a2a_in_band(&s, None)).await
    };
    assert_eq!(
        unpaid["first"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{unpaid}"
    );
    let waiting = unpaid["task_id"].as_str().expect("a task id");
    let stored = s
        .store()
        .get(waiting)
        .await
        .expect("the store")
        .expect("the task");
    assert!(stored.task.awaits_first_payment(), "{:?}", stored.task);
    assert!(s
        .store()
        .ledger_of_task(waiting)
        .await
        .expect("ledger")
        .is_empty());
}
