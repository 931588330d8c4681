//! `interlingua demo`: the proxy on the default config, with the sample agents its routes use.

use std::process::ExitCode;

use super::serve::start;
use super::{report_problems, ConfigArg};
use crate::sample;

/// The upstream of the default config that the echo agent plays.
const ECHO_UPSTREAM: &str = "echo-agent";

pub fn run(arg: &ConfigArg) -> ExitCode {
    let config = match arg.load() {
        Ok(c) => c,
        Err(problems) => return report_problems(&problems),
    };
    let Some(echo) = config.upstreams.iter().find(|u| u.name == ECHO_UPSTREAM) else {
        eprintln!("interlingua demo: the config has no upstream named `{ECHO_UPSTREAM}` for the echo agent to play");
        return ExitCode::FAILURE;
    };
    let echo_addr = echo.authority();
    let server = match start(config) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let listener = match server
        .runtime()
        .block_on(tokio::net::TcpListener::bind(echo_addr.as_str()))
    {
        Ok(l) => l,
        Err(e) => {
            eprintln!("interlingua demo: cannot start the echo agent on {echo_addr}: {e}");
            return ExitCode::FAILURE;
        }
    };
    server.runtime().spawn(sample::echo::serve(listener));

    let proxy = server
        .proxy_addrs()
        .first()
        .map(ToString::to_string)
        .unwrap_or_default();
    let admin = server.admin_addr();
    println!(
        "\nThe echo agent listens on {echo_addr}; interlingua proxies /echo to it. Try:\n\n\
         \x20 curl -i http://{proxy}/echo/hello?lang=en\n\
         \x20 curl -i -X POST http://{proxy}/echo/tasks -H 'content-type: application/json' -d '{{\"query\":\"hi\"}}'\n\
         \x20 curl -i http://{proxy}/nowhere                   # 404 in interlingua's JSON error shape\n\
         \x20 curl -s http://{admin}/metrics | grep interlingua_\n\n\
         Stop with Ctrl-C.\n"
    );
    server.run_until_stopped();
    ExitCode::SUCCESS
}
