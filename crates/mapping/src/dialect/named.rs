//! Named values: a mapping's `[let]` table, `NAME = "expression"`, used in any other expression as
//! `let.NAME`.
//!
//! A named value is a name for an expression, not a stored result: when the mapping is loaded,
//! every `let.NAME` is replaced by the expression it names (its own `let.` uses replaced first), so
//! a rule evaluates the very tree it would if the text were written out in place. Nothing is
//! looked up by name per message, and an expression is evaluated where it is used, each time (two
//! uses of a value holding `uuid()` are two ids). `$` in a named value is the value read by the
//! `read` expression that uses it.
//!
//! Load errors, each at the definition's or the use's file:line:col: a name that is not one, a
//! bad expression, an unknown canonical field or variable (checked once, where defined), an
//! unknown `let.NAME`, a value that refers to itself (directly or through others), a value no
//! expression uses. Names live under `let.` so none can shadow a canonical root or a variable.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use toml::Spanned;

use super::expr::Expr;
use crate::problem::Collector;

/// Checks the canonical fields and variables an expression reads, reporting at the span given.
pub type PathCheck<'c> = dyn Fn(&Expr, Range<usize>, &str, &mut Collector<'_>) + 'c;

/// The root under which named values are used.
pub const ROOT: &str = "let";

/// One definition: where it is written, what it names once its own uses are inlined (`None`
/// when it is broken; the problem is already reported), and the values it uses.
struct Def {
    span: Range<usize>,
    parsed: Option<Expr>,
    resolved: Option<Expr>,
    uses: BTreeSet<String>,
}

/// A mapping's compiled `[let]` table.
#[derive(Default)]
pub struct Named {
    defs: BTreeMap<String, Def>,
    /// The values some expression uses (a rule's, or another value's).
    used: RefCell<BTreeSet<String>>,
}

/// The name a path uses, when it is a `let.` path.
fn used_name(path: &[String]) -> Option<&[String]> {
    (path.first().map(String::as_str) == Some(ROOT)).then(|| &path[1..])
}

