//! An input checked against the agent's input schema (MIP-003 Attachment 01), before it is sent.

use serde_json::{json, Value};

use crate::config::Validation;
use crate::engine::{Cx, Engine, Translated};
use crate::error::ProxyError;
use crate::upstream::UpstreamError;
use masumi::attachment01::{Mode, Schema};

pub(in crate::engine) enum SchemaProblem {
    Input(ProxyError),
    Schema(String),
}

/// Validates `value` (absent: an empty object) against an Attachment 01 schema.
pub(in crate::engine) fn validate_against(
    schema: &Value,
    value: Option<Value>,
    mode: Validation,
) -> Result<(), SchemaProblem> {
    let mode = match mode {
        Validation::Reference => Mode::Reference,
        Validation::Strict => Mode::Strict,
    };
    let schema = Schema::from_json(schema, mode).map_err(|e| SchemaProblem::Schema(e.message))?;
    schema
        .validate(&value.unwrap_or_else(|| json!({})))
        .map_err(|f| {
            SchemaProblem::Input(ProxyError::InvalidInput {
                message: f.message,
                field_errors: f.field_errors,
            })
        })
}

impl Engine {
    /// Validates a create's input against the agent's schema (400 with per-field errors).
    pub(in crate::engine) async fn validate(
        &self,
        t: &Translated,
        value: Option<Value>,
        cx: &mut Cx<'_>,
    ) -> Result<(), ProxyError> {
        let schema = match self.back.input_schema(t, cx).await {
            Ok(s) => s,
            // No schema anywhere: nothing to validate against.
            Err(ProxyError::Unsupported { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        validate_against(&schema, value, t.settings.validation).map_err(|e| match e {
            SchemaProblem::Input(e) => e,
            SchemaProblem::Schema(msg) => ProxyError::Upstream(UpstreamError::Invalid {
                upstream: t.upstream.config.name.clone(),
                dialect: t.back.name.clone(),
                detail: format!("its input schema is not valid: {msg}"),
            }),
        })
    }
}
