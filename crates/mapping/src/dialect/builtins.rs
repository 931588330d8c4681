//! The mapping language's named built-in functions: what a table of fields cannot say (ids,
//! clocks, hashes, merging and re-encoding JSON). Each is pure apart from `uuid`, `random_hex` and
//! the clock functions. Absent arguments are allowed; each function says what it does with them.

use serde_json::{Map, Value};

use masumi::mip004;

/// A built-in function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Builtin {
    /// `uuid()`: a new random UUID v4, hyphenated.
    Uuid,
    /// `random_hex(n)`: `n` random bytes as lowercase hex (MIP-003 purchaser ids: `random_hex(8)`).
    RandomHex,
    /// `now_iso()`: the current time, ISO 8601 UTC with milliseconds and `Z`.
    NowIso,
    /// `now_unix_ms()`: the current time in Unix milliseconds.
    NowUnixMs,
    /// `now_plus_ms(duration)`: Unix milliseconds `duration` ("12h", "30m") from now.
    NowPlusMs,
    /// `mip004_input_hash(identifier, input_data)`: the MIP-004 input hash.
    Mip004InputHash,
    /// `mip004_output_hash(identifier, output)`: the MIP-004 output hash, as masumi computes it.
    Mip004OutputHash,
    /// `json_string(v)`: `v` as compact JSON text.
    JsonString,
    /// `json_parse(v)`: a string holding a JSON object or array, parsed; anything else unchanged.
    JsonParse,
    /// `merge(a, b, …)`: objects merged left to right (later keys win); non-objects are skipped.
    Merge,
    /// `merge_list(v)`: an array of objects merged left to right; an object unchanged; a string
    /// holding JSON is parsed first.
    MergeList,
    /// `with_key(obj, key, value)`: `obj` with `key` set to `value` unless `value` is absent or
    /// `obj` already has the key.
    WithKey,
    /// `without_key(obj, key)`: `obj` without `key`.
    WithoutKey,
    /// `get(obj, key)`: `obj[key]`. Here and in `pluck` and `where`, a key that the object does
    /// not have but that holds dots is a path into nested objects (`'output.text'`).
    Get,
    /// `text_of(v)`: a string as is; numbers and booleans printed; objects and arrays as JSON text.
    TextOf,
    /// `sum(list, key)`: the sum of the numbers at `key` in each element of `list`.
    Sum,
    /// `values(obj)`: an object's values, as an array (in key order).
    Values,
    /// `count(list)`: the number of elements.
    Count,
    /// `first(list)` / `last(list)`: the first or last element.
    First,
    Last,
    /// `object(k1, v1, k2, v2, …)`: an object; absent and null values are left out.
    Object,
    /// `concat(a, b, …)`: the texts of the present arguments, joined.
    Concat,
    /// `lower(s)` / `upper(s)`.
    Lower,
    Upper,
    /// `coalesce(a, b, …)`: the first present, non-null argument.
    Coalesce,
    /// `if(cond, a, b)`: `a` when `cond` is truthy, else `b`.
    If,
    /// `is_empty(v)`: whether `v` is absent, null, "", [] or {}.
    IsEmpty,
    /// `now_unix_s()`: the current time in Unix seconds.
    NowUnixS,
    /// `join(list, sep)`: the texts of a list's elements (see `text_of`), joined with `sep`; a
    /// single value is its own text.
    Join,
    /// `in(v, a, b, …)`: whether `v` equals one of the others; a list argument counts as its
    /// elements.
    In,
    /// `pluck(list, key)`: the values at `key` of a list's elements (absent ones left out).
    Pluck,
    /// `where(list, key, value)`: the elements whose `key` equals `value`.
    Where,
    /// `add(a, b, …)`: the sum of the present numbers (numeric text counts).
    Add,
    /// `number(v)`: a number, or text holding one, as a number.
    Number,
    /// `contains(text, part)`: whether `part` occurs in `text` (or a list has the element).
    Contains,
    /// `nth(list, i)`: the element at `i` (0-based; negative counts from the end).
    Nth,
    /// `to_json_schema(schema)`: an Attachment 01 input schema as JSON Schema.
    ToJsonSchema,
    /// `from_json_schema(schema)`: a JSON Schema as an Attachment 01 input schema.
    FromJsonSchema,
    /// `project(list, renames, constants)`: each object of a list remade: `renames` maps each new
    /// key to the element's key it comes from, `constants` adds fixed values
    /// (`project(fields, object('id', 'name'), object('type', 'text'))`).
    Project,
    /// `split(text, sep)`: the non-empty pieces of a text cut at `sep` (`'a,b'` → `['a', 'b']`);
    /// a list as it is.
    Split,
    /// `parts_text(v)`: the text of message content: a string as is; a list of parts joined
    /// with newlines, each part a string or an object's `text` (parts without text are skipped).
    PartsText,
}

