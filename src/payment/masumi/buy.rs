//! The purchaser side: P1 `POST /purchase` (lock funds in escrow for a job), P2
//! `POST /purchase/resolve-blockchain-identifier` (the purchase's state) and P4
//! `POST /purchase/request-refund`, on the operator's own payment service, header `token`,
//! answers in the envelope `{"status":"success","data":…}` / `{"status":"error","error":{…}}`.
//! The service is the Masumi payment service
//! (<https://github.com/masumi-network/masumi-payment-service/tree/aca38338>; its purchase routes
//! are under `src/routes/api/purchases/`, its on-chain states are `OnChainState` in
//! `prisma/schema.prisma`). docs/payments.md describes the flow.
//!
//! What is bought is the agent's payment request as the agent sent it (`task.payment`, the
//! fields of its `start_job` answer): the seller signed it, and the node checks the signature
//! against exactly these values, so nothing is re-rendered but what the node's schema names
//! differently (`sellerVkey`, `inputHash`, times as decimal strings).

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::{call, millis, note, Reply};
use crate::config::MasumiService;
use crate::payment::{Purchase, PurchaseState};
use crate::upstream::{Client, Resend};
use mapping::task::Task;

/// The states in which the escrow holds the buyer's funds for the job.
const LOCKED: &[&str] = &["FundsLocked", "ResultSubmitted"];

/// The purchase key: the agent's `blockchainIdentifier`. Free agents (pip-masumi's unreleased
/// HEAD answers them with `FREE-…`; the node refuses to sell free jobs) and answers without one
/// are not bought.
pub fn reference(payment: &Value) -> Option<String> {
    let id = payment.get("blockchainIdentifier")?.as_str()?;
    (!id.is_empty() && !id.starts_with("FREE-")).then(|| id.to_string())
}

/// A time as P1 wants it: the agent's own integer as a decimal string, unchanged (the seller
/// signed exactly that value).
fn time_text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::Number(n) => n.as_i64().map(|i| i.to_string()),
        Value::String(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            Some(s.clone())
        }
        _ => None,
    }
}

/// A payment request the payment service cannot be asked to pay.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PaymentRequestError {
    #[error("the agent sent no payment request")]
    Absent,
    #[error("the agent's payment request has no `{0}`")]
    Missing(&'static str),
    #[error("the agent's payment request has no `{0}` in milliseconds")]
    NotMilliseconds(&'static str),
}

/// The P1 body for the agent's payment request; why not, when a field is missing.
pub fn purchase_body(s: &MasumiService, payment: &Value) -> Result<Value, PaymentRequestError> {
    let text = |key: &'static str| {
        payment
            .get(key)
            .and_then(Value::as_str)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
            .ok_or(PaymentRequestError::Missing(key))
    };
    let time = |key: &'static str| {
        time_text(payment.get(key)).ok_or(PaymentRequestError::NotMilliseconds(key))
    };
    Ok(json!({
        "blockchainIdentifier": text("blockchainIdentifier")?,
        "network": s.network.name(),
        // The node spells it with a lower-case k (`src/routes/api/purchases/schemas.ts`).
        "sellerVkey": text("sellerVKey")?,
        "agentIdentifier": text("agentIdentifier")?,
        "identifierFromPurchaser": text("identifierFromPurchaser")?,
        "inputHash": text("input_hash")?,
        "payByTime": time("payByTime")?,
        "submitResultTime": time("submitResultTime")?,
        "unlockTime": time("unlockTime")?,
        "externalDisputeUnlockTime": time("externalDisputeUnlockTime")?,
    }))
}

fn noted(p: &mut Purchase, what: &str, status: Option<u16>, error: Option<&str>) {
    p.updated_at = note(&mut p.calls, what, status, error);
}

