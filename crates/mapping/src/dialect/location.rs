//! Where a field rule's value sits in a dialect message: a JSONPath into the body, a path
//! parameter, a query parameter or a header.
//!
//! JSONPaths are parsed with `jsonpath-rust`. Simple paths (`$.a.b`, `$.a[0]`, `$['a b']`) are also
//! kept as plain key/index segments: they are read without the query engine and can be written,
//! which is what encoding needs. Paths with wildcards, filters or descent can only be read.

use super::syntax::SyntaxError;
use jsonpath_rust::parser::model::JpQuery;
use serde_json::{Map, Value};

/// One step of a simple path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    Key(String),
    Index(usize),
}

/// A JSONPath into a body.
#[derive(Debug, Clone)]
pub enum JsonLocation {
    /// Keys and indexes only: readable and writable.
    Simple(Vec<Segment>),
    /// Anything else JSONPath can say: readable only; the first match is used.
    Query(Box<JpQuery>),
}

/// Where a value sits.
#[derive(Debug, Clone)]
pub enum Location {
    Json(JsonLocation),
    Param(String),
    Query(String),
    Header(String),
}

impl JsonLocation {
    /// Parses a JSONPath. The error is `jsonpath-rust`'s message, or ours for what it accepts
    /// but interlingua cannot use.
    pub fn parse(text: &str) -> Result<JsonLocation, SyntaxError> {
        Self::parse_text(text).map_err(SyntaxError::from)
    }

    fn parse_text(text: &str) -> Result<JsonLocation, String> {
        let query = jsonpath_rust::parser::parse_json_path(text).map_err(|e| {
            // The parser's message is a multi-line drawing; its `= expected …` line says it all.
            let full = e.to_string();
            let why = full
                .lines()
                .map(str::trim)
                .find_map(|l| l.strip_prefix("= "))
                .unwrap_or("it does not parse");
            format!("bad JSONPath `{text}`: {why}")
        })?;
        match simple_segments(text) {
            Some(segments) => Ok(JsonLocation::Simple(segments)),
            None => Ok(JsonLocation::Query(Box::new(query))),
        }
    }

    pub fn is_writable(&self) -> bool {
        matches!(self, JsonLocation::Simple(_))
    }

    /// The first value at this path, if any.
    pub fn read(&self, body: &Value) -> Option<Value> {
        match self {
            JsonLocation::Simple(segs) => read_segments(body, segs).cloned(),
            JsonLocation::Query(q) => jsonpath_rust::query::js_path_process(q, body)
                .ok()
                .and_then(|found| found.into_iter().next())
                .map(|r| r.val().clone()),
        }
    }

    /// Every value at this path, in document order.
    pub fn read_all(&self, body: &Value) -> Vec<Value> {
        match self {
            JsonLocation::Simple(segs) => read_segments(body, segs).cloned().into_iter().collect(),
            JsonLocation::Query(q) => jsonpath_rust::query::js_path_process(q, body)
                .map(|found| found.into_iter().map(|r| r.val().clone()).collect())
                .unwrap_or_default(),
        }
    }

    /// Writes `value` at this path, creating objects (and extending arrays) on the way.
    /// Returns false when the path is not writable or something in the way is not an object.
    pub fn write(&self, body: &mut Value, value: Value) -> bool {
        let JsonLocation::Simple(segs) = self else {
            return false;
        };
        write_segments(body, segs, value)
    }
}

fn read_segments<'a>(v: &'a Value, segs: &[Segment]) -> Option<&'a Value> {
    segs.iter().try_fold(v, |v, s| match (s, v) {
        (Segment::Key(k), Value::Object(o)) => o.get(k),
        (Segment::Index(i), Value::Array(a)) => a.get(*i),
        _ => None,
    })
}

fn write_segments(target: &mut Value, segs: &[Segment], value: Value) -> bool {
    let Some((first, rest)) = segs.split_first() else {
        *target = value;
        return true;
    };
    match first {
        Segment::Key(k) => {
            if target.is_null() {
                *target = Value::Object(Map::new());
            }
            let Value::Object(o) = target else {
                return false;
            };
            // Looked up before inserting: most writes land in an object that has the key.
            if let Some(slot) = o.get_mut(k.as_str()) {
                return write_segments(slot, rest, value);
            }
            let slot = o.entry(k.clone()).or_insert(Value::Null);
            write_segments(slot, rest, value)
        }
        Segment::Index(i) => {
            if target.is_null() {
                *target = Value::Array(Vec::new());
            }
            let Value::Array(a) = target else {
                return false;
            };
            while a.len() <= *i {
                a.push(Value::Null);
            }
            write_segments(&mut a[*i], rest, value)
        }
    }
}

/// `$`, `$.a.b`, `$.a[0]`, `$['a b'].c` as segments; `None` for anything else.
fn simple_segments(text: &str) -> Option<Vec<Segment>> {
    let rest = text.strip_prefix('$')?;
    let chars: Vec<char> = rest.chars().collect();
    let mut i = 0;
    let mut out = Vec::new();
    while i < chars.len() {
        match chars[i] {
            '.' => {
                i += 1;
                let start = i;
                while i < chars.len()
                    && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '-')
                {
                    i += 1;
                }
                if start == i {
                    return None;
                }
                out.push(Segment::Key(chars[start..i].iter().collect()));
            }
            '[' => {
                i += 1;
                match chars.get(i) {
                    Some('\'') | Some('"') => {
                        let quote = chars[i];
                        i += 1;
                        let start = i;
                        while i < chars.len() && chars[i] != quote {
                            i += 1;
                        }
                        out.push(Segment::Key(chars.get(start..i)?.iter().collect()));
                        i += 1;
                    }
                    Some(c) if c.is_ascii_digit() => {
                        let start = i;
                        while i < chars.len() && chars[i].is_ascii_digit() {
                            i += 1;
                        }
                        let n: String = chars[start..i].iter().collect();
                        out.push(Segment::Index(n.parse().ok()?));
                    }
                    _ => return None,
                }
                if chars.get(i) != Some(&']') {
                    return None;
                }
                i += 1;
            }
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn simple_paths_read_and_write() {
        let p = JsonLocation::parse("$.task['task id'].steps[1]").unwrap();
        assert!(p.is_writable());
        let mut body = Value::Null;
        assert!(p.write(&mut body, json!("x")));
        assert_eq!(body, json!({"task": {"task id": {"steps": [null, "x"]}}}));
        assert_eq!(p.read(&body), Some(json!("x")));
        let root = JsonLocation::parse("$").unwrap();
        assert_eq!(root.read(&body), Some(body.clone()));
    }

    #[test]
    fn queries_are_read_only() {
        let p = JsonLocation::parse("$.steps[?@.is_last == true].output").unwrap();
        assert!(!p.is_writable());
        let body =
            json!({"steps": [{"is_last": false, "output": "a"}, {"is_last": true, "output": "b"}]});
        assert_eq!(p.read(&body), Some(json!("b")));
        assert!(!p.clone().write(&mut body.clone(), json!(1)));
    }

    #[test]
    fn bad_paths_are_reported() {
        assert!(JsonLocation::parse("$.a[")
            .unwrap_err()
            .to_string()
            .contains("bad JSONPath"));
        assert!(JsonLocation::parse("task.id").is_err());
    }
}
