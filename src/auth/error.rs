//! Why a token was refused, and the `WWW-Authenticate` challenge that says so. Each reason names
//! the check that failed and never repeats the token.

use jsonwebtoken::errors::ErrorKind;

/// Why a request is not authenticated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("no bearer token")]
    Missing,
    #[error("the Authorization header is not a Bearer token")]
    Scheme,
    #[error("the token is longer than {0} bytes")]
    TooLarge(usize),
    #[error("the token is not a well-formed JWT")]
    Malformed,
    /// A name twice in the header or the claims (RFC 7519 §4 lets a parser refuse it, and
    /// reading the last one would let a token say two things).
    #[error("the token's {part} name{} `{name}` twice", if *part == "header" { "s" } else { "" })]
    Duplicate { part: &'static str, name: String },
    #[error("tokens with alg `none` are never accepted")]
    AlgNone,
    /// RFC 7515 §4.1.11: an extension marked critical that the receiver does not understand
    /// makes the token invalid; interlingua understands none.
    #[error("the token needs the extension {} (crit), which interlingua does not understand", quoted_list(.0))]
    Critical(Vec<String>),
    #[error("the token's `crit` header is not a non-empty list of names")]
    MalformedCrit,
    #[error("no key with kid `{0}`")]
    UnknownKid(String),
    #[error("the algorithm {alg} is not allowed{}", key.as_ref().map(|k| format!(" for key `{k}`")).unwrap_or_default())]
    AlgorithmNotAllowed { alg: String, key: Option<String> },
    #[error("the signature does not verify")]
    BadSignature,
    #[error("the token has expired")]
    Expired,
    #[error("the token is not valid yet (nbf)")]
    NotYetValid,
    #[error("the token was issued in the future (iat)")]
    IssuedInFuture,
    #[error("the token has no exp claim")]
    NoExpiry,
    /// `iss` or `aud`, required because the config names an issuer or an audience.
    #[error("the token has no `{0}` claim")]
    MissingClaim(&'static str),
    #[error("the token's `{claim}` claim is not {expected}")]
    ClaimType {
        claim: &'static str,
        expected: &'static str,
    },
    #[error("the token's issuer is not the expected one")]
    WrongIssuer,
    #[error("the token's audience is not the expected one")]
    WrongAudience,
    #[error("the token has no `{0}` claim")]
    NoSubject(String),
    #[error("the token's claims are not valid")]
    BadClaims,
    #[error("the keys could not be fetched: {0}")]
    KeysUnavailable(String),
}

impl AuthError {
    /// Whether the client sent no credentials at all (RFC 6750 §3.1: then no error code is given).
    pub fn is_missing(&self) -> bool {
        matches!(self, AuthError::Missing | AuthError::Scheme)
    }

    pub(super) fn from_jwt(kind: &ErrorKind) -> AuthError {
        match kind {
            ErrorKind::InvalidSignature => AuthError::BadSignature,
            ErrorKind::ExpiredSignature => AuthError::Expired,
            ErrorKind::ImmatureSignature => AuthError::NotYetValid,
            ErrorKind::InvalidIssuer => AuthError::WrongIssuer,
            ErrorKind::InvalidAudience => AuthError::WrongAudience,
            ErrorKind::MissingRequiredClaim(c) if c == "exp" => AuthError::NoExpiry,
            // jsonwebtoken reports these two for `exp` and `nbf` only.
            ErrorKind::InvalidClaimFormat(c) if c == "exp" => AuthError::ClaimType {
                claim: "exp",
                expected: "a number",
            },
            ErrorKind::InvalidClaimFormat(c) if c == "nbf" => AuthError::ClaimType {
                claim: "nbf",
                expected: "a number",
            },
            ErrorKind::MissingRequiredClaim(_)
            | ErrorKind::InvalidClaimFormat(_)
            | ErrorKind::InvalidSubject => AuthError::BadClaims,
            ErrorKind::InvalidAlgorithm
            | ErrorKind::MissingAlgorithm
            | ErrorKind::InvalidAlgorithmName => AuthError::AlgorithmNotAllowed {
                alg: "of the token".to_string(),
                key: None,
            },
            _ => AuthError::Malformed,
        }
    }
}

/// `a`, `b`: names for a message.
fn quoted_list(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A `WWW-Authenticate` challenge (RFC 6750 §3): `Bearer realm="…"`, then each `(name, value)`
/// parameter. Every value goes through [`quoted_string`], so nothing a client put in a token (a
/// `kid`, a claim name) can add a parameter or make the header unsendable.
pub fn challenge(realm: &str, params: &[(&str, &str)]) -> String {
    let mut out = format!("Bearer realm={}", quoted_string(realm));
    for (name, value) in params {
        out.push_str(", ");
        out.push_str(name);
        out.push('=');
        out.push_str(&quoted_string(value));
    }
    out
}

/// `text` as an RFC 9110 §5.6.4 quoted-string: `"` and `\` are escaped with a backslash; what a
/// quoted-string may not hold (control characters, DEL) becomes `?`, and so do a tab and anything
/// outside ASCII (RFC 6750 §3 allows neither in its values, obs-text is obsolete, and many
/// clients refuse such bytes in a header).
pub fn quoted_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c if c == ' ' || c.is_ascii_graphic() => out.push(c),
            _ => out.push('?'),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_strings_escape_and_replace() {
        assert_eq!(quoted_string("plain text"), "\"plain text\"");
        assert_eq!(quoted_string("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(
            quoted_string("a\0b\rc\nd\u{7f}e\u{e9}f\tg"),
            "\"a?b?c?d?e?f?g\""
        );
    }
}
