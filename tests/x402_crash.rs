//! x402 payments cut short: interlingua killed while a settlement is in flight, before it
//! reached the chain and after, is restarted; a client hangs up while its payment settles. Each
//! payment is then settled exactly once. The facilitator is the official x402 SDK's on a local
//! anvil node (`tests/common/chain.rs`), holding the settlement until the test says whether it
//! goes on to the chain.

mod common;

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use common::chain::{Account, Call, Chain, Facilitator, Paid, NETWORK, TOKEN_NAME, TOKEN_VERSION};
use common::process::serve;
use common::relay::Relay;
use common::wait::eventually;
use common::{config, sample_agent};
use serde_json::json;
use store::{SaleState, SqliteStore, TaskStore};

const PRICE: u128 = 10_000;
const FUNDS: u128 = 5_000_000;

/// A MIP-003 route over the sample agent taking an `exact` payment of [`PRICE`].
fn route(agent: std::net::SocketAddr, chain: &Chain, facilitator: &str, pay_to: &str) -> String {
    config(
        "",
        &format!(
            r#"[[upstreams]]
name = "mip"
address = "{agent}"

[[routes]]
name = "mip"
match = {{ path_prefix = "/" }}
upstream = "mip"
front = "mip003"
back = "mip003"
[routes.payment.accept.x402]
facilitator = "{}"
offers = [{{ scheme = "exact", network = "{NETWORK}", asset = "{}", asset_name = "{TOKEN_NAME}", asset_version = "{TOKEN_VERSION}", pay_to = "{pay_to}", per_call = {PRICE} }}]
"#,
            facilitator,
            chain.token()
        ),
    )
}

/// The job every test starts.
fn job() -> serde_json::Value {
    json!({"identifier_from_purchaser": "aabbccddeeff0011", "input_data": {"text": "hello"}})
}

/// A chain, the SDK's facilitator, the sample MIP-003 agent and the config of [`route`] over
/// them in a directory of its own.
struct Stack {
    chain: Chain,
    facilitator: Facilitator,
    pay_to: Account,
    payer: Account,
    dir: tempfile::TempDir,
    /// Between interlingua and the facilitator, when the test loses answers.
    relay: Option<Relay>,
}

impl Stack {
    async fn start() -> Arc<Stack> {
        Stack::start_with(false).await
    }

    /// The stack, its facilitator behind a [`Relay`] if `relayed`.
    async fn start_with(relayed: bool) -> Arc<Stack> {
        let agent = sample_agent(samples::mip003::serve, Duration::from_millis(100)).await;
        let (chain, facilitator, pay_to, payer) = tokio::task::spawn_blocking(|| {
            let chain = Chain::start();
            let facilitator = Facilitator::start(&chain, None);
            let pay_to = chain.new_account();
            let payer = chain.funded_account(FUNDS);
            (chain, facilitator, pay_to, payer)
        })
        .await
        .expect("the stack starts");
        let relay = match relayed {
            true => Some(Relay::start(facilitator.addr()).await),
            false => None,
        };
        let url = match &relay {
            Some(r) => format!("http://{}", r.addr),
            None => facilitator.url(),
        };
        let dir = tempfile::tempdir().expect("a directory");
        let text = route(agent, &chain, &url, &pay_to.address)
            .replace("{data_dir}", &dir.path().join("data").display().to_string());
        std::fs::write(dir.path().join("interlingua.toml"), text).expect("the config file");
        Arc::new(Stack {
            chain,
            facilitator,
            pay_to,
            payer,
            dir,
            relay,
        })
    }

    fn data(&self) -> std::path::PathBuf {
        self.dir.path().join("data")
    }

    fn file(&self) -> std::path::PathBuf {
        self.dir.path().join("interlingua.toml")
    }

    /// A `start_job` to the proxy at `proxy`, paid by the SDK's client, on a thread of its own.
    fn pay(self: &Arc<Self>, proxy: std::net::SocketAddr) -> tokio::task::JoinHandle<Paid> {
        let call = Call::post(&format!("http://{proxy}/start_job"), job());
        let stack = self.clone();
        tokio::task::spawn_blocking(move || call.pay(&stack.chain, &stack.payer))
    }

