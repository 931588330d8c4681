//! x402 version 2 on the wire: the documents a paid request carries in its headers, and the
//! facilitator's answers.
//!
//! Sources: the x402 specification v2 (<https://github.com/coinbase/x402/blob/main/specs/x402-specification-v2.md>,
//! "Types") and its HTTP transport (`specs/transports-v2/http.md`: `PAYMENT-REQUIRED`,
//! `PAYMENT-SIGNATURE`, `PAYMENT-RESPONSE`, each the base64 of a JSON document). Where the
//! official Python SDK (x402 2.25.0) and the text differ, the SDK is followed, and the field says
//! so. Unknown fields are kept (`extra`, `extensions`, a payload's scheme-specific body) and
//! compared or forwarded verbatim: a facilitator is the judge of what they mean.

use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The version this module speaks.
pub const X402_VERSION: u32 = 2;

/// Header of a 402 answer: what the resource accepts.
pub const PAYMENT_REQUIRED: &str = "payment-required";
/// Header of a paid request: the client's signed payment.
pub const PAYMENT_SIGNATURE: &str = "payment-signature";
/// Header of the answer to a paid request: the settlement's outcome.
pub const PAYMENT_RESPONSE: &str = "payment-response";
/// Version 1's header of a paid request, and of its answer's settlement
/// (https://github.com/coinbase/x402/blob/main/specs/x402-specification-v1.md, "HTTP transport").
pub const X_PAYMENT: &str = "x-payment";
pub const X_PAYMENT_RESPONSE: &str = "x-payment-response";

/// Where the payment goes to: the resource a 402 names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Resource {
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
}

/// One way to pay (an `accepts` entry, echoed by the client as `accepted`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Requirements {
    /// `exact` or `upto` here; other schemes are refused by the offer check.
    pub scheme: String,
    /// CAIP-2, e.g. `eip155:8453`.
    pub network: String,
    /// Atomic units of `asset`, as a decimal string.
    pub amount: String,
    /// The token contract.
    pub asset: String,
    pub pay_to: String,
    pub max_timeout_seconds: u64,
    /// The token's EIP-712 domain (`name`, `version`) and scheme details; compared whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Map<String, Value>>,
}

/// The body of `PAYMENT-REQUIRED`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequired {
    pub x402_version: u32,
    /// Why the last payment was refused (a facilitator's reason), or "Payment required".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub resource: Resource,
    pub accepts: Vec<Requirements>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Map<String, Value>>,
}

/// The body of `PAYMENT-SIGNATURE`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentPayload {
    pub x402_version: u32,
    /// The offer the client chose, as it read it.
    pub accepted: Requirements,
    /// Scheme-specific: for `exact` on EVM an EIP-3009 `authorization` and its `signature`; for
    /// `upto` a Permit2 authorization. Forwarded to the facilitator as it came.
    pub payload: Map<String, Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<Resource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Map<String, Value>>,
}

impl PaymentPayload {
    /// The payer's address and the authorization's nonce, where the scheme's payload names them
    /// (`exact`: `authorization.from` / `.nonce`; `upto`: `permit2Authorization.from` /
    /// `.nonce`): the replay guard's key before the facilitator is asked.
    pub fn payer_and_nonce(&self) -> Option<(String, String)> {
        let auth = self
            .payload
            .get("authorization")
            .or_else(|| self.payload.get("permit2Authorization"))?;
        let from = auth.get("from")?.as_str()?.to_ascii_lowercase();
        let nonce = match auth.get("nonce")? {
            Value::String(s) => s.to_ascii_lowercase(),
            Value::Number(n) => n.to_string(),
            _ => return None,
        };
        Some((from, nonce))
    }
}

/// A facilitator's body for `/verify` and `/settle` (the same for both).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FacilitatorRequest<'a> {
    pub x402_version: u32,
    pub payment_payload: &'a PaymentPayload,
    /// At `/verify`, the offer; at an `upto` `/settle`, the same with the amount actually owed.
    pub payment_requirements: &'a Requirements,
}

