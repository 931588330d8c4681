//! From a mapping file to a [`Mapping`], checking everything on the way: unknown canonical fields,
//! bad JSONPaths, bad expressions, incomplete status tables, references to shapes that do not
//! exist, named values (`[let]`, inlined into the expressions that use them: see `named`). Every
//! problem is reported with its file, line and column.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use http::Method;
use serde_json::{Map, Value};
use toml::de::{DeTable, DeValue};
use toml::Spanned;

use super::canonical;
use super::expr::Expr;
use super::file::{
    AnswerSection, CallSection, CheckSection, Condition as ConditionSection, DiscoverSection,
    ErrorSection, FieldRule, IdsSection, OperationSection, RefuseSection, RequestSection,
    ShapeSection, StatusSection, StreamSection, TableSection,
};
use super::location::{JsonLocation, Location};
use super::mapping::*;
use super::named::{self, Named};
use super::template::PathTemplate;
use crate::problem::{one, Collector, Problems};
use crate::task::time::TimeFormat;
use crate::task::{Operation, Status, StepSource};

const TOP_KEYS: &[&str] = &[
    "dialect",
    "title",
    "steps",
    "vars",
    "let",
    "ids",
    "status",
    "tables",
    "input_schema",
    "request",
    "error",
    "shapes",
    "calls",
    "discover",
    "operations",
    "refuse",
    "answer",
    "streams",
];

/// Where `[discover]` reads by default: the A2A well-known card path (RFC 8615), the one
/// discovery document among the dialects.
const DISCOVER_PATH: &str = "/.well-known/agent-card.json";
/// How long what `[discover]` read is kept by default.
const DISCOVER_TTL: std::time::Duration = std::time::Duration::from_secs(300);

/// Parses and checks mapping text. `origin` names it in problems.
pub fn parse(text: &str, origin: &str) -> Result<Mapping, Problems> {
    let mut p = Collector::new(origin, text);
    let (root, syntax) = DeTable::parse_recoverable(text);
    if !syntax.is_empty() {
        for e in &syntax {
            p.toml("", e);
        }
        return Err(p.into_problems());
    }
    let root = root.into_inner();
    let mut raw = Raw::default();
    for (key, value) in root.iter() {
        let name: &str = key.get_ref();
        match name {
            "dialect" => raw.dialect = one::<Spanned<String>>(value, name, &mut p),
            "title" => raw.title = one::<String>(value, name, &mut p),
            "steps" => raw.steps = one::<Spanned<String>>(value, name, &mut p),
            "vars" => raw.vars = one::<toml::Table>(value, name, &mut p),
            "let" => raw.lets = one(value, name, &mut p),
            "ids" => raw.ids = one::<IdsSection>(value, name, &mut p),
            "status" => raw.status = one::<StatusSection>(value, name, &mut p),
            "tables" => raw.tables = entries::<TableSection>(value, name, &mut p),
            "request" => raw.request = one::<RequestSection>(value, name, &mut p),
            "calls" => raw.calls = entries::<CallSection>(value, name, &mut p),
            "discover" => raw.discover = one::<DiscoverSection>(value, name, &mut p),
            "input_schema" => raw.input_schema = one::<toml::Value>(value, name, &mut p),
            "error" => raw.error = one::<ErrorSection>(value, name, &mut p),
            "shapes" => raw.shapes = entries::<ShapeSection>(value, name, &mut p),
            "operations" => raw.operations = entries::<OperationSection>(value, name, &mut p),
            "refuse" => raw.refuse = entries::<RefuseSection>(value, name, &mut p),
            "answer" => raw.answers = entries::<AnswerSection>(value, name, &mut p),
            "streams" => raw.streams = entries::<StreamSection>(value, name, &mut p),
            other => p.at(
                Some(key.span()),
                other,
                format!(
                    "unknown key `{other}`; expected one of: {}",
                    TOP_KEYS.join(", ")
                ),
            ),
        }
    }
    let mapping = compile(raw, origin, &mut p);
    match mapping {
        Some(m) if p.is_empty() => Ok(m),
        _ => {
            if p.is_empty() {
                p.at(
                    None,
                    "",
                    "the mapping could not be built (please report this)",
                );
            }
            Err(p.into_problems())
        }
    }
}

#[derive(Default)]
struct Raw {
    dialect: Option<Spanned<String>>,
    title: Option<String>,
    steps: Option<Spanned<String>>,
    vars: Option<toml::Table>,
    lets: Option<BTreeMap<String, Spanned<String>>>,
    ids: Option<IdsSection>,
    status: Option<StatusSection>,
    tables: Vec<(Spanned<String>, TableSection)>,
    input_schema: Option<toml::Value>,
    request: Option<RequestSection>,
    error: Option<ErrorSection>,
    shapes: Vec<(Spanned<String>, ShapeSection)>,
    calls: Vec<(Spanned<String>, CallSection)>,
    discover: Option<DiscoverSection>,
    operations: Vec<(Spanned<String>, OperationSection)>,
    refuse: Vec<(Spanned<String>, RefuseSection)>,
    answers: Vec<(Spanned<String>, AnswerSection)>,
    streams: Vec<(Spanned<String>, StreamSection)>,
}

/// The entries of a table of tables (`[shapes.NAME]`), each deserialized on its own.
fn entries<T: serde::de::DeserializeOwned>(
    value: &Spanned<DeValue<'_>>,
    path: &str,
    p: &mut Collector<'_>,
) -> Vec<(Spanned<String>, T)> {
    let DeValue::Table(table) = value.get_ref() else {
        p.at(Some(value.span()), path, "must be a table");
        return Vec::new();
    };
    // In the order of the file: of several forms of an operation, the first one written is the
    // one used unless another's `when` says otherwise.
    let mut found: Vec<(Spanned<String>, T)> = table
        .iter()
        .filter_map(|(k, v)| {
            let name: &str = k.get_ref();
            let item = one::<T>(v, &format!("{path}.{name}"), p)?;
            Some((Spanned::new(k.span(), name.to_string()), item))
        })
        .collect();
    found.sort_by_key(|(k, _)| k.span().start);
    found
}

