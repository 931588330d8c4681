//! JSON values as the mapping language sees them: which are true ([`truthy`]: expressions'
//! `&&`, `||` and `!`, builtins' `if`, rules' `when`), and the value at a path of keys and array
//! indexes ([`walk`]: expressions' paths, the codec's and the canonical documents' lookups). A
//! leaf that the expressions, the builtins they call, the codec and the documents share.

use serde_json::Value;

/// JSON truthiness: absent, null, false, 0, "", [] and {} are false.
pub fn truthy(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_f64().is_some_and(|f| f != 0.0),
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
    }
}

/// Follows object keys (and array indexes written as numbers) from `v`.
pub fn walk<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, key| match v {
        Value::Object(o) => o.get(key),
        Value::Array(a) => key.parse::<usize>().ok().and_then(|i| a.get(i)),
        _ => None,
    })
}