/// `/verify`'s answer. A refusal is a 200 with `isValid: false`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VerifyResponse {
    pub is_valid: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid_reason: Option<String>,
    /// Not in the specification's table; the SDK sends it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid_message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payer: Option<String>,
}

/// `/settle`'s answer, and the body of `PAYMENT-RESPONSE`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SettleResponse {
    pub success: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_reason: Option<String>,
    /// Not in the specification's table; the SDK sends it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payer: Option<String>,
    /// The transaction's hash; `""` when nothing was sent (an `upto` of 0). The SDK also names
    /// the reverted transaction of a failed settlement here, not `""`.
    #[serde(default)]
    pub transaction: String,
    pub network: String,
    /// What was settled (`upto`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amount: Option<String>,
}

/// Why a header could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    #[error("the header is not base64")]
    NotBase64,
    #[error("the header's document is not valid: {0}")]
    NotADocument(String),
    #[error("x402 version {0} is not supported (only 2)")]
    Version(u32),
}

/// Encodes a document for a header: standard base64 with padding, as the SDK writes it.
pub fn encode_header<T: Serialize>(doc: &T) -> String {
    // Serialising these types cannot fail: their maps have string keys.
    STANDARD.encode(serde_json::to_vec(doc).unwrap_or_default())
}

/// Decodes a header's base64, in either alphabet, padded or not (clients differ).
fn decode_base64(text: &str) -> Result<Vec<u8>, HeaderError> {
    let text = text.trim();
    [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE, &URL_SAFE_NO_PAD]
        .iter()
        .find_map(|engine| engine.decode(text).ok())
        .ok_or(HeaderError::NotBase64)
}

/// Reads a `PAYMENT-SIGNATURE` header.
pub fn decode_payment(text: &str) -> Result<PaymentPayload, HeaderError> {
    let bytes = decode_base64(text)?;
    let doc: Value =
        serde_json::from_slice(&bytes).map_err(|e| HeaderError::NotADocument(e.to_string()))?;
    payment_from_value(doc)
}

/// Reads a payment carried as a document (in band: an MCP call's `_meta`, an A2A message's
/// metadata). Whole numbers written as floats are read as integers: an A2A client on protobuf
/// (a2a-sdk 1.x) carries metadata in a `Struct`, whose numbers are doubles (`300.0`).
pub fn payment_from_value(mut doc: Value) -> Result<PaymentPayload, HeaderError> {
    whole_numbers(&mut doc);
    let doc: PaymentPayload =
        serde_json::from_value(doc).map_err(|e| HeaderError::NotADocument(e.to_string()))?;
    if doc.x402_version != X402_VERSION {
        return Err(HeaderError::Version(doc.x402_version));
    }
    Ok(doc)
}

