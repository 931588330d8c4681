//! JSON Schema ↔ MIP-003 Attachment 01 input schemas.
//!
//! An LMOS agent describes an action's input as JSON Schema (its Agent
//! Description is a W3C WoT Thing Description,
//! <https://www.w3.org/TR/wot-thing-description11/>); a MIP-003 agent
//! describes its input as Attachment 01 fields
//! (<https://github.com/masumi-network/masumi-improvement-proposals/blob/60d8788/MIPs/MIP-003/MIP-003-Attachement-01.md>,
//! validated by [`super::attachment01`]). [`to_json_schema`] and
//! [`from_json_schema`] translate between the two, both ways, by this table:
//!
//! | JSON Schema | Attachment 01 |
//! |---|---|
//! | `string`, `format` `email`/`uri`/`date`/`date-time` | `text`, or `email`/`url`/`date`/`datetime-local` |
//! | `integer` | `number` + validation `format: integer` |
//! | `number` | `number` |
//! | `boolean` | `boolean` |
//! | `enum` | `option` with `data.values`, min 1, max 1 |
//! | `minLength`/`maxLength`, `minimum`/`maximum` | `min` / `max` |
//! | not in `required` | validation `optional` |
//! | anything else | `textarea` carrying JSON text |
//!
//! Decisions the table leaves open:
//!
//! * **Integer marker.** The validator enforces integers through the rule
//!   `{"validation":"format","value":"integer"}`, so that rule is what
//!   [`from_json_schema`] writes. [`to_json_schema`] also reads
//!   `data.format: "integer"`.
//! * **One choice or many.** A JSON `enum` (one value) corresponds to an
//!   `option` whose bounds are exactly min 1 and max 1, the shape the table
//!   gives an `enum`. Any other `option` (no bounds, max 3, max 1 without a min)
//!   becomes `{"type":"array","items":{"enum":…},"minItems","maxItems"}`.
//!   That keeps its bounds through a round trip, and such an array reads back
//!   as an `option` with the same bounds. `radio` accepts a single string
//!   only, so it always becomes an `enum`. `const` is read as a one-value
//!   `enum`.
//! * **Date bounds.** On `date`, `datetime-local`, `time`, `month` and `week`,
//!   min/max compare strings. Core JSON Schema has no keyword for that, so
//!   they map to `formatMinimum`/`formatMaximum` (the ajv-formats keywords)
//!   in both directions.
//! * **Reading bounds.** Rules of one kind all apply (Attachment 01), so the strictest
//!   one is used. Bounds are read as decimals (the strict-mode reading). A
//!   bound that does not parse is dropped, because the validator lets it
//!   pass. Lengths are clamped at 0, with `minLength` rounded up and
//!   `maxLength` rounded down. For `integer`, `minimum` is rounded up and
//!   `maximum` down. Whole numbers are written without a fraction (`"2"`,
//!   not `"2.0"`): the reference validator parses bounds with Python `int()`.
//! * **JSON text.** [`from_json_schema`] keeps the property's original schema
//!   in the textarea's `data.json_schema` ([`JSON_SCHEMA_DATA_KEY`]), and its
//!   description says "JSON text". [`to_json_schema`] returns that schema
//!   verbatim, so object and array properties survive a round trip. A
//!   `textarea` without it holds prose and becomes a plain `string`.
//! * **Types JSON Schema lacks.** The validator checks nothing for `none` and
//!   for unknown types. They become `{}` (any JSON value) rather than
//!   `{"type":"string","description":"JSON text"}`: the agent accepts any
//!   value there, and a string would hide the structure from the client.
//!   `file` becomes a `uri` string, `checkbox` a `boolean` and `range` a
//!   `number`. `password`, `search`, `hidden`, `tel`, `textarea`, `time`,
//!   `month`, `week` and `color` become plain `string`s. Only the four
//!   table formats are written. JSON Schema's `time` requires a UTC offset,
//!   which HTML's `time` lacks. The `format` rules `email`/`url` become
//!   `format` `email`/`uri`, and `tel-pattern` becomes a `pattern`. min/max on
//!   `boolean`, `file`, `color`, `none` and unknown types are dropped,
//!   because the validator always passes them.
//! * **Annotations.** `name` ↔ `title` (`title` is omitted when it equals the
//!   id). `data.description` ↔ `description`, `data.default` ↔ `default`,
//!   and `data.placeholder` ↔ `examples[0]`. A placeholder is a hint, not a
//!   value a client should submit, so it does not become `default`. A
//!   `hidden` field's `data.value` becomes `default`.
//! * **Order.** serde_json is built here without `preserve_order`, so a
//!   `Map` iterates in key order. Properties therefore become fields sorted
//!   by key, and `required` lists ids in field order. Turning the feature on
//!   would make both follow document order, with no code change.
//! * **Groups and duplicates.** `input_groups` are flattened, and group ids
//!   and titles are lost. A duplicated id is described by its last
//!   definition, which is the one the validator checks values against. It is
//!   required if any definition is non-optional, because the missing-key
//!   check runs over all definitions (as in the reference validator).
//! * **Output shape.** `required` is omitted when empty. No
//!   `additionalProperties` is written, because the validator accepts
//!   undeclared keys.
//! * **Known loss.** An `enum` of numbers becomes an `option`, as the table
//!   says. The validator accepts only strings or lists for an `option`, so
//!   a client must send such values as text.

use std::collections::HashSet;

use serde_json::{json, Map, Number, Value};

use super::attachment01::{Field, Mode, Schema, SchemaError};

