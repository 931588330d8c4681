//! `interlingua serve`: run the proxy until a signal stops it.

use std::process::ExitCode;

use tokio::signal::unix::{signal, SignalKind};

use super::{report_problems, ConfigArg};
use crate::reload::Trigger;
use crate::server::Server;
use crate::setup::Setup;
use crate::telemetry::{self, LogFlush};

pub fn run(arg: &ConfigArg) -> ExitCode {
    let config = match arg.load() {
        Ok(c) => c,
        Err(problems) => return report_problems(&problems),
    };
    match start(config) {
        Ok((server, _log)) => {
            server.run_until_stopped();
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

/// Sets up logging, starts the server, installs the signal handlers and then prints the ready
/// line on stdout (so a signal sent after the line is always handled). Hold the [`LogFlush`]
/// until the server has stopped: dropping it writes out the last log lines.
pub(super) fn start(setup: Setup) -> Result<(Server, LogFlush), ExitCode> {
    let log = telemetry::init(&setup.config.log, setup.config.telemetry.as_ref()).map_err(|e| {
        eprintln!("interlingua: {e}");
        ExitCode::FAILURE
    })?;
    let server = Server::start(setup).map_err(|e| {
        tracing::error!("{e}");
        eprintln!("interlingua: {e}");
        ExitCode::FAILURE
    })?;
    stop_on_signals(&server).map_err(|e| {
        eprintln!("interlingua: cannot install signal handlers: {e}");
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
    Ok((server, log))
}

/// SIGTERM or SIGINT begins a graceful shutdown; a second one stops waiting for in-flight
/// requests. SIGHUP reloads the config (never stops the server, whatever the files say).
fn stop_on_signals(server: &Server) -> std::io::Result<()> {
    let _runtime = server.runtime().enter();
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    let reloader = server.reloader().clone();
    server.runtime().spawn(async move {
        while hup.recv().await.is_some() {
            tracing::info!(signal = "SIGHUP", "config reload requested");
            reloader.reload(Trigger::Signal).await;
        }
    });
    let handle = server.shutdown_handle();
    server.runtime().spawn(async move {
        loop {
            let name = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            };
            tracing::info!(signal = name, "shutdown requested");
            handle.shutdown();
        }
    });
    Ok(())
}
