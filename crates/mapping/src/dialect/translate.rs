//! One operation's message from one dialect to another, offline: the core of
//! `interlingua translate`. The source message is read with the first dialect's rules into the
//! canonical document, which the second dialect's rules write out. No engine, no task: what a
//! mapping says of one message, so that a mapping can be developed without a live agent.

use std::collections::BTreeMap;

use serde_json::Value;

use super::codec::{decode, encode, CodecError, Context, Message};
use super::mapping::Mapping;
use crate::task::Operation;

/// Which side of the operation is translated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Request,
    Response,
}

/// Why a message could not be translated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TranslateError {
    /// One of the dialects has no form of the operation.
    #[error("`{from}` has {from_has}, `{to}` has {to_has}")]
    NoOperation {
        from: String,
        from_has: String,
        to: String,
        to_has: String,
    },
    #[error("reading it as `{dialect}` {op}: {source}")]
    Read {
        dialect: String,
        op: &'static str,
        source: CodecError,
    },
    #[error("writing it as `{dialect}` {op}: {source}")]
    Write {
        dialect: String,
        op: &'static str,
        source: CodecError,
    },
}

/// A translated message: for a request, the method and the path (a parameter nobody gave shown
/// as its `{placeholder}`, and named in `missing`); for a response, the status.
#[derive(Debug, Clone, PartialEq)]
pub struct Translation {
    /// The canonical document in between.
    pub canonical: Value,
    pub message: Message,
    pub method: Option<String>,
    pub path: Option<String>,
    pub status: Option<u16>,
    /// Path parameters of the target left as placeholders.
    pub missing: Vec<String>,
}

/// Translates `source`, a message of `op` in `from`'s dialect, into `to`'s. `target_params` fill
/// the target path's parameters the translation does not (the agent's `{did}` in Nevermined's).
pub fn translate(
    from: &Mapping,
    to: &Mapping,
    op: Operation,
    side: Side,
    source: &Message,
    target_params: &BTreeMap<String, String>,
) -> Result<Translation, TranslateError> {
    let (Some(from_op), Some(to_op)) = (from.op(op), to.op(op)) else {
        return Err(TranslateError::NoOperation {
            from: from.name.clone(),
            from_has: has(from.op(op).is_some(), op),
            to: to.name.clone(),
            to_has: has(to.op(op).is_some(), op),
        });
    };
    let (from_rules, to_rules) = match side {
        Side::Request => (&from_op.request, &to_op.request),
        Side::Response => (&from_op.response, &to_op.response),
    };
    let canonical = decode(
        from_rules,
        source,
        &Context {
            mapping: from,
            vars: &from.vars,
            seal_key: &[],
        },
    )
    .map_err(|source| TranslateError::Read {
        dialect: from.name.clone(),
        op: op.name(),
        source,
    })?;
    let message = encode(
        to_rules,
        &canonical,
        &Context {
            mapping: to,
            vars: &to.vars,
            seal_key: &[],
        },
    )
    .map_err(|source| TranslateError::Write {
        dialect: to.name.clone(),
        op: op.name(),
        source,
    })?;
    let mut out = Translation {
        canonical,
        message,
        method: None,
        path: None,
        status: None,
        missing: Vec::new(),
    };
    match side {
        Side::Request => {
            let mut params = out.message.params.clone();
            params.extend(target_params.iter().map(|(k, v)| (k.clone(), v.clone())));
            let (path, missing) = to_op.path.render_showing(&params);
            out.method = Some(to_op.method.as_str().to_string());
            out.path = Some(path);
            out.missing = missing;
        }
        Side::Response => out.status = Some(to_op.status),
    }
    Ok(out)
}

fn has(yes: bool, op: Operation) -> String {
    if yes {
        format!("`{}`", op.name())
    } else {
        format!("no `{}`", op.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialect::{compile, BUILT_IN};

    fn built_in(name: &str) -> Mapping {
        let (_, text) = BUILT_IN.iter().find(|(n, _)| *n == name).expect("built in");
        compile::parse(text, name).expect("compiles")
    }

    #[test]
    fn a_target_parameter_nobody_gives_is_left_as_its_placeholder() {
        let (mip, nvm) = (built_in("mip003"), built_in("nevermined"));
        let source = Message::with_body(serde_json::json!({
            "identifier_from_purchaser": "aabbccddeeff0011",
            "input_data": {"text": "hello"}
        }));
        let none = BTreeMap::new();
        let out = translate(
            &mip,
            &nvm,
            Operation::CreateTask,
            Side::Request,
            &source,
            &none,
        )
        .expect("translates");
        assert_eq!(out.method.as_deref(), Some("POST"));
        assert_eq!(out.path.as_deref(), Some("/api/v1/agents/{did}/tasks"));
        assert_eq!(out.missing, vec!["did".to_string()]);
        let did = BTreeMap::from([("did".to_string(), "did:nv:1".to_string())]);
        let out = translate(
            &mip,
            &nvm,
            Operation::CreateTask,
            Side::Request,
            &source,
            &did,
        )
        .expect("translates");
        assert_eq!(out.path.as_deref(), Some("/api/v1/agents/did:nv:1/tasks"));
        assert!(out.missing.is_empty());
    }

    #[test]
    fn an_operation_one_side_lacks_is_named() {
        let (mip, nvm) = (built_in("mip003"), built_in("nevermined"));
        let source = Message::default();
        let err = translate(
            &nvm,
            &mip,
            Operation::SearchSteps,
            Side::Request,
            &source,
            &BTreeMap::new(),
        )
        .expect_err("mip003 has no step search");
        assert!(matches!(err, TranslateError::NoOperation { .. }), "{err}");
    }
}
