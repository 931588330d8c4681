//! A mapping file as written: serde structs mirroring `mappings/<dialect>.toml`. Unknown keys are
//! errors. `compile` turns this into the translator the engine runs.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

/// One field rule: where a value sits in the dialect's message, and what it is in the canonical
/// model. Exactly one of `json`, `param`, `query`, `header` says where.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldRule {
    /// A JSONPath into the body (`$.task.task_id`, `$.steps[0]`, `$` for the whole body).
    pub json: Option<Spanned<String>>,
    /// A parameter of the operation's path template (`did` for `/agents/{did}/tasks`).
    pub param: Option<Spanned<String>>,
    /// A query parameter.
    pub query: Option<Spanned<String>>,
    /// A header.
    pub header: Option<Spanned<String>>,
    /// Other places the value is accepted from when reading (older field names), same kind.
    pub aliases: Option<Vec<Spanned<String>>>,
    /// The canonical field (`task.input.text`, `step.status`, `error.message`).
    pub field: Option<Spanned<String>>,
    /// An expression computing the value to write (instead of `field`).
    pub value: Option<Spanned<String>>,
    /// An expression applied to the value read (`$`) before it is stored in `field`.
    pub read: Option<Spanned<String>>,
    /// An expression; the rule is written only when it is truthy.
    pub when: Option<Spanned<String>>,
    /// `"status"`: translate through the status table.
    pub table: Option<Spanned<String>>,
    /// `"task"` or `"step"`: render and read ids through the `[ids]` templates.
    pub id: Option<Spanned<String>>,
    /// `"iso_ms"`, `"unix_ms"`, `"unix_s"`, `"rfc3339"`: the dialect's timestamp format.
    pub time: Option<Spanned<String>>,
    /// The dialect value used when there is none (in either direction).
    pub default: Option<toml::Value>,
    /// Reading: the message must carry the value (400 for a client, 502 for an upstream).
    pub required: Option<bool>,
    /// Reading: the JSON type the value must have.
    #[serde(rename = "type")]
    pub kind: Option<Spanned<String>>,
    /// The value is an object mapped by a shape.
    pub shape: Option<Spanned<String>>,
    /// The value is an array whose elements are mapped by a shape.
    pub each: Option<Spanned<String>>,
    /// `"read"` or `"emit"`: the rule works in one direction only.
    pub only: Option<Spanned<String>>,
}

/// `[ids]`: how canonical ids are rendered in this dialect.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdsSection {
    pub task: Option<Spanned<String>>,
    pub step: Option<Spanned<String>>,
}

/// `[status]`: the status table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusSection {
    /// dialect value → canonical status (optionally `status/reason`).
    pub read: BTreeMap<String, Spanned<String>>,
    /// canonical status (or `status/reason`) → dialect value.
    pub emit: Spanned<BTreeMap<String, Spanned<String>>>,
    /// Read values ignoring case, `_` and `-`.
    pub ignore_case: Option<bool>,
}

/// `[error]`: the dialect's error body.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorSection {
    pub fields: Vec<Spanned<FieldRule>>,
}

/// `[shapes.NAME]`: a reusable object mapping.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShapeSection {
    /// The canonical name each element is bound to when the shape maps array elements (`step`).
    pub bind: Option<Spanned<String>>,
    pub fields: Vec<Spanned<FieldRule>>,
}

/// `[operations.NAME]`: one canonical operation as this dialect carries it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperationSection {
    pub method: Spanned<String>,
    /// A path template relative to the route (front) or the upstream (back): `/tasks/{task_id}`.
    pub path: Spanned<String>,
    /// Other path templates a front request may use for the operation (older paths); only `path`
    /// is ever sent.
    pub also: Option<Vec<Spanned<String>>>,
    /// The success status (default 200).
    pub status: Option<Spanned<u16>>,
    /// create_task: `"task"` (answers at once with a task to poll) or `"result"` (answers when done).
    pub returns: Option<Spanned<String>>,
    /// Front: validate this canonical field against the input schema before anything else.
    pub validate: Option<Spanned<String>>,
    pub request: Option<Vec<Spanned<FieldRule>>>,
    pub response: Option<Vec<Spanned<FieldRule>>>,
}