fn compile(raw: Raw, origin: &str, p: &mut Collector<'_>) -> Option<Mapping> {
    let name = match &raw.dialect {
        Some(d) if is_name(d.get_ref()) => d.get_ref().clone(),
        Some(d) => {
            p.at(
                Some(d.span()),
                "dialect",
                "must be a name of letters, digits and '_'",
            );
            String::new()
        }
        None => {
            p.at(
                None,
                "dialect",
                "is missing: every mapping names its dialect",
            );
            String::new()
        }
    };
    let steps = match raw.steps.as_ref().map(|s| s.get_ref().as_str()) {
        None | Some("synthesized") => StepSource::Synthesized,
        Some("native") => StepSource::Native,
        Some(other) => {
            p.at(
                raw.steps.as_ref().map(|s| s.span()),
                "steps",
                format!("`{other}` is not `native` or `synthesized`"),
            );
            StepSource::Synthesized
        }
    };
    let vars = match raw.vars.map(serde_json::to_value) {
        Some(Ok(Value::Object(m))) => m,
        Some(_) => {
            p.at(None, "vars", "must be a table of values");
            Map::new()
        }
        None => Map::new(),
    };
    let ids = raw.ids.map(|i| compile_ids(i, p)).unwrap_or_default();
    let mut tables = BTreeMap::new();
    if let Some(s) = raw.status {
        tables.insert("status".to_string(), Arc::new(compile_status(s, p)));
    }
    for (name, t) in raw.tables {
        if name.get_ref() == "status" {
            p.at(
                Some(name.span()),
                "tables.status",
                "`status` is the [status] table; name this one differently",
            );
            continue;
        }
        let table = compile_table(name.get_ref(), t, p);
        tables.insert(name.into_inner(), Arc::new(table));
    }
    let input_schema = raw.input_schema.and_then(|v| serde_json::to_value(v).ok());

    let named = Named::compile(
        raw.lets.unwrap_or_default(),
        &|e, span, where_, p| check_paths(&vars, e, span, where_, p),
        p,
    );
    let mut cx = RuleCx {
        vars: &vars,
        named: &named,
        shapes: BTreeMap::new(),
        streams: BTreeMap::new(),
        tables: &tables,
        calls: BTreeMap::new(),
        has_ids: (ids.task.is_some(), ids.step.is_some()),
    };
    // Shapes first: operations refer to them. Shapes do not nest other shapes.
    for (shape_name, shape) in &raw.shapes {
        let bind = match &shape.bind {
            Some(b) if matches!(b.get_ref().as_str(), "step" | "task") => Some(b.get_ref().clone()),
            Some(b) => {
                p.at(
                    Some(b.span()),
                    format!("shapes.{}.bind", shape_name.get_ref()),
                    "must be `step` or `task`",
                );
                None
            }
            None => None,
        };
        let where_ = format!("shapes.{}", shape_name.get_ref());
        let rules = cx.rules(&shape.fields, &where_, &[], false, p);
        cx.shapes.insert(
            shape_name.get_ref().clone(),
            Arc::new(Shape {
                name: shape_name.get_ref().clone(),
                bind,
                rules,
            }),
        );
    }
    let error = raw
        .error
        .as_ref()
        .map(|e| cx.rules(&e.fields, "error", &[], true, p));
    let error_status = raw
        .error
        .as_ref()
        .and_then(|e| cx.expr(e.status.as_ref(), "error.status", false, p));
    let request = raw
        .request
        .as_ref()
        .map(|r| cx.rules(&r.fields, "request", &[], false, p));
    let request_checks = raw
        .request
        .as_ref()
        .map(|r| cx.checks(r.checks.as_deref(), "request.checks", p))
        .unwrap_or_default();
    for (call_name, call) in &raw.calls {
        if let Some(c) = cx.call(call_name.get_ref(), call, p) {
            cx.calls.insert(call_name.get_ref().clone(), Arc::new(c));
        }
    }
    let discover = raw.discover.as_ref().and_then(|d| cx.discover(d, p));
    for (name, s) in &raw.streams {
        let where_ = format!("streams.{}", name.get_ref());
        if let Some(u) = &s.uses {
            p.at(
                Some(u.span()),
                format!("{where_}.use"),
                "a named stream cannot use another",
            );
            continue;
        }
        if let Some(compiled) = cx.stream(s, &where_, p) {
            cx.streams
                .insert(name.get_ref().clone(), Arc::new(compiled));
        }
    }
    let mut ops: Vec<Op> = Vec::new();
    for (op_name, op) in &raw.operations {
        let (kind_name, kind_span) = match &op.operation {
            Some(o) => (o.get_ref(), o.span()),
            None => (op_name.get_ref(), op_name.span()),
        };
        let Some(kind) = Operation::from_name(kind_name) else {
            let known: Vec<&str> = Operation::ALL.iter().map(|o| o.name()).collect();
            let hint = if op.operation.is_none() {
                "; or say which with `operation = \"…\"`"
            } else {
                ""
            };
            p.at(
                Some(kind_span),
                format!("operations.{}", op_name.get_ref()),
                format!(
                    "`{kind_name}` is not a canonical operation; known: {}{hint}",
                    known.join(", ")
                ),
            );
            continue;
        };
        if let Some(compiled) = cx.operation("operations", op_name.get_ref(), kind, op, p) {
            ops.push(compiled);
        }
    }
    let answers = raw
        .answers
        .iter()
        .filter_map(|(name, a)| cx.answer(name.get_ref(), a, p))
        .collect();
    for (op_name, op) in &raw.operations {
        if let Some(o) = &op.otherwise {
            let ok = ops
                .iter()
                .any(|c| c.key == *o.get_ref() && c.op == Operation::CreateTask && c.front);
            if !ok {
                p.at(
                    Some(o.span()),
                    format!("operations.{}.otherwise", op_name.get_ref()),
                    format!(
                        "`{}` is not a create_task form of this mapping",
                        o.get_ref()
                    ),
                );
            }
        }
    }
    named.report_unused(p);
    let refused = raw
        .refuse
        .iter()
        .filter_map(|(name, r)| compile_refusal(name.get_ref(), r, p))
        .collect();
    Some(Mapping {
        refused,
        answers,
        request_checks,
        name,
        title: raw.title.unwrap_or_default(),
        origin: origin.to_string(),
        steps,
        vars,
        ids,
        tables,
        input_schema,
        error,
        error_status,
        request,
        discover,
        ops,
    })
}

fn compile_refusal(name: &str, r: &RefuseSection, p: &mut Collector<'_>) -> Option<Refusal> {
    let where_ = format!("refuse.{name}");
    let method = Method::from_bytes(r.method.get_ref().to_ascii_uppercase().as_bytes())
        .map_err(|_| {
            p.at(
                Some(r.method.span()),
                format!("{where_}.method"),
                "not an HTTP method",
            )
        })
        .ok();
    let path = PathTemplate::parse(r.path.get_ref())
        .map_err(|e| p.at(Some(r.path.span()), format!("{where_}.path"), e))
        .ok();
    let status = *r.status.get_ref();
    if !(400..=599).contains(&status) {
        p.at(
            Some(r.status.span()),
            format!("{where_}.status"),
            "must be an HTTP error status (400-599)",
        );
        return None;
    }
    Some(Refusal {
        name: name.to_string(),
        method: method?,
        path: path?,
        status,
        message: r.message.clone(),
    })
}

fn compile_ids(i: IdsSection, p: &mut Collector<'_>) -> Ids {
    let mut one_id = |t: Option<Spanned<String>>, path: &str| {
        t.and_then(|t| match IdTemplate::parse(t.get_ref()) {
            Ok(id) => Some(id),
            Err(e) => {
                p.at(Some(t.span()), path, e);
                None
            }
        })
    };
    Ids {
        task: one_id(i.task, "ids.task"),
        step: one_id(i.step, "ids.step"),
    }
}

fn status_key(text: &str) -> Option<(Status, Option<String>)> {
    let (s, reason) = match text.split_once('/') {
        Some((s, r)) if !r.is_empty() => (s, Some(r.to_string())),
        Some(_) => return None,
        None => (text, None),
    };
    Status::from_name(s).map(|st| (st, reason))
}

fn compile_status(s: StatusSection, p: &mut Collector<'_>) -> Table {
    let read = s
        .read
        .into_iter()
        .map(|(k, v)| {
            let span = v.span();
            (k, Spanned::new(span, toml::Value::String(v.into_inner())))
        })
        .collect();
    let emit = s
        .emit
        .get_ref()
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    status_table(
        "status",
        "status",
        read,
        (emit, s.emit.span()),
        s.ignore_case,
        p,
    )
}

/// A status table from its read and emit maps; `where_` names it in problems.
fn status_table(
    name: &str,
    where_: &str,
    read_raw: Vec<(String, Spanned<toml::Value>)>,
    (emit_raw, emit_span): (Vec<(String, Spanned<String>)>, Range<usize>),
    ignore_case: Option<bool>,
    p: &mut Collector<'_>,
) -> Table {
    let ignore_case = ignore_case.unwrap_or(false);
    let statuses = Status::ALL.map(Status::name).join(", ");
    let mut read = BTreeMap::new();
    for (dialect_value, canonical) in &read_raw {
        let text = canonical.get_ref().as_str().unwrap_or_default();
        match status_key(text) {
            Some((status, reason)) => {
                let key = if ignore_case {
                    fold(dialect_value)
                } else {
                    dialect_value.clone()
                };
                read.insert(key, (Value::String(status.name().to_string()), reason));
            }
            None => p.at(
                Some(canonical.span()),
                format!("{where_}.read.{dialect_value}"),
                format!("`{text}` is not a canonical status ({statuses}), optionally with /reason"),
            ),
        }
    }
    let mut emit = BTreeMap::new();
    for (canonical, dialect_value) in &emit_raw {
        if status_key(canonical).is_none() {
            p.at(
                Some(dialect_value.span()),
                format!("{where_}.emit.{canonical}"),
                format!(
                    "`{canonical}` is not a canonical status ({statuses}), optionally with /reason"
                ),
            );
        }
        emit.insert(
            canonical.clone(),
            Value::String(dialect_value.get_ref().clone()),
        );
    }
    let missing: Vec<&str> = Status::ALL
        .iter()
        .map(|s| s.name())
        .filter(|s| !emit.contains_key(*s))
        .collect();
    if !missing.is_empty() {
        p.at(
            Some(emit_span),
            format!("{where_}.emit"),
            format!(
                "incomplete status table: no dialect value for {}",
                missing.join(", ")
            ),
        );
    }
    Table {
        name: name.to_string(),
        read,
        emit,
        read_default: None,
        emit_default: None,
        ignore_case,
        status: true,
    }
}

