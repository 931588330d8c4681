//! A compiled mapping: everything `mappings/<dialect>.toml` says, checked and ready to run.

use std::collections::BTreeMap;
use std::sync::Arc;

use http::Method;
use serde_json::{Map, Value};

use super::expr::Expr;
use super::location::Location;
use super::template::PathTemplate;
use crate::task::time::TimeFormat;
use crate::task::{Operation, Status, StepSource};

/// One dialect, compiled.
#[derive(Debug)]
pub struct Mapping {
    pub name: String,
    pub title: String,
    /// Where it was loaded from, for messages.
    pub origin: String,
    /// Whether the dialect reports steps itself.
    pub steps: StepSource,
    /// Default variables (`[vars]`); a route may override them.
    pub vars: Map<String, Value>,
    pub ids: Ids,
    pub status: Option<StatusTable>,
    /// The input this dialect's agents take, when nothing more specific is declared.
    pub input_schema: Option<Value>,
    pub error: Option<Rules>,
    /// Operations in file order.
    pub ops: Vec<Op>,
}

impl Mapping {
    pub fn op(&self, op: Operation) -> Option<&Op> {
        self.ops.iter().find(|o| o.op == op)
    }

    /// The operation a front request is for: method and path template must match; of several
    /// matching templates the one with the most literal segments wins.
    pub fn match_front(
        &self,
        method: &Method,
        path: &str,
    ) -> Option<(&Op, BTreeMap<String, String>)> {
        self.ops
            .iter()
            .filter(|o| o.method == *method)
            .flat_map(|o| std::iter::once(&o.path).chain(&o.also).map(move |t| (o, t)))
            .filter_map(|(o, t)| t.matches(path).map(|p| (o, t.specificity(), p)))
            .max_by_key(|(_, specificity, _)| *specificity)
            .map(|(o, _, p)| (o, p))
    }
}

/// How ids are rendered (`task-{id}`).
#[derive(Debug, Clone, Default)]
pub struct Ids {
    pub task: Option<IdTemplate>,
    pub step: Option<IdTemplate>,
}

/// An id template: a prefix and a suffix around the canonical id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdTemplate {
    pub prefix: String,
    pub suffix: String,
}

impl IdTemplate {
    pub fn parse(text: &str) -> Result<IdTemplate, String> {
        let (prefix, suffix) = text
            .split_once("{id}")
            .ok_or_else(|| format!("id template `{text}` must contain `{{id}}`"))?;
        if suffix.contains("{id}") {
            return Err(format!("id template `{text}` has `{{id}}` twice"));
        }
        Ok(IdTemplate {
            prefix: prefix.to_string(),
            suffix: suffix.to_string(),
        })
    }

    pub fn render(&self, id: &str) -> String {
        if id.starts_with(&self.prefix) && id.ends_with(&self.suffix) && !self.prefix.is_empty() {
            // Already rendered (an upstream id that kept its prefix).
            return id.to_string();
        }
        format!("{}{id}{}", self.prefix, self.suffix)
    }

    /// The canonical id inside a rendered one; an id that does not fit is returned as is (it
    /// will simply not be found).
    pub fn strip<'a>(&self, rendered: &'a str) -> &'a str {
        rendered
            .strip_prefix(self.prefix.as_str())
            .and_then(|r| r.strip_suffix(self.suffix.as_str()))
            .unwrap_or(rendered)
    }
}

/// Dialect status values ↔ canonical statuses (with an optional reason).
#[derive(Debug, Clone)]
pub struct StatusTable {
    /// Keyed by the dialect value (folded when `ignore_case`).
    pub read: BTreeMap<String, (Status, Option<String>)>,
    /// Keyed by `status` or `status/reason`.
    pub emit: BTreeMap<String, String>,
    pub ignore_case: bool,
}

impl StatusTable {
    pub fn fold(&self, value: &str) -> String {
        if self.ignore_case {
            fold(value)
        } else {
            value.to_string()
        }
    }

