//! MIP-003 Attachment 01 input schemas and input validation.
//!
//! The schemas are MIP-003 Attachment 01's
//! (<https://github.com/masumi-network/masumi-improvement-proposals/blob/60d8788/MIPs/MIP-003/MIP-003-Attachement-01.md>).
//! This module reproduces the reference validator of the Python package
//! masumi 1.2.0 (`masumi/validation.py`, `validate_input_data`; source
//! <https://github.com/masumi-network/pip-masumi>): the same steps, in the
//! same order, with the same message strings. Two modes exist, which differ in
//! what they do with the reference's quirks (the table below):
//!
//! * [`Mode::Reference`] copies every quirk marked "copy" and fixes the ones
//!   marked "do not copy" (regex `$` before a trailing newline, non-string
//!   `validations[].value` disabling all validation).
//! * [`Mode::Strict`] additionally fixes the quirks marked **Bug**.
//!
//! | quirk of masumi 1.2.0 | [`Mode::Reference`] | **Bug**: [`Mode::Strict`] fixes it |
//! |---|---|---|
//! | `optional` applies whatever its value, even `"false"` | copy | no |
//! | an absent `none`, `hidden` or `boolean` field counts as missing | copy | yes: `none` and `hidden` are not required |
//! | the URL pattern refuses `-` in a path and `:` in a query | copy | yes: a URL parser, `http(s)` only |
//! | `$` in a pattern also matches before a trailing newline | do not copy | (fixed in both) |
//! | an option or radio value is not checked against `data.values` | copy | yes: membership is checked |
//! | `number` takes `true`, `"nan"`, `"inf"`, `"1_000"` | copy | yes: refused |
//! | a fractional `min`/`max` bound (`"1.5"`) is not enforced | copy | yes: the bound is read as a decimal |
//! | date and time bounds compare as text, their formats unchecked | copy | yes: formats checked too |
//! | `accept` passes any `http(s)` URL | copy | no (it cannot be checked without a fetch) |
//! | a non-string `validations[].value` turns all validation off | do not copy | (fixed in both: see below) |
//! | duplicate field ids: the last definition wins | copy | yes: refused at load |
//! | text length counted in code points | copy | no (it is right) |
//!
//! Documented choices (where the reference and Attachment 01 say nothing, or
//! nothing clear):
//!
//! * **Input order.** The reference walks `input_data` in the order the
//!   client sent it. `serde_json::Map` iterates in key order unless the
//!   `preserve_order` feature is enabled, so "input order" here is the map's
//!   iteration order. That only affects the order of present-key messages
//!   inside `ValidationFailure::message`.
//! * **Non-object `input_data`.** `null` is treated as `{}` (masumi's
//!   `/start_job` does `request.input_data or {}`). Any other non-object fails
//!   with `Validation failed: input_data must be a JSON object, got <kind>`
//!   and `field_errors` holds that text under the empty key `""`.
//! * **Schema problems are rejected at load** ([`SchemaError`]) instead of
//!   silently disabling validation as `/start_job` does. The only coercion is
//!   a boolean or number `validations[].value`, which becomes its JSON text
//!   (`true` → `"true"`, `3` → `"3"`).
//! * **Groups.** When `input_groups` is a non-empty array, the top-level
//!   `input_data` is ignored entirely (not even parsed), as in the reference;
//!   [`Schema::to_json`] then renders the groups and drops that ignored list.
//! * **Python `str()` of containers** (only used for text length checks) is
//!   rendered Python-style; for non-printable characters inside strings of a
//!   list/dict, the `repr` escaping uses a built-in table of common
//!   non-printable code points rather than full Unicode data (unassigned code
//!   points are counted as printable).

use regex::Regex;
use serde_json::{Map, Value};
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::OnceLock;

/// Which behaviour the validator follows (the quirks table in the module's
/// documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Byte-for-byte behaviour of masumi 1.2.0, minus the "do not copy"
    /// quirks. Default, because it is what a fronted masumi agent expects.
    #[default]
    Reference,
    /// Reference plus fixes for every quirk the spec marks **Bug**: real URL
    /// syntax (http/https only), option/radio membership in `data.values`,
    /// `number` rejecting booleans/non-finite values/underscores, decimal
    /// min/max bounds, date/time format checks, `none`/`hidden` not required
    /// when absent, duplicate field ids rejected at load.
    Strict,
}

/// A schema document that cannot be used: refused when the config is loaded,
/// where the reference would validate nothing (see the module's quirks table).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaError {
    /// Human-readable reason; names the offending field where there is one.
    pub message: String,
}

impl SchemaError {
    fn new(message: impl Into<String>) -> Self {
        SchemaError {
            message: message.into(),
        }
    }
}

impl fmt::Display for SchemaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid input schema: {}", self.message)
    }
}

impl std::error::Error for SchemaError {}

/// The outcome of a failed validation (what the reference's
/// `validate_input_data` reports).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationFailure {
    /// `Validation failed: ` followed by every message joined with `"; "`,
    /// present-key messages first, then missing-key messages.
    pub message: String,
    /// The same messages grouped by field id (`""` for a non-object input).
    pub field_errors: BTreeMap<String, Vec<String>>,
}

impl fmt::Display for ValidationFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ValidationFailure {}

/// One `{"validation": <kind>, "value": <string>}` rule of a field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationRule {
    /// The rule kind: `min`, `max`, `format`, `accept`, `optional`, or
    /// anything else (ignored).
    pub validation: String,
    /// The rule argument; always a string (booleans/numbers are coerced at
    /// load; see the module's quirks table).
    pub value: String,
}

/// One input field definition of an Attachment 01 schema.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    /// The field id, the key expected in `input_data`.
    pub id: String,
    /// The type as written in the schema (`string` is kept as written; see
    /// [`Field::normalized_type`]).
    pub field_type: String,
    /// The display name; defaults to `id` when absent (step 2).
    pub name: String,
    /// The optional `data` object (placeholder, values, …).
    pub data: Option<Map<String, Value>>,
    /// The validation rules, in schema order.
    pub validations: Vec<ValidationRule>,
}

impl Field {
    /// The type used for checks: legacy `string` becomes `text`, as the
    /// reference does before any check.
    pub fn normalized_type(&self) -> &str {
        if self.field_type == "string" {
            "text"
        } else {
            &self.field_type
        }
    }

    /// A field is optional if any rule has kind `optional`, whatever its
    /// value, even `"false"` (a quirk of the reference, copied in both modes).
    pub fn is_optional(&self) -> bool {
        self.validations.iter().any(|r| r.validation == "optional")
    }
}

/// Group metadata kept only to render the schema back.
#[derive(Debug, Clone, PartialEq)]
struct GroupInfo {
    id: Option<Value>,
    title: Option<Value>,
    len: usize,
}

/// A parsed Attachment 01 input schema bound to a validation [`Mode`].
#[derive(Debug, Clone, PartialEq)]
pub struct Schema {
    mode: Mode,
    fields: Vec<Field>,
    groups: Option<Vec<GroupInfo>>,
    /// id → index of the *last* definition (step 2: the last one wins for
    /// present values).
    by_id: HashMap<String, usize>,
}

const TEXT_TYPES: &[&str] = &[
    "text", "textarea", "email", "password", "tel", "url", "search", "hidden",
];
const DATE_TYPES: &[&str] = &["date", "datetime-local", "time", "month", "week"];

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// `obj[key]`, with JSON `null` treated as absent.
fn get_present<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

fn parse_field(v: &Value, loc: &str) -> Result<Field, SchemaError> {
    let obj = v.as_object().ok_or_else(|| {
        SchemaError::new(format!(
            "{loc}: a field must be an object, got {}",
            json_kind(v)
        ))
    })?;
    let id = match get_present(obj, "id") {
        None => return Err(SchemaError::new(format!("{loc}: field has no \"id\""))),
        Some(Value::String(s)) => s.clone(),
        Some(other) => {
            return Err(SchemaError::new(format!(
                "{loc}: field \"id\" must be a string, got {}",
                json_kind(other)
            )))
        }
    };
    let field_type = match get_present(obj, "type") {
        None => {
            return Err(SchemaError::new(format!(
                "field '{id}' ({loc}) has no \"type\""
            )))
        }
        Some(Value::String(s)) => s.clone(),
        Some(other) => {
            return Err(SchemaError::new(format!(
                "field '{id}' ({loc}): \"type\" must be a string, got {}",
                json_kind(other)
            )))
        }
    };
    // Step 2: a field without `name` gets `name = id`.
    let name = match get_present(obj, "name") {
        None => id.clone(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => {
            return Err(SchemaError::new(format!(
                "field '{id}' ({loc}): \"name\" must be a string, got {}",
                json_kind(other)
            )))
        }
    };
    let data = match get_present(obj, "data") {
        None => None,
        Some(Value::Object(m)) => Some(m.clone()),
        Some(other) => {
            return Err(SchemaError::new(format!(
                "field '{id}' ({loc}): \"data\" must be an object, got {}",
                json_kind(other)
            )))
        }
    };
    let mut validations = Vec::new();
    match get_present(obj, "validations") {
        None => {}
        Some(Value::Array(rules)) => {
            for (i, rule) in rules.iter().enumerate() {
                let r = rule.as_object().ok_or_else(|| {
                    SchemaError::new(format!(
                        "field '{id}': validations[{i}] must be an object, got {}",
                        json_kind(rule)
                    ))
                })?;
                let kind = match get_present(r, "validation") {
                    Some(Value::String(s)) => s.clone(),
                    other => {
                        return Err(SchemaError::new(format!(
                            "field '{id}': validations[{i}].validation must be a string, got {}",
                            other.map_or("nothing", json_kind)
                        )))
                    }
                };
                // A non-string value makes the reference skip all validation
                // (a quirk not copied: see the module's quirks table); we
                // coerce scalars instead and reject everything else.
                let value = match get_present(r, "value") {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Bool(b)) => b.to_string(),
                    Some(Value::Number(n)) => n.to_string(),
                    other => {
                        return Err(SchemaError::new(format!(
                            "field '{id}': validations[{i}].value must be a string, got {}",
                            other.map_or("nothing", json_kind)
                        )))
                    }
                };
                validations.push(ValidationRule {
                    validation: kind,
                    value,
                });
            }
        }
        Some(other) => {
            return Err(SchemaError::new(format!(
                "field '{id}': \"validations\" must be an array, got {}",
                json_kind(other)
            )))
        }
    }
    Ok(Field {
        id,
        field_type,
        name,
        data,
        validations,
    })
}