/// A `[tables.NAME]` section.
fn compile_table(name: &str, t: TableSection, p: &mut Collector<'_>) -> Table {
    let where_ = format!("tables.{name}");
    let json = |v: &toml::Value| serde_json::to_value(v).unwrap_or(Value::Null);
    if t.status.unwrap_or(false) {
        let read = t
            .read
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, Spanned::new(0..0, v)))
            .collect();
        let (emit, span) = match t.emit {
            Some(e) => {
                let span = e.span();
                let emit = e
                    .into_inner()
                    .into_iter()
                    .map(|(k, v)| {
                        let text = json(&v);
                        (
                            k,
                            Spanned::new(span.clone(), super::mapping::value_text(&text)),
                        )
                    })
                    .collect();
                (emit, span)
            }
            None => (Vec::new(), 0..0),
        };
        let mut table = status_table(name, &where_, read, (emit, span), t.ignore_case, p);
        table.read_default = t.read_default.as_ref().map(json);
        table.emit_default = t.emit_default.as_ref().map(json);
        return table;
    }
    let ignore_case = t.ignore_case.unwrap_or(false);
    let read = t
        .read
        .unwrap_or_default()
        .iter()
        .map(|(k, v)| {
            let key = if ignore_case { fold(k) } else { k.clone() };
            (key, (json(v), None))
        })
        .collect();
    let emit = t
        .emit
        .map(|e| {
            e.into_inner()
                .iter()
                .map(|(k, v)| (k.clone(), json(v)))
                .collect()
        })
        .unwrap_or_default();
    Table {
        name: name.to_string(),
        read,
        emit,
        read_default: t.read_default.as_ref().map(json),
        emit_default: t.emit_default.as_ref().map(json),
        ignore_case,
        status: false,
    }
}

/// A field rule as written.
type RuleText = Spanned<FieldRule>;

struct RuleCx<'a> {
    vars: &'a Map<String, Value>,
    named: &'a Named,
    shapes: BTreeMap<String, Arc<Shape>>,
    /// `[streams.NAME]`, for forms that `use` them.
    streams: BTreeMap<String, Arc<Stream>>,
    tables: &'a BTreeMap<String, Arc<Table>>,
    calls: BTreeMap<String, Arc<Call>>,
    has_ids: (bool, bool),
}

