//! A token's header and claims as JSON objects, optionally refusing a name given twice.
//!
//! serde_json keeps the last of two equal names without a word, so `"plan":"free","plan":"gold"`
//! would read as gold while another reader of the same token sees free. RFC 7519 §4 lets a JWT
//! parser refuse such a token; [`object`] does, with a small visitor that builds the same
//! `serde_json::Value` and stops at the first name seen twice, at any depth.

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// Why a part of a token is not a JSON object.
#[derive(Debug, PartialEq, Eq)]
pub enum Problem {
    /// Not JSON, or not an object.
    Invalid,
    /// This name appears twice in one object.
    Duplicate(String),
}

/// `bytes` as a JSON object; with `unique`, an object naming anything twice is refused.
pub fn object(bytes: &[u8], unique: bool) -> Result<Map<String, Value>, Problem> {
    let value = if unique {
        let twice = RefCell::new(None);
        let mut reader = serde_json::Deserializer::from_slice(bytes);
        let read = Unique(&twice)
            .deserialize(&mut reader)
            .and_then(|v| reader.end().map(|()| v));
        match read {
            Ok(v) => v,
            Err(_) => {
                return Err(twice
                    .into_inner()
                    .map_or(Problem::Invalid, Problem::Duplicate))
            }
        }
    } else {
        serde_json::from_slice(bytes).map_err(|_| Problem::Invalid)?
    };
    match value {
        Value::Object(m) => Ok(m),
        _ => Err(Problem::Invalid),
    }
}

/// Reads any JSON value; records in its cell the first name an object repeats, and fails there.
#[derive(Clone, Copy)]
struct Unique<'a>(&'a RefCell<Option<String>>);

impl<'de> DeserializeSeed<'de> for Unique<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Unique<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value whose objects name each member once")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        // JSON text has no NaN or infinity, so this is always a number.
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(v) = seq.next_element_seed(self)? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut members = Map::new();
        while let Some(name) = map.next_key::<String>()? {
            if members.contains_key(&name) {
                let message = format!("`{name}` twice");
                *self.0.borrow_mut() = Some(name);
                return Err(de::Error::custom(message));
            }
            let value = map.next_value_seed(self)?;
            members.insert(name, value);
        }
        Ok(Value::Object(members))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_twice_is_found_at_any_depth() {
        let twice = |s: &str| object(s.as_bytes(), true);
        assert_eq!(
            twice(r#"{"plan":"free","plan":"gold"}"#),
            Err(Problem::Duplicate("plan".into()))
        );
        assert_eq!(
            twice(r#"{"a":[{"id":1,"id":2}]}"#),
            Err(Problem::Duplicate("id".into()))
        );
        assert_eq!(twice("[1]"), Err(Problem::Invalid));
        assert_eq!(twice(r#"{"a":1} x"#), Err(Problem::Invalid));
        let ok = twice(r#"{"a":{"b":[1,-2,3.5,"x",null,true]},"c":{"b":1}}"#);
        assert_eq!(
            ok.map(Value::Object),
            Ok(serde_json::json!({"a":{"b":[1,-2,3.5,"x",null,true]},"c":{"b":1}}))
        );
        // Without `unique`, the last one counts (serde_json's way).
        let last = object(br#"{"plan":"free","plan":"gold"}"#, false);
        assert_eq!(last.map(|m| m["plan"].clone()), Ok(Value::from("gold")));
    }
}
