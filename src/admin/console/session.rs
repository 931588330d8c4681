//! The console's session and its CSRF tokens, stateless: both are HMACs under a key derived from
//! the admin token, so any instance of a fleet with the same token reads them, and a new token
//! (by a reload) ends every session at once.
//!
//! The cookie is `<issued ms>.<16 random bytes, hex>.<HMAC of both, hex>`; it lasts
//! [`LIFETIME`]. Each form carries `HMAC(key, "csrf" ‖ the session's random part)`: a page of
//! another site can make the browser send the cookie, never read the token.

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// The cookie's name.
pub const COOKIE: &str = "interlingua_console";
/// How long a session lasts after logging in.
pub const LIFETIME_MS: i64 = 12 * 60 * 60 * 1000;

/// The key sessions are signed with, made from the admin token.
pub struct Keyring {
    key: Vec<u8>,
}

/// A session whose cookie verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    nonce: String,
}

impl Keyring {
    pub fn new(admin_token: &str) -> Keyring {
        Keyring {
            key: mac(admin_token.as_bytes(), &[b"interlingua console"]),
        }
    }

    /// A new session's cookie value, issued at `now_ms`.
    pub fn issue(&self, now_ms: i64) -> Result<String, getrandom::Error> {
        let mut nonce = [0u8; 16];
        getrandom::fill(&mut nonce)?;
        let nonce = hex::encode(nonce);
        let issued = now_ms.to_string();
        let tag = hex::encode(mac(
            &self.key,
            &[b"session", issued.as_bytes(), nonce.as_bytes()],
        ));
        Ok(format!("{issued}.{nonce}.{tag}"))
    }

    /// The session a cookie value stands for, when it is ours and has not expired at `now_ms`.
    pub fn verify(&self, cookie: &str, now_ms: i64) -> Option<Session> {
        let mut parts = cookie.split('.');
        let (issued, nonce, tag) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        let expected = mac(
            &self.key,
            &[b"session", issued.as_bytes(), nonce.as_bytes()],
        );
        let given = hex::decode(tag).ok()?;
        if !constant_time_eq(&given, &expected) {
            return None;
        }
        let issued: i64 = issued.parse().ok()?;
        if now_ms < issued || now_ms - issued > LIFETIME_MS {
            return None;
        }
        Some(Session {
            nonce: nonce.to_string(),
        })
    }

    /// The CSRF token of `session`'s forms.
    pub fn csrf(&self, session: &Session) -> String {
        hex::encode(mac(&self.key, &[b"csrf", session.nonce.as_bytes()]))
    }

    /// Whether `token` is `session`'s CSRF token.
    pub fn csrf_ok(&self, session: &Session, token: &str) -> bool {
        constant_time_eq(token.as_bytes(), self.csrf(session).as_bytes())
    }
}

/// The console cookie's value in a `Cookie` header.
pub fn from_header(header: &str) -> Option<&str> {
    header.split(';').find_map(|c| {
        let (name, value) = c.trim().split_once('=')?;
        (name == COOKIE).then_some(value)
    })
}

fn mac(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    // HMAC takes a key of any length.
    let Ok(mut m) = HmacSha256::new_from_slice(key) else {
        return Vec::new();
    };
    for p in parts {
        m.update(&(p.len() as u64).to_be_bytes());
        m.update(p);
    }
    m.finalize().into_bytes().to_vec()
}

/// Compares without stopping at the first difference, so that timing tells nothing of a secret.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_verifies_under_its_token_until_it_expires() {
        let keys = Keyring::new("token-one");
        let cookie = keys.issue(1_000).unwrap();
        let session = keys.verify(&cookie, 2_000).unwrap();
        assert!(keys.verify(&cookie, 1_000 + LIFETIME_MS).is_some());
        assert!(keys.verify(&cookie, 1_001 + LIFETIME_MS).is_none());
        assert!(keys.verify(&cookie, 999).is_none());
        // Another admin token: no session of the old one holds.
        assert!(Keyring::new("token-two").verify(&cookie, 2_000).is_none());
        // Any change to the cookie is caught.
        let later = cookie.replacen("1000.", "9000.", 1);
        assert!(keys.verify(&later, 10_000).is_none());
        assert!(keys.verify(&format!("{cookie}.x"), 2_000).is_none());
        assert!(keys.verify("garbage", 2_000).is_none());
        // The CSRF token is the session's own.
        let token = keys.csrf(&session);
        assert!(keys.csrf_ok(&session, &token));
        let other = keys.verify(&keys.issue(1_000).unwrap(), 2_000).unwrap();
        assert!(!keys.csrf_ok(&other, &token));
        assert!(!keys.csrf_ok(&session, ""));
    }

    #[test]
    fn the_cookie_is_found_among_others() {
        assert_eq!(
            from_header("a=1; interlingua_console=x.y.z; b=2"),
            Some("x.y.z")
        );
        assert_eq!(from_header("interlingua_consolex=1"), None);
    }
}