fn field_list<'a>(v: Option<&'a Value>, loc: &str) -> Result<&'a [Value], SchemaError> {
    match v {
        None => Ok(&[]),
        Some(Value::Array(a)) => Ok(a),
        Some(other) => Err(SchemaError::new(format!(
            "{loc} must be an array, got {}",
            json_kind(other)
        ))),
    }
}

impl Schema {
    /// Parses a schema document, `{"input_data":[…]}` or
    /// `{"input_groups":[{id,title,input_data:[…]}]}` (null keys = absent).
    ///
    /// As in the reference's first step, a non-empty `input_groups` wins and the
    /// top-level `input_data` is ignored. Fails on a non-object document, a
    /// field without a string `id`/`type`, a non-scalar `validations[].value`
    /// and, in [`Mode::Strict`], duplicate field ids.
    pub fn from_json(doc: &Value, mode: Mode) -> Result<Schema, SchemaError> {
        let obj = doc.as_object().ok_or_else(|| {
            SchemaError::new(format!(
                "the schema must be a JSON object, got {}",
                json_kind(doc)
            ))
        })?;
        let mut fields = Vec::new();
        let mut groups = None;
        match get_present(obj, "input_groups") {
            Some(Value::Array(gs)) if !gs.is_empty() => {
                let mut infos = Vec::with_capacity(gs.len());
                for (gi, g) in gs.iter().enumerate() {
                    let gobj = g.as_object().ok_or_else(|| {
                        SchemaError::new(format!(
                            "input_groups[{gi}] must be an object, got {}",
                            json_kind(g)
                        ))
                    })?;
                    let loc = format!("input_groups[{gi}].input_data");
                    let list = field_list(get_present(gobj, "input_data"), &loc)?;
                    for (fi, f) in list.iter().enumerate() {
                        fields.push(parse_field(f, &format!("{loc}[{fi}]"))?);
                    }
                    infos.push(GroupInfo {
                        id: get_present(gobj, "id").cloned(),
                        title: get_present(gobj, "title").cloned(),
                        len: list.len(),
                    });
                }
                groups = Some(infos);
            }
            None | Some(Value::Array(_)) => {
                let list = field_list(get_present(obj, "input_data"), "input_data")?;
                for (fi, f) in list.iter().enumerate() {
                    fields.push(parse_field(f, &format!("input_data[{fi}]"))?);
                }
            }
            Some(other) => {
                return Err(SchemaError::new(format!(
                    "input_groups must be an array, got {}",
                    json_kind(other)
                )))
            }
        }
        if mode == Mode::Strict {
            // Quirks table: the spec forbids duplicates; strict rejects them.
            let mut seen = HashSet::new();
            for f in &fields {
                if !seen.insert(f.id.as_str()) {
                    return Err(SchemaError::new(format!(
                        "duplicate field id '{}' (ids must be unique across the whole schema)",
                        f.id
                    )));
                }
            }
        }
        let mut by_id = HashMap::new();
        for (i, f) in fields.iter().enumerate() {
            by_id.insert(f.id.clone(), i);
        }
        Ok(Schema {
            mode,
            fields,
            groups,
            by_id,
        })
    }

    /// The mode this schema validates in.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Every field in schema order, groups concatenated (step 1). With
    /// duplicate ids (Reference mode only) every definition is listed.
    pub fn fields(&self) -> &[Field] {
        &self.fields
    }

    /// The definition used to check a present value: the last one with this
    /// id (step 2).
    pub fn field(&self, id: &str) -> Option<&Field> {
        self.by_id.get(id).map(|&i| &self.fields[i])
    }

    /// Whether the schema came from a non-empty `input_groups`.
    pub fn is_grouped(&self) -> bool {
        self.groups.is_some()
    }

    /// Renders the schema back as JSON: `{"input_groups":[…]}` when it was
    /// grouped (group `id`/`title` kept, other group keys and the ignored
    /// top-level `input_data` dropped), else `{"input_data":[…]}`. Fields
    /// carry `id`, `type` (as written), `name` (defaulted to `id`), `data`
    /// when present and `validations` when non-empty, with string values.
    pub fn to_json(&self) -> Value {
        fn field_json(f: &Field) -> Value {
            let mut m = Map::new();
            m.insert("id".into(), Value::String(f.id.clone()));
            m.insert("type".into(), Value::String(f.field_type.clone()));
            m.insert("name".into(), Value::String(f.name.clone()));
            if let Some(d) = &f.data {
                m.insert("data".into(), Value::Object(d.clone()));
            }
            if !f.validations.is_empty() {
                let rules = f
                    .validations
                    .iter()
                    .map(|r| {
                        let mut rm = Map::new();
                        rm.insert("validation".into(), Value::String(r.validation.clone()));
                        rm.insert("value".into(), Value::String(r.value.clone()));
                        Value::Object(rm)
                    })
                    .collect();
                m.insert("validations".into(), Value::Array(rules));
            }
            Value::Object(m)
        }
        let mut out = Map::new();
        match &self.groups {
            Some(groups) => {
                let mut start = 0;
                let mut gs = Vec::with_capacity(groups.len());
                for g in groups {
                    let mut gm = Map::new();
                    if let Some(id) = &g.id {
                        gm.insert("id".into(), id.clone());
                    }
                    if let Some(t) = &g.title {
                        gm.insert("title".into(), t.clone());
                    }
                    let list = self.fields[start..start + g.len]
                        .iter()
                        .map(field_json)
                        .collect();
                    start += g.len;
                    gm.insert("input_data".into(), Value::Array(list));
                    gs.push(Value::Object(gm));
                }
                out.insert("input_groups".into(), Value::Array(gs));
            }
            None => {
                let list = self.fields.iter().map(field_json).collect();
                out.insert("input_data".into(), Value::Array(list));
            }
        }
        Value::Object(out)
    }

    /// Validates `input_data` as the reference's `validate_input_data` does.
    ///
    /// Steps: with no fields everything passes; each present key the schema
    /// defines is checked (unknown keys are accepted); then every
    /// non-optional field whose id is absent yields
    /// `Required field '<id>' is missing` (in Strict, `none`/`hidden` are
    /// exempt). `null` input counts as `{}`; another non-object fails with
    /// key `""` in `field_errors`.
    pub fn validate(&self, input_data: &Value) -> Result<(), ValidationFailure> {
        let empty = Map::new();
        let obj = match input_data {
            Value::Object(m) => m,
            Value::Null => &empty,
            other => {
                let msg = format!("input_data must be a JSON object, got {}", json_kind(other));
                let mut field_errors = BTreeMap::new();
                field_errors.insert(String::new(), vec![msg.clone()]);
                return Err(ValidationFailure {
                    message: format!("Validation failed: {msg}"),
                    field_errors,
                });
            }
        };
        if self.fields.is_empty() {
            return Ok(());
        }
        let mut messages: Vec<String> = Vec::new();
        let mut field_errors: BTreeMap<String, Vec<String>> = BTreeMap::new();
        // Step 3: present keys, in the map's iteration order.
        for (key, value) in obj {
            let Some(&idx) = self.by_id.get(key) else {
                continue;
            };
            let errs = validate_field_value(value, &self.fields[idx], self.mode);
            if !errs.is_empty() {
                field_errors
                    .entry(key.clone())
                    .or_default()
                    .extend(errs.iter().cloned());
                messages.extend(errs);
            }
        }
        // Step 4: missing keys, over all definitions in schema order.
        for f in &self.fields {
            if obj.contains_key(&f.id) || f.is_optional() {
                continue;
            }
            if self.mode == Mode::Strict && matches!(f.normalized_type(), "none" | "hidden") {
                continue;
            }
            let msg = format!("Required field '{}' is missing", f.id);
            field_errors
                .entry(f.id.clone())
                .or_default()
                .push(msg.clone());
            messages.push(msg);
        }
        if messages.is_empty() {
            Ok(())
        } else {
            Err(ValidationFailure {
                message: format!("Validation failed: {}", messages.join("; ")),
                field_errors,
            })
        }
    }
}

// ---------------------------------------------------------------------------
// validate_field_value
// ---------------------------------------------------------------------------

