//! `interlingua demo`: the proxy on the default config, with the sample agents its routes use, a
//! demo plan with a few credits, a token to call it with, and an admin token for the console.

use std::process::ExitCode;
use std::time::Duration;

use super::serve::start;
use super::{report_problems, ConfigArg};
use samples::Options;
use store::Account;

/// The upstreams of the default config that the sample agents play.
const ECHO: &str = "echo-agent";
const MIP003: &str = "mip003-agent";
const NEVERMINED: &str = "nevermined-agent";
/// The development key's secret, the admin token (both named by the default config), and who the
/// demo is for.
const DEV_SECRET_ENV: &str = "INTERLINGUA_DEV_SECRET";
const ADMIN_TOKEN_ENV: &str = "INTERLINGUA_ADMIN_TOKEN";
const PLAN: &str = "demo";
const SUBJECT: &str = "demo-user";
/// Credits the demo subject has at each start: enough for a few tasks, then 402.
const DEMO_CREDITS: i64 = 5;

pub fn run(arg: &ConfigArg) -> ExitCode {
    // Before any thread exists: the demo makes up a development secret and an admin token when
    // none is set.
    for name in [DEV_SECRET_ENV, ADMIN_TOKEN_ENV] {
        if std::env::var_os(name).is_none() {
            std::env::set_var(name, made_up_secret());
        }
    }
    let setup = match arg.load() {
        Ok(s) => s,
        Err(problems) => return report_problems(&problems),
    };
    let address = |name: &str| {
        setup
            .config
            .upstreams
            .iter()
            .find(|u| u.name == name)
            .map(|u| u.authority())
    };
    let (Some(echo), Some(mip), Some(nvm)) = (address(ECHO), address(MIP003), address(NEVERMINED))
    else {
        eprintln!(
            "interlingua demo: the config needs the upstreams `{ECHO}`, `{MIP003}` and `{NEVERMINED}` for the sample agents to play"
        );
        return ExitCode::FAILURE;
    };
    let token = match super::token::mint_token(
        &setup.config,
        None,
        SUBJECT,
        Some(PLAN),
        Duration::from_secs(24 * 3600),
    ) {
        Ok(t) => Some(t),
        Err(e) => {
            eprintln!("interlingua demo: no demo token ({e}); routes with auth will answer 401");
            None
        }
    };
    let (server, _log) = match start(setup) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let rt = server.runtime().clone();
    let bind = |addr: &str| rt.block_on(tokio::net::TcpListener::bind(addr));
    let (l1, l2, l3) = match (bind(&echo), bind(&mip), bind(&nvm)) {
        (Ok(a), Ok(b), Ok(c)) => (a, b, c),
        (a, b, c) => {
            for (name, r) in [(&echo, a.err()), (&mip, b.err()), (&nvm, c.err())] {
                if let Some(e) = r {
                    eprintln!("interlingua demo: cannot start a sample agent on {name}: {e}");
                }
            }
            return ExitCode::FAILURE;
        }
    };
    let options = Options::default();
    rt.spawn(samples::echo::serve(l1));
    rt.spawn(samples::mip003::serve(l2, options.clone()));
    rt.spawn(samples::nevermined::serve(l3, options.clone()));

    // Top the demo account up to a few credits, so that a run shows tasks being paid for and,
    // after a few, a 402.
    let store = server.state().engine.store.clone();
    let account = Account::new(PLAN, SUBJECT);
    let topped = rt.block_on(async {
        let b = store.balance(&account).await?;
        if b.available() < DEMO_CREDITS {
            store
                .grant(
                    &account,
                    DEMO_CREDITS - b.available(),
                    Some("interlingua demo"),
                )
                .await
        } else {
            Ok(b)
        }
    });
    let available = topped.map(|b| b.available()).unwrap_or_default();

    let p = server
        .proxy_addrs()
        .first()
        .map(ToString::to_string)
        .unwrap_or_default();
    let admin = server.admin_addr();
    let console = match server.state().live().config.admin.token.clone() {
        Some(admin_token) => format!(
            "The console: http://{admin}/console (log in with the admin token below, which also opens the\n\
             admin API: curl -s 'http://{admin}/credits/balance?plan={PLAN}&subject={SUBJECT}' -H \"Authorization: Bearer $ADMIN_TOKEN\")\n\n  \
             export ADMIN_TOKEN={admin_token}\n"
        ),
        None => "No console: the config's [admin] names no token_env.\n".to_string(),
    };
    let did = "did:nv:0000000000000000000000000000000000000000000000000000000000000001";
    let token = token.unwrap_or_else(|| "(no token)".to_string());
    println!(
        r#"
Sample agents: echo on {echo}, MIP-003 on {mip}, Nevermined on {nvm}. Jobs take {work}s.
Plan `{PLAN}`, subject `{SUBJECT}`: {available} credits. A task holds 1 credit when it starts and
costs 1 per step it completes: a MIP-003 job is one step (1 credit), a Nevermined task two (2).

  export TOKEN={token}

{console}
Passthrough (no auth):
  curl -i 'http://{p}/echo/hello?lang=en'

A MIP-003 agent, as a Nevermined endpoint (run the second line until task_status is Completed):
  TASK=$(curl -s -X POST http://{p}/nevermined/api/v1/agents/{did}/tasks -H "Authorization: Bearer $TOKEN" -H 'content-type: application/json' -d '{{"input_query":"hello world","name":"demo"}}' | grep -o '"task_id":"[^"]*"' | head -1 | cut -d'"' -f4); echo $TASK
  curl -s http://{p}/nevermined/api/v1/agents/{did}/tasks/$TASK -H "Authorization: Bearer $TOKEN"

A Nevermined agent, as a MIP-003 service (run the second line until status is completed):
  JOB=$(curl -s -X POST http://{p}/masumi/start_job -H "Authorization: Bearer $TOKEN" -H 'content-type: application/json' -d '{{"identifier_from_purchaser":"aabbccddeeff0011","input_data":{{"text":"hello world"}}}}' | grep -o '"job_id":"[^"]*"' | cut -d'"' -f4); echo $JOB
  curl -s "http://{p}/masumi/status?job_id=$JOB" -H "Authorization: Bearer $TOKEN"
  curl -s http://{p}/masumi/input_schema -H "Authorization: Bearer $TOKEN"
  curl -s -X POST http://{p}/masumi/start_job -H "Authorization: Bearer $TOKEN" -H 'content-type: application/json' -d '{{"identifier_from_purchaser":"aabbccddeeff0011","input_data":{{"mode":"ok"}}}}'   # 400, per field

The MIP-003 agent as an A2A agent (card: http://{p}/a2a/.well-known/agent-card.json), and as an OpenAI
chat endpoint:
  curl -s http://{p}/a2a/ -H "Authorization: Bearer $TOKEN" -H 'content-type: application/json' -d '{{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{{"message":{{"messageId":"m1","role":"ROLE_USER","parts":[{{"text":"hello world"}}]}}}}}}'
  curl -s http://{p}/openai/v1/chat/completions -H "Authorization: Bearer $TOKEN" -H 'content-type: application/json' -d '{{"model":"demo","messages":[{{"role":"user","content":"hello world"}}]}}'

The MIP-003 agent as an MCP server with one tool, `upper_case`. In an MCP client's config:
  {{"mcpServers": {{"interlingua": {{"url": "http://{p}/mcp", "headers": {{"Authorization": "Bearer $TOKEN"}}}}}}}}
or by hand (the call answers with server-sent events: progress, then the result):
  curl -s http://{p}/mcp -H "Authorization: Bearer $TOKEN" -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' -d '{{"jsonrpc":"2.0","id":1,"method":"tools/list"}}'
  curl -sN http://{p}/mcp -H "Authorization: Bearer $TOKEN" -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' -d '{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"upper_case","arguments":{{"text":"hello world"}},"_meta":{{"progressToken":2}}}}}}'

With "mode":"input" in input_data (or input_additional, or "mode:input" in the text) the agents ask
for input once; "fail" fails (and costs nothing).

Without a token, 401; once the credits left cannot cover a task's hold, 402 (each of these holds 1
and, done, costs 2):
  curl -i -X POST http://{p}/masumi/start_job -d '{{"input_data":{{"text":"x"}}}}'
  for i in 1 2 3 4 5 6; do curl -s -o /dev/null -w '%{{http_code}} ' -X POST http://{p}/masumi/start_job -H "Authorization: Bearer $TOKEN" -H 'content-type: application/json' -d '{{"identifier_from_purchaser":"aabbccddeeff0011","input_data":{{"text":"x"}}}}'; done; echo

Metrics:
  curl -s http://{admin}/metrics | grep interlingua_

Stop with Ctrl-C.
"#,
        work = options.work.as_secs()
    );
    server.run_until_stopped();
    ExitCode::SUCCESS
}

/// A secret nobody can guess (two random UUIDs' worth of hex: 244 random bits), for a demo run.
fn made_up_secret() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}
