//! The seller side: S1 `POST /payment` (a payment request for one job), S2
//! `POST /payment/resolve-blockchain-identifier` (what the node sees of it) and S4
//! `POST /payment/submit-result` (the result's hash, which the node puts on chain), on the
//! operator's own node (the payment service's `src/routes/api/payments/`).
//!
//! The buyer's own node locks the funds (P1 on its side) with exactly the fields S1's answer
//! names, signed by this node: what `start_job` shows the buyer is taken from that answer, never
//! re-rendered ([`sale_fields`]).

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{json, Map, Value};

use super::{call, millis, note, Reply};
use crate::config::MasumiSeller;
use crate::upstream::{Client, Resend};

/// The ledger's plan prefix of a Masumi buyer's account (`masumi:lovelace`, `masumi:<unit>`).
pub const PLAN_PREFIX: &str = "masumi:";

/// A time as the node's S1 schema reads it: ISO 8601, milliseconds, `Z` (as masumi 1.2.0 sends
/// it; the node's millisecond strings are its answers' format, not its requests').
fn iso(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

fn after(now: DateTime<Utc>, d: std::time::Duration) -> DateTime<Utc> {
    now + chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

/// The S1 body of a job asked for at `now`.
pub fn request_body(
    seller: &MasumiSeller,
    client_ref: &str,
    input_hash: &str,
    task_id: &str,
    now: DateTime<Utc>,
) -> Value {
    let submit_by = after(now, seller.submit_result_by);
    let mut body = json!({
        "network": seller.node.network.name(),
        "agentIdentifier": seller.agent_identifier,
        "identifierFromPurchaser": client_ref,
        "inputHash": input_hash,
        "payByTime": iso(after(now, seller.pay_by)),
        "submitResultTime": iso(submit_by),
        "metadata": format!("interlingua task {task_id}"),
    });
    if let Some(unlock) = seller.unlock_after {
        body["unlockTime"] = iso(after(now, unlock)).into();
    }
    if let Some(dispute) = seller.dispute_unlock_after {
        body["externalDisputeUnlockTime"] = iso(after(now, dispute)).into();
    }
    if !seller.amounts.is_empty() {
        body["RequestedFunds"] = seller
            .amounts
            .iter()
            .map(|(amount, unit)| json!({ "amount": amount, "unit": unit }))
            .collect();
    }
    body
}

/// Whether `id` is a purchaser identifier the node takes: 14 to 26 hex digits, an even number.
pub fn valid_identifier(id: &str) -> bool {
    (14..=26).contains(&id.len()) && id.len() % 2 == 0 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// What a call to the node came to, with the record of the call.
pub enum Answer {
    /// 2xx: the Payment object.
    Data(Value),
    /// 4xx: the node's status and message.
    Refused(u16, String),
    /// 5xx, unreadable, or no answer.
    Failed(Option<u16>, String),
}

async fn ask(
    client: &Client,
    seller: &MasumiSeller,
    path: &str,
    body: &Value,
    resend: Resend,
    what: &str,
    calls: &mut Vec<Value>,
) -> Answer {
    match call(client, &seller.node, path, body, resend).await {
        Reply::Data(d) => {
            note(calls, what, Some(200), None);
            Answer::Data(d)
        }
        Reply::Conflict(_, m) => {
            note(calls, what, Some(409), Some(&m));
            Answer::Refused(409, m)
        }
        Reply::Refused(status, m) => {
            note(calls, what, Some(status), Some(&m));
            Answer::Refused(status, m)
        }
        Reply::Failed(status, m) => {
            note(calls, what, status, Some(&m));
            Answer::Failed(status, m)
        }
    }
}

/// S1, once: never sent again (the node signs a fresh nonce into each request, so a second
/// one is a second payment request), not even by the HTTP client on a connection it lost.
pub async fn request(
    client: &Client,
    seller: &MasumiSeller,
    body: &Value,
    calls: &mut Vec<Value>,
) -> Answer {
    ask(
        client,
        seller,
        "/payment",
        body,
        Resend::Never,
        "payment",
        calls,
    )
    .await
}

/// S2: the node's view of the payment.
pub async fn status(
    client: &Client,
    seller: &MasumiSeller,
    reference: &str,
    calls: &mut Vec<Value>,
) -> Answer {
    let body = json!({
        "blockchainIdentifier": reference,
        "network": seller.node.network.name(),
        // A string, not a boolean: the node's schema says so.
        "includeHistory": "false",
    });
    ask(
        client,
        seller,
        "/payment/resolve-blockchain-identifier",
        &body,
        Resend::Allowed,
        "status",
        calls,
    )
    .await
}

/// S4: the result's hash. Sent again after a lost answer only by the sale's owner, once it has
/// read S2 (a second S4 while one is queued is refused by the node: 404).
pub async fn submit(
    client: &Client,
    seller: &MasumiSeller,
    reference: &str,
    hash: &str,
    calls: &mut Vec<Value>,
) -> Answer {
    let body = json!({
        "network": seller.node.network.name(),
        "blockchainIdentifier": reference,
        "submitResultHash": hash,
    });
    ask(
        client,
        seller,
        "/payment/submit-result",
        &body,
        Resend::Never,
        "submit_result",
        calls,
    )
    .await
}

/// `task.sale`: S1's answer in the names a MIP-003 `start_job` answer gives them. The times
/// are the integers of the node's millisecond strings, unchanged (the buyer's node checks the
/// signature over exactly them); the seller's key is the selling wallet's.
pub fn sale_fields(
    seller: &MasumiSeller,
    data: &Value,
    client_ref: &str,
    input_hash: &str,
) -> Result<Value, String> {
    let text = |key: &str| {
        data.get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .ok_or_else(|| format!("the payment node's answer has no `{key}`"))
    };
    let time = |key: &str| {
        data.get(key)
            .and_then(millis)
            .map(Value::from)
            .ok_or_else(|| format!("the payment node's answer has no `{key}` in milliseconds"))
    };
    let vkey = data
        .pointer("/SmartContractWallet/walletVkey")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .or_else(|| seller.seller_vkey.clone())
        .ok_or("the payment node's answer names no selling wallet (SmartContractWallet.walletVkey), and the route sets no seller_vkey")?;
    let mut out = Map::new();
    out.insert(
        "blockchainIdentifier".into(),
        text("blockchainIdentifier")?.into(),
    );
    for key in [
        "payByTime",
        "submitResultTime",
        "unlockTime",
        "externalDisputeUnlockTime",
    ] {
        out.insert(key.into(), time(key)?);
    }
    out.insert(
        "agentIdentifier".into(),
        seller.agent_identifier.clone().into(),
    );
    out.insert("sellerVKey".into(), vkey.into());
    out.insert("identifierFromPurchaser".into(), client_ref.into());
    out.insert("input_hash".into(), input_hash.into());
    Ok(Value::Object(out))
}

/// What the buyer must lock: the one amount of `RequestedFunds`, in its unit's smallest
/// denomination (`""`: lovelace). Several units, or an amount the ledger cannot hold, are
/// refused: the ledger books one unit per account.
pub fn funds(data: &Value) -> Result<(u64, String), String> {
    let list = data
        .get("RequestedFunds")
        .and_then(Value::as_array)
        .ok_or("the payment node's answer has no RequestedFunds")?;
    let [one] = list.as_slice() else {
        return Err(format!(
            "the payment request asks for {} amounts; interlingua books one unit per sale",
            list.len()
        ));
    };
    let amount = one
        .get("amount")
        .and_then(|a| match a {
            Value::String(s) => s.parse::<u64>().ok(),
            Value::Number(n) => n.as_u64(),
            _ => None,
        })
        .filter(|a| *a > 0 && *a <= i64::MAX as u64)
        .ok_or("the payment request's amount is not a positive amount the ledger can hold")?;
    let unit = one
        .get("unit")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    Ok((amount, unit))
}

/// The ledger plan of buyers who pay in `unit` (`""`: lovelace).
pub fn plan_of(unit: &str) -> String {
    let unit = if unit.is_empty() { "lovelace" } else { unit };
    format!("{PLAN_PREFIX}{unit}")
}

/// The ledger account of a buyer of `plan` whose funds came from wallet `vkey` on `network`.
pub fn buyer_account(plan: &str, network: &str, vkey: &str) -> store::Account {
    store::Account::new(plan, &format!("{network}:{vkey}"))
}

/// What the node's view of a payment means for the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// No lock yet.
    Waiting,
    /// The buyer's funds are locked (and nothing is asked back): the job may run.
    Locked,
    /// Locked, and the buyer asks for a refund (before a result: `RefundRequested`; after one:
    /// `Disputed`).
    RefundAsked,
    /// The node will never see a valid lock (too late, or the wrong amounts): its note.
    Invalid(String),
    /// The result's hash is queued or on chain: that hash.
    Result(String),
    /// The funds went to the seller: how much (`WithdrawnForSeller`).
    Withdrawn(u64),
    /// The funds went back to the buyer.
    Refunded,
    /// A dispute ended in a split: the seller's part.
    Split(u64),
}

/// The seller's part of an end state (`WithdrawnForSeller`, one unit), else `fallback`.
fn withdrawn(payment: &Value, fallback: u64) -> u64 {
    payment
        .get("WithdrawnForSeller")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(|f| match f.get("amount")? {
                    Value::String(s) => s.parse::<u64>().ok(),
                    Value::Number(n) => n.as_u64(),
                    _ => None,
                })
                .sum::<u64>()
        })
        .filter(|n| *n > 0)
        .unwrap_or(fallback)
}