/// The `data` key under which a JSON-text `textarea` keeps the JSON Schema of
/// the property it stands for.
pub const JSON_SCHEMA_DATA_KEY: &str = "json_schema";

/// Attachment 01's `tel-pattern` format (as masumi 1.2.0's validator writes it), as a JSON
/// Schema `pattern`.
const TEL_PATTERN: &str = r"^[\d\s\-\(\)\+]+$";

/// Why a schema could not be converted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConvertError {
    /// The Attachment 01 schema is one the validator rejects.
    #[error(transparent)]
    Attachment01(#[from] SchemaError),
    /// A JSON Schema that is not an object (its JSON kind).
    #[error("a JSON Schema must be an object, got {0}")]
    NotAnObject(&'static str),
}

/// Renders an Attachment 01 schema as a JSON Schema object.
///
/// Accepts `{"input_data":[…]}`, `{"input_groups":[…]}` (parsed as
/// [`Schema::from_json`] does in [`Mode::Reference`], so duplicate ids are
/// allowed), or a bare array of fields. Returns
/// `{"type":"object","properties":{<id>:<schema>…},"required":[…]}`. Fails,
/// with the [`SchemaError`](super::attachment01::SchemaError) text, on
/// anything the validator would reject at load: a non-object document, or a
/// field without a string `id`/`type`. Never panics.
pub fn to_json_schema(attachment01: &Value) -> Result<Value, ConvertError> {
    let wrapped;
    let doc = if attachment01.is_array() {
        wrapped = Value::Object(Map::from_iter([(
            "input_data".to_owned(),
            attachment01.clone(),
        )]));
        &wrapped
    } else {
        attachment01
    };
    let schema = Schema::from_json(doc, Mode::Reference)?;
    let mut properties = Map::new();
    let mut required = Vec::new();
    let mut seen = HashSet::new();
    for field in schema.fields() {
        if !field.is_optional() && seen.insert(field.id.as_str()) {
            required.push(Value::String(field.id.clone()));
        }
        // With duplicate ids the last definition wins, as in the validator.
        properties.insert(field.id.clone(), property_schema(field));
    }
    let mut out = Map::new();
    out.insert("type".into(), "object".into());
    out.insert("properties".into(), Value::Object(properties));
    if !required.is_empty() {
        out.insert("required".into(), Value::Array(required));
    }
    Ok(Value::Object(out))
}

/// Renders a JSON Schema as an Attachment 01 schema, `{"input_data":[…]}`.
///
/// A schema with a `properties` object gives one field per property, and a
/// property missing from `required` gets an `optional` rule. A bare
/// `{"type":"object"}` gives no fields. Any other object schema (a
/// `{"type":"string"}`, an `enum`, `{}`, malformed `properties`) gives one
/// required field with id `"input"`. Every output is accepted by
/// [`Schema::from_json`] in both modes. Fails only when `schema` is not a
/// JSON object. Never panics.
pub fn from_json_schema(schema: &Value) -> Result<Value, ConvertError> {
    let Value::Object(obj) = schema else {
        return Err(ConvertError::NotAnObject(kind(schema)));
    };
    let fields: Vec<Value> = match obj.get("properties") {
        Some(Value::Object(props)) => {
            let required: HashSet<&str> = obj
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            props
                .iter()
                .map(|(id, s)| field_from(id, s, required.contains(id.as_str())))
                .collect()
        }
        None if single_type(obj) == Some("object") => Vec::new(),
        _ => vec![field_from("input", schema, true)],
    };
    Ok(json!({ "input_data": fields }))
}

/// The `min`, `max` and `format` arguments of a field. A rule with an empty
/// kind or value is skipped, as the validator skips it.
struct Rules<'a> {
    min: Vec<&'a str>,
    max: Vec<&'a str>,
    format: Vec<&'a str>,
}

impl<'a> Rules<'a> {
    fn of(field: &'a Field) -> Self {
        let mut rules = Rules {
            min: Vec::new(),
            max: Vec::new(),
            format: Vec::new(),
        };
        for rule in field.validations.iter().filter(|r| !r.value.is_empty()) {
            match rule.validation.as_str() {
                "min" => rules.min.push(&rule.value),
                "max" => rules.max.push(&rule.value),
                "format" => rules.format.push(&rule.value),
                _ => {}
            }
        }
        rules
    }

    /// The strictest parsable lower bound.
    fn lower(&self) -> Option<f64> {
        self.min
            .iter()
            .filter_map(|s| parse_bound(s))
            .reduce(f64::max)
    }

    /// The strictest parsable upper bound.
    fn upper(&self) -> Option<f64> {
        self.max
            .iter()
            .filter_map(|s| parse_bound(s))
            .reduce(f64::min)
    }

    fn has_format(&self, format: &str) -> bool {
        self.format.contains(&format)
    }
}

/// A min/max argument as a decimal: trimmed, `_` separators allowed, finite.
fn parse_bound(s: &str) -> Option<f64> {
    let digits: String = s.trim().chars().filter(|c| *c != '_').collect();
    digits.parse::<f64>().ok().filter(|x| x.is_finite())
}

/// A finite number as JSON, whole numbers as integers where they fit.
fn number(x: f64) -> Value {
    // `as` saturates, so the range check keeps the cast exact.
    if x.fract() == 0.0 && x.abs() < 9.0e18 {
        Value::from(x as i64)
    } else {
        Number::from_f64(x).map_or(Value::Null, Value::Number)
    }
}

