//! `interlingua demo`: the proxy on the default config, with the sample agents its routes use.

use std::process::ExitCode;

use super::serve::start;
use super::{report_problems, ConfigArg};
use crate::sample::{self, Options};

/// The upstreams of the default config that the sample agents play.
const ECHO: &str = "echo-agent";
const MIP003: &str = "mip003-agent";
const NEVERMINED: &str = "nevermined-agent";

pub fn run(arg: &ConfigArg) -> ExitCode {
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
    let server = match start(setup) {
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
    rt.spawn(sample::echo::serve(l1));
    rt.spawn(sample::mip003::serve(l2, options));
    rt.spawn(sample::nevermined::serve(l3, options));

    let p = server
        .proxy_addrs()
        .first()
        .map(ToString::to_string)
        .unwrap_or_default();
    let admin = server.admin_addr();
    let did = "did:nv:0000000000000000000000000000000000000000000000000000000000000001";
    println!(
        r#"
Sample agents: echo on {echo}, MIP-003 on {mip}, Nevermined on {nvm}. Jobs take {work}s.

Passthrough:
  curl -i 'http://{p}/echo/hello?lang=en'

A MIP-003 agent, as a Nevermined endpoint (run the second line until task_status is Completed):
  TASK=$(curl -s -X POST http://{p}/nevermined/api/v1/agents/{did}/tasks -H 'content-type: application/json' -d '{{"input_query":"hello world","name":"demo"}}' | grep -o '"task_id":"[^"]*"' | head -1 | cut -d'"' -f4); echo $TASK
  curl -s http://{p}/nevermined/api/v1/agents/{did}/tasks/$TASK

A Nevermined agent, as a MIP-003 service (run the second line until status is completed):
  JOB=$(curl -s -X POST http://{p}/masumi/start_job -H 'content-type: application/json' -d '{{"identifier_from_purchaser":"aabbccddeeff0011","input_data":{{"text":"hello world"}}}}' | grep -o '"job_id":"[^"]*"' | cut -d'"' -f4); echo $JOB
  curl -s "http://{p}/masumi/status?job_id=$JOB"
  curl -s http://{p}/masumi/input_schema
  curl -s -X POST http://{p}/masumi/start_job -H 'content-type: application/json' -d '{{"input_data":{{"mode":"ok"}}}}'   # 400, per field

With "mode":"input" in input_data (or input_additional) the agents ask for input once; "fail" fails.

Metrics:
  curl -s http://{admin}/metrics | grep interlingua_

Stop with Ctrl-C.
"#,
        work = options.work.as_secs()
    );
    server.run_until_stopped();
    ExitCode::SUCCESS
}
