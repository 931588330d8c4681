//! `interlingua translate`: one operation's message from one dialect to another, offline, so a
//! mapping can be developed without a live agent. The translation itself is the mapping crate's
//! (`mapping::dialect::translate`); this reads the arguments and the file and prints the result.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::{json, Value};

use mapping::dialect::template::render_query;
use mapping::dialect::translate::{self, Side};
use mapping::dialect::{self, Message};
use mapping::task::Operation;

#[derive(Debug, clap::Args)]
pub struct TranslateArgs {
    /// The dialect the document is in.
    #[arg(long)]
    from: String,
    /// The dialect to translate it to.
    #[arg(long)]
    to: String,
    /// The canonical operation (create_task, get_task, provide_input, …).
    #[arg(long)]
    op: String,
    /// Translate the operation's response instead of its request.
    #[arg(long)]
    response: bool,
    /// A path parameter of the source message, NAME=VALUE (repeatable).
    #[arg(long = "param", value_name = "NAME=VALUE")]
    params: Vec<String>,
    /// A path parameter of the target's path that the translation does not fill (the agent's
    /// `{did}` in Nevermined's), NAME=VALUE (repeatable). One given neither way is shown as its
    /// placeholder (`{did}`) in the printed path, with a note on standard error.
    #[arg(long = "target-param", value_name = "NAME=VALUE")]
    target_params: Vec<String>,
    /// A query parameter of the source message, NAME=VALUE (repeatable).
    #[arg(long = "query", value_name = "NAME=VALUE")]
    query: Vec<String>,
    /// Where mapping files are looked for before the built-in ones.
    #[arg(long, value_name = "DIR", default_value = "mappings")]
    mappings: PathBuf,
    /// Also print the canonical document in between.
    #[arg(long)]
    show_canonical: bool,
    /// The JSON document (the message body); `-` or nothing reads standard input.
    file: Option<PathBuf>,
}

pub fn run(args: &TranslateArgs) -> ExitCode {
    match translate(args) {
        Ok(out) => {
            println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("interlingua translate: {e}");
            ExitCode::FAILURE
        }
    }
}

fn translate(args: &TranslateArgs) -> Result<Value, String> {
    let op = Operation::from_name(&args.op).ok_or_else(|| {
        let known: Vec<&str> = Operation::ALL.iter().map(|o| o.name()).collect();
        format!(
            "`{}` is not an operation; known: {}",
            args.op,
            known.join(", ")
        )
    })?;
    let dialects =
        dialect::load(&args.mappings, &[&args.from, &args.to]).map_err(|p| p.to_string())?;
    let (from, to) = match (dialects.get(&args.from), dialects.get(&args.to)) {
        (Some(f), Some(t)) => (f, t),
        _ => return Err("passthrough has no mapping to translate with".to_string()),
    };
    let text = match &args.file {
        Some(p) if p.as_os_str() != "-" => {
            std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?
        }
        _ => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map_err(|e| e.to_string())?;
            s
        }
    };
    let body = if text.trim().is_empty() {
        None
    } else {
        Some(
            serde_json::from_str::<Value>(&text)
                .map_err(|e| format!("the document is not JSON: {e}"))?,
        )
    };
    let pairs = |list: &[String]| -> Result<Vec<(String, String)>, String> {
        list.iter()
            .map(|p| {
                p.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .ok_or_else(|| format!("`{p}` is not NAME=VALUE"))
            })
            .collect()
    };
    let source = Message {
        params: pairs(&args.params)?.into_iter().collect(),
        query: pairs(&args.query)?,
        headers: Vec::new(),
        body,
    };
    let side = if args.response {
        Side::Response
    } else {
        Side::Request
    };
    let target_params = pairs(&args.target_params)?.into_iter().collect();
    let out = translate::translate(from, to, op, side, &source, &target_params)
        .map_err(|e| e.to_string())?;
    for name in &out.missing {
        eprintln!(
            "interlingua translate: the path's `{{{name}}}` has no value; give it with --target-param {name}=VALUE"
        );
    }
    let mut result = json!({});
    if let (Some(method), Some(path)) = (&out.method, &out.path) {
        result["method"] = json!(method);
        result["path"] = if out.message.query.is_empty() {
            json!(path)
        } else {
            json!(format!("{path}?{}", render_query(&out.message.query)))
        };
    }
    if let Some(status) = out.status {
        result["status"] = json!(status);
    }
    if !out.message.headers.is_empty() {
        result["headers"] = json!(out
            .message
            .headers
            .iter()
            .map(|(k, v)| json!({k: v}))
            .collect::<Vec<_>>());
    }
    result["body"] = out.message.body.unwrap_or(Value::Null);
    if args.show_canonical {
        return Ok(json!({"canonical": out.canonical, "output": result}));
    }
    Ok(result)
}