impl RuleCx<'_> {
    fn call(&self, name: &str, c: &CallSection, p: &mut Collector<'_>) -> Option<Call> {
        let where_ = format!("calls.{name}");
        let when = self.expr(c.when.as_ref(), &format!("{where_}.when"), false, p);
        let mut call = self.exchange(
            name,
            (&c.method, &c.path, c.target.as_ref()),
            (c.request.as_deref(), c.response.as_deref()),
            &where_,
            p,
        )?;
        call.when = when;
        Some(call)
    }

    /// `[discover]`: a GET of `/.well-known/agent-card.json` unless it says otherwise, kept 5
    /// minutes unless it says otherwise.
    fn discover(&self, d: &DiscoverSection, p: &mut Collector<'_>) -> Option<Discover> {
        let method = d
            .method
            .clone()
            .unwrap_or_else(|| Spanned::new(0..0, "GET".to_string()));
        let path = d
            .path
            .clone()
            .unwrap_or_else(|| Spanned::new(0..0, DISCOVER_PATH.to_string()));
        let ttl = match &d.ttl {
            None => DISCOVER_TTL,
            Some(t) => match crate::units::parse_duration(t.get_ref()) {
                Ok(ttl) => ttl,
                Err(e) => {
                    p.at(Some(t.span()), "discover.ttl", e.to_string());
                    DISCOVER_TTL
                }
            },
        };
        let call = self.exchange(
            "discover",
            (&method, &path, d.target.as_ref()),
            (d.request.as_deref(), d.response.as_deref()),
            "discover",
            p,
        )?;
        let then = self.then_calls(d.then.as_deref(), "discover", p);
        Some(Discover { call, ttl, then })
    }

    /// The `[calls]` a `then` list names, in order; each unknown name is reported.
    fn then_calls(
        &self,
        names: Option<&[Spanned<String>]>,
        where_: &str,
        p: &mut Collector<'_>,
    ) -> Vec<Arc<Call>> {
        names
            .into_iter()
            .flatten()
            .filter_map(|name| match self.calls.get(name.get_ref()) {
                Some(c) => Some(c.clone()),
                None => {
                    p.at(
                        Some(name.span()),
                        format!("{where_}.then"),
                        format!("no call named `{}` in [calls]", name.get_ref()),
                    );
                    None
                }
            })
            .collect()
    }

    /// One HTTP exchange: method, path template, and the rules of its request (which may name
    /// the template's parameters) and response.
    fn exchange(
        &self,
        name: &str,
        (method, path, target): (&Spanned<String>, &Spanned<String>, Option<&Spanned<String>>),
        (request, response): (Option<&[RuleText]>, Option<&[RuleText]>),
        where_: &str,
        p: &mut Collector<'_>,
    ) -> Option<Call> {
        let method = self.method(method, where_, p);
        let target = self.expr(target, &format!("{where_}.target"), false, p);
        let template = match PathTemplate::parse(path.get_ref()) {
            Ok(t) => Some(t),
            Err(e) => {
                p.at(Some(path.span()), format!("{where_}.path"), e);
                None
            }
        };
        let params: Vec<String> = template
            .as_ref()
            .map(|t| t.params().map(str::to_string).collect())
            .unwrap_or_default();
        let request = self.rules(
            request.unwrap_or(&[]),
            &format!("{where_}.request"),
            &params,
            true,
            p,
        );
        let response = self.rules(
            response.unwrap_or(&[]),
            &format!("{where_}.response"),
            &[],
            true,
            p,
        );
        Some(Call {
            name: name.to_string(),
            method: method?,
            path: template?,
            target,
            when: None,
            request,
            response,
        })
    }

    fn method(&self, m: &Spanned<String>, where_: &str, p: &mut Collector<'_>) -> Option<Method> {
        match Method::from_bytes(m.get_ref().to_ascii_uppercase().as_bytes()) {
            Ok(m) => Some(m),
            Err(_) => {
                p.at(
                    Some(m.span()),
                    format!("{where_}.method"),
                    "is not an HTTP method",
                );
                None
            }
        }
    }

    fn condition(
        &self,
        c: &Spanned<ConditionSection>,
        where_: &str,
        p: &mut Collector<'_>,
    ) -> Option<Condition> {
        let r = c.get_ref();
        let places: Vec<(&str, &Spanned<String>)> = [
            ("json", &r.json),
            ("header", &r.header),
            ("query", &r.query),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| (k, v)))
        .collect();
        let [(kind, place)] = places.as_slice() else {
            p.at(
                Some(c.span()),
                where_,
                "a condition needs exactly one of `json`, `header`, `query`",
            );
            return None;
        };
        if r.equals.is_none() && r.not.is_none() && r.present.is_none() {
            p.at(
                Some(c.span()),
                where_,
                "a condition needs `equals`, `not` or `present`",
            );
        }
        let location = self.location(kind, place, where_, &[], p)?;
        let json = |v: &Vec<toml::Value>| -> Vec<Value> {
            v.iter()
                .filter_map(|x| serde_json::to_value(x).ok())
                .collect()
        };
        Some(Condition {
            location,
            equals: r.equals.as_ref().map(json),
            not: r.not.as_ref().map(json).unwrap_or_default(),
            present: r.present,
        })
    }

    /// A form's stream: its own, or the `[streams.NAME]` it uses.
    fn stream_of(
        &self,
        s: &StreamSection,
        where_: &str,
        p: &mut Collector<'_>,
    ) -> Option<Arc<Stream>> {
        let Some(name) = &s.uses else {
            return self.stream(s, where_, p).map(Arc::new);
        };
        let alone = s.frames.is_empty()
            && s.until.is_none()
            && s.done.is_none()
            && s.end.is_none()
            && s.every.is_none()
            && s.timeout.is_none()
            && s.lasts.is_none()
            && s.keepalive.is_none();
        if !alone {
            p.at(
                Some(name.span()),
                format!("{where_}.use"),
                "a stream that uses [streams.NAME] has no other key",
            );
        }
        match self.streams.get(name.get_ref()) {
            Some(stream) => Some(stream.clone()),
            None => {
                p.at(
                    Some(name.span()),
                    format!("{where_}.use"),
                    format!("no stream named `{}` in [streams]", name.get_ref()),
                );
                None
            }
        }
    }

    fn stream(&self, s: &StreamSection, where_: &str, p: &mut Collector<'_>) -> Option<Stream> {
        let until = match s.until.as_ref().map(|u| u.get_ref().as_str()) {
            None | Some("terminal") => Until::Terminal,
            Some("settled") => Until::Settled,
            Some(other) => {
                p.at(
                    s.until.as_ref().map(|u| u.span()),
                    format!("{where_}.until"),
                    format!("`{other}` is not `terminal` or `settled`"),
                );
                Until::Terminal
            }
        };
        let frames = s
            .frames
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let at = format!("{where_}.frames[{i}]");
                Frame {
                    when: self.expr(f.when.as_ref(), &format!("{at}.when"), false, p),
                    rules: self.rules(&f.fields, &format!("{at}.fields"), &[], true, p),
                }
            })
            .collect();
        let period = |key: &str, d: Option<&Spanned<String>>, p: &mut Collector<'_>| {
            d.and_then(|e| match crate::units::parse_duration(e.get_ref()) {
                Ok(d) if !d.is_zero() => Some(d),
                Ok(_) => {
                    p.at(
                        Some(e.span()),
                        format!("{where_}.{key}"),
                        "must be longer than 0s",
                    );
                    None
                }
                Err(err) => {
                    p.at(Some(e.span()), format!("{where_}.{key}"), err.to_string());
                    None
                }
            })
        };
        let every = period("every", s.every.as_ref(), p);
        let keepalive = period("keepalive", s.keepalive.as_ref(), p);
        let lasts_task = match s.lasts.as_ref().map(|t| t.get_ref().as_str()) {
            None | Some("sync_timeout") => false,
            Some("task") => true,
            Some(other) => {
                p.at(
                    s.lasts.as_ref().map(|t| t.span()),
                    format!("{where_}.lasts"),
                    format!("`{other}` is not `sync_timeout` or `task`"),
                );
                false
            }
        };
        let timeout_frames = match s.timeout.as_ref().map(|t| t.get_ref().as_str()) {
            None | Some("end") => false,
            Some("frames") => true,
            Some(other) => {
                p.at(
                    s.timeout.as_ref().map(|t| t.span()),
                    format!("{where_}.timeout"),
                    format!("`{other}` is not `end` or `frames`"),
                );
                false
            }
        };
        if s.end.is_some() && s.until.is_some() {
            p.at(
                s.end.as_ref().map(|e| e.span()),
                format!("{where_}.end"),
                "give `end` or `until`, not both",
            );
        }
        Some(Stream {
            frames,
            until,
            end: self.expr(s.end.as_ref(), &format!("{where_}.end"), false, p),
            done: s.done.clone(),
            every,
            timeout_frames,
            lasts_task,
            keepalive,
        })
    }

    /// `[answer.NAME]`: compiled as a front form of `describe` that interlingua answers itself.
    fn answer(&self, key: &str, a: &AnswerSection, p: &mut Collector<'_>) -> Option<Op> {
        let section = OperationSection {
            operation: None,
            method: a.method.clone(),
            path: a.path.clone(),
            conditions: a.conditions.clone(),
            when: None,
            side: None,
            then: None,
            target: None,
            stream: None,
            also: a.also.clone(),
            status: a.status.clone(),
            returns: None,
            otherwise: None,
            wait: None,
            unpaid: None,
            failed: None,
            timeout: None,
            validate: None,
            public: Some(a.public.unwrap_or(false)),
            checks: a.checks.clone(),
            before_payment: None,
            sale: None,
            request: a.request.clone(),
            response: a.response.clone(),
        };
        let mut op = self.operation("answer", key, Operation::Describe, &section, p)?;
        op.front = true;
        op.back = false;
        op.reply = true;
        Some(op)
    }

    /// Request guards (`checks`).
    fn checks(
        &self,
        checks: Option<&[Spanned<CheckSection>]>,
        where_: &str,
        p: &mut Collector<'_>,
    ) -> Vec<Check> {
        checks
            .iter()
            .copied()
            .flatten()
            .enumerate()
            .filter_map(|(i, c)| {
                let at = format!("{where_}[{i}]");
                let c = c.get_ref();
                let holds = self.expr(Some(&c.holds), &format!("{at}.holds"), false, p)?;
                let status = match &c.status {
                    None => 400,
                    Some(s) if (400..=599).contains(s.get_ref()) => *s.get_ref(),
                    Some(s) => {
                        p.at(
                            Some(s.span()),
                            format!("{at}.status"),
                            "must be an HTTP error status (400-599)",
                        );
                        return None;
                    }
                };
                let code = match &c.code {
                    None => "refused".to_string(),
                    Some(k) if is_name(k.get_ref()) => k.get_ref().clone(),
                    Some(k) => {
                        p.at(
                            Some(k.span()),
                            format!("{at}.code"),
                            "must be a name of letters, digits and '_'",
                        );
                        return None;
                    }
                };
                Some(Check {
                    holds,
                    status,
                    code,
                    message: c.message.clone(),
                })
            })
            .collect()
    }

    fn operation(
        &self,
        section: &str,
        key: &str,
        kind: Operation,
        op: &OperationSection,
        p: &mut Collector<'_>,
    ) -> Option<Op> {
        let where_ = format!("{section}.{key}");
        let exchange = self.exchange(
            key,
            (&op.method, &op.path, op.target.as_ref()),
            (op.request.as_deref(), op.response.as_deref()),
            &where_,
            p,
        );
        let also: Vec<PathTemplate> = op
            .also
            .iter()
            .flatten()
            .filter_map(|t| match PathTemplate::parse(t.get_ref()) {
                Ok(t) => Some(t),
                Err(e) => {
                    p.at(Some(t.span()), format!("{where_}.also"), e);
                    None
                }
            })
            .collect();
        let status = match &op.status {
            Some(s) if (100..=599).contains(s.get_ref()) => *s.get_ref(),
            Some(s) => {
                p.at(
                    Some(s.span()),
                    format!("{where_}.status"),
                    "must be an HTTP status (100-599)",
                );
                200
            }
            None => 200,
        };
        let returns = match op.returns.as_ref().map(|r| r.get_ref().as_str()) {
            None | Some("task") => Returns::Task,
            Some("result") => Returns::Result,
            Some(other) => {
                p.at(
                    op.returns.as_ref().map(|r| r.span()),
                    format!("{where_}.returns"),
                    format!("`{other}` is not `task` or `result`"),
                );
                Returns::Task
            }
        };
        let validate = op.validate.as_ref().and_then(|v| {
            let path = split_path(v.get_ref());
            if canonical::is_known(&path) {
                Some(path)
            } else {
                p.at(
                    Some(v.span()),
                    format!("{where_}.validate"),
                    format!("unknown canonical field `{}`", v.get_ref()),
                );
                None
            }
        });
        let before_payment = op
            .before_payment
            .iter()
            .flatten()
            .enumerate()
            .filter_map(|(i, c)| {
                let c = c.get_ref();
                let holds = self.expr(
                    Some(&c.holds),
                    &format!("{where_}.before_payment[{i}].holds"),
                    false,
                    p,
                )?;
                Some(crate::dialect::mapping::PaymentCheck {
                    holds,
                    message: c.message.clone(),
                })
            })
            .collect();
        let sale = op.sale.as_ref().and_then(|s| {
            let (span, s) = (s.span(), s.get_ref());
            if kind != Operation::CreateTask {
                p.at(
                    Some(span),
                    format!("{where_}.sale"),
                    "`sale` belongs to a create_task form: it hashes what a buyer sent and reads",
                );
                return None;
            }
            let input_hash = self.expr(
                Some(&s.input_hash),
                &format!("{where_}.sale.input_hash"),
                false,
                p,
            );
            let result_hash = self.expr(
                Some(&s.result_hash),
                &format!("{where_}.sale.result_hash"),
                false,
                p,
            );
            Some(crate::dialect::mapping::SaleHashes {
                input_hash: input_hash?,
                result_hash: result_hash?,
            })
        });
        let conditions = op
            .conditions
            .iter()
            .flatten()
            .enumerate()
            .filter_map(|(i, c)| self.condition(c, &format!("{where_}.match[{i}]"), p))
            .collect();
        let when = self.expr(op.when.as_ref(), &format!("{where_}.when"), false, p);
        let wait = self.expr(op.wait.as_ref(), &format!("{where_}.wait"), false, p);
        let unpaid = self.expr(op.unpaid.as_ref(), &format!("{where_}.unpaid"), false, p);
        if unpaid.is_some() && kind != Operation::CreateTask {
            p.at(
                op.unpaid.as_ref().map(|u| u.span()),
                format!("{where_}.unpaid"),
                "only a create_task form keeps a create without a payment".to_string(),
            );
        }
        let (front, back) = match op.side.as_ref().map(|s| s.get_ref().as_str()) {
            None => (true, true),
            Some("front") => (true, false),
            Some("back") => (false, true),
            Some(other) => {
                p.at(
                    op.side.as_ref().map(|s| s.span()),
                    format!("{where_}.side"),
                    format!("`{other}` is not `front` or `back`"),
                );
                (true, true)
            }
        };
        let failed_as_error = match op.failed.as_ref().map(|f| f.get_ref().as_str()) {
            None | Some("task") => false,
            Some("error") => true,
            Some(other) => {
                p.at(
                    op.failed.as_ref().map(|f| f.span()),
                    format!("{where_}.failed"),
                    format!("`{other}` is not `task` or `error`"),
                );
                false
            }
        };
        let timeout_answers_task = match op.timeout.as_ref().map(|f| f.get_ref().as_str()) {
            None | Some("error") => false,
            Some("task") => true,
            Some(other) => {
                p.at(
                    op.timeout.as_ref().map(|f| f.span()),
                    format!("{where_}.timeout"),
                    format!("`{other}` is not `task` or `error`"),
                );
                false
            }
        };
        let then = self.then_calls(op.then.as_deref(), &where_, p);
        let stream = op
            .stream
            .as_ref()
            .and_then(|s| self.stream_of(s, &format!("{where_}.stream"), p));
        let Call {
            method,
            path,
            target,
            request,
            response,
            ..
        } = exchange?;
        Some(Op {
            key: key.to_string(),
            op: kind,
            conditions,
            when,
            front,
            back,
            then,
            target,
            stream,
            method,
            path,
            also,
            status,
            returns,
            wait,
            unpaid,
            failed_as_error,
            timeout_answers_task,
            otherwise: op.otherwise.as_ref().map(|o| o.get_ref().clone()),
            validate,
            public: op.public.unwrap_or(kind == Operation::Describe),
            reply: false,
            checks: self.checks(op.checks.as_deref(), &format!("{where_}.checks"), p),
            before_payment,
            sale,
            request,
            response,
        })
    }

    fn rules(
        &self,
        rules: &[Spanned<FieldRule>],
        where_: &str,
        params: &[String],
        allow_nesting: bool,
        p: &mut Collector<'_>,
    ) -> Rules {
        Rules(
            rules
                .iter()
                .enumerate()
                .filter_map(|(i, r)| {
                    self.rule(r, &format!("{where_}[{i}]"), params, allow_nesting, p)
                })
                .collect(),
        )
    }

    fn rule(
        &self,
        spanned: &Spanned<FieldRule>,
        where_: &str,
        params: &[String],
        allow_nesting: bool,
        p: &mut Collector<'_>,
    ) -> Option<Rule> {
        let r = spanned.get_ref();
        let span = spanned.span();
        let before = p_len(p);
        let places: Vec<(&str, &Spanned<String>)> = [
            ("json", &r.json),
            ("param", &r.param),
            ("query", &r.query),
            ("header", &r.header),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| (k, v)))
        .collect();
        let [(kind, place)] = places.as_slice() else {
            p.at(
                Some(span),
                where_,
                "a rule needs exactly one of `json`, `param`, `query`, `header`",
            );
            return None;
        };
        let location = self.location(kind, place, where_, params, p);
        let aliases: Vec<Location> = r
            .aliases
            .iter()
            .flatten()
            .filter_map(|a| self.location(kind, a, &format!("{where_}.aliases"), params, p))
            .collect();
        let label = match *kind {
            "json" => place.get_ref().clone(),
            other => format!("{other} {}", place.get_ref()),
        };
        let field = r.field.as_ref().and_then(|f| {
            let path = split_path(f.get_ref());
            if canonical::is_known(&path) {
                Some(path)
            } else {
                p.at(
                    Some(f.span()),
                    format!("{where_}.field"),
                    format!("unknown canonical field `{}`", f.get_ref()),
                );
                None
            }
        });
        let value = self.expr(r.value.as_ref(), &format!("{where_}.value"), false, p);
        let read = self.expr(r.read.as_ref(), &format!("{where_}.read"), true, p);
        let when = self.expr(r.when.as_ref(), &format!("{where_}.when"), false, p);
        let conversion = self.conversion(r, where_, p);
        let kind_check = r.kind.as_ref().and_then(|k| {
            JsonType::from_name(k.get_ref()).or_else(|| {
                p.at(
                    Some(k.span()),
                    format!("{where_}.type"),
                    "must be string, number, integer, boolean, object or array",
                );
                None
            })
        });
        let nested = match (&r.shape, &r.each) {
            (Some(_), Some(e)) => {
                p.at(
                    Some(e.span()),
                    where_,
                    "a rule has `shape` or `each`, not both",
                );
                None
            }
            (Some(s), None) | (None, Some(s)) if !allow_nesting => {
                p.at(Some(s.span()), where_, "shapes cannot contain other shapes");
                None
            }
            (Some(s), None) => self.shape(s, where_, p).map(Nested::Shape),
            (None, Some(e)) => {
                if r.field.is_none() {
                    p.at(
                        Some(e.span()),
                        where_,
                        "`each` needs `field`: the canonical array",
                    );
                }
                self.shape(e, where_, p).map(Nested::Each)
            }
            (None, None) => None,
        };
        let direction = match r.only.as_ref().map(|o| o.get_ref().as_str()) {
            Some("read") => Direction::Read,
            Some("emit") => Direction::Emit,
            Some(other) => {
                p.at(
                    r.only.as_ref().map(|o| o.span()),
                    format!("{where_}.only"),
                    format!("`{other}` is not `read` or `emit`"),
                );
                Direction::Both
            }
            // A rule with nowhere to store what it reads only writes.
            None if r.field.is_none() && nested.is_none() => Direction::Emit,
            None => Direction::Both,
        };
        if direction != Direction::Read
            && r.field.is_none()
            && r.value.is_none()
            && nested.is_none()
        {
            p.at(
                Some(span.clone()),
                where_,
                "nothing to write: give `field`, `value`, `shape` or `each`",
            );
        }
        if direction == Direction::Read && r.field.is_none() && nested.is_none() {
            p.at(
                Some(span.clone()),
                where_,
                "nowhere to store what is read: give `field`",
            );
        }
        if let Some(loc) = &location {
            if direction != Direction::Read && !super::codec::writable(loc) {
                p.at(
                    Some(place.span()),
                    format!("{where_}.json"),
                    "only simple paths ($.a.b, $.a[0]) can be written; mark the rule `only = \"read\"`",
                );
            }
        }
        let default = r
            .default
            .as_ref()
            .and_then(|d| serde_json::to_value(d).ok());
        let all = r.all.unwrap_or(false);
        if all && *kind != "json" {
            p.at(Some(span), where_, "`all` is for `json` rules");
        }
        if p_len(p) != before {
            return None;
        }
        Some(Rule {
            location: location?,
            aliases,
            label,
            field,
            value,
            read,
            when,
            conversion,
            default,
            required: r.required.unwrap_or(false),
            kind: kind_check,
            nested,
            direction,
            all,
            nullable: r.nullable.unwrap_or(false),
        })
    }

    fn location(
        &self,
        kind: &str,
        place: &Spanned<String>,
        where_: &str,
        params: &[String],
        p: &mut Collector<'_>,
    ) -> Option<Location> {
        let text = place.get_ref();
        match kind {
            "json" => match JsonLocation::parse(text) {
                Ok(j) => Some(Location::Json(j)),
                Err(e) => {
                    p.at(Some(place.span()), format!("{where_}.json"), e);
                    None
                }
            },
            "param" => {
                if params.iter().any(|n| n == text) {
                    Some(Location::Param(text.clone()))
                } else {
                    p.at(
                        Some(place.span()),
                        format!("{where_}.param"),
                        format!("the operation's path has no `{{{text}}}`"),
                    );
                    None
                }
            }
            "query" => Some(Location::Query(text.clone())),
            _ => Some(Location::Header(text.clone())),
        }
    }

    fn expr(
        &self,
        text: Option<&Spanned<String>>,
        where_: &str,
        allow_current: bool,
        p: &mut Collector<'_>,
    ) -> Option<Expr> {
        let text = text?;
        let e = match Expr::parse(text.get_ref()) {
            Ok(e) => e,
            Err(msg) => {
                p.at(Some(text.span()), where_, format!("bad expression: {msg}"));
                return None;
            }
        };
        check_paths(self.vars, &e, text.span(), where_, p);
        let direct = e.uses_current();
        let e = self.named.inline(e, text.span(), where_, p)?;
        if !allow_current && e.uses_current() {
            p.at(
                Some(text.span()),
                where_,
                if direct {
                    "`$` (the value read) can only be used in `read`"
                } else {
                    "`$` (the value read, here in a named value) can only be used in `read`"
                },
            );
        }
        Some(e)
    }

    fn conversion(&self, r: &FieldRule, where_: &str, p: &mut Collector<'_>) -> Option<Conversion> {
        let mut found: Vec<(Range<usize>, Conversion)> = Vec::new();
        if let Some(t) = &r.table {
            match self.tables.get(t.get_ref()) {
                Some(table) => found.push((t.span(), Conversion::Table(table.clone()))),
                None if t.get_ref() == "status" => p.at(
                    Some(t.span()),
                    format!("{where_}.table"),
                    "the mapping has no [status] table",
                ),
                None => {
                    let known: Vec<&str> = self.tables.keys().map(String::as_str).collect();
                    p.at(
                        Some(t.span()),
                        format!("{where_}.table"),
                        format!(
                            "no table named `{}`; the mapping has: {}",
                            t.get_ref(),
                            if known.is_empty() {
                                "none".to_string()
                            } else {
                                known.join(", ")
                            }
                        ),
                    )
                }
            }
        }
        if let Some(i) = &r.id {
            match i.get_ref().as_str() {
                "task" if self.has_ids.0 => found.push((i.span(), Conversion::TaskId)),
                "step" if self.has_ids.1 => found.push((i.span(), Conversion::StepId)),
                "task" | "step" => p.at(
                    Some(i.span()),
                    format!("{where_}.id"),
                    format!("the mapping has no `ids.{}` template", i.get_ref()),
                ),
                _ => p.at(
                    Some(i.span()),
                    format!("{where_}.id"),
                    "must be `task` or `step`",
                ),
            }
        }
        if let Some(t) = &r.time {
            match TimeFormat::from_name(t.get_ref()) {
                Some(f) => found.push((t.span(), Conversion::Time(f))),
                None => p.at(
                    Some(t.span()),
                    format!("{where_}.time"),
                    "must be iso_ms, rfc3339, unix_ms or unix_s",
                ),
            }
        }
        if found.len() > 1 {
            p.at(
                Some(found[1].0.clone()),
                where_,
                "a rule has at most one of `table`, `id`, `time`",
            );
        }
        found.into_iter().next().map(|(_, c)| c)
    }

    fn shape(
        &self,
        name: &Spanned<String>,
        where_: &str,
        p: &mut Collector<'_>,
    ) -> Option<Arc<Shape>> {
        match self.shapes.get(name.get_ref()) {
            Some(s) => Some(s.clone()),
            None => {
                p.at(
                    Some(name.span()),
                    where_,
                    format!("no shape named `{}` in [shapes]", name.get_ref()),
                );
                None
            }
        }
    }
}

