//! The mapping language's named built-in functions: what a table of fields cannot say (ids,
//! clocks, hashes, merging and re-encoding JSON, sealed tokens). Each is pure apart from `uuid`,
//! `random_hex`, the clock functions, and `seal`/`unseal` (which read the clock for expiry). Absent arguments are allowed; each function says what it does with them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use regex::{Regex, RegexBuilder};
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
    /// `replace(text, regex, with)`: `text` with every match of `regex` replaced by `with`
    /// (which may name groups: `$1`, `${name}`; `$$` is a dollar). Absent when `text` is not a
    /// string; an absent `with` is "". An invalid `regex` is an error (at load, when written as a
    /// literal).
    Replace,
    /// `type_of(v)`: `"object"`, `"array"`, `"string"`, `"number"`, `"boolean"` or `"null"`
    /// (absent is `"null"`).
    TypeOf,
    /// `flat_schema(s)`: the JSON Schema `s` as it is when it is an object schema whose every
    /// property is a primitive (string, number, integer, boolean, an enum of strings, or an array
    /// of a string enum: what an MCP form elicitation may ask), else absent.
    FlatSchema,
    /// `seal(value, ttl)`: an authenticated, URL-safe token holding `value` until `ttl` ("1h",
    /// "30m") from now. Integrity, not secrecy: the value is readable inside. Absent for an
    /// absent value; an error without a sealing key or with a `ttl` that is not a duration.
    Seal,
    /// `unseal(text)`: the value a token from `seal` holds; absent when `text` is not such a
    /// token, was altered, was sealed with another key, or has expired.
    Unseal,
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
    ("replace", Builtin::Replace, 3, 3),
    ("type_of", Builtin::TypeOf, 1, 1),
    ("flat_schema", Builtin::FlatSchema, 1, 1),
    ("seal", Builtin::Seal, 2, 2),
    ("unseal", Builtin::Unseal, 1, 1),
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

    /// Checks, at load time, an argument written as a literal (argument `i`, 0-based): a
    /// mistake that every message would meet is reported with the file's position instead.
    pub fn check_literal(self, i: usize, v: &Value) -> Result<(), BuiltinError> {
        match (self, i, v) {
            (Builtin::Replace, 1, Value::String(pattern)) => regex(pattern).map(drop),
            (Builtin::Replace, 1, _) => Err(BuiltinError::Pattern),
            (Builtin::Seal, 1, Value::String(ttl)) => ttl_ms(ttl).map(drop),
            (Builtin::Seal, 1, _) => Err(BuiltinError::Ttl),
            _ => Ok(()),
        }
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
    #[error("`replace`: bad regex: {0}")]
    Regex(String),
    #[error("`replace` takes its regex as text")]
    Pattern,
    #[error("`seal` takes its ttl as a duration text (\"30m\", \"1h\")")]
    Ttl,
    #[error("`seal`: {0}")]
    Seal(#[from] super::seal::SealError),
}

/// Calls `f` with evaluated arguments (absent ones as `None`). `seal_key` is the key `seal` and
/// `unseal` use (empty: `seal` fails, `unseal` finds nothing).
pub fn call(
    f: Builtin,
    args: Vec<Option<Value>>,
    seal_key: &[u8],
) -> Result<Option<Value>, BuiltinError> {
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
            if super::value::truthy(arg(0).as_ref()) {
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
        Builtin::Replace => {
            let pattern = match arg(1) {
                Some(Value::String(p)) => regex(&p)?,
                _ => return Err(BuiltinError::Pattern),
            };
            let with = arg(2).as_ref().and_then(text_of).unwrap_or_default();
            text(0).map(|t| Value::String(pattern.replace_all(&t, with.as_str()).into_owned()))
        }
        Builtin::TypeOf => Some(Value::from(match arg(0) {
            None | Some(Value::Null) => "null",
            Some(Value::Bool(_)) => "boolean",
            Some(Value::Number(_)) => "number",
            Some(Value::String(_)) => "string",
            Some(Value::Array(_)) => "array",
            Some(Value::Object(_)) => "object",
        })),
        Builtin::FlatSchema => arg(0).filter(is_flat_schema),
        Builtin::Seal => {
            let ttl = match arg(1) {
                Some(Value::String(t)) => ttl_ms(&t)?,
                _ => return Err(BuiltinError::Ttl),
            };
            match arg(0) {
                Some(v) => {
                    let expires = chrono::Utc::now().timestamp_millis().saturating_add(ttl);
                    Some(Value::String(super::seal::seal(&v, expires, seal_key)?))
                }
                None => None,
            }
        }
        Builtin::Unseal => text(0)
            .and_then(|t| super::seal::unseal(&t, chrono::Utc::now().timestamp_millis(), seal_key)),
    })
}

