//! The mapping language's expressions: what a field's `value`, `read` and `when` say, parsed once
//! when a mapping is loaded and evaluated per message.
//!
//! ```text
//! expr    := and ( "||" and )*                 the first truthy operand (or the last), like JS
//! and     := cmp ( "&&" cmp )*                 the first falsy operand (or the last)
//! cmp     := coalesce ( ("==" | "!=" | "<" | "<=" | ">" | ">=") coalesce )?
//! coalesce:= unary ( "??" unary )*             a ?? b: a when present (not null, not ""), else b
//! unary   := "!" unary | primary
//! primary := literal | "$" | path | call | list | "(" expr ")"
//! literal := 'text' | "text" | number | true | false | null | {}
//! list    := "[" ( expr ( "," expr )* )? "]"   absent and null elements are left out
//! path    := name ( "." name )*                a canonical field (task.input.text), var.NAME, let.NAME,
//!                                              or $.x
//! call    := name "(" ( expr ( "," expr )* )? ")"   a built-in function
//! ```
//!
//! Whitespace, newlines included, may stand between any two tokens: a long expression can be laid
//! out over lines in a TOML multi-line string (`'''…'''`). `let.NAME` is a named value of the
//! mapping's `[let]` table, inlined when the mapping is loaded (see `named`).
//!
//! `<`, `<=`, `>`, `>=` compare numbers (numeric text counts as a number) and are false when
//! either side is not one.
//!
//! A value is a JSON value or *absent*; a path that leads nowhere is absent, and absent is not an
//! error: the field rule that uses it decides (default, required, or leave the field out).

use super::syntax::SyntaxError;
use serde_json::Value;

use super::builtins::{self, Builtin};
use super::value::{truthy, walk};

/// A parsed expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    Literal(Value),
    /// `$`: the dialect value being read (only in `read` expressions), optionally with a path into it.
    Current(Vec<String>),
    /// A canonical path, e.g. `task.input.text` or `var.text_field`.
    Path(Vec<String>),
    Call(Builtin, Vec<Expr>),
    Coalesce(Box<Expr>, Box<Expr>),
    Eq(Box<Expr>, Box<Expr>),
    Ne(Box<Expr>, Box<Expr>),
    /// A numeric comparison.
    Cmp(Box<Expr>, Ordering, Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
    /// `[a, b]`: a list of the present values.
    List(Vec<Expr>),
}

/// What a numeric comparison asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ordering {
    Less,
    LessEq,
    Greater,
    GreaterEq,
}

/// Where expressions find their values.
pub trait Scope {
    /// The value at a canonical path, if any (borrowed: a mapping that walks a task's steps must
    /// not copy them to read one field).
    fn lookup(&self, path: &[String]) -> Option<&Value>;
    /// The value `$` stands for, if any.
    fn current(&self) -> Option<&Value>;
    /// The key `seal` and `unseal` use; none (empty) unless the scope has one.
    fn seal_key(&self) -> &[u8] {
        &[]
    }
}

/// Why an expression could not be evaluated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvalError(pub String);

impl Expr {
    /// Parses `text`. The error says what was expected and at which character.
    pub fn parse(text: &str) -> Result<Expr, SyntaxError> {
        Self::parse_text(text).map_err(SyntaxError::from)
    }

    fn parse_text(text: &str) -> Result<Expr, String> {
        let mut p = Parser {
            chars: text.chars().collect(),
            pos: 0,
        };
        let e = p.expr()?;
        p.skip_ws();
        if p.pos < p.chars.len() {
            return Err(format!(
                "unexpected `{}` at character {}",
                p.rest(),
                p.pos + 1
            ));
        }
        Ok(e)
    }