/// A length or count bound: a non-negative integer.
fn count(x: f64) -> Value {
    Value::from(x.max(0.0) as u64)
}

/// The JSON Schema of one Attachment 01 field (the module table, read left).
fn property_schema(field: &Field) -> Value {
    let get = |key: &str| {
        field
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .filter(|v| !v.is_null())
    };
    let ty = field.normalized_type();
    if ty == "textarea" {
        if let Some(s @ (Value::Object(_) | Value::Bool(_))) = get(JSON_SCHEMA_DATA_KEY) {
            return s.clone();
        }
    }
    let rules = Rules::of(field);
    let mut s = Map::new();
    match ty {
        "text" | "textarea" | "password" | "search" | "hidden" | "tel" => {
            text_schema(&mut s, &rules, None);
        }
        "email" => text_schema(&mut s, &rules, Some("email")),
        "url" => text_schema(&mut s, &rules, Some("uri")),
        "file" => {
            s.insert("type".into(), "string".into());
            s.insert("format".into(), "uri".into());
        }
        "date" => dated_schema(&mut s, &rules, Some("date")),
        "datetime-local" => dated_schema(&mut s, &rules, Some("date-time")),
        "time" | "month" | "week" => dated_schema(&mut s, &rules, None),
        "color" => {
            s.insert("type".into(), "string".into());
        }
        "number" | "range" => {
            let integer = rules.has_format("integer")
                || get("format").and_then(Value::as_str) == Some("integer");
            let ty = if integer { "integer" } else { "number" };
            s.insert("type".into(), ty.into());
            if let Some(lo) = rules.lower() {
                s.insert("minimum".into(), number(lo));
            }
            if let Some(hi) = rules.upper() {
                s.insert("maximum".into(), number(hi));
            }
        }
        "boolean" | "checkbox" => {
            s.insert("type".into(), "boolean".into());
        }
        "option" => choice_schema(&mut s, &rules, get("values"), false),
        "radio" => choice_schema(&mut s, &rules, get("values"), true),
        // `none` and unknown types: the validator checks nothing, so any value.
        _ => {}
    }
    if field.name != field.id {
        s.insert("title".into(), Value::String(field.name.clone()));
    }
    if let Some(Value::String(d)) = get("description") {
        s.insert("description".into(), Value::String(d.clone()));
    }
    let hidden_value = if ty == "hidden" { get("value") } else { None };
    if let Some(d) = get("default").or(hidden_value) {
        s.insert("default".into(), d.clone());
    }
    if let Some(p) = get("placeholder") {
        s.insert("examples".into(), Value::Array(vec![p.clone()]));
    }
    Value::Object(s)
}

/// A string whose min/max count code points (JSON Schema lengths do too).
fn text_schema(s: &mut Map<String, Value>, rules: &Rules, format: Option<&str>) {
    s.insert("type".into(), "string".into());
    let format = format.or(if rules.has_format("email") {
        Some("email")
    } else if rules.has_format("url") {
        Some("uri")
    } else {
        None
    });
    if let Some(f) = format {
        s.insert("format".into(), f.into());
    }
    if rules.has_format("tel-pattern") {
        s.insert("pattern".into(), TEL_PATTERN.into());
    }
    if let Some(lo) = rules.lower() {
        s.insert("minLength".into(), count(lo.ceil()));
    }
    if let Some(hi) = rules.upper() {
        s.insert("maxLength".into(), count(hi.floor()));
    }
}

/// A string whose min/max compare lexicographically (as the validator compares date and time
/// types).
fn dated_schema(s: &mut Map<String, Value>, rules: &Rules, format: Option<&str>) {
    s.insert("type".into(), "string".into());
    if let Some(f) = format {
        s.insert("format".into(), f.into());
    }
    if let Some(lo) = rules.min.iter().max() {
        s.insert("formatMinimum".into(), (*lo).into());
    }
    if let Some(hi) = rules.max.iter().min() {
        s.insert("formatMaximum".into(), (*hi).into());
    }
}

/// An `option`/`radio`: one `enum` value for exactly min 1/max 1 (or a
/// radio), otherwise an array of them with the bounds as item counts.
fn choice_schema(
    s: &mut Map<String, Value>,
    rules: &Rules,
    values: Option<&Value>,
    single_only: bool,
) {
    let mut item = Map::new();
    match values {
        Some(Value::Array(vs)) if !vs.is_empty() => {
            if vs.iter().all(Value::is_string) {
                item.insert("type".into(), "string".into());
            }
            item.insert("enum".into(), Value::Array(vs.clone()));
        }
        _ => {
            item.insert("type".into(), "string".into());
        }
    }
    let (lo, hi) = (rules.lower(), rules.upper());
    let is_one = |b: Option<f64>| b.is_some_and(|x| (x - 1.0).abs() < f64::EPSILON);
    if single_only || (is_one(lo) && is_one(hi)) {
        s.extend(item);
        return;
    }
    s.insert("type".into(), "array".into());
    s.insert("items".into(), Value::Object(item));
    if let Some(lo) = lo {
        s.insert("minItems".into(), count(lo.ceil()));
    }
    if let Some(hi) = hi {
        s.insert("maxItems".into(), count(hi.floor()));
    }
}