/// `regex` compiled, from a cache: a mapping's patterns are few and fixed, and compiling one
/// costs far more than the match it serves. Errors are the regex crate's message.
fn regex(pattern: &str) -> Result<Arc<Regex>, BuiltinError> {
    /// Past this many patterns (only a mapping that builds patterns from input gets there) the
    /// cache starts over rather than grow.
    const MOST: usize = 256;
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<Regex>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Mutex::default);
    if let Some(found) = cache.lock().ok().and_then(|c| c.get(pattern).cloned()) {
        return Ok(found);
    }
    let compiled = RegexBuilder::new(pattern)
        // A pattern is a mapping's (or built from input): bound what compiling one may take.
        .size_limit(1 << 20)
        .build()
        .map(Arc::new)
        .map_err(|e| BuiltinError::Regex(e.to_string()))?;
    if let Ok(mut c) = cache.lock() {
        if c.len() >= MOST {
            c.clear();
        }
        c.insert(pattern.to_string(), compiled.clone());
    }
    Ok(compiled)
}

/// A `seal` ttl in milliseconds.
fn ttl_ms(ttl: &str) -> Result<i64, BuiltinError> {
    let d = crate::units::parse_duration(ttl)?;
    i64::try_from(d.as_millis()).map_err(|_| BuiltinError::DurationTooLong)
}

/// Whether `s` is an object schema whose every property is a primitive, as MCP's form
/// elicitation allows: a string (with at most an `email`, `uri`, `date` or `date-time` format), a
/// number, an integer, a boolean, a single choice (`enum` of strings, or `oneOf` of `{const}`
/// strings), or a multiple choice (an array whose `items` is such a choice). See MCP 2025-11-25,
/// client/elicitation, "Requested Schema":
/// <https://modelcontextprotocol.io/specification/2025-11-25/client/elicitation>.
fn is_flat_schema(s: &Value) -> bool {
    let Some(o) = s.as_object() else { return false };
    if o.get("type").and_then(Value::as_str) != Some("object") {
        return false;
    }
    match o.get("properties") {
        Some(Value::Object(props)) => props.values().all(is_primitive),
        _ => false,
    }
}

fn is_primitive(p: &Value) -> bool {
    let Some(o) = p.as_object() else { return false };
    match o.get("type") {
        Some(Value::String(t)) => match t.as_str() {
            "string" => {
                let format_ok = match o.get("format") {
                    None => true,
                    Some(f) => matches!(f.as_str(), Some("email" | "uri" | "date" | "date-time")),
                };
                format_ok && (is_choice(o) || !has_choice(o))
            }
            "number" | "integer" | "boolean" => !has_choice(o),
            "array" => o
                .get("items")
                .and_then(Value::as_object)
                .is_some_and(|items| {
                    items.get("type").is_none_or(|t| t == "string") && is_choice(items)
                }),
            _ => false,
        },
        // An untyped property is primitive only as a choice of strings.
        None => is_choice(o),
        Some(_) => false,
    }
}

/// Whether a schema declares a choice at all (`enum`, `oneOf`, `anyOf`).
fn has_choice(o: &Map<String, Value>) -> bool {
    ["enum", "oneOf", "anyOf"]
        .iter()
        .any(|k| o.contains_key(*k))
}

