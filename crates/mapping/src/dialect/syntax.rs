//! What a mapping file's pieces fail with when they do not parse: an expression, a JSON location,
//! a path or id template. The loader reports it at the setting's file:line:col.

/// A piece of a mapping file that does not parse. The message says what was expected and, in an
/// expression, at which character.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SyntaxError {
    pub message: String,
}

impl From<String> for SyntaxError {
    fn from(message: String) -> SyntaxError {
        SyntaxError { message }
    }
}

/// A path parameter with no value when a request is made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no value for path parameter `{{{0}}}`")]
pub struct MissingParam(pub String);
