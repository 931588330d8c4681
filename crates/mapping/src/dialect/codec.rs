//! Running field rules: `decode` reads a dialect message into a canonical document, `encode`
//! writes a canonical document as a dialect message. The same rules serve both directions.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::expr::{Expr, Scope};
use super::location::Location;
use super::mapping::{Conversion, Direction, IdTemplate, Mapping, Nested, Rule, Rules};
use super::value::{truthy, walk};
use crate::task::time::{format_iso_ms, parse_any};

/// A dialect message: path parameters, query, headers and JSON body.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Message {
    pub params: BTreeMap<String, String>,
    pub query: Vec<(String, String)>,
    pub headers: Vec<(String, String)>,
    /// `None`: no body at all.
    pub body: Option<Value>,
}

impl Message {
    pub fn with_body(body: Value) -> Message {
        Message {
            body: Some(body),
            ..Message::default()
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Why a message and a mapping did not fit. Each names the dialect field concerned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    #[error("`{field}` is missing")]
    Missing { field: String },
    #[error("`{field}` must be {expected}")]
    WrongType {
        field: String,
        expected: &'static str,
    },
    #[error("`{field}` has the unknown status `{value}`")]
    UnknownStatus { field: String, value: String },
    #[error("`{field}`: {message}")]
    Invalid { field: String, message: String },
}

impl CodecError {
    /// The dialect field the error is about.
    pub fn field(&self) -> &str {
        match self {
            CodecError::Missing { field }
            | CodecError::WrongType { field, .. }
            | CodecError::UnknownStatus { field, .. }
            | CodecError::Invalid { field, .. } => field,
        }
    }
}

/// What rules run against: the mapping (for tables and id templates), the variables in force,
/// and the key that `seal`/`unseal` use.
pub struct Context<'a> {
    pub mapping: &'a Mapping,
    pub vars: &'a Map<String, Value>,
    /// The secret behind sealed tokens (see [`super::seal`]); empty where nothing is sealed
    /// (`seal` then fails and `unseal` finds nothing).
    pub seal_key: &'a [u8],
}

/// A canonical document as rules read it: a JSON value, or a view that makes each part the first
/// time a rule asks for it (a task, whose fields a back's request reads a few of; see
/// [`super::doc::Canonical`], the document the engine builds).
pub trait Doc: Sync {
    /// The value at `path`, if any (null and absent are alike to rules).
    fn get(&self, path: &[String]) -> Option<&Value>;
    /// The whole document, as one value.
    fn to_value(&self) -> Value;
    /// The id interlingua gave the task this document is about, whichever side's ids its
    /// `task.id` shows (a back's document shows the agent's): what a call is booked against.
    /// `None` for a document about no stored task.
    fn stored_task_id(&self) -> Option<&str> {
        None
    }
}

impl Doc for Value {
    fn get(&self, path: &[String]) -> Option<&Value> {
        walk(self, path)
    }

    fn to_value(&self) -> Value {
        self.clone()
    }
}

/// Expressions' view of a document: `var.*` from the context, the name a shape binds (`step`) to
/// the current element, everything else from the root document.
struct DocScope<'a> {
    root: &'a dyn Doc,
    bind: Option<(&'a str, &'a Value)>,
    vars: &'a Map<String, Value>,
    current: Option<&'a Value>,
    seal_key: &'a [u8],
}

impl Scope for DocScope<'_> {
    fn lookup(&self, path: &[String]) -> Option<&Value> {
        let (first, rest) = path.split_first()?;
        let found = if first == "var" {
            let (name, tail) = rest.split_first()?;
            walk(self.vars.get(name)?, tail)
        } else if let Some((_, elem)) = self.bind.filter(|(b, _)| b == first) {
            walk(elem, rest)
        } else {
            self.root.get(path)
        };
        found.filter(|v| !v.is_null())
    }

    fn current(&self) -> Option<&Value> {
        self.current
    }

    fn seal_key(&self) -> &[u8] {
        self.seal_key
    }
}

/// Reads `msg` into a canonical document.
pub fn decode(rules: &Rules, msg: &Message, ctx: &Context<'_>) -> Result<Value, CodecError> {
    let mut doc = Value::Object(Map::new());
    decode_into(rules, msg, ctx, &mut doc)?;
    Ok(doc)
}

/// Reads `msg` into an existing document, whose fields the rules' expressions can see.
pub fn decode_onto(
    rules: &Rules,
    msg: &Message,
    ctx: &Context<'_>,
    doc: &mut Value,
) -> Result<(), CodecError> {
    if !doc.is_object() {
        *doc = Value::Object(Map::new());
    }
    decode_into(rules, msg, ctx, doc)
}

