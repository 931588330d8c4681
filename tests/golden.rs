//! Golden translations: a rich fixture per dialect and operation (`tests/fixtures/golden/`),
//! translated to every dialect that has the operation, through the canonical document. The
//! snapshots (`tests/snapshots/`) are reviewed like code: a change to a mapping shows up here as a
//! diff of what clients and agents will see. Ids and times that are made fresh on every run are
//! redacted.
//!
//! To accept changed snapshots after reviewing them: `INSTA_UPDATE=always cargo test --test golden`.

use std::collections::BTreeMap;
use std::path::Path;

use interlingua::dialect::{self, Context, Message};
use interlingua::task::Operation;
use serde_json::{json, Value};

const DIALECTS: &[&str] = &["mip003", "nevermined"];

fn fixture(path: &Path) -> Message {
    let text = std::fs::read_to_string(path).unwrap();
    let v: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let strings = |key: &str| -> Vec<(String, String)> {
        v.get(key)
            .and_then(Value::as_object)
            .map(|o| {
                o.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                    .collect()
            })
            .unwrap_or_default()
    };
    Message {
        params: strings("params").into_iter().collect::<BTreeMap<_, _>>(),
        query: strings("query"),
        headers: Vec::new(),
        body: v.get("body").cloned(),
    }
}

#[test]
fn every_fixture_translates_to_every_dialect() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dialects = dialect::load(&root.join("mappings"), DIALECTS).unwrap();
    let mut fixtures: Vec<_> = std::fs::read_dir(root.join("tests/fixtures/golden"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    fixtures.sort();
    // What a route would set: the DID of the Nevermined agent interlingua calls.
    let vars = |name: &str| {
        let mut v = dialects[name].vars.clone();
        if name == "nevermined" {
            v.insert("agent_did".into(), json!("did:nv:golden"));
        }
        v
    };
    let mut translated = 0;
    for path in fixtures {
        let name = path.file_stem().unwrap().to_str().unwrap().to_string();
        let parts: Vec<&str> = name.split('.').collect();
        let [source, op, direction] = parts[..] else {
            panic!("fixture {name}: expected <dialect>.<operation>.<request|response>.json");
        };
        let op = Operation::from_name(op).unwrap_or_else(|| panic!("{name}: unknown operation"));
        let from = &dialects[source];
        let from_op = from
            .op(op)
            .unwrap_or_else(|| panic!("{name}: `{source}` has no {}", op.name()));
        let response = direction == "response";
        let rules = if response {
            &from_op.response
        } else {
            &from_op.request
        };
        let msg = fixture(&path);
        let from_vars = vars(source);
        let canonical = dialect::decode(
            rules,
            &msg,
            &Context {
                mapping: from,
                vars: &from_vars,
            },
        )
        .unwrap_or_else(|e| panic!("{name}: reading: {e}"));
        for &target in DIALECTS {
            let to = &dialects[target];
            let Some(to_op) = to.op(op) else { continue };
            let to_rules = if response {
                &to_op.response
            } else {
                &to_op.request
            };
            let to_vars = vars(target);
            let out = match dialect::encode(
                to_rules,
                &canonical,
                &Context {
                    mapping: to,
                    vars: &to_vars,
                },
            ) {
                Ok(m) => {
                    let mut v = json!({"body": m.body});
                    if !response {
                        v["method"] = json!(to_op.method.as_str());
                        v["path"] = json!(to_op
                            .path
                            .render(&m.params)
                            .unwrap_or_else(|e| format!("<{e}>")));
                        if !m.query.is_empty() {
                            v["query"] = json!(m.query);
                        }
                    }
                    v
                }
                // What a dialect cannot say from this document is part of the record too.
                Err(e) => json!({"error": e.to_string()}),
            };
            let snapshot = json!({"canonical": canonical, "output": out});
            insta::assert_json_snapshot!(format!("{name}__to__{target}"), snapshot, {
                ".output.body.identifier_from_purchaser" => "[random purchaser id]",
                ".output.body.payByTime" => "[now + pay_by]",
                ".output.body.submitResultTime" => "[now + submit_result_by]",
                ".output.body.unlockTime" => "[now + unlock_after]",
                ".output.body.externalDisputeUnlockTime" => "[now + dispute_unlock_after]",
            });
            translated += 1;
        }
    }
    assert!(translated >= 20, "only {translated} translations");
}