/// Step b/c test: `None`, a blank string (Python `strip()`), or `[]`.
/// `0`, `false` and `{}` are not empty.
fn is_empty_value(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => py_strip(s).is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

fn validate_field_value(value: &Value, field: &Field, mode: Mode) -> Vec<String> {
    let id = &field.id;
    let ty = field.normalized_type();
    let empty = is_empty_value(value);
    let optional = field.is_optional();
    // b. Required check returns at once.
    if !optional && empty {
        return vec![format!("Field '{id}' is required")];
    }
    // c. Optional and empty: nothing else is checked.
    if optional && empty {
        return Vec::new();
    }
    let mut errors = Vec::new();
    let strict = mode == Mode::Strict;

    // d. Type check; processing continues after a type error.
    if TEXT_TYPES.contains(&ty) {
        if !value.is_string() {
            errors.push(format!("Field '{id}' must be a string"));
        }
    } else if ty == "number" || ty == "range" {
        if parse_number(value, mode).is_none() {
            errors.push(format!("Field '{id}' must be a number"));
        }
    } else if ty == "boolean" || ty == "checkbox" {
        if !value.is_boolean() {
            errors.push(format!("Field '{id}' must be a boolean"));
        }
    } else if ty == "option" {
        if !(value.is_string() || value.is_array()) {
            errors.push(format!("Field '{id}' must be a string or list"));
        } else if strict && !is_member(value, field) {
            errors.push(format!("Field '{id}' must be one of the allowed values"));
        }
    } else if ty == "radio" {
        if !value.is_string() {
            errors.push(format!("Field '{id}' must be a string"));
        } else if strict && !is_member(value, field) {
            errors.push(format!("Field '{id}' must be one of the allowed values"));
        }
    } else if DATE_TYPES.contains(&ty) || ty == "color" {
        if !value.is_string() {
            errors.push(format!("Field '{id}' must be a string"));
        }
    } else if ty == "file" && !value.is_string() {
        errors.push(format!("Field '{id}' must be a string (URL)"));
    }

    // e. Automatic format checks, only for string values.
    if let Value::String(s) = value {
        let bad = |what: &str| format!("Field '{id}' must be a valid {what}");
        match ty {
            "email" if !email_ok(s) => errors.push(bad("email address")),
            "url" if !url_ok(s, mode) => errors.push(bad("URL")),
            // Strict only: messages of unreleased pip-masumi HEAD.
            "date" if strict && !date_ok(s) => errors.push(bad("date in YYYY-MM-DD format")),
            "datetime-local" if strict && !datetime_local_ok(s) => {
                errors.push(bad("datetime in YYYY-MM-DDTHH:MM[:SS[.sss]] format"))
            }
            "time" if strict && !time_ok(s) => errors.push(bad("time in HH:MM[:SS[.sss]] format")),
            "month" if strict && !month_ok(s) => errors.push(bad("month in YYYY-MM format")),
            "week" if strict && !week_ok(s) => errors.push(bad("week in YYYY-Www format")),
            _ => {}
        }
    }

    // f. Every rule in order; a rule with an empty kind or value is skipped.
    for rule in &field.validations {
        let (kind, arg) = (rule.validation.as_str(), rule.value.as_str());
        if kind.is_empty() || arg.is_empty() {
            continue;
        }
        match kind {
            "min" if !check_bound(value, arg, ty, mode, true) => {
                errors.push(format!("Field '{id}' must be at least {arg}"));
            }
            "max" if !check_bound(value, arg, ty, mode, false) => {
                errors.push(format!("Field '{id}' must be at most {arg}"));
            }
            "format" if !check_format(value, arg, mode) => {
                errors.push(format!("Field '{id}' must match format: {arg}"));
            }
            "accept" if !check_accept(value, arg, ty) => {
                errors.push(format!("Field '{id}' file type not accepted"));
            }
            _ => {}
        }
    }
    errors
}

/// Strict only: option/radio values must appear in `data.values`. Without a
/// `data.values` array there is nothing to enforce, so the value passes.
fn is_member(value: &Value, field: &Field) -> bool {
    let Some(Value::Array(allowed)) = field.data.as_ref().and_then(|d| d.get("values")) else {
        return true;
    };
    match value {
        Value::Array(items) => items.iter().all(|v| allowed.contains(v)),
        other => allowed.contains(other),
    }
}

/// Python's `float(value)` for `number`/`range`, the reference's type check. Strict
/// additionally rejects booleans, non-finite results and `_` separators.
fn parse_number(value: &Value, mode: Mode) -> Option<f64> {
    match (value, mode) {
        (Value::Number(n), _) => n.as_f64(),
        (Value::Bool(b), Mode::Reference) => Some(if *b { 1.0 } else { 0.0 }),
        (Value::String(s), Mode::Reference) => py_float(s),
        (Value::String(s), Mode::Strict) if !s.contains('_') => {
            py_float(s).filter(|f| f.is_finite())
        }
        _ => None,
    }
}

/// A parsed min/max bound.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Bound {
    /// Exact Python `int()` result.
    Int(i128),
    /// A bound beyond the i128 range (compared approximately) or, in Strict,
    /// a decimal bound.
    Float(f64),
}

impl Bound {
    /// `count.cmp(bound)`.
    fn cmp_count(self, count: usize) -> Option<Ordering> {
        match self {
            Bound::Int(b) => Some((count as i128).cmp(&b)),
            Bound::Float(b) => (count as f64).partial_cmp(&b),
        }
    }

    /// `value.cmp(bound)`, exact for integer bounds like Python's
    /// float-vs-int comparison; `None` for NaN (every comparison is false).
    fn cmp_f64(self, v: f64) -> Option<Ordering> {
        match self {
            Bound::Float(b) => v.partial_cmp(&b),
            Bound::Int(b) => {
                if v.is_nan() {
                    return None;
                }
                const TWO_127: f64 = 170141183460469231731687303715884105728.0;
                if v >= TWO_127 {
                    return Some(Ordering::Greater);
                }
                if v < -TWO_127 {
                    return Some(Ordering::Less);
                }
                let fl = v.floor();
                // |fl| <= 2^127 and integral, so the cast is exact (-2^127
                // is i128::MIN).
                let fi = fl as i128;
                match fi.cmp(&b) {
                    Ordering::Equal if v > fl => Some(Ordering::Greater),
                    o => Some(o),
                }
            }
        }
    }
}

/// Parses a bound: Python `int()`; Strict also accepts a plain decimal.
fn parse_bound(s: &str, mode: Mode) -> Option<Bound> {
    py_int(s).or_else(|| match mode {
        Mode::Reference => None,
        Mode::Strict => strict_decimal(s).map(Bound::Float),
    })
}

/// min (`is_min`) / max check, per type as the reference makes it.
fn check_bound(value: &Value, bound: &str, ty: &str, mode: Mode, is_min: bool) -> bool {
    if DATE_TYPES.contains(&ty) {
        // Lexicographic by code point (UTF-8 byte order is code point order).
        return match value {
            Value::String(s) => {
                if is_min {
                    s.as_str() >= bound
                } else {
                    s.as_str() <= bound
                }
            }
            _ => false,
        };
    }
    // An unparsable bound passes (the reference logs a warning).
    let Some(b) = parse_bound(bound, mode) else {
        return true;
    };
    let ord = if TEXT_TYPES.contains(&ty) {
        b.cmp_count(py_str(value).chars().count())
    } else if ty == "number" || ty == "range" {
        match parse_number(value, mode) {
            Some(f) => b.cmp_f64(f),
            None => return false,
        }
    } else if matches!(ty, "option" | "checkbox" | "radio") {
        let count = match value {
            Value::Array(a) => a.len(),
            other => usize::from(py_truthy(other)),
        };
        b.cmp_count(count)
    } else {
        return true;
    };
    match ord {
        None => false,
        Some(o) if is_min => o != Ordering::Less,
        Some(o) => o != Ordering::Greater,
    }
}

/// `format` rule (Attachment 01's format values). Unknown formats pass.
fn check_format(value: &Value, fmt: &str, mode: Mode) -> bool {
    let strict = mode == Mode::Strict;
    let s = value.as_str();
    match fmt {
        // A non-string value fails (the reference raises an exception, which makes
        // `/start_job` skip validation altogether).
        "email" => s.is_some_and(email_ok),
        "url" => s.is_some_and(|s| url_ok(s, mode)),
        "nonempty" => !is_empty_value(value),
        "integer" => match value {
            Value::Bool(_) => true,
            Value::Number(n) => n.as_f64().is_some_and(is_integral),
            Value::String(s) => py_float(s).is_some_and(is_integral),
            _ => false,
        },
        "tel-pattern" => s.is_some_and(|s| re(&TEL_RE, TEL_PATTERN).is_match(s)),
        // Strict only, as pip-masumi HEAD does.
        "date" if strict => s.is_some_and(date_ok),
        "datetime-local" if strict => s.is_some_and(datetime_local_ok),
        "time" if strict => s.is_some_and(time_ok),
        "month" if strict => s.is_some_and(month_ok),
        "week" if strict => s.is_some_and(week_ok),
        _ => true,
    }
}

/// Python `float.is_integer()`: false for NaN and infinities.
fn is_integral(f: f64) -> bool {
    f.is_finite() && f.fract() == 0.0
}

/// `accept` rule (Attachment 01): only for `file`; http(s) always passes.
fn check_accept(value: &Value, accept: &str, ty: &str) -> bool {
    if ty != "file" {
        return true;
    }
    let Value::String(s) = value else {
        return false;
    };
    if s.starts_with("http://") || s.starts_with("https://") {
        return true;
    }
    let Some(pos) = s.rfind('.') else {
        return false;
    };
    let ext = s[pos + 1..].to_lowercase();
    const IMAGES: &[&str] = &["jpg", "jpeg", "png", "gif", "webp"];
    accept.split(',').map(py_strip).any(|p| {
        p == "*"
            || p.strip_prefix("*.") == Some(ext.as_str())
            || p.strip_prefix('.') == Some(ext.as_str())
            || (p.ends_with("/*") && IMAGES.contains(&ext.as_str()))
    })
}

/// Python truthiness of a non-array JSON value.
fn py_truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

// ---------------------------------------------------------------------------
// Regexes
// ---------------------------------------------------------------------------

static EMAIL_RE: OnceLock<Regex> = OnceLock::new();
static URL_RE: OnceLock<Regex> = OnceLock::new();
static TEL_RE: OnceLock<Regex> = OnceLock::new();
static ND_RE: OnceLock<Regex> = OnceLock::new();
static DATE_RE: OnceLock<Regex> = OnceLock::new();
static DATETIME_RE: OnceLock<Regex> = OnceLock::new();
static TIME_RE: OnceLock<Regex> = OnceLock::new();
static MONTH_RE: OnceLock<Regex> = OnceLock::new();
static WEEK_RE: OnceLock<Regex> = OnceLock::new();