/// The Attachment 01 field for property `id` (the module table, read right).
fn field_from(id: &str, schema: &Value, required: bool) -> Value {
    let empty = Map::new();
    let s = schema.as_object().unwrap_or(&empty);
    let mut data = Map::new();
    let mut rules: Vec<(&str, String)> = Vec::new();
    let items_enum = s
        .get("items")
        .and_then(Value::as_object)
        .and_then(enum_values);
    let field_type = if let Some(values) = enum_values(s) {
        data.insert("values".into(), Value::Array(values));
        rules.push(("min", "1".into()));
        rules.push(("max", "1".into()));
        "option"
    } else {
        match (single_type(s), items_enum) {
            (Some("string"), _) => string_field(s, &mut rules),
            (Some("integer"), _) => {
                rules.push(("format", "integer".into()));
                push_bound(&mut rules, "min", s.get("minimum"), f64::ceil);
                push_bound(&mut rules, "max", s.get("maximum"), f64::floor);
                "number"
            }
            (Some("number"), _) => {
                push_bound(&mut rules, "min", s.get("minimum"), |x| x);
                push_bound(&mut rules, "max", s.get("maximum"), |x| x);
                "number"
            }
            (Some("boolean"), _) => "boolean",
            (Some("array"), Some(values)) => {
                data.insert("values".into(), Value::Array(values));
                push_bound(&mut rules, "min", s.get("minItems"), f64::ceil);
                push_bound(&mut rules, "max", s.get("maxItems"), f64::floor);
                "option"
            }
            _ => {
                data.insert(JSON_SCHEMA_DATA_KEY.into(), schema.clone());
                "textarea"
            }
        }
    };
    // A JSON-text textarea holds JSON text, so its hints are JSON text too.
    let json_text = field_type == "textarea";
    let text_of = |v: &Value| match v {
        Value::String(t) if !json_text => t.clone(),
        other => other.to_string(),
    };
    match (s.get("description").and_then(Value::as_str), json_text) {
        (Some(d), false) => {
            data.insert("description".into(), d.into());
        }
        (Some(d), true) => {
            data.insert("description".into(), format!("{d} (JSON text)").into());
        }
        (None, true) => {
            data.insert("description".into(), "JSON text".into());
        }
        (None, false) => {}
    }
    if let Some(d) = s.get("default") {
        let d = if json_text {
            Value::String(d.to_string())
        } else {
            d.clone()
        };
        data.insert("default".into(), d);
    }
    if let Some(e) = s
        .get("examples")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
    {
        data.insert("placeholder".into(), Value::String(text_of(e)));
    }
    let name = s
        .get("title")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .unwrap_or(id);
    let mut validations: Vec<Value> = rules
        .into_iter()
        .map(|(k, v)| json!({ "validation": k, "value": v }))
        .collect();
    if !required {
        validations.push(json!({ "validation": "optional", "value": "true" }));
    }
    let mut field = Map::new();
    field.insert("id".into(), id.into());
    field.insert("type".into(), field_type.into());
    field.insert("name".into(), name.into());
    if !data.is_empty() {
        field.insert("data".into(), Value::Object(data));
    }
    if !validations.is_empty() {
        field.insert("validations".into(), Value::Array(validations));
    }
    Value::Object(field)
}

/// The Attachment 01 type for a `string` schema, pushing its bounds.
fn string_field(s: &Map<String, Value>, rules: &mut Vec<(&str, String)>) -> &'static str {
    let (ty, dated) = match s.get("format").and_then(Value::as_str) {
        Some("email") => ("email", false),
        Some("uri") => ("url", false),
        Some("date") => ("date", true),
        Some("date-time") => ("datetime-local", true),
        _ => ("text", false),
    };
    if dated {
        for (kind, key) in [("min", "formatMinimum"), ("max", "formatMaximum")] {
            if let Some(Value::String(b)) = s.get(key) {
                rules.push((kind, b.clone()));
            }
        }
    } else {
        push_bound(rules, "min", s.get("minLength"), f64::ceil);
        push_bound(rules, "max", s.get("maxLength"), f64::floor);
    }
    ty
}

/// Pushes a numeric keyword as a min/max rule. Integers are kept exact, and
/// other numbers are rounded by `round` and printed without a `.0`.
/// Non-numbers are ignored.
fn push_bound<'k>(
    rules: &mut Vec<(&'k str, String)>,
    kind: &'k str,
    bound: Option<&Value>,
    round: fn(f64) -> f64,
) {
    let Some(Value::Number(n)) = bound else {
        return;
    };
    let text = if n.is_i64() || n.is_u64() {
        n.to_string()
    } else {
        match n.as_f64().map(round).filter(|x| x.is_finite()) {
            // f64's Display never uses an exponent and drops a `.0`.
            Some(x) => x.to_string(),
            None => return,
        }
    };
    rules.push((kind, text));
}

/// The values of an `enum` (non-empty) or of a `const`.
fn enum_values(s: &Map<String, Value>) -> Option<Vec<Value>> {
    match s.get("enum") {
        Some(Value::Array(vs)) if !vs.is_empty() => Some(vs.clone()),
        _ => s.get("const").map(|c| vec![c.clone()]),
    }
}