/// P1. A 409 is the purchase made before (a retry, a restart): success, with that purchase.
pub async fn buy(
    client: &Client,
    s: &MasumiService,
    task: &Task,
    reference: String,
    earlier: Option<Purchase>,
) -> Purchase {
    let now = Utc::now();
    let mut p = earlier.unwrap_or_else(|| Purchase {
        task_id: task.id.clone(),
        rail: "masumi".to_string(),
        reference,
        state: PurchaseState::Pending,
        detail: None,
        request: None,
        service: None,
        calls: Vec::new(),
        created_at: now,
        updated_at: now,
    });
    let body = match task
        .payment
        .as_ref()
        .ok_or(PaymentRequestError::Absent)
        .and_then(|pay| purchase_body(s, pay))
    {
        Ok(b) => b,
        Err(why) => {
            p.state = PurchaseState::Refused;
            p.detail = Some(why.to_string());
            return p;
        }
    };
    p.request = Some(body.clone());
    match call(
        client,
        s,
        "/purchase",
        &body,
        // A purchase created twice is answered 409 with the one that exists (P1).
        Resend::Allowed,
    )
    .await
    {
        Reply::Data(d) => {
            noted(&mut p, "purchase", Some(200), None);
            p.state = PurchaseState::Requested;
            p.detail = None;
            p.service = Some(d);
        }
        Reply::Conflict(object, _) => {
            noted(&mut p, "purchase", Some(409), None);
            p.state = PurchaseState::Requested;
            p.detail = None;
            p.service = object.or(p.service.take());
        }
        Reply::Refused(status, message) => {
            noted(&mut p, "purchase", Some(status), Some(&message));
            p.state = PurchaseState::Refused;
            p.detail = Some(format!(
                "the payment service refused the purchase: {message}"
            ));
        }
        Reply::Failed(status, message) => {
            noted(&mut p, "purchase", status, Some(&message));
            p.state = PurchaseState::Pending;
            p.detail = Some(format!("the payment service could not be asked: {message}"));
        }
    }
    p
}

/// P2 on a purchase not yet locked: `Locked` once the escrow holds the funds; `Expired` when
/// the node gave up (`FundsOrDatumInvalid`) or `payByTime` and the grace have passed.
pub async fn follow(client: &Client, s: &MasumiService, task: &Task, mut p: Purchase) -> Purchase {
    let body = resolve_body(s, &p);
    match call(
        client,
        s,
        "/purchase/resolve-blockchain-identifier",
        &body,
        Resend::Allowed,
    )
    .await
    {
        Reply::Data(d) => {
            noted(&mut p, "status", Some(200), None);
            p.service = Some(d);
        }
        Reply::Conflict(_, message) => noted(&mut p, "status", Some(409), Some(&message)),
        Reply::Refused(status, message) | Reply::Failed(Some(status), message) => {
            noted(&mut p, "status", Some(status), Some(&message))
        }
        Reply::Failed(None, message) => noted(&mut p, "status", None, Some(&message)),
    }
    let pay_by = task
        .payment
        .as_ref()
        .and_then(|pay| millis(pay.get("payByTime")?));
    let (state, detail) = lock_state(p.service.as_ref(), pay_by, s.lock_grace, Utc::now());
    if state != PurchaseState::Requested {
        p.state = state;
        p.detail = detail;
    }
    p
}

/// What the node's view of a purchase means for it (its `onChainState` and the deadlines of the
/// payment request): locked, given up, or still to wait for.
pub fn lock_state(
    purchase: Option<&Value>,
    pay_by_ms: Option<i64>,
    grace: Duration,
    now: DateTime<Utc>,
) -> (PurchaseState, Option<String>) {
    let on_chain = purchase
        .and_then(|p| p.get("onChainState"))
        .and_then(Value::as_str);
    if on_chain.is_some_and(|s| LOCKED.contains(&s)) {
        return (PurchaseState::Locked, None);
    }
    if on_chain == Some("FundsOrDatumInvalid") {
        let note = purchase
            .and_then(|p| p.pointer("/NextAction/errorNote"))
            .and_then(Value::as_str)
            .unwrap_or("the lock transaction or its datum is invalid");
        return (
            PurchaseState::Expired,
            Some(format!("the payment was not locked: {note}")),
        );
    }
    let grace_ms = i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
    if let Some(pay_by) = pay_by_ms {
        if on_chain.is_none() && now.timestamp_millis() > pay_by.saturating_add(grace_ms) {
            return (
                PurchaseState::Expired,
                Some(format!(
                    "the payment was not locked by payByTime ({pay_by}) and {} of grace",
                    humantime::format_duration(grace)
                )),
            );
        }
    }
    (PurchaseState::Requested, None)
}

