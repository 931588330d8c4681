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

/// The most of a client's own text (a `kid`, a name in its token) a challenge repeats.
const ECHO_MAX: usize = 64;

impl AuthError {
    /// The reason as a challenge's `error_description` gives it. RFC 6750 §3 allows printable
    /// ASCII there but `"` and `\`, and clients read the header with patterns that take any
    /// `error="…"` for the error: so what the client chose in its token (a `kid`, a header or
    /// claim name, an algorithm's name) is repeated only as [`echo`] makes it, and anything
    /// else outside that range becomes `?`. The message in the answer's body is the whole one.
    pub fn description(&self) -> String {
        let safe = match self {
            AuthError::Duplicate { part, name } => AuthError::Duplicate {
                part,
                name: echo(name),
            },
            AuthError::Critical(names) => {
                AuthError::Critical(names.iter().map(|n| echo(n)).collect())
            }
            AuthError::UnknownKid(kid) => AuthError::UnknownKid(echo(kid)),
            AuthError::AlgorithmNotAllowed { alg, key } => AuthError::AlgorithmNotAllowed {
                alg: echo(alg),
                key: key.as_deref().map(echo),
            },
            // Interlingua's own words, or the config's (a claim name, a key set's fetch error).
            AuthError::Missing
            | AuthError::Scheme
            | AuthError::TooLarge(_)
            | AuthError::Malformed
            | AuthError::AlgNone
            | AuthError::MalformedCrit
            | AuthError::BadSignature
            | AuthError::Expired
            | AuthError::NotYetValid
            | AuthError::IssuedInFuture
            | AuthError::NoExpiry
            | AuthError::MissingClaim(_)
            | AuthError::ClaimType { .. }
            | AuthError::WrongIssuer
            | AuthError::WrongAudience
            | AuthError::NoSubject(_)
            | AuthError::BadClaims
            | AuthError::KeysUnavailable(_) => self.clone(),
        };
        safe.to_string()
            .chars()
            .map(|c| match c {
                '"' | '\\' => '?',
                c if c == ' ' || c.is_ascii_graphic() => c,
                _ => '?',
            })
            .collect()
    }
}

/// A client's own text as a challenge may repeat it: its first [`ECHO_MAX`] characters, each
/// outside `[A-Za-z0-9._-]` a `?` (so no `"`, `\`, `=`, `,` or space: nothing that reads as a
/// parameter of its own), and `...` after it when it was longer.
fn echo(text: &str) -> String {
    let mut out: String = text
        .chars()
        .take(ECHO_MAX)
        .map(|c| match c {
            'A'..='Z' | 'a'..='z' | '0'..='9' | '.' | '_' | '-' => c,
            _ => '?',
        })
        .collect();
    if text.chars().nth(ECHO_MAX).is_some() {
        out.push_str("...");
    }
    out
}

/// `a`, `b`: names for a message.
fn quoted_list(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What the challenge of a route that publishes metadata adds (RFC 9728 §5.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    /// The absolute URL of the route's metadata document.
    pub metadata_url: String,
    /// The route's scopes, space-separated; `None` when it publishes none.
    pub scope: Option<String>,
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
    fn a_challenge_repeats_only_safe_characters_of_what_the_client_chose() {
        let kid = AuthError::UnknownKid("k\"\\\", error=\"x\"".to_string());
        assert_eq!(kid.description(), "no key with kid `k?????error??x?`");
        let long = AuthError::UnknownKid("a".repeat(100));
        assert_eq!(
            long.description(),
            format!("no key with kid `{}...`", "a".repeat(64))
        );
        let fetched = AuthError::KeysUnavailable("status \"503\" from \\host".to_string());
        assert_eq!(
            fetched.description(),
            "the keys could not be fetched: status ?503? from ?host"
        );
    }

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