impl Named {
    /// Parses and resolves `[let]`. `check` checks the canonical fields and variables an
    /// expression reads (its `let.` paths excepted), reporting at the span it is given.
    pub fn compile(
        raw: BTreeMap<String, Spanned<String>>,
        check: &PathCheck<'_>,
        p: &mut Collector<'_>,
    ) -> Named {
        let mut defs = BTreeMap::new();
        for (name, text) in raw {
            let where_ = format!("let.{name}");
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                p.at(
                    Some(text.span()),
                    &where_,
                    "a name is letters, digits and '_'",
                );
            }
            let parsed = match Expr::parse(text.get_ref()) {
                Ok(e) => {
                    check(&e, text.span(), &where_, p);
                    Some(e)
                }
                Err(msg) => {
                    p.at(Some(text.span()), &where_, format!("bad expression: {msg}"));
                    None
                }
            };
            let uses = parsed
                .iter()
                .flat_map(Expr::paths)
                .filter_map(used_name)
                .filter_map(|rest| rest.first().cloned())
                .collect();
            defs.insert(
                name,
                Def {
                    span: text.span(),
                    parsed,
                    resolved: None,
                    uses,
                },
            );
        }
        let mut named = Named {
            defs,
            used: RefCell::default(),
        };
        let names: Vec<String> = named.defs.keys().cloned().collect();
        let mut done = BTreeSet::new();
        for name in names {
            named.resolve(&name, &mut Vec::new(), &mut done, p);
        }
        named
    }

    /// Inlines the uses in the named value `name`, those it uses first. `stack` holds the values
    /// being resolved, to name a cycle.
    fn resolve(
        &mut self,
        name: &str,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
        p: &mut Collector<'_>,
    ) {
        if done.contains(name) {
            return;
        }
        if let Some(at) = stack.iter().position(|n| n == name) {
            let mut cycle: Vec<String> = stack[at..].iter().map(|n| format!("let.{n}")).collect();
            cycle.push(format!("let.{name}"));
            let span = self.defs.get(name).map(|d| d.span.clone());
            p.at(
                span,
                format!("let.{name}"),
                format!("refers to itself: {}", cycle.join(" → ")),
            );
            return;
        }
        let Some(def) = self.defs.get(name) else {
            return;
        };
        let (span, parsed) = (def.span.clone(), def.parsed.clone());
        let deps: Vec<String> = def.uses.iter().cloned().collect();
        stack.push(name.to_string());
        for dep in &deps {
            self.resolve(dep, stack, done, p);
        }
        stack.pop();
        // A value caught in a cycle is left unresolved: the cycle is reported once, above.
        if stack.iter().any(|n| deps.contains(n)) || done.contains(name) {
            done.insert(name.to_string());
            return;
        }
        let resolved = parsed.and_then(|e| self.inline(e, span, &format!("let.{name}"), p));
        if let Some(def) = self.defs.get_mut(name) {
            def.resolved = resolved;
        }
        done.insert(name.to_string());
    }

    /// An expression with every `let.NAME` replaced by what it names (a rule's, or a named
    /// value's own). Unknown names are reported at `span`; `None` when one of the values it uses
    /// is broken (reported already, or here when unknown).
    pub fn inline(
        &self,
        e: Expr,
        span: Range<usize>,
        where_: &str,
        p: &mut Collector<'_>,
    ) -> Option<Expr> {
        let mut ok = true;
        let out = e.replace_paths(&mut |path| {
            let rest = used_name(path)?;
            let [name] = rest else {
                p.at(
                    Some(span.clone()),
                    where_,
                    format!(
                        "`{}`: a named value is used whole, as `let.NAME`",
                        path.join(".")
                    ),
                );
                ok = false;
                return Some(Expr::Literal(serde_json::Value::Null));
            };
            match self.defs.get(name) {
                Some(def) => {
                    self.used.borrow_mut().insert(name.clone());
                    if def.resolved.is_none() {
                        ok = false;
                    }
                    def.resolved.clone()
                }
                None => {
                    let known: Vec<&str> = self.defs.keys().map(String::as_str).collect();
                    p.at(
                        Some(span.clone()),
                        where_,
                        if known.is_empty() {
                            format!("unknown named value `let.{name}`: the mapping has no [let]")
                        } else {
                            format!(
                                "unknown named value `let.{name}`; [let] has: {}",
                                known.join(", ")
                            )
                        },
                    );
                    ok = false;
                    None
                }
            }
            .or(Some(Expr::Literal(serde_json::Value::Null)))
        });
        ok.then_some(out)
    }

    /// Reports every named value that no expression uses (a leftover, or a typo at its use).
    pub fn report_unused(&self, p: &mut Collector<'_>) {
        let used = self.used.borrow();
        for (name, def) in &self.defs {
            if !used.contains(name) {
                p.at(
                    Some(def.span.clone()),
                    format!("let.{name}"),
                    "is never used",
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::compile::parse;
    use super::super::mapping::Mapping;
    use crate::task::Operation;

    fn mapping(lets: &str, request: &str) -> String {
        format!(
            "dialect = \"named\"\n\n[vars]\nlang = \"en\"\n\n[let]\n{lets}\n\n\
             [operations.create_task]\nmethod = \"POST\"\npath = \"/tasks\"\nrequest = [\n{request}\n]\n"
        )
    }

    fn problems(text: &str, origin: &str) -> Vec<String> {
        let problems = parse(text, origin).expect_err("problems");
        problems.iter().map(ToString::to_string).collect()
    }

    fn value(m: &Mapping, i: usize) -> super::Expr {
        let op = m.op(Operation::CreateTask).expect("create_task");
        op.request.0[i].value.clone().expect("a value")
    }

    #[test]
    fn a_named_value_compiles_to_the_expression_written_out() {
        // A multi-line expression and a multi-line inline table (TOML 1.1) in passing.
        let named = mapping(
            "text = \"task.input.text ?? text_of(task.input.params) ?? ''\"\n\
             part = '''\n  object(\n    'text', let.text,\n    'lang', var.lang\n  )\n'''",
            "  {\n    json = \"$.parts\",\n    value = \"[let.part, let.part]\",\n  },\n  \
             { json = \"$.t\", value = \"let.text\" },",
        );
        let inline = mapping(
            "",
            "  { json = \"$.parts\", value = \"[object('text', task.input.text ?? \
             text_of(task.input.params) ?? '', 'lang', var.lang), object('text', task.input.text \
             ?? text_of(task.input.params) ?? '', 'lang', var.lang)]\" },\n  \
             { json = \"$.t\", value = \"task.input.text ?? text_of(task.input.params) ?? ''\" },",
        );
        let (named, inline) = (
            parse(&named, "named.toml").unwrap(),
            parse(&inline, "inline.toml").unwrap(),
        );
        assert_eq!(value(&named, 0), value(&inline, 0));
        assert_eq!(value(&named, 1), value(&inline, 1));
    }

    #[test]
    fn a_named_value_may_read_dollar_in_read_expressions_only() {
        let text = mapping(
            "action = \"$.action ?? 'none'\"",
            "  { json = \"$\", field = \"task.name\", read = \"let.action\" },\n  \
             { json = \"$.x\", value = \"let.action\" },",
        );
        let lines = problems(&text, "m.toml");
        assert_eq!(
            lines,
            [
                "m.toml:14:27: operations.create_task.request[1].value: `$` (the value read, here \
              in a named value) can only be used in `read`"
            ]
        );
    }

    #[test]
    fn named_value_problems_are_reported_where_they_are_written() {
        let text = mapping(
            "a = \"let.b ?? 1\"\nb = \"let.a\"\nself = \"[let.self]\"\n\
             typo = \"task.inptu.text\"\nbad = \"concat(\"\nunused = \"1\"\nwhole = \"let.a.b\"\n\
             \"not-a-name\" = \"2\"",
            "  { json = \"$.a\", value = \"let.a\" },\n  { json = \"$.b\", value = \"let.nope\" },\n  \
             { json = \"$.c\", value = \"[let.self, let.typo, let.bad, let.whole]\" },\n  \
             { json = \"$.d\", value = \"let.not-a-name\" },",
        );
        let lines = problems(&text, "m.toml");
        let expected = [
            "m.toml:7:5: let.a: refers to itself: let.a → let.b → let.a",
            "m.toml:9:8: let.self: refers to itself: let.self → let.self",
            "m.toml:10:8: let.typo: unknown canonical field `task.inptu.text`",
            "m.toml:11:7: let.bad: bad expression: expected a value at the end",
            "m.toml:12:10: let.unused: is never used",
            "m.toml:13:9: let.whole: `let.a.b`: a named value is used whole, as `let.NAME`",
            "m.toml:14:16: let.not-a-name: a name is letters, digits and '_'",
            "m.toml:21:27: operations.create_task.request[1].value: unknown named value `let.nope`; \
             [let] has: a, b, bad, not-a-name, self, typo, unused, whole",
        ];
        assert_eq!(lines, expected, "\n{}", lines.join("\n"));
    }

    #[test]
    fn a_mapping_without_let_names_no_values() {
        let text = "dialect = \"plain\"\n[operations.create_task]\nmethod = \"POST\"\n\
                    path = \"/t\"\nrequest = [{ json = \"$.a\", value = \"let.x\" }]\n";
        let lines = problems(text, "p.toml");
        assert_eq!(
            lines,
            ["p.toml:5:36: operations.create_task.request[0].value: unknown named value `let.x`: \
              the mapping has no [let]"]
        );
    }
}
