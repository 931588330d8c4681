//! The x402 stack alone, without interlingua: the contract the x402 tests through the proxy rely
//! on. The official x402 SDK (Python, x402 2.25.0) pays as a client, charges as a paid MIP-003
//! agent (its FastAPI middleware) and verifies and settles as the facilitator, in the tests' own
//! EIP-3009 token on a local anvil node (`tests/common/chain.rs`). What is asserted is what the
//! chain says: exact balances, the settlement's receipt, and what the facilitator was asked.
//!
//! The wire is x402 v2 over HTTP (https://github.com/coinbase/x402/blob/main/specs/transports-v2/http.md):
//! 402 with `PAYMENT-REQUIRED`, a retry with `PAYMENT-SIGNATURE`, 200 with `PAYMENT-RESPONSE`.

mod common;

use common::chain::{Account, Call, Chain, Facilitator, PaidAgent, NETWORK};
use serde_json::{json, Value};

/// What a job costs: 0.01 of a 6-decimal token.
const PRICE: u128 = 10_000;
/// What a funded payer holds before paying.
const FUNDS: u128 = 5_000_000;

/// A chain, the SDK's facilitator on it (with `auth`, if any) and a paid agent whose `/start_job`
/// costs [`PRICE`], paid to a fresh account.
struct Stack {
    agent: PaidAgent,
    facilitator: Facilitator,
    chain: Chain,
}

fn stack(auth: Option<&str>) -> Stack {
    let chain = Chain::start();
    let facilitator = Facilitator::start(&chain, auth);
    let pay_to = chain.new_account();
    let agent = PaidAgent::start(&chain, &facilitator, PRICE, &pay_to.address);
    Stack {
        agent,
        facilitator,
        chain,
    }
}

impl Stack {
    fn payer(&self, amount: u128) -> Account {
        self.chain.funded_account(amount)
    }

    fn start_job(&self) -> Call {
        Call::post(
            &self.agent.url("/start_job"),
            json!({"identifier_from_purchaser": "aabbccddeeff0011", "input_data": {"text": "hello world"}}),
        )
    }

    /// The payer's and the payee's balances.
    fn balances(&self, payer: &Account) -> (u128, u128) {
        (
            self.chain.balance_of(&payer.address),
            self.chain.balance_of(self.agent.pay_to()),
        )
    }
}

fn same_address(a: &Value, b: &str) -> bool {
    a.as_str().is_some_and(|a| a.eq_ignore_ascii_case(b))
}

#[test]
fn an_unpaid_start_job_is_answered_402_with_the_price_in_payment_required() {
    let s = stack(None);
    let answer = s.start_job().send();
    assert_eq!(answer.status, 402, "{answer:?}");
    assert!(answer.payment_response.is_none(), "{answer:?}");
    let required = answer.payment_required.expect("PAYMENT-REQUIRED");
    assert_eq!(required["x402Version"], 2, "{required}");
    assert_eq!(
        required["accepts"],
        json!([{
            "scheme": "exact",
            "network": NETWORK,
            "asset": s.chain.token(),
            "amount": PRICE.to_string(),
            "payTo": s.agent.pay_to(),
            "maxTimeoutSeconds": 300,
            "extra": {"name": "USDC", "version": "2"},
        }]),
        "{required}"
    );
    assert!(s.agent.jobs().is_empty(), "no job without payment");
    assert!(s.facilitator.calls().is_empty(), "nothing to verify");
    // The free routes stay free.
    let available = Call::get(&s.agent.url("/availability")).send();
    assert_eq!(
        (available.status, &available.body["status"]),
        (200, &json!("available"))
    );
}