/// Reads a Payment object (S2's answer). `amount`: what was booked, the seller's part when the
/// node does not say.
pub fn seen(payment: &Value, amount: u64) -> Seen {
    let state = payment
        .get("onChainState")
        .and_then(Value::as_str)
        .unwrap_or("");
    let next = payment.get("NextAction");
    let queued = next
        .and_then(|n| n.get("resultHash"))
        .and_then(Value::as_str)
        .filter(|h| !h.is_empty());
    let on_chain = payment
        .get("resultHash")
        .and_then(Value::as_str)
        .filter(|h| !h.is_empty());
    match state {
        "Withdrawn" => Seen::Withdrawn(withdrawn(payment, amount)),
        "RefundWithdrawn" | "RefundAuthorized" => Seen::Refunded,
        "DisputedWithdrawn" => Seen::Split(withdrawn(payment, 0)),
        "FundsOrDatumInvalid" => Seen::Invalid(
            next.and_then(|n| n.get("errorNote"))
                .and_then(Value::as_str)
                .unwrap_or("the lock transaction or its datum is invalid")
                .to_string(),
        ),
        _ if on_chain.or(queued).is_some() => {
            Seen::Result(on_chain.or(queued).unwrap_or_default().to_string())
        }
        "FundsLocked" => Seen::Locked,
        "ResultSubmitted" => Seen::Result(String::new()),
        "RefundRequested" | "Disputed" => Seen::RefundAsked,
        _ => Seen::Waiting,
    }
}