// Rust's `$` (no multi-line flag) matches only at the very end, which is the
// "do not copy" fix for Python's `$` before a trailing `\n`.
const EMAIL_PATTERN: &str = r"^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}$";
// Python's Unicode `\w` is str.isalnum() plus `_`, i.e. `[\p{L}\p{N}_]`
// (Rust's `\w` differs on marks and No/Nl digits).
const URL_PATTERN: &str = r"^https?://(?:[-\p{L}\p{N}_.])+(?::[0-9]+)?(?:/(?:[\p{L}\p{N}_/_.])*)?(?:\?(?:[\p{L}\p{N}_&=%.])*)?(?:#(?:[\p{L}\p{N}_.])*)?$";
// Python `\d` = Nd, `\s` = str.isspace() which adds U+001C..U+001F.
const TEL_PATTERN: &str = r"^[\p{Nd}\s\x{1C}-\x{1F}\-\(\)\+]+$";
// strptime field regexes (CPython `_strptime`), ASCII digits only.
const Y: &str = "(?P<Y>[0-9]{4})";
const M: &str = "(?P<m>1[0-2]|0[1-9]|[1-9])";
const D: &str = "(?P<d>3[01]|[12][0-9]|0[1-9]|[1-9]| [1-9])";
const HMS: &str = "(?P<H>2[0-3]|[01][0-9]|[0-9]):(?P<M>[0-5][0-9]|[0-9])(?::(?P<S>6[01]|[0-5][0-9]|[0-9])(?:\\.[0-9]{1,6})?)?";

fn re(cell: &'static OnceLock<Regex>, pattern: &str) -> &'static Regex {
    cell.get_or_init(|| Regex::new(pattern).expect("built-in regex is valid"))
}

fn email_ok(s: &str) -> bool {
    re(&EMAIL_RE, EMAIL_PATTERN).is_match(s)
}

fn url_ok(s: &str, mode: Mode) -> bool {
    match mode {
        Mode::Reference => re(&URL_RE, URL_PATTERN).is_match(s),
        Mode::Strict => strict_url_ok(s),
    }
}

// ---------------------------------------------------------------------------
// Strict: URL syntax (RFC 3986/3987 shape, scheme http or https)
// ---------------------------------------------------------------------------

fn is_unreserved_or_sub(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-._~!$&'()*+,;=".contains(c)
}

/// Non-ASCII characters are allowed (IRI) unless whitespace or control.
fn is_iri_char(c: char) -> bool {
    !c.is_ascii() && !c.is_whitespace() && !c.is_control()
}

/// Every char is in `extra`, unreserved/sub-delims, an IRI char, or part of
/// a `%XX` escape.
fn chars_ok(s: &str, extra: &str) -> bool {
    let b = s.as_bytes();
    let mut iter = s.char_indices();
    while let Some((i, c)) = iter.next() {
        if c == '%' {
            let ok =
                b.len() > i + 2 && b[i + 1].is_ascii_hexdigit() && b[i + 2].is_ascii_hexdigit();
            if !ok {
                return false;
            }
            iter.next();
            iter.next();
        } else if !(is_unreserved_or_sub(c) || extra.contains(c) || is_iri_char(c)) {
            return false;
        }
    }
    true
}

fn strict_url_ok(s: &str) -> bool {
    let Some((scheme, rest)) = s.split_once("://") else {
        return false;
    };
    if !(scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")) {
        return false;
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let hostport = match authority.rfind('@') {
        Some(at) => {
            if !chars_ok(&authority[..at], ":") {
                return false;
            }
            &authority[at + 1..]
        }
        None => authority,
    };
    let port = if let Some(inner) = hostport.strip_prefix('[') {
        let Some(close) = inner.find(']') else {
            return false;
        };
        if inner[..close].parse::<std::net::Ipv6Addr>().is_err() {
            return false;
        }
        match &inner[close + 1..] {
            "" => None,
            p => match p.strip_prefix(':') {
                Some(p) => Some(p),
                None => return false,
            },
        }
    } else {
        let (host, port) = match hostport.rfind(':') {
            Some(c) => (&hostport[..c], Some(&hostport[c + 1..])),
            None => (hostport, None),
        };
        let host = host.strip_suffix('.').unwrap_or(host);
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || is_iri_char(c))
        };
        if !host.split('.').all(label_ok) {
            return false;
        }
        port
    };
    if let Some(p) = port {
        if p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()) {
            return false;
        }
        if p.parse::<u32>().map_or(true, |n| n > 65535) {
            return false;
        }
    }
    let (before_frag, fragment) = match tail.split_once('#') {
        Some((a, f)) => (a, Some(f)),
        None => (tail, None),
    };
    let (path, query) = match before_frag.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (before_frag, None),
    };
    chars_ok(path, ":@/")
        && query.is_none_or(|q| chars_ok(q, ":@/?"))
        && fragment.is_none_or(|f| chars_ok(f, ":@/?"))
}

// ---------------------------------------------------------------------------
// Strict: date/time formats (as pip-masumi's unreleased HEAD checks them)
// ---------------------------------------------------------------------------

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

fn cap_u32(c: &regex::Captures<'_>, name: &str) -> Option<u32> {
    c.name(name).map(|m| m.as_str().trim().parse().unwrap_or(0))
}

/// Semantic checks `datetime(...)` applies after strptime's regex: year >= 1,
/// day within the month, seconds 0..=59.
fn date_parts_ok(c: &regex::Captures<'_>) -> bool {
    if let Some(y) = cap_u32(c, "Y") {
        if y < 1 {
            return false;
        }
        if let (Some(m), Some(d)) = (cap_u32(c, "m"), cap_u32(c, "d")) {
            if d > days_in_month(y, m) {
                return false;
            }
        }
    }
    cap_u32(c, "S").is_none_or(|s| s <= 59)
}

fn strptime_like(cell: &'static OnceLock<Regex>, pattern: &str, s: &str) -> bool {
    let r = cell.get_or_init(|| Regex::new(pattern).expect("built-in regex is valid"));
    r.captures(s).is_some_and(|c| date_parts_ok(&c))
}

/// `%Y-%m-%d`.
fn date_ok(s: &str) -> bool {
    strptime_like(&DATE_RE, &format!("^{Y}-{M}-{D}$"), s)
}

/// `%Y-%m-%dT%H:%M[:%S[.%f]]` (strptime is case-insensitive, so `t` too).
fn datetime_local_ok(s: &str) -> bool {
    strptime_like(&DATETIME_RE, &format!("^{Y}-{M}-{D}[Tt]{HMS}$"), s)
}

/// `%H:%M[:%S[.%f]]`.
fn time_ok(s: &str) -> bool {
    strptime_like(&TIME_RE, &format!("^{HMS}$"), s)
}

/// `%Y-%m`.
fn month_ok(s: &str) -> bool {
    strptime_like(&MONTH_RE, &format!("^{Y}-{M}$"), s)
}

/// `^\d{4}-W(0[1-9]|[1-4][0-9]|5[0-3])$` (ASCII digits).
fn week_ok(s: &str) -> bool {
    re(&WEEK_RE, r"^[0-9]{4}-W(0[1-9]|[1-4][0-9]|5[0-3])$").is_match(s)
}

// ---------------------------------------------------------------------------
// Python semantics: whitespace, float(), int(), str(), repr()
// ---------------------------------------------------------------------------

/// Python `str.isspace()`: Unicode White_Space plus U+001C..U+001F.
fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python `str.strip()` with no argument.
fn py_strip(s: &str) -> &str {
    s.trim_matches(is_py_space)
}

/// Digit value of a Unicode decimal digit (category Nd). Nd characters come
/// in runs of ten starting at zero (a Unicode stability guarantee), so the
/// value is the distance to the start of the run, modulo 10.
fn nd_value(c: char) -> Option<u32> {
    if c.is_ascii_digit() {
        return c.to_digit(10);
    }
    if c.is_ascii() {
        return None;
    }
    let nd = re(&ND_RE, r"^\p{Nd}$");
    let is_nd = |c: char| {
        let mut buf = [0u8; 4];
        nd.is_match(c.encode_utf8(&mut buf))
    };
    if !is_nd(c) {
        return None;
    }
    let mut k = 0u32;
    let mut cur = c as u32;
    while let Some(prev) = cur.checked_sub(1).and_then(char::from_u32) {
        if !is_nd(prev) {
            break;
        }
        k += 1;
        cur -= 1;
    }
    Some(k % 10)
}

/// CPython's first step for `float()`/`int()` on str: map non-ASCII spaces
/// to ' ' and Unicode decimal digits to ASCII (any other non-ASCII char
/// fails), then strip ASCII whitespace. Unlike `str.strip()`, U+001C..U+001F
/// are therefore *not* stripped here (`float("5\x1c")` raises).
fn py_numeric_ascii(s: &str) -> Option<String> {
    s.trim_matches(char::is_whitespace)
        .chars()
        .map(|c| {
            if c.is_ascii() {
                Some(c)
            } else {
                nd_value(c).and_then(|d| char::from_digit(d, 10))
            }
        })
        .collect()
}

/// CPython's underscore rule: `_` only between two ASCII digits. Returns the
/// text without underscores.
fn py_remove_underscores(s: &str) -> Option<String> {
    let b = s.as_bytes();
    for (i, &c) in b.iter().enumerate() {
        if c == b'_' {
            let prev = i > 0 && b[i - 1].is_ascii_digit();
            let next = i + 1 < b.len() && b[i + 1].is_ascii_digit();
            if !(prev && next) {
                return None;
            }
        }
    }
    Some(s.replace('_', ""))
}