    /// Evaluates the expression. `Ok(None)` is an absent value.
    pub fn eval(&self, scope: &dyn Scope) -> Result<Option<Value>, EvalError> {
        match self {
            Expr::Literal(v) => Ok(Some(v.clone())),
            Expr::Current(path) => Ok(scope.current().and_then(|v| walk(v, path)).cloned()),
            Expr::Path(path) => Ok(scope.lookup(path).cloned()),
            Expr::Call(f, args) => {
                let values = args
                    .iter()
                    .map(|a| a.eval(scope))
                    .collect::<Result<Vec<_>, _>>()?;
                builtins::call(*f, values, scope.seal_key()).map_err(|e| EvalError(e.to_string()))
            }
            Expr::Coalesce(a, b) => match a.eval(scope)? {
                // An empty string counts as absent: mapping variables default to "".
                Some(v) if !v.is_null() && v != Value::String(String::new()) => Ok(Some(v)),
                _ => b.eval(scope),
            },
            // Absent and null are equal.
            Expr::Eq(a, b) => Ok(Some(Value::Bool(
                a.eval(scope)?.unwrap_or(Value::Null) == b.eval(scope)?.unwrap_or(Value::Null),
            ))),
            Expr::Ne(a, b) => Ok(Some(Value::Bool(
                a.eval(scope)?.unwrap_or(Value::Null) != b.eval(scope)?.unwrap_or(Value::Null),
            ))),
            Expr::Cmp(a, o, b) => {
                let (x, y) = (number(a.eval(scope)?), number(b.eval(scope)?));
                Ok(Some(Value::Bool(match (x, y) {
                    (Some(x), Some(y)) => match o {
                        Ordering::Less => x < y,
                        Ordering::LessEq => x <= y,
                        Ordering::Greater => x > y,
                        Ordering::GreaterEq => x >= y,
                    },
                    _ => false,
                })))
            }
            Expr::And(a, b) => {
                let left = a.eval(scope)?;
                if truthy(left.as_ref()) {
                    b.eval(scope)
                } else {
                    Ok(left)
                }
            }
            Expr::Or(a, b) => {
                let left = a.eval(scope)?;
                if truthy(left.as_ref()) {
                    Ok(left)
                } else {
                    b.eval(scope)
                }
            }
            Expr::Not(a) => Ok(Some(Value::Bool(!truthy(a.eval(scope)?.as_ref())))),
            Expr::List(items) => {
                let mut out = Vec::with_capacity(items.len());
                for i in items {
                    if let Some(v) = i.eval(scope)?.filter(|v| !v.is_null()) {
                        out.push(v);
                    }
                }
                Ok(Some(Value::Array(out)))
            }
        }
    }

    /// Every canonical path the expression reads, for load-time checks.
    pub fn paths(&self) -> Vec<&[String]> {
        let mut out = Vec::new();
        self.collect_paths(&mut out);
        out
    }

    fn collect_paths<'a>(&'a self, out: &mut Vec<&'a [String]>) {
        match self {
            Expr::Path(p) => out.push(p),
            Expr::Call(_, args) | Expr::List(args) => {
                args.iter().for_each(|a| a.collect_paths(out))
            }
            Expr::Coalesce(a, b)
            | Expr::Eq(a, b)
            | Expr::Ne(a, b)
            | Expr::Cmp(a, _, b)
            | Expr::And(a, b)
            | Expr::Or(a, b) => {
                a.collect_paths(out);
                b.collect_paths(out);
            }
            Expr::Not(a) => a.collect_paths(out),
            Expr::Literal(_) | Expr::Current(_) => {}
        }
    }

    /// The expression with every path for which `f` gives an expression replaced by it (how
    /// named values are inlined at load: what is evaluated is the same tree as if written out).
    pub fn replace_paths(self, f: &mut dyn FnMut(&[String]) -> Option<Expr>) -> Expr {
        fn boxed(e: Expr, f: &mut dyn FnMut(&[String]) -> Option<Expr>) -> Box<Expr> {
            Box::new(e.replace_paths(f))
        }
        match self {
            Expr::Path(p) => f(&p).unwrap_or(Expr::Path(p)),
            Expr::Call(b, args) => {
                Expr::Call(b, args.into_iter().map(|a| a.replace_paths(f)).collect())
            }
            Expr::List(items) => {
                Expr::List(items.into_iter().map(|a| a.replace_paths(f)).collect())
            }
            Expr::Coalesce(a, b) => Expr::Coalesce(boxed(*a, f), boxed(*b, f)),
            Expr::Eq(a, b) => Expr::Eq(boxed(*a, f), boxed(*b, f)),
            Expr::Ne(a, b) => Expr::Ne(boxed(*a, f), boxed(*b, f)),
            Expr::Cmp(a, o, b) => Expr::Cmp(boxed(*a, f), o, boxed(*b, f)),
            Expr::And(a, b) => Expr::And(boxed(*a, f), boxed(*b, f)),
            Expr::Or(a, b) => Expr::Or(boxed(*a, f), boxed(*b, f)),
            Expr::Not(a) => Expr::Not(boxed(*a, f)),
            e @ (Expr::Literal(_) | Expr::Current(_)) => e,
        }
    }

    /// Whether the expression can only produce a value from `$` (so there is no point evaluating
    /// it when nothing was read): true unless some part could stand on its own.
    pub fn uses_current_only(&self) -> bool {
        match self {
            Expr::Current(_) => true,
            Expr::Literal(_) | Expr::Path(_) => false,
            Expr::Call(f, args) => {
                !f.is_source() && !args.is_empty() && args.iter().all(Expr::uses_current_only)
            }
            Expr::Coalesce(a, b) => a.uses_current_only() && b.uses_current_only(),
            Expr::Eq(..)
            | Expr::Ne(..)
            | Expr::Cmp(..)
            | Expr::And(..)
            | Expr::Or(..)
            | Expr::Not(_)
            | Expr::List(_) => false,
        }
    }

    /// Whether the expression reads `$`.
    pub fn uses_current(&self) -> bool {
        match self {
            Expr::Current(_) => true,
            Expr::Call(_, args) | Expr::List(args) => args.iter().any(Expr::uses_current),
            Expr::Coalesce(a, b)
            | Expr::Eq(a, b)
            | Expr::Ne(a, b)
            | Expr::Cmp(a, _, b)
            | Expr::And(a, b)
            | Expr::Or(a, b) => a.uses_current() || b.uses_current(),
            Expr::Not(a) => a.uses_current(),
            Expr::Literal(_) | Expr::Path(_) => false,
        }
    }
}