/// Turns every float in `v` that is a whole number (within `u64`) into an integer.
pub fn whole_numbers(v: &mut Value) {
    match v {
        Value::Number(n) if !n.is_u64() && !n.is_i64() => {
            if let Some(f) = n
                .as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 1.8e19)
            {
                *v = Value::from(f as u64);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(whole_numbers),
        Value::Object(fields) => fields.values_mut().for_each(whole_numbers),
        _ => {}
    }
}

/// Reads a `PAYMENT-REQUIRED` header (an agent's, on the paying side).
pub fn decode_required(text: &str) -> Result<PaymentRequired, HeaderError> {
    let bytes = decode_base64(text)?;
    serde_json::from_slice(&bytes).map_err(|e| HeaderError::NotADocument(e.to_string()))
}

/// Reads any header's document as `T` (on the paying side: an agent's `PAYMENT-REQUIRED` as
/// JSON, each offer then read on its own; its `PAYMENT-RESPONSE`).
pub fn decode_header<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, HeaderError> {
    let bytes = decode_base64(text)?;
    serde_json::from_slice(&bytes).map_err(|e| HeaderError::NotADocument(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn offer() -> Requirements {
        serde_json::from_value(json!({
            "scheme": "exact", "network": "eip155:31337", "amount": "10000",
            "asset": "0x5FbDB2315678afecb367f032d93F642f64180aa3",
            "payTo": "0x28f5aA1a4DDCEa8Ad9cb4b4B2Ad0c87e05D1B335", "maxTimeoutSeconds": 300,
            "extra": {"name": "USDC", "version": "2"}
        }))
        .expect("an offer")
    }

    fn payload() -> Value {
        json!({
            "x402Version": 2,
            "accepted": serde_json::to_value(offer()).expect("json"),
            "payload": {
                "authorization": {"from": "0xBD44CF622856DF3Ac24b5300181eab8Ac9F5FdB1",
                    "to": "0x28f5aA1a4DDCEa8Ad9cb4b4B2Ad0c87e05D1B335", "value": "10000",
                    "validAfter": "0", "validBefore": "1795533761", "nonce": "0x47C5"},
                "signature": "0xd18b"
            },
            "resource": {"url": "http://127.0.0.1:4021/run", "description": "run", "mimeType": ""}
        })
    }

    #[test]
    fn a_payment_in_band_reads_whole_numbers_written_as_floats() {
        let mut doc = payload();
        doc["x402Version"] = json!(2.0);
        doc["accepted"]["maxTimeoutSeconds"] = json!(300.0);
        let read = payment_from_value(doc).expect("read");
        assert_eq!(read.accepted, offer());
        let mut half = payload();
        half["accepted"]["maxTimeoutSeconds"] = json!(300.5);
        assert!(
            payment_from_value(half).is_err(),
            "a fraction is no whole number"
        );
    }

    #[test]
    fn a_payment_reads_in_either_alphabet_padded_or_not() {
        let bytes = serde_json::to_vec(&payload()).expect("json");
        for engine in [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE, &URL_SAFE_NO_PAD] {
            let doc = decode_payment(&engine.encode(&bytes)).expect("decoded");
            assert_eq!(doc.accepted, offer());
            assert_eq!(
                doc.payer_and_nonce(),
                Some((
                    "0xbd44cf622856df3ac24b5300181eab8ac9f5fdb1".to_string(),
                    "0x47c5".to_string()
                ))
            );
        }
    }

    #[test]
    fn what_is_not_a_payment_says_why() {
        assert_eq!(decode_payment("%%%"), Err(HeaderError::NotBase64));
        assert!(matches!(
            decode_payment(&STANDARD.encode(b"{\"x402Version\":2}")),
            Err(HeaderError::NotADocument(_))
        ));
        let mut v1 = payload();
        v1["x402Version"] = json!(1);
        let text = STANDARD.encode(serde_json::to_vec(&v1).expect("json"));
        assert_eq!(decode_payment(&text), Err(HeaderError::Version(1)));
    }

    #[test]
    fn a_402_document_round_trips_through_its_header() {
        let required = PaymentRequired {
            x402_version: X402_VERSION,
            error: Some("Payment required".to_string()),
            resource: Resource {
                url: "http://h/run".to_string(),
                description: None,
                mime_type: None,
            },
            accepts: vec![offer()],
            extensions: None,
        };
        let text = encode_header(&required);
        assert!(!text.contains('-') && !text.contains('_'));
        assert_eq!(decode_required(&text), Ok(required));
    }

    #[test]
    fn facilitator_answers_read_as_the_sdk_writes_them() {
        let refused: VerifyResponse = serde_json::from_value(json!({
            "isValid": false, "invalidReason": "invalid_exact_evm_insufficient_balance",
            "invalidMessage": "…", "payer": "0xabc"
        }))
        .expect("verify");
        assert!(!refused.is_valid);
        let upto_zero: SettleResponse = serde_json::from_value(json!({
            "success": true, "transaction": "", "network": "eip155:31337", "amount": "0"
        }))
        .expect("settle");
        assert_eq!(upto_zero.amount.as_deref(), Some("0"));
    }
}