/// Python `float(str)`: surrounding whitespace, sign, `_` separators,
/// Unicode digits, `nan`/`inf`/`infinity` in any case; overflow gives ±inf.
fn py_float(s: &str) -> Option<f64> {
    let ascii = py_numeric_ascii(s)?;
    let t = py_remove_underscores(&ascii)?;
    let (neg, body) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t.as_str()),
    };
    let lower = body.to_ascii_lowercase();
    let v = match lower.as_str() {
        "inf" | "infinity" => f64::INFINITY,
        "nan" => f64::NAN,
        _ => {
            if !decimal_syntax_ok(body) {
                return None;
            }
            body.parse::<f64>().ok()?
        }
    };
    Some(if neg { -v } else { v })
}

/// `digits [. digits] | . digits`, then an optional `e[+-]digits`; no sign.
fn decimal_syntax_ok(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    let int_start = i;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    let mut digits = i - int_start;
    if i < b.len() && b[i] == b'.' {
        i += 1;
        let frac_start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        digits += i - frac_start;
    }
    if digits == 0 {
        return false;
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        i += 1;
        if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
            i += 1;
        }
        let exp_start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == exp_start {
            return false;
        }
    }
    i == b.len()
}

/// Python `int(str)` in base 10: whitespace, sign, `_` separators, Unicode
/// digits; `"1.5"` is not an int. Values beyond i128 become an approximate
/// [`Bound::Float`] (only distinguishable within one f64 ulp of ±1.7e38).
fn py_int(s: &str) -> Option<Bound> {
    let ascii = py_numeric_ascii(s)?;
    let (neg, body) = match ascii.as_bytes().first() {
        Some(b'-') => (true, &ascii[1..]),
        Some(b'+') => (false, &ascii[1..]),
        _ => (false, ascii.as_str()),
    };
    if body.is_empty() || !body.bytes().all(|c| c.is_ascii_digit() || c == b'_') {
        return None;
    }
    let digits = py_remove_underscores(body)?;
    let digits = digits.trim_start_matches('0');
    let digits = if digits.is_empty() { "0" } else { digits };
    let sign = if neg { "-" } else { "" };
    if digits.len() <= 38 {
        format!("{sign}{digits}")
            .parse::<i128>()
            .ok()
            .map(Bound::Int)
    } else {
        format!("{sign}{digits}")
            .parse::<f64>()
            .ok()
            .map(Bound::Float)
    }
}

/// Strict decimal bound: ASCII `[+-]digits[.digits][e[+-]digits]`, finite.
fn strict_decimal(s: &str) -> Option<f64> {
    let t = s.trim_matches(char::is_whitespace);
    let body = t.strip_prefix(['+', '-']).unwrap_or(t);
    if !decimal_syntax_ok(body) {
        return None;
    }
    t.parse::<f64>().ok().filter(|f| f.is_finite())
}

/// Python `repr(float)`: shortest round-trip digits, scientific notation
/// when the exponent is < -4 or >= 16, `.0` added to integral values.
fn py_float_repr(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if f == 0.0 {
        return if f.is_sign_negative() {
            "-0.0".into()
        } else {
            "0.0".into()
        };
    }
    let sci = format!("{:e}", f.abs());
    let (mant, exp) = sci
        .split_once('e')
        .expect("LowerExp always has an exponent");
    let exp: i32 = exp.parse().expect("LowerExp exponent is an integer");
    let digits: String = mant.chars().filter(|c| *c != '.').collect();
    let sign = if f < 0.0 { "-" } else { "" };
    if (-4..16).contains(&exp) {
        if exp >= 0 {
            let point = exp as usize + 1;
            let (int_part, frac) = if digits.len() > point {
                (digits[..point].to_string(), digits[point..].to_string())
            } else {
                (format!("{digits:0<point$}"), "0".to_string())
            };
            format!("{sign}{int_part}.{frac}")
        } else {
            let zeros = "0".repeat((-exp - 1) as usize);
            format!("{sign}0.{zeros}{digits}")
        }
    } else {
        let mantissa = if digits.len() > 1 {
            format!("{}.{}", &digits[..1], &digits[1..])
        } else {
            digits
        };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{mantissa}e{esign}{:02}", exp.abs())
    }
}

fn py_number(n: &serde_json::Number) -> String {
    if n.is_i64() || n.is_u64() {
        n.to_string()
    } else {
        py_float_repr(n.as_f64().unwrap_or(f64::NAN))
    }
}

/// Python `str(value)` of a JSON-decoded value (ints stay ints, `2.0` stays
/// a float, `true` → `True`, `null` → `None`, containers via `repr`).
fn py_str(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => py_repr(other),
    }
}

/// Approximation of "not str.isprintable()" (Cc, Cf, Zs except space, Zl,
/// Zp, Co); unassigned code points are treated as printable.
fn py_non_printable(c: char) -> bool {
    let u = c as u32;
    c.is_control()
        || (c.is_whitespace() && c != ' ')
        || matches!(
            u,
            0xAD | 0x600..=0x605
                | 0x61C
                | 0x6DD
                | 0x70F
                | 0x890..=0x891
                | 0x8E2
                | 0x180E
                | 0x200B..=0x200F
                | 0x202A..=0x202E
                | 0x2060..=0x2064
                | 0x2066..=0x206F
                | 0xFEFF
                | 0xFFF9..=0xFFFB
                | 0x110BD
                | 0x110CD
                | 0x13430..=0x1343F
                | 0x1BCA0..=0x1BCA3
                | 0x1D173..=0x1D17A
                | 0xE0001
                | 0xE0020..=0xE007F
                | 0xE000..=0xF8FF
                | 0xF0000..=0xFFFFD
                | 0x100000..=0x10FFFD
        )
}