    /// Waits until the facilitator holds `n` settlements.
    async fn held(self: &Arc<Self>, n: u64) {
        eventually("the settlement to be in flight", || {
            let stack = self.clone();
            async move {
                match tokio::task::spawn_blocking(move || stack.facilitator.held_settles()).await {
                    Ok(held) if held == n => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            }
        })
        .await;
    }

    /// Lets the held settlements go on to the chain (`send`) or fail.
    async fn release(self: &Arc<Self>, send: bool) {
        let stack = self.clone();
        tokio::task::spawn_blocking(move || stack.facilitator.release(send))
            .await
            .expect("release");
    }

    /// Waits until the payer's one sale is final, and returns it.
    async fn final_sale(&self) -> store::Sale {
        let (data, token) = (self.data(), self.chain.token().to_string());
        eventually("the sale to be final", || {
            let (data, token, payer) = (data.clone(), token.clone(), self.payer.clone());
            async move {
                let store = SqliteStore::open(&data).map_err(|e| e.to_string())?;
                let sales = store.open_sales().await.map_err(|e| e.to_string())?;
                if !sales.is_empty() {
                    return Err(format!("still open: {sales:?}"));
                }
                let all = all_sales(&store, &token, &payer).await;
                match all.as_slice() {
                    [one] if one.state.is_final() => Ok(one.clone()),
                    other => Err(format!("{other:?}")),
                }
            }
        })
        .await
    }

    /// The statuses the facilitator answered `/settle` with, in order.
    fn settles(&self) -> Vec<i64> {
        self.facilitator
            .log()
            .iter()
            .filter(|r| r["path"] == "/settle")
            .map(|r| r["status"].as_i64().unwrap_or(0))
            .collect()
    }

    /// The payer's and the operator's balances.
    fn balances(&self) -> (u128, u128) {
        (
            self.chain.balance_of(&self.payer.address),
            self.chain.balance_of(&self.pay_to.address),
        )
    }
}

/// Pays a create through a proxy that is killed while the settlement is held, lets the
/// settlement go on to the chain (`sent`) or not, restarts the proxy and waits for the sale to
/// be settled; asserts it was, once.
async fn killed_while_settling(sent: bool) {
    let stack = Stack::start().await;
    let file = stack.file();

    stack.facilitator.hold_settles();
    let first = serve(&file, Stdio::null());
    // Its answer never comes (the proxy is killed first): the client fails, and that is all.
    let paying = stack.pay(first.proxy);
    stack.held(1).await;
    first.kill();
    stack.release(sent).await;
    let _ = paying.await;
    let expected_now = if sent {
        (FUNDS - PRICE, PRICE)
    } else {
        (FUNDS, 0)
    };
    assert_eq!(stack.balances(), expected_now, "sent: {sent}");

    let second = serve(&file, Stdio::null());
    let sale = stack.final_sale().await;
    second.kill();
    assert_eq!(sale.state, SaleState::Settled, "sent: {sent}: {sale:?}");
    assert_eq!(sale.settled, Some(PRICE as u64));
    assert_eq!(
        stack.balances(),
        (FUNDS - PRICE, PRICE),
        "sent: {sent}: paid exactly once"
    );
    if sent {
        assert_eq!(
            stack.settles(),
            [200],
            "the settlement that went through is not sent again"
        );
        assert!(
            sale.transaction.is_none(),
            "its transaction was lost with the process: {sale:?}"
        );
    } else {
        assert_eq!(
            stack.settles(),
            [503, 200],
            "the dropped settlement is sent once more"
        );
        let tx = sale.transaction.clone().expect("a transaction");
        assert_eq!(stack.chain.receipt(&tx)["status"], "0x1");
    }
}

/// Every sale of `payer`, found through the task its ledger's hold names.
async fn all_sales(store: &SqliteStore, token: &str, payer: &Account) -> Vec<store::Sale> {
    let account = store::Account::new(
        &format!("x402:{}", token.to_ascii_lowercase()),
        &format!("{NETWORK}:{}", payer.address.to_ascii_lowercase()),
    );
    let rows = store.history(&account, 20).await.unwrap_or_default();
    let Some(task) = rows.iter().find_map(|r| r.task_id.clone()) else {
        return Vec::new();
    };
    store.sales(&task).await.unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settlement_killed_before_it_reached_the_chain_is_sent_once_after_a_restart() {
    killed_while_settling(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settlement_that_reached_the_chain_before_the_kill_is_recorded_not_sent_again() {
    killed_while_settling(true).await;
}

/// A client that hangs up while its payment settles: the settlement goes on without it, and is
/// recorded with its transaction, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_while_its_payment_settles_leaves_it_settled_and_recorded() {
    use interlingua::payment::x402::sign::{build_payment_payload, Nonce, Wallet};
    use interlingua::payment::x402::wire::encode_header;
    use tokio::io::AsyncWriteExt;

    let stack = Stack::start().await;
    let served = serve(&stack.file(), Stdio::null());
    let body =
        json!({"identifier_from_purchaser": "aabbccddeeff0011", "input_data": {"text": "hello"}})
            .to_string();
    let call = Call::post(
        &format!("http://{}/start_job", served.proxy),
        serde_json::from_str(&body).expect("JSON"),
    );
    let unpaid = tokio::task::spawn_blocking(move || call.send())
        .await
        .expect("the unpaid call");
    assert_eq!(unpaid.status, 402);
    let required = unpaid.payment_required.expect("PAYMENT-REQUIRED");
    let wallet = Wallet::from_hex(&stack.payer.key).expect("the payer's key");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_secs();
    let payload = build_payment_payload(
        &wallet,
        &required["accepts"][0],
        Some(&required["resource"]),
        required.get("extensions"),
        now,
        Nonce::random().expect("a nonce"),
    )
    .expect("a payment");

    stack.facilitator.hold_settles();
    let mut client = tokio::net::TcpStream::connect(served.proxy)
        .await
        .expect("connect");
    let request = format!(
        "POST /start_job HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nPAYMENT-SIGNATURE: {}\r\n\r\n{body}",
        served.proxy,
        body.len(),
        encode_header(&payload)
    );
    client
        .write_all(request.as_bytes())
        .await
        .expect("the paid request");
    stack.held(1).await;
    drop(client);
    stack.release(true).await;

    let sale = stack.final_sale().await;
    served.kill();
    assert_eq!(sale.state, SaleState::Settled, "{sale:?}");
    assert_eq!(sale.settled, Some(PRICE as u64));
    let tx = sale.transaction.clone().expect("its transaction, recorded");
    assert_eq!(stack.chain.receipt(&tx)["status"], "0x1");
    assert_eq!(stack.settles(), [200], "settled once");
    assert_eq!(
        stack.balances(),
        (FUNDS - PRICE, PRICE),
        "paid exactly once"
    );
}

/// A settlement that reached the chain and whose answer was lost on the way back: it is not
/// sent again (a second one would fail, its nonce spent, and the payment be taken for refused);
/// the create answers 2xx without a receipt, and the sweep records the sale settled once the
/// facilitator says the nonce is spent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settlement_whose_answer_is_lost_is_not_sent_again_and_is_found_settled() {
    let stack = Stack::start_with(true).await;
    let served = serve(&stack.file(), Stdio::null());
    stack.relay.as_ref().expect("a relay").lose("POST /settle");
    let paid = stack.pay(served.proxy).await.expect("the paid call");
    assert_eq!(paid.status, 200, "the task runs: {:?}", paid.body);
    assert_eq!(
        paid.payment_response, None,
        "no receipt: the answer was lost"
    );

    let sale = stack.final_sale().await;
    served.kill();
    assert_eq!(sale.state, SaleState::Settled, "{sale:?}");
    assert_eq!(sale.settled, Some(PRICE as u64));
    assert_eq!(stack.settles(), [200], "sent once");
    assert_eq!(
        stack.balances(),
        (FUNDS - PRICE, PRICE),
        "paid exactly once"
    );
}
