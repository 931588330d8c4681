//! Being paid with x402: a client's payment read from its header, checked against the route's
//! offers, verified by the facilitator, and later settled through it.
//!
//! The order is the x402 resource server's (specification v2, "Payment flow"): nothing is held
//! before the facilitator's `/verify` said the payment is good, and a settlement is sent only
//! for a payment that was verified, once (`/settle` is not idempotent for a payload already
//! settled: it broadcasts a transaction that reverts). What each scheme owes, and when, is the
//! engine's (`engine/admission.rs`, `engine/settle/x402.rs`); this module speaks to the facilitator and builds the records.

use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use serde_json::Value;

use super::offer::{self, Mismatch, Offer, Scheme};
use super::wire::{
    self, FacilitatorRequest, PaymentPayload, PaymentRequired, Requirements, SettleResponse,
    VerifyResponse, X402_VERSION,
};
use crate::auth::Identity;
use crate::config::{Url, X402Accept};
use crate::upstream::{Client, Resend};
use store::{Sale, SaleState};

/// How long a facilitator's answer is waited for.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The ledger plan of a payer's account: one account per payer and token, in its atomic units.
pub const PLAN_PREFIX: &str = "x402:";

/// Why a request was not admitted as paid: answered 402 (400 for a header that is not a
/// payment), with a fresh `PAYMENT-REQUIRED` naming the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub status: u16,
    /// The x402 reason (`invalid_exact_evm_nonce_already_used`), or ours
    /// (`payment_required`, `offer_mismatch`, `payment_already_used`, …).
    pub reason: String,
    pub message: String,
    /// The `PAYMENT-REQUIRED` header to answer with, and the document it encodes (for fronts
    /// that carry it in their answer: an MCP tool result, an A2A message).
    pub required: String,
    pub required_doc: Value,
    /// The `PAYMENT-RESPONSE` header, when a settlement failed.
    pub response: Option<String>,
}

/// A payment the facilitator verified, ready to open as a sale.
#[derive(Debug, Clone)]
pub struct Verified {
    pub offer: Offer,
    pub payload: PaymentPayload,
    /// The requirements it was verified against (the offer's, as a 402 writes them).
    pub requirements: Requirements,
    /// The payer's address, as the facilitator recovered it.
    pub payer: String,
    /// Network, payer and nonce: the sale's key.
    pub reference: String,
    pub deadline: DateTime<Utc>,
    /// The URL it paid for, as a 402 names it.
    pub resource: String,
}

impl Verified {
    /// Who paid: the payer's account (CAIP-10 address, and a plan per token).
    pub fn identity(&self) -> Identity {
        identity(&self.offer.network, &self.payer, &self.offer.asset)
    }

    /// The sale this payment opens for task `task_id`.
    pub fn sale(&self, task_id: &str, now: DateTime<Utc>) -> Sale {
        let id = self.identity();
        Sale {
            reference: self.reference.clone(),
            rail: "x402".to_string(),
            task_id: task_id.to_string(),
            plan: id.plan.unwrap_or_default(),
            subject: id.subject,
            state: SaleState::Authorised,
            scheme: self.offer.scheme.as_str().to_string(),
            network: self.offer.network.clone(),
            asset: self.offer.asset.clone(),
            payer: self.payer.clone(),
            authorised: self.offer.amount,
            settled: None,
            transaction: None,
            deadline: self.deadline,
            detail: None,
            payload: serde_json::to_value(&self.payload).unwrap_or(Value::Null),
            requirements: serde_json::to_value(&self.requirements).unwrap_or(Value::Null),
            calls: vec![call_record("verify", Some(200), now, None)],
            created_at: now,
            updated_at: now,
        }
    }
}

/// The identity of a payer on `network` paying in `asset`: the subject is the CAIP-10 account
/// id (`eip155:8453:0xabc…`), lower case, so one wallet is one subject however it is written.
pub fn identity(network: &str, payer: &str, asset: &str) -> Identity {
    Identity {
        subject: format!("{network}:{}", payer.to_ascii_lowercase()),
        plan: Some(format!("{PLAN_PREFIX}{}", asset.to_ascii_lowercase())),
    }
}