/// Python `repr(str)`.
fn py_str_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if py_non_printable(c) => {
                let u = c as u32;
                if u < 0x100 {
                    out.push_str(&format!("\\x{u:02x}"));
                } else if u < 0x10000 {
                    out.push_str(&format!("\\u{u:04x}"));
                } else {
                    out.push_str(&format!("\\U{u:08x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// Python `repr()` of a JSON-decoded value.
fn py_repr(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => py_number(n),
        Value::String(s) => py_str_repr(s),
        Value::Array(a) => {
            let items: Vec<String> = a.iter().map(py_repr).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Object(o) => {
            let items: Vec<String> = o
                .iter()
                .map(|(k, v)| format!("{}: {}", py_str_repr(k), py_repr(v)))
                .collect();
            format!("{{{}}}", items.join(", "))
        }
    }
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A one-field schema `f` (the conformance vectors' shape).
    fn one(ty: &str, rules: &[(&str, &str)], data: Option<Value>) -> Value {
        let mut f = json!({"id": "f", "type": ty, "name": "F"});
        if !rules.is_empty() {
            f["validations"] = rules
                .iter()
                .map(|(k, v)| json!({"validation": k, "value": v}))
                .collect();
        }
        if let Some(d) = data {
            f["data"] = d;
        }
        json!({ "input_data": [f] })
    }

    fn run(mode: Mode, schema: &Value, input: Value) -> Result<(), ValidationFailure> {
        Schema::from_json(schema, mode)
            .expect("schema parses")
            .validate(&input)
    }

    fn fail_msg(msgs: &[&str]) -> String {
        format!("Validation failed: {}", msgs.join("; "))
    }

    /// Expected outcome of one vector: `None` = OK, else the messages.
    type Expect = Option<&'static [&'static str]>;

    struct Row {
        name: &'static str,
        schema: Value,
        input: Value,
        reference: Expect,
        /// `Some(x)` when Strict differs from the reference outcome.
        strict: Option<Expect>,
    }

    fn row(name: &'static str, schema: Value, input: Value, reference: Expect) -> Row {
        Row {
            name,
            schema,
            input,
            reference,
            strict: None,
        }
    }

    fn vectors() -> Vec<Row> {
        let ab = Some(json!({"values": ["A", "B"]}));
        let mut rows = vec![
            row(
                "string min 3 'ab'",
                one("string", &[("min", "3")], None),
                json!({"f":"ab"}),
                Some(&["Field 'f' must be at least 3"]),
            ),
            row(
                "text blank",
                one("text", &[], None),
                json!({"f":"   "}),
                Some(&["Field 'f' is required"]),
            ),
            row(
                "text null",
                one("text", &[], None),
                json!({"f":null}),
                Some(&["Field 'f' is required"]),
            ),
            row(
                "text 5",
                one("text", &[], None),
                json!({"f":5}),
                Some(&["Field 'f' must be a string"]),
            ),
            row(
                "text min 3, 12",
                one("text", &[("min", "3")], None),
                json!({"f":12}),
                Some(&["Field 'f' must be a string", "Field 'f' must be at least 3"]),
            ),
            row(
                "text max 1 emoji",
                one("text", &[("max", "1")], None),
                json!({"f":"😀"}),
                None,
            ),
            row(
                "email a@b",
                one("email", &[], None),
                json!({"f":"a@b"}),
                Some(&["Field 'f' must be a valid email address"]),
            ),
            row(
                "email ä@b.de",
                one("email", &[], None),
                json!({"f":"ä@b.de"}),
                Some(&["Field 'f' must be a valid email address"]),
            ),
            row(
                "url a-b",
                one("url", &[], None),
                json!({"f":"https://example.com/a-b"}),
                Some(&["Field 'f' must be a valid URL"]),
            ),
            row(
                "url q=a:b",
                one("url", &[], None),
                json!({"f":"https://e.com/?q=a:b"}),
                Some(&["Field 'f' must be a valid URL"]),
            ),
            row(
                "url ftp",
                one("url", &[], None),
                json!({"f":"ftp://example.com"}),
                Some(&["Field 'f' must be a valid URL"]),
            ),
            row(
                "url ok",
                one("url", &[], None),
                json!({"f":"https://example.com/a/b?x=1&y=2#frag"}),
                None,
            ),
            row(
                "number '5'",
                one("number", &[], None),
                json!({"f":"5"}),
                None,
            ),
            row(
                "number true",
                one("number", &[], None),
                json!({"f":true}),
                None,
            ),
            row(
                "number 'nan'",
                one("number", &[], None),
                json!({"f":"nan"}),
                None,
            ),
            row("number 0", one("number", &[], None), json!({"f":0}), None),
            row(
                "number 'abc'",
                one("number", &[], None),
                json!({"f":"abc"}),
                Some(&["Field 'f' must be a number"]),
            ),
            row(
                "number [1]",
                one("number", &[], None),
                json!({"f":[1]}),
                Some(&["Field 'f' must be a number"]),
            ),
            row(
                "number min 18, 17.5",
                one("number", &[("min", "18")], None),
                json!({"f":17.5}),
                Some(&["Field 'f' must be at least 18"]),
            ),
            row(
                "number min '1.5', 0",
                one("number", &[("min", "1.5")], None),
                json!({"f":0}),
                None,
            ),
            row(
                "number integer 2.0",
                one("number", &[("format", "integer")], None),
                json!({"f":2.0}),
                None,
            ),
            row(
                "number integer '3'",
                one("number", &[("format", "integer")], None),
                json!({"f":"3"}),
                None,
            ),
            row(
                "boolean 'true'",
                one("boolean", &[], None),
                json!({"f":"true"}),
                Some(&["Field 'f' must be a boolean"]),
            ),
            row(
                "boolean missing",
                one("boolean", &[], None),
                json!({}),
                Some(&["Required field 'f' is missing"]),
            ),
            row(
                "checkbox 1",
                one("checkbox", &[], None),
                json!({"f":1}),
                Some(&["Field 'f' must be a boolean"]),
            ),
            row(
                "option A",
                one("option", &[("min", "1"), ("max", "1")], ab.clone()),
                json!({"f":"A"}),
                None,
            ),
            row(
                "option Z",
                one("option", &[("min", "1"), ("max", "1")], ab.clone()),
                json!({"f":"Z"}),
                None,
            ),
            row(
                "option max 1 [A,B]",
                one("option", &[("max", "1")], None),
                json!({"f":["A","B"]}),
                Some(&["Field 'f' must be at most 1"]),
            ),
            row(
                "option []",
                one("option", &[], None),
                json!({"f":[]}),
                Some(&["Field 'f' is required"]),
            ),
            row(
                "option 0",
                one("option", &[], None),
                json!({"f":0}),
                Some(&["Field 'f' must be a string or list"]),
            ),
            row(
                "radio [A]",
                one("radio", &[], None),
                json!({"f":["A"]}),
                Some(&["Field 'f' must be a string"]),
            ),
            row(
                "none missing",
                one("none", &[], None),
                json!({}),
                Some(&["Required field 'f' is missing"]),
            ),
            row(
                "hidden missing",
                one("hidden", &[], None),
                json!({}),
                Some(&["Required field 'f' is missing"]),
            ),
            row(
                "text optional 'false' missing",
                one("text", &[("optional", "false")], None),
                json!({}),
                None,
            ),
            row(
                "text optional min 3 ''",
                one("text", &[("optional", "true"), ("min", "3")], None),
                json!({"f":""}),
                None,
            ),
            row(
                "text optional min 3 null",
                one("text", &[("optional", "true"), ("min", "3")], None),
                json!({"f":null}),
                None,
            ),
            row(
                "date min 2024-01-01",
                one("date", &[("min", "2024-01-01")], None),
                json!({"f":"2023-12-31"}),
                Some(&["Field 'f' must be at least 2024-01-01"]),
            ),
            row(
                "date hello",
                one("date", &[], None),
                json!({"f":"hello"}),
                None,
            ),
            row(
                "tel tel-pattern",
                one("tel", &[("format", "tel-pattern")], None),
                json!({"f":"+1 (234) 567-8900"}),
                None,
            ),
            row(
                "file accept url",
                one("file", &[("accept", ".pdf")], None),
                json!({"f":"https://x/y.exe"}),
                None,
            ),
            row(
                "file accept doc.exe",
                one("file", &[("accept", ".pdf")], None),
                json!({"f":"doc.exe"}),
                Some(&["Field 'f' file type not accepted"]),
            ),
            row(
                "range max 10 '11'",
                one("range", &[("max", "10")], None),
                json!({"f":"11"}),
                Some(&["Field 'f' must be at most 10"]),
            ),
            row(
                "text min 2 min 5",
                one("text", &[("min", "2"), ("min", "5")], None),
                json!({"f":"abc"}),
                Some(&["Field 'f' must be at least 5"]),
            ),
            row(
                "text format uuid",
                one("text", &[("format", "uuid")], None),
                json!({"f":"x"}),
                None,
            ),
            row(
                "unknown type",
                one("foo", &[], None),
                json!({"f":{"x":1}}),
                None,
            ),
            row(
                "groups win over input_data",
                json!({
                    "input_data": [{"id": "zz", "type": "text", "name": "ZZ"}],
                    "input_groups": [
                        {"id": "g1", "title": "G1", "input_data": [{"id": "a", "type": "text", "name": "A"}]},
                        {"id": "g2", "title": "G2", "input_data": [{"id": "b", "type": "text", "name": "B"}]}
                    ]
                }),
                json!({"a":"x"}),
                Some(&["Required field 'b' is missing"]),
            ),
        ];
        // Rows where Strict deliberately differs (the module's quirks table).
        let strict_diffs: &[(&str, Expect)] = &[
            ("url a-b", None),
            ("url q=a:b", None),
            ("number true", Some(&["Field 'f' must be a number"])),
            ("number 'nan'", Some(&["Field 'f' must be a number"])),
            (
                "number min '1.5', 0",
                Some(&["Field 'f' must be at least 1.5"]),
            ),
            (
                "option Z",
                Some(&["Field 'f' must be one of the allowed values"]),
            ),
            ("none missing", None),
            ("hidden missing", None),
            (
                "date hello",
                Some(&["Field 'f' must be a valid date in YYYY-MM-DD format"]),
            ),
        ];
        for (name, exp) in strict_diffs {
            let r = rows
                .iter_mut()
                .find(|r| r.name == *name)
                .expect("row exists");
            r.strict = Some(*exp);
        }
        rows
    }

    fn check_rows(mode: Mode) {
        let mut failures = Vec::new();
        for r in vectors() {
            let expect = match mode {
                Mode::Reference => r.reference,
                Mode::Strict => r.strict.unwrap_or(r.reference),
            };
            let got = run(mode, &r.schema, r.input.clone());
            let ok = match (expect, &got) {
                (None, Ok(())) => true,
                (Some(msgs), Err(e)) => e.message == fail_msg(msgs),
                _ => false,
            };
            if !ok {
                failures.push(format!(
                    "[{mode:?}] row '{}': input {} expected {:?}, got {:?}",
                    r.name, r.input, expect, got
                ));
            }
        }
        assert!(
            failures.is_empty(),
            "failing rows:\n{}",
            failures.join("\n")
        );
    }

    #[test]
    fn conformance_vectors_reference() {
        check_rows(Mode::Reference);
    }

    #[test]
    fn conformance_vectors_strict_differ_only_where_documented() {
        check_rows(Mode::Strict);
    }

    #[test]
    fn groups_rule_field_errors_and_top_level_ignored() {
        let schema = json!({
            "input_data": [{"id": "zz", "type": "text"}],
            "input_groups": [
                {"id": "g1", "title": "G1", "input_data": [{"id": "a", "type": "text"}]},
                {"id": "g2", "title": "G2", "input_data": [{"id": "b", "type": "text"}]}
            ]
        });
        let s = Schema::from_json(&schema, Mode::Reference).unwrap();
        assert!(s.is_grouped());
        let ids: Vec<&str> = s.fields().iter().map(|f| f.id.as_str()).collect();
        assert_eq!(ids, ["a", "b"]);
        let err = s.validate(&json!({"a": "x"})).unwrap_err();
        let mut expected = BTreeMap::new();
        expected.insert(
            "b".to_string(),
            vec!["Required field 'b' is missing".to_string()],
        );
        assert_eq!(err.field_errors, expected);
        // `zz` is unknown now, so sending it is accepted.
        assert!(s.validate(&json!({"a": "x", "b": "y", "zz": 5})).is_ok());
    }

    #[test]
    fn empty_groups_fall_back_to_input_data() {
        let schema = json!({"input_groups": [], "input_data": [{"id": "a", "type": "text"}]});
        let s = Schema::from_json(&schema, Mode::Reference).unwrap();
        assert!(!s.is_grouped());
        assert_eq!(s.fields()[0].id, "a");
        let schema = json!({"input_groups": null, "input_data": null});
        let s = Schema::from_json(&schema, Mode::Reference).unwrap();
        assert!(s.fields().is_empty());
        assert!(s.validate(&json!({"anything": 1})).is_ok());
    }

    #[test]
    fn schema_coerces_scalar_validation_values() {
        let schema = json!({"input_data": [{"id": "f", "type": "text", "validations": [
            {"validation": "optional", "value": true},
            {"validation": "min", "value": 3}
        ]}]});
        let s = Schema::from_json(&schema, Mode::Reference).unwrap();
        let f = &s.fields()[0];
        assert_eq!(f.validations[0].value, "true");
        assert_eq!(f.validations[1].value, "3");
        assert!(f.is_optional());
        assert_eq!(f.name, "f");
        assert!(s.validate(&json!({})).is_ok());
        assert_eq!(
            s.validate(&json!({"f": "ab"})).unwrap_err().message,
            "Validation failed: Field 'f' must be at least 3"
        );
    }

    #[test]
    fn schema_errors_name_the_field() {
        let bad_value = json!({"input_data": [{"id": "f", "type": "text", "validations": [
            {"validation": "min", "value": {"x": 1}}
        ]}]});
        let e = Schema::from_json(&bad_value, Mode::Reference).unwrap_err();
        assert!(e.message.contains("'f'"), "{}", e.message);
        let missing_value = json!({"input_data": [{"id": "g", "type": "text", "validations": [
            {"validation": "min"}
        ]}]});
        let e = Schema::from_json(&missing_value, Mode::Reference).unwrap_err();
        assert!(e.message.contains("'g'"), "{}", e.message);
        let e = Schema::from_json(&json!({"input_data": [{"type": "text"}]}), Mode::Reference)
            .unwrap_err();
        assert!(e.message.contains("input_data[0]"), "{}", e.message);
        let e =
            Schema::from_json(&json!({"input_data": [{"id": "h"}]}), Mode::Reference).unwrap_err();
        assert!(e.message.contains("'h'"), "{}", e.message);
        assert!(Schema::from_json(&json!([1]), Mode::Reference).is_err());
        assert!(Schema::from_json(&json!({"input_data": {"id": "x"}}), Mode::Reference).is_err());
    }

    #[test]
    fn duplicate_ids_reference_last_wins_strict_rejects() {
        let schema = json!({"input_data": [
            {"id": "d", "type": "number"},
            {"id": "d", "type": "text"}
        ]});
        let s = Schema::from_json(&schema, Mode::Reference).unwrap();
        assert_eq!(s.field("d").unwrap().field_type, "text");
        assert_eq!(
            s.validate(&json!({"d": 5})).unwrap_err().message,
            "Validation failed: Field 'd' must be a string"
        );
        // The missing check runs over every definition.
        let e = s.validate(&json!({})).unwrap_err();
        assert_eq!(
            e.message,
            "Validation failed: Required field 'd' is missing; Required field 'd' is missing"
        );
        let e = Schema::from_json(&schema, Mode::Strict).unwrap_err();
        assert!(e.message.contains("'d'"), "{}", e.message);
    }

    #[test]
    fn input_must_be_object_null_counts_as_empty() {
        let s = Schema::from_json(&one("text", &[], None), Mode::Reference).unwrap();
        let e = s.validate(&json!([1])).unwrap_err();
        assert_eq!(
            e.message,
            "Validation failed: input_data must be a JSON object, got array"
        );
        assert_eq!(
            e.field_errors[""],
            vec!["input_data must be a JSON object, got array"]
        );
        let e = s.validate(&Value::Null).unwrap_err();
        assert_eq!(
            e.message,
            "Validation failed: Required field 'f' is missing"
        );
    }

    #[test]
    fn present_messages_before_missing_and_unknown_keys_ignored() {
        let schema = json!({"input_data": [
            {"id": "a", "type": "text"},
            {"id": "z", "type": "number"},
            {"id": "m", "type": "boolean"}
        ]});
        let e = run(
            Mode::Reference,
            &schema,
            json!({"z": "x", "a": 1, "extra": []}),
        )
        .unwrap_err();
        assert_eq!(
            e.message,
            "Validation failed: Field 'a' must be a string; Field 'z' must be a number; Required field 'm' is missing"
        );
        assert_eq!(e.field_errors.len(), 3);
    }

    #[test]
    fn strict_url_check() {
        let s = Schema::from_json(&one("url", &[], None), Mode::Strict).unwrap();
        for ok in [
            "https://example.com/a-b",
            "https://e.com/?q=a:b",
            "http://localhost:8080/x_y~z?a=1&b=%20#top",
            "HTTPS://user:pw@example.com./",
            "http://[::1]:80/",
            "https://bücher.de/ä",
        ] {
            assert!(s.validate(&json!({ "f": ok })).is_ok(), "{ok}");
        }
        for bad in [
            "ftp://example.com",
            "https://",
            "https:///x",
            "https://exa mple.com",
            "https://e.com:99999/",
            "https://e.com/%zz",
            "https://e..com/",
            "https://e.com/\n",
            "mailto:a@b.de",
        ] {
            assert!(s.validate(&json!({ "f": bad })).is_err(), "{bad}");
        }
        // Reference also accepts Unicode \w.
        let r = Schema::from_json(&one("url", &[], None), Mode::Reference).unwrap();
        assert!(r.validate(&json!({"f": "https://bücher.de/ä"})).is_ok());
    }

    #[test]
    fn strict_option_and_radio_membership() {
        let data = Some(json!({"values": ["A", "B"]}));
        let opt = Schema::from_json(&one("option", &[], data.clone()), Mode::Strict).unwrap();
        assert!(opt.validate(&json!({"f": ["A", "B"]})).is_ok());
        assert_eq!(
            opt.validate(&json!({"f": ["A", "Z"]})).unwrap_err().message,
            "Validation failed: Field 'f' must be one of the allowed values"
        );
        let radio = Schema::from_json(&one("radio", &[], data), Mode::Strict).unwrap();
        assert!(radio.validate(&json!({"f": "B"})).is_ok());
        assert!(radio.validate(&json!({"f": "Z"})).is_err());
        let reference = Schema::from_json(&one("radio", &[], None), Mode::Reference).unwrap();
        assert!(reference.validate(&json!({"f": "Z"})).is_ok());
    }

    #[test]
    fn strict_number_rejects_bool_nonfinite_underscores() {
        let s = Schema::from_json(&one("number", &[], None), Mode::Strict).unwrap();
        for bad in [
            json!(true),
            json!("nan"),
            json!("-inf"),
            json!("1_000"),
            json!("1e400"),
        ] {
            assert_eq!(
                s.validate(&json!({ "f": bad })).unwrap_err().message,
                "Validation failed: Field 'f' must be a number",
                "{bad}"
            );
        }
        for ok in [json!("5"), json!(" 2.5 "), json!(-3), json!(1e10)] {
            assert!(s.validate(&json!({ "f": ok })).is_ok(), "{ok}");
        }
        let r = Schema::from_json(&one("number", &[], None), Mode::Reference).unwrap();
        for ok in [
            json!(true),
            json!("nan"),
            json!("-inf"),
            json!("1_000"),
            json!(" +Infinity "),
        ] {
            assert!(r.validate(&json!({ "f": ok })).is_ok(), "{ok}");
        }
    }

    #[test]
    fn strict_decimal_bounds() {
        let s = Schema::from_json(&one("number", &[("min", "1.5")], None), Mode::Strict).unwrap();
        assert_eq!(
            s.validate(&json!({"f": 1})).unwrap_err().message,
            "Validation failed: Field 'f' must be at least 1.5"
        );
        assert!(s.validate(&json!({"f": 1.5})).is_ok());
        let t = Schema::from_json(&one("text", &[("max", "2.5")], None), Mode::Strict).unwrap();
        assert!(t.validate(&json!({"f": "ab"})).is_ok());
        assert!(t.validate(&json!({"f": "abc"})).is_err());
        // An unparsable bound still passes in both modes.
        let u = Schema::from_json(&one("number", &[("min", "abc")], None), Mode::Strict).unwrap();
        assert!(u.validate(&json!({"f": 0})).is_ok());
    }

    #[test]
    fn strict_date_time_formats() {
        let cases: &[(&str, &str, bool)] = &[
            ("date", "2024-02-29", true),
            ("date", "2023-02-29", false),
            ("date", "2024-2-5", true),
            ("date", "2024-13-01", false),
            ("date", "0000-01-01", false),
            ("date", "2024-01-01\n", false),
            ("datetime-local", "2024-01-01T10:00", true),
            ("datetime-local", "2024-01-01T10:00:59.123456", true),
            ("datetime-local", "2024-01-01T10:00Z", false),
            ("datetime-local", "2024-01-01 10:00", false),
            ("time", "23:59", true),
            ("time", "9:5:3.123", true),
            ("time", "24:00", false),
            ("time", "12:00:60", false),
            ("month", "2024-12", true),
            ("month", "2024-13", false),
            ("week", "2024-W53", true),
            ("week", "2024-W54", false),
            ("week", "2024-w01", false),
        ];
        for (ty, v, ok) in cases {
            let s = Schema::from_json(&one(ty, &[], None), Mode::Strict).unwrap();
            assert_eq!(s.validate(&json!({ "f": v })).is_ok(), *ok, "{ty} {v:?}");
            let r = Schema::from_json(&one(ty, &[], None), Mode::Reference).unwrap();
            assert!(
                r.validate(&json!({ "f": v })).is_ok(),
                "reference {ty} {v:?}"
            );
        }
        let s = Schema::from_json(&one("time", &[], None), Mode::Strict).unwrap();
        assert_eq!(
            s.validate(&json!({"f": "25:00"})).unwrap_err().message,
            "Validation failed: Field 'f' must be a valid time in HH:MM[:SS[.sss]] format"
        );
    }

    #[test]
    fn strict_none_hidden_not_required_boolean_still_is() {
        for ty in ["none", "hidden"] {
            let s = Schema::from_json(&one(ty, &[], None), Mode::Strict).unwrap();
            assert!(s.validate(&json!({})).is_ok(), "{ty}");
        }
        let s = Schema::from_json(&one("boolean", &[], None), Mode::Strict).unwrap();
        assert!(s.validate(&json!({})).is_err());
    }

    #[test]
    fn trailing_newline_is_not_accepted() {
        let e = Schema::from_json(&one("email", &[], None), Mode::Reference).unwrap();
        assert!(e.validate(&json!({"f": "a@b.de\n"})).is_err());
        let u = Schema::from_json(&one("url", &[], None), Mode::Reference).unwrap();
        assert!(u.validate(&json!({"f": "https://e.com\n"})).is_err());
        let t =
            Schema::from_json(&one("text", &[("format", "email")], None), Mode::Reference).unwrap();
        assert!(t.validate(&json!({"f": "a@b.de\n"})).is_err());
    }

    #[test]
    fn python_strip_whitespace() {
        let s = Schema::from_json(&one("text", &[], None), Mode::Reference).unwrap();
        for blank in ["\u{1c}\u{1f}", "\u{a0}\u{3000}\t\n", "\u{85}"] {
            assert_eq!(
                s.validate(&json!({ "f": blank })).unwrap_err().message,
                "Validation failed: Field 'f' is required"
            );
        }
        // Zero-width space is not whitespace in Python.
        assert!(s.validate(&json!({"f": "\u{200b}"})).is_ok());
    }

    #[test]
    fn text_length_uses_python_str() {
        let s = Schema::from_json(&one("text", &[("min", "5")], None), Mode::Reference).unwrap();
        // str(True) == "True" (4 chars).
        assert_eq!(
            s.validate(&json!({"f": true})).unwrap_err().message,
            "Validation failed: Field 'f' must be a string; Field 'f' must be at least 5"
        );
        // str(False) == "False" (5 chars).
        assert_eq!(
            s.validate(&json!({"f": false})).unwrap_err().message,
            "Validation failed: Field 'f' must be a string"
        );
        let m = Schema::from_json(&one("text", &[("max", "3")], None), Mode::Reference).unwrap();
        // str(12.0) == "12.0" (4 chars).
        assert_eq!(
            m.validate(&json!({"f": 12.0})).unwrap_err().message,
            "Validation failed: Field 'f' must be a string; Field 'f' must be at most 3"
        );
        assert_eq!(
            m.validate(&json!({"f": 123})).unwrap_err().message,
            "Validation failed: Field 'f' must be a string"
        );
        assert!(m.validate(&json!({"f": "é😀a"})).is_ok());
        assert_eq!(
            py_str(&json!([1, "a", null, {"k": false}])),
            "[1, 'a', None, {'k': False}]"
        );
        assert_eq!(
            py_str(&json!(["it's", "\u{7f}", "\n"])),
            r#"["it's", '\x7f', '\n']"#
        );
    }

    #[test]
    fn python_float_repr() {
        for (f, s) in [
            (12.0, "12.0"),
            (17.5, "17.5"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (1.5e-5, "1.5e-05"),
            (0.0001, "0.0001"),
            (-0.0, "-0.0"),
            (0.1, "0.1"),
            (-2.5e300, "-2.5e+300"),
            (123456.789, "123456.789"),
        ] {
            assert_eq!(py_float_repr(f), s);
        }
    }

    #[test]
    fn python_float_parsing() {
        let cases: &[(&str, Option<f64>)] = &[
            ("1_000", Some(1000.0)),
            (" 5 ", Some(5.0)),
            ("\u{a0}-2.5e1_0\u{85}", Some(-2.5e10)),
            ("5\u{1c}", None),
            (".5", Some(0.5)),
            ("5.", Some(5.0)),
            ("+1E+2", Some(100.0)),
            ("-iNf", Some(f64::NEG_INFINITY)),
            ("Infinity", Some(f64::INFINITY)),
            ("1e400", Some(f64::INFINITY)),
            ("\u{661}\u{662}", Some(12.0)),
            ("\u{1D7D9}", Some(1.0)),
            ("_1", None),
            ("1__0", None),
            ("1_", None),
            ("1_.5", None),
            (".", None),
            ("", None),
            ("1 0", None),
            ("0x10", None),
            ("infinit", None),
            ("1e", None),
            ("²", None),
        ];
        for (s, want) in cases {
            assert_eq!(py_float(s), *want, "{s:?}");
        }
        assert!(py_float("NaN").unwrap().is_nan());
        assert!(py_float("-nan").unwrap().is_nan());
    }

    #[test]
    fn python_int_bounds() {
        assert_eq!(py_int(" -1_0 "), Some(Bound::Int(-10)));
        assert_eq!(py_int("+007"), Some(Bound::Int(7)));
        assert_eq!(py_int("\u{663}"), Some(Bound::Int(3)));
        assert_eq!(py_int("\u{1c}3"), None);
        for bad in ["1.5", "", "+", "1_", "_1", "1 0", "0x1", "+ 1", "1e3"] {
            assert_eq!(py_int(bad), None, "{bad:?}");
        }
        assert!(matches!(py_int(&"9".repeat(50)), Some(Bound::Float(_))));
        // Exact float-vs-int comparison, NaN compares false.
        assert_eq!(Bound::Int(18).cmp_f64(17.999999999), Some(Ordering::Less));
        assert_eq!(Bound::Int(18).cmp_f64(18.0), Some(Ordering::Equal));
        assert_eq!(Bound::Int(18).cmp_f64(18.5), Some(Ordering::Greater));
        assert_eq!(Bound::Int(-2).cmp_f64(-1.5), Some(Ordering::Greater));
        assert_eq!(Bound::Int(0).cmp_f64(f64::NAN), None);
        let n = Schema::from_json(
            &one("number", &[("min", "0"), ("max", "9")], None),
            Mode::Reference,
        )
        .unwrap();
        assert_eq!(
            n.validate(&json!({"f": "nan"})).unwrap_err().message,
            "Validation failed: Field 'f' must be at least 0; Field 'f' must be at most 9"
        );
        // A bound with spaces is quoted verbatim.
        let sp =
            Schema::from_json(&one("number", &[("min", " 3 ")], None), Mode::Reference).unwrap();
        assert_eq!(
            sp.validate(&json!({"f": 2})).unwrap_err().message,
            "Validation failed: Field 'f' must be at least  3 "
        );
    }

    #[test]
    fn counts_for_option_checkbox_radio() {
        let c =
            Schema::from_json(&one("checkbox", &[("min", "1")], None), Mode::Reference).unwrap();
        assert_eq!(
            c.validate(&json!({"f": false})).unwrap_err().message,
            "Validation failed: Field 'f' must be at least 1"
        );
        assert!(c.validate(&json!({"f": true})).is_ok());
        let o = Schema::from_json(&one("option", &[("min", "2")], None), Mode::Reference).unwrap();
        assert!(o.validate(&json!({"f": ["a", "b"]})).is_ok());
        assert!(o.validate(&json!({"f": "a"})).is_err());
    }

    #[test]
    fn format_rules() {
        let int = one("text", &[("format", "integer")], None);
        let s = Schema::from_json(&int, Mode::Reference).unwrap();
        // Type error, but the integer format itself passes for strings "3.0".
        assert!(s.validate(&json!({"f": "3.0"})).is_ok());
        assert!(s.validate(&json!({"f": "3.5"})).is_err());
        assert!(s.validate(&json!({"f": "inf"})).is_err());
        let n = Schema::from_json(
            &one("number", &[("format", "integer")], None),
            Mode::Reference,
        )
        .unwrap();
        assert!(n.validate(&json!({"f": true})).is_ok());
        assert!(n.validate(&json!({"f": 2.5})).is_err());
        // format email on a non-string fails (where the reference would skip validation).
        let e = Schema::from_json(
            &one("number", &[("format", "email")], None),
            Mode::Reference,
        )
        .unwrap();
        assert_eq!(
            e.validate(&json!({"f": 5})).unwrap_err().message,
            "Validation failed: Field 'f' must match format: email"
        );
        let ne = Schema::from_json(
            &one("foo", &[("format", "nonempty")], None),
            Mode::Reference,
        )
        .unwrap();
        assert!(ne.validate(&json!({"f": {}})).is_ok());
        let tel = Schema::from_json(
            &one("tel", &[("format", "tel-pattern")], None),
            Mode::Reference,
        )
        .unwrap();
        assert!(tel.validate(&json!({"f": "\u{661}\u{662}-3"})).is_ok());
        assert!(tel.validate(&json!({"f": "12a"})).is_err());
        // Empty kind or value: the rule is skipped.
        let skip = Schema::from_json(
            &one("text", &[("min", ""), ("", "5")], None),
            Mode::Reference,
        )
        .unwrap();
        assert!(skip.validate(&json!({"f": "a"})).is_ok());
    }

    #[test]
    fn accept_rules() {
        let cases: &[(&str, &str, bool)] = &[
            ("image/*", "photo.PNG", true),
            ("image/*", "doc.pdf", false),
            ("*", "x.anything", true),
            (" .doc , *.pdf", "a.b.PDF", true),
            (".pdf", "nodot", false),
            (".pdf", "http://x/y.exe", true),
            (".pdf", "HTTP://x/y.exe", false),
        ];
        for (accept, v, ok) in cases {
            let s = Schema::from_json(&one("file", &[("accept", accept)], None), Mode::Reference)
                .unwrap();
            assert_eq!(s.validate(&json!({ "f": v })).is_ok(), *ok, "{accept} {v}");
        }
        // Other types ignore accept.
        let t =
            Schema::from_json(&one("text", &[("accept", ".pdf")], None), Mode::Reference).unwrap();
        assert!(t.validate(&json!({"f": "doc.exe"})).is_ok());
    }

    #[test]
    fn to_json_round_trips_flat_and_grouped() {
        let flat = json!({"input_data": [{
            "id": "f", "type": "string",
            "data": {"placeholder": "x"},
            "validations": [{"validation": "optional", "value": true}]
        }]});
        let s = Schema::from_json(&flat, Mode::Reference).unwrap();
        assert_eq!(
            s.to_json(),
            json!({"input_data": [{
                "id": "f", "type": "string", "name": "f",
                "data": {"placeholder": "x"},
                "validations": [{"validation": "optional", "value": "true"}]
            }]})
        );
        let grouped = json!({
            "input_data": [{"id": "zz", "type": "text", "name": "ZZ"}],
            "input_groups": [
                {"id": "g1", "title": "One", "input_data": [{"id": "a", "type": "text", "name": "A"}]},
                {"id": "g2", "title": "Two", "input_data": [
                    {"id": "b", "type": "number", "name": "B"},
                    {"id": "c", "type": "none", "name": "C"}
                ]}
            ]
        });
        let g = Schema::from_json(&grouped, Mode::Strict).unwrap();
        let out = g.to_json();
        let mut expected = grouped.clone();
        expected.as_object_mut().unwrap().remove("input_data");
        assert_eq!(out, expected);
        assert_eq!(Schema::from_json(&out, Mode::Strict).unwrap(), g);
    }
}
