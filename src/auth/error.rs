//! Why a token was refused. Each reason names the check that failed and never repeats the token.

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
    #[error("tokens with alg `none` are never accepted")]
    AlgNone,
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
    #[error("the token has no exp claim")]
    NoExpiry,
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
