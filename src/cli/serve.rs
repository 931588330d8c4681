//! `interlingua serve`: run the proxy until a signal stops it.

use std::process::ExitCode;

use tokio::signal::unix::{signal, SignalKind};

use super::{report_problems, ConfigArg};
use crate::config::Config;
use crate::server::Server;
use crate::telemetry;

pub fn run(arg: &ConfigArg) -> ExitCode {
    let config = match arg.load() {
        Ok(c) => c,
        Err(problems) => return report_problems(&problems),
    };
    match start(config) {
        Ok(server) => {
            run_until_signalled(server);
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

/// Sets up logging and starts the server, printing the ready line on stdout.
pub(super) fn start(config: Config) -> Result<Server, ExitCode> {
    if let Err(e) = telemetry::init(&config.log) {
        eprintln!("interlingua: {e}");
        return Err(ExitCode::FAILURE);
    }
    let server = Server::start(config).map_err(|e| {
        tracing::error!("{e}");
        eprintln!("interlingua: {e}");
        ExitCode::FAILURE
    })?;
    let proxies: Vec<String> = server
        .proxy_addrs()
        .iter()
        .map(ToString::to_string)
        .collect();
    // One line on stdout that scripts (and the tests) can wait for.
    println!(
        "interlingua ready: proxy {} admin {}",
        proxies.join(","),
        server.admin_addr()
    );
    Ok(server)
}

/// Serves until SIGTERM or SIGINT; a second signal stops waiting for in-flight requests.
pub(super) fn run_until_signalled(server: Server) {
    let handle = server.shutdown_handle();
    server.runtime().spawn(async move {
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            tracing::error!("cannot install signal handlers; stop the process with SIGKILL");
            return;
        };
        loop {
            let name = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            };
            tracing::info!(signal = name, "shutdown requested");
            handle.shutdown();
        }
    });
    server.run_until_stopped();
}
