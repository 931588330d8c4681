//! Problems found in a configuration or mapping file, each with where it was found.

use std::fmt;
use std::ops::Range;

use serde::de::DeserializeOwned;
use toml::de::{DeValue, ValueDeserializer};
use toml::Spanned;

/// Where a problem sits: the file, and a line and column when the setting has a span in the
/// source text, or only the setting's dotted path when it has none (a missing key, say).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The file as the user named it (or `<embedded default>`).
    pub file: String,
    /// 1-based line and column, when known.
    pub line_col: Option<(usize, usize)>,
    /// The dotted path of the setting, e.g. `routes[2].upstream`; empty for the whole file.
    pub path: String,
}

/// One thing wrong with a file. `interlingua check` prints one per line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub location: Location,
    pub message: String,
    pub kind: Kind,
}

/// What sort of problem it is: the file's, or the environment's it is deployed into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// The file is wrong (or names something that is not there).
    Invalid,
    /// The file names an environment variable (a secret) that is not set: a matter of the
    /// deployment, not of the file. Holds the variable's name.
    UnsetEnv(String),
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let loc = &self.location;
        write!(f, "{}", loc.file)?;
        if let Some((line, col)) = loc.line_col {
            write!(f, ":{line}:{col}")?;
        }
        if !loc.path.is_empty() {
            write!(f, ": {}", loc.path)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Every problem found in one load, sorted by position. Never empty.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", render(.0))]
pub struct Problems(pub Vec<Problem>);

fn render(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

impl Problems {
    /// The problems, in file order.
    pub fn iter(&self) -> impl Iterator<Item = &Problem> {
        self.0.iter()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The environment variables the problems say are unset, in order, each once.
    pub fn unset_env(&self) -> Vec<&str> {
        let mut vars: Vec<&str> = Vec::new();
        for p in &self.0 {
            if let Kind::UnsetEnv(v) = &p.kind {
                if !vars.contains(&v.as_str()) {
                    vars.push(v);
                }
            }
        }
        vars
    }
}

/// Turns byte spans into line and column for one source text, and collects problems.
pub struct Collector<'a> {
    file: &'a str,
    text: &'a str,
    problems: Vec<Problem>,
}

impl<'a> Collector<'a> {
    pub fn new(file: &'a str, text: &'a str) -> Self {
        Collector {
            file,
            text,
            problems: Vec::new(),
        }
    }

    /// Records a problem at a byte span of the source (or only at `path` when `span` is `None`).
    pub fn at(
        &mut self,
        span: Option<Range<usize>>,
        path: impl Into<String>,
        message: impl std::fmt::Display,
    ) {
        self.push(span, path.into(), message.to_string(), Kind::Invalid);
    }

    /// Records that the environment variable `var`, which the setting at `span` names, is not
    /// set.
    pub fn unset_env(&mut self, span: Option<Range<usize>>, path: impl Into<String>, var: &str) {
        let message = format!("the environment variable `{var}` is not set (or empty)");
        self.push(span, path.into(), message, Kind::UnsetEnv(var.to_string()));
    }

    fn push(&mut self, span: Option<Range<usize>>, path: String, message: String, kind: Kind) {
        let line_col = span.map(|s| line_col(self.text, s.start));
        self.problems.push(Problem {
            location: Location {
                file: self.file.to_string(),
                line_col,
                path,
            },
            message,
            kind,
        });
    }

    /// Records a problem that `toml` reported while parsing or deserializing.
    pub fn toml(&mut self, path: impl Into<String>, err: &toml::de::Error) {
        // toml's messages can span several lines (a snippet); the first line is the message.
        let message = err
            .message()
            .lines()
            .next()
            .unwrap_or("invalid value")
            .to_string();
        self.at(err.span(), path, message);
    }

    pub fn is_empty(&self) -> bool {
        self.problems.is_empty()
    }

    /// How many problems are recorded.
    pub fn len(&self) -> usize {
        self.problems.len()
    }

    /// Every problem recorded so far, in file order (those without a position last).
    pub fn into_problems(mut self) -> Problems {
        self.problems.sort_by(|a, b| {
            let key = |p: &Problem| p.location.line_col.unwrap_or((usize::MAX, usize::MAX));
            key(a).cmp(&key(b))
        });
        Problems(self.problems)
    }
}

/// Deserializes one value of a parsed TOML document; on failure, records the problem at its
/// span and returns `None`, so that the caller goes on and reports the next one too.
pub fn one<T: DeserializeOwned>(
    value: &Spanned<DeValue<'_>>,
    path: &str,
    problems: &mut Collector<'_>,
) -> Option<T> {
    match T::deserialize(ValueDeserializer::from(value.clone())) {
        Ok(v) => Some(v),
        Err(e) => {
            problems.toml(path, &e);
            None
        }
    }
}

/// 1-based line and column (in characters) of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let col = before.get(line_start..).map_or(0, |s| s.chars().count()) + 1;
    (line, col)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_from_one_in_characters() {
        let text = "a = 1\nbé = 2\n";
        assert_eq!(line_col(text, 0), (1, 1));
        assert_eq!(line_col(text, 6), (2, 1));
        // "é" is two bytes but one column.
        assert_eq!(line_col(text, 9), (2, 3));
    }

    #[test]
    fn problems_sort_by_position_and_unplaced_ones_last() {
        let mut c = Collector::new("f.toml", "x\ny\n");
        c.at(None, "a", "no span");
        c.at(Some(2..3), "b", "second line");
        c.at(Some(0..1), "c", "first line");
        let p = c.into_problems();
        let lines: Vec<String> = p.iter().map(ToString::to_string).collect();
        assert_eq!(
            lines,
            [
                "f.toml:1:1: c: first line",
                "f.toml:2:1: b: second line",
                "f.toml: a: no span"
            ]
        );
    }
}