/// The buyer's wallet key, once the node has seen the lock.
pub fn buyer_vkey(payment: &Value) -> Option<String> {
    payment
        .pointer("/BuyerWallet/walletVkey")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// A time of the payment request, in milliseconds (`payByTime`, …).
pub fn time_of(payment: &Value, key: &str) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_millis(millis(payment.get(key)?)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{MasumiNetwork, MasumiService};
    use std::time::Duration;

    fn seller() -> MasumiSeller {
        MasumiSeller {
            node: MasumiService {
                url: "http://127.0.0.1:1/api/v1".into(),
                token: "t".into(),
                network: MasumiNetwork::Preprod,
                lock_grace: Duration::from_secs(300),
            },
            agent_identifier: "ab".repeat(30),
            max_run: Duration::from_secs(3600),
            pay_by: Duration::from_secs(12 * 3600),
            submit_result_by: Duration::from_secs(24 * 3600),
            unlock_after: None,
            dispute_unlock_after: None,
            verdict_every: Duration::from_secs(600),
            seller_vkey: None,
            amounts: Vec::new(),
        }
    }

    #[test]
    fn the_payment_request_sends_iso_times_and_no_funds_for_a_fixed_price() {
        let now = DateTime::parse_from_rfc3339("2026-11-28T08:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let body = request_body(&seller(), "aabbccddeeff0011", "ab12", "t-1", now);
        assert_eq!(
            body,
            json!({
                "network": "Preprod", "agentIdentifier": "ab".repeat(30),
                "identifierFromPurchaser": "aabbccddeeff0011", "inputHash": "ab12",
                "payByTime": "2026-11-28T20:00:00.000Z",
                "submitResultTime": "2026-11-29T08:00:00.000Z",
                "metadata": "interlingua task t-1",
            })
        );
        let mut dynamic = seller();
        dynamic.amounts = vec![("5000000".into(), "".into())];
        dynamic.unlock_after = Some(Duration::from_secs(30 * 3600));
        let body = request_body(&dynamic, "aabbccddeeff0011", "ab12", "t-1", now);
        assert_eq!(
            body["RequestedFunds"],
            json!([{"amount": "5000000", "unit": ""}])
        );
        assert_eq!(body["unlockTime"], "2026-11-29T14:00:00.000Z");
    }

    #[test]
    fn start_jobs_fields_are_the_nodes_answer_with_the_selling_wallets_key() {
        let data = json!({
            "blockchainIdentifier": "b1", "payByTime": "1795398344446",
            "submitResultTime": "1795441544446", "unlockTime": "1795463144446",
            "externalDisputeUnlockTime": "1795484744446",
            "SmartContractWallet": {"id": "w", "walletVkey": "vk1", "walletAddress": "addr"},
            "RequestedFunds": [{"amount": "10000000", "unit": ""}],
        });
        assert_eq!(
            sale_fields(&seller(), &data, "aabbccddeeff0011", "ab12").unwrap(),
            json!({
                "blockchainIdentifier": "b1", "payByTime": 1795398344446_i64,
                "submitResultTime": 1795441544446_i64, "unlockTime": 1795463144446_i64,
                "externalDisputeUnlockTime": 1795484744446_i64,
                "agentIdentifier": "ab".repeat(30), "sellerVKey": "vk1",
                "identifierFromPurchaser": "aabbccddeeff0011", "input_hash": "ab12",
            })
        );
        assert_eq!(funds(&data).unwrap(), (10_000_000, String::new()));
        let mut no_wallet = data.clone();
        no_wallet["SmartContractWallet"] = Value::Null;
        assert!(sale_fields(&seller(), &no_wallet, "aabbccddeeff0011", "ab12").is_err());
        let two =
            json!({"RequestedFunds": [{"amount": "1", "unit": ""}, {"amount": "2", "unit": "ab"}]});
        assert!(funds(&two).is_err());
        assert_eq!(
            buyer_account(&plan_of(""), "Preprod", "vkb"),
            store::Account::new("masumi:lovelace", "Preprod:vkb")
        );
    }

    #[test]
    fn what_the_node_sees_is_read_as_the_jobs_next_move() {
        assert_eq!(seen(&json!({"onChainState": null}), 5), Seen::Waiting);
        assert_eq!(
            seen(&json!({"onChainState": "FundsLocked", "resultHash": ""}), 5),
            Seen::Locked
        );
        let queued = json!({"onChainState": "FundsLocked", "resultHash": "",
            "NextAction": {"requestedAction": "SubmitResultRequested", "resultHash": "h1"}});
        assert_eq!(seen(&queued, 5), Seen::Result("h1".into()));
        assert_eq!(
            seen(&json!({"onChainState": "RefundRequested"}), 5),
            Seen::RefundAsked
        );
        assert_eq!(
            seen(&json!({"onChainState": "Withdrawn"}), 5),
            Seen::Withdrawn(5)
        );
        let split = json!({"onChainState": "DisputedWithdrawn", "WithdrawnForSeller": [{"amount": "2", "unit": ""}]});
        assert_eq!(seen(&split, 5), Seen::Split(2));
        let late =
            json!({"onChainState": "FundsOrDatumInvalid", "NextAction": {"errorNote": "too late"}});
        assert_eq!(seen(&late, 5), Seen::Invalid("too late".into()));
        assert!(valid_identifier("aabbccddeeff0011"));
        assert!(!valid_identifier("aabbccddeeff001"));
        assert!(!valid_identifier("not-hex-at-all-x"));
    }
}