#[test]
fn a_paid_start_job_moves_the_price_from_payer_to_pay_to() {
    let s = stack(None);
    let payer = s.payer(FUNDS);
    assert_eq!(s.balances(&payer), (FUNDS, 0));

    let paid = s.start_job().pay(&s.chain, &payer);
    assert_eq!(
        (paid.status, paid.sent),
        (200, 2),
        "a 402, then the paid retry: {paid:?}"
    );
    let receipt = paid.payment_response.clone().expect("PAYMENT-RESPONSE");
    assert_eq!(receipt["success"], true, "{receipt}");
    assert_eq!(receipt["network"], NETWORK, "{receipt}");
    assert!(same_address(&receipt["payer"], &payer.address), "{receipt}");
    let tx = receipt["transaction"].as_str().expect("a transaction hash");
    assert!(
        tx.len() == 66 && tx.starts_with("0x") && tx[2..].chars().all(|c| c.is_ascii_hexdigit()),
        "{tx}"
    );

    // On chain: the facilitator sent the transfer to the token, and it went through.
    let mined = s.chain.receipt(tx);
    assert_eq!(mined["status"], "0x1", "{mined}");
    assert!(
        same_address(&mined["from"], s.facilitator.address()),
        "{mined}"
    );
    assert!(same_address(&mined["to"], s.chain.token()), "{mined}");
    assert_eq!(s.balances(&payer), (FUNDS - PRICE, PRICE));

    // The facilitator was asked to verify, then to settle, the payment the client signed.
    assert_eq!(s.facilitator.calls(), ["/verify", "/settle"]);
    let log = s.facilitator.log();
    let settle = &log
        .iter()
        .find(|r| r["path"] == "/settle")
        .expect("a settle")["body"];
    assert_eq!(settle["x402Version"], 2, "{settle}");
    assert_eq!(
        settle["paymentRequirements"]["amount"],
        PRICE.to_string(),
        "{settle}"
    );
    assert!(
        same_address(&settle["paymentRequirements"]["payTo"], s.agent.pay_to()),
        "{settle}"
    );
    let authorization = &settle["paymentPayload"]["payload"]["authorization"];
    assert!(
        same_address(&authorization["from"], &payer.address),
        "{settle}"
    );
    assert_eq!(authorization["value"], PRICE.to_string(), "{settle}");

    // The job ran, once, for this payer, and its status is free to read.
    let jobs = s.agent.jobs();
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert!(same_address(&jobs[0]["payer"], &payer.address), "{jobs:?}");
    let job_id = paid.body["id"].as_str().expect("the job's id");
    assert_eq!(jobs[0]["job_id"], job_id);
    let status = Call::get(&s.agent.url(&format!("/status?job_id={job_id}"))).send();
    assert_eq!(status.status, 200, "{status:?}");
    assert_eq!(
        (&status.body["status"], &status.body["result"]),
        (&json!("completed"), &json!("HELLO WORLD"))
    );
}

#[test]
fn a_replayed_payment_signature_is_refused_with_402_and_moves_nothing() {
    let s = stack(None);
    let payer = s.payer(FUNDS);
    let paid = s.start_job().pay(&s.chain, &payer);
    assert_eq!(paid.status, 200, "{paid:?}");
    let signature = paid.payment_signature.expect("the PAYMENT-SIGNATURE sent");
    let after_one = s.balances(&payer);
    assert_eq!(after_one, (FUNDS - PRICE, PRICE));

    let replayed = s.start_job().replay(&signature);
    assert_eq!((replayed.status, replayed.sent), (402, 1), "{replayed:?}");
    assert!(
        replayed.payment_response.is_none(),
        "nothing settled: {replayed:?}"
    );
    let required = replayed.payment_required.expect("a fresh PAYMENT-REQUIRED");
    // The facilitator's verify simulated the transfer, and the token refused the used nonce.
    assert_eq!(
        required["error"], "invalid_exact_evm_nonce_already_used",
        "{required}"
    );
    assert_eq!(s.balances(&payer), after_one);
    assert_eq!(s.facilitator.calls(), ["/verify", "/settle", "/verify"]);
    assert_eq!(s.agent.jobs().len(), 1, "the replay started no job");
}

#[test]
fn a_payer_without_tokens_is_refused_with_insufficient_balance() {
    let s = stack(None);
    let payer = s.payer(0);
    let refused = s.start_job().pay(&s.chain, &payer);
    assert_eq!(
        (refused.status, refused.sent),
        (402, 2),
        "the client signed, the agent refused: {refused:?}"
    );
    assert!(refused.payment_response.is_none(), "{refused:?}");
    let required = refused.payment_required.expect("a fresh PAYMENT-REQUIRED");
    assert_eq!(
        required["error"], "invalid_exact_evm_insufficient_balance",
        "{required}"
    );
    assert_eq!(s.balances(&payer), (0, 0));
    assert_eq!(s.facilitator.calls(), ["/verify"]);
    assert!(s.agent.jobs().is_empty());
}

#[test]
fn a_facilitator_with_auth_refuses_calls_without_it_and_serves_the_agent_that_sends_it() {
    let s = stack(Some("Bearer s3cret"));
    let payer = s.payer(FUNDS);
    let paid = s.start_job().pay(&s.chain, &payer);
    assert_eq!(paid.status, 200, "{paid:?}");
    assert_eq!(s.balances(&payer), (FUNDS - PRICE, PRICE));
    let log = s.facilitator.log();
    assert!(!log.is_empty());
    for request in &log {
        assert_eq!(request["authorization"], "Bearer s3cret", "{request}");
        assert_eq!(request["status"], 200, "{request}");
    }

    let settle_body = log
        .iter()
        .find(|r| r["path"] == "/settle")
        .expect("a settle")["body"]
        .clone();
    let anonymous = Call::post(
        &format!("{}/settle", s.facilitator.url()),
        settle_body.clone(),
    )
    .send();
    assert_eq!(anonymous.status, 401, "{anonymous:?}");
    let wrong = Call::post(&format!("{}/settle", s.facilitator.url()), settle_body)
        .header("Authorization", "Bearer wrong")
        .send();
    assert_eq!(wrong.status, 401, "{wrong:?}");
    assert_eq!(
        s.balances(&payer),
        (FUNDS - PRICE, PRICE),
        "a refused settle moves nothing"
    );
}
