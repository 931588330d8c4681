//! The stand-in x402 facilitator the paid contender's interlingua asks to verify and to settle
//! each payment. It says yes at once (no chain, no signature checked: a real facilitator's own
//! work is not interlingua's cost), so what the paid contender adds to a create is interlingua's
//! work alone: the two round-trips, the sale, the grant. It counts the calls for each payment
//! (payer and nonce), so the run can check that each was verified once and settled once.
//!
//! | request | answer |
//! |---|---|
//! | `POST /verify` | 200 `{"isValid":true,"payer":FROM}`: the authorization's `from`; for a payment already settled `{"isValid":false,"invalidReason":"invalid_exact_evm_nonce_already_used",…}`, as the SDK's facilitator reads the nonce on chain |
//! | `POST /settle` | 200 `{"success":true,"transaction":"0x…","network":N,"payer":FROM}`, a new 64-digit hash each time |
//! | `GET /supported` | 200, the `exact` scheme on [`NETWORK`] |
//! | `GET /counts` | 200, [`Counts`] (the harness's, not x402's) |
//!
//! A body that is not a facilitator request is answered 400 and counted (`malformed`).

use std::borrow::Cow;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use bytes::Bytes;
use hyper::{Method, StatusCode};
use serde::{Deserialize, Serialize};

use crate::payer::NETWORK;
use crate::serve::{json, Answer, Service};

/// What the facilitator was asked, by payment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// `/verify` and `/settle` calls.
    pub verify: u64,
    pub settle: u64,
    /// Distinct payments (payer and nonce) in those calls.
    pub payments: u64,
    /// Payments verified more than once, settled more than once, settled and never verified.
    pub verified_twice: u64,
    pub settled_twice: u64,
    pub settled_unverified: u64,
    /// Payments verified and not (yet) settled: a create that failed after its verification.
    pub unsettled: u64,
    /// Calls whose body was not a facilitator request.
    pub malformed: u64,
}

impl Counts {
    /// What is wrong with these counts, if anything: a payment verified or settled twice, or
    /// settled unverified, or a call that was not a facilitator request.
    pub fn problem(&self) -> Option<String> {
        let wrong = [
            (self.verified_twice, "verified more than once"),
            (self.settled_twice, "settled more than once"),
            (self.settled_unverified, "settled without being verified"),
            (self.malformed, "calls that were not a facilitator request"),
        ];
        let found: Vec<String> = wrong
            .iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, what)| format!("{n} {what}"))
            .collect();
        (!found.is_empty()).then(|| format!("the facilitator saw {}", found.join(", ")))
    }

    /// One line for the report.
    pub fn line(&self) -> String {
        format!(
            "facilitator: {} payments, {} verify calls, {} settle calls; verified twice {}, settled twice {}, settled unverified {}, verified and not settled {}",
            self.payments,
            self.verify,
            self.settle,
            self.verified_twice,
            self.settled_twice,
            self.settled_unverified,
            self.unsettled
        )
    }
}

/// `/verify` and `/settle` bodies: the parts read.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Call<'a> {
    #[serde(borrow)]
    payment_payload: Payload<'a>,
}

#[derive(Deserialize)]
struct Payload<'a> {
    #[serde(borrow)]
    payload: Inner<'a>,
}

#[derive(Deserialize)]
struct Inner<'a> {
    #[serde(borrow)]
    authorization: Authorization<'a>,
}

#[derive(Deserialize)]
struct Authorization<'a> {
    #[serde(borrow)]
    from: Cow<'a, str>,
    #[serde(borrow)]
    nonce: Cow<'a, str>,
}

/// Calls seen for one payment.
#[derive(Debug, Clone, Copy, Default)]
struct Seen {
    verified: u32,
    settled: u32,
}

#[derive(Default)]
struct Facilitator {
    seen: Mutex<HashMap<String, Seen>>,
    verify: AtomicU64,
    settle: AtomicU64,
    malformed: AtomicU64,
}

impl Facilitator {
    fn counts(&self) -> Counts {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let mut c = Counts {
            verify: self.verify.load(Ordering::Relaxed),
            settle: self.settle.load(Ordering::Relaxed),
            payments: seen.len() as u64,
            malformed: self.malformed.load(Ordering::Relaxed),
            ..Counts::default()
        };
        for s in seen.values() {
            c.verified_twice += u64::from(s.verified > 1);
            c.settled_twice += u64::from(s.settled > 1);
            c.settled_unverified += u64::from(s.settled > 0 && s.verified == 0);
            c.unsettled += u64::from(s.verified > 0 && s.settled == 0);
        }
        c
    }