fn decode_into(
    rules: &Rules,
    msg: &Message,
    ctx: &Context<'_>,
    doc: &mut Value,
) -> Result<(), CodecError> {
    for rule in rules.0.iter().filter(|r| r.direction != Direction::Emit) {
        let found = std::iter::once(&rule.location)
            .chain(&rule.aliases)
            .find_map(|loc| {
                if rule.all {
                    read_all(msg, loc)
                } else {
                    read_location(msg, loc).filter(|v| !v.is_null())
                }
            })
            .or_else(|| rule.default.clone());
        let mut reason = None;
        let converted = match found {
            Some(raw) => {
                if let Some(kind) = rule.kind {
                    if !kind.accepts(&raw) {
                        return Err(CodecError::WrongType {
                            field: rule.label.clone(),
                            expected: kind.name(),
                        });
                    }
                }
                match &rule.conversion {
                    Some(c) => {
                        let (v, r) = convert_read(c, raw, rule, ctx)?;
                        reason = r;
                        Some(v)
                    }
                    None => Some(raw),
                }
            }
            None => None,
        };
        // `read` also runs when nothing was found, so it can supply a value (`$ ?? uuid()`).
        let value = match &rule.read {
            // It runs for an absent value only if it makes one of its own from `$` being absent
            // (`$ ?? uuid()`); a `read` that ignores `$` (`'completed'`) says what a found value
            // means.
            Some(read)
                if converted.is_some() || (read.uses_current() && !read.uses_current_only()) =>
            {
                let scope = DocScope {
                    root: doc,
                    bind: None,
                    vars: ctx.vars,
                    current: converted.as_ref(),
                    seal_key: ctx.seal_key,
                };
                eval(read, &scope, rule)?
            }
            _ => converted,
        };
        let Some(value) = value.filter(|v| !v.is_null()) else {
            if rule.required {
                return Err(CodecError::Missing {
                    field: rule.label.clone(),
                });
            }
            continue;
        };
        match &rule.nested {
            Some(Nested::Shape(shape)) => {
                let sub = Message::with_body(value);
                decode_into(&shape.rules, &sub, ctx, doc)?;
            }
            Some(Nested::Each(shape)) => {
                let items = match value {
                    Value::Array(items) => items,
                    // A lone object is a list of one: Nevermined's TypeScript SDK and docs type a
                    // create answer's `steps` as one step, where interlingua writes a list
                    // (https://github.com/nevermined-io/payments/blob/f5c1912/src/api/query-api.ts).
                    obj @ Value::Object(_) => vec![obj],
                    _ => {
                        return Err(CodecError::WrongType {
                            field: rule.label.clone(),
                            expected: "an array",
                        })
                    }
                };
                let bind = shape.bind.as_deref().unwrap_or("item");
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    let mut elem = Value::Object(Map::new());
                    decode_into(&shape.rules, &Message::with_body(item), ctx, &mut elem)?;
                    out.push(elem.get(bind).cloned().unwrap_or(Value::Object(Map::new())));
                }
                if let Some(field) = &rule.field {
                    set_path(doc, field, Value::Array(out));
                }
            }
            None => {
                if let Some(field) = &rule.field {
                    set_path(doc, field, value);
                    if let Some(r) = reason {
                        set_path(doc, &sibling(field, "reason"), Value::String(r));
                    }
                }
            }
        }
    }
    Ok(())
}

/// Whether `expr` holds for `doc` (an error counts as not holding).
pub fn holds(expr: &Expr, doc: &dyn Doc, ctx: &Context<'_>) -> bool {
    evaluate(expr, doc, ctx).is_some_and(|v| truthy(Some(&v)))
}

/// The value of `expr` for `doc`; absent on an error.
pub fn evaluate(expr: &Expr, doc: &dyn Doc, ctx: &Context<'_>) -> Option<Value> {
    let scope = DocScope {
        root: doc,
        bind: None,
        vars: ctx.vars,
        current: None,
        seal_key: ctx.seal_key,
    };
    expr.eval(&scope).ok().flatten()
}

/// Writes `doc` as a dialect message.
pub fn encode(rules: &Rules, doc: &dyn Doc, ctx: &Context<'_>) -> Result<Message, CodecError> {
    let scope = DocScope {
        root: doc,
        bind: None,
        vars: ctx.vars,
        current: None,
        seal_key: ctx.seal_key,
    };
    let mut msg = Message::default();
    encode_into(rules, &scope, ctx, &mut msg)?;
    Ok(msg)
}