const TABLE: &[(&str, Builtin, usize, usize)] = &[
    ("uuid", Builtin::Uuid, 0, 0),
    ("random_hex", Builtin::RandomHex, 1, 1),
    ("now_iso", Builtin::NowIso, 0, 0),
    ("now_unix_ms", Builtin::NowUnixMs, 0, 0),
    ("now_plus_ms", Builtin::NowPlusMs, 1, 1),
    ("mip004_input_hash", Builtin::Mip004InputHash, 2, 2),
    ("mip004_output_hash", Builtin::Mip004OutputHash, 2, 2),
    ("json_string", Builtin::JsonString, 1, 1),
    ("json_parse", Builtin::JsonParse, 1, 1),
    ("merge", Builtin::Merge, 1, 16),
    ("merge_list", Builtin::MergeList, 1, 1),
    ("with_key", Builtin::WithKey, 3, 3),
    ("without_key", Builtin::WithoutKey, 2, 2),
    ("get", Builtin::Get, 2, 2),
    ("text_of", Builtin::TextOf, 1, 1),
    ("sum", Builtin::Sum, 2, 2),
    ("values", Builtin::Values, 1, 1),
    ("count", Builtin::Count, 1, 1),
    ("first", Builtin::First, 1, 1),
    ("last", Builtin::Last, 1, 1),
    ("object", Builtin::Object, 0, 32),
    ("concat", Builtin::Concat, 1, 16),
    ("lower", Builtin::Lower, 1, 1),
    ("upper", Builtin::Upper, 1, 1),
    ("coalesce", Builtin::Coalesce, 1, 16),
    ("if", Builtin::If, 3, 3),
    ("is_empty", Builtin::IsEmpty, 1, 1),
    ("now_unix_s", Builtin::NowUnixS, 0, 0),
    ("join", Builtin::Join, 2, 2),
    ("in", Builtin::In, 2, 32),
    ("pluck", Builtin::Pluck, 2, 2),
    ("where", Builtin::Where, 3, 3),
    ("add", Builtin::Add, 1, 16),
    ("number", Builtin::Number, 1, 1),
    ("contains", Builtin::Contains, 2, 2),
    ("nth", Builtin::Nth, 2, 2),
    ("to_json_schema", Builtin::ToJsonSchema, 1, 1),
    ("from_json_schema", Builtin::FromJsonSchema, 1, 1),
    ("parts_text", Builtin::PartsText, 1, 1),
    ("project", Builtin::Project, 2, 3),
    ("split", Builtin::Split, 2, 2),
];

/// The names of every built-in, for messages.
pub fn names() -> Vec<&'static str> {
    TABLE.iter().map(|(n, ..)| *n).collect()
}

impl Builtin {
    pub fn from_name(name: &str) -> Option<Builtin> {
        TABLE.iter().find(|(n, ..)| *n == name).map(|(_, b, ..)| *b)
    }