/// The `PAYMENT-REQUIRED` document of a route, for the resource at `url`.
pub fn required(accept: &X402Accept, url: &str, error: Option<&str>) -> PaymentRequired {
    PaymentRequired {
        x402_version: X402_VERSION,
        error: Some(error.unwrap_or("Payment required").to_string()),
        resource: offer::resource(url.to_string(), None),
        accepts: accept.offers.iter().map(Offer::requirements).collect(),
        extensions: None,
    }
}

/// A refusal with `reason`, naming the offers again.
pub fn refusal(
    accept: &X402Accept,
    url: &str,
    status: u16,
    reason: &str,
    message: String,
) -> Box<Refusal> {
    let doc = required(accept, url, Some(reason));
    Box::new(Refusal {
        status,
        reason: reason.to_string(),
        message,
        required: wire::encode_header(&doc),
        required_doc: serde_json::to_value(&doc).unwrap_or(Value::Null),
        response: None,
    })
}

/// Where a client's payment came: the `PAYMENT-SIGNATURE` header (base64), or a front's own
/// place for it, read by its mapping into `request.payment` (the document itself: an MCP
/// call's `_meta["x402/payment"]`, an A2A message's `x402.payment.payload`).
pub enum Presented<'a> {
    Header(&'a str),
    InBand(&'a Value),
}

/// The payment presented, read and checked against the offers: the payload and the offer it
/// names (nothing asked of the facilitator yet).
pub fn read(
    accept: &X402Accept,
    url: &str,
    presented: Presented<'_>,
) -> Result<(PaymentPayload, Offer), Box<Refusal>> {
    let payload = match presented {
        Presented::Header(h) => wire::decode_payment(h).map_err(|e| e.to_string()),
        Presented::InBand(v) => wire::payment_from_value(v.clone()).map_err(|e| e.to_string()),
    }
    .map_err(|e| {
        refusal(
            accept,
            url,
            400,
            "invalid_payload",
            format!("the payment is not an x402 payment: {e}"),
        )
    })?;
    let offer = offer::matching(&accept.offers, &payload.accepted).map_err(|m| {
        let reason = match m {
            Mismatch::NoOffer { .. } => "unsupported_scheme",
            Mismatch::Field { .. } => "invalid_payment_requirements",
        };
        refusal(
            accept,
            url,
            402,
            reason,
            format!("the payment is not one this route takes: {m}"),
        )
    })?;
    Ok((payload, offer.clone()))
}

/// The sale key of a payment: its network, payer and nonce (the token contract refuses a nonce
/// twice, so no two good payments share one).
pub fn reference(payload: &PaymentPayload) -> Option<String> {
    let (payer, nonce) = payload.payer_and_nonce()?;
    Some(format!("{}:{payer}:{nonce}", payload.accepted.network))
}

/// Verifies a payment read by [`read`] with the facilitator.
pub async fn verify(
    client: &Client,
    accept: &X402Accept,
    url: &str,
    payload: PaymentPayload,
    offer: Offer,
) -> Result<Verified, Box<Refusal>> {
    let refuse =
        |status, reason: &str, message: String| refusal(accept, url, status, reason, message);
    let Some(reference) = reference(&payload) else {
        return Err(refuse(
            400,
            "invalid_payload",
            format!(
                "the `{}` payment names no payer and nonce (`payload.authorization` or `payload.permit2Authorization`)",
                offer.scheme.as_str()
            ),
        ));
    };
    let Some(deadline) = deadline(&payload, offer.scheme) else {
        return Err(refuse(
            400,
            "invalid_payload",
            "the payment's authorisation names no deadline (`validBefore` or `deadline`, in seconds)".to_string(),
        ));
    };
    let requirements = offer.requirements();
    let answer = ask_verify(client, accept, &payload, &requirements)
        .await
        .map_err(|e| {
            refuse(
                502,
                "unexpected_verify_error",
                format!("the facilitator could not verify the payment: {e}"),
            )
        })?;
    if !answer.is_valid {
        let reason = answer
            .invalid_reason
            .clone()
            .unwrap_or_else(|| "invalid_payload".to_string());
        let message = match &answer.invalid_message {
            Some(m) => format!("the facilitator refused the payment: {reason} ({m})"),
            None => format!("the facilitator refused the payment: {reason}"),
        };
        return Err(refuse(402, &reason, message));
    }
    let payer = answer
        .payer
        .clone()
        .or_else(|| payload.payer_and_nonce().map(|(p, _)| p))
        .unwrap_or_default();
    Ok(Verified {
        offer,
        payload,
        requirements,
        payer,
        reference,
        deadline,
        resource: url.to_string(),
    })
}

/// Asks the facilitator to verify a stored sale's payment again: `None` when it is still good
/// (so not settled), else the reason it is not.
pub async fn reverify(
    client: &Client,
    accept: &X402Accept,
    sale: &Sale,
) -> Result<Option<String>, String> {
    let payload: PaymentPayload =
        serde_json::from_value(sale.payload.clone()).map_err(|e| e.to_string())?;
    let requirements: Requirements =
        serde_json::from_value(sale.requirements.clone()).map_err(|e| e.to_string())?;
    let answer = ask_verify(client, accept, &payload, &requirements)
        .await
        .map_err(|e| e.message)?;
    Ok((!answer.is_valid).then(|| answer.invalid_reason.unwrap_or_default()))
}

/// `/verify`: it changes nothing, so a broken pooled connection is retried.
async fn ask_verify(
    client: &Client,
    accept: &X402Accept,
    payload: &PaymentPayload,
    requirements: &Requirements,
) -> Result<VerifyResponse, CallError> {
    call(
        client,
        accept,
        "verify",
        payload,
        requirements,
        Resend::Allowed,
    )
    .await
}

/// Whether a verify refusal says the authorisation was used: its nonce is spent on chain
/// (EIP-3009's `authorizationState`, Permit2's nonce bitmap), so the settlement went through.
/// The x402 SDK's reasons: `invalid_exact_evm_nonce_already_used`; for `upto` the settlement's
/// simulation reverts (`…_transaction_failed`, `…simulation_failed`).
pub fn spent(reason: &str) -> bool {
    [
        "nonce_already_used",
        "nonce_used",
        "transaction_failed",
        "simulation_failed",
    ]
    .iter()
    .any(|r| reason.contains(r))
}

/// When the payment's authorisation expires: EIP-3009's `validBefore`, Permit2's `deadline`.
fn deadline(payload: &PaymentPayload, scheme: Scheme) -> Option<DateTime<Utc>> {
    let (outer, field) = match scheme {
        Scheme::Exact => ("authorization", "validBefore"),
        Scheme::Upto => ("permit2Authorization", "deadline"),
    };
    let v = payload.payload.get(outer)?.get(field)?;
    let secs = match v {
        Value::String(s) => s.parse::<i64>().ok()?,
        Value::Number(n) => n.as_i64()?,
        _ => return None,
    };
    Utc.timestamp_opt(secs, 0).single()
}

/// Settles `amount` of a sale with the facilitator, recording the call on the sale: `Settled`
/// with the transaction, or `Failed` with the reason (a facilitator that could not be reached
/// is `Failed` too: the payment is then refused). A settlement whose answer was lost on the way
/// (it may have reached the chain) is never sent blind again: the sale stays `Settling`, and
/// the sweep asks the facilitator to verify the payment to learn which it was.
pub async fn settle(
    client: &Client,
    accept: &X402Accept,
    mut sale: Sale,
    amount: u64,
    now: DateTime<Utc>,
) -> (Sale, Option<SettleResponse>) {
    let parsed = (
        serde_json::from_value::<PaymentPayload>(sale.payload.clone()),
        serde_json::from_value::<Requirements>(sale.requirements.clone()),
    );
    let (payload, mut requirements) = match parsed {
        (Ok(p), Ok(r)) => (p, r),
        (Err(e), _) | (_, Err(e)) => {
            sale.state = SaleState::Failed;
            sale.detail = Some(format!("the stored payment cannot be read: {e}"));
            sale.updated_at = now;
            return (sale, None);
        }
    };
    // `upto` settles what is owed, at most what was signed (`schemes/upto/scheme_upto.md`).
    requirements.amount = amount.to_string();
    let answer: Result<SettleResponse, CallError> = call(
        client,
        accept,
        "settle",
        &payload,
        &requirements,
        Resend::Never,
    )
    .await;
    sale.updated_at = now;
    match answer {
        Ok(r) if r.success => {
            sale.calls.push(call_record("settle", Some(200), now, None));
            sale.state = SaleState::Settled;
            sale.settled = Some(amount);
            sale.transaction = Some(r.transaction.clone()).filter(|t| !t.is_empty());
            (sale, Some(r))
        }
        Ok(r) => {
            let reason = r
                .error_reason
                .clone()
                .unwrap_or_else(|| "unexpected_settle_error".to_string());
            sale.calls
                .push(call_record("settle", Some(200), now, Some(&reason)));
            sale.state = SaleState::Failed;
            sale.detail = Some(match &r.error_message {
                Some(m) => format!("{reason}: {m}"),
                None => reason,
            });
            sale.transaction = Some(r.transaction.clone()).filter(|t| !t.is_empty());
            (sale, Some(r))
        }
        Err(e) if e.lost => {
            sale.calls
                .push(call_record("settle", None, now, Some(&e.message)));
            sale.detail = Some(format!(
                "the facilitator's answer was lost ({}): whether the payment settled is asked again",
                e.message
            ));
            (sale, None)
        }
        Err(e) => {
            sale.calls
                .push(call_record("settle", None, now, Some(&e.message)));
            sale.state = SaleState::Failed;
            sale.detail = Some(format!("the facilitator could not be asked: {}", e.message));
            (sale, None)
        }
    }
}

/// Why a call to the facilitator brought no usable answer.
#[derive(Debug)]
struct CallError {
    message: String,
    /// The request may have reached the facilitator, which may have acted on it.
    lost: bool,
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl CallError {
    fn answered(message: String) -> CallError {
        CallError {
            message,
            lost: false,
        }
    }
}

/// One call to the facilitator: 200 and its JSON answer, or why not. A refusal is a 200 with
/// `isValid`/`success` false (the SDK's client treats anything else as a fault).
async fn call<T: serde::de::DeserializeOwned>(
    client: &Client,
    accept: &X402Accept,
    what: &str,
    payload: &PaymentPayload,
    requirements: &Requirements,
    resend: Resend,
) -> Result<T, CallError> {
    let url = Url::parse(&format!("{}/{what}", accept.facilitator))
        .map_err(|e| CallError::answered(e.to_string()))?;
    let body = serde_json::to_value(FacilitatorRequest {
        x402_version: X402_VERSION,
        payment_payload: payload,
        payment_requirements: requirements,
    })
    .map_err(|e| CallError::answered(e.to_string()))?;
    let headers: Vec<(&str, &str)> = accept
        .facilitator_auth
        .as_deref()
        .map(|a| ("authorization", a))
        .into_iter()
        .collect();
    let (status, raw) = client
        .post_json(&url, &headers, &body, CALL_TIMEOUT, resend)
        .await
        .map_err(|e| CallError {
            message: e.to_string(),
            lost: e.may_have_arrived(),
        })?;
    if status != 200 {
        let text = String::from_utf8_lossy(&raw);
        return Err(CallError::answered(format!(
            "/{what} answered HTTP {status}: {}",
            text.chars().take(200).collect::<String>()
        )));
    }
    serde_json::from_slice(&raw)
        .map_err(|e| CallError::answered(format!("/{what} answered what is not its document: {e}")))
}

fn call_record(what: &str, status: Option<u16>, at: DateTime<Utc>, error: Option<&str>) -> Value {
    crate::payment::call_record(what, status, at, error)
}