fn resolve_body(s: &MasumiService, p: &Purchase) -> Value {
    json!({
        "blockchainIdentifier": p.reference,
        "network": s.network.name(),
        // A string, not a boolean: the node's schema says so (`src/routes/api/purchases/`).
        "includeHistory": "false",
    })
}

/// Whether P4 is allowed on the node's view of the purchase (as the node's `request-refund` route
/// checks it): funds in escrow, nothing else under way, and before `unlockTime`.
pub fn refund_allowed(purchase: &Value, now: DateTime<Utc>) -> bool {
    let on_chain = purchase.get("onChainState").and_then(Value::as_str);
    let action = purchase
        .pointer("/NextAction/requestedAction")
        .and_then(Value::as_str);
    let before_unlock = purchase
        .get("unlockTime")
        .and_then(millis)
        .is_none_or(|t| now.timestamp_millis() < t);
    on_chain.is_some_and(|s| LOCKED.contains(&s))
        && action == Some("WaitingForExternalAction")
        && before_unlock
}

/// Whether the node's view shows a refund already requested (or done).
fn refund_under_way(purchase: &Value) -> bool {
    let action = purchase
        .pointer("/NextAction/requestedAction")
        .and_then(Value::as_str)
        .unwrap_or("");
    let on_chain = purchase
        .get("onChainState")
        .and_then(Value::as_str)
        .unwrap_or("");
    action.starts_with("SetRefundRequested")
        || action.starts_with("WithdrawRefund")
        || matches!(
            on_chain,
            "RefundRequested" | "Disputed" | "RefundAuthorized" | "RefundWithdrawn"
        )
}

/// P4, after a fresh P2; a 409 (the state changed meanwhile) is read again and retried once.
pub async fn refund(client: &Client, s: &MasumiService, mut p: Purchase, why: &str) -> Purchase {
    let body = json!({ "blockchainIdentifier": p.reference, "network": s.network.name() });
    for attempt in 0..2 {
        match call(
            client,
            s,
            "/purchase/resolve-blockchain-identifier",
            &resolve_body(s, &p),
            Resend::Allowed,
        )
        .await
        {
            Reply::Data(d) => {
                noted(&mut p, "status", Some(200), None);
                p.service = Some(d);
            }
            Reply::Conflict(_, m) | Reply::Refused(_, m) | Reply::Failed(_, m) => {
                noted(&mut p, "status", None, Some(&m));
            }
        }
        // Asked already (by another instance, or before a restart): nothing more to ask.
        if p.service.as_ref().is_some_and(refund_under_way) {
            p.state = PurchaseState::RefundRequested;
            p.detail = Some(format!("{why}; a refund was requested"));
            return p;
        }
        if !p
            .service
            .as_ref()
            .is_some_and(|v| refund_allowed(v, Utc::now()))
        {
            p.state = PurchaseState::RefundFailed;
            p.detail = Some(format!(
                "{why}; a refund cannot be requested in the purchase's state (onChainState {}, next action {})",
                state_word(p.service.as_ref(), "/onChainState"),
                state_word(p.service.as_ref(), "/NextAction/requestedAction"),
            ));
            return p;
        }
        match call(
            client,
            s,
            "/purchase/request-refund",
            &body,
            Resend::Allowed,
        )
        .await
        {
            Reply::Data(d) => {
                noted(&mut p, "request_refund", Some(200), None);
                p.service = Some(d);
                p.state = PurchaseState::RefundRequested;
                p.detail = Some(format!("{why}; a refund was requested"));
                return p;
            }
            Reply::Conflict(_, m) if attempt == 0 => {
                noted(&mut p, "request_refund", Some(409), Some(&m));
            }
            Reply::Conflict(_, m) | Reply::Refused(_, m) | Reply::Failed(_, m) => {
                noted(&mut p, "request_refund", None, Some(&m));
                p.state = PurchaseState::RefundFailed;
                p.detail = Some(format!("{why}; the refund request failed: {m}"));
                return p;
            }
        }
    }
    p
}