    fn entry(self) -> (&'static str, usize, usize) {
        TABLE
            .iter()
            .find(|(_, b, ..)| *b == self)
            .map_or(("?", 0, 0), |(n, _, min, max)| (*n, *min, *max))
    }

    /// Functions that make a value from nothing (`uuid()`, `now_iso()`).
    pub fn is_source(self) -> bool {
        matches!(
            self,
            Builtin::Uuid
                | Builtin::RandomHex
                | Builtin::NowIso
                | Builtin::NowUnixMs
                | Builtin::NowPlusMs
                | Builtin::NowUnixS
        )
    }

    /// Checks the number of arguments at load time.
    pub fn check_arity(self, n: usize) -> Result<(), BuiltinError> {
        let (name, min, max) = self.entry();
        if n < min || n > max {
            let takes = if min == max {
                format!("{min}")
            } else {
                format!("{min} to {max}")
            };
            return Err(BuiltinError::Arity {
                name,
                takes,
                given: n,
            });
        }
        if self == Builtin::Object && n % 2 != 0 {
            return Err(BuiltinError::Pairs);
        }
        Ok(())
    }
}

/// Why a builtin cannot be called (at load: its arguments; when evaluated: its input).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuiltinError {
    #[error("`{name}` takes {takes} argument(s), not {given}")]
    Arity {
        name: &'static str,
        takes: String,
        given: usize,
    },
    #[error("`object` takes key, value pairs")]
    Pairs,
    #[error(transparent)]
    Unit(#[from] crate::units::UnitError),
    #[error("duration too long")]
    DurationTooLong,
    #[error(transparent)]
    Hash(#[from] mip004::CanonicalError),
    #[error(transparent)]
    Schema(#[from] masumi::json_schema::ConvertError),
}

/// Calls `f` with evaluated arguments (absent ones as `None`).
pub fn call(f: Builtin, args: Vec<Option<Value>>) -> Result<Option<Value>, BuiltinError> {
    let arg = |i: usize| args.get(i).cloned().flatten();
    let text = |i: usize| arg(i).and_then(|v| v.as_str().map(str::to_string));
    Ok(match f {
        Builtin::Uuid => Some(Value::String(uuid::Uuid::new_v4().to_string())),
        Builtin::RandomHex => {
            let n = arg(0).and_then(|v| v.as_u64()).unwrap_or(8).min(64) as usize;
            let mut bytes = Vec::with_capacity(n);
            while bytes.len() < n {
                bytes.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
            }
            bytes.truncate(n);
            Some(Value::String(hex::encode(bytes)))
        }
        Builtin::NowIso => Some(Value::String(crate::task::time::format_iso_ms(
            chrono::Utc::now(),
        ))),
        Builtin::NowUnixMs => Some(Value::from(chrono::Utc::now().timestamp_millis())),
        Builtin::NowPlusMs => {
            let Some(d) = text(0) else { return Ok(None) };
            let d = crate::units::parse_duration(&d)?;
            let ms = i64::try_from(d.as_millis()).map_err(|_| BuiltinError::DurationTooLong)?;
            Some(Value::from(
                chrono::Utc::now().timestamp_millis().saturating_add(ms),
            ))
        }
        Builtin::Mip004InputHash => {
            let id = text(0).unwrap_or_default();
            let data = arg(1).unwrap_or(Value::Object(Map::new()));
            Some(Value::String(mip004::input_hash(&id, &data)?))
        }
        Builtin::Mip004OutputHash => {
            let id = text(0).unwrap_or_default();
            let Some(out) = text(1) else { return Ok(None) };
            Some(Value::String(mip004::output_hash(
                &id,
                &out,
                mip004::OutputHashForm::Masumi,
            )))
        }
        Builtin::JsonString => arg(0).map(|v| Value::String(v.to_string())),
        Builtin::JsonParse => arg(0).map(json_parse),
        Builtin::Merge => {
            let mut out = Map::new();
            for v in args.into_iter().flatten() {
                if let Value::Object(o) = v {
                    out.extend(o);
                }
            }
            Some(Value::Object(out))
        }
        Builtin::MergeList => arg(0).map(|v| match json_parse(v) {
            Value::Array(items) => {
                let mut out = Map::new();
                for item in items {
                    if let Value::Object(o) = item {
                        out.extend(o);
                    }
                }
                Value::Object(out)
            }
            other => other,
        }),
        Builtin::WithKey => {
            let mut obj = match arg(0) {
                Some(Value::Object(o)) => o,
                _ => Map::new(),
            };
            if let (Some(key), Some(value)) = (text(1), arg(2)) {
                obj.entry(key).or_insert(value);
            }
            Some(Value::Object(obj))
        }
        Builtin::WithoutKey => match (arg(0), text(1)) {
            (Some(Value::Object(mut o)), Some(k)) => {
                o.remove(&k);
                Some(Value::Object(o))
            }
            (v, _) => v,
        },
        Builtin::Get => match (arg(0), text(1)) {
            (Some(v), Some(k)) => key_of(&v, &k).cloned(),
            _ => None,
        },
        Builtin::Split => match arg(0) {
            Some(Value::String(t)) => {
                let sep = text(1)
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| ",".into());
                Some(Value::Array(
                    t.split(sep.as_str())
                        .map(str::trim)
                        .filter(|p| !p.is_empty())
                        .map(|p| Value::String(p.to_string()))
                        .collect(),
                ))
            }
            Some(list @ Value::Array(_)) => Some(list),
            _ => None,
        },
        Builtin::TextOf => arg(0).and_then(|v| match v {
            Value::String(s) => Some(Value::String(s)),
            Value::Null => None,
            other => Some(Value::String(other.to_string())),
        }),
        Builtin::Sum => {
            let key = text(1).unwrap_or_default();
            let items = match arg(0) {
                Some(Value::Array(a)) => a,
                _ => Vec::new(),
            };
            let mut total_i: i64 = 0;
            let mut total_f: f64 = 0.0;
            let mut float = false;
            for n in items
                .iter()
                .filter_map(|i| i.get(&key))
                .filter_map(Value::as_number)
            {
                match n.as_i64() {
                    Some(i) if !float => total_i = total_i.saturating_add(i),
                    _ => {
                        float = true;
                        total_f += n.as_f64().unwrap_or(0.0);
                    }
                }
            }
            Some(if float {
                Value::from(total_f + total_i as f64)
            } else {
                Value::from(total_i)
            })
        }
        Builtin::Values => arg(0).map(|v| match v {
            Value::Object(o) => Value::Array(o.into_iter().map(|(_, v)| v).collect()),
            Value::Array(a) => Value::Array(a),
            other => Value::Array(vec![other]),
        }),
        Builtin::Count => arg(0).map(|v| match v {
            Value::Array(a) => Value::from(a.len()),
            Value::Object(o) => Value::from(o.len()),
            _ => Value::from(1),
        }),
        Builtin::First => match arg(0) {
            Some(Value::Array(a)) => a.into_iter().next(),
            _ => None,
        },
        Builtin::Last => match arg(0) {
            Some(Value::Array(a)) => a.into_iter().last(),
            _ => None,
        },
        Builtin::Object => {
            let mut out = Map::new();
            for pair in args.chunks(2) {
                if let [Some(Value::String(k)), Some(v)] = pair {
                    if !v.is_null() {
                        out.insert(k.clone(), v.clone());
                    }
                }
            }
            Some(Value::Object(out))
        }
        Builtin::Concat => {
            let mut out = String::new();
            for v in args.into_iter().flatten() {
                match v {
                    Value::String(s) => out.push_str(&s),
                    Value::Null => {}
                    other => out.push_str(&other.to_string()),
                }
            }
            Some(Value::String(out))
        }
        Builtin::Lower => text(0).map(|s| Value::String(s.to_lowercase())),
        Builtin::Upper => text(0).map(|s| Value::String(s.to_uppercase())),
        Builtin::Coalesce => args.into_iter().flatten().find(|v| !v.is_null()),
        Builtin::If => {
            if super::expr::truthy(arg(0).as_ref()) {
                arg(1)
            } else {
                arg(2)
            }
        }
        Builtin::IsEmpty => Some(Value::Bool(match arg(0) {
            None | Some(Value::Null) => true,
            Some(Value::String(s)) => s.is_empty(),
            Some(Value::Array(a)) => a.is_empty(),
            Some(Value::Object(o)) => o.is_empty(),
            Some(_) => false,
        })),
        Builtin::NowUnixS => Some(Value::from(chrono::Utc::now().timestamp())),
        Builtin::Join => {
            let sep = text(1).unwrap_or_default();
            arg(0).map(|v| {
                let items = match v {
                    Value::Array(a) => a,
                    other => vec![other],
                };
                let texts: Vec<String> = items.iter().filter_map(text_of).collect();
                Value::String(texts.join(&sep))
            })
        }
        Builtin::In => {
            let needle = arg(0).unwrap_or(Value::Null);
            let found = args.iter().skip(1).flatten().any(|v| match v {
                Value::Array(a) => a.contains(&needle),
                other => *other == needle,
            });
            Some(Value::Bool(found))
        }
        Builtin::Pluck => {
            let key = text(1).unwrap_or_default();
            arg(0).map(|v| {
                let items = match v {
                    Value::Array(a) => a,
                    other => vec![other],
                };
                Value::Array(
                    items
                        .iter()
                        .filter_map(|i| key_of(i, &key))
                        .filter(|v| !v.is_null())
                        .cloned()
                        .collect(),
                )
            })
        }
        Builtin::Where => {
            let key = text(1).unwrap_or_default();
            let wanted = arg(2).unwrap_or(Value::Null);
            match arg(0) {
                Some(Value::Array(a)) => Some(Value::Array(
                    a.into_iter()
                        .filter(|i| key_of(i, &key).unwrap_or(&Value::Null) == &wanted)
                        .collect(),
                )),
                _ => None,
            }
        }
        Builtin::Add => {
            let numbers: Vec<f64> = args.iter().flatten().filter_map(as_number).collect();
            if numbers.is_empty() {
                None
            } else {
                let total: f64 = numbers.iter().sum();
                Some(whole(total))
            }
        }
        Builtin::Number => arg(0).as_ref().and_then(as_number).map(whole),
        Builtin::Contains => Some(Value::Bool(match (arg(0), arg(1)) {
            (Some(Value::String(s)), Some(Value::String(part))) => s.contains(&part),
            (Some(Value::Array(a)), Some(v)) => a.contains(&v),
            _ => false,
        })),
        Builtin::Nth => match (arg(0), arg(1).as_ref().and_then(Value::as_i64)) {
            (Some(Value::Array(a)), Some(i)) => {
                let i = if i < 0 { a.len() as i64 + i } else { i };
                usize::try_from(i).ok().and_then(|i| a.get(i).cloned())
            }
            _ => None,
        },
        Builtin::Project => {
            let renames = match arg(1) {
                Some(Value::Object(o)) => o,
                _ => Map::new(),
            };
            let constants = match arg(2) {
                Some(Value::Object(o)) => o,
                _ => Map::new(),
            };
            match arg(0) {
                Some(Value::Array(items)) => Some(Value::Array(
                    items
                        .iter()
                        .map(|item| {
                            let mut out = constants.clone();
                            for (new, old) in &renames {
                                let found = old.as_str().and_then(|k| item.get(k));
                                if let Some(v) = found.filter(|v| !v.is_null()) {
                                    out.insert(new.clone(), v.clone());
                                }
                            }
                            Value::Object(out)
                        })
                        .collect(),
                )),
                _ => None,
            }
        }
        Builtin::PartsText => arg(0).and_then(|v| match v {
            Value::String(s) => Some(Value::String(s)),
            Value::Array(parts) => {
                let texts: Vec<String> = parts
                    .iter()
                    .filter_map(|p| match p {
                        Value::String(s) => Some(s.clone()),
                        Value::Object(o) => {
                            o.get("text").and_then(Value::as_str).map(str::to_string)
                        }
                        _ => None,
                    })
                    .collect();
                (!texts.is_empty()).then(|| Value::String(texts.join("\n")))
            }
            Value::Object(o) => o
                .get("text")
                .and_then(Value::as_str)
                .map(|s| Value::String(s.to_string())),
            _ => None,
        }),
        Builtin::ToJsonSchema => match arg(0) {
            Some(v) => Some(masumi::json_schema::to_json_schema(&v)?),
            None => None,
        },
        Builtin::FromJsonSchema => match arg(0) {
            Some(v) => Some(masumi::json_schema::from_json_schema(&v)?),
            None => None,
        },
    })
}

/// `text_of` for one value: absent for null.
/// `v[key]`; a key `v` does not have that holds dots, as a path into nested objects.
fn key_of<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    let Value::Object(o) = v else { return None };
    if let Some(found) = o.get(key) {
        return Some(found);
    }
    if !key.contains('.') {
        return None;
    }
    key.split('.').try_fold(v, |at, k| at.get(k))
}

