//! x402 payments across a SIGKILL: interlingua killed while a settlement is in flight, before it
//! reached the chain and after, is restarted; each payment is then settled exactly once. The
//! facilitator is the official x402 SDK's on a local anvil node (`tests/common/chain.rs`),
//! holding the settlement until the test says whether it goes on to the chain.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::chain::{Account, Call, Chain, Facilitator, NETWORK, TOKEN_NAME, TOKEN_VERSION};
use common::process::serve;
use common::wait::eventually;
use common::{config, sample_agent};
use serde_json::json;
use store::{SaleState, SqliteStore, TaskStore};

const PRICE: u128 = 10_000;
const FUNDS: u128 = 5_000_000;

/// A MIP-003 route over the sample agent taking an `exact` payment of [`PRICE`].
fn route(
    agent: std::net::SocketAddr,
    chain: &Chain,
    facilitator: &Facilitator,
    pay_to: &str,
) -> String {
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
            facilitator.url(),
            chain.token()
        ),
    )
}

/// Pays a create through a proxy that is killed while the settlement is held, lets the
/// settlement go on to the chain (`sent`) or not, restarts the proxy and waits for the sale to
/// be settled; asserts it was, once.
async fn killed_while_settling(sent: bool) {
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
    let dir = tempfile::tempdir().expect("a directory");
    let data = dir.path().join("data");
    let file = dir.path().join("interlingua.toml");
    let text = route(agent, &chain, &facilitator, &pay_to.address)
        .replace("{data_dir}", &data.display().to_string());
    std::fs::write(&file, text).expect("the config file");

    facilitator.hold_settles();
    let first = serve(&file, Stdio::null());
    let call = Call::post(
        &format!("http://{}/start_job", first.proxy),
        json!({"identifier_from_purchaser": "aabbccddeeff0011", "input_data": {"text": "hello"}}),
    );
    let python_chain = std::sync::Arc::new(chain);
    let paying = {
        let (chain, payer) = (python_chain.clone(), payer.clone());
        // Its answer never comes (the proxy is killed first): the client fails, and that is all.
        std::thread::spawn(move || call.pay(&chain, &payer))
    };
    let f = std::sync::Arc::new(facilitator);
    {
        let f = f.clone();
        eventually("the settlement to be in flight", move || {
            let f = f.clone();
            async move {
                match tokio::task::spawn_blocking(move || f.held_settles()).await {
                    Ok(1) => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            }
        })
        .await;
    }
    first.kill();
    {
        let f = f.clone();
        tokio::task::spawn_blocking(move || f.release(sent))
            .await
            .expect("release");
    }
    let _ = paying.join();
    let chain = python_chain;
    let before_restart = (
        chain.balance_of(&payer.address),
        chain.balance_of(&pay_to.address),
    );
    let expected_now = if sent {
        (FUNDS - PRICE, PRICE)
    } else {
        (FUNDS, 0)
    };
    assert_eq!(before_restart, expected_now, "sent: {sent}");

    let second = serve(&file, Stdio::null());
    let token = chain.token().to_string();
    let sale = eventually("the sale to be settled after the restart", || {
        let (data, token, payer) = (data.clone(), token.clone(), payer.clone());
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
    .await;
    second.kill();
    assert_eq!(sale.state, SaleState::Settled, "sent: {sent}: {sale:?}");
    assert_eq!(sale.settled, Some(PRICE as u64));
    assert_eq!(
        (
            chain.balance_of(&payer.address),
            chain.balance_of(&pay_to.address)
        ),
        (FUNDS - PRICE, PRICE),
        "sent: {sent}: paid exactly once"
    );
    let settles: Vec<i64> = f
        .log()
        .iter()
        .filter(|r| r["path"] == "/settle")
        .map(|r| r["status"].as_i64().unwrap_or(0))
        .collect();
    if sent {
        assert_eq!(
            settles,
            [200],
            "the settlement that went through is not sent again"
        );
        assert!(
            sale.transaction.is_none(),
            "its transaction was lost with the process: {sale:?}"
        );
    } else {
        assert_eq!(
            settles,
            [503, 200],
            "the dropped settlement is sent once more"
        );
        let tx = sale.transaction.clone().expect("a transaction");
        assert_eq!(chain.receipt(&tx)["status"], "0x1");
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