fn encode_into(
    rules: &Rules,
    scope: &DocScope<'_>,
    ctx: &Context<'_>,
    msg: &mut Message,
) -> Result<(), CodecError> {
    for rule in rules.0.iter().filter(|r| r.direction != Direction::Read) {
        if let Some(when) = &rule.when {
            if !truthy(eval(when, scope, rule)?.as_ref()) {
                continue;
            }
        }
        let value = match &rule.nested {
            Some(Nested::Shape(shape)) => {
                let mut sub = Message::default();
                encode_into(&shape.rules, scope, ctx, &mut sub)?;
                sub.body
            }
            Some(Nested::Each(shape)) => {
                let items =
                    rule.field
                        .as_ref()
                        .and_then(|f| scope.lookup(f))
                        .and_then(|v| match v {
                            Value::Array(a) => Some(a),
                            _ => None,
                        });
                match items {
                    Some(items) => {
                        let bind = shape.bind.as_deref().unwrap_or("item");
                        let mut out = Vec::with_capacity(items.len());
                        for item in items {
                            let inner = DocScope {
                                root: scope.root,
                                bind: Some((bind, item)),
                                vars: scope.vars,
                                current: None,
                                seal_key: scope.seal_key,
                            };
                            let mut sub = Message::default();
                            encode_into(&shape.rules, &inner, ctx, &mut sub)?;
                            out.push(sub.body.unwrap_or(Value::Object(Map::new())));
                        }
                        Some(Value::Array(out))
                    }
                    None => None,
                }
            }
            None => match (&rule.value, &rule.field) {
                (Some(expr), _) => eval(expr, scope, rule)?,
                (None, Some(field)) => scope.lookup(field).cloned(),
                (None, None) => None,
            },
        };
        let value = match (value, &rule.conversion) {
            (Some(v), Some(c)) if rule.value.is_none() => {
                Some(convert_emit(c, v, rule, scope, ctx)?)
            }
            (v, _) => v,
        };
        let Some(value) = value
            .filter(|v| !v.is_null())
            .or_else(|| rule.default.clone())
            .or_else(|| rule.nullable.then_some(Value::Null))
        else {
            if rule.required {
                return Err(CodecError::Missing {
                    field: rule.label.clone(),
                });
            }
            continue;
        };
        write_location(msg, &rule.location, value, rule)?;
    }
    Ok(())
}

fn eval(expr: &Expr, scope: &DocScope<'_>, rule: &Rule) -> Result<Option<Value>, CodecError> {
    expr.eval(scope).map_err(|e| CodecError::Invalid {
        field: rule.label.clone(),
        message: e.0,
    })
}

/// Every match of a JSONPath, as a list; absent when there is none.
fn read_all(msg: &Message, loc: &Location) -> Option<Value> {
    match loc {
        Location::Json(path) => {
            let found = path.read_all(msg.body.as_ref()?);
            (!found.is_empty()).then_some(Value::Array(found))
        }
        other => read_location(msg, other).filter(|v| !v.is_null()),
    }
}

/// The value at a location of a message, if any.
pub fn read_location(msg: &Message, loc: &Location) -> Option<Value> {
    match loc {
        Location::Json(path) => msg.body.as_ref().and_then(|b| path.read(b)),
        Location::Param(name) => msg.params.get(name).cloned().map(Value::String),
        Location::Query(name) => msg
            .query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| Value::String(v.clone())),
        Location::Header(name) => msg.header(name).map(|v| Value::String(v.to_string())),
    }
}