    pub fn read(&self, value: &str) -> Option<&(Status, Option<String>)> {
        self.read.get(&self.fold(value))
    }

    pub fn emit(&self, status: &str, reason: Option<&str>) -> Option<&str> {
        reason
            .and_then(|r| self.emit.get(&format!("{status}/{r}")))
            .or_else(|| self.emit.get(status))
            .map(String::as_str)
    }
}

/// Case, `_`, `-` and the `AgentExecutionStatus.` prefix Python SDKs leak do not matter.
pub fn fold(value: &str) -> String {
    let v = value.rsplit('.').next().unwrap_or(value);
    v.chars()
        .filter(|c| !matches!(c, '_' | '-' | ' '))
        .flat_map(char::to_lowercase)
        .collect()
}

/// How a create_task answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Returns {
    /// At once, with a task the client polls.
    Task,
    /// Only when the task is done, with its result.
    Result,
}

/// One operation of a dialect.
#[derive(Debug)]
pub struct Op {
    pub op: Operation,
    pub method: Method,
    pub path: PathTemplate,
    /// Older paths a front request may use.
    pub also: Vec<PathTemplate>,
    pub status: u16,
    pub returns: Returns,
    /// Front: the canonical field validated against the input schema.
    pub validate: Option<Vec<String>>,
    pub request: Rules,
    pub response: Rules,
}

/// An ordered list of field rules.
#[derive(Debug, Clone, Default)]
pub struct Rules(pub Vec<Rule>);

/// Which way a rule works.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Both,
    Read,
    Emit,
}

/// A value conversion applied in both directions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conversion {
    Status,
    TaskId,
    StepId,
    Time(TimeFormat),
}

/// A JSON type a read value must have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonType {
    String,
    Number,
    Integer,
    Boolean,
    Object,
    Array,
}

impl JsonType {
    pub fn from_name(name: &str) -> Option<JsonType> {
        Some(match name {
            "string" => JsonType::String,
            "number" => JsonType::Number,
            "integer" => JsonType::Integer,
            "boolean" => JsonType::Boolean,
            "object" => JsonType::Object,
            "array" => JsonType::Array,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            JsonType::String => "a string",
            JsonType::Number => "a number",
            JsonType::Integer => "an integer",
            JsonType::Boolean => "a boolean",
            JsonType::Object => "an object",
            JsonType::Array => "an array",
        }
    }

    pub fn accepts(self, v: &Value) -> bool {
        match self {
            JsonType::String => v.is_string(),
            JsonType::Number => v.is_number(),
            JsonType::Integer => v.is_i64() || v.is_u64(),
            JsonType::Boolean => v.is_boolean(),
            JsonType::Object => v.is_object(),
            JsonType::Array => v.is_array(),
        }
    }
}

/// A shape: rules for an object, used by `shape` (one object) and `each` (array elements).
#[derive(Debug)]
pub struct Shape {
    pub name: String,
    /// The canonical name each element is bound to (`step`), for `each`.
    pub bind: Option<String>,
    pub rules: Rules,
}

/// A rule's nested mapping.
#[derive(Debug, Clone)]
pub enum Nested {
    Shape(Arc<Shape>),
    Each(Arc<Shape>),
}

/// One compiled field rule.
#[derive(Debug, Clone)]
pub struct Rule {
    pub location: Location,
    pub aliases: Vec<Location>,
    /// How the location reads in messages (`$.input_query`, `query job_id`).
    pub label: String,
    pub field: Option<Vec<String>>,
    pub value: Option<Expr>,
    pub read: Option<Expr>,
    pub when: Option<Expr>,
    pub conversion: Option<Conversion>,
    pub default: Option<Value>,
    pub required: bool,
    pub kind: Option<JsonType>,
    pub nested: Option<Nested>,
    pub direction: Direction,
}
