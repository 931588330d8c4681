//! Sealed tokens: a JSON value handed to a client and read back later, so that the state of a
//! conversation can live in the client (a session id, a continuation) rather than in a table.
//!
//! ```text
//! token := base64url(payload) "." base64url(HMAC-SHA256(key, LABEL || base64url(payload)))
//! payload := {"exp": <Unix ms>, "v": <the value>}        (JSON, no padding in either part)
//! ```
//!
//! Integrity only: anyone can read the value inside; only a holder of the key can make or change
//! one. The MAC is checked (in constant time) before the payload is parsed, so text from a client
//! is never parsed as JSON unless this key sealed it. The key is data handed in by the caller; the
//! clock is the caller's too (`now_ms`), so tests need no sleeps.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde_json::{Map, Value};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// What the MAC covers before the payload: a MAC the same key makes for some other purpose (a
/// fleet may reuse a secret) never passes as a seal. `v1` names the token format.
const LABEL: &[u8] = b"interlingua seal v1\n";

/// The longest text [`unseal`] looks at. A bound on the work hostile input can ask for; a token
/// is meant for a header (servers cap those at a few KiB to 64 KiB).
pub const MAX_TOKEN: usize = 64 * 1024;

/// Why a value could not be sealed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// The key is empty: sealing with it would protect nothing.
    #[error("no sealing key")]
    NoKey,
}

/// `value` sealed with `key`, valid until `expires_ms` (Unix milliseconds, exclusive). The token
/// holds only the URL-safe base64 alphabet and one `.`, so it fits a header, a path or a query.
/// Fails only when `key` is empty.
pub fn seal(value: &Value, expires_ms: i64, key: &[u8]) -> Result<String, SealError> {
    let mac = mac(key).ok_or(SealError::NoKey)?;
    let mut payload = Map::new();
    payload.insert("exp".into(), Value::from(expires_ms));
    payload.insert("v".into(), value.clone());
    let body = URL_SAFE_NO_PAD.encode(Value::Object(payload).to_string());
    let tag = sign(mac, &body);
    Ok(format!("{body}.{}", URL_SAFE_NO_PAD.encode(tag)))
}

/// The value `token` holds, when `key` sealed it and it has not expired at `now_ms`; `None` for
/// anything else: not a token, altered, sealed with another key, expired, longer than
/// [`MAX_TOKEN`], or an empty `key`. Never panics.
pub fn unseal(token: &str, now_ms: i64, key: &[u8]) -> Option<Value> {
    if token.len() > MAX_TOKEN {
        return None;
    }
    let mac = mac(key)?;
    let (body, tag) = token.split_once('.')?;
    let tag = URL_SAFE_NO_PAD.decode(tag).ok()?;
    let mut mac = mac;
    mac.update(LABEL);
    mac.update(body.as_bytes());
    mac.verify_slice(&tag).ok()?;
    let payload = URL_SAFE_NO_PAD.decode(body).ok()?;
    let Value::Object(mut payload) = serde_json::from_slice::<Value>(&payload).ok()? else {
        return None;
    };
    let expires = payload.get("exp").and_then(Value::as_i64)?;
    if now_ms >= expires {
        return None;
    }
    payload.remove("v")
}

/// A MAC keyed with `key`; `None` for an empty key.
fn mac(key: &[u8]) -> Option<HmacSha256> {
    if key.is_empty() {
        return None;
    }
    // HMAC takes a key of any length (a long one is hashed first), so this does not fail.
    HmacSha256::new_from_slice(key).ok()
}

fn sign(mut mac: HmacSha256, body: &str) -> Vec<u8> {
    mac.update(LABEL);
    mac.update(body.as_bytes());
    mac.finalize().into_bytes().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";
    const NOW: i64 = 1_780_000_000_000;

    #[test]
    fn a_sealed_value_comes_back_until_it_expires() {
        let v = json!({"sub": "alice", "caps": {"elicitation": {}}, "n": [1, 2.5, null]});
        let t = seal(&v, NOW + 1000, KEY).unwrap();
        assert!(t
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')));
        assert_eq!(unseal(&t, NOW, KEY), Some(v.clone()));
        assert_eq!(unseal(&t, NOW + 999, KEY), Some(v));
        assert_eq!(unseal(&t, NOW + 1000, KEY), None, "exp is exclusive");
        assert_eq!(unseal(&t, NOW + 10_000, KEY), None);
    }

    #[test]
    fn any_changed_byte_makes_a_token_unreadable() {
        let t = seal(&json!("x"), NOW + 1000, KEY).unwrap();
        for i in 0..t.len() {
            let mut bytes = t.clone().into_bytes();
            bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
            let changed = String::from_utf8(bytes).unwrap();
            if changed != t {
                assert_eq!(unseal(&changed, NOW, KEY), None, "byte {i} of {t}");
            }
        }
    }

    #[test]
    fn a_token_made_by_hand_or_with_another_key_is_refused() {
        let t = seal(&json!(1), NOW + 1000, KEY).unwrap();
        assert_eq!(unseal(&t, NOW, b"another key, just as long as KEY"), None);
        assert_eq!(unseal(&t, NOW, b""), None);
        // A payload anyone could write, with a made-up or missing MAC.
        let forged = URL_SAFE_NO_PAD.encode(r#"{"exp":99999999999999,"v":"admin"}"#);
        assert_eq!(unseal(&forged, NOW, KEY), None);
        assert_eq!(unseal(&format!("{forged}."), NOW, KEY), None);
        assert_eq!(unseal(&format!("{forged}.AAAA"), NOW, KEY), None);
        // A MAC over the payload alone (without the label) does not pass either.
        let mut bare = HmacSha256::new_from_slice(KEY).unwrap();
        bare.update(forged.as_bytes());
        let tag = URL_SAFE_NO_PAD.encode(bare.finalize().into_bytes());
        assert_eq!(unseal(&format!("{forged}.{tag}"), NOW, KEY), None);
    }

    #[test]
    fn garbage_is_refused_without_panicking() {
        for text in [
            "",
            ".",
            "..",
            "a.b",
            "é.ü",
            "\0",
            "a.b.c",
            &"A".repeat(MAX_TOKEN + 1),
        ] {
            assert_eq!(unseal(text, NOW, KEY), None, "{text:.20}");
        }
        // A signed payload that is not the expected object.
        let body = URL_SAFE_NO_PAD.encode("[1]");
        let tag = URL_SAFE_NO_PAD.encode(sign(mac(KEY).unwrap(), &body));
        assert_eq!(unseal(&format!("{body}.{tag}"), NOW, KEY), None);
    }

    #[test]
    fn an_empty_key_cannot_seal() {
        assert_eq!(seal(&json!(1), NOW, b""), Err(SealError::NoKey));
    }
}
