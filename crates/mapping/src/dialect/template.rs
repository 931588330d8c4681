//! Operation path templates: `/api/v1/agents/{did}/tasks/{task_id}`. Matched against request
//! paths when the dialect is the front, rendered into request paths when it is the back.

use super::syntax::{MissingParam, SyntaxError};
use std::collections::BTreeMap;

/// One segment of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    /// A parameter, and the literal text that ends its segment (`{id}:cancel`; empty for `{id}`).
    Param(String, String),
}

/// A parsed path template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathTemplate {
    parts: Vec<Part>,
    text: String,
}

impl PathTemplate {
    /// Parses a template. A parameter starts a segment (`{name}`) and may be followed by literal
    /// text to the segment's end (`{id}:cancel`, as in Google-style REST APIs such as A2A's
    /// HTTP+JSON binding); the query string is not part of a template (query parameters are
    /// field rules).
    pub fn parse(text: &str) -> Result<PathTemplate, SyntaxError> {
        Self::parse_text(text).map_err(SyntaxError::from)
    }

    fn parse_text(text: &str) -> Result<PathTemplate, String> {
        if !text.starts_with('/') {
            return Err(format!("path `{text}` must start with '/'"));
        }
        if text.contains('?') {
            return Err(format!(
                "path `{text}` has a query string; write query parameters as rules with `query = \"name\"`"
            ));
        }
        let mut parts = Vec::new();
        for seg in text.split('/').filter(|s| !s.is_empty()) {
            let param = seg
                .strip_prefix('{')
                .and_then(|s| s.split_once('}'))
                .filter(|(_, suffix)| !suffix.contains(['{', '}']));
            match param {
                Some((name, suffix))
                    if !name.is_empty()
                        && name.chars().all(|c| c.is_alphanumeric() || c == '_') =>
                {
                    if parts
                        .iter()
                        .any(|p| matches!(p, Part::Param(n, _) if n == name))
                    {
                        return Err(format!("path `{text}` names `{{{name}}}` twice"));
                    }
                    parts.push(Part::Param(name.to_string(), suffix.to_string()));
                }
                Some(_) => return Err(format!("path `{text}`: `{seg}` is not a parameter name")),
                None if seg.contains(['{', '}']) => {
                    return Err(format!(
                        "path `{text}`: a parameter must start its segment, not `{seg}`"
                    ))
                }
                None => parts.push(Part::Literal(seg.to_string())),
            }
        }
        Ok(PathTemplate {
            parts,
            text: text.to_string(),
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The parameter names, in order.
    pub fn params(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|p| match p {
            Part::Param(n, _) => Some(n.as_str()),
            Part::Literal(_) => None,
        })
    }

    /// How literal the template is: the more, the more specific. A literal segment counts 2, a
    /// parameter with literal text after it 1 (so `/tasks/{id}:cancel` beats `/tasks/{id}`, which
    /// would also take `abc:cancel` as an id).
    pub fn specificity(&self) -> usize {
        self.parts
            .iter()
            .map(|p| match p {
                Part::Literal(_) => 2,
                Part::Param(_, suffix) if !suffix.is_empty() => 1,
                Part::Param(..) => 0,
            })
            .sum()
    }

    /// Matches a request path (without query); returns the parameters, percent-decoded.
    pub fn matches(&self, path: &str) -> Option<BTreeMap<String, String>> {
        let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        if segs.len() != self.parts.len() {
            return None;
        }
        let mut params = BTreeMap::new();
        for (part, seg) in self.parts.iter().zip(segs) {
            match part {
                Part::Literal(l) if l == seg => {}
                Part::Literal(_) => return None,
                Part::Param(name, suffix) => {
                    let value = seg
                        .strip_suffix(suffix.as_str())
                        .filter(|v| !v.is_empty())?;
                    params.insert(name.clone(), percent_decode(value)?);
                }
            }
        }
        Some(params)
    }

    /// Renders the path with `params` percent-encoded. A missing parameter is an error naming it.
    pub fn render(&self, params: &BTreeMap<String, String>) -> Result<String, MissingParam> {
        self.render_with(params, &mut |name| Err(MissingParam(name.to_string())))
    }

    /// Renders the path for showing it (`interlingua translate`): a parameter without a value is
    /// written as its placeholder, `{name}`. Returns the path and the names left so.
    pub fn render_showing(&self, params: &BTreeMap<String, String>) -> (String, Vec<String>) {
        let mut missing = Vec::new();
        let path = self
            .render_with(params, &mut |name| {
                missing.push(name.to_string());
                Ok(format!("{{{name}}}"))
            })
            .unwrap_or_default();
        (path, missing)
    }

    /// Renders the path; `missing` gives the text of a parameter `params` lacks, or the error.
    fn render_with(
        &self,
        params: &BTreeMap<String, String>,
        missing: &mut dyn FnMut(&str) -> Result<String, MissingParam>,
    ) -> Result<String, MissingParam> {
        let mut out = String::new();
        for part in &self.parts {
            out.push('/');
            match part {
                Part::Literal(l) => out.push_str(l),
                Part::Param(name, suffix) => {
                    match params.get(name) {
                        Some(v) => out.push_str(&percent_encode(v)),
                        None => out.push_str(&missing(name)?),
                    }
                    out.push_str(suffix);
                }
            }
        }
        if out.is_empty() {
            out.push('/');
        }
        Ok(out)
    }
}

/// Percent-encodes everything but unreserved characters (RFC 3986) and `:` (kept readable for
/// ids such as `did:nv:…`).
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b':') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Decodes `%XX` escapes; `None` for a malformed escape or invalid UTF-8.
pub fn percent_decode(s: &str) -> Option<String> {
    if !s.contains('%') {
        return Some(s.to_string());
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Parses a query string into decoded pairs (`+` is a space, as in forms).
pub fn parse_query(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            let d = |s: &str| percent_decode(&s.replace('+', " ")).unwrap_or_else(|| s.to_string());
            (d(k), d(v))
        })
        .collect()
}

/// Renders decoded pairs as a query string.
pub fn render_query(pairs: &[(String, String)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", percent_encode(k), percent_encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn match_and_render_round_trip() {
        let t = PathTemplate::parse("/api/v1/agents/{did}/tasks/{task_id}").unwrap();
        let p = t
            .matches("/api/v1/agents/did:nv:ab/tasks/task-1%202")
            .unwrap();
        assert_eq!(p["did"], "did:nv:ab");
        assert_eq!(p["task_id"], "task-1 2");
        assert_eq!(
            t.render(&p).unwrap(),
            "/api/v1/agents/did:nv:ab/tasks/task-1%202"
        );
        assert_eq!(t.specificity(), 8);
        assert!(t.matches("/api/v1/agents/x/tasks").is_none());
    }

    #[test]
    fn a_parameter_may_end_with_literal_text() {
        let cancel = PathTemplate::parse("/tasks/{id}:cancel").unwrap();
        let plain = PathTemplate::parse("/tasks/{id}").unwrap();
        let p = cancel.matches("/tasks/t%3A1:cancel").unwrap();
        assert_eq!(p["id"], "t:1");
        assert_eq!(cancel.render(&p).unwrap(), "/tasks/t:1:cancel");
        assert!(cancel.matches("/tasks/abc").is_none());
        assert!(
            cancel.matches("/tasks/:cancel").is_none(),
            "an empty id is no id"
        );
        // Both match `abc:cancel`; the one with the suffix is the more specific.
        assert!(plain.matches("/tasks/abc:cancel").is_some());
        assert!(cancel.specificity() > plain.specificity());
        assert_eq!(cancel.params().collect::<Vec<_>>(), ["id"]);
    }

    #[test]
    fn bad_templates_are_refused() {
        assert!(PathTemplate::parse("status").is_err());
        assert!(PathTemplate::parse("/status?job_id={id}")
            .unwrap_err()
            .to_string()
            .contains("query"));
        assert!(PathTemplate::parse("/a/x{id}")
            .unwrap_err()
            .to_string()
            .contains("start its segment"));
        assert!(PathTemplate::parse("/a/{id}x{y}").is_err());
        assert!(PathTemplate::parse("/a/{id}/{id}")
            .unwrap_err()
            .to_string()
            .contains("twice"));
    }

    #[test]
    fn queries() {
        assert_eq!(
            parse_query("job_id=a%20b&x=1+2&flag"),
            vec![
                ("job_id".into(), "a b".into()),
                ("x".into(), "1 2".into()),
                ("flag".into(), "".into())
            ]
        );
        assert_eq!(
            render_query(&[("job_id".into(), "a b/c".into())]),
            "job_id=a%20b%2Fc"
        );
    }
}