/// The schema's one `type`, with `"null"` ignored in a type list (a
/// nullable string is a string). `None` when absent or ambiguous.
fn single_type(s: &Map<String, Value>) -> Option<&str> {
    match s.get("type")? {
        Value::String(t) => Some(t),
        Value::Array(ts) => {
            let mut named = ts.iter().filter_map(Value::as_str).filter(|t| *t != "null");
            let first = named.next()?;
            named.next().is_none().then_some(first)
        }
        _ => None,
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// The JSON Schema of a single Attachment 01 field with id `f`.
    fn prop_of(field: Value) -> Value {
        let doc = json!({ "input_data": [field] });
        to_json_schema(&doc).expect("schema converts")["properties"]["f"].clone()
    }

    /// The Attachment 01 field for a single required property `f`.
    fn field_of(property: Value) -> Value {
        let schema = json!({"type": "object", "properties": {"f": property}, "required": ["f"]});
        let out = from_json_schema(&schema).expect("schema converts");
        assert_accepted(&out);
        out["input_data"][0].clone()
    }

    fn assert_accepted(doc: &Value) {
        for mode in [Mode::Reference, Mode::Strict] {
            if let Err(e) = Schema::from_json(doc, mode) {
                panic!("{mode:?} rejects {doc}: {e}");
            }
        }
    }

    fn rules(pairs: &[(&str, &str)]) -> Value {
        pairs
            .iter()
            .map(|(k, v)| json!({"validation": k, "value": v}))
            .collect()
    }

    #[test]
    fn string_types_become_strings_with_table_formats() {
        for (ty, format) in [
            ("text", None),
            ("string", None),
            ("textarea", None),
            ("password", None),
            ("tel", None),
            ("time", None),
            ("email", Some("email")),
            ("url", Some("uri")),
            ("date", Some("date")),
            ("datetime-local", Some("date-time")),
        ] {
            let mut want = json!({"type": "string"});
            if let Some(f) = format {
                want["format"] = f.into();
            }
            assert_eq!(prop_of(json!({"id": "f", "type": ty})), want, "{ty}");
        }
        for (format, ty) in [
            (None, "text"),
            (Some("email"), "email"),
            (Some("uri"), "url"),
            (Some("date"), "date"),
            (Some("date-time"), "datetime-local"),
            (Some("hostname"), "text"),
        ] {
            let mut property = json!({"type": "string"});
            if let Some(f) = format {
                property["format"] = f.into();
            }
            assert_eq!(
                field_of(property),
                json!({"id": "f", "type": ty, "name": "f"}),
                "{format:?}"
            );
        }
    }

    #[test]
    fn integer_is_number_with_format_integer() {
        let integer = json!({"id": "f", "type": "number", "name": "f",
            "validations": rules(&[("format", "integer")])});
        assert_eq!(prop_of(integer.clone()), json!({"type": "integer"}));
        assert_eq!(field_of(json!({"type": "integer"})), integer);
        // data.format is read too.
        assert_eq!(
            prop_of(json!({"id": "f", "type": "number", "data": {"format": "integer"}})),
            json!({"type": "integer"})
        );
        // The ADF example's event: rating 1..5.
        assert_eq!(
            field_of(json!({"type": "integer", "minimum": 1, "maximum": 5})),
            json!({"id": "f", "type": "number", "name": "f",
                "validations": rules(&[("format", "integer"), ("min", "1"), ("max", "5")])})
        );
        // Fractional bounds on an integer round inwards.
        assert_eq!(
            field_of(json!({"type": "integer", "minimum": 1.5, "maximum": 4.5}))["validations"],
            rules(&[("format", "integer"), ("min", "2"), ("max", "4")])
        );
    }

    #[test]
    fn number_and_boolean_map_directly() {
        assert_eq!(
            prop_of(json!({"id": "f", "type": "number"})),
            json!({"type": "number"})
        );
        assert_eq!(
            prop_of(json!({"id": "f", "type": "range"})),
            json!({"type": "number"})
        );
        assert_eq!(
            field_of(json!({"type": "number", "minimum": -2.5, "maximum": 2.0})),
            json!({"id": "f", "type": "number", "name": "f",
                "validations": rules(&[("min", "-2.5"), ("max", "2")])})
        );
        for ty in ["boolean", "checkbox"] {
            assert_eq!(
                prop_of(json!({"id": "f", "type": ty})),
                json!({"type": "boolean"})
            );
        }
        assert_eq!(
            field_of(json!({"type": "boolean"})),
            json!({"id": "f", "type": "boolean", "name": "f"})
        );
    }

    #[test]
    fn enum_is_single_option_and_other_options_are_arrays() {
        let single = json!({"id": "f", "type": "option", "name": "f",
            "data": {"values": ["A", "B"]},
            "validations": rules(&[("min", "1"), ("max", "1")])});
        let single_schema = json!({"type": "string", "enum": ["A", "B"]});
        assert_eq!(prop_of(single.clone()), single_schema);
        assert_eq!(field_of(single_schema), single);
        assert_eq!(field_of(json!({"enum": ["A", "B"]})), single);
        assert_eq!(
            field_of(json!({"const": "A"}))["data"],
            json!({"values": ["A"]})
        );

        let multi = json!({"id": "f", "type": "option", "name": "f",
            "data": {"values": ["A", "B", "C"]},
            "validations": rules(&[("min", "1"), ("max", "2")])});
        let multi_schema = json!({"type": "array",
            "items": {"type": "string", "enum": ["A", "B", "C"]},
            "minItems": 1, "maxItems": 2});
        assert_eq!(prop_of(multi.clone()), multi_schema);
        assert_eq!(field_of(multi_schema), multi);

        // No bounds: any number of choices.
        assert_eq!(
            prop_of(json!({"id": "f", "type": "option", "data": {"values": ["A"]}})),
            json!({"type": "array", "items": {"type": "string", "enum": ["A"]}})
        );
        // A radio takes a single string whatever its bounds.
        assert_eq!(
            prop_of(json!({"id": "f", "type": "radio", "data": {"values": ["A", 1]}})),
            json!({"enum": ["A", 1]})
        );
    }

    #[test]
    fn min_max_become_lengths_bounds_or_format_bounds() {
        let text = json!({"id": "f", "type": "text", "name": "f",
            "validations": rules(&[("min", "2"), ("max", "10")])});
        let text_schema = json!({"type": "string", "minLength": 2, "maxLength": 10});
        assert_eq!(prop_of(text.clone()), text_schema);
        assert_eq!(field_of(text_schema), text);

        let number = json!({"id": "f", "type": "number", "name": "f",
            "validations": rules(&[("min", "-3"), ("max", "18")])});
        let number_schema = json!({"type": "number", "minimum": -3, "maximum": 18});
        assert_eq!(prop_of(number.clone()), number_schema);
        assert_eq!(field_of(number_schema), number);

        let date = json!({"id": "f", "type": "date", "name": "f",
            "validations": rules(&[("min", "2024-01-01"), ("max", "2024-12-31")])});
        let date_schema = json!({"type": "string", "format": "date",
            "formatMinimum": "2024-01-01", "formatMaximum": "2024-12-31"});
        assert_eq!(prop_of(date.clone()), date_schema);
        assert_eq!(field_of(date_schema), date);

        // AND-ed rules: the strictest wins; unparsable and empty ones are dropped.
        assert_eq!(
            prop_of(json!({"id": "f", "type": "text", "validations": rules(&[
                ("min", "2"), ("min", " 5 "), ("max", "abc"), ("max", "9.5"), ("max", "")
            ])})),
            json!({"type": "string", "minLength": 5, "maxLength": 9})
        );
        assert_eq!(
            prop_of(json!({"id": "f", "type": "text", "validations": rules(&[("max", "-1")])})),
            json!({"type": "string", "maxLength": 0})
        );
        // The validator ignores bounds on booleans, so they are dropped.
        assert_eq!(
            prop_of(json!({"id": "f", "type": "boolean", "validations": rules(&[("min", "1")])})),
            json!({"type": "boolean"})
        );
    }

    #[test]
    fn format_rules_become_formats_and_patterns() {
        assert_eq!(
            prop_of(
                json!({"id": "f", "type": "text", "validations": rules(&[("format", "email")])})
            ),
            json!({"type": "string", "format": "email"})
        );
        assert_eq!(
            prop_of(
                json!({"id": "f", "type": "tel", "validations": rules(&[("format", "tel-pattern")])})
            ),
            json!({"type": "string", "pattern": TEL_PATTERN})
        );
    }

    #[test]
    fn optional_fields_are_not_required() {
        let doc = json!({"input_data": [
            {"id": "a", "type": "text", "name": "A"},
            {"id": "b", "type": "text", "validations": rules(&[("optional", "false")])}
        ]});
        assert_eq!(
            to_json_schema(&doc).expect("converts"),
            json!({"type": "object",
                "properties": {"a": {"type": "string", "title": "A"}, "b": {"type": "string"}},
                "required": ["a"]})
        );
        let back =
            from_json_schema(&json!({"properties": {"a": {"type": "string"}}})).expect("converts");
        assert_eq!(
            back,
            json!({"input_data": [{"id": "a", "type": "text", "name": "a",
                "validations": rules(&[("optional", "true")])}]})
        );
        // All optional: no `required` at all.
        let none = to_json_schema(&json!({"input_data": [
            {"id": "a", "type": "text", "validations": rules(&[("optional", "true")])}
        ]}))
        .expect("converts");
        assert_eq!(none.get("required"), None);
    }

    #[test]
    fn annotations_carry_name_description_default_placeholder() {
        let field = json!({"id": "f", "type": "text", "name": "Full name",
            "data": {"description": "Who you are", "default": "Ada", "placeholder": "e.g. Ada"}});
        let schema = json!({"type": "string", "title": "Full name",
            "description": "Who you are", "default": "Ada", "examples": ["e.g. Ada"]});
        assert_eq!(prop_of(field.clone()), schema);
        assert_eq!(field_of(schema), field);
        assert_eq!(
            prop_of(json!({"id": "f", "type": "hidden", "data": {"value": "v1"}})),
            json!({"type": "string", "default": "v1"})
        );
    }

    #[test]
    fn objects_arrays_and_untyped_become_json_textareas_and_come_back() {
        for property in [
            json!({"type": "object", "properties": {"x": {"type": "integer"}}}),
            json!({"type": "array", "items": {"type": "number"}}),
            json!({}),
            json!({"type": ["string", "number"]}),
            json!({"oneOf": [{"type": "string"}, {"type": "null"}]}),
            json!(true),
        ] {
            let field = field_of(property.clone());
            assert_eq!(field["type"], "textarea", "{property}");
            assert_eq!(field["data"][JSON_SCHEMA_DATA_KEY], property);
            assert_eq!(field["data"]["description"], "JSON text");
            let doc = json!({ "input_data": [field] });
            assert_eq!(
                to_json_schema(&doc).expect("converts")["properties"]["f"],
                property
            );
        }
        let described = field_of(json!({"type": "object", "description": "Options",
            "default": {"a": 1}, "examples": [[1]]}));
        assert_eq!(described["data"]["description"], "Options (JSON text)");
        assert_eq!(described["data"]["default"], r#"{"a":1}"#);
        assert_eq!(described["data"]["placeholder"], "[1]");
        // A nullable string is a string.
        assert_eq!(
            field_of(json!({"type": ["string", "null"]}))["type"],
            "text"
        );
    }

    #[test]
    fn unknown_and_display_types_accept_any_value() {
        for ty in ["none", "foo"] {
            assert_eq!(
                prop_of(json!({"id": "f", "type": ty, "data": {"description": "d"}})),
                json!({"description": "d"}),
                "{ty}"
            );
        }
        assert_eq!(
            prop_of(json!({"id": "f", "type": "file", "validations": rules(&[("min", "1")])})),
            json!({"type": "string", "format": "uri"})
        );
    }

    #[test]
    fn lmos_example_maps_exactly() {
        let input = json!({"type": "object",
            "properties": {"question": {"type": "string"},
                           "interactionMode": {"type": "string", "enum": ["text", "voice"]}},
            "required": ["question", "interactionMode"]});
        let a01 = from_json_schema(&input).expect("converts");
        // serde_json has no `preserve_order` here: properties iterate by key.
        assert_eq!(
            a01,
            json!({"input_data": [
                {"id": "interactionMode", "type": "option", "name": "interactionMode",
                 "data": {"values": ["text", "voice"]},
                 "validations": [{"validation": "min", "value": "1"},
                                 {"validation": "max", "value": "1"}]},
                {"id": "question", "type": "text", "name": "question"}
            ]})
        );
        assert_accepted(&a01);
        let back = to_json_schema(&a01).expect("converts");
        let mut want = input.clone();
        want["required"] = json!(["interactionMode", "question"]);
        assert_eq!(back, want);
    }

    #[test]
    fn non_object_schemas_become_one_input_field() {
        assert_eq!(
            from_json_schema(&json!({"type": "string", "title": "Prompt"})).expect("converts"),
            json!({"input_data": [{"id": "input", "type": "text", "name": "Prompt"}]})
        );
        assert_eq!(
            from_json_schema(&json!({"enum": ["a"]})).expect("converts")["input_data"][0]["type"],
            "option"
        );
        assert_eq!(
            from_json_schema(&json!({"type": "object"})).expect("converts"),
            json!({"input_data": []})
        );
        let malformed =
            from_json_schema(&json!({"type": "object", "properties": 5, "required": 3}))
                .expect("converts");
        assert_eq!(malformed["input_data"][0]["id"], "input");
        assert_eq!(malformed["input_data"][0]["type"], "textarea");
        assert_accepted(&malformed);
    }

    #[test]
    fn groups_and_bare_arrays_are_flattened() {
        let grouped = json!({"input_groups": [
            {"id": "g1", "input_data": [{"id": "a", "type": "text"}]},
            {"id": "g2", "input_data": [{"id": "b", "type": "boolean"}]}
        ]});
        let bare = json!([{"id": "a", "type": "text"}, {"id": "b", "type": "boolean"}]);
        let want = json!({"type": "object",
            "properties": {"a": {"type": "string"}, "b": {"type": "boolean"}},
            "required": ["a", "b"]});
        assert_eq!(to_json_schema(&grouped).expect("converts"), want);
        assert_eq!(to_json_schema(&bare).expect("converts"), want);
        // Duplicate ids: the last definition describes, any required one requires.
        let dup = json!([
            {"id": "a", "type": "text"},
            {"id": "a", "type": "number", "validations": rules(&[("optional", "true")])}
        ]);
        assert_eq!(
            to_json_schema(&dup).expect("converts"),
            json!({"type": "object", "properties": {"a": {"type": "number"}}, "required": ["a"]})
        );
    }

    #[test]
    fn garbage_is_an_error_or_a_sensible_schema() {
        for bad in [json!(null), json!(3), json!("x"), json!(true)] {
            assert!(to_json_schema(&bad).is_err(), "{bad}");
            assert!(from_json_schema(&bad).is_err(), "{bad}");
        }
        for bad in [
            json!([1, "x", null]),
            json!({"input_data": 5}),
            json!({"input_data": [{"type": "text"}]}),
            json!({"input_data": [{"id": "f", "type": "text", "validations": [{"value": []}]}]}),
        ] {
            assert!(to_json_schema(&bad).is_err(), "{bad}");
        }
        assert_eq!(
            from_json_schema(&json!([1, 2])),
            Err(ConvertError::NotAnObject("array"))
        );
        assert_eq!(
            to_json_schema(&json!({})).expect("an empty schema converts"),
            json!({"type": "object", "properties": {}})
        );
        let odd = from_json_schema(&json!({"properties": {
            "a": null, "b": 7, "c": {"type": 5}, "d": {"type": "integer", "minimum": "3"},
            "e": {"type": "number", "maximum": 1e300}, "f": {"type": "array", "items": {"enum": []}}
        }}))
        .expect("converts");
        assert_accepted(&odd);
        assert_eq!(
            odd["input_data"][3]["validations"],
            rules(&[("format", "integer"), ("optional", "true")])
        );
        assert_eq!(
            odd["input_data"][4]["validations"][0]["value"],
            format!("1{}", "0".repeat(300))
        );
        assert_eq!(odd["input_data"][5]["type"], "textarea");
    }

    /// A generated Attachment 01 field of a round-trippable type, without its id.
    fn arb_field() -> impl Strategy<Value = Value> {
        let kinds = prop_oneof![
            Just("text"),
            Just("email"),
            Just("url"),
            Just("date"),
            Just("datetime-local"),
            Just("number"),
            Just("integer"),
            Just("boolean"),
            Just("option"),
            Just("single-option"),
        ];
        let length = proptest::option::of(0u16..300);
        let bound = proptest::option::of(-100_000i32..100_000);
        let day = proptest::option::of(1u32..29);
        (
            kinds,
            any::<bool>(),
            (length.clone(), length),
            (bound.clone(), bound),
            (day.clone(), day),
            proptest::collection::vec("[a-z]{1,5}", 1..5),
            proptest::option::of("[A-Za-z ]{1,10}"),
        )
            .prop_map(
                |(kind, optional, (lo_len, hi_len), (lo, hi), (lo_day, hi_day), values, name)| {
                    let lengths = [lo_len.map(|x| x.to_string()), hi_len.map(|x| x.to_string())];
                    let numbers = [lo.map(|x| x.to_string()), hi.map(|x| x.to_string())];
                    let dates = [lo_day, hi_day].map(|d| d.map(|d| format!("2024-03-{d:02}")));
                    let times =
                        [lo_day, hi_day].map(|d| d.map(|d| format!("2024-03-{d:02}T12:{d:02}")));
                    let mut rules = Vec::new();
                    let (ty, bounds) = match kind {
                        "text" | "email" | "url" => (kind, lengths),
                        "date" => ("date", dates),
                        "datetime-local" => ("datetime-local", times),
                        "number" => ("number", numbers),
                        "integer" => {
                            rules.push(json!({"validation": "format", "value": "integer"}));
                            ("number", numbers)
                        }
                        "single-option" => ("option", [Some("1".to_owned()), Some("1".to_owned())]),
                        "option" => ("option", lengths),
                        _ => ("boolean", [None, None]),
                    };
                    for (kind, b) in ["min", "max"].into_iter().zip(bounds) {
                        if let Some(b) = b {
                            rules.push(json!({"validation": kind, "value": b}));
                        }
                    }
                    if optional {
                        rules.push(json!({"validation": "optional", "value": "true"}));
                    }
                    let mut field = json!({"type": ty, "validations": rules});
                    if ty == "option" {
                        field["data"] = json!({ "values": values });
                    }
                    if let Some(name) = name {
                        field["name"] = name.into();
                    }
                    field
                },
            )
    }

    fn arb_schema() -> impl Strategy<Value = Value> {
        proptest::collection::btree_map("[a-zA-Z_][a-zA-Z0-9_]{0,7}", arb_field(), 0..6).prop_map(
            |fields| {
                let list: Vec<Value> = fields
                    .into_iter()
                    .map(|(id, mut f)| {
                        f["id"] = id.into();
                        f
                    })
                    .collect();
                json!({ "input_data": list })
            },
        )
    }

    /// Arbitrary JSON, with keys and strings biased towards both vocabularies.
    fn arb_json() -> impl Strategy<Value = Value> {
        let word = "type|properties|required|enum|const|items|format|minimum|maximum|minLength\
                    |maxItems|title|default|examples|input_data|input_groups|id|name|data|values\
                    |validations|validation|value|string|integer|number|boolean|array|object|null\
                    |option|text|textarea|email|uri|date|date-time|min|max|optional|1|-2.5|[a-z]{0,3}";
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_filter_map("finite", |x| Number::from_f64(x).map(Value::Number)),
            word.prop_map(Value::from),
        ];
        leaf.prop_recursive(5, 64, 6, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::btree_map(word, inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Each field's validations, sorted, for comparing regardless of order.
    fn sorted_rules(f: &Field) -> Vec<(String, String)> {
        let mut r: Vec<_> = f
            .validations
            .iter()
            .map(|v| (v.validation.clone(), v.value.clone()))
            .collect();
        r.sort();
        r
    }

    proptest! {
        #[test]
        fn attachment01_round_trip_keeps_fields(doc in arb_schema()) {
            let schema = to_json_schema(&doc).expect("generated schema converts");
            let back = from_json_schema(&schema).expect("a JSON Schema object converts");
            assert_accepted(&back);
            let before = Schema::from_json(&doc, Mode::Strict).expect("generated schema parses");
            let after = Schema::from_json(&back, Mode::Strict).expect("output parses");
            prop_assert_eq!(before.fields().len(), after.fields().len());
            for f in before.fields() {
                let g = after.field(&f.id).expect("every id survives");
                prop_assert_eq!(&g.field_type, &f.field_type);
                prop_assert_eq!(&g.name, &f.name);
                prop_assert_eq!(g.is_optional(), f.is_optional());
                prop_assert_eq!(sorted_rules(g), sorted_rules(f));
                let values = |f: &Field| f.data.as_ref().and_then(|d| d.get("values")).cloned();
                prop_assert_eq!(values(g), values(f));
            }
        }

        #[test]
        fn arbitrary_json_never_panics_and_output_validates(v in arb_json()) {
            if let Ok(schema) = to_json_schema(&v) {
                let back = from_json_schema(&schema).expect("a JSON Schema object converts");
                assert_accepted(&back);
            }
            match from_json_schema(&v) {
                Ok(a01) => assert_accepted(&a01),
                Err(_) => prop_assert!(!v.is_object()),
            }
        }

        #[test]
        fn arbitrary_field_data_never_panics(
            ty in "text|textarea|number|option|radio|date|hidden|none|file|foo",
            data in arb_json(),
            kind in "min|max|format|optional|",
            value in "[0-9a-z. _-]{0,6}|integer|email|url|tel-pattern",
        ) {
            let mut field = json!({"id": "f", "type": ty,
                "validations": [{"validation": kind, "value": value}]});
            if data.is_object() {
                field["data"] = data;
            }
            let schema = to_json_schema(&json!({ "input_data": [field] }))
                .expect("a well-formed field converts");
            let back = from_json_schema(&schema).expect("a JSON Schema object converts");
            assert_accepted(&back);
        }
    }
}
