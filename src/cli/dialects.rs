//! `interlingua dialects`: the dialects available (mapping files in the mappings directory and
//! the built-in ones) and the operations each carries as a front and as a back.

use std::path::PathBuf;
use std::process::ExitCode;

use mapping::dialect::{self, Mapping};
use mapping::task::Operation;

#[derive(Debug, clap::Args)]
pub struct DialectsArgs {
    /// Where mapping files are looked for (the built-in ones are used for the others).
    #[arg(long, value_name = "DIR", default_value = "mappings")]
    mappings: PathBuf,
    /// Print the table of operations per dialect, as front and as back, in Markdown (the
    /// README's table is this output).
    #[arg(long)]
    markdown: bool,
}

pub fn run(args: &DialectsArgs) -> ExitCode {
    let names: Vec<String> = dialect::available(&args.mappings)
        .into_iter()
        .filter(|n| n != dialect::PASSTHROUGH)
        .collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let dialects = match dialect::load(&args.mappings, &refs) {
        Ok(d) => d,
        Err(problems) => {
            for p in problems.iter() {
                eprintln!("{p}");
            }
            return ExitCode::FAILURE;
        }
    };
    let mappings: Vec<&Mapping> = dialects.values().map(|m| &**m).collect();
    if args.markdown {
        print!("{}", markdown(&mappings));
    } else {
        print!("{}", listing(&mappings));
    }
    ExitCode::SUCCESS
}

/// Which sides of `op` a dialect carries.
fn sides(m: &Mapping, op: Operation) -> (bool, bool) {
    let forms = m.ops.iter().filter(|o| o.op == op);
    forms.fold((false, false), |(f, b), o| (f || o.front, b || o.back))
}

/// The table: one row per canonical operation, one column per dialect.
pub fn markdown(mappings: &[&Mapping]) -> String {
    let mut out = String::from("| operation |");
    for m in mappings {
        out.push_str(&format!(" `{}` |", m.name));
    }
    out.push_str("\n|---|");
    out.push_str(&"---|".repeat(mappings.len()));
    out.push('\n');
    for op in Operation::ALL {
        out.push_str(&format!("| `{}` |", op.name()));
        for m in mappings {
            let cell = match sides(m, op) {
                (true, true) => "front, back",
                (true, false) => "front",
                (false, true) => "back",
                (false, false) => "–",
            };
            out.push_str(&format!(" {cell} |"));
        }
        out.push('\n');
    }
    out
}

/// Every dialect with its forms of each operation: side, method, path, and what tells forms
/// apart.
fn listing(mappings: &[&Mapping]) -> String {
    let mut out = String::new();
    for m in mappings {
        out.push_str(&format!("{}  {}  ({})\n", m.name, m.title, m.origin));
        for o in &m.ops {
            let side = match (o.front, o.back) {
                (true, true) => "front+back",
                (true, false) => "front",
                _ => "back",
            };
            let mut notes = Vec::new();
            if o.key != o.op.name() {
                notes.push(format!("form `{}`", o.key));
            }
            if !o.conditions.is_empty() {
                notes.push(format!(
                    "{} condition(s) on the request",
                    o.conditions.len()
                ));
            }
            if o.stream.is_some() {
                notes.push("answers with events".to_string());
            }
            if !o.then.is_empty() {
                notes.push(format!("{} more call(s)", o.then.len()));
            }
            out.push_str(&format!(
                "  {:<14} {:<10} {:<6} {}{}\n",
                o.op.name(),
                side,
                o.method.as_str(),
                o.path.as_str(),
                if notes.is_empty() {
                    String::new()
                } else {
                    format!("  ({})", notes.join("; "))
                }
            ));
        }
        for a in &m.answers {
            out.push_str(&format!(
                "  {:<14} {:<10} {:<6} {}  (answered by interlingua: `{}`)\n",
                "-",
                "front",
                a.method.as_str(),
                a.path.as_str(),
                a.key
            ));
        }
        for r in &m.refused {
            out.push_str(&format!(
                "  {:<14} {:<10} {:<6} {}  (refused with {}: `{}`)\n",
                "-",
                "front",
                r.method.as_str(),
                r.path.as_str(),
                r.status,
                r.name
            ));
        }
    }
    out
}