fn text_of(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

/// A number, or text holding one.
fn as_number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// A whole number as an integer, anything else as a float.
fn whole(n: f64) -> Value {
    if n.fract() == 0.0 && n.abs() < 9.0e15 {
        Value::from(n as i64)
    } else {
        Value::from(n)
    }
}

/// A string that holds a JSON object or array (the 2024 Nevermined string-encoded fields),
/// parsed; anything else unchanged.
pub fn json_parse(v: Value) -> Value {
    match &v {
        Value::String(s) if s.trim_start().starts_with(['{', '[']) => {
            serde_json::from_str(s).unwrap_or(v)
        }
        _ => v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(f: &str, args: Vec<Option<Value>>) -> Option<Value> {
        call(Builtin::from_name(f).unwrap(), args).unwrap()
    }

    #[test]
    fn merging_and_keys() {
        assert_eq!(
            run(
                "merge_list",
                vec![Some(json!([{"a": 1}, {"a": 2, "b": 3}]))]
            ),
            Some(json!({"a": 2, "b": 3}))
        );
        assert_eq!(
            run("merge_list", vec![Some(json!("[{\"a\":1}]"))]),
            Some(json!({"a": 1}))
        );
        assert_eq!(
            run(
                "with_key",
                vec![
                    Some(json!({"x": 1})),
                    Some(json!("text")),
                    Some(json!("hi"))
                ]
            ),
            Some(json!({"x": 1, "text": "hi"}))
        );
        assert_eq!(
            run(
                "with_key",
                vec![
                    Some(json!({"text": "kept"})),
                    Some(json!("text")),
                    Some(json!("hi"))
                ]
            ),
            Some(json!({"text": "kept"}))
        );
        assert_eq!(
            run("with_key", vec![None, Some(json!("k")), None]),
            Some(json!({}))
        );
    }

    #[test]
    fn nested_keys_and_split() {
        let steps = json!([
            {"id": "a", "output": {"additional": {"input_schema": {"x": 1}}}},
            {"id": "b", "output": {"text": "done"}, "output.text": "literal"},
        ]);
        let second = json!({"output": {"text": "done"}, "output.text": "literal"});
        // The literal key first, then the path.
        assert_eq!(
            run("get", vec![Some(second), Some(json!("output.text"))]),
            Some(json!("literal"))
        );
        assert_eq!(
            run(
                "pluck",
                vec![
                    Some(steps.clone()),
                    Some(json!("output.additional.input_schema"))
                ]
            ),
            Some(json!([{"x": 1}]))
        );
        assert_eq!(
            run(
                "where",
                vec![
                    Some(steps),
                    Some(json!("output.text")),
                    Some(json!("literal"))
                ]
            ),
            Some(json!([{"id": "b", "output": {"text": "done"}, "output.text": "literal"}]))
        );
        assert_eq!(
            run("get", vec![Some(json!({"a": 1})), Some(json!("a.b"))]),
            None
        );
        assert_eq!(
            run(
                "split",
                vec![Some(json!("did:nv:1, did:nv:2,")), Some(json!(","))]
            ),
            Some(json!(["did:nv:1", "did:nv:2"]))
        );
        assert_eq!(
            run("split", vec![Some(json!(["x"])), Some(json!(","))]),
            Some(json!(["x"]))
        );
        assert_eq!(run("split", vec![None, Some(json!(","))]), None);
    }

    #[test]
    fn lists_and_numbers() {
        let parts = json!([{"text": "a"}, {"data": {}}, {"text": "b"}]);
        assert_eq!(
            run("pluck", vec![Some(parts.clone()), Some(json!("text"))]),
            Some(json!(["a", "b"]))
        );
        assert_eq!(
            run("join", vec![Some(json!(["a", 1, null])), Some(json!("-"))]),
            Some(json!("a-1"))
        );
        assert_eq!(
            run(
                "where",
                vec![Some(parts), Some(json!("text")), Some(json!("b"))]
            ),
            Some(json!([{"text": "b"}]))
        );
        assert_eq!(
            run("in", vec![Some(json!(2)), Some(json!([1, 2]))]),
            Some(json!(true))
        );
        assert_eq!(
            run("in", vec![Some(json!("x")), Some(json!("y")), None]),
            Some(json!(false))
        );
        assert_eq!(
            run("add", vec![Some(json!("2")), Some(json!(1)), None]),
            Some(json!(3))
        );
        assert_eq!(run("add", vec![None]), None);
        assert_eq!(run("number", vec![Some(json!("1.5"))]), Some(json!(1.5)));
        assert_eq!(
            run("nth", vec![Some(json!([1, 2, 3])), Some(json!(-1))]),
            Some(json!(3))
        );
        assert_eq!(run("nth", vec![Some(json!([1])), Some(json!(-5))]), None);
        assert_eq!(
            run(
                "contains",
                vec![Some(json!("a mode:input")), Some(json!("mode:input"))]
            ),
            Some(json!(true))
        );
    }

    #[test]
    fn project_remakes_each_object() {
        assert_eq!(
            run(
                "project",
                vec![
                    Some(json!([{"name": "a", "label": "A"}, {"name": "b"}])),
                    Some(json!({"id": "name", "name": "label"})),
                    Some(json!({"type": "text"})),
                ]
            ),
            Some(json!([{"id": "a", "name": "A", "type": "text"}, {"id": "b", "type": "text"}]))
        );
        assert_eq!(
            run("project", vec![Some(json!("x")), Some(json!({}))]),
            None
        );
    }

    #[test]
    fn text_sum_and_ids() {
        assert_eq!(
            run("text_of", vec![Some(json!({"a": 1}))]),
            Some(json!("{\"a\":1}"))
        );
        assert_eq!(
            run(
                "sum",
                vec![Some(json!([{"c": 1}, {"c": 2}, {}])), Some(json!("c"))]
            ),
            Some(json!(3))
        );
        let hex = run("random_hex", vec![Some(json!(8))]).unwrap();
        assert_eq!(hex.as_str().unwrap().len(), 16);
        assert!(run("is_empty", vec![Some(json!({}))])
            .unwrap()
            .as_bool()
            .unwrap());
        assert!(!run("is_empty", vec![Some(json!("x"))])
            .unwrap()
            .as_bool()
            .unwrap());
    }
}
