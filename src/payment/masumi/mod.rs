//! The Masumi payment node (the Masumi payment service,
//! <https://github.com/masumi-network/masumi-payment-service/tree/aca38338>; its routes are under
//! `src/routes/api/`, its on-chain states are `OnChainState` in `prisma/schema.prisma`), on the
//! operator's account, on both sides of a job: [`buy`] as the purchaser (interlingua pays a
//! Masumi agent), [`sell`] as the seller (a Masumi purchaser pays interlingua for a job of the
//! route's agent). Both speak to the node with header `token` and read its envelope
//! `{"status":"success","data":…}` / `{"status":"error","error":{…}}` here.
//! docs/payments.md describes both flows.

mod buy;
pub mod sell;

pub use buy::*;

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::call_record;
use crate::config::MasumiService;
use crate::config::Url;
use crate::upstream::{Client, Resend};

/// How long one call to the payment service may take.
pub(super) const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// How many calls a purchase record keeps (the latest).
pub(super) const CALLS_KEPT: usize = 20;

/// A MIP-003 timestamp in milliseconds: an integer or a numeric string; a value up to 10^11 is
/// seconds (MIP-003's text and examples use seconds, the payment node and masumi milliseconds).
pub fn millis(v: &Value) -> Option<i64> {
    let n = match v {
        Value::Number(n) => n.as_i64()?,
        Value::String(s) => s.trim().parse().ok()?,
        _ => return None,
    };
    Some(if n > 100_000_000_000 { n } else { n * 1000 })
}

/// What one call to the service came to.
pub(super) enum Reply {
    /// 2xx: the envelope's `data`.
    Data(Value),
    /// 409: the envelope's `object` (P1: the purchase that exists), when it has one.
    Conflict(Option<Value>, String),
    /// Another 4xx: refused, with the service's message.
    Refused(u16, String),
    /// 5xx, an unreadable answer, or no answer: worth asking again later.
    Failed(Option<u16>, String),
}

pub(super) async fn call(
    client: &Client,
    s: &MasumiService,
    path: &str,
    body: &Value,
    resend: Resend,
) -> Reply {
    let url = match Url::parse(&format!("{}{path}", s.url)) {
        Ok(u) => u,
        Err(e) => return Reply::Failed(None, e.to_string()),
    };
    let (status, raw) = match client
        .post_json(
            &url,
            &[("token", s.token.as_str())],
            body,
            CALL_TIMEOUT,
            resend,
        )
        .await
    {
        Ok(r) => r,
        Err(e) => return Reply::Failed(None, e.to_string()),
    };
    let answer: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    let message = answer
        .pointer("/error/message")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| format!("HTTP {status}"));
    match status {
        200..=299 => match answer.get("data") {
            Some(d) if d.is_object() => Reply::Data(d.clone()),
            _ => Reply::Failed(Some(status), "the answer has no `data` object".to_string()),
        },
        409 => Reply::Conflict(answer.get("object").cloned(), message),
        400..=499 => Reply::Refused(status, message),
        _ => Reply::Failed(Some(status), message),
    }
}

/// Adds a call to a record's list of calls (the latest [`CALLS_KEPT`]); when it was made.
pub(super) fn note(
    calls: &mut Vec<Value>,
    what: &str,
    status: Option<u16>,
    error: Option<&str>,
) -> DateTime<Utc> {
    let now = Utc::now();
    calls.push(call_record(what, status, now, error));
    if calls.len() > CALLS_KEPT {
        let extra = calls.len() - CALLS_KEPT;
        calls.drain(..extra);
    }
    now
}