/// Reports the canonical fields and variables `e` reads that do not exist (named values are
/// checked where they are defined).
fn check_paths(
    vars: &Map<String, Value>,
    e: &Expr,
    span: Range<usize>,
    where_: &str,
    p: &mut Collector<'_>,
) {
    for path in e.paths() {
        match path.first().map(String::as_str) {
            Some(named::ROOT) => {}
            Some("var") => match path.get(1) {
                Some(name) if vars.contains_key(name) => {}
                _ => p.at(
                    Some(span.clone()),
                    where_,
                    format!(
                        "unknown variable `{}`; declare it in [vars]",
                        path.iter().skip(1).cloned().collect::<Vec<_>>().join(".")
                    ),
                ),
            },
            _ if !canonical::is_known(path) => p.at(
                Some(span.clone()),
                where_,
                format!("unknown canonical field `{}`", path.join(".")),
            ),
            _ => {}
        }
    }
}

fn p_len(p: &Collector<'_>) -> usize {
    p.len()
}

fn split_path(text: &str) -> Vec<String> {
    text.split('.').map(str::to_string).collect()
}

fn is_name(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    const BROKEN: &str = r#"dialect = "broken"
steps = "sometimes"

[vars]
known = "x"

[status]
read = { Done = "completed", Odd = "finished" }
emit = { completed = "Done", failed = "Failed" }

[operations.create_task]
method = "POST"
path = "/tasks/{id}"
request = [
  { json = "$.query", field = "task.inptu.text" },
  { json = "$.a[", field = "task.name" },
  { json = "$.b", field = "task.name", value = "var.unknown ?? task.name" },
  { json = "$.c", field = "task.status", table = "status", id = "task" },
  { param = "nope", field = "task.id" },
  { json = "$.d", value = "oops(" },
  { json = "$..e", field = "task.name" },
  { json = "$.f", each = "missing", field = "task.steps" },
]

[operations.teleport]
method = "POST"
path = "/x"
"#;

    #[test]
    fn every_mapping_problem_is_reported_with_its_position() {
        let problems = parse(BROKEN, "broken.toml").unwrap_err();
        let lines: Vec<String> = problems.iter().map(ToString::to_string).collect();
        let expected = [
            "broken.toml:2:9: steps: `sometimes` is not `native` or `synthesized`",
            "broken.toml:8:36: status.read.Odd: `finished` is not a canonical status (pending, running, awaiting_input, completed, failed, cancelled), optionally with /reason",
            "broken.toml:9:8: status.emit: incomplete status table: no dialect value for pending, running, awaiting_input, cancelled",
            "broken.toml:15:31: operations.create_task.request[0].field: unknown canonical field `task.inptu.text`",
            "broken.toml:16:12: operations.create_task.request[1].json: bad JSONPath `$.a[`: expected ",
            "broken.toml:17:48: operations.create_task.request[2].value: unknown variable `unknown`; declare it in [vars]",
            "broken.toml:18:65: operations.create_task.request[3].id: the mapping has no `ids.task` template",
            "broken.toml:19:13: operations.create_task.request[4].param: the operation's path has no `{nope}`",
            "broken.toml:20:27: operations.create_task.request[5].value: bad expression: unknown function `oops`",
            "broken.toml:21:12: operations.create_task.request[6].json: only simple paths ($.a.b, $.a[0]) can be written; mark the rule `only = \"read\"`",
            "broken.toml:22:26: operations.create_task.request[7]: no shape named `missing` in [shapes]",
            "broken.toml:25:13: operations.teleport: `teleport` is not a canonical operation; known: create_task, get_task, list_steps, provide_input, cancel_task, search_tasks, search_steps, availability, input_schema, describe",
        ];
        assert_eq!(lines.len(), expected.len(), "{}", lines.join("\n"));
        for (got, want) in lines.iter().zip(expected) {
            assert!(got.starts_with(want), "\n got: {got}\nwant: {want}");
        }
    }

    /// A mapping using the language's newer parts: forms, conditions, tables, `[request]`,
    /// error status, streams, multi-call backs, sides and the fallback to a new task.
    const FORMS: &str = r#"dialect = "forms"

[vars]
version = "2"

[status]
read = { new = "pending", busy = "running", ask = "awaiting_input", done = "completed", bad = "failed", gone = "cancelled" }
emit = { pending = "new", running = "busy", awaiting_input = "ask", completed = "done", failed = "bad", cancelled = "gone" }

[tables.code]
emit = { task_not_found = -1 }
emit_default = -99
read = { "-1" = 404 }
read_default = 500

[request]
fields = [{ json = "$.id", field = "request.rpc_id" }]

[error]
status = "if(error.status == 401, 401, 200)"
fields = [{ json = "$.code", field = "error.code", table = "code", only = "emit" }]

[calls.second]
method = "POST"
path = "/second/{id}"
request = [{ param = "id", value = "task.id" }]

[operations.create_task]
method = "POST"
path = "/rpc"
match = [{ json = "$.method", equals = ["create"] }]
then = ["second"]
response = [{ json = "$.state", field = "task.status", table = "status" }]

[operations.create_old]
operation = "create_task"
method = "POST"
path = "/rpc"
when = "var.version == '1'"
match = [{ json = "$.method", equals = ["create"] }, { header = "X-Old", present = true }]

[operations.stream]
operation = "create_task"
side = "front"
method = "POST"
path = "/rpc"
match = [{ json = "$.method", equals = ["stream"] }]
stream = { until = "settled", done = "[END]", frames = [{ when = "event.first", fields = [{ json = "$.first", value = "true" }] }] }

[operations.provide_input]
method = "POST"
path = "/rpc"
otherwise = "create_task"
timeout = "task"
match = [{ json = "$.method", equals = ["create"] }, { json = "$.turn", not = [1, "1"] }, { json = "$.turn", present = true }]

[operations.availability]
side = "back"
method = "GET"
path = "/rpc"
"#;

    fn message(body: serde_json::Value, headers: &[(&str, &str)]) -> super::super::Message {
        super::super::Message {
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..super::super::Message::with_body(body)
        }
    }

    #[test]
    fn forms_are_chosen_by_their_conditions_and_sides() {
        let m = parse(FORMS, "forms.toml").unwrap();
        let post = Method::POST;
        let pick = |body: serde_json::Value, headers: &[(&str, &str)]| {
            m.match_front(&post, "/rpc", &message(body, headers))
                .map(|(o, _)| o.key.clone())
        };
        use serde_json::json;
        assert_eq!(
            pick(json!({"method": "create"}), &[]).as_deref(),
            Some("create_task")
        );
        // More conditions that hold win.
        assert_eq!(
            pick(json!({"method": "create"}), &[("x-old", "1")]).as_deref(),
            Some("create_old")
        );
        assert_eq!(
            pick(json!({"method": "create", "turn": "2"}), &[]).as_deref(),
            Some("provide_input")
        );
        // `not` compares loosely: the text "1" is the number 1.
        assert_eq!(
            pick(json!({"method": "create", "turn": "1"}), &[]).as_deref(),
            Some("create_task")
        );
        assert_eq!(
            pick(json!({"method": "stream"}), &[]).as_deref(),
            Some("stream")
        );
        assert_eq!(pick(json!({"method": "nope"}), &[]), None);
        // A back-only form serves no client; a front-only form is never called.
        assert!(m
            .match_front(&Method::GET, "/rpc", &super::super::Message::default())
            .is_none());
        assert_eq!(
            m.op(Operation::Availability).map(|o| o.key.as_str()),
            Some("availability")
        );
        let forms: Vec<&str> = m
            .forms(Operation::CreateTask)
            .map(|o| o.key.as_str())
            .collect();
        assert_eq!(forms, ["create_task", "create_old"]);
        let create = m.op(Operation::CreateTask).unwrap();
        assert_eq!(create.then.len(), 1);
        assert_eq!(create.then[0].path.as_str(), "/second/{id}");
        let stream = m.ops.iter().find(|o| o.key == "stream").unwrap();
        let s = stream.stream.as_ref().unwrap();
        assert_eq!(
            (s.until, s.done.as_deref(), s.frames.len()),
            (Until::Settled, Some("[END]"), 1)
        );
        assert_eq!(
            m.ops
                .iter()
                .find(|o| o.key == "provide_input")
                .unwrap()
                .otherwise
                .as_deref(),
            Some("create_task")
        );
    }

    #[test]
    fn a_form_may_answer_the_task_at_sync_timeout() {
        let m = parse(FORMS, "forms.toml").unwrap();
        let by_key = |k: &str| m.ops.iter().find(|o| o.key == k).unwrap();
        assert!(by_key("provide_input").timeout_answers_task);
        assert!(!by_key("create_task").timeout_answers_task);
    }

    #[test]
    fn before_payment_checks_are_compiled_checked_and_evaluated_on_the_task() {
        use serde_json::json;
        let text = r#"dialect = "payer"
[vars]
salt = "s"
[operations.create_task]
method = "POST"
path = "/jobs"
response = [
  { json = "$.id", field = "task.id" },
  { json = "$.pay.ref", field = "task.payment.ref" },
  { json = "$.pay.hash", field = "task.payment.hash" },
]
before_payment = [
  { holds = "task.payment.hash == concat(task.input.text, var.salt)", message = "not the hash of what was sent" },
]
"#;
        let m = parse(text, "payer.toml").unwrap();
        assert!(m.carries_payment());
        let op = m.op(Operation::CreateTask).unwrap();
        assert_eq!(op.before_payment.len(), 1);
        assert_eq!(
            op.before_payment[0].message,
            "not the hash of what was sent"
        );
        let ctx = super::super::Context {
            mapping: &m,
            vars: &m.vars,
            seal_key: &[],
        };
        let task = |hash: &str| json!({"task": {"input": {"text": "hi"}, "payment": {"ref": "r", "hash": hash}}});
        let check = &op.before_payment[0].holds;
        assert!(super::super::holds(check, &task("his"), &ctx));
        assert!(!super::super::holds(check, &task("hers"), &ctx));
        // A check naming what does not exist is a problem of the file, with its place.
        let broken = text.replace("var.salt", "var.pepper");
        let problems = parse(&broken, "payer.toml").unwrap_err().to_string();
        assert!(
            problems.contains("operations.create_task.before_payment[0].holds")
                && problems.contains("unknown variable `pepper`"),
            "{problems}"
        );
        // A back whose answers read nothing into task.payment cannot be paid for.
        let free = text
            .replace("task.payment.ref", "task.name")
            .replace("task.payment.hash", "task.message");
        assert!(!parse(&free, "free.toml").unwrap().carries_payment());
    }

    #[test]
    fn tables_translate_both_ways_with_defaults() {
        use serde_json::json;
        let m = parse(FORMS, "forms.toml").unwrap();
        let code = &m.tables["code"];
        assert_eq!(code.emit(&json!("task_not_found"), None), Some(json!(-1)));
        assert_eq!(code.emit(&json!("other"), None), Some(json!(-99)));
        assert_eq!(code.read(&json!(-1)), Some((json!(404), None)));
        assert_eq!(code.read(&json!(-7)), Some((json!(500), None)));
        let status = m.status_table().unwrap();
        assert_eq!(
            status.read(&json!("ask")),
            Some((json!("awaiting_input"), None))
        );
        assert_eq!(status.read(&json!("??")), None);
        assert!(m.error_status.is_some());
        assert!(m.request.is_some());
    }

    #[test]
    fn references_the_new_parts_make_are_checked() {
        let broken = FORMS
            .replace("then = [\"second\"]", "then = [\"third\"]")
            .replace(
                "otherwise = \"create_task\"",
                "otherwise = \"availability\"",
            )
            .replace("side = \"back\"", "side = \"sideways\"")
            .replace("table = \"code\"", "table = \"codes\"")
            .replace("until = \"settled\"", "until = \"never\"")
            .replace("timeout = \"task\"", "timeout = \"wait\"");
        let problems = parse(&broken, "forms.toml").unwrap_err();
        let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
        for expected in [
            "no table named `codes`; the mapping has: code, status",
            "no call named `third` in [calls]",
            "`never` is not `terminal` or `settled`",
            "`sideways` is not `front` or `back`",
            "`availability` is not a create_task form of this mapping",
            "`wait` is not `task` or `error`",
        ] {
            assert!(
                text.iter().any(|t| t.contains(expected)),
                "missing `{expected}` in:\n{}",
                text.join("\n")
            );
        }
    }

    /// `[refuse.NAME]` answers a request no form takes with its error; `public` says which
    /// front forms need no token.
    const REFUSING: &str = r#"dialect = "refusing"

[refuse.builder_call]
method = "post"
path = "/tasks/{task_id}/steps"
status = 403
message = "not through a proxy"

[operations.describe]
method = "GET"
path = "/card"

[operations.token]
operation = "describe"
public = false
method = "GET"
path = "/token/{id}"

[operations.get_task]
method = "GET"
path = "/tasks/{task_id}/steps"
"#;

    #[test]
    fn refused_requests_and_public_forms() {
        let m = parse(REFUSING, "refusing.toml").unwrap();
        let r = m.refusal(&Method::POST, "/tasks/t-1/steps").unwrap();
        assert_eq!(
            (r.name.as_str(), r.status, r.message.as_str()),
            ("builder_call", 403, "not through a proxy")
        );
        // Another method or path is not refused (an operation may take it; else 404).
        assert!(m.refusal(&Method::GET, "/tasks/t-1/steps").is_none());
        assert!(m.refusal(&Method::POST, "/tasks/t-1").is_none());
        let public: Vec<(&str, bool)> = m.ops.iter().map(|o| (o.key.as_str(), o.public)).collect();
        assert_eq!(
            public,
            [("describe", true), ("token", false), ("get_task", false)]
        );

        let broken = REFUSING
            .replace("status = 403", "status = 200")
            .replace("method = \"post\"", "method = \"p o s t\"");
        let text: Vec<String> = parse(&broken, "refusing.toml")
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect();
        for expected in [
            "refuse.builder_call.method: not an HTTP method",
            "refuse.builder_call.status: must be an HTTP error status (400-599)",
        ] {
            assert!(
                text.iter().any(|t| t.contains(expected)),
                "missing `{expected}` in:\n{}",
                text.join("\n")
            );
        }
    }

    /// `[answer.NAME]` forms compete with operations for a request; `checks` guard the request
    /// and forms; stream forms take `end`, `every` and `timeout`.
    const ANSWERING: &str = r#"dialect = "answering"

[request]
fields = [{ header = "X-Version", field = "request.version" }]
checks = [{ holds = "!request.version || request.version == '2'", status = 400, code = "bad_version", message = "v2 only" }]

[answer.ping]
method = "POST"
path = "/rpc"
match = [{ json = "$.method", equals = ["ping"] }]
response = [{ json = "$.result", value = "{}" }]

[answer.note]
method = "POST"
path = "/rpc"
match = [{ json = "$.id", present = false }]
status = 202

[operations.create_task]
method = "POST"
path = "/rpc"
match = [{ json = "$.method", equals = ["run"] }]
checks = [{ holds = "request.tool == agent.name", message = "Unknown tool" }]
stream = { end = "task.status == 'completed'", every = "10s", timeout = "frames", frames = [
  { fields = [{ json = "$.seq", value = "event.seq" }] },
] }
"#;

    const SHARED_STREAM: &str = r#"dialect = "shared"

[streams.follow]
lasts = "task"
keepalive = "15s"
frames = []

[operations.create_task]
method = "POST"
path = "/rpc"
stream = { use = "follow" }
"#;

    #[test]
    fn answers_checks_and_stream_endings_are_compiled() {
        let m = parse(ANSWERING, "answering.toml").unwrap();
        let post = Method::POST;
        let chosen = |body| {
            m.match_front(&post, "/rpc", &message(body, &[]))
                .map(|(o, _)| (o.key.as_str(), o.reply, o.status))
        };
        assert_eq!(
            chosen(serde_json::json!({"id": 1, "method": "ping"})),
            Some(("ping", true, 200))
        );
        assert_eq!(
            chosen(serde_json::json!({"method": "hello"})),
            Some(("note", true, 202))
        );
        assert_eq!(
            chosen(serde_json::json!({"id": 2, "method": "run"})),
            Some(("create_task", false, 200))
        );
        assert_eq!(
            chosen(serde_json::json!({"id": 3, "method": "other"})),
            None
        );
        // Answers are not operations: never a back form, never public unless they say so.
        assert!(m.ops.iter().all(|o| !o.reply));
        assert!(m.answers.iter().all(|a| a.front && !a.back && !a.public));
        let check = &m.request_checks[0];
        assert_eq!(
            (check.status, check.code.as_str(), check.message.as_str()),
            (400, "bad_version", "v2 only")
        );
        let op = &m.ops[0];
        assert_eq!(
            (op.checks[0].status, op.checks[0].code.as_str()),
            (400, "refused")
        );
        let stream = op.stream.as_ref().unwrap();
        assert!(stream.end.is_some() && stream.timeout_frames);
        assert_eq!(stream.every, Some(std::time::Duration::from_secs(10)));

        let broken = ANSWERING
            .replace("status = 202", "status = 2")
            .replace(
                "status = 400, code = \"bad_version\"",
                "status = 200, code = \"bad version\"",
            )
            .replace("every = \"10s\"", "every = \"0s\", until = \"settled\"")
            .replace("timeout = \"frames\"", "timeout = \"never\"");
        let text: Vec<String> = parse(&broken, "answering.toml")
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect();
        for expected in [
            "answer.note.status: must be an HTTP status (100-599)",
            "request.checks[0].status: must be an HTTP error status (400-599)",
            "operations.create_task.stream.every: must be longer than 0s",
            "operations.create_task.stream.timeout: `never` is not `end` or `frames`",
            "operations.create_task.stream.end: give `end` or `until`, not both",
        ] {
            assert!(
                text.iter().any(|t| t.contains(expected)),
                "missing `{expected}` in:\n{}",
                text.join("\n")
            );
        }
        // A named stream, used by forms; a use with other keys, or of no such stream, is refused.
        let shared = SHARED_STREAM.to_string();
        let m = parse(&shared, "shared.toml").unwrap_or_else(|e| panic!("{e}\n{shared}"));
        let s = m.ops[0].stream.as_ref().unwrap();
        assert!(s.lasts_task && s.keepalive == Some(std::time::Duration::from_secs(15)));
        let broken = shared
            .replace("use = \"follow\"", "use = \"nothing\", until = \"settled\"")
            .replace("lasts = \"task\"", "lasts = \"forever\"");
        let text: Vec<String> = parse(&broken, "shared.toml")
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect();
        for expected in [
            "operations.create_task.stream.use: a stream that uses [streams.NAME] has no other key",
            "operations.create_task.stream.use: no stream named `nothing` in [streams]",
            "streams.follow.lasts: `forever` is not `sync_timeout` or `task`",
        ] {
            assert!(
                text.iter().any(|t| t.contains(expected)),
                "missing `{expected}` in:\n{}",
                text.join("\n")
            );
        }
    }
}