fn state_word(v: Option<&Value>, pointer: &str) -> String {
    v.and_then(|v| v.pointer(pointer))
        .and_then(Value::as_str)
        .unwrap_or("none")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MasumiNetwork;

    fn service() -> MasumiService {
        MasumiService {
            url: "http://127.0.0.1:1/api/v1".to_string(),
            token: "t".to_string(),
            network: MasumiNetwork::Preprod,
            lock_grace: Duration::from_secs(300),
        }
    }

    #[test]
    fn the_purchase_repeats_the_agents_fields_renamed_only_where_the_node_says() {
        let payment = json!({
            "blockchainIdentifier": "b1", "payByTime": 1795398344446_i64,
            "submitResultTime": "1795441544446", "unlockTime": 1795463144446_i64,
            "externalDisputeUnlockTime": 1795484744446_i64, "agentIdentifier": "agent",
            "sellerVKey": "vkey", "identifierFromPurchaser": "aabbccddeeff0011", "input_hash": "ab12",
        });
        assert_eq!(
            purchase_body(&service(), &payment).unwrap(),
            json!({
                "blockchainIdentifier": "b1", "network": "Preprod", "sellerVkey": "vkey",
                "agentIdentifier": "agent", "identifierFromPurchaser": "aabbccddeeff0011",
                "inputHash": "ab12", "payByTime": "1795398344446",
                "submitResultTime": "1795441544446", "unlockTime": "1795463144446",
                "externalDisputeUnlockTime": "1795484744446",
            })
        );
        let mut no_key = payment.clone();
        no_key["sellerVKey"] = json!("");
        assert_eq!(
            purchase_body(&service(), &no_key).unwrap_err(),
            PaymentRequestError::Missing("sellerVKey")
        );
        assert_eq!(reference(&json!({"blockchainIdentifier": "FREE-00"})), None);
    }

    #[test]
    fn a_purchase_is_locked_waiting_or_given_up() {
        let now = Utc::now();
        let ms = now.timestamp_millis();
        let grace = Duration::from_secs(300);
        let locked = json!({"onChainState": "FundsLocked"});
        assert_eq!(
            lock_state(Some(&locked), Some(ms - 1_000_000), grace, now).0,
            PurchaseState::Locked
        );
        let waiting = json!({"onChainState": null});
        assert_eq!(
            lock_state(Some(&waiting), Some(ms - 1000), grace, now).0,
            PurchaseState::Requested
        );
        assert_eq!(
            lock_state(Some(&waiting), Some(ms - 301_000), grace, now).0,
            PurchaseState::Expired
        );
        let invalid =
            json!({"onChainState": "FundsOrDatumInvalid", "NextAction": {"errorNote": "too late"}});
        assert_eq!(
            lock_state(Some(&invalid), Some(ms + 1000), grace, now),
            (
                PurchaseState::Expired,
                Some("the payment was not locked: too late".to_string())
            )
        );
        assert_eq!(
            lock_state(None, None, grace, now).0,
            PurchaseState::Requested
        );
    }

    #[test]
    fn a_refund_needs_locked_funds_nothing_under_way_and_time_left() {
        let now = Utc::now();
        let later = (now.timestamp_millis() + 60_000).to_string();
        let ok = json!({"onChainState": "FundsLocked", "NextAction": {"requestedAction": "WaitingForExternalAction"}, "unlockTime": later});
        assert!(refund_allowed(&ok, now));
        let mut busy = ok.clone();
        busy["NextAction"]["requestedAction"] = json!("FundsLockingRequested");
        assert!(!refund_allowed(&busy, now));
        let mut late = ok.clone();
        late["unlockTime"] = json!((now.timestamp_millis() - 1).to_string());
        assert!(!refund_allowed(&late, now));
        assert!(!refund_allowed(&json!({"onChainState": null}), now));
    }
}