/// A number, or text holding one.
fn number(v: Option<Value>) -> Option<f64> {
    match v? {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
}

impl Parser {
    fn rest(&self) -> String {
        self.chars[self.pos..].iter().take(12).collect()
    }

    fn skip_ws(&mut self) {
        while self.chars.get(self.pos).is_some_and(|c| c.is_whitespace()) {
            self.pos += 1;
        }
    }

    fn eat(&mut self, token: &str) -> bool {
        self.skip_ws();
        let t: Vec<char> = token.chars().collect();
        if self.chars.get(self.pos..self.pos + t.len()) == Some(&t[..]) {
            self.pos += t.len();
            true
        } else {
            false
        }
    }

    fn expected(&self, what: &str) -> String {
        if self.pos >= self.chars.len() {
            format!("expected {what} at the end")
        } else {
            format!(
                "expected {what} at character {}, found `{}`",
                self.pos + 1,
                self.rest()
            )
        }
    }

    fn expr(&mut self) -> Result<Expr, String> {
        let mut left = self.and()?;
        while self.eat("||") {
            left = Expr::Or(Box::new(left), Box::new(self.and()?));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Expr, String> {
        let mut left = self.cmp()?;
        while self.eat("&&") {
            left = Expr::And(Box::new(left), Box::new(self.cmp()?));
        }
        Ok(left)
    }

    fn cmp(&mut self) -> Result<Expr, String> {
        let left = self.coalesce()?;
        if self.eat("==") {
            return Ok(Expr::Eq(Box::new(left), Box::new(self.coalesce()?)));
        }
        if self.eat("!=") {
            return Ok(Expr::Ne(Box::new(left), Box::new(self.coalesce()?)));
        }
        for (token, o) in [
            ("<=", Ordering::LessEq),
            (">=", Ordering::GreaterEq),
            ("<", Ordering::Less),
            (">", Ordering::Greater),
        ] {
            if self.eat(token) {
                return Ok(Expr::Cmp(Box::new(left), o, Box::new(self.coalesce()?)));
            }
        }
        Ok(left)
    }

    fn coalesce(&mut self) -> Result<Expr, String> {
        let mut left = self.unary()?;
        while self.eat("??") {
            left = Expr::Coalesce(Box::new(left), Box::new(self.unary()?));
        }
        Ok(left)
    }

    fn unary(&mut self) -> Result<Expr, String> {
        self.skip_ws();
        // `!=` is handled by `expr`; here `!` is only a prefix.
        if self.chars.get(self.pos) == Some(&'!') && self.chars.get(self.pos + 1) != Some(&'=') {
            self.pos += 1;
            return Ok(Expr::Not(Box::new(self.unary()?)));
        }
        self.primary()
    }

    fn primary(&mut self) -> Result<Expr, String> {
        self.skip_ws();
        let Some(&c) = self.chars.get(self.pos) else {
            return Err(self.expected("a value"));
        };
        match c {
            '\'' | '"' => self.string(c).map(|s| Expr::Literal(Value::String(s))),
            '(' => {
                self.pos += 1;
                let e = self.expr()?;
                if !self.eat(")") {
                    return Err(self.expected("`)`"));
                }
                Ok(e)
            }
            '{' => {
                if self.eat("{") && self.eat("}") {
                    Ok(Expr::Literal(Value::Object(Default::default())))
                } else {
                    Err(self.expected("`{}` (only empty object literals are allowed)"))
                }
            }
            '[' => {
                self.pos += 1;
                let mut items = Vec::new();
                if !self.eat("]") {
                    loop {
                        items.push(self.expr()?);
                        if self.eat("]") {
                            break;
                        }
                        if !self.eat(",") {
                            return Err(self.expected("`,` or `]`"));
                        }
                    }
                }
                if items.is_empty() {
                    Ok(Expr::Literal(Value::Array(Vec::new())))
                } else {
                    Ok(Expr::List(items))
                }
            }
            '$' => {
                self.pos += 1;
                let mut path = Vec::new();
                while self.chars.get(self.pos) == Some(&'.') {
                    self.pos += 1;
                    path.push(self.name()?);
                }
                Ok(Expr::Current(path))
            }
            c if c == '-' || c.is_ascii_digit() => self.number(),
            c if c.is_alphabetic() || c == '_' => {
                let first = self.name()?;
                match first.as_str() {
                    "true" => return Ok(Expr::Literal(Value::Bool(true))),
                    "false" => return Ok(Expr::Literal(Value::Bool(false))),
                    "null" => return Ok(Expr::Literal(Value::Null)),
                    _ => {}
                }
                self.skip_ws();
                if self.chars.get(self.pos) == Some(&'(') {
                    self.pos += 1;
                    let f = Builtin::from_name(&first).ok_or_else(|| {
                        format!(
                            "unknown function `{first}`; known: {}",
                            builtins::names().join(", ")
                        )
                    })?;
                    let mut args = Vec::new();
                    if !self.eat(")") {
                        loop {
                            args.push(self.expr()?);
                            if self.eat(")") {
                                break;
                            }
                            if !self.eat(",") {
                                return Err(self.expected("`,` or `)`"));
                            }
                        }
                    }
                    f.check_arity(args.len()).map_err(|e| e.to_string())?;
                    for (i, a) in args.iter().enumerate() {
                        if let Expr::Literal(v) = a {
                            f.check_literal(i, v).map_err(|e| e.to_string())?;
                        }
                    }
                    return Ok(Expr::Call(f, args));
                }
                let mut path = vec![first];
                while self.chars.get(self.pos) == Some(&'.') {
                    self.pos += 1;
                    path.push(self.name()?);
                }
                Ok(Expr::Path(path))
            }
            _ => Err(self.expected("a value")),
        }
    }

    fn name(&mut self) -> Result<String, String> {
        let start = self.pos;
        while self
            .chars
            .get(self.pos)
            .is_some_and(|c| c.is_alphanumeric() || *c == '_' || *c == '-')
        {
            self.pos += 1;
        }
        if start == self.pos {
            return Err(self.expected("a name"));
        }
        Ok(self.chars[start..self.pos].iter().collect())
    }

    fn string(&mut self, quote: char) -> Result<String, String> {
        self.pos += 1;
        let mut out = String::new();
        loop {
            match self.chars.get(self.pos) {
                None => return Err("unterminated string".to_string()),
                Some(&c) if c == quote => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some('\\') => {
                    self.pos += 1;
                    match self.chars.get(self.pos) {
                        Some(&c) => out.push(c),
                        None => return Err("unterminated string".to_string()),
                    }
                    self.pos += 1;
                }
                Some(&c) => {
                    out.push(c);
                    self.pos += 1;
                }
            }
        }
    }

    fn number(&mut self) -> Result<Expr, String> {
        let start = self.pos;
        self.pos += 1;
        while self
            .chars
            .get(self.pos)
            .is_some_and(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-'))
        {
            self.pos += 1;
        }
        let text: String = self.chars[start..self.pos].iter().collect();
        serde_json::from_str::<Value>(&text)
            .ok()
            .filter(Value::is_number)
            .map(Expr::Literal)
            .ok_or_else(|| format!("`{text}` is not a number"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct Doc(Value, Option<Value>);
    impl Scope for Doc {
        fn lookup(&self, path: &[String]) -> Option<&Value> {
            walk(&self.0, path)
        }
        fn current(&self) -> Option<&Value> {
            self.1.as_ref()
        }
    }

    fn eval(text: &str, doc: Value, current: Option<Value>) -> Option<Value> {
        Expr::parse(text).unwrap().eval(&Doc(doc, current)).unwrap()
    }

    #[test]
    fn paths_literals_and_coalesce() {
        let doc = json!({"task": {"input": {"text": "hi"}, "name": null}});
        assert_eq!(
            eval("task.input.text", doc.clone(), None),
            Some(json!("hi"))
        );
        assert_eq!(eval("task.missing", doc.clone(), None), None);
        assert_eq!(
            eval("task.name ?? 'x'", doc.clone(), None),
            Some(json!("x"))
        );
        assert_eq!(
            eval("task.missing ?? task.input.text", doc.clone(), None),
            Some(json!("hi"))
        );
        assert_eq!(eval("[]", doc.clone(), None), Some(json!([])));
        assert_eq!(eval("-1.5", doc, None), Some(json!(-1.5)));
    }

    #[test]
    fn comparisons_and_not() {
        let doc = json!({"task": {"status": "awaiting_input"}});
        assert_eq!(
            eval("task.status == 'awaiting_input'", doc.clone(), None),
            Some(json!(true))
        );
        assert_eq!(
            eval("task.status != \"running\"", doc.clone(), None),
            Some(json!(true))
        );
        assert_eq!(eval("!task.status", doc.clone(), None), Some(json!(false)));
        assert_eq!(eval("!task.nothing", doc, None), Some(json!(true)));
    }

    #[test]
    fn current_value_and_calls() {
        let current = json!({"a": {"b": 2}});
        assert_eq!(
            eval("$.a.b", json!({}), Some(current.clone())),
            Some(json!(2))
        );
        assert_eq!(
            eval("json_string($)", json!({}), Some(json!([1]))),
            Some(json!("[1]"))
        );
    }

    #[test]
    fn logic_lists_and_numbers() {
        let doc = json!({"task": {"turn": 2, "name": "n", "text": "3"}});
        assert_eq!(eval("task.turn > 1", doc.clone(), None), Some(json!(true)));
        assert_eq!(eval("task.text >= 3", doc.clone(), None), Some(json!(true)));
        assert_eq!(eval("task.name < 3", doc.clone(), None), Some(json!(false)));
        assert_eq!(
            eval("task.turn > 1 && task.name == 'n'", doc.clone(), None),
            Some(json!(true))
        );
        assert_eq!(
            eval("task.missing || 'fallback'", doc.clone(), None),
            Some(json!("fallback"))
        );
        assert_eq!(
            eval("task.turn < 1 || task.missing == null", doc.clone(), None),
            Some(json!(true))
        );
        assert_eq!(
            eval(
                "[task.name, task.missing, object('a', task.turn)]",
                doc,
                None
            ),
            Some(json!(["n", {"a": 2}]))
        );
        assert_eq!(
            Expr::parse("[1, 2").unwrap_err().to_string(),
            "expected `,` or `]` at the end"
        );
    }

    #[test]
    fn parse_errors_say_where() {
        assert!(Expr::parse("task.")
            .unwrap_err()
            .to_string()
            .contains("expected a name"));
        assert!(Expr::parse("nope(1)")
            .unwrap_err()
            .to_string()
            .contains("unknown function `nope`"));
        assert!(Expr::parse("'open")
            .unwrap_err()
            .to_string()
            .contains("unterminated"));
        assert!(Expr::parse("a b")
            .unwrap_err()
            .to_string()
            .contains("unexpected `b`"));
        assert!(Expr::parse("uuid(1)")
            .unwrap_err()
            .to_string()
            .contains("takes"));
    }
}