/// Whether a schema is a choice among strings: a non-empty `enum` of strings, or a non-empty
/// `oneOf`/`anyOf` of `{const: string}` (titled options).
fn is_choice(o: &Map<String, Value>) -> bool {
    let all = |key: &str, ok: fn(&Value) -> bool| {
        o.get(key)
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty() && a.iter().all(ok))
    };
    all("enum", Value::is_string)
        || all("oneOf", |c| c.get("const").is_some_and(Value::is_string))
        || all("anyOf", |c| c.get("const").is_some_and(Value::is_string))
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
        call(Builtin::from_name(f).unwrap(), args, b"").unwrap()
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

    #[test]
    fn replace_rewrites_every_match() {
        let replace = |t: Value, re: &str, with: Option<Value>| {
            call(Builtin::Replace, vec![Some(t), Some(json!(re)), with], b"")
        };
        assert_eq!(
            replace(json!("my tool.v2!"), "[^A-Za-z0-9_-]", Some(json!("_"))),
            Ok(Some(json!("my_tool_v2_")))
        );
        assert_eq!(
            replace(
                json!("2026-11-26"),
                r"(\d+)-(?<m>\d+)-(\d+)",
                Some(json!("$3/${m}/$1"))
            ),
            Ok(Some(json!("26/11/2026")))
        );
        assert_eq!(
            replace(json!("plain"), "x+", Some(json!("y"))),
            Ok(Some(json!("plain")))
        );
        assert_eq!(replace(json!("a b"), " ", None), Ok(Some(json!("ab"))));
        assert_eq!(replace(json!(12), "1", Some(json!("x"))), Ok(None));
        let bad = replace(json!("a"), "(", Some(json!("x"))).unwrap_err();
        assert!(
            bad.to_string().starts_with("`replace`: bad regex:"),
            "{bad}"
        );
        assert_eq!(
            call(Builtin::Replace, vec![Some(json!("a")), None, None], b""),
            Err(BuiltinError::Pattern)
        );
    }

    #[test]
    fn a_bad_literal_regex_or_ttl_fails_at_load() {
        use super::super::expr::Expr;
        let e = Expr::parse("replace(tool.name, '[a-', '_')").unwrap_err();
        assert!(e.to_string().contains("bad regex"), "{e}");
        let e = Expr::parse("seal(request.session, 'soon')").unwrap_err();
        assert!(e.to_string().contains("not a duration"), "{e}");
        let e = Expr::parse("seal(request.session, 30)").unwrap_err();
        assert!(e.to_string().contains("ttl"), "{e}");
        // Dollars in a literal are the replacement's, not the expression's `$`.
        let ok = Expr::parse("replace($, '(a)', '$1$1')").unwrap();
        assert!(ok.uses_current());
    }

    #[test]
    fn type_of_names_each_json_type() {
        for (v, t) in [
            (Some(json!({"a": 1})), "object"),
            (Some(json!([1])), "array"),
            (Some(json!("")), "string"),
            (Some(json!(1.5)), "number"),
            (Some(json!(false)), "boolean"),
            (Some(json!(null)), "null"),
            (None, "null"),
        ] {
            assert_eq!(run("type_of", vec![v.clone()]), Some(json!(t)), "{v:?}");
        }
    }

    #[test]
    fn flat_schema_keeps_only_schemas_of_primitives() {
        let flat = json!({
            "type": "object",
            "properties": {
                "origin": {"type": "string", "title": "Origin", "minLength": 3},
                "email": {"type": "string", "format": "email"},
                "copies": {"type": "integer", "minimum": 1},
                "price": {"type": "number"},
                "ok": {"type": "boolean", "default": true},
                "size": {"type": "string", "enum": ["s", "m"]},
                "seat": {"oneOf": [{"const": "a", "title": "Aisle"}, {"const": "w"}]},
                "tags": {"type": "array", "items": {"type": "string", "enum": ["x", "y"]}},
                "more": {"type": "array", "items": {"anyOf": [{"const": "p"}]}, "maxItems": 1}
            },
            "required": ["origin"]
        });
        assert_eq!(run("flat_schema", vec![Some(flat.clone())]), Some(flat));
        let empty = json!({"type": "object", "properties": {}});
        assert_eq!(run("flat_schema", vec![Some(empty.clone())]), Some(empty));
        let with = |p: Value| json!({"type": "object", "properties": {"p": p}});
        for not_flat in [
            with(json!({"type": "object", "properties": {"x": {"type": "string"}}})),
            with(json!({"type": "array", "items": {"type": "object"}})),
            with(json!({"type": "array", "items": {"type": "string"}})),
            with(json!({"type": "string", "format": "binary"})),
            with(json!({"type": "string", "enum": [1, 2]})),
            with(json!({"type": "number", "enum": [1, 2]})),
            with(json!({"enum": []})),
            with(json!({"type": ["string", "null"]})),
            with(json!({})),
            with(json!(true)),
            json!({"type": "object"}),
            json!({"type": "string"}),
            json!([]),
        ] {
            assert_eq!(
                run("flat_schema", vec![Some(not_flat.clone())]),
                None,
                "{not_flat}"
            );
        }
        assert_eq!(run("flat_schema", vec![None]), None);
    }

    #[test]
    fn flat_schema_accepts_what_to_json_schema_makes_of_simple_fields() {
        let attachment01 = json!({"input_data": [
            {"id": "text", "type": "string", "name": "Text"},
            {"id": "n", "type": "number", "validations": [{"validation": "format", "value": "integer"}]},
            {"id": "pick", "type": "option", "data": {"values": ["a", "b"]},
             "validations": [{"validation": "min", "value": "1"}, {"validation": "max", "value": "1"}]},
            {"id": "many", "type": "option", "data": {"values": ["a", "b"]}},
            {"id": "yes", "type": "boolean", "validations": [{"validation": "optional", "value": "true"}]}
        ]});
        let schema = run("to_json_schema", vec![Some(attachment01)]).unwrap();
        assert_eq!(
            run("flat_schema", vec![Some(schema.clone())]),
            Some(schema.clone()),
            "{schema}"
        );
    }

    const KEY: &[u8] = b"a sealing key of thirty-two bytes";

    fn seal(v: Value, ttl: &str, key: &[u8]) -> Result<Option<Value>, BuiltinError> {
        call(Builtin::Seal, vec![Some(v), Some(json!(ttl))], key)
    }

    fn unseal(v: Option<Value>, key: &[u8]) -> Option<Value> {
        call(Builtin::Unseal, vec![v], key).unwrap()
    }

    #[test]
    fn a_sealed_value_unseals_with_its_key_only() {
        let v = json!({"sub": "alice", "v": "2025-11-25"});
        let token = seal(v.clone(), "1h", KEY).unwrap().unwrap();
        assert_eq!(unseal(Some(token.clone()), KEY), Some(v));
        assert_eq!(
            unseal(Some(token.clone()), b"another key of thirty-two bytes!"),
            None
        );
        assert_eq!(unseal(Some(token.clone()), b""), None);
        let text = token.as_str().unwrap();
        let mut flipped = text.as_bytes().to_vec();
        flipped[text.len() / 3] ^= 0x01;
        let flipped = String::from_utf8(flipped).unwrap();
        assert_eq!(unseal(Some(json!(flipped)), KEY), None);
    }

    #[test]
    fn an_expired_or_unreadable_token_unseals_to_nothing() {
        let token = seal(json!("x"), "0s", KEY).unwrap();
        assert_eq!(unseal(token, KEY), None);
        for garbage in [
            json!(""),
            json!("not a token"),
            json!("a.b"),
            json!("x".repeat(1 << 20)),
            json!(42),
            json!({"v": 1}),
        ] {
            assert_eq!(unseal(Some(garbage), KEY), None);
        }
        assert_eq!(unseal(None, KEY), None);
    }

    #[test]
    fn seal_needs_a_key_and_a_ttl() {
        assert_eq!(
            seal(json!(1), "1h", b""),
            Err(BuiltinError::Seal(super::super::seal::SealError::NoKey))
        );
        assert_eq!(
            seal(json!(1), "1h", b"").unwrap_err().to_string(),
            "`seal`: no sealing key"
        );
        assert!(seal(json!(1), "soon", KEY).is_err());
        assert_eq!(
            call(Builtin::Seal, vec![Some(json!(1)), None], KEY),
            Err(BuiltinError::Ttl)
        );
        assert_eq!(
            call(Builtin::Seal, vec![None, Some(json!("1h"))], KEY),
            Ok(None)
        );
    }
}