fn write_location(
    msg: &mut Message,
    loc: &Location,
    value: Value,
    rule: &Rule,
) -> Result<(), CodecError> {
    match loc {
        Location::Json(path) => {
            let body = msg.body.get_or_insert(Value::Null);
            if !path.write(body, value) {
                return Err(CodecError::Invalid {
                    field: rule.label.clone(),
                    message: "cannot be written here (a value in the way is not an object)"
                        .to_string(),
                });
            }
        }
        Location::Param(name) => {
            msg.params.insert(name.clone(), text(&value));
        }
        Location::Query(name) => msg.query.push((name.clone(), text(&value))),
        Location::Header(name) => msg.headers.push((name.clone(), text(&value))),
    }
    Ok(())
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// dialect → canonical; also returns the reason a status carries.
fn convert_read(
    c: &Conversion,
    raw: Value,
    rule: &Rule,
    ctx: &Context<'_>,
) -> Result<(Value, Option<String>), CodecError> {
    let invalid = |message: &str| CodecError::Invalid {
        field: rule.label.clone(),
        message: message.to_string(),
    };
    match c {
        Conversion::Table(table) => {
            if table.status && !raw.is_string() {
                return Err(CodecError::WrongType {
                    field: rule.label.clone(),
                    expected: "a string",
                });
            }
            table.read(&raw).ok_or_else(|| {
                let value = super::mapping::value_text(&raw);
                if table.status {
                    CodecError::UnknownStatus {
                        field: rule.label.clone(),
                        value,
                    }
                } else {
                    CodecError::Invalid {
                        field: rule.label.clone(),
                        message: format!("`{value}` is not in the table `{}`", table.name),
                    }
                }
            })
        }
        Conversion::TaskId | Conversion::StepId => {
            let template = id_template(c, ctx);
            let s = text(&raw);
            let id = template
                .as_ref()
                .map_or(s.as_str(), |t| t.strip(&s))
                .to_string();
            Ok((Value::String(id), None))
        }
        Conversion::Time(_) => {
            let t = parse_any(&raw).ok_or_else(|| invalid("is not a timestamp"))?;
            Ok((Value::String(format_iso_ms(t)), None))
        }
    }
}

/// canonical → dialect.
fn convert_emit(
    c: &Conversion,
    v: Value,
    rule: &Rule,
    scope: &DocScope<'_>,
    ctx: &Context<'_>,
) -> Result<Value, CodecError> {
    let invalid = |message: String| CodecError::Invalid {
        field: rule.label.clone(),
        message,
    };
    match c {
        Conversion::Table(table) => {
            let reason = if table.status {
                rule.field
                    .as_ref()
                    .and_then(|f| scope.lookup(&sibling(f, "reason")))
                    .map(text)
            } else {
                None
            };
            table.emit(&v, reason.as_deref()).ok_or_else(|| {
                invalid(format!(
                    "the table `{}` has no value for `{}`",
                    table.name,
                    text(&v)
                ))
            })
        }
        Conversion::TaskId | Conversion::StepId => {
            let template = id_template(c, ctx);
            let id = text(&v);
            Ok(Value::String(
                template.as_ref().map_or(id.clone(), |t| t.render(&id)),
            ))
        }
        Conversion::Time(format) => {
            let t = parse_any(&v).ok_or_else(|| invalid(format!("`{v}` is not a timestamp")))?;
            Ok(format.render(t))
        }
    }
}

/// The `[ids]` template an id conversion uses.
fn id_template<'a>(c: &Conversion, ctx: &'a Context<'_>) -> &'a Option<IdTemplate> {
    match c {
        Conversion::StepId => &ctx.mapping.ids.step,
        _ => &ctx.mapping.ids.task,
    }
}

/// The path of a field's sibling (`task.status` → `task.reason`).
fn sibling(field: &[String], name: &str) -> Vec<String> {
    let mut out = field.to_vec();
    out.pop();
    out.push(name.to_string());
    out
}

/// Sets `doc[path]`, creating objects on the way (replacing non-objects in the way).
pub fn set_path(doc: &mut Value, path: &[String], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        *doc = value;
        return;
    };
    let mut target = doc;
    for key in parents {
        if !target.is_object() {
            *target = Value::Object(Map::new());
        }
        let Value::Object(o) = target else { return };
        target = o
            .entry(key.clone())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(o) = target {
        o.insert(last.clone(), value);
    }
}

/// Whether a location can be written (for load-time checks of rules that emit).
pub fn writable(loc: &Location) -> bool {
    match loc {
        Location::Json(j) => j.is_writable(),
        Location::Param(_) | Location::Query(_) | Location::Header(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::Operation;
    use serde_json::json;

    /// A front that hands out a sealed session and reads it back.
    const SEALER: &str = r#"dialect = "sealer"
[operations.get_task]
method = "GET"
path = "/s"
request = [ { header = "Session", field = "task.id", read = "get(unseal($), 'task')" } ]
response = [ { header = "Session", value = "seal(object('task', task.id), '1h')" } ]
"#;

    #[test]
    fn the_context_key_seals_and_unseals() {
        let m = super::super::compile::parse(SEALER, "sealer.toml").unwrap();
        let op = m.op(Operation::GetTask).unwrap();
        let ctx = |seal_key| Context {
            mapping: &m,
            vars: &m.vars,
            seal_key,
        };
        let key = b"the thirty-two bytes of a good key";
        let sent = encode(&op.response, &json!({"task": {"id": "t1"}}), &ctx(key)).unwrap();
        let token = sent.header("Session").unwrap().to_string();
        let back = Message {
            headers: vec![("session".into(), token)],
            ..Message::default()
        };
        assert_eq!(
            decode(&op.request, &back, &ctx(key)).unwrap(),
            json!({"task": {"id": "t1"}})
        );
        // Another instance's key (or none) reads nothing from it.
        let other = b"another key, thirty-two bytes long";
        assert_eq!(decode(&op.request, &back, &ctx(other)).unwrap(), json!({}));
        assert_eq!(decode(&op.request, &back, &ctx(b"")).unwrap(), json!({}));
        // Without a key nothing can be sealed: the rule's error names its field.
        let e = encode(&op.response, &json!({"task": {"id": "t1"}}), &ctx(b"")).unwrap_err();
        assert!(e.to_string().contains("no sealing key"), "{e}");
    }
}