    /// Counts a call for the payment in `body`; its payer and whether it was settled before
    /// this call, or `None` for a malformed body.
    fn record(&self, body: &[u8], settle: bool) -> Option<(String, bool)> {
        let Ok(call) = serde_json::from_slice::<Call>(body) else {
            self.malformed.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        let a = call.payment_payload.payload.authorization;
        let key = format!("{}:{}", a.from, a.nonce).to_ascii_lowercase();
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let s = seen.entry(key).or_default();
        let spent = s.settled > 0;
        if settle {
            s.settled += 1;
            self.settle.fetch_add(1, Ordering::Relaxed);
        } else {
            s.verified += 1;
            self.verify.fetch_add(1, Ordering::Relaxed);
        }
        Some((a.from.into_owned(), spent))
    }
}

fn malformed() -> Answer {
    json(
        StatusCode::BAD_REQUEST,
        r#"{"error":"not a facilitator request: x402Version, paymentPayload.payload.authorization.{from,nonce}"}"#,
    )
}

impl Service for Facilitator {
    fn answer(&self, method: &Method, path: &str, _query: Option<&str>, body: Bytes) -> Answer {
        match (method, path) {
            (&Method::POST, "/verify") => match self.record(&body, false) {
                Some((payer, false)) => json(
                    StatusCode::OK,
                    format!(r#"{{"isValid":true,"payer":"{payer}"}}"#),
                ),
                Some((payer, true)) => json(
                    StatusCode::OK,
                    format!(
                        r#"{{"isValid":false,"invalidReason":"invalid_exact_evm_nonce_already_used","payer":"{payer}"}}"#
                    ),
                ),
                None => malformed(),
            },
            (&Method::POST, "/settle") => match self.record(&body, true) {
                Some((payer, _)) => {
                    let n = self.settle.load(Ordering::Relaxed);
                    json(
                        StatusCode::OK,
                        format!(
                            r#"{{"success":true,"transaction":"0x{n:064x}","network":"{NETWORK}","payer":"{payer}"}}"#
                        ),
                    )
                }
                None => malformed(),
            },
            (&Method::GET, "/supported") => json(
                StatusCode::OK,
                format!(
                    r#"{{"kinds":[{{"x402Version":2,"scheme":"exact","network":"{NETWORK}"}}],"extensions":[],"signers":{{"eip155:*":[]}}}}"#
                ),
            ),
            (&Method::GET, "/counts") => json(
                StatusCode::OK,
                serde_json::to_string(&self.counts()).unwrap_or_default(),
            ),
            _ => json(StatusCode::NOT_FOUND, r#"{"error":"not found"}"#),
        }
    }
}

/// Runs the stand-in facilitator on `threads` worker threads, printing `facilitator ready: ADDR`
/// once listening.
pub fn main(listen: SocketAddr, threads: usize) -> std::io::Result<()> {
    crate::serve::main("facilitator", listen, threads, Facilitator::default())
}

/// The counts of the facilitator at `addr`.
pub fn counts(addr: SocketAddr) -> Result<Counts, String> {
    let a = crate::http::Request::get("/counts").send(addr, std::time::Duration::from_secs(10))?;
    if a.status != 200 {
        return Err(format!("the facilitator's /counts answered {}", a.status));
    }
    serde_json::from_str(&a.body).map_err(|e| format!("the facilitator's /counts: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payer::{Payer, PAYER};
    use crate::serve::body_of;
    use serde_json::json;

    fn call(f: &Facilitator, what: &str, payment: &str) -> serde_json::Value {
        let payload: serde_json::Value = serde_json::from_str(payment).expect("a payment document");
        let body = json!({"x402Version": 2, "paymentPayload": payload, "paymentRequirements": payload["accepted"]});
        body_of(f.answer(&Method::POST, what, None, Bytes::from(body.to_string())))
    }

    #[test]
    fn each_payment_is_counted_and_answered_as_the_sdk_s_facilitator_answers() {
        let f = Facilitator::default();
        let p = Payer::new("http://h/", 1_900_000_000);
        let batch = p.batch();
        let (one, two) = (p.document(batch, 1), p.document(batch, 2));
        let v = call(&f, "/verify", &one);
        assert_eq!(v, json!({"isValid": true, "payer": PAYER}));
        let s = call(&f, "/settle", &one);
        assert_eq!(s["success"], true);
        assert_eq!(s["network"], NETWORK);
        assert_eq!(s["transaction"].as_str().map(str::len), Some(66));
        call(&f, "/verify", &two);
        assert_eq!(f.counts().problem(), None);
        assert_eq!(f.counts().unsettled, 1);
        call(&f, "/settle", &one);
        call(&f, "/verify", &two);
        let again = call(&f, "/verify", &one);
        assert_eq!(
            again["isValid"], false,
            "a settled payment verifies no more"
        );
        assert_eq!(
            again["invalidReason"],
            "invalid_exact_evm_nonce_already_used"
        );
        let c = f.counts();
        assert_eq!((c.verify, c.settle, c.payments), (4, 2, 2));
        assert_eq!((c.settled_twice, c.verified_twice), (1, 2));
        assert!(c
            .problem()
            .is_some_and(|p| p.contains("settled more than once")));
        let bad = f.answer(&Method::POST, "/verify", None, Bytes::from_static(b"{}"));
        assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
        assert_eq!(f.counts().malformed, 1);
    }
}
